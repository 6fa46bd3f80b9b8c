package chare_test

import (
	"fmt"
	"os"
	"slices"

	"github.com/charmgo/charmgo/chare"
)

// ---- a group: one member on every PE ----

type GrpMain struct{}

type PerPE struct{}

var (
	grpMain   = chare.NewMainType[GrpMain]("example.GrpMain")
	perPE     = chare.NewType[PerPE, string]("example.PerPE")
	grpReport *chare.Entry[PerPE, chare.Callback[[]int64]]
	pesOf     = chare.Concat[int64]() // in index order: one value per member
)

func init() { grpReport = chare.NewEntry(perPE, (*PerPE).Report) }

func (m *GrpMain) Init(ctx *chare.Ctx, args []string) {
	g := perPE.NewGroup(ctx, "hello") // one member on each PE
	f := chare.NewFuture[[]int64](ctx)
	grpReport.Broadcast(ctx, g, f.Callback())
	pes, err := f.Get(ctx)
	sayf("members on PEs %v (%v); the member on PE 1 is g.OnPE(1)\n", pes, err)
	ctx.Exit(0)
}

func (p *PerPE) Init(ctx *chare.Ctx, word string) {}

// Report contributes the member's PE (its index in the group).
func (p *PerPE) Report(ctx *chare.Ctx, cb chare.Callback[[]int64]) {
	chare.Contribute(ctx, pesOf, int64(ctx.PE()), cb)
}

func Example_group() {
	res := chare.Run(grpMain, chare.Config{PEs: 3})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// members on PEs [0 1 2] (<nil>); the member on PE 1 is g.OnPE(1)
	// exit 0 <nil>
}

// ---- a future, filled by an element ----

type AskMain struct{}

type Oracle struct{ Answer int }

var (
	askMain  = chare.NewMainType[AskMain]("example.AskMain")
	oracles  = chare.NewType[Oracle, int]("example.Oracle")
	askEntry *chare.Entry[Oracle, chare.Future[int]]
)

func init() { askEntry = chare.NewEntry(oracles, (*Oracle).Ask) }

func (m *AskMain) Init(ctx *chare.Ctx, args []string) {
	arr := oracles.NewArray(ctx, []int{4}, 42)
	f := chare.NewFuture[int](ctx) // a future can travel in a message
	askEntry.Send(ctx, arr.At(3), f)
	v, err := f.Get(ctx) // main's Init (or a chare.Threaded() entry) may block
	sayf("the oracle says %d (%v)\n", v, err)
	ctx.Exit(0)
}

func (o *Oracle) Init(ctx *chare.Ctx, answer int) { o.Answer = answer }

func (o *Oracle) Ask(ctx *chare.Ctx, f chare.Future[int]) { f.Set(ctx, o.Answer) }

func Example_futureFilledByAnElement() {
	res := chare.Run(askMain, chare.Config{PEs: 2})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// the oracle says 42 (<nil>)
	// exit 0 <nil>
}

// ---- AtSync with a load balancer ----

type LBMain struct{ Rounds int }

// Worker works a while each round, then waits at AtSync; the balancer
// moves it, and ResumeFromSync starts the next round.
type Worker struct {
	Round, Rounds int
	PEs           []int64 // the PE it ran each round on
}

var (
	lbMain    = chare.NewMainType[LBMain]("example.LBMain")
	workers   = chare.NewType[Worker, int]("example.Worker")
	workStart *chare.Entry[Worker, struct{}]
	lbDone    *chare.Entry[LBMain, []int64]
	moves     = chare.Concat[int64]()
)

func init() {
	workStart = chare.NewEntry(workers, (*Worker).Start)
	lbDone = chare.NewEntry(lbMain, (*LBMain).Done)
}

func (m *LBMain) Init(ctx *chare.Ctx, args []string) {
	workStart.Broadcast(ctx, workers.NewArray(ctx, []int{6}, 3), struct{}{})
}

func (w *Worker) Init(ctx *chare.Ctx, rounds int) { w.Rounds = rounds }

func (w *Worker) Start(ctx *chare.Ctx, _ struct{}) { w.round(ctx) }

// ResumeFromSync: every element reached AtSync and the balancer's
// migrations are done.
func (w *Worker) ResumeFromSync(ctx *chare.Ctx) { w.round(ctx) }

func (w *Worker) round(ctx *chare.Ctx) {
	w.PEs = append(w.PEs, int64(ctx.PE()))
	if w.Round++; w.Round <= w.Rounds {
		ctx.AtSync() // ready to be balanced
		return
	}
	moved := int64(0)
	for i := 1; i < len(w.PEs); i++ {
		if w.PEs[i] != w.PEs[i-1] {
			moved++
		}
	}
	chare.Contribute(ctx, moves, moved, lbDone.CallbackTo(lbMain.MainProxy()))
}

func (m *LBMain) Done(ctx *chare.Ctx, moved []int64) {
	sayf("moves per worker: %v\n", moved)
	ctx.Exit(0)
}

func Example_atSyncWithABalancer() {
	// rotate moves every element to the next PE at each step (a test
	// strategy; greedyrefine, refine, graph … balance measured loads)
	res := chare.Run(lbMain, chare.Config{PEs: 3, Balancer: "rotate"})
	fmt.Println("exit", res.Code, res.Err, "balancing steps", res.Stats.LB.Steps)
	// Output:
	// moves per worker: [3 3 3 3 3 3]
	// exit 0 <nil> balancing steps 3
}

// ---- a checkpoint, and a run restarted from it ----

type CountMain struct {
	Counters chare.ArrayProxy[Counter]
	Round    int
}

type Counter struct{ N int64 }

var (
	ckExMain   = chare.NewMainType[CountMain]("example.CountMain")
	counters   = chare.NewType[Counter, struct{}]("example.Counter")
	countUp    *chare.Entry[Counter, int64]
	counted    *chare.Entry[CountMain, int64]
	checkpoint *chare.Entry[CountMain, struct{}]
)

func init() {
	countUp = chare.NewEntry(counters, (*Counter).Add)
	counted = chare.NewEntry(ckExMain, (*CountMain).Counted)
	checkpoint = chare.NewEntry(ckExMain, (*CountMain).Checkpointed)
}

func (m *CountMain) Init(ctx *chare.Ctx, args []string) {
	m.Counters = counters.NewArray(ctx, []int{4}, struct{}{})
	m.next(ctx)
}

func (c *Counter) Init(*chare.Ctx, struct{}) {}

func (c *Counter) Add(ctx *chare.Ctx, k int64) {
	c.N += k
	chare.Contribute(ctx, chare.SumInt64, c.N, counted.CallbackTo(ckExMain.MainProxy()))
}

func (m *CountMain) next(ctx *chare.Ctx) {
	m.Round++
	countUp.Broadcast(ctx, m.Counters, int64(m.Round))
}

// Counted: after round 2 nothing is in flight: a checkpoint; a run that
// stops there (Exit) can be restarted from it.
func (m *CountMain) Counted(ctx *chare.Ctx, sum int64) {
	sayf("round %d: sum %d\n", m.Round, sum)
	switch m.Round {
	case 2:
		chare.Checkpoint(ctx, checkpoint.CallbackTo(ckExMain.MainProxy()))
	case 4:
		ctx.Exit(0)
	default:
		m.next(ctx)
	}
}

// Checkpointed is the checkpoint's callback: in the first run, and again
// in a run restarted from it, which resumes here.
func (m *CountMain) Checkpointed(ctx *chare.Ctx, _ struct{}) {
	sayf("checkpoint after round %d\n", m.Round)
	m.next(ctx)
}

func Example_checkpointAndRestart() {
	dir, _ := os.MkdirTemp("", "charmgo-example")
	defer os.RemoveAll(dir)
	res := chare.Run(ckExMain, chare.Config{PEs: 2, CheckpointDir: dir})
	fmt.Println("exit", res.Code, res.Err)
	fmt.Println("restarted from", "the checkpoint, on 3 PEs:")
	res = chare.Run(ckExMain, chare.Config{PEs: 3, Restart: dir})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// round 1: sum 4
	// round 2: sum 12
	// checkpoint after round 2
	// round 3: sum 24
	// round 4: sum 40
	// exit 0 <nil>
	// restarted from the checkpoint, on 3 PEs:
	// checkpoint after round 2
	// round 3: sum 24
	// round 4: sum 40
	// exit 0 <nil>
}

// ---- a failure under camel ----

type FtMain struct {
	Relay chare.ArrayProxy[Relay]
	Last  Lap // the lap before the checkpoint (main's state is checkpointed too)
}

// Relay passes a running sum round a ring, one lap a step; main
// checkpoints every 5 steps.
type Relay struct{}

type Lap struct {
	Step int
	Sum  int64
}

var (
	ftMain    = chare.NewMainType[FtMain]("example.FtMain")
	relays    = chare.NewType[Relay, struct{}]("example.Relay")
	relayPass *chare.Entry[Relay, Lap]
	lapDone   *chare.Entry[FtMain, Lap]
	ftCkpt    *chare.Entry[FtMain, struct{}]
)

func init() {
	relayPass = chare.NewEntry(relays, (*Relay).Pass)
	lapDone = chare.NewEntry(ftMain, (*FtMain).LapDone)
	ftCkpt = chare.NewEntry(ftMain, (*FtMain).Checkpointed)
}

func (m *FtMain) Init(ctx *chare.Ctx, args []string) {
	m.Relay = relays.NewArray(ctx, []int{8}, struct{}{})
	chare.StepRange(ctx, 1, 20) // the steps it will run (a kill outside them is refused)
	m.resume(ctx, Lap{})
}

func (r *Relay) Init(*chare.Ctx, struct{}) {}

func (r *Relay) Pass(ctx *chare.Ctx, l Lap) {
	i := ctx.Index().C[0]
	l.Sum = l.Sum*31 + int64(i) + int64(l.Step)
	if i == 7 {
		lapDone.Send(ctx, ftMain.MainProxy(), l)
		return
	}
	relayPass.Send(ctx, chare.ThisArray[Relay](ctx).At(int(i)+1), l)
}

func (m *FtMain) LapDone(ctx *chare.Ctx, l Lap) {
	if l.Step == 20 {
		sayf("after 20 laps the sum is %d\n", l.Sum)
		ctx.Exit(0)
		return
	}
	if l.Step%5 == 0 {
		m.Last = l
		chare.Checkpoint(ctx, ftCkpt.CallbackTo(ftMain.MainProxy()))
		return
	}
	m.resume(ctx, l)
}

// Checkpointed goes on after a checkpoint.
func (m *FtMain) Checkpointed(ctx *chare.Ctx, _ struct{}) { m.resume(ctx, m.Last) }

// resume starts the next lap.
func (m *FtMain) resume(ctx *chare.Ctx, l Lap) {
	l.Step++
	chare.AtStep(ctx, l.Step) // failures injected at this step happen now
	relayPass.Send(ctx, m.Relay.At(0), l)
}

func Example_failureUnderCamel() {
	res := chare.Run(ftMain, chare.Config{PEs: 3})
	fmt.Println("without a failure: exit", res.Code, res.Err)
	// PE 1 fails as step 12 begins; it restarts from the checkpoint of
	// step 10, alone, while the others replay the messages they sent it
	// (a kill at a time, --kill 1@50ms, fits programs that report no steps)
	res = chare.Run(ftMain, chare.Config{PEs: 3, FT: "camel", Kills: []chare.Kill{{PE: 1, Step: 12}}})
	fmt.Println("with PE 1 failed: exit", res.Code, res.Err, "failures", res.Summary.FaultTolerance.Failures)
	// Output:
	// after 20 laps the sum is 1673221797022101840
	// without a failure: exit 0 <nil>
	// after 20 laps the sum is 1673221797022101840
	// with PE 1 failed: exit 0 <nil> failures 1
}

// ---- waiting for messages by reference number ----

type WaitMain struct{}

// Waiter waits for 3 messages of round 1, then of round 2; the senders
// send round 2's first, so they wait in the Gather.
type Waiter struct {
	Round int64
	In    chare.Gather[Note]
}

type Note struct {
	Round int64
	From  int
}

var (
	waitMain  = chare.NewMainType[WaitMain]("example.WaitMain")
	waiters   = chare.NewType[Waiter, struct{}]("example.Waiter")
	noteEntry *chare.Entry[Waiter, Note]
	gotRound  *chare.Continuation[Waiter, Note]
)

func init() {
	noteEntry = chare.NewEntry(waiters, (*Waiter).Note)
	gotRound = chare.NewContinuation(waiters, (*Waiter).Got)
}

func (m *WaitMain) Init(ctx *chare.Ctx, args []string) {
	w := waiters.NewArray(ctx, []int{1}, struct{}{}).At(0)
	for _, round := range []int64{2, 1} {
		for from := range 3 {
			noteEntry.Send(ctx, w, Note{Round: round, From: from})
		}
	}
}

func (w *Waiter) Init(ctx *chare.Ctx, _ struct{}) {
	w.Round = 1
	chare.When(ctx, &w.In, w.Round, 3, gotRound)
}

// Note buffers a message under its round.
func (w *Waiter) Note(ctx *chare.Ctx, n Note) { w.In.Put(ctx, n.Round, n) }

// Got runs with the three notes of a round, once they are all in.
func (w *Waiter) Got(ctx *chare.Ctx, ns []Note) {
	slices.SortFunc(ns, func(a, b Note) int { return a.From - b.From }) // (arrival order varies)
	sayf("round %d: notes from %d, %d, %d\n", ns[0].Round, ns[0].From, ns[1].From, ns[2].From)
	if w.Round++; w.Round > 2 {
		ctx.Exit(0)
		return
	}
	chare.When(ctx, &w.In, w.Round, 3, gotRound)
}

func Example_gatherByReferenceNumber() {
	res := chare.Run(waitMain, chare.Config{PEs: 2})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// round 1: notes from 0, 1, 2
	// round 2: notes from 0, 1, 2
	// exit 0 <nil>
}
