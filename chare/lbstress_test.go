package chare_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// The balancing stress program: an array whose work is skewed (and the
// skew drifts every round) goes through AtSync every round, and every
// strategy moves its elements, while another array keeps sending them
// point-to-point messages, broadcasts and section multicasts in bursts
// spread over the balancing step. Every message must arrive exactly once
// (a duplicate fails the run, a loss shows in the totals), and the run
// must end (a deadlock fails it through the watchdog).

type lbsParams struct {
	X, Y, Rounds, Sends, Burst, Pumps int
	Seed                              uint64
}

func (p lbsParams) elems() int { return p.X * p.Y }

type LBSMain struct {
	P        lbsParams
	Elems    chare.ArrayProxy[LBSElem]
	PumpArr  chare.ArrayProxy[LBSPump]
	Sec      chare.SectionProxy[LBSElem]
	Round    int
	Resumed  bool
	Pumped   int
	Failures []string
	Done     bool
	SecSums  []int64
}

type LBSElem struct {
	P                     lbsParams
	Seen                  map[uint64]bool
	Count, Hash           int64
	Bcasts, Mcasts, Spent int64
}

type LBSPump struct{ P lbsParams }

type lbsRound struct {
	Round int
	Sec   chare.SectionProxy[LBSElem]
	Elems chare.ArrayProxy[LBSElem]
}

type lbsChunk struct {
	lbsRound
	Next int
}

type lbsHit struct{ From, Seq uint32 }

type lbsMcastMsg struct {
	lbsHit
	Sec chare.SectionProxy[LBSElem]
}

var (
	lbsMainT   = chare.NewMainTypeOf[LBSMain, lbsParams]("lbstress.Main")
	lbsElemT   = chare.NewType[LBSElem, lbsParams]("lbstress.Elem")
	lbsPumpT   = chare.NewType[LBSPump, lbsParams]("lbstress.Pump")
	lbsGo      *chare.Entry[LBSElem, lbsRound]
	lbsHitE    *chare.Entry[LBSElem, lbsHit]
	lbsBcast   *chare.Entry[LBSElem, lbsHit]
	lbsMcast   *chare.Entry[LBSElem, lbsMcastMsg]
	lbsSecSum  *chare.Entry[LBSMain, int64]
	lbsReport  *chare.Entry[LBSElem, chare.Callback[[]int64]]
	lbsPumpGo  *chare.Entry[LBSPump, lbsRound]
	lbsChunkE  *chare.Entry[LBSPump, lbsChunk]
	lbsResumed *chare.Entry[LBSMain, int64]
	lbsPumpedE *chare.Entry[LBSMain, int64]
	lbsQuiet   *chare.Entry[LBSMain, struct{}]
	lbsTotals  *chare.Entry[LBSMain, []int64]
)

func init() {
	lbsGo = chare.NewEntry(lbsElemT, (*LBSElem).Go)
	lbsHitE = chare.NewEntry(lbsElemT, (*LBSElem).Hit)
	lbsBcast = chare.NewEntry(lbsElemT, (*LBSElem).Bcast)
	lbsMcast = chare.NewEntry(lbsElemT, (*LBSElem).Mcast)
	lbsSecSum = chare.NewEntry(lbsMainT, (*LBSMain).SecSum)
	lbsReport = chare.NewEntry(lbsElemT, (*LBSElem).Report)
	lbsPumpGo = chare.NewEntry(lbsPumpT, (*LBSPump).Go)
	lbsChunkE = chare.NewEntry(lbsPumpT, (*LBSPump).Chunk)
	lbsResumed = chare.NewEntry(lbsMainT, (*LBSMain).AllResumed)
	lbsPumpedE = chare.NewEntry(lbsMainT, (*LBSMain).PumpDone)
	lbsQuiet = chare.NewEntry(lbsMainT, (*LBSMain).Quiet)
	lbsTotals = chare.NewEntry(lbsMainT, (*LBSMain).Totals)
}

func (m *LBSMain) Init(ctx *chare.Ctx, p lbsParams) {
	m.P = p
	m.Elems = lbsElemT.NewArray(ctx, []int{p.X, p.Y}, p, chare.BlockMap())
	m.PumpArr = lbsPumpT.NewArray(ctx, []int{p.Pumps}, p)
	m.Sec = m.Elems.SectionWhere(ctx, func(ix chare.Index) bool { return lbsLin(p, ix)%3 == 0 })
	m.start(ctx)
}

func (m *LBSMain) start(ctx *chare.Ctx) {
	r := lbsRound{Round: m.Round, Sec: m.Sec, Elems: m.Elems}
	m.Resumed, m.Pumped = false, 0
	lbsGo.Broadcast(ctx, m.Elems, r)
	lbsPumpGo.Broadcast(ctx, m.PumpArr, r)
}

func (m *LBSMain) AllResumed(ctx *chare.Ctx, _ int64) { m.Resumed = true; m.next(ctx) }
func (m *LBSMain) PumpDone(ctx *chare.Ctx, n int64)   { m.Pumped = int(n); m.next(ctx) }

func (m *LBSMain) next(ctx *chare.Ctx) {
	if !m.Resumed || m.Pumped < m.P.Pumps {
		return
	}
	if m.Round++; m.Round < m.P.Rounds {
		m.start(ctx)
		return
	}
	chare.StartQD(ctx, lbsQuiet.CallbackTo(lbsMainT.MainProxy()))
}

func (m *LBSMain) SecSum(ctx *chare.Ctx, v int64) { m.SecSums = append(m.SecSums, v) }

func (m *LBSMain) Quiet(ctx *chare.Ctx, _ struct{}) {
	lbsReport.Broadcast(ctx, m.Elems, lbsTotals.CallbackTo(lbsMainT.MainProxy()))
}

func (m *LBSMain) Totals(ctx *chare.Ctx, got []int64) {
	p := m.P
	var wantHash int64
	for lin := range p.elems() {
		for s := range p.Rounds * p.Sends {
			wantHash += mixKey(uint64(lin)<<32 | uint64(s))
		}
	}
	for k := range p.Pumps {
		for s := range p.Rounds * p.Burst {
			wantHash += mixKey(uint64(1_000_000+k)<<32 | uint64(s))
		}
	}
	members, memberSum := 0, int64(0)
	for lin := range p.elems() {
		if lin%3 == 0 {
			members++
			memberSum += int64(lin)
		}
	}
	check := func(ok bool, format string, args ...any) {
		if !ok {
			m.Failures = append(m.Failures, fmt.Sprintf(format, args...))
		}
	}
	want := int64(p.Rounds * (p.elems()*p.Sends + p.Pumps*p.Burst))
	check(got[0] == want, "delivered %d point-to-point messages, want %d", got[0], want)
	check(got[1] == wantHash, "hash of delivered messages %d, want %d", got[1], wantHash)
	check(got[2] == int64(p.elems()*p.Rounds*p.Pumps), "%d broadcast deliveries, want %d", got[2], p.elems()*p.Rounds*p.Pumps)
	check(got[3] == int64(members*p.Rounds*p.Pumps), "%d multicast deliveries, want %d", got[3], members*p.Rounds*p.Pumps)
	check(len(m.SecSums) == p.Rounds*p.Pumps, "%d section reductions, want %d", len(m.SecSums), p.Rounds*p.Pumps)
	for i, v := range m.SecSums {
		check(v == memberSum, "section reduction %d: %d, want %d", i, v, memberSum)
	}
	m.Done = true
	ctx.Exit(0)
}

func lbsLin(p lbsParams, ix chare.Index) int { return int(ix.C[0])*p.Y + int(ix.C[1]) }

func (e *LBSElem) Init(_ *chare.Ctx, p lbsParams) { e.P, e.Seen = p, map[uint64]bool{} }

// Go works for a time that depends on the element and drifts with the
// round (a quarter of the elements ten times heavier), sends, and waits
// for the balancer.
func (e *LBSElem) Go(ctx *chare.Ctx, r lbsRound) {
	p := e.P
	lin := lbsLin(p, ctx.Index())
	n := 2000
	if (lin+r.Round*p.elems()/5)%p.elems() < p.elems()/4 {
		n *= 10
	}
	x := 1.0
	for i := range n {
		x = x*1.0000001 + float64(i&7)
	}
	e.Spent += int64(x) & 1
	rng := rand.New(rand.NewPCG(p.Seed^uint64(lin), uint64(r.Round)))
	for k := range p.Sends {
		to := r.Elems.At(rng.IntN(p.X), rng.IntN(p.Y))
		lbsHitE.Send(ctx, to, lbsHit{From: uint32(lin), Seq: uint32(r.Round*p.Sends + k)})
	}
	ctx.AtSync()
}

func (e *LBSElem) ResumeFromSync(ctx *chare.Ctx) {
	chare.Contribute(ctx, chare.SumInt64, 1, lbsResumed.CallbackTo(lbsMainT.MainProxy()))
}

func (e *LBSElem) seen(ctx *chare.Ctx, kind uint64, h lbsHit) bool {
	key := kind<<62 | uint64(h.From)<<32 | uint64(h.Seq)
	if e.Seen[key] {
		ctx.Fail(fmt.Errorf("message %d from %d (kind %d) delivered twice", h.Seq, h.From, kind))
		return false
	}
	e.Seen[key] = true
	return true
}

func (e *LBSElem) Hit(ctx *chare.Ctx, h lbsHit) {
	if e.seen(ctx, 0, h) {
		e.Count++
		e.Hash += mixKey(uint64(h.From)<<32 | uint64(h.Seq))
	}
}

func (e *LBSElem) Bcast(ctx *chare.Ctx, h lbsHit) {
	if e.seen(ctx, 1, h) {
		e.Bcasts++
	}
}

// Mcast counts a multicast and contributes to a section reduction: many
// are in flight, or held at AtSync, while the section is set up again.
func (e *LBSElem) Mcast(ctx *chare.Ctx, h lbsMcastMsg) {
	if e.seen(ctx, 2, h.lbsHit) {
		e.Mcasts++
	}
	chare.ContributeSection(ctx, h.Sec, chare.SumInt64, int64(lbsLin(e.P, ctx.Index())), lbsSecSum.CallbackTo(lbsMainT.MainProxy()))
}

func (e *LBSElem) Report(ctx *chare.Ctx, cb chare.Callback[[]int64]) {
	chare.Contribute(ctx, chare.SumInt64s, []int64{e.Count, e.Hash, e.Bcasts, e.Mcasts}, cb)
}

func (u *LBSPump) Init(_ *chare.Ctx, p lbsParams) { u.P = p }

func (u *LBSPump) Go(ctx *chare.Ctx, r lbsRound) { u.Chunk(ctx, lbsChunk{lbsRound: r}) }

// Chunk sends the next few of the round's messages and passes the turn
// to itself, so that the round's traffic is spread over the time the
// elements spend at AtSync and moving.
func (u *LBSPump) Chunk(ctx *chare.Ctx, c lbsChunk) {
	p := u.P
	k := int(ctx.Index().C[0])
	from := uint32(1_000_000 + k)
	rng := rand.New(rand.NewPCG(p.Seed^uint64(from), uint64(c.Round*p.Burst+c.Next)))
	end := min(c.Next+7, p.Burst)
	for i := c.Next; i < end; i++ {
		lbsHitE.Send(ctx, c.Elems.At(rng.IntN(p.X), rng.IntN(p.Y)), lbsHit{From: from, Seq: uint32(c.Round*p.Burst + i)})
	}
	if c.Next == 0 {
		lbsBcast.Broadcast(ctx, c.Elems, lbsHit{From: from, Seq: uint32(c.Round)})
	}
	if end >= p.Burst/2 && c.Next < p.Burst/2 {
		lbsMcast.Multicast(ctx, c.Sec, lbsMcastMsg{lbsHit: lbsHit{From: from, Seq: uint32(c.Round)}, Sec: c.Sec})
	}
	if end < p.Burst {
		c.Next = end
		lbsChunkE.Send(ctx, chare.ThisArray[LBSPump](ctx).At(k), c)
		return
	}
	chare.Contribute(ctx, chare.SumInt64, 1, lbsPumpedE.CallbackTo(lbsMainT.MainProxy()))
}

func TestBalancingStepsLoseNothingInFlight(t *testing.T) {
	p := lbsParams{X: 8, Y: 12, Rounds: 4, Sends: 3, Burst: 60, Pumps: 3, Seed: 1}
	for _, strategy := range []string{"greedy", "refine", "greedyrefine", "graph", "random", "rotate", "dummy", "GreedyLB,RefineLB"} {
		for _, pes := range []int{2, 3, 4} {
			some := strategy == "rotate" || strategy == "graph"
			if pes != 3 && !some && os.Getenv("CHARMGO_TRANSPORT_CHAOS") == "" {
				continue // 3 PEs for every strategy; 2 and 4 for some (all of them under the chaos transport)
			}
			t.Run(fmt.Sprintf("%s on %d PEs", strategy, pes), func(t *testing.T) {
				p.Seed = uint64(pes*100 + len(strategy))
				res := chare.RunWith(lbsMainT, p, chare.Config{PEs: pes, Balancer: strategy, WireCheck: strategy == "graph" && pes == 2})
				require.NoError(t, res.Err)
				require.Equal(t, 0, res.Code)
				m := res.Main.(*LBSMain)
				require.True(t, m.Done, "main did not finish")
				require.Empty(t, m.Failures)
				require.NotNil(t, res.Stats.LB)
				require.Equal(t, p.Rounds, res.Stats.LB.Steps)
				if strategy == "rotate" {
					// every element moves every round: multicasts in flight
					// reached PEs their members had left
					require.Equal(t, p.Rounds*p.elems(), res.Stats.LB.Moved)
					t.Logf("forwarded deliveries %d, sections set up again %d", res.Stats.Ops.ForwardedDeliveries, res.Stats.LB.SectionsMoved)
				}
				if strategy == "random" {
					require.Positive(t, res.Stats.LB.Moved)
				}
			})
		}
	}
}
