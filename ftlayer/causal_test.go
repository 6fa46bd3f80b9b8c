package ftlayer

import (
	"slices"
	"testing"

	"github.com/charmgo/charmgo/pe"

	"github.com/stretchr/testify/require"
)

// app builds a message whose channel sequence number equals its ssn (the
// sender sends only to this receiver) unless csn says otherwise.
func app(from, to int32, ssn uint64, inc uint32, dets ...Det) *Packet {
	return appCSN(from, to, ssn, ssn, inc, dets...)
}

func appCSN(from, to int32, ssn, csn uint64, inc uint32, dets ...Det) *Packet {
	return &Packet{Kind: PktApp, From: from, To: to, Msg: &Message{Payload: []byte{byte(ssn)}, FTHeader: pe.FTHeader{Sender: from, Recver: to, SSN: ssn, CSN: csn, Inc: inc, Dets: dets}}}
}

func delivered(acts []Action) []uint64 {
	var out []uint64
	for _, a := range acts {
		if a.Kind == ActDeliver {
			out = append(out, a.Msg.SSN)
		}
	}
	return out
}

// Scenario 9: an old-incarnation message and a duplicate are dropped.
func TestOldAndDuplicateMessagesAreDropped(t *testing.T) {
	s := NewSCMEL(0, 3, Collectives{})
	acts, err := s.Receive(app(1, 0, 1, 0))
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, delivered(acts))
	acts, _ = s.Receive(app(1, 0, 1, 0)) // the same message again
	require.Empty(t, delivered(acts))
	_, err = s.PeerFailed(1, 1) // PE 1 restarts as incarnation 1
	require.NoError(t, err)
	acts, _ = s.Receive(app(1, 0, 2, 0)) // late, from incarnation 0
	require.Empty(t, delivered(acts))
	acts, _ = s.Receive(app(1, 0, 2, 1)) // the new incarnation's
	require.Equal(t, []uint64{2}, delivered(acts))
	require.Equal(t, uint64(2), s.Stats().Dropped)
}

// Scenario 10: during replay, messages arriving in reverse order and new
// messages without a recorded reception are delivered in the recorded
// order, the unrecorded ones after it.
func TestReplayFollowsTheRecordedOrder(t *testing.T) {
	s := RestartSCMEL(0, 3, Collectives{}, Counters{IncMap: make([]uint32, 3)}, 1)
	// PE 1 knows that PE 0 received (2,ssn 5) first and (1,ssn 7) second.
	for _, p := range []*Packet{appCSN(1, 0, 7, 1, 0), appCSN(2, 0, 9, 2, 0), appCSN(2, 0, 5, 1, 0)} {
		acts, err := s.Receive(p)
		require.NoError(t, err)
		require.Empty(t, delivered(acts), "nothing before every peer's determinants are in")
	}
	acts, _ := s.Receive(&Packet{Kind: PktRecovery, From: 1, To: 0, Dets: []Det{{Sender: 2, Recver: 0, SSN: 5, RSN: 1}, {Sender: 1, Recver: 0, SSN: 7, RSN: 2}}})
	require.Empty(t, delivered(acts))
	require.True(t, s.Recovering())
	acts, _ = s.Receive(&Packet{Kind: PktRecovery, From: 2, To: 0})
	require.Empty(t, delivered(acts))
	var got []uint64
	for acts := s.Next(); len(acts) > 0; acts = s.Next() { // one at a time
		require.Len(t, delivered(acts), 1)
		got = append(got, delivered(acts)...)
	}
	require.Equal(t, []uint64{5, 7, 9}, got)
	require.True(t, s.Recovering(), "until every peer's replay is in")
	s.Receive(&Packet{Kind: PktReplayed, From: 1, To: 0})
	s.Receive(&Packet{Kind: PktReplayed, From: 2, To: 0})
	require.False(t, s.Recovering())
}

// Determinants ride on messages until acknowledged, and never on a
// message to the PE itself, which is not logged either.
func TestDeterminantsArePiggybackedUntilAcked(t *testing.T) {
	s := NewSCMEL(0, 2, Collectives{})
	s.Receive(app(1, 0, 1, 0))
	self := s.Send(0, []byte("self"))
	require.Empty(t, self.Msg.Dets)
	out := s.Send(1, []byte("x"))
	dets := out.Msg.Dets
	require.Equal(t, []Det{{Sender: 1, Recver: 0, SSN: 1, RSN: 1}}, dets)
	s.Receive(&Packet{Kind: PktAck, From: 1, To: 0, Dets: dets})
	require.Empty(t, s.Send(1, []byte("y")).Msg.Dets)
	st := s.Stats()
	require.Equal(t, uint64(1), st.DetsAcked)
	require.Equal(t, uint64(2), st.Logged())

	// The receiver keeps them for PE 0 and hands them back if it fails.
	r := NewSCMEL(1, 2, Collectives{})
	acts, _ := r.Receive(&out)
	require.Equal(t, PktAck, acts[0].Packet.Kind)
	rec, err := r.PeerFailed(0, 1)
	require.NoError(t, err)
	require.Equal(t, PktRecovery, rec[0].Packet.Kind)
	require.Equal(t, dets, rec[0].Packet.Dets)
}

func TestSecondFailureDuringRecoveryIsReported(t *testing.T) {
	s := NewSCMEL(0, 3, Collectives{})
	_, err := s.PeerFailed(1, 1)
	require.NoError(t, err)
	_, err = s.PeerFailed(2, 1)
	require.ErrorIs(t, err, ErrConcurrentFailure)
	s.Recovered(1)
	_, err = s.PeerFailed(2, 1)
	require.NoError(t, err)
	_, err = s.PeerFailed(1, 2) // while 2 recovers
	require.ErrorIs(t, err, ErrConcurrentFailure)
}

// A checkpoint drops only what its snapshot covers: what was sent,
// received or stored after Prepare stays until the next one.
func TestCheckpointKeepsWhatCameAfterTheSnapshot(t *testing.T) {
	s := NewSCMEL(0, 2, Collectives{})
	s.Send(1, []byte("before"))
	s.Receive(app(1, 0, 1, 0, Det{Sender: 0, Recver: 1, SSN: 1, RSN: 1}))
	ck := s.Prepare()
	require.Equal(t, uint64(1), ck.SSN)
	require.Equal(t, []uint64{0, 1}, ck.RecvCSN)
	s.Send(1, []byte("after"))
	acts, _ := s.Receive(app(1, 0, 2, 0, Det{Sender: 0, Recver: 1, SSN: 2, RSN: 2}))
	require.Empty(t, delivered(acts), "held between the snapshot and its commit")
	require.Empty(t, s.Next())
	s.Checkpoint()
	require.Equal(t, []uint64{2}, delivered(s.Next()), "released once committed")
	require.Equal(t, uint64(1), s.Stats().Logged(), "the message sent after the snapshot is still logged")
	require.Len(t, s.detLog, 1)
	require.Equal(t, []Det{{Sender: 1, Recver: 0, SSN: 2, RSN: 2}}, s.detBuf)
	// a late duplicate of a covered message is dropped, the later one is known
	acts, _ = s.Receive(app(1, 0, 1, 0))
	require.Empty(t, delivered(acts))
	acts, _ = s.Receive(app(1, 0, 2, 0))
	require.Empty(t, delivered(acts))
	acts, _ = s.Receive(app(1, 0, 3, 0))
	require.Equal(t, []uint64{3}, delivered(acts))
}

// Acknowledgements come back from several peers, each for what it was
// piggybacked when its message left: most overlap what another removed.
func TestRemoveAcked(t *testing.T) {
	dets := func(from, to uint64) []Det {
		var out []Det
		for r := from; r <= to; r++ {
			out = append(out, Det{Sender: 1, Recver: 0, SSN: r * 10, RSN: r})
		}
		return out
	}
	other := dets(5, 6)
	other[0].SSN++ // another reception numbered 5 (an earlier incarnation's)
	cases := []struct {
		name       string
		buf, acked []Det
		left       []Det
		acks       uint64
	}{
		{"a prefix", dets(1, 9), dets(1, 4), dets(5, 9), 4},
		{"all", dets(1, 9), dets(1, 9), nil, 9},
		{"overlapping one already removed", dets(5, 9), dets(1, 7), dets(8, 9), 3},
		{"removed already", dets(5, 9), dets(1, 4), dets(5, 9), 0},
		{"beyond the buffer", dets(5, 9), dets(3, 12), nil, 5},
		{"in the middle", dets(1, 9), dets(4, 6), append(dets(1, 3), dets(7, 9)...), 3},
		{"not the same receptions", dets(5, 9), other, append(dets(5, 5), dets(7, 9)...), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSCMEL(0, 2, Collectives{})
			s.detBuf = slices.Clone(c.buf)
			s.removeAcked(c.acked)
			require.Equal(t, len(c.left), len(s.detBuf))
			if len(c.left) > 0 {
				require.Equal(t, c.left, []Det(s.detBuf))
			}
			require.Equal(t, c.acks, s.stats.DetsAcked)
		})
	}
}

// A PE stores an owner's determinants once each, whatever path brought
// them: the owner's own list (all it has not had acknowledged, so one
// past the last stored is new), and parts of it passed up a reduction
// tree by other PEs, which come in no order. One brought late by a
// longer path is stored, not taken for one stored already.
func TestDeterminantsFromSeveralPathsAreStoredOnce(t *testing.T) {
	s := NewSCMEL(0, 6, Collectives{})
	dets := func(owner int32, from, to uint64) []Det {
		var out []Det
		for r := from; r <= to; r++ {
			out = append(out, Det{Sender: 1, Recver: owner, SSN: r, RSN: r})
		}
		return out
	}
	s.storeDets(dets(5, 6, 7), 1)  // through PE 1
	s.storeDets(dets(5, 3, 5), 2)  // through PE 2, later
	s.storeDets(dets(5, 3, 8), 5)  // PE 5's own list
	s.storeDets(dets(5, 4, 4), 3)  // a late copy
	s.storeDets(dets(5, 8, 10), 5) // its next list
	s.storeDets(dets(4, 1, 2), 4)  // another owner's own
	want := append(dets(5, 6, 7), dets(5, 3, 5)...)
	want = append(want, dets(5, 8, 10)...)
	want = append(want, dets(4, 1, 2)...)
	require.ElementsMatch(t, want, s.detLog)
}

// A window answers "received already?" for numbers in any order; settle
// closes the gaps below the highest, which a checkpoint makes moot.
func TestWindow(t *testing.T) {
	for _, c := range []struct {
		name     string
		add      []uint64
		settle   bool
		has, not []uint64
	}{
		{"in order", []uint64{1, 2, 3}, false, []uint64{1, 2, 3}, []uint64{4}},
		{"a gap", []uint64{2, 3}, false, []uint64{2, 3}, []uint64{1, 4}},
		{"the gap filled", []uint64{2, 3, 1}, false, []uint64{1, 2, 3}, []uint64{4}},
		{"settled", []uint64{2, 5}, true, []uint64{1, 3, 4, 5}, []uint64{6}},
		{"settled, nothing past contig", []uint64{1}, true, []uint64{1}, []uint64{2}},
	} {
		var w window
		for _, n := range c.add {
			require.False(t, w.has(n), "%s: %d before add", c.name, n)
			w.add(n)
		}
		if c.settle {
			w.settle()
			require.Empty(t, w.extra, c.name)
		}
		for _, n := range c.has {
			require.True(t, w.has(n), "%s: %d", c.name, n)
		}
		for _, n := range c.not {
			require.False(t, w.has(n), "%s: %d", c.name, n)
		}
	}
}
