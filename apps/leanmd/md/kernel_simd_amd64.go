//go:build goexperiment.simd && amd64

package md

import (
	"math/bits"
	"simd/archsimd"
)

// vecRows is how many atoms of the first list one pass of the vector
// kernels holds, one per lane of an AVX-512 register.
const vecRows = 8

// vecMaxAtoms bounds the lists the vector kernels take (their lanes are
// copied to the stack); a longer list goes through the scalar kernel.
const vecMaxAtoms = 1024

// far pads the lanes past a list's end: its distance to any atom squares
// to +Inf, never within the cutoff.
const far = 1e200

// kernelKind says which force kernel runs, for the run's summary.
func kernelKind() string {
	if archsimd.X86.AVX512() {
		return "AVX-512, eight atoms a pass"
	}
	return "scalar: this machine has no AVX-512"
}

// pairForcesVec is pairForces on eight atoms of a at once, one per lane,
// each lane running down b as the scalar row does; ok is false when the
// machine has no AVX-512 or a list is too long, and the caller runs the
// scalar kernel.
//
// It gives the scalar kernel's results to the bit. Every lane does the
// scalar operations in the scalar order (no fused multiply-add), a lane
// sums its atom's force and energy over b in b's order, and the forces on
// b's atoms are taken off one lane at a time in a's order: each sum is
// added in the order the scalar loops add it.
func (k *kernel) pairForcesVec(a, b []Vec3, shift Vec3, fa, fb []Vec3) (energy float64, ok bool) {
	if !archsimd.X86.AVX512() || len(a) > vecMaxAtoms {
		return 0, false
	}
	return k.passes(a, shift, b, fa, fb, false), true
}

// selfForcesVec is selfForces on eight atoms at once (see pairForcesVec):
// lane l of the pass starting at i0 meets the atoms after i0+l.
func (k *kernel) selfForcesVec(pos []Vec3, f []Vec3) (energy float64, ok bool) {
	if !archsimd.X86.AVX512() || len(pos) > vecMaxAtoms {
		return 0, false
	}
	return k.passes(pos, Vec3{}, pos, f, f, true), true
}

// passes runs a's atoms down b eight at a time, adding the forces to fa
// and fb, and returns the energy; self: a and b are one cell, fa and fb
// one array, and lane l meets b's atoms after its own.
func (k *kernel) passes(a []Vec3, shift Vec3, b []Vec3, fa, fb []Vec3, self bool) (energy float64) {
	var xs, ys, zs [vecMaxAtoms + vecRows]float64
	n := len(a)
	for i := range a {
		// separation = a − (b + shift) = (a − shift) − b, as the scalar kernel
		xs[i] = a[i].X - shift.X
		ys[i] = a[i].Y - shift.Y
		zs[i] = a[i].Z - shift.Z
	}
	for i := n; i < n+vecRows; i++ {
		xs[i], ys[i], zs[i] = far, far, far
	}
	fa, fb = fa[:n], fb[:len(b)]
	lo, hi := bounds(b)
	for i0 := 0; i0 < n; i0 += vecRows {
		px := archsimd.LoadFloat64x8Slice(xs[i0:])
		py := archsimd.LoadFloat64x8Slice(ys[i0:])
		pz := archsimd.LoadFloat64x8Slice(zs[i0:])
		var fx, fy, fz, e [vecRows]float64
		if self {
			k.rows8(px, py, pz, b, fb, i0+1, 0, &fx, &fy, &fz, &e)
		} else {
			// the scalar kernel skips an atom farther than the cutoff
			// from b's bounding box; eight such atoms skip the pass
			if gapSqd8(px, py, pz, lo, hi).Less(archsimd.BroadcastFloat64x8(cutoffSqd)).ToBits() == 0 {
				continue
			}
			k.rows8(px, py, pz, b, fb, 0, 0xff, &fx, &fy, &fz, &e)
		}
		for l := 0; l < vecRows && i0+l < n; l++ {
			energy += e[l]
			fa[i0+l].X += fx[l]
			fa[i0+l].Y += fy[l]
			fa[i0+l].Z += fz[l]
		}
	}
	return energy
}

// rows8 runs eight rows at once, the atoms at (px,py,pz), down others from
// index from: it takes the forces off fo[j] lane by lane and leaves each
// lane's sums in fx, fy, fz and e. In a self pass (full == 0) lane l meets
// only the atoms after from−1+l; in a pair pass (full == 0xff) every lane
// meets every atom.
//
// Skipping blocks of others whose bounding box is beyond the cutoff of the
// eight atoms' box (three in four tests find no lane within it) made the
// loop slower, 35 → 43–46 ms a 4×4×4 step: the nested loop cost more than
// the tests it saved.
func (k *kernel) rows8(px, py, pz archsimd.Float64x8, others, fo []Vec3, from int, full uint8,
	fx, fy, fz, e *[vecRows]float64) {
	one := archsimd.BroadcastFloat64x8(1)
	cut := archsimd.BroadcastFloat64x8(cutoffSqd)
	a12 := archsimd.BroadcastFloat64x8(k.a12)
	b6 := archsimd.BroadcastFloat64x8(k.b6)
	ea := archsimd.BroadcastFloat64x8(k.ea)
	eb := archsimd.BroadcastFloat64x8(k.eb)
	var sx, sy, sz, se archsimd.Float64x8
	var gx, gy, gz [vecRows]float64
	for j := from; j < len(others); j++ {
		o := &others[j]
		dx := px.Sub(archsimd.BroadcastFloat64x8(o.X))
		dy := py.Sub(archsimd.BroadcastFloat64x8(o.Y))
		dz := pz.Sub(archsimd.BroadcastFloat64x8(o.Z))
		rsqd := dx.Mul(dx).Add(dy.Mul(dy)).Add(dz.Mul(dz))
		in := rsqd.Less(cut).And(rsqd.Greater(one))
		lanes := in.ToBits()
		if full == 0 {
			// the first atoms after the pass's start are met only by
			// the lanes before them
			if d := j - from; d < vecRows-1 {
				lanes &= uint8(1)<<(d+1) - 1
			}
			in = archsimd.Mask64x8FromBits(lanes)
		}
		if lanes == 0 {
			continue
		}
		q := one.Div(rsqd)
		q3 := q.Mul(q).Mul(q)
		s := a12.Mul(q3).Sub(b6).Mul(q3).Mul(q)
		vx, vy, vz := dx.Mul(s), dy.Mul(s), dz.Mul(s)
		sx = sx.Add(vx.Masked(in))
		sy = sy.Add(vy.Masked(in))
		sz = sz.Add(vz.Masked(in))
		if k.doPE {
			se = se.Add(ea.Mul(q3).Mul(q3).Sub(eb.Mul(q3)).Masked(in))
		}
		vx.Store(&gx)
		vy.Store(&gy)
		vz.Store(&gz)
		// in registers: a chain through memory costs a store-to-load
		// forwarding per lane
		t := &fo[j]
		tx, ty, tz := t.X, t.Y, t.Z
		for lanes != 0 {
			l := bits.TrailingZeros8(lanes)
			lanes &= lanes - 1
			tx -= gx[l]
			ty -= gy[l]
			tz -= gz[l]
		}
		t.X, t.Y, t.Z = tx, ty, tz
	}
	sx.Store(fx)
	sy.Store(fy)
	sz.Store(fz)
	se.Store(e)
}

// gapSqd8 is gapSqd of eight atoms to the box [lo, hi], summed over the
// axes as the scalar kernel sums it.
func gapSqd8(px, py, pz archsimd.Float64x8, lo, hi Vec3) archsimd.Float64x8 {
	zero := archsimd.BroadcastFloat64x8(0)
	axis := func(p archsimd.Float64x8, lo, hi float64) archsimd.Float64x8 {
		below := archsimd.BroadcastFloat64x8(lo).Sub(p).Max(zero)
		above := p.Sub(archsimd.BroadcastFloat64x8(hi)).Max(zero)
		g := below.Add(above) // at most one of them is not zero
		return g.Mul(g)
	}
	return axis(px, lo.X, hi.X).Add(axis(py, lo.Y, hi.Y)).Add(axis(pz, lo.Z, hi.Z))
}
