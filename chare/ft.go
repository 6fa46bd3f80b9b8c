package chare

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

// Kill is an injected failure: PE fails (fail-stop) when the program
// reports step Step (AtStep), or After the run started (Step < 0), or —
// with Checkpoint > 0, for tests — while checkpoint number Checkpoint is
// being taken (its snapshots are on their way to the buddies).
type Kill struct {
	PE         int
	Step       int
	After      time.Duration
	Checkpoint uint64
}

func (k Kill) String() string {
	if k.Checkpoint > 0 {
		return fmt.Sprintf("PE %d during checkpoint %d", k.PE, k.Checkpoint)
	}
	if k.Step >= 0 {
		return fmt.Sprintf("PE %d at step %d", k.PE, k.Step)
	}
	return fmt.Sprintf("PE %d after %v", k.PE, k.After)
}

// ParseKill reads --kill's value: PE@STEP.
func ParseKill(v string) (Kill, error) {
	p, s, ok := strings.Cut(v, "@")
	if !ok {
		return Kill{}, fmt.Errorf("flag --kill: %q: want PE@STEP", v)
	}
	pe, err1 := strconv.Atoi(p)
	step, err2 := strconv.Atoi(s)
	if err1 != nil || err2 != nil || pe < 0 || step < 0 {
		return Kill{}, fmt.Errorf("flag --kill: %q: want PE@STEP with whole numbers", v)
	}
	return Kill{PE: pe, Step: step}, nil
}

// ParseKillFile reads a kill file: one failure per line, "PE SECONDS"
// (Charm++'s +killFile format: seconds after the start, fractions allowed)
// or "PE @STEP"; blank lines and lines starting with # are skipped. Errors
// name the line.
func ParseKillFile(r io.Reader) ([]Kill, error) {
	var out []Kill
	sc := bufio.NewScanner(r)
	for ln := 1; sc.Scan(); ln++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("kill file line %d: %q: want \"PE SECONDS\" or \"PE @STEP\"", ln, sc.Text())
		}
		p, err := strconv.Atoi(f[0])
		if err != nil || p < 0 {
			return nil, fmt.Errorf("kill file line %d: PE %q is not a PE number", ln, f[0])
		}
		if s, ok := strings.CutPrefix(f[1], "@"); ok {
			step, err := strconv.Atoi(s)
			if err != nil || step < 0 {
				return nil, fmt.Errorf("kill file line %d: step %q is not a whole number", ln, f[1])
			}
			out = append(out, Kill{PE: p, Step: step})
			continue
		}
		sec, err := strconv.ParseFloat(f[1], 64)
		if err != nil || sec < 0 || sec > 1e9 {
			return nil, fmt.Errorf("kill file line %d: time %q is not a number of seconds", ln, f[1])
		}
		out = append(out, Kill{PE: p, Step: -1, After: time.Duration(sec * float64(time.Second))})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kill file: %w", err)
	}
	return out, nil
}

// PEFailure ends a run attempt: a PE failed (fail-stop).
type PEFailure struct {
	PE   int
	Kill Kill
}

func (f *PEFailure) Error() string { return fmt.Sprintf("PE %d failed (injected: %v)", f.PE, f.Kill) }

// FTStats is what fault tolerance did in a run.
type FTStats struct {
	Protocol      string
	Failures      int
	PEsRolledBack int           // summed over failures
	Recovery      time.Duration // summed: from a failure to the program resuming
	// CaughtUp is summed over failures: from a failure until the run is
	// back where it was — the failed PE caught up (scmel, camel), or every
	// PE back at the step that failed (none; failures at a step only).
	CaughtUp time.Duration
	Restored []uint64 // the checkpoint epoch each failure rolled back to (0: the start)
	// Log is the message-logging protocol's statistics, summed over PEs
	// (and over the incarnations a rollback discarded).
	Log ftlayer.Stats
}

// CheckpointPeriod is the checkpoint cadence the run was asked for
// (--ckpt-period): every steps steps, or at the first step boundary after
// every since the last checkpoint; both zero when not asked for. A program
// that checkpoints follows it instead of its own.
func CheckpointPeriod(ctx *Ctx) (steps int, every time.Duration) {
	rs := hostOf(ctx.m).run
	return rs.ckptSteps, rs.ckptEvery
}

// AtStep tells the runtime that the program begins step (on any one
// chare, once per step): failures injected at that step happen now.
func AtStep(ctx *Ctx, step int) { hostOf(ctx.m).run.atStep(step) }

// runState is what outlives a run's attempts: injected failures (each
// happens once) and fault-tolerance statistics.
type runState struct {
	mu      sync.Mutex
	kills   []Kill
	fired   []bool
	node    *pe.Node
	start   time.Time
	failed  time.Time
	ft      FTStats
	notices io.Writer
	// the checkpoint cadence asked for (CheckpointPeriod)
	ckptSteps int
	ckptEvery time.Duration

	// Local recovery (scmel, camel): a failed PE comes back alone.
	local      bool
	mk         func(p *pe.PE) *manager.Manager
	initial    [][]pe.Envelope // what each PE started this attempt with
	inc        []uint32        // each PE's incarnation
	window     bool            // a checkpoint is being taken
	recovering int             // the PE recovering alone, or -1
	waiting    []int           // failures put off until it caught up
	recovered  []int32         // PEs that recovered alone
	lostOps    manager.Stats   // what failed incarnations did
	// a global rollback has caught up when the step that failed begins
	// again
	awaitStep int
	failedAt  time.Time
}

func newRunState(cfg Config) *runState {
	rs := &runState{kills: cfg.Kills, fired: make([]bool, len(cfg.Kills)), start: time.Now(), notices: cfg.Notices, recovering: -1, awaitStep: -1,
		ckptSteps: cfg.CkptSteps, ckptEvery: cfg.CkptEvery}
	rs.ft.Protocol = cfg.FT
	if rs.ft.Protocol == "" {
		rs.ft.Protocol = "none"
	}
	rs.local = rs.ft.Protocol != "none" && cfg.PEs > 1
	if rs.notices == nil {
		rs.notices = io.Discard
	}
	return rs
}

// begin starts an attempt on node, whose PEs start with initial:
// time-based failures are scheduled against the run's start.
func (rs *runState) begin(node *pe.Node, initial [][]pe.Envelope) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.node, rs.initial = node, initial
	rs.inc = make([]uint32, node.NumPEs()) // the protocol starts afresh
	rs.window, rs.recovering, rs.waiting, rs.recovered = false, -1, nil, nil
	for i, k := range rs.kills {
		if k.Step >= 0 || k.Checkpoint > 0 || rs.fired[i] {
			continue
		}
		i, k := i, k
		wait := time.Until(rs.start.Add(k.After))
		go func() {
			select {
			case <-time.After(wait):
				rs.fire(node, i)
			case <-node.Done():
			}
		}()
	}
}

func (rs *runState) atStep(step int) {
	rs.mu.Lock()
	if rs.awaitStep == step && !rs.failedAt.IsZero() {
		rs.ft.CaughtUp += time.Since(rs.failedAt)
		rs.awaitStep, rs.failedAt = -1, time.Time{}
	}
	rs.mu.Unlock()
	rs.fireWhere(func(k Kill) bool { return k.Checkpoint == 0 && k.Step == step })
}

func (rs *runState) fireWhere(due func(Kill) bool) {
	rs.mu.Lock()
	node := rs.node
	var now []int
	for i, k := range rs.kills {
		if due(k) && !rs.fired[i] {
			now = append(now, i)
		}
	}
	rs.mu.Unlock()
	for _, i := range now {
		rs.fire(node, i)
	}
}

// fire makes kill i happen. Under scmel and camel the PE fails alone and
// recovers by replay while the others go on — unless snapshots are being
// taken (then, as under none, every PE rolls back to the last committed
// checkpoint: the protocols recover one PE from a complete checkpoint). A
// kill "during checkpoint E" strikes as E begins, once the run is
// quiescent and before any snapshot: the coordinator then puts the
// checkpoint off until the PE caught up, and only that PE rolls back.
// One PE recovers at a time: a failure due while one does is put off until
// it caught up.
func (rs *runState) fire(node *pe.Node, i int) {
	rs.mu.Lock()
	if rs.fired[i] || rs.node != node {
		rs.mu.Unlock()
		return
	}
	k := rs.kills[i]
	if rs.local && !rs.window {
		if rs.recovering >= 0 {
			if !slices.Contains(rs.waiting, i) {
				rs.waiting = append(rs.waiting, i)
			}
			rs.mu.Unlock()
			return
		}
		if !node.FailPE(k.PE) {
			rs.mu.Unlock()
			return // the run is ending
		}
		rs.fired[i] = true
		rs.failed = time.Now()
		rs.recovering = k.PE
		rs.inc[k.PE]++
		inc, initial, recovered := rs.inc[k.PE], rs.initial[k.PE], slices.Clone(rs.recovered)
		rs.ft.Failures++
		rs.ft.PEsRolledBack++
		fmt.Fprintf(rs.notices, "charmgo: %v; it recovers alone (%s): the others replay its messages\n", &PEFailure{PE: k.PE, Kill: k}, rs.ft.Protocol)
		rs.mu.Unlock()
		go rs.replace(node, k.PE, inc, initial, recovered)
		return
	}
	rs.fired[i] = true
	rs.failed = time.Now()
	if k.Step >= 0 && k.Checkpoint == 0 {
		rs.awaitStep, rs.failedAt = k.Step, rs.failed
	}
	rs.mu.Unlock()
	node.Fail(&PEFailure{PE: k.PE, Kill: k})
}

// replace starts PE y's new incarnation and tells the others.
func (rs *runState) replace(node *pe.Node, y int, inc uint32, initial []pe.Envelope, recovered []int32) {
	old := node.Replace(y, func(p *pe.PE) pe.Handler {
		m := rs.mk(p)
		m.Revive(inc, initial)
		return m
	})
	if old == nil {
		return
	}
	// the summary counts what the lost incarnation logged (nothing of it
	// is read for the recovery) and did
	lost := old.(*manager.Manager)
	rs.logStats(lost.FT().Stats())
	rs.mu.Lock()
	rs.lostOps.Add(lost.Stats)
	rs.mu.Unlock()
	for p := 0; p < node.NumPEs(); p++ {
		if p != y {
			node.InjectControl(p, pe.Envelope{Type: manager.PEFailedType(), Kind: pe.KindSystem,
				Payload: &manager.PEFailedMsg{PE: int32(y), Inc: inc, Recovered: recovered}})
		}
	}
}

func (h *host) CheckpointStarting(m *manager.Manager, epoch uint64) bool {
	rs := h.run
	// before the snapshots: under scmel and camel, a PE failing now
	// recovers alone, and the checkpoint waits for it
	rs.fireWhere(func(k Kill) bool { return k.Checkpoint == epoch })
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.recovering >= 0 {
		return false
	}
	rs.window = true
	return true
}

func (h *host) CheckpointCommitted(m *manager.Manager, epoch uint64) {
	h.run.mu.Lock()
	h.run.window = false
	h.run.mu.Unlock()
}

func (h *host) LocalRestored(m *manager.Manager, epoch uint64) {
	rs := h.run
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ft.Restored = append(rs.ft.Restored, epoch)
	fmt.Fprintf(rs.notices, "charmgo: PE %d restored checkpoint %d and replays\n", m.Me(), epoch)
}

func (h *host) LocalRecovered(m *manager.Manager) {
	rs := h.run
	rs.mu.Lock()
	rs.ft.Recovery += time.Since(rs.failed)
	rs.ft.CaughtUp += time.Since(rs.failed)
	rs.failed = time.Time{}
	rs.recovering = -1
	if !slices.Contains(rs.recovered, int32(m.Me())) {
		rs.recovered = append(rs.recovered, int32(m.Me()))
	}
	waiting, node := rs.waiting, rs.node
	rs.waiting = nil
	fmt.Fprintf(rs.notices, "charmgo: PE %d caught up\n", m.Me())
	rs.mu.Unlock()
	for _, i := range waiting {
		rs.fire(node, i)
	}
}

func (rs *runState) rolledBack(f *PEFailure, snaps [][]byte) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ft.Failures++
	rs.ft.PEsRolledBack += rs.node.NumPEs()
	epoch := uint64(0)
	if snaps != nil {
		if s, err := manager.DecodeSnapshot(snaps[0]); err == nil {
			epoch = s.Epoch
		}
	}
	rs.ft.Restored = append(rs.ft.Restored, epoch)
	if snaps == nil { // back to the start: recovered once it restarted
		rs.ft.Recovery += time.Since(rs.failed)
	}
	fmt.Fprintf(rs.notices, "charmgo: %v; every PE rolls back to checkpoint %d\n", f, epoch)
}

// restored: the program resumes from the checkpoint it rolled back to.
func (rs *runState) restored() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.failed.IsZero() {
		rs.ft.Recovery += time.Since(rs.failed)
		rs.failed = time.Time{}
	}
}

func (rs *runState) logStats(s ftlayer.Stats) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ft.Log.Add(s)
}

func (rs *runState) stats() FTStats {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.ft
}

func (h *host) Restored(m *manager.Manager) { h.run.restored() }

// rollback gathers, after PE dead failed, every PE's snapshot of the last
// checkpoint from the memory of the PEs still alive — the dead PE's from
// its buddy — or nil when no checkpoint was taken yet. A checkpoint the
// coordinator decided is used even where its commit had not arrived (the
// tentative copies hold it).
func rollback(node *pe.Node, dead int) ([][]byte, error) {
	n := node.NumPEs()
	cks := make([]*ftlayer.Checkpointer, n)
	var epoch uint64
	for i := range cks {
		if i == dead {
			continue // its memory is gone
		}
		cks[i] = manager.Of(node.PE(i)).Checkpointer()
		epoch = max(epoch, cks[i].LastCommitted())
	}
	if epoch == 0 {
		return nil, nil
	}
	out := make([][]byte, n)
	for p := range out {
		holder := cks[p]
		if p == dead {
			holder = cks[ftlayer.Buddy(int32(p), n)]
		}
		s := holder.Committed(int32(p))
		if s == nil || s.Epoch != epoch {
			s = holder.Tentative(int32(p))
		}
		if s == nil || s.Epoch != epoch {
			return nil, fmt.Errorf("PE %d failed and checkpoint %d of PE %d survives nowhere", dead, epoch, p)
		}
		out[p] = s.App
	}
	return out, nil
}
