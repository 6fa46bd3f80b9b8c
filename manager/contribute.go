package manager

// Reductions on a PE: contributions of local elements and sections'
// members into the reduction state machines (reduce.go), partials from
// tree children, results delivered to callbacks, and what the
// fault-tolerance hook is told of each.

import (
	"fmt"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
)

// Contribute adds e's value to the next reduction of its collection
// (sec == 0) or of section sec.
func (m *Manager) Contribute(e *Element, sec uint64, reducer uint32, cb Callback, v any) {
	if sec != 0 && e.AtSync && m.opt.LB.Balancer != nil {
		e.held = append(e.held, HeldContrib{Sec: sec, Reducer: reducer, CB: cb, v: v, owned: true})
		return
	}
	m.contribute(e, sec, reducer, cb, v, true)
}

// contribute adds e's value v; owned says nothing else refers to v (a
// value handed over on this PE), so the reduction may take it back into
// its pool once added.
func (m *Manager) contribute(e *Element, sec uint64, reducer uint32, cb Callback, v any, owned bool) {
	c := e.Coll
	m.Stats.Contributions++
	size := PayloadSize(v)
	m.Stats.addBytes(&m.Stats.ReductionBytes, size)
	if m.lb.cur != nil && cb.Kind == CBElem {
		// the result goes to one element: for placement, this is what
		// the contributor sends it
		m.lbSent(lbDest{Coll: cb.Coll, Index: cb.Index}, size)
	}
	var r uint32
	home := int(e.RedHome)
	if sec == 0 {
		r = e.RedNo
		e.RedNo++
	} else {
		if now := m.secNow(sec); now != sec {
			m.carryMembership(e, now, -1)
			sec = now
		}
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
		m.contributeHere(c.ID, sec, r, e.Index, reducer, cb, v, owned, nil)
		return
	}
	m.send(home, &pe.Envelope{Type: tContrib, Coll: c.ID, Kind: pe.KindReduction, Payload: &ContribMsg{
		Coll: c.ID, Sec: sec, Red: r, Key: e.Index, Reducer: reducer, CB: cb, v: v}})
}

func (m *Manager) contributeHere(coll uint32, sec uint64, r uint32, key pe.Index, reducer uint32, cb Callback, v any, owned bool, env *pe.Envelope) {
	// owned: a value a chare on this PE handed over, which the reduction
	// may recycle. One that came in a message may be in its sender's log
	// (env, or a migrated element's held contribution).
	contribute := (*Reduction).Contribute
	if owned {
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
	if a, ok := m.secAlias[sec]; ok && r >= a.first {
		// a contribution to a section set up again, from a member that
		// did not know: it counts in the new section, where its home is,
		// in the new section's numbering
		sec, r = a.to, r-a.first
		for b, ok := m.secAlias[sec]; ok; b, ok = m.secAlias[sec] {
			sec, r = b.to, r-b.first
		}
		if m.secs[sec] == nil {
			cm := &ContribMsg{Coll: coll, Sec: sec, Red: r, Key: key, Reducer: reducer, CB: cb, v: v}
			m.send(m.sectionRoot(sec), &pe.Envelope{Type: tContrib, Coll: coll, Kind: pe.KindReduction, Payload: cm})
			return
		}
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
	m.contributeHere(cm.Coll, cm.Sec, cm.Red, cm.Key, cm.Reducer, cm.CB, cm.v, false, env)
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
			if m.ftOn && m.ft.LogsSent() {
				pm.owned = a.Partial.handOver(LookupReducer(a.Partial.Reducer), m.ft.Releases())
			}
			m.sendHop(a.To, ftlayer.RolePartial, g, uint64(a.Partial.Red)+1, false,
				&pe.Envelope{Type: tPartial, Coll: coll, Kind: pe.KindReduction, Payload: pm})
		case RedDeliver:
			m.result.g, m.result.num, m.result.on = g, uint64(a.Partial.Red)+1, m.origins
			m.DeliverCallback(a.Partial.CB, a.Result)
			m.result.on = false
			if m.ftOn {
				m.ftReduced(c, s, g, coll, sec, a)
			}
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
	if s != nil && s.refresh != nil {
		m.secRefreshMaybe(s) // a round it waited for was delivered
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
	return t != nil && t.Size() > 1
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

// ftReduced tells the hook that this PE, the root, delivered reduction
// a.Partial.Red of group g, with the envelope a message log may keep in
// place of the partials (none came where the root has no children).
func (m *Manager) ftReduced(c *Collection, s *Section, g uint64, coll uint32, sec uint64, a RedAction) {
	var kept *pe.Envelope
	if m.ft.LogsSent() && hasChildren(c, s) {
		p := &Partial{Red: a.Partial.Red, Reducer: a.Partial.Reducer, CB: a.Partial.CB, Count: a.Partial.Count,
			Witness: a.Partial.Witness, Complete: true, Result: a.Result}
		kept = &pe.Envelope{Type: tPartial, Coll: coll, Kind: pe.KindReduction, Payload: &PartialMsg{Coll: coll, Sec: sec, p: p}}
	}
	m.ft.Reduced(g, uint64(a.Partial.Red)+1, kept)
}
