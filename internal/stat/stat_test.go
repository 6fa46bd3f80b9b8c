package stat

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMeanAndMedian(t *testing.T) {
	cases := []struct {
		in           []float64
		mean, median float64
	}{
		{nil, 0, 0},
		{[]float64{3}, 3, 3},
		{[]float64{4, 1, 3}, 8.0 / 3, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 2.5},
	}
	for _, c := range cases {
		in := append([]float64(nil), c.in...)
		require.InDelta(t, c.mean, Mean(in), 1e-15)
		require.Equal(t, c.median, Median(in))
		require.Equal(t, c.in, in, "Median leaves its input as it was")
	}
}
