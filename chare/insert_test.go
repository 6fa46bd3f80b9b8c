package chare_test

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
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
