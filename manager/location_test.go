package manager

import (
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// The location table of a sparse array, as PE 1 of 4 sees it: where a
// message for an element it does not hold goes, and which news of a
// location it takes.
func TestLocationsRouteAndLearn(t *testing.T) {
	c := &Collection{Name: "a", Bounds: []int{8}, Sparse: true, locs: map[pe.Index]loc{}}
	c.setLoc(pe.Idx(2), loc{pe: 3, moves: 2})
	c.setLoc(pe.Idx(4), loc{pe: -1, moves: 1})
	c.setLoc(pe.Idx(6), loc{pe: 1, moves: 1}) // here once: it left, and its home knows where
	for _, tc := range []struct {
		name string
		ix   pe.Index
		src  int32
		p2p  bool
		home int
		want locDecision
	}{
		{"known elsewhere: there, and the sender learns it", pe.Idx(2), 0, true, 0, locDecision{act: locSend, pe: 3, tell: true}},
		{"known elsewhere, sent from there", pe.Idx(2), 3, true, 0, locDecision{act: locSend, pe: 3}},
		{"known elsewhere, a multicast hop: nobody to tell", pe.Idx(2), 0, false, 0, locDecision{act: locSend, pe: 3}},
		{"known elsewhere, sent by this PE", pe.Idx(2), 1, true, 0, locDecision{act: locSend, pe: 3}},
		{"deleted", pe.Idx(4), 0, true, 0, locDecision{act: locDeleted}},
		{"unknown: its home", pe.Idx(5), 0, true, 2, locDecision{act: locSendHome, pe: 2}},
		{"last known here, home elsewhere: its home", pe.Idx(6), 0, true, 2, locDecision{act: locSendHome, pe: 2}},
		{"unknown at its home: held until it is", pe.Idx(5), 0, true, 1, locDecision{act: locHold}},
		{"outside the array at its home", pe.Idx(9), 0, true, 1, locDecision{act: locOutside}},
	} {
		require.Equal(t, tc.want, c.route(tc.ix, 1, tc.src, tc.p2p, tc.home), tc.name)
	}
	require.False(t, c.learn(pe.Idx(2), loc{pe: 0, moves: 1}), "older news")
	require.True(t, c.learn(pe.Idx(2), loc{pe: 0, moves: 2}), "as new: the latest word")
	require.True(t, c.learn(pe.Idx(2), loc{pe: 2, moves: 3}))
	require.Equal(t, locDecision{act: locSend, pe: 2, tell: true}, c.route(pe.Idx(2), 1, 0, true, 0))
	require.True(t, c.learn(pe.Idx(7), loc{pe: 0}), "news of one unknown")
}
