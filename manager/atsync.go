package manager

// AtSync: once every element of an array reached AtSync, PE 0 runs the
// load-balancing strategy, elements migrate as it planned, and each
// resumes (ResumeFromSync).

import (
	"github.com/charmgo/charmgo/pe"
)

// LBStrategy decides migrations at an AtSync point from where every element
// is. It must be a pure function of its input so a plan can be replayed.
type LBStrategy func(coll string, numPEs int, where []ElemPlace) []Move

// ElemPlace is one element's position at an AtSync point.
type ElemPlace struct {
	Index pe.Index
	PE    int32
}

// RotateStrategy moves every element to the next PE (a test strategy that
// exercises migration of everything).
func RotateStrategy(_ string, n int, where []ElemPlace) []Move {
	if n < 2 {
		return nil
	}
	out := make([]Move, len(where))
	for i, w := range where {
		out[i] = Move{Index: w.Index, From: w.PE, To: (w.PE + 1) % int32(n)}
	}
	return out
}

type syncState struct {
	// atSync counts the local elements that reached AtSync this epoch
	// (or arrived with it): never fewer than there are, so syncCheck
	// looks at them all only once the count says all may be there.
	atSync   int
	reported map[pe.Index]bool // local elements already reported this epoch
	// root
	places  []ElemPlace
	planned bool
	done    int
	// every PE
	plan     *PlanMsg
	expect   int
	arrived  int
	sentDone bool
}

// AtSync marks e as ready for load balancing. When every element of the
// array has called it, the strategy runs, elements migrate, and each gets
// ResumeFromSync.
func (m *Manager) AtSync(e *Element) {
	if e.AtSync {
		return
	}
	e.AtSync = true
	e.Coll.sync.atSync++
	m.syncCheck(e.Coll)
}

func (m *Manager) syncCheck(c *Collection) {
	if c.sync.atSync < len(c.local) {
		return // some local element has not reached AtSync: no need to look
	}
	var idx []pe.Index
	for _, e := range c.Locals() {
		if !e.AtSync {
			return
		}
		if !c.sync.reported[e.Index] {
			idx = append(idx, e.Index)
		}
	}
	if len(idx) == 0 {
		return
	}
	if c.sync.reported == nil {
		c.sync.reported = map[pe.Index]bool{}
	}
	pes := make([]int32, len(idx))
	for i, ix := range idx {
		c.sync.reported[ix] = true
		pes[i] = int32(m.Me())
	}
	m.sendSys(0, tSync, &SyncMsg{Coll: c.ID, Indices: idx, PEs: pes})
}

func (m *Manager) onSync(sm *SyncMsg) {
	c := m.coll(sm.Coll)
	if c == nil {
		m.failf("AtSync report for unknown collection %d", sm.Coll)
		return
	}
	for i, ix := range sm.Indices {
		c.sync.places = append(c.sync.places, ElemPlace{Index: ix, PE: sm.PEs[i]})
	}
	m.syncCheckRoot(c)
}

// syncCheckRoot starts the plan once every element reported (root only).
func (m *Manager) syncCheckRoot(c *Collection) {
	if m.Me() != 0 || c.sync.planned || !c.red.Enabled() || len(c.sync.places) == 0 {
		return
	}
	if int64(len(c.sync.places)) < c.red.SubtreeCount(c.red.NextReport()) {
		return
	}
	c.sync.planned = true
	var moves []Move
	if m.opt.Strategy != nil && c.Kind == CollArray && c.Migratable {
		moves = m.opt.Strategy(c.Name, m.NumPEs(), c.sync.places)
	}
	plan := &PlanMsg{Coll: c.ID, Moves: moves}
	for p := 0; p < m.NumPEs(); p++ {
		m.sendSys(p, tPlan, plan)
	}
}

func (m *Manager) onPlan(pm *PlanMsg) {
	c := m.coll(pm.Coll)
	c.sync.plan = pm
	me := int32(m.Me())
	for _, mv := range pm.Moves {
		if mv.To == me && mv.From != me {
			c.sync.expect++
		}
	}
	for _, mv := range pm.Moves {
		if mv.From == me && mv.To != me {
			if e := c.get(mv.Index); e != nil {
				m.migrateOut(e, int(mv.To))
			} else {
				m.failf("load-balancing plan moves %s%v from PE %d, which does not hold it", c.Name, mv.Index, me)
				return
			}
		}
	}
	m.syncMaybeDone(c)
}

func (m *Manager) syncArrived(c *Collection, e *Element) {
	c.sync.arrived++
	m.syncMaybeDone(c)
}

func (m *Manager) syncMaybeDone(c *Collection) {
	if c.sync.plan == nil || c.sync.sentDone || c.sync.arrived < c.sync.expect {
		return
	}
	c.sync.sentDone = true
	m.sendSys(0, tPlanDone, &PlanDoneMsg{Coll: c.ID})
}

func (m *Manager) onPlanDone(pd *PlanDoneMsg) {
	c := m.coll(pd.Coll)
	c.sync.done++
	if c.sync.done < m.NumPEs() {
		return
	}
	for p := 0; p < m.NumPEs(); p++ {
		m.sendSys(p, tResume, &ResumeMsg{Coll: c.ID})
	}
}

func (m *Manager) onResume(rm *ResumeMsg) {
	c := m.coll(rm.Coll)
	c.sync = syncState{}
	for _, e := range append([]*Element(nil), c.Locals()...) {
		if !e.AtSync {
			continue
		}
		e.AtSync = false
		e.Epoch++
		m.host.ResumeFromSync(m, e)
		m.afterInvoke(e)
	}
}
