package chare_test

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// The stress program: thousands of chares send to random chares, migrate at
// random (by themselves and by the runtime), and run reductions over the
// whole array and over a section while all of that is in flight, several
// rounds at once. It checks that every message is delivered exactly once
// (a duplicate fails the run, a loss shows in the counts) and that every
// reduction result is exact, floating-point sums included.

const (
	stressX, stressY = 40, 50 // 2,000 chares
	stressSends      = 5      // random sends per chare per round
	stressRounds     = 4
	stressMigrate    = 0.15 // chance a chare moves itself after a round
)

var stressSeed uint64 = 1

type StressMain struct {
	Arr      chare.ArrayProxy[StressElem]
	Sec      chare.SectionProxy[StressElem]
	RedGot   []float64
	SecGot   []int64
	Failures []string
}

type StressElem struct {
	Seen  map[uint64]bool
	Count int64
	Hash  int64
}

type GoMsg struct {
	Round int
	Sec   chare.SectionProxy[StressElem]
}

type HitMsg struct {
	From uint32
	Seq  uint32
}

var (
	stressMain  = chare.NewMainType[StressMain]("stress.Main")
	stressElems = chare.NewType[StressElem, struct{}]("stress.Elem")
	stressGo    *chare.Entry[StressElem, GoMsg]
	stressHit   *chare.Entry[StressElem, HitMsg]
	stressRep   *chare.Entry[StressElem, chare.Callback[[]int64]]
	stressRed   *chare.Entry[StressMain, float64]
	stressSecR  *chare.Entry[StressMain, int64]
)

func init() {
	stressGo = chare.NewEntry(stressElems, (*StressElem).Go)
	stressHit = chare.NewEntry(stressElems, (*StressElem).Hit)
	stressRep = chare.NewEntry(stressElems, (*StressElem).Report)
	stressRed = chare.NewEntry(stressMain, (*StressMain).RedDone)
	stressSecR = chare.NewEntry(stressMain, (*StressMain).SecDone)
}

func linearOf(ix chare.Index) uint32 { return uint32(ix.C[0])*stressY + uint32(ix.C[1]) }

func stressValue(lin uint32, round int) float64 {
	// Values of very different magnitudes, so the order of a float sum shows.
	return math.Ldexp(float64(lin%97)+0.1, int(lin%61)-30) * float64(round+1)
}

func mixKey(k uint64) int64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return int64(k >> 1)
}

func (e *StressElem) Init(*chare.Ctx, struct{}) { e.Seen = map[uint64]bool{} }

func (e *StressElem) Go(ctx *chare.Ctx, m GoMsg) {
	lin := linearOf(ctx.Index())
	rng := rand.New(rand.NewPCG(stressSeed^uint64(lin), uint64(m.Round)))
	arr := chare.ThisArray[StressElem](ctx)
	for k := 0; k < stressSends; k++ {
		to := arr.At(rng.IntN(stressX), rng.IntN(stressY))
		stressHit.Send(ctx, to, HitMsg{From: lin, Seq: uint32(m.Round*stressSends + k)})
	}
	chare.Contribute(ctx, chare.SumFloat64, stressValue(lin, m.Round), stressRed.CallbackTo(stressMain.MainProxy()))
	if lin%7 == 0 {
		chare.ContributeSection(ctx, m.Sec, chare.SumInt64, int64(lin)*int64(m.Round+1), stressSecR.CallbackTo(stressMain.MainProxy()))
	}
	if rng.Float64() < stressMigrate {
		ctx.Migrate(rng.IntN(ctx.NumPEs()))
	}
}

func (e *StressElem) Hit(ctx *chare.Ctx, h HitMsg) {
	key := uint64(h.From)<<32 | uint64(h.Seq)
	if e.Seen[key] {
		ctx.Fail(fmt.Errorf("message %d from %d delivered twice", h.Seq, h.From))
		return
	}
	e.Seen[key] = true
	e.Count++
	e.Hash += mixKey(key)
}

func (e *StressElem) Report(ctx *chare.Ctx, cb chare.Callback[[]int64]) {
	chare.Contribute(ctx, chare.SumInt64s, []int64{e.Count, e.Hash}, cb)
}

func (m *StressMain) RedDone(ctx *chare.Ctx, v float64) { m.RedGot = append(m.RedGot, v) }
func (m *StressMain) SecDone(ctx *chare.Ctx, v int64)   { m.SecGot = append(m.SecGot, v) }

func (m *StressMain) Init(ctx *chare.Ctx, args []string) {
	m.Arr = stressElems.NewArray(ctx, []int{stressX, stressY}, struct{}{}, chare.RoundRobinMap())
	m.Sec = m.Arr.SectionWhere(ctx, func(ix chare.Index) bool { return linearOf(ix)%7 == 0 })
	rng := rand.New(rand.NewPCG(stressSeed, 99))
	for r := 0; r < stressRounds; r++ {
		stressGo.Broadcast(ctx, m.Arr, GoMsg{Round: r, Sec: m.Sec})
		for i := 0; i < 100; i++ { // the runtime moves chares too
			m.Arr.At(rng.IntN(stressX), rng.IntN(stressY)).Migrate(ctx, rng.IntN(ctx.NumPEs()))
		}
	}
	qd := chare.NewFuture[struct{}](ctx)
	chare.StartQD(ctx, qd.Callback())
	if _, err := qd.Get(ctx); err != nil {
		ctx.Fail(err)
		return
	}
	tot := chare.NewFuture[[]int64](ctx)
	stressRep.Broadcast(ctx, m.Arr, tot.Callback())
	got, err := tot.Get(ctx)
	if err != nil {
		ctx.Fail(err)
		return
	}
	// What must have happened, computed here from the same definitions.
	var wantHash int64
	for lin := uint32(0); lin < stressX*stressY; lin++ {
		for s := uint32(0); s < stressRounds*stressSends; s++ {
			wantHash += mixKey(uint64(lin)<<32 | uint64(s))
		}
	}
	check := func(ok bool, format string, args ...any) {
		if !ok {
			m.Failures = append(m.Failures, fmt.Sprintf(format, args...))
		}
	}
	check(got[0] == stressX*stressY*stressSends*stressRounds, "delivered %d messages, want %d", got[0], stressX*stressY*stressSends*stressRounds)
	check(got[1] == wantHash, "hash of delivered messages %d, want %d", got[1], wantHash)
	check(len(m.RedGot) == stressRounds, "%d array reductions, want %d", len(m.RedGot), stressRounds)
	check(len(m.SecGot) == stressRounds, "%d section reductions, want %d", len(m.SecGot), stressRounds)
	for r := 0; r < stressRounds && r < len(m.RedGot) && r < len(m.SecGot); r++ {
		// the exact sum rounded once: SumFloat64 loses nothing of terms
		// within 2^64 of the largest (these are within 2^70 / 2^20)
		exact := new(big.Float).SetPrec(2048)
		var sec int64
		for lin := uint32(0); lin < stressX*stressY; lin++ {
			exact.Add(exact, new(big.Float).SetFloat64(stressValue(lin, r)))
			if lin%7 == 0 {
				sec += int64(lin) * int64(r+1)
			}
		}
		f, _ := exact.Float64()
		check(math.Float64bits(m.RedGot[r]) == math.Float64bits(f), "round %d float sum %x, want %x", r, math.Float64bits(m.RedGot[r]), math.Float64bits(f))
		check(m.SecGot[r] == sec, "round %d section sum %d, want %d", r, m.SecGot[r], sec)
	}
	stressReport = m.Failures
	ctx.Exit(0)
}

var stressReport []string

func TestStressRandomSendsMigrationsReductions(t *testing.T) {
	for _, c := range []struct {
		pes, k int
		wire   bool
		seed   uint64
	}{{4, 4, false, 1}, {3, 2, false, 2}, {2, 4, true, 3}, {1, 4, false, 4}, {5, 3, false, 5}} {
		t.Run(fmt.Sprintf("p%d/k%d/wire=%v/seed%d", c.pes, c.k, c.wire, c.seed), func(t *testing.T) {
			stressSeed = c.seed
			stressReport = []string{"main did not finish"}
			res := chare.Run(stressMain, chare.Config{PEs: c.pes, Branching: c.k, WireCheck: c.wire})
			require.NoError(t, res.Err)
			require.Equal(t, 0, res.Code)
			require.Empty(t, stressReport)
		})
	}
}
