package ftlayer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// hopNet runs hop-mode protocols of n PEs over one group (1: PEs 0..n-1,
// k-ary, rooted at 0) the way the runtime's manager drives them.
type hopNet struct {
	gs    *Groups
	hooks []*CausalHook
	acks  []Packet
}

func newHopNet(t *testing.T, n, k int, proto string) *hopNet {
	return newHopNetWith(t, n, k, proto, HookConfig{})
}

// newHopNetWith is newHopNet with the hooks configured by c.
func newHopNetWith(t *testing.T, n, k int, proto string, c HookConfig) *hopNet {
	gs := NewGroups()
	members := make([]int32, n)
	for i := range members {
		members[i] = int32(i)
	}
	require.NoError(t, gs.Add(1, members, k))
	h := &hopNet{gs: gs}
	spec, err := LookupProtocol(proto)
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		hk := spec.NewHook(i, n, gs, func(dst int, p *Packet) { h.acks = append(h.acks, *p) }, c).(*CausalHook)
		h.hooks = append(h.hooks, hk)
	}
	return h
}

func payload(n int) *pe.Envelope {
	return &pe.Envelope{Type: 1, Kind: pe.KindMulticast, Payload: make([]byte, n)}
}

// multicast sends one multicast from the root down the whole tree, each PE
// forwarding what it received, and returns the envelopes each PE handled.
func (h *hopNet) multicast(t *testing.T, size int) map[int]pe.Envelope {
	got := map[int]pe.Envelope{}
	var visit func(p int, env pe.Envelope)
	visit = func(p int, env pe.Envelope) {
		role := RoleMcastFwd
		if p == 0 {
			role = RoleMcastRoot
		}
		for i, c := range h.gs.Children(1, int32(p)) {
			out := env
			out.Src = int32(p) // (as pe's Send sets it)
			require.NoError(t, h.hooks[p].Send(int(c), role, 1, 0, i == 0, &out))
			a, err := h.hooks[c].Arrive(&out)
			require.NoError(t, err)
			require.Equal(t, Handle, a)
			got[int(c)] = out
			visit(int(c), out)
		}
	}
	visit(0, *payload(size))
	return got
}

// deliverAcks lets every PE go idle (which sends the acknowledgements it
// holds back) and delivers the packets that come of it.
func (h *hopNet) deliverAcks(t *testing.T) {
	for _, hk := range h.hooks {
		hk.Idle()
	}
	for len(h.acks) > 0 {
		p := h.acks[0]
		h.acks = h.acks[1:]
		require.NoError(t, h.hooks[p.To].Packet(&p))
	}
}

// sentNums lists the numbers (of multicasts, reductions) of the messages
// waiting in acks from PE from to PE to (-1: any).
func (h *hopNet) sentNums(from, to int32) []uint64 {
	var nums []uint64
	for _, p := range h.acks {
		if p.Kind == PktApp && (from < 0 || p.From == from) && (to < 0 || p.To == to) {
			nums = append(nums, p.Msg.Num)
		}
	}
	return nums
}

// Under CAMEL a multicast is logged once, at its root, whatever the tree's
// size; SCMEL logs a copy on every edge of the tree.
func TestHopMulticastIsLoggedOnceAtTheRoot(t *testing.T) {
	const n, size = 21, 100
	for _, c := range []struct {
		proto       string
		rootMsgs    uint64
		innerLogged uint64
	}{{"camel", 1, 0}, {"scmel", 4, 4}} {
		h := newHopNet(t, n, 4, c.proto)
		got := h.multicast(t, size)
		require.Len(t, got, n-1, c.proto)
		for p, env := range got {
			require.Equal(t, uint64(1), env.FT.Num, "%s: PE %d got multicast 1", c.proto, p)
		}
		root := h.hooks[0].Stats().Log[KindMulticast]
		require.Equal(t, c.rootMsgs, root.Msgs, c.proto)
		require.Equal(t, c.rootMsgs*size, root.Bytes, c.proto)
		require.Equal(t, c.innerLogged, h.hooks[1].Stats().Log[KindMulticast].Msgs, "%s: an inner node with 4 children", c.proto)
		var dets uint64
		for _, hk := range h.hooks {
			dets += hk.Stats().DetsCreated
		}
		require.Equal(t, uint64(n-1), dets, "%s: one determinant per reception", c.proto)
	}
}

// A CAMEL multicast ahead of its group's order waits for the one before it.
func TestHopMulticastsAreDeliveredInOrder(t *testing.T) {
	h := newHopNet(t, 2, 4, "camel")
	first, second := *payload(1), *payload(2)
	require.NoError(t, h.hooks[0].Send(1, RoleMcastRoot, 1, 0, true, &first))
	require.NoError(t, h.hooks[0].Send(1, RoleMcastRoot, 1, 0, true, &second))
	a, err := h.hooks[1].Arrive(&second)
	require.NoError(t, err)
	require.Equal(t, Held, a)
	a, err = h.hooks[1].Arrive(&first)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	var next pe.Envelope
	require.True(t, h.hooks[1].Next(&next))
	require.Equal(t, uint64(2), next.FT.Num)
	require.False(t, h.hooks[1].Next(&next))
	// the same multicast again (a re-sent copy) is dropped
	a, err = h.hooks[1].Arrive(&first)
	require.NoError(t, err)
	require.Equal(t, Dropped, a)
}

// Under CAMEL a completed reduction's partials are dropped from their
// senders' logs once the root's keeper (its first child) holds the
// result: the keeper logs the result instead, and the root a copy of it.
// SCMEL keeps every partial until the checkpoint.
func TestHopPartialsAreDroppedOnceTheResultIsKept(t *testing.T) {
	for _, c := range []struct {
		proto                       string
		leaf, keeper, sibling, root uint64 // reduction log entries after the acks
		rootCopies                  uint64
	}{{"camel", 0, 1, 0, 1, 1}, {"scmel", 1, 1, 1, 0, 0}} {
		h := newHopNet(t, 6, 4, c.proto) // 0 → 1,2,3,4; 1 → 5
		var released []string
		for i, hk := range h.hooks {
			hk.OnRelease(func(env *pe.Envelope) {
				released = append(released, fmt.Sprintf("%d:%d", i, len(env.Payload.([]byte))))
			})
		}
		send := func(from, to int, size int) {
			env := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, size)}
			require.NoError(t, h.hooks[from].Send(to, RolePartial, 1, 1, false, env))
			a, err := h.hooks[to].Arrive(env)
			require.NoError(t, err)
			require.Equal(t, Handle, a)
		}
		send(5, 1, 8)
		send(1, 0, 16)
		send(2, 0, 8)
		require.Equal(t, uint64(1), h.hooks[5].Stats().Log[KindReduction].Msgs)
		result := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 8)}
		h.hooks[0].Reduced(1, 1, result)
		h.deliverAcks(t)
		for pe, want := range map[int]uint64{5: c.leaf, 1: c.keeper, 2: c.sibling, 0: c.root} {
			require.Equal(t, want, h.hooks[pe].Stats().Log[KindReduction].Msgs, "%s: PE %d", c.proto, pe)
		}
		require.Equal(t, c.rootCopies, h.hooks[0].Stats().RootCopies.Msgs, c.proto)
		if c.proto == "camel" {
			require.Equal(t, uint64(8), h.hooks[1].Stats().Log[KindReduction].Bytes, "the keeper logs the result, not its partial")
			// Every partial is released (its payload may be reused),
			// an inner node's before its child's: the child's values
			// are in what the inner node forwarded.
			require.ElementsMatch(t, []string{"1:16", "2:8", "5:8"}, released)
			require.Less(t, slices.Index(released, "1:16"), slices.Index(released, "5:8"))
		} else {
			require.Empty(t, released, "SCMEL keeps its partials until the checkpoint")
		}
		// a checkpoint drops what it covers, and releases nothing: a
		// partial logged then may still be on its way up
		n := len(released)
		for _, hk := range h.hooks {
			hk.Prepare()
			hk.Checkpoint()
			require.Zero(t, hk.Stats().Logged(), c.proto)
		}
		require.Len(t, released, n)
	}
}

// A CAMEL root that fails after a reduction completed recovers from the
// result its keeper kept: it gets it once for every child's partial it
// stands for, each in that partial's recorded turn, and a partial its
// child sends again is a duplicate. A keeper that fails gets the result
// back from the root, and tells the root's other children again.
func TestHopRootRecoversFromTheKeptResult(t *testing.T) {
	h := newHopNet(t, 3, 2, "camel") // 0 → 1, 2
	parts := map[int]*pe.Envelope{}
	for _, from := range []int{2, 1} { // PE 2's partial is received first
		env := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 32)}
		require.NoError(t, h.hooks[from].Send(0, RolePartial, 1, 1, false, env))
		parts[from] = env
		a, err := h.hooks[0].Arrive(env)
		require.NoError(t, err)
		require.Equal(t, Handle, a)
	}
	result := &pe.Envelope{Type: 7, Kind: pe.KindReduction, Payload: []float64{1, 2}}
	h.hooks[0].Reduced(1, 1, result)
	h.deliverAcks(t)
	require.Zero(t, h.hooks[2].Stats().Log[KindReduction].Msgs, "the sibling dropped its partial")

	// The keeper fails: the root hands it the result back, and it tells
	// the sibling again.
	h.hooks[1].Restart(nil, 1, nil, Rollback{})
	require.NoError(t, h.hooks[0].PeerFailed(1, 1, nil))
	require.NoError(t, h.hooks[2].PeerFailed(1, 1, nil))
	h.deliverAcks(t)
	require.Equal(t, uint64(1), h.hooks[1].Stats().Log[KindReduction].Msgs, "the new keeper holds the result")
	require.False(t, h.hooks[1].Recovering())
	h.hooks[0].PeerRecovered(1)
	h.hooks[2].PeerRecovered(1)

	// Then the root fails.
	h.hooks[0].Restart(nil, 1, nil, Rollback{})
	require.NoError(t, h.hooks[1].PeerFailed(0, 1, nil))
	require.NoError(t, h.hooks[2].PeerFailed(0, 1, nil))
	var replayed []pe.Envelope
	for len(h.acks) > 0 {
		p := h.acks[0]
		h.acks = h.acks[1:]
		if p.Kind == PktApp {
			replayed = append(replayed, *p.Msg.Env)
			continue
		}
		require.NoError(t, h.hooks[p.To].Packet(&p))
	}
	require.Len(t, replayed, 1, "the keeper replays the result; the children kept no partial")
	a, err := h.hooks[0].Arrive(&replayed[0])
	require.NoError(t, err)
	require.Equal(t, Held, a)
	var got []int32
	var env pe.Envelope
	for h.hooks[0].Next(&env) {
		require.Equal(t, result.Payload, env.Payload)
		got = append(got, env.Src)
	}
	require.Equal(t, []int32{2, 1}, got, "in the partials' recorded order, from their senders")
	again := *parts[1]
	a, err = h.hooks[0].Arrive(&again)
	require.NoError(t, err)
	require.Equal(t, Dropped, a, "a partial the result stood for")
	require.False(t, h.hooks[0].Recovering())
}

// Point-to-point hops are logged with their envelope (a replay re-sends
// it whole), but not those to the PE itself; a duplicate is dropped; what
// arrives between a snapshot and its commit is held until the commit.
func TestHopPointToPoint(t *testing.T) {
	h := newHopNet(t, 2, 4, "scmel")
	env := &pe.Envelope{Type: 3, Coll: 9, Kind: pe.KindP2P, Index: pe.Idx(4, 5), Payload: []float64{1, 2}}
	require.NoError(t, h.hooks[0].Send(1, RoleP2P, 0, 0, false, env))
	self := &pe.Envelope{Type: 3, Kind: pe.KindP2P, Payload: []float64{3}}
	require.NoError(t, h.hooks[0].Send(0, RoleP2P, 0, 0, false, self))
	st := h.hooks[0].Stats().Log[KindP2P]
	require.Equal(t, uint64(1), st.Msgs)
	require.Equal(t, uint64(16), st.Bytes)
	logged := h.hooks[0].Protocol().msgLog[0].m.Env
	require.Equal(t, env.Index, logged.Index)
	require.Equal(t, env.Payload, logged.Payload)

	recv := *env
	a, err := h.hooks[1].Arrive(&recv)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	require.Equal(t, env.Payload, recv.Payload)
	dup := *env
	a, err = h.hooks[1].Arrive(&dup)
	require.NoError(t, err)
	require.Equal(t, Dropped, a)

	h.hooks[1].Prepare()
	next := &pe.Envelope{Type: 3, Kind: pe.KindSystem, Payload: []byte{1}}
	require.NoError(t, h.hooks[0].Send(1, RoleP2P, 0, 0, false, next))
	a, err = h.hooks[1].Arrive(next)
	require.NoError(t, err)
	require.Equal(t, Held, a)
	h.hooks[1].Checkpoint()
	var out pe.Envelope
	require.True(t, h.hooks[1].Next(&out))
	require.Equal(t, pe.KindSystem, out.Kind)
	require.Equal(t, uint64(1), h.hooks[0].Stats().Log[KindSystem].Msgs)
}

func TestHopErrors(t *testing.T) {
	h := newHopNet(t, 2, 4, "camel")
	env := payload(1)
	require.ErrorContains(t, h.hooks[0].Send(5, RoleP2P, 0, 0, false, env), "PE 5, outside 0..1")
	require.ErrorContains(t, h.hooks[1].Send(0, RoleMcastFwd, 1, 0, false, env), "carries no header")
	_, err := LookupProtocol("pessimistic")
	require.EqualError(t, err, `unknown protocol "pessimistic" (want none, scmel, camel, team, pessimist, spmd)`)
	spec, err := LookupProtocol("CAMEL")
	require.NoError(t, err)
	require.True(t, spec.RecoversAlone)
	spec, err = LookupProtocol("")
	require.NoError(t, err)
	require.Equal(t, "none", spec.Name)
	require.False(t, spec.RecoversAlone)
}

// Without a result to keep, a CAMEL root acknowledges nothing: the
// partials that reached it stay logged until the checkpoint.
func TestHopNoResultNoAck(t *testing.T) {
	h := newHopNet(t, 3, 2, "camel") // 0 → 1, 2
	env := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 8)}
	require.NoError(t, h.hooks[1].Send(0, RolePartial, 1, 1, false, env))
	a, err := h.hooks[0].Arrive(env)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	h.hooks[0].Reduced(1, 1, nil)
	require.Empty(t, h.acks)
	require.Equal(t, uint64(1), h.hooks[1].Stats().Log[KindReduction].Msgs)
}

var testBytesType = pe.RegisterType(pe.TypeInfo{
	Name:   "ftlayer.test.bytes",
	Encode: func(v any) ([]byte, error) { return slices.Clone(v.([]byte)), nil },
	Decode: func(b []byte) (any, error) { return slices.Clone(b), nil },
})

// A partial a CAMEL log sends again to a failed PE is a deep copy: the
// log may release the original (its values go back to their
// contributors) before the recovering PE has read it. SCMEL releases
// nothing and sends the logged envelope itself.
func TestHopPartialsSentAgainAreCopiesWhereTheLogReleases(t *testing.T) {
	for _, c := range []struct {
		proto string
		copy  bool
	}{{"camel", true}, {"scmel", false}} {
		h := newHopNet(t, 3, 2, c.proto) // 0 → 1, 2
		sent := []byte("forces")
		env := &pe.Envelope{Type: testBytesType, Kind: pe.KindReduction, Payload: sent}
		require.NoError(t, h.hooks[2].Send(0, RolePartial, 1, 1, false, env))
		h.hooks[0].Restart(nil, 1, nil, Rollback{})
		require.NoError(t, h.hooks[2].PeerFailed(0, 1, nil))
		var again *pe.Envelope
		for _, p := range h.acks {
			if p.Kind == PktApp && p.To == 0 {
				again = p.Msg.Env
			}
		}
		require.NotNil(t, again, c.proto)
		got := again.Payload.([]byte)
		require.Equal(t, sent, got, c.proto)
		require.Equal(t, !c.copy, &got[0] == &sent[0], "%s: the same memory", c.proto)
		require.NotNil(t, again.FT, c.proto)
		require.Equal(t, [2]uint64{1, 1}, [2]uint64{again.FT.Group, again.FT.Num}, "%s: the copy carries its header", c.proto)
	}
}

// A CAMEL log releases a group's partials as a prefix, in the order sent,
// without losing its place in the rest: the partials still logged are
// the ones sent again to a failed PE, and a checkpoint drops the rest
// with the statistics kept straight.
func TestHopReleasesKeepTheLogInOrder(t *testing.T) {
	for _, then := range []string{"peer fails", "checkpoint"} {
		h := newHopNet(t, 3, 2, "camel") // 0 → 1, 2
		var released []uint64
		h.hooks[2].OnRelease(func(env *pe.Envelope) { released = append(released, env.FT.Num) })
		sendPartial := func(num uint64) {
			env := &pe.Envelope{Type: testBytesType, Kind: pe.KindReduction, Payload: []byte{byte(num)}}
			require.NoError(t, h.hooks[2].Send(0, RolePartial, 1, num, false, env))
			a, err := h.hooks[0].Arrive(env)
			require.NoError(t, err)
			require.Equal(t, Handle, a)
		}
		p2p := &pe.Envelope{Type: testBytesType, Kind: pe.KindP2P, Payload: []byte("p2p")}
		for num := uint64(1); num <= 4; num++ {
			sendPartial(num)
			if num == 2 {
				require.NoError(t, h.hooks[2].Send(1, RoleP2P, 0, 0, false, p2p))
			}
		}
		for num := uint64(1); num <= 3; num++ { // the third compacts the log
			h.hooks[0].Reduced(1, num, &pe.Envelope{Type: testBytesType, Kind: pe.KindReduction, Payload: []byte("result")})
			h.deliverAcks(t)
		}
		require.Equal(t, []uint64{1, 2, 3}, released)
		st := h.hooks[2].Stats()
		require.Equal(t, uint64(1), st.Log[KindReduction].Msgs)
		require.Equal(t, uint64(1), st.Log[KindReduction].Bytes)
		require.Equal(t, uint64(1), st.Log[KindP2P].Msgs)

		switch then {
		case "peer fails": // partial 4 goes to the root again, 1 to 3 not
			h.acks = nil
			h.hooks[0].Restart(nil, 1, nil, Rollback{})
			require.NoError(t, h.hooks[2].PeerFailed(0, 1, nil))
			require.Equal(t, []uint64{4}, h.sentNums(-1, 0))
		case "checkpoint":
			h.hooks[2].Prepare()
			h.hooks[2].Checkpoint()
			st := h.hooks[2].Stats()
			require.Zero(t, st.Logged())
			require.Zero(t, st.Log[KindReduction].Bytes, "released partials are not counted out twice")
			// a partial logged after the checkpoint is released as before
			sendPartial(5)
			h.hooks[0].Reduced(1, 5, &pe.Envelope{Type: testBytesType, Kind: pe.KindReduction, Payload: []byte("result")})
			h.deliverAcks(t)
			require.Equal(t, []uint64{1, 2, 3, 5}, released)
			require.Zero(t, h.hooks[2].Stats().Logged())
		}
	}
}

// Under CAMEL a partial to an intermediate node carries its sender's
// determinants, which that node passes up with its own partial instead of
// storing them: the root stores them and acknowledges them to their owner.
// A PE two levels down that fails after its partial was folded gets its
// receptions' order back from the root, and from the node, which passes
// them on and keeps the partial that took them until its round completes
// (that partial may still be on its way to the root).
func TestHopDeterminantsOfPartialsGoUpToTheRoot(t *testing.T) {
	for _, failsAfter := range []string{"the root stored them", "the node got them"} {
		h := newHopNet(t, 6, 4, "camel") // 0 → 1,2,3,4; 1 → 5
		h.multicast(t, 8)                // PE 5 received it (from PE 1): one determinant
		require.Len(t, h.hooks[5].Protocol().detBuf, 1)
		leaf := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 8)}
		require.NoError(t, h.hooks[5].Send(1, RolePartial, 1, 1, false, leaf))
		require.Equal(t, []pe.Det{{Sender: 0, Recver: 5, SSN: 1, RSN: 1}}, leaf.FT.Dets)
		a, err := h.hooks[1].Arrive(leaf)
		require.NoError(t, err)
		require.Equal(t, Handle, a)
		require.Empty(t, h.hooks[1].Protocol().detLog, "the node stores none")
		require.Empty(t, h.acks, "and acknowledges none")
		// the next partial to the node does not repeat it (the node has
		// it), though it is not yet acknowledged
		again := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 8)}
		require.NoError(t, h.hooks[5].Send(1, RolePartial, 1, 2, false, again))
		require.Empty(t, again.FT.Dets)
		require.Len(t, h.hooks[5].Protocol().detBuf, 1)
		a, err = h.hooks[1].Arrive(again)
		require.NoError(t, err)
		require.Equal(t, Handle, a)
		require.Len(t, h.hooks[1].Protocol().passUp, 1)

		if failsAfter == "the root stored them" {
			up := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 16)}
			require.NoError(t, h.hooks[1].Send(0, RolePartial, 1, 1, false, up))
			require.ElementsMatch(t, []pe.Det{{Sender: 0, Recver: 1, SSN: 1, RSN: 1}, {Sender: 0, Recver: 5, SSN: 1, RSN: 1}}, up.FT.Dets)
			a, err = h.hooks[0].Arrive(up)
			require.NoError(t, err)
			require.Equal(t, Handle, a)
			require.Empty(t, h.acks, "acknowledgements wait for the root to go idle")
			h.hooks[0].Idle()
			acked := map[int32][]pe.Det{}
			for _, p := range h.acks {
				require.Equal(t, PktAck, p.Kind)
				acked[p.To] = p.Dets
			}
			require.Equal(t, map[int32][]pe.Det{1: {{Sender: 0, Recver: 1, SSN: 1, RSN: 1}}, 5: {{Sender: 0, Recver: 5, SSN: 1, RSN: 1}}}, acked,
				"each owner its own")
			h.deliverAcks(t)
			require.Empty(t, h.hooks[5].Protocol().detBuf)
			require.Empty(t, h.hooks[1].Protocol().detBuf)
			require.Empty(t, h.hooks[1].Protocol().passUp, "passed on once")
		}

		// PE 5 fails: whoever holds its determinant sends it back. The
		// root stored it; the node still logs the partial that took it
		// up, which might not have arrived yet.
		h.acks = nil
		h.hooks[5].Restart(nil, 1, nil, Rollback{})
		for p := 0; p < 5; p++ {
			require.NoError(t, h.hooks[p].PeerFailed(5, 1, nil))
		}
		from := map[int32][]pe.Det{}
		for _, p := range h.acks {
			if p.Kind == PktRecovery && len(p.Dets) > 0 {
				from[p.From] = p.Dets
			}
		}
		det := []pe.Det{{Sender: 0, Recver: 5, SSN: 1, RSN: 1}}
		want := map[int32][]pe.Det{1: det}
		if failsAfter == "the root stored them" {
			want[0] = det
		}
		require.Equal(t, want, from, failsAfter)
	}
}

// A PE holds its acknowledgements back until it goes idle, or until
// ackBatch messages' wait, and sends each owner one packet: its
// determinants in rsn order, once each, though the lists of successive
// messages overlap. The owner drops them all. A failed owner's are
// dropped: its new incarnation has not made them yet.
func TestHopAcknowledgementsGoInBatches(t *testing.T) {
	send := func(h *hopNet, from, to int) {
		env := &pe.Envelope{Type: 3, Kind: pe.KindP2P, Payload: []byte{1}}
		require.NoError(t, h.hooks[from].Send(to, RoleP2P, 0, 0, false, env))
		a, err := h.hooks[to].Arrive(env)
		require.NoError(t, err)
		require.Equal(t, Handle, a)
	}
	for _, proto := range []string{"scmel", "camel"} {
		h := newHopNet(t, 3, 4, proto)
		for i := 0; i < 3; i++ {
			send(h, 2, 0) // PE 0: a determinant each
			send(h, 0, 1) // all of PE 0's so far: 1, then 1-2, then 1-3
		}
		require.Len(t, h.hooks[0].Protocol().detBuf, 3)
		require.Empty(t, h.acks, "%s: held until PE 1 goes idle", proto)
		h.hooks[1].Idle()
		require.Len(t, h.acks, 1, proto)
		ack := h.acks[0]
		require.Equal(t, PktAck, ack.Kind)
		require.Equal(t, int32(0), ack.To)
		require.Equal(t, h.hooks[0].Protocol().detBuf, ack.Dets, "%s: each once, in order", proto)
		h.deliverAcks(t)
		require.Empty(t, h.hooks[0].Protocol().detBuf, proto)
		require.Empty(t, h.acks, "%s: sent once", proto)

		// a busy PE sends them after ackBatch messages
		for i := 0; i < ackBatch; i++ {
			send(h, 2, 0)
			send(h, 0, 1)
		}
		require.Len(t, h.acks, 1, proto)
		require.Len(t, h.acks[0].Dets, ackBatch, proto)
		h.deliverAcks(t)
		require.Empty(t, h.hooks[0].Protocol().detBuf, proto)

		send(h, 2, 0)
		send(h, 0, 1)
		h.hooks[0].Restart(nil, 1, nil, Rollback{})
		require.NoError(t, h.hooks[1].PeerFailed(0, 1, nil))
		h.acks = nil
		h.hooks[1].Idle()
		require.Empty(t, h.acks, "%s: none for the failed PE", proto)
	}
}

// A CAMEL root's kept copy of a partial carries only the determinants new
// to the root: a child's list repeats all it has not had acknowledged, and
// the copies of earlier partials carry the rest. The keeper stores only
// the root's own; the root gets its children's back from the results if
// it fails, and hands them to a child that fails after that.
func TestHopKeptResultsCarryEachDeterminantOnce(t *testing.T) {
	h := newHopNet(t, 3, 2, "camel") // 0 → 1, 2
	p2p := func(from, to int) {
		env := &pe.Envelope{Type: 3, Kind: pe.KindP2P, Payload: []byte{1}}
		require.NoError(t, h.hooks[from].Send(to, RoleP2P, 0, 0, false, env))
		a, err := h.hooks[to].Arrive(env)
		require.NoError(t, err)
		require.Equal(t, Handle, a)
	}
	partial := func(from int, num uint64) {
		env := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 8)}
		require.NoError(t, h.hooks[from].Send(0, RolePartial, 1, num, false, env))
		a, err := h.hooks[0].Arrive(env)
		require.NoError(t, err)
		require.Equal(t, Handle, a)
	}
	of := func(dets []pe.Det, owner int32) (rsns []uint64) {
		for _, d := range dets {
			if d.Recver == owner {
				rsns = append(rsns, d.RSN)
			}
		}
		return rsns
	}
	p2p(1, 2)
	p2p(1, 2)
	partial(2, 1) // PE 2's receptions 1 and 2
	partial(1, 1)
	p2p(1, 2)
	partial(2, 2) // 1, 2 again (not yet acknowledged) and 3
	partial(1, 2)
	require.Equal(t, []uint64{1, 2, 3}, of(h.hooks[0].Protocol().detLog, 2))
	h.acks = nil // the root's acknowledgements: PE 2 keeps sending them
	var results []*Message
	for num := uint64(1); num <= 2; num++ {
		h.hooks[0].Reduced(1, num, &pe.Envelope{Type: 7, Kind: pe.KindReduction, Payload: []float64{float64(num)}})
		require.Len(t, h.acks, 1)
		require.Equal(t, PktRedResult, h.acks[0].Kind)
		results = append(results, h.acks[0].Relog...)
		h.deliverAcks(t)
	}
	require.Equal(t, []uint64{1, 2}, of(results[0].Dets, 2))
	require.Equal(t, []uint64{3}, of(results[1].Dets, 2), "each once")
	for _, d := range h.hooks[1].Protocol().detLog {
		require.Equal(t, int32(0), d.Recver, "the keeper stores the root's own")
	}
	require.NotEmpty(t, h.hooks[1].Protocol().detLog)

	// The root fails, and gets its child's determinants back.
	h.hooks[0].Restart(nil, 1, nil, Rollback{})
	require.NoError(t, h.hooks[1].PeerFailed(0, 1, nil))
	require.NoError(t, h.hooks[2].PeerFailed(0, 1, nil))
	for len(h.acks) > 0 {
		p := h.acks[0]
		h.acks = h.acks[1:]
		if p.Kind == PktApp {
			env := *p.Msg.Env
			_, err := h.hooks[0].Arrive(&env)
			require.NoError(t, err)
		} else {
			require.NoError(t, h.hooks[p.To].Packet(&p))
		}
		var out pe.Envelope
		for h.hooks[0].Next(&out) {
		}
	}
	require.False(t, h.hooks[0].Recovering(), h.hooks[0].Protocol().Phase())
	h.hooks[1].PeerRecovered(0)
	h.hooks[2].PeerRecovered(0)
	require.ElementsMatch(t, []uint64{1, 2, 3}, of(h.hooks[0].Protocol().detLog, 2))

	// Then the child fails: the root sends them.
	h.acks = nil
	h.hooks[2].Restart(nil, 1, nil, Rollback{})
	require.NoError(t, h.hooks[0].PeerFailed(2, 1, nil))
	var back []pe.Det
	for _, p := range h.acks {
		if p.Kind == PktRecovery {
			back = append(back, p.Dets...)
		}
	}
	require.ElementsMatch(t, []uint64{1, 2, 3}, of(back, 2))
}

// A keeper that fails gets its root's results back in its recovery, after
// any result the root sent its old incarnation, which reach the new one
// first: each is kept, whatever the order they come in. (Keeping only
// results past the last kept lost the earlier one, and the root's own
// recovery later waited for ever for the partials it stood for: LeanMD on
// 4 PEs, the root failing at step 3 and the keeper at step 4.)
func TestHopRecoveringKeeperKeepsResultsOutOfOrder(t *testing.T) {
	h := newHopNet(t, 3, 2, "camel") // 0 → 1, 2
	var late []Packet
	for num := uint64(1); num <= 2; num++ {
		for _, from := range []int{1, 2} {
			env := &pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: make([]byte, 8)}
			require.NoError(t, h.hooks[from].Send(0, RolePartial, 1, num, false, env))
			a, err := h.hooks[0].Arrive(env)
			require.NoError(t, err)
			require.Equal(t, Handle, a)
		}
		h.hooks[0].Reduced(1, num, &pe.Envelope{Type: 7, Kind: pe.KindReduction, Payload: []float64{float64(num)}})
		if num == 1 {
			h.deliverAcks(t)
			continue
		}
		late, h.acks = h.acks, nil // in flight to the keeper as it fails
	}
	require.Len(t, late, 1)
	require.Equal(t, PktRedResult, late[0].Kind)

	h.hooks[1].Restart(nil, 1, nil, Rollback{})
	require.NoError(t, h.hooks[1].Packet(&late[0]), "result 2 reaches the new incarnation")
	require.NoError(t, h.hooks[0].PeerFailed(1, 1, nil))
	require.NoError(t, h.hooks[2].PeerFailed(1, 1, nil))
	h.deliverAcks(t)
	require.False(t, h.hooks[1].Recovering())
	require.Equal(t, uint64(2), h.hooks[1].Stats().Log[KindReduction].Msgs, "the new keeper holds both results")
	h.hooks[0].PeerRecovered(1)
	h.hooks[2].PeerRecovered(1)

	// the root fails: its keeper replays both
	h.hooks[0].Restart(nil, 1, nil, Rollback{})
	require.NoError(t, h.hooks[1].PeerFailed(0, 1, nil))
	require.ElementsMatch(t, []uint64{1, 2}, h.sentNums(1, -1))
}

// A sender whose determinants are not acknowledged piggybacks ever longer
// lists; the receiver stores each determinant once (only a list's new
// tail is read), acknowledges the latest list whole and in order, and the
// envelopes it delivered keep their own headers while it handles more.
func TestUnacknowledgedListsStoredOnce(t *testing.T) {
	for _, proto := range []string{"scmel", "camel"} {
		t.Run(proto, func(t *testing.T) {
			h := newHopNet(t, 3, 2, proto)
			var delivered []pe.Envelope
			for i := 1; i <= 40; i++ {
				// PE 2 -> PE 0: a reception, so a determinant, on PE 0
				// (PE 1 never sends PE 0 anything, so its
				// acknowledgements cannot ride back on a message)
				in := pe.Envelope{Type: 1, Kind: pe.KindP2P, Seq: uint64(i)}
				require.NoError(t, h.hooks[2].Send(0, RoleP2P, 0, 0, false, &in))
				a, err := h.hooks[0].Arrive(&in)
				require.NoError(t, err)
				require.Equal(t, Handle, a)
				// PE 0 -> PE 1 carries every determinant of PE 0 not acknowledged
				out := pe.Envelope{Type: 1, Kind: pe.KindP2P, Seq: uint64(i)}
				require.NoError(t, h.hooks[0].Send(1, RoleP2P, 0, 0, false, &out))
				require.Len(t, out.FT.Dets, i, "nothing was acknowledged")
				got := out
				a, err = h.hooks[1].Arrive(&got)
				require.NoError(t, err)
				require.Equal(t, Handle, a)
				delivered = append(delivered, got)
			}
			var stored []Det
			for _, d := range h.hooks[1].s.detLog {
				if d.Recver == 0 {
					stored = append(stored, d)
				}
			}
			require.Len(t, stored, 40, "each of PE 0's determinants stored once")
			for i, d := range stored {
				require.Equal(t, uint64(i+1), d.RSN)
			}
			for i, env := range delivered {
				require.Equal(t, uint64(i+1), env.Seq)
				require.Equal(t, int32(0), env.FT.Sender, "a delivered envelope's header is its own")
				require.Len(t, env.FT.Dets, i+1)
			}
			h.hooks[1].Idle() // every 8 messages' went already; the rest now
			var toZero []Packet
			for _, p := range h.acks {
				if p.To == 0 && p.Kind == PktAck {
					toZero = append(toZero, p)
				}
			}
			require.Len(t, toZero, 40/ackBatch, "one acknowledgement per batch")
			for _, p := range toZero {
				require.True(t, ascending(p.Dets))
			}
			last := toZero[len(toZero)-1].Dets
			require.Equal(t, uint64(40), last[len(last)-1].RSN)
		})
	}
}

// In a request-reply pattern the acknowledgements ride on the replies: no
// acknowledgement packet is sent, and the lists each side piggybacks stay
// short.
func TestAcknowledgementsRideOnReplies(t *testing.T) {
	for _, proto := range []string{"scmel", "camel"} {
		t.Run(proto, func(t *testing.T) {
			h := newHopNet(t, 2, 2, proto)
			// each PE's handler sends the next message, then the PE
			// goes idle (where held acknowledgements would go as packets)
			send := func(from int, i int) pe.Envelope {
				env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Seq: uint64(i)}
				require.NoError(t, h.hooks[from].Send(1-from, RoleP2P, 0, 0, false, &env))
				require.LessOrEqual(t, len(env.FT.Dets), 1, "acknowledged lists are dropped")
				h.hooks[from].Idle()
				return env
			}
			arrive := func(to int, env pe.Envelope) {
				a, err := h.hooks[to].Arrive(&env)
				require.NoError(t, err)
				require.Equal(t, Handle, a)
			}
			for i := 1; i <= 100; i++ {
				req := send(0, i)
				arrive(1, req)
				arrive(0, send(1, i))
			}
			require.Empty(t, h.acks, "no acknowledgement packets")
			for _, hk := range h.hooks {
				st := hk.Stats()
				require.Equal(t, st.DetsCreated, st.DetsAcked+uint64(len(hk.s.detBuf)))
				require.LessOrEqual(t, len(hk.s.detBuf), 1)
			}
		})
	}
}

// Under CAMEL with teams a multicast that a teammate of its root passes
// on to another team takes the team's determinants not yet safe (the
// root's among them): the PE it reaches depends on those receptions, and
// the root's copies that carried them may never arrive if the team fails.
func TestCamelTeamsForwardCarriesTheRootsDeterminants(t *testing.T) {
	teams, err := BlockTeams(6, 2)
	require.NoError(t, err)
	h := newHopNetWith(t, 6, 2, "camel", HookConfig{Teams: teams})
	// the root's reception from another team (its determinant: not safe
	// yet, held by PE 0 alone)
	env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Payload: []byte{1}}
	require.NoError(t, h.hooks[2].Send(0, RoleP2P, 0, 0, false, &env))
	a, err := h.hooks[0].Arrive(&env)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	rootsOwn := func(e pe.Envelope) bool {
		return slices.ContainsFunc(e.FT.Dets, func(d Det) bool { return d.Recver == 0 && d.Sender == 2 })
	}
	got := h.multicast(t, 10)
	require.Len(t, got, 5)
	// PE 1, the root's teammate, passes the multicast on to PEs 3 and 4,
	// of other teams; PE 2 has it from the root itself
	for _, p := range []int{2, 3, 4} {
		require.True(t, rootsOwn(got[p]), "PE %d's copy carries PE 0's reception", p)
	}
	// PEs 3 and 4 keep them but do not acknowledge them: the copy they
	// had is not logged, so their failure would lose them for good; PE 2
	// had them on the root's logged copy
	h.acks = nil
	for _, hk := range h.hooks {
		hk.Idle()
	}
	ackedBy := map[int32]bool{}
	for _, p := range h.acks {
		if p.Kind == PktAck && p.To == 0 && slices.ContainsFunc(p.Dets, func(d Det) bool { return d.Recver == 0 && d.Sender == 2 }) {
			ackedBy[p.From] = true
		}
	}
	require.Equal(t, map[int32]bool{2: true}, ackedBy)
}
