package md

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// vectorKernels are the vector kernels' widths this CPU runs; a test of
// them skips where there are none (off amd64, with the purego tag, or a
// CPU with neither AVX-512 nor AVX2), unless CHARMGO_REQUIRE_AVX512 says
// this run must test the AVX-512 one.
func vectorKernels(t *testing.T) []int {
	t.Helper()
	w := vectorWidths()
	if os.Getenv("CHARMGO_REQUIRE_AVX512") != "" && (len(w) == 0 || w[0] != 8) {
		t.Fatal("the AVX-512 kernel is not in this build (amd64 without the purego tag) or this CPU has no AVX-512, and CHARMGO_REQUIRE_AVX512 says this run needs it")
	}
	if len(w) == 0 {
		t.Skip("no vector kernel in this build (amd64 without the purego tag) or on this CPU (AVX-512 or AVX2)")
	}
	return w
}

// The vector kernels give the scalar kernels' forces and energies to the
// bit: lists of every length around the lane count, atoms closer than the
// 1 Å floor, atoms at the cutoff, cells far apart, and the energy on and
// off.
func TestVectorKernelMatchesScalarToTheBit(t *testing.T) {
	for _, w := range vectorKernels(t) {
		t.Run(fmt.Sprintf("%d lanes", w), func(t *testing.T) { vectorMatchesScalar(t, w) })
	}
}

func vectorMatchesScalar(t *testing.T, lanes int) {
	rng := rand.New(rand.NewPCG(17, 3))
	lengths := []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 100, 250, 401}
	type pairCase struct {
		name  string
		off   [3]int
		shift Vec3
	}
	pairs := []pairCase{
		{"beside", [3]int{1, 0, 0}, Vec3{}},
		{"two away", [3]int{2, 2, 1}, Vec3{}},
		{"across the boundary", [3]int{-2, 1, -1}, Vec3{5 * CellSizeX, 0, 3 * CellSizeZ}},
		{"beyond the cutoff", [3]int{6, 0, 0}, Vec3{}},
	}
	for _, doPE := range []bool{false, true} {
		k := newKernel(doPE, false)
		k.lanes = lanes
		for _, n := range lengths {
			a := randomCell(rng, 1, 1, 1, n)
			crowd(rng, a)
			t.Run(fmt.Sprintf("self/n=%d/energy=%v", n, doPE), func(t *testing.T) {
				want, got := make([]Vec3, n), make([]Vec3, n)
				seed(rng, want, got)
				we := k.selfForcesScalar(a, want)
				ge, ok := k.selfForcesVec(a, got)
				require.True(t, ok)
				requireSameBits(t, want, got, we, ge)
			})
			for _, p := range pairs {
				m := lengths[rng.IntN(len(lengths))]
				b := randomCell(rng, 1+p.off[0], 1+p.off[1], 1+p.off[2], m)
				crowd(rng, b)
				t.Run(fmt.Sprintf("pair %s/n=%d,%d/energy=%v", p.name, n, m, doPE), func(t *testing.T) {
					wa, wb := make([]Vec3, n), make([]Vec3, m)
					ga, gb := make([]Vec3, n), make([]Vec3, m)
					seed(rng, wa, ga)
					seed(rng, wb, gb)
					we := k.pairForcesScalar(a, b, p.shift, wa, wb)
					ge, ok := k.pairForcesVec(a, b, p.shift, ga, gb)
					require.True(t, ok)
					requireSameBits(t, append(wa, wb...), append(ga, gb...), we, ge)
				})
			}
		}
	}
}

// The vector kernels on every compute of a 4×4×4 box's first step equal
// the scalar kernels to the bit.
func TestVectorKernelMatchesScalarOnABox(t *testing.T) {
	for _, lanes := range vectorKernels(t) {
		t.Run(fmt.Sprintf("%d lanes", lanes), func(t *testing.T) { vectorMatchesScalarOnABox(t, lanes) })
	}
}

func vectorMatchesScalarOnABox(t *testing.T, lanes int) {
	w := NewStepWorkload(4, 4, 4)
	k := newKernel(true, false)
	k.lanes = lanes
	for _, a := range w.self {
		pos := w.cells[a]
		want, got := make([]Vec3, len(pos)), make([]Vec3, len(pos))
		we := k.selfForcesScalar(pos, want)
		ge, _ := k.selfForcesVec(pos, got)
		requireSameBits(t, want, got, we, ge)
	}
	for i := range w.pairA {
		a, b := w.cells[w.pairA[i]], w.cells[w.pairB[i]]
		wa, wb := make([]Vec3, len(a)), make([]Vec3, len(b))
		ga, gb := make([]Vec3, len(a)), make([]Vec3, len(b))
		we := k.pairForcesScalar(a, b, w.shift[i], wa, wb)
		ge, _ := k.pairForcesVec(a, b, w.shift[i], ga, gb)
		requireSameBits(t, append(wa, wb...), append(ga, gb...), we, ge)
	}
}

// crowd moves a few atoms onto or within 1 Å of others (the kernel's
// floor) and a few to just inside and outside the cutoff of the first.
func crowd(rng *rand.Rand, c []Vec3) {
	if len(c) < 4 {
		return
	}
	for range len(c) / 8 {
		i, j := rng.IntN(len(c)), rng.IntN(len(c))
		c[j] = Vec3{c[i].X + rng.Float64()*0.5, c[i].Y, c[i].Z}
	}
	c[1] = Vec3{c[0].X + PtpCutOff - 1e-9, c[0].Y, c[0].Z}
	c[2] = Vec3{c[0].X, c[0].Y + PtpCutOff, c[0].Z}
	c[3] = c[0]
}

// seed gives both force arrays the same non-zero start: the kernels add
// to what is there.
func seed(rng *rand.Rand, want, got []Vec3) {
	for i := range want {
		want[i] = Vec3{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()}
		got[i] = want[i]
	}
}

func requireSameBits(t *testing.T, want, got []Vec3, wantE, gotE float64) {
	t.Helper()
	require.Equal(t, math.Float64bits(wantE), math.Float64bits(gotE), "energy %v, want %v", gotE, wantE)
	for i := range want {
		for c, pair := range [3][2]float64{{want[i].X, got[i].X}, {want[i].Y, got[i].Y}, {want[i].Z, got[i].Z}} {
			if math.Float64bits(pair[0]) != math.Float64bits(pair[1]) {
				t.Fatalf("atom %d axis %d: %v, want %v", i, c, pair[1], pair[0])
			}
		}
	}
}
