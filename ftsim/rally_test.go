package ftsim

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// rally is a program of ping-pongs, the pattern in which the pessimist
// protocol sends without committing (its deliveries since the last
// commit all came from the message's destination: see
// ftlayer.Pessimist.Send). Its elements pair up (i with i+3), and each
// step every pair volleys rallyHits times; the element that takes the
// last hit reports to a judge, the next pair's first element, which
// mixes the report into its state between the hits of its own volley:
// so the order of its deliveries shows in what it sends next, and a
// recovery that replays it otherwise makes an orphan, which
// checkChainLogs finds. The PEs hold blocks of elements, so on 2 PEs
// every volley goes between them, and on 3 each PE plays two volleys
// with two partners.
type RallyMain struct {
	R       chare.ArrayProxy[RallyE]
	Step    int
	Steps   int
	Ckpt    int
	Reports int
	All     []ChainLog
}

// RallyE is one element: its hash and what it sent and got.
type RallyE struct {
	H    uint64
	Seq  uint64
	Sent []ChainRec
	Rcvd []ChainRec
}

type rallyHit struct {
	From int32
	Seq  uint64
	H    uint64
	Left int
}

const (
	rallyElems = 6
	rallyHits  = 7
)

var (
	rallyMain   = chare.NewMainTypeOf[RallyMain, MixArgs]("ftsim.rally.Main")
	rallyET     = chare.NewType[RallyE, struct{}]("ftsim.rally.E")
	rallyServe  *chare.Entry[RallyE, int]
	rallyHitE   *chare.Entry[RallyE, rallyHit]
	rallyJudge  *chare.Entry[RallyE, rallyHit]
	rallyReport *chare.Entry[RallyE, struct{}]
	rallyJudged *chare.Entry[RallyMain, int32]
	rallyLogs   *chare.Entry[RallyMain, []ChainLog]
	rallyResume *chare.Entry[RallyMain, struct{}]
)

func init() {
	rallyServe = chare.NewEntry(rallyET, (*RallyE).Serve)
	rallyHitE = chare.NewEntry(rallyET, (*RallyE).Hit)
	rallyJudge = chare.NewEntry(rallyET, (*RallyE).Judge)
	rallyReport = chare.NewEntry(rallyET, (*RallyE).Report)
	rallyJudged = chare.NewEntry(rallyMain, (*RallyMain).Judged)
	rallyLogs = chare.NewEntry(rallyMain, (*RallyMain).Logs)
	rallyResume = chare.NewEntry(rallyMain, (*RallyMain).Resume)
}

func (m *RallyMain) Init(ctx *chare.Ctx, a MixArgs) {
	m.Steps, m.Ckpt = a.Steps, a.Ckpt
	m.R = rallyET.NewArray(ctx, []int{rallyElems}, struct{}{})
	m.next(ctx)
}

func (m *RallyMain) next(ctx *chare.Ctx) {
	m.Step++
	if m.Step > m.Steps {
		rallyReport.Broadcast(ctx, m.R, struct{}{})
		return
	}
	rallyServe.Broadcast(ctx, m.R, m.Step)
}

// Judged: a judge got its step's report.
func (m *RallyMain) Judged(ctx *chare.Ctx, _ int32) {
	if m.Reports++; m.Reports < rallyElems/2 {
		return
	}
	m.Reports = 0
	if m.Step == m.Ckpt {
		chare.Checkpoint(ctx, rallyResume.CallbackTo(rallyMain.MainProxy()))
		return
	}
	m.next(ctx)
}

func (m *RallyMain) Resume(ctx *chare.Ctx, _ struct{}) { m.next(ctx) }

func (m *RallyMain) Logs(ctx *chare.Ctx, logs []ChainLog) {
	m.All = logs
	ctx.Exit(0)
}

func (e *RallyE) Init(ctx *chare.Ctx, _ struct{}) { e.H = uint64(ctx.Index().C[0]) }

// send hands peer a message made from this element's hash.
func (e *RallyE) send(ctx *chare.Ctx, entry *chare.Entry[RallyE, rallyHit], peer, left int) {
	e.Seq++
	h := chainMix(e.H, e.Seq)
	e.Sent = append(e.Sent, ChainRec{Peer: int32(peer), Seq: e.Seq, H: h})
	entry.Send(ctx, chare.ThisArray[RallyE](ctx).At(peer), rallyHit{From: int32(ctx.Index().C[0]), Seq: e.Seq, H: h, Left: left})
}

func (e *RallyE) got(m rallyHit) {
	e.H = chainMix(e.H, m.H)
	e.Rcvd = append(e.Rcvd, ChainRec{Peer: m.From, Seq: m.Seq, H: m.H})
}

const rallyPairs = rallyElems / 2

// Serve: the pair's first element starts its volley.
func (e *RallyE) Serve(ctx *chare.Ctx, s int) {
	e.H = chainMix(e.H, uint64(s))
	if i := int(ctx.Index().C[0]); i < rallyPairs {
		e.send(ctx, rallyHitE, i+rallyPairs, rallyHits-1)
	}
}

// Hit: back to the partner, or, the volley over, a report to the judge.
func (e *RallyE) Hit(ctx *chare.Ctx, m rallyHit) {
	e.got(m)
	i := int(ctx.Index().C[0])
	if m.Left > 0 {
		e.send(ctx, rallyHitE, (i+rallyPairs)%rallyElems, m.Left-1)
		return
	}
	e.send(ctx, rallyJudge, (i+1)%rallyPairs, 0)
}

func (e *RallyE) Judge(ctx *chare.Ctx, m rallyHit) {
	e.got(m)
	rallyJudged.Send(ctx, rallyMain.MainProxy(), m.From)
}

func (e *RallyE) Report(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, chainConcat, ChainLog{Sent: e.Sent, Recv: e.Rcvd}, rallyLogs.CallbackTo(rallyMain.MainProxy()))
}

func rallyLogsOf(t *testing.T, r chare.Result) []ChainLog {
	t.Helper()
	return mainOf[*RallyMain](t, r).All
}

// The pessimist protocol on ping-pongs: most sends need no commit, and
// every PE failing alone, or with its partner, or with a judge, before
// every third event (every one under FT_LONG) recovers without an
// orphan, whatever held the counts the commits were spared for.
func TestPessimistFailuresInRalliesThatSpareCommits(t *testing.T) {
	args := MixArgs{Steps: 4, Ckpt: 2}
	stride := sweepStride(3, 17)
	for _, c := range []struct {
		pes  int
		sets [][]int
		// most: most sends need no commit (on 3 PEs each PE's two
		// volleys interleave, and a switch between them is an event)
		most bool
	}{
		{2, [][]int{{0}, {1}, {0, 1}}, true},
		{3, [][]int{{0}, {1}, {2}, {0, 1}, {1, 2}}, false},
	} {
		t.Run(fmt.Sprintf("%d PEs", c.pes), func(t *testing.T) {
			cfg := chare.Config{PEs: c.pes, FT: "pessimist", Branching: 2}
			free := Run(rallyMain, args, cfg, 5)
			require.NoError(t, free.Err)
			n, err := checkChainLogs(rallyLogsOf(t, free))
			require.NoError(t, err)
			require.Equal(t, args.Steps*(rallyElems/2)*(rallyHits+1), n)
			lg := free.Stats.FT.Log
			require.Positive(t, lg.CommitsSpared)
			if c.most {
				require.Greater(t, lg.CommitsSpared, lg.Commits, "a ping-pong's sends need no commit, most of them")
			}
			t.Logf("without failures: %d deliveries, %d events, %d commits, %d sends with none", lg.Deliveries, lg.Events, lg.Commits, lg.CommitsSpared)
			sweepRally(t, args, cfg, free.Stats.Events, stride, c.sets, n)
		})
	}
}

// sweepRally runs the rally under cfg with each set of PEs failing at
// once before every stride-th of its events events, and checks that each
// run ends with the n receptions of the failure-free run and no orphan.
func sweepRally(t *testing.T, args MixArgs, cfg chare.Config, events, stride int, sets [][]int, n int) {
	t.Helper()
	runs, dir := 0, t.TempDir()
	for e := 1; e <= events; e += stride {
		for _, set := range sets {
			cf := cfg
			// (a PE and its buddy failing at once lose both copies of its
			// snapshot: the directory keeps one; a run's own)
			cf.CheckpointDir = filepath.Join(dir, strconv.Itoa(e), fmt.Sprint(set))
			for _, p := range set {
				cf.Kills = append(cf.Kills, chare.Kill{PE: p, Step: -1, Event: e})
			}
			res := Run(rallyMain, args, cf, 5)
			if Unfired(res) {
				continue
			}
			name := fmt.Sprintf("PEs %v before event %d", set, e)
			require.NoError(t, res.Err, name)
			got, err := checkChainLogs(rallyLogsOf(t, res))
			require.NoError(t, err, name)
			require.Equal(t, n, got, name)
			runs++
		}
	}
	t.Logf("%d runs", runs)
}

// The same after the checkpoint handed chunks of the sender-based log's
// records back (ftlayer.sentRecords): a checkpoint late enough that every
// PE filled one first, and failures after it replay from records handed
// out again, to PEs that failed alone or together.
func TestPessimistFailuresAfterTheLogsRecordsAreReused(t *testing.T) {
	args := MixArgs{Steps: 16, Ckpt: 10}
	stride := sweepStride(7, 29)
	cfg := chare.Config{PEs: 2, FT: "pessimist", Branching: 2}
	free := Run(rallyMain, args, cfg, 5)
	require.NoError(t, free.Err)
	n, err := checkChainLogs(rallyLogsOf(t, free))
	require.NoError(t, err)
	require.Positive(t, free.Stats.FT.Log.RecordsReused, "the checkpoint handed records back, and the sends after it took them")
	sweepRally(t, args, cfg, free.Stats.Events, stride, [][]int{{0}, {1}, {0, 1}}, n)
}
