package ftsim

import (
	"time"

	"github.com/charmgo/charmgo/chare"
)

// Mix is a program that uses what recovery must rebuild and replay: a
// bounded array and a sparse 2D array inserted across PEs, a section with
// a repeated member, broadcasts, section multicasts, point-to-point sends,
// array and section reductions, a checkpoint, and a migration after it.
// Its results (the main chare's logs) do not depend on the order in which
// messages arrive, so every interleaving and every recovery must end with
// the same ones. MixMain is its main chare.
type MixMain struct {
	A      chare.ArrayProxy[MixA]
	S      chare.ArrayProxy[MixS]
	Sec    chare.SectionProxy[MixA]
	Step   int
	Got    int
	Steps  int
	Ckpt   int
	ALog   []int64
	SLog   []int64
	SecLog []int64
}

// MixA is an element of the bounded array.
type MixA struct {
	V  int64
	Vs []int64 // V before each step: a step's broadcast and multicast race at an element
	S  chare.ArrayProxy[MixS]
}

// MixS is an element of the sparse array.
type MixS struct {
	W    int64
	Seen int // bumps this step
}

type mixTouch struct {
	Step int
	Sec  chare.SectionProxy[MixA]
}

// MixArgs are the program's parameters: steps, and the step after which
// it checkpoints (0: never).
type MixArgs struct{ Steps, Ckpt int }

// Logs are the program's results: the array's, the sparse array's and
// the section's reduction results, step by step.
func (m *MixMain) Logs() [3][]int64 { return [3][]int64{m.ALog, m.SLog, m.SecLog} }

var (
	// Mix is the program's main chare type (see MixMain).
	Mix       = chare.NewMainTypeOf[MixMain, MixArgs]("ftsim.mix.Main")
	mixAT     = chare.NewType[MixA, chare.ArrayProxy[MixS]]("ftsim.mix.A")
	mixST     = chare.NewType[MixS, int64]("ftsim.mix.S")
	mixAStep  *chare.Entry[MixA, int]
	mixATouch *chare.Entry[MixA, mixTouch]
	mixSBump  *chare.Entry[MixS, int]
	mixASum   *chare.Entry[MixMain, int64]
	mixSSum   *chare.Entry[MixMain, int64]
	mixSecSum *chare.Entry[MixMain, int64]
	mixResume *chare.Entry[MixMain, struct{}]
)

func init() {
	mixAStep = chare.NewEntry(mixAT, (*MixA).Step)
	mixATouch = chare.NewEntry(mixAT, (*MixA).Touch)
	mixSBump = chare.NewEntry(mixST, (*MixS).Bump)
	mixASum = chare.NewEntry(Mix, (*MixMain).ASum)
	mixSSum = chare.NewEntry(Mix, (*MixMain).SSum)
	mixSecSum = chare.NewEntry(Mix, (*MixMain).SecSum)
	mixResume = chare.NewEntry(Mix, (*MixMain).Resume)
}

func mixSIndex(i int) chare.Index { j := i % 6; return chare.Idx(j%4, j/2) }

func (m *MixMain) Init(ctx *chare.Ctx, a MixArgs) {
	m.Steps = a.Steps
	m.S = mixST.NewSparseArray(ctx, []int{4, 4})
	for i := 0; i < 6; i++ {
		mixST.Insert(ctx, m.S, mixSIndex(i), i%ctx.NumPEs(), int64(i+1))
	}
	m.S.DoneInserting(ctx)
	m.A = mixAT.NewArray(ctx, []int{8}, m.S)
	m.Sec = m.A.Section(ctx, []chare.Index{chare.Idx(1), chare.Idx(3), chare.Idx(5), chare.Idx(5)})
	chare.StepRange(ctx, 1, m.Steps)
	m.Ckpt = a.Ckpt
	m.next(ctx)
}

func (m *MixMain) next(ctx *chare.Ctx) {
	m.Step++
	if m.Step > m.Steps {
		ctx.Exit(0)
		return
	}
	chare.AtStep(ctx, m.Step)
	mixAStep.Broadcast(ctx, m.A, m.Step)
	mixATouch.Multicast(ctx, m.Sec, mixTouch{m.Step, m.Sec})
}

func (m *MixMain) result(ctx *chare.Ctx, log *[]int64, v int64) {
	*log = append(*log, v)
	if m.Got++; m.Got < 3 {
		return
	}
	m.Got = 0
	if m.Step == m.Ckpt {
		chare.Checkpoint(ctx, mixResume.CallbackTo(Mix.MainProxy()))
		return
	}
	m.next(ctx)
}

func (m *MixMain) ASum(ctx *chare.Ctx, v int64)      { m.result(ctx, &m.ALog, v) }
func (m *MixMain) SSum(ctx *chare.Ctx, v int64)      { m.result(ctx, &m.SLog, v) }
func (m *MixMain) SecSum(ctx *chare.Ctx, v int64)    { m.result(ctx, &m.SecLog, v) }
func (m *MixMain) Resume(ctx *chare.Ctx, _ struct{}) { m.next(ctx) }

func (a *MixA) Init(ctx *chare.Ctx, s chare.ArrayProxy[MixS]) {
	a.V, a.S = int64(ctx.Index().C[0]), s
	a.Vs = []int64{a.V}
}

func (a *MixA) Step(ctx *chare.Ctx, s int) {
	i := int(ctx.Index().C[0])
	a.V = (a.V*3 + int64(s+i)) % 1000003
	a.Vs = append(a.Vs, a.V)
	chare.Contribute(ctx, chare.SumInt64, a.V, mixASum.CallbackTo(Mix.MainProxy()))
	j := i % 6
	mixSBump.Send(ctx, a.S.At(j%4, j/2), s)
	if s == 4 && i == 2 { // moves after the checkpoint
		ctx.Migrate((ctx.PE() + 1) % ctx.NumPEs())
	}
}

func (a *MixA) Touch(ctx *chare.Ctx, t mixTouch) {
	// the value the previous step left: this step's broadcast may or may
	// not have come first
	v := a.Vs[t.Step-1]
	chare.ContributeSection(ctx, t.Sec, chare.SumInt64, v*2+int64(t.Step), mixSecSum.CallbackTo(Mix.MainProxy()))
}

func (s *MixS) Init(ctx *chare.Ctx, w int64) { s.W = w }

func (s *MixS) Bump(ctx *chare.Ctx, step int) {
	s.W = (s.W*7 + int64(step)) % 1000003
	s.Seen++
	want := 1
	if ix := ctx.Index(); ix.C[1] == 0 && ix.C[0] < 2 { // S(0,0), S(1,0) get two A elements each
		want = 2
	}
	if s.Seen == want {
		s.Seen = 0
		chare.Contribute(ctx, chare.SumInt64, s.W, mixSSum.CallbackTo(Mix.MainProxy()))
	}
}

// Stamp is a program that is not deterministic on purpose: a ring of
// elements passes a token round, and each pass carries the nanoseconds
// of the clock when it was sent, which nothing reads. Its result (the
// passes counted) is the same every run, and message logging recovers
// it, yet a recovered PE re-sends its passes with other stamps: what
// --ft-verify must catch. StampMain is its main chare.
type StampMain struct {
	Passes int
}

// StampRing is an element of the ring.
type StampRing struct{}

type stampPass struct {
	Step, Steps, Ring int
	Stamp             int64
}

var (
	// StampProgram is the main chare type of Stamp (its argument: the
	// passes to make).
	StampProgram = chare.NewMainTypeOf[StampMain, int]("ftsim.stamp.Main")
	stampRingT   = chare.NewType[StampRing, struct{}]("ftsim.stamp.Ring")
	stampPassE   *chare.Entry[StampRing, stampPass]
	stampDoneE   *chare.Entry[StampMain, int]
)

func init() {
	stampPassE = chare.NewEntry(stampRingT, (*StampRing).Pass)
	stampDoneE = chare.NewEntry(StampProgram, (*StampMain).Done)
}

func (m *StampMain) Init(ctx *chare.Ctx, passes int) {
	ring := stampRingT.NewArray(ctx, []int{2 * ctx.NumPEs()}, struct{}{})
	chare.StepRange(ctx, 1, passes)
	stampPassE.Send(ctx, ring.At(0), stampPass{Step: 1, Steps: passes, Ring: 2 * ctx.NumPEs(), Stamp: time.Now().UnixNano()})
}

func (m *StampMain) Done(ctx *chare.Ctx, passes int) {
	m.Passes = passes
	ctx.Exit(0)
}

func (r *StampRing) Init(*chare.Ctx, struct{}) {}

func (r *StampRing) Pass(ctx *chare.Ctx, p stampPass) {
	if p.Step > p.Steps {
		stampDoneE.Send(ctx, StampProgram.MainProxy(), p.Steps)
		return
	}
	chare.AtStep(ctx, p.Step)
	next := (int(ctx.Index().C[0]) + 1) % p.Ring
	p.Step++
	p.Stamp = time.Now().UnixNano()
	stampPassE.Send(ctx, chare.ThisArray[StampRing](ctx).At(next), p)
}
