package loadbalance

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/charmgo/charmgo/pe"
)

// Synthetic describes a synthetic balancing instance, for timing
// strategies at sizes a machine cannot run.
type Synthetic struct {
	PEs, Objs int
	// Skew is the σ of the log-normal distribution object loads are drawn
	// from (0: all equal).
	Skew float64
	// Pattern is the communication: "none", "ring" (each object talks to
	// the next), "mesh" (a 2D grid of objects, four neighbours each) or
	// "random" (Degree random partners each).
	Pattern string
	Degree  int
	// Placement is where objects start: "block" (consecutive objects on
	// a PE) or "random".
	Placement string
	// Hot makes the first Hot PEs carry twice the load (their objects are
	// heavier), the imbalance a balancer must remove.
	Hot  int
	Seed uint64
}

// Generate builds the instance.
func Generate(g Synthetic) (*Stats, error) {
	if g.PEs < 1 || g.Objs < 0 {
		return nil, fmt.Errorf("synthetic stats: %d PEs and %d objects", g.PEs, g.Objs)
	}
	rng := rand.New(rand.NewPCG(g.Seed, 77))
	st := &Stats{Step: 1, PEs: make([]PEStats, g.PEs), Objs: make([]Obj, g.Objs)}
	for i := range st.Objs {
		var p int32
		switch g.Placement {
		case "", "block":
			p = int32(i * g.PEs / max(g.Objs, 1))
		case "random":
			p = int32(rng.IntN(g.PEs))
		default:
			return nil, fmt.Errorf("synthetic stats: placement %q (want block or random)", g.Placement)
		}
		load := 1e-3 * math.Exp(g.Skew*rng.NormFloat64())
		if int(p) < g.Hot {
			load *= 2
		}
		st.Objs[i] = Obj{Coll: 1, Index: pe.Idx(i), PE: p, Wall: load, Migratable: true, Bytes: 1024}
	}
	link := func(a, b int, bytes uint64) {
		if a != b {
			st.Comm = append(st.Comm, Comm{From: int32(a), To: int32(b), Msgs: 1 + bytes/4096, Bytes: bytes})
		}
	}
	n := g.Objs
	switch g.Pattern {
	case "", "none":
	case "ring":
		for i := range n {
			link(i, (i+1)%n, 8192)
		}
	case "mesh":
		side := int(math.Ceil(math.Sqrt(float64(n))))
		for i := range n {
			x, y := i%side, i/side
			if x+1 < side && i+1 < n {
				link(i, i+1, 8192)
			}
			if y+1 < side && i+side < n {
				link(i, i+side, 8192)
			}
		}
	case "random":
		d := max(g.Degree, 1)
		for i := range n {
			for range d {
				link(i, rng.IntN(n), uint64(1024+rng.IntN(16384)))
			}
		}
	default:
		return nil, fmt.Errorf("synthetic stats: pattern %q (want none, ring, mesh or random)", g.Pattern)
	}
	loads := st.Loads(nil)
	for p := range st.PEs {
		st.PEs[p].Busy = loads[p]
	}
	mx := 0.0
	for _, l := range loads {
		mx = max(mx, l)
	}
	for p := range st.PEs {
		st.PEs[p].Wall = mx
		st.PEs[p].Idle = mx - loads[p]
	}
	return st, nil
}
