package chare

import (
	"testing"
	"unsafe"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

func TestFloat64sArePooledThroughSumReductions(t *testing.T) {
	s := Float64s(300)
	require.Len(t, s, 300)
	require.Equal(t, 512, cap(s))
	s[5] = 1
	v, err := foldSum[float64]([]manager.Item{{Value: s}, {Value: Float64s(300)}})
	require.NoError(t, err)
	require.Equal(t, 1.0, v[5])
	again := Float64s(260) // same class: may come from the pool, always zeroed
	require.Len(t, again, 260)
	for _, x := range again {
		require.Zero(t, x)
	}
	require.Len(t, Float64s(0), 0)
	require.Len(t, Float64s(1<<21), 1<<21) // beyond the pooled sizes
}

// Under message logging, a SumFloat64s contribution a log released goes
// back to the pool it came from.
func TestReleasedFloat64ContributionsGoBackToThePool(t *testing.T) {
	red := manager.LookupReducer(SumFloat64s.id)
	require.NotNil(t, red.Recycle)
	a := Float64s(100)
	a[3] = 1.5
	red.Recycle(a)
	// sync.Pool may drop what it is given (it does at random under the
	// race detector), so only a hit is checked
	if b := Float64s(100); &b[0] == &a[0] {
		require.Zero(t, b[3], "a pooled slice comes back zeroed")
	}
	red.Recycle([]float64{1, 2, 3}) // not made by Float64s: ignored
}

// Under a log that keeps partials until the checkpoint, a partial leaves
// with copies of this PE's own contributions, in one block; the
// contributions are reused and a child's items are left alone.
func TestDetachCopiesOwnContributionsBeforeTheyAreLogged(t *testing.T) {
	red := manager.LookupReducer(SumFloat64s.id)
	require.NotNil(t, red.Detach)
	s := manager.NewReduction(0, nil)
	s.AddLocal(0, 2, nil)
	s.Enable(nil)
	a, b := Float64s(100), Float64s(70)
	a[3], b[69] = 1.5, -2
	require.Empty(t, s.ContributeOwned(0, pe.Idx(0), SumFloat64s.id, manager.Callback{}, a, nil))
	acts := s.ContributeOwned(0, pe.Idx(1), SumFloat64s.id, manager.Callback{}, b, nil)
	require.Len(t, acts, 1)
	p := acts[0].Partial
	red.Detach(p.Items)
	require.Len(t, p.Items, 2)
	x, y := p.Items[0].Value.([]float64), p.Items[1].Value.([]float64)
	require.Len(t, x, 100)
	require.Len(t, y, 70)
	require.Equal(t, 1.5, x[3])
	require.Equal(t, -2.0, y[69])
	require.Equal(t, uintptr(unsafe.Pointer(&x[0]))+100*8, uintptr(unsafe.Pointer(&y[0])), "one block")
	require.NotSame(t, &a[0], &x[0])

	// a child's items (not Reusable here) are not copied
	child := []manager.Item{{Key: pe.Idx(2), Value: []float64{7}}}
	red.Detach(child)
	require.Equal(t, []float64{7}, child[0].Value)
}
