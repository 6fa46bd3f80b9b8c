package manager

// Sections follow their members. After a balancing step moved elements,
// PE 0 asks the root of every section whose members moved (and whose
// reductions are idle: every member at the same next round, none part-way
// through a multiple membership) to set the section up again with each
// member homed where it is now. The root waits until it has delivered
// every round before that one, then makes a new section — a new id, a new
// spanning tree over the members' PEs, its own reductions numbered from 0
// (its round k is the old one's round R+k) — that replaces the old one:
// every PE of either tree learns the old id now means the new one, and
// acknowledges, and only then do the elements resume. A multicast or contribution that still names the old id (a
// proxy the program kept; a message already on its way) is carried over
// to the new section; multicasts already travelling down the old tree
// finish there (their members are found by forwarding). The program keeps
// using the proxies it has.
//
// Section contributions an element makes while it waits at AtSync are
// held until it resumes, so that no round starts while a section is
// being set up again.

import (
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/charmgo/charmgo/pe"
)

// SecMem is one section membership of an element in an AtSync report:
// the member's next round, where it is counted, and whether it is part-way
// through a round (listed several times, not all contributions made).
type SecMem struct {
	Sec   uint64
	Round uint32
	Home  int32
	Busy  bool
}

// SecRefreshMsg asks a section's root (from PE 0) to set the section up
// again with its members where they are after a balancing step.
type SecRefreshMsg struct {
	Sec     uint64
	Coll    uint32
	Round   uint32     // every member's next round
	Members []pe.Index // the distinct members, sorted
	PEs     []int32    // where each is now
}

// SecAliasMsg tells a PE of the old tree only that section Old is now New
// from round First on; Chain is every replacement that led to New.
type SecAliasMsg struct {
	Old, New uint64
	First    uint32
	Chain    []SecAlias
}

// SecAckMsg acknowledges a new setup or an alias to the new section's
// root (Sec: the new id), or tells PE 0 the root is done (Sec: the old
// id, Coll set).
type SecAckMsg struct {
	Sec  uint64
	Coll uint32
	Done bool // to PE 0: the section was set up again (false: skipped)
}

// SecAlias is a replaced section in a checkpoint.
type SecAlias struct {
	Old, New uint64
	First    uint32
}

type secAlias struct {
	to    uint64
	first uint32 // the new section's first round
}

// secNow follows replacements: the section that id means now.
func (m *Manager) secNow(id uint64) uint64 {
	for range 64 {
		a, ok := m.secAlias[id]
		if !ok {
			return id
		}
		id = a.to
	}
	return id
}

// lbMems lists e's section memberships for an AtSync report.
func (e *Element) lbMems() []SecMem {
	if len(e.Secs) == 0 {
		return nil
	}
	out := make([]SecMem, 0, len(e.Secs))
	for _, s := range e.sortedSecs() {
		out = append(out, SecMem{Sec: s.Sec, Round: s.RedNo, Home: s.Home, Busy: s.Count != 0})
	}
	return out
}

// sectionsToRefresh (PE 0, once a plan is made) lists the sections of
// collection c to set up again: their members are all elements of c that
// reported idle memberships at one round, and some of them are not where
// the section counts them.
func (g *lbGather) sectionsToRefresh(c *Collection, placeAfter []int32) []*SecRefreshMsg {
	type secInfo struct {
		round   uint32
		ok      bool
		stale   bool
		members []pe.Index
		pes     []int32
	}
	secs := map[uint64]*secInfo{}
	var order []uint64
	for obj, mems := range g.mems {
		o := g.st.Objs[obj]
		for _, sm := range mems {
			si := secs[sm.Sec]
			if si == nil {
				si = &secInfo{round: sm.Round, ok: true}
				secs[sm.Sec] = si
				order = append(order, sm.Sec)
			}
			if o.Coll != c.ID || sm.Busy || sm.Round != si.round {
				si.ok = false
			}
			where := placeAfter[obj]
			if where != sm.Home {
				si.stale = true
			}
			si.members = append(si.members, o.Index)
			si.pes = append(si.pes, where)
		}
	}
	slices.Sort(order)
	var out []*SecRefreshMsg
	for _, id := range order {
		si := secs[id]
		if !si.ok || !si.stale {
			continue
		}
		idx := make([]int, len(si.members))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int { return si.members[a].Compare(si.members[b]) })
		msg := &SecRefreshMsg{Sec: id, Coll: c.ID, Round: si.round}
		for _, i := range idx {
			msg.Members = append(msg.Members, si.members[i])
			msg.PEs = append(msg.PEs, si.pes[i])
		}
		out = append(out, msg)
	}
	return out
}

// onSecRefresh runs on the section's root.
func (m *Manager) onSecRefresh(rm *SecRefreshMsg) {
	s := m.secs[rm.Sec]
	if s == nil || s.setup == nil || m.secNow(rm.Sec) != rm.Sec || s.refresh != nil {
		m.sendSys(0, tSecAck, &SecAckMsg{Sec: rm.Sec, Coll: rm.Coll})
		return
	}
	// every member must be in the request (one without a membership
	// record never contributed: its round is not known to be the others')
	for i, ix := range s.setup.Members {
		if i > 0 && s.setup.Members[i-1] == ix {
			continue
		}
		if _, found := slices.BinarySearchFunc(rm.Members, ix, pe.Index.Compare); !found {
			m.sendSys(0, tSecAck, &SecAckMsg{Sec: rm.Sec, Coll: rm.Coll})
			return
		}
	}
	if s.red.NextReport() > rm.Round {
		m.sendSys(0, tSecAck, &SecAckMsg{Sec: rm.Sec, Coll: rm.Coll})
		return
	}
	s.refresh = &secRefresh{req: rm}
	m.secRefreshMaybe(s)
}

type secRefresh struct {
	req  *SecRefreshMsg
	acks int // awaited from the PEs of both trees (0: not sent yet)
	to   uint64
}

// secRefreshMaybe sets section s up again once every round before the
// requested one was delivered (root only).
func (m *Manager) secRefreshMaybe(s *Section) {
	rf := s.refresh
	if rf == nil || rf.acks > 0 || s.red.NextReport() < rf.req.Round {
		return
	}
	rm := rf.req
	homes := make([]int32, len(s.setup.Members))
	for i, ix := range s.setup.Members {
		j, _ := slices.BinarySearchFunc(rm.Members, ix, pe.Index.Compare)
		homes[i] = rm.PEs[j]
	}
	id, err := m.renewedSectionID(s.ID)
	if err != nil {
		m.failf("section %#x set up again: %w", s.ID, err)
		return
	}
	pes := make([]int, len(homes))
	for i, h := range homes {
		pes[i] = int(h)
	}
	t := SectionTreeIn(m.Me(), pes, m.opt.Branching, m.layout())
	chain := append(append([]SecAlias(nil), s.setup.Ancestors...), SecAlias{Old: s.ID, New: id, First: rm.Round})
	sm := &SectionMsg{Sec: id, Coll: s.Coll, Tree: t.Members, K: t.K, Members: s.setup.Members, Homes: homes,
		Replaces: s.ID, FirstRound: rm.Round, Ancestors: chain}
	rf.to = id
	for _, p := range t.Members {
		rf.acks++
		m.sendSys(p, tSection, sm)
	}
	for _, p := range s.Tree.Members {
		if !slices.Contains(t.Members, p) {
			rf.acks++
			m.sendSys(p, tSecAlias, &SecAliasMsg{Old: s.ID, New: id, First: rm.Round, Chain: chain})
		}
	}
}

func (m *Manager) onSecAlias(am *SecAliasMsg) {
	for _, a := range am.Chain {
		m.addSecAlias(a.Old, a.New, a.First)
	}
	m.addSecAlias(am.Old, am.New, am.First)
	m.sendSys(SectionRoot(am.New), tSecAck, &SecAckMsg{Sec: am.New})
}

func (m *Manager) addSecAlias(old, new uint64, first uint32) {
	if m.secAlias == nil {
		m.secAlias = map[uint64]secAlias{}
	}
	m.secAlias[old] = secAlias{to: new, first: first}
}

// onSecAck counts acknowledgements on a new section's root, and the roots'
// answers on PE 0.
func (m *Manager) onSecAck(am *SecAckMsg) {
	if am.Coll != 0 { // on PE 0: a root is done
		c := m.coll(am.Coll)
		if c == nil || c.sync.refreshing == 0 {
			m.failf("PE %d: unexpected answer about section %d", m.Me(), am.Sec)
			return
		}
		if am.Done {
			c.sync.report.SectionsMoved++
		}
		if c.sync.refreshing--; c.sync.refreshing == 0 {
			m.syncFinish(c)
		}
		return
	}
	for _, s := range m.secs {
		if rf := s.refresh; rf != nil && rf.to == am.Sec {
			if rf.acks--; rf.acks == 0 {
				s.refresh = nil
				m.sendSys(0, tSecAck, &SecAckMsg{Sec: s.ID, Coll: rf.req.Coll, Done: true})
			}
			return
		}
	}
	m.failf("PE %d: acknowledgement for section %d, which it is not setting up", m.Me(), am.Sec)
}

// replaceSection finishes setting up section s, which replaces another
// from the old one's round FirstRound on (s's round 0): the old id means s
// from now on, and the local members count here. A member that hears of s
// first from one of its multicasts starts at round 0 as it should.
func (m *Manager) replaceSection(s *Section, sm *SectionMsg) {
	for _, a := range sm.Ancestors { // a PE new to the section learns them all
		m.addSecAlias(a.Old, a.New, a.First)
	}
	m.addSecAlias(sm.Replaces, sm.Sec, sm.FirstRound)
	c := m.coll(s.Coll)
	if c == nil {
		return
	}
	for i, ix := range s.Members {
		if i > 0 && s.Members[i-1] == ix {
			continue
		}
		if e := c.get(ix); e != nil {
			m.carryMembership(e, sm.Sec, int32(m.Me()))
		}
	}
}

// carryMembership moves e's membership of any section that section new
// replaced (directly or not) to new, its rounds renumbered (counted on
// home, or -1: its root knows where).
func (m *Manager) carryMembership(e *Element, new uint64, home int32) *SecMembership {
	if mem := e.Secs[new]; mem != nil {
		return mem
	}
	mem := &SecMembership{Sec: new, Home: home}
	for id, o := range e.Secs {
		if id == new || m.secNow(id) != new {
			continue
		}
		// o counts in id's numbering: each replacement since starts its
		// rounds again from 0 at its predecessor's round first
		r := o.RedNo
		for x := id; x != new; {
			a := m.secAlias[x]
			r = max(r, a.first) - a.first
			x = a.to
		}
		mem.RedNo, mem.Mult, mem.Count = r, o.Mult, o.Count
		delete(e.Secs, id)
		break
	}
	if s := m.secs[new]; s != nil {
		if h, mult := s.member(e.Index); mult > 0 {
			mem.Home, mem.Mult = h, mult
		}
	}
	if e.Secs == nil {
		e.Secs = map[uint64]*SecMembership{}
	}
	e.Secs[new] = mem
	return mem
}

// HeldContrib is a section contribution of an element waiting at AtSync,
// made when it resumes (see the top of the file). It migrates with the
// element; on the wire its value is encoded by its reducer's codec.
type HeldContrib struct {
	Sec     uint64
	Reducer uint32
	CB      Callback
	v       any
	// owned: held on the PE that made it. One that migrated came in a
	// message a log may keep and send again (within a process, the same
	// memory): the reduction must not take it back into its pool (a
	// recovering PE was sent the migration again and added a value the
	// pool had given to another contribution since: LeanMD's forces
	// after a failure at step 8, load balancing at 6, differed in about
	// one run of five).
	owned bool
}

type heldWire struct {
	Sec     uint64
	Reducer uint32
	CB      Callback
	Value   []byte
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (h HeldContrib) EncodeMsgpack(enc *msgpack.Encoder) error {
	r, err := reducerCodec(h.Reducer)
	if err != nil {
		return err
	}
	w := heldWire{Sec: h.Sec, Reducer: h.Reducer, CB: h.CB}
	if w.Value, err = r.Codec.Encode(h.v); err != nil {
		return err
	}
	return enc.Encode(&w)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (h *HeldContrib) DecodeMsgpack(dec *msgpack.Decoder) error {
	var w heldWire
	if err := dec.Decode(&w); err != nil {
		return err
	}
	r, err := reducerCodec(w.Reducer)
	if err != nil {
		return err
	}
	v, err := r.Codec.Decode(w.Value)
	if err != nil {
		return fmt.Errorf("held contribution to section %d: reducer %s value: %w", w.Sec, r.Name, err)
	}
	*h = HeldContrib{Sec: w.Sec, Reducer: w.Reducer, CB: w.CB, v: v}
	return nil
}

// releaseHeld makes the contributions e held while it waited at AtSync.
func (m *Manager) releaseHeld(e *Element) {
	held := e.held
	e.held = nil
	for _, h := range held {
		m.contribute(e, h.Sec, h.Reducer, h.CB, h.v, h.owned)
	}
}
