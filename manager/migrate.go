package manager

// Migration and deletion: moving an element with its runtime record and
// packed state, and keeping reduction contributor counts right as
// elements come and go.

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

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

// migrateOut sends e to PE to and returns the size of its packed state.
func (m *Manager) migrateOut(e *Element, to int) int64 {
	c := e.Coll
	if to == m.Me() {
		return 0
	}
	state, err := m.host.Pack(e)
	if err != nil {
		m.failf("migrate %s%v from PE %d: pack: %v", c.Name, e.Index, m.Me(), err)
		return 0
	}
	secs := e.sortedSecs() // in section order: a re-execution sends the same bytes
	if m.dedup != nil && e.FTNames.Len() > 0 {
		m.dedup.Left(&e.FTNames, to)
	}
	e.Moves++
	c.del(e.Index)
	c.setLoc(e.Index, loc{pe: int32(to), moves: e.Moves})
	m.send(to, &pe.Envelope{Type: tMigrate, Coll: c.ID, Kind: pe.KindSystem, Index: e.Index, Payload: &MigrateMsg{
		Coll: c.ID, Index: e.Index, State: state, RedHome: e.RedHome, RedNo: e.RedNo,
		Bcast: e.Bcast, Moves: e.Moves, Secs: secs, AtSync: e.AtSync, Epoch: e.Epoch, Held: e.held, Sends: e.Sends, Names: packNames(&e.FTNames),
	}})
	e.held = nil
	e.Obj = nil
	return int64(len(state))
}

func (m *Manager) onMigrate(env *pe.Envelope) {
	mm := env.Payload.(*MigrateMsg)
	c := m.collFor(mm.Coll, env)
	if c == nil {
		return
	}
	e := &Element{Coll: c, Index: mm.Index, RedHome: mm.RedHome, RedNo: mm.RedNo, Bcast: mm.Bcast,
		Moves: mm.Moves, AtSync: mm.AtSync, Epoch: mm.Epoch, Sends: mm.Sends, FTNames: unpackNames(mm.Names), held: arrivedHeld(mm.Held), migrateTo: -1}
	if len(mm.Secs) > 0 {
		e.Secs = make(map[uint64]*SecMembership, len(mm.Secs))
		for i := range mm.Secs {
			s := mm.Secs[i]
			e.Secs[s.Sec] = &s
		}
	}
	e.packed = len(mm.State)
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

// arrivedHeld is a migrated element's held contributions, none owned: the
// message they came in may be in its sender's log (a copy of the list:
// that message's is not written to).
func arrivedHeld(held []HeldContrib) []HeldContrib {
	if len(held) == 0 {
		return nil
	}
	out := make([]HeldContrib, len(held))
	for i, h := range held {
		h.owned = false
		out[i] = h
	}
	return out
}
