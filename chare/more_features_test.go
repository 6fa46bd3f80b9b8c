package chare_test

import (
	"fmt"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// A user placement function, user reducers (exact and canonical), a section
// from an index list, a callback that broadcasts, and non-default trees.

type MoreMain struct {
	Got []string
}

type Placed struct {
	Seen []string
}

var (
	moreMain  = chare.NewMainType[MoreMain]("more.Main")
	placedT   = chare.NewType[Placed, struct{}]("more.Placed")
	placedGo  *chare.Entry[Placed, int]
	placedSec *chare.Entry[Placed, chare.SectionProxy[Placed]]
	placedRes *chare.Entry[Placed, string]
	moreStr   *chare.Entry[MoreMain, string]
	moreInt   *chare.Entry[MoreMain, int64]

	// Everything on the last PE: index i goes to PE n-1.
	lastPE = chare.RegisterMap("more.lastPE", func(ix chare.Index, bounds []int, n int) int { return n - 1 })

	// Exact: bitwise or of masks (associative and commutative to the bit).
	orMask = chare.NewReducer("or-mask", func(a, b int64) int64 { return a | b }, true)
	// Canonical: string join, whose order matters.
	joinStr = chare.NewReducer("join", func(a, b string) string { return a + "," + b }, false)
)

func init() {
	placedGo = chare.NewEntry(placedT, (*Placed).Go)
	placedSec = chare.NewEntry(placedT, (*Placed).InSection)
	placedRes = chare.NewEntry(placedT, (*Placed).Result)
	moreStr = chare.NewEntry(moreMain, (*MoreMain).Str)
	moreInt = chare.NewEntry(moreMain, (*MoreMain).Int)
}

func (p *Placed) Init(*chare.Ctx, struct{}) {}

func (p *Placed) Go(ctx *chare.Ctx, round int) {
	i := int64(ctx.Index().C[0])
	cb := moreInt.CallbackTo(moreMain.MainProxy())
	if round == 0 {
		chare.Contribute(ctx, orMask, int64(1)<<i|int64(ctx.PE())<<40, cb)
		return
	}
	// The joined string goes back to every element by a broadcast callback.
	chare.Contribute(ctx, joinStr, fmt.Sprint(i), placedRes.CallbackBroadcast(chare.ThisArray[Placed](ctx)))
}

func (p *Placed) Result(ctx *chare.Ctx, s string) {
	if ctx.Index().C[0] == 0 {
		moreStr.Send(ctx, moreMain.MainProxy(), "broadcast result "+s)
	}
}

// InSection contributes once per delivery: [2] is listed twice, so it gets
// the multicast twice and contributes twice to each section reduction.
func (p *Placed) InSection(ctx *chare.Ctx, sec chare.SectionProxy[Placed]) {
	chare.ContributeSection(ctx, sec, joinStr, fmt.Sprint(ctx.Index().C[0]), moreStr.CallbackTo(moreMain.MainProxy()))
}

func (m *MoreMain) Str(ctx *chare.Ctx, s string) { m.record(ctx, s) }
func (m *MoreMain) Int(ctx *chare.Ctx, v int64) {
	m.record(ctx, fmt.Sprintf("mask %x pes %d", v&(1<<40-1), v>>40))
}

func (m *MoreMain) record(ctx *chare.Ctx, s string) {
	m.Got = append(m.Got, s)
	if len(m.Got) == 3 {
		moreOut = m.Got
		ctx.Exit(0)
	}
}

var moreOut []string

func (m *MoreMain) Init(ctx *chare.Ctx, args []string) {
	arr := placedT.NewArray(ctx, []int{12}, struct{}{}, lastPE)
	placedGo.Broadcast(ctx, arr, 0)
	placedGo.Broadcast(ctx, arr, 1)
	sec := arr.Section(ctx, []chare.Index{chare.Idx(7), chare.Idx(2), chare.Idx(11), chare.Idx(2)})
	placedSec.Multicast(ctx, sec, sec)
}

func TestUserMapReducersSectionListBroadcastCallback(t *testing.T) {
	for _, c := range []struct{ pes, k int }{{3, 2}, {4, 3}, {1, 4}} {
		t.Run(fmt.Sprintf("p%d/k%d", c.pes, c.k), func(t *testing.T) {
			moreOut = nil
			res := chare.Run(moreMain, chare.Config{PEs: c.pes, Branching: c.k, WireCheck: c.pes == 3})
			require.NoError(t, res.Err)
			// Every element sat on the last PE (the user map), so the or of
			// the PE bits is that PE.
			require.ElementsMatch(t, []string{
				fmt.Sprintf("mask fff pes %d", c.pes-1),
				"broadcast result 0,1,2,3,4,5,6,7,8,9,10,11",
				"2,2,7,11",
			}, moreOut)
		})
	}
}
