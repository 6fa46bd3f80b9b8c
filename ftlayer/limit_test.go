package ftlayer

import (
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// gateRecord is a ChannelGate that records what it is asked and says
// what refuse says.
type gateRecord struct {
	asked  [][2]int
	on     []int
	refuse bool
}

func (g *gateRecord) StopLogging(me, dst int) bool {
	g.asked = append(g.asked, [2]int{me, dst})
	return !g.refuse
}
func (g *gateRecord) LoggingOn(me int) { g.on = append(g.on, me) }

// send has s send PE to a point-to-point message of size payload bytes.
func send(t *testing.T, s *Causal, to int32, size int) *pe.FTHeader {
	t.Helper()
	h, err := s.SendHop(to, RoleP2P, 0, 0, false, nil, &pe.Envelope{Type: 3, Kind: pe.KindP2P, Payload: make([]byte, size)})
	require.NoError(t, err)
	return h
}

func logged(s *Causal) map[int32]int {
	out := map[int32]int{}
	for _, e := range s.msgLog {
		out[e.m.Recver]++
	}
	return out
}

// Algorithm 1, lines 7–12 (papers/002): a send that would take the log
// past its limit first stops logging on the heaviest channel, which
// drops what it held; the channel's later messages are not logged, but
// carry determinants as before; the others are logged.
func TestALogPastItsLimitStopsLoggingOnTheHeaviestChannel(t *testing.T) {
	g := &gateRecord{}
	s := newCausal(0, 4, nil, false, LogLimit{Bytes: 1000, Gate: g})
	send(t, s, 1, 300)
	send(t, s, 1, 300)
	send(t, s, 2, 200)
	require.Equal(t, map[int32]int{1: 2, 2: 1}, logged(s))
	require.Nil(t, s.ChannelsOff())
	// a reception, so that sends carry a determinant
	_, err := s.ReceiveHop(p2p(3, 0, 1, 1, 0))
	require.NoError(t, err)
	send(t, s, 3, 250) // 800 + 250 > 1000: channel 1 (600 bytes) stops logging
	require.Equal(t, [][2]int{{0, 1}}, g.asked)
	require.Equal(t, []int32{1}, s.ChannelsOff())
	require.Equal(t, map[int32]int{2: 1, 3: 1}, logged(s))
	require.Equal(t, uint64(450), s.logBytes)
	h := send(t, s, 1, 500)
	require.NotEmpty(t, h.Dets, "an unlogged message carries determinants")
	require.Equal(t, map[int32]int{2: 1, 3: 1}, logged(s), "not logged")
	st := s.Stats()
	require.Equal(t, uint64(1), st.ChannelsOff)
	require.Equal(t, uint64(1), st.Unlogged.TotalMsgs)
	require.Equal(t, uint64(500), st.Unlogged.TotalBytes)
	require.Equal(t, uint64(800), st.PeakTotal, "the most held at once")
}

// The limit holds: after every send the log is under it, as long as a
// channel holds something to drop.
func TestTheLogStaysUnderItsLimit(t *testing.T) {
	s := newCausal(2, 6, nil, false, LogLimit{Bytes: 4096})
	sizes := []int{100, 700, 1500, 30, 900, 2000, 10, 400}
	for i := range 200 {
		to := int32(i * 7 % 6)
		if to == 2 {
			continue
		}
		send(t, s, to, sizes[i%len(sizes)])
		require.LessOrEqual(t, s.logBytes, uint64(4096), "send %d", i)
	}
	require.LessOrEqual(t, s.Stats().PeakTotal, uint64(4096))
	require.Zero(t, s.Stats().OverLimit)
}

// No channel stops logging while the launcher says no (a failure's
// rollback set is being recovered), while this PE replays to a recovering
// one, while a checkpoint is being taken, or on a PE exempt from the
// limit: the log passes the limit then, and the sends that found it so
// are counted.
func TestChannelsStopLoggingOnlyWhenNothingIsUnderWay(t *testing.T) {
	cases := []struct {
		name  string
		setup func(s *Causal, g *gateRecord)
	}{
		{"the launcher says no", func(s *Causal, g *gateRecord) { g.refuse = true }},
		{"a peer recovers", func(s *Causal, g *gateRecord) { _, _ = s.PeerFailed(3, 1, nil) }},
		{"a checkpoint is being taken", func(s *Causal, g *gateRecord) { s.Prepare() }},
		{"PE 0 of a balanced run", func(s *Causal, g *gateRecord) { s.lim.Exempt = true }},
	}
	for _, c := range cases {
		g := &gateRecord{}
		s := newCausal(0, 4, nil, false, LogLimit{Bytes: 500, Gate: g})
		c.setup(s, g)
		send(t, s, 1, 400)
		send(t, s, 2, 400)
		require.Nil(t, s.ChannelsOff(), c.name)
		require.Equal(t, map[int32]int{1: 1, 2: 1}, logged(s), c.name)
		require.Equal(t, uint64(1), s.Stats().OverLimit, c.name)
	}
}

// Logging starts again on every channel once a checkpoint's snapshot is
// taken (what is sent after it may be needed by a rollback to it); its
// commit tells the launcher and forgets the receptions it covers.
func TestLoggingStartsAgainAtTheCheckpoint(t *testing.T) {
	g := &gateRecord{}
	s := newCausal(0, 3, nil, false, LogLimit{Bytes: 300, Gate: g})
	_, err := s.ReceiveHop(p2p(2, 0, 1, 1, 0))
	require.NoError(t, err)
	send(t, s, 1, 200)
	send(t, s, 2, 200)
	require.Equal(t, []int32{1}, s.ChannelsOff())
	require.Len(t, s.lim.own, 1)
	s.Prepare()
	require.Nil(t, s.ChannelsOff(), "every channel logs from the snapshot on")
	send(t, s, 1, 50)
	require.Equal(t, map[int32]int{1: 1, 2: 1}, logged(s))
	s.Checkpoint()
	require.Equal(t, []int{0}, g.on)
	require.Equal(t, map[int32]int{1: 1}, logged(s), "what the snapshot covers is dropped")
	require.Empty(t, s.lim.own, "the receptions before the snapshot are forgotten")
}

// A PE rolled back with a failed one without failing (Fig. 5's Z)
// replays its receptions in the order they happened from its own
// memory, sends the failed PE the determinants it holds for it, and
// waits for the determinants of the PEs outside the set and of its
// fellows that kept theirs, and for the replays of those outside.
func TestAPERolledBackWithoutFailingKeepsItsDeterminants(t *testing.T) {
	// PEs 0..4; PE 3 failed; PEs 1 and 2 stopped logging to it (rollback
	// set {1,2,3}); PE 1 is the one here
	old := newCausal(1, 5, nil, false, LogLimit{Bytes: 1 << 20})
	for i, from := range []int32{0, 3, 4} {
		_, err := old.ReceiveHop(p2p(from, 1, uint64(10+i), 1, 0, Det{Sender: 0, Recver: 3, SSN: 5, RSN: uint64(i + 1)}))
		require.NoError(t, err)
	}
	kept := old.Keep()
	require.Len(t, kept.own, 3)
	require.NotEmpty(t, kept.detLog)

	s := restartCausal(newCausal(1, 5, nil, false, LogLimit{Bytes: 1 << 20}), Counters{IncMap: make([]uint32, 5)}, 1)
	s.withRollback(Rollback{Set: []int32{1, 2, 3}, Failed: []int32{3}, Kept: kept})
	require.Equal(t, 2, s.replayFrom, "PEs 0 and 4 replay")
	require.Equal(t, 3, s.collectFrom, "PEs 0 and 4, and PE 2, which kept its determinants")
	require.Equal(t, uint64(3), s.lastRecorded)
	require.Equal(t, uint64(1), s.recorded[msgKey{0, 0, 10}])
	require.Equal(t, uint64(3), s.recorded[msgKey{4, 0, 12}])

	acts, err := s.PeerFailed(3, 1, []int32{1, 2, 3})
	require.NoError(t, err)
	require.Len(t, acts, 2, "the determinants held for PE 3, and the own order to store")
	require.Equal(t, PktStore, acts[1].Packet.Kind)
	require.Equal(t, PktRecovery, acts[0].Packet.Kind)
	require.Equal(t, int32(3), acts[0].Packet.To)
	for _, d := range acts[0].Packet.Dets {
		require.Equal(t, int32(3), d.Recver)
	}
	require.NotEmpty(t, acts[0].Packet.Dets)
	acts, err = s.PeerFailed(3, 1, []int32{1, 2, 3})
	require.NoError(t, err)
	require.Empty(t, acts, "once")
	acts, err = s.PeerFailed(2, 1, []int32{1, 2, 3})
	require.NoError(t, err)
	require.Len(t, acts, 1, "PE 2 did not fail, but gets what this PE holds for it too")

	// the failed PE waits for the fellows that kept theirs
	f := restartCausal(newCausal(3, 5, nil, false, LogLimit{Bytes: 1 << 20}), Counters{IncMap: make([]uint32, 5)}, 1)
	f.withRollback(Rollback{Set: []int32{1, 2, 3}, Failed: []int32{3}})
	require.Equal(t, 4, f.collectFrom, "PEs 0 and 4 outside, PEs 1 and 2 inside")
	require.Equal(t, 2, f.replayFrom)
	acts, err = f.PeerFailed(1, 1, []int32{1, 2, 3})
	require.NoError(t, err)
	require.Empty(t, acts, "a failed PE holds nothing for its fellows")
}

// A PE rolled back without failing hands its own order to the first PE
// after it outside the rollback to store, and its recovery ends only
// once that PE answered; the order goes again to that PE's next
// incarnation, until a checkpoint covers it.
func TestAPERolledBackWithoutFailingHasItsOrderStored(t *testing.T) {
	// PEs 0..4; PE 3 failed; rollback set {1,2,3}; PE 1 here, which
	// received from PEs 0 and 4 (rsn 1 and 2)
	old := newCausal(1, 5, nil, false, LogLimit{Bytes: 1 << 20})
	for i, from := range []int32{0, 4} {
		_, err := old.ReceiveHop(p2p(from, 1, uint64(10+i), 1, 0))
		require.NoError(t, err)
	}
	s := restartCausal(newCausal(1, 5, nil, false, LogLimit{Bytes: 1 << 20}), Counters{IncMap: make([]uint32, 5)}, 1)
	s.withRollback(Rollback{Set: []int32{1, 2, 3}, Failed: []int32{3}, Kept: old.Keep()})
	acts, err := s.PeerFailed(3, 1, []int32{1, 2, 3})
	require.NoError(t, err)
	var store *Packet
	for _, a := range acts {
		if a.Packet.Kind == PktStore {
			store = &a.Packet
		}
	}
	require.NotNil(t, store, "the own order goes out to be stored")
	require.Equal(t, int32(4), store.To, "the first PE after this one outside the rollback")
	require.Equal(t, []Det{{Sender: 0, Recver: 1, SSN: 10, RSN: 1}, {Sender: 4, Recver: 1, SSN: 11, RSN: 2}}, store.Dets)

	// the rest of the recovery: determinants from PEs 0, 4 and 2, the
	// replays, the two recorded receptions
	for _, p := range []int32{0, 2, 4} {
		_, err := s.Receive(&Packet{Kind: PktRecovery, From: p, To: 1})
		require.NoError(t, err)
	}
	for i, from := range []int32{0, 4} {
		_, err := s.ReceiveHop(p2p(from, 1, uint64(10+i), 1, 0))
		require.NoError(t, err)
		_, err = s.Receive(&Packet{Kind: PktReplayed, From: from, To: 1})
		require.NoError(t, err)
	}
	require.Equal(t, uint64(2), s.rsn)
	require.True(t, s.Recovering(), "not before the order is stored")

	// PE 4 stores it and answers
	keeper := newCausal(4, 5, nil, false, LogLimit{Bytes: 1 << 20})
	answer, err := keeper.Receive(store)
	require.NoError(t, err)
	require.Equal(t, store.Dets, keeper.detLog)
	require.Len(t, answer, 1)
	require.Equal(t, Packet{Kind: PktStore, From: 4, To: 1}, answer[0].Packet)
	_, err = s.Receive(&Packet{Kind: PktStore, From: 2, To: 1})
	require.NoError(t, err)
	require.True(t, s.Recovering(), "an answer from another PE is not the one")
	_, err = s.Receive(&answer[0].Packet)
	require.NoError(t, err)
	require.False(t, s.Recovering())

	// PE 4 fails: its new incarnation gets the order again
	acts, err = s.PeerFailed(4, 1, []int32{4})
	require.NoError(t, err)
	require.Contains(t, acts, Action{Kind: ActSend, Packet: *store})
	s.Recovered(4)

	// a checkpoint past it drops it
	s.Prepare()
	s.Checkpoint()
	require.Nil(t, s.ownStored)
	acts, err = s.PeerFailed(4, 2, []int32{4})
	require.NoError(t, err)
	for _, a := range acts {
		require.NotEqual(t, PktStore, a.Packet.Kind)
	}
}

// A survivor replays to every PE of a rollback set, and a failure outside
// the set while it does is refused as concurrent.
func TestASurvivorReplaysToTheWholeSet(t *testing.T) {
	s := newCausal(0, 4, nil, false, LogLimit{})
	send(t, s, 1, 10)
	send(t, s, 2, 10)
	for _, y := range []int32{1, 2} {
		acts, err := s.PeerFailed(y, 1, []int32{1, 2})
		require.NoError(t, err)
		require.Equal(t, PktReplayed, acts[len(acts)-1].Packet.Kind)
		require.Len(t, acts, 3, "determinants, the message logged for it, the end of the replay")
	}
	_, err := s.PeerFailed(3, 1, []int32{3})
	require.ErrorIs(t, err, ErrConcurrentFailure)
	s.Recovered(1)
	s.Recovered(2)
	_, err = s.PeerFailed(3, 1, []int32{3})
	require.NoError(t, err)
}

// A message that alone would pass the limit, with nothing logged to drop,
// stops logging on its own channel and goes unlogged.
func TestAMessageLargerThanTheLimitGoesUnlogged(t *testing.T) {
	g := &gateRecord{}
	s := newCausal(0, 3, nil, false, LogLimit{Bytes: 100, Gate: g})
	send(t, s, 2, 500)
	require.Equal(t, []int32{2}, s.ChannelsOff())
	require.Empty(t, s.msgLog)
	require.Zero(t, s.Stats().OverLimit)
	send(t, s, 1, 60)
	send(t, s, 1, 30)
	require.Equal(t, map[int32]int{1: 2}, logged(s), "the others still log")
}
