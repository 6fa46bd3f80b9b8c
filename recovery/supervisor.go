// Package recovery owns the launcher's side of fault tolerance: the
// failures injected into a run (--kill, --kill-file), a failed PE's new
// incarnation (recovery alone, under the logging protocols), the start of
// a global rollback (every PE stopped and restarted with only its own
// checkpoint memory), loading a checkpoint to restart from (restart.go:
// on another PE count its elements are redistributed), and the
// statistics of what fault tolerance did. What the PEs do then is agreed by messages between their managers
// (manager/recover.go, manager/rollback.go); nothing here reads a PE's
// memory for a recovery.
//
// Layering: chare → recovery → manager → ftlayer → pe.
package recovery

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

// Stats is what fault tolerance did in a run.
type Stats struct {
	Protocol      string
	Failures      int
	PEsRolledBack int           // summed over failures
	Recovery      time.Duration // summed: from a failure to the program resuming
	// CaughtUp is summed over failures: from a failure until the run is
	// back where it was — the failed PE caught up (scmel, camel), or every
	// PE back at the step that failed (none; failures at a step only).
	CaughtUp time.Duration
	Restored []uint64 // the checkpoint epoch each failure rolled back to (0: the start)
	// Log is the message-logging protocol's statistics, summed over PEs
	// (and over the incarnations a rollback discarded).
	Log ftlayer.Stats
	// Recoveries lists each recovery in order: how many failures it
	// recovered from, how many PEs it rolled back and how long until the
	// program resumed.
	Recoveries []RecoveryStats
	// Teams, under team-based logging: each team's PEs and its PEs'
	// statistics (Log's, by team).
	Teams []TeamStats
	// PELog is each PE's log statistics, by PE: its incarnations'
	// counts summed, the largest of their peaks (Log sums the peaks).
	PELog []ftlayer.Stats
	// ChannelsOffGranted is how many times the PEs were let stop
	// logging on a channel (a log limit; their hooks count the same in
	// Log.ChannelsOff).
	ChannelsOffGranted uint64
	// Expected is, under a log limit, the rollback sets failures would
	// have had, sampled at each step (runs of up to 128 PEs).
	Expected ExpectedRollback
}

// RecoveryStats is one recovery: of a PE or a team alone, or of every PE
// (a global rollback).
type RecoveryStats struct {
	Failures int
	PEs      int // rolled back
	Recovery time.Duration
	// Set is the PEs a recovery alone rolled back: the failed PE, its
	// team, and under a log limit those that stopped logging to one of
	// them, to the closure (nil for a global rollback); Chain, the
	// longest chain of channels not logged that brought a PE in (0: none
	// did).
	Set   []int32
	Chain int
	// Off is, by PE, the channels not logged when the failure struck,
	// as the PEs told the supervisor: what Set was computed from.
	Off [][]int32
	// What the restarted PEs said as each caught up (a recovery alone):
	// the logged messages the survivors sent them again, by the
	// survivors' count (Replayed); the copies they dropped (of an old
	// incarnation's, or twice received: Dropped); those they held for
	// their turn (Held); the most survivors one of them heard from
	// (Survivors); and when each caught up, in the order they did.
	Replayed, Dropped, Held uint64
	Survivors               int
	CaughtUp                []PECaughtUp
	// Orphans (spmd): the messages the survivors had from the failed
	// incarnations that the re-execution made again, whose copies they
	// skipped
	Orphans uint64
	// Again (spmd): the PEs still recovering from an earlier failure
	// when this one struck, which restarted again with it (the earlier
	// recovery's Recovery is the time until then)
	Again []int32
	// Merged (spmd): the PEs that had recovered together with the failed
	// team since the last checkpoint, which restart with it
	Merged []int32
	// Queued: how long the failed PEs stayed down, the failure queued
	// behind a recovery under way, before their own recovery began
	// (counted in Recovery too)
	Queued time.Duration
	// began: when the failure it recovers from struck
	began time.Time
}

// PECaughtUp says that PE PE caught up After the failure.
type PECaughtUp struct {
	PE    int32
	After time.Duration
}

// recoveryCounts is what a restarted PE's protocol says of its recovery.
type recoveryCounts struct {
	Replayed  uint64 `msgpack:"rp,omitempty"`
	Dropped   uint64 `msgpack:"dr,omitempty"`
	Held      uint64 `msgpack:"hd,omitempty"`
	Survivors int    `msgpack:"sv,omitempty"`
	Orphans   uint64 `msgpack:"or,omitempty"`
	// Inc: the incarnation that caught up (one replaced since, which
	// finished its last handler as it went, says nothing of the next)
	Inc uint32 `msgpack:"in,omitempty"`
}

func countsOf(st ftlayer.Stats) recoveryCounts {
	return recoveryCounts{Replayed: st.ReplayedIn, Dropped: st.Dropped, Held: st.Held, Survivors: int(st.ReplaysFrom), Orphans: st.OrphansMade}
}

// TeamStats is one team's share of the logging statistics.
type TeamStats struct {
	PEs []int32
	Log ftlayer.Stats
}

// Supervisor is the launcher's side of fault tolerance for one run: it
// makes the injected failures happen (each once), starts a failed PE's
// new incarnation and tells the others (recovery alone), or stops and
// restarts every PE for a global rollback, which the PEs then agree on by
// messages; and it keeps the statistics. The managers call it through
// their hosts (CheckpointStarting, ...). Safe from any goroutine.
type Supervisor struct {
	mu      sync.Mutex
	kills   []Kill
	fired   []bool
	node    *pe.Node
	start   time.Time
	failed  time.Time
	ft      Stats
	notices io.Writer

	// killProcess, with several processes, makes a kill a process's
	// SIGKILL (KillProcesses); sawStep: this process saw a step begin
	killProcess func(Kill)
	sawStep     bool
	lastStep    int // the last step this process saw begin (-1: none)

	// Local recovery (scmel, camel, team): a failed PE comes back alone,
	// or with its team.
	local      bool
	teams      ftlayer.Teams
	mk         func(p *pe.PE) *manager.Manager
	initial    [][]pe.Envelope // what each PE started the run with
	inc        []uint32        // each PE's incarnation
	window     bool            // a checkpoint is being taken
	recovering []int           // the PEs recovering (one team, or teams together), until each caught up
	waiting    []int           // failures put off until they caught up
	recovered  []int32         // PEs that recovered alone
	// supplied: for each PE recovering, the PEs that sent it everything
	// its recovery needs from them (LocalSupplied); down: a failure
	// queued behind their recovery (queues), its PEs failed since
	// downSince, which recovers once they caught up
	supplied  map[int32][]int32
	down      []int32
	downSince time.Time
	// holds: for each PE that came back empty since the last checkpoint
	// (emptied), the PEs whose checkpoint snapshot it holds again: its own
	// once restored (LocalRestored), the copies their owners sent it
	// again (LocalHolds), which may come after it caught up. A PE with no
	// entry holds all it held at the checkpoint. A PE that restarts again
	// after it restored keeps them (copiesLost).
	holds map[int32][]int32
	// merged (spmd): the sets of several teams that restarted together
	// since the last checkpoint. Their re-execution exchanged messages as
	// teammates do, with phases of its own, so until the next checkpoint
	// they recover as one team: a failure of one restarts all (withMerged)
	merged [][]int32
	// restoredNoted: Restored has the checkpoint the recovering PEs went
	// back to (each of a team's restores it)
	restoredNoted bool
	lostOps       manager.Stats // what failed incarnations did
	// a global rollback has caught up when the step that failed begins
	// again
	awaitStep int
	failedAt  time.Time
	// Global rollback: under way from a failure until the program
	// resumes; the PEs that failed (the first is the failure, the others
	// failed at the same moment); whether every PE was stopped already
	// (later failures wait for the program to resume).
	rolling    bool
	resetDone  bool
	rolledBack bool // a global rollback happened
	dead       []int
	deadKills  []Kill
	// Where a rollback finds the snapshots no surviving PE holds: the
	// checkpoint directory, and the checkpoint the run was restarted from.
	restartDir    string
	restartEpoch  uint64
	lastCommitted uint64 // the last checkpoint PE 0 saw committed
	rangeChecked  bool   // StepRange checked the kills
	// lostWhat describes a lost process being rolled back for (several
	// processes: Processes).
	lostWhat string
	// onRestored, onSupplied and onRecovered tell process 0 that a PE of
	// this one restored a checkpoint, holds what its recovery needs from
	// the others, and caught up.
	onRestored  func(me int, inc uint32, epoch uint64)
	onHolds     func(me int, inc uint32, owner int32)
	onSupplied  func(me int, inc uint32, by []int32)
	onRecovered func(me int, c recoveryCounts)
	// onDrained, on the steward of several processes: the recovery a lost
	// process was queued behind caught up (Processes.drainQueued);
	// onResumed, there too: the program resumed after a global rollback
	// (Processes.resumed)
	onDrained func()
	onResumed func()
	// elsewhere hands RollingBack (epoch, from) or Restored (resumed) to
	// the process that steers the job's recoveries, when that is not this
	// one (Processes.forward), and reports whether it did
	elsewhere func(epoch uint64, from string, resumed bool) bool

	// gate: the channels PEs stopped logging on (a log limit)
	gate     channelGate
	logLimit bool
	// everyPE: a log limit's rollback set took every PE, and a global
	// rollback recovers it (its figures, for RollingBack)
	everyPE *RecoveryStats
	// sampleOff: the PEs' channels are not all known here (several
	// processes): no Expected
	sampleOff bool
	// onCaughtUp, on process 0 of several under a log limit: a recovery
	// caught up (every process's gate thaws)
	onCaughtUp func()

	// anySet: PEs failing at once recover together, each alone (the
	// pessimist protocol), with events the PEs committed to events
	anySet bool
	events ftlayer.EventLog
	// jointTeams: teams failing at once recover together (spmd)
	jointTeams bool
	// mayTeam: the protocol may log by teams (camel): a process lost
	// whole, several PEs at once, is then one team, recovered alone
	mayTeam bool
	// buddyStride pairs each PE with the holder of its checkpoint's
	// second copy (ftlayer.NewBuddies): PEs failing at once with the
	// holders of their copies cannot recover alone; chosenTeams: the last
	// checkpoint put the PEs in teams (--teams auto), and the managers
	// pair the copies by them since (ftlayer.TeamBuddies: buddies)
	buddyStride int
	chosenTeams bool
}

// Config is what a Supervisor needs to know of its run.
type Config struct {
	PEs      int
	Protocol ftlayer.ProtocolSpec
	// Teams groups the PEs under a protocol with Teams: a failure rolls
	// back the failed PE's team.
	Teams ftlayer.Teams
	// LogLimit: the PEs' logs are bounded (MCML): the supervisor samples
	// the rollback sets failures would have at each step.
	LogLimit bool
	Kills    []Kill
	// Notices receives one line per failure and recovery (nil: none).
	Notices io.Writer
	// RestartDir and RestartEpoch name the checkpoint the run was
	// restarted from (empty: none): a rollback's last resort.
	RestartDir   string
	RestartEpoch uint64
	// NewManager makes PE p's manager (at the start, for a new
	// incarnation, for a rollback).
	NewManager func(p *pe.PE) *manager.Manager
}

// New makes the supervisor of a run that has not started.
func New(cfg Config) *Supervisor {
	s := &Supervisor{kills: cfg.Kills, fired: make([]bool, len(cfg.Kills)), start: time.Now(), notices: cfg.Notices, awaitStep: -1, lastStep: -1,
		restartDir: cfg.RestartDir, restartEpoch: cfg.RestartEpoch, mk: cfg.NewManager, teams: cfg.Teams, logLimit: cfg.LogLimit}
	s.ft.Protocol = cfg.Protocol.Name
	s.local = cfg.Protocol.RecoversAlone && cfg.PEs > 1
	s.anySet = cfg.Protocol.AnySet
	s.jointTeams = cfg.Protocol.JointTeams
	s.mayTeam = cfg.Protocol.WithTeams
	if s.anySet {
		s.events = ftlayer.NewMemEventLog(cfg.PEs)
	}
	if s.notices == nil {
		s.notices = io.Discard
	}
	return s
}

// Events is the event logger of a protocol that needs one (nil for the
// others): it outlives every PE's failure.
func (s *Supervisor) Events() ftlayer.EventLog { return s.events }

// buddies pairs each of n PEs with the holder of its checkpoint's second
// copy, as the managers do (manager.Manager.Buddies; s.mu held): so that
// each copy lives in another team once a checkpoint chose teams, stride
// apart before.
func (s *Supervisor) buddies(n int) ftlayer.Buddies {
	if s.chosenTeams && s.teams.On() {
		if b, err := ftlayer.TeamBuddies(s.teams); err == nil {
			return b
		}
	}
	return ftlayer.NewBuddies(n, s.buddyStride)
}

// SetBuddyStride says how the PEs' checkpoint copies are paired
// (ftlayer.NewBuddies; before Begin).
func (s *Supervisor) SetBuddyStride(stride int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buddyStride = stride
}

// SetTeams groups the PEs under a protocol with teams (before Begin).
func (s *Supervisor) SetTeams(t ftlayer.Teams) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.teams, s.ft.Teams = t, nil
	if t.On() {
		if s.ft.Protocol == "camel" {
			s.ft.Protocol += "+teams"
		}
		s.ft.Teams = make([]TeamStats, t.K())
		for k := range s.ft.Teams {
			s.ft.Teams[k].PEs = t.Team(k)
		}
	}
}

// Begin starts the run on node, whose PEs start with initial:
// time-based failures are scheduled against the run's start.
func (s *Supervisor) Begin(node *pe.Node, initial [][]pe.Envelope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.node, s.initial = node, initial
	s.inc = make([]uint32, node.NumPEs())
	s.gate.begin(node.NumPEs())
	for i, k := range s.kills {
		if !k.timed() || s.fired[i] {
			continue
		}
		i, k := i, k
		wait := time.Until(s.start.Add(k.After))
		go func() {
			select {
			case <-time.After(wait):
				s.fire(node, []int{i})
			case <-node.Done():
			}
		}()
	}
}

// KillProcesses makes the injected failures, in a job of several
// processes, SIGKILLs of the processes holding the PEs named (kill), as a
// crash would end them: the job replaces them and recovers as from any
// loss. They fire where the program reports its steps (AtStep), or at
// their time. A replacement process injects none: its kills were its
// first incarnation's.
//
// A kill at a time is this process's only if it holds the PE (mine): the
// process that does kills itself then, the others leave it to it.
func (s *Supervisor) KillProcesses(kill func(Kill), mine func(Kill) bool, replacement bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killProcess = kill
	for i, k := range s.kills {
		if replacement || (k.timed() && !mine(k)) {
			s.fired[i] = true
		}
	}
}

// AtStep: the program begins step; failures injected at it happen now.
func (s *Supervisor) AtStep(step int) {
	s.mu.Lock()
	s.sawStep, s.lastStep = true, step
	if s.logLimit && !s.sampleOff && len(s.recovering) == 0 && !s.rolling {
		s.gate.sample(s.teams, &s.ft.Expected)
	}
	if s.awaitStep == step && !s.failedAt.IsZero() {
		s.ft.CaughtUp += time.Since(s.failedAt)
		s.awaitStep, s.failedAt = -1, time.Time{}
	}
	s.mu.Unlock()
	s.fireWhere(func(k Kill) bool { return k.Checkpoint == 0 && k.Step == step })
}

// AtEvent: a deterministic run is about to run event number e (1 is the
// first); failures injected before it happen now.
func (s *Supervisor) AtEvent(e int) {
	s.fireWhere(func(k Kill) bool { return k.Event == e })
}

// AtHandOver: in a deterministic run, PE p has just handed its count-th
// message to another PE; failures injected then happen now.
func (s *Supervisor) AtHandOver(p int, count uint64) {
	s.fireWhere(func(k Kill) bool { return k.HandOver == count && k.PE == p })
}

func (s *Supervisor) fireWhere(due func(Kill) bool) {
	s.mu.Lock()
	node := s.node
	var now []int
	for i, k := range s.kills {
		if due(k) && !s.fired[i] {
			now = append(now, i)
		}
	}
	s.mu.Unlock()
	if len(now) > 0 {
		s.fire(node, now)
	}
}

// fire makes the kills due at one moment happen. Under scmel and camel
// a PE fails alone and recovers by replay while the others go on — unless
// snapshots are being taken (then, as under none, every PE rolls back to
// the last committed checkpoint: the protocols recover one PE from a
// complete checkpoint). A kill "during checkpoint E" strikes as E begins,
// once the run is quiescent and before any snapshot: the coordinator then
// puts the checkpoint off until the PE caught up, and only that PE rolls
// back. One PE recovers at a time: a failure due while one does (or while
// every PE rolls back) is put off until it caught up (the program
// resumed). Put off, it strikes as soon as the PEs recovering have from
// its PEs everything their recovery needs (queues): its PEs stay down
// until they caught up, as a lost process's do.
func (s *Supervisor) fire(node *pe.Node, due []int) {
	s.mu.Lock()
	if s.node != node {
		s.mu.Unlock()
		return
	}
	var now []int
	for _, i := range due {
		if !s.fired[i] && !slices.Contains(s.waiting, i) {
			now = append(now, i)
		}
	}
	if len(now) == 0 {
		s.mu.Unlock()
		return
	}
	if kill := s.killProcess; kill != nil {
		for _, i := range now {
			s.fired[i] = true
		}
		s.mu.Unlock()
		for _, i := range now {
			kill(s.kills[i])
		}
		return
	}
	if s.local && !s.window {
		if team := s.teams.Members(int32(s.kills[now[0]].PE)); s.rolling || len(s.recovering) > 0 && !s.joinsRecovering(team) {
			s.waiting = append(s.waiting, now...)
			s.queueFirstWaiting(node)
			s.mu.Unlock()
			return
		}
		if s.recoverAlone(node, now) {
			return
		}
	}
	if s.rolling && s.resetDone {
		s.waiting = append(s.waiting, now...)
		s.mu.Unlock()
		return
	}
	begins := !s.rolling
	for _, i := range now {
		k := s.kills[i]
		if !node.FailPE(k.PE) && node.Stopped() {
			break // the run is ending: the kill did not happen
		}
		s.fired[i] = true
		s.ft.Failures++
		if !slices.Contains(s.dead, k.PE) {
			s.dead = append(s.dead, k.PE)
		}
		s.deadKills = append(s.deadKills, k)
		if len(s.deadKills) == 1 {
			s.rolling, s.resetDone = true, false
			s.failed = time.Now()
			if k.Step >= 0 && k.Checkpoint == 0 {
				s.awaitStep, s.failedAt = k.Step, s.failed
			}
		} else {
			// the same moment: one rollback recovers them all
			fmt.Fprintf(s.notices, "charmgo: %v, at the same moment as the failure before\n", &PEFailure{PE: k.PE, Kill: k})
		}
	}
	launch := begins && s.rolling
	s.mu.Unlock()
	if launch {
		node.Later(func() { s.rollBack(node) })
	}
}

// recoverAlone makes the first of the kills due now a failure its PE,
// or its team, and the PEs a log limit adds (the rollback set) recover
// from while the others go on, and reports true, with s.mu released.
// When the set is every PE it reports false, s.mu still held: the global
// rollback every protocol shares recovers it.
func (s *Supervisor) recoverAlone(node *pe.Node, now []int) bool {
	// the first kill's team fails; kills at this moment of the same team
	// are part of that failure, the others wait for it
	k := s.kills[now[0]]
	team := slices.Clone(s.teams.Members(int32(k.PE))) // (appended to below)
	if s.anySet {
		// every PE failing now: they recover together
		for _, i := range now[1:] {
			if p := int32(s.kills[i].PE); !slices.Contains(team, p) {
				team = append(team, p)
			}
		}
	}
	joint := false
	if s.jointTeams {
		// every team failing now: they recover together
		for _, i := range now[1:] {
			for _, p := range s.teams.Members(int32(s.kills[i].PE)) {
				if !slices.Contains(team, p) {
					team, joint = append(team, p), true
				}
			}
		}
	}
	failing := slices.Clone(team) // (the PEs failing now)
	var merged []int32
	if s.jointTeams {
		// with the teams that recovered together with theirs since the
		// last checkpoint (withMerged)
		for _, p := range s.withMerged(team) {
			if !slices.Contains(team, p) {
				team, joint, merged = append(team, p), true, append(merged, p)
			}
		}
	}
	if s.anySet || s.jointTeams {
		// and the PEs recovering still (joinsRecovering): they restart
		// again with them (startRecovery counts them in Again), under spmd
		// with their whole teams (recoveringTeams)
		for _, p := range s.recoveringTeams() {
			if !slices.Contains(team, p) {
				team, joint = append(team, p), s.jointTeams
			}
		}
	}
	slices.Sort(team)
	if (s.anySet || joint) && len(team) > 1 {
		// a PE and the holder of its checkpoint's copy, at once: its
		// snapshot is gone with both, and every PE rolls back (to the
		// checkpoint directory's copy, if there is one). Each PE of the
		// set needs its copy held outside it, or by a PE that keeps its
		// memory and holds it (copiesLost).
		if lost := s.copiesLost(node.NumPEs(), team, s.fresh(team, failing)); lost != "" {
			fmt.Fprintf(s.notices, "charmgo: %v; %s: every PE rolls back\n", &PEFailure{PE: k.PE, Kill: k}, lost)
			return false
		}
	}
	// the PEs that come back empty: those failing now, and those
	// recovering still without their snapshot back (the others keep their
	// memory, as across processes)
	empty := s.fresh(team, failing)
	set, chain, off := s.gate.freeze(team, s.teams)
	if len(set) == node.NumPEs() && len(set) > len(team) {
		s.everyPE = &RecoveryStats{Set: set, Chain: chain, Off: off}
		fmt.Fprintf(s.notices, "charmgo: %v; every PE rolls back with it (rollback set %s: they stopped logging to it, or to one of the set, past the log limit)\n",
			&PEFailure{PE: k.PE, Kill: k}, ftlayer.PEList(set))
		return false
	}
	var also []Kill
	for _, i := range now[1:] {
		if ki := s.kills[i]; s.teams.Same(int32(ki.PE), int32(k.PE)) || slices.Contains(team, int32(ki.PE)) {
			s.fired[i] = true
			also = append(also, ki)
		} else {
			s.waiting = append(s.waiting, i)
		}
	}
	for _, p := range set {
		if !slices.Contains(s.down, p) && !node.FailPE(int(p)) {
			s.mu.Unlock()
			return true // the run is ending
		}
	}
	s.fired[now[0]] = true
	began := time.Now()
	queued := slices.Contains(s.down, int32(k.PE)) // (down is the first failure waiting's team)
	if queued {
		began = s.downSince // (the failure struck then)
	}
	if s.failed.IsZero() {
		s.failed = began
	}
	var again []int32 // (the teams recovering still, whole: their PEs that caught up restart too)
	if s.jointTeams {
		for _, p := range s.recoveringTeams() {
			if slices.Contains(set, p) && !slices.Contains(failing, p) {
				again = append(again, p)
			}
		}
	}
	revived := s.startRecovery(set, 1+len(also), began)
	s.emptied(empty)
	rc := &s.ft.Recoveries[len(s.ft.Recoveries)-1]
	rc.Chain, rc.Off, rc.Merged = chain, off, merged
	if again != nil {
		rc.Again = again
	}
	if queued {
		rc.Queued, s.down = time.Since(s.downSince), nil
	}
	recovered, rolledBack := slices.Clone(s.recovered), s.rolledBack
	f := &PEFailure{PE: k.PE, Kill: k, Also: also}
	switch {
	case len(set) > len(team):
		fmt.Fprintf(s.notices, "charmgo: %v; PEs %s roll back with it (rollback set %s: they stopped logging to it, or to one of them, past the log limit) and recover (%s): the others replay their messages\n",
			f, ftlayer.PEList(without(set, team)), ftlayer.PEList(set), s.ft.Protocol)
	case len(team) == 1 && len(rc.Again) > 0:
		fmt.Fprintf(s.notices, "charmgo: %v; it was recovering still, and recovers alone again (%s): the others replay its messages\n", f, s.ft.Protocol)
	case len(team) == 1 && queued:
		fmt.Fprintf(s.notices, "charmgo: %v; down since, it recovers alone now (%s): the others replay its messages\n", f, s.ft.Protocol)
	case len(team) == 1:
		fmt.Fprintf(s.notices, "charmgo: %v; it recovers alone (%s): the others replay its messages\n", f, s.ft.Protocol)
	case len(rc.Again) > 0:
		fmt.Fprintf(s.notices, "charmgo: %v; with PEs %s, which were recovering still and restart again, PEs %s recover together (%s): the others replay their messages\n", f, ftlayer.PEList(rc.Again), ftlayer.PEList(team), s.ft.Protocol)
	case len(merged) > 0:
		fmt.Fprintf(s.notices, "charmgo: %v; with PEs %s, which recovered together with its team since the last checkpoint, PEs %s roll back and recover together (%s): the other teams replay their messages\n", f, ftlayer.PEList(merged), ftlayer.PEList(team), s.ft.Protocol)
	case s.anySet:
		fmt.Fprintf(s.notices, "charmgo: %v; PEs %s recover together, each alone (%s): the others replay their messages\n", f, ftlayer.PEList(team), s.ft.Protocol)
	case joint:
		fmt.Fprintf(s.notices, "charmgo: %v; its team and the others failing with it, PEs %s, roll back and recover together (%s): the other teams replay their messages\n", f, ftlayer.PEList(team), s.ft.Protocol)
	case queued:
		fmt.Fprintf(s.notices, "charmgo: %v; down since, its team, PEs %s, rolls back and recovers now (%s): the other teams replay its messages\n", f, ftlayer.PEList(team), s.ft.Protocol)
	default:
		fmt.Fprintf(s.notices, "charmgo: %v; its team, PEs %s, rolls back and recovers (%s): the other teams replay its messages\n", f, ftlayer.PEList(team), s.ft.Protocol)
	}
	s.mu.Unlock()
	again = slices.Clone(rc.Again)
	node.Later(func() { s.replace(node, revived, empty, again, recovered, rolledBack) })
	return true
}

// rollBack takes every PE back to the last checkpoint: the node stops and
// restarts every PE, each with a new manager that keeps only its own
// checkpoint memory (none for those that failed), and the managers agree
// by messages on where to go back to (manager.RollbackMsg).
func (s *Supervisor) rollBack(node *pe.Node) {
	s.mu.Lock()
	failed := make([]int32, len(s.dead))
	for i, p := range s.dead {
		failed[i] = int32(p)
	}
	start := &manager.RollbackMsg{Failed: failed, Committed: s.lastCommitted, Restart: s.restartEpoch, RestartDir: s.restartDir}
	s.mu.Unlock()
	s.rollBackWith(node, start, nil)
}

// rollBackWith rolls node's PEs back, starting them with start; the PEs
// in lost (of a lost process: their stand-ins in its replacement) keep no
// memory.
func (s *Supervisor) rollBackWith(node *pe.Node, start *manager.RollbackMsg, lost map[int]bool) {
	s.mu.Lock()
	s.resetDone, s.rolledBack = true, true
	s.inc = make([]uint32, node.NumPEs()) // the protocol starts afresh
	s.gate.reset()
	if s.events != nil {
		s.events.Reset() // every PE's deliveries start afresh
	}
	s.window, s.recovering, s.recovered, s.supplied, s.down, s.holds, s.merged = false, nil, nil, nil, nil, nil, nil
	s.mu.Unlock()
	node.RollBack(func(p *pe.PE, prev pe.Handler, failed bool) pe.Handler {
		failed = failed || lost[p.ID()]
		old := prev.(*manager.Manager)
		// the summary counts what the lost incarnations logged and did
		s.AddLog(p.ID(), old.FT().Stats())
		s.mu.Lock()
		s.lostOps.Add(old.Stats)
		s.mu.Unlock()
		var memory *ftlayer.Checkpointer
		if !failed {
			memory = old.Memory()
		}
		m := s.mk(p)
		m.RollBack(memory, s.initial[p.ID()])
		return m
	}, func(p *pe.PE) []pe.Envelope {
		return []pe.Envelope{{Type: manager.RollbackType(), Kind: pe.KindSystem, Payload: start}}
	})
}

// startRecovery counts failures that fail pes (a PE, or a team), struck
// at began, and gives each its next incarnation (s.mu held). Under spmd
// pes may include PEs recovering still, which restart again with them
// (joinsRecovering).
func (s *Supervisor) startRecovery(pes []int32, failures int, began time.Time) []manager.Incarnation {
	var again []int32
	for _, p := range pes {
		if slices.Contains(s.recovering, int(p)) {
			again = append(again, p)
		} else {
			s.recovering = append(s.recovering, int(p))
		}
		delete(s.supplied, p)
	}
	for _, p := range again {
		if rc := s.recoveryOf(p); rc != nil {
			rc.Recovery = time.Since(rc.began) // (until it was taken into this one)
		}
	}
	s.restoredNoted = false
	revived := make([]manager.Incarnation, len(pes))
	for i, p := range pes {
		s.inc[p]++
		revived[i] = manager.Incarnation{PE: p, Inc: s.inc[p]}
	}
	s.ft.Failures += failures
	s.ft.PEsRolledBack += len(pes)
	if s.jointTeams && !s.oneTeam(pes) {
		s.merge(pes)
	}
	s.ft.Recoveries = append(s.ft.Recoveries, RecoveryStats{Failures: failures, PEs: len(pes), Set: slices.Clone(pes), Again: again, began: began})
	return revived
}

// joinsRecovering reports whether pes, failing while other PEs recover,
// recover together with them (s.mu held): under spmd (pes whole teams),
// whose teams failing at once recover together, and pessimist, whose PEs
// failing at once do, those recovering restart again with pes, as one
// set, provided every PE of the set finds its snapshot (copiesLost: those
// recovering that restored theirs keep their memory; the others come
// back empty and take it from its holder). Otherwise pes wait for them
// (one process) or every PE rolls back (a lost process).
func (s *Supervisor) joinsRecovering(pes []int32) bool {
	if len(pes) == 0 || len(s.recovering) == 0 || s.rolling || !s.anySet && !(s.jointTeams && s.wholeTeams(pes)) {
		return false
	}
	set := s.withMerged(pes)
	for _, p := range s.recoveringTeams() {
		if !slices.Contains(set, p) {
			set = append(set, p)
		}
	}
	return s.copiesLost(len(s.inc), set, s.fresh(set, pes)) == ""
}

// recoveringTeams lists the PEs recovering still, and under spmd the rest
// of their teams (s.mu held): a team restarts whole, and a PE of it that
// caught up already restarts again with the others, keeping its memory.
func (s *Supervisor) recoveringTeams() []int32 {
	var out []int32
	for _, r := range s.recovering {
		pes := []int32{int32(r)}
		if s.jointTeams {
			pes = s.teams.Members(int32(r))
		}
		for _, p := range pes {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// fresh lists the PEs of set that come back empty when it restarts (s.mu
// held): those failing now (failing), and those recovering still that
// have not restored their snapshot; the others (recovering that restored
// it, or survivors restarting with a team they recovered with since the
// last checkpoint) keep their memory.
func (s *Supervisor) fresh(set, failing []int32) []int32 {
	var out []int32
	for _, p := range set {
		if slices.Contains(failing, p) || slices.Contains(s.recovering, int(p)) && !s.keepsMemory(p) {
			out = append(out, p)
		}
	}
	return out
}

// withMerged is pes with the PEs of every set merged with one of them
// since the last checkpoint (spmd: teams that restarted together), in
// increasing order (s.mu held).
func (s *Supervisor) withMerged(pes []int32) []int32 {
	out := slices.Clone(pes)
	for _, m := range s.merged {
		if slices.ContainsFunc(m, func(p int32) bool { return slices.Contains(pes, p) }) {
			for _, p := range m {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// merge records that the teams of pes restarted together (s.mu held):
// the merged sets it meets become one with it.
func (s *Supervisor) merge(pes []int32) {
	union := s.withMerged(pes)
	s.merged = slices.DeleteFunc(s.merged, func(m []int32) bool {
		return slices.ContainsFunc(m, func(p int32) bool { return slices.Contains(pes, p) })
	})
	s.merged = append(s.merged, union)
}

// queues reports whether pes (a PE, or a team), failing while other PEs
// recover, stay down until those caught up and recover then, alone (s.mu
// held). It holds when their recovery needs nothing more of pes: every
// PE recovering has from each of pes everything it needs
// (LocalSupplied: determinants and replay), and the holder of each of
// pes' checkpoint copies, if it recovers, holds it again (LocalHolds: it
// came back empty, and the copy's owner sends it again). None of pes may be
// recovering, nor another failure queued already (its recovery would
// need pes); and no log limit (a rollback set is computed as a failure
// strikes, from channels the recovery under way changes).
func (s *Supervisor) queues(pes []int32) bool {
	if len(pes) == 0 || len(s.recovering) == 0 || s.rolling || s.logLimit || len(s.down) > 0 {
		return false
	}
	b := s.buddies(len(s.inc))
	for _, p := range pes {
		if slices.Contains(s.recovering, int(p)) {
			return false
		}
		if hs, ok := s.holds[b.Of(p)]; ok && !slices.Contains(hs, p) {
			return false // its copy is not back yet where it lives
		}
	}
	for _, r := range s.recovering {
		for _, p := range pes {
			if !slices.Contains(s.supplied[int32(r)], p) {
				return false
			}
		}
	}
	return true
}

// queueFirstWaiting makes the first failure put off for a recovery strike
// now, queued (goDown), if its team queues (s.mu held; one process). Only
// the first: the kills waiting fire in order once the recovery caught up
// (caughtUp), and the one down must come first.
func (s *Supervisor) queueFirstWaiting(node *pe.Node) {
	if len(s.waiting) == 0 || len(s.down) > 0 {
		return
	}
	first := s.waiting[0]
	if team := s.teams.Members(int32(s.kills[first].PE)); s.queues(team) {
		s.goDown(node, team, first)
	}
}

// goDown fails pes now, their failure (kill first) queued behind the
// recovery under way (queues; s.mu held): they recover once it caught up
// (caughtUp fires the kills waiting then).
func (s *Supervisor) goDown(node *pe.Node, pes []int32, first int) {
	for _, p := range pes {
		if !node.FailPE(int(p)) {
			return // the run is ending
		}
	}
	s.down, s.downSince = slices.Clone(pes), time.Now()
	who := "it stays down and recovers"
	if len(pes) > 1 {
		who = fmt.Sprintf("its team, PEs %s, stays down and recovers", ftlayer.PEList(pes))
	}
	fmt.Fprintf(s.notices, "charmgo: %v; %s: %s once they caught up (%s)\n",
		&PEFailure{PE: s.kills[first].PE, Kill: s.kills[first]}, s.holdWhatTheyNeed(), who, s.ft.Protocol)
}

// holdWhatTheyNeed says that the PEs recovering have what their recovery
// needs from a PE failing now (s.mu held).
func (s *Supervisor) holdWhatTheyNeed() string {
	if len(s.recovering) == 1 {
		return fmt.Sprintf("PE %d, recovering, holds everything it needs from it", s.recovering[0])
	}
	pes := make([]int32, len(s.recovering))
	for i, r := range s.recovering {
		pes[i] = int32(r)
	}
	slices.Sort(pes)
	return fmt.Sprintf("PEs %s, recovering, hold everything they need from it", ftlayer.PEList(pes))
}

// without is set less the PEs of less (both in increasing order).
func without(set, less []int32) []int32 {
	var out []int32
	for _, p := range set {
		if !slices.Contains(less, p) {
			out = append(out, p)
		}
	}
	return out
}

// replace starts the new incarnations of the PEs a failure rolls back (a
// PE, or a team, and those a log limit adds) and tells the others. Those
// that failed come back empty; the others keep their checkpoint memory
// and what their hooks keep (Hook.Keep), and restore themselves.
func (s *Supervisor) replace(node *pe.Node, revived []manager.Incarnation, failed, again []int32, recovered []int32, rolledBack bool) {
	set := make([]int32, len(revived))
	for i, r := range revived {
		set[i] = r.PE
	}
	rb := ftlayer.Rollback{Set: set, Failed: failed}
	// Those that keep their memory restore their own snapshots once every
	// PE of the set runs again: a restored one sends its fellows their
	// determinants, which must not reach an incarnation being replaced.
	own := map[int]pe.Envelope{}
	defer func() {
		for _, r := range revived {
			if env, ok := own[int(r.PE)]; ok {
				node.InjectControl(int(r.PE), env)
			}
		}
	}()
	for _, r := range revived {
		y := int(r.PE)
		s.mu.Lock()
		initial := s.initial[y]
		s.mu.Unlock()
		old := node.Renew(y, func(p *pe.PE, prev pe.Handler) pe.Handler {
			m := s.mk(p)
			if slices.Contains(failed, r.PE) {
				m.Revive(r.Inc, initial, rolledBack, revived, rb)
			} else {
				own[y] = m.ReviveKeeping(prev.(*manager.Manager), r.Inc, initial, rolledBack, revived, rb)
			}
			return m
		})
		if old == nil {
			return
		}
		// the summary counts what the lost incarnation logged (nothing of
		// it is read for the recovery) and did
		lost := old.(*manager.Manager)
		s.AddLog(y, lost.FT().Stats())
		s.mu.Lock()
		s.lostOps.Add(lost.Stats)
		s.mu.Unlock()
	}
	for _, r := range revived {
		for p := 0; p < node.NumPEs(); p++ {
			if p != int(r.PE) {
				node.InjectControl(p, pe.Envelope{Type: manager.PEFailedType(), Kind: pe.KindSystem,
					Payload: &manager.PEFailedMsg{PE: r.PE, Inc: r.Inc, Recovered: recovered, Set: set, Keeps: !slices.Contains(failed, r.PE), Again: slices.Contains(again, r.PE)}})
			}
		}
	}
}

// CheckpointStarting: PE 0 is about to take checkpoint epoch; false
// puts it off (a PE is recovering alone).
func (s *Supervisor) CheckpointStarting(epoch uint64) bool {
	// before the snapshots: under scmel and camel, a PE failing now
	// recovers alone, and the checkpoint waits for it
	s.fireWhere(func(k Kill) bool { return k.Checkpoint == epoch })
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recovering) > 0 || len(s.down) > 0 {
		return false
	}
	s.window = true
	return true
}

// CheckpointCommitted: PE 0 committed checkpoint epoch, which put the
// PEs in teams if not nil (--teams auto): from now on a failure rolls
// back a team of those.
func (s *Supervisor) CheckpointCommitted(epoch uint64, teams *ftlayer.Teams) {
	if teams != nil {
		s.SetTeams(*teams)
		fmt.Fprintf(s.notices, "charmgo: checkpoint %d puts the PEs in teams %v (chosen from the traffic measured before it)\n", epoch, *teams)
	}
	s.mu.Lock()
	if teams != nil {
		s.chosenTeams = true
	}
	s.window, s.merged, s.holds = false, nil, nil // (a failure rolls back to this checkpoint from now on, every copy of it held)
	s.lastCommitted = max(s.lastCommitted, epoch)
	s.mu.Unlock()
}

// Gate is where the PEs' hooks ask to stop logging a channel under a
// log limit (ftlayer.LogLimit.Gate).
func (s *Supervisor) Gate() ftlayer.ChannelGate { return &s.gate }

// ChannelsOff lists, for each PE, the channels it does not log now (a log
// limit), as the PEs told the supervisor.
func (s *Supervisor) ChannelsOff() [][]int32 { return s.gate.offChannels() }

// Teams are the teams in effect.
func (s *Supervisor) Teams() ftlayer.Teams {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.teams
}

// LocalRestored: PE me, incarnation inc, recovering alone, restored
// checkpoint epoch.
func (s *Supervisor) LocalRestored(me int, inc uint32, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onRestored != nil {
		defer s.onRestored(me, inc, epoch)
	}
	s.restoredAt(epoch)
	s.holdsCopy(me, inc, int32(me))
	fmt.Fprintf(s.notices, "charmgo: PE %d restored checkpoint %d and replays\n", me, epoch)
}

// LocalHolds: PE me, incarnation inc, holds PE owner's checkpoint copy
// again (its owner sent it).
func (s *Supervisor) LocalHolds(me int, inc uint32, owner int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onHolds != nil {
		defer s.onHolds(me, inc, owner)
	}
	s.holdsCopy(me, inc, owner)
}

// holdsCopy notes that PE me, incarnation inc, recovering, holds PE
// owner's snapshot (s.mu held).
func (s *Supervisor) holdsCopy(me int, inc uint32, owner int32) {
	hs, ok := s.holds[int32(me)]
	if !ok || me >= len(s.inc) || inc < s.inc[me] {
		return // it never came back empty, or an incarnation replaced since
	}
	if !slices.Contains(hs, owner) {
		s.holds[int32(me)] = append(hs, owner)
	}
}

// emptied notes that the PEs of fresh come back empty (s.mu held): until
// the next checkpoint they hold only what they are told they hold again
// (holds).
func (s *Supervisor) emptied(fresh []int32) {
	if s.holds == nil {
		s.holds = map[int32][]int32{}
	}
	for _, p := range fresh {
		s.holds[p] = []int32{}
	}
}

// keepsMemory reports whether PE z, restarting again while it recovers,
// keeps its checkpoint memory: it restored its snapshot (s.mu held).
func (s *Supervisor) keepsMemory(z int32) bool {
	return slices.Contains(s.recovering, int(z)) && slices.Contains(s.holds[z], z)
}

// restoredAt notes the checkpoint a failure rolled back to, once for a
// team's PEs.
func (s *Supervisor) restoredAt(epoch uint64) {
	if !s.restoredNoted {
		s.restoredNoted = true
		s.ft.Restored = append(s.ft.Restored, epoch)
	}
}

// LocalSupplied: the PEs by sent PE me, incarnation inc, recovering,
// everything its recovery needs from them (ftlayer.Supplied).
func (s *Supervisor) LocalSupplied(me int, inc uint32, by []int32) { s.suppliedBy(me, inc, by, true) }

// suppliedBy notes LocalSupplied's news, here (its process tells the
// steward, if that is another) or from another process.
func (s *Supervisor) suppliedBy(me int, inc uint32, by []int32, here bool) {
	s.mu.Lock()
	tell := s.onSupplied
	if me < 0 || me >= len(s.inc) || inc < s.inc[me] {
		s.mu.Unlock()
		return // an incarnation replaced since
	}
	if slices.Contains(s.recovering, me) {
		if s.supplied == nil {
			s.supplied = map[int32][]int32{}
		}
		s.supplied[int32(me)] = append(s.supplied[int32(me)], by...)
	}
	if s.node != nil && s.local && !s.window {
		s.queueFirstWaiting(s.node)
	}
	s.mu.Unlock()
	if here && tell != nil {
		tell(me, inc, by)
	}
}

// LocalRecovered: PE me caught up with the others; st is its protocol's
// statistics (of its incarnation since it restarted).
func (s *Supervisor) LocalRecovered(me int, inc uint32, st ftlayer.Stats) {
	c := countsOf(st)
	c.Inc = inc
	s.caughtUp(me, true, c)
}

// caughtUp: PE me caught up, here (here: its process says so and tells
// process 0, if that is another) or in another process, its protocol
// saying c of its recovery.
func (s *Supervisor) caughtUp(me int, here bool, c recoveryCounts) {
	s.mu.Lock()
	if me >= 0 && me < len(s.inc) && c.Inc < s.inc[me] {
		s.mu.Unlock()
		return // an incarnation replaced since
	}
	tell := s.onRecovered
	if here && tell != nil {
		defer tell(me, c)
	}
	// The line comes from where the job's recoveries are decided (process
	// 0, or the one process), once it knows: a replacement's own line
	// could come before process 0 had the report, and a loss then was
	// taken for one during this recovery.
	say := !here || tell == nil
	if !slices.Contains(s.recovered, int32(me)) {
		s.recovered = append(s.recovered, int32(me))
	}
	delete(s.supplied, int32(me))
	if i := slices.Index(s.recovering, me); i >= 0 {
		s.recovering = slices.Delete(s.recovering, i, i+1)
		if rc := s.recoveryOf(int32(me)); rc != nil && !s.failed.IsZero() {
			rc.Replayed += c.Replayed
			rc.Dropped += c.Dropped
			rc.Held += c.Held
			rc.Survivors = max(rc.Survivors, c.Survivors)
			rc.Orphans += c.Orphans
			rc.CaughtUp = append(rc.CaughtUp, PECaughtUp{PE: int32(me), After: time.Since(rc.began)})
			if !slices.ContainsFunc(rc.Set, func(p int32) bool { return slices.Contains(s.recovering, int(p)) }) {
				rc.Recovery = time.Since(rc.began)
			}
		}
	}
	if len(s.recovering) > 0 {
		// its team is still recovering
		if say {
			fmt.Fprintf(s.notices, "charmgo: PE %d caught up\n", me)
		}
		s.mu.Unlock()
		return
	}
	s.gate.thaw()
	if s.onCaughtUp != nil {
		defer s.onCaughtUp()
	}
	if s.onDrained != nil && len(s.down) > 0 {
		defer s.onDrained()
	}
	s.ft.Recovery += time.Since(s.failed)
	s.ft.CaughtUp += time.Since(s.failed)
	s.recovered1(time.Since(s.failed))
	s.failed = time.Time{}
	waiting, node := s.waiting, s.node
	s.waiting = nil
	if say {
		fmt.Fprintf(s.notices, "charmgo: PE %d caught up\n", me)
	}
	s.mu.Unlock()
	if len(waiting) > 0 {
		s.fire(node, waiting)
	}
}

// recoveryOf is the recovery under way that PE me takes part in (s.mu
// held; nil: none).
func (s *Supervisor) recoveryOf(me int32) *RecoveryStats {
	for k := len(s.ft.Recoveries) - 1; k >= 0; k-- {
		if rc := &s.ft.Recoveries[k]; rc.Recovery == 0 && slices.Contains(rc.Set, me) {
			return rc
		}
	}
	return nil
}

// RollingBack: the coordinator of a global rollback chose checkpoint
// epoch (0: the start), found where from.
func (s *Supervisor) RollingBack(epoch uint64, from string) {
	if s.handedOff(epoch, from, false) {
		return
	}
	s.mu.Lock()
	var f any = lostProcess(s.lostWhat)
	failures := 1 // a lost process
	switch {
	case s.lostWhat != "":
	case len(s.dead) > 0 && len(s.deadKills) > 0:
		f = &PEFailure{PE: s.dead[0], Kill: s.deadKills[0], Also: slices.Clone(s.deadKills[1:])}
		failures = len(s.deadKills)
	default:
		// decided by a steward lost since, which this process took
		// over from as PE 0's rolled back (it knows no more of it)
		f = lostProcess("a process was lost (the process that steered the job, lost since, rolled every PE back)")
	}
	s.dead, s.deadKills, s.lostWhat = nil, nil, ""
	s.ft.PEsRolledBack += s.node.NumPEs()
	rc := RecoveryStats{Failures: failures, PEs: s.node.NumPEs()}
	if e := s.everyPE; e != nil {
		// a log limit's rollback set of every PE
		rc.Set, rc.Chain, rc.Off = e.Set, e.Chain, e.Off
		s.everyPE = nil
	}
	s.ft.Recoveries = append(s.ft.Recoveries, rc)
	s.ft.Restored = append(s.ft.Restored, epoch)
	if epoch == 0 {
		fmt.Fprintf(s.notices, "charmgo: %v; every PE starts the run again (no checkpoint was taken yet)\n", f)
		s.mu.Unlock()
		return
	}
	fmt.Fprintf(s.notices, "charmgo: %v; every PE rolls back to checkpoint %d (%s)\n", f, epoch, from)
	s.mu.Unlock()
}

type lostProcess string

func (l lostProcess) String() string { return string(l) }

// StepRange checks, once a run, the failures injected at steps against
// the steps the program will run.
func (s *Supervisor) StepRange(first, last int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rangeChecked {
		return nil
	}
	s.rangeChecked = true
	for i, k := range s.kills {
		if s.fired[i] || k.Checkpoint > 0 || k.Step < 0 || (k.Step >= first && k.Step <= last) {
			continue
		}
		where := fmt.Sprintf("the program runs steps %d to %d", first, last)
		if first > last {
			where = "the program runs no more steps"
		}
		if s.restartDir != "" {
			where += fmt.Sprintf(" after resuming from %s", s.restartDir)
		}
		return fmt.Errorf("flag --kill: %v can never happen: %s", k, where)
	}
	return nil
}

// Unfired names the first injected failure that never happened, once the
// run ended: a test counting on it would pass without a failure.
func (s *Supervisor) Unfired() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range s.kills {
		if s.killProcess != nil && !s.sawStep && !k.timed() {
			continue // another process reported the steps and fired them
		}
		if !s.fired[i] {
			return &UnfiredError{Kill: k, After: time.Since(s.start).Round(time.Millisecond), NoSteps: k.Step >= 0 && k.Checkpoint == 0 && !s.sawStep}
		}
	}
	return nil
}

// UnfiredError is an injected failure that never happened: the run ended
// After so long, first.
type UnfiredError struct {
	Kill  Kill
	After time.Duration
	// NoSteps: the kill was at a step and the program reported none
	NoSteps bool
}

func (e *UnfiredError) Error() string {
	msg := fmt.Sprintf("flag --kill: %v never happened: the run ended first (after %v)", e.Kill, e.After)
	if e.NoSteps {
		msg += fmt.Sprintf("; the program reports no steps (chare.AtStep): kill at a time instead, --kill %d@%v", e.Kill.PE, max(e.After/2, time.Millisecond))
	}
	return msg
}

// restored: the program resumes from the checkpoint it rolled back to
// (or the start); failures put off meanwhile happen now.
func (s *Supervisor) Restored() {
	if s.handedOff(0, "", true) {
		return
	}
	s.mu.Lock()
	if !s.failed.IsZero() && s.rolling {
		s.ft.Recovery += time.Since(s.failed)
		s.recovered1(time.Since(s.failed))
		s.failed = time.Time{}
	}
	s.rolling = false
	waiting, node, resumed := s.waiting, s.node, s.onResumed
	s.waiting = nil
	s.mu.Unlock()
	if len(waiting) > 0 {
		s.fire(node, waiting)
	}
	if resumed != nil {
		resumed()
	}
}

// handedOff hands a global rollback's choice (epoch, from) or the
// program's resumption (resumed) to the process that steers the job's
// recoveries, if that is another (elsewhere), and reports whether it did.
func (s *Supervisor) handedOff(epoch uint64, from string, resumed bool) bool {
	s.mu.Lock()
	away := s.elsewhere
	s.mu.Unlock()
	return away != nil && away(epoch, from, resumed)
}

// Steered is what this supervisor knows of the recoveries it steered
// (the job's successor steward's, for process 0's report: AddSteered).
func (s *Supervisor) Steered() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Failures: s.ft.Failures, PEsRolledBack: s.ft.PEsRolledBack, Recovery: s.ft.Recovery, CaughtUp: s.ft.CaughtUp,
		Restored: slices.Clone(s.ft.Restored), Recoveries: slices.Clone(s.ft.Recoveries)}
}

// AddSteered adds the recoveries another process steered (Steered) to
// this supervisor's.
func (s *Supervisor) AddSteered(o Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ft.Failures += o.Failures
	s.ft.PEsRolledBack += o.PEsRolledBack
	s.ft.Recovery += o.Recovery
	s.ft.CaughtUp += o.CaughtUp
	s.ft.Restored = append(s.ft.Restored, o.Restored...)
	s.ft.Recoveries = append(s.ft.Recoveries, o.Recoveries...)
}

// handSteered returns what Steered returns and forgets it: the
// recoveries a successor steered go to process 0 with the steering
// (Processes.handBack), and are counted there once.
func (s *Supervisor) handSteered() Stats {
	o := s.Steered()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ft.Failures, s.ft.PEsRolledBack, s.ft.Recovery, s.ft.CaughtUp = 0, 0, 0, 0
	s.ft.Restored, s.ft.Recoveries = nil, nil
	return o
}

// recovered1 notes the recovery time of the last recovery.
func (s *Supervisor) recovered1(d time.Duration) {
	if k := len(s.ft.Recoveries); k > 0 && s.ft.Recoveries[k-1].Recovery == 0 {
		s.ft.Recoveries[k-1].Recovery = d
	}
}

// AddLog adds a logging protocol's statistics of PE p (or of an
// incarnation of it a failure or rollback discarded).
func (s *Supervisor) AddLog(p int, st ftlayer.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ft.Log.Add(st)
	if s.teams.On() {
		s.ft.Teams[s.teams.Of(int32(p))].Log.Add(st)
	}
	if p >= len(s.ft.PELog) {
		s.ft.PELog = append(s.ft.PELog, make([]ftlayer.Stats, p+1-len(s.ft.PELog))...)
	}
	mine := &s.ft.PELog[p]
	before, peak := mine.Log, mine.PeakTotal
	mine.Add(st)
	mine.PeakTotal = max(peak, st.PeakTotal)
	for k := range mine.Log {
		mine.Log[k].PeakBytes = max(before[k].PeakBytes, st.Log[k].PeakBytes)
		mine.Log[k].AtCheckpointBytes = max(before[k].AtCheckpointBytes, st.Log[k].AtCheckpointBytes)
	}
}

// AddOps adds what an incarnation a failure or rollback discarded did.
func (s *Supervisor) AddOps(st manager.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostOps.Add(st)
}

// LostOps is what the discarded incarnations did.
func (s *Supervisor) LostOps() manager.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostOps
}

// Stats is what fault tolerance did so far.
func (s *Supervisor) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.ft
	st.ChannelsOffGranted = s.gate.grants()
	return st
}
