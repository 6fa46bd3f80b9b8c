package ftlayer

import (
	"encoding/binary"
	"github.com/charmgo/charmgo/pe"
	"testing"

	"github.com/stretchr/testify/require"
)

// group 1 over PEs 0..4: 0 → 1, 2; 1 → 3, 4 (binary tree in member order)
func testColl(t *testing.T) Collectives {
	gs := NewGroups()
	require.NoError(t, gs.Add(1, []int32{0, 1, 2, 3, 4}, 2))
	return Collectives{Groups: gs, Combine: func(_ uint64, a, b []byte) []byte {
		return binary.LittleEndian.AppendUint64(nil, binary.LittleEndian.Uint64(a)+binary.LittleEndian.Uint64(b))
	}}
}

func num(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func sends(acts []Action) []Packet {
	var out []Packet
	for _, a := range acts {
		if a.Kind == ActSend {
			out = append(out, a.Packet)
		}
	}
	return out
}

func TestGroupsValidate(t *testing.T) {
	for _, c := range []struct {
		name    string
		id      uint64
		members []int32
		k       int
		err     string
	}{
		{"zero id", 0, []int32{0}, 2, "ids start at 1"},
		{"no members", 2, nil, 2, "no members"},
		{"k", 3, []int32{0, 1}, 0, "branching factor 0"},
		{"repeated PE", 4, []int32{0, 1, 0}, 2, "lists PE 0 twice"},
		{"negative PE", 5, []int32{0, -1}, 2, "member -1 is not a PE"},
		{"twice", 1, []int32{0}, 2, "defined twice"},
	} {
		gs := NewGroups()
		require.NoError(t, gs.Add(1, []int32{3}, 2))
		require.ErrorContains(t, gs.Add(c.id, c.members, c.k), c.err, c.name)
	}
	gs := NewGroups()
	require.NoError(t, gs.Add(7, []int32{5, 2, 9, 4}, 2))
	require.Equal(t, int32(5), gs.Root(7))
	require.Equal(t, []int32{2, 9}, gs.Children(7, 5))
	require.Equal(t, []int32{4}, gs.Children(7, 2))
	require.Equal(t, int32(2), gs.Parent(7, 4))
	require.False(t, gs.Has(7, 3))
}

func TestCollectiveMisuseIsAnError(t *testing.T) {
	c := testColl(t)
	for _, p := range []Protocol{NewCAMEL(1, 5, c), NewSCMEL(1, 5, c), NoneFactory{Coll: c}.New(1, 5)} {
		_, err := p.Multicast(1, num(1))
		require.ErrorContains(t, err, "PE 1 multicasts to group 1, whose root is PE 0")
		_, err = p.Contribute(9, num(1))
		require.ErrorContains(t, err, "no group 9")
	}
	outsider := NewCAMEL(5, 6, c)
	_, err := outsider.Contribute(1, num(1))
	require.ErrorContains(t, err, "PE 5 is not a member of group 1")
	_, err = NewCAMEL(0, 5, Collectives{Groups: c.Groups}).Contribute(1, num(1))
	require.ErrorContains(t, err, "without a Combine")
	_, err = NewCAMEL(0, 5, c).Receive(&Packet{Kind: PktApp, From: 7, To: 0, Msg: &Message{FTHeader: pe.FTHeader{Sender: 7}}})
	require.ErrorContains(t, err, "from PE 7, outside 0..4")
}

// A multicast is logged once, at the root; an intermediate node delivers
// it, forwards it without logging it and without the root's determinants,
// and each member makes a determinant (Algorithm 2, RECEIVEMULTICASTMSG).
// SCMEL logs a copy at every hop.
func TestCAMELMulticastLoggedOnceAtRoot(t *testing.T) {
	c := testColl(t)
	root, mid := NewCAMEL(0, 5, c), NewCAMEL(1, 5, c)
	root.Receive(&Packet{Kind: PktApp, From: 2, To: 0, Msg: &Message{Payload: num(0), FTHeader: pe.FTHeader{Sender: 2, Recver: 0, SSN: 1, CSN: 1}}})
	acts, err := root.Multicast(1, num(42))
	require.NoError(t, err)
	ps := sends(acts)
	require.Len(t, ps, 2)
	require.Equal(t, []int32{1, 2}, []int32{ps[0].To, ps[1].To})
	require.Len(t, ps[0].Msg.Dets, 1, "the root's determinants ride to its children")
	require.Equal(t, uint64(1), root.Stats().Log[KindMulticast].Msgs)

	acts, err = mid.Receive(&ps[0])
	require.NoError(t, err)
	require.Equal(t, ActSend, acts[0].Kind) // the ack of the root's determinants
	require.Equal(t, PktAck, acts[0].Packet.Kind)
	require.Equal(t, ActDeliver, acts[1].Kind)
	fwd := sends(acts[2:])
	require.Len(t, fwd, 2)
	require.Equal(t, []int32{3, 4}, []int32{fwd[0].To, fwd[1].To})
	require.Empty(t, fwd[0].Msg.Dets, "forwarded without determinants")
	require.Equal(t, int32(0), fwd[0].Msg.Sender, "still the root's message")
	require.Zero(t, mid.Stats().Log[KindMulticast].Msgs, "not logged at the intermediate node")
	require.Equal(t, uint64(1), mid.Stats().DetsCreated)

	s := NewSCMEL(0, 5, c)
	_, err = s.Multicast(1, num(42))
	require.NoError(t, err)
	require.Equal(t, uint64(2), s.Stats().Log[KindMulticast].Msgs, "SCMEL: one logged message per child")
}

// Reductions: a contribution reaching an intermediate node makes no
// determinant; the root makes one per child's contribution and delivers
// the fold; the ack drops contributions from the log except those that
// went to the root (Algorithm 3).
func TestCAMELReductionLoggingAndAcks(t *testing.T) {
	c := testColl(t)
	pes := make([]*Causal, 5)
	for i := range pes {
		pes[i] = NewCAMEL(int32(i), 5, c)
	}
	var flight []Packet
	var results []uint64
	run := func(id int32, acts []Action, err error) {
		require.NoError(t, err)
		for _, a := range acts {
			if a.Kind == ActSend {
				flight = append(flight, a.Packet)
			} else if a.Msg.Kind == KindReduction {
				require.Equal(t, int32(0), id)
				results = append(results, binary.LittleEndian.Uint64(a.Msg.Payload))
			}
		}
	}
	for i, p := range pes {
		acts, err := p.Contribute(1, num(uint64(i+1)))
		run(int32(i), acts, err)
	}
	for len(flight) > 0 {
		p := flight[0]
		flight = flight[1:]
		acts, err := pes[p.To].Receive(&p)
		run(p.To, acts, err)
	}
	require.Equal(t, []uint64{15}, results)
	require.Zero(t, pes[1].Stats().DetsCreated, "no determinant at an intermediate node")
	require.Equal(t, uint64(2), pes[0].Stats().DetsCreated, "one per child at the root")
	require.Equal(t, uint64(1), pes[1].Stats().Log[KindReduction].Msgs, "a contribution to the root stays logged")
	require.Equal(t, uint64(1), pes[2].Stats().Log[KindReduction].Msgs)
	require.Zero(t, pes[3].Stats().Log[KindReduction].Msgs, "dropped at the ack")
	require.Zero(t, pes[4].Stats().Log[KindReduction].Msgs)
	require.Equal(t, uint64(1), pes[3].Stats().Log[KindReduction].TotalMsgs)
	require.Equal(t, uint64(2), pes[0].Stats().Log[KindReduction].Msgs, "the root's copies of its children's")

	// a re-sent contribution is a duplicate
	dup := &Packet{Kind: PktApp, From: 3, To: 1, Msg: &Message{Kind: KindReduction, Payload: num(4), FTHeader: pe.FTHeader{Group: 1, Sender: 3, Recver: 1, Num: 1}}}
	acts, err := pes[1].Receive(dup)
	require.NoError(t, err)
	require.Empty(t, acts)
	require.Equal(t, uint64(1), pes[1].Stats().Dropped)
}

// A multicast from the root's old incarnation is dropped; when the new
// incarnation's copy comes, an intermediate node that delivered the old
// one forwards it again (its children may have dropped its first forward)
// without delivering it twice.
func TestCAMELOldMulticastDroppedAndReforwarded(t *testing.T) {
	c := testColl(t)
	mid := NewCAMEL(1, 5, c)
	old := &Message{Kind: KindMulticast, Payload: num(7), FTHeader: pe.FTHeader{Group: 1, Sender: 0, Recver: -1, SSN: 1, Num: 1, Inc: 0}}
	acts, err := mid.Receive(&Packet{Kind: PktApp, From: 0, To: 1, Msg: old})
	require.NoError(t, err)
	require.Len(t, sends(acts), 2)
	_, err = mid.PeerFailed(0, 1)
	require.NoError(t, err)
	late := *old
	late.Num = 2
	acts, _ = mid.Receive(&Packet{Kind: PktApp, From: 0, To: 1, Msg: &late})
	require.Empty(t, acts, "old incarnation: dropped")
	again := *old
	again.Inc = 1
	acts, _ = mid.Receive(&Packet{Kind: PktApp, From: 0, To: 1, Msg: &again})
	require.Len(t, sends(acts), 2, "forwarded again to the children")
	for _, a := range acts {
		require.NotEqual(t, ActDeliver, a.Kind, "not delivered twice")
	}
	acts, _ = mid.Receive(&Packet{Kind: PktApp, From: 0, To: 1, Msg: &again})
	require.Empty(t, acts, "only once per incarnation")
}
