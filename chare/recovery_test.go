package chare_test

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

// A program using what a restore must rebuild — a bounded array, a sparse
// 2D array inserted across PEs, a section with a repeated member,
// broadcasts, multicasts, point-to-point sends, array and section
// reductions, a migration between the checkpoint and the failure — ends
// with the failure-free results when a PE fails (every PE rolls back to
// the checkpoint after step 3), and when restarted from the checkpoint on
// disk on another PE count.

type RvMain struct {
	A       chare.ArrayProxy[RvA]
	S       chare.ArrayProxy[RvS]
	Sec     chare.SectionProxy[RvA]
	Step    int
	Got     int
	ALog    []int64
	SLog    []int64
	SecLog  []int64
	Targets int
}

type RvA struct {
	V  int64
	Vs []int64 // V before each step: a step's broadcast and multicast race at an element
	S  chare.ArrayProxy[RvS]
}

type RvS struct {
	W    int64
	Seen int // bumps this step
}

type rvTouch struct {
	Step int
	Sec  chare.SectionProxy[RvA]
}

var (
	rvMain    = chare.NewMainType[RvMain]("rv.Main")
	rvAT      = chare.NewType[RvA, chare.ArrayProxy[RvS]]("rv.A")
	rvST      = chare.NewType[RvS, int64]("rv.S")
	rvAStep   = chare.NewEntry[int](rvAT, "Step")
	rvATouch  = chare.NewEntry[rvTouch](rvAT, "Touch")
	rvSBump   = chare.NewEntry[int](rvST, "Bump")
	rvASum    = chare.NewEntry[int64](rvMain, "ASum")
	rvSSum    = chare.NewEntry[int64](rvMain, "SSum")
	rvSecSum  = chare.NewEntry[int64](rvMain, "SecSum")
	rvResume  = chare.NewEntry[struct{}](rvMain, "Resume")
	rvResults [][]int64
)

const rvSteps, rvCkptStep = 6, 3

func rvSIndex(i int) chare.Index { j := i % 6; return chare.Idx(j%4, j/2) }

func (m *RvMain) Init(ctx *chare.Ctx, _ []string) {
	m.S = rvST.NewSparseArray(ctx, []int{4, 4})
	for i := 0; i < 6; i++ {
		rvST.Insert(ctx, m.S, rvSIndex(i), i%ctx.NumPEs(), int64(i+1))
	}
	m.S.DoneInserting(ctx)
	m.A = rvAT.NewArray(ctx, []int{8}, m.S)
	m.Sec = m.A.Section(ctx, []chare.Index{chare.Idx(1), chare.Idx(3), chare.Idx(5), chare.Idx(5)})
	m.next(ctx)
}

func (m *RvMain) next(ctx *chare.Ctx) {
	m.Step++
	chare.AtStep(ctx, m.Step)
	if m.Step > rvSteps {
		rvResults = [][]int64{m.ALog, m.SLog, m.SecLog}
		ctx.Exit(0)
		return
	}
	rvAStep.Broadcast(ctx, m.A, m.Step)
	rvATouch.Multicast(ctx, m.Sec, rvTouch{m.Step, m.Sec})
}

func (m *RvMain) result(ctx *chare.Ctx, log *[]int64, v int64) {
	*log = append(*log, v)
	if m.Got++; m.Got < 3 {
		return
	}
	m.Got = 0
	if m.Step == rvCkptStep {
		chare.Checkpoint(ctx, rvResume.CallbackTo(rvMain.MainProxy()))
		return
	}
	m.next(ctx)
}

func (m *RvMain) ASum(ctx *chare.Ctx, v int64)      { m.result(ctx, &m.ALog, v) }
func (m *RvMain) SSum(ctx *chare.Ctx, v int64)      { m.result(ctx, &m.SLog, v) }
func (m *RvMain) SecSum(ctx *chare.Ctx, v int64)    { m.result(ctx, &m.SecLog, v) }
func (m *RvMain) Resume(ctx *chare.Ctx, _ struct{}) { m.next(ctx) }

func (a *RvA) Init(ctx *chare.Ctx, s chare.ArrayProxy[RvS]) {
	a.V, a.S = int64(ctx.Index().C[0]), s
	a.Vs = []int64{a.V}
}

func (a *RvA) Step(ctx *chare.Ctx, s int) {
	i := int(ctx.Index().C[0])
	a.V = (a.V*3 + int64(s+i)) % 1000003
	a.Vs = append(a.Vs, a.V)
	chare.Contribute(ctx, chare.SumInt64, a.V, rvASum.CallbackTo(rvMain.MainProxy()))
	j := i % 6
	rvSBump.Send(ctx, a.S.At(j%4, j/2), s)
	if s == rvCkptStep+1 && i == 2 { // moves between the checkpoint and the failure
		ctx.Migrate((ctx.PE() + 1) % ctx.NumPEs())
	}
}

func (a *RvA) Touch(ctx *chare.Ctx, t rvTouch) {
	// the value the previous step left: this step's broadcast may or may
	// not have come first
	v := a.Vs[t.Step-1]
	chare.ContributeSection(ctx, t.Sec, chare.SumInt64, v*2+int64(t.Step), rvSecSum.CallbackTo(rvMain.MainProxy()))
}

func (s *RvS) Init(ctx *chare.Ctx, w int64) { s.W = w }

func (s *RvS) Bump(ctx *chare.Ctx, step int) {
	s.W = (s.W*7 + int64(step)) % 1000003
	s.Seen++
	want := 1
	if ix := ctx.Index(); ix.C[1] == 0 && ix.C[0] < 2 { // S(0,0), S(1,0) get two A elements each
		want = 2
	}
	if s.Seen == want {
		s.Seen = 0
		chare.Contribute(ctx, chare.SumInt64, s.W, rvSSum.CallbackTo(rvMain.MainProxy()))
	}
}

func rvRun(t *testing.T, cfg chare.Config) (chare.Result, [][]int64) {
	t.Helper()
	rvResults = nil
	res := chare.Run(rvMain, cfg)
	require.NoError(t, res.Err)
	return res, rvResults
}

func TestRecoveryRebuildsEveryKindOfState(t *testing.T) {
	_, want := rvRun(t, chare.Config{PEs: 3})
	require.Len(t, want[0], rvSteps)

	for _, c := range []struct {
		kills []chare.Kill
		back  []uint64 // the checkpoint each failure rolled back to
	}{
		{[]chare.Kill{{PE: 1, Step: 5}}, []uint64{1}},                      // after the migration
		{[]chare.Kill{{PE: 0, Step: 5}, {PE: 2, Step: 6}}, []uint64{1, 1}}, // the coordinator, then another
		{[]chare.Kill{{PE: 2, Step: -1, Checkpoint: 1}}, []uint64{0}},      // during the checkpoint: back to the start
	} {
		res, got := rvRun(t, chare.Config{PEs: 3, Kills: c.kills, WireCheck: true})
		require.Equal(t, want, got, "kills %v", c.kills)
		require.Equal(t, c.back, res.Stats.FT.Restored, "kills %v", c.kills)
	}

	dir := t.TempDir()
	_, got := rvRun(t, chare.Config{PEs: 3, CheckpointDir: dir})
	require.Equal(t, want, got)
	for _, pes := range []int{1, 2, 4} {
		res, got := rvRun(t, chare.Config{PEs: pes, Restart: dir})
		require.Equal(t, want, got, "restarted on %d PEs", pes)
		require.Equal(t, uint64(1), res.Stats.Ops.Restarts)
	}
	// restarted, and then a failure: back to the restored checkpoint
	res, got := rvRun(t, chare.Config{PEs: 2, Restart: dir, Kills: []chare.Kill{{PE: 1, Step: 5}}})
	require.Equal(t, want, got)
	require.Equal(t, []uint64{1}, res.Stats.FT.Restored)
}

// Under message logging every kind of state the recovery test builds —
// sparse arrays inserted across PEs, a section with a repeated member,
// broadcasts, multicasts, array and section reductions, a migration, a
// checkpoint, and a restart from its files — runs as without it, with
// every hop stamped and logged and the headers crossing the wire codec.
func TestMessageLoggingRunsEveryKindOfState(t *testing.T) {
	_, want := rvRun(t, chare.Config{PEs: 3})
	for _, ft := range []string{"scmel", "camel"} {
		for _, k := range []int{2, 4} {
			dir := t.TempDir()
			res, got := rvRun(t, chare.Config{PEs: 5, Branching: k, FT: ft, WireCheck: true, CheckpointDir: dir})
			require.Equal(t, want, got, "%s, %d-ary trees", ft, k)
			log := res.Stats.FT.Log
			require.Positive(t, log.Log[ftlayer.KindMulticast].TotalMsgs, ft)
			require.Positive(t, log.Log[ftlayer.KindReduction].TotalMsgs, ft)
			require.Positive(t, log.DetsAcked, ft)
			// a restart (every PE from the files, here with 4-ary trees
			// whatever the checkpoint had) starts the protocol afresh
			_, got = rvRun(t, chare.Config{PEs: 5, FT: ft, Restart: dir})
			require.Equal(t, want, got, "%s restarted", ft)
		}
	}
}

// A multicast that reaches a PE before its section is set up there waits
// in the manager, which hands it on later without passing it through the
// FT hook a second time (it would be taken for a duplicate, and lost).
func TestMessageLoggingEarlyMulticasts(t *testing.T) {
	_, want := rvRun(t, chare.Config{PEs: 3})
	for i := 0; i < 200; i++ {
		_, got := rvRun(t, chare.Config{PEs: 12, Branching: 2, FT: []string{"scmel", "camel"}[i%2]})
		require.Equal(t, want, got)
	}
}

// Under scmel and camel a failed PE recovers alone: it restores its
// snapshot of the last checkpoint (or starts again from the start) and the
// others replay its messages while they go on. The run ends with the
// failure-free results, and only the failed PE rolled back.
func TestLocalRecoveryByMessageLogging(t *testing.T) {
	_, want := rvRun(t, chare.Config{PEs: 3})
	for _, ft := range []string{"scmel", "camel"} {
		for _, c := range []struct {
			name  string
			kills []chare.Kill
			back  []uint64
		}{
			{"before the checkpoint", []chare.Kill{{PE: 2, Step: 2}}, []uint64{0}},
			{"after the migration", []chare.Kill{{PE: 1, Step: 5}}, []uint64{1}},
			{"the coordinator", []chare.Kill{{PE: 0, Step: 5}}, []uint64{1}},
			{"one after another", []chare.Kill{{PE: 0, Step: 5}, {PE: 2, Step: 6}}, []uint64{1, 1}},
			// as the checkpoint begins: it waits for the PE to catch up
			{"during the checkpoint", []chare.Kill{{PE: 2, Step: -1, Checkpoint: 1}}, []uint64{0}},
			{"the coordinator during the checkpoint", []chare.Kill{{PE: 0, Step: -1, Checkpoint: 1}}, []uint64{0}},
		} {
			for _, wire := range []bool{false, true} {
				res, got := rvRun(t, chare.Config{PEs: 3, FT: ft, Kills: c.kills, WireCheck: wire})
				require.Equal(t, want, got, "%s, %s", ft, c.name)
				require.Equal(t, c.back, res.Stats.FT.Restored, "%s, %s", ft, c.name)
				require.Equal(t, len(c.kills), res.Stats.FT.PEsRolledBack, "%s, %s: only the failed PE rolls back", ft, c.name)
				require.Positive(t, res.Stats.FT.Log.Replayed, "%s, %s", ft, c.name)
				require.Equal(t, uint64(1), res.Stats.Ops.Checkpoints, "%s, %s", ft, c.name)
			}
		}
		// restarted from the files on another PE count, then a failure:
		// the PE recovers from the start of this run (its checkpoint)
		dir := t.TempDir()
		_, got := rvRun(t, chare.Config{PEs: 3, FT: ft, CheckpointDir: dir})
		require.Equal(t, want, got)
		for _, k := range []chare.Kill{{PE: 1, Step: 5}, {PE: 0, Step: 5}} {
			res, got := rvRun(t, chare.Config{PEs: 2, FT: ft, Restart: dir, Kills: []chare.Kill{k}, WireCheck: true})
			require.Equal(t, want, got, "%s restarted, %v", ft, k)
			require.Equal(t, []uint64{1}, res.Stats.FT.Restored)
			require.Equal(t, 1, res.Stats.FT.PEsRolledBack)
		}
	}
}
