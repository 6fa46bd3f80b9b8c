package chare

import (
	"math"
	"testing"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

func TestFloat64sArePooled(t *testing.T) {
	s := Float64s(300)
	require.Len(t, s, 300)
	require.Equal(t, 512, cap(s))
	s[5] = 1
	recycleFloat64s(s)
	again := Float64s(260) // same class: may come from the pool, always zeroed
	require.Len(t, again, 260)
	for _, x := range again {
		require.Zero(t, x)
	}
	require.Len(t, Float64s(0), 0)
	require.Len(t, Float64s(1<<21), 1<<21) // beyond the pooled sizes
	recycleFloat64s([]float64{1, 2, 3})    // not made by Float64s: ignored
}

// A SumFloat64s contribution handed over on its PE is added at once and
// goes back to the pool; one that came in a message (a contributor away
// from its home) is left alone. The round's partial is one accumulator,
// whatever the number of contributions, and the result is their sum.
func TestSumFloat64sAddsAtOnceAndGivesContributionsBack(t *testing.T) {
	red := manager.LookupReducer(SumFloat64s.id)
	require.True(t, red.Exact)
	s := manager.NewReduction(-1, nil)
	s.AddLocal(0, 3, nil)
	s.Enable(nil)
	var given [][]float64
	consume := red.Consume
	red.Consume = func(v any) { given = append(given, v.([]float64)); consume(v) }
	defer func() { red.Consume = consume }()
	a, b := Float64s(100), Float64s(100)
	a[3], b[3] = 1.5, 0.25
	msg := []float64{99: 0}
	msg[3] = 2
	require.Empty(t, s.ContributeOwned(0, pe.Idx(0), SumFloat64s.id, manager.Callback{}, a, nil))
	require.Empty(t, s.Contribute(0, pe.Idx(1), SumFloat64s.id, manager.Callback{}, msg, nil))
	acts := s.ContributeOwned(0, pe.Idx(2), SumFloat64s.id, manager.Callback{}, b, nil)
	require.Len(t, acts, 1)
	require.Equal(t, manager.RedDeliver, acts[0].Op)
	require.Equal(t, 3.75, acts[0].Result.([]float64)[3])
	require.Len(t, given, 2, "the two handed over on this PE")
	require.Same(t, &a[0], &given[0][0])
	require.Same(t, &b[0], &given[1][0])
	require.Equal(t, 2.0, msg[3], "a contribution that came in a message is not written")
}

// SumFloat64's results do not depend on the order of the contributions:
// ones that a left-to-right fold rounds differently in each order.
func TestSumFloat64IsOrderIndependent(t *testing.T) {
	terms := []float64{1e16, 1, -1e16, 1, 3.5, 1e-300}
	var first float64
	for i, perm := range [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {1, 3, 0, 2, 4, 5}} {
		s := manager.NewReduction(-1, nil)
		s.AddLocal(0, int64(len(terms)), nil)
		s.Enable(nil)
		var acts []manager.RedAction
		for _, j := range perm {
			acts = s.Contribute(0, pe.Idx(j), SumFloat64.id, manager.Callback{}, terms[j], nil)
		}
		got := acts[0].Result.(float64)
		if i == 0 {
			first = got
		}
		require.Equal(t, math.Float64bits(first), math.Float64bits(got))
	}
	require.Equal(t, 5.5, first, "the exact sum, rounded once")
}

// A partial sent up the tree is the child's (a message log keeps it by
// reference, to send it again in a recovery): the parent that receives it
// in the same process adds its own contributions to a copy, never into it.
func TestAPartialSentUpIsNotWrittenByItsParent(t *testing.T) {
	for _, red := range []Reducer[[]float64, []float64]{SumFloat64s} {
		child := manager.NewReduction(0, nil)
		child.AddLocal(0, 2, nil)
		child.Enable(nil)
		child.ContributeOwned(0, pe.Idx(1), red.id, manager.Callback{}, []float64{1, 2}, nil)
		acts := child.ContributeOwned(0, pe.Idx(2), red.id, manager.Callback{}, []float64{10, 20}, nil)
		require.Len(t, acts, 1)
		require.Equal(t, manager.RedSendParent, acts[0].Op)
		sent := acts[0].Partial
		before := sent.Acc.(*binSum).clone()

		parent := manager.NewReduction(-1, []int{1})
		parent.AddLocal(0, 1, nil)
		parent.AddChildCount(1, 0, 2, nil)
		parent.Enable(nil)
		require.Empty(t, parent.Child(1, sent, nil))
		acts = parent.ContributeOwned(0, pe.Idx(0), red.id, manager.Callback{}, []float64{100, 200}, nil)
		require.Len(t, acts, 1)
		require.Equal(t, []float64{111, 222}, acts[0].Result)
		require.Equal(t, before, sent.Acc.(*binSum), "the child's partial is as it sent it")
	}
}
