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
		if i := c.slot(ix); i >= 0 && c.dlocs[i].pe != locUnknown {
			return c.dlocs[i], true
		}
		return loc{}, false
	}
	l, ok := c.locs[ix]
	return l, ok
}

func (c *Collection) setLoc(ix pe.Index, l loc) {
	if c.dlocs != nil {
		if i := c.slot(ix); i >= 0 {
			c.dlocs[i] = l
		}
		return
	}
	c.locs[ix] = l
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
