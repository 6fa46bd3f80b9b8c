package manager

import (
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// The names logging without determinants gives a balancing step's
// messages: a collection's plan, its way round PE 0's witness, the parts
// of its statistics and the notices that its elements arrived are named
// by the collection (two collections' steps interleave differently from
// one execution to the next), never by the measurements in them.
func TestBalancingMessagesAreNamedByTheirCollection(t *testing.T) {
	name := func(typ uint32, payload any) uint64 {
		return treesOf{}.ContentsHash(&pe.Envelope{Type: typ, Kind: pe.KindSystem, Payload: payload})
	}
	cells, computes := &PlanMsg{Coll: 1}, &PlanMsg{Coll: 2}
	require.NotEqual(t, name(tPlan, cells), name(tPlan, computes), "two collections' plans")
	out := &PlanMsg{Coll: 1, Round: RoundOut}
	require.NotEqual(t, name(tPlan, cells), name(tPlan, out), "a plan on its way to the witness, and the plan carried out")
	moved := &PlanMsg{Coll: 1, Moves: []Move{{Index: pe.Index{Dims: 1}, From: 0, To: 1}}}
	require.Equal(t, name(tPlan, cells), name(tPlan, moved), "measurements differ between executions: not in the name")

	require.NotEqual(t, name(tLBPart, &LBPartMsg{Coll: 1}), name(tLBPart, &LBPartMsg{Coll: 2}))
	require.Equal(t, name(tLBPart, &LBPartMsg{Coll: 1}), name(tLBPart, &LBPartMsg{Coll: 1, Loads: []ObjLoad{{}}}))
	require.NotEqual(t, name(tPlanDone, &PlanDoneMsg{Coll: 1}), name(tPlanDone, &PlanDoneMsg{Coll: 2}))
	require.Equal(t, name(tPlanDone, &PlanDoneMsg{Coll: 1}), name(tPlanDone, &PlanDoneMsg{Coll: 1, MovedBytes: 99}))
}
