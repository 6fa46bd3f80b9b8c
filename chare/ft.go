package chare

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

// Kill is an injected failure: PE fails (fail-stop) when the program
// reports step Step (AtStep), or After the run started (Step < 0), or —
// with Checkpoint > 0, for tests — while checkpoint number Checkpoint is
// being taken (its snapshots are on their way to the buddies).
type Kill struct {
	PE         int
	Step       int
	After      time.Duration
	Checkpoint uint64
}

func (k Kill) String() string {
	if k.Checkpoint > 0 {
		return fmt.Sprintf("PE %d during checkpoint %d", k.PE, k.Checkpoint)
	}
	if k.Step >= 0 {
		return fmt.Sprintf("PE %d at step %d", k.PE, k.Step)
	}
	return fmt.Sprintf("PE %d after %v", k.PE, k.After)
}

// ParseKill reads --kill's value: PE@STEP.
func ParseKill(v string) (Kill, error) {
	p, s, ok := strings.Cut(v, "@")
	if !ok {
		return Kill{}, fmt.Errorf("flag --kill: %q: want PE@STEP", v)
	}
	pe, err1 := strconv.Atoi(p)
	step, err2 := strconv.Atoi(s)
	if err1 != nil || err2 != nil || pe < 0 || step < 0 {
		return Kill{}, fmt.Errorf("flag --kill: %q: want PE@STEP with whole numbers", v)
	}
	return Kill{PE: pe, Step: step}, nil
}

// ParseKillFile reads a kill file: one failure per line, "PE SECONDS"
// (Charm++'s +killFile format: seconds after the start, fractions allowed)
// or "PE @STEP"; blank lines and lines starting with # are skipped. Errors
// name the line.
func ParseKillFile(r io.Reader) ([]Kill, error) {
	var out []Kill
	sc := bufio.NewScanner(r)
	for ln := 1; sc.Scan(); ln++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("kill file line %d: %q: want \"PE SECONDS\" or \"PE @STEP\"", ln, sc.Text())
		}
		p, err := strconv.Atoi(f[0])
		if err != nil || p < 0 {
			return nil, fmt.Errorf("kill file line %d: PE %q is not a PE number", ln, f[0])
		}
		if s, ok := strings.CutPrefix(f[1], "@"); ok {
			step, err := strconv.Atoi(s)
			if err != nil || step < 0 {
				return nil, fmt.Errorf("kill file line %d: step %q is not a whole number", ln, f[1])
			}
			out = append(out, Kill{PE: p, Step: step})
			continue
		}
		sec, err := strconv.ParseFloat(f[1], 64)
		if err != nil || sec < 0 || sec > 1e9 {
			return nil, fmt.Errorf("kill file line %d: time %q is not a number of seconds", ln, f[1])
		}
		out = append(out, Kill{PE: p, Step: -1, After: time.Duration(sec * float64(time.Second))})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kill file: %w", err)
	}
	return out, nil
}

// PEFailure ends a run attempt: a PE failed (fail-stop). Other PEs may
// have failed at the same moment (Also): one rollback recovers them all.
type PEFailure struct {
	PE   int
	Kill Kill
	Also []Kill
}

func (f *PEFailure) Error() string {
	msg := fmt.Sprintf("PE %d failed (injected: %v)", f.PE, f.Kill)
	for _, k := range f.Also {
		msg += fmt.Sprintf(", and PE %d (injected: %v)", k.PE, k)
	}
	return msg
}

// FTStats is what fault tolerance did in a run.
type FTStats struct {
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
}

// CheckpointPeriod is the checkpoint cadence the run was asked for
// (--ckpt-period): every steps steps, or at the first step boundary after
// every since the last checkpoint; both zero when not asked for. A program
// that checkpoints follows it instead of its own.
func CheckpointPeriod(ctx *Ctx) (steps int, every time.Duration) {
	rs := hostOf(ctx.m).run
	return rs.ckptSteps, rs.ckptEvery
}

// AtStep tells the runtime that the program begins step (on any one
// chare, once per step): failures injected at that step happen now.
func AtStep(ctx *Ctx, step int) { hostOf(ctx.m).run.atStep(step) }

// StepRange tells the runtime which steps the program will report with
// AtStep from now on, first to last (first > last: none; a program
// resumed from a checkpoint says where it resumes). The first call of a
// run checks the failures injected at steps: one at a step outside the
// range could never happen, and the run ends at once with an input
// error (exit 2) that names it. A program that never calls it learns of
// such failures when the run ends (also an input error).
func StepRange(ctx *Ctx, first, last int) {
	if err := hostOf(ctx.m).run.stepRange(first, last); err != nil {
		ctx.m.Fail(InputError{err})
	}
}

// runState is what outlives a run's attempts: injected failures (each
// happens once) and fault-tolerance statistics.
type runState struct {
	mu      sync.Mutex
	kills   []Kill
	fired   []bool
	node    *pe.Node
	start   time.Time
	failed  time.Time
	ft      FTStats
	notices io.Writer
	stdout  io.Writer // Config.Stdout
	// the checkpoint cadence asked for (CheckpointPeriod)
	ckptSteps int
	ckptEvery time.Duration

	// Local recovery (scmel, camel): a failed PE comes back alone.
	local      bool
	mk         func(p *pe.PE) *manager.Manager
	initial    [][]pe.Envelope // what each PE started this attempt with
	inc        []uint32        // each PE's incarnation
	window     bool            // a checkpoint is being taken
	recovering int             // the PE recovering alone, or -1
	waiting    []int           // failures put off until it caught up
	recovered  []int32         // PEs that recovered alone
	lostOps    manager.Stats   // what failed incarnations did
	// a global rollback has caught up when the step that failed begins
	// again
	awaitStep int
	failedAt  time.Time
	// Global rollback: the PEs that failed in this attempt (the first
	// is the attempt's error; the others failed at the same moment).
	dead      []int
	deadKills []Kill
	// Where a rollback finds the snapshots no surviving PE holds: the
	// checkpoint directory, and the checkpoint the run was restarted from.
	ckptDir       string
	restartDir    string
	restartEpoch  uint64
	restartSnaps  [][]byte
	lastCommitted uint64 // the last checkpoint PE 0 saw committed
	rangeChecked  bool   // StepRange checked the kills
}

func newRunState(cfg Config, spec ftlayer.ProtocolSpec) *runState {
	rs := &runState{kills: cfg.Kills, fired: make([]bool, len(cfg.Kills)), start: time.Now(), notices: cfg.Notices, recovering: -1, awaitStep: -1,
		ckptSteps: cfg.CkptSteps, ckptEvery: cfg.CkptEvery, ckptDir: cfg.CheckpointDir, restartDir: cfg.Restart}
	rs.ft.Protocol = spec.Name
	rs.local = spec.RecoversAlone && cfg.PEs > 1
	if rs.notices == nil {
		rs.notices = io.Discard
	}
	if rs.stdout = cfg.Stdout; rs.stdout == nil {
		rs.stdout = os.Stdout
	}
	return rs
}

// begin starts an attempt on node, whose PEs start with initial:
// time-based failures are scheduled against the run's start.
func (rs *runState) begin(node *pe.Node, initial [][]pe.Envelope) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.node, rs.initial = node, initial
	rs.dead, rs.deadKills = nil, nil
	rs.inc = make([]uint32, node.NumPEs()) // the protocol starts afresh
	rs.window, rs.recovering, rs.waiting, rs.recovered = false, -1, nil, nil
	for i, k := range rs.kills {
		if k.Step >= 0 || k.Checkpoint > 0 || rs.fired[i] {
			continue
		}
		i, k := i, k
		wait := time.Until(rs.start.Add(k.After))
		go func() {
			select {
			case <-time.After(wait):
				rs.fire(node, i)
			case <-node.Done():
			}
		}()
	}
}

func (rs *runState) atStep(step int) {
	rs.mu.Lock()
	if rs.awaitStep == step && !rs.failedAt.IsZero() {
		rs.ft.CaughtUp += time.Since(rs.failedAt)
		rs.awaitStep, rs.failedAt = -1, time.Time{}
	}
	rs.mu.Unlock()
	rs.fireWhere(func(k Kill) bool { return k.Checkpoint == 0 && k.Step == step })
}

func (rs *runState) fireWhere(due func(Kill) bool) {
	rs.mu.Lock()
	node := rs.node
	var now []int
	for i, k := range rs.kills {
		if due(k) && !rs.fired[i] {
			now = append(now, i)
		}
	}
	rs.mu.Unlock()
	for _, i := range now {
		rs.fire(node, i)
	}
}

// fire makes kill i happen. Under scmel and camel the PE fails alone and
// recovers by replay while the others go on — unless snapshots are being
// taken (then, as under none, every PE rolls back to the last committed
// checkpoint: the protocols recover one PE from a complete checkpoint). A
// kill "during checkpoint E" strikes as E begins, once the run is
// quiescent and before any snapshot: the coordinator then puts the
// checkpoint off until the PE caught up, and only that PE rolls back.
// One PE recovers at a time: a failure due while one does is put off until
// it caught up.
func (rs *runState) fire(node *pe.Node, i int) {
	rs.mu.Lock()
	if rs.fired[i] || rs.node != node {
		rs.mu.Unlock()
		return
	}
	k := rs.kills[i]
	if rs.local && !rs.window {
		if rs.recovering >= 0 {
			if !slices.Contains(rs.waiting, i) {
				rs.waiting = append(rs.waiting, i)
			}
			rs.mu.Unlock()
			return
		}
		if !node.FailPE(k.PE) {
			rs.mu.Unlock()
			return // the run is ending
		}
		rs.fired[i] = true
		rs.failed = time.Now()
		rs.recovering = k.PE
		rs.inc[k.PE]++
		inc, initial, recovered := rs.inc[k.PE], rs.initial[k.PE], slices.Clone(rs.recovered)
		rs.ft.Failures++
		rs.ft.PEsRolledBack++
		fmt.Fprintf(rs.notices, "charmgo: %v; it recovers alone (%s): the others replay its messages\n", &PEFailure{PE: k.PE, Kill: k}, rs.ft.Protocol)
		rs.mu.Unlock()
		go rs.replace(node, k.PE, inc, initial, recovered)
		return
	}
	if node.Stopped() && len(rs.dead) == 0 {
		rs.mu.Unlock()
		return // the run is ending: the kill did not happen
	}
	rs.fired[i] = true
	rs.ft.Failures++
	if !slices.Contains(rs.dead, k.PE) {
		rs.dead = append(rs.dead, k.PE)
	}
	rs.deadKills = append(rs.deadKills, k)
	if len(rs.deadKills) > 1 {
		// the same moment: one rollback recovers both
		fmt.Fprintf(rs.notices, "charmgo: %v, at the same moment as the failure before\n", &PEFailure{PE: k.PE, Kill: k})
		rs.mu.Unlock()
		return
	}
	rs.failed = time.Now()
	if k.Step >= 0 && k.Checkpoint == 0 {
		rs.awaitStep, rs.failedAt = k.Step, rs.failed
	}
	rs.mu.Unlock()
	node.Fail(&PEFailure{PE: k.PE, Kill: k})
}

// replace starts PE y's new incarnation and tells the others.
func (rs *runState) replace(node *pe.Node, y int, inc uint32, initial []pe.Envelope, recovered []int32) {
	old := node.Replace(y, func(p *pe.PE) pe.Handler {
		m := rs.mk(p)
		m.Revive(inc, initial)
		return m
	})
	if old == nil {
		return
	}
	// the summary counts what the lost incarnation logged (nothing of it
	// is read for the recovery) and did
	lost := old.(*manager.Manager)
	rs.logStats(lost.FT().Stats())
	rs.mu.Lock()
	rs.lostOps.Add(lost.Stats)
	rs.mu.Unlock()
	for p := 0; p < node.NumPEs(); p++ {
		if p != y {
			node.InjectControl(p, pe.Envelope{Type: manager.PEFailedType(), Kind: pe.KindSystem,
				Payload: &manager.PEFailedMsg{PE: int32(y), Inc: inc, Recovered: recovered}})
		}
	}
}

func (h *host) CheckpointStarting(m *manager.Manager, epoch uint64) bool {
	rs := h.run
	// before the snapshots: under scmel and camel, a PE failing now
	// recovers alone, and the checkpoint waits for it
	rs.fireWhere(func(k Kill) bool { return k.Checkpoint == epoch })
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.recovering >= 0 {
		return false
	}
	rs.window = true
	return true
}

func (h *host) CheckpointCommitted(m *manager.Manager, epoch uint64) {
	h.run.mu.Lock()
	h.run.window = false
	h.run.lastCommitted = max(h.run.lastCommitted, epoch)
	h.run.mu.Unlock()
}

func (h *host) LocalRestored(m *manager.Manager, epoch uint64) {
	rs := h.run
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ft.Restored = append(rs.ft.Restored, epoch)
	fmt.Fprintf(rs.notices, "charmgo: PE %d restored checkpoint %d and replays\n", m.Me(), epoch)
}

func (h *host) LocalRecovered(m *manager.Manager) {
	rs := h.run
	rs.mu.Lock()
	rs.ft.Recovery += time.Since(rs.failed)
	rs.ft.CaughtUp += time.Since(rs.failed)
	rs.failed = time.Time{}
	rs.recovering = -1
	if !slices.Contains(rs.recovered, int32(m.Me())) {
		rs.recovered = append(rs.recovered, int32(m.Me()))
	}
	waiting, node := rs.waiting, rs.node
	rs.waiting = nil
	fmt.Fprintf(rs.notices, "charmgo: PE %d caught up\n", m.Me())
	rs.mu.Unlock()
	for _, i := range waiting {
		rs.fire(node, i)
	}
}

func (rs *runState) rolledBack(f *PEFailure, back rollbackPoint) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ft.PEsRolledBack += rs.node.NumPEs()
	rs.ft.Restored = append(rs.ft.Restored, back.epoch)
	if back.snaps == nil { // back to the start: recovered once it restarted
		rs.ft.Recovery += time.Since(rs.failed)
		fmt.Fprintf(rs.notices, "charmgo: %v; every PE starts the run again (no checkpoint was taken yet)\n", f)
		return
	}
	fmt.Fprintf(rs.notices, "charmgo: %v; every PE rolls back to checkpoint %d (%s)\n", f, back.epoch, back.from)
}

// failure is the error that ended the attempt on node, with every PE that
// failed at the same moment.
func (rs *runState) failure(f *PEFailure) (*PEFailure, []int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := *f
	if len(rs.deadKills) > 1 {
		out.Also = slices.Clone(rs.deadKills[1:])
	}
	dead := slices.Clone(rs.dead)
	if len(dead) == 0 {
		dead = []int{f.PE}
	}
	return &out, dead
}

// stepRange checks, once a run, the failures injected at steps against
// the steps the program will run.
func (rs *runState) stepRange(first, last int) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.rangeChecked {
		return nil
	}
	rs.rangeChecked = true
	for i, k := range rs.kills {
		if rs.fired[i] || k.Checkpoint > 0 || k.Step < 0 || (k.Step >= first && k.Step <= last) {
			continue
		}
		where := fmt.Sprintf("the program runs steps %d to %d", first, last)
		if first > last {
			where = "the program runs no more steps"
		}
		if rs.restartDir != "" {
			where += fmt.Sprintf(" after resuming from %s", rs.restartDir)
		}
		return fmt.Errorf("flag --kill: %v can never happen: %s", k, where)
	}
	return nil
}

// unfired names the first injected failure that never happened, once the
// run ended: a test counting on it would pass without a failure.
func (rs *runState) unfired() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i, k := range rs.kills {
		if !rs.fired[i] {
			return fmt.Errorf("flag --kill: %v never happened: the run ended first (after %v)", k, time.Since(rs.start).Round(time.Millisecond))
		}
	}
	return nil
}

// restored: the program resumes from the checkpoint it rolled back to.
func (rs *runState) restored() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.failed.IsZero() {
		rs.ft.Recovery += time.Since(rs.failed)
		rs.failed = time.Time{}
	}
}

func (rs *runState) logStats(s ftlayer.Stats) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ft.Log.Add(s)
}

func (rs *runState) stats() FTStats {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.ft
}

func (h *host) Restored(m *manager.Manager) { h.run.restored() }

// rollbackPoint is where a global rollback takes every PE: the encoded
// snapshots of one checkpoint (nil: the start of the run) and where they
// were found.
type rollbackPoint struct {
	epoch uint64
	snaps [][]byte
	from  string
}

// rollback finds, after the PEs in dead failed, every PE's snapshot of the
// last checkpoint: in the memory of the PEs still alive (a dead PE's from
// its buddy; a checkpoint the coordinator decided is used even where its
// commit had not arrived: the tentative copies hold it), else in the
// checkpoint directory, else the checkpoint the run was restarted from.
// A run that was not restarted and took no checkpoint starts again from
// its beginning. When none of these holds a copy (one PE, or both holders
// of a snapshot failed, with no directory), rollback says so: a run never
// starts afresh from other arguments than the ones it restored.
func (rs *runState) rollback(node *pe.Node, dead []int) (rollbackPoint, error) {
	n := node.NumPEs()
	cks := make([]*ftlayer.Checkpointer, n)
	rs.mu.Lock()
	epoch := max(rs.lastCommitted, rs.restartEpoch)
	rs.mu.Unlock()
	for i := range cks {
		if slices.Contains(dead, i) {
			continue // its memory is gone
		}
		cks[i] = manager.Of(node.PE(i)).Checkpointer()
		epoch = max(epoch, cks[i].LastCommitted())
	}
	if epoch == 0 {
		return rollbackPoint{}, nil // nothing to go back to but the start, which the arguments make again
	}
	out := make([][]byte, n)
	missing := -1
	for p := range out {
		holder := cks[p]
		if holder == nil {
			holder = cks[ftlayer.Buddy(int32(p), n)]
		}
		var s *ftlayer.Snapshot
		if holder != nil {
			if s = holder.Committed(int32(p)); s == nil || s.Epoch != epoch {
				s = holder.Tentative(int32(p))
			}
		}
		if s == nil || s.Epoch != epoch {
			missing = p
			break
		}
		out[p] = s.App
	}
	if missing < 0 {
		return rollbackPoint{epoch: epoch, snaps: out, from: "from the PEs' memory"}, nil
	}
	if rs.ckptDir != "" {
		snaps, err := readCheckpointFiles(rs.ckptDir, epoch, n)
		if err != nil {
			return rollbackPoint{}, fmt.Errorf("%s failed and no PE holds PE %d's snapshot of checkpoint %d; reading it from --ckpt-dir: %w", peList(dead), missing, epoch, err)
		}
		return rollbackPoint{epoch: epoch, snaps: snaps, from: "from " + rs.ckptDir}, nil
	}
	if rs.restartSnaps != nil {
		return rollbackPoint{epoch: rs.restartEpoch, snaps: rs.restartSnaps, from: "the one the run was restarted from, in " + rs.restartDir}, nil
	}
	return rollbackPoint{}, fmt.Errorf("%s failed and no copy of PE %d's snapshot of checkpoint %d survives (each PE's snapshot is held by it and its buddy); give --ckpt-dir to keep one on disk", peList(dead), missing, epoch)
}

// peList names PEs: "PE 3", "PEs 0 and 1", "PEs 0, 1 and 2".
func peList(ps []int) string {
	if len(ps) == 1 {
		return fmt.Sprintf("PE %d", ps[0])
	}
	s := "PEs "
	for i, p := range ps {
		switch {
		case i == 0:
		case i == len(ps)-1:
			s += " and "
		default:
			s += ", "
		}
		s += strconv.Itoa(p)
	}
	return s
}
