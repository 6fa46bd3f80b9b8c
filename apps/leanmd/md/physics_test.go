package md

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Reference bits from the C library (glibc srand48/drand48) and from the
// C++ LeanMD's initialization formulas compiled with gcc: the initial state
// must match them bit for bit.
func TestRand48MatchesTheCLibrary(t *testing.T) {
	cases := []struct {
		seed int64
		want []uint64
	}{
		{0, []uint64{0x3fc5ddb16e288080, 0x3fe7ff32702c6f00, 0x3fb8abd0152a2300}},
		{26, []uint64{0x3fe9f9593dca2020, 0x3fb1baa22b637800}},
	}
	for _, c := range cases {
		r := NewRand48(c.seed)
		for i, w := range c.want {
			require.Equal(t, w, math.Float64bits(r.Float64()), "seed %d draw %d", c.seed, i)
		}
	}
}

func TestInitialStateMatchesTheCxxLeanMD(t *testing.T) {
	want := map[int]struct {
		n    int
		hash uint64
	}{0: {100, 0x3d30448c8d416442}, 13: {172, 0xb516c8ff6e5ccc08}, 26: {244, 0x00f2c7c04f4a03e0}}
	for id, w := range want {
		x, y, z := id/9, (id/3)%3, id%3
		ps := initialParticles(x, y, z, 3, 3, 3, [2]int{})
		require.Len(t, ps, w.n)
		h := uint64(1469598103934665603)
		for _, p := range ps {
			for _, v := range [6]float64{p.Pos.X, p.Pos.Y, p.Pos.Z, p.Vel.X, p.Vel.Y, p.Vel.Z} {
				h ^= math.Float64bits(v)
				h *= 1099511628211
			}
			require.Equal(t, HydrogenMass, p.Mass)
		}
		require.Equal(t, w.hash, h, "cell %d", id)
	}
}

// directForces is the textbook O(n²) loop over the pairs (i, j) of a set of
// atoms in a periodic box (j > i, or only i < split ≤ j when split > 0),
// with the minimum-image convention and the original's formula (three
// divisions), as an independent check.
func directForces(pos []Vec3, box Vec3, split int) ([]Vec3, float64) {
	f := make([]Vec3, len(pos))
	var energy float64
	mi := func(d, l float64) float64 { return d - l*math.Round(d/l) }
	for i := range pos {
		j0 := i + 1
		if split > 0 {
			if i >= split {
				break
			}
			j0 = split
		}
		for j := j0; j < len(pos); j++ {
			s := Vec3{mi(pos[i].X-pos[j].X, box.X), mi(pos[i].Y-pos[j].Y, box.Y), mi(pos[i].Z-pos[j].Z, box.Z)}
			rsqd := s.X*s.X + s.Y*s.Y + s.Z*s.Z
			if rsqd > 1 && rsqd < cutoffSqd {
				rsqd *= 1e-20
				r6 := rsqd * rsqd * rsqd
				r12 := r6 * r6
				fr := (12*VdwA/r12 - 6*VdwB/r6) / rsqd * 1e-10
				energy += VdwA/r12 - VdwB/r6
				f[i].X += s.X * fr
				f[i].Y += s.Y * fr
				f[i].Z += s.Z * fr
				f[j].X -= s.X * fr
				f[j].Y -= s.Y * fr
				f[j].Z -= s.Z * fr
			}
		}
	}
	return f, energy
}

func randomCell(rng *rand.Rand, x, y, z, n int) []Vec3 {
	ps := make([]Vec3, n)
	for i := range ps {
		ps[i] = Vec3{
			float64(x*CellSizeX) + rng.Float64()*CellSizeX,
			float64(y*CellSizeY) + rng.Float64()*CellSizeY,
			float64(z*CellSizeZ) + rng.Float64()*CellSizeZ,
		}
	}
	return ps
}

func requireClose(t *testing.T, want, got, scale float64, msg string) {
	t.Helper()
	if math.Abs(want-got) > 1e-11*scale {
		t.Fatalf("%s: got %g, want %g (scale %g)", msg, got, want, scale)
	}
}

// The kernels, with the compute's image shift, equal the direct
// minimum-image double loop on random atoms (in a 5×5×3 box, where the
// image at the compute's offset is the minimum image).
func TestKernelAgainstDirectLoop(t *testing.T) {
	const dimX, dimY, dimZ = 5, 5, 3
	box := Vec3{dimX * CellSizeX, dimY * CellSizeY, dimZ * CellSizeZ}
	rng := rand.New(rand.NewPCG(7, 11))
	k := newKernel(true, false)
	for _, off := range [][3]int{{0, 0, 0}, {1, 0, 0}, {2, 2, 1}, {-2, 1, -1}, {0, -2, 1}, {1, -1, 0}} {
		for _, first := range [][3]int{{0, 0, 0}, {4, 4, 2}, {2, 3, 1}} {
			t.Run(fmt.Sprintf("cell%v/offset%v", first, off), func(t *testing.T) {
				x, y, z := first[0], first[1], first[2]
				a := randomCell(rng, x, y, z, 60+rng.IntN(60))
				var got []Vec3
				var gotE float64
				var all []Vec3
				if off == [3]int{} {
					got = make([]Vec3, len(a))
					gotE = k.selfForces(a, got)
					all = a
				} else {
					b := randomCell(rng, wrap(x+off[0], dimX), wrap(y+off[1], dimY), wrap(z+off[2], dimZ), 50+rng.IntN(60))
					fa, fb := make([]Vec3, len(a)), make([]Vec3, len(b))
					gotE = k.pairForces(a, b, imageShift(x, y, z, off[0], off[1], off[2], dimX, dimY, dimZ), fa, fb)
					got = append(fa, fb...)
					all = append(append([]Vec3(nil), a...), b...)
					want, we := directForces(all, box, len(a)) // pairs a×b only
					checkForces(t, want, got, we, gotE)
					return
				}
				want, we := directForces(all, box, 0)
				checkForces(t, want, got, we, gotE)
			})
		}
	}
}

func checkForces(t *testing.T, want, got []Vec3, wantE, gotE float64) {
	t.Helper()
	var scale float64
	for _, f := range want {
		scale = math.Max(scale, math.Max(math.Abs(f.X), math.Max(math.Abs(f.Y), math.Abs(f.Z))))
	}
	if scale == 0 { // no pair within the cutoff: nothing may come out either
		for i := range got {
			require.Equal(t, Vec3{}, got[i])
		}
		require.Zero(t, gotE)
		return
	}
	for i := range want {
		requireClose(t, want[i].X, got[i].X, scale, fmt.Sprintf("atom %d fx", i))
		requireClose(t, want[i].Y, got[i].Y, scale, fmt.Sprintf("atom %d fy", i))
		requireClose(t, want[i].Z, got[i].Z, scale, fmt.Sprintf("atom %d fz", i))
	}
	requireClose(t, wantE, gotE, math.Abs(wantE)+1e-30, "energy")
}

func TestImageShift(t *testing.T) {
	cases := []struct {
		x, dx, dim int
		want       float64
	}{
		// the neighbour at wrapped cell 0 must sit at x = 5: moved by +75
		{0, 1, 5, 0}, {4, 1, 5, 75}, {0, -1, 5, -75}, {1, -2, 5, -75}, {2, 2, 5, 0}, {0, 2, 3, 0}, {2, 2, 3, 45}, {0, -2, 2, -30},
	}
	for _, c := range cases {
		got := imageShift(c.x, 0, 0, c.dx, 0, 0, c.dim, 1, 1)
		require.Equal(t, c.want, got.X, "x=%d dx=%d dim=%d", c.x, c.dx, c.dim)
	}
	// z cells are 30 Å
	require.Equal(t, Vec3{0, 0, 90}, imageShift(0, 0, 2, 0, 0, 1, 1, 1, 3))
}

func BenchmarkKernelPairs(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 5))
	a := randomCell(rng, 0, 0, 0, 200)
	c := randomCell(rng, 1, 0, 0, 200)
	fa, fc := make([]Vec3, len(a)), make([]Vec3, len(c))
	k := newKernel(false, false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k.pairForces(a, c, Vec3{}, fa, fc)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(a)*len(c)), "ns/pair")
}

// benchmarkKernelStep runs the force kernel of every compute of a LeanMD
// step (lanes ≥ 0: with that kernel, 0 the scalar one) and reports ns per pair evaluation (distance tests beyond the cutoff
// included, the C++ LeanMD's measure) and ms per step on one core.
func benchmarkKernelStep(b *testing.B, x, y, z, lanes int) {
	w := NewStepWorkload(x, y, z)
	if lanes >= 0 {
		w.k.lanes = lanes
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(w.Pairs), "ns/pair")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/step")
}

func BenchmarkKernelStep3x3x3(b *testing.B) { benchmarkKernelStep(b, 3, 3, 3, -1) }
func BenchmarkKernelStep4x4x4(b *testing.B) { benchmarkKernelStep(b, 4, 4, 4, -1) }

// The kernels a CPU without AVX-512 runs, on this one: AVX2's four lanes
// and the scalar kernel.
func BenchmarkKernelStep4x4x4AVX2(b *testing.B) {
	if !slices.Contains(vectorWidths(), 4) {
		b.Skip("no AVX2 kernel in this build or on this CPU")
	}
	benchmarkKernelStep(b, 4, 4, 4, 4)
}
func BenchmarkKernelStep4x4x4Scalar(b *testing.B) { benchmarkKernelStep(b, 4, 4, 4, 0) }
