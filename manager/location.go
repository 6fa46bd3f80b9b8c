package manager

// Locations: where each element of a collection is, as this PE knows it
// (its home always knows), and forwarding a message that reached a PE its
// element has left.

import (
	"slices"

	"github.com/charmgo/charmgo/pe"
)

type loc struct {
	pe    int32
	moves uint32
}

const locUnknown = -2

// eachLoc calls f with every location this PE knows, in index order for
// dense arrays.
func (c *Collection) eachLoc(f func(pe.Index, loc)) {
	if c.dlocs != nil {
		forEachIndex(c.Bounds, func(ix pe.Index) {
			if l, ok := c.getLoc(ix); ok {
				f(ix, l)
			}
		})
		return
	}
	ixs := make([]pe.Index, 0, len(c.locs))
	for ix := range c.locs {
		ixs = append(ixs, ix)
	}
	slices.SortFunc(ixs, pe.Index.Compare)
	for _, ix := range ixs {
		f(ix, c.locs[ix])
	}
}

// getLoc returns the last known location of ix (PE -1: deleted).
func (c *Collection) getLoc(ix pe.Index) (loc, bool) {
	if c.dlocs != nil {
		if i := c.slot(&ix); i >= 0 && c.dlocs[i].pe != locUnknown {
			return c.dlocs[i], true
		}
		return loc{}, false
	}
	l, ok := c.locs[ix]
	return l, ok
}

func (c *Collection) setLoc(ix pe.Index, l loc) {
	if c.dlocs != nil {
		if i := c.slot(&ix); i >= 0 {
			c.dlocs[i] = l
		}
		return
	}
	c.locs[ix] = l
}

// locAct is what becomes of a message for an element not on this PE.
type locAct uint8

const (
	locSend     locAct = iota // to the PE it was last known on
	locSendHome               // to its home, which knows where it is
	locHold                   // here, its home, until its location is known
	locDeleted                // the element was deleted: an error
	locOutside                // the index is outside the array: an error
)

// locDecision is the location table's answer for one message.
type locDecision struct {
	act  locAct
	pe   int  // locSend, locSendHome
	tell bool // locSend: correct the sender's cache (it sent here, not there)
}

// route decides where a message for element ix goes from PE me, which
// does not hold it: src sent it, p2p says it is point to point (whose
// senders cache locations), home is ix's home PE. It changes nothing: the
// manager acts on the decision (forward).
func (c *Collection) route(ix pe.Index, me int, src int32, p2p bool, home int) locDecision {
	if l, ok := c.getLoc(ix); ok {
		if l.pe < 0 {
			return locDecision{act: locDeleted}
		}
		if int(l.pe) != me {
			return locDecision{act: locSend, pe: int(l.pe), tell: p2p && int(src) != me && src != l.pe}
		}
	}
	if home != me {
		return locDecision{act: locSendHome, pe: home}
	}
	if c.InBounds(ix) != nil {
		return locDecision{act: locOutside}
	}
	// Unknown here even after DoneInserting: its insertion's notice may
	// still be on its way (it comes from the inserting PE, DoneInserting
	// from another). Whether it exists is settled when the run goes quiet
	// (CheckQuiet).
	return locDecision{act: locHold}
}

// learn records that ix is on l.pe after l.moves migrations, unless what
// this PE knows is newer. It reports whether it took it.
func (c *Collection) learn(ix pe.Index, l loc) bool {
	if cur, ok := c.getLoc(ix); ok && l.moves < cur.moves {
		return false
	}
	c.setLoc(ix, l)
	return true
}

// forward passes on a message for an element that is not on this PE.
func (m *Manager) forward(c *Collection, env *pe.Envelope) {
	ix := env.Index
	d := c.route(ix, m.Me(), env.Src, env.Kind == pe.KindP2P, m.home(c, ix))
	switch d.act {
	case locSend:
		if d.tell {
			// Correct the sender's cache so its next message goes direct.
			l, _ := c.getLoc(ix)
			m.sendSys(int(env.Src), tLoc, &LocMsg{Coll: c.ID, Index: ix, PE: l.pe, Moves: l.moves})
		}
		m.send(d.pe, env)
	case locSendHome:
		m.send(d.pe, env)
	case locDeleted:
		m.failf("message %s to %s%v: the element was deleted", pe.TypeName(env.Type), c.Name, ix)
	case locOutside:
		m.failf("message %s: %v", pe.TypeName(env.Type), c.InBounds(ix))
	case locHold:
		c.homeBuf[ix] = append(c.homeBuf[ix], *env)
	}
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
	c.learn(lm.Index, loc{pe: lm.PE, moves: lm.Moves})
	if m.home(c, lm.Index) == m.Me() {
		m.flushHomeBuf(c, lm.Index)
	}
}
