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
