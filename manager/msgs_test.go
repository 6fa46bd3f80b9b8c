package manager

import (
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/loadbalance"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

func sysSeeds(t testing.TB) [][]byte {
	envs := []pe.Envelope{
		{Type: tPartial, Kind: pe.KindReduction, Payload: &PartialMsg{Coll: 3, p: &Partial{Red: 2, Reducer: testFloatSum, Count: 2, Items: []Item{{Key: pe.Idx(1), Value: 1.5}, {Key: pe.Idx(2), Value: 2.5}}}}},
		{Type: tPartial, Kind: pe.KindReduction, Payload: &PartialMsg{Coll: 3, p: &Partial{Red: 2, Reducer: testIntSum, Count: 4, Acc: int64(9)}}},
		{Type: tPartial, Kind: pe.KindReduction, Payload: &PartialMsg{Coll: 3, Sec: 1 << 40, p: &Partial{Red: 5, Reducer: testFloatSum, Count: 75, Complete: true, Result: 42.5}}},
		{Type: tPartial, Kind: pe.KindReduction, Payload: &PartialMsg{Coll: 3, p: &Partial{Red: 5, Reducer: testIntSum, Count: 2, Complete: true, Result: int64(-3)}}},
		{Type: tContrib, Kind: pe.KindReduction, Payload: &ContribMsg{Coll: 3, Sec: 1 << 40, Red: 1, Key: pe.Idx(4, 4), Reducer: testIntSum, v: int64(7)}},
		{Type: tMigrate, Kind: pe.KindSystem, Payload: &MigrateMsg{Coll: 3, Index: pe.Idx(1), State: []byte{1, 2}, Secs: []SecMembership{{Sec: 5, Home: 1}}}},
		{Type: tSection, Kind: pe.KindSystem, Payload: &SectionMsg{Sec: 9, Tree: []int{0, 1}, K: 4, Members: []pe.Index{pe.Idx(1)}, Homes: []int32{1}}},
		{Type: tCreate, Kind: pe.KindSystem, Payload: &CreateMsg{Coll: 2, Name: "x", Bounds: []int{2, 2}, Arg: Lazy{V: "arg"}}},
		{Type: tFuture, Kind: pe.KindSystem, Payload: &FutureMsg{ID: 4, Value: Lazy{V: []float64{1, 2}}}},
		{Type: tFTPacket, Kind: pe.KindSystem, Payload: &FTPacketMsg{Kind: ftlayer.PktRedResult,
			Relog: Envelopes{{Type: tPartial, Kind: pe.KindReduction, FT: &pe.FTHeader{Group: 1 << 40, Sender: 0, Recver: -2, Num: 7, Inc: 1, Dets: []pe.Det{{Sender: 1, Recver: 0, Group: 1 << 40, SSN: 7, RSN: 4}}},
				Payload: &PartialMsg{Coll: 3, Sec: 1 << 40, p: &Partial{Red: 6, Reducer: testFloatSum, Count: 75, Complete: true, Result: 1.25}}}}}},
		{Type: tFTPacket, Kind: pe.KindSystem, Payload: &FTPacketMsg{Kind: 3, Dets: []pe.Det{{Sender: 1, Recver: 2, SSN: 3, RSN: 4}},
			Relog: Envelopes{{Type: tPartial, Kind: pe.KindReduction, FT: &pe.FTHeader{Group: 1 << 40, Sender: 2, Recver: 0, Num: 7, Inc: 1},
				Payload: &PartialMsg{Coll: 3, p: &Partial{Red: 7, Reducer: testIntSum, Count: 4, Acc: int64(9)}}}}}},
		{Type: tRollback, Kind: pe.KindSystem, Payload: &RollbackMsg{Failed: []int32{1, 2}, Committed: 3, Restart: 1, RestartDir: "ck"}},
		{Type: tRollbackOffer, Kind: pe.KindSystem, Payload: &RollbackOfferMsg{PE: 2, Committed: 3, Held: []HeldSnapshot{{2, 3}, {1, 3}}}},
		{Type: tRollbackPlan, Kind: pe.KindSystem, Payload: &RollbackPlanMsg{Epoch: 3, Holder: []int32{0, 2, 2}, From: "from the PEs' memory"}},
		{Type: tSnapshotCopy, Kind: pe.KindSystem, Payload: &SnapshotCopyMsg{Owner: 1, Epoch: 3, App: []byte{1, 2, 3}}},
		// load balancing and sections set up again
		{Type: tSync, Kind: pe.KindSystem, Payload: &SyncMsg{Coll: 3, Indices: []pe.Index{pe.Idx(1), pe.Idx(2)}, PEs: []int32{1, 1}, From: 1}},
		{Type: tLBCollect, Kind: pe.KindSystem, Payload: &LBCollectMsg{Coll: 3, Periodic: true}},
		{Type: tLBPart, Kind: pe.KindSystem, Payload: &LBPartMsg{Coll: 3, Indices: []pe.Index{pe.Idx(1)}, PEs: []int32{2},
			Loads:  []ObjLoad{{Wall: 1000, CPU: 900, Bytes: 64, Mems: []SecMem{{Sec: 1 << 40, Round: 3, Home: 2}}}},
			Others: []OtherObj{{Coll: 4, Index: pe.Idx(0, 1), PE: 2, Load: ObjLoad{Wall: 5}}},
			Comm:   []ObjComm{{From: 0, ToColl: 4, To: pe.Idx(0, 1), Msgs: 2, Bytes: 128}, {From: 1, Sec: 1 << 40, Msgs: 1, Bytes: 8}},
			Figs:   []PEFigure{{PE: 2, Stats: loadbalance.PEStats{Wall: 0.5, Busy: 0.3, Idle: 0.1, Background: 0.1}}}}},
		{Type: tPlan, Kind: pe.KindSystem, Payload: &PlanMsg{Coll: 3, Moves: []Move{{Index: pe.Idx(1), From: 2, To: 0}}, Round: RoundBack}},
		{Type: tPlanDone, Kind: pe.KindSystem, Payload: &PlanDoneMsg{Coll: 3, MovedBytes: 64}},
		{Type: tSecRefresh, Kind: pe.KindSystem, Payload: &SecRefreshMsg{Sec: 1 << 40, Coll: 3, Round: 4, Members: []pe.Index{pe.Idx(1)}, PEs: []int32{0}}},
		{Type: tSecAlias, Kind: pe.KindSystem, Payload: &SecAliasMsg{Old: 1 << 40, New: 1<<40 | 2, First: 4, Chain: []SecAlias{{Old: 1 << 40, New: 1<<40 | 2, First: 4}}}},
		{Type: tSecAck, Kind: pe.KindSystem, Payload: &SecAckMsg{Sec: 1 << 40, Coll: 3, Done: true}},
		{Type: tSection, Kind: pe.KindSystem, Payload: &SectionMsg{Sec: 1<<40 | 2, Tree: []int{0}, K: 4, Members: []pe.Index{pe.Idx(1)}, Homes: []int32{0},
			Replaces: 1 << 40, FirstRound: 4, Ancestors: []SecAlias{{Old: 1 << 40, New: 1<<40 | 2, First: 4}}}},
		{Type: tMigrate, Kind: pe.KindSystem, Payload: &MigrateMsg{Coll: 3, Index: pe.Idx(1), State: []byte{1}, AtSync: true,
			Held: []HeldContrib{{Sec: 1 << 40, Reducer: testIntSum, v: int64(5)}}}},
		{Type: tLBTick, Kind: pe.KindSystem, Payload: &LBTickMsg{}},
	}
	var out [][]byte
	for i := range envs {
		b, err := pe.EncodeEnvelope(nil, &envs[i])
		require.NoError(t, err)
		out = append(out, b)
	}
	return out
}

func TestSystemMessagesRoundTrip(t *testing.T) {
	for _, b := range sysSeeds(t) {
		env, n, err := pe.DecodeEnvelope(b)
		require.NoError(t, err)
		require.Equal(t, len(b), n)
		again, err := pe.EncodeEnvelope(nil, &env)
		require.NoError(t, err)
		require.Equal(t, b, again, pe.TypeName(env.Type))
	}
}

// Every system message decoder takes bytes from other processes.
// Rate here (go test -fuzz, 2 workers, 10 s): about 59,000 inputs a second.
func FuzzDecodeSystemMessages(f *testing.F) {
	for _, b := range sysSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, _, err := pe.DecodeEnvelope(b)
		if err != nil {
			return
		}
		if pm, ok := env.Payload.(*PartialMsg); ok && (pm.p == nil || pm.p.Complete && (pm.p.Items != nil || pm.p.Acc != nil)) {
			t.Fatal("partial decoded without its partial, or a kept result with contributions")
		}
		if plan, ok := env.Payload.(*RollbackPlanMsg); ok && checkPlan(plan, 3) == nil && plan.Source == FromMemory {
			for _, h := range plan.Holder { // what onRollbackPlan indexes
				require.True(t, h >= 0 && h < 3)
			}
		}
		if fm, ok := env.Payload.(*FTPacketMsg); ok {
			for i := range fm.Relog { // what onFTPacket does with them
				if lm, err := ftlayer.LoggedMessage(&fm.Relog[i]); err == nil && lm.Env.FT == nil {
					t.Fatal("a logged message without its header")
				}
			}
		}
	})
}

// The broadcast history answers only for broadcasts it kept: after a
// restart (delivered count restored, nothing kept) and after the ring
// wrapped.
func TestBroadcastHistory(t *testing.T) {
	c := &Collection{bcastDelivered: 5} // restored from a checkpoint
	for s := uint64(6); s <= 8; s++ {
		c.bcastDelivered = s
		c.remember(bcastRec{seq: s, typ: uint32(s)})
	}
	for s := uint64(0); s <= 9; s++ {
		r, ok := c.historyAt(s)
		require.Equal(t, s >= 6 && s <= 8, ok, "broadcast %d", s)
		if ok {
			require.Equal(t, uint32(s), r.typ)
		}
	}
	for s := uint64(9); s <= bcastHistory+10; s++ {
		c.bcastDelivered = s
		c.remember(bcastRec{seq: s, typ: uint32(s)})
	}
	_, ok := c.historyAt(10)
	require.False(t, ok, "overwritten")
	r, ok := c.historyAt(bcastHistory + 10)
	require.True(t, ok)
	require.Equal(t, uint32(bcastHistory+10), r.typ)
}

// A message log measures the runtime's messages by WireSize, not by
// encoding them: the estimate stays within a factor of two of the
// encoding.
func TestWireSizeIsNearTheEncodedSize(t *testing.T) {
	state := make([]byte, 900)
	members := make([]pe.Index, 75)
	homes := make([]int32, 75)
	for i := range members {
		members[i], homes[i] = pe.Idx(i, i+1, i+2, 1, 2, 3), int32(i%16)
	}
	for _, c := range []struct {
		typ uint32
		p   any
	}{
		{tLoc, &LocMsg{Coll: 3, Index: pe.Idx(1, 2, 3, 4, 5, 6), PE: 12, Moves: 4, Sec: 1<<40 | 7}},
		{tLocQuery, &LocQueryMsg{Coll: 3, Index: pe.Idx(1, 2, 3, 4, 5, 6), Sec: 1<<40 | 7, From: 5}},
		{tMigrate, &MigrateMsg{Coll: 3, Index: pe.Idx(1, 2, 3, 4, 5, 6), State: state, RedHome: 2, RedNo: 40, Moves: 3,
			Secs: []SecMembership{{Sec: 1<<40 | 7, Home: 1, RedNo: 40, Mult: 1}, {Sec: 2<<40 | 9, Home: 3, RedNo: 40, Mult: 1}}}},
		{tSection, &SectionMsg{Sec: 1<<40 | 7, Coll: 3, Tree: []int{0, 1, 2, 3, 4, 5, 6, 7}, K: 4, Members: members, Homes: homes}},
		{tPlan, &PlanMsg{Coll: 3, Epoch: 4, Moves: []Move{{Index: pe.Idx(1, 2, 3, 4, 5, 6), From: 1, To: 2}, {Index: pe.Idx(7, 8, 9, 10, 11, 12), From: 3, To: 0}}}},
		{tSync, &SyncMsg{Coll: 3, Epoch: 4, Indices: members, PEs: homes}},
	} {
		est := pe.PayloadSize(c.p)
		ti, ok := pe.LookupType(c.typ)
		require.True(t, ok)
		b, err := ti.Encode(c.p)
		require.NoError(t, err)
		require.GreaterOrEqual(t, 2*len(b), est, "%T: estimate %d, encoded %d", c.p, est, len(b))
		require.GreaterOrEqual(t, 2*est, len(b), "%T: estimate %d, encoded %d", c.p, est, len(b))
	}
}

// A migrated element's held contributions came in a message its sender's
// log may keep: they arrive not owned (the reduction must not take them
// back into a pool), in a copy that leaves the message's list as it was.
func TestMigratedHeldContributionsAreNotOwned(t *testing.T) {
	sent := []HeldContrib{{Sec: 1 << 40, Reducer: testIntSum, v: int64(5), owned: true}, {Sec: 2 << 40, v: int64(6), owned: true}}
	got := arrivedHeld(sent)
	require.Len(t, got, 2)
	for i := range got {
		require.False(t, got[i].owned)
		require.True(t, sent[i].owned, "the message's list is not written to")
		require.Equal(t, sent[i].v, got[i].v)
		require.Equal(t, sent[i].Sec, got[i].Sec)
	}
	require.Nil(t, arrivedHeld(nil))
}
