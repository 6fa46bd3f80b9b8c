package chare

import (
	"fmt"
	"slices"
	"testing"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// gtElem waits for the messages of refs 1, 2, 3 in turn, as an element
// of an iterative code does: its continuation for ref r records what it
// got and waits for r+1, except after ref 2, where it stops as at AtSync
// until resumed.
type gtElem struct {
	In     Gather[gtMsg]
	Got    []string
	Paused bool
}

type gtMsg struct{ Ref, K int }

func (*gtElem) Init(*Ctx, struct{}) {}

func (e *gtElem) Step(ctx *Ctx, ms []gtMsg) {
	ks := []int{}
	for _, m := range ms {
		ks = append(ks, m.K)
	}
	slices.Sort(ks)
	r := ms[0].Ref
	e.Got = append(e.Got, fmt.Sprintf("%d:%v", r, ks))
	switch r {
	case 2:
		e.Paused = true
	case 1:
		When(ctx, &e.In, 2, 2, gtStep)
	}
}

var (
	gtElemT = NewType[gtElem, struct{}]("gt.Elem")
	gtStep  *Continuation[gtElem, gtMsg]
)

func init() { gtStep = NewContinuation(gtElemT, (*gtElem).Step) }

// Every order of six messages (two for each of refs 1 to 3), every moment
// the element starts waiting and every moment it resumes after its pause
// (at AtSync) give the same continuations in the same order; and, in
// every fourth order, the Gather travels with what it holds through
// msgpack (a migration, a checkpoint) after every event.
func TestGatherRunsContinuationsInRefOrderWhateverTheArrivalOrder(t *testing.T) {
	msgs := []gtMsg{{1, 0}, {1, 1}, {2, 0}, {2, 1}, {3, 0}, {3, 1}}
	want := []string{"1:[0 1]", "2:[0 1]", "3:[0 1]"}
	runs, n := 0, 0
	for perm := range permutations(len(msgs)) {
		n++
		for start := 0; start <= len(msgs); start++ {
			for resume := 0; resume <= len(msgs); resume++ {
				for _, travel := range []bool{false, true} {
					if travel && n%4 != 0 {
						continue // (packing after every event is the cost: every fourth order)
					}
					got := runGather(t, msgs, perm, start, resume, travel)
					require.Equal(t, want, got, "order %v, start after %d, resume %d after the pause, travel %v", perm, start, resume, travel)
					runs++
				}
			}
		}
	}
	require.Equal(t, 720*7*7+180*7*7, runs)
}

// runGather puts msgs in the order perm, starting the element (When for
// ref 1) after start of them and resuming it (When for ref 3) once it is
// paused and resume more have come; with travel, the element is packed
// and unpacked after every event.
func runGather(t *testing.T, msgs []gtMsg, perm []int, start, resume int, travel bool) []string {
	e := &gtElem{}
	ctx := &Ctx{e: &manager.Element{Obj: e}}
	started, resumed, sincePause := false, false, -1
	step := func(i int) {
		if !started && i == start {
			started = true
			When(ctx, &e.In, 1, 2, gtStep)
		}
		if e.Paused && sincePause < 0 {
			sincePause = 0
		}
		if e.Paused && !resumed && sincePause >= resume-1 {
			resumed, e.Paused = true, false
			When(ctx, &e.In, 3, 2, gtStep)
		}
		if travel {
			b, err := msgpack.Marshal(e)
			require.NoError(t, err)
			e = &gtElem{}
			require.NoError(t, pe.UnmarshalMsgpack(b, e))
			ctx.e.Obj = e
		}
	}
	for i, p := range perm {
		step(i)
		e.In.Put(ctx, int64(msgs[p].Ref), msgs[p])
		ref, ok := ctx.RefNum()
		require.True(t, ok)
		require.Equal(t, int64(msgs[p].Ref), ref)
		if sincePause >= 0 {
			sincePause++
		}
	}
	for i := len(perm); i < len(perm)+len(perm)+2; i++ {
		step(i)
		if sincePause >= 0 {
			sincePause++
		}
	}
	require.Empty(t, e.In.Refs, "nothing left over")
	return e.Got
}

// permutations yields every order of 0..n-1.
func permutations(n int) func(yield func([]int) bool) {
	return func(yield func([]int) bool) {
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		var rec func(k int) bool
		rec = func(k int) bool {
			if k == n {
				return yield(slices.Clone(p))
			}
			for i := k; i < n; i++ {
				p[k], p[i] = p[i], p[k]
				if !rec(k + 1) {
					return false
				}
				p[k], p[i] = p[i], p[k]
			}
			return true
		}
		rec(0)
	}
}

// More messages than a When asks for stay for the next When on that ref;
// n < 1 runs the continuation at once with none.
func TestGatherKeepsTheExtraForTheNextWhen(t *testing.T) {
	e := &gtElem{}
	ctx := &Ctx{e: &manager.Element{Obj: e}}
	for k := range 3 {
		e.In.Put(ctx, 1, gtMsg{1, k})
	}
	When(ctx, &e.In, 1, 2, gtStep)
	require.Equal(t, []string{"1:[0 1]"}, e.Got[:1])
	require.Equal(t, 1, e.In.Len(1))
	// the continuation of ref 1 waits for 2 messages of ref 2: none yet
	require.Equal(t, GatherWait{Ref: 2, N: 2, Then: gtStep.id}, e.In.Want)
	e.In.Want = GatherWait{}
	When(ctx, &e.In, 1, 1, gtStep)
	require.Equal(t, "1:[2]", e.Got[1])
	require.Zero(t, e.In.Len(1))
}

type gbElem struct {
	In  Gather[gtMsg]
	Sum int
}

func (*gbElem) Init(*Ctx, struct{}) {}

func (e *gbElem) Step(ctx *Ctx, ms []gtMsg) { e.Sum += len(ms) }

var (
	gbElemT = NewType[gbElem, struct{}]("gb.Elem")
	gbStep  *Continuation[gbElem, gtMsg]
)

func init() { gbStep = NewContinuation(gbElemT, (*gbElem).Step) }

// BenchmarkGatherPerMessage is what a Gather adds to an entry method per
// message: Put, and its share of the When and the continuation's call,
// with four messages a reference number (a 2D halo), half of them early
// (before the When) and half after. Target: at most 50 ns.
func BenchmarkGatherPerMessage(b *testing.B) {
	e := &gbElem{}
	ctx := &Ctx{e: &manager.Element{Obj: e}}
	b.ReportAllocs()
	ref := int64(0)
	for i := 0; i < b.N; i += 4 {
		ref++
		e.In.Put(ctx, ref, gtMsg{int(ref), 0})
		e.In.Put(ctx, ref, gtMsg{int(ref), 1})
		When(ctx, &e.In, ref, 4, gbStep)
		e.In.Put(ctx, ref, gtMsg{int(ref), 2})
		e.In.Put(ctx, ref, gtMsg{int(ref), 3})
	}
	if e.Sum < b.N {
		b.Fatalf("%d messages reached the continuation, want %d", e.Sum, b.N)
	}
}
