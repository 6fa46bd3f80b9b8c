package teams

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// blockDiagonal: blocks of size PEs that talk heavily inside, and a little
// noise between every pair.
func blockDiagonal(n, size int, seed uint64) *Matrix {
	m := NewMatrix(n)
	rng := rand.New(rand.NewPCG(seed, 1))
	for u := 0; u < n; u++ {
		for v := 0; v < n; v++ {
			if u == v {
				continue
			}
			m.Add(u, v, rng.Float64())
			if u/size == v/size {
				m.Add(u, v, 100)
			}
		}
	}
	return m
}

func ring(n int) *Matrix {
	m := NewMatrix(n)
	for u := 0; u < n; u++ {
		m.Add(u, (u+1)%n, 10)
		m.Add((u+1)%n, u, 10)
	}
	return m
}

func allToAll(n int) *Matrix {
	m := NewMatrix(n)
	for u := 0; u < n; u++ {
		for v := 0; v < n; v++ {
			if u != v {
				m.Add(u, v, 1)
			}
		}
	}
	return m
}

// arc reports whether t is a run of consecutive PEs around a ring of n.
func arc(t []int, n int) bool {
	in := map[int]bool{}
	for _, p := range t {
		in[p] = true
	}
	starts := 0
	for _, p := range t {
		if !in[(p-1+n)%n] {
			starts++
		}
	}
	return starts == 1
}

func TestAlgorithm1FindsTheKnownBest(t *testing.T) {
	cases := []struct {
		name  string
		m     *Matrix
		check func(t *testing.T, r Result)
	}{
		{"block-diagonal with noise", blockDiagonal(16, 4, 7), func(t *testing.T, r Result) {
			require.Equal(t, Blocks(16, 4), r.Teams)
			require.InDelta(t, 0.25, r.Rollback, 1e-12)
			require.Less(t, r.Logged, 0.03) // the noise between blocks: about 96 of 4,920
		}},
		{"block-diagonal, blocks of 8 of 32", blockDiagonal(32, 8, 3), func(t *testing.T, r Result) {
			require.Equal(t, Blocks(32, 8), r.Teams)
		}},
		{"ring", ring(16), func(t *testing.T, r Result) {
			// K arcs cost 0.23·K/16 + 0.124/K: 4 arcs of 4 is the least a
			// bisection reaches (2: 0.0908, 4: 0.0885, 8: 0.1305)
			require.Equal(t, 4, r.K())
			for _, team := range r.Teams {
				require.Len(t, team, 4)
				require.True(t, arc(team, 16), "%v is not an arc of the ring", team)
			}
			require.InDelta(t, 0.23*4/16+0.124/4, r.Cost, 1e-12)
		}},
		{"all-to-all", allToAll(16), func(t *testing.T, r Result) {
			// every split logs more than it saves: coordinated checkpointing
			require.Equal(t, 1, r.K())
			require.InDelta(t, 0.124, r.Cost, 1e-12)
		}},
		{"silence", NewMatrix(8), func(t *testing.T, r Result) {
			// nothing to log: every PE alone
			require.Equal(t, 8, r.K())
			require.Zero(t, r.Logged)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Partition(c.m, Options{Seed: 1})
			require.NoError(t, err)
			c.check(t, r)
			again, err := Evaluate(c.m, r.Teams, Options{})
			require.NoError(t, err)
			require.InDelta(t, r.Cost, again.Cost, 1e-12, "Partition's cost is Evaluate's")
			for _, k := range []int{1, 2, 4, 8} {
				other, err := Evaluate(c.m, Blocks(c.m.N, c.m.N/k), Options{})
				require.NoError(t, err)
				require.LessOrEqual(t, r.Cost, other.Cost+1e-12, "consecutive blocks of %d are cheaper", c.m.N/k)
			}
		})
	}
}

func TestCostOfTheTwoExtremes(t *testing.T) {
	m := blockDiagonal(8, 2, 5)
	one, err := Evaluate(m, Blocks(8, 8), Options{})
	require.NoError(t, err)
	require.Equal(t, Result{Teams: Blocks(8, 8), Logged: 0, Rollback: 1, Cost: 0.124}, one)
	each, err := Evaluate(m, Blocks(8, 1), Options{})
	require.NoError(t, err)
	require.InDelta(t, 1, each.Logged, 1e-12)
	require.InDelta(t, 1.0/8, each.Rollback, 1e-12)
	require.InDelta(t, 0.23+0.124/8, each.Cost, 1e-12)
	custom, err := Evaluate(m, Blocks(8, 8), Options{Alpha: 0.5, Beta: 0.05})
	require.NoError(t, err)
	require.InDelta(t, 0.05, custom.Cost, 1e-12)
}

func TestMinTeamStopsBisecting(t *testing.T) {
	r, err := Partition(NewMatrix(16), Options{MinTeam: 4})
	require.NoError(t, err)
	for _, team := range r.Teams {
		require.LessOrEqual(t, len(team), 4)
		require.Greater(t, len(team), 2, "a team of at most 4 is not bisected")
	}
}

func TestBadInput(t *testing.T) {
	m := NewMatrix(4)
	cases := []struct {
		teams   [][]int
		wantErr string
	}{
		{[][]int{{0, 1}, {2}}, "PE 3 is in no team"},
		{[][]int{{0, 1}, {1, 2, 3}}, "PE 1 is in teams 0 and 1"},
		{[][]int{{0, 1, 2, 3, 4}}, "team 0 names PE 4, outside 0..3"},
		{[][]int{{0, 1, 2, 3}, {}}, "team 1 is empty"},
	}
	for _, c := range cases {
		_, err := Evaluate(m, c.teams, Options{})
		require.ErrorContains(t, err, c.wantErr)
	}
	bad := NewMatrix(3)
	bad.Add(1, 2, -1)
	_, err := Partition(bad, Options{})
	require.ErrorContains(t, err, "volume from PE 1 to PE 2 is -1")
	_, err = Partition(&Matrix{N: 3, V: make([]float64, 8)}, Options{})
	require.ErrorContains(t, err, "needs 9 entries, has 8")
}

func TestBlocks(t *testing.T) {
	require.Equal(t, [][]int{{0, 1, 2}, {3, 4, 5}, {6}}, Blocks(7, 3))
	require.Equal(t, [][]int{{0}, {1}}, Blocks(2, 0))
	r := Result{Teams: Blocks(7, 3)}
	require.Equal(t, 3, r.Largest())
	require.Equal(t, []int{0, 0, 0, 1, 1, 1, 2}, r.TeamOf(7))
}

// MaxTeam: all-to-all traffic is best as one team, but the runtime needs
// teams of at most half the PEs; the bound forces the bisections, and
// the best partition within it is the cheapest of those it passed
// (two halves: fewer teams log less).
func TestMaxTeamBoundsTheTeams(t *testing.T) {
	for _, c := range []struct {
		m     *Matrix
		max   int
		sizes []int
	}{
		{allToAll(8), 4, []int{4, 4}},
		{allToAll(9), 4, []int{2, 3, 4}}, // 4+5, then the 5 must go: 2+3
	} {
		free, err := Partition(c.m, Options{})
		require.NoError(t, err)
		r, err := Partition(c.m, Options{MaxTeam: c.max})
		require.NoError(t, err)
		require.Len(t, free.Teams, 1, "unbounded: one team")
		var sizes []int
		for _, team := range r.Teams {
			sizes = append(sizes, len(team))
		}
		slices.Sort(sizes)
		require.Equal(t, c.sizes, sizes)
	}
	// a bound the best partition meets changes nothing
	m := blockDiagonal(16, 4, 3)
	free, err := Partition(m, Options{})
	require.NoError(t, err)
	bound, err := Partition(m, Options{MaxTeam: 8})
	require.NoError(t, err)
	require.Equal(t, free, bound)
}
