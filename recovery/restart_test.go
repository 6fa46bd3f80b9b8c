package recovery

import (
	"testing"

	"github.com/charmgo/charmgo/manager"
	"github.com/stretchr/testify/require"
)

func TestRedistributeRefusesWhatCannotMove(t *testing.T) {
	snap := func(p int32, kind manager.CollKind, round uint32) *manager.PESnapshot {
		return &manager.PESnapshot{Version: manager.SnapshotVersion, PE: p, NumPEs: 2, Epoch: 1, Collections: []manager.CollSnapshot{
			{CreateMsg: manager.CreateMsg{Coll: 1, Kind: kind, Name: "c"}, RedNext: round, Elements: []manager.ElemSnapshot{{Index: []int32{p}}}}}}
	}
	_, err := Redistribute([]*manager.PESnapshot{snap(0, manager.CollGroup, 0), snap(1, manager.CollGroup, 0)}, 3, 2, 1)
	require.ErrorContains(t, err, "c is a group (one member per PE): it cannot be restarted on 3 PEs instead of 2")
	_, err = Redistribute([]*manager.PESnapshot{snap(0, manager.CollArray, 4), snap(1, manager.CollArray, 5)}, 3, 2, 1)
	require.ErrorContains(t, err, "c: reduction round 5 on PE 1, 4 on PE 0")

	// a 1D array of 2 elements on 2 PEs, moved to 3: each element once,
	// every PE knows where all are, counts follow the elements
	a, b := snap(0, manager.CollArray, 2), snap(1, manager.CollArray, 2)
	a.Collections[0].Bounds, b.Collections[0].Bounds = []int{2}, []int{2}
	out, err := Redistribute([]*manager.PESnapshot{a, b}, 3, 2, 1)
	require.NoError(t, err)
	var elems, locs int
	var counted int64
	for _, s := range out {
		c := s.Collections[0]
		elems += len(c.Elements)
		locs += len(c.Locs)
		counted += c.RedLocal
		require.Equal(t, uint32(2), c.RedNext)
		require.Len(t, c.Elements, int(c.RedLocal))
		require.Equal(t, 2, len(c.Elements)+len(c.Locs))
	}
	require.Equal(t, 2, elems)
	require.Equal(t, 4, locs)
	require.Equal(t, int64(2), counted)
	require.Equal(t, []int64{1, 0}, out[0].Collections[0].RedChildren, "PE 1's subtree holds element 1")
}
