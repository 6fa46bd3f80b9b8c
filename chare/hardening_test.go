package chare_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// A program that leaves one element out of a reduction: HkElem 3 never
// contributes. With Args "wait" main's constructor blocks on the
// reduction's future (the run can never end: the watchdog ends it); with
// no arguments main returns and the run goes quiet with the reduction
// unfinished. With Args "block" element 1 blocks its PE inside an entry
// method until hkRelease is closed (for SIGQUIT's dump).

type HkMain struct{}

type HkElem struct{}

type hkGoMsg struct {
	SkipThree bool // element 3 never contributes
	Block     bool // element 1 blocks its PE until hkRelease is closed
	CB        chare.Callback[int64]
}

var (
	hkMain    = chare.NewMainType[HkMain]("hk.Main")
	hkElemT   = chare.NewType[HkElem, int]("hk.Elem")
	hkGo      *chare.Entry[HkElem, hkGoMsg]
	hkDone    *chare.Entry[HkMain, int64]
	hkEntered chan struct{} // closed once element 1 is blocked
	hkRelease chan struct{}
)

func init() {
	hkGo = chare.NewEntry(hkElemT, (*HkElem).Go)
	hkDone = chare.NewEntry(hkMain, (*HkMain).Done)
}

func (m *HkMain) Init(ctx *chare.Ctx, args []string) {
	arr := hkElemT.NewArray(ctx, []int{6}, 0)
	switch strings.Join(args, " ") {
	case "wait":
		f := chare.NewFuture[int64](ctx)
		hkGo.Broadcast(ctx, arr, hkGoMsg{SkipThree: true, CB: f.Callback()})
		_, _ = f.Get(ctx) // never filled
	case "block":
		hkGo.Broadcast(ctx, arr, hkGoMsg{Block: true, CB: hkDone.CallbackTo(hkMain.MainProxy())})
	default:
		hkGo.Broadcast(ctx, arr, hkGoMsg{SkipThree: true, CB: hkDone.CallbackTo(hkMain.MainProxy())})
	}
}

func (e *HkElem) Init(ctx *chare.Ctx, _ int) {}

func (e *HkElem) Go(ctx *chare.Ctx, m hkGoMsg) {
	i := ctx.Index().C[0]
	if m.Block && i == 1 {
		close(hkEntered)
		<-hkRelease // the PE is stuck inside this entry method until the test lets go
	}
	if m.SkipThree && i == 3 {
		return // never contributes
	}
	chare.Contribute(ctx, chare.SumInt64, int64(i), m.CB)
}

func (m *HkMain) Done(ctx *chare.Ctx, v int64) { ctx.Exit(0) }

// A run that goes quiet (main returned) with a reduction unfinished ends
// with an error that names the reduction and the element that never
// contributed, not with exit 0; its dump describes the PE.
func TestQuietRunWithAReductionUnfinishedFails(t *testing.T) {
	for _, pes := range []int{1, 3} {
		res := chare.Run(hkMain, chare.Config{PEs: pes})
		require.NotEqual(t, 0, res.Code)
		var q *manager.QuietError
		require.True(t, errors.As(res.Err, &q), "%v", res.Err)
		require.Contains(t, res.Err.Error(), "reduction 0 over hk.Elem waits on PE")
		require.Contains(t, res.Err.Error(), "missing: hk.Elem[3]")
		require.NotContains(t, res.Err.Error(), "\n", "one line")
		require.Contains(t, chare.DumpOf(res.Err), "reducer sum.int64")
	}
}

// A run that can never end — main waits on a reduction one element never
// contributes to — is ended by the watchdog with exit 3; its one line
// names the reduction and the missing contributor, and the dump says who
// waits on what on every PE.
func TestWatchdogEndsAStalledRunWithADump(t *testing.T) {
	res := chare.Run(hkMain, chare.Config{PEs: 2, Args: []string{"wait"}, Watchdog: 300 * time.Millisecond})
	require.Equal(t, 3, res.Code)
	var st *chare.StallError
	require.True(t, errors.As(res.Err, &st), "%v", res.Err)
	require.Contains(t, res.Err.Error(), "no progress for 300ms (watchdog)")
	require.Contains(t, res.Err.Error(), "missing: hk.Elem[3]")
	dump := chare.DumpOf(res.Err)
	for _, want := range []string{"[parked] PE 0:", "[parked] PE 1:", "hk.Main constructor on PE 0 waits on future 1", "reduction 0 over hk.Elem"} {
		require.Contains(t, dump, want)
	}
	require.NotContains(t, dump, "asked for the end of the run", "main never returned")
}

// syncWriter hands what is written to it to the test, one write a value.
type syncWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	note chan struct{}
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.b.Write(p)
	w.mu.Unlock()
	select {
	case w.note <- struct{}{}:
	default:
	}
	return len(p), nil
}

// SIGQUIT prints the dump and the run goes on: here PE 1 is stuck inside
// an entry method (it does not answer, and the goroutines' stacks say
// where), the others describe themselves, and once the entry method
// returns the run ends normally.
func TestSIGQUITDumpsAndTheRunGoesOn(t *testing.T) {
	hkEntered, hkRelease = make(chan struct{}), make(chan struct{})
	w := &syncWriter{note: make(chan struct{}, 1)}
	done := make(chan chare.Result)
	go func() { done <- chare.Run(hkMain, chare.Config{PEs: 2, Args: []string{"block"}, DumpTo: w}) }()
	<-hkEntered // Run installed its handler before it started the PEs
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGQUIT))
	select {
	case <-w.note:
	case <-time.After(10 * time.Second):
		t.Fatal("no dump after SIGQUIT")
	}
	w.mu.Lock()
	s := w.b.String()
	w.mu.Unlock()
	require.Contains(t, s, "SIGQUIT: the state of every PE (the run goes on)")
	require.Contains(t, s, "PE 0: did not answer", "element 1 blocks PE 0")
	require.Regexp(t, `\[(parked|running)\] PE 1: `, s)
	require.Contains(t, s, "chare_test.(*HkElem).Go", "the stuck PE's stack")
	close(hkRelease)
	res := <-done
	require.NoError(t, res.Err)
	require.Equal(t, 0, res.Code)
}

// A second reducer under a name already registered is refused at
// registration: it used to stand silently for the first (a product of
// 2, 3, 4 and 5 registered after a sum under one name came out as 14).
var hkCombine = chare.NewReducer("hk.combine", func(a, b int64) int64 { return a + b }, true)

func TestReducerNamesAreUnique(t *testing.T) {
	require.PanicsWithValue(t, `chare.NewReducer: a reducer named "user.hk.combine" is registered already`, func() {
		chare.NewReducer("hk.combine", func(a, b int64) int64 { return a * b }, true)
	})
}

// The ids of types, entry methods and reducers are their names' (so every
// process agrees, whatever order it registered in), and a reducer first
// made once a run has started is refused: another process would not know
// it when a partial names it.
func TestRegistrationIsByNameAndBeforeTheRun(t *testing.T) {
	require.Equal(t, "hk.Elem.Go", pe.TypeName(pe.NameID("hk.Elem.Go")))
	require.Equal(t, "hk.Elem.Go", hkGo.Name())
	_ = chare.Run(hkMain, chare.Config{PEs: 1}) // seals (it ends with its unfinished reduction)
	require.PanicsWithValue(t, `manager.RegisterReducer: reducer "concat.chare_test.hkLate" registered after a run started: register it at package level (var x = ...), so that every process knows it before any message names it`,
		func() { chare.Concat[hkLate]() })
	chare.Concat[string]() // made before (at package level): the same reducer
}

type hkLate struct{ X int }

// A token goes round a ring of 4 elements; the element at hop 5 drops it
// (a lost message, or a chare whose state did not survive a migration:
// the program stops before it is done). Main never calls Exit.
type LostMain struct{}

type LostElem struct{}

var (
	lostMain  = chare.NewMainType[LostMain]("hk.LostMain")
	lostElemT = chare.NewType[LostElem, struct{}]("hk.LostElem")
	lostPass  *chare.Entry[LostElem, int]
)

func init() {
	lostPass = chare.NewEntry(lostElemT, (*LostElem).Pass)
}

func (m *LostMain) Init(ctx *chare.Ctx, args []string) {
	if len(args) > 0 && args[0] == "quiet-ends" {
		chare.EndWhenQuiet(ctx)
	}
	ring := lostElemT.NewArray(ctx, []int{4}, struct{}{})
	lostPass.Send(ctx, ring.At(0), 0)
}

func (e *LostElem) Init(*chare.Ctx, struct{}) {}

func (e *LostElem) Pass(ctx *chare.Ctx, hop int) {
	if hop == 5 {
		return // dropped
	}
	lostPass.Send(ctx, chare.ThisArray[LostElem](ctx).At(int(ctx.Index().C[0]+1)%4), hop+1)
}

// A run that goes quiet before the program ended it fails with exit 1,
// one line that says so and names chare.EndWhenQuiet, and the dump of
// every PE — it used to exit 0, as if it had finished (a chare whose
// unexported field a migration dropped went quiet after the program's
// header). A program that said that quiescence ends it ends with 0.
func TestQuietBeforeTheProgramEndedFails(t *testing.T) {
	for _, pes := range []int{1, 3} {
		res := chare.Run(lostMain, chare.Config{PEs: pes})
		require.Equal(t, 1, res.Code, "%v", res.Err)
		var q *manager.QuietError
		require.ErrorAs(t, res.Err, &q)
		require.True(t, q.Unended)
		require.EqualError(t, res.Err, "the run went quiet before the program ended it (no Exit came, and the program did not say that quiescence ends it: chare.EndWhenQuiet)")
		for p := 0; p < pes; p++ {
			require.Contains(t, chare.DumpOf(res.Err), fmt.Sprintf("PE %d:", p), "every PE described")
		}
		res = chare.Run(lostMain, chare.Config{PEs: pes, Args: []string{"quiet-ends"}})
		require.NoError(t, res.Err)
		require.Equal(t, 0, res.Code)
	}
}

// Chare types whose state msgpack would not bring back whole (registered
// in the test, not at package level: their registration panics).
type (
	HkHidden     struct{ secret int }
	HkVec        struct{ X, y float64 }
	HkNested     struct{ Pos []map[string]HkVec }
	HkChan       struct{ C chan int }
	HkAny        struct{ V any }
	HkMainHidden struct{ done bool }
	HkSkipped    struct {
		N     int
		cache []int `msgpack:"-"`
	}
	HkPacked struct{ secret int }
)

func (*HkHidden) Init(*chare.Ctx, struct{})     {}
func (*HkNested) Init(*chare.Ctx, struct{})     {}
func (*HkChan) Init(*chare.Ctx, struct{})       {}
func (*HkAny) Init(*chare.Ctx, struct{})        {}
func (*HkMainHidden) Init(*chare.Ctx, []string) {}
func (*HkSkipped) Init(*chare.Ctx, struct{})    {}
func (*HkPacked) Init(*chare.Ctx, struct{})     {}
func (p *HkPacked) Pack() ([]byte, error)       { return []byte{byte(p.secret)}, nil }
func (p *HkPacked) Unpack(b []byte) error       { p.secret = int(b[0]); return nil }

// panicOf runs f and returns what it panicked with ("" if nothing).
func panicOf(f func()) (v string) {
	defer func() {
		if r := recover(); r != nil {
			v = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// A chare type whose state msgpack would not bring back whole is refused
// when it is registered, with a line naming the type and the field (a
// migrated element used to lose such a field silently); a field tagged
// msgpack:"-" is left out on purpose, and Pack/Unpack take over.
func TestStateThatWouldNotSurviveIsRefusedAtRegistration(t *testing.T) {
	for _, c := range []struct {
		register func()
		want     string
	}{
		{func() { chare.NewType[HkHidden, struct{}]("hk.hidden") }, `chare.NewType("hk.hidden"): HkHidden.secret is unexported: msgpack drops it: its state would not survive a migration or a checkpoint (export the field, tag it msgpack:"-" if it need not survive, or give HkHidden Pack and Unpack)`},
		{func() { chare.NewType[HkNested, struct{}]("hk.nested") }, `HkNested.Pos[…][…].y is unexported`},
		{func() { chare.NewType[HkChan, struct{}]("hk.chan") }, `HkChan.C is a chan: msgpack cannot encode it`},
		{func() { chare.NewType[HkAny, struct{}]("hk.any") }, `HkAny.V is an interface (interface {}): msgpack would bring it back as a map or a number, not the type it held`},
		{func() { chare.NewMainType[HkMainHidden]("hk.mainHidden") }, `HkMainHidden.done is unexported`},
	} {
		got := panicOf(c.register)
		require.Contains(t, got, c.want)
		require.NotContains(t, got, "\n", "one line")
	}
	// (registering them may be refused as late, once a run started: not
	// for their state)
	require.NotContains(t, panicOf(func() { chare.NewType[HkSkipped, struct{}]("hk.skipped") }), "would not survive")
	require.NotContains(t, panicOf(func() { chare.NewType[HkPacked, struct{}]("hk.packed") }), "would not survive")
}

// NewEntry names an entry after its method expression, so the compiler
// checks the method and its message type; a function literal (which has
// no such name) is refused at registration, pointing to NewEntryFunc.
func TestEntriesAreNamedAfterTheirMethods(t *testing.T) {
	require.Equal(t, "hk.LostElem.Pass", lostPass.Name())
	msg := func() (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		chare.NewEntry(lostElemT, func(*LostElem, *chare.Ctx, int) {})
		return ""
	}()
	require.Contains(t, msg, "chare.NewEntry: ")
	require.Contains(t, msg, "is not a method expression of *chare_test.LostElem (such as (*LostElem).Method); to register a function, name it with NewEntryFunc")
	// the string form, for names that come from data, is checked at start-up
	require.PanicsWithValue(t, "chare.NewEntryNamed: *chare_test.LostElem has no exported method Pas", func() {
		chare.NewEntryNamed[int](lostElemT, "Pas")
	})
}
