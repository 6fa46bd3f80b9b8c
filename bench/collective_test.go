package bench

import (
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
)

// ---- 3. a reduction over 1,024 chares (sum of 3 float64) vs 1,024
// point-to-point messages to one chare ----

const redN = 1024

type RedMain struct {
	start time.Time `msgpack:"-"` // the benchmark's clock
	Arr   chare.ArrayProxy[RedElem]
	Round int
}

type RedElem struct {
	Got, Want int
	Sum       []float64
}

var (
	redMain    = chare.NewMainType[RedMain]("bench.RedMain")
	redElems   = chare.NewType[RedElem, struct{}]("bench.RedElem")
	redGo      *chare.Entry[RedElem, int]
	redGoP2P   *chare.Entry[RedElem, int]
	redCollect *chare.Entry[RedElem, []float64]
	redResult  *chare.Entry[RedMain, []float64]
	redMode    string
)

func init() {
	redGo = chare.NewEntry(redElems, (*RedElem).Go)
	redGoP2P = chare.NewEntry(redElems, (*RedElem).GoP2P)
	redCollect = chare.NewEntry(redElems, (*RedElem).Collect)
	redResult = chare.NewEntry(redMain, (*RedMain).Result)
}

func (e *RedElem) Init(*chare.Ctx, struct{}) {}

// Go contributes three doubles to a reduction whose result goes to main.
func (e *RedElem) Go(ctx *chare.Ctx, round int) {
	i := float64(ctx.Index().C[0])
	chare.Contribute(ctx, chare.SumFloat64s, []float64{i, 1, float64(round)}, redResult.CallbackTo(redMain.MainProxy()))
}

// GoP2P sends the same three doubles to element 0 instead.
func (e *RedElem) GoP2P(ctx *chare.Ctx, round int) {
	i := float64(ctx.Index().C[0])
	redCollect.Send(ctx, chare.ThisArray[RedElem](ctx).At(0), []float64{i, 1, float64(round)})
}

// Collect adds up what every element sent, in arrival order, and reports
// the total to main when all arrived.
func (e *RedElem) Collect(ctx *chare.Ctx, v []float64) {
	if e.Got == 0 {
		e.Want = redN
		e.Sum = []float64{0, 0, 0}
	}
	e.Got++
	for i := range v {
		e.Sum[i] += v[i]
	}
	if e.Got == e.Want {
		e.Got = 0
		redResult.Send(ctx, redMain.MainProxy(), e.Sum)
	}
}

func (m *RedMain) Init(ctx *chare.Ctx, _ []string) {
	m.Arr = redElems.NewArray(ctx, []int{redN}, struct{}{})
	m.start = time.Now()
	m.next(ctx)
}

func (m *RedMain) next(ctx *chare.Ctx) {
	if m.Round == benchN {
		benchElapsed = time.Since(m.start)
		ctx.Exit(0)
		return
	}
	m.Round++
	if redMode == "p2p" {
		redGoP2P.Broadcast(ctx, m.Arr, m.Round)
	} else {
		redGo.Broadcast(ctx, m.Arr, m.Round)
	}
}

func (m *RedMain) Result(ctx *chare.Ctx, v []float64) {
	if v[1] != redN {
		ctx.Fail(errCount(v[1]))
		return
	}
	m.next(ctx)
}

type errCount float64

func (e errCount) Error() string { return "wrong contributor count" }

func BenchmarkReduce1024_Reduction(b *testing.B) {
	redMode = "reduction"
	runProgram(b, redMain, 2)
}

func BenchmarkReduce1024_P2PToOne(b *testing.B) {
	redMode = "p2p"
	runProgram(b, redMain, 2)
}

// ---- 4. a section multicast to 75 members vs 75 point-to-point sends ----

const mcN = 75

type McMain struct {
	start time.Time `msgpack:"-"` // the benchmark's clock
	Arr   chare.ArrayProxy[McElem]
	Sec   chare.SectionProxy[McElem]
	Round int
	Acks  int
}

type McElem struct{}

var (
	mcMain    = chare.NewMainType[McMain]("bench.McMain")
	mcElems   = chare.NewType[McElem, struct{}]("bench.McElem")
	mcRecv    *chare.Entry[McElem, []float64]
	mcAck     *chare.Entry[McMain, int]
	mcMode    string
	mcPayload = make([]float64, 300) // 100 atoms' positions, as LeanMD sends
)

func init() {
	mcRecv = chare.NewEntry(mcElems, (*McElem).Recv)
	mcAck = chare.NewEntry(mcMain, (*McMain).Ack)
}

func (e *McElem) Init(*chare.Ctx, struct{}) {}

// Recv acknowledges to main by a point-to-point message in both variants,
// so the two differ only in how the 75 deliveries are made.
func (e *McElem) Recv(ctx *chare.Ctx, pos []float64) {
	mcAck.Send(ctx, mcMain.MainProxy(), 1)
}

func (m *McMain) Init(ctx *chare.Ctx, _ []string) {
	// 150 elements spread over the PEs; the section takes every other one.
	m.Arr = mcElems.NewArray(ctx, []int{2 * mcN}, struct{}{})
	m.Sec = m.Arr.SectionWhere(ctx, func(ix chare.Index) bool { return ix.C[0]%2 == 0 })
	m.start = time.Now()
	m.next(ctx)
}

func (m *McMain) next(ctx *chare.Ctx) {
	if m.Round == benchN {
		benchElapsed = time.Since(m.start)
		ctx.Exit(0)
		return
	}
	m.Round++
	m.Acks = 0
	if mcMode == "p2p" {
		for i := 0; i < 2*mcN; i += 2 {
			mcRecv.Send(ctx, m.Arr.At(i), mcPayload)
		}
	} else {
		mcRecv.Multicast(ctx, m.Sec, mcPayload)
	}
}

func (m *McMain) Ack(ctx *chare.Ctx, _ int) {
	if m.Acks++; m.Acks == mcN {
		m.next(ctx)
	}
}

func BenchmarkMulticast75_Section(b *testing.B) {
	mcMode = "section"
	runProgram(b, mcMain, 2)
}

func BenchmarkMulticast75_P2P(b *testing.B) {
	mcMode = "p2p"
	runProgram(b, mcMain, 2)
}
