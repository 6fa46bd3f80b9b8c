package loadbalance

import (
	"cmp"
	"slices"

	"github.com/charmgo/charmgo/loadbalance/partition"
)

// graph is the communication-aware strategy (Charm++'s MetisLB): the
// migratable objects and the bytes they exchange form a graph, which is
// partitioned into as many parts as there are available PEs, each part
// within the tolerance of the average load, cutting as few bytes as it
// can. Each part then goes to the PE that already holds most of its load
// (so that a placement that is already good moves little), a refine
// pass takes off what background load pushed over the threshold, and a
// last pass moves objects next to the objects they talk to most — the
// non-migratable ones too, which the partition does not see — where that
// keeps the PE within the threshold.
type graph struct {
	tol  float64
	seed uint64
}

func (graph) Name() string { return "graph" }

// messageCost is the weight a message adds to its bytes in the graph: a
// message costs its envelope and a scheduling round even when small.
const messageCost = 64

func (g graph) Plan(st *Stats) []Move {
	avail := st.Available()
	var verts []int32 // graph vertex -> object
	vert := make([]int32, len(st.Objs))
	total := 0.0
	for i, o := range st.Objs {
		vert[i] = -1
		if o.Migratable {
			vert[i] = int32(len(verts))
			verts = append(verts, int32(i))
			total += st.Load(i)
		}
	}
	if len(verts) == 0 {
		return nil
	}
	// A load-free object still counts a little, so that parts get
	// objects in proportion when nothing was measured.
	eps := total / float64(len(verts)) * 1e-3
	if eps == 0 {
		eps = 1
	}
	vw := make([]float64, len(verts))
	for v, i := range verts {
		vw[v] = st.Load(int(i)) + eps
	}
	var edges []partition.Edge
	for _, c := range st.Comm {
		a, b := vert[c.From], vert[c.To]
		if a < 0 || b < 0 || a == b {
			continue
		}
		edges = append(edges, partition.Edge{U: a, V: b, W: float64(c.Bytes) + messageCost*float64(c.Msgs)})
	}
	pg, err := partition.FromEdges(len(verts), vw, edges)
	if err != nil {
		return nil // stats were validated: cannot happen
	}
	part := partition.KWay(pg, len(avail), partition.Options{Tolerance: g.tol, Seed: g.seed ^ uint64(st.Step)})
	// parts to PEs by overlap with where the load is now
	overlap := map[[2]int32]float64{}
	for v, i := range verts {
		overlap[[2]int32{part[v], st.Objs[i].PE}] += vw[v]
	}
	type pair struct {
		part, pe int32
		w        float64
	}
	pairs := make([]pair, 0, len(overlap))
	for k, w := range overlap {
		pairs = append(pairs, pair{k[0], k[1], w})
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		if c := cmp.Compare(a.part, b.part); c != 0 {
			return c
		}
		return cmp.Compare(a.pe, b.pe)
	})
	peOf := make([]int32, len(avail))
	for i := range peOf {
		peOf[i] = -1
	}
	taken := make([]bool, len(st.PEs))
	for _, p := range pairs {
		if peOf[p.part] < 0 && !taken[p.pe] && !st.PEs[p.pe].Unavailable {
			peOf[p.part], taken[p.pe] = p.pe, true
		}
	}
	free := 0
	for k := range peOf {
		if peOf[k] >= 0 {
			continue
		}
		for taken[avail[free]] {
			free++
		}
		peOf[k], taken[avail[free]] = avail[free], true
	}
	where := st.Placement()
	for v, i := range verts {
		where[i] = peOf[part[v]]
	}
	where = refinePlace(st, where, g.tol)
	return st.MovesTo(commRefine(st, where, g.tol))
}

// commRefine moves each migratable object to the PE it exchanges the most
// bytes with (counting every object, movable or not), when that PE stays
// within the tolerance of the average load, or else swaps it with an
// object there that wants to come the other way; a few passes, until
// none moves anything.
func commRefine(st *Stats, where []int32, tol float64) []int32 {
	type nb struct {
		obj int32
		w   float64
	}
	adj := make([][]nb, len(st.Objs))
	for _, c := range st.Comm {
		w := float64(c.Bytes) + messageCost*float64(c.Msgs)
		adj[c.From] = append(adj[c.From], nb{c.To, w})
		adj[c.To] = append(adj[c.To], nb{c.From, w})
	}
	loads := st.Background()
	for i, p := range where {
		if st.Objs[i].Migratable {
			loads[p] += st.Load(i)
		}
	}
	avail := st.Available()
	total := 0.0
	for _, p := range avail {
		total += loads[p]
	}
	threshold := total / float64(len(avail)) * (1 + tol)
	aff := make([]float64, len(st.PEs))
	var touched []int32
	for range 4 {
		moved := false
		wants := map[[2]int32][]int32{} // from, to -> objects held back by the load
		for i, o := range st.Objs {
			if !o.Migratable || len(adj[i]) == 0 {
				continue
			}
			for _, n := range adj[i] {
				p := where[n.obj]
				if aff[p] == 0 {
					touched = append(touched, p)
				}
				aff[p] += n.w
			}
			cur, best := where[i], where[i]
			for _, p := range touched {
				if aff[p] > aff[best] || aff[p] == aff[best] && p < best {
					best = p
				}
			}
			l := st.Load(i)
			if best != cur && aff[best] > aff[cur] && !st.PEs[best].Unavailable {
				switch {
				case loads[best]+l <= threshold:
					where[i] = best
					loads[cur] -= l
					loads[best] += l
					moved = true
				default:
					back := wants[[2]int32{best, cur}]
					k := slices.IndexFunc(back, func(q int32) bool {
						lq := st.Load(int(q))
						return where[q] == best && loads[best]+l-lq <= threshold && loads[cur]-l+lq <= threshold
					})
					if k < 0 {
						wants[[2]int32{cur, best}] = append(wants[[2]int32{cur, best}], int32(i))
						break
					}
					q := back[k]
					wants[[2]int32{best, cur}] = slices.Delete(back, k, k+1)
					lq := st.Load(int(q))
					where[i], where[q] = best, cur
					loads[cur] += lq - l
					loads[best] += l - lq
					moved = true
				}
			}
			for _, p := range touched {
				aff[p] = 0
			}
			touched = touched[:0]
		}
		if !moved {
			break
		}
	}
	return where
}
