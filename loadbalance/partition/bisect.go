package partition

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// Options tune a partitioning.
type Options struct {
	// Tolerance is how far above its target weight a part may go: 0.05
	// lets a part of a bisection weigh 1.05 times its share. Default 0.03.
	Tolerance float64
	// Seed makes the randomized choices (matching order, seeds of the
	// initial bisection) repeatable.
	Seed uint64
	// Tries is how many initial bisections of the coarsest graph are
	// grown and refined, the best kept. Default 8.
	Tries int
}

func (o Options) withDefaults() Options {
	if o.Tolerance <= 0 {
		o.Tolerance = 0.03
	}
	if o.Tries <= 0 {
		o.Tries = 8
	}
	return o
}

// coarsestSize is where coarsening stops: small enough to bisect from
// several seeds cheaply, large enough to balance.
const coarsestSize = 60

// Bisect splits g in two. Part 0 gets about frac (0 < frac < 1) of the total
// vertex weight and neither part weighs more than 1+Tolerance times its
// share unless single vertices make that impossible; within that, the cut
// is made small. It returns each vertex's part (0 or 1).
func Bisect(g *Graph, frac float64, opt Options) []int32 {
	opt = opt.withDefaults()
	rng := rand.New(rand.NewPCG(opt.Seed, 0x9e3779b97f4a7c15))
	return bisect(g, frac, opt, rng)
}

func bisect(g *Graph, frac float64, opt Options, rng *rand.Rand) []int32 {
	n := g.N()
	side := make([]int32, n)
	if n == 0 {
		return side
	}
	if frac <= 0 || frac >= 1 {
		if frac <= 0 {
			for i := range side {
				side[i] = 1
			}
		}
		return side
	}
	b := newBalance(g.TotalWeight(), frac, opt.Tolerance)
	// coarsen
	graphs := []*Graph{g}
	var maps [][]int32
	maxVW := 1.5 * g.TotalWeight() / coarsestSize
	for cur := g; cur.N() > coarsestSize; {
		cg, cmap := coarsen(cur, rng, maxVW)
		if cg.N() > cur.N()*9/10 {
			break // matching no longer shrinks it
		}
		graphs = append(graphs, cg)
		maps = append(maps, cmap)
		cur = cg
	}
	// bisect the coarsest from several seeds
	cg := graphs[len(graphs)-1]
	r := newRefiner(cg.N())
	var best []int32
	bestState := state{}
	for t := 0; t < opt.Tries; t++ {
		s := grow(cg, b, rng.IntN(cg.N()), r)
		st := r.refine(cg, s, b)
		if best == nil || st.better(bestState) {
			best, bestState = s, st
		}
	}
	// project back up, refining at every level
	for l := len(graphs) - 2; l >= 0; l-- {
		fine := graphs[l]
		s := make([]int32, fine.N())
		for v, c := range maps[l] {
			s[v] = best[c]
		}
		r = newRefiner(fine.N())
		r.refine(fine, s, b)
		best = s
	}
	copy(side, best)
	return side
}

// balance is the weight each side should have and the most it may have.
type balance struct {
	target [2]float64
	max    [2]float64
}

func newBalance(total, frac, tol float64) balance {
	t0 := total * frac
	t1 := total - t0
	return balance{target: [2]float64{t0, t1}, max: [2]float64{t0 * (1 + tol), t1 * (1 + tol)}}
}

// state scores a bisection: a feasible one beats an infeasible one; then
// the smaller cut wins (or, both infeasible, the smaller overload).
type state struct {
	cut      float64
	overload float64 // how far the heavier side is over its maximum (0: feasible)
}

func (b balance) state(w [2]float64, cut float64) state {
	over := max(w[0]-b.max[0], w[1]-b.max[1], 0)
	return state{cut: cut, overload: over}
}

func (s state) better(o state) bool {
	const eps = 1e-12
	if s.overload > eps || o.overload > eps {
		return s.overload < o.overload-eps || (math.Abs(s.overload-o.overload) <= eps && s.cut < o.cut)
	}
	return s.cut < o.cut-eps*math.Max(1, math.Abs(o.cut))
}

// coarsen contracts a heavy-edge matching of g: visiting vertices in a
// random order, each unmatched vertex is matched with the unmatched
// neighbour it shares the heaviest edge with (as long as the pair weighs
// at most maxVW); vertices left without a partner that have no neighbour
// at all are paired with each other. It returns the coarse graph and the
// coarse vertex of each vertex of g.
func coarsen(g *Graph, rng *rand.Rand, maxVW float64) (*Graph, []int32) {
	n := g.N()
	match := make([]int32, n)
	for i := range match {
		match[i] = -1
	}
	order := rng.Perm(n)
	lone := int32(-1) // an unmatched vertex without neighbours, waiting for another
	for _, vi := range order {
		v := int32(vi)
		if match[v] >= 0 {
			continue
		}
		bestU, bestW := int32(-1), 0.0
		for i := g.XAdj[v]; i < g.XAdj[v+1]; i++ {
			u := g.Adj[i]
			if match[u] >= 0 || g.VWeight[u]+g.VWeight[v] > maxVW {
				continue
			}
			if w := g.EWeight[i]; w > bestW || (w == bestW && bestU >= 0 && g.VWeight[u] < g.VWeight[bestU]) {
				bestU, bestW = u, w
			}
		}
		switch {
		case bestU >= 0:
			match[v], match[bestU] = bestU, v
		case g.XAdj[v] == g.XAdj[v+1] && lone >= 0 && g.VWeight[lone]+g.VWeight[v] <= maxVW:
			match[v], match[lone] = lone, v
			lone = -1
		default:
			match[v] = v
			if g.XAdj[v] == g.XAdj[v+1] {
				lone = v
			}
		}
	}
	cmap := make([]int32, n)
	nc := int32(0)
	for v := range int32(n) {
		if u := match[v]; u >= v {
			cmap[v] = nc
			cmap[u] = nc
			nc++
		}
	}
	c := &Graph{VWeight: make([]float64, nc), XAdj: make([]int32, nc+1)}
	c.Adj = make([]int32, 0, len(g.Adj)/2)
	c.EWeight = make([]float64, 0, len(g.Adj)/2)
	where := make([]int32, nc)
	for i := range where {
		where[i] = -1
	}
	for v := range int32(n) {
		u := match[v]
		if u < v {
			continue
		}
		cv := cmap[v]
		start := int32(len(c.Adj))
		pair := [2]int32{v, u}
		for k, x := range pair {
			if k == 1 && u == v {
				break
			}
			c.VWeight[cv] += g.VWeight[x]
			for i := g.XAdj[x]; i < g.XAdj[x+1]; i++ {
				cu := cmap[g.Adj[i]]
				if cu == cv {
					continue
				}
				if p := where[cu]; p >= start {
					c.EWeight[p] += g.EWeight[i]
					continue
				}
				where[cu] = int32(len(c.Adj))
				c.Adj = append(c.Adj, cu)
				c.EWeight = append(c.EWeight, g.EWeight[i])
			}
		}
		c.XAdj[cv+1] = int32(len(c.Adj))
	}
	return c, cmap
}

// grow builds an initial bisection by growing part 0 from vertex seed,
// always taking the vertex that adds the least cut, until it has its
// share of the weight.
func grow(g *Graph, b balance, seed int, r *refiner) []int32 {
	n := g.N()
	side := make([]int32, n)
	for i := range side {
		side[i] = 1
	}
	h := &r.heaps[0]
	h.reset()
	r.heaps[1].reset()
	// key: weight of edges into part 0 minus edges out of it
	for v := range n {
		h.key[v] = -r.degree(g, v)
	}
	for v := range n {
		h.push(int32(v))
	}
	h.key[seed] = math.Inf(1)
	h.fix(int32(seed))
	w0 := 0.0
	for {
		v, ok := h.top()
		if !ok {
			break
		}
		vw := g.VWeight[v]
		if w0 > 0 && w0+vw > b.target[0] && (w0+vw-b.target[0]) > (b.target[0]-w0) {
			break // closer to the target without it
		}
		h.remove(v)
		side[v] = 0
		w0 += vw
		for i := g.XAdj[v]; i < g.XAdj[v+1]; i++ {
			if u := g.Adj[i]; side[u] == 1 && h.pos[u] >= 0 {
				h.key[u] += 2 * g.EWeight[i]
				h.fix(u)
			}
		}
		if w0 >= b.target[0] {
			break
		}
	}
	h.reset()
	return side
}

// refiner holds the scratch space of Fiduccia–Mattheyses refinement.
type refiner struct {
	heaps  [2]gainHeap
	key    []float64
	pos    []int32
	locked []bool
	moves  []int32
}

func newRefiner(n int) *refiner {
	r := &refiner{key: make([]float64, n), pos: make([]int32, n), locked: make([]bool, n)}
	for i := range r.pos {
		r.pos[i] = -1
	}
	for s := range r.heaps {
		r.heaps[s] = gainHeap{key: r.key, pos: r.pos}
	}
	return r
}

func (r *refiner) degree(g *Graph, v int) float64 {
	d := 0.0
	for i := g.XAdj[v]; i < g.XAdj[v+1]; i++ {
		d += g.EWeight[i]
	}
	return d
}

// split is the weight of v's edges to the other side and to its own.
func split(g *Graph, side []int32, v int32) (ext, in float64) {
	for i := g.XAdj[v]; i < g.XAdj[v+1]; i++ {
		if side[g.Adj[i]] != side[v] {
			ext += g.EWeight[i]
		} else {
			in += g.EWeight[i]
		}
	}
	return ext, in
}

// refine improves bisection side in place by passes of single-vertex
// moves (best gain first, each vertex at most once a pass), keeping the
// best prefix of each pass; it stops when a pass gains nothing.
func (r *refiner) refine(g *Graph, side []int32, b balance) state {
	n := g.N()
	var w [2]float64
	for v, s := range side {
		w[s] += g.VWeight[v]
	}
	ext := make([]float64, n) // weight of v's edges to the other side
	cut := 0.0
	for v := range n {
		e, in := split(g, side, int32(v))
		ext[v] = e
		r.key[v] = e - in
		cut += e
	}
	cut /= 2
	cur := b.state(w, cut)
	limit := max(50, n/50)
	for pass := 0; pass < 8; pass++ {
		scan := [2]int{} // where to look for a non-boundary vertex to move for balance
		r.heaps[0].reset()
		r.heaps[1].reset()
		clear(r.locked)
		for v := range n {
			if ext[v] > 0 {
				r.heaps[side[v]].push(int32(v))
			}
		}
		r.moves = r.moves[:0]
		best, bestAt := cur, 0
		for since := 0; since < limit; since++ {
			from := r.pickSide(g, side, w, b, &scan)
			if from < 0 {
				break
			}
			v, ok := r.heaps[from].top()
			if !ok {
				v = r.anyVertex(side, int32(from), &scan)
			} else {
				r.heaps[from].remove(v)
			}
			to := 1 - from
			gain := r.key[v]
			side[v] = int32(to)
			r.locked[v] = true
			w[from] -= g.VWeight[v]
			w[to] += g.VWeight[v]
			cut -= gain
			ext[v] -= gain // its former internal edges are now external
			r.key[v] = -gain
			for i := g.XAdj[v]; i < g.XAdj[v+1]; i++ {
				u, ew := g.Adj[i], g.EWeight[i]
				if side[u] == int32(to) {
					ext[u] -= ew
					r.key[u] -= 2 * ew
				} else {
					ext[u] += ew
					r.key[u] += 2 * ew
				}
				if r.locked[u] {
					continue
				}
				switch {
				case r.pos[u] >= 0:
					r.heaps[side[u]].fix(u)
				case ext[u] > 0:
					r.heaps[side[u]].push(u)
				}
			}
			r.moves = append(r.moves, v)
			if st := b.state(w, cut); st.better(best) {
				best, bestAt, since = st, len(r.moves), 0
			}
		}
		// undo the moves after the best prefix
		for i := len(r.moves) - 1; i >= bestAt; i-- {
			v := r.moves[i]
			from := side[v]
			side[v] = 1 - from
			w[from] -= g.VWeight[v]
			w[1-from] += g.VWeight[v]
			for j := g.XAdj[v]; j < g.XAdj[v+1]; j++ {
				u, ew := g.Adj[j], g.EWeight[j]
				if side[u] == side[v] {
					ext[u] -= ew
					r.key[u] -= 2 * ew
				} else {
					ext[u] += ew
					r.key[u] += 2 * ew
				}
			}
		}
		for _, v := range r.moves[bestAt:] {
			e, in := split(g, side, v)
			ext[v], r.key[v] = e, e-in
		}
		cut = best.cut
		improved := best.better(cur)
		cur = best
		if !improved {
			break
		}
	}
	r.heaps[0].reset()
	r.heaps[1].reset()
	return cur
}

// pickSide chooses the side to move a vertex from: the overloaded one if
// either is; else the one whose best move has the larger gain and keeps
// the other side within its maximum. -1: no move is allowed.
func (r *refiner) pickSide(g *Graph, side []int32, w [2]float64, b balance, scan *[2]int) int {
	over0, over1 := w[0]-b.max[0], w[1]-b.max[1]
	if over0 > 0 || over1 > 0 {
		from := 0
		if over1 > over0 {
			from = 1
		}
		if len(r.heaps[from].items) == 0 && r.peekAny(side, int32(from), scan) < 0 {
			return -1
		}
		return from
	}
	from, bestGain := -1, math.Inf(-1)
	for s := range 2 {
		v, ok := r.heaps[s].top()
		if !ok || w[1-s]+g.VWeight[v] > b.max[1-s] {
			continue
		}
		if r.key[v] > bestGain {
			from, bestGain = s, r.key[v]
		}
	}
	return from
}

// peekAny finds an unlocked vertex of side s (for moves that balance when
// no boundary vertex is left), or -1.
func (r *refiner) peekAny(side []int32, s int32, scan *[2]int) int32 {
	for i := scan[s]; i < len(side); i++ {
		if side[i] == s && !r.locked[i] && r.pos[i] < 0 {
			scan[s] = i
			return int32(i)
		}
	}
	scan[s] = len(side)
	return -1
}

func (r *refiner) anyVertex(side []int32, s int32, scan *[2]int) int32 {
	return r.peekAny(side, s, scan)
}

// levels is how many bisections deep a k-way partition goes.
func levels(k int) int { return bits.Len(uint(k - 1)) }
