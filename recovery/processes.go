package recovery

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/charmgo/charmgo/ftlayer"
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
	// Process 0's view of losses that overlap: lost are the processes
	// lost whose replacements have not joined yet, joined those whose
	// replacements joined while another was still lost (the decision
	// waits for the last), and overlapped says a loss came while another
	// was not yet recovered. The protocols recover one failure (one PE,
	// or one team) at a time, from survivors that hold what it needs, so
	// overlapping losses are one failure of all their PEs: every PE rolls
	// back, or the job ends saying which snapshots went with them.
	lost       map[int]bool
	joined     []int
	overlapped bool
}

// ForJob makes s recover node's job from lost processes.
func (s *Supervisor) ForJob(job *cluster.Job, node *pe.Node, replaceable bool) *Processes {
	p := &Processes{sup: s, job: job, node: node, replaceable: replaceable, lost: map[int]bool{}}
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
	if err := pe.UnmarshalMsgpack(data, &r); err != nil {
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
	// or the lost PEs' new incarnations (in Dead's order), recovering
	// alone: one PE, or one team
	Incs       []uint32 `msgpack:"i,omitempty"`
	Recovered  []int32  `msgpack:"rc,omitempty"`
	RolledBack bool     `msgpack:"b,omitempty"`
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
		if !s.local && s.lastStep >= 0 && s.awaitStep < 0 {
			// every PE rolls back: the run is back where it was when it
			// begins again the step it was in (AtStep measures it)
			s.awaitStep, s.failedAt = s.lastStep, s.failed
		}
	}
	if p.job.Rank() == 0 {
		if len(p.lost) > 0 || len(p.joined) > 0 || len(s.recovering) > 0 || s.rolling {
			p.overlapped = true
		}
		p.lost[r] = true
		fmt.Fprintf(s.notices, "charmgo: %s; waiting for its replacement\n", describe(r, p.pesOf(r)))
	}
	return true
}

// Rejoined implements cluster.Recovery: process 0 decides how the job
// recovers and tells every process, once every lost process's
// replacement joined.
func (p *Processes) Rejoined(r int) {
	s := p.sup
	s.mu.Lock()
	delete(p.lost, r)
	if !slices.Contains(p.joined, r) {
		p.joined = append(p.joined, r)
	}
	if len(p.lost) > 0 {
		s.mu.Unlock()
		return // another lost process's replacement has not joined yet
	}
	procs, overlapped := p.joined, p.overlapped
	p.joined, p.overlapped = nil, false
	slices.Sort(procs)
	var dead []int32
	for _, q := range procs {
		dead = append(dead, p.pesOf(q)...)
	}
	st := step{Process: procs[0], Dead: dead}
	if len(procs) == 1 && !overlapped && s.local && s.oneTeam(dead) && !s.window && !s.rolling && len(s.recovering) == 0 {
		for _, r := range s.startRecovery(dead, 1) {
			st.Incs = append(st.Incs, r.Inc)
		}
		st.Recovered, st.RolledBack = slices.Clone(s.recovered), s.rolledBack
		who := "its replacement recovers alone"
		if len(dead) > 1 {
			who = "its PEs are one team: its replacement recovers them from the last checkpoint"
		}
		fmt.Fprintf(s.notices, "charmgo: %s; %s (%s): the others replay its messages\n", describe(r, dead), who, s.ft.Protocol)
	} else {
		s.ft.Failures++
		st.Gen = p.job.Generation() + 1
		st.Rollback = &manager.RollbackMsg{Failed: dead, Committed: s.lastCommitted, Restart: s.restartEpoch, RestartDir: s.restartDir}
		s.rolling, s.resetDone = true, true
		s.dead, s.deadKills = slices.Clone(intsOf(dead)), nil
		s.lostWhat = describe(procs[0], p.pesOf(procs[0]))
		switch {
		case len(procs) > 1:
			var what []string
			for _, q := range procs {
				what = append(what, describe(q, p.pesOf(q)))
			}
			s.lostWhat = strings.Join(what, ", and ")
			if s.local {
				s.lostWhat += fmt.Sprintf(" (%d processes at once: %s recovers one failure at a time, so every PE rolls back)", len(procs), s.ft.Protocol)
			}
		case overlapped && s.local:
			s.lostWhat += fmt.Sprintf(" (while another failure was being recovered from: %s recovers one failure at a time, so every PE rolls back)", s.ft.Protocol)
		case s.local && s.teams.On() && len(dead) > 1:
			s.lostWhat += fmt.Sprintf(" (%d PEs at once, not one team (teams %v): %s recovers one team at a time, so every PE rolls back)", len(dead), s.teams, s.ft.Protocol)
		case s.local && len(dead) > 1:
			s.lostWhat += fmt.Sprintf(" (%d PEs at once: %s recovers one PE at a time, so every PE rolls back)", len(dead), s.ft.Protocol)
		}
		st.Rollback.What = s.lostWhat
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
	if err := pe.UnmarshalMsgpack(data, &st); err != nil {
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
	if len(st.Incs) != len(st.Dead) || len(st.Dead) == 0 {
		p.node.Fail(fmt.Errorf("a recovery step from process 0 names %d PEs and %d incarnations", len(st.Dead), len(st.Incs)))
		return
	}
	revived := make([]manager.Incarnation, len(st.Dead))
	s.mu.Lock()
	for i, y := range st.Dead {
		revived[i] = manager.Incarnation{PE: y, Inc: st.Incs[i]}
		s.inc[y] = st.Incs[i]
	}
	s.mu.Unlock()
	if p.node.IsLocal(int(st.Dead[0])) {
		// this process is the replacement: the PEs' new incarnations
		s.mu.Lock()
		s.recovering = intsOf(st.Dead)
		s.mu.Unlock()
		for _, r := range revived {
			y := int(r.PE)
			s.mu.Lock()
			initial := s.initial[y]
			s.mu.Unlock()
			p.node.FailPE(y) // its stand-in, which never ran anything
			p.node.Replace(y, func(pp *pe.PE) pe.Handler {
				m := s.mk(pp)
				m.Revive(r.Inc, initial, st.RolledBack, revived, ftlayer.Rollback{Set: st.Dead, Failed: st.Dead})
				return m
			})
			if !st.RolledBack {
				// the lost process counted its PE's first messages as
				// handed in; quiescence detection counts them here now
				p.node.AddInjected(uint64(len(initial)))
			}
		}
		p.job.Rolled()
		return
	}
	first, count := p.node.LocalPEs()
	for _, r := range revived {
		for q := first; q < first+count; q++ {
			p.node.InjectControl(q, pe.Envelope{Type: manager.PEFailedType(), Kind: pe.KindSystem,
				Payload: &manager.PEFailedMsg{PE: r.PE, Inc: r.Inc, Recovered: st.Recovered, Set: st.Dead}})
		}
	}
}

// oneTeam reports whether dead, the PEs of a lost process, are one
// failure the protocol recovers from without a global rollback: a PE
// (teams off), or exactly the PEs of one team.
func (s *Supervisor) oneTeam(dead []int32) bool {
	if len(dead) == 0 {
		return false
	}
	if !s.teams.On() {
		return len(dead) == 1
	}
	return slices.Equal(s.teams.Members(dead[0]), dead)
}
