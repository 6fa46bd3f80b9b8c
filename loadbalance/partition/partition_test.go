package partition

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blocks is k dense blocks of size b (edges of weight 10 inside a block)
// joined by light noise edges (weight 1) between random vertices.
func blocks(t testing.TB, k, b, noise int, seed uint64) *Graph {
	rng := rand.New(rand.NewPCG(seed, 1))
	var es []Edge
	for blk := range k {
		for i := range b {
			for j := i + 1; j < b; j++ {
				es = append(es, Edge{U: int32(blk*b + i), V: int32(blk*b + j), W: 10})
			}
		}
	}
	for range noise {
		es = append(es, Edge{U: int32(rng.IntN(k * b)), V: int32(rng.IntN(k * b)), W: 1})
	}
	g, err := FromEdges(k*b, nil, es)
	require.NoError(t, err)
	return g
}

func ring(t testing.TB, n int) *Graph {
	var es []Edge
	for i := range n {
		es = append(es, Edge{U: int32(i), V: int32((i + 1) % n), W: 1})
	}
	g, err := FromEdges(n, nil, es)
	require.NoError(t, err)
	return g
}

func TestFromEdgesMergesAndChecks(t *testing.T) {
	g, err := FromEdges(3, nil, []Edge{{0, 1, 2}, {1, 0, 3}, {1, 1, 5}, {1, 2, 0}, {2, 1, 1}})
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 1, 3, 4}, g.XAdj)
	assert.Equal(t, []int32{1, 0, 2, 1}, g.Adj)
	assert.Equal(t, []float64{5, 5, 1, 1}, g.EWeight)
	for _, bad := range [][]Edge{{{0, 3, 1}}, {{-1, 0, 1}}} {
		_, err := FromEdges(3, nil, bad)
		assert.Error(t, err)
	}
	_, err = FromEdges(2, []float64{1}, nil)
	assert.Error(t, err)
}

func TestBisectFindsKnownPartitions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		g       *Graph
		wantCut float64 // the best cut, which the partitioner must find
	}{
		{"two blocks with noise", blocks(t, 2, 20, 0, 1), 0},
		{"ring of 100", ring(t, 100), 2},
		{"ring of 1001", ring(t, 1001), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			side := Bisect(tc.g, 0.5, Options{Tolerance: 0.02, Seed: 7})
			w := tc.g.PartWeights(side, 2)
			total := tc.g.TotalWeight()
			assert.LessOrEqual(t, max(w[0], w[1]), total/2*1.02+1, "balance %v", w)
			assert.Equal(t, tc.wantCut, tc.g.Cut(side))
		})
	}
}

func TestBisectBlocksWithNoiseCutsOnlyNoise(t *testing.T) {
	g := blocks(t, 2, 30, 40, 3)
	side := Bisect(g, 0.5, Options{Seed: 1})
	for blk := range 2 {
		for i := 1; i < 30; i++ {
			assert.Equal(t, side[blk*30], side[blk*30+i], "block %d split", blk)
		}
	}
	assert.NotEqual(t, side[0], side[30])
}

func TestKWayBlocks(t *testing.T) {
	for _, k := range []int{2, 3, 4, 8} {
		g := blocks(t, k, 16, 3*k, uint64(k))
		part := KWay(g, k, Options{Seed: 2})
		w := g.PartWeights(part, k)
		for p := range k {
			assert.InDelta(t, 16, w[p], 0.01, "k=%d part %d", k, p)
		}
		for blk := range k {
			for i := 1; i < 16; i++ {
				assert.Equal(t, part[blk*16], part[blk*16+i], "k=%d block %d split", k, blk)
			}
		}
	}
}

func TestKWayAllToAllIsBalanced(t *testing.T) {
	var es []Edge
	n := 64
	for i := range n {
		for j := i + 1; j < n; j++ {
			es = append(es, Edge{int32(i), int32(j), 1})
		}
	}
	g, err := FromEdges(n, nil, es)
	require.NoError(t, err)
	for _, k := range []int{2, 4, 7} {
		part := KWay(g, k, Options{Seed: 5})
		for _, w := range g.PartWeights(part, k) {
			assert.LessOrEqual(t, w, float64(n)/float64(k)*1.03+1)
		}
	}
}

func TestKWayWeightedIsolatedVertices(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	n := 5000
	vw := make([]float64, n)
	for i := range vw {
		vw[i] = 1 + 9*rng.Float64()
	}
	g, err := FromEdges(n, vw, nil)
	require.NoError(t, err)
	k := 16
	part := KWay(g, k, Options{Tolerance: 0.05, Seed: 3})
	avg := g.TotalWeight() / float64(k)
	for p, w := range g.PartWeights(part, k) {
		assert.LessOrEqual(t, w, avg*1.05+10, "part %d", p)
	}
}

func TestPartitionIsRepeatable(t *testing.T) {
	g := blocks(t, 6, 10, 50, 4)
	a := KWay(g, 5, Options{Seed: 11})
	b := KWay(g, 5, Options{Seed: 11})
	assert.Equal(t, a, b)
}

func TestEdgeCases(t *testing.T) {
	g, err := FromEdges(0, nil, nil)
	require.NoError(t, err)
	assert.Empty(t, KWay(g, 4, Options{}))
	g, err = FromEdges(3, nil, nil)
	require.NoError(t, err)
	part := KWay(g, 8, Options{})
	assert.Len(t, part, 3)
	for _, p := range part {
		assert.Less(t, p, int32(8))
	}
	assert.Equal(t, []int32{0, 0, 0}, KWay(g, 1, Options{}))
}

// BenchmarkKWay100k partitions a 100,000-vertex mesh-like graph (each vertex
// talks to 6 others nearby, skewed weights) into 1,024 parts.
func BenchmarkKWay100k(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 100_000
	vw := make([]float64, n)
	var es []Edge
	for i := range n {
		vw[i] = 1 + 4*rng.Float64()*rng.Float64()
		for _, d := range []int{1, 47, 2209} {
			es = append(es, Edge{int32(i), int32((i + d) % n), 1 + rng.Float64()})
		}
	}
	g, err := FromEdges(n, vw, es)
	require.NoError(b, err)
	for b.Loop() {
		KWay(g, 1024, Options{Seed: 1})
	}
}
