// Command imbalance shows what load balancing buys: a ring of blocks whose
// work per step follows a bump (a few blocks do several times the work of
// the rest) that drifts along the ring as the run goes on. Every step each
// block mixes in its left neighbour's value and runs its share of work (a
// chain of linear congruential steps, which cannot be skipped), passes its
// value on to the right and joins the step's barrier, after which main
// starts the next step; every few steps the blocks also meet at AtSync,
// where the balancer may move them. A step lasts as long as the most
// loaded PE takes.
//
// The check: main recomputes every block's final value from the same
// model, jumping each chain ahead in logarithmic time, and the run fails
// (exit 1) if one differs.
//
//	go run ./examples/imbalance                       # no balancer: the bump's PEs hold everyone up
//	go run ./examples/imbalance +p2 +balancer greedyrefine +LBDebug 1
//	go run ./examples/imbalance +p2 64 200 10 20000   # blocks, steps, steps between balancing, work unit
//	go run ./examples/imbalance --help
package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/charmgo/charmgo/chare"
)

// Params is the workload.
type Params struct {
	Blocks, Steps, LBPeriod int
	// Work is the length of a block's chain at the bottom of the bump
	// (LCG steps per step); Amp is how many times more the bump's peak
	// does; Sigma its width in blocks; Drift how many steps the bump takes
	// to move one block.
	Work       int
	Amp, Sigma float64
	Drift      int
	Quiet      bool // no per-run lines (tests)
}

// DefaultParams: on two PEs the first PE starts with about 1.55 times the
// average load.
func DefaultParams() Params {
	return Params{Blocks: 64, Steps: 200, LBPeriod: 10, Work: 20000, Amp: 6, Sigma: 8, Drift: 20}
}

// WorkOf is how many LCG steps block i runs at step s: a Gaussian bump
// centred on block Blocks/4 at the start, moving one block every Drift
// steps.
func (p Params) WorkOf(i, s int) int {
	c := float64(p.Blocks/4 + s/max(p.Drift, 1))
	d := math.Mod(math.Abs(float64(i)-c), float64(p.Blocks))
	d = math.Min(d, float64(p.Blocks)-d)
	return int(float64(p.Work) * (1 + p.Amp*math.Exp(-(d*d)/(p.Sigma*p.Sigma))))
}

// The chain: x -> a·x + c (mod 2^64), Knuth's MMIX constants.
const lcgA, lcgC = 6364136223846793005, 1442695040888963407

func lcgRun(x uint64, n int) uint64 {
	for range n {
		x = x*lcgA + lcgC
	}
	return x
}

// lcgJump is lcgRun in O(log n): the map composed n times is again
// x -> A·x + C.
func lcgJump(x uint64, n int) uint64 {
	var accA, accC uint64 = 1, 0
	a, c := uint64(lcgA), uint64(lcgC)
	for k := uint64(n); k > 0; k >>= 1 {
		if k&1 == 1 {
			accA, accC = accA*a, accC*a+c
		}
		a, c = a*a, c*a+c
	}
	return accA*x + accC
}

func initial(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 + 1 }

// Expected is every block's final value, from the model alone.
func (p Params) Expected() []uint64 {
	x := make([]uint64, p.Blocks)
	for i := range x {
		x[i] = initial(i)
	}
	for s := range p.Steps {
		prev := slices.Clone(x)
		for i := range x {
			left := prev[(i+p.Blocks-1)%p.Blocks]
			x[i] = lcgJump(prev[i]^left, p.WorkOf(i, s))
		}
	}
	return x
}

// Main drives the run and checks it.
type Main struct {
	P      Params
	Blocks chare.ArrayProxy[Block]
	Began  time.Time
	Ended  time.Time
	Last   time.Time
	Step   int
	StepMs []float64
	Final  []int64
	OK     bool
}

// Block is one element of the ring.
type Block struct {
	P    Params
	X    uint64
	Step int
	In   chare.Gather[StepIn] // what each step waits for, by step
}

// StepIn is one of the two things a step waits for: main's start, or
// (Left) the left neighbour's value X.
type StepIn struct {
	Left bool
	X    uint64
}

// LeftMsg carries a block's value after step Step-1 to its right
// neighbour.
type LeftMsg struct {
	Step int
	X    uint64
}

var (
	mainType = chare.NewMainTypeOf[Main, Params]("imbalance.Main")
	blocks   = chare.NewType[Block, Params]("imbalance.Block")
	start    *chare.Entry[Block, int]
	stepDone *chare.Entry[Main, struct{}]
	fromLeft *chare.Entry[Block, LeftMsg]
	done     *chare.Entry[Main, []int64]
	runStep  *chare.Continuation[Block, StepIn]
	gather   = chare.Concat[int64]()
)

func init() {
	start = chare.NewEntry(blocks, (*Block).Start)
	stepDone = chare.NewEntry(mainType, (*Main).StepDone)
	fromLeft = chare.NewEntry(blocks, (*Block).FromLeft)
	done = chare.NewEntry(mainType, (*Main).Done)
	runStep = chare.NewContinuation(blocks, (*Block).Run)
}

// ParseArgs reads the command line's arguments, [blocks [steps [lbPeriod
// [work]]]], over the defaults.
func ParseArgs(args []string) (Params, error) {
	p := DefaultParams()
	dst := []*int{&p.Blocks, &p.Steps, &p.LBPeriod, &p.Work}
	names := []string{"blocks", "steps", "lbPeriod", "work"}
	if len(args) > len(dst) {
		return p, fmt.Errorf("%d arguments: imbalance takes at most 4 (see --help)", len(args))
	}
	for i, a := range args {
		v, err := strconv.Atoi(a)
		if err != nil || v < 1 {
			return p, fmt.Errorf("argument %d (%s): %q is not a positive whole number", i+1, names[i], a)
		}
		*dst[i] = v
	}
	if p.Blocks < 2 {
		return p, fmt.Errorf("argument 1 (blocks): a ring needs at least 2 blocks")
	}
	return p, nil
}

// Init runs the workload p.
func (m *Main) Init(ctx *chare.Ctx, p Params) {
	m.P = p
	fmt.Fprintf(ctx.Out(), "imbalance: %d blocks on %d PEs, %d steps, AtSync every %d; work per block from %d to %d LCG steps (block map: initial PE load max/avg %.2f)\n",
		p.Blocks, ctx.NumPEs(), p.Steps, p.LBPeriod, p.WorkOf(p.Blocks/4+p.Blocks/2, 0), p.WorkOf(p.Blocks/4, 0), p.initialMaxAvg(ctx.NumPEs()))
	m.Blocks = blocks.NewArray(ctx, []int{p.Blocks}, p, chare.BlockMap())
	m.Began, m.Last = time.Now(), time.Now()
	start.Broadcast(ctx, m.Blocks, 0)
}

// StepDone: every block finished step m.Step; start the next.
func (m *Main) StepDone(ctx *chare.Ctx, _ struct{}) {
	now := time.Now()
	m.StepMs = append(m.StepMs, float64(now.Sub(m.Last).Microseconds())/1e3)
	m.Last = now
	if m.Step++; m.Step < m.P.Steps {
		start.Broadcast(ctx, m.Blocks, m.Step)
	}
}

// initialMaxAvg is the first step's PE load max/avg under the block map.
func (p Params) initialMaxAvg(pes int) float64 {
	load := make([]float64, pes)
	total := 0.0
	for i := range p.Blocks {
		w := float64(p.WorkOf(i, 0))
		load[i*pes/p.Blocks] += w
		total += w
	}
	return slices.Max(load) / (total / float64(pes))
}

// Done checks the blocks' final values against the model and ends the run.
func (m *Main) Done(ctx *chare.Ctx, xs []int64) {
	m.Ended = time.Now()
	m.Final = xs
	want := m.P.Expected()
	for i, x := range xs {
		if uint64(x) != want[i] {
			ctx.Fail(fmt.Errorf("check failed: block %d ended with %#x, the model says %#x", i, uint64(x), want[i]))
			return
		}
	}
	m.OK = true
	fmt.Fprintf(ctx.Out(), "check passed: %d blocks' final values match the model\n", len(xs))
	fmt.Fprintf(ctx.Out(), "time per step: median %.3f ms, mean %.3f ms (%.3f s for %d steps)\n", m.MedianMs(), m.MsPerStep(), m.Ended.Sub(m.Began).Seconds(), m.P.Steps)
	ctx.Exit(0)
}

// MsPerStep is the run's mean time per step, balancing steps included.
func (m *Main) MsPerStep() float64 {
	return float64(m.Ended.Sub(m.Began).Microseconds()) / 1e3 / float64(m.P.Steps)
}

// MedianMs is the median step, barrier to barrier.
func (m *Main) MedianMs() float64 {
	if len(m.StepMs) == 0 {
		return 0
	}
	s := slices.Clone(m.StepMs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Init is a block's constructor: it waits for step 0.
func (b *Block) Init(ctx *chare.Ctx, p Params) {
	b.P, b.X = p, initial(int(ctx.Index().C[0]))
	chare.When(ctx, &b.In, 0, 2, runStep)
}

// Start lets the block run step s (the first gives it its left
// neighbour's initial value too).
func (b *Block) Start(ctx *chare.Ctx, s int) {
	if s == 0 {
		i := int(ctx.Index().C[0])
		b.In.Put(ctx, 0, StepIn{Left: true, X: initial((i + b.P.Blocks - 1) % b.P.Blocks)})
	}
	b.In.Put(ctx, int64(s), StepIn{})
}

// FromLeft takes the left neighbour's value for a step.
func (b *Block) FromLeft(ctx *chare.Ctx, m LeftMsg) {
	b.In.Put(ctx, int64(m.Step), StepIn{Left: true, X: m.X})
}

// ResumeFromSync goes on after a balancing step.
func (b *Block) ResumeFromSync(ctx *chare.Ctx) { chare.When(ctx, &b.In, int64(b.Step), 2, runStep) }

// Run runs a step, once main started it and the left neighbour's value
// is in; then it waits for the next, unless it is time for AtSync.
func (b *Block) Run(ctx *chare.Ctx, in []StepIn) {
	i := int(ctx.Index().C[0])
	left := in[0].X
	if !in[0].Left {
		left = in[1].X
	}
	b.X = lcgRun(b.X^left, b.P.WorkOf(i, b.Step))
	fromLeft.Send(ctx, chare.ThisArray[Block](ctx).At((i+1)%b.P.Blocks), LeftMsg{Step: b.Step + 1, X: b.X})
	b.Step++
	if b.Step == b.P.Steps {
		chare.Contribute(ctx, gather, int64(b.X), done.CallbackTo(mainType.MainProxy()))
		return
	}
	chare.Contribute(ctx, chare.Barrier, struct{}{}, stepDone.CallbackTo(mainType.MainProxy()))
	if b.Step%b.P.LBPeriod == 0 {
		ctx.AtSync()
		return
	}
	chare.When(ctx, &b.In, int64(b.Step), 2, runStep)
}

func main() {
	fs := flag.NewFlagSet("imbalance", flag.ContinueOnError)
	fs.Usage = func() {
		d := DefaultParams()
		fmt.Fprintf(fs.Output(), "usage: imbalance [blocks [steps [lbPeriod [work]]]]: a ring of blocks whose work follows a drifting bump\n"+
			"  blocks    elements of the ring (default %d)\n  steps     steps to run (default %d)\n"+
			"  lbPeriod  steps between AtSync, where a balancer (+balancer) may move blocks (default %d)\n"+
			"  work      LCG steps of a block at the bottom of the bump, a step (default %d)\n", d.Blocks, d.Steps, d.LBPeriod, d.Work)
	}
	chare.MainWith(mainType, fs, ParseArgs)
}
