package loadbalance

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkStrategy1024x100k times each strategy on a synthetic instance
// of 1,024 PEs and 100,000 chares (log-normal loads, a 2D mesh of
// communication, a quarter of the PEs twice as loaded): bench/README.md's
// figure 3 of load balancing.
func BenchmarkStrategy1024x100k(b *testing.B) {
	st, err := Generate(Synthetic{PEs: 1024, Objs: 100_000, Skew: 0.5, Pattern: "mesh", Hot: 256, Seed: 1})
	require.NoError(b, err)
	for _, name := range []string{"greedy", "refine", "greedyrefine", "graph"} {
		b.Run(name, func(b *testing.B) {
			s, _ := New(name, Options{Seed: 1})
			var moves []Move
			for b.Loop() {
				moves = s.Plan(st)
			}
			sm := st.Summarize(name, moves)
			b.ReportMetric(sm.MaxAvgBefore, "maxavg_before")
			b.ReportMetric(sm.MaxAvgAfter, "maxavg_after")
			b.ReportMetric(float64(sm.Moved), "moved")
		})
	}
}
