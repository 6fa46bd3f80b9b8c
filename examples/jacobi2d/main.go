// Command jacobi2d solves Laplace's equation on a square by Jacobi
// iteration, the way Charm++'s jacobi2d example does: a 2D array of
// blocks, each a square of cells with a layer of ghost cells, exchange
// their edges every iteration, compute, and contribute their largest
// change to a max reduction to main. There is no barrier between
// iterations: a block starts the next as soon as it has its neighbours'
// edges, so edges of iteration k+1 may reach a block still busy with k,
// or waiting at AtSync (every -lb-period iterations). A chare.Gather keyed
// by iteration holds them until the block gets there. With --ckpt-period N
// the blocks meet every N iterations for a coordinated checkpoint, which
// --ft recovers from (--kill 1@50ms: no steps needed) and --restart
// resumes.
//
// The check: main computes the same iterations serially on the whole
// grid and the run fails (exit 1) unless every block's cells are
// bitwise equal to it.
//
//	go run ./examples/jacobi2d                                # 4×4 blocks of 32×32 cells, 100 iterations
//	go run ./examples/jacobi2d +p2 -blocks 8 -size 16 -iters 300 +balancer greedyrefine
//	go run ./examples/jacobi2d --help
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"

	"github.com/charmgo/charmgo/chare"
)

// Params is the problem.
type Params struct {
	Blocks   int // blocks a side
	Size     int // cells a block side
	Iters    int
	LBPeriod int // iterations between AtSync; 0: never
	Progress int // print the residual every this many iterations; 0: only the last
	// CkptPeriod: iterations between checkpoints (--ckpt-period; 0: none)
	CkptPeriod int
}

// DefaultParams is the problem a plain run solves.
func DefaultParams() Params {
	return Params{Blocks: 4, Size: 32, Iters: 100, LBPeriod: 10, Progress: 20}
}

// Validate checks p, naming the flag at fault.
func (p Params) Validate() error {
	var errs []error
	if p.Blocks < 1 || p.Blocks > 256 {
		errs = append(errs, fmt.Errorf("flag -blocks: %d: want 1 to 256", p.Blocks))
	}
	if p.Size < 1 || p.Size > 4096 {
		errs = append(errs, fmt.Errorf("flag -size: %d: want 1 to 4096", p.Size))
	}
	if p.Iters < 1 {
		errs = append(errs, fmt.Errorf("flag -iters: %d: want at least 1", p.Iters))
	}
	if p.LBPeriod < 0 || p.Progress < 0 {
		errs = append(errs, fmt.Errorf("flags -lb-period and -progress: want 0 or more"))
	}
	return errors.Join(errs...)
}

// Boundary is the fixed value on the square's edges: 1 on the top edge,
// 0 on the others.
func Boundary(row, col, n int) float64 {
	if row < 0 {
		return 1
	}
	return 0
}

// Main drives the run and checks it.
type Main struct {
	P         Params
	Blocks    chare.ArrayProxy[Block]
	Residuals []float64 // the largest change of each iteration
}

// Block is one square of Size×Size cells and its ghost layer.
type Block struct {
	P      Params
	Iter   int64
	Cells  []float64           // (Size+2)², row-major, ghosts around
	Ghosts chare.Gather[Ghost] // neighbours' edges, by iteration
}

// Ghost is a neighbour's edge for iteration Iter, from direction Dir
// (where it is, seen from the receiver).
type Ghost struct {
	Iter int64
	Dir  int8
	Vals []float64
}

// WireSize is the message's size on the wire.
func (g Ghost) WireSize() int { return 8*len(g.Vals) + 9 }

// Directions of a block's neighbours.
const (
	up int8 = iota
	down
	left
	right
)

// Final is a block's cells at the end.
type Final struct {
	Row, Col int
	Vals     []float64
}

var (
	mainType = chare.NewMainTypeOf[Main, Params]("jacobi2d.Main")
	blocks   = chare.NewType[Block, Params]("jacobi2d.Block")
	finals   = chare.Concat[Final]()

	start    *chare.Entry[Block, struct{}]
	ghost    *chare.Entry[Block, Ghost]
	resume   *chare.Entry[Block, struct{}]
	residual *chare.Entry[Main, float64]
	atCkpt   *chare.Entry[Main, struct{}]
	done     *chare.Entry[Main, []Final]
	compute  *chare.Continuation[Block, Ghost]
)

func init() {
	start = chare.NewEntry(blocks, (*Block).Start)
	ghost = chare.NewEntry(blocks, (*Block).Ghost)
	resume = chare.NewEntry(blocks, (*Block).Resume)
	residual = chare.NewEntry(mainType, (*Main).Residual)
	atCkpt = chare.NewEntry(mainType, (*Main).AtCheckpoint)
	done = chare.NewEntry(mainType, (*Main).Done)
	compute = chare.NewContinuation(blocks, (*Block).Compute)
}

// Init creates the blocks and starts them.
func (m *Main) Init(ctx *chare.Ctx, p Params) {
	steps, every := chare.CheckpointPeriod(ctx)
	if every > 0 {
		ctx.Fail(fmt.Errorf("flag --ckpt-period %v: jacobi2d checkpoints every N iterations (give a number)", every))
		return
	}
	p.CkptPeriod = steps
	m.P = p
	fmt.Fprintf(ctx.Out(), "jacobi2d: %d×%d blocks of %d×%d cells on %d PEs, %d iterations, AtSync every %d\n",
		p.Blocks, p.Blocks, p.Size, p.Size, ctx.NumPEs(), p.Iters, p.LBPeriod)
	m.Blocks = blocks.NewArray(ctx, []int{p.Blocks, p.Blocks}, p)
	start.Broadcast(ctx, m.Blocks, struct{}{})
}

// AtCheckpoint: every block finished the iteration before a checkpoint,
// and no ghost is in flight. The blocks resume once it is committed (in
// this run, or in one restarted from it).
func (m *Main) AtCheckpoint(ctx *chare.Ctx, _ struct{}) {
	chare.Checkpoint(ctx, resume.CallbackBroadcast(m.Blocks))
}

// Residual is one iteration's largest change (reductions complete in
// order).
func (m *Main) Residual(ctx *chare.Ctx, r float64) {
	m.Residuals = append(m.Residuals, r)
	if n := len(m.Residuals); m.P.Progress > 0 && n%m.P.Progress == 0 || n == m.P.Iters {
		fmt.Fprintf(ctx.Out(), "iteration %d: largest change %.6e\n", n, r)
	}
}

// Done checks the blocks' cells against the serial computation.
func (m *Main) Done(ctx *chare.Ctx, fs []Final) {
	want, _ := Serial(m.P)
	n := m.P.Blocks * m.P.Size
	for _, f := range fs {
		for i, v := range f.Vals {
			r, c := f.Row*m.P.Size+i/m.P.Size, f.Col*m.P.Size+i%m.P.Size
			if w := want[r*n+c]; math.Float64bits(v) != math.Float64bits(w) {
				ctx.Fail(fmt.Errorf("check failed: cell (%d,%d) is %v, the serial computation says %v", r, c, v, w))
				return
			}
		}
	}
	fmt.Fprintf(ctx.Out(), "check passed: every cell equals the serial computation's\n")
	ctx.Exit(0)
}

// Init sets a block's cells to 0.
func (b *Block) Init(ctx *chare.Ctx, p Params) {
	b.P = p
	b.Cells = make([]float64, (p.Size+2)*(p.Size+2))
}

// Start begins the first iteration.
func (b *Block) Start(ctx *chare.Ctx, _ struct{}) { b.iterate(ctx) }

// ResumeFromSync goes on after a balancing step.
func (b *Block) ResumeFromSync(ctx *chare.Ctx) { b.iterate(ctx) }

// Resume goes on after a checkpoint: to AtSync, if it is also time for
// that, or the next iteration.
func (b *Block) Resume(ctx *chare.Ctx, _ struct{}) {
	if b.P.LBPeriod > 0 && b.Iter%int64(b.P.LBPeriod) == 0 {
		ctx.AtSync()
		return
	}
	b.iterate(ctx)
}

// Ghost takes a neighbour's edge: for this iteration or a later one.
func (b *Block) Ghost(ctx *chare.Ctx, g Ghost) { b.Ghosts.Put(ctx, g.Iter, g) }

// iterate sends this iteration's edges and waits for the neighbours'.
func (b *Block) iterate(ctx *chare.Ctx) {
	ix := ctx.Index()
	row, col, n, s := int(ix.C[0]), int(ix.C[1]), b.P.Blocks, b.P.Size
	arr := chare.ThisArray[Block](ctx)
	edge := func(to chare.ElemProxy[Block], dir int8, at func(k int) int) {
		v := make([]float64, s)
		for k := range v {
			v[k] = b.Cells[at(k)]
		}
		ghost.Send(ctx, to, Ghost{Iter: b.Iter, Dir: dir, Vals: v})
	}
	w := s + 2
	neighbours := 0
	if row > 0 { // my top row is the upper block's lower ghost row
		edge(arr.At(row-1, col), down, func(k int) int { return 1*w + 1 + k })
		neighbours++
	}
	if row < n-1 {
		edge(arr.At(row+1, col), up, func(k int) int { return s*w + 1 + k })
		neighbours++
	}
	if col > 0 {
		edge(arr.At(row, col-1), right, func(k int) int { return (1+k)*w + 1 })
		neighbours++
	}
	if col < n-1 {
		edge(arr.At(row, col+1), left, func(k int) int { return (1+k)*w + s })
		neighbours++
	}
	chare.When(ctx, &b.Ghosts, b.Iter, neighbours, compute)
}

// Compute runs one iteration, once the neighbours' edges are in.
func (b *Block) Compute(ctx *chare.Ctx, gs []Ghost) {
	ix := ctx.Index()
	row, col, s := int(ix.C[0]), int(ix.C[1]), b.P.Size
	w := s + 2
	b.fillBoundary(row, col)
	for _, g := range gs { // placed by direction: the arrival order does not matter
		for k, v := range g.Vals {
			switch g.Dir {
			case up:
				b.Cells[k+1] = v
			case down:
				b.Cells[(s+1)*w+k+1] = v
			case left:
				b.Cells[(k+1)*w] = v
			case right:
				b.Cells[(k+1)*w+s+1] = v
			}
		}
	}
	next := make([]float64, len(b.Cells))
	copy(next, b.Cells)
	change := 0.0
	for i := 1; i <= s; i++ {
		for j := 1; j <= s; j++ {
			v := 0.25 * (b.Cells[(i-1)*w+j] + b.Cells[(i+1)*w+j] + b.Cells[i*w+j-1] + b.Cells[i*w+j+1])
			change = max(change, math.Abs(v-b.Cells[i*w+j]))
			next[i*w+j] = v
		}
	}
	b.Cells = next
	chare.Contribute(ctx, chare.MaxFloat64, change, residual.CallbackTo(mainType.MainProxy()))
	b.Iter++
	switch {
	case b.Iter == int64(b.P.Iters):
		vals := make([]float64, 0, s*s)
		for i := 1; i <= s; i++ {
			vals = append(vals, b.Cells[i*w+1:i*w+1+s]...)
		}
		chare.Contribute(ctx, finals, Final{Row: row, Col: col, Vals: vals}, done.CallbackTo(mainType.MainProxy()))
	case b.P.CkptPeriod > 0 && b.Iter%int64(b.P.CkptPeriod) == 0:
		chare.Contribute(ctx, chare.Barrier, struct{}{}, atCkpt.CallbackTo(mainType.MainProxy()))
	default:
		b.Resume(ctx, struct{}{})
	}
}

// fillBoundary writes the square's fixed edges into the ghost cells of a
// block on the edge of the square.
func (b *Block) fillBoundary(row, col int) {
	s, n := b.P.Size, b.P.Blocks
	w := s + 2
	for k := range s {
		if row == 0 {
			b.Cells[k+1] = Boundary(-1, col*s+k, n*s)
		}
		if row == n-1 {
			b.Cells[(s+1)*w+k+1] = Boundary(n*s, col*s+k, n*s)
		}
		if col == 0 {
			b.Cells[(k+1)*w] = Boundary(row*s+k, -1, n*s)
		}
		if col == n-1 {
			b.Cells[(k+1)*w+s+1] = Boundary(row*s+k, n*s, n*s)
		}
	}
}

// Serial is the same iterations on the whole grid, in one loop: its cells
// (row-major, without the boundary) and each iteration's largest change.
func Serial(p Params) ([]float64, []float64) {
	n := p.Blocks * p.Size
	w := n + 2
	cur := make([]float64, w*w)
	for k := range n {
		cur[k+1] = Boundary(-1, k, n)
		cur[(n+1)*w+k+1] = Boundary(n, k, n)
		cur[(k+1)*w] = Boundary(k, -1, n)
		cur[(k+1)*w+n+1] = Boundary(k, n, n)
	}
	next := slices.Clone(cur)
	var changes []float64
	for range p.Iters {
		change := 0.0
		for i := 1; i <= n; i++ {
			for j := 1; j <= n; j++ {
				v := 0.25 * (cur[(i-1)*w+j] + cur[(i+1)*w+j] + cur[i*w+j-1] + cur[i*w+j+1])
				change = max(change, math.Abs(v-cur[i*w+j]))
				next[i*w+j] = v
			}
		}
		changes = append(changes, change)
		cur, next = next, cur
	}
	out := make([]float64, 0, n*n)
	for i := 1; i <= n; i++ {
		out = append(out, cur[i*w+1:i*w+1+n]...)
	}
	return out, changes
}

// flags is the program's own flags, on p.
func flags(p *Params) *flag.FlagSet {
	fs := flag.NewFlagSet("jacobi2d", flag.ContinueOnError)
	fs.IntVar(&p.Blocks, "blocks", p.Blocks, "blocks a side of the square")
	fs.IntVar(&p.Size, "size", p.Size, "cells a side of a block")
	fs.IntVar(&p.Iters, "iters", p.Iters, "Jacobi iterations")
	fs.IntVar(&p.LBPeriod, "lb-period", p.LBPeriod, "iterations between load-balancing steps (AtSync); 0: none")
	fs.IntVar(&p.Progress, "progress", p.Progress, "print the largest change every this many iterations; 0: the last only")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: jacobi2d [flags]: Jacobi iteration on a square of -blocks² blocks of -size² cells, checked against a serial run\n")
	}
	return fs
}

// parse checks the command line's parameters (jacobi2d takes no
// positional arguments).
func parse(p *Params) func(args []string) (Params, error) {
	return func(args []string) (Params, error) {
		if len(args) > 0 {
			return *p, fmt.Errorf("unexpected argument %q (jacobi2d takes flags only: see --help)", args[0])
		}
		return *p, p.Validate()
	}
}

func main() {
	p := DefaultParams()
	chare.MainWith(mainType, flags(&p), parse(&p))
}
