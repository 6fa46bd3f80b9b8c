package chare

import (
	"io"
	"time"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/recovery"
)

// Kill is an injected failure (see recovery.Kill).
type Kill = recovery.Kill

// PEFailure is a PE that failed, with those that failed at the same
// moment (see recovery.PEFailure).
type PEFailure = recovery.PEFailure

// FTStats is what fault tolerance did in a run.
type FTStats = recovery.Stats

// ParseKill reads --kill's value: PE@STEP.
func ParseKill(v string) (Kill, error) { return recovery.ParseKill(v) }

// ParseKillFile reads a kill file (see recovery.ParseKillFile).
func ParseKillFile(r io.Reader) ([]Kill, error) { return recovery.ParseKillFile(r) }

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
func AtStep(ctx *Ctx, step int) {
	rs := hostOf(ctx.m).run
	rs.record.step(step)
	if rs.live != nil {
		rs.live.step(step)
	}
	rs.sup.AtStep(step)
}

// StepRange tells the runtime which steps the program will report with
// AtStep from now on, first to last (first > last: none; a program
// resumed from a checkpoint says where it resumes). The first call of a
// run checks the failures injected at steps: one at a step outside the
// range could never happen, and the run ends at once with an input
// error (exit 2) that names it. A program that never calls it learns of
// such failures when the run ends (also an input error). It reports
// whether the run goes on: on false the entry method should return
// without printing or sending anything more (the refusal is the run's
// one line).
func StepRange(ctx *Ctx, first, last int) bool {
	if rs := hostOf(ctx.m).run; rs.live != nil && last >= first {
		rs.live.steps(last)
	}
	if err := hostOf(ctx.m).run.sup.StepRange(first, last); err != nil {
		ctx.m.Fail(InputError{err})
		return false
	}
	return true
}

// runState is what the chare layer keeps of a run: where chares print,
// when it started, the checkpoint cadence asked for, and the supervisor
// that makes injected failures happen and recovers from them.
type runState struct {
	sup       *recovery.Supervisor
	record    runRecord // steps and results, for the summary
	live      *liveLine // the progress line (nil: none)
	stdout    io.Writer // Config.Stdout
	start     time.Time
	ckptSteps int
	ckptEvery time.Duration
}

// The hooks by which the managers tell the supervisor what they do.

func (h *host) CheckpointStarting(m *manager.Manager, epoch uint64) bool {
	return h.run.sup.CheckpointStarting(epoch)
}

func (h *host) CheckpointCommitted(m *manager.Manager, epoch uint64, teams *ftlayer.Teams) {
	h.run.sup.CheckpointCommitted(epoch, teams)
}

func (h *host) LocalRestored(m *manager.Manager, epoch uint64) {
	h.run.sup.LocalRestored(m.Me(), m.Incarnation(), epoch)
}

func (h *host) LocalHolds(m *manager.Manager, owner int32) {
	h.run.sup.LocalHolds(m.Me(), m.Incarnation(), owner)
}

func (h *host) LocalSupplied(m *manager.Manager, by []int32) {
	h.run.sup.LocalSupplied(m.Me(), m.Incarnation(), by)
}

func (h *host) LocalRecovered(m *manager.Manager) {
	h.run.sup.LocalRecovered(m.Me(), m.Incarnation(), m.FT().Stats())
}

func (h *host) RollingBack(m *manager.Manager, epoch uint64, from string) {
	h.run.sup.RollingBack(epoch, from)
}

func (h *host) Restored(m *manager.Manager) { h.run.sup.Restored() }
