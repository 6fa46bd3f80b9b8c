package mcml

import (
	"fmt"
	"testing"

	"github.com/charmgo/charmgo/ftlayer/teams"
	"github.com/stretchr/testify/require"
)

// Reference: papers/002 §IV-A: "the default strategy chooses the heaviest
// channel"; an empty channel, the PE itself or one already off is never
// chosen.
func TestHeaviestChoosesTheChannelHoldingTheMost(t *testing.T) {
	cases := []struct {
		name   string
		logged []uint64
		off    []bool
		want   int
		ok     bool
	}{
		{"the heaviest", []uint64{0, 10, 30, 20}, nil, 2, true},
		{"ties: the lowest PE", []uint64{0, 30, 30, 20}, nil, 1, true},
		{"not one already off", []uint64{0, 10, 30, 20}, []bool{false, false, true, false}, 3, true},
		{"not itself", []uint64{99, 10, 0, 0}, nil, 1, true},
		{"nothing held", []uint64{5, 0, 0, 0}, nil, -1, false},
	}
	for _, c := range cases {
		ch := NewChannels(0, len(c.logged))
		copy(ch.Logged, c.logged)
		if c.off != nil {
			copy(ch.Off, c.off)
		}
		got, ok := Heaviest{}.Choose(ch)
		require.Equal(t, c.ok, ok, c.name)
		if ok {
			require.Equal(t, c.want, got, c.name)
		}
	}
}

// Reference: papers/002 §V (Table V): "in a system with 8 processes
// [0-7], process 5 would prefer to turn off channels to the following
// clusters with that priority: [4-5], [4-7], and [0-7]".
func TestTheIndexDendrogramIsThePapersExample(t *testing.T) {
	d := IndexDendrogram(8)
	require.Equal(t, [][]int{{4}, {6, 7}, {0, 1, 2, 3}}, d.Levels(5))
	require.Equal(t, [][]int{{1}, {2, 3}, {4, 5, 6, 7}}, d.Levels(0))
	require.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}}, d.Clusters())
	ch := NewChannels(5, 8)
	ch.Logged = []uint64{100, 0, 0, 0, 1, 0, 50, 60}
	got, ok := ClusterOf(d, ch.Me).Choose(ch)
	require.True(t, ok)
	require.Equal(t, 4, got, "the nearest cluster first, however light")
	ch.Off[4] = true
	got, _ = ClusterOf(d, ch.Me).Choose(ch)
	require.Equal(t, 7, got, "then [4-7]'s heaviest")
	ch.Off[6], ch.Off[7] = true, true
	got, _ = ClusterOf(d, ch.Me).Choose(ch)
	require.Equal(t, 0, got)
	// uneven counts halve with the larger half first
	require.Equal(t, [][]int{{0, 1, 2, 3, 4}, {0, 1, 2}, {3, 4}, {0, 1}}, IndexDendrogram(5).Clusters())
}

// The dendrogram of a communication matrix with two groups that talk
// inside themselves (PEs 0,2,4,6 and 1,3,5,7, pairs strongest) puts each
// group in one cluster, and each pair below it.
func TestTheDendrogramFindsTheClustersOfTheTraffic(t *testing.T) {
	m := teams.NewMatrix(8)
	for _, g := range [][]int{{0, 2, 4, 6}, {1, 3, 5, 7}} {
		for _, u := range g {
			for _, v := range g {
				if u != v {
					m.Add(u, v, 10)
				}
			}
		}
	}
	for _, p := range [][2]int{{0, 2}, {4, 6}, {1, 3}, {5, 7}} {
		m.Add(p[0], p[1], 100)
	}
	m.Add(0, 1, 1) // a little between the groups
	d, err := BuildDendrogram(m)
	require.NoError(t, err)
	require.Equal(t, [][]int{{2}, {4, 6}, {1, 3, 5, 7}}, d.Levels(0))
	require.Equal(t, [][]int{{7}, {1, 3}, {0, 2, 4, 6}}, d.Levels(5))
	// no traffic at all: a balanced tree, by PE numbers
	d, err = BuildDendrogram(teams.NewMatrix(4))
	require.NoError(t, err)
	require.Equal(t, [][]int{{0, 1, 2, 3}, {0, 1}, {2, 3}}, d.Clusters())
	_, err = BuildDendrogram(&teams.Matrix{N: 2, V: []float64{0, -1, 0, 0}})
	require.Error(t, err)
}

// Reference: papers/002 Algorithm 1 lines 32–58 and Fig. 5: a PE whose
// channel to a rolled-back PE is off rolls back too, and so on; a PE that
// only receives on unlogged channels from the set does not (the set's
// re-execution sends those messages again, which it drops as duplicates).
func TestTheRollbackSetIsTheClosureOverChannelsTurnedOff(t *testing.T) {
	cases := []struct {
		name   string
		n      int
		failed []int
		off    [][2]int // z's channel to y is off
		want   []int
		chain  int
	}{
		{"all logged: the failed PE alone", 4, []int{2}, nil, []int{2}, 0},
		{"a sender to it that stopped logging", 4, []int{2}, [][2]int{{1, 2}}, []int{1, 2}, 1},
		{"not the PEs it stopped logging to", 4, []int{2}, [][2]int{{2, 3}}, []int{2}, 0},
		{"a chain (Fig. 5: X to Z to Y)", 5, []int{4}, [][2]int{{3, 4}, {1, 3}}, []int{1, 3, 4}, 2},
		{"a fan-in is one link long", 5, []int{4}, [][2]int{{3, 4}, {1, 4}, {2, 4}}, []int{1, 2, 3, 4}, 1},
		{"a cycle ends", 4, []int{0}, [][2]int{{1, 0}, {0, 1}, {2, 1}}, []int{0, 1, 2}, 2},
		{"two failures at once", 6, []int{0, 5}, [][2]int{{1, 0}, {4, 5}, {3, 2}}, []int{0, 1, 4, 5}, 1},
		{"a PE out of range is ignored", 3, []int{7, 1}, nil, []int{1}, 0},
	}
	for _, c := range cases {
		off := func(z, y int) bool {
			for _, e := range c.off {
				if e[0] == z && e[1] == y {
					return true
				}
			}
			return false
		}
		require.Equal(t, c.want, RollbackSet(c.n, c.failed, off), c.name)
		set, chain := Rollback(c.n, c.failed, off)
		require.Equal(t, c.want, set, c.name)
		require.Equal(t, c.chain, chain, c.name)
	}
}

func TestStrategyNames(t *testing.T) {
	require.NoError(t, ValidName("heaviest"))
	require.NoError(t, ValidName("cluster"))
	require.EqualError(t, ValidName("lightest"), `unknown strategy "lightest" (want heaviest or cluster)`)
	require.Equal(t, "heaviest", Heaviest{}.Name())
	require.Equal(t, "cluster", Cluster{}.Name())
}

// BenchmarkBuildDendrogram: the clustering Cluster runs once a
// checkpoint, on a random sparse matrix (each PE talks to 8 others).
func BenchmarkBuildDendrogram(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		m := teams.NewMatrix(n)
		x := uint64(1)
		for u := range n {
			for range 8 {
				x = x*6364136223846793005 + 1442695040888963407
				m.Add(u, int(x>>33)%n, float64(x>>50))
			}
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				if _, err := BuildDendrogram(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A dendrogram travels as its joins and comes back the same; joins that
// make none are refused.
func TestADendrogramTravelsAsItsJoins(t *testing.T) {
	for _, d := range []*Dendrogram{IndexDendrogram(1), IndexDendrogram(5), IndexDendrogram(8)} {
		back, err := FromJoins(d.N(), d.Joins())
		require.NoError(t, err)
		require.Equal(t, d.Clusters(), back.Clusters())
		for me := range d.N() {
			require.Equal(t, d.Levels(me), back.Levels(me))
		}
	}
	for _, c := range []struct {
		n     int
		joins [][2]int32
		err   string
	}{
		{0, nil, "mcml: a dendrogram of 0 PEs"},
		{3, [][2]int32{{0, 1}}, "mcml: 1 joins for 3 PEs (want 2)"},
		{3, [][2]int32{{0, 1}, {1, 2}}, "mcml: join 1 names node 1, joined before"},
		{3, [][2]int32{{0, 4}, {1, 2}}, "mcml: join 0 names node 4, of 3 so far"},
		{3, [][2]int32{{2, 2}, {0, 1}}, "mcml: join 0 joins node 2 to itself"},
		{3, [][2]int32{{0, -1}, {0, 1}}, "mcml: join 0 names node -1, of 3 so far"},
	} {
		_, err := FromJoins(c.n, c.joins)
		require.EqualError(t, err, c.err)
	}
}

// FuzzFromJoins: any joins either make a dendrogram whose every PE's
// levels cover the other PEs once, or are refused.
func FuzzFromJoins(f *testing.F) {
	f.Add(uint8(8), IndexDendrogram(8).joinsBytes())
	f.Add(uint8(3), []byte{0, 1, 1, 2})
	f.Fuzz(func(t *testing.T, n uint8, b []byte) {
		var joins [][2]int32
		for i := 0; i+1 < len(b); i += 2 {
			joins = append(joins, [2]int32{int32(int8(b[i])), int32(int8(b[i+1]))})
		}
		d, err := FromJoins(int(n%40), joins)
		if err != nil {
			return
		}
		for me := range d.N() {
			seen := map[int]bool{me: true}
			for _, level := range d.Levels(me) {
				for _, p := range level {
					require.False(t, seen[p], "PE %d twice in PE %d's levels", p, me)
					seen[p] = true
				}
			}
			require.Len(t, seen, d.N())
		}
	})
}
