package ftlayer

import (
	"slices"
	"testing"

	"github.com/charmgo/charmgo/pe"

	"github.com/stretchr/testify/require"
)

// p2p is a point-to-point envelope from PE from to PE to as a hook
// stamped it: ssn, channel number csn, incarnation inc.
func p2p(from, to int32, ssn, csn uint64, inc uint32, dets ...Det) *pe.Envelope {
	return &pe.Envelope{Type: 3, Kind: pe.KindP2P, Seq: ssn, FT: &pe.FTHeader{Sender: from, Recver: to, SSN: ssn, CSN: csn, Inc: inc, Dets: dets}}
}

func arrive(t *testing.T, hk *CausalHook, env *pe.Envelope) Arrival {
	t.Helper()
	a, err := hk.Arrive(env)
	require.NoError(t, err)
	return a
}

// Scenario 9: an old-incarnation message and a duplicate are dropped.
func TestOldAndDuplicateMessagesAreDropped(t *testing.T) {
	hk := newHopNet(t, 3, 4, "scmel").hooks[0]
	require.Equal(t, Handle, arrive(t, hk, p2p(1, 0, 1, 1, 0)))
	require.Equal(t, Dropped, arrive(t, hk, p2p(1, 0, 1, 1, 0)), "the same message again")
	require.NoError(t, hk.PeerFailed(1, 1, nil)) // PE 1 restarts as incarnation 1
	require.Equal(t, Dropped, arrive(t, hk, p2p(1, 0, 2, 2, 0)), "late, from incarnation 0")
	require.Equal(t, Handle, arrive(t, hk, p2p(1, 0, 2, 2, 1)), "the new incarnation's")
	require.Equal(t, uint64(2), hk.Stats().Dropped)
}

// Scenario 10: during replay, messages arriving in reverse order and new
// messages without a recorded reception are delivered in the recorded
// order, the unrecorded ones after it.
func TestReplayFollowsTheRecordedOrder(t *testing.T) {
	hk := newHopNet(t, 3, 4, "scmel").hooks[0]
	hk.Restart(&Counters{IncMap: make([]uint32, 3)}, 1, nil, Rollback{})
	// PE 1 knows that PE 0 received (2, ssn 5) first and (1, ssn 7) second.
	for _, env := range []*pe.Envelope{p2p(1, 0, 7, 1, 0), p2p(2, 0, 9, 2, 0), p2p(2, 0, 5, 1, 0)} {
		require.Equal(t, Held, arrive(t, hk, env), "nothing before every peer's determinants are in")
	}
	require.NoError(t, hk.Packet(&Packet{Kind: PktRecovery, From: 1, To: 0, Dets: []Det{{Sender: 2, Recver: 0, SSN: 5, RSN: 1}, {Sender: 1, Recver: 0, SSN: 7, RSN: 2}}}))
	require.True(t, hk.Recovering())
	var out pe.Envelope
	require.False(t, hk.Next(&out), "PE 2's determinants are not in")
	require.NoError(t, hk.Packet(&Packet{Kind: PktRecovery, From: 2, To: 0}))
	var got []uint64
	for hk.Next(&out) { // one at a time
		got = append(got, out.Seq)
	}
	require.Equal(t, []uint64{5, 7, 9}, got)
	require.True(t, hk.Recovering(), "until every peer's replay is in")
	require.NoError(t, hk.Packet(&Packet{Kind: PktReplayed, From: 1, To: 0, Replayed: 1}))
	require.NoError(t, hk.Packet(&Packet{Kind: PktReplayed, From: 2, To: 0, Replayed: 2}))
	require.False(t, hk.Recovering())
	require.Equal(t, uint64(2), hk.Stats().ReplaysFrom)
	require.Equal(t, uint64(3), hk.Stats().ReplayedIn)
}

// A restarted PE names each peer once that peer sent it both its
// determinants and its replay, in the order they completed, and never
// twice: a loss of that peer may then wait for its recovery.
func TestRecoveryNamesThePeersThatSuppliedIt(t *testing.T) {
	hk := newHopNet(t, 4, 4, "camel").hooks[0]
	var s Supplied = hk
	hk.Restart(&Counters{IncMap: make([]uint32, 4)}, 1, nil, Rollback{})
	require.Empty(t, s.TakeSupplied())
	require.NoError(t, hk.Packet(&Packet{Kind: PktReplayed, From: 2, To: 0}))
	require.Empty(t, s.TakeSupplied(), "PE 2's determinants are not in")
	require.NoError(t, hk.Packet(&Packet{Kind: PktRecovery, From: 1, To: 0}))
	require.Empty(t, s.TakeSupplied(), "PE 1's replay is not in")
	require.NoError(t, hk.Packet(&Packet{Kind: PktRecovery, From: 2, To: 0}))
	require.NoError(t, hk.Packet(&Packet{Kind: PktRecovery, From: 3, To: 0}))
	require.NoError(t, hk.Packet(&Packet{Kind: PktReplayed, From: 1, To: 0}))
	require.NoError(t, hk.Packet(&Packet{Kind: PktReplayed, From: 1, To: 0}))
	require.Equal(t, []int32{2, 1}, s.TakeSupplied(), "a second end of PE 1's replay names it no more")
	require.True(t, hk.Recovering(), "PE 3's replay is not in")
	require.NoError(t, hk.Packet(&Packet{Kind: PktReplayed, From: 3, To: 0}))
	require.Equal(t, []int32{3}, s.TakeSupplied())
	require.False(t, hk.Recovering())
}

func TestSecondFailureDuringRecoveryIsReported(t *testing.T) {
	hk := newHopNet(t, 3, 4, "scmel").hooks[0]
	require.NoError(t, hk.PeerFailed(1, 1, nil))
	require.ErrorIs(t, hk.PeerFailed(2, 1, nil), ErrConcurrentFailure)
	hk.PeerRecovered(1)
	require.NoError(t, hk.PeerFailed(2, 1, nil))
	require.ErrorIs(t, hk.PeerFailed(1, 2, nil), ErrConcurrentFailure, "while 2 recovers")
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
		carried    uint64 // the last own reception sent on (0: the buffer's last)
	}{
		{"a prefix", dets(1, 9), dets(1, 4), dets(5, 9), 4, 0},
		{"all", dets(1, 9), dets(1, 9), nil, 9, 0},
		{"overlapping one already removed", dets(5, 9), dets(1, 7), dets(8, 9), 3, 0},
		{"removed already", dets(5, 9), dets(1, 4), dets(5, 9), 0, 0},
		{"beyond the buffer", dets(5, 9), dets(3, 12), nil, 5, 0},
		{"in the middle", dets(1, 9), dets(4, 6), append(dets(1, 3), dets(7, 9)...), 3, 0},
		{"not the same receptions", dets(5, 9), other, append(dets(5, 5), dets(7, 9)...), 1, 0},
		// a new incarnation made receptions 5..9 again and sent on 5..6:
		// a PE that stored 7..9 from the old one's messages acknowledges
		{"not sent on by this incarnation", dets(5, 9), dets(5, 9), dets(7, 9), 2, 6},
		{"none sent on by this incarnation", dets(5, 9), dets(5, 9), dets(5, 9), 0, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newCausal(0, 2, nil, false, LogLimit{})
			s.detBuf = slices.Clone(c.buf)
			s.carriedTop = c.carried
			if c.carried == 0 {
				s.noteCarried(s.detBuf)
			}
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
	s := newCausal(0, 6, nil, false, LogLimit{})
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
