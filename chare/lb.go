package chare

// Load balancing, the chare layer's side: the +balancer chain with its
// reports (+LBDebug), dumps (+LBDump) and run totals, as the manager's
// Balancer on PE 0.

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/charmgo/charmgo/loadbalance"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

// LBStats is what load balancing did in a run (reported by the process
// that holds PE 0).
type LBStats struct {
	Strategies string `json:"strategies"` // the chain, as given
	Steps      int    `json:"steps"`
	Moved      int    `json:"moved"`       // chares migrated
	MovedBytes int64  `json:"moved_bytes"` // their packed state
	PlanNanos  int64  `json:"plan_ns"`     // time in strategies
	// SectionsMoved counts sections set up again to follow their members.
	SectionsMoved int   `json:"sections_moved"`
	StepNanos     int64 `json:"step_ns"` // time from the last report to the last migration
	// First and Last are the first and last steps' PE load max/avg:
	// measured before, predicted after.
	FirstBefore float64 `json:"first_before"`
	FirstAfter  float64 `json:"first_after"`
	LastBefore  float64 `json:"last_before"`
	LastAfter   float64 `json:"last_after"`
	// Measured is the max/avg measured over the period after the last
	// step that was followed by another (0: none was).
	Measured float64 `json:"measured"`
}

// String is the run summary's line.
func (s LBStats) String() string {
	if s.Steps == 0 {
		return fmt.Sprintf("load balancing (%s): no step", s.Strategies)
	}
	out := fmt.Sprintf("load balancing (%s): %d steps, %d chares moved (%d bytes), %d sections set up again, strategy %.1f ms, steps %.1f ms in all; PE load max/avg %.3f -> %.3f at the first step, %.3f -> %.3f at the last",
		s.Strategies, s.Steps, s.Moved, s.MovedBytes, s.SectionsMoved, float64(s.PlanNanos)/1e6, float64(s.StepNanos)/1e6, s.FirstBefore, s.FirstAfter, s.LastBefore, s.LastAfter)
	if s.Measured > 0 {
		out += fmt.Sprintf(" (measured after it: %.3f)", s.Measured)
	}
	return out
}

// balancer is the manager's Balancer for a run: it runs on PE 0 only.
type balancer struct {
	names    string
	chain    loadbalance.Chain
	opt      loadbalance.Options
	debug    int
	out      io.Writer
	dump     *loadbalance.DumpWriter
	dumpFile *os.File
	dumpErr  error
	stats    LBStats
	planned  map[string]int // collection -> its last step planned
	// collection -> its last step reported: a PE 0 that rolled back plans
	// and finishes its steps since the checkpoint again (their plans, as
	// carried out, are the first ones under message logging), and they
	// count, print and go to the dump once
	stepped map[string]int
}

// balancerNames splits a +balancer value (several flags are joined with
// commas) into strategy names; none gives no balancer.
func balancerNames(v string) []string {
	var out []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" || strings.EqualFold(n, "none") || strings.EqualFold(n, "NullLB") {
			continue
		}
		out = append(out, n)
	}
	return out
}

// newBalancer builds the run's balancer (nil when none was asked for).
func newBalancer(cfg Config, out io.Writer) (*balancer, error) {
	names := balancerNames(cfg.Balancer)
	if len(names) == 0 {
		if cfg.LBDump != "" || cfg.LBDebug > 0 || cfg.LBPeriod > 0 {
			return nil, fmt.Errorf("+LBDump, +LBDebug and +LBPeriod need a load balancer (+balancer NAME)")
		}
		return nil, nil
	}
	opt := loadbalance.Options{Tolerance: cfg.LBTolerance, Seed: cfg.Seed}
	chain, err := loadbalance.NewChain(names, opt, cfg.Strategies...)
	if err != nil {
		return nil, fmt.Errorf("flag +balancer: %w", err)
	}
	b := &balancer{names: strings.Join(names, ","), chain: chain, opt: opt, debug: cfg.LBDebug, out: out, planned: map[string]int{}, stepped: map[string]int{}}
	b.stats.Strategies = b.names
	return b, nil
}

// openDump creates the +LBDump file (in the process that holds PE 0).
func (b *balancer) openDump(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("flag +LBDump: %w", err)
	}
	b.dumpFile, b.dump = f, loadbalance.NewDumpWriter(f)
	return nil
}

func (b *balancer) close() error {
	if b == nil || b.dumpFile == nil {
		return nil
	}
	err := b.dumpFile.Close()
	if b.dumpErr != nil {
		return b.dumpErr
	}
	if err != nil {
		return fmt.Errorf("+LBDump %s: %w", b.dumpFile.Name(), err)
	}
	return nil
}

func (b *balancer) Plan(coll string, st *loadbalance.Stats) ([]loadbalance.Move, string, error) {
	before := st.MaxAvg(st.Loads(nil))
	again := st.Step <= b.planned[coll] // a re-execution's (see stepped)
	if prev, ok := b.planned[coll]; ok && !again {
		// what the previous step's plan gave, measured over the period
		// since
		b.stats.Measured = before
		if b.debug > 0 {
			fmt.Fprintf(b.out, "[LB] step %d (%s): PE load max/avg measured over the next period %.3f\n", prev, coll, before)
		}
	}
	b.planned[coll] = max(b.planned[coll], st.Step)
	s := b.chain.At(st.Step)
	opt := b.opt
	moves, err := loadbalance.Run(s, st)
	if err != nil {
		return nil, s.Name(), err
	}
	if b.dump != nil && b.dumpErr == nil && !again {
		if err := b.dump.Write(&loadbalance.Record{Coll: coll, Stats: *st, Strategy: s.Name(), Options: opt, Moves: moves}); err != nil {
			b.dumpErr = fmt.Errorf("+LBDump %s: %w", b.dumpFile.Name(), err)
		}
	}
	return moves, s.Name(), nil
}

func (b *balancer) Stepped(r manager.LBStepReport) {
	sm := r.Summary
	if sm.Step <= b.stepped[r.Coll] {
		return // reported before PE 0 rolled back
	}
	b.stepped[r.Coll] = sm.Step
	s := &b.stats
	s.Steps++
	s.Moved += sm.Moved
	s.MovedBytes += r.MovedBytes
	s.PlanNanos += r.PlanNanos
	s.StepNanos += r.StepNanos
	s.SectionsMoved += r.SectionsMoved
	if s.Steps == 1 {
		s.FirstBefore, s.FirstAfter = sm.MaxAvgBefore, sm.MaxAvgAfter
	}
	s.LastBefore, s.LastAfter = sm.MaxAvgBefore, sm.MaxAvgAfter
	if b.debug > 0 {
		fmt.Fprintf(b.out, "[LB] step %d (%s, %s): PE load max/avg %.3f before, %.3f predicted after (max %.3g s, avg %.3g s); moved %d of %d chares, %d bytes; %d sections set up again; strategy %.2f ms, step %.2f ms\n",
			sm.Step, r.Coll, r.Strategy, sm.MaxAvgBefore, sm.MaxAvgAfter, sm.MaxAfter, sm.Avg, sm.Moved, sm.Objs, r.MovedBytes, r.SectionsMoved,
			float64(r.PlanNanos)/1e6, float64(r.StepNanos)/1e6)
		if b.debug > 1 {
			fmt.Fprintf(b.out, "[LB] step %d (%s): bytes between chares on different PEs %d before, %d after\n", sm.Step, r.Coll, sm.CrossBytesBefore, sm.CrossBytesAfter)
		}
	}
}

var _ manager.Balancer = (*balancer)(nil)

// tickBalancer hands PE 0 a tick every period (+LBPeriod) until stop is
// closed or the run ends.
func tickBalancer(node *pe.Node, period time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-node.Done():
			return
		case <-t.C:
			node.Inject(0, pe.Envelope{Type: manager.LBTickType(), Kind: pe.KindSystem, Payload: &manager.LBTickMsg{}})
		}
	}
}
