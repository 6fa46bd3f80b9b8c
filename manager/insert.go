package manager

// Sparse arrays: inserting elements on any PE, and ending the insertion
// phase (DoneInserting) once every insertion sent to a PE has reached it,
// after which reductions know their contributor counts.

import (
	"fmt"

	"github.com/charmgo/charmgo/pe"
)

// Insert creates element ix of sparse array c on PE onPE (-1: its home).
func (m *Manager) Insert(c *Collection, ix pe.Index, onPE int, arg Lazy) error {
	if c.Kind != CollArray || !c.Sparse {
		return fmt.Errorf("insert %s%v: only sparse arrays take insertions", c.Name, ix)
	}
	if err := c.InBounds(ix); err != nil {
		return fmt.Errorf("insert into %s: %w", c.Name, err)
	}
	if c.doneInserting {
		return fmt.Errorf("insert %s%v after DoneInserting is not supported", c.Name, ix)
	}
	h := m.home(c, ix)
	if onPE < 0 {
		onPE = h
	}
	if onPE >= m.NumPEs() {
		return fmt.Errorf("insert %s%v on PE %d: the run has %d PEs", c.Name, ix, onPE, m.NumPEs())
	}
	if c.insSent == nil {
		c.insSent = make([]uint32, m.NumPEs())
	}
	c.insSent[onPE]++
	// The creation goes out before the location notice so the new element's
	// PE always has it before any message the home forwards to it.
	m.send(onPE, &pe.Envelope{Type: tInsert, Kind: pe.KindSystem, Coll: c.ID, Payload: &InsertMsg{Coll: c.ID, Index: ix, Arg: arg}})
	if _, known := c.getLoc(ix); !known && onPE != m.Me() {
		c.setLoc(ix, loc{pe: int32(onPE)}) // the inserter knows where it put it
	}
	if h != onPE {
		m.sendSys(h, tLoc, &LocMsg{Coll: c.ID, Index: ix, PE: int32(onPE)})
	}
	return nil
}

func (m *Manager) onInsert(env *pe.Envelope) {
	im := env.Payload.(*InsertMsg)
	c := m.collFor(im.Coll, env)
	if c == nil {
		return
	}
	if c.get(im.Index) != nil {
		m.failf("insert %s%v: element already exists on PE %d", c.Name, im.Index, m.Me())
		return
	}
	if c.doneInserting {
		m.failf("insert %s%v reached PE %d after DoneInserting", c.Name, im.Index, m.Me())
		return
	}
	c.insRecv++
	m.newElement(c, im.Index, im.Arg)
	if h := m.home(c, im.Index); h == m.Me() {
		m.flushHomeBuf(c, im.Index)
	}
	m.maybeDoneInserting(c)
}

// DoneInserting ends the insertion phase of a sparse array everywhere;
// broadcasts to it are delivered once it ended on the PE (so they reach
// every element inserted before it).
//
// Insertions travel from the PEs that made them, DoneInserting from the
// one that calls it, so a PE may hear DoneInserting before an insertion
// made for it. Every PE therefore reports how many insertions it sent
// to each PE, and a PE is done once it received as many as were sent to
// it (insertions made before DoneInserting was called are all counted:
// their PEs made them before they answer).
func (m *Manager) DoneInserting(c *Collection) {
	c.doneAsked, c.doneSum = 0, make([]uint32, m.NumPEs())
	for p := 0; p < m.NumPEs(); p++ {
		m.send(p, &pe.Envelope{Type: tDone, Kind: pe.KindSystem, Coll: c.ID, Payload: &DoneInsertingMsg{Coll: c.ID}})
	}
}

func (m *Manager) onDoneInserting(env *pe.Envelope) {
	d := env.Payload.(*DoneInsertingMsg)
	c := m.collFor(d.Coll, env)
	if c == nil {
		return
	}
	switch d.Step {
	case 0:
		sent := c.insSent
		if sent == nil {
			sent = make([]uint32, m.NumPEs())
		}
		m.sendSys(int(env.Src), tDone, &DoneInsertingMsg{Coll: c.ID, Step: 1, Sent: sent})
	case 1:
		if len(d.Sent) != m.NumPEs() || c.doneSum == nil {
			m.failf("DoneInserting %s: a count of %d PEs from PE %d", c.Name, len(d.Sent), env.Src)
			return
		}
		for p, n := range d.Sent {
			c.doneSum[p] += n
		}
		if c.doneAsked++; c.doneAsked == m.NumPEs() {
			for p := 0; p < m.NumPEs(); p++ {
				m.sendSys(p, tDone, &DoneInsertingMsg{Coll: c.ID, Step: 2, Expect: c.doneSum[p]})
			}
		}
	case 2:
		if c.doneInserting {
			return
		}
		c.doneExpect, c.doneKnown = d.Expect, true
		m.maybeDoneInserting(c)
	}
}

// maybeDoneInserting ends this PE's insertion phase once every insertion
// sent to it arrived.
func (m *Manager) maybeDoneInserting(c *Collection) {
	if c.doneInserting || !c.doneKnown || c.insRecv < c.doneExpect {
		return
	}
	c.doneInserting = true
	m.maybeReportCount(c)
	held := c.bcastHeld
	c.bcastHeld = nil
	for i := range held {
		m.onBcastHop(c, &held[i])
	}
}

// maybeReportCount sends this PE's subtree contributor count to its tree
// parent once the local count is final and every child reported, and then
// lets reductions complete.
func (m *Manager) maybeReportCount(c *Collection) {
	if c.countsSent || !c.doneInserting || c.countsIn < len(c.red.Children) {
		return
	}
	c.countsSent = true
	if !c.red.IsRoot() {
		m.sendSys(c.red.Parent, tCount, &CountMsg{Coll: c.ID, Count: c.red.SubtreeCount(0), Final: true})
	}
	m.acts = c.red.Enable(m.acts[:0])
	m.runActs(c, nil)
	m.syncCheckRoot(c)
}

func (m *Manager) onCount(env *pe.Envelope) {
	cm := env.Payload.(*CountMsg)
	if cm.Sec != 0 {
		s := m.secFor(cm.Sec, env)
		if s == nil {
			return
		}
		m.acts = s.red.AddChildCount(int(env.Src), cm.From, cm.Count, m.acts[:0])
		m.runActs(s.coll(m), s)
		if !s.red.IsRoot() {
			m.sendSys(s.red.Parent, tCount, &CountMsg{Coll: cm.Coll, Sec: s.ID, From: cm.From, Count: cm.Count})
		}
		return
	}
	c := m.collFor(cm.Coll, env)
	if c == nil {
		return
	}
	m.acts = c.red.AddChildCount(int(env.Src), cm.From, cm.Count, m.acts[:0])
	m.runActs(c, nil)
	if cm.Final {
		c.countsIn++
		m.maybeReportCount(c)
	} else if !c.red.IsRoot() {
		m.sendSys(c.red.Parent, tCount, &CountMsg{Coll: cm.Coll, From: cm.From, Count: cm.Count})
	}
}
