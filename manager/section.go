package manager

// Sections: a subset of an array's elements with a spanning tree over
// their PEs — set up, multicast down the tree, delivered to the members on
// each PE (a member listed k times, k times).

import (
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

// Section is one PE's part of an array section: its place in the section's
// spanning tree, the members it delivers to and counts contributions for.
type Section struct {
	ID      uint64
	Coll    uint32
	Tree    *Tree
	Members []pe.Index // members homed on this PE, sorted (a member listed k times appears k times)
	red     *Reduction
	setup   *SectionMsg // how it was set up (a restart sets it up again); its Members are sorted
	refresh *secRefresh // root: being set up again after a balancing step
}

// member finds ix among the section's members (binary search: a map per
// section was a fifth of LeanMD's live heap): its home, and how many
// times it is listed (0: it is no member).
func (s *Section) member(ix pe.Index) (home int32, mult uint32) {
	ms := s.setup.Members
	i, found := slices.BinarySearchFunc(ms, ix, pe.Index.Compare)
	if !found {
		return -1, 0
	}
	j := i + 1
	for j < len(ms) && ms[j] == ix {
		j++
	}
	return s.setup.Homes[i], uint32(j - i)
}

func (s *Section) coll(m *Manager) *Collection { return m.coll(s.Coll) }

// SectionRoot is the PE at the root of section sec's tree.
func SectionRoot(sec uint64) int { return int(sec>>40) - 1 }

// A section's id is its root PE plus one in the bits from 40 up, the
// times it was set up again in the 16 bits below, and its number among
// the sections made on its root in the 24 bits below those. A section set
// up again keeps its root and number: its new id is the same in every
// execution, whatever order its root sets its sections up again in (a
// protocol that names messages by their origin needs the same messages,
// and a multicast names its section).
const (
	secGenShift = 24
	secSeqMask  = 1<<secGenShift - 1
	secGenMask  = (1<<16 - 1) << secGenShift
)

// newSectionID numbers a new section rooted on this PE.
func (m *Manager) newSectionID() (uint64, error) {
	if m.nextSec >= secSeqMask {
		return 0, fmt.Errorf("PE %d made %d sections: a PE roots at most %d", m.Me(), m.nextSec, secSeqMask)
	}
	m.nextSec++
	return uint64(m.Me()+1)<<40 | m.nextSec, nil
}

// renewedSectionID is the id of section old set up again on this PE.
func (m *Manager) renewedSectionID(old uint64) (uint64, error) {
	if SectionRoot(old) == m.Me() && old&secGenMask != secGenMask {
		return old + 1<<secGenShift, nil
	}
	// rooted elsewhere than its id says (after a restart on other PEs),
	// or set up again 65535 times: a new number
	return m.newSectionID()
}

// NewSection makes a section of collection c with the given members, rooted
// on this PE, and sets it up on every PE of its tree.
func (m *Manager) NewSection(c *Collection, members []pe.Index) (uint64, error) {
	if len(members) == 0 {
		return 0, fmt.Errorf("section of %s: no members", c.Name)
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, pe.Index.Compare)
	// Duplicates stay: a member listed k times gets every multicast k times
	// and makes k contributions to each of the section's reductions
	// (LeanMD's compute pairing a cell with its own periodic image).
	for _, ix := range ms {
		if err := c.InBounds(ix); err != nil {
			return 0, fmt.Errorf("section of %s: %w", c.Name, err)
		}
	}
	id, err := m.newSectionID()
	if err != nil {
		return 0, fmt.Errorf("section of %s: %w", c.Name, err)
	}
	b := &sectionBuild{id: id, coll: c.ID, members: ms, homes: make([]int32, len(ms))}
	// Each member is delivered to and counted on the PE where it is now, so
	// multicasts need no forwarding (and, under message logging, neither
	// the multicast nor the contribution crosses PEs twice as a logged
	// point-to-point message). Only the member's home PE knows where it
	// is for sure (every PE a member arrives at tells it); another PE's
	// cache is only as new as the last message that corrected it, and
	// after load balancing it is mostly stale. So members are looked up at
	// their home, unless this PE is that home or has never heard of them
	// leaving a dense array's home; until the section is set up its
	// multicasts and contributions wait at the root.
	for i, ix := range ms {
		switch l, ok := c.getLoc(ix); {
		case c.get(ix) != nil:
			b.homes[i] = int32(m.Me())
		case m.home(c, ix) == m.Me() && (ok || !c.Sparse):
			// (a sparse array's element this home has not heard of yet is
			// being inserted elsewhere: asked below, as any other, its
			// answer waits for the insertion — a guess would depend on
			// which came first, and a re-execution may guess otherwise)
			if b.homes[i] = int32(m.Me()); ok && l.pe >= 0 {
				b.homes[i] = l.pe
			}
		case !ok && !c.Sparse:
			b.homes[i] = int32(m.home(c, ix)) // it holds it unless it moved
		default:
			b.homes[i] = -1
			b.missing++
			if i == 0 || ms[i-1] != ix { // one query per distinct member
				m.sendSys(m.home(c, ix), tLocQuery, &LocQueryMsg{Coll: c.ID, Index: ix, Sec: id, From: int32(m.Me())})
			}
		}
	}
	if b.missing == 0 {
		m.finishSection(b)
		return id, nil
	}
	if m.building == nil {
		m.building = map[uint64]*sectionBuild{}
	}
	m.building[id] = b
	return id, nil
}

type sectionBuild struct {
	id      uint64
	coll    uint32
	members []pe.Index
	homes   []int32
	missing int
}

func (m *Manager) finishSection(b *sectionBuild) {
	pes := make([]int, len(b.homes))
	for i, h := range b.homes {
		pes[i] = int(h)
	}
	t := SectionTreeIn(m.Me(), pes, m.opt.Branching, m.layout())
	sm := &SectionMsg{Sec: b.id, Coll: b.coll, Tree: t.Members, K: t.K, Members: b.members, Homes: b.homes}
	for _, p := range t.Members {
		m.sendSys(p, tSection, sm)
	}
}

// onLocQuery answers where an element is: from its PE, or from its home
// (which waits for the location if the element is still being inserted).
func (m *Manager) onLocQuery(env *pe.Envelope) {
	q := env.Payload.(*LocQueryMsg)
	c := m.collFor(q.Coll, env)
	if c == nil {
		return
	}
	reply := func(p int32, moves uint32) {
		m.sendSys(int(q.From), tLoc, &LocMsg{Coll: q.Coll, Index: q.Index, PE: p, Moves: moves, Sec: q.Sec})
	}
	if e := c.get(q.Index); e != nil {
		reply(int32(m.Me()), e.Moves)
		return
	}
	if l, ok := c.getLoc(q.Index); ok && l.pe >= 0 && int(l.pe) != m.Me() {
		if m.home(c, q.Index) == m.Me() {
			reply(l.pe, l.moves)
		} else {
			m.send(int(l.pe), env)
		}
		return
	}
	if m.home(c, q.Index) != m.Me() {
		m.send(m.home(c, q.Index), env)
		return
	}
	e := *env
	e.Index = q.Index
	c.homeBuf[q.Index] = append(c.homeBuf[q.Index], e) // answered by its PE once it exists
}

func (m *Manager) sectionMemberFound(lm *LocMsg) {
	b := m.building[lm.Sec]
	if b == nil {
		return
	}
	i, ok := slices.BinarySearchFunc(b.members, lm.Index, pe.Index.Compare)
	if !ok || b.homes[i] >= 0 {
		return
	}
	for ; i < len(b.members) && b.members[i] == lm.Index; i++ {
		b.homes[i] = lm.PE
		b.missing--
	}
	if b.missing == 0 {
		delete(m.building, b.id)
		m.finishSection(b)
	}
}

func (m *Manager) onSection(sm *SectionMsg) {
	if len(sm.Members) != len(sm.Homes) {
		m.failf("section %d: %d members but %d homes", sm.Sec, len(sm.Members), len(sm.Homes))
		return
	}
	t := NewTreeIn(sm.Tree, sm.K, m.layout())
	me := m.Me()
	s := &Section{ID: sm.Sec, Coll: sm.Coll, Tree: t, setup: sm}
	kids := t.Children(me, nil)
	s.red = NewReduction(t.Parent(me), kids)
	below := make(map[int]int, len(kids)) // PE -> child whose subtree holds it
	for _, k := range kids {
		for _, p := range t.Subtree(k, nil) {
			below[p] = k
		}
	}
	childN := map[int]int64{}
	for i, ix := range sm.Members {
		h := int(sm.Homes[i])
		if h == me {
			s.Members = append(s.Members, ix)
		} else if k, ok := below[h]; ok {
			childN[k]++
		}
	}
	m.acts = s.red.AddLocal(0, int64(len(s.Members)), m.acts[:0])
	for _, k := range kids {
		m.acts = s.red.AddChildCount(k, 0, childN[k], m.acts)
	}
	m.acts = s.red.Enable(m.acts)
	m.secs[s.ID] = s
	m.runActs(m.coll(s.Coll), s)
	if sm.Replaces != 0 {
		m.replaceSection(s, sm)
	}
	if m.rec.complete != nil {
		m.applyComplete(s.ID)
	}
	if buf := m.pendingSec[s.ID]; buf != nil {
		delete(m.pendingSec, s.ID)
		for i := range buf {
			m.handle(&buf[i]) // accepted already: not past the FT hook again
			m.Processed--
		}
	}
}

func (m *Manager) secFor(id uint64, env *pe.Envelope) *Section {
	if s := m.secs[id]; s != nil {
		return s
	}
	m.keepOrigin(env)
	m.pendingSec[id] = append(m.pendingSec[id], *env)
	return nil
}

// Multicast invokes entry typ on every member of section sec: one message
// travels down the section's tree, and each tree PE delivers to the members
// homed on it.
func (m *Manager) Multicast(coll uint32, sec uint64, typ uint32, payload any) {
	m.MulticastFrom(nil, coll, sec, typ, payload)
}

// MulticastFrom is Multicast for a message element e sends (see from).
func (m *Manager) MulticastFrom(e *Element, coll uint32, sec uint64, typ uint32, payload any) {
	m.from(e)
	m.multicast(coll, sec, typ, payload)
	m.sent()
}

func (m *Manager) multicast(coll uint32, sec uint64, typ uint32, payload any) {
	sec = m.secNow(sec) // set up again since? (else its root knows)
	m.Stats.Multicasts++
	size := PayloadSize(payload)
	m.Stats.addBytes(&m.Stats.MulticastBytes, size)
	if m.lb.cur != nil {
		m.lbSent(lbDest{Sec: sec}, size)
	}
	env := pe.Envelope{Type: typ, Coll: coll, Kind: pe.KindMulticast, Aux: sec, Payload: payload}
	if root := m.sectionRoot(sec); root != m.Me() {
		env.Flags = flagSecReq
		m.send(root, &env)
		return
	}
	env.Flags = flagSecHop
	m.onSecHop(&env)
}

// onSecHop passes a multicast down its section's tree, and queues one
// message to this PE for its members here (deliverSecHere runs them all),
// not one message per member: under message logging each message this PE
// receives costs a determinant. It is queued rather than run at once so
// that the members take their turn after what reached the PE before them,
// as a message each would (run at once, they held back the reductions
// that finish a step, and LeanMD ran 3% slower on 2 PEs); and the root
// PE's own multicast comes from an entry method, which must return
// before another runs.
func (m *Manager) onSecHop(env *pe.Envelope) {
	s := m.secFor(env.Aux, env)
	if s == nil {
		return
	}
	m.sendTree(s.Tree, s.ID, env)
	if len(s.Members) == 0 {
		return
	}
	here := *env
	here.Flags = flagSecHere
	m.send(m.Me(), &here)
}

// deliverSecHere delivers a multicast to section s's members on this PE
// (each as often as it is listed); one that left is sent on.
func (m *Manager) deliverSecHere(s *Section, c *Collection, env *pe.Envelope) {
	for i, ix := range s.Members {
		// a member listed k times is k consecutive entries (the list is
		// sorted): its multiplicity is the length of its run
		mult, occ := 1, uint64(0)
		for j := i - 1; j >= 0 && s.Members[j] == ix; j-- {
			mult++
			occ++
		}
		for j := i + 1; j < len(s.Members) && s.Members[j] == ix; j++ {
			mult++
		}
		one := *env
		one.Flags, one.Index, one.Seq = flagSecElem, ix, uint64(m.Me())|uint64(mult)<<32
		if occ > 0 && m.dedup != nil && env.FT != nil && env.FT.Name != nil {
			// the member's second delivery of the one multicast is another
			// message to it (ftlayer.ElementDedup), wherever it goes
			h, n := *env.FT, *env.FT.Name
			n.Num, h.Name = occ, &n
			one.FT = &h
		}
		if e := c.get(ix); e != nil {
			m.deliverSecElem(e, &one)
			m.PE.Unit()
			continue
		}
		m.Stats.ForwardedDeliveries++
		m.route(c, &one)
	}
}

// deliverSecElem runs a section multicast's entry method on member e; env
// says which PE the section counts e on (Seq).
func (m *Manager) deliverSecElem(e *Element, env *pe.Envelope) {
	if m.dedup != nil && !m.deliverTo(e, env) {
		return
	}
	m.Stats.Deliveries++
	if _, replaced := m.secAlias[env.Aux]; replaced {
		// a multicast that went down the old tree: the member counts in
		// the new section now
		m.invoke(e, env)
		m.afterInvoke(e)
		return
	}
	mem := e.Secs[env.Aux]
	if mem == nil {
		if e.Secs == nil {
			e.Secs = map[uint64]*SecMembership{}
		}
		mem = &SecMembership{Sec: env.Aux}
		e.Secs[env.Aux] = mem
	}
	mem.Home, mem.Mult = int32(uint32(env.Seq)), uint32(env.Seq>>32)
	m.invoke(e, env)
	m.afterInvoke(e)
}

// SecRoot places section Sec's root on a PE other than its id says (the
// id's PE does not exist after a restart on fewer PEs).
type SecRoot struct {
	Sec  uint64
	Root int32
}

// sectionRoot is the PE at the root of section sec's tree on this run.
func (m *Manager) sectionRoot(sec uint64) int {
	if r, ok := m.secRoots[sec]; ok {
		return r
	}
	return SectionRoot(sec)
}
