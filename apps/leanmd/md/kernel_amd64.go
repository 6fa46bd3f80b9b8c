//go:build amd64 && !purego

package md

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// vecRows is how many atoms of the first list one pass of the vector
// kernel holds at most, one per lane of an AVX-512 register (AVX2: 4).
const vecRows = 8

// far pads the lanes past a list's end: its distance to any atom squares
// to +Inf, never within the cutoff.
const far = 1e200

// vecConsts is what rows8AVX512 reads, in this order (kernel_amd64.s).
type vecConsts struct {
	a12, b6, ea, eb float64
	one, cut        float64
	doPE            bool
}

// vecConsts4 is what rows4AVX2 reads: each constant four times (its
// lanes), in this order.
type vecConsts4 struct {
	a12, b6, ea, eb [4]float64
	one, cut        [4]float64
	doPE            bool
}

// rows8AVX512 runs eight rows at once, the atoms at lanes (x, y, z of
// each lane), down others[from:n]: it takes each pair's force off fo[j]
// and leaves each lane's force and energy sums in out (x, y, z, energy).
// In a self pass lane l meets only the atoms after from−1+l.
//
//go:noescape
func rows8AVX512(lanes *[3][vecRows]float64, others *Vec3, n int, fo *Vec3, from int, self bool, c *vecConsts, out *[4][vecRows]float64)

// rows4AVX2 is rows8AVX512 on four lanes (the first four of lanes and out).
//
//go:noescape
func rows4AVX2(lanes *[3][vecRows]float64, others *Vec3, n int, fo *Vec3, from int, self bool, c *vecConsts4, out *[4][vecRows]float64)

// vectorWidths are the vector kernels this CPU runs, widest first.
func vectorWidths() []int {
	var w []int
	if cpu.X86.HasAVX512F {
		w = append(w, 8)
	}
	if cpu.X86.HasAVX2 {
		w = append(w, 4)
	}
	return w
}

// vectorLanes is the widest vector kernel this CPU runs (0: none); every
// compute asks, so it allocates nothing.
func vectorLanes() int {
	switch {
	case cpu.X86.HasAVX512F:
		return 8
	case cpu.X86.HasAVX2:
		return 4
	}
	return 0
}

// kernelKind names the kernel of lanes lanes, for the run's summary.
func kernelKind(lanes int) string {
	switch lanes {
	case 8:
		return "AVX-512, eight atoms a pass"
	case 4:
		return "AVX2, four atoms a pass"
	}
	if vectorLanes() == 0 {
		return "scalar: this CPU has neither AVX-512 nor AVX2"
	}
	return "scalar"
}

// pairForcesVec is pairForces on eight (AVX-512) or four (AVX2) atoms of a
// at once, one per lane, each lane running down b as the scalar row does;
// ok is false when the CPU has neither or the step is one of
// --original-physics's energy steps (its energy guard is the scalar
// kernel's), and the caller runs the scalar kernel.
//
// It gives the scalar kernel's results to the bit. Every lane does the
// scalar operations in the scalar order (no fused multiply-add), a lane
// sums its atom's force and energy over b in b's order (merge masking
// leaves a lane's sum as it is where its pair is not within the cutoff),
// and the forces on b's atoms are taken off one lane at a time in a's
// order: each sum is added in the order the scalar loops add it.
func (k *kernel) pairForcesVec(a, b []Vec3, shift Vec3, fa, fb []Vec3) (energy float64, ok bool) {
	if !k.vectorCan() {
		return 0, false
	}
	return k.passes(a, shift, b, fa, fb, false), true
}

// selfForcesVec is selfForces on eight atoms at once (see pairForcesVec):
// lane l of the pass starting at i0 meets the atoms after i0+l.
func (k *kernel) selfForcesVec(pos []Vec3, f []Vec3) (energy float64, ok bool) {
	if !k.vectorCan() {
		return 0, false
	}
	return k.passes(pos, Vec3{}, pos, f, f, true), true
}

// vectorCan: the kernel has lanes (the CPU a vector kernel) and the
// step's energy is the usual one.
func (k *kernel) vectorCan() bool {
	return k.lanes > 0 && !(k.doPE && k.origPE)
}

// passes runs a's atoms down b k.lanes at a time, adding the forces to fa
// and fb, and returns the energy; self: a and b are one cell, fa and fb
// one array, and lane l meets b's atoms after its own.
func (k *kernel) passes(a []Vec3, shift Vec3, b []Vec3, fa, fb []Vec3, self bool) (energy float64) {
	n := len(a)
	fa, fb = fa[:n], fb[:len(b)]
	if n == 0 || len(b) == 0 {
		return 0
	}
	w := k.lanes
	c := vecConsts{a12: k.a12, b6: k.b6, ea: k.ea, eb: k.eb, one: 1, cut: cutoffSqd, doPE: k.doPE}
	var c4 vecConsts4
	if w == 4 {
		four := func(v float64) [4]float64 { return [4]float64{v, v, v, v} }
		c4 = vecConsts4{a12: four(c.a12), b6: four(c.b6), ea: four(c.ea), eb: four(c.eb), one: four(1), cut: four(cutoffSqd), doPE: c.doPE}
	}
	lo, hi := bounds(b)
	for i0 := 0; i0 < n; i0 += w {
		var lanes [3][vecRows]float64
		near := self // a self pass always runs
		for l := range w {
			if i0+l >= n {
				lanes[0][l], lanes[1][l], lanes[2][l] = far, far, far
				continue
			}
			// separation = a − (b + shift) = (a − shift) − b, as the scalar kernel
			p := Vec3{a[i0+l].X - shift.X, a[i0+l].Y - shift.Y, a[i0+l].Z - shift.Z}
			lanes[0][l], lanes[1][l], lanes[2][l] = p.X, p.Y, p.Z
			// the scalar kernel skips an atom farther than the cutoff
			// from b's bounding box; eight such atoms skip the pass
			near = near || gapSqd(p.X, lo.X, hi.X)+gapSqd(p.Y, lo.Y, hi.Y)+gapSqd(p.Z, lo.Z, hi.Z) < cutoffSqd
		}
		if !near {
			continue
		}
		from := 0
		if self {
			from = i0 + 1
		}
		var out [4][vecRows]float64
		if w == 8 {
			rows8AVX512(&lanes, unsafe.SliceData(b), len(b), unsafe.SliceData(fb), from, self, &c, &out)
		} else {
			rows4AVX2(&lanes, unsafe.SliceData(b), len(b), unsafe.SliceData(fb), from, self, &c4, &out)
		}
		for l := 0; l < w && i0+l < n; l++ {
			energy += out[3][l]
			fa[i0+l].X += out[0][l]
			fa[i0+l].Y += out[1][l]
			fa[i0+l].Z += out[2][l]
		}
	}
	return energy
}
