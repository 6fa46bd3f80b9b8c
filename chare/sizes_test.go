package chare_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/loadbalance"
	"github.com/stretchr/testify/require"
)

// A ring whose elements send each other ghosts of 256 float64s, a struct
// that does not implement pe.Sizer, for four rounds, then balance.
type SizesMain struct{}

type SizesElem struct {
	Round int
	In    chare.Gather[sizesGhost]
}

type sizesGhost struct {
	Iter int64
	Vals []float64
}

const (
	sizesElems  = 6
	sizesRounds = 4
	sizesGhostB = 8 + 8*256 // Iter, Vals
)

var (
	sizesMain  = chare.NewMainType[SizesMain]("sz.Main")
	sizesElemT = chare.NewType[SizesElem, struct{}]("sz.Elem")
	sizesGo    *chare.Entry[SizesElem, struct{}]
	sizesRecv  *chare.Entry[SizesElem, sizesGhost]
	sizesDone  *chare.Entry[SizesMain, struct{}]
	sizesNext  *chare.Continuation[SizesElem, sizesGhost]
)

func init() {
	sizesGo = chare.NewEntry(sizesElemT, (*SizesElem).Go)
	sizesRecv = chare.NewEntry(sizesElemT, (*SizesElem).Recv)
	sizesDone = chare.NewEntry(sizesMain, (*SizesMain).Done)
	sizesNext = chare.NewContinuation(sizesElemT, (*SizesElem).Next)
}

func (*SizesMain) Init(ctx *chare.Ctx, _ []string) {
	sizesGo.Broadcast(ctx, sizesElemT.NewArray(ctx, []int{sizesElems}, struct{}{}), struct{}{})
}

func (*SizesMain) Done(ctx *chare.Ctx, _ struct{}) { ctx.Exit(0) }

func (*SizesElem) Init(*chare.Ctx, struct{}) {}

func (e *SizesElem) Go(ctx *chare.Ctx, _ struct{}) {
	if e.Round == sizesRounds {
		ctx.AtSync()
		return
	}
	to := (int(ctx.Index().C[0]) + 1) % sizesElems
	sizesRecv.Send(ctx, chare.ThisArray[SizesElem](ctx).At(to), sizesGhost{Iter: int64(e.Round), Vals: make([]float64, 256)})
	chare.When(ctx, &e.In, int64(e.Round), 1, sizesNext)
}

func (e *SizesElem) Recv(ctx *chare.Ctx, g sizesGhost) { e.In.Put(ctx, g.Iter, g) }

func (e *SizesElem) Next(ctx *chare.Ctx, _ []sizesGhost) { e.Round++; e.Go(ctx, struct{}{}) }

func (e *SizesElem) ResumeFromSync(ctx *chare.Ctx) {
	chare.Contribute(ctx, chare.Barrier, struct{}{}, sizesDone.CallbackTo(sizesMain.MainProxy()))
}

// A struct message that does not say its size (pe.Sizer) counts its data
// in the summary, the balancer's communication graph and the trace: it
// used to count 0 bytes in the first two and 4294967295 (-1) in the trace.
func TestStructMessagesAreSized(t *testing.T) {
	dir := t.TempDir()
	trace, dump, summary := filepath.Join(dir, "run.json"), filepath.Join(dir, "lb.dump"), filepath.Join(dir, "sum.json")
	res := chare.Run(sizesMain, chare.Config{PEs: 2, Balancer: "greedy", LBDump: dump, Trace: trace, SummaryJSON: summary})
	require.NoError(t, res.Err)

	ghosts := uint64(sizesElems * sizesRounds)
	require.Zero(t, res.Stats.Ops.Unsized)
	require.Equal(t, ghosts*sizesGhostB, res.Stats.Ops.P2PBytes, "only the ghosts go point to point")
	b, err := os.ReadFile(summary)
	require.NoError(t, err)
	var s chare.Summary
	require.NoError(t, json.Unmarshal(b, &s))
	require.Equal(t, ghosts*sizesGhostB, s.Messages.P2P.Bytes)

	f, err := os.Open(dump)
	require.NoError(t, err)
	defer f.Close()
	recs, err := loadbalance.ReadDump(f, dump)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	var msgs uint64
	for _, c := range recs[0].Stats.Comm {
		if c.From != c.To {
			require.Equal(t, c.Msgs*sizesGhostB, c.Bytes, "%+v", c)
			msgs += c.Msgs
		}
	}
	require.Equal(t, ghosts, msgs)

	tf := readTrace(t, trace, 2)
	n := 0
	for _, e := range tf.TraceEvents {
		if e.Cat != "entry" {
			continue
		}
		require.NotNil(t, e.Args.Bytes, "%+v", e)
		require.Less(t, *e.Args.Bytes, 1<<20, "%+v", e)
		if e.Name == "sz.Elem.Recv" {
			require.Equal(t, sizesGhostB, *e.Args.Bytes)
			n++
		}
	}
	require.GreaterOrEqual(t, n, int(ghosts), "each Recv, in one or two parts (before and after the continuation it ran)")
}

// A continuation a Gather runs is a span of its own in the trace, named
// as its method, not time of the entry whose Put completed it: on each
// PE's lane the entries' spans, continuations' included, never overlap.
func TestContinuationsAreSpansOfTheirOwn(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "run.json")
	res := chare.Run(sizesMain, chare.Config{PEs: 2, Trace: trace})
	require.NoError(t, res.Err)
	tf := readTrace(t, trace, 2)
	counts, _ := entryCounts(tf)
	require.GreaterOrEqual(t, counts["sz.Elem.Next"], sizesElems*sizesRounds, "%v", counts)
	ends := map[int]float64{}
	for _, e := range tf.TraceEvents {
		if e.Cat != "entry" {
			continue
		}
		require.GreaterOrEqual(t, e.Ts+0.001, ends[e.Tid], "%s on PE %d begins before the span before it ended (µs, to the ns the format rounds to)", e.Name, e.Tid)
		ends[e.Tid] = e.Ts + *e.Dur
	}
}

// The summary's JSON names every key in snake case, load_balancing's too
// (they were Go's field names: Moved, FirstBefore).
func TestTheSummarysKeysAreSnakeCase(t *testing.T) {
	summary := filepath.Join(t.TempDir(), "sum.json")
	res := chare.Run(sizesMain, chare.Config{PEs: 2, Balancer: "greedy", SummaryJSON: summary})
	require.NoError(t, res.Err)
	b, err := os.ReadFile(summary)
	require.NoError(t, err)
	var raw any
	require.NoError(t, json.Unmarshal(b, &raw))
	var walk func(path string, v any)
	keys := 0
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				require.Regexp(t, `^[a-z][a-z0-9_]*$`, k, "%s.%s", path, k)
				keys++
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		}
	}
	walk("", raw)
	lb := raw.(map[string]any)["load_balancing"].(map[string]any)
	require.Equal(t, "greedy", lb["strategies"])
	require.Equal(t, 1.0, lb["steps"])
	require.Contains(t, lb, "first_before")
	require.Greater(t, keys, 50)
}
