package oa

import (
	"math"
	"unsafe"

	"gonum.org/v1/gonum/dsp/fourier"
)

// The box is a cube of side 2π, so reciprocal vectors g are integer
// triples and |g|² a whole number; the grid has N points a side, spacing
// 2π/N. A state's plane-wave coefficients c(g) live on the sphere
// |g|² < (N/4)² (the wave-function cutoff); the density then holds
// |g| < N/2 and V·ψ components up to 3N/4, whose aliases on the grid fall
// outside the sphere: every FFT below gives what the exact convolution
// gives, up to rounding (the four-times density cutoff of plane-wave
// codes). The serial reference of the tests relies on that.
const boxSide = 2 * math.Pi

// volume is Ω, the box's volume.
const volume = boxSide * boxSide * boxSide

// Line is one z-line of the g-space sphere: the points (GX, GY, gz) for
// every gz in GZ (ascending).
type Line struct {
	GX, GY int
	GZ     []int
}

// Geometry is the sphere's lines, how they are dealt to the g-space
// chunks, and the grid. It is computed from (N, chunks) alone, the same
// in every chare and process.
type Geometry struct {
	N      int
	Lines  []Line
	chunks [][2]int // per chunk: its lines [lo, hi)
	points []int    // per chunk: its points
}

// NewGeometry lists the sphere's lines in (GX, GY) order and deals them
// to chunks in contiguous runs of equal line counts: the central lines
// are the long ones, so the chunks hold unequal numbers of points, as
// OpenAtom's g-space planes do before its balancing.
func NewGeometry(n, chunks int) Geometry {
	g := Geometry{N: n}
	r2 := (n / 4) * (n / 4)
	for gx := -n / 2; gx < n/2; gx++ {
		for gy := -n / 2; gy < n/2; gy++ {
			var zs []int
			for gz := -n / 2; gz < n/2; gz++ {
				if gx*gx+gy*gy+gz*gz < r2 {
					zs = append(zs, gz)
				}
			}
			if len(zs) > 0 {
				g.Lines = append(g.Lines, Line{GX: gx, GY: gy, GZ: zs})
			}
		}
	}
	for p := 0; p < chunks; p++ {
		lo, hi := p*len(g.Lines)/chunks, (p+1)*len(g.Lines)/chunks
		pts := 0
		for _, l := range g.Lines[lo:hi] {
			pts += len(l.GZ)
		}
		g.chunks = append(g.chunks, [2]int{lo, hi})
		g.points = append(g.points, pts)
	}
	return g
}

// ChunkLines are the lines of chunk p.
func (g *Geometry) ChunkLines(p int) []Line { return g.Lines[g.chunks[p][0]:g.chunks[p][1]] }

// ChunkPoints is how many coefficients chunk p holds.
func (g *Geometry) ChunkPoints(p int) int { return g.points[p] }

// Points is the number of coefficients of a state.
func (g *Geometry) Points() int {
	n := 0
	for _, p := range g.points {
		n += p
	}
	return n
}

// wrap maps a signed frequency to its grid index.
func wrap(k, n int) int { return ((k % n) + n) % n }

// signed maps a grid index to its signed frequency (−N/2 .. N/2−1).
func signed(i, n int) int {
	if i >= n/2 {
		return i - n
	}
	return i
}

// cplx views interleaved (re, im) float64s as complex numbers: messages
// and chare state hold []float64 (msgpack has no complex type).
func cplx(f []float64) []complex128 {
	if len(f) < 2 {
		return nil
	}
	return unsafe.Slice((*complex128)(unsafe.Pointer(unsafe.SliceData(f))), len(f)/2)
}

// ffts are one chare's FFT plans (gonum's, made once per chare and size;
// not part of its state).
type ffts struct {
	n    int
	plan *fourier.CmplxFFT
	line []complex128
	// broken perturbs every transform (a wrong twiddle), for the tests
	// that the invariants catch it.
	broken bool
}

func newFFTs(n int, broken bool) *ffts {
	return &ffts{n: n, plan: fourier.NewCmplxFFT(n), line: make([]complex128, n), broken: broken}
}

// forward transforms v in place: Σ_j v_j e^{−2πi jk/N}.
func (f *ffts) forward(v []complex128) {
	f.plan.Coefficients(v, v)
	if f.broken && len(v) > 1 {
		v[1] *= complex(math.Cos(1e-3), math.Sin(1e-3))
	}
}

// inverse transforms v in place: Σ_k v_k e^{+2πi jk/N} (unnormalized).
func (f *ffts) inverse(v []complex128) {
	f.plan.Sequence(v, v)
	if f.broken && len(v) > 1 {
		v[1] *= complex(1.001*math.Cos(1e-3), -1.001*math.Sin(1e-3))
	}
}

// plane2D transforms an N×N plane (row-major, a[x*N+y]) in place along
// both axes, forward or inverse.
func (f *ffts) plane2D(a []complex128, fwd bool) {
	n := f.n
	do := f.inverse
	if fwd {
		do = f.forward
	}
	for x := 0; x < n; x++ {
		do(a[x*n : (x+1)*n])
	}
	col := f.line
	for y := 0; y < n; y++ {
		for x := 0; x < n; x++ {
			col[x] = a[x*n+y]
		}
		do(col)
		for x := 0; x < n; x++ {
			a[x*n+y] = col[x]
		}
	}
}

// localPotential is the fixed external potential v_loc at grid point
// (x, y, z): −A·(cos x + cos y + cos z), only |g| = 1 components.
func localPotential(n, x, y, z int) float64 {
	h := boxSide / float64(n)
	return -localStrength * (math.Cos(h*float64(x)) + math.Cos(h*float64(y)) + math.Cos(h*float64(z)))
}

// localStrength is A of localPotential.
const localStrength = 1.0

// hartreeKernel is 4π/|g|², 0 at g = 0 (a neutralising background).
func hartreeKernel(gx, gy, gz int) float64 {
	g2 := gx*gx + gy*gy + gz*gz
	if g2 == 0 {
		return 0
	}
	return 4 * math.Pi / float64(g2)
}
