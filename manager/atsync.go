package manager

// AtSync: once every element of an array reached AtSync, each PE reports
// its elements' measurements to PE 0, the balancer plans there, elements
// migrate as planned, and each resumes (ResumeFromSync).

import (
	"time"

	"github.com/charmgo/charmgo/pe"
)

type syncState struct {
	// atSync counts the local elements that reached AtSync this epoch
	// (or arrived with it): never fewer than there are, so syncCheck
	// looks at them all only once the count says all may be there.
	atSync   int
	reported map[pe.Index]bool // local elements already reported this epoch
	periodic bool              // a periodic step (+LBPeriod), not AtSync
	// the statistics, gathered up the tree: this subtree's so far
	part   *LBPartMsg
	ownIn  bool
	kidsIn int
	// root
	ready     map[pe.Index]bool // elements known to be at AtSync
	gathering bool              // the statistics were asked for
	gather    lbGather
	planned   bool
	report    LBStepReport
	start     time.Time
	balanced  bool // the balancer planned this step
	// sections to set up again once the elements moved, and how many
	// roots have still to answer
	refresh    []*SecRefreshMsg
	refreshing int
	// every PE
	plan     *PlanMsg
	expect   int
	arrived  int
	sentDone bool
	moved    int64 // packed bytes this PE migrated away
	// the end of the step's migrations, gathered up the tree: this PE's
	// own, its children's, and the bytes their subtrees moved
	done      subtreeIn
	doneMoved int64
}

// BalancesPeriodically reports whether the run balances every so often
// (+LBPeriod), where AtSync is an error.
func (m *Manager) BalancesPeriodically() bool { return m.opt.LB.Periodic }

// AtSync marks e as ready for load balancing. When every element of the
// array has called it, the strategy runs, elements migrate, and each gets
// ResumeFromSync.
func (m *Manager) AtSync(e *Element) {
	if m.opt.LB.Periodic {
		m.failf("%s%v called AtSync, but the run balances periodically (+LBPeriod): use one or the other", e.Coll.Name, e.Index)
		return
	}
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
	var els []*Element
	for _, e := range c.Locals() {
		if !e.AtSync {
			return
		}
		if !c.sync.reported[e.Index] {
			els = append(els, e)
		}
	}
	m.syncReport(c, els)
}

// syncReport tells PE 0 that elements els of c reached AtSync (the first
// phase of a step; their figures go up the tree in the second).
func (m *Manager) syncReport(c *Collection, els []*Element) {
	if len(els) == 0 {
		return
	}
	if c.sync.reported == nil {
		c.sync.reported = map[pe.Index]bool{}
	}
	sm := &SyncMsg{Coll: c.ID, Indices: make([]pe.Index, len(els)), PEs: make([]int32, len(els)), From: int32(m.Me())}
	for i, e := range els {
		c.sync.reported[e.Index] = true
		sm.Indices[i], sm.PEs[i] = e.Index, int32(m.Me())
	}
	if m.Me() == 0 {
		m.sendSys(0, tSync, sm)
		return
	}
	m.sendSys(m.everyPE().Parent(m.Me()), tSync, sm)
}

// onSync takes an AtSync report: PE 0 counts its elements; another PE
// passes it on to its parent in the tree over every PE (a report goes up
// the tree, so that no PE hears from every other; a PE with no element
// reports nothing, so reports are passed on, not waited for and merged).
func (m *Manager) onSync(sm *SyncMsg) {
	c := m.coll(sm.Coll)
	if c == nil {
		m.failf("AtSync report for unknown collection %d", sm.Coll)
		return
	}
	if len(sm.PEs) != len(sm.Indices) {
		m.failf("AtSync report for %s from PE %d: %d elements, %d places", c.Name, sm.From, len(sm.Indices), len(sm.PEs))
		return
	}
	if m.Me() != 0 {
		up := *sm
		m.sendSys(m.everyPE().Parent(m.Me()), tSync, &up)
		return
	}
	if c.sync.ready == nil {
		c.sync.ready = map[pe.Index]bool{}
	}
	for _, ix := range sm.Indices {
		c.sync.ready[ix] = true
	}
	m.syncCheckRoot(c)
}

// syncCheckRoot starts the step's second phase once every element reached
// AtSync (root only).
func (m *Manager) syncCheckRoot(c *Collection) {
	if m.Me() != 0 || c.sync.gathering || !c.red.Enabled() || len(c.sync.ready) == 0 {
		return
	}
	if int64(len(c.sync.ready)) < c.red.SubtreeCount(c.red.NextReport()) {
		return
	}
	m.lbStartCollect(c, false)
}

// lbStartCollect asks every PE, down the collection's tree, for its part
// of the step's statistics; the parts come back up merged (PE 0).
func (m *Manager) lbStartCollect(c *Collection, periodic bool) {
	m.PE.RecordPhase("load balancing "+c.Name, true)
	c.sync.gathering, c.sync.periodic = true, periodic
	if m.opt.LB.Balancer == nil || c.Kind != CollArray || !c.Migratable {
		m.syncPlan(c) // nothing moves: nothing to measure
		return
	}
	m.onLBCollect(&LBCollectMsg{Coll: c.ID, Periodic: periodic})
}

func (m *Manager) onLBCollect(cm *LBCollectMsg) {
	c := m.coll(cm.Coll)
	if c == nil {
		m.failf("PE %d: statistics asked for unknown collection %d", m.Me(), cm.Coll)
		return
	}
	c.sync.periodic = cm.Periodic
	var kids [8]int
	for _, k := range c.tree.Children(m.Me(), kids[:0]) {
		m.sendSys(k, tLBCollect, cm)
	}
	m.lbMerge(c, m.lbOwnPart(c), true)
}

func (m *Manager) onLBPart(pm *LBPartMsg) {
	c := m.coll(pm.Coll)
	if c == nil {
		m.failf("PE %d: statistics for unknown collection %d", m.Me(), pm.Coll)
		return
	}
	if len(pm.PEs) != len(pm.Indices) || len(pm.Loads) != len(pm.Indices) {
		m.failf("statistics of %s on PE %d: %d elements, %d places, %d loads", c.Name, m.Me(), len(pm.Indices), len(pm.PEs), len(pm.Loads))
		return
	}
	m.lbMerge(c, pm, false)
}

// lbMerge adds a part (this PE's own, or a tree child's subtree's) to the
// subtree's, and sends the subtree's up once it has them all.
func (m *Manager) lbMerge(c *Collection, pm *LBPartMsg, own bool) {
	if own {
		c.sync.ownIn = true
	} else {
		c.sync.kidsIn++
	}
	if c.sync.part == nil {
		cp := *pm
		c.sync.part = &cp
	} else {
		c.sync.part.merge(pm)
	}
	if !c.sync.ownIn || c.sync.kidsIn < len(c.tree.Children(m.Me(), nil)) {
		return
	}
	part := c.sync.part
	c.sync.part, c.sync.ownIn, c.sync.kidsIn = nil, false, 0
	if m.Me() != 0 {
		m.sendSys(c.tree.Parent(m.Me()), tLBPart, part)
		return
	}
	c.sync.gather.add(m, c, part)
	m.syncPlan(c)
}

// syncPlan runs the balancer on the gathered statistics and sends the plan
// to every PE (PE 0).
func (m *Manager) syncPlan(c *Collection) {
	if c.sync.planned {
		return
	}
	c.sync.planned = true
	c.sync.start = time.Now()
	var moves []Move
	if b := m.opt.LB.Balancer; b != nil && c.Kind == CollArray && c.Migratable && c.sync.gather.measured(c.sync.periodic) {
		c.sync.balanced = true
		c.lbSteps++
		st := c.sync.gather.stats(c.lbSteps, m.lb.cpu)
		t0 := time.Now()
		lm, name, err := b.Plan(c.Name, st)
		if err != nil {
			m.failf("load balancing %s, step %d: %v", c.Name, st.Step, err)
			return
		}
		c.sync.report = LBStepReport{Coll: c.Name, Strategy: name, PlanNanos: int64(time.Since(t0)), Summary: st.Summarize(name, lm)}
		moves = make([]Move, len(lm))
		for i, mv := range lm {
			if o := st.Objs[mv.Obj]; o.Coll != c.ID {
				m.failf("load balancing %s, step %d: the plan moves %d%v, of another collection", c.Name, st.Step, o.Coll, o.Index)
				return
			}
			moves[i] = Move{Index: st.Objs[mv.Obj].Index, From: mv.From, To: mv.To}
		}
	}
	plan := &PlanMsg{Coll: c.ID, Moves: moves, Periodic: c.sync.periodic}
	if w := m.ft.Witness(); w >= 0 {
		// The plan comes from measurements, which a re-execution of PE 0
		// (and of its teammates, who measured too) would not repeat: it
		// goes round through a PE that does not roll back with PE 0, and
		// only the plan that comes back is carried out. In a re-execution
		// that is the one the witness sent the first time, replayed from
		// its log (the witness drops the new one as a duplicate), so the
		// PEs that did not roll back and those that did agree on it.
		plan.Round = RoundOut
		m.sendSys(w, tPlan, plan)
		return
	}
	m.planDecided(c, plan)
}

// planDecided sends the plan of c's step to every PE (PE 0), and works
// out which sections it leaves with members away from their homes.
func (m *Manager) planDecided(c *Collection, plan *PlanMsg) {
	if c.sync.balanced && !plan.Periodic { // periodic: members are not waiting, their rounds go on
		after := make(map[pe.Index]int32, len(plan.Moves))
		for _, mv := range plan.Moves {
			after[mv.Index] = mv.To
		}
		placeAfter := make([]int32, len(c.sync.gather.st.Objs))
		for i, o := range c.sync.gather.st.Objs {
			placeAfter[i] = o.PE
			if to, ok := after[o.Index]; ok && o.Coll == c.ID {
				placeAfter[i] = to
			}
		}
		c.sync.refresh = c.sync.gather.sectionsToRefresh(c, placeAfter)
	}
	plan.Relay = true // down the tree over every PE, from PE 0 itself (onPlan)
	m.sendSys(m.Me(), tPlan, plan)
}

// relayDown passes a message of PE 0's on to this PE's children in the
// tree over every PE, each with a copy of payload that mk makes. via is
// the header the message came with (nil: this PE makes it): each copy
// goes with it, passing that message on, so the hook names and orders it
// as what it is, not as a message of this PE's own, which would depend on
// everything this PE handled before (under spmd a recovering PE then held
// a collection's creation behind an orphan that the creation itself let
// it make again, a broadcast to the new collection).
func (m *Manager) relayDown(typ uint32, via *pe.FTHeader, mk func() any) {
	m.kids = m.everyPE().Children(m.Me(), m.kids[:0])
	for _, k := range m.kids {
		env := &pe.Envelope{Type: typ, Kind: pe.KindSystem, Payload: mk()}
		if via != nil {
			h := *via
			env.FT = &h
		}
		m.send(k, env)
	}
}

func (m *Manager) onPlan(pm *PlanMsg, via *pe.FTHeader) {
	c := m.coll(pm.Coll)
	if c == nil {
		m.failf("PE %d: a balancing plan for unknown collection %d", m.Me(), pm.Coll)
		return
	}
	switch pm.Round {
	case RoundOut: // the witness: back to PE 0, as sent
		back := *pm
		back.Round = RoundBack
		m.sendSys(0, tPlan, &back)
		return
	case RoundBack: // PE 0: the plan to carry out
		plan := *pm
		plan.Round = RoundNone
		m.planDecided(c, &plan)
		return
	}
	if pm.Relay {
		m.relayDown(tPlan, via, func() any { cp := *pm; return &cp })
	}
	c.sync.plan = pm
	if pm.Periodic {
		m.onPlanPeriodic(c, pm)
		return
	}
	me := int32(m.Me())
	for _, mv := range pm.Moves {
		if mv.To == me && mv.From != me {
			c.sync.expect++
		}
	}
	for _, mv := range pm.Moves {
		if mv.From == me && mv.To != me {
			if e := c.get(mv.Index); e != nil {
				c.sync.moved += m.migrateOut(e, int(mv.To))
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
	m.planDone(c, c.sync.moved, true)
}

func (m *Manager) onPlanDone(pd *PlanDoneMsg) {
	m.planDone(m.coll(pd.Coll), pd.MovedBytes, false)
}

// planDone merges this PE's end of a step's migrations (own) or a tree
// child's subtree's: once it has its own and its children's, the
// subtree's goes up to the parent in the tree over every PE, with the
// bytes they moved; on PE 0 the step goes on. (Every PE says it once a
// step, so they are waited for, and PE 0 hears from its children alone.)
func (m *Manager) planDone(c *Collection, moved int64, own bool) {
	c.sync.doneMoved += moved
	if !c.sync.done.add(m, own) {
		return
	}
	if m.Me() != 0 {
		m.sendSys(m.everyPE().Parent(m.Me()), tPlanDone, &PlanDoneMsg{Coll: c.ID, MovedBytes: c.sync.doneMoved})
		return
	}
	c.sync.report.MovedBytes += c.sync.doneMoved
	if len(c.sync.refresh) > 0 {
		// sections follow their members: set them up again, then resume
		c.sync.refreshing = len(c.sync.refresh)
		for _, rm := range c.sync.refresh {
			m.sendSys(m.sectionRoot(rm.Sec), tSecRefresh, rm)
		}
		c.sync.refresh = nil
		return
	}
	m.syncFinish(c)
}

// syncFinish reports a finished step and resumes the elements (PE 0).
func (m *Manager) syncFinish(c *Collection) {
	m.PE.RecordPhase("load balancing "+c.Name, false)
	if c.sync.periodic {
		m.lb.periodicBusy--
	}
	if b := m.opt.LB.Balancer; b != nil && c.sync.balanced {
		r := c.sync.report
		r.StepNanos = int64(time.Since(c.sync.start))
		r.Summary.MovedBytes = r.MovedBytes
		b.Stepped(r)
	}
	m.sendSys(m.Me(), tResume, &ResumeMsg{Coll: c.ID, Relay: true}) // down the tree over every PE, from PE 0 itself
}

func (m *Manager) onResume(rm *ResumeMsg, via *pe.FTHeader) {
	if rm.Relay {
		m.relayDown(tResume, via, func() any { cp := *rm; return &cp })
	}
	c := m.coll(rm.Coll)
	c.sync = syncState{}
	els := append([]*Element(nil), c.Locals()...)
	for _, e := range els {
		// what they contributed to sections while they waited (see
		// secrefresh.go), before anything they do on resuming
		m.releaseHeld(e)
	}
	for _, e := range els {
		if !e.AtSync {
			continue
		}
		e.AtSync = false
		e.Epoch++
		m.PE.Ran()
		m.host.ResumeFromSync(m, e)
		m.afterInvoke(e)
	}
}
