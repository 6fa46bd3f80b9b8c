package ftlayer

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/charmgo/charmgo/ftlayer/mcml"
	"github.com/charmgo/charmgo/pe"
)

// SPMD is one PE's message logging without determinants (docs/SPMD.md;
// papers/004, after HydEE): PEs are grouped in teams, which checkpoint
// together; a message to another team is logged by its sender and named
// (pe.MsgName) the same way in every execution of a program whose
// elements send the same messages whatever order theirs arrive in; no
// message carries a determinant. A failure rolls the failed PE's team
// back to the last checkpoint and nobody else. The team re-executes in
// whatever order its messages come, and nobody steers its recovery:
//
//   - every survivor, told a PE rolled back, sends it what it logged for
//     it since the checkpoint, says when that is all (PktReplayed), and
//     tells it the lowest phase among the messages it had from a
//     rolled-back PE and has not had again from the re-execution (its
//     orphans: PktMark), again each time that rises;
//   - a survivor drops a message whose name it had since the checkpoint
//     (an orphan sent again, by whatever way it comes);
//   - a recovering PE takes a survivor's message only when no survivor
//     waits for an orphan of a lower phase (the message cannot depend on
//     what the re-execution has yet to send), its teammates' at once.
//
// Phases are the paper's sections, counted by the runtime: a PE's phase
// rises to a delivered message's (from a teammate) or past it (from
// another team), and a message carries its sender's. They start again
// from zero at each checkpoint, which finds every PE quiet.
type SPMD struct {
	me      int32
	n       int
	inc     uint32
	teams   Teams
	incMap  []uint32
	sendCSN []uint64 // per destination, this incarnation's numbers
	// recv: per sender, the numbers of the hops from its incarnation
	// this PE took: a hop that comes twice (its original and a survivor's
	// log sending it again, which was not counted as sent) is dropped
	// the second time, uncounted
	recv  []window
	phase uint64
	senderLog
	// got: the names of the messages from other teams this PE handled
	// since the checkpoint (and of those its elements got: DeliverTo);
	// repeating: a PE rolled back since the checkpoint (this one, or
	// another), so copies of messages had may come, and got is asked
	got       gotLog
	repeating bool
	occur     map[occurKey]uint64 // NameContents names sent, by destination and contents
	sealed    bool                // a snapshot was taken and its commit has not come: arrivals are held
	mark      uint64              // the log's last entry the snapshot covers
	// rolled: per PE, whether it rolled back since the checkpoint
	rolled []bool

	// as a restarted PE: the PEs that rolled back with it (itself
	// included; nil: it never restarted), and the incarnation each
	// restarted as then (setInc: one that restarts again later, without
	// this PE, leaves the set: see failedAgain)
	set    []bool
	setInc []uint32
	// redoing: this PE restarted since the checkpoint
	redoing    bool
	recovering bool
	// survivor: the PEs it waits for (not rolled back when it learnt of
	// them); their mark (noMark: none yet) and whether their replay is
	// complete
	survivor []bool
	markOf   []uint64
	replayed []bool
	held     []*Message
	// heldNames counts the held messages a PE recognises by name (not an
	// element's, not a hint), by key: heldCopy looks through held only
	// when one is there. A survivor's log comes in a burst of hundreds,
	// and looking at every held message for each was quadratic.
	heldNames map[pe.MsgName]int
	// gateEpoch counts the changes, besides marks, sealing and the end
	// of a recovery, that may make a held message ready: an incarnation,
	// a PE into or out of the rolled-back set or the survivors, teams, a
	// phase lowered. blocked: the last Next found none ready, under
	// blockedAt; unseen: the messages held since it looked. Next is
	// called after every message handled, and while a recovering PE
	// waits for marks it found nothing each time, looking at all of them.
	gateEpoch uint64
	blocked   bool
	blockedAt heldGate
	unseen    []*Message

	// as a survivor: the rolled-back PEs recovering, which hear of its
	// orphans; the orphans not had again, by phase; the mark sent last
	failing  []int32
	orphans  map[uint64]int
	sentMark uint64

	// again: per PE, the names of messages it passed on to this PE and
	// that came again by another way (PktAgain), not sent yet
	again map[int32][]againName
	// lower: per PE, the messages it sent again with a higher phase than
	// their copy had here, and that phase (PktPhase), not sent yet
	lower map[int32]*Packet
	// lowered: logged messages whose phase a receiver lowered (PktPhase);
	// their headers may be read by receivers still, and are not changed:
	// a replay sends a copy with the lower phase
	lowered map[*Message]uint64
	// lowerTo: lower phases of messages still to come from their senders'
	// logs, to this recovering PE (lowerHeld)
	lowerTo map[lowerKey]uint64
	// firstPhase: the phases the first execution gave the messages this
	// restarted PE's re-execution sends again (PktOrphans)
	firstPhase map[pe.MsgName]uint64
	// as a restarted PE: the survivors that listed each orphan
	// (PktOrphans, by messageOf) not made again yet, with the phase each
	// gave it; what this incarnation (or a teammate's) made while a
	// survivor's list may still be on its way (nil once every
	// survivor's replay is in); per PE, the orphans made again here, to
	// tell it (PktMade: a survivor that listed them, the teammates)
	listedBy map[pe.MsgName][]listing
	made     map[pe.MsgName]madeState
	madeFor  map[int32][]pe.MsgName
	// as a restarted PE, per survivor: whether its list came, the
	// orphans of its list that no PE of this team made again yet, by
	// phase, and the mark they give (teamMark): what the survivor's own
	// mark will say once it hears of what this team made, known here a
	// round trip sooner
	listIn    []bool
	pendingOf []map[uint64]int
	teamMark  []uint64
	// as a survivor: the keys of its orphans, by message (PktMade); the
	// incarnation of each PE it answered last (PktRestarted); what it
	// answered and has not sent yet
	orphanKeys map[pe.MsgName][]pe.MsgName
	answered   []uint32
	pending    []Action
	// processedFrom: per PE, the messages from it this PE counted as
	// processed since the checkpoint (or since the PE's last rollback);
	// delta: the correction of the runtime's count not yet taken
	// (Counter)
	processedFrom []uint64
	delta         int64

	vol   []uint64 // payload bytes sent to each PE since TakeVolume
	stats Stats
}

// madeByGone reports an element's message (or a reduction's result)
// made by an incarnation of its first PE that has rolled back since.
func (s *SPMD) madeByGone(n *pe.MsgName) bool {
	if k := n.Kind; k != pe.NameOrigin && k != pe.NameResult || n.At < 0 || int(n.At) >= s.n || n.At == s.me {
		return false
	}
	return n.AtInc < s.incMap[n.At]
}

// madeHere reports an element's message made by the present incarnation
// of a PE that rolled back with this one: the re-execution's own, which
// a survivor passed on, delivered as a teammate's is.
func (s *SPMD) madeHere(n *pe.MsgName) bool {
	if k := n.Kind; k != pe.NameOrigin && k != pe.NameResult || n.At < 0 || int(n.At) >= s.n {
		return false
	}
	return s.set != nil && s.set[n.At] && n.AtInc == s.incMap[n.At]
}

// makerInc is the incarnation that made the message h is a hop of, as
// an element-level record sees it: its first PE's.
func makerInc(h *pe.FTHeader) uint32 {
	if k := h.Name.Kind; k == pe.NameOrigin || k == pe.NameResult {
		return h.Name.AtInc
	}
	return h.Inc
}

// elemKey is what an element-level record names n by (DeliverTo): apart
// from the PE-level record of a request or hop of the same message.
func elemKey(n *pe.MsgName) pe.MsgName {
	k := n.Key()
	k.Crossed = true
	return k
}

// messageOf is the message n names, whatever record: what the survivors
// tell a restarted PE its first execution's phase of (PktOrphans).
func messageOf(n pe.MsgName) pe.MsgName {
	k := n.Key()
	if k.Kind == pe.NameOrigin {
		k.Num = 0 // a section member's occurrence
	}
	return k
}

// took counts hop csn from PE from as processed here.
func (s *SPMD) took(from int32, csn uint64) {
	s.recv[from].add(csn)
	s.processedFrom[from]++
}

// gotName is what a PE keeps of a named message it handled: who made
// the copy it had (the hop's sender; for one an element here got, the
// PE the message left first), its phase then, the incarnation that made
// the copy had last, and whether it is an orphan (made by an incarnation
// rolled back since, and not had again from a later one).
type gotName struct {
	from  int32
	phase uint64
	// inc: the incarnation of from that made the copy had last; an
	// orphan: from runs as a later one now, which has not sent it again
	inc    uint32
	orphan bool
	// elem: delivered to an element here (recognised again there: from
	// is the PE the message left first)
	elem bool
	// leftTo (elem): the PE its element migrated to since (-1: none): if
	// that PE rolls back, a survivor's log sends the element there again,
	// with its names, and the message is recognised there — the re-send
	// need not come here, nor be waited for (the element it needs comes
	// with a message of a later phase)
	leftTo int32
	// typ: the message's type, for a dump (0: an element's, named by
	// its origin)
	typ uint32
}

type occurKey struct {
	to   int32
	hash uint64
}

// noMark: a survivor's mark has not come; allDone: it waits for no
// orphan.
const (
	noMark  = 0
	allDone = math.MaxUint64
)

// NewSPMD is PE me's logging without determinants in a job of n PEs,
// in teams t, from the start of the run.
func NewSPMD(me int32, n int, t Teams) *SPMD {
	return &SPMD{me: me, n: n, teams: t, incMap: make([]uint32, n), sendCSN: make([]uint64, n), recv: make([]window, n),
		occur: map[occurKey]uint64{}, rolled: make([]bool, n),
		orphans: map[uint64]int{}, sentMark: allDone, vol: make([]uint64, n), processedFrom: make([]uint64, n), answered: make([]uint32, n)}
}

// restartSPMD makes s (new) the incarnation inc of its PE, restored from
// checkpoint counters ck, rolled back with the PEs of set (its team).
func restartSPMD(s *SPMD, ck Counters, inc uint32, set []int32) *SPMD {
	copy(s.incMap, ck.IncMap)
	s.inc = inc
	s.incMap[s.me] = inc
	s.redoing, s.repeating = true, true
	s.set, s.setInc = make([]bool, s.n), make([]uint32, s.n)
	s.set[s.me] = true
	for _, p := range set {
		if p >= 0 && int(p) < s.n {
			s.set[p] = true
		}
	}
	for p := range s.recv {
		// the survivors number their hops on from the checkpoint's; the
		// PEs restarting with this one anew
		if !s.set[p] && p < len(ck.RecvCSN) {
			s.recv[p].contig = ck.RecvCSN[p]
		}
	}
	s.survivor, s.markOf, s.replayed = make([]bool, s.n), make([]uint64, s.n), make([]bool, s.n)
	s.listIn, s.pendingOf, s.teamMark = make([]bool, s.n), make([]map[uint64]int, s.n), make([]uint64, s.n)
	for p := range s.survivor {
		s.survivor[p] = !s.set[p]
		s.recovering = s.recovering || s.survivor[p]
	}
	s.made = map[pe.MsgName]madeState{}
	s.stats.RolledBack = 1
	return s
}

// Snapshot is the protocol state a checkpoint saves: incarnations and how
// far each PE's hops came (the logs, names and phases start again empty
// after it).
func (s *SPMD) Snapshot() Counters {
	c := Counters{Inc: s.inc, IncMap: slices.Clone(s.incMap), RecvCSN: make([]uint64, s.n)}
	for p := range s.recv {
		s.recv[p].settle() // quiet: nothing below will come
		c.RecvCSN[p] = s.recv[p].contig
	}
	return c
}

// Send stamps a message to PE to, named name (nil: a message to this PE
// or a teammate, which needs none) and logs it if it goes to another
// team. The header it returns is the message's. A hop that passes on a
// message this PE received (env.FT, with its name) carries the phase it
// came with: what it says depends on its origin's past, not on this
// PE's, which a late relay would add.
func (s *SPMD) Send(to int32, name *pe.MsgName, env *pe.Envelope) (*pe.FTHeader, error) {
	if to < 0 || int(to) >= s.n {
		return nil, fmt.Errorf("PE %d: send to PE %d, outside 0..%d", s.me, to, s.n-1)
	}
	s.sendCSN[to]++
	size := pe.PayloadSize(env.Payload)
	if size > 0 {
		s.vol[to] += uint64(size)
	}
	phase := s.phase
	if env.FT != nil && env.FT.CSN > 0 && (env.FT.Name != nil && env.FT.Name == name || env.Kind == KindSystem) {
		// a hop passed on keeps its phase (CSN 0: a name the runtime
		// kept, not a hop's), the runtime's relay of its own message
		// down a tree too, named or not: what it carries depends on
		// that message alone
		phase = env.FT.SSN
	}
	if name != nil {
		phase = s.atMostFirstPhase(name, phase)
	}
	if s.teams.Same(to, s.me) {
		// not logged: its header alone (the name passed on with a hop
		// that leaves the team later)
		if to != s.me {
			l := &s.stats.NotLogged[kindOf(env)]
			l.TotalMsgs++
			if size > 0 {
				l.TotalBytes += uint64(size)
			}
		}
		if name != nil && s.tracksMade() {
			s.remade(name)
		}
		return &pe.FTHeader{Sender: s.me, Recver: to, CSN: s.sendCSN[to], Inc: s.inc, SSN: phase, Name: name}, nil
	}
	hm := &hopMsg{env: *env}
	hm.Message = Message{Kind: kindOf(env), FTHeader: pe.FTHeader{Sender: s.me, Recver: to, CSN: s.sendCSN[to], Inc: s.inc, SSN: phase}, Env: &hm.env}
	hm.env.FT = &hm.FTHeader
	if name == nil || name.Kind == pe.NameNone {
		return nil, fmt.Errorf("PE %d: an unnamed %s message to PE %d, of another team", s.me, hm.Kind, to)
	}
	nm := *name
	nm.Crossed = true
	if (nm.Kind == pe.NameContents || nm.Kind == pe.NameHint) && nm.Num == 0 {
		// made here: numbered on its channel (a hop passing one on
		// keeps its maker's number: a survivor relaying a rolled-back
		// root's broadcast again sends what its children had)
		k := occurKey{to, nm.Hash}
		s.occur[k]++
		nm.Num = s.occur[k]
		hm.SSN = s.atMostFirstPhase(&nm, hm.SSN) // (its number is part of the name the survivors listed)
	}
	hm.Name = &nm
	if s.tracksMade() {
		s.remade(&nm)
	}
	if hm.Size = size; hm.Size < 0 {
		hm.Size = encodedSize(env)
	}
	s.logSeq++
	s.msgLog = append(s.msgLog, logEntry{s.logSeq, &hm.Message})
	s.tally(&hm.Message, true, &s.stats.PeakTotal)
	return &hm.FTHeader, nil
}

// atMostFirstPhase is phase, or the phase the first execution gave the
// message named n if a survivor's list said it was lower (PktOrphans).
func (s *SPMD) atMostFirstPhase(n *pe.MsgName, phase uint64) uint64 {
	if len(s.firstPhase) > 0 {
		if ph, ok := s.firstPhase[messageOf(*n)]; ok && ph < phase {
			return ph
		}
	}
	return phase
}

// tracksMade reports whether this PE's sends may make orphans again:
// it restarted, and a survivor's list waits for them or may still come.
func (s *SPMD) tracksMade() bool { return s.set != nil && (len(s.listedBy) > 0 || s.made != nil) }

// remade notes that this restarted PE sent a message named n: if its
// incarnation made it, and a survivor listed it as an orphan, the
// survivor hears that it was made again (Marks); if no list has it yet,
// a list still to come may.
func (s *SPMD) remade(n *pe.MsgName) {
	switch n.Kind {
	case pe.NameOrigin, pe.NameResult:
		if n.At != s.me || n.AtInc != s.inc {
			return // passed on: its maker tells
		}
	case pe.NamePartial, pe.NameContents:
		if n.From != s.me {
			return
		}
	default:
		return
	}
	key := messageOf(*n)
	if by, ok := s.listedBy[key]; ok {
		s.tellMade(by, key)
		s.teamMade(key)
		s.stats.OrphansMade++
		if s.made != nil {
			s.made[key] = madeCounted
		}
		return
	}
	if s.made != nil && s.made[key] == notMade {
		s.made[key] = madeNotListed
	}
}

// listing is a survivor's listing of an orphan: the survivor, and the
// phase the orphan had there.
type listing struct {
	by    int32
	phase uint64
}

// teamMade: a PE of this team (this one, or a teammate: PktMade) made
// the orphan key again. The survivors that listed it no longer wait for
// it as far as this PE counts (teamMark).
func (s *SPMD) teamMade(key pe.MsgName) {
	by, ok := s.listedBy[key]
	if !ok {
		if s.made != nil && s.made[key] == notMade {
			s.made[key] = madeByTeammate
		}
		return
	}
	delete(s.listedBy, key)
	for _, l := range by {
		c := s.pendingOf[l.by]
		if c[l.phase]--; c[l.phase] <= 0 {
			delete(c, l.phase)
			s.teamMark[l.by] = lowestPlusOne(c)
		}
	}
}

// lowestPlusOne is the lowest phase counted in c, plus one (allDone:
// none): a mark.
func lowestPlusOne(c map[uint64]int) uint64 {
	if len(c) == 0 {
		return allDone
	}
	low := uint64(allDone)
	for ph := range c {
		low = min(low, ph)
	}
	return low + 1
}

// markOfSurvivor is survivor p's mark as this restarted PE knows it: its
// own (which lags: it rises when p hears what the team made) or what its
// list and this team's notices give, whichever is higher. Both only
// ever rise, and neither is above what p will say.
func (s *SPMD) markOfSurvivor(p int) uint64 {
	return max(s.markOf[p], s.teamMark[p])
}

// madeState is what a restarted PE knows of a message it made while
// the survivors' lists may still be on their way.
type madeState uint8

const (
	notMade        madeState = iota
	madeNotListed            // no list named it yet
	madeCounted              // a list named it: counted in OrphansMade
	madeByTeammate           // a teammate made it (PktMade)
)

// tellMade queues the news that this PE made key again for the
// survivors that listed it and for its teammates.
func (s *SPMD) tellMade(by []listing, key pe.MsgName) {
	if s.madeFor == nil {
		s.madeFor = map[int32][]pe.MsgName{}
	}
	for _, l := range by {
		s.madeFor[l.by] = append(s.madeFor[l.by], key)
	}
	for p, in := range s.set {
		if in && int32(p) != s.me {
			s.madeFor[int32(p)] = append(s.madeFor[int32(p)], key)
		}
	}
}

func kindOf(env *pe.Envelope) MsgKind {
	switch env.Kind {
	case KindSystem, KindMulticast, KindReduction:
		return env.Kind
	}
	return KindP2P
}

// Arrive is a message reaching this PE: Handle (delivered now), Held
// (until its turn: Next hands it back) or Dropped (an old incarnation's,
// or a named message this PE had already). elemLevel: the message is
// recognised again by the element it is delivered to (DeliverTo), not
// here.
func (s *SPMD) Arrive(env *pe.Envelope, elemLevel, relay bool) (Arrival, error) {
	h := env.FT
	from := h.Sender
	if from < 0 || int(from) >= s.n {
		return Dropped, fmt.Errorf("PE %d: a message from PE %d, outside 0..%d", s.me, from, s.n-1)
	}
	if h.Inc > s.incMap[from] {
		s.newIncarnation(from, h.Inc) // its notice is on its way
	}
	if h.Inc < s.incMap[from] || s.recv[from].has(h.CSN) {
		s.stats.Dropped++
		return Dropped, nil
	}
	if len(s.lowerTo) > 0 && h.Name != nil {
		if ph, ok := s.lowerTo[lowerKey{from, h.Name.Key()}]; ok && ph < h.SSN {
			cp := *h // the header may be its sender's
			cp.SSN = ph
			env.FT, h = &cp, &cp
		}
	}
	if s.teams.Same(from, s.me) {
		if s.sealed {
			s.hold(env, false)
			return Held, nil
		}
		s.phase = max(s.phase, h.SSN)
		s.took(from, h.CSN)
		return Handle, nil
	}
	if h.Name == nil {
		return Dropped, fmt.Errorf("PE %d: an unnamed message (%s) from PE %d, of another team", s.me, pe.TypeName(env.Type), from)
	}
	if (elemLevel || relay) && s.madeByGone(h.Name) {
		// made by an incarnation of a PE that rolled back since, which
		// makes it again: a copy a survivor passed on (and counted as
		// sent) after the rollback is the old execution's, as a hop from
		// the old incarnation itself is
		s.stats.Dropped++
		s.delta++
		s.took(from, h.CSN)
		return Dropped, nil
	}
	if elemLevel {
		// a copy had here already (by an element here) tells its sender
		// the phase it had then (lowerPhase): the elements recognise it,
		// but may see it from this PE, not from its sender
		if s.repeating {
			ek := elemKey(h.Name)
			if g, ok := s.got.get(&ek); ok {
				s.lowerPhase(h, h.Name.Key(), g.phase)
			}
		}
		if !s.madeHere(h.Name) && !s.deliverable(from, h.SSN) {
			s.hold(env, true)
			return Held, nil
		}
		s.phase = max(s.phase, h.SSN+1)
		s.took(from, h.CSN)
		return Handle, nil
	}
	if h.Name.Kind != pe.NameHint {
		// (a hint is not recognised again: a copy does no harm, and one
		// an incarnation rolled back since made, which a PE passes on
		// late, has its re-execution's name)
		if s.had(h) {
			if relay && s.incMap[from] > 0 && h.Inc == s.incMap[from] && s.rolled[from] {
				// the broadcast again from a rolled-back root (or a PE
				// on its way): the PEs below that rolled back need it
				return Relay, nil
			}
			return Dropped, nil
		}
		if s.heldCopy(h) {
			// not handled yet: its held copy goes down the tree when
			// its turn comes, after the broadcasts before it (sent on
			// now, it overtook one held, and a PE below rolled back
			// had them out of order)
			return Dropped, nil
		}
	}
	if !s.deliverable(from, s.phaseToWait(h)) {
		s.hold(env, false)
		return Held, nil
	}
	s.deliver(from, h, env.Type)
	return Handle, nil
}

// DeliverTo implements ElementDedup's check for this PE's element whose
// names are *names.
func (s *SPMD) DeliverTo(names *ElementNames, h *pe.FTHeader) bool {
	first := h.Name.At
	if first < 0 || int(first) >= s.n {
		first = h.Sender
	}
	key := elemKey(h.Name)
	if s.teams.Same(first, s.me) && !h.Name.Crossed && !s.redoing {
		// made in this team and never out of it: a rollback takes both
		// back, and no other team's sends it again (unless this PE
		// re-executes: a copy that went out and back, a survivor's log
		// sends again, may come after the re-execution's own). The
		// element keeps its name all the same: if it migrates to
		// another team, what it did with the message goes with it, and
		// a rollback of this team sends the message again — there.
		names.Add(key, s.me)
		return true
	}
	if s.madeByGone(h.Name) {
		if _, had := names.First(key); !had {
			// one a PE kept (a section's or a location's buffer) past
			// its maker's rollback: the re-execution sends it again
			s.stats.Dropped++
			return false
		}
	}
	owner, had := names.Record(key, s.me)
	if had {
		s.stats.Dropped++
		g, ok := s.got.get(&key)
		if ok {
			s.lowerPhase(h, h.Name.Key(), g.phase)
		}
		if owner == s.me {
			if ok {
				s.hadAgain(&key, g, owner, makerInc(h))
				if h.SSN < g.phase {
					s.lowerGot(&key, h.SSN)
				}
			}
		} else {
			if s.again == nil {
				s.again = map[int32][]againName{}
			}
			s.again[owner] = append(s.again[owner], againName{key, makerInc(h)})
		}
		return false
	}
	s.got.put(&key, gotName{from: first, phase: h.SSN, inc: makerInc(h), elem: true, leftTo: -1})
	return true
}

// phaseToWait is the phase a recovering PE checks a survivor's message
// against: a hint's, none (it depends on nothing).
func (s *SPMD) phaseToWait(h *pe.FTHeader) uint64 {
	if h.Name.Kind == pe.NameHint {
		return 0
	}
	return h.SSN
}

// had reports whether this PE handled the message named n since the
// checkpoint (now from PE from), and counts an orphan had again. If it
// had it from a survivor that passed it on, and now has it another way,
// the survivor may be waiting for it as an orphan: it is told.
func (s *SPMD) had(h *pe.FTHeader) bool {
	if !s.repeating {
		return false // no copy comes before a rollback
	}
	key := h.Name.Key()
	g, ok := s.got.get(&key)
	if !ok {
		return false
	}
	// another hop than the one had (a re-execution's, or one passing it
	// on), counted as sent: counted as processed
	s.stats.Dropped++
	s.delta++
	s.took(h.Sender, h.CSN)
	s.lowerPhase(h, key, g.phase)
	s.hadAgain(&key, g, h.Sender, h.Inc) // (a PE-level record: the hop's sender made it)
	if h.SSN < g.phase {
		s.lowerGot(&key, h.SSN)
	}
	return true
}

// lowerGot gives the message had here as key the lower phase ph of a
// copy that came since (a re-execution's, made in another order): the
// phase this PE tells a restarted PE it had the message with
// (orphanList), so that the re-execution sends it no higher than the
// copy this PE passed on may have been had with. A PE below it in a
// broadcast's tree had the lower copy, made orphans of lower phases
// from it, and failed: stamped again with the higher phase, the
// broadcast waited at its next incarnation behind those orphans.
func (s *SPMD) lowerGot(key *pe.MsgName, ph uint64) {
	g, ok := s.got.get(key)
	if !ok || g.orphan || ph >= g.phase {
		return // (an orphan keeps its phase: the mark sent never falls)
	}
	g.phase = ph
	s.got.put(key, g)
}

// lowerPhase tells the sender of h, a copy of the message key had here
// with phase phase, that phase, if its copy has a higher one: a
// re-execution stamps what it sends again with its own phase, which may
// be higher than the first execution's, and a later rollback of this PE
// would have that copy replayed — to wait for orphans of phases the
// message never depended on.
func (s *SPMD) lowerPhase(h *pe.FTHeader, key pe.MsgName, phase uint64) {
	if phase >= h.SSN || s.teams.Same(h.Sender, s.me) {
		return
	}
	if s.lower == nil {
		s.lower = map[int32]*Packet{}
	}
	p := s.lower[h.Sender]
	if p == nil {
		p = &Packet{Kind: PktPhase, From: s.me, To: h.Sender}
		s.lower[h.Sender] = p
	}
	p.Names = append(p.Names, key)
	p.Phases = append(p.Phases, phase)
}

// hadAgain: the message had here as g (key n) came again, from PE from,
// made by the incarnation inc of g.from (makerInc). An orphan made again
// by the incarnation that now runs is had again; a copy of one this PE
// had from a survivor passing it on tells that survivor, which may wait
// for it as an orphan.
func (s *SPMD) hadAgain(n *pe.MsgName, g gotName, from int32, inc uint32) {
	if inc > g.inc {
		g.inc = inc
	}
	switch {
	case g.orphan && g.inc >= s.incMap[g.from]:
		g.orphan = false
		s.stats.OrphansAgain++
		s.orphanAgain(g.phase)
	case !g.elem && g.from != from && g.from != s.me && !s.rolled[g.from] && !s.rolledBackHere(g.from):
		if s.again == nil {
			s.again = map[int32][]againName{}
		}
		s.again[g.from] = append(s.again[g.from], againName{*n, inc})
	}
	s.got.put(n, g)
}

// againName is a message had again (PktAgain): its key here, and the
// incarnation that made the copy.
type againName struct {
	key pe.MsgName
	inc uint32
}

// rolledBackHere reports whether PE p rolled back with this one.
func (s *SPMD) rolledBackHere(p int32) bool { return s.set != nil && s.set[p] }

// heldCopy reports whether another copy of the message h names waits
// here for its turn; the copy h, counted as sent, is counted as
// processed (as had counts one).
func (s *SPMD) heldCopy(h *pe.FTHeader) bool {
	key := h.Name.Key()
	if s.heldNames[key] == 0 {
		return false
	}
	for i, m := range s.held {
		if !m.elem && m.Name != nil && m.Name.Key() == key {
			s.stats.Dropped++
			if m.Sender == h.Sender && m.Inc == h.Inc && m.CSN == h.CSN {
				return true // the same hop again (a replay of one in flight): counted when taken
			}
			s.delta++
			s.took(h.Sender, h.CSN)
			// the copy held waits with the lower phase of the two: a
			// survivor's log replays the hop an earlier incarnation of
			// this PE had, with its phase then, after a later relay came
			// with a re-execution's higher one, and the orphans this PE
			// must make again were made from it
			s.lowerHeldAt(i, h.SSN)
			return true
		}
	}
	return false
}

// hold keeps env until its turn (Next); elem: an element recognises it
// again, not the PE.
func (s *SPMD) hold(env *pe.Envelope, elem bool) {
	cp := &hopMsg{}
	cp.fill(env, kindOf(env))
	cp.env.FT = &cp.FTHeader
	m := &cp.Message
	m.elem = elem
	s.insertHeld(m)
	if key, ok := heldName(m); ok {
		if s.heldNames == nil {
			s.heldNames = map[pe.MsgName]int{}
		}
		s.heldNames[key]++
	}
	s.unseen = append(s.unseen, m)
	s.stats.Held++
}

// heldName is the key heldNames counts m by, if it counts it.
func heldName(m *Message) (pe.MsgName, bool) {
	if m.elem || m.Name == nil || m.Name.Kind == pe.NameHint {
		return pe.MsgName{}, false
	}
	return m.Name.Key(), true
}

// removeHeld takes held message i out.
func (s *SPMD) removeHeld(i int) *Message {
	m := s.held[i]
	s.held = slices.Delete(s.held, i, i+1)
	if key, ok := heldName(m); ok {
		if s.heldNames[key]--; s.heldNames[key] <= 0 {
			delete(s.heldNames, key)
		}
	}
	return m
}

// countHeldNames counts heldNames again (held lost messages otherwise).
func (s *SPMD) countHeldNames() {
	clear(s.heldNames)
	for _, m := range s.held {
		if key, ok := heldName(m); ok {
			s.heldNames[key]++ // (not nil: it counted them)
		}
	}
}

// insertHeld puts m among the held messages, which are kept in order of
// phase, and of arrival within a phase: Next takes the first that is
// ready, without looking at every one each time (a recovery holds
// hundreds).
func (s *SPMD) insertHeld(m *Message) {
	i, _ := slices.BinarySearchFunc(s.held, m.SSN+1, func(h *Message, ph uint64) int { return cmp.Compare(h.SSN, ph) })
	s.held = slices.Insert(s.held, i, m)
}

// deliverable says whether a message of phase phase from PE from, of
// another team, may be delivered now: always, but while this PE
// recovers, a survivor's only once every survivor said it waits for no
// orphan of a lower phase.
func (s *SPMD) deliverable(from int32, phase uint64) bool {
	if s.sealed {
		return false
	}
	if !s.recovering || !s.survivor[from] {
		return true
	}
	for p, sv := range s.survivor {
		if mark := s.markOfSurvivor(p); sv && (mark == noMark || mark-1 < phase) {
			return false
		}
	}
	return true
}

// deliver counts the delivery of the named message h from PE from, of
// another team.
func (s *SPMD) deliver(from int32, h *pe.FTHeader, typ uint32) {
	if h.Name.Kind != pe.NameHint {
		k := h.Name.Key()
		s.got.put(&k, gotName{from: from, phase: h.SSN, inc: h.Inc, typ: typ})
	}
	s.took(from, h.CSN)
	s.phase = max(s.phase, h.SSN+1)
}

// newIncarnation: PE p rolled back and runs as incarnation inc from now
// on; what its older ones sent that waits here is dropped (the new one
// sends it again as it re-executes, or a log replays it).
func (s *SPMD) newIncarnation(p int32, inc uint32) {
	if inc <= s.incMap[p] {
		return
	}
	s.incMap[p] = inc
	s.recv[p] = window{} // its new incarnation numbers its hops anew
	s.rolled[p], s.repeating = true, true
	// what it sent and this PE processed since the checkpoint, its count
	// of messages sent forgot: out of this PE's count of messages
	// processed (a copy its re-execution sends, dropped, is counted
	// instead)
	s.delta -= int64(s.processedFrom[p])
	s.processedFrom[p] = 0
	s.held = dropOlder(s.held, p, inc, &s.stats.Dropped)
	s.countHeldNames()
	s.gateEpoch++
}

// Next hands back a held message whose turn has come, counting its
// delivery: the lowest phase first.
func (s *SPMD) Next() (*Message, bool) {
	if len(s.held) == 0 { // (after every message handled, mostly)
		s.unseen = s.unseen[:0]
		s.endRecovery()
		return nil, false
	}
	g := s.gate()
	unseen := s.unseen
	s.unseen = s.unseen[:0] // (unseen keeps its elements until the next append)
	if s.blocked && g == s.blockedAt {
		// nothing held before the last call was ready, and nothing
		// changed that would make it so: only what came since may be
		var best *Message
		for _, m := range unseen {
			if !s.stale(m) && s.readyUnder(&g, m) && (best == nil || m.SSN < best.SSN) {
				best = m // (the first of the lowest phase: held's order)
			}
		}
		if best == nil {
			s.endRecovery()
			return nil, false
		}
		s.blocked = false
		i, _ := slices.BinarySearchFunc(s.held, best.SSN, func(h *Message, ph uint64) int { return cmp.Compare(h.SSN, ph) })
		for i < len(s.held) && s.held[i] != best {
			i++
		}
		if i < len(s.held) {
			return s.take(s.removeHeld(i)), true
		}
		// (not held: taken out by a change that did not count in
		// gateEpoch — look at them all)
	}
	for i := 0; i < len(s.held); i++ { // (in order of phase: insertHeld)
		m := s.held[i]
		if s.stale(m) {
			// its other copy was taken meanwhile
			s.removeHeld(i)
			s.stats.Dropped++
			i--
			continue
		}
		if s.readyUnder(&g, m) {
			s.blocked = false
			return s.take(s.removeHeld(i)), true
		}
	}
	s.blocked, s.blockedAt = true, g
	s.endRecovery()
	return nil, false
}

// stale reports whether held message m's other copy was taken meanwhile,
// or its sender rolled back since.
func (s *SPMD) stale(m *Message) bool {
	return m.Inc < s.incMap[m.Sender] || s.recv[m.Sender].has(m.CSN)
}

// take counts the delivery of held message m.
func (s *SPMD) take(m *Message) *Message {
	switch {
	case s.teams.Same(m.Sender, s.me):
		s.phase = max(s.phase, m.SSN)
		s.took(m.Sender, m.CSN)
	case m.elem:
		s.phase = max(s.phase, m.SSN+1)
		s.took(m.Sender, m.CSN)
	default:
		s.deliver(m.Sender, &m.FTHeader, m.Env.Type)
	}
	return m
}

// heldGate is what decides, besides the message itself, whether a held
// message is ready: a survivor's message waits while this PE recovers
// unless every survivor's mark came (open) and its phase is at most
// limit, the lowest mark less one (deliverable).
type heldGate struct {
	sealed, recovering, open bool
	limit                    uint64
	epoch                    uint64
}

func (s *SPMD) gate() heldGate {
	g := heldGate{sealed: s.sealed, recovering: s.recovering, open: true, limit: math.MaxUint64, epoch: s.gateEpoch}
	if !s.recovering {
		return g
	}
	for p, sv := range s.survivor {
		if !sv {
			continue
		}
		mark := s.markOfSurvivor(p)
		if mark == noMark {
			g.open, g.limit = false, 0
			break
		}
		g.limit = min(g.limit, mark-1)
	}
	return g
}

// readyUnder reports whether held message m may be delivered now, under
// gate g (ready's test, deliverable's loop done once).
func (s *SPMD) readyUnder(g *heldGate, m *Message) bool {
	switch {
	case g.sealed:
		return false
	case s.teams.Same(m.Sender, s.me) || m.elem && m.Name != nil && s.madeHere(m.Name):
		return true
	case !g.recovering || !s.survivor[m.Sender]:
		return true
	}
	return g.open && s.phaseToWait(&m.FTHeader) <= g.limit
}

// allReplayed reports whether every survivor's replay is in.
func (s *SPMD) allReplayed() bool {
	for p, sv := range s.survivor {
		if sv && !s.replayed[p] {
			return false
		}
	}
	return true
}

// endRecovery ends this PE's recovery once every survivor's replay came
// and no survivor waits for an orphan.
func (s *SPMD) endRecovery() {
	if !s.recovering {
		return
	}
	for p, sv := range s.survivor {
		if sv && (!s.replayed[p] || s.markOfSurvivor(p) != allDone) {
			return
		}
	}
	s.recovering = false
}

// Recovering reports whether this PE is still recovering.
func (s *SPMD) Recovering() bool { return s.recovering }

// Receive handles a packet from another PE's protocol: a survivor's mark
// or the end of its replay, to this recovering PE.
func (s *SPMD) Receive(p *Packet) error {
	if p.From < 0 || int(p.From) >= s.n {
		return fmt.Errorf("PE %d: a packet from PE %d, outside 0..%d", s.me, p.From, s.n-1)
	}
	switch p.Kind {
	case PktMark:
		if s.recovering && s.survivor[p.From] && p.Inc == s.inc {
			s.markOf[p.From] = p.Covered // (in the order sent)
		}
	case PktAgain:
		for i := range p.Names {
			key := p.Names[i] // as the sender keeps it
			if g, ok := s.got.get(&key); ok && i < len(p.Phases) {
				s.hadAgain(&key, g, p.From, uint32(p.Phases[i]))
			}
		}
	case PktPhase:
		for i := range p.Names {
			if i >= len(p.Phases) {
				break
			}
			if p.Inc != 0 {
				// from the survivor that logged them, to this incarnation
				// (its notice of a lower phase came after it replayed them)
				if s.recovering && p.Inc == s.inc {
					s.lowerHeld(p.From, p.Names[i].Key(), p.Phases[i])
				}
				continue
			}
			s.lowerLogged(p.From, p.Names[i], p.Phases[i])
		}
	case PktOrphans:
		if s.set != nil && p.Inc == s.inc {
			var early map[pe.MsgName]uint64 // made before the list came
			if s.firstPhase == nil {
				s.firstPhase = map[pe.MsgName]uint64{}
			}
			for i, n := range p.Names {
				if i < len(p.Phases) {
					if old, ok := s.firstPhase[n]; !ok || p.Phases[i] < old {
						s.firstPhase[n] = p.Phases[i]
					}
				}
				ph := uint64(0)
				if i < len(p.Phases) {
					ph = p.Phases[i]
				}
				switch st := s.made[n]; {
				case st == madeByTeammate:
					// its maker tells p, and lowers its copy's phase
				case st != notMade:
					s.tellMade([]listing{{p.From, ph}}, n)
					if i < len(p.Phases) {
						if early == nil {
							early = map[pe.MsgName]uint64{}
						}
						early[n] = s.firstPhase[n]
					}
					if st == madeNotListed {
						s.made[n] = madeCounted
						s.stats.OrphansMade++
					}
				case !slices.ContainsFunc(s.listedBy[n], func(l listing) bool { return l.by == p.From }):
					if s.listedBy == nil {
						s.listedBy = map[pe.MsgName][]listing{}
					}
					s.listedBy[n] = append(s.listedBy[n], listing{p.From, ph})
					if s.pendingOf[p.From] == nil {
						s.pendingOf[p.From] = map[uint64]int{}
					}
					s.pendingOf[p.From][ph]++
				}
			}
			if early != nil {
				s.lowerMade(early)
			}
			if !s.listIn[p.From] {
				s.listIn[p.From] = true
				s.teamMark[p.From] = lowestPlusOne(s.pendingOf[p.From])
			}
		}
	case PktMade:
		if p.Inc != s.incMap[p.From] {
			break // an incarnation rolled back since
		}
		if s.set != nil && s.set[p.From] && p.From != s.me {
			for _, n := range p.Names {
				s.teamMade(n) // a teammate's
			}
		}
		for _, n := range p.Names {
			for _, key := range s.orphanKeys[n] {
				if g, ok := s.got.get(&key); ok && g.orphan {
					g.orphan = false
					g.inc = s.incMap[g.from]
					s.got.put(&key, g)
					s.stats.OrphansAgain++
					s.orphanAgain(g.phase)
				}
			}
			delete(s.orphanKeys, n)
		}
	case PktRestarted:
		y := p.From
		if p.Inc < s.incMap[y] || p.Inc <= s.answered[y] {
			break // an incarnation rolled back since, or answered
		}
		if p.Inc > s.incMap[y] {
			s.failedAgain(y, p.Inc) // before the launcher's notice
		}
		s.answered[y] = p.Inc
		if s.set == nil || !s.set[y] {
			s.pending = append(s.pending, s.answer(y, p.Inc)...)
		}
	case PktReplayed:
		if s.recovering && s.survivor[p.From] && p.Inc == s.inc {
			s.replayed[p.From] = true
			s.stats.ReplaysFrom++
			s.stats.ReplayedIn += p.Replayed
			if s.allReplayed() {
				s.made = nil // every list is in (each came before its replay)
			}
		}
	default:
		return fmt.Errorf("PE %d: packet of kind %d from PE %d (spmd)", s.me, p.Kind, p.From)
	}
	s.endRecovery()
	return nil
}

// PeerFailed: PE y rolled back and runs again as incarnation inc (with
// its team, each of which is told of in turn). Unless y rolled back with
// this PE, this PE sends it again what it logged for it, says it did,
// and tells it its mark; if this PE is recovering itself, it waits for y
// no more (y's messages are made again as it re-executes, and the
// survivors count its orphans).
func (s *SPMD) PeerFailed(y int32, inc uint32, _ []int32) ([]Action, error) {
	if y < 0 || int(y) >= s.n || y == s.me {
		return nil, fmt.Errorf("PE %d told that PE %d failed (PEs are 0..%d)", s.me, y, s.n-1)
	}
	if inc <= s.answered[y] {
		return nil, nil // its own notice came first, and was answered
	}
	s.failedAgain(y, inc)
	return nil, nil // answered when it announces itself (PktRestarted)
}

// failedAgain: PE y rolled back and runs again as incarnation inc; its
// messages had since the checkpoint are orphans.
func (s *SPMD) failedAgain(y int32, inc uint32) {
	s.newIncarnation(y, inc)
	if s.set != nil && s.set[y] {
		if s.setInc[y] == 0 || inc <= s.setInc[y] {
			s.setInc[y] = max(s.setInc[y], inc)
			return // restarting with this PE
		}
		// it restarted again since, without this PE (teams that
		// recovered together, one failing alone after the next
		// checkpoint): from now on it is a PE of another rollback, which
		// this PE answers as a survivor
		s.set[y] = false
	}
	if s.recovering && s.survivor[y] {
		s.survivor[y] = false
		s.endRecovery()
	}
	s.countOrphans()
	if !slices.Contains(s.failing, y) {
		s.failing = append(s.failing, y)
	}
	s.gateEpoch++ // (its set and survivors)
}

// answer is what this PE sends PE y's incarnation inc, restarted (not
// with it), once y announced itself: its mark, its orphans, every
// message it logged for y since the checkpoint, and that the replay is
// complete.
func (s *SPMD) answer(y int32, inc uint32) []Action {
	out := []Action{{Kind: ActSend, Packet: Packet{Kind: PktMark, From: s.me, To: y, Inc: inc, Covered: s.markNow()}}}
	if ol := s.orphanList(y, inc); ol != nil {
		out = append(out, Action{Kind: ActSend, Packet: *ol})
	}
	replayed := uint64(0)
	for _, e := range s.msgLog {
		if e.m.Recver == y {
			// (a message of a rolled-back PE this one passed on is sent
			// again too, and dropped there, counted: see Arrive)
			m := e.m
			if ph, ok := s.lowered[m]; ok {
				cp := &hopMsg{Message: *m, env: *m.Env}
				cp.SSN = ph
				cp.Env, cp.env.FT = &cp.env, &cp.FTHeader
				m = &cp.Message
			}
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: y, Msg: m}})
			replayed++
		}
	}
	s.stats.Replayed += replayed
	return append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktReplayed, From: s.me, To: y, Inc: inc, Replayed: replayed}})
}

// Announce is what the restarted incarnation sends every PE that did not
// roll back with it: that it restarted (PktRestarted), which each
// answers by itself (answer) — no PE steers the recovery.
func (s *SPMD) Announce() []Action {
	var out []Action
	for p := range int32(s.n) {
		if p != s.me && (s.set == nil || !s.set[p]) {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktRestarted, From: s.me, To: p, Inc: s.inc}})
		}
	}
	return out
}

// lowerLogged gives the logged message named n to PE to the lower phase
// ph (PktPhase).
func (s *SPMD) lowerLogged(to int32, n pe.MsgName, ph uint64) {
	for _, e := range s.msgLog {
		if m := e.m; m.Recver == to && m.Name != nil && m.Name.Key() == n {
			s.lowerEntry(m, ph)
		}
	}
}

// lowerMade gives the orphans this restarted PE made again before a
// survivor's list named them (PktOrphans: their first execution's
// phases, by messageOf) those phases in its log, as Send gives them to
// the orphans it makes after. The survivor drops the copy and tells
// (lowerPhase), but it may fail first, and its next incarnation would
// be replayed the copy with the re-execution's higher phase, held
// behind orphans it can make only from it.
func (s *SPMD) lowerMade(first map[pe.MsgName]uint64) {
	for _, e := range s.msgLog {
		if m := e.m; m.Name != nil {
			if ph, ok := first[messageOf(*m.Name)]; ok {
				s.lowerEntry(m, ph)
			}
		}
	}
}

// lowerEntry replays logged message m with phase ph from now on, if
// lower than its own. If its receiver rolled back since and may have had
// it replayed already, it is told too.
func (s *SPMD) lowerEntry(m *Message, ph uint64) {
	if ph >= m.SSN {
		return
	}
	if s.lowered == nil {
		s.lowered = map[*Message]uint64{}
	}
	if old, ok := s.lowered[m]; ok && old <= ph {
		return
	}
	s.lowered[m] = ph
	if to := m.Recver; s.rolled[to] {
		if s.lower == nil {
			s.lower = map[int32]*Packet{}
		}
		k := -1 - to // apart from the packets to the senders (lowerPhase)
		p := s.lower[k]
		if p == nil {
			p = &Packet{Kind: PktPhase, From: s.me, To: to, Inc: s.incMap[to]}
			s.lower[k] = p
		}
		p.Names = append(p.Names, m.Name.Key())
		p.Phases = append(p.Phases, ph)
	}
}

// lowerHeld gives the message named n from PE from, held here or still
// to come, the lower phase ph (its sender's log has it).
func (s *SPMD) lowerHeld(from int32, n pe.MsgName, ph uint64) {
	for i, m := range s.held {
		if m.Sender == from && m.Name != nil && m.Name.Key() == n {
			s.lowerHeldAt(i, ph)
			return
		}
	}
	if s.lowerTo == nil {
		s.lowerTo = map[lowerKey]uint64{}
	}
	k := lowerKey{from, n}
	if old, ok := s.lowerTo[k]; !ok || ph < old {
		s.lowerTo[k] = ph
	}
}

// lowerHeldAt gives held message i the phase ph, if lower than its own,
// and moves it to its place in the order (insertHeld).
func (s *SPMD) lowerHeldAt(i int, ph uint64) {
	m := s.held[i]
	if ph >= m.SSN {
		return
	}
	s.held = slices.Delete(s.held, i, i+1)
	m.SSN = ph
	s.insertHeld(m)
	s.gateEpoch++
}

type lowerKey struct {
	from int32
	name pe.MsgName
}

// countOrphans marks every message had since the checkpoint from a PE
// that rolled back since as an orphan (again, if it came from the
// re-execution of an earlier rollback), and counts them by phase.
func (s *SPMD) countOrphans() {
	clear(s.orphans)
	clear(s.orphanKeys)
	for n, g := range s.got.all() {
		g.orphan = s.incMap[g.from] > g.inc && !(g.elem && g.leftTo >= 0 && s.rolled[g.leftTo])
		if g.orphan {
			s.orphans[g.phase]++
			if s.orphanKeys == nil {
				s.orphanKeys = map[pe.MsgName][]pe.MsgName{}
			}
			m := messageOf(n)
			s.orphanKeys[m] = append(s.orphanKeys[m], n)
		}
	}
	s.sentMark = s.markNow()
}

// orphanList is the packet that tells restarted PE y (incarnation inc)
// the orphans and their phases (nil: none).
func (s *SPMD) orphanList(y int32, inc uint32) *Packet {
	var p *Packet
	for n, g := range s.got.all() {
		if !g.orphan {
			continue
		}
		if p == nil {
			p = &Packet{Kind: PktOrphans, From: s.me, To: y, Inc: inc}
		}
		p.Names = append(p.Names, messageOf(n))
		p.Phases = append(p.Phases, g.phase)
	}
	return p
}

// markNow is the lowest phase of an orphan not had again, plus one
// (allDone: none).
func (s *SPMD) markNow() uint64 {
	if len(s.orphans) == 0 {
		return allDone
	}
	low := uint64(allDone)
	for ph := range s.orphans {
		low = min(low, ph)
	}
	return low + 1
}

// orphanAgain counts an orphan of phase ph had again; the recovering PEs
// hear of a rise of the mark when the PE is next idle (Marks).
func (s *SPMD) orphanAgain(ph uint64) {
	if s.orphans[ph]--; s.orphans[ph] <= 0 {
		delete(s.orphans, ph)
	}
}

// Marks returns the packets that tell the recovering PEs a risen mark,
// and the survivors the orphans they may wait for that came again here.
func (s *SPMD) Marks() []Action {
	out := s.MadeNotices(s.pending)
	s.pending = nil
	for p, names := range s.again {
		pkt := Packet{Kind: PktAgain, From: s.me, To: p}
		for _, a := range names {
			pkt.Names = append(pkt.Names, a.key)
			pkt.Phases = append(pkt.Phases, uint64(a.inc)) // (the incarnations)
		}
		out = append(out, Action{Kind: ActSend, Packet: pkt})
		delete(s.again, p)
	}
	for k, pkt := range s.lower {
		out = append(out, Action{Kind: ActSend, Packet: *pkt})
		delete(s.lower, k)
	}
	now := s.markNow()
	if now == s.sentMark || len(s.failing) == 0 {
		return out
	}
	s.sentMark = now
	for _, y := range s.failing {
		out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktMark, From: s.me, To: y, Inc: s.incMap[y], Covered: now}})
	}
	return out
}

// MadeNotices appends to out the notices of orphans this restarted PE
// made again (PktMade) not sent yet: they go as soon as the message that
// made them was handled, not when the PE is next idle, since both the
// survivors that listed them and the teammates wait on them.
func (s *SPMD) MadeNotices(out []Action) []Action {
	for p, names := range s.madeFor {
		out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktMade, From: s.me, To: p, Inc: s.inc, Names: names}})
		delete(s.madeFor, p)
	}
	return out
}

// Recovered: PE y finished recovering. It stays among those told of a
// risen mark until the checkpoint: a notice that it recovered may come
// after its next rollback (a recovered incarnation ignores marks).
func (s *SPMD) Recovered(int32) {}

// Prepare marks the snapshot a coordinated checkpoint takes: arrivals
// wait for its commit.
func (s *SPMD) Prepare() Counters {
	for k := range s.logged {
		l := &s.logged[k]
		l.AtCheckpointBytes = max(l.AtCheckpointBytes, l.Bytes)
	}
	s.mark = s.logSeq
	s.sealed = true
	return s.Snapshot()
}

// Abort: the checkpoint Prepare marked was abandoned.
func (s *SPMD) Abort() { s.sealed = false }

// Checkpoint: the checkpoint Prepare marked was committed. The log, the
// names and the phase start again, and nobody has rolled back since.
func (s *SPMD) Checkpoint() {
	keep := s.msgLog[:0]
	for _, e := range s.msgLog {
		if e.seq <= s.mark {
			s.tally(e.m, false, &s.stats.PeakTotal)
			continue
		}
		keep = append(keep, e)
	}
	clear(s.msgLog[len(keep):])
	s.msgLog = keep
	for m := range s.lowered {
		if !slices.ContainsFunc(keep, func(e logEntry) bool { return e.m == m }) {
			delete(s.lowered, m)
		}
	}
	s.got.reset()
	s.repeating = false
	clear(s.occur)
	s.firstPhase = nil
	s.listedBy, s.made, s.madeFor = nil, nil, nil
	s.listIn, s.pendingOf, s.teamMark = nil, nil, nil
	clear(s.orphanKeys)
	clear(s.orphans)
	clear(s.rolled)
	clear(s.processedFrom)
	s.failing = s.failing[:0]
	s.sentMark, s.phase, s.sealed, s.redoing = allDone, 0, false, false
	s.gateEpoch++
}

// TakeVolume returns the payload bytes sent to each PE since the last
// call.
func (s *SPMD) TakeVolume() []uint64 {
	v := slices.Clone(s.vol)
	clear(s.vol)
	return v
}

// Stats is this incarnation's statistics.
func (s *SPMD) Stats() Stats {
	st := s.stats
	st.Log = s.logged
	return st
}

// Describe writes what the PE waits for, for a dump of a stalled run.
func (s *SPMD) Describe(w io.Writer) {
	fmt.Fprintf(w, "  spmd: incarnation %d, phase %d; log %d messages; %d names had since the checkpoint; %d held\n",
		s.inc, s.phase, len(s.msgLog), s.got.len(), len(s.held))
	if s.sealed {
		fmt.Fprintf(w, "  a checkpoint is being taken: arrivals are held until its commit\n")
	}
	if len(s.failing) > 0 {
		left := 0
		for _, c := range s.orphans {
			left += c
		}
		fmt.Fprintf(w, "  PEs %s are recovering: this PE replayed to them; %d orphans not had again (mark %s)\n",
			PEList(s.failing), left, markString(s.markNow()))
		type orphan struct {
			phase uint64
			text  string
		}
		var lowest []orphan // the lowest phases first: what the mark waits for
		for n, g := range s.got.all() {
			if g.orphan {
				what := ""
				if g.typ != 0 {
					what = pe.TypeName(g.typ) + " "
				}
				lowest = append(lowest, orphan{g.phase, fmt.Sprintf("%s%v from PE %d, phase %d", what, n, g.from, g.phase)})
			}
		}
		slices.SortFunc(lowest, func(a, b orphan) int {
			return cmp.Or(cmp.Compare(a.phase, b.phase), strings.Compare(a.text, b.text))
		})
		for _, o := range lowest[:min(len(lowest), 30)] {
			fmt.Fprintf(w, "    orphan: %s\n", o.text)
		}
	}
	if s.recovering {
		var waits []string
		for p, sv := range s.survivor {
			if !sv {
				continue
			}
			switch mark := s.markOfSurvivor(p); {
			case mark == noMark:
				waits = append(waits, fmt.Sprintf("PE %d: no mark", p))
			case mark != allDone:
				waits = append(waits, fmt.Sprintf("PE %d: orphans from phase %d (its mark %s, the team's count %s)", p, mark-1, markString(s.markOf[p]), markString(s.teamMark[p])))
			case !s.replayed[p]:
				waits = append(waits, fmt.Sprintf("PE %d: replay not complete", p))
			}
		}
		fmt.Fprintf(w, "  recovering: waits for %v\n", waits)
		if len(s.listedBy) > 0 {
			fmt.Fprintf(w, "  %d orphans the survivors listed are not made again yet\n", len(s.listedBy))
		}
		for _, m := range s.held[:min(len(s.held), 30)] {
			fmt.Fprintf(w, "    held: %s from PE %d, phase %d: %v\n", pe.TypeName(m.Env.Type), m.Sender, m.SSN, m.Name)
		}
	}
}

func markString(m uint64) string {
	if m == allDone {
		return "none"
	}
	return fmt.Sprintf("phase %d", m-1)
}

var _ Hook = (*SPMDHook)(nil)

// Namer is what an SPMD hook needs from the runtime to name a message:
// the origin of an element's (Origins), and for the runtime's own, a
// hash of its type and contents.
type Namer interface {
	Origins
	// Result is the group and number of the reduction whose result is
	// being sent to its callback, if one is.
	Result() (g, num uint64, ok bool)
	// ContentsHash hashes env's type and contents (for a measurement, its
	// type alone: chare.Measurement).
	ContentsHash(env *pe.Envelope) uint64
	// Hint reports runtime bookkeeping that may come twice, or not again
	// from a re-execution, without harm (a location update): it is
	// delivered as it comes and never waited for.
	Hint(env *pe.Envelope) bool
	// BcastHop reports a hop of a broadcast down its collection's tree,
	// numbered by the tree's root.
	BcastHop(env *pe.Envelope) bool
	// PEAddressed reports an element's message (or a hop of it) that goes
	// to a PE fixed in every execution — a broadcast's and a section
	// multicast's request to their root, a broadcast's hops — which the
	// PE recognises again itself; the others (a point-to-point message
	// found by location, a multicast's hops down a tree that may be set
	// up again meanwhile) are recognised again by the element they are
	// delivered to (ElementDedup).
	PEAddressed(env *pe.Envelope) bool
}

// SPMDHook runs SPMD for one PE of the runtime: it names each message
// from what the runtime says of it, and net carries its packets.
type SPMDHook struct {
	s       *SPMD
	namer   Namer
	net     func(dst int, p *Packet)
	scratch []byte
}

// NewSPMDHook is PE me's hook in a job of n PEs in teams t; namer is the
// runtime's answer to what a message is (nil: every message unnamed,
// which only a job of one team can run).
func NewSPMDHook(me, n int, t Teams, namer Namer, net func(dst int, p *Packet)) *SPMDHook {
	return &SPMDHook{s: NewSPMD(int32(me), n, t), namer: namer, net: net}
}

// Protocol is the state machine the hook runs.
func (h *SPMDHook) Protocol() *SPMD { return h.s }

func (h *SPMDHook) Name() string      { return "spmd" }
func (h *SPMDHook) UsesOrigins() bool { return true }

func (h *SPMDHook) Send(dst int, role Role, g, num uint64, _ bool, env *pe.Envelope) error {
	name, err := h.name(int32(dst), role, g, num, env)
	if err != nil {
		return err
	}
	hdr, err := h.s.Send(int32(dst), name, env)
	if err != nil {
		return err
	}
	env.FT = hdr
	if hdr.Name != nil && !h.s.teams.Same(int32(dst), h.s.me) {
		h.scratch = pe.AppendFT(h.scratch[:0], hdr)
		h.s.stats.Named++
		h.s.stats.NameBytes += uint64(len(h.scratch))
	}
	return nil
}

// name is what env, one hop to PE dst, is named by: what it came with, if
// this PE passes it on; a partial by its reduction; an element's message
// by its origin; a result by its reduction; anything else by its
// contents (to another team only: to a teammate an unnamed hop is free).
func (h *SPMDHook) name(dst int32, role Role, g, num uint64, env *pe.Envelope) (*pe.MsgName, error) {
	if env.FT != nil && env.FT.Name != nil {
		if role == RoleMcastRoot && h.namer != nil && h.namer.BcastHop(env) {
			// the root numbers the broadcast: its incarnation made what
			// the hops say (another numbers them otherwise)
			n := *env.FT.Name
			n.At, n.AtInc = h.s.me, h.s.inc
			return &n, nil
		}
		return env.FT.Name, nil
	}
	if role == RolePartial {
		return &pe.MsgName{Kind: pe.NamePartial, From: h.s.me, Group: g, Num: num}, nil
	}
	if h.namer == nil {
		return nil, nil
	}
	if env.Kind != KindSystem {
		if o, ok := h.namer.Origin(); ok {
			return &pe.MsgName{Kind: pe.NameOrigin, Origin: o, At: h.s.me, AtInc: h.s.inc}, nil
		}
		if g, num, ok := h.namer.Result(); ok {
			return &pe.MsgName{Kind: pe.NameResult, Group: g, Num: num, At: h.s.me, AtInc: h.s.inc}, nil
		}
	}
	if h.s.teams.Same(dst, h.s.me) {
		return nil, nil
	}
	kind := pe.NameContents
	if h.namer.Hint(env) {
		kind = pe.NameHint
	}
	return &pe.MsgName{Kind: kind, From: h.s.me, Hash: h.namer.ContentsHash(env)}, nil
}

func (h *SPMDHook) Arrive(env *pe.Envelope) (Arrival, error) {
	if env.FT == nil {
		return Handle, nil // the runtime's control: not logged
	}
	n := env.FT.Name
	elemLevel := n != nil && (n.Kind == pe.NameOrigin || n.Kind == pe.NameResult) && (h.namer == nil || !h.namer.PEAddressed(env))
	relay := h.namer != nil && h.namer.BcastHop(env)
	a, err := h.s.Arrive(env, elemLevel, relay)
	h.flushMarks()
	return a, err
}

// Left implements ElementDedup: the names this PE recorded of an element
// that migrated to PE to.
func (h *SPMDHook) Left(names *ElementNames, to int) {
	for k, owner := range names.All() {
		if owner != h.s.me {
			continue
		}
		h.s.got.leftTo(&k, int32(to))
	}
}

// DeliverTo implements ElementDedup.
func (h *SPMDHook) DeliverTo(names *ElementNames, env *pe.Envelope) bool {
	if env.FT == nil || env.FT.Name == nil {
		return true
	}
	if k := env.FT.Name.Kind; k != pe.NameOrigin && k != pe.NameResult {
		return true
	}
	return h.s.DeliverTo(names, env.FT)
}

func (h *SPMDHook) Next(env *pe.Envelope) bool {
	if len(h.s.madeFor) > 0 {
		sendAll(h.net, h.s.MadeNotices(nil))
	}
	m, ok := h.s.Next()
	if ok {
		*env = *m.Env
	}
	return ok
}

func (h *SPMDHook) Packet(p *Packet) error {
	err := h.s.Receive(p)
	h.flushMarks()
	return err
}

// TakeProcessed implements Counter.
func (h *SPMDHook) TakeProcessed() int64 {
	d := h.s.delta
	h.s.delta = 0
	return d
}

// Idle sends the recovering PEs a risen mark.
func (h *SPMDHook) Idle() { h.flushMarks() }

func (h *SPMDHook) flushMarks() { sendAll(h.net, h.s.Marks()) }

func (h *SPMDHook) Reduced(uint64, uint64, *pe.Envelope) {}
func (h *SPMDHook) Prepare() Counters                    { return h.s.Prepare() }
func (h *SPMDHook) Checkpoint()                          { h.s.Checkpoint() }
func (h *SPMDHook) Abort()                               { h.s.Abort() }
func (h *SPMDHook) Stats() Stats                         { return h.s.Stats() }
func (h *SPMDHook) Keep() *Kept                          { return nil }
func (h *SPMDHook) Recovering() bool                     { return h.s.Recovering() }
func (h *SPMDHook) PeerRecovered(y int)                  { h.s.Recovered(int32(y)) }
func (h *SPMDHook) LogsSent() bool                       { return true }
func (h *SPMDHook) OnRelease(func(env *pe.Envelope))     {}
func (h *SPMDHook) Releases() bool                       { return false }
func (h *SPMDHook) Regroup(t Teams)                      { h.s.teams, h.s.gateEpoch = t, h.s.gateEpoch+1 }
func (h *SPMDHook) Recluster(*mcml.Dendrogram)           {}
func (h *SPMDHook) TakeVolume() []uint64                 { return h.s.TakeVolume() }
func (h *SPMDHook) Describe(w io.Writer)                 { h.s.Describe(w) }

// Witness implements Hook: the first PE after this one outside its team.
func (h *SPMDHook) Witness() int { return h.s.teams.WitnessOf(h.s.me, h.s.n) }

// Restart implements Hook: the new incarnation, rolled back with its
// team (rb.Set).
func (h *SPMDHook) Restart(ck *Counters, inc uint32, _ func(g, num uint64), rb Rollback) {
	var zero Counters
	if ck == nil {
		ck = &zero
	}
	h.s = restartSPMD(NewSPMD(h.s.me, h.s.n, h.s.teams), *ck, inc, rb.Set)
	sendAll(h.net, h.s.Announce())
}

func (h *SPMDHook) PeerFailed(y int, inc uint32, with []int32) error {
	acts, err := h.s.PeerFailed(int32(y), inc, with)
	sendAll(h.net, acts)
	return err
}
