package recovery

import (
	"fmt"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/charmgo/charmgo/pe/cluster"
)

// Processes recovers a job of several processes from a lost process
// (cluster.Recovery): once the launcher's replacement joined, process 0's
// supervisor decides, and every process takes the step it broadcasts.
// Under scmel and camel a process of one PE recovers alone, as a failed
// PE does in one process; otherwise (none, or several PEs lost at once)
// every PE rolls back to the last coordinated checkpoint.
type Processes struct {
	sup  *Supervisor
	job  *cluster.Job
	node *pe.Node
	// replaceable: the launcher starts a replacement for a lost process
	// (charmrun does; srun and mpirun do not).
	replaceable bool
}

// ForJob makes s recover node's job from lost processes.
func (s *Supervisor) ForJob(job *cluster.Job, node *pe.Node, replaceable bool) *Processes {
	p := &Processes{sup: s, job: job, node: node, replaceable: replaceable}
	if job.Rank() != 0 {
		s.mu.Lock()
		s.onRecovered, s.onRestored = p.recovered, p.restored
		s.mu.Unlock()
	}
	return p
}

// recovered: PE me, of this process, caught up; process 0 decides the
// next recoveries and checkpoints, so it must know.
func (p *Processes) recovered(me int) {
	b, _ := msgpack.Marshal(&report{Recovered: int32(me)})
	p.job.Report(b)
}

// restored: a PE of this process restored checkpoint epoch.
func (p *Processes) restored(epoch uint64) {
	b, _ := msgpack.Marshal(&report{Recovered: -1, Restored: epoch})
	p.job.Report(b)
}

// report is what a process tells process 0 of its recovery: a PE caught
// up (Recovered), or restored a checkpoint (Recovered -1).
type report struct {
	Recovered int32  `msgpack:"r"`
	Restored  uint64 `msgpack:"e,omitempty"`
}

// Report implements cluster.Recovery (on process 0).
func (p *Processes) Report(from int, data []byte) {
	var r report
	if err := msgpack.Unmarshal(data, &r); err != nil {
		p.node.Fail(fmt.Errorf("a recovery report from process %d does not decode: %w", from, err))
		return
	}
	if r.Recovered < 0 {
		p.sup.mu.Lock()
		p.sup.restoredAt(r.Restored)
		p.sup.mu.Unlock()
		return
	}
	p.sup.caughtUp(int(r.Recovered), false)
}

// step is a recovery step process 0 decided.
type step struct {
	Process int     `msgpack:"r"`
	Dead    []int32 `msgpack:"d"` // the lost process's PEs
	// a global rollback, as the job's generation Gen
	Rollback *manager.RollbackMsg `msgpack:"rb,omitempty"`
	Gen      uint64               `msgpack:"g,omitempty"`
	// or the lost PE's new incarnation, recovering alone
	Inc        uint32  `msgpack:"i,omitempty"`
	Recovered  []int32 `msgpack:"rc,omitempty"`
	RolledBack bool    `msgpack:"b,omitempty"`
}

// pesOf lists the PEs process r runs.
func (p *Processes) pesOf(r int) []int32 {
	first, count := cluster.Block(p.node.NumPEs(), len(p.job.Members()), r)
	out := make([]int32, count)
	for i := range out {
		out[i] = int32(first + i)
	}
	return out
}

func describe(r int, pes []int32) string {
	if len(pes) == 1 {
		return fmt.Sprintf("process %d (PE %d) was lost", r, pes[0])
	}
	return fmt.Sprintf("process %d (PEs %d..%d) was lost", r, pes[0], pes[len(pes)-1])
}

// ProcessLost implements cluster.Recovery.
func (p *Processes) ProcessLost(r int) bool {
	s := p.sup
	s.mu.Lock()
	defer s.mu.Unlock()
	if !p.replaceable {
		return false
	}
	if s.failed.IsZero() {
		s.failed = time.Now()
	}
	if p.job.Rank() == 0 {
		fmt.Fprintf(s.notices, "charmgo: %s; waiting for its replacement\n", describe(r, p.pesOf(r)))
	}
	return true
}

// Rejoined implements cluster.Recovery: process 0 decides how the job
// recovers and tells every process.
func (p *Processes) Rejoined(r int) {
	s := p.sup
	dead := p.pesOf(r)
	st := step{Process: r, Dead: dead}
	s.mu.Lock()
	s.ft.Failures++
	if s.local && len(dead) == 1 && !s.window && !s.rolling && s.recovering < 0 {
		y := int(dead[0])
		s.inc[y]++
		st.Inc, st.Recovered, st.RolledBack = s.inc[y], slices.Clone(s.recovered), s.rolledBack
		s.recovering = y
		s.ft.PEsRolledBack++
		fmt.Fprintf(s.notices, "charmgo: %s; its replacement recovers alone (%s): the others replay its messages\n", describe(r, dead), s.ft.Protocol)
	} else {
		st.Gen = p.job.Generation() + 1
		st.Rollback = &manager.RollbackMsg{Failed: dead, Committed: s.lastCommitted, Restart: s.restartEpoch, RestartDir: s.restartDir}
		s.rolling, s.resetDone = true, true
		s.dead, s.deadKills = slices.Clone(intsOf(dead)), nil
		s.lostWhat = describe(r, dead)
		if s.local && len(dead) > 1 {
			s.lostWhat += fmt.Sprintf(" (%d PEs at once: %s recovers one PE at a time, so every PE rolls back)", len(dead), s.ft.Protocol)
		}
	}
	s.mu.Unlock()
	b, err := msgpack.Marshal(&st)
	if err != nil {
		p.node.Fail(fmt.Errorf("recovery of process %d: %w", r, err))
		return
	}
	p.job.Broadcast(b)
}

func intsOf(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// Action implements cluster.Recovery: every process takes process 0's step.
func (p *Processes) Action(data []byte) {
	var st step
	if err := msgpack.Unmarshal(data, &st); err != nil {
		p.node.Fail(fmt.Errorf("a recovery step from process 0 does not decode: %w", err))
		return
	}
	s := p.sup
	if st.Rollback != nil {
		dead := map[int]bool{}
		for _, y := range st.Dead {
			dead[int(y)] = true
		}
		p.job.RollBack(st.Gen, func() { s.rollBackWith(p.node, st.Rollback, dead) })
		return
	}
	y := int(st.Dead[0])
	if p.node.IsLocal(y) {
		// this process is the replacement: PE y's new incarnation
		s.mu.Lock()
		s.recovering, s.inc[y] = y, st.Inc
		initial := s.initial[y]
		s.mu.Unlock()
		p.node.FailPE(y) // its stand-in, which never ran anything
		p.node.Replace(y, func(pp *pe.PE) pe.Handler {
			m := s.mk(pp)
			m.Revive(st.Inc, initial, st.RolledBack)
			return m
		})
		if !st.RolledBack {
			// the lost process counted its PE's first messages as handed
			// in; quiescence detection counts them here now
			p.node.AddInjected(uint64(len(initial)))
		}
		p.job.Rolled()
		return
	}
	s.mu.Lock()
	s.inc[y] = st.Inc
	s.mu.Unlock()
	first, count := p.node.LocalPEs()
	for q := first; q < first+count; q++ {
		p.node.InjectControl(q, pe.Envelope{Type: manager.PEFailedType(), Kind: pe.KindSystem,
			Payload: &manager.PEFailedMsg{PE: int32(y), Inc: st.Inc, Recovered: st.Recovered}})
	}
}
