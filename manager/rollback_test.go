package manager

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlanRollback(t *testing.T) {
	held := func(pe int32, committed uint64, hs ...HeldSnapshot) *RollbackOfferMsg {
		return &RollbackOfferMsg{PE: pe, Committed: committed, Held: hs}
	}
	h := func(owner int32, epoch uint64) HeldSnapshot { return HeldSnapshot{owner, epoch} }
	for _, c := range []struct {
		name   string
		start  RollbackMsg
		offers []*RollbackOfferMsg
		dir    string
		want   *RollbackPlanMsg
		err    string
	}{
		{name: "no checkpoint yet: the start",
			start:  RollbackMsg{Failed: []int32{1}},
			offers: []*RollbackOfferMsg{held(0, 0), held(1, 0), held(2, 0)},
			want:   &RollbackPlanMsg{Source: FromStart, From: "the start of the run"}},
		{name: "a failed PE's snapshot from its buddy",
			start: RollbackMsg{Failed: []int32{1}, Committed: 2},
			offers: []*RollbackOfferMsg{
				held(0, 2, h(0, 2), h(2, 2)), held(1, 0), held(2, 2, h(2, 2), h(1, 2))},
			want: &RollbackPlanMsg{Epoch: 2, Source: FromMemory, Holder: []int32{0, 2, 2}, From: "from the PEs' memory"}},
		{name: "the coordinator committed an epoch nobody heard of: the tentative copies",
			start: RollbackMsg{Failed: []int32{0}, Committed: 3},
			offers: []*RollbackOfferMsg{
				held(0, 0), held(1, 2, h(1, 2), h(1, 3), h(0, 2), h(0, 3)), held(2, 2, h(2, 2), h(2, 3), h(1, 2), h(1, 3))},
			want: &RollbackPlanMsg{Epoch: 3, Source: FromMemory, Holder: []int32{1, 1, 2}, From: "from the PEs' memory"}},
		{name: "a PE and its buddy: the directory",
			start:  RollbackMsg{Failed: []int32{1, 2}, Committed: 2},
			offers: []*RollbackOfferMsg{held(0, 2, h(0, 2), h(2, 2)), held(1, 0), held(2, 0)},
			dir:    "ck",
			want:   &RollbackPlanMsg{Epoch: 2, Source: FromDirectory, From: "from ck"}},
		{name: "a PE and its buddy, restarted: the restart's checkpoint",
			start:  RollbackMsg{Failed: []int32{1, 2}, Committed: 2, Restart: 1, RestartDir: "old"},
			offers: []*RollbackOfferMsg{held(0, 2, h(0, 2), h(2, 2)), held(1, 0), held(2, 0)},
			want:   &RollbackPlanMsg{Epoch: 1, Source: FromRestart, From: "the one the run was restarted from, in old"}},
		{name: "a PE and its buddy, nothing else: the error names the snapshot",
			start:  RollbackMsg{Failed: []int32{1, 2}, Committed: 2},
			offers: []*RollbackOfferMsg{held(0, 2, h(0, 2), h(2, 2)), held(1, 0), held(2, 0)},
			err:    "PEs 1 and 2 failed, and no copy of PE 1's snapshot of checkpoint 2 survives"},
		{name: "one PE, restarted: the restart's checkpoint is the last",
			start:  RollbackMsg{Failed: []int32{0}, Restart: 4, RestartDir: "old"},
			offers: []*RollbackOfferMsg{held(0, 0)},
			want:   &RollbackPlanMsg{Epoch: 4, Source: FromRestart, From: "the one the run was restarted from, in old"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := PlanRollback(len(c.offers), &c.start, c.offers, c.dir)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestCheckPlanRefusesWhatTheRunCannotDo(t *testing.T) {
	require.NoError(t, checkPlan(&RollbackPlanMsg{Source: FromMemory, Holder: []int32{1, 0}}, 2))
	require.ErrorContains(t, checkPlan(&RollbackPlanMsg{Source: FromMemory, Holder: []int32{1}}, 2), "1 holders for 2 PEs")
	require.ErrorContains(t, checkPlan(&RollbackPlanMsg{Source: FromMemory, Holder: []int32{0, 2}}, 2), "held by PE 2")
	require.ErrorContains(t, checkPlan(&RollbackPlanMsg{Source: 9}, 2), "unknown source 9")
	require.NoError(t, checkPlan(&RollbackPlanMsg{Source: FromStart}, 2))
}
