package manager

// Broadcasts: numbered at the collection's root PE, sent down the PE tree,
// delivered to every element once, elements that migrate included.

import "github.com/charmgo/charmgo/pe"

type bcastRec struct {
	seq     uint64
	typ     uint32
	payload any
}

const bcastHistory = 512

// Broadcast invokes entry typ on every element of c. All broadcasts of a
// collection are numbered by its root PE (0) so that every element sees them
// in one order, and an element that migrates neither misses nor repeats one.
//
// The broadcast always goes through the queue to the root, even from the
// root itself, so it reaches elements whose insertion the caller requested
// before broadcasting.
func (m *Manager) Broadcast(coll uint32, typ uint32, payload any) {
	m.BroadcastFrom(nil, coll, typ, payload)
}

// BroadcastFrom is Broadcast for a message element e sends (see from).
func (m *Manager) BroadcastFrom(e *Element, coll uint32, typ uint32, payload any) {
	m.from(e)
	m.Stats.Broadcasts++
	m.Stats.bytes(&m.Stats.BroadcastBytes, payload)
	m.send(0, &pe.Envelope{Type: typ, Coll: coll, Kind: pe.KindMulticast, Flags: flagBcastReq, Payload: payload})
	m.sent()
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

// relayBcast sends a broadcast's hop this PE had already on down the
// tree, without delivering it here again (ftlayer.Relay).
func (m *Manager) relayBcast(env *pe.Envelope) {
	if c := m.coll(env.Coll); c != nil && env.Flags == flagBcastHop {
		m.sendTree(c.tree, uint64(c.ID), env)
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
		m.invoke(e, env)
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
		} else if next > c.bcastDelivered {
			// a broadcast passed on after the element, by another way
			// than the one before it, came first; this PE has not had
			// the one before yet: it comes down the tree, this one
			// after it, and each reaches the element then, wherever it
			// is (onBcastHop, catchUpBroadcasts)
			return
		} else {
			m.failf("%s%v on PE %d missed broadcast %d and it is no longer kept", c.Name, e.Index, m.Me(), next)
			return
		}
		e.Bcast = next
		one := pe.Envelope{Type: typ, Coll: c.ID, Kind: pe.KindMulticast, Flags: flagBcastElem, Index: e.Index, Seq: next, Payload: payload}
		m.invoke(e, &one)
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
