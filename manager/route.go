package manager

// Routing: sending an entry-method invocation to an element by the best
// location this PE knows, and handing an arriving application message to
// its element.

import (
	"fmt"

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

// SendEnvFrom is SendEnv for a message element e sends (see from).
func (m *Manager) SendEnvFrom(e *Element, env *pe.Envelope) error {
	if !m.origins {
		return m.SendEnv(env)
	}
	m.from(e)
	err := m.SendEnv(env)
	m.sent()
	return err
}

// SendEnv routes a point-to-point envelope (Type, Coll, Index and payload
// set) to its element.
func (m *Manager) SendEnv(env *pe.Envelope) error {
	coll := env.Coll
	m.Stats.P2P++
	size := pe.InlineSize
	if env.Flags != FlagInline {
		size = PayloadSize(env.Payload)
		m.Stats.addBytes(&m.Stats.P2PBytes, size)
	} else {
		m.Stats.P2PBytes += pe.InlineSize
	}
	if m.lb.cur != nil {
		m.lbSent(lbDest{Coll: coll, Index: env.Index}, size)
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
		i := c.slot(&env.Index)
		if i < 0 {
			return fmt.Errorf("send %s to %s%v: %w", pe.TypeName(env.Type), c.Name, env.Index, c.InBounds(env.Index))
		}
		switch l := c.dlocs[i]; {
		case c.dense[i] != nil:
			m.send(m.Me(), env)
		case l.pe >= 0:
			m.send(int(l.pe), env)
		default:
			m.send(m.homeOfSlot(c, env.Index, i), env)
		}
		return nil
	} else if err := c.InBounds(env.Index); err != nil {
		return fmt.Errorf("send %s to %s%v: %w", pe.TypeName(env.Type), c.Name, env.Index, err)
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
		e.Flags, e.Aux = flagSecHop, m.secNow(e.Aux) // set up again since it was sent?
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
	e := c.lookup(&env.Index)
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
	if m.dedup != nil && !m.deliverTo(e, env) {
		return
	}
	m.invoke(e, env)
	m.afterInvoke(e)
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
