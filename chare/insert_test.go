package chare_test

import (
	"sync"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// Insertions come from many PEs and DoneInserting from another, right
// after their barrier: a PE may hear DoneInserting before insertions made
// for it. Every element must still exist and be counted by the first
// reduction over the array.

type InsMain struct {
	Arr chare.ArrayProxy[InsElem]
}

type InsInserter struct{}

type InsElem struct{ V int64 }

var (
	insMain      = chare.NewMainType[InsMain]("ins.Main")
	insInserterT = chare.NewType[InsInserter, chare.ArrayProxy[InsElem]]("ins.Inserter")
	insElemT     = chare.NewType[InsElem, int64]("ins.Elem")
	insInserted  *chare.Entry[InsMain, struct{}]
	insSum       *chare.Entry[InsMain, int64]
	insCount     *chare.Entry[InsElem, struct{}]
	insOut       int64
)

func init() {
	insInserted = chare.NewEntry(insMain, (*InsMain).Inserted)
	insSum = chare.NewEntry(insMain, (*InsMain).Sum)
	insCount = chare.NewEntry(insElemT, (*InsElem).Count)
}

const insPerPE = 40

func (m *InsMain) Init(ctx *chare.Ctx, _ []string) {
	m.Arr = insElemT.NewSparseArray(ctx, []int{1 << 16})
	insInserterT.NewGroup(ctx, m.Arr)
}

func (g *InsInserter) Init(ctx *chare.Ctx, arr chare.ArrayProxy[InsElem]) {
	n, me := ctx.NumPEs(), ctx.PE()
	for i := 0; i < insPerPE; i++ {
		ix := me*insPerPE + i
		insElemT.Insert(ctx, arr, chare.Idx(ix), (ix*7+3)%n, int64(ix))
	}
	chare.Contribute(ctx, chare.Barrier, struct{}{}, insInserted.CallbackTo(insMain.MainProxy()))
}

func (m *InsMain) Inserted(ctx *chare.Ctx, _ struct{}) {
	m.Arr.DoneInserting(ctx)
	insCount.Broadcast(ctx, m.Arr, struct{}{})
}

func (e *InsElem) Init(ctx *chare.Ctx, v int64) { e.V = v }

func (e *InsElem) Count(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, chare.SumInt64, e.V, insSum.CallbackTo(insMain.MainProxy()))
}

func (m *InsMain) Sum(ctx *chare.Ctx, v int64) {
	insOut = v
	ctx.Exit(0)
}

func TestInsertionsRacingDoneInserting(t *testing.T) {
	for run := 0; run < 20; run++ {
		for _, pes := range []int{2, 4} {
			insOut = -1
			res := chare.Run(insMain, chare.Config{PEs: pes})
			require.NoError(t, res.Err, "run %d on %d PEs", run, pes)
			total := int64(pes * insPerPE)
			require.Equal(t, total*(total-1)/2, insOut, "every inserted element counted")
		}
	}
}

// DoneInserting's question, the counts and the totals travel the spanning
// tree over every PE: each PE sends them to its tree neighbours alone
// (flat, PE 0 asked every PE and heard from every PE, a vector of every
// PE's counts each), and the elements are all counted.
func TestDoneInsertingTravelsTheTree(t *testing.T) {
	for _, c := range []struct{ pes, branching int }{{17, 2}, {23, 4}} {
		var mu sync.Mutex
		sent := map[[2]int]int{}
		cfg := chare.Config{PEs: c.pes, Branching: c.branching, FT: "camel"}
		cfg.WrapHook = func(me int, h ftlayer.Hook, _ ftlayer.Trees) ftlayer.Hook {
			return &sendsOf{Wrapper: ftlayer.Wrapper{Hook: h}, me: me, typ: "mgr.doneInserting", mu: &mu, sent: sent}
		}
		insOut = -1
		res := chare.Run(insMain, cfg)
		require.NoError(t, res.Err)
		total := int64(c.pes * insPerPE)
		require.Equal(t, total*(total-1)/2, insOut, "every inserted element counted")
		tree := manager.PETreeIn(c.pes, 0, c.branching, manager.Layout{PEs: c.pes, Procs: 1})
		near := func(a, b int) bool { return a != 0 && tree.Parent(a) == b || b != 0 && tree.Parent(b) == a }
		require.NotEmpty(t, sent)
		for e, n := range sent {
			require.True(t, e[0] == e[1] || near(e[0], e[1]), "%d PEs, branching %d: PE %d sent DoneInserting's messages to PE %d, not a tree neighbour", c.pes, c.branching, e[0], e[1])
			require.LessOrEqual(t, n, 2, "PE %d to PE %d: the question and the totals down, or the counts up", e[0], e[1])
		}
	}
}

// sendsOf counts the messages of one type a PE sends, by sender and
// destination.
type sendsOf struct {
	ftlayer.Wrapper
	me   int
	typ  string
	mu   *sync.Mutex
	sent map[[2]int]int
}

func (h *sendsOf) Send(dst int, role ftlayer.Role, g, num uint64, first bool, env *pe.Envelope) error {
	if pe.TypeName(env.Type) == h.typ {
		h.mu.Lock()
		h.sent[[2]int{h.me, dst}]++
		h.mu.Unlock()
	}
	return h.Wrapper.Send(dst, role, g, num, first, env)
}
