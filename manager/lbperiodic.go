package manager

// Periodic load balancing (+LBPeriod): for programs that never call
// AtSync, a tick from the launcher's clock reaches PE 0 every period and
// starts a balancing step of every migratable array: PE 0 asks every PE
// for its statistics at once (no waiting for AtSync), plans, the elements
// move between two of their entry methods (messages on their way are
// forwarded), and nothing waits for them; an element on its way when its
// PE reported is not counted and stays where it goes. The step is the AtSync step's machinery without the
// waiting (atsync.go); a program that calls AtSync as well is refused.
// Steps started by a clock make a recovering PE decide otherwise, so the
// chare layer allows the mode only where every PE rolls back together.

import "github.com/charmgo/charmgo/pe"

// LBTickMsg is the clock's tick (to PE 0).
type LBTickMsg struct{}

// LBTickType is the message type of the periodic balancer's tick, which
// the chare layer hands to PE 0 (pe.Node.Inject) every period.
func LBTickType() uint32 { return tLBTick }

func (m *Manager) onLBTick() {
	if m.Me() != 0 || m.opt.LB.Balancer == nil || m.lb.periodicBusy > 0 {
		return // the previous step is not over: skip this tick
	}
	for _, id := range sortedKeys(m.colls) {
		c := m.colls[id]
		if c.Kind != CollArray || !c.Migratable || !c.red.Enabled() || c.sync.gathering {
			continue
		}
		m.lb.periodicBusy++
		m.lbStartCollect(c, true)
	}
}

// onPlanPeriodic moves what the plan says this PE holds; an element that
// left meanwhile is asked to move wherever it is. Nothing waits for the
// arrivals.
func (m *Manager) onPlanPeriodic(c *Collection, pm *PlanMsg) {
	me := int32(m.Me())
	for _, mv := range pm.Moves {
		if mv.From != me || mv.To == me {
			continue
		}
		if e := c.get(mv.Index); e != nil {
			c.sync.moved += m.migrateOut(e, int(mv.To))
			continue
		}
		m.send(m.Me(), &pe.Envelope{Type: tMigrateReq, Coll: c.ID, Kind: pe.KindSystem, Index: mv.Index,
			Payload: &MigrateReqMsg{Coll: c.ID, Index: mv.Index, To: mv.To}})
	}
	c.sync.sentDone = true
	m.planDone(c, c.sync.moved, true)
}
