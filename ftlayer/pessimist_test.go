package ftlayer

import (
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

func TestTheEventStore(t *testing.T) {
	st := NewEventStore(3)
	require.NoError(t, st.Commit(1, []Event{{Seq: 1, Sender: 0}, {Seq: 4, Sender: 2}}, 5))
	// a recovering PE commits again what the log holds: skipped
	require.NoError(t, st.Commit(1, []Event{{Seq: 4, Sender: 2}, {Seq: 7, Sender: 0}}, 8))
	evs, covered, err := st.Events(1, 0)
	require.NoError(t, err)
	require.Equal(t, []Event{{1, 0}, {4, 2}, {7, 0}}, evs)
	require.Equal(t, uint64(8), covered)
	evs, _, err = st.Events(1, 4)
	require.NoError(t, err)
	require.Equal(t, []Event{{7, 0}}, evs)
	// a commit covering less than before keeps the most
	require.NoError(t, st.Commit(1, nil, 6))
	_, covered, _ = st.Events(1, 0)
	require.Equal(t, uint64(8), covered)
	st.Truncate(1, 4)
	evs, _, _ = st.Events(1, 0)
	require.Equal(t, []Event{{7, 0}}, evs)
	require.Equal(t, 1, st.Held(1))
	st.Reset()
	evs, covered, _ = st.Events(1, 0)
	require.Empty(t, evs)
	require.Zero(t, covered)

	for _, c := range []struct {
		name string
		pe   int32
		evs  []Event
		err  string
	}{
		{"a PE outside the job", 3, nil, "event log: PE 3 out of range 0..2"},
		{"a sender outside the job", 0, []Event{{1, 5}}, "event log: PE 0's event 0 names sender 5, outside 0..2"},
		{"out of order", 0, []Event{{3, 1}, {2, 1}}, "event log: PE 0's events out of order (delivery 2 after 3)"},
		{"past what the commit covers", 0, []Event{{9, 1}}, "event log: PE 0's event at delivery 9, past the 5 its commit covers"},
	} {
		require.EqualError(t, st.Commit(c.pe, c.evs, 5), c.err, c.name)
	}
	_, _, err = st.Events(-1, 0)
	require.Error(t, err)

	// the launcher's: the same, a lock a PE
	ml := NewMemEventLog(3)
	require.NoError(t, ml.Commit(2, []Event{{1, 0}, {3, 1}}, 4, nil))
	require.NoError(t, ml.Commit(1, []Event{{1, 2}}, 1, []Cover{{PE: 0, Covered: 6}}))
	evs, covered, err = ml.Events(2, 1)
	require.NoError(t, err)
	require.Equal(t, []Event{{3, 1}}, evs)
	require.Equal(t, uint64(4), covered)
	_, covered, _ = ml.Events(0, 0)
	require.Equal(t, uint64(6), covered, "a count PE 1 committed for PE 0")
	ml.Truncate(2, 3)
	evs, _, _ = ml.Events(2, 0)
	require.Empty(t, evs)
	require.EqualError(t, ml.Commit(3, nil, 1, nil), "event log: PE 3 out of range 0..2")
	require.EqualError(t, ml.Commit(0, []Event{{2, 1}, {1, 1}}, 2, nil), "event log: PE 0's events out of order (delivery 1 after 2)")
	ml.Reset()
	evs, covered, _ = ml.Events(1, 0)
	require.Empty(t, evs)
	require.Zero(t, covered)
}

// pessimistEnv is a point-to-point envelope from PE from to PE to,
// numbered csn on their channel, sent by from's incarnation inc.
func pessimistEnv(from, to int32, csn uint64, inc uint32) *pe.Envelope {
	return &pe.Envelope{Type: 7, Kind: pe.KindP2P, Src: from, FT: &pe.FTHeader{Sender: from, Recver: to, CSN: csn, Inc: inc}}
}

// The refined model: a delivery from the sender of the delivery before
// it is no event; a send to another PE after deliveries commits the
// events since the last commit and how far the deliveries went; a send
// to the PE itself, or with nothing delivered since, commits nothing.
func TestPessimistEventsAreRunsAndCommitsComeBeforeSends(t *testing.T) {
	s := NewPessimist(0, 3)
	for _, m := range []*pe.Envelope{pessimistEnv(1, 0, 1, 0), pessimistEnv(1, 0, 2, 0), pessimistEnv(2, 0, 1, 0)} {
		a, err := s.Arrive(m)
		require.NoError(t, err)
		require.Equal(t, Handle, a)
	}
	_, commit, err := s.Send(0, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Nil(t, commit, "to itself: nothing outside sees it")
	_, commit, err = s.Send(1, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Equal(t, &Commit{Events: []Event{{1, 1}, {3, 2}}, Covered: 3}, commit)
	require.Equal(t, uint64(3), s.Committed())
	_, commit, err = s.Send(2, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Nil(t, commit, "nothing delivered since")
	a, err := s.Arrive(pessimistEnv(2, 0, 2, 0))
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	_, commit, err = s.Send(1, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.NotNil(t, commit)
	require.Empty(t, commit.Events, "the same run: only how far it went")
	require.Equal(t, uint64(4), commit.Covered)
	require.Equal(t, uint64(4), s.Committed())
	st := s.Stats()
	require.Equal(t, uint64(4), st.Deliveries)
	require.Equal(t, uint64(2), st.Events)
	require.Equal(t, uint64(2), st.Commits)
	require.Equal(t, []EntryEvents{{Type: 7, Deliveries: 4, Events: 2}}, st.Entries)
	require.Equal(t, uint64(3), st.Log[KindP2P].TotalMsgs, "what went to other PEs is logged")
}

// A send whose destination sent every delivery since the last commit,
// none of them an event, commits nothing: the count goes with the
// message, and its receiver holds it, commits it for the sender before
// it sends elsewhere, and hands it back when the sender restarts; the
// restarted sender delivers past its log only once every survivor has.
func TestPessimistASendBackToTheRunsSenderCommitsNothing(t *testing.T) {
	a := NewPessimist(0, 3)
	arrive := func(s *Pessimist, env *pe.Envelope) {
		t.Helper()
		got, err := s.Arrive(env)
		require.NoError(t, err)
		require.Equal(t, Handle, got)
	}
	arrive(a, pessimistEnv(1, 0, 1, 0))
	hdr, commit, err := a.Send(1, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Equal(t, &Commit{Events: []Event{{1, 1}}, Covered: 1}, commit, "an event: committed")
	require.Zero(t, hdr.Safe)
	arrive(a, pessimistEnv(1, 0, 2, 0))
	arrive(a, pessimistEnv(1, 0, 3, 0))
	hdr, commit, err = a.Send(1, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Nil(t, commit, "PE 1's run goes on, and PE 1 gets the count")
	require.Equal(t, uint64(3), hdr.Safe)
	require.Equal(t, uint64(1), a.Committed())
	require.Equal(t, uint64(1), a.Stats().CommitsSpared)
	_, commit, err = a.Send(2, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Empty(t, commit.Events)
	require.Equal(t, uint64(3), commit.Covered, "elsewhere: committed")

	// PE 1 delivers it, holds the count, and commits it for PE 0 with its
	// own next commit (a send to PE 2)
	b := NewPessimist(1, 3)
	env := pessimistEnv(0, 1, 1, 0)
	env.FT.Safe = 3
	arrive(b, env)
	_, commit, err = b.Send(2, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Equal(t, []Cover{{PE: 0, Covered: 3}}, commit.Others)
	env = pessimistEnv(0, 1, 2, 0)
	arrive(b, env)
	_, commit, err = b.Send(2, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Empty(t, commit.Others, "committed already")

	// PE 0 restarts from the start: its log has the event at 1 and a
	// count of 1; PE 1, surviving, hands back 3; PE 0 delivers PE 1's
	// messages up to 3, and PE 2's, which came first, only after that
	acts, err := b.PeerFailed(0, 1, nil)
	require.NoError(t, err)
	end := acts[len(acts)-1].Packet
	require.Equal(t, PktReplayed, end.Kind)
	require.Equal(t, uint64(3), end.Covered)
	r := restartPessimist(NewPessimist(0, 3), Counters{IncMap: make([]uint32, 3), SendCSN: make([]uint64, 3)}, 1, nil, []Event{{1, 1}}, 1)
	got, err := r.Arrive(pessimistEnv(1, 0, 1, 0))
	require.NoError(t, err)
	require.Equal(t, Handle, got, "the log's order")
	got, err = r.Arrive(pessimistEnv(2, 0, 1, 0))
	require.NoError(t, err)
	require.Equal(t, Held, got, "past the log, before every survivor's count is in")
	got, err = r.Arrive(pessimistEnv(1, 0, 2, 0))
	require.NoError(t, err)
	require.Equal(t, Held, got)
	require.NoError(t, r.Receive(&Packet{Kind: PktReplayed, From: 2, To: 0}))
	_, ok := r.Next()
	require.False(t, ok, "PE 1's count is not in")
	require.NoError(t, r.Receive(&end))
	m, ok := r.Next()
	require.True(t, ok)
	require.Equal(t, int32(1), m.Sender, "PE 1's count: its run goes on")
	got, err = r.Arrive(pessimistEnv(2, 0, 2, 0))
	require.NoError(t, err)
	require.Equal(t, Held, got)
	got, err = r.Arrive(pessimistEnv(1, 0, 3, 0))
	require.NoError(t, err)
	require.Equal(t, Handle, got)
	m, ok = r.Next()
	require.True(t, ok)
	require.Equal(t, int32(2), m.Sender, "past the count: free")
}

// Arrivals out of channel order, copies and an old incarnation's
// messages: held, dropped, dropped.
func TestPessimistKeepsEachChannelsOrder(t *testing.T) {
	s := NewPessimist(0, 3)
	a, err := s.Arrive(pessimistEnv(1, 0, 2, 0))
	require.NoError(t, err)
	require.Equal(t, Held, a)
	a, _ = s.Arrive(pessimistEnv(1, 0, 2, 0))
	require.Equal(t, Dropped, a, "a copy of one held")
	a, _ = s.Arrive(pessimistEnv(1, 0, 1, 0))
	require.Equal(t, Handle, a)
	m, ok := s.Next()
	require.True(t, ok)
	require.Equal(t, uint64(2), m.CSN)
	_, ok = s.Next()
	require.False(t, ok)
	a, _ = s.Arrive(pessimistEnv(1, 0, 2, 0))
	require.Equal(t, Dropped, a, "a copy of one delivered")
	_, err = s.PeerFailed(1, 1, nil)
	require.NoError(t, err)
	a, _ = s.Arrive(pessimistEnv(1, 0, 3, 0))
	require.Equal(t, Dropped, a, "the failed incarnation's")
	_, err = s.Arrive(pessimistEnv(7, 0, 1, 0))
	require.Error(t, err)
}

// A restarted PE delivers what reaches it in the logged order up to what
// its commits covered (a run's sender alone, whatever else came first),
// then freely; its recovery ends once every survivor's replay is in.
func TestPessimistReplaysTheLoggedOrder(t *testing.T) {
	// PE 0 delivered 1's first two messages, then 2's first, then 1's
	// third: events at 1 (from 1), 3 (from 2), 4 (from 1); covered 4
	evs := []Event{{1, 1}, {3, 2}, {4, 1}}
	s := restartPessimist(NewPessimist(0, 3), Counters{IncMap: make([]uint32, 3), SendCSN: make([]uint64, 3)}, 1, nil, evs, 4)
	require.True(t, s.Recovering())
	order := []*pe.Envelope{pessimistEnv(2, 0, 1, 0), pessimistEnv(2, 0, 2, 0), pessimistEnv(1, 0, 1, 0), pessimistEnv(1, 0, 2, 0), pessimistEnv(1, 0, 3, 0)}
	var got [][2]uint64
	for _, env := range order {
		a, err := s.Arrive(env)
		require.NoError(t, err)
		if a == Handle {
			got = append(got, [2]uint64{uint64(env.FT.Sender), env.FT.CSN})
		}
		for m, ok := s.Next(); ok; m, ok = s.Next() {
			got = append(got, [2]uint64{uint64(m.Sender), m.CSN})
		}
	}
	// 1,1  1,2  2,1  1,3 in the log's order; 2's second is free, but
	// only once every survivor's replay is in (one may hold a count
	// past the log's: see Send)
	require.Equal(t, [][2]uint64{{1, 1}, {1, 2}, {2, 1}, {1, 3}}, got)
	require.True(t, s.Recovering(), "the survivors' replays are not in")
	require.NoError(t, s.Receive(&Packet{Kind: PktReplayed, From: 1, To: 0, Replayed: 3}))
	require.True(t, s.Recovering())
	_, ok := s.Next()
	require.False(t, ok)
	require.NoError(t, s.Receive(&Packet{Kind: PktReplayed, From: 2, To: 0, Replayed: 2}))
	st := s.Stats()
	require.Equal(t, uint64(2), st.ReplaysFrom, "the survivors whose replay came")
	require.Equal(t, uint64(5), st.ReplayedIn, "what they said they sent again")
	m, ok := s.Next()
	require.True(t, ok)
	require.Equal(t, [2]uint64{2, 2}, [2]uint64{uint64(m.Sender), m.CSN})
	_, _ = s.Next()
	require.False(t, s.Recovering())
	// no event again for what the log holds; one for the free delivery
	require.Equal(t, []Event{{5, 2}}, s.pending)
	require.Error(t, s.Receive(&Packet{Kind: PktAck, From: 1, To: 0}))
}

// A PE restarted with others: they are not survivors (no replay comes
// from them, and it replays nothing to them), until its recovery ends —
// a later failure of one of them is one of its own.
func TestPessimistPEsRestartedTogether(t *testing.T) {
	ck := Counters{IncMap: make([]uint32, 3), SendCSN: make([]uint64, 3)}
	s := restartPessimist(NewPessimist(0, 3), ck, 1, []int32{0, 2}, nil, 0)
	acts, err := s.PeerFailed(2, 1, []int32{0, 2})
	require.NoError(t, err)
	require.Empty(t, acts)
	require.NoError(t, s.Receive(&Packet{Kind: PktReplayed, From: 2, To: 0}))
	require.True(t, s.Recovering())
	require.NoError(t, s.Receive(&Packet{Kind: PktReplayed, From: 1, To: 0}))
	_, _ = s.Next()
	require.False(t, s.Recovering())
	_, _, err = s.Send(2, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	acts, err = s.PeerFailed(2, 2, nil)
	require.NoError(t, err)
	require.Len(t, acts, 2, "its log to PE 2, then the marker")
	require.Equal(t, PktApp, acts[0].Packet.Kind)
	require.Equal(t, PktReplayed, acts[1].Packet.Kind)
	require.Equal(t, uint64(1), acts[1].Packet.Replayed, "the marker counts what it follows")
}

// A checkpoint: arrivals wait for its commit; the commit drops the log
// it covers and makes the next delivery an event.
func TestPessimistCheckpoint(t *testing.T) {
	s := NewPessimist(0, 2)
	a, _ := s.Arrive(pessimistEnv(1, 0, 1, 0))
	require.Equal(t, Handle, a)
	_, _, err := s.Send(1, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	ck := s.Prepare()
	require.Equal(t, uint64(1), ck.RSN)
	a, _ = s.Arrive(pessimistEnv(1, 0, 2, 0))
	require.Equal(t, Held, a)
	_, ok := s.Next()
	require.False(t, ok)
	require.Equal(t, uint64(1), s.Checkpoint())
	require.Empty(t, s.msgLog)
	m, ok := s.Next()
	require.True(t, ok)
	require.Equal(t, uint64(2), m.CSN)
	require.Equal(t, []Event{{2, 1}}, s.pending, "the first delivery after a checkpoint is an event")
}

func TestSentRecordsAreReusedOnceACheckpointCoversThem(t *testing.T) {
	for _, c := range []struct {
		name     string
		sent     int // records taken before the release
		upTo     int // release's mark
		reused   int // chunks that go back to be used again
		inUseNow int
	}{
		{"one chunk, being filled", 5, 5, 0, 1},
		{"a full chunk stays while it is the one being filled", recordChunk, recordChunk, 0, 1},
		{"a full chunk goes once the next one is used", recordChunk + 1, recordChunk, 1, 1},
		{"a chunk not wholly covered stays", 2*recordChunk + 1, 2*recordChunk - 1, 1, 2},
		{"every chunk but the last", 3*recordChunk + 4, 3*recordChunk + 4, 3, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r sentRecords
			var taken []*hopMsg
			for i := 0; i < c.sent; i++ {
				hm := r.take()
				hm.env.Payload = i
				taken = append(taken, hm)
			}
			r.release(uint64(c.upTo))
			require.Equal(t, c.reused, len(r.free), "chunks taken back")
			require.Equal(t, c.inUseNow, len(r.chunks), "chunks in use")
			require.Equal(t, uint64(c.reused*recordChunk), r.first)
			for _, f := range r.free {
				for i := range f {
					require.Nil(t, f[i].env.Payload, "a chunk taken back keeps no payload alive")
				}
			}
			// what is handed out next: the rest of the chunk being filled,
			// then the chunks taken back, before any new one
			left := recordChunk - c.sent%recordChunk
			if c.sent%recordChunk == 0 {
				left = 0
			}
			for i := 0; i < left; i++ {
				r.take()
			}
			if c.reused > 0 {
				require.Same(t, &r.free[c.reused-1][0], r.take())
				require.Equal(t, uint64(recordChunk), r.reused)
			}
			for i := c.reused * recordChunk; i < len(taken); i++ {
				require.Equal(t, i, taken[i].env.Payload, "a record not covered is kept as it was")
			}
		})
	}
}

func TestPessimistTakesNoRecordBackWhileItReplays(t *testing.T) {
	s := NewPessimist(0, 2)
	for i := 0; i < recordChunk+1; i++ {
		_, _, err := s.Send(1, &pe.Envelope{Type: 7})
		require.NoError(t, err)
	}
	acts, err := s.PeerFailed(1, 1, nil)
	require.NoError(t, err)
	require.Len(t, acts, recordChunk+2, "the log's messages, then the end of the replay")
	s.Prepare()
	s.Checkpoint()
	require.Zero(t, len(s.records.free), "copies replayed to PE 1 may still be on their way")
	s.Recovered(1)
	s.Prepare()
	s.Checkpoint()
	require.Equal(t, 1, len(s.records.free))
}

// A run that checkpoints sends and receives under pessimist logging
// without allocating.
func TestPessimistSendsWithoutAllocatingBetweenCheckpoints(t *testing.T) {
	events := NewMemEventLog(2)
	hooks := [2]*PessimistHook{}
	for i := range hooks {
		hooks[i] = NewPessimistHook(i, 2, func(int, *Packet) {}, events)
	}
	i := 0
	round := func(msgs int) {
		for k := 0; k < msgs; k++ {
			from := i % 2
			i++
			env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Src: int32(from), Seq: uint64(i)}
			if err := hooks[from].Send(1-from, RoleP2P, 0, 0, false, &env); err != nil {
				t.Fatal(err)
			}
			if a, err := hooks[1-from].Arrive(&env); a != Handle || err != nil {
				t.Fatal(a, err)
			}
		}
		for _, h := range hooks {
			h.Prepare()
		}
		for _, h := range hooks {
			h.Checkpoint()
		}
	}
	busy := func() { round(6 * recordChunk) }
	busy()
	busy() // the chunks and slices grow to a round's size
	require.Equal(t, testing.AllocsPerRun(5, func() { round(0) }), testing.AllocsPerRun(5, busy),
		"a checkpoint allocates (its counters), the messages between two do not")
}

// A PE restarted again (its incarnation 2) does not count the end of a
// replay a survivor sent its incarnation 1: it waits for the one sent to
// it (the survivor answers each incarnation's failure with a replay).
func TestPessimistCountsOnlyItsIncarnationsReplays(t *testing.T) {
	r := restartPessimist(NewPessimist(0, 3), Counters{IncMap: make([]uint32, 3), SendCSN: make([]uint64, 3)}, 2, nil, nil, 0)
	require.True(t, r.Recovering())
	for _, from := range []int32{1, 2} {
		require.NoError(t, r.Receive(&Packet{Kind: PktReplayed, From: from, To: 0, Inc: 1}))
	}
	require.True(t, r.Recovering(), "the replays of incarnation 1")
	for _, from := range []int32{1, 2} {
		require.NoError(t, r.Receive(&Packet{Kind: PktReplayed, From: from, To: 0, Inc: 2}))
	}
	require.False(t, r.Recovering())

	// what a survivor sends: the end of the replay names the incarnation
	s := NewPessimist(1, 3)
	acts, err := s.PeerFailed(0, 2, nil)
	require.NoError(t, err)
	require.Equal(t, PktReplayed, acts[len(acts)-1].Packet.Kind)
	require.Equal(t, uint32(2), acts[len(acts)-1].Packet.Inc)
}
