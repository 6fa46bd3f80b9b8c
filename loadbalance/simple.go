package loadbalance

import "math/rand/v2"

type dummy struct{}

func (dummy) Name() string       { return "dummy" }
func (dummy) Plan(*Stats) []Move { return nil }

// rotate moves every migratable object to the next available PE.
type rotate struct{}

func (rotate) Name() string { return "rotate" }

func (rotate) Plan(st *Stats) []Move {
	avail := st.Available()
	if len(avail) < 2 && (len(avail) == len(st.PEs)) {
		return nil
	}
	next := make([]int32, len(st.PEs))
	for p := range next {
		// the first available PE after p, cyclically
		next[p] = avail[0]
		for _, a := range avail {
			if a > int32(p) {
				next[p] = a
				break
			}
		}
	}
	where := st.Placement()
	for i, o := range st.Objs {
		if o.Migratable {
			where[i] = next[o.PE]
		}
	}
	return st.MovesTo(where)
}

// random sends every migratable object to a PE drawn at random (seeded by
// the options' seed and the step, so a replay draws the same).
type random struct{ seed uint64 }

func (random) Name() string { return "random" }

func (r random) Plan(st *Stats) []Move {
	avail := st.Available()
	rng := rand.New(rand.NewPCG(r.seed, uint64(st.Step)))
	where := st.Placement()
	for i, o := range st.Objs {
		if o.Migratable {
			where[i] = avail[rng.IntN(len(avail))]
		}
	}
	return st.MovesTo(where)
}
