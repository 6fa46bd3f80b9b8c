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
// (cluster.Recovery): once the launcher's replacement joined, the
// steward's supervisor decides (process 0's; the successor's once process
// 0 was lost, see cluster.Job.Steward, until it hands the steering back
// to process 0's replacement), and every process takes the step it
// broadcasts.
// Under scmel and camel a process of one PE recovers alone, as a failed
// PE does in one process, and under team a process that is one team;
// under pessimist the PEs of the processes lost before any replacement
// joined recover together, each alone (their events come back from the
// ReplicatedEventLog). A loss while another recovers is queued under
// scmel, camel and team (Supervisor.queues: the lost PEs stay down until
// the recovery under way caught up) and combined under spmd and
// pessimist (Supervisor.joinsRecovering), where they can. Otherwise
// (none, several PEs lost at once under the others, a checkpoint's two
// copies lost, a loss while another recovers that is neither) every PE
// rolls back to the last coordinated checkpoint.
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
	// lostAt: when each process lost and not yet recovered was lost
	// (a recovery counts from its first loss)
	lostAt map[int]time.Time

	// Under a log limit a lost process's recovery takes three steps (see
	// limitedRecovery): process 0 gathers every process's channels not
	// logged (rows, from the processes in rowsFrom), renews the rollback
	// set's PEs everywhere (renewed counts the processes done), then lets
	// them go. pending is the step in progress; own, on each process, the
	// snapshots its PEs that keep their memory restore once it goes.
	pending  *step
	rows     map[int32][]int32
	rowsFrom map[int]bool
	renewed  map[int]bool
	own      map[int]pe.Envelope

	// informed: this process's supervisor saw every recovery of the job
	// and every checkpoint PE 0 took (process 0 as it started). A
	// successor did not: what process 0 knew of recoveries under way,
	// teams and checkpoint windows went with it, so every recovery it
	// steers is a global rollback, which needs none of that, until the
	// program resumed from one with nothing else under way: then it
	// hands the steering back to process 0's replacement, which knows
	// from there (resumed).
	informed bool
	steward  int // the steward as this process last knew it
	// steered: this process, not process 0, steered the job for a while
	// (its recoveries are in the summary: Steered)
	steered bool
	// deferred: the replacement of a lost process queued behind a
	// recovery (Supervisor.queues) joined before that caught up; the
	// steward decides its recovery then (drainQueued)
	deferred bool
}

// ForJob makes s recover node's job from lost processes.
func (s *Supervisor) ForJob(job *cluster.Job, node *pe.Node, replaceable bool) *Processes {
	p := &Processes{sup: s, job: job, node: node, replaceable: replaceable, lost: map[int]bool{},
		informed: job.Rank() == 0 && !job.Replacement(), steward: job.Steward()}
	s.mu.Lock()
	s.elsewhere = p.forward
	if job.Rank() != 0 {
		s.onRecovered, s.onRestored, s.onSupplied, s.onHolds = p.recovered, p.restored, p.supplied, p.holds
	} else if s.logLimit {
		s.onCaughtUp = p.thawAll
	}
	s.onDrained, s.onResumed = p.drainQueued, p.resumed
	s.sampleOff = true // a process knows its own PEs' channels only
	s.mu.Unlock()
	return p
}

// recovered: PE me, of this process, caught up; the steward decides the
// next recoveries and checkpoints, so it must know.
func (p *Processes) recovered(me int, c recoveryCounts) {
	b, _ := msgpack.Marshal(&report{Recovered: int32(me), Counts: c})
	p.job.Report(b)
}

// supplied: the PEs by sent PE me, of this process, incarnation inc,
// what its recovery needs from them; the steward may then queue their
// loss.
func (p *Processes) supplied(me int, inc uint32, by []int32) {
	b, _ := msgpack.Marshal(&report{Recovered: reportSupplied, PE: int32(me), By: by, Counts: recoveryCounts{Inc: inc}})
	p.job.Report(b)
}

// forward tells the steward, if that is another process, that the global
// rollback it decided chose checkpoint epoch (from) or that the program
// resumed (resumed): PE 0, whose process sees both, may run elsewhere.
// It reports whether it did.
func (p *Processes) forward(epoch uint64, from string, resumed bool) bool {
	if p.steers() {
		return false
	}
	r := report{Recovered: reportRollingBack, Restored: epoch, From: from}
	if resumed {
		r = report{Recovered: reportResumed}
	}
	b, _ := msgpack.Marshal(&r)
	p.job.Report(b)
	return true
}

func (p *Processes) steers() bool { return p.job.Steward() == p.job.Rank() }

// restored: PE me of this process, incarnation inc, restored checkpoint
// epoch.
func (p *Processes) restored(me int, inc uint32, epoch uint64) {
	b, _ := msgpack.Marshal(&report{Recovered: -1, Restored: epoch, PE: int32(me), Counts: recoveryCounts{Inc: inc}})
	p.job.Report(b)
}

// holds: PE me of this process, incarnation inc, holds PE owner's
// checkpoint copy again.
func (p *Processes) holds(me int, inc uint32, owner int32) {
	b, _ := msgpack.Marshal(&report{Recovered: reportHolds, PE: int32(me), By: []int32{owner}, Counts: recoveryCounts{Inc: inc}})
	p.job.Report(b)
}

// report is what a process tells the steward of its recovery: a PE
// caught up (Recovered; Counts, what its protocol says of its recovery),
// or PE restored a checkpoint (Recovered -1); under a log limit (Recovered
// -2), its PEs' channels not logged (Rows, by PE) or that it renewed its
// PEs of the rollback set (Renewed); PE 0's process, when the steward is
// another, that a global rollback chose checkpoint Restored (From; -3)
// or that the program resumed (-4); that the PEs By sent PE PE,
// incarnation Counts.Inc, what its recovery needs from them (-5), or that
// it holds the checkpoint copy of By[0] again (-6).
type report struct {
	Recovered int32             `msgpack:"r"`
	PE        int32             `msgpack:"pe,omitempty"`
	By        []int32           `msgpack:"by,omitempty"`
	Counts    recoveryCounts    `msgpack:"c,omitempty"`
	Restored  uint64            `msgpack:"e,omitempty"`
	Rows      map[int32][]int32 `msgpack:"o,omitempty"`
	Renewed   bool              `msgpack:"n,omitempty"`
	// Fresh: PEs of the set renewed empty, not keeping their memory: they
	// had not restored their snapshot from an earlier loss yet (their
	// holders hand it to them, as to a lost one)
	Fresh []int32 `msgpack:"fr,omitempty"`
	From  string  `msgpack:"f,omitempty"`
}

const (
	reportLimit       = -2
	reportRollingBack = -3
	reportResumed     = -4
	reportSupplied    = -5
	reportHolds       = -6
)

// decodeReport decodes a recovery report of a job of pes PEs, and
// checks that every PE it names is one.
func decodeReport(data []byte, pes int) (report, error) {
	var r report
	if err := pe.UnmarshalMsgpack(data, &r); err != nil {
		return r, fmt.Errorf("does not decode: %w", err)
	}
	inRange := func(y int32) bool { return y >= 0 && int(y) < pes }
	switch {
	case r.Recovered < reportHolds || int(r.Recovered) >= pes:
		return r, fmt.Errorf("is of kind or PE %d (the job has PEs 0..%d)", r.Recovered, pes-1)
	case !inRange(r.PE):
		return r, fmt.Errorf("names PE %d (the job has 0..%d)", r.PE, pes-1)
	}
	for _, l := range [][]int32{r.By, r.Fresh} {
		for _, y := range l {
			if !inRange(y) {
				return r, fmt.Errorf("names PE %d (the job has 0..%d)", y, pes-1)
			}
		}
	}
	for q, row := range r.Rows {
		if !inRange(q) {
			return r, fmt.Errorf("names PE %d (the job has 0..%d)", q, pes-1)
		}
		for _, y := range row {
			if !inRange(y) {
				return r, fmt.Errorf("names PE %d (the job has 0..%d)", y, pes-1)
			}
		}
	}
	return r, nil
}

// Report implements cluster.Recovery (on the steward).
func (p *Processes) Report(from int, data []byte) {
	r, err := decodeReport(data, p.node.NumPEs())
	if err != nil {
		p.node.Fail(fmt.Errorf("a recovery report from process %d %w", from, err))
		return
	}
	switch {
	case r.Recovered == reportLimit:
		p.limitReport(from, r)
		return
	case r.Recovered == reportRollingBack:
		p.sup.RollingBack(r.Restored, r.From)
		return
	case r.Recovered == reportResumed:
		p.sup.Restored()
		return
	case r.Recovered == reportSupplied:
		p.sup.suppliedBy(int(r.PE), r.Counts.Inc, r.By, false)
		return
	case r.Recovered == reportHolds && len(r.By) == 1:
		p.sup.mu.Lock()
		p.sup.holdsCopy(int(r.PE), r.Counts.Inc, r.By[0])
		p.sup.mu.Unlock()
		return
	case r.Recovered < 0:
		p.sup.mu.Lock()
		p.sup.restoredAt(r.Restored)
		p.sup.holdsCopy(int(r.PE), r.Counts.Inc, r.PE)
		p.sup.mu.Unlock()
		return
	}
	p.sup.caughtUp(int(r.Recovered), false, r.Counts)
}

// step is a recovery step the steward decided.
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
	// Under a log limit: Phase says which of the three steps this is
	// (limitedRecovery); Set is the rollback set (Incs in its order),
	// Dead the lost PEs among them.
	Phase uint8   `msgpack:"p,omitempty"`
	Set   []int32 `msgpack:"s,omitempty"`
	// Again: the PEs of Set recovering still from an earlier loss
	// (manager.PEFailedMsg.Again)
	Again []int32 `msgpack:"ag,omitempty"`
	// HandBack: process Process, which steered the job since process 0
	// was lost, hands the steering back to process 0's replacement
	// (Processes.handBack), with the recoveries it steered (Steered),
	// which process 0 reports from then on
	HandBack bool   `msgpack:"hb,omitempty"`
	Steered  *Stats `msgpack:"st,omitempty"`
}

// The steps of a recovery under a log limit.
const (
	phaseFreeze uint8 = iota + 1 // every process: no channel stops logging; report the rows
	phaseRenew                   // every process: renew the set's PEs; report it
	phaseGo                      // every process: restore, tell the PEs
	phaseThaw                    // every process: channels may stop logging again
)

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

// Replaces implements cluster.Recovery.
func (p *Processes) Replaces() bool { return p.replaceable }

// ProcessLost implements cluster.Recovery.
func (p *Processes) ProcessLost(r int) bool {
	s := p.sup
	s.mu.Lock()
	defer s.mu.Unlock()
	if !p.replaceable {
		return false
	}
	p.lost[r] = true // (on every process: a successor must know)
	if p.lostAt == nil {
		p.lostAt = map[int]time.Time{}
	}
	p.lostAt[r] = time.Now()
	took := false
	if st := p.job.Steward(); st != p.steward {
		// the steward was lost, and st took over
		p.steward, took = st, st == p.job.Rank()
	}
	if s.failed.IsZero() {
		s.failed = time.Now()
		if !s.local && s.lastStep >= 0 && s.awaitStep < 0 {
			// every PE rolls back: the run is back where it was when it
			// begins again the step it was in (AtStep measures it)
			s.awaitStep, s.failedAt = s.lastStep, s.failed
		}
	}
	switch {
	case took:
		// what the lost steward knew went with it: every process lost and
		// not yet recovered is one failure, recovered by a global rollback
		p.informed, p.overlapped, p.pending, p.steered = false, true, nil, true
		for q := range p.lost {
			if !p.job.IsLost(q) {
				delete(p.lost, q) // recovered, or its replacement is in
			}
		}
		fmt.Fprintf(s.notices, "charmgo: %s; waiting for its replacement (process %d steers the job from now on)\n", describe(r, p.pesOf(r)), p.steward)
	case p.steers():
		// (under a protocol that recovers any set of PEs, processes lost
		// before their replacements joined are one failure, recovered
		// together once the last joined: see Rejoined)
		atOnce := (s.anySet || s.jointTeams) && len(s.recovering) == 0 && !s.rolling
		// under spmd a process that is whole teams recovers together
		// with those recovering, which restart again (combines says
		// when it may)
		alone := p.pending == nil && len(p.lost) == 1 && len(p.joined) == 0
		combine := alone && s.joinsRecovering(p.pesOf(r))
		// under the others, a process that is one team (or one PE) the
		// recovery under way needs nothing of stays down until it caught
		// up, and recovers then (queues)
		queue := !combine && alone && p.informed && !p.overlapped && s.oneTeam(p.pesOf(r)) && s.queues(p.pesOf(r))
		switch {
		case queue:
			s.down, s.downSince = p.pesOf(r), time.Now()
			fmt.Fprintf(s.notices, "charmgo: %s; %s: its replacement recovers it once they caught up\n", describe(r, p.pesOf(r)), s.holdWhatTheyNeed())
		case !combine && ((len(p.lost) > 1 || len(p.joined) > 0) && !atOnce || len(s.recovering) > 0 || s.rolling || p.pending != nil):
			p.overlapped = true
			p.pending = nil // a recovery under a log limit still gathering: every PE rolls back instead
			fallthrough
		default:
			fmt.Fprintf(s.notices, "charmgo: %s; waiting for its replacement\n", describe(r, p.pesOf(r)))
		}
	}
	return true
}

// Rejoined implements cluster.Recovery: the steward decides how the job
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
	if len(s.down) > 0 && len(s.recovering) > 0 && !p.overlapped {
		// a loss queued behind the recovery under way (ProcessLost):
		// decided once that caught up (drainQueued)
		p.deferred = true
		s.mu.Unlock()
		return
	}
	p.decide()
}

// drainQueued: the recovery a lost process was queued behind caught up
// (on the steward): its recovery is decided now, if its replacement
// joined.
func (p *Processes) drainQueued() {
	s := p.sup
	s.mu.Lock()
	if !p.deferred || len(s.recovering) > 0 || len(p.lost) > 0 || !p.steers() {
		s.mu.Unlock()
		return
	}
	p.decide()
}

// decide decides how the processes lost and rejoined (p.joined) recover
// and tells every process (the steward, s.mu held; it releases it).
func (p *Processes) decide() {
	s := p.sup
	p.deferred = false
	var queued time.Time // (zero: not queued)
	if len(s.down) > 0 {
		queued = s.downSince
	}
	s.down = nil
	procs, overlapped := p.joined, p.overlapped
	p.joined, p.overlapped = nil, false
	slices.Sort(procs)
	var dead []int32
	for _, q := range procs {
		dead = append(dead, p.pesOf(q)...)
	}
	st := step{Process: procs[0], Dead: dead}
	var began time.Time // the first of these losses
	for _, q := range procs {
		if t, ok := p.lostAt[q]; ok && (began.IsZero() || t.Before(began)) {
			began = t
		}
		delete(p.lostAt, q)
	}
	if began.IsZero() {
		began = time.Now()
	}
	if s.failed.IsZero() {
		s.failed = began // (lost as another recovery ended)
	}
	// set: the PEs that restart, dead and (spmd) those recovering still
	// from an earlier loss, which restart again with them (again), if
	// the lost processes are whole teams, and the teams that recovered
	// together with theirs since the last checkpoint (merged)
	set, joins := dead, s.joinsRecovering(dead)
	var again, merged []int32
	if joins {
		for _, y := range s.recoveringTeams() {
			if !slices.Contains(dead, y) {
				again = append(again, y)
			}
		}
		set = append(slices.Clone(dead), again...)
		slices.Sort(set)
	}
	if s.jointTeams {
		for _, y := range s.withMerged(set) {
			if !slices.Contains(set, y) {
				merged = append(merged, y)
			}
		}
		set = slices.Sorted(slices.Values(slices.Concat(set, merged)))
	}
	quiet := p.informed && !overlapped && s.local && !s.window && !s.rolling && (len(s.recovering) == 0 || joins)
	// under a protocol that recovers any set of PEs (pessimist), the
	// lost processes' PEs recover together unless a checkpoint's two
	// copies went with them
	anySet, copyLost := s.anySet && quiet, ""
	// under one whose teams failing at once recover together (spmd), so
	// do the lost processes' teams, if they lost whole teams
	joint := s.jointTeams && quiet && s.wholeTeams(set) && (len(procs) > 1 || !s.oneTeam(set))
	if anySet || joint {
		copyLost = s.copiesLost(p.node.NumPEs(), set, s.fresh(set, dead))
	}
	if len(procs) == 1 && quiet && s.oneTeam(dead) && s.logLimit {
		// the rollback set is computed once every process froze its
		// channels and reported them
		st.Phase = phaseFreeze
		p.pending, p.rows, p.rowsFrom, p.renewed = &st, map[int32][]int32{}, map[int]bool{}, map[int]bool{}
		s.failed = time.Now()
	} else if len(procs) == 1 && quiet && s.oneTeam(dead) || (anySet || joint) && copyLost == "" {
		if len(set) > len(dead) {
			// the PEs recovering still restart again, and those merged
			// with them, keeping their memory: every process renews its
			// PEs of the set before any PE hears of it (two steps, as
			// under a log limit: a holder must not hand a snapshot to an
			// incarnation about to go)
			st.Set, st.Phase, st.Again = set, phaseRenew, again
			p.pending, p.renewed = &st, map[int]bool{}
		}
		fresh := s.fresh(set, dead)
		for _, r := range s.startRecovery(set, len(procs), began) {
			st.Incs = append(st.Incs, r.Inc)
		}
		s.emptied(fresh)
		if !queued.IsZero() {
			s.ft.Recoveries[len(s.ft.Recoveries)-1].Queued = time.Since(queued)
		}
		s.ft.Recoveries[len(s.ft.Recoveries)-1].Merged = merged
		if again != nil {
			s.ft.Recoveries[len(s.ft.Recoveries)-1].Again = again // (whole teams: recoveringTeams)
		}
		st.Recovered, st.RolledBack = slices.Clone(s.recovered), s.rolledBack
		what := describe(procs[0], p.pesOf(procs[0]))
		for _, q := range procs[1:] {
			what += ", and " + describe(q, p.pesOf(q))
		}
		who := "its replacement recovers alone"
		switch {
		case again != nil:
			reps, how := "its replacement's", "together from the last checkpoint"
			if len(procs) > 1 {
				reps = "their replacements'"
			}
			if anySet {
				how = "together, each alone"
			}
			who = fmt.Sprintf("%s PEs and PEs %s, which were recovering still and restart again, recover %s", reps, ftlayer.PEList(again), how)
		case merged != nil:
			who = fmt.Sprintf("its PEs and PEs %s, which recovered together with them since the last checkpoint, roll back and recover together from it", ftlayer.PEList(merged))
		case joint && len(procs) > 1:
			who = "their PEs are whole teams: their replacements recover them together from the last checkpoint"
		case joint:
			who = "its PEs are whole teams: its replacement recovers them together from the last checkpoint"
		case len(procs) > 1:
			who = "their replacements' PEs recover together, each alone"
		case anySet && len(dead) > 1:
			who = "its replacement's PEs recover together, each alone"
		case len(dead) > 1:
			who = "its PEs are one team: its replacement recovers them from the last checkpoint"
		}
		whose := "its"
		if len(procs) > 1 {
			whose = "their"
		}
		fmt.Fprintf(s.notices, "charmgo: %s; %s (%s): the others replay %s messages\n", what, who, s.ft.Protocol, whose)
	} else {
		s.ft.Failures++
		st.Gen = p.job.Generation() + 1
		st.Rollback = &manager.RollbackMsg{Failed: dead, Committed: s.lastCommitted, Restart: s.restartEpoch, RestartDir: s.restartDir}
		s.rolling, s.resetDone = true, true
		s.dead, s.deadKills = slices.Clone(intsOf(dead)), nil
		s.lostWhat = describe(procs[0], p.pesOf(procs[0]))
		switch {
		case copyLost != "":
			var what []string
			for _, q := range procs {
				what = append(what, describe(q, p.pesOf(q)))
			}
			s.lostWhat = strings.Join(what, ", and ") + " (" + copyLost + ": every PE rolls back)"
		case len(procs) > 1:
			var what []string
			for _, q := range procs {
				what = append(what, describe(q, p.pesOf(q)))
			}
			s.lostWhat = strings.Join(what, ", and ")
			if !p.informed {
				s.lostWhat += stewardGone(p.job.Rank())
			} else if s.local && s.jointTeams && !s.wholeTeams(dead) {
				s.lostWhat += fmt.Sprintf(" (%d processes at once, not whole teams: %s recovers whole teams together, so every PE rolls back)", len(procs), s.ft.Protocol)
			} else if s.local {
				s.lostWhat += fmt.Sprintf(" (%d processes at once: %s recovers one failure at a time, so every PE rolls back)", len(procs), s.ft.Protocol)
			}
		case !p.informed:
			s.lostWhat += stewardGone(p.job.Rank())
		case overlapped && s.local:
			s.lostWhat += fmt.Sprintf(" (while another failure was being recovered from: %s recovers one failure at a time, so every PE rolls back)", s.ft.Protocol)
		case s.local && s.teams.On() && len(dead) > 1:
			s.lostWhat += fmt.Sprintf(" (%d PEs at once, not one team (teams %v): %s recovers one team at a time, so every PE rolls back)", len(dead), s.teams, s.ft.Protocol)
		case s.local && len(dead) > 1:
			s.lostWhat += fmt.Sprintf(" (%d PEs at once: %s recovers one PE at a time, so every PE rolls back", len(dead), s.ft.Protocol)
			if s.mayTeam {
				s.lostWhat += "; with --teams process each process is a team, which recovers alone"
			}
			s.lostWhat += ")"
		}
		st.Rollback.What = s.lostWhat
	}
	s.mu.Unlock()
	b, err := msgpack.Marshal(&st)
	if err != nil {
		p.node.Fail(fmt.Errorf("recovery of process %d: %w", procs[0], err))
		return
	}
	p.job.Broadcast(b)
}

// stewardGone says why a successor steward rolls every PE back.
func stewardGone(me int) string {
	return fmt.Sprintf(" (process %d steers the job in place of a lost one, which took what it knew of the job's recoveries with it: every PE rolls back)", me)
}

func intsOf(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// resumed: the program resumed after a global rollback this process
// decided (on the steward). A steward that took over from a lost one
// knew nothing of what it knew (informed); once nothing is under way,
// it knows all there is to know, if it runs PE 0 (process 0's
// replacement, which took over from a lost successor: it sees every
// checkpoint begin and end), and recovers the job's later losses as
// process 0 did before its loss (alone, or by teams), not by global
// rollbacks. Another hands the steering back to process 0 (handBack).
func (p *Processes) resumed() {
	s := p.sup
	s.mu.Lock()
	quiet := p.steers() && !p.informed && len(p.lost) == 0 && len(p.joined) == 0 && p.pending == nil && !p.deferred &&
		len(s.recovering) == 0 && len(s.down) == 0 && !s.rolling
	if quiet && p.job.Rank() == 0 {
		p.informed = true
		s.failed = time.Time{}
		quiet = false
	}
	s.mu.Unlock()
	if quiet {
		p.handBack()
	}
}

// handBack, on a successor of process 0 that steers the job, once the
// global rollback it decided resumed and nothing else is under way
// (resumed): it hands the steering back to process 0's replacement,
// which runs PE 0 and so sees every checkpoint begin and end, and from
// then on every recovery.
func (p *Processes) handBack() {
	s := p.sup
	steered := s.Steered()
	b, err := msgpack.Marshal(&step{Process: p.job.Rank(), HandBack: true, Steered: &steered})
	if err != nil {
		p.node.Fail(fmt.Errorf("handing the steering back to process 0: %w", err))
		return
	}
	if p.job.HandBack(b) { // (not if a process is lost or joining meanwhile: it steers that recovery, and hands back after it)
		s.handSteered()
	}
}

// steerBack: process st.Process handed the steering of the job back to
// process 0's replacement (handBack), on every process. Process 0 knows
// the job's state from here: no recovery is under way, and PE 0's
// checkpoints are its own — unless a loss it noticed came meanwhile,
// which it recovers then by a global rollback, as a successor would.
func (p *Processes) steerBack(st step) {
	back, err := p.job.StewardBack()
	if err != nil {
		p.node.Fail(err)
		return
	}
	if !back {
		return // process 0 was lost again: its successor steers
	}
	s := p.sup
	if p.job.Rank() == 0 && st.Steered != nil {
		s.AddSteered(*st.Steered) // (its summary's, should the successor be lost)
	}
	s.mu.Lock()
	p.steward = 0
	if p.job.Rank() == 0 {
		p.informed = len(p.lost) == 0
		if p.informed {
			s.failed = time.Time{} // (set by losses noticed while another steered)
		}
		fmt.Fprintf(s.notices, "charmgo: process 0 steers the job again (process %d handed it back once the rollback was done)\n", st.Process)
	}
	s.mu.Unlock()
}

// Steered reports whether this process, not process 0, steered the
// job for a while: the recoveries it decided are its to report
// (Supervisor.Steered).
func (p *Processes) Steered() bool {
	p.sup.mu.Lock()
	defer p.sup.mu.Unlock()
	return p.steered
}

// decodeStep decodes a recovery step of a job of pes PEs in procs
// processes, and checks that every PE and process it names is one.
func decodeStep(data []byte, pes, procs int) (step, error) {
	var st step
	if err := pe.UnmarshalMsgpack(data, &st); err != nil {
		return st, fmt.Errorf("does not decode: %w", err)
	}
	if st.Process < 0 || st.Process >= procs {
		return st, fmt.Errorf("names process %d (the job has 0..%d)", st.Process, procs-1)
	}
	if st.Phase > phaseThaw {
		return st, fmt.Errorf("of unknown phase %d", st.Phase)
	}
	lists := [][]int32{st.Dead, st.Set, st.Again, st.Recovered}
	if st.Rollback != nil {
		lists = append(lists, st.Rollback.Failed)
	}
	for _, l := range lists {
		for _, y := range l {
			if y < 0 || int(y) >= pes {
				return st, fmt.Errorf("names PE %d (the job has 0..%d)", y, pes-1)
			}
		}
	}
	if st.Set != nil && st.Incs != nil && len(st.Incs) != len(st.Set) {
		return st, fmt.Errorf("names %d PEs and %d incarnations", len(st.Set), len(st.Incs))
	}
	return st, nil
}

// Action implements cluster.Recovery: every process takes the steward's step.
func (p *Processes) Action(data []byte) {
	st, err := decodeStep(data, p.node.NumPEs(), len(p.job.Members()))
	if err != nil {
		p.node.Fail(fmt.Errorf("a recovery step from the steward %w", err))
		return
	}
	if st.HandBack {
		p.steerBack(st)
		return
	}
	s := p.sup
	s.mu.Lock()
	for q := range p.lost {
		if slices.ContainsFunc(st.Dead, func(y int32) bool { return slices.Contains(p.pesOf(q), y) }) {
			delete(p.lost, q) // (on the others than the steward: it is recovered)
		}
	}
	s.mu.Unlock()
	if st.Phase != 0 {
		p.limitedStep(&st)
		return
	}
	if st.Rollback != nil {
		dead := map[int]bool{}
		for _, y := range st.Dead {
			dead[int(y)] = true
		}
		p.job.RollBack(st.Gen, func() { s.rollBackWith(p.node, st.Rollback, dead) })
		return
	}
	revived := p.incarnations(st.Dead, st.Incs)
	if revived == nil {
		return
	}
	if slices.ContainsFunc(st.Dead, func(y int32) bool { return p.node.IsLocal(int(y)) }) {
		// this process is a replacement: its PEs' new incarnations, each
		// told of every PE recovering (those of another replacement too)
		s.mu.Lock()
		for _, y := range st.Dead {
			if !slices.Contains(s.recovering, int(y)) {
				s.recovering = append(s.recovering, int(y))
			}
		}
		s.mu.Unlock()
		for _, r := range revived {
			y := int(r.PE)
			if !p.node.IsLocal(y) {
				continue
			}
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

// copiesLost says which PE's checkpoint is gone when set restarts at
// once, fresh among them coming back empty (Supervisor.fresh), or "" when
// none is (s.mu held). A PE that comes back empty takes its snapshot from
// its buddy, which must not come back empty with it, and must hold the
// copy: a PE that came back empty since the checkpoint holds it once its
// owner sent it again (holds), the others hold it still.
func (s *Supervisor) copiesLost(n int, set, fresh []int32) string {
	b := s.buddies(n)
	for _, y := range fresh {
		h := b.Of(y)
		if h == y {
			continue
		}
		if slices.Contains(fresh, h) {
			return fmt.Sprintf("PE %d and PE %d, which holds the second copy of its checkpoint, were lost at once", y, h)
		}
		if hs, ok := s.holds[h]; ok && !slices.Contains(hs, y) {
			return fmt.Sprintf("PE %d restarts, and PE %d, which holds the second copy of its checkpoint, came back empty since and does not have it back yet", y, h)
		}
	}
	return ""
}

// wholeTeams reports whether dead, the PEs of lost processes, are whole
// teams (with teams off, every PE is a team of its own).
func (s *Supervisor) wholeTeams(dead []int32) bool {
	if len(dead) == 0 {
		return false
	}
	for _, y := range dead {
		for _, q := range s.teams.Members(y) {
			if !slices.Contains(dead, q) {
				return false
			}
		}
	}
	return true
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

// Under a log limit a lost process's PEs take along every PE that stopped
// logging to one of them (the rollback set), and those PEs are in other
// processes, whose channels only they know, and which must renew their
// PEs of the set before anything is sent to them. Three steps, each
// broadcast by process 0 and taken by every process in order:
//
//  1. freeze: no channel stops logging any more (until thaw); each
//     process reports its PEs' channels not logged;
//  2. renew: process 0 computed the set from every report; each process
//     fails and renews its PEs of it (those of the replacement come back
//     empty, the others keep their checkpoint memory and what their hooks
//     keep) and reports it;
//  3. go: those that kept their memory restore their own snapshots, and
//     every PE hears of every PE of the set. A restored PE sends its
//     fellows their determinants at once: they all run as their new
//     incarnations by then.
//
// When every PE of the set caught up, process 0 broadcasts thaw.

// limitedStep takes a step of a recovery under a log limit.
func (p *Processes) limitedStep(st *step) {
	s := p.sup
	first, count := p.node.LocalPEs()
	local := func(q int32) bool { return int(q) >= first && int(q) < first+count }
	switch st.Phase {
	case phaseFreeze:
		rows := s.gate.freezeRows(first, count)
		b, _ := msgpack.Marshal(&report{Recovered: reportLimit, Rows: rows})
		p.job.Report(b)
	case phaseRenew:
		revived := p.incarnations(st.Set, st.Incs)
		if revived == nil {
			return
		}
		rb := ftlayer.Rollback{Set: st.Set, Failed: st.Dead}
		p.own = map[int]pe.Envelope{}
		for _, y := range st.Set {
			if local(y) {
				s.gate.LoggingOn(int(y)) // it logs every channel again from its checkpoint
			}
		}
		replacement := false
		var fresh []int32
		for _, r := range revived {
			y := int(r.PE)
			if !local(r.PE) {
				continue
			}
			s.mu.Lock()
			initial := s.initial[y]
			s.mu.Unlock()
			p.node.FailPE(y)
			if slices.Contains(st.Dead, r.PE) {
				// this process is the replacement: its stand-in never
				// ran anything
				replacement = true
				p.node.Replace(y, func(pp *pe.PE) pe.Handler {
					m := s.mk(pp)
					m.Revive(r.Inc, initial, st.RolledBack, revived, rb)
					return m
				})
				if !st.RolledBack {
					p.node.AddInjected(uint64(len(initial)))
				}
				continue
			}
			old := p.node.Renew(y, func(pp *pe.PE, prev pe.Handler) pe.Handler {
				m := s.mk(pp)
				if pm := prev.(*manager.Manager); pm.Restored() {
					p.own[y] = m.ReviveKeeping(pm, r.Inc, initial, st.RolledBack, revived, rb)
				} else {
					// recovering still from an earlier loss, and its
					// snapshot not in yet: nothing to keep
					m.Revive(r.Inc, initial, st.RolledBack, revived, rb)
					fresh = append(fresh, r.PE)
				}
				return m
			})
			if old != nil {
				s.AddLog(y, old.(*manager.Manager).FT().Stats())
			}
		}
		if replacement {
			p.job.Rolled()
		}
		b, _ := msgpack.Marshal(&report{Recovered: reportLimit, Renewed: true, Fresh: fresh})
		p.job.Report(b)
	case phaseGo:
		for _, y := range st.Set {
			if env, ok := p.own[int(y)]; ok {
				p.node.InjectControl(int(y), env)
			}
		}
		p.own = nil
		for i, r := range st.Set {
			for q := first; q < first+count; q++ {
				if int32(q) != r {
					p.node.InjectControl(q, pe.Envelope{Type: manager.PEFailedType(), Kind: pe.KindSystem,
						Payload: &manager.PEFailedMsg{PE: r, Inc: st.Incs[i], Recovered: st.Recovered, Set: st.Set, Keeps: !slices.Contains(st.Dead, r), Again: slices.Contains(st.Again, r)}})
				}
			}
		}
	case phaseThaw:
		s.gate.thaw()
	default:
		p.node.Fail(fmt.Errorf("a recovery step from the steward of unknown phase %d", st.Phase))
	}
}

// limitReport: process from reported its rows or its renewal (process 0).
func (p *Processes) limitReport(from int, r report) {
	s := p.sup
	s.mu.Lock()
	st := p.pending
	if st == nil {
		s.mu.Unlock()
		return // a late report of a recovery that ended
	}
	procs := len(p.job.Members())
	var next *step
	switch {
	case st.Phase == phaseFreeze && !r.Renewed:
		for q, row := range r.Rows {
			p.rows[q] = row
		}
		p.rowsFrom[from] = true
		if len(p.rowsFrom) < procs {
			break
		}
		team := st.Dead
		set, chain, off := s.gate.closure(team, s.teams, p.rows)
		f := describe(st.Process, st.Dead)
		if len(set) == p.node.NumPEs() && len(set) > len(team) {
			// every PE: the global rollback every protocol shares
			s.everyPE = &RecoveryStats{Set: set, Chain: chain, Off: off}
			s.ft.Failures++
			st.Phase, st.Set = 0, nil
			st.Gen = p.job.Generation() + 1
			st.Rollback = &manager.RollbackMsg{Failed: st.Dead, Committed: s.lastCommitted, Restart: s.restartEpoch, RestartDir: s.restartDir}
			s.rolling, s.resetDone = true, true
			s.dead, s.deadKills = slices.Clone(intsOf(st.Dead)), nil
			s.lostWhat = fmt.Sprintf("%s (every PE stopped logging to its PEs, or to one of the set, past the log limit: rollback set %s)", f, ftlayer.PEList(set))
			st.Rollback.What = s.lostWhat
			p.pending, next = nil, st
			break
		}
		revived := s.startRecovery(set, 1, s.failed)
		s.emptied(team)
		s.ft.Recoveries[len(s.ft.Recoveries)-1].Chain = chain
		s.ft.Recoveries[len(s.ft.Recoveries)-1].Off = off
		st.Set, st.Incs, st.Phase = set, nil, phaseRenew
		for _, r := range revived {
			st.Incs = append(st.Incs, r.Inc)
		}
		st.Recovered, st.RolledBack = slices.Clone(s.recovered), s.rolledBack
		if len(set) > len(team) {
			fmt.Fprintf(s.notices, "charmgo: %s; PEs %s roll back with its PEs (rollback set %s: they stopped logging to one of the set past the log limit) and recover (%s): the others replay their messages\n",
				f, ftlayer.PEList(without(set, team)), ftlayer.PEList(set), s.ft.Protocol)
		} else {
			fmt.Fprintf(s.notices, "charmgo: %s; its replacement recovers alone (%s): the others replay its messages\n", f, s.ft.Protocol)
		}
		next = st
	case st.Phase == phaseRenew && r.Renewed:
		p.renewed[from] = true
		for _, y := range r.Fresh {
			if !slices.Contains(st.Dead, y) {
				st.Dead = append(st.Dead, y) // (its holder hands it its snapshot)
			}
		}
		s.emptied(r.Fresh)
		slices.Sort(st.Dead)
		if len(p.renewed) < procs {
			break
		}
		st.Phase = phaseGo
		next = st
		p.pending = nil
	}
	s.mu.Unlock()
	if next != nil {
		b, err := msgpack.Marshal(next)
		if err != nil {
			p.node.Fail(fmt.Errorf("recovery of process %d: %w", next.Process, err))
			return
		}
		p.job.Broadcast(b)
	}
}

// thawAll: the rollback set caught up (process 0): every process's
// channels may stop logging again.
func (p *Processes) thawAll() {
	b, _ := msgpack.Marshal(&step{Phase: phaseThaw})
	p.job.Broadcast(b)
}

// incarnations pairs the PEs of a recovery step with their new
// incarnations, which this process notes; nil (the run failed) if the
// step names none or not as many of each.
func (p *Processes) incarnations(pes []int32, incs []uint32) []manager.Incarnation {
	if len(incs) != len(pes) || len(pes) == 0 {
		p.node.Fail(fmt.Errorf("a recovery step from process 0 names %d PEs and %d incarnations", len(pes), len(incs)))
		return nil
	}
	s := p.sup
	revived := make([]manager.Incarnation, len(pes))
	s.mu.Lock()
	for i, y := range pes {
		revived[i] = manager.Incarnation{PE: y, Inc: incs[i]}
		s.inc[y] = incs[i]
	}
	s.mu.Unlock()
	return revived
}
