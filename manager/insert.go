package manager

// Sparse arrays: inserting elements on any PE, and ending the insertion
// phase (DoneInserting) once every insertion sent to a PE has reached it,
// after which reductions know their contributor counts.

import (
	"cmp"
	"fmt"
	"slices"

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
// their PEs made them before they answer). The question goes down the
// spanning tree over every PE (from PE 0, which a caller elsewhere asks
// first); the counts are summed up it, each subtree's by destination
// PE, nonzero ones alone; and each PE's total comes down it, a subtree's
// totals to its root. No PE hears from more than its tree neighbours.
func (m *Manager) DoneInserting(c *Collection) {
	m.sendSys(0, tDone, &DoneInsertingMsg{Coll: c.ID})
}

func (m *Manager) onDoneInserting(env *pe.Envelope) {
	d := env.Payload.(*DoneInsertingMsg)
	c := m.collFor(d.Coll, env)
	if c == nil {
		return
	}
	switch d.Step {
	case 0:
		m.relayDown(tDone, env.FT, func() any { return &DoneInsertingMsg{Coll: c.ID} })
		m.insertsCounted(c, true, c.insSent, nil)
	case 1:
		m.insertsCounted(c, false, nil, d.Counts)
	case 2:
		if c.doneInserting {
			return
		}
		m.insertTotals(c, d.Counts)
	}
}

// insertsCounted adds this PE's insertions (mine: sent, by PE; nil when
// it sent none) or a
// tree child's subtree's (kid) to what its subtree sent; once it has its own
// and its children's, they go up to its parent, and on PE 0 the totals
// come down.
func (m *Manager) insertsCounted(c *Collection, mine bool, sent []uint32, kid []InsertCount) {
	if c.insUp == nil {
		c.insUp = map[int32]uint32{}
	}
	for p, n := range sent {
		if n > 0 {
			c.insUp[int32(p)] += n
		}
	}
	for _, k := range kid {
		if k.PE < 0 || int(k.PE) >= m.NumPEs() {
			m.failf("DoneInserting %s: a count of insertions sent to PE %d of %d", c.Name, k.PE, m.NumPEs())
			return
		}
		c.insUp[k.PE] += k.N
	}
	if !c.insIn.add(m, mine) {
		return
	}
	counts := make([]InsertCount, 0, len(c.insUp))
	for p, n := range c.insUp {
		counts = append(counts, InsertCount{PE: p, N: n})
	}
	slices.SortFunc(counts, func(a, b InsertCount) int { return cmp.Compare(a.PE, b.PE) })
	c.insUp, c.insIn = nil, subtreeIn{}
	if m.Me() != 0 {
		m.sendSys(m.everyPE().Parent(m.Me()), tDone, &DoneInsertingMsg{Coll: c.ID, Step: 1, Counts: counts})
		return
	}
	m.insertTotals(c, counts)
}

// insertTotals takes, of the insertions sent to each PE of this PE's
// subtree (by PE, ascending), its own count, and passes each child its
// subtree's.
func (m *Manager) insertTotals(c *Collection, totals []InsertCount) {
	tree := m.everyPE()
	var sub []int
	for _, k := range tree.Children(m.Me(), nil) {
		sub = tree.Subtree(k, sub[:0])
		slices.Sort(sub)
		var theirs []InsertCount
		i := 0
		for _, t := range totals {
			for i < len(sub) && sub[i] < int(t.PE) {
				i++
			}
			if i < len(sub) && sub[i] == int(t.PE) {
				theirs = append(theirs, t)
			}
		}
		m.sendSys(k, tDone, &DoneInsertingMsg{Coll: c.ID, Step: 2, Counts: theirs})
	}
	var expect uint32
	for _, t := range totals {
		if int(t.PE) == m.Me() {
			expect = t.N
		}
	}
	c.doneExpect, c.doneKnown = expect, true
	m.maybeDoneInserting(c)
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
