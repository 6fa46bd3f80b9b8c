package oa

import (
	"math"
	"slices"
)

// The initial states are plane waves, real in real space: state 0 the
// constant, then cos(g·r) and sin(g·r) for the g of the half sphere in
// order of |g|² (so c(−g) = conj c(g) and every overlap ΨᴴΨ is real),
// each plus a small random perturbation of the same symmetry chosen by
// the seed. They are close to orthonormal, and step 0 orthonormalises
// them (Newton–Schulz converges for ‖S − I‖ < 1).

// perturbation is the perturbation's size relative to a state's norm.
const perturbation = 0.1

// halfVector reports whether g is in the half sphere's half: the first
// non-zero of (gz, gy, gx) is positive.
func halfVector(gx, gy, gz int) bool {
	switch {
	case gz != 0:
		return gz > 0
	case gy != 0:
		return gy > 0
	}
	return gx > 0
}

// basisOrder lists the half-sphere vectors by |g|², then gz, gy, gx:
// state 2k+1 is cos(h_k·r), state 2k+2 sin(h_k·r).
func basisOrder(g *Geometry) [][3]int {
	var hs [][3]int
	for _, l := range g.Lines {
		for _, gz := range l.GZ {
			if halfVector(l.GX, l.GY, gz) {
				hs = append(hs, [3]int{l.GX, l.GY, gz})
			}
		}
	}
	key := func(h [3]int) [4]int { return [4]int{h[0]*h[0] + h[1]*h[1] + h[2]*h[2], h[2], h[1], h[0]} }
	slices.SortFunc(hs, func(a, b [3]int) int {
		ka, kb := key(a), key(b)
		return slices.Compare(ka[:], kb[:])
	})
	return hs
}

// splitmix is SplitMix64's mixing function: a point's random numbers
// depend on the seed, the state and the point alone, not on the chunking.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func unit(x uint64) float64 { return float64(x>>11)/(1<<53)*2 - 1 }

// initialCoef is c_s(g) of the initial state s at g, given the basis
// order and the sphere's point count.
func initialCoef(seed uint64, s int, basis [][3]int, points int, gx, gy, gz int) complex128 {
	var c complex128
	// the plane wave
	if s == 0 {
		if gx == 0 && gy == 0 && gz == 0 {
			c = 1
		}
	} else {
		h := basis[(s-1)/2]
		sin := (s-1)%2 == 1
		r := complex(1/math.Sqrt2, 0)
		switch {
		case gx == h[0] && gy == h[1] && gz == h[2]:
			if sin {
				r = complex(0, -1/math.Sqrt2)
			}
			c = r
		case gx == -h[0] && gy == -h[1] && gz == -h[2]:
			if sin {
				r = complex(0, 1/math.Sqrt2)
			}
			c = r
		}
	}
	// the perturbation, with c(−g) = conj c(g)
	conj := false
	if !halfVector(gx, gy, gz) && (gx != 0 || gy != 0 || gz != 0) {
		gx, gy, gz, conj = -gx, -gy, -gz, true
	}
	k := splitmix(seed ^ splitmix(uint64(s)<<40^uint64(gx+64)<<16^uint64(gy+64)<<8^uint64(gz+64)))
	re, im := unit(splitmix(k)), unit(splitmix(k^1))
	if gx == 0 && gy == 0 && gz == 0 {
		im = 0
	}
	if conj {
		im = -im
	}
	amp := perturbation / math.Sqrt(float64(points))
	return c + complex(amp*re, amp*im)
}
