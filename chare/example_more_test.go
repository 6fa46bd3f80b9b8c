package chare_test

import (
	"fmt"

	"github.com/charmgo/charmgo/chare"
)

// ---- a ring: a token goes around a 1D array three times ----

type RingMain struct{}

type RingNode struct {
	N int
}

type Token struct {
	Hops, Laps int
}

var (
	ringMain = chare.NewMainType[RingMain]("example.RingMain")
	ringNode = chare.NewType[RingNode, int]("example.RingNode")
	passTok  *chare.Entry[RingNode, Token]
	ringDone *chare.Entry[RingMain, Token]
)

func init() {
	passTok = chare.NewEntry(ringNode, (*RingNode).Pass)
	ringDone = chare.NewEntry(ringMain, (*RingMain).Done)
}

func (m *RingMain) Init(ctx *chare.Ctx, args []string) {
	ring := ringNode.NewArray(ctx, []int{7}, 7)
	passTok.Send(ctx, ring.At(0), Token{})
}

func (r *RingNode) Init(ctx *chare.Ctx, n int) { r.N = n }

func (r *RingNode) Pass(ctx *chare.Ctx, t Token) {
	t.Hops++
	next := (int(ctx.Index().C[0]) + 1) % r.N
	if next == 0 {
		t.Laps++
		if t.Laps == 3 {
			ringDone.Send(ctx, ringMain.MainProxy(), t)
			return
		}
	}
	passTok.Send(ctx, chare.ThisArray[RingNode](ctx).At(next), t)
}

func (m *RingMain) Done(ctx *chare.Ctx, t Token) {
	sayf("token made %d hops in %d laps\n", t.Hops, t.Laps)
	ctx.Exit(0)
}

func Example_ring() {
	res := chare.Run(ringMain, chare.Config{PEs: 3})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// token made 21 hops in 3 laps
	// exit 0 <nil>
}

// ---- a reduction to main, waited on with a future ----

type SumMain struct{}

type Summer struct{}

var (
	sumMain  = chare.NewMainType[SumMain]("example.SumMain")
	summers  = chare.NewType[Summer, struct{}]("example.Summer")
	startSum *chare.Entry[Summer, chare.Callback[[]float64]]
)

func init() {
	startSum = chare.NewEntry(summers, (*Summer).Start)
}

func (s *Summer) Init(*chare.Ctx, struct{}) {}

// Each element contributes three values; main's Init blocks on the future.
func (s *Summer) Start(ctx *chare.Ctx, cb chare.Callback[[]float64]) {
	i := float64(ctx.Index().C[0])
	chare.Contribute(ctx, chare.SumFloat64s, []float64{1, i, 0.1 * i}, cb)
}

func (m *SumMain) Init(ctx *chare.Ctx, args []string) {
	arr := summers.NewArray(ctx, []int{100}, struct{}{})
	f := chare.NewFuture[[]float64](ctx)
	startSum.Broadcast(ctx, arr, f.Callback())
	v, err := f.Get(ctx)
	sayf("count %.0f, sum %.0f, tenth %.1f, err %v\n", v[0], v[1], v[2], err)
	ctx.Exit(0)
}

func Example_reductionToMain() {
	res := chare.Run(sumMain, chare.Config{PEs: 4})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// count 100, sum 4950, tenth 495.0, err <nil>
	// exit 0 <nil>
}

// ---- a section multicast with a section reduction ----

type SecMain struct{}

type Cellish struct {
	Value int64
}

var (
	secMain   = chare.NewMainType[SecMain]("example.SecMain")
	cellishes = chare.NewType[Cellish, struct{}]("example.Cellish")
	scale     *chare.Entry[Cellish, ScaleMsg]
	secDone   *chare.Entry[SecMain, int64]
)

func init() {
	scale = chare.NewEntry(cellishes, (*Cellish).Scale)
	secDone = chare.NewEntry(secMain, (*SecMain).Done)
}

type ScaleMsg struct {
	Factor int64
	Sec    chare.SectionProxy[Cellish]
}

func (c *Cellish) Init(ctx *chare.Ctx, _ struct{}) {
	ix := ctx.Index()
	c.Value = int64(ix.C[0]*10 + ix.C[1])
}

func (c *Cellish) Scale(ctx *chare.Ctx, m ScaleMsg) {
	chare.ContributeSection(ctx, m.Sec, chare.SumInt64, c.Value*m.Factor, secDone.CallbackTo(secMain.MainProxy()))
}

func (m *SecMain) Init(ctx *chare.Ctx, args []string) {
	grid := cellishes.NewArray(ctx, []int{6, 6}, struct{}{})
	// The diagonal band |x - y| <= 1 of a 6×6 grid: 16 members.
	sec := grid.SectionWhere(ctx, func(ix chare.Index) bool {
		d := ix.C[0] - ix.C[1]
		return d >= -1 && d <= 1
	})
	scale.Multicast(ctx, sec, ScaleMsg{Factor: 2, Sec: sec})
}

func (m *SecMain) Done(ctx *chare.Ctx, sum int64) {
	sayln("section sum", sum)
	ctx.Exit(0)
}

func Example_sectionMulticastAndReduction() {
	res := chare.Run(secMain, chare.Config{PEs: 4})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// section sum 880
	// exit 0 <nil>
}

// ---- a migrating element that keeps receiving ----

type MigMain struct {
	Wanderer chare.ArrayProxy[Wanderer]
	Sent     int
}

type Wanderer struct {
	Got   int
	Sum   int
	Moves int
}

var (
	migMain  = chare.NewMainType[MigMain]("example.MigMain")
	wanderer = chare.NewType[Wanderer, struct{}]("example.Wanderer")
	visit    *chare.Entry[Wanderer, int]
	migDone  *chare.Entry[MigMain, [2]int]
)

func init() {
	visit = chare.NewEntry(wanderer, (*Wanderer).Visit)
	migDone = chare.NewEntry(migMain, (*MigMain).Done)
}

func (w *Wanderer) Init(*chare.Ctx, struct{}) {}

// Every visit moves the element on to the next PE while main keeps
// sending; messages are forwarded to it, none lost or repeated. (Order is
// not promised across a migration, as in Charm++, so it counts.)
func (w *Wanderer) Visit(ctx *chare.Ctx, n int) {
	w.Got++
	w.Sum += n
	w.Moves++
	if w.Got == 200 {
		migDone.Send(ctx, migMain.MainProxy(), [2]int{w.Got, w.Sum})
		return
	}
	ctx.Migrate((ctx.PE() + 1) % ctx.NumPEs())
}

func (m *MigMain) Init(ctx *chare.Ctx, args []string) {
	arr := wanderer.NewArray(ctx, []int{1}, struct{}{})
	for i := 1; i <= 200; i++ {
		visit.Send(ctx, arr.At(0), i)
	}
}

func (m *MigMain) Done(ctx *chare.Ctx, r [2]int) {
	sayf("received %d messages, sum %d\n", r[0], r[1])
	ctx.Exit(0)
}

func Example_migratingElement() {
	res := chare.Run(migMain, chare.Config{PEs: 3})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// received 200 messages, sum 20100
	// exit 0 <nil>
}

// A program whose end is that nothing is left to do says so with
// EndWhenQuiet (Charm++'s CkStartQD(CkCallback::ckExit)): here a token
// goes round a ring of workers until its count runs out, and nobody calls
// Exit. Without EndWhenQuiet the same run would fail: a run that goes
// quiet before the program ended it is taken for one that stopped before
// it was done.
type QuietMain struct{}

type QuietWorker struct{ Seen int }

var (
	quietMain   = chare.NewMainType[QuietMain]("example.QuietMain")
	quietWorker = chare.NewType[QuietWorker, struct{}]("example.QuietWorker")
	quietToken  *chare.Entry[QuietWorker, int]
)

func init() {
	quietToken = chare.NewEntry(quietWorker, (*QuietWorker).Token)
}

func (m *QuietMain) Init(ctx *chare.Ctx, args []string) {
	chare.EndWhenQuiet(ctx) // the run ends once nothing is left to do
	ring := quietWorker.NewArray(ctx, []int{4}, struct{}{})
	quietToken.Send(ctx, ring.At(0), 6)
}

func (w *QuietWorker) Init(*chare.Ctx, struct{}) {}

func (w *QuietWorker) Token(ctx *chare.Ctx, left int) {
	w.Seen++
	sayln(fmt.Sprintf("worker %v has the token, %d hops left", ctx.Index(), left))
	if left > 0 {
		quietToken.Send(ctx, chare.ThisArray[QuietWorker](ctx).At(int(ctx.Index().C[0]+1)%4), left-1)
	}
}

func Example_endWhenQuiet() {
	res := chare.Run(quietMain, chare.Config{PEs: 2})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// worker [0] has the token, 6 hops left
	// worker [1] has the token, 5 hops left
	// worker [2] has the token, 4 hops left
	// worker [3] has the token, 3 hops left
	// worker [0] has the token, 2 hops left
	// worker [1] has the token, 1 hops left
	// worker [2] has the token, 0 hops left
	// exit 0 <nil>
}
