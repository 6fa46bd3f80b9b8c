package chare_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/manager"
	"github.com/stretchr/testify/require"
)

// An element whose type misspells ResumeFromSync calls AtSync: the run
// ends at once with one line naming the type, ResumeFromSync and the
// method it has instead. It used to wait at AtSync for ever, and the run
// ended "went quiet before the program ended it", naming nothing.
type MisspeltMain struct{}

type Misspelt struct{ Steps int }

var (
	misspeltMain = chare.NewMainType[MisspeltMain]("wt.MisspeltMain")
	misspeltT    = chare.NewType[Misspelt, struct{}]("wt.Misspelt")
	misspeltStep *chare.Entry[Misspelt, int]
)

func init() { misspeltStep = chare.NewEntry(misspeltT, (*Misspelt).Step) }

func (*MisspeltMain) Init(ctx *chare.Ctx, _ []string) {
	misspeltStep.Broadcast(ctx, misspeltT.NewArray(ctx, []int{4}, struct{}{}), 1)
}

func (*Misspelt) Init(*chare.Ctx, struct{}) {}

func (w *Misspelt) Step(ctx *chare.Ctx, n int) { w.Steps += n; ctx.AtSync() }

func (w *Misspelt) ResumeFromSynch(ctx *chare.Ctx) {
	misspeltStep.Send(ctx, chare.This[Misspelt](ctx), 1)
}

func TestAMisspeltResumeFromSyncIsNamed(t *testing.T) {
	for _, pes := range []int{1, 2} {
		res := chare.Run(misspeltMain, chare.Config{PEs: pes})
		require.Equal(t, 1, res.Code, "%v", res.Err)
		require.ErrorContains(t, res.Err, "AtSync: *chare_test.Misspelt has no method ResumeFromSync(ctx *chare.Ctx), so nothing would resume it once the load-balancing step is done (it has ResumeFromSynch(*chare.Ctx): misspelt, or another signature?)")
		require.NotContains(t, res.Err.Error(), "\n", "one line")
	}
}

// An element type with no ResumeFromSync at all may be driven by other
// messages after AtSync (LeanMD's computes are): the run goes on; if
// nothing drives it, the run goes quiet, and its one line says that the
// balancing step resumed elements with nothing to run.
type UnresumedMain struct{}

type Unresumed struct{}

var (
	unresumedMain = chare.NewMainType[UnresumedMain]("wt.UnresumedMain")
	unresumedT    = chare.NewType[Unresumed, struct{}]("wt.Unresumed")
	unresumedSync *chare.Entry[Unresumed, struct{}]
)

func init() { unresumedSync = chare.NewEntry(unresumedT, (*Unresumed).Sync) }

func (*UnresumedMain) Init(ctx *chare.Ctx, _ []string) {
	unresumedSync.Broadcast(ctx, unresumedT.NewArray(ctx, []int{4}, struct{}{}), struct{}{})
}

func (*Unresumed) Init(*chare.Ctx, struct{}) {}

func (*Unresumed) Sync(ctx *chare.Ctx, _ struct{}) { ctx.AtSync() }

func TestElementsResumedWithNothingToRunAreNamed(t *testing.T) {
	res := chare.Run(unresumedMain, chare.Config{PEs: 1})
	require.Equal(t, 1, res.Code, "%v", res.Err)
	require.EqualError(t, res.Err, "the run went quiet before the program ended it (no Exit came, and the program did not say that quiescence ends it: chare.EndWhenQuiet); waiting: 4 elements of wt.Unresumed here were resumed after AtSync with nothing to run: *chare_test.Unresumed has no method ResumeFromSync(ctx *chare.Ctx) (an element other messages drive needs none)")
	res = chare.Run(unresumedMain, chare.Config{PEs: 2})
	require.ErrorContains(t, res.Err, "; waiting: 2 elements of wt.Unresumed here were resumed after AtSync with nothing to run: *chare_test.Unresumed has no method ResumeFromSync(ctx *chare.Ctx) (an element other messages drive needs none) (and 1 more: see the dump)")
}

// The question of what is unfinished goes down the tree over every PE
// and the answers come back up it: every PE's, in PE order, and the
// first waiting one names the rest.
func TestAQuietRunAsksEveryPEAlongTheTree(t *testing.T) {
	for _, c := range []struct{ pes, branching int }{{7, 2}, {12, 3}, {5, 8}} {
		res := chare.Run(unresumedMain, chare.Config{PEs: c.pes, Branching: c.branching})
		require.Equal(t, 1, res.Code, "%v", res.Err)
		require.ErrorContains(t, res.Err, "; waiting: 1 elements of wt.Unresumed here were resumed after AtSync with nothing to run")
		require.ErrorContains(t, res.Err, "(and 3 more: see the dump)", "the 4 PEs holding an element each")
		d, at := chare.DumpOf(res.Err), 0
		for p := range c.pes {
			i := strings.Index(d, fmt.Sprintf("PE %d: ", p))
			require.Greater(t, i, at-1, "%d PEs, branching %d: PE %d's description, after PE %d's: %s", c.pes, c.branching, p, p-1, d)
			at = i
		}
	}
}

// A run that went quiet describes what its elements wait for: each Gather
// waiting, with the number, the count it waits for and has, and what
// else it holds; and the elements at AtSync, with those not there yet.
type WaitsMain struct{}

type Waiting struct {
	In    chare.Gather[int]
	Inner struct{ Halo chare.Gather[int] }
}

type waitMsg struct {
	Ref   int64
	Inner bool
}

var (
	waitsMain = chare.NewMainType[WaitsMain]("wt.WaitsMain")
	waitingT  = chare.NewType[Waiting, struct{}]("wt.Waiting")
	waitPut   *chare.Entry[Waiting, waitMsg]
	waitWait  *chare.Entry[Waiting, int64]
	waitSync  *chare.Entry[Waiting, struct{}]
	waitGot   *chare.Continuation[Waiting, int]
)

func init() {
	waitPut = chare.NewEntry(waitingT, (*Waiting).Put)
	waitWait = chare.NewEntry(waitingT, (*Waiting).Wait)
	waitSync = chare.NewEntry(waitingT, (*Waiting).Sync)
	waitGot = chare.NewContinuation(waitingT, (*Waiting).Got)
}

func (*WaitsMain) Init(ctx *chare.Ctx, _ []string) {
	a := waitingT.NewArray(ctx, []int{3}, struct{}{})
	waitWait.Send(ctx, a.At(0), 7)
	waitPut.Send(ctx, a.At(0), waitMsg{Ref: 7})
	waitPut.Send(ctx, a.At(0), waitMsg{Ref: 9})
	waitPut.Send(ctx, a.At(0), waitMsg{Ref: 9})
	waitPut.Send(ctx, a.At(1), waitMsg{Ref: 3, Inner: true})
	waitSync.Send(ctx, a.At(1), struct{}{})
	waitSync.Send(ctx, a.At(2), struct{}{})
}

func (*Waiting) Init(*chare.Ctx, struct{}) {}

func (w *Waiting) Put(ctx *chare.Ctx, m waitMsg) {
	if m.Inner {
		w.Inner.Halo.Put(ctx, m.Ref, 0)
		chare.When(ctx, &w.Inner.Halo, m.Ref, 4, waitGot)
		return
	}
	w.In.Put(ctx, m.Ref, 0)
}

func (w *Waiting) Wait(ctx *chare.Ctx, ref int64) { chare.When(ctx, &w.In, ref, 2, waitGot) }

func (w *Waiting) Sync(ctx *chare.Ctx, _ struct{}) { ctx.AtSync() }

func (w *Waiting) Got(*chare.Ctx, []int) {}

func (w *Waiting) ResumeFromSync(*chare.Ctx) {}

func TestAQuietRunsDumpNamesGathersAndAtSync(t *testing.T) {
	res := chare.Run(waitsMain, chare.Config{PEs: 1})
	require.Equal(t, 1, res.Code, "%v", res.Err)
	var q *manager.QuietError
	require.ErrorAs(t, res.Err, &q)
	d := chare.DumpOf(res.Err)
	require.Contains(t, d, "wt.Waiting[0] waits in its Gather In for 2 messages numbered 7 (1 in), then runs wt.Waiting.Got; it holds 2 numbered 9\n")
	require.Contains(t, d, "wt.Waiting[1] waits in its Gather Inner.Halo for 4 messages numbered 3 (1 in), then runs wt.Waiting.Got\n")
	require.Contains(t, d, "2 of the 3 elements of wt.Waiting here wait at AtSync for the array's load-balancing step: wt.Waiting[1], wt.Waiting[2]; not there yet: wt.Waiting[0]\n")
}
