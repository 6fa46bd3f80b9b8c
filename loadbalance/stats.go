// Package loadbalance owns charmgo's load balancing: the statistics a
// balancing step is decided from (what every chare cost and whom it talked
// to, what every PE did besides), the strategies that turn them into a
// plan of migrations (greedy, refine, greedyrefine, graph, random, rotate,
// dummy, under their own and Charm++'s names), chains of strategies, the
// versioned stats file (+LBDump) that cmd/lbreplay replays offline, and a
// generator of synthetic instances.
//
// Everything here is a pure function of its input: no goroutines, clocks
// or I/O besides the explicit file readers and writers. The manager
// records the statistics on every PE, gathers them over its spanning tree
// and calls a Strategy on PE 0; this package knows nothing of PEs and
// messages. The graph partitioner the communication-aware strategy uses
// lives in loadbalance/partition, where fault tolerance's team
// partitioning imports it too.
package loadbalance

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

// Stats is what one balancing step sees: every PE and every chare of the
// collections being balanced, measured since the previous step.
type Stats struct {
	// Step numbers the balancing steps of a run, from 1.
	Step int
	// CPUTime says that the objects' loads are their CPU times (set when
	// the run measured them); otherwise they are wall-clock times.
	CPUTime bool
	PEs     []PEStats // by PE number
	Objs    []Obj
	Comm    []Comm // aggregated per ordered pair of objects
}

// PEStats is one PE's time since the previous step, in seconds.
type PEStats struct {
	// Wall is the length of the period the figures cover.
	Wall float64
	// Busy is the wall time spent in entry methods of measured objects.
	Busy float64
	// Idle is the time the PE waited for messages.
	Idle float64
	// Background is the runtime's own work outside entry methods
	// (routing, reductions, the fault-tolerance hook) and entry methods
	// of unmeasured chares: load that stays on the PE whatever moves.
	Background float64
	// Unavailable PEs take no objects; the ones they hold move away.
	Unavailable bool
}

// Obj is one chare: an array element, or a group member or other chare
// that never moves but whose load counts on its PE.
type Obj struct {
	Coll  uint32
	Index pe.Index
	PE    int32
	// Wall and CPU are the times its entry methods took since the
	// previous step, in seconds (CPU is 0 when not measured).
	Wall, CPU  float64
	Migratable bool
	// Bytes is the size of its packed state when known (0: unknown).
	Bytes int
}

// Comm is what object From sent object To since the previous step
// (point-to-point messages, multicasts it issued that reached To,
// reduction contributions delivered to To).
type Comm struct {
	From, To    int32 // indices into Stats.Objs
	Msgs, Bytes uint64
}

// Move migrates object Obj (an index into Stats.Objs) from PE From to PE To.
type Move struct {
	Obj      int32
	From, To int32
}

// Load is object i's load: its CPU time when measured, else its wall time.
func (s *Stats) Load(i int) float64 {
	if s.CPUTime {
		return s.Objs[i].CPU
	}
	return s.Objs[i].Wall
}

// Background is each PE's load that no plan moves: its background time
// and its non-migratable objects.
func (s *Stats) Background() []float64 {
	bg := make([]float64, len(s.PEs))
	for p, ps := range s.PEs {
		bg[p] = ps.Background
	}
	for i, o := range s.Objs {
		if !o.Migratable && o.PE >= 0 && int(o.PE) < len(bg) {
			bg[o.PE] += s.Load(i)
		}
	}
	return bg
}

// Loads is each PE's load once the moves are made (nil moves: now).
func (s *Stats) Loads(moves []Move) []float64 {
	where := s.Placement()
	for _, m := range moves {
		where[m.Obj] = m.To
	}
	return s.LoadsOf(where)
}

// LoadsOf is each PE's load with the objects placed as where says.
func (s *Stats) LoadsOf(where []int32) []float64 {
	l := make([]float64, len(s.PEs))
	for p, ps := range s.PEs {
		l[p] = ps.Background
	}
	for i, p := range where {
		if p >= 0 && int(p) < len(l) {
			l[p] += s.Load(i)
		}
	}
	return l
}

// Placement is every object's PE now.
func (s *Stats) Placement() []int32 {
	w := make([]int32, len(s.Objs))
	for i, o := range s.Objs {
		w[i] = o.PE
	}
	return w
}

// MaxAvg is the largest load over the mean load of the available PEs (1:
// perfectly balanced; 0 when there is no load at all).
func (s *Stats) MaxAvg(loads []float64) float64 {
	sum, mx, n := 0.0, 0.0, 0
	for p, l := range loads {
		if s.PEs[p].Unavailable {
			continue
		}
		sum += l
		mx = max(mx, l)
		n++
	}
	if sum <= 0 || n == 0 {
		return 0
	}
	return mx / (sum / float64(n))
}

// Available lists the PEs that may receive objects.
func (s *Stats) Available() []int32 {
	var out []int32
	for p, ps := range s.PEs {
		if !ps.Unavailable {
			out = append(out, int32(p))
		}
	}
	return out
}

// Validate checks that the stats are self-consistent: objects on existing
// PEs, communication between existing objects, finite non-negative times,
// at least one available PE.
func (s *Stats) Validate() error {
	if len(s.PEs) == 0 {
		return fmt.Errorf("stats of step %d: no PEs", s.Step)
	}
	if len(s.Available()) == 0 {
		return fmt.Errorf("stats of step %d: no PE is available", s.Step)
	}
	bad := func(x float64) bool { return x < 0 || math.IsNaN(x) || math.IsInf(x, 0) }
	for p, ps := range s.PEs {
		if bad(ps.Wall) || bad(ps.Busy) || bad(ps.Idle) || bad(ps.Background) {
			return fmt.Errorf("stats of step %d: PE %d has a negative or non-finite time", s.Step, p)
		}
	}
	for i, o := range s.Objs {
		if o.PE < 0 || int(o.PE) >= len(s.PEs) {
			return fmt.Errorf("stats of step %d: object %d (%d%v) on PE %d of %d", s.Step, i, o.Coll, o.Index, o.PE, len(s.PEs))
		}
		if bad(o.Wall) || bad(o.CPU) || o.Bytes < 0 {
			return fmt.Errorf("stats of step %d: object %d (%d%v) has a negative or non-finite load", s.Step, i, o.Coll, o.Index)
		}
		if o.Index.Dims > pe.MaxDims {
			return fmt.Errorf("stats of step %d: object %d has a %d-dimensional index", s.Step, i, o.Index.Dims)
		}
	}
	for i, c := range s.Comm {
		if c.From < 0 || c.To < 0 || int(c.From) >= len(s.Objs) || int(c.To) >= len(s.Objs) {
			return fmt.Errorf("stats of step %d: communication record %d between objects %d and %d of %d", s.Step, i, c.From, c.To, len(s.Objs))
		}
	}
	return nil
}

// CheckPlan says what is wrong with a plan for these stats, if anything:
// every move names an existing, migratable object once, from the PE it is
// on to another PE that exists and is available.
func (s *Stats) CheckPlan(moves []Move) error {
	seen := make(map[int32]bool, len(moves))
	for _, m := range moves {
		if m.Obj < 0 || int(m.Obj) >= len(s.Objs) {
			return fmt.Errorf("plan moves object %d of %d", m.Obj, len(s.Objs))
		}
		o := s.Objs[m.Obj]
		switch {
		case seen[m.Obj]:
			return fmt.Errorf("plan moves %d%v twice", o.Coll, o.Index)
		case !o.Migratable:
			return fmt.Errorf("plan moves %d%v, which is not migratable", o.Coll, o.Index)
		case m.From != o.PE:
			return fmt.Errorf("plan moves %d%v from PE %d, but it is on PE %d", o.Coll, o.Index, m.From, o.PE)
		case m.To < 0 || int(m.To) >= len(s.PEs):
			return fmt.Errorf("plan moves %d%v to PE %d; the run has PEs 0..%d", o.Coll, o.Index, m.To, len(s.PEs)-1)
		case s.PEs[m.To].Unavailable:
			return fmt.Errorf("plan moves %d%v to unavailable PE %d", o.Coll, o.Index, m.To)
		case m.To == m.From:
			return fmt.Errorf("plan moves %d%v to the PE it is on", o.Coll, o.Index)
		}
		seen[m.Obj] = true
	}
	return nil
}

// MovesTo turns a full placement into the moves that reach it (only
// migratable objects whose PE changes), in object order.
func (s *Stats) MovesTo(where []int32) []Move {
	var out []Move
	for i, p := range where {
		if o := s.Objs[i]; o.Migratable && p != o.PE {
			out = append(out, Move{Obj: int32(i), From: o.PE, To: p})
		}
	}
	return out
}

// migratableByLoad lists the migratable objects heaviest first (ties by
// object order, so plans do not depend on sort stability).
func (s *Stats) migratableByLoad() []int32 {
	var objs []int32
	for i, o := range s.Objs {
		if o.Migratable {
			objs = append(objs, int32(i))
		}
	}
	slices.SortFunc(objs, func(a, b int32) int {
		if c := cmp.Compare(s.Load(int(b)), s.Load(int(a))); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return objs
}

// Summary condenses a balancing step for reports: PE load max/avg before
// and as predicted after, what moves.
type Summary struct {
	Step                      int
	Strategy                  string
	Objs, Moved               int
	MovedBytes                int64 // packed state of the moved objects, where known
	MaxAvgBefore, MaxAvgAfter float64
	MaxBefore, MaxAfter       float64 // seconds
	Avg                       float64
	CrossBytesBefore          uint64 // bytes sent between objects on different PEs
	CrossBytesAfter           uint64
}

// Summarize describes what moves do to these stats.
func (s *Stats) Summarize(strategy string, moves []Move) Summary {
	before, after := s.Loads(nil), s.Loads(moves)
	sm := Summary{Step: s.Step, Strategy: strategy, Moved: len(moves),
		MaxAvgBefore: s.MaxAvg(before), MaxAvgAfter: s.MaxAvg(after)}
	for _, o := range s.Objs {
		if o.Migratable {
			sm.Objs++
		}
	}
	for _, p := range s.Available() {
		sm.MaxBefore = max(sm.MaxBefore, before[p])
		sm.MaxAfter = max(sm.MaxAfter, after[p])
		sm.Avg += after[p]
	}
	if n := len(s.Available()); n > 0 {
		sm.Avg /= float64(n)
	}
	for _, m := range moves {
		sm.MovedBytes += int64(s.Objs[m.Obj].Bytes)
	}
	where := s.Placement()
	sm.CrossBytesBefore = s.crossBytes(where)
	for _, m := range moves {
		where[m.Obj] = m.To
	}
	sm.CrossBytesAfter = s.crossBytes(where)
	return sm
}

func (s *Stats) crossBytes(where []int32) uint64 {
	var b uint64
	for _, c := range s.Comm {
		if where[c.From] != where[c.To] {
			b += c.Bytes
		}
	}
	return b
}

// String is the report line of a step: the figures +LBDebug and lbreplay
// print.
func (sm Summary) String() string {
	return fmt.Sprintf("LB step %d (%s): PE load max/avg %.3f -> %.3f predicted (max %.3g s, avg %.3g s); moved %d of %d chares, %d bytes; cross-PE bytes %d -> %d",
		sm.Step, sm.Strategy, sm.MaxAvgBefore, sm.MaxAvgAfter, sm.MaxAfter, sm.Avg, sm.Moved, sm.Objs, sm.MovedBytes, sm.CrossBytesBefore, sm.CrossBytesAfter)
}
