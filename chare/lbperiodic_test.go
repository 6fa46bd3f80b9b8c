package chare_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/loadbalance"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A program that never calls AtSync: elements on the first PE work ten
// times longer, each element runs its iterations as messages to itself
// and sends its neighbour a token each iteration. +LBPeriod balances it
// while it runs; every token must arrive once.

type perParams struct {
	N, Iters, Spin int
	AtSync         bool // call AtSync anyway (refused under +LBPeriod)
}

type PerMain struct {
	P      perParams
	Arr    chare.ArrayProxy[PerElem]
	Tokens int64
	Done   bool
}

type PerElem struct {
	P      perParams
	It     int
	Tokens int64
	Seen   map[int]bool
}

type perTok struct{ From, It int }

var (
	perMainT = chare.NewMainTypeOf[PerMain, perParams]("lbperiodic.Main")
	perElemT = chare.NewType[PerElem, perParams]("lbperiodic.Elem")
	perNext  *chare.Entry[PerElem, int]
	perTokE  *chare.Entry[PerElem, perTok]
	perDone  *chare.Entry[PerMain, int64]
	perCount *chare.Entry[PerElem, struct{}]
	perIter  *chare.Entry[PerMain, struct{}]
	perQuiet *chare.Entry[PerMain, struct{}]
)

func init() {
	perNext = chare.NewEntry(perElemT, (*PerElem).Next)
	perTokE = chare.NewEntry(perElemT, (*PerElem).Token)
	perDone = chare.NewEntry(perMainT, (*PerMain).Finished)
	perCount = chare.NewEntry(perElemT, (*PerElem).Count)
	perIter = chare.NewEntry(perMainT, (*PerMain).Iterated)
	perQuiet = chare.NewEntry(perMainT, (*PerMain).Quiet)
}

func (m *PerMain) Init(ctx *chare.Ctx, p perParams) {
	m.P = p
	m.Arr = perElemT.NewArray(ctx, []int{p.N}, p, chare.BlockMap())
	perNext.Broadcast(ctx, m.Arr, 0)
}

// Iterated: every element ran its iterations; tokens may still travel.
func (m *PerMain) Iterated(ctx *chare.Ctx, _ struct{}) {
	chare.StartQD(ctx, perQuiet.CallbackTo(perMainT.MainProxy()))
}

func (m *PerMain) Quiet(ctx *chare.Ctx, _ struct{}) {
	perCount.Broadcast(ctx, m.Arr, struct{}{})
}

func (m *PerMain) Finished(ctx *chare.Ctx, tokens int64) {
	m.Tokens, m.Done = tokens, true
	ctx.Exit(0)
}

func (e *PerElem) Init(_ *chare.Ctx, p perParams) { e.P, e.Seen = p, map[int]bool{} }

func (e *PerElem) Next(ctx *chare.Ctx, it int) {
	i := int(ctx.Index().C[0])
	n := e.P.Spin
	if i < e.P.N/ctx.NumPEs() {
		n *= 10
	}
	x := 1.0
	for k := range n {
		x = x*1.0000001 + float64(k&3)
	}
	_ = x
	perTokE.Send(ctx, chare.ThisArray[PerElem](ctx).At((i+1)%e.P.N), perTok{From: i, It: it})
	if e.P.AtSync && it == 1 {
		ctx.AtSync()
	}
	if it+1 < e.P.Iters {
		perNext.Send(ctx, chare.ThisArray[PerElem](ctx).At(i), it+1)
		return
	}
	chare.Contribute(ctx, chare.Barrier, struct{}{}, perIter.CallbackTo(perMainT.MainProxy()))
}

func (e *PerElem) Token(ctx *chare.Ctx, t perTok) {
	if e.Seen[t.It] {
		ctx.Fail(fmt.Errorf("token %d from %d delivered twice", t.It, t.From))
		return
	}
	e.Seen[t.It] = true
	e.Tokens++
}

// Count reports the tokens once the run is quiet.
func (e *PerElem) Count(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, chare.SumInt64, e.Tokens, perDone.CallbackTo(perMainT.MainProxy()))
}

func TestPeriodicBalancingMovesChareThatNeverSync(t *testing.T) {
	p := perParams{N: 24, Iters: 150, Spin: 20000}
	for _, strategy := range []string{"greedyrefine", "refine", "graph"} {
		t.Run(strategy, func(t *testing.T) {
			res := chare.RunWith(perMainT, p, chare.Config{PEs: 3, Balancer: strategy, LBPeriod: 10 * time.Millisecond})
			require.NoError(t, res.Err)
			m := res.Main.(*PerMain)
			require.True(t, m.Done)
			assert.Equal(t, int64(p.N*p.Iters), m.Tokens, "every token once")
			require.NotNil(t, res.Stats.LB)
			assert.Positive(t, res.Stats.LB.Steps, "the clock started balancing steps")
			assert.Positive(t, res.Stats.LB.Moved, "work moved off the first PE")
		})
	}
}

func TestPeriodicBalancingRefusesAtSync(t *testing.T) {
	res := chare.RunWith(perMainT, perParams{N: 6, Iters: 3, Spin: 10, AtSync: true}, chare.Config{PEs: 2, Balancer: "refine", LBPeriod: time.Second})
	require.Error(t, res.Err)
	assert.Contains(t, res.Err.Error(), "called AtSync, but the run balances periodically (+LBPeriod)")
	assert.NotEqual(t, 0, res.Code)
}

func TestLoadBalancingFlags(t *testing.T) {
	cfg, err := chare.ParseFlags([]string{"+balancer", "GreedyLB", "+balancer", "RefineLB", "+LBDebug", "2", "+LBDump", "x.dump", "+LBPeriod", "0.5", "+LBUseCpuTime", "+LBTolerance", "0.1"})
	require.NoError(t, err)
	assert.Equal(t, "GreedyLB,RefineLB", cfg.Balancer)
	assert.Equal(t, 2, cfg.LBDebug)
	assert.Equal(t, "x.dump", cfg.LBDump)
	assert.Equal(t, 500*time.Millisecond, cfg.LBPeriod)
	assert.True(t, cfg.LBCPUTime)
	assert.Equal(t, 0.1, cfg.LBTolerance)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"+balancer", "HybridLB"}, `flag +balancer: unknown load balancer "HybridLB"`},
		{[]string{"+LBDebug", "7"}, "flag +LBDebug: 7 is out of range"},
		{[]string{"+LBPeriod", "-1"}, `flag +LBPeriod: "-1" is not a positive number of seconds`},
		{[]string{"+LBTolerance", "x"}, `flag +LBTolerance: "x" is not a fraction`},
		{[]string{"+LBDump"}, "flag +LBDump needs a value"},
	} {
		_, err := chare.ParseFlags(tc.args)
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	// runs refused before they start, exit 2
	for _, tc := range []struct {
		cfg  chare.Config
		want string
	}{
		{chare.Config{PEs: 2, LBDump: "x.dump"}, "need a load balancer"},
		{chare.Config{PEs: 2, Balancer: "refine", LBPeriod: time.Second, FT: "camel"}, "flag +LBPeriod: balancing steps started by the clock need"},
		{chare.Config{PEs: 2, Balancer: "refine", LBDump: "/nonexistent/dir/x.dump"}, "flag +LBDump"},
	} {
		res := chare.RunWith(perMainT, perParams{N: 2, Iters: 1}, tc.cfg)
		assert.ErrorContains(t, res.Err, tc.want)
		assert.Equal(t, 2, res.Code)
	}
}

// A run's +LBDump, replayed: every step's strategy plans, from the dumped
// statistics, exactly the moves the run made.
func TestReplayPlansWhatTheRunPlanned(t *testing.T) {
	p := lbsParams{X: 6, Y: 10, Rounds: 3, Sends: 2, Burst: 20, Pumps: 2, Seed: 5}
	for _, strategy := range []string{"greedyrefine", "graph", "RandCentLB,refine"} {
		t.Run(strategy, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lb.dump")
			res := chare.RunWith(lbsMainT, p, chare.Config{PEs: 3, Balancer: strategy, LBDump: path, Seed: 7})
			require.NoError(t, res.Err)
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			recs, err := loadbalance.ReadDump(f, path)
			require.NoError(t, err)
			require.Len(t, recs, res.Stats.LB.Steps)
			moved := 0
			for _, rec := range recs {
				s, err := loadbalance.New(rec.Strategy, rec.Options)
				require.NoError(t, err)
				moves, err := loadbalance.Run(s, &rec.Stats)
				require.NoError(t, err)
				assert.Equal(t, rec.Moves, moves, "step %d (%s)", rec.Stats.Step, rec.Strategy)
				assert.Equal(t, "lbstress.Elem", rec.Coll)
				moved += len(moves)
			}
			assert.Equal(t, res.Stats.LB.Moved, moved)
		})
	}
}
