package md

import (
	"fmt"
	"math"
	"slices"
)

// Constants of the Charm++ LeanMD (defs.h). The products are computed at
// run time, as the C++ computes them (one rounding per operation), not
// folded exactly by the Go compiler.
var (
	mantMass, mantA, mantB = 1.67, 1.1328, 2.23224

	HydrogenMass = mantMass * 1e-24  // g
	VdwA         = mantA * 1e-133    // (g m²/s²) m¹²
	VdwB         = mantB * 1e-76     // (g m²/s²) m⁶
	EnergyVar    = float64(1) * 1e-5 // the original's absolute energy tolerance
)

const (
	PtpCutOff   = 26 // Å: atoms interact when 1 < r² < 26²
	CellMargin  = 4
	KAwayX      = 2
	KAwayY      = 2
	KAwayZ      = 1
	NbrsX       = 2*KAwayX + 1
	NbrsY       = 2*KAwayY + 1
	NbrsZ       = 2*KAwayZ + 1
	NumNbrs     = NbrsX * NbrsY * NbrsZ // 75 neighbour offsets, the cell itself included
	CellSizeX   = (PtpCutOff + CellMargin) / KAwayX
	CellSizeY   = (PtpCutOff + CellMargin) / KAwayY
	CellSizeZ   = (PtpCutOff + CellMargin) / KAwayZ
	PerDim      = 10
	Gap         = 3
	PartsStart  = 100
	PartsEnd    = 250
	MigrateStep = 20
	Delta       = 1   // fs
	MaxVelocity = 0.1 // Å/fs

	cutoffSqd = PtpCutOff * PtpCutOff
)

// Vec3 is a position, velocity, acceleration or force.
type Vec3 struct{ X, Y, Z float64 }

// Particle is one atom.
type Particle struct {
	Mass          float64
	Pos, Acc, Vel Vec3
}

// Rand48 reproduces the C library's drand48/srand48: a 48-bit linear
// congruential generator whose output is its state divided by 2⁴⁸ (exact in
// a float64), so LeanMD's initial velocities match the C++ bit for bit.
type Rand48 struct{ x uint64 }

const mask48 = 1<<48 - 1

// NewRand48 is srand48(seed).
func NewRand48(seed int64) *Rand48 {
	return &Rand48{x: (uint64(uint32(seed))<<16 | 0x330E) & mask48}
}

// Float64 is drand48().
func (r *Rand48) Float64() float64 {
	r.x = (0x5DEECE66D*r.x + 0xB) & mask48
	return float64(r.x) / (1 << 48)
}

// numParticles is how many atoms cell id of numCells starts with: the
// original's deliberate ramp from 100 to 250 (integer division), or
// from atoms[0] to atoms[1] (Params.Atoms) where they are set.
func numParticles(id, numCells int, atoms [2]int) int {
	first, last := PartsStart, PartsEnd
	if atoms != [2]int{} {
		first, last = atoms[0], atoms[1]
	}
	return first + (id*(last-first))/numCells
}

// initialParticles places cell (x,y,z)'s atoms on the original's lattice and
// draws their velocities from drand48 seeded with the cell's id (atoms:
// see numParticles).
func initialParticles(x, y, z, dimX, dimY, dimZ int, atoms [2]int) []Particle {
	id := z + dimZ*(y+x*dimY)
	n := numParticles(id, dimX*dimY*dimZ, atoms)
	rng := NewRand48(int64(id))
	ps := make([]Particle, n)
	for i := range ps {
		p := &ps[i]
		p.Mass = HydrogenMass
		p.Pos.X = float64(Gap)/2 + float64(x*CellSizeX) + float64(((i*KAwayY*KAwayZ)/(PerDim*PerDim))*Gap)
		p.Pos.Y = float64(Gap)/2 + float64(y*CellSizeY) + float64((((i*KAwayZ)/PerDim)%(PerDim/KAwayY))*Gap)
		p.Pos.Z = float64(Gap)/2 + float64(z*CellSizeZ) + float64((i%(PerDim/KAwayZ))*Gap)
		// ((d - 0.5) * 0.2) * 0.1, in that order, as the C++ evaluates it
		p.Vel.X = (rng.Float64() - 0.5) * .2 * MaxVelocity
		p.Vel.Y = (rng.Float64() - 0.5) * .2 * MaxVelocity
		p.Vel.Z = (rng.Float64() - 0.5) * .2 * MaxVelocity
	}
	return ps
}

// kernel holds what the force loops need, hoisted out of them.
//
// The loops work in Å: with q = 1/r²_Å, the force over the separation is
// (12A·10¹³⁰·q⁶ − 6B·10⁷⁰·q³)·q and the energy A·10¹²⁰·q⁶ − B·10⁶⁰·q³ —
// the original's formula with its unit conversions (r² × 10⁻²⁰, × 10⁻¹⁰)
// folded into the constants, so a pair costs one division.
type kernel struct {
	a12, b6 float64 // force constants (sign included)
	ea, eb  float64 // energy constants
	doPE    bool    // accumulate potential energy this step
	origPE  bool    // the original's energy guard (never true: see README)
	lanes   int     // the vector kernel's width (0: the scalar kernel)
}

func newKernel(doEnergy, original bool) kernel {
	return newKernelSign(doEnergy, original, 1)
}

// newKernelSign makes a kernel whose forces are multiplied by sign: -1 only
// in the test that proves a broken kernel fails the energy check.
func newKernelSign(doEnergy, original bool, sign float64) kernel {
	return kernel{
		a12: sign * 12 * VdwA * 1e130, b6: sign * 6 * VdwB * 1e70,
		ea: VdwA * 1e120, eb: VdwB * 1e60,
		doPE: doEnergy, origPE: original, lanes: vectorLanes(),
	}
}

// kernelLanes is the width of the kernel --kernel names ("" or "auto":
// the widest this CPU runs), or an error that says why it cannot run.
func kernelLanes(name string) (int, error) {
	if name == "" || name == "auto" {
		return vectorLanes(), nil
	}
	var lanes int
	switch name {
	case "scalar":
	case "avx2":
		lanes = 4
	case "avx512":
		lanes = 8
	default:
		return 0, fmt.Errorf("%q is not a kernel (auto, avx512, avx2, scalar)", name)
	}
	if lanes > 0 && !slices.Contains(vectorWidths(), lanes) {
		return 0, fmt.Errorf("%s: this build or CPU has no such kernel (it runs %s)", name, kernelKind(vectorLanes()))
	}
	return lanes, nil
}

// energy of a pair with q = 1/r²_Å (the original's guard compares r² in m²
// with 2, which never holds: it adds no potential energy at all).
func (k *kernel) energy(q, q3 float64, rsqd float64) float64 {
	if k.origPE && rsqd*1e-20 <= 2 {
		return 0
	}
	return k.ea*q3*q3 - k.eb*q3
}

// force is one interacting pair's force (on the first atom; the second gets
// its opposite) and potential energy, for separation (dx,dy,dz) with
// r² = rsqd Å². It is small enough to be inlined into both loops.
func (k *kernel) force(dx, dy, dz, rsqd float64) (fx, fy, fz, e float64) {
	q := 1 / rsqd
	q3 := q * q * q
	s := (k.a12*q3 - k.b6) * q3 * q
	if k.doPE {
		e = k.energy(q, q3, rsqd)
	}
	return dx * s, dy * s, dz * s, e
}

// rowChunk is how many of a row's atoms the first pass of row tests before
// the second pass works on those within the cutoff: the indices fit on the
// stack.
const rowChunk = 256

// row adds the forces between one atom at p and the atoms at others (to
// fo, in the opposite direction) and returns the atom's total force and the
// row's potential energy. Both kernels are made of rows.
//
// It works in two passes over each chunk of others. The first tests every
// distance against the cutoff without a branch and keeps the indices of
// those within it; the second computes their forces. About a third of the
// tested pairs interact, a branch no predictor can learn: two passes took
// a 4×4×4 step from 77 to 71 ms on one core. The second pass visits the
// interacting atoms in the order of others, so every sum is added in the
// same order as a single loop would add it, to the bit. (This is the
// kernel of CPUs with neither AVX-512 nor AVX2: kernel_amd64.go.)
func (k *kernel) row(p Vec3, others, fo []Vec3) (fx, fy, fz, energy float64) {
	var near [rowChunk]int32
	fo = fo[:len(others)]
	for base := 0; base < len(others); base += rowChunk {
		chunk := others[base:min(base+rowChunk, len(others))]
		n := 0
		for j := range chunk {
			dx := p.X - chunk[j].X
			dy := p.Y - chunk[j].Y
			dz := p.Z - chunk[j].Z
			rsqd := dx*dx + dy*dy + dz*dz
			near[n] = int32(j)
			if rsqd < cutoffSqd {
				n++
			}
		}
		for _, j := range near[:n] {
			o := &chunk[j]
			dx := p.X - o.X
			dy := p.Y - o.Y
			dz := p.Z - o.Z
			rsqd := dx*dx + dy*dy + dz*dz
			if rsqd <= 1 {
				continue // closer than the original's floor: no force (rare)
			}
			gx, gy, gz, e := k.force(dx, dy, dz, rsqd)
			energy += e
			fx += gx
			fy += gy
			fz += gz
			f := &fo[base+int(j)]
			f.X -= gx
			f.Y -= gy
			f.Z -= gz
		}
	}
	return fx, fy, fz, energy
}

// selfForces adds the forces between every pair of atoms of one cell
// (j > i) to f and returns their potential energy.
func (k *kernel) selfForces(pos []Vec3, f []Vec3) float64 {
	if e, ok := k.selfForcesVec(pos, f); ok {
		return e
	}
	return k.selfForcesScalar(pos, f)
}

// selfForcesScalar is selfForces one pair at a time, on any machine.
func (k *kernel) selfForcesScalar(pos []Vec3, f []Vec3) float64 {
	var energy float64
	f = f[:len(pos)]
	for i := range pos {
		fx, fy, fz, e := k.row(pos[i], pos[i+1:], f[i+1:])
		energy += e
		f[i].X += fx
		f[i].Y += fy
		f[i].Z += fz
	}
	return energy
}

// pairForces adds the forces between the atoms of two cells to fa and fb
// and returns their potential energy. shift is added to b's positions: it
// puts the second cell at the periodic image the pair stands for.
func (k *kernel) pairForces(a, b []Vec3, shift Vec3, fa, fb []Vec3) float64 {
	if e, ok := k.pairForcesVec(a, b, shift, fa, fb); ok {
		return e
	}
	return k.pairForcesScalar(a, b, shift, fa, fb)
}

// pairForcesScalar is pairForces one pair at a time, on any machine.
func (k *kernel) pairForcesScalar(a, b []Vec3, shift Vec3, fa, fb []Vec3) float64 {
	var energy float64
	fa = fa[:len(a)]
	lo, hi := bounds(b)
	for i := range a {
		// separation = a − (b + shift) = (a − shift) − b
		p := Vec3{a[i].X - shift.X, a[i].Y - shift.Y, a[i].Z - shift.Z}
		// An atom farther than the cutoff from b's bounding box meets none
		// of b's atoms: skip its row (the result is the same to the bit).
		if gapSqd(p.X, lo.X, hi.X)+gapSqd(p.Y, lo.Y, hi.Y)+gapSqd(p.Z, lo.Z, hi.Z) >= cutoffSqd {
			continue
		}
		fx, fy, fz, e := k.row(p, b, fb)
		energy += e
		fa[i].X += fx
		fa[i].Y += fy
		fa[i].Z += fz
	}
	return energy
}

// bounds is the bounding box of a set of positions.
func bounds(p []Vec3) (lo, hi Vec3) {
	if len(p) == 0 {
		return Vec3{math.Inf(1), math.Inf(1), math.Inf(1)}, Vec3{math.Inf(-1), math.Inf(-1), math.Inf(-1)}
	}
	// comparisons, not min and max: those order NaNs and signed zeros,
	// which positions never are, and cost a tenth of a LeanMD step
	lo, hi = p[0], p[0]
	for _, v := range p[1:] {
		if v.X < lo.X {
			lo.X = v.X
		} else if v.X > hi.X {
			hi.X = v.X
		}
		if v.Y < lo.Y {
			lo.Y = v.Y
		} else if v.Y > hi.Y {
			hi.Y = v.Y
		}
		if v.Z < lo.Z {
			lo.Z = v.Z
		} else if v.Z > hi.Z {
			hi.Z = v.Z
		}
	}
	return lo, hi
}

// gapSqd is the squared distance from v to the interval [lo, hi].
func gapSqd(v, lo, hi float64) float64 {
	switch {
	case v < lo:
		return (lo - v) * (lo - v)
	case v > hi:
		return (v - hi) * (v - hi)
	}
	return 0
}

// imageShift is how far the second cell of a pair compute must be moved so
// that it sits at the compute's offset from the first: its unwrapped
// position minus the wrapped one, in Å. Each compute thereby interacts its
// first cell with exactly one periodic image of its neighbour.
func imageShift(x1, y1, z1, dx, dy, dz, dimX, dimY, dimZ int) Vec3 {
	s := func(c, d, dim, size int) float64 {
		u := c + d
		return float64((u - wrap(u, dim)) * size)
	}
	return Vec3{s(x1, dx, dimX, CellSizeX), s(y1, dy, dimY, CellSizeY), s(z1, dz, dimZ, CellSizeZ)}
}

// originalShift reproduces the C++ pair compute's wrap test: when the two
// cells' (wrapped) indices differ by more than 1 along an axis, the first
// cell's atoms are moved by a whole box towards the second. It is wrong for
// KAWAY = 2 and for boxes under 5 cells (a pair is counted against the
// wrong image, or twice); --original-physics restores it. Returned as the
// equivalent shift of the second cell.
func originalShift(c1, c2 [3]int32, dimX, dimY, dimZ int) Vec3 {
	s := func(a, b int32, dim, size int) float64 {
		if abs32(a-b) <= 1 {
			return 0
		}
		diff := float64(size * dim)
		if b < a {
			diff = -diff
		}
		return -diff // moving the first by +diff = moving the second by -diff
	}
	return Vec3{s(c1[0], c2[0], dimX, CellSizeX), s(c1[1], c2[1], dimY, CellSizeY), s(c1[2], c2[2], dimZ, CellSizeZ)}
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

func wrap(a, dim int) int { return ((a % dim) + dim) % dim }

// kineticEnergy is the original's ½mv² × 10¹⁰ ("milliJoules").
func kineticEnergy(p *Particle) float64 {
	v := p.Vel
	return 0.5 * p.Mass * (v.X*v.X + v.Y*v.Y + v.Z*v.Z) * 1e10
}

func clampVelocity(v float64) float64 {
	if math.Abs(v) > MaxVelocity {
		if v < 0 {
			return -MaxVelocity
		}
		return MaxVelocity
	}
	return v
}
