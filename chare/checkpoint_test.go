package chare_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/manager"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// A coordinated checkpoint, taken twice in a row after a barrier (the
// second waits for the first), holds every element exactly once, on the PE
// it lives on, with its state at the barrier — migratable or not, packed
// by msgpack or by its own Pack — and is written whole to the checkpoint
// directory, of which only the last complete epoch is kept.

type CkMain struct {
	Arr   chare.ArrayProxy[CkElem]
	Fixed chare.ArrayProxy[CkFixed]
	Done  int
}

type CkElem struct{ Value int64 }

type CkFixed struct{ Tag string }

var (
	ckMain     = chare.NewMainType[CkMain]("ck.Main")
	ckElemT    = chare.NewType[CkElem, int64]("ck.Elem")
	ckFixedT   = chare.NewType[CkFixed, string]("ck.Fixed", chare.NotMigratable())
	ckBump     *chare.Entry[CkElem, int64]
	ckBarrier  *chare.Entry[CkMain, struct{}]
	ckCkptDone *chare.Entry[CkMain, struct{}]
)

func init() {
	ckBump = chare.NewEntry(ckElemT, (*CkElem).Bump)
	ckBarrier = chare.NewEntry(ckMain, (*CkMain).Barrier)
	ckCkptDone = chare.NewEntry(ckMain, (*CkMain).CheckpointDone)
}

func (m *CkMain) Init(ctx *chare.Ctx, _ []string) {
	m.Arr = ckElemT.NewArray(ctx, []int{4, 5}, 10)
	m.Fixed = ckFixedT.NewArray(ctx, []int{3}, "fixed")
	ckBump.Broadcast(ctx, m.Arr, 5)
}

func (e *CkElem) Init(ctx *chare.Ctx, v int64) {
	e.Value = v + int64(ctx.Index().C[0]*10+ctx.Index().C[1])
}

func (e *CkElem) Bump(ctx *chare.Ctx, by int64) {
	e.Value += by
	chare.Contribute(ctx, chare.Barrier, struct{}{}, ckBarrier.CallbackTo(ckMain.MainProxy()))
}

func (f *CkFixed) Init(ctx *chare.Ctx, tag string) { f.Tag = tag }

func (m *CkMain) Barrier(ctx *chare.Ctx, _ struct{}) {
	chare.Checkpoint(ctx, ckCkptDone.CallbackTo(ckMain.MainProxy()))
	chare.Checkpoint(ctx, ckCkptDone.CallbackTo(ckMain.MainProxy()))
}

func (m *CkMain) CheckpointDone(ctx *chare.Ctx, _ struct{}) {
	m.Done++
	if m.Done == 2 {
		ckBump.Broadcast(ctx, m.Arr, 1000) // after the checkpoints: not in them
		ctx.Exit(0)
	}
}

func TestCheckpointHoldsEveryChare(t *testing.T) {
	for _, pes := range []int{1, 3} {
		dir := t.TempDir()
		res := chare.Run(ckMain, chare.Config{PEs: pes, CheckpointDir: dir})
		require.NoError(t, res.Err)
		require.Equal(t, uint64(2), res.Stats.Ops.Checkpoints)
		require.Positive(t, res.Stats.Ops.CheckpointBytes)

		latest, err := manager.ReadLatest(dir)
		require.NoError(t, err)
		require.Equal(t, [2]int64{2, int64(pes)}, [2]int64{int64(latest.Epoch), int64(latest.NumPEs)})
		entries, _ := os.ReadDir(dir)
		require.Len(t, entries, 2, "LATEST and the last epoch only")

		values := map[[2]int32]int64{}
		tags := 0
		for p := 0; p < pes; p++ {
			_, s, err := manager.ReadSnapshotFile(dir, latest, p)
			require.NoError(t, err)
			require.Equal(t, int32(p), s.PE)
			for _, c := range s.Collections {
				for _, e := range c.Elements {
					switch c.Name {
					case "ck.Elem":
						var el CkElem
						require.NoError(t, msgpack.Unmarshal(e.State, &el))
						k := [2]int32{e.Index[0], e.Index[1]}
						require.NotContains(t, values, k, "element %v in two snapshots", k)
						values[k] = el.Value
					case "ck.Fixed":
						var f CkFixed
						require.NoError(t, msgpack.Unmarshal(e.State, &f))
						require.Equal(t, "fixed", f.Tag)
						tags++
					case "ck.Main":
						var mm CkMain
						require.NoError(t, msgpack.Unmarshal(e.State, &mm))
						require.Equal(t, p, 0)
					}
				}
			}
		}
		require.Len(t, values, 20)
		for k, v := range values {
			require.Equal(t, 15+int64(k[0]*10+k[1]), v, "element %v holds its state at the barrier", k)
		}
		require.Equal(t, 3, tags)
	}
}

func TestCheckpointDirMustBeUsable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	res := chare.Run(ckMain, chare.Config{PEs: 2, CheckpointDir: filepath.Join(file, "sub")})
	require.Equal(t, 2, res.Code)
	require.ErrorContains(t, res.Err, "flag --ckpt-dir")

	_, err := chare.ParseFlags([]string{"--ckpt-dir"})
	require.ErrorContains(t, err, "flag --ckpt-dir needs a value")
	cfg, err := chare.ParseFlags([]string{"--ckpt-dir=/tmp/x", "7"})
	require.NoError(t, err)
	require.Equal(t, "/tmp/x", cfg.CheckpointDir)
	require.Equal(t, []string{"7"}, cfg.Args)
}

// A checkpoint asked for while the runtime is still busy — here a section
// whose members' places are being looked up — waits until nothing is in
// flight, so every PE's snapshot holds the section: a run restarted from
// it multicasts through it and reduces over it.

type CkSecMain struct {
	S   chare.ArrayProxy[CkSparse]
	Sec chare.SectionProxy[CkSparse]
}

type CkSparse struct{ V int64 }

var (
	ckSecMain  = chare.NewMainType[CkSecMain]("cksec.Main")
	ckSparseT  = chare.NewType[CkSparse, int64]("cksec.Sparse")
	ckSecGo    *chare.Entry[CkSecMain, struct{}]
	ckSecCkpt  *chare.Entry[CkSecMain, struct{}]
	ckSecSum   *chare.Entry[CkSecMain, int64]
	ckSparsePg *chare.Entry[CkSparse, chare.SectionProxy[CkSparse]]
	ckSecOut   int64
)

func init() {
	ckSecGo = chare.NewEntry(ckSecMain, (*CkSecMain).Go)
	ckSecCkpt = chare.NewEntry(ckSecMain, (*CkSecMain).Checkpointed)
	ckSecSum = chare.NewEntry(ckSecMain, (*CkSecMain).Sum)
	ckSparsePg = chare.NewEntry(ckSparseT, (*CkSparse).Ping)
}

func (m *CkSecMain) Init(ctx *chare.Ctx, _ []string) {
	m.S = ckSparseT.NewSparseArray(ctx, []int{16})
	for i := 0; i < 16; i++ {
		ckSparseT.Insert(ctx, m.S, chare.Idx(i), (i*7+1)%ctx.NumPEs(), int64(i))
	}
	m.S.DoneInserting(ctx)
	ckSecGo.Send(ctx, ckSecMain.MainProxy(), struct{}{})
}

func (m *CkSecMain) Go(ctx *chare.Ctx, _ struct{}) {
	var members []chare.Index
	for i := 0; i < 16; i += 3 {
		members = append(members, chare.Idx(i))
	}
	m.Sec = m.S.Section(ctx, members)
	chare.Checkpoint(ctx, ckSecCkpt.CallbackTo(ckSecMain.MainProxy()))
}

func (m *CkSecMain) Checkpointed(ctx *chare.Ctx, _ struct{}) {
	ckSparsePg.Multicast(ctx, m.Sec, m.Sec)
}

func (m *CkSecMain) Sum(ctx *chare.Ctx, v int64) {
	ckSecOut = v
	ctx.Exit(0)
}

func (s *CkSparse) Init(ctx *chare.Ctx, v int64) { s.V = v * v }

func (s *CkSparse) Ping(ctx *chare.Ctx, sec chare.SectionProxy[CkSparse]) {
	chare.ContributeSection(ctx, sec, chare.SumInt64, s.V, ckSecSum.CallbackTo(ckSecMain.MainProxy()))
}

func TestCheckpointWaitsForTheRuntimeToSettle(t *testing.T) {
	want := int64(0)
	for i := 0; i < 16; i += 3 {
		want += int64(i * i)
	}
	for _, pes := range []int{3, 4} {
		dir := t.TempDir()
		ckSecOut = 0
		res := chare.Run(ckSecMain, chare.Config{PEs: pes, CheckpointDir: dir})
		require.NoError(t, res.Err)
		require.Equal(t, want, ckSecOut)
		for _, again := range []int{pes, 2} {
			ckSecOut = 0
			res := chare.Run(ckSecMain, chare.Config{PEs: again, Restart: dir})
			require.NoError(t, res.Err, "restart of %d PEs on %d", pes, again)
			require.Equal(t, want, ckSecOut, "restart of %d PEs on %d", pes, again)
		}
	}
}
