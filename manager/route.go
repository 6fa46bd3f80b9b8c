package manager

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

// Flags of application envelopes: how the envelope is being routed.
const (
	flagP2P       uint8 = iota
	flagBcastReq        // to the collection's root PE, which numbers it
	flagBcastHop        // one hop down the PE tree; Seq is the broadcast number
	flagBcastElem       // delivery to one element; Seq is the broadcast number
	flagSecReq          // to the section's root PE; Aux is the section
	flagSecHop          // one hop down the section tree
	flagSecElem         // delivery to one member; Seq is the member's section home
	// FlagInline is a plain point-to-point message whose payload is stored
	// in the envelope's Seq and Aux words (see pe.InlineSize).
	FlagInline
	flagSecHere // a multicast's deliveries to the members on its root PE
)

// SendTo sends an entry-method invocation to element ix of collection coll.
// Bad indices are reported to the caller before anything is queued.
func (m *Manager) SendTo(coll uint32, ix pe.Index, typ uint32, payload any) error {
	env := pe.Envelope{Type: typ, Coll: coll, Kind: pe.KindP2P, Index: ix, Payload: payload}
	return m.SendEnv(&env)
}

// SendEnv routes a point-to-point envelope (Type, Coll, Index and payload
// set) to its element.
func (m *Manager) SendEnv(env *pe.Envelope) error {
	coll, ix, typ := env.Coll, env.Index, env.Type
	m.Stats.P2P++
	if env.Flags == FlagInline {
		m.Stats.P2PBytes += pe.InlineSize
	} else {
		m.Stats.bytes(&m.Stats.P2PBytes, env.Payload)
	}
	c := m.coll(coll)
	if c == nil {
		// The creation has not reached this PE yet: route once it has.
		m.send(m.Me(), env)
		return nil
	}
	if c.dense != nil {
		// Bounded array: one slot computation checks the index and finds
		// the element's PE.
		i := c.slot(ix)
		if i < 0 {
			return fmt.Errorf("send %s to %s%v: %w", pe.TypeName(typ), c.Name, ix, c.InBounds(ix))
		}
		switch l := c.dlocs[i]; {
		case c.dense[i] != nil:
			m.send(m.Me(), env)
		case l.pe >= 0:
			m.send(int(l.pe), env)
		default:
			m.send(m.homeOfSlot(c, ix, i), env)
		}
		return nil
	} else if err := c.InBounds(ix); err != nil {
		return fmt.Errorf("send %s to %s%v: %w", pe.TypeName(typ), c.Name, ix, err)
	}
	m.route(c, env)
	return nil
}

// route sends env toward its element by the best location this PE knows.
func (m *Manager) route(c *Collection, env *pe.Envelope) {
	ix := env.Index
	if c.get(ix) != nil {
		m.send(m.Me(), env)
		return
	}
	if l, ok := c.getLoc(ix); ok && l.pe >= 0 && int(l.pe) != m.Me() {
		m.send(int(l.pe), env)
		return
	}
	m.send(m.home(c, ix), env)
}

func (m *Manager) handleApp(env *pe.Envelope) {
	c := m.collFor(env.Coll, env)
	if c == nil {
		return
	}
	switch env.Flags {
	case flagBcastReq:
		m.bcastRoot(c, *env)
		return
	case flagBcastHop:
		m.onBcastHop(c, env)
		return
	case flagSecReq:
		e := *env
		e.Flags = flagSecHop
		m.onSecHop(&e)
		return
	case flagSecHop:
		m.onSecHop(env)
		return
	case flagSecHere:
		if s := m.secFor(env.Aux, env); s != nil {
			m.deliverSecHere(s, c, env)
		}
		return
	}
	e := c.get(env.Index)
	if e == nil {
		m.forward(c, env)
		return
	}
	switch env.Flags {
	case flagBcastElem:
		m.deliverBcast(e, env)
		return
	case flagSecElem:
		m.deliverSecElem(e, env)
		return
	}
	m.host.Invoke(m, e, env)
	m.afterInvoke(e)
}

// deliverSecElem runs a section multicast's entry method on member e; env
// says which PE the section counts e on (Seq).
func (m *Manager) deliverSecElem(e *Element, env *pe.Envelope) {
	m.Stats.Deliveries++
	mem := e.Secs[env.Aux]
	if mem == nil {
		if e.Secs == nil {
			e.Secs = map[uint64]*SecMembership{}
		}
		mem = &SecMembership{Sec: env.Aux}
		e.Secs[env.Aux] = mem
	}
	mem.Home, mem.Mult = int32(uint32(env.Seq)), uint32(env.Seq>>32)
	m.host.Invoke(m, e, env)
	m.afterInvoke(e)
}

// forward passes on a message for an element that is not on this PE.
func (m *Manager) forward(c *Collection, env *pe.Envelope) {
	ix := env.Index
	me := m.Me()
	if l, ok := c.getLoc(ix); ok {
		if l.pe < 0 {
			m.failf("message %s to %s%v: the element was deleted", pe.TypeName(env.Type), c.Name, ix)
			return
		}
		if int(l.pe) != me {
			if env.Kind == pe.KindP2P && int(env.Src) != me && env.Src != l.pe {
				// Correct the sender's cache so its next message goes direct.
				m.sendSys(int(env.Src), tLoc, &LocMsg{Coll: c.ID, Index: ix, PE: l.pe, Moves: l.moves})
			}
			m.send(int(l.pe), env)
			return
		}
	}
	if m.home(c, ix) != me {
		m.send(m.home(c, ix), env)
		return
	}
	if err := c.InBounds(ix); err != nil {
		m.failf("message %s: %v", pe.TypeName(env.Type), err)
		return
	}
	// Unknown here even after DoneInserting: its insertion's notice may
	// still be on its way (it comes from the inserting PE, DoneInserting
	// from another). Whether it exists is settled when the run goes quiet
	// (CheckQuiet).
	c.homeBuf[ix] = append(c.homeBuf[ix], *env)
}

func (m *Manager) flushHomeBuf(c *Collection, ix pe.Index) {
	buf := c.homeBuf[ix]
	if buf == nil {
		return
	}
	delete(c.homeBuf, ix)
	for i := range buf {
		m.route(c, &buf[i])
	}
}

func (m *Manager) onLoc(env *pe.Envelope) {
	lm := env.Payload.(*LocMsg)
	c := m.collFor(lm.Coll, env)
	if c == nil {
		return
	}
	if lm.Sec != 0 {
		m.sectionMemberFound(lm)
	}
	if c.get(lm.Index) != nil {
		return // we hold it: nothing is newer
	}
	if cur, ok := c.getLoc(lm.Index); !ok || lm.Moves >= cur.moves {
		c.setLoc(lm.Index, loc{pe: lm.PE, moves: lm.Moves})
	}
	if m.home(c, lm.Index) == m.Me() {
		m.flushHomeBuf(c, lm.Index)
	}
}

// afterInvoke carries out what an entry method asked for its element.
func (m *Manager) afterInvoke(e *Element) {
	if e.deleted {
		m.removeElement(e)
		return
	}
	if e.migrateTo >= 0 {
		to := e.migrateTo
		e.migrateTo = -1
		m.migrateOut(e, to)
	}
}

// RequestMigration asks that e move to PE to once its current entry method
// returns.
func (m *Manager) RequestMigration(e *Element, to int) error {
	if e.Coll.Kind != CollArray {
		return fmt.Errorf("%s%v: only array elements migrate", e.Coll.Name, e.Index)
	}
	if to < 0 || to >= m.NumPEs() {
		return fmt.Errorf("migrate %s%v to PE %d: the run has PEs 0..%d", e.Coll.Name, e.Index, to, m.NumPEs()-1)
	}
	e.migrateTo = to
	return nil
}

// MigrateElement moves element ix of coll to PE to, wherever it is now.
func (m *Manager) MigrateElement(coll uint32, ix pe.Index, to int) error {
	if to < 0 || to >= m.NumPEs() {
		return fmt.Errorf("migrate to PE %d: the run has PEs 0..%d", to, m.NumPEs()-1)
	}
	c := m.coll(coll)
	if c != nil {
		if c.Kind != CollArray {
			return fmt.Errorf("%s%v: only array elements migrate", c.Name, ix)
		}
		if err := c.InBounds(ix); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	m.send(m.Me(), &pe.Envelope{Type: tMigrateReq, Coll: coll, Kind: pe.KindSystem, Index: ix, Payload: &MigrateReqMsg{Coll: coll, Index: ix, To: int32(to)}})
	return nil
}

func (m *Manager) onMigrateReq(env *pe.Envelope) {
	req := env.Payload.(*MigrateReqMsg)
	c := m.collFor(req.Coll, env)
	if c == nil {
		return
	}
	e := c.get(req.Index)
	if e == nil {
		m.forward(c, env)
		return
	}
	m.migrateOut(e, int(req.To))
}

func (m *Manager) migrateOut(e *Element, to int) {
	c := e.Coll
	if to == m.Me() {
		return
	}
	state, err := m.host.Pack(e)
	if err != nil {
		m.failf("migrate %s%v from PE %d: pack: %v", c.Name, e.Index, m.Me(), err)
		return
	}
	secs := e.sortedSecs() // in section order: a re-execution sends the same bytes
	e.Moves++
	c.del(e.Index)
	c.setLoc(e.Index, loc{pe: int32(to), moves: e.Moves})
	m.send(to, &pe.Envelope{Type: tMigrate, Coll: c.ID, Kind: pe.KindSystem, Index: e.Index, Payload: &MigrateMsg{
		Coll: c.ID, Index: e.Index, State: state, RedHome: e.RedHome, RedNo: e.RedNo,
		Bcast: e.Bcast, Moves: e.Moves, Secs: secs, AtSync: e.AtSync, Epoch: e.Epoch,
	}})
	e.Obj = nil
}

func (m *Manager) onMigrate(env *pe.Envelope) {
	mm := env.Payload.(*MigrateMsg)
	c := m.collFor(mm.Coll, env)
	if c == nil {
		return
	}
	e := &Element{Coll: c, Index: mm.Index, RedHome: mm.RedHome, RedNo: mm.RedNo, Bcast: mm.Bcast,
		Moves: mm.Moves, AtSync: mm.AtSync, Epoch: mm.Epoch, migrateTo: -1}
	if len(mm.Secs) > 0 {
		e.Secs = make(map[uint64]*SecMembership, len(mm.Secs))
		for i := range mm.Secs {
			s := mm.Secs[i]
			e.Secs[s.Sec] = &s
		}
	}
	c.put(e)
	c.setLoc(e.Index, loc{pe: int32(m.Me()), moves: e.Moves})
	if err := m.host.Unpack(m, e, mm.State); err != nil {
		m.failf("migrate %s%v to PE %d: unpack: %v", c.Name, e.Index, m.Me(), err)
		return
	}
	if h := m.home(c, e.Index); h != m.Me() {
		m.sendSys(h, tLoc, &LocMsg{Coll: c.ID, Index: e.Index, PE: int32(m.Me()), Moves: e.Moves})
	} else {
		m.flushHomeBuf(c, e.Index)
	}
	m.catchUpBroadcasts(e)
	if e.AtSync {
		c.sync.atSync++
		m.syncArrived(c, e)
	}
	m.afterInvoke(e)
}

// RequestDelete deletes e once its current entry method returns.
func (m *Manager) RequestDelete(e *Element) { e.deleted = true }

// DeleteElement deletes element ix of coll wherever it is.
func (m *Manager) DeleteElement(coll uint32, ix pe.Index) {
	m.send(m.Me(), &pe.Envelope{Type: tDelete, Coll: coll, Kind: pe.KindSystem, Index: ix, Payload: &DeleteMsg{Coll: coll, Index: ix}})
}

func (m *Manager) onDelete(env *pe.Envelope) {
	dm := env.Payload.(*DeleteMsg)
	c := m.collFor(dm.Coll, env)
	if c == nil {
		return
	}
	e := c.get(dm.Index)
	if e == nil {
		m.forward(c, env)
		return
	}
	m.removeElement(e)
}

func (m *Manager) removeElement(e *Element) {
	c := e.Coll
	if c.Kind != CollArray {
		m.failf("%s%v: only array elements can be deleted", c.Name, e.Index)
		return
	}
	c.del(e.Index)
	c.setLoc(e.Index, loc{pe: -1, moves: e.Moves + 1})
	if h := m.home(c, e.Index); h != m.Me() {
		m.sendSys(h, tLoc, &LocMsg{Coll: c.ID, Index: e.Index, PE: -1, Moves: e.Moves + 1})
	}
	m.death(c.ID, 0, int(e.RedHome), e.RedNo)
	for _, s := range e.sortedSecs() { // sends in section order, not map order
		if s.Home >= 0 {
			m.death(c.ID, s.Sec, int(s.Home), s.RedNo)
		}
	}
	e.Obj = nil
}

func (m *Manager) death(coll uint32, sec uint64, home int, from uint32) {
	if home != m.Me() {
		m.sendSys(home, tDeath, &DeathMsg{Coll: coll, Sec: sec, From: from})
		return
	}
	m.applyCountChange(coll, sec, from, -1, nil)
}

func (m *Manager) onDeath(env *pe.Envelope) {
	dm := env.Payload.(*DeathMsg)
	m.applyCountChange(dm.Coll, dm.Sec, dm.From, -1, env)
}

// applyCountChange changes the number of contributors homed here and tells
// the tree parent, whose waiting depends on this subtree's count.
func (m *Manager) applyCountChange(coll uint32, sec uint64, from uint32, delta int64, env *pe.Envelope) {
	var red *Reduction
	var c *Collection
	var s *Section
	if sec != 0 {
		if s = m.secs[sec]; s == nil {
			if env != nil {
				m.pendingSec[sec] = append(m.pendingSec[sec], *env)
			}
			return
		}
		red, c = s.red, m.coll(coll)
	} else {
		if c = m.coll(coll); c == nil {
			if env != nil {
				m.pendingColl[coll] = append(m.pendingColl[coll], *env)
			}
			return
		}
		red = c.red
	}
	m.acts = red.AddLocal(from, delta, m.acts[:0])
	m.runActs(c, s)
	if !red.IsRoot() && (sec != 0 || c.countsSent) {
		m.sendSys(red.Parent, tCount, &CountMsg{Coll: coll, Sec: sec, From: from, Count: delta})
	}
}

// sortedSecs lists e's section memberships in section order. Whatever the
// runtime sends per membership goes in this order, not Go's map order, so
// that a PE replaying its receptions (message logging) sends the same
// messages in the same order.
func (e *Element) sortedSecs() []SecMembership {
	if len(e.Secs) == 0 {
		return nil
	}
	out := make([]SecMembership, 0, len(e.Secs))
	for _, s := range e.Secs {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b SecMembership) int { return cmp.Compare(a.Sec, b.Sec) })
	return out
}
