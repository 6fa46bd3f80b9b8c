package ftlayer

import (
	"cmp"
	"slices"
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// spmdPair is a job of 4 PEs in teams {0-1} {2-3}: survivor PE 2 had an
// element's message from PE 0, and PE 0 (its team with it) restarted.
type spmdPair struct {
	teams    Teams
	survivor *SPMD
	names    ElementNames // the survivor's element that had the message
	orphan   pe.MsgName   // its name
	restart  *SPMD        // PE 0's new incarnation
}

// elemHop is hop csn from PE from (incarnation inc) to PE to of the
// element message named n, with phase phase.
func elemHop(from, to int32, csn uint64, inc uint32, phase uint64, n pe.MsgName) *pe.Envelope {
	return &pe.Envelope{Type: 7, Kind: pe.KindP2P, Src: from, FT: &pe.FTHeader{Sender: from, Recver: to, CSN: csn, Inc: inc, SSN: phase, Name: &n}}
}

func newSPMDPair(t *testing.T) *spmdPair {
	t.Helper()
	teams, err := BlockTeams(4, 2)
	require.NoError(t, err)
	sp := &spmdPair{teams: teams, survivor: NewSPMD(2, 4, teams)}
	sp.orphan = pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, Index: pe.Index{Dims: 1}, K: 3}, At: 0, AtInc: 0, Crossed: true}
	a, err := sp.survivor.Arrive(elemHop(0, 2, 1, 0, 5, sp.orphan), true, false)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	require.True(t, sp.survivor.DeliverTo(&sp.names, &pe.FTHeader{Sender: 0, Recver: 2, CSN: 1, SSN: 5, Name: &sp.orphan}))
	sp.restart = restartSPMD(NewSPMD(0, 4, teams), Counters{IncMap: make([]uint32, 4), RecvCSN: make([]uint64, 4)}, 1, []int32{0, 1})
	return sp
}

// packets returns the packets of kind k among acts.
func packets(acts []Action, k PacketKind) []Packet {
	var out []Packet
	for _, a := range acts {
		if a.Kind == ActSend && a.Packet.Kind == k {
			out = append(out, a.Packet)
		}
	}
	return out
}

// An orphan whose element is, in the re-execution, elsewhere (on a PE of
// the restarted team, before it migrates to the survivor again) is made
// again all the same: its maker tells the survivor that listed it, whose
// mark rises — whether the list came before the re-execution made it or
// after.
func TestSPMDOrphanMadeAgainWhereverItsCopyGoes(t *testing.T) {
	for _, listFirst := range []bool{true, false} {
		sp := newSPMDPair(t)
		acts := failAndAnnounce(t, sp.survivor, 0, 1)
		marks := packets(acts, PktMark)
		require.Len(t, marks, 1)
		require.Equal(t, uint64(6), marks[0].Covered, "waits for the orphan of phase 5")
		lists := packets(acts, PktOrphans)
		require.Len(t, lists, 1)
		require.Equal(t, []pe.MsgName{messageOf(sp.orphan)}, lists[0].Names)

		again := sp.orphan
		again.AtInc, again.Crossed = 1, false
		if listFirst {
			require.NoError(t, sp.restart.Receive(&lists[0]))
		}
		// the copy goes to a teammate, where the element is now
		_, err := sp.restart.Send(1, &again, &pe.Envelope{Type: 7})
		require.NoError(t, err)
		if !listFirst {
			require.Empty(t, packets(sp.restart.Marks(), PktMade), "no list yet: nobody to tell")
			require.NoError(t, sp.restart.Receive(&lists[0]))
		}
		made := packets(sp.restart.Marks(), PktMade)
		slices.SortFunc(made, func(a, b Packet) int { return cmp.Compare(b.To, a.To) })
		require.Len(t, made, 2, "list first: %v: the survivor that listed it, and the teammate", listFirst)
		require.Equal(t, []int32{2, 1}, []int32{made[0].To, made[1].To})
		require.Equal(t, []pe.MsgName{messageOf(sp.orphan)}, made[0].Names)
		require.Equal(t, []pe.MsgName{messageOf(sp.orphan)}, made[1].Names)
		require.Equal(t, uint64(1), sp.restart.Stats().OrphansMade)
		require.NoError(t, sp.restart.Receive(&lists[0]))
		require.Equal(t, uint64(1), sp.restart.Stats().OrphansMade, "counted once, however many list it")

		require.NoError(t, sp.survivor.Receive(&made[0]))
		rise := packets(sp.survivor.Marks(), PktMark)
		require.Len(t, rise, 1)
		require.Equal(t, uint64(allDone), rise[0].Covered, "no orphan left")
		require.Equal(t, uint64(1), sp.survivor.Stats().OrphansAgain)

		// a notice from an incarnation rolled back since is ignored
		sp2 := newSPMDPair(t)
		failAndAnnounce(t, sp2.survivor, 0, 2)
		require.NoError(t, sp2.survivor.Receive(&made[0]))
		require.Empty(t, packets(sp2.survivor.Marks(), PktMark))
	}
}

// A restarted PE takes a survivor's message held for an orphan as soon
// as its team made the orphan again — by itself, or a teammate that
// tells it — without waiting for the survivor to hear of it and raise
// its mark: a round trip less per rise.
func TestSPMDTeamCountsTheSurvivorsMarks(t *testing.T) {
	tests := []struct {
		name  string
		maker int32 // this PE (0) or its teammate (1)
		// noticeFirst: the teammate's notice comes before the list
		noticeFirst bool
	}{
		{"made here", 0, false},
		{"made by the teammate", 1, false},
		{"the teammate's notice before the list", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := newSPMDPair(t)
			acts := failAndAnnounce(t, sp.survivor, 0, 1)
			r := sp.restart
			_, err := r.PeerFailed(1, 1, nil) // the teammate's incarnation
			require.NoError(t, err)
			notice := Packet{Kind: PktMade, From: 1, To: 0, Inc: 1, Names: []pe.MsgName{messageOf(sp.orphan)}}
			if tt.noticeFirst {
				require.NoError(t, r.Receive(&notice))
			}
			for _, k := range []PacketKind{PktMark, PktOrphans} {
				require.NoError(t, r.Receive(&packets(acts, k)[0]))
			}
			require.NoError(t, r.Receive(&Packet{Kind: PktMark, From: 3, To: 0, Inc: 1, Covered: allDone}))

			later := pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, Index: pe.Index{Dims: 1, C: [pe.MaxDims]int32{2}}, K: 1}, At: 2}
			a, err := r.Arrive(elemHop(2, 0, 2, 0, 7, later), true, false)
			require.NoError(t, err)
			if tt.noticeFirst {
				require.Equal(t, Handle, a, "nothing left to wait for")
				require.Empty(t, packets(r.Marks(), PktMade), "its maker tells the survivor")
				return
			}
			require.Equal(t, Held, a, "phase 7 waits for the orphan of phase 5")
			_, ok := r.Next()
			require.False(t, ok)

			if tt.maker == 0 {
				again := sp.orphan
				again.AtInc, again.Crossed = 1, false
				_, err = r.Send(2, &again, &pe.Envelope{Type: 7})
				require.NoError(t, err)
			} else {
				require.NoError(t, r.Receive(&notice))
			}
			m, ok := r.Next()
			require.True(t, ok, "the survivor's mark has not risen yet")
			require.Equal(t, later, *m.Name)
		})
	}
}

// A message a restarted PE passes on is its maker's to tell of; one a
// survivor did not list needs no notice.
func TestSPMDOnlyTheMakerTellsOfListedOrphans(t *testing.T) {
	sp := newSPMDPair(t)
	acts := failAndAnnounce(t, sp.survivor, 0, 1)
	require.NoError(t, sp.restart.Receive(&packets(acts, PktOrphans)[0]))
	passed := sp.orphan
	passed.At, passed.AtInc = 1, 1 // PE 1's
	_, err := sp.restart.Send(2, &passed, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	other := sp.orphan
	other.Origin.K, other.AtInc = 4, 1
	_, err = sp.restart.Send(2, &other, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Empty(t, packets(sp.restart.Marks(), PktMade))
}

// Hints (location updates and queries) are not recognised again: a copy
// is harmless, and one an incarnation rolled back since made, passed on
// late by another PE, has the name its re-execution gives its own.
func TestSPMDHintsAreNeverDroppedAsCopies(t *testing.T) {
	teams, err := BlockTeams(4, 2)
	require.NoError(t, err)
	s := NewSPMD(2, 4, teams)
	hint := pe.MsgName{Kind: pe.NameHint, From: 0, Hash: 0xab, Num: 1}
	for csn, from := range []int32{0, 3, 0} {
		env := elemHop(from, 2, uint64(csn+1), 0, 1, hint)
		if from == 3 {
			env.FT.CSN = 1
		}
		a, err := s.Arrive(env, false, false)
		require.NoError(t, err)
		require.Equal(t, Handle, a, "copy %d", csn)
	}
	require.Empty(t, s.got, "nothing kept of hints")
}

// A copy of a message that waits at a recovering PE for its turn is
// dropped, and counted as processed (its sender counted it as sent); the
// same hop again (a replay of one still on its way) is not counted twice.
func TestSPMDCopyOfAHeldMessageIsCounted(t *testing.T) {
	sp := newSPMDPair(t)
	r := sp.restart
	// PE 2 says it waits for an orphan of phase 5: a message of phase
	// 9 waits
	require.NoError(t, r.Receive(&Packet{Kind: PktMark, From: 2, To: 0, Inc: 1, Covered: 6}))
	res := pe.MsgName{Kind: pe.NameContents, From: 2, Hash: 0x77, Num: 1, Crossed: true}
	a, err := r.Arrive(elemHop(2, 0, 1, 0, 9, res), false, false)
	require.NoError(t, err)
	require.Equal(t, Held, a)
	before := r.delta
	a, err = r.Arrive(elemHop(2, 0, 1, 0, 9, res), false, false)
	require.NoError(t, err)
	require.Equal(t, Dropped, a)
	require.Equal(t, before, r.delta, "the same hop: counted once, when taken")
	a, err = r.Arrive(elemHop(3, 0, 1, 0, 9, res), false, false)
	require.NoError(t, err)
	require.Equal(t, Dropped, a)
	require.Equal(t, before+1, r.delta, "another hop of it, counted as sent by PE 3: counted as processed")
	require.True(t, r.recv[3].has(1))
}

// A PE passing on a message named by its contents keeps its maker's
// number on it; one it makes is numbered on its channel.
func TestSPMDPassedOnContentsKeepTheirNumber(t *testing.T) {
	teams, err := BlockTeams(4, 2)
	require.NoError(t, err)
	s := NewSPMD(2, 4, teams)
	passed := pe.MsgName{Kind: pe.NameContents, From: 0, Hash: 0x11, Num: 1}
	for range 2 {
		h, err := s.Send(0, &passed, &pe.Envelope{Type: 7})
		require.NoError(t, err)
		require.Equal(t, uint64(1), h.Name.Num, "the broadcast its children had, relayed again")
	}
	own := pe.MsgName{Kind: pe.NameContents, From: 2, Hash: 0x11}
	for want := uint64(1); want <= 2; want++ {
		h, err := s.Send(0, &own, &pe.Envelope{Type: 7})
		require.NoError(t, err)
		require.Equal(t, want, h.Name.Num)
	}
}

// An element keeps the names of what it had from a teammate too: once
// it migrated to another team, a rollback of the team it left sends
// those messages again, and the element, now a survivor's, drops them.
func TestSPMDElementTakesItsTeammatesMessagesAlong(t *testing.T) {
	teams, err := BlockTeams(4, 2)
	require.NoError(t, err)
	inTeam := NewSPMD(1, 4, teams)
	n := pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, Index: pe.Index{Dims: 1}, K: 7}, At: 0}
	var names ElementNames
	require.True(t, inTeam.DeliverTo(&names, &pe.FTHeader{Sender: 0, Recver: 1, CSN: 1, Name: &n}))
	require.Equal(t, 1, names.Len())

	// the element migrated to PE 2 (with its names); PE 0 rolls back and
	// sends the message again
	survivor := NewSPMD(2, 4, teams)
	_, err = survivor.PeerFailed(0, 1, nil)
	require.NoError(t, err)
	again := n
	again.AtInc = 1
	require.False(t, survivor.DeliverTo(&names, &pe.FTHeader{Sender: 0, Recver: 2, CSN: 1, Inc: 1, Name: &again}), "had before it left")
}

// failAndAnnounce tells s that PE y failed and runs as incarnation inc
// (the launcher's notice), then that y restarted (its own announcement),
// and returns what s answers.
func failAndAnnounce(t *testing.T, s *SPMD, y int32, inc uint32) []Action {
	t.Helper()
	acts, err := s.PeerFailed(y, inc, nil)
	require.NoError(t, err)
	require.Empty(t, acts, "nothing before the restarted PE announces itself")
	require.NoError(t, s.Receive(&Packet{Kind: PktRestarted, From: y, To: s.me, Inc: inc}))
	return s.Marks()
}

// A restarted PE announces itself to every PE that did not roll back with
// it, and each answers by itself, once: its mark, its orphans, its log
// for it and the end of its replay — whether the launcher's notice of the
// failure came before the announcement, after it, or not at all.
func TestSPMDSurvivorsAnswerTheRestartedPEsOwnAnnouncement(t *testing.T) {
	for _, notice := range []string{"before", "after", "never"} {
		sp := newSPMDPair(t)
		// the survivor logged a message for PE 0 since the checkpoint
		_, err := sp.survivor.Send(0, &pe.MsgName{Kind: pe.NameContents, From: 2, Hash: 5}, &pe.Envelope{Type: 7})
		require.NoError(t, err)
		ann := sp.restart.Announce()
		var to []int32
		for _, a := range ann {
			require.Equal(t, PktRestarted, a.Packet.Kind)
			require.Equal(t, uint32(1), a.Packet.Inc)
			to = append(to, a.Packet.To)
		}
		require.Equal(t, []int32{2, 3}, to, "not its teammate, PE 1, which rolled back with it")

		if notice == "before" {
			acts, err := sp.survivor.PeerFailed(0, 1, nil)
			require.NoError(t, err)
			require.Empty(t, acts)
		}
		require.NoError(t, sp.survivor.Receive(&ann[0].Packet))
		acts := sp.survivor.Marks()
		require.Len(t, packets(acts, PktMark), 1, notice)
		require.Len(t, packets(acts, PktOrphans), 1, notice)
		require.Len(t, packets(acts, PktApp), 1, "the logged message, again")
		require.Len(t, packets(acts, PktReplayed), 1)
		require.Equal(t, []int32{0}, sp.survivor.failing)
		if notice == "after" {
			acts, err := sp.survivor.PeerFailed(0, 1, nil)
			require.NoError(t, err)
			require.Empty(t, acts)
		}
		require.NoError(t, sp.survivor.Receive(&ann[0].Packet))
		require.Empty(t, packets(sp.survivor.Marks(), PktApp), "answered once")
	}
}

// recoveringPE0 is PE 0 of 4, teams {0-1} {2-3}, restarted as
// incarnation 1 with its team: PEs 2 and 3 are its survivors.
func recoveringPE0(t testing.TB) *SPMD {
	teams, err := BlockTeams(4, 2)
	require.NoError(t, err)
	return restartSPMD(NewSPMD(0, 4, teams), Counters{IncMap: make([]uint32, 4), RecvCSN: make([]uint64, 4)}, 1, []int32{0, 1})
}

// survivorHop is hop csn of a message from survivor PE from to PE 0,
// named by its contents (hash), of phase phase.
func survivorHop(from int32, csn, hash, phase uint64) *pe.Envelope {
	n := pe.MsgName{Kind: pe.NameContents, From: from, Hash: hash}
	return &pe.Envelope{Type: 7, Kind: pe.KindP2P, Src: from, FT: &pe.FTHeader{Sender: from, Recver: 0, CSN: csn, SSN: phase, Name: &n}}
}

// A recovering PE's held messages come out lowest phase first, each once
// its phase is below every survivor's mark; while none is ready, a
// message held meanwhile changes nothing (Next looks only at it), and a
// copy of a held message, by another way, is dropped.
func TestSPMDHeldMessagesWaitForEveryMark(t *testing.T) {
	s := recoveringPE0(t)
	arrive := func(env *pe.Envelope, want Arrival) {
		t.Helper()
		a, err := s.Arrive(env, false, false)
		require.NoError(t, err)
		require.Equal(t, want, a)
	}
	next := func() int64 {
		t.Helper()
		m, ok := s.Next()
		if !ok {
			return -1
		}
		return int64(m.SSN)
	}
	mark := func(from int32, covered uint64) {
		t.Helper()
		require.NoError(t, s.Receive(&Packet{Kind: PktMark, From: from, To: 0, Inc: 1, Covered: covered}))
	}
	arrive(survivorHop(2, 1, 11, 7), Held)
	arrive(survivorHop(2, 2, 12, 5), Held)
	require.Equal(t, int64(-1), next(), "no mark yet")
	mark(2, 6)
	require.Equal(t, int64(-1), next(), "PE 3's mark has not come")
	mark(3, allDone)
	require.Equal(t, int64(5), next(), "below both marks")
	require.Equal(t, int64(-1), next(), "phase 7 waits for PE 2's orphan of phase 5")
	arrive(survivorHop(2, 3, 13, 9), Held)
	require.Equal(t, int64(-1), next())
	arrive(survivorHop(3, 1, 4, 2), Handle) // (below the marks: at once)
	copyOf := survivorHop(3, 2, 11, 7)
	copyOf.FT.Name.From = 2 // PE 2's message, passed on by PE 3
	arrive(copyOf, Dropped)
	for _, p := range []int32{2, 3} {
		require.NoError(t, s.Receive(&Packet{Kind: PktReplayed, From: p, To: 0, Inc: 1}))
	}
	require.True(t, s.Recovering(), "PE 2 waits for an orphan")
	mark(2, allDone)
	require.Equal(t, int64(7), next())
	require.Equal(t, int64(9), next())
	require.Equal(t, int64(-1), next())
	require.False(t, s.Recovering(), "every replay is in, and no survivor waits for an orphan")
	require.Equal(t, uint64(3), s.Stats().Held)
}

// BenchmarkSPMDRecoveryHeld: a recovering PE holds a survivor's log of
// b.N messages, which comes before its mark, the runtime asking for the
// next message after each (Next), then the mark lets them all go. Per
// message; it was quadratic in the messages held.
func BenchmarkSPMDRecoveryHeld(b *testing.B) {
	s := recoveringPE0(b)
	for i := range b.N {
		if a, err := s.Arrive(survivorHop(2, uint64(i+1), uint64(i), uint64(i%64)), false, false); err != nil || a != Held {
			b.Fatal(a, err)
		}
		if _, ok := s.Next(); ok {
			b.Fatal("a message before its mark")
		}
	}
	for _, p := range []int32{2, 3} {
		if err := s.Receive(&Packet{Kind: PktMark, From: p, To: 0, Inc: 1, Covered: allDone}); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		if _, ok := s.Next(); !ok {
			b.Fatal("a message held for ever")
		}
	}
}

// heldBehindAnOrphan is recoveringPE0 holding PE 2's message (named by
// its contents, hash 11) of phase 7, while PE 2 waits for an orphan of
// phase 5 and PE 3 for none.
func heldBehindAnOrphan(t *testing.T) *SPMD {
	t.Helper()
	s := recoveringPE0(t)
	a, err := s.Arrive(survivorHop(2, 1, 11, 7), false, false)
	require.NoError(t, err)
	require.Equal(t, Held, a)
	for p, covered := range map[int32]uint64{2: 6, 3: allDone} {
		require.NoError(t, s.Receive(&Packet{Kind: PktMark, From: p, To: 0, Inc: 1, Covered: covered}))
	}
	_, ok := s.Next()
	require.False(t, ok, "phase 7 waits for PE 2's orphan of phase 5")
	return s
}

// A held message whose phase its survivor lowers (PktPhase: its log
// sends the lower phase once it hears of it) is taken as soon as that
// puts it below the marks, though no mark moved and nothing else came:
// Next, which found none ready before, looks again.
func TestSPMDHeldMessageLoweredBelowTheMarks(t *testing.T) {
	s := heldBehindAnOrphan(t)
	name := pe.MsgName{Kind: pe.NameContents, From: 2, Hash: 11}
	require.NoError(t, s.Receive(&Packet{Kind: PktPhase, From: 2, To: 0, Inc: 1, Names: []pe.MsgName{name}, Phases: []uint64{4}}))
	m, ok := s.Next()
	require.True(t, ok, "lowered to phase 4, below PE 2's mark")
	require.Equal(t, uint64(4), m.SSN)
}

// An element's message made by a teammate's incarnation this PE has not
// heard of yet waits (a survivor's, before any mark); once this PE hears
// of that incarnation, restarting with it, the message is its team's and
// is taken at once, though no mark came: Next looks again.
func TestSPMDHeldMessageOfATeammatesNewIncarnation(t *testing.T) {
	s := recoveringPE0(t)
	n := pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, Index: pe.Index{Dims: 1}, K: 3}, At: 1, AtInc: 1}
	a, err := s.Arrive(elemHop(2, 0, 1, 0, 5, n), true, false)
	require.NoError(t, err)
	require.Equal(t, Held, a)
	_, ok := s.Next()
	require.False(t, ok, "a survivor's, and no mark yet")
	_, err = s.PeerFailed(1, 1, []int32{0, 1})
	require.NoError(t, err)
	m, ok := s.Next()
	require.True(t, ok, "made by PE 1's incarnation 1, which restarted with this PE")
	require.Equal(t, int32(2), m.Sender)
}

// restartedAtPhase5 is recoveringPE0 after a teammate's message of phase
// 5 (its re-execution ahead of its first), with the name of a message it
// makes, named by its contents, that survivor PE 2 had from its first
// execution with phase 2.
func restartedAtPhase5(t *testing.T) (*SPMD, pe.MsgName, Packet) {
	t.Helper()
	s := recoveringPE0(t)
	a, err := s.Arrive(&pe.Envelope{Type: 7, Kind: pe.KindP2P, Src: 1, FT: &pe.FTHeader{Sender: 1, Recver: 0, CSN: 1, Inc: 1, SSN: 5}}, false, false)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	own := pe.MsgName{Kind: pe.NameContents, From: 0, Hash: 0x5e}
	listed := own
	listed.Num = 1 // the first on its channel: part of its name
	return s, own, Packet{Kind: PktOrphans, From: 2, To: 0, Inc: 1, Names: []pe.MsgName{listed}, Phases: []uint64{2}}
}

// A survivor's list gives a restarted PE the phase its first execution
// gave each orphan, and the re-execution sends it with that phase, not
// its own higher one — for a message named by its contents too, whose
// number on its channel is part of the name the list has (the number is
// given as it is sent: looking the name up without it found nothing,
// and a survivor that failed later, before it told the log of the lower
// phase, was replayed the copy with phase 5, behind its own orphans of
// phases 3 and 4 that it could make only from it: ftsim's random
// trials, seeds 111, 606 and 808, stalled so).
func TestSPMDOrphanNamedByItsContentsKeepsItsFirstPhase(t *testing.T) {
	s, own, list := restartedAtPhase5(t)
	require.NoError(t, s.Receive(&list))
	h, err := s.Send(2, &own, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Equal(t, uint64(1), h.Name.Num)
	require.Equal(t, uint64(2), h.SSN, "its first execution's phase")
}

// An orphan a restarted PE made again before the survivor's list came
// went with the re-execution's phase; the list gives its log the first
// execution's, so a replay to the survivor, failing later, has it (the
// survivor would tell, dropping the copy, but may fail first).
func TestSPMDOrphanMadeBeforeTheListIsReplayedWithItsFirstPhase(t *testing.T) {
	s, own, list := restartedAtPhase5(t)
	h, err := s.Send(2, &own, &pe.Envelope{Type: 7})
	require.NoError(t, err)
	require.Equal(t, uint64(5), h.SSN, "no list yet")
	require.NoError(t, s.Receive(&list))

	acts := failAndAnnounce(t, s, 2, 1)
	app := packets(acts, PktApp)
	require.Len(t, app, 1)
	require.Equal(t, uint64(2), app[0].Msg.SSN, "replayed with its first phase")
	require.Equal(t, uint64(5), h.SSN, "the header sent is not changed (its receiver may read it still)")
}

// A broadcast's hop that comes again from a rolled-back root (its log
// replaying the hop that was on its way) is sent on down the tree by a
// PE that handled it already, for the PEs below that rolled back; one
// whose first copy still waits here for its turn is dropped — its copy
// goes down the tree when taken, after the broadcasts before it. Sent
// on at once, it overtook one held here, and a PE below that rolled back
// with this one had broadcast 6 after 4 (ftsim's random trials, seed
// 10, teams of one).
func TestSPMDBroadcastAgainIsRelayedOnlyOnceHandled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handled bool
		want    Arrival
	}{
		{"handled already", true, Relay},
		{"held for its turn", false, Dropped},
	} {
		teams, err := BlockTeams(4, 1)
		require.NoError(t, err)
		s := restartSPMD(NewSPMD(1, 4, teams), Counters{IncMap: make([]uint32, 4), RecvCSN: make([]uint64, 4)}, 1, []int32{1, 3})
		if tc.handled {
			for _, p := range []int32{0, 2} {
				require.NoError(t, s.Receive(&Packet{Kind: PktMark, From: p, To: 1, Inc: 1, Covered: allDone}))
			}
		}
		n := pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, Index: pe.Index{Dims: 1}, K: 11}, At: 0, AtInc: 1, Crossed: true}
		// PE 0's incarnation 1 (rolled back before): its hop 4, then
		// (handled) its re-execution's again, or (held) its log's replay
		// of the same hop
		hop := func(csn uint64) *pe.Envelope { return elemHop(0, 1, csn, 1, 10, n) }
		a, err := s.Arrive(hop(4), false, true)
		require.NoError(t, err)
		if tc.handled {
			require.Equal(t, Handle, a, tc.name)
		} else {
			require.Equal(t, Held, a, tc.name)
		}
		again := uint64(4)
		if tc.handled {
			again = 5
		}
		a, err = s.Arrive(hop(again), false, true)
		require.NoError(t, err)
		require.Equal(t, tc.want, a, tc.name)
	}
}

// A survivor that had a message, and has a copy of it again with a lower
// phase (a re-execution's, made in another order), tells the next
// incarnation of its maker the lower one: a PE below it in the
// broadcast's tree had that copy, made orphans of lower phases from it,
// and failed with it; stamped with the higher phase again, the
// broadcast waited at its next incarnation behind those orphans
// (ftsim's random trials, seed 15, teams of two).
func TestSPMDSurvivorListsAnOrphanWithTheLowestPhaseItHad(t *testing.T) {
	teams, err := BlockTeams(4, 2)
	require.NoError(t, err)
	s := NewSPMD(2, 4, teams)
	n := pe.MsgName{Kind: pe.NameContents, From: 0, Hash: 9, Num: 1}
	hop := func(inc uint32, phase uint64) *pe.Envelope {
		return &pe.Envelope{Type: 7, Kind: pe.KindP2P, Src: 0, FT: &pe.FTHeader{Sender: 0, Recver: 2, CSN: 1, Inc: inc, SSN: phase, Name: &n}}
	}
	a, err := s.Arrive(hop(0, 2), false, false)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	acts := failAndAnnounce(t, s, 0, 1)
	require.Equal(t, []uint64{2}, packets(acts, PktOrphans)[0].Phases)
	a, err = s.Arrive(hop(1, 0), false, false)
	require.NoError(t, err)
	require.Equal(t, Dropped, a, "had")
	acts = failAndAnnounce(t, s, 0, 2)
	orphans := packets(acts, PktOrphans)
	require.Len(t, orphans, 1)
	require.Equal(t, []uint64{0}, orphans[0].Phases, "the lower phase of the two it had")
}

// A recovering PE that holds a survivor's message, and gets another copy
// of it with a lower phase (another way), holds it with the lower: what
// the orphans it must make were made from may be that copy.
func TestSPMDHeldMessageTakesTheLowerPhaseOfACopy(t *testing.T) {
	s := heldBehindAnOrphan(t)
	copyFrom3 := survivorHop(2, 1, 11, 4)
	copyFrom3.FT.Sender = 3 // (PE 2's message, passed on by PE 3)
	a, err := s.Arrive(copyFrom3, false, false)
	require.NoError(t, err)
	require.Equal(t, Dropped, a)
	m, ok := s.Next()
	require.True(t, ok, "held with phase 4 now, below PE 2's mark")
	require.Equal(t, int32(2), m.Sender)
}

// The same for an element's message, which its element recognises.
func TestSPMDSurvivorListsAnElementsOrphanWithTheLowestPhaseItHad(t *testing.T) {
	sp := newSPMDPair(t)
	acts := failAndAnnounce(t, sp.survivor, 0, 1)
	require.Equal(t, []uint64{5}, packets(acts, PktOrphans)[0].Phases)
	again := sp.orphan
	again.AtInc = 1 // PE 0's re-execution's, with phase 3
	a, err := sp.survivor.Arrive(elemHop(0, 2, 1, 1, 3, again), true, false)
	require.NoError(t, err)
	require.Equal(t, Handle, a)
	require.False(t, sp.survivor.DeliverTo(&sp.names, &pe.FTHeader{Sender: 0, Recver: 2, CSN: 1, Inc: 1, SSN: 3, Name: &again}), "had")
	acts = failAndAnnounce(t, sp.survivor, 0, 2)
	require.Equal(t, []uint64{3}, packets(acts, PktOrphans)[0].Phases, "the lower phase of the two it had")
}
