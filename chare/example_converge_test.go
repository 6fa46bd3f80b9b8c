package chare_test

import (
	"fmt"
	"math"

	"github.com/charmgo/charmgo/chare"
)

// ---- iterating until converged, with checkpoints and load balancing ----

// Heat relaxes the temperature along a rod (Jacobi): its ends held at 1
// and 0, the rod cut into slabs, an array element each. Every iteration
// the slabs swap their edge cells, relax, and contribute their largest
// change; main decides what comes next: stop, once the change is below
// the tolerance; or go on, after a checkpoint every so many iterations,
// through a load-balancing step (AtSync) every so many. The slabs wait
// for main's word, so no message of theirs is in flight when it
// checkpoints.
type Heat struct {
	Slabs chare.ArrayProxy[Slab]
	Iter  int
}

// Slab is heatCells cells of the rod, with a ghost cell at each end.
type Slab struct {
	Iter  int64
	T     []float64
	Edges chare.Gather[Edge] // by iteration
}

// Edge is a neighbour's edge cell for iteration Iter.
type Edge struct {
	Iter     int64
	FromLeft bool
	V        float64
}

// Next tells the slabs to go on: through AtSync first, if Sync.
type Next struct{ Sync bool }

const (
	heatSlabs, heatCells = 4, 4
	heatTol              = 1e-3
	heatCkptEvery        = 50 // iterations
	heatLBEvery          = 75
)

var (
	heatMain  = chare.NewMainType[Heat]("example.Heat")
	slabs     = chare.NewType[Slab, struct{}]("example.Slab")
	rod       = chare.Concat[[]float64]() // the slabs' cells, in index order
	slabNext  *chare.Entry[Slab, Next]
	slabEdge  *chare.Entry[Slab, Edge]
	slabCells *chare.Entry[Slab, struct{}]
	heatDelta *chare.Entry[Heat, float64]
	heatSaved *chare.Entry[Heat, struct{}]
	heatRod   *chare.Entry[Heat, [][]float64]
	relax     *chare.Continuation[Slab, Edge]
)

func init() {
	slabNext = chare.NewEntry(slabs, (*Slab).Next)
	slabEdge = chare.NewEntry(slabs, (*Slab).Edge)
	slabCells = chare.NewEntry(slabs, (*Slab).Cells)
	heatDelta = chare.NewEntry(heatMain, (*Heat).Delta)
	heatSaved = chare.NewEntry(heatMain, (*Heat).Saved)
	heatRod = chare.NewEntry(heatMain, (*Heat).Rod)
	relax = chare.NewContinuation(slabs, (*Slab).Relax)
}

func (h *Heat) Init(ctx *chare.Ctx, _ []string) {
	h.Slabs = slabs.NewArray(ctx, []int{heatSlabs}, struct{}{})
	h.next(ctx)
}

// next begins iteration Iter+1 (a step: failures injected at it happen now).
func (h *Heat) next(ctx *chare.Ctx) {
	h.Iter++
	chare.AtStep(ctx, h.Iter)
	slabNext.Broadcast(ctx, h.Slabs, Next{Sync: h.Iter%heatLBEvery == 0})
}

// Delta is an iteration's largest change (reductions complete in order).
func (h *Heat) Delta(ctx *chare.Ctx, d float64) {
	switch {
	case d < heatTol:
		slabCells.Broadcast(ctx, h.Slabs, struct{}{})
	case h.Iter%heatCkptEvery == 0:
		chare.Checkpoint(ctx, heatSaved.CallbackTo(heatMain.MainProxy()))
	default:
		h.next(ctx)
	}
}

// Saved goes on once the checkpoint is committed: in this run, or in one
// restarted from it.
func (h *Heat) Saved(ctx *chare.Ctx, _ struct{}) { h.next(ctx) }

func (h *Heat) Rod(ctx *chare.Ctx, parts [][]float64) {
	sayf("converged after %d iterations:", h.Iter)
	for _, p := range parts {
		for _, v := range p {
			sayf(" %.2f", v)
		}
	}
	sayf("\n")
	ctx.Exit(0)
}

func (s *Slab) Init(*chare.Ctx, struct{}) { s.T = make([]float64, heatCells+2) }

func (s *Slab) Next(ctx *chare.Ctx, n Next) {
	if n.Sync {
		ctx.AtSync() // the balancer may move the slab; ResumeFromSync goes on
		return
	}
	s.iterate(ctx)
}

func (s *Slab) ResumeFromSync(ctx *chare.Ctx) { s.iterate(ctx) }

// iterate sends this iteration's edge cells and waits for the neighbours'.
func (s *Slab) iterate(ctx *chare.Ctx) {
	s.Iter++
	i, arr := int(ctx.Index().C[0]), chare.ThisArray[Slab](ctx)
	want := 0
	if i > 0 {
		slabEdge.Send(ctx, arr.At(i-1), Edge{Iter: s.Iter, V: s.T[1]})
		want++
	}
	if i < heatSlabs-1 {
		slabEdge.Send(ctx, arr.At(i+1), Edge{Iter: s.Iter, FromLeft: true, V: s.T[heatCells]})
		want++
	}
	chare.When(ctx, &s.Edges, s.Iter, want, relax)
}

func (s *Slab) Edge(ctx *chare.Ctx, e Edge) { s.Edges.Put(ctx, e.Iter, e) }

// Relax runs once the neighbours' edges are in.
func (s *Slab) Relax(ctx *chare.Ctx, es []Edge) {
	i := int(ctx.Index().C[0])
	if i == 0 {
		s.T[0] = 1 // the hot end
	}
	for _, e := range es { // placed by side: the arrival order does not matter
		if e.FromLeft {
			s.T[0] = e.V
		} else {
			s.T[heatCells+1] = e.V
		}
	}
	old := append([]float64(nil), s.T...)
	delta := 0.0
	for c := 1; c <= heatCells; c++ {
		s.T[c] = (old[c-1] + old[c+1]) / 2
		delta = max(delta, math.Abs(s.T[c]-old[c]))
	}
	chare.Contribute(ctx, chare.MaxFloat64, delta, heatDelta.CallbackTo(heatMain.MainProxy()))
}

func (s *Slab) Cells(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, rod, s.T[1:heatCells+1], heatRod.CallbackTo(heatMain.MainProxy()))
}

func Example_iterateUntilConverged() {
	res := chare.Run(heatMain, chare.Config{PEs: 3, Balancer: "rotate"})
	fmt.Println("exit", res.Code, res.Err, "balancing steps", res.Summary.LoadBalancing.Steps, "checkpoints", res.Summary.Checkpoints.Count)
	// PE 1 fails at iteration 120: under camel it restarts alone from the
	// checkpoint of iteration 100 while the others replay its messages;
	// the run ends as it would have, to the bit
	res = chare.Run(heatMain, chare.Config{PEs: 3, Balancer: "rotate", FT: "camel", Kills: []chare.Kill{{PE: 1, Step: 120}}})
	fmt.Println("exit", res.Code, res.Err, "failures", res.Summary.FaultTolerance.Failures)
	// Output:
	// converged after 180 iterations: 0.94 0.87 0.81 0.75 0.68 0.62 0.56 0.50 0.44 0.38 0.33 0.27 0.22 0.16 0.11 0.05
	// exit 0 <nil> balancing steps 2 checkpoints 3
	// converged after 180 iterations: 0.94 0.87 0.81 0.75 0.68 0.62 0.56 0.50 0.44 0.38 0.33 0.27 0.22 0.16 0.11 0.05
	// exit 0 <nil> failures 1
}
