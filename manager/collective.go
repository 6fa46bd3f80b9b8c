package manager

import (
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
)

// Broadcast invokes entry typ on every element of c. All broadcasts of a
// collection are numbered by its root PE (0) so that every element sees them
// in one order, and an element that migrates neither misses nor repeats one.
//
// The broadcast always goes through the queue to the root, even from the
// root itself, so it reaches elements whose insertion the caller requested
// before broadcasting.
func (m *Manager) Broadcast(coll uint32, typ uint32, payload any) {
	m.Stats.Broadcasts++
	m.Stats.bytes(&m.Stats.BroadcastBytes, payload)
	m.send(0, &pe.Envelope{Type: typ, Coll: coll, Kind: pe.KindMulticast, Flags: flagBcastReq, Payload: payload})
}

func (m *Manager) bcastRoot(c *Collection, env pe.Envelope) {
	c.bcastNext++
	env.Seq = c.bcastNext
	env.Flags = flagBcastHop
	m.onBcastHop(c, &env)
}

func (m *Manager) onBcastHop(c *Collection, env *pe.Envelope) {
	if c.Sparse && !c.doneInserting {
		// Insertions made for this PE may still be on their way: a
		// broadcast reaches every element inserted before DoneInserting.
		c.bcastHeld = append(c.bcastHeld, *env)
		return
	}
	if env.Seq != c.bcastDelivered+1 {
		m.failf("broadcast %d to %s reached PE %d after broadcast %d (out of order)", env.Seq, c.Name, m.Me(), c.bcastDelivered)
		return
	}
	c.bcastDelivered = env.Seq
	c.remember(bcastRec{seq: env.Seq, typ: env.Type, payload: env.Payload})
	m.sendTree(c.tree, uint64(c.ID), env)
	for _, e := range c.Locals() {
		if e.Bcast < env.Seq {
			m.send(m.Me(), &pe.Envelope{Type: env.Type, Coll: c.ID, Kind: pe.KindMulticast, Flags: flagBcastElem, Index: e.Index, Seq: env.Seq, Payload: env.Payload})
		}
	}
}

// remember keeps a delivered broadcast for elements that arrive without
// it, in a ring indexed by number: after a restart the numbering goes on
// from the checkpoint's, with nothing kept from before it.
func (c *Collection) remember(r bcastRec) {
	i := int(r.seq % bcastHistory)
	for len(c.history) <= i {
		c.history = append(c.history, bcastRec{})
	}
	c.history[i] = r
}

func (c *Collection) historyAt(seq uint64) (bcastRec, bool) {
	if seq == 0 || seq > c.bcastDelivered {
		return bcastRec{}, false
	}
	i := int(seq % bcastHistory)
	if i >= len(c.history) {
		return bcastRec{}, false
	}
	r := c.history[i]
	return r, r.seq == seq
}

// deliverBcast delivers broadcast env.Seq to e, first any it missed.
func (m *Manager) deliverBcast(e *Element, env *pe.Envelope) {
	c := e.Coll
	if e.Bcast+1 == env.Seq { // the usual case: no gap to fill
		e.Bcast = env.Seq
		m.host.Invoke(m, e, env)
		m.afterInvoke(e)
		return
	}
	for e.Bcast < env.Seq {
		next := e.Bcast + 1
		var typ uint32
		var payload any
		if next == env.Seq {
			typ, payload = env.Type, env.Payload
		} else if r, ok := c.historyAt(next); ok {
			typ, payload = r.typ, r.payload
		} else {
			m.failf("%s%v on PE %d missed broadcast %d and it is no longer kept", c.Name, e.Index, m.Me(), next)
			return
		}
		e.Bcast = next
		one := pe.Envelope{Type: typ, Coll: c.ID, Kind: pe.KindMulticast, Flags: flagBcastElem, Index: e.Index, Seq: next, Payload: payload}
		m.host.Invoke(m, e, &one)
		m.afterInvoke(e)
		if c.get(e.Index) != e {
			if e.Bcast < env.Seq { // moved on: the rest follow it
				m.route(c, env)
			}
			return
		}
	}
}

// catchUpBroadcasts queues for a newly arrived element the broadcasts this
// PE delivered that it had not seen.
func (m *Manager) catchUpBroadcasts(e *Element) {
	c := e.Coll
	for s := e.Bcast + 1; s <= c.bcastDelivered; s++ {
		r, ok := c.historyAt(s)
		if !ok {
			m.failf("%s%v arrived on PE %d without broadcast %d, which is no longer kept", c.Name, e.Index, m.Me(), s)
			return
		}
		m.send(m.Me(), &pe.Envelope{Type: r.typ, Coll: c.ID, Kind: pe.KindMulticast, Flags: flagBcastElem, Index: e.Index, Seq: s, Payload: r.payload})
	}
}

// Section is one PE's part of an array section: its place in the section's
// spanning tree, the members it delivers to and counts contributions for.
type Section struct {
	ID      uint64
	Coll    uint32
	Tree    *Tree
	Members []pe.Index // members homed on this PE, sorted (a member listed k times appears k times)
	red     *Reduction
	setup   *SectionMsg // how it was set up (a restart sets it up again); its Members are sorted
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
	m.nextSec++
	id := uint64(m.Me()+1)<<40 | m.nextSec
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
		case m.home(c, ix) == m.Me():
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
	t := SectionTree(m.Me(), pes, m.opt.Branching)
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
	t := NewTree(sm.Tree, sm.K)
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
	m.pendingSec[id] = append(m.pendingSec[id], *env)
	return nil
}

// Multicast invokes entry typ on every member of section sec: one message
// travels down the section's tree, and each tree PE delivers to the members
// homed on it.
func (m *Manager) Multicast(coll uint32, sec uint64, typ uint32, payload any) {
	m.Stats.Multicasts++
	m.Stats.bytes(&m.Stats.MulticastBytes, payload)
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
		mult := 1
		for j := i - 1; j >= 0 && s.Members[j] == ix; j-- {
			mult++
		}
		for j := i + 1; j < len(s.Members) && s.Members[j] == ix; j++ {
			mult++
		}
		one := *env
		one.Flags, one.Index, one.Seq = flagSecElem, ix, uint64(m.Me())|uint64(mult)<<32
		if e := c.get(ix); e != nil {
			m.deliverSecElem(e, &one)
			m.PE.Progress()
			continue
		}
		m.Stats.ForwardedDeliveries++
		m.route(c, &one)
	}
}

// Contribute adds e's value to the next reduction of its collection
// (sec == 0) or of section sec.
func (m *Manager) Contribute(e *Element, sec uint64, reducer uint32, cb Callback, v any) {
	c := e.Coll
	m.Stats.Contributions++
	m.Stats.bytes(&m.Stats.ReductionBytes, v)
	var r uint32
	home := int(e.RedHome)
	if sec == 0 {
		r = e.RedNo
		e.RedNo++
	} else {
		mem := e.Secs[sec]
		if mem == nil {
			if e.Secs == nil {
				e.Secs = map[uint64]*SecMembership{}
			}
			mem = &SecMembership{Sec: sec, Home: -1}
			e.Secs[sec] = mem
		}
		r = mem.RedNo
		if mem.Count++; mem.Count >= max(mem.Mult, 1) {
			mem.RedNo++
			mem.Count = 0
		}
		home = int(mem.Home)
		if home < 0 {
			home = m.sectionRoot(sec) // it knows every member's home
		}
	}
	if home == m.Me() {
		m.contributeHere(c.ID, sec, r, e.Index, reducer, cb, v, nil)
		return
	}
	m.send(home, &pe.Envelope{Type: tContrib, Coll: c.ID, Kind: pe.KindReduction, Payload: &ContribMsg{
		Coll: c.ID, Sec: sec, Red: r, Key: e.Index, Reducer: reducer, CB: cb, v: v}})
}

func (m *Manager) contributeHere(coll uint32, sec uint64, r uint32, key pe.Index, reducer uint32, cb Callback, v any, env *pe.Envelope) {
	// env is nil for a value a chare on this PE handed over: the
	// reduction may recycle it. One that came in a message may be in its
	// sender's log.
	contribute := (*Reduction).Contribute
	if env == nil {
		contribute = (*Reduction).ContributeOwned
	}
	if sec == 0 {
		c := m.coll(coll)
		if c == nil {
			m.pendingColl[coll] = append(m.pendingColl[coll], *env)
			return
		}
		m.acts = contribute(c.red, r, key, reducer, cb, v, m.acts[:0])
		m.runActs(c, nil)
		return
	}
	s := m.secs[sec]
	if s == nil {
		// Not set up here yet (a section still resolving its members).
		if env == nil {
			env = &pe.Envelope{Type: tContrib, Coll: coll, Kind: pe.KindReduction, Payload: &ContribMsg{
				Coll: coll, Sec: sec, Red: r, Key: key, Reducer: reducer, CB: cb, v: v}}
		}
		m.pendingSec[sec] = append(m.pendingSec[sec], *env)
		return
	}
	if h, mult := s.member(key); mult == 0 {
		m.failf("section %d of %s: contribution from %v, which is not a member", sec, m.collName(coll), key)
		return
	} else if int(h) != m.Me() {
		cm := &ContribMsg{Coll: coll, Sec: sec, Red: r, Key: key, Reducer: reducer, CB: cb, v: v}
		m.send(int(h), &pe.Envelope{Type: tContrib, Coll: coll, Kind: pe.KindReduction, Payload: cm})
		return
	}
	m.acts = contribute(s.red, r, key, reducer, cb, v, m.acts[:0])
	m.runActs(m.coll(coll), s)
}

func (m *Manager) collName(id uint32) string {
	if c := m.coll(id); c != nil {
		return c.Name
	}
	return fmt.Sprintf("collection#%d", id)
}

func (m *Manager) onContrib(env *pe.Envelope) {
	cm := env.Payload.(*ContribMsg)
	m.contributeHere(cm.Coll, cm.Sec, cm.Red, cm.Key, cm.Reducer, cm.CB, cm.v, env)
}

func (m *Manager) onPartial(env *pe.Envelope) {
	pm := env.Payload.(*PartialMsg)
	if pm.Sec != 0 {
		s := m.secFor(pm.Sec, env)
		if s == nil {
			return
		}
		m.acts = s.red.Child(int(env.Src), pm.p, m.acts[:0])
		m.runActs(m.coll(pm.Coll), s)
		return
	}
	c := m.collFor(pm.Coll, env)
	if c == nil {
		return
	}
	m.acts = c.red.Child(int(env.Src), pm.p, m.acts[:0])
	m.runActs(c, nil)
}

// runActs executes the reduction state machine's actions in m.acts.
func (m *Manager) runActs(c *Collection, s *Section) {
	if len(m.acts) == 0 {
		return
	}
	acts := m.acts
	m.acts = nil // a callback below may start another reduction
	var sec uint64
	var coll uint32
	name := "?"
	if c != nil {
		coll, name = c.ID, c.Name
	}
	g := uint64(coll)
	if s != nil {
		sec, coll, g = s.ID, s.Coll, s.ID
		name = fmt.Sprintf("section %d of %s", s.ID, name)
	}
	for _, a := range acts {
		switch a.Op {
		case RedSendParent:
			pm := &PartialMsg{Coll: coll, Sec: sec, p: a.Partial}
			if m.ft.LogsSent() {
				pm.owned = a.Partial.handOver(LookupReducer(a.Partial.Reducer), m.ft.Releases())
			}
			m.sendHop(a.To, ftlayer.RolePartial, g, uint64(a.Partial.Red)+1, false,
				&pe.Envelope{Type: tPartial, Coll: coll, Kind: pe.KindReduction, Payload: pm})
		case RedDeliver:
			m.DeliverCallback(a.Partial.CB, a.Result)
			var kept *pe.Envelope
			if m.ft.LogsSent() && hasChildren(c, s) {
				// what a message log may keep in place of the partials
				// (none came where the root has no children)
				p := &Partial{Red: a.Partial.Red, Reducer: a.Partial.Reducer, CB: a.Partial.CB, Count: a.Partial.Count,
					Witness: a.Partial.Witness, Complete: true, Result: a.Result}
				kept = &pe.Envelope{Type: tPartial, Coll: coll, Kind: pe.KindReduction, Payload: &PartialMsg{Coll: coll, Sec: sec, p: p}}
			}
			m.ft.Reduced(g, uint64(a.Partial.Red)+1, kept)
		case RedSkipped:
			// as the failed incarnation counted them (see RedSkipped)
			m.Sent++
			m.Processed += uint64(a.Missing)
		case RedCopy:
			m.Processed-- // counted when handled; its original was
		case RedFail:
			m.failf("%s: %v", name, a.Err)
		}
	}
	clear(acts)
	if m.acts == nil {
		m.acts = acts[:0]
	}
}

// hasChildren reports whether the tree of collection c (or of section s)
// has PEs below its root.
func hasChildren(c *Collection, s *Section) bool {
	t := (*Tree)(nil)
	switch {
	case s != nil:
		t = s.Tree
	case c != nil:
		t = c.tree
	}
	return t != nil && len(t.Members) > 1
}

// DeliverCallback sends a result to where cb points.
func (m *Manager) DeliverCallback(cb Callback, result any) {
	switch cb.Kind {
	case CBElem:
		if err := m.SendTo(cb.Coll, cb.Index, cb.Entry, result); err != nil {
			m.Fail(err)
		}
	case CBBroadcast:
		m.Broadcast(cb.Coll, cb.Entry, result)
	case CBFuture:
		m.sendSys(int(cb.PE), tFuture, &FutureMsg{ID: cb.Future, Value: Lazy{V: result}})
	}
}
