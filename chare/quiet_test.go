package chare_test

import (
	"strconv"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// A program that ends the way the README documents — main's constructor
// returns and the run ends once it goes quiet — ends so (exit 0, its
// results complete) after a rollback to a checkpoint, after a restart from
// one, after a restart from a checkpoint of its last step, and after a
// local recovery: a restored run has no constructor returning to start the
// end-of-run detection, so it carries on the one the checkpoint's run had.

type QtMain struct {
	A     chare.ArrayProxy[QtA]
	Ckpts []int // the steps after which it checkpoints (its arguments)
	Step  int
	Sums  []int64
	QD    int // its own quiescence callbacks delivered
}

type QtA struct{ V int64 }

var (
	qtMain    = chare.NewMainType[QtMain]("qt.Main")
	qtAT      = chare.NewType[QtA, int64]("qt.A")
	qtStep    *chare.Entry[QtA, int]
	qtSum     *chare.Entry[QtMain, int64]
	qtResume  *chare.Entry[QtMain, struct{}]
	qtQuiet   *chare.Entry[QtMain, struct{}]
	qtResults []int64 // what the last run's main summed, and its own QD callbacks
)

func init() {
	qtStep = chare.NewEntry(qtAT, (*QtA).Step)
	qtSum = chare.NewEntry(qtMain, (*QtMain).Sum)
	qtResume = chare.NewEntry(qtMain, (*QtMain).Resume)
	qtQuiet = chare.NewEntry(qtMain, (*QtMain).Quiet)
}

const qtSteps = 5

func (m *QtMain) Init(ctx *chare.Ctx, args []string) {
	for _, a := range args {
		s, err := strconv.Atoi(a)
		if err != nil {
			ctx.Fail(err)
			return
		}
		m.Ckpts = append(m.Ckpts, s)
	}
	chare.EndWhenQuiet(ctx) // the run ends once nothing is left to do
	m.A = qtAT.NewArray(ctx, []int{6}, 1)
	chare.StepRange(ctx, 1, qtSteps)
	// a quiescence callback of the program's own, asked for before the
	// checkpoints: it must survive a restart as the end detection does
	chare.StartQD(ctx, qtQuiet.CallbackTo(qtMain.MainProxy()))
	m.next(ctx)
}

func (m *QtMain) next(ctx *chare.Ctx) {
	if m.Step >= qtSteps {
		return // nothing more to send: the run goes quiet and ends
	}
	m.Step++
	chare.AtStep(ctx, m.Step)
	qtStep.Broadcast(ctx, m.A, m.Step)
}

func (m *QtMain) Sum(ctx *chare.Ctx, v int64) {
	m.Sums = append(m.Sums, v)
	qtResults = append(m.Sums[:len(m.Sums):len(m.Sums)], int64(m.QD))
	for _, c := range m.Ckpts {
		if c == m.Step {
			chare.Checkpoint(ctx, qtResume.CallbackTo(qtMain.MainProxy()))
			return
		}
	}
	m.next(ctx)
}

func (m *QtMain) Resume(ctx *chare.Ctx, _ struct{}) { m.next(ctx) }

func (m *QtMain) Quiet(ctx *chare.Ctx, _ struct{}) {
	m.QD++
	qtResults = append(m.Sums[:len(m.Sums):len(m.Sums)], int64(m.QD))
}

func (a *QtA) Init(ctx *chare.Ctx, v int64) { a.V = v + int64(ctx.Index().C[0]) }

func (a *QtA) Step(ctx *chare.Ctx, s int) {
	a.V = (a.V*3 + int64(s)) % 1000003
	chare.Contribute(ctx, chare.SumInt64, a.V, qtSum.CallbackTo(qtMain.MainProxy()))
}

func qtRun(t *testing.T, cfg chare.Config) (chare.Result, []int64) {
	t.Helper()
	qtResults = nil
	res := chare.Run(qtMain, cfg)
	require.NoError(t, res.Err)
	require.Equal(t, 0, res.Code)
	return res, qtResults
}

func TestQuietEndSurvivesRestoresAndRestarts(t *testing.T) {
	_, want := qtRun(t, chare.Config{PEs: 2})
	require.Len(t, want, qtSteps+1)
	require.Equal(t, int64(1), want[qtSteps], "the program's own quiescence callback ran once")

	for _, c := range []struct {
		name string
		cfg  chare.Config
		back []uint64
	}{
		{"none, rolled back to a checkpoint", chare.Config{PEs: 2, Args: []string{"2"}, Kills: []chare.Kill{{PE: 1, Step: 3}}}, []uint64{1}},
		{"none, one PE, back to the start", chare.Config{PEs: 1, Args: []string{"4"}, Kills: []chare.Kill{{PE: 0, Step: 3}}}, []uint64{0}},
		{"camel, recovered alone", chare.Config{PEs: 3, FT: "camel", Args: []string{"2"}, Kills: []chare.Kill{{PE: 1, Step: 4}}}, []uint64{1}},
	} {
		res, got := qtRun(t, c.cfg)
		require.Equal(t, want, got, c.name)
		require.Equal(t, c.back, res.Stats.FT.Restored, c.name)
	}

	for _, ckpts := range [][]string{{"2"}, {"2", "5"}} { // the second's last checkpoint is at the last step
		dir := t.TempDir()
		_, got := qtRun(t, chare.Config{PEs: 2, Args: ckpts, CheckpointDir: dir})
		require.Equal(t, want, got)
		for _, pes := range []int{1, 2, 3} {
			res, got := qtRun(t, chare.Config{PEs: pes, Restart: dir})
			require.Equal(t, want, got, "restarted from %v on %d PEs", ckpts, pes)
			require.Equal(t, uint64(1), res.Stats.Ops.Restarts)
		}
	}
}
