package chare

import (
	"testing"

	"github.com/charmgo/charmgo/manager"
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
