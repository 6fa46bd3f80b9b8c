package partition

import (
	"math"
	"math/rand/v2"
)

// KWay splits g into k parts of about equal weight (each at most about
// 1+Tolerance times the average) with a small total cut, by recursive
// bisection: a part meant for k PEs is bisected in the ratio ⌊k/2⌋ : ⌈k/2⌉
// and each half split again. It returns each vertex's part, 0..k-1.
func KWay(g *Graph, k int, opt Options) []int32 {
	opt = opt.withDefaults()
	part := make([]int32, g.N())
	if k <= 1 || g.N() == 0 {
		return part
	}
	// Each level may overload by its share of the tolerance, so the
	// product over the levels stays within it.
	lv := levels(k)
	levelOpt := opt
	levelOpt.Tolerance = math.Pow(1+opt.Tolerance, 1/float64(lv)) - 1
	rng := rand.New(rand.NewPCG(opt.Seed, 0x2545f4914f6cdd1d))
	verts := make([]int32, g.N())
	for i := range verts {
		verts[i] = int32(i)
	}
	kway(g, verts, k, 0, part, levelOpt, rng)
	return part
}

func kway(g *Graph, verts []int32, k int, base int32, part []int32, opt Options, rng *rand.Rand) {
	if k == 1 || len(verts) == 0 {
		for _, v := range verts {
			part[v] = base
		}
		return
	}
	k0 := k / 2
	side := bisect(g, float64(k0)/float64(k), opt, rng)
	var in [2][]int32
	for i, s := range side {
		in[s] = append(in[s], int32(i))
	}
	for s, ks := range [2]int{k0, k - k0} {
		orig := make([]int32, len(in[s]))
		for i, v := range in[s] {
			orig[i] = verts[v]
		}
		b := base
		if s == 1 {
			b += int32(k0)
		}
		if ks == 1 {
			for _, v := range orig {
				part[v] = b
			}
			continue
		}
		kway(g.subgraph(in[s]), orig, ks, b, part, opt, rng)
	}
}
