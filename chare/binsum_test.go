package chare

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// exactRounded is the sum of xs computed exactly and rounded once to the
// nearest float64.
func exactRounded(xs []float64) float64 {
	acc := new(big.Float).SetPrec(4096)
	for _, x := range xs {
		acc.Add(acc, new(big.Float).SetPrec(4096).SetFloat64(x))
	}
	f, _ := acc.Float64()
	return f
}

func sumOf(t *testing.T, xs []float64) float64 {
	t.Helper()
	s := newBinSum(1)
	for _, x := range xs {
		require.NoError(t, s.add([]float64{x}))
	}
	return s.result()[0]
}

// Terms within 2^60 of each other lose no bit: the result is the exact
// sum rounded once, whatever the order of the terms and however they
// were grouped into partial sums merged later.
func TestBinSumIsTheExactSumRoundedOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 3000; trial++ {
		n := 1 + rng.IntN(80)
		base := rng.IntN(1900) - 1000 // finite terms (the edges test the rest)
		spread := 1 + rng.IntN(60)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = math.Ldexp(rng.Float64()-0.5, base+rng.IntN(spread))
			if trial%5 == 0 && i%3 == 0 {
				xs[i] = -xs[max(i-1, 0)] // cancellation
			}
		}
		want := exactRounded(xs)
		require.Equal(t, math.Float64bits(want), math.Float64bits(sumOf(t, xs)), "trial %d: %v", trial, xs)

		// another order, in random groups merged in a random tree
		perm := rng.Perm(n)
		parts := []*binSum{}
		for i := 0; i < n; {
			k := 1 + rng.IntN(n-i)
			p := newBinSum(1)
			for _, j := range perm[i : i+k] {
				require.NoError(t, p.add([]float64{xs[j]}))
			}
			parts = append(parts, p)
			i += k
		}
		for len(parts) > 1 {
			i := rng.IntN(len(parts) - 1)
			a := parts[i].clone()
			require.NoError(t, a.merge(parts[i+1]))
			parts = append(append(parts[:i:i], a), parts[i+2:]...)
		}
		require.Equal(t, math.Float64bits(want), math.Float64bits(parts[0].result()[0]), "trial %d regrouped", trial)
	}
}

// Far smaller terms are cut at 64 bits below the largest's leading bit,
// the same way in every order; subnormals, zeros, overflow and the IEEE
// special values behave.
func TestBinSumEdges(t *testing.T) {
	big1 := math.Ldexp(1, 300)
	tiny := math.Ldexp(1, 100)
	require.Equal(t, big1, sumOf(t, []float64{big1, tiny, -tiny}))
	require.Equal(t, sumOf(t, []float64{tiny, big1, tiny}), sumOf(t, []float64{tiny, tiny, big1}))
	require.Equal(t, 0.0, sumOf(t, []float64{big1, -big1}))
	require.Equal(t, 0.0, sumOf(t, nil))
	require.Equal(t, 0.0, sumOf(t, []float64{0, math.Copysign(0, -1)}))
	sub := math.SmallestNonzeroFloat64
	require.Equal(t, 3*sub, sumOf(t, []float64{sub, sub, sub}))
	require.Equal(t, exactRounded([]float64{math.Ldexp(1, -1022), -sub}), sumOf(t, []float64{math.Ldexp(1, -1022), -sub}))
	require.Equal(t, math.Inf(1), sumOf(t, []float64{math.MaxFloat64, math.MaxFloat64}))
	require.Equal(t, math.Inf(-1), sumOf(t, []float64{-math.MaxFloat64, -math.MaxFloat64, 1}))
	require.Equal(t, math.MaxFloat64, sumOf(t, []float64{math.MaxFloat64, math.MaxFloat64, -math.MaxFloat64}))
	require.True(t, math.IsNaN(sumOf(t, []float64{1, math.NaN()})))
	require.True(t, math.IsNaN(sumOf(t, []float64{math.Inf(1), math.Inf(-1)})))
	require.Equal(t, math.Inf(-1), sumOf(t, []float64{math.Inf(-1), 5}))
	// ties round to even
	one := math.Ldexp(1, 60)
	require.Equal(t, one, sumOf(t, []float64{one, 64}))
	require.Equal(t, one+256, sumOf(t, []float64{one, 128, 64}))

	s := newBinSum(2)
	require.ErrorContains(t, s.add([]float64{1}), "contributions of 2 and 1 elements")
	require.ErrorContains(t, s.merge(newBinSum(3)), "contributions of 2 and 3 elements")
}

func TestBinSumWireForm(t *testing.T) {
	s := newBinSum(4)
	require.NoError(t, s.add([]float64{1.5, -2e-300, 0, 7}))
	require.NoError(t, s.add([]float64{3e100, 1, 0, math.Inf(1)}))
	b := s.marshal()
	require.Equal(t, len(b), s.WireSize())
	d, err := unmarshalBinSum(b)
	require.NoError(t, err)
	require.Equal(t, s, d)
	for _, bad := range [][]byte{nil, []byte("BS1"), append([]byte(nil), b[:len(b)-1]...), append(append([]byte(nil), b...), 9)} {
		_, err := unmarshalBinSum(bad)
		require.Error(t, err)
	}
}

// FuzzUnmarshalBinSum: sums arrive from other PEs; any bytes give a sum
// that encodes back to them, or an error, never a panic or a large
// allocation the bytes do not pay for.
// Rate here (go test -fuzz, 2 workers, 10 s): about 13,000 inputs a second.
func FuzzUnmarshalBinSum(f *testing.F) {
	s := newBinSum(3)
	_ = s.add([]float64{1, 2, math.NaN()})
	f.Add(s.marshal())
	f.Add(newBinSum(0).marshal())
	f.Add([]byte("BS1\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := unmarshalBinSum(b)
		if err != nil {
			return
		}
		require.Equal(t, b, s.marshal())
		r := s.result()
		require.Len(t, r, len(s.top))
		if s.terms <= maxTerms/2 {
			require.NoError(t, s.clone().merge(s))
		}
	})
}

func BenchmarkBinSumAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([][]float64, 75)
	for k := range xs {
		xs[k] = make([]float64, 510)
		for i := range xs[k] {
			xs[k][i] = (rng.Float64() - 0.5) * math.Ldexp(1, -60-rng.IntN(20))
		}
	}
	s := newBinSum(510)
	b.SetBytes(8 * 75 * 510)
	for i := 0; i < b.N; i++ {
		s.terms = 0
		for _, x := range xs {
			_ = s.add(x)
		}
	}
}
