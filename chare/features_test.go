package chare_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// One main chare drives a scenario per test; results go to featOut.

var (
	featCase string
	featOut  []string
)

func note(format string, args ...any) { featOut = append(featOut, fmt.Sprintf(format, args...)) }

type FeatMain struct{}

type GroupMember struct{ PE int }

type Sparse6 struct{ Tag int64 }

type Syncer struct {
	Epochs   int
	LastPE   int
	Visited  []int
	Rounds   int
	BcastSeq []int
}

// Packed implements Migratable by hand: only Value survives a move, as a
// fixed 8-byte record.
type Packed struct {
	Value  int64
	secret int64
}

var (
	featMain   = chare.NewMainType[FeatMain]("feat.Main")
	groupT     = chare.NewType[GroupMember, int]("feat.Group")
	sparseT    = chare.NewType[Sparse6, int64]("feat.Sparse6")
	syncT      = chare.NewType[Syncer, struct{}]("feat.Syncer")
	packedT    = chare.NewType[Packed, int64]("feat.Packed")
	grpHello   *chare.Entry[GroupMember, int64]
	spContrib  *chare.Entry[Sparse6, sparseRound]
	spDie      *chare.Entry[Sparse6, int]
	syncStep   *chare.Entry[Syncer, int]
	syncBcast  *chare.Entry[Syncer, int]
	syncReport *chare.Entry[Syncer, struct{}]
	packMove   *chare.Entry[Packed, int]
	packShow   *chare.Entry[Packed, struct{}]
	mainInt    *chare.Entry[FeatMain, int64]
	mainStr    *chare.Entry[FeatMain, string]
	mainStrs   *chare.Entry[FeatMain, []string]
	concatStr  = chare.Concat[string]()
	mainDone   *chare.Entry[FeatMain, struct{}]
	setOfInts  = chare.Set[int64]()
)

func init() {
	grpHello = chare.NewEntry(groupT, (*GroupMember).Hello)
	spContrib = chare.NewEntry(sparseT, (*Sparse6).Contrib)
	spDie = chare.NewEntry(sparseT, (*Sparse6).Die)
	syncStep = chare.NewEntry(syncT, (*Syncer).Step)
	syncBcast = chare.NewEntry(syncT, (*Syncer).Numbered)
	syncReport = chare.NewEntry(syncT, (*Syncer).Report)
	packMove = chare.NewEntry(packedT, (*Packed).Move)
	packShow = chare.NewEntry(packedT, (*Packed).Show)
	mainInt = chare.NewEntry(featMain, (*FeatMain).Int)
	mainStr = chare.NewEntry(featMain, (*FeatMain).Str)
	mainStrs = chare.NewEntry(featMain, (*FeatMain).Strs)
	mainDone = chare.NewEntry(featMain, (*FeatMain).Done)
}

func (g *GroupMember) Init(ctx *chare.Ctx, n int) { g.PE = ctx.PE() }

func (g *GroupMember) Hello(ctx *chare.Ctx, k int64) {
	chare.Contribute(ctx, chare.SumInt64, k*int64(g.PE+1), mainInt.CallbackTo(featMain.MainProxy()))
}

func (s *Sparse6) Init(ctx *chare.Ctx, tag int64) { s.Tag = tag }

// sparseRound carries its callback: the elements may run in other
// processes, where main's variables are not set.
type sparseRound struct {
	Round int
	CB    chare.Callback[[]chare.Indexed[int64]]
}

func (s *Sparse6) Contrib(ctx *chare.Ctx, r sparseRound) {
	chare.Contribute(ctx, setOfInts, s.Tag*int64(r.Round), r.CB)
}

func (s *Sparse6) Die(ctx *chare.Ctx, round int) {
	if s.Tag%2 == 1 {
		ctx.Delete()
		return
	}
	chare.Contribute(ctx, chare.SumInt64, s.Tag, mainInt.CallbackTo(featMain.MainProxy()))
}

func (s *Syncer) Init(ctx *chare.Ctx, _ struct{}) { s.LastPE = ctx.PE() }

// Step: note where we are, then wait for the load balancer (rotate).
func (s *Syncer) Step(ctx *chare.Ctx, round int) {
	s.Visited = append(s.Visited, ctx.PE())
	s.Rounds++
	ctx.AtSync()
}

func (s *Syncer) ResumeFromSync(ctx *chare.Ctx) {
	s.Epochs++
	moved := int64(0)
	if ctx.PE() == (s.LastPE+1)%ctx.NumPEs() {
		moved = 1
	}
	s.LastPE = ctx.PE()
	chare.Contribute(ctx, chare.SumInt64, moved, mainInt.CallbackTo(featMain.MainProxy()))
}

func (s *Syncer) Numbered(ctx *chare.Ctx, n int) {
	s.BcastSeq = append(s.BcastSeq, n)
	if n%3 == int(ctx.Index().C[0])%3 {
		ctx.Migrate((ctx.PE() + 1) % ctx.NumPEs())
	}
}

func (s *Syncer) Report(ctx *chare.Ctx, _ struct{}) {
	ok := "in order"
	for i, n := range s.BcastSeq {
		if n != i {
			ok = fmt.Sprintf("out of order at %d: %v", i, s.BcastSeq)
			break
		}
	}
	chare.Contribute(ctx, concatStr, fmt.Sprintf("%d:%s", len(s.BcastSeq), ok), mainStrs.CallbackTo(featMain.MainProxy()))
}

func (p *Packed) Init(ctx *chare.Ctx, v int64) { p.Value, p.secret = v, v }

func (p *Packed) Pack() ([]byte, error) {
	return binary.LittleEndian.AppendUint64(nil, uint64(p.Value)), nil
}

func (p *Packed) Unpack(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("packed state is %d bytes, want 8", len(b))
	}
	p.Value = int64(binary.LittleEndian.Uint64(b))
	return nil
}

func (p *Packed) Migrated(ctx *chare.Ctx) { p.Value += 1000 }

func (p *Packed) Move(ctx *chare.Ctx, to int) { ctx.Migrate(to) }

func (p *Packed) Show(ctx *chare.Ctx, _ struct{}) {
	mainStr.Send(ctx, featMain.MainProxy(), fmt.Sprintf("value %d secret %d on PE %d", p.Value, p.secret, ctx.PE()))
}

func (m *FeatMain) Int(ctx *chare.Ctx, v int64) {
	note("int %d", v)
	featNext(ctx)
}

func (m *FeatMain) Str(ctx *chare.Ctx, v string) {
	note("%s", v)
	featNext(ctx)
}

func (m *FeatMain) Strs(ctx *chare.Ctx, v []string) {
	note("%s", strings.Join(v, " "))
	featNext(ctx)
}

func (m *FeatMain) Done(ctx *chare.Ctx, _ struct{}) {
	note("done")
	featNext(ctx)
}

// featNext lets a scenario run several steps: it pops the next step.
var featSteps []func(ctx *chare.Ctx)

func featNext(ctx *chare.Ctx) {
	if len(featSteps) == 0 {
		return
	}
	f := featSteps[0]
	featSteps = featSteps[1:]
	f(ctx)
}

func (m *FeatMain) Init(ctx *chare.Ctx, args []string) {
	switch featCase {
	case "group":
		g := groupT.NewGroup(ctx, 0)
		grpHello.Broadcast(ctx, g, 10)
		featSteps = []func(*chare.Ctx){func(ctx *chare.Ctx) { ctx.Exit(0) }}
	case "sparse6":
		sp := sparseT.NewSparseArray(ctx, nil)
		for i := 0; i < 40; i++ {
			ix := chare.Idx(i%2, i%3, i%5, i, 2*i, 3)
			sparseT.Insert(ctx, sp, ix, i%ctx.NumPEs(), int64(i))
		}
		sp.DoneInserting(ctx)
		f := chare.NewFuture[[]chare.Indexed[int64]](ctx)
		spContrib.Broadcast(ctx, sp, sparseRound{Round: 2, CB: f.Callback()})
		v, err := f.Get(ctx)
		if err != nil {
			ctx.Fail(err)
			return
		}
		var sum int64
		ordered := true
		for i, it := range v {
			sum += it.Value
			if i > 0 && it.Index.Compare(v[i-1].Index) <= 0 {
				ordered = false
			}
		}
		note("set of %d, sum %d, ordered %v", len(v), sum, ordered)
		// Delete the odd ones; the next reductions count only the rest.
		spDie.Broadcast(ctx, sp, 0)
		featSteps = []func(*chare.Ctx){
			func(ctx *chare.Ctx) { spDie.Broadcast(ctx, sp, 1) },
			func(ctx *chare.Ctx) { ctx.Exit(0) },
		}
	case "atsync":
		arr := syncT.NewArray(ctx, []int{12}, struct{}{})
		n := 0
		step := func(ctx *chare.Ctx) { n++; syncStep.Broadcast(ctx, arr, n) }
		featSteps = []func(*chare.Ctx){step, step, func(ctx *chare.Ctx) { ctx.Exit(0) }}
		step(ctx)
	case "bcast-migrate":
		arr := syncT.NewArray(ctx, []int{9}, struct{}{})
		for i := 0; i < 60; i++ {
			syncBcast.Broadcast(ctx, arr, i)
		}
		qd := chare.NewFuture[struct{}](ctx)
		chare.StartQD(ctx, qd.Callback())
		if _, err := qd.Get(ctx); err != nil {
			ctx.Fail(err)
		}
		syncReport.Broadcast(ctx, arr, struct{}{})
		featSteps = []func(*chare.Ctx){func(ctx *chare.Ctx) { ctx.Exit(0) }}
	case "packed":
		arr := packedT.NewArray(ctx, []int{1}, 7)
		packMove.Send(ctx, arr.At(0), ctx.NumPEs()-1)
		packShow.Send(ctx, arr.At(0), struct{}{})
		featSteps = []func(*chare.Ctx){func(ctx *chare.Ctx) { ctx.Exit(0) }}
	case "quiescence":
		// Main returns without Exit, having said the run ends once quiet.
		chare.EndWhenQuiet(ctx)
		g := groupT.NewGroup(ctx, 0)
		grpHello.Broadcast(ctx, g, 1)
	case "future-set":
		f := chare.NewFuture[string](ctx)
		g := groupT.NewGroup(ctx, 0)
		grpSetFuture.Send(ctx, g.OnPE(ctx.NumPEs()-1), f)
		v, err := f.Get(ctx)
		note("future %q %v", v, err)
		ctx.Exit(0)
	}
}

var grpSetFuture = chare.NewEntry(groupT, (*GroupMember).SetFuture)

// SetFuture fills a future main waits on, from another PE (and, with
// several processes, another process).
func (g *GroupMember) SetFuture(ctx *chare.Ctx, f chare.Future[string]) {
	f.Set(ctx, fmt.Sprintf("from PE %d", ctx.PE()))
}

func TestFeatures(t *testing.T) {
	cases := []struct {
		name string
		pes  int
		want func(pes int) []string
	}{
		{"group", 4, func(p int) []string { return []string{fmt.Sprintf("int %d", 10*p*(p+1)/2)} }},
		{"sparse6", 3, func(int) []string {
			// tags 0..39 times 2; then the 20 even tags survive deletion.
			return []string{"set of 40, sum 1560, ordered true", "int 380", "int 380"}
		}},
		{"atsync", 3, func(int) []string { return []string{"int 12", "int 12", "int 12"} }},
		{"bcast-migrate", 3, func(int) []string {
			s := ""
			for i := 0; i < 9; i++ {
				if i > 0 {
					s += " "
				}
				s += "60:in order"
			}
			return []string{s}
		}},
		{"packed", 3, func(int) []string { return []string{"value 1007 secret 0 on PE 2"} }},
		{"quiescence", 3, func(p int) []string { return []string{fmt.Sprintf("int %d", p*(p+1)/2)} }},
		{"future-set", 3, func(int) []string { return []string{`future "from PE 2" <nil>`} }},
	}
	for _, c := range cases {
		for _, wire := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wire=%v", c.name, wire), func(t *testing.T) {
				featCase, featOut, featSteps = c.name, nil, nil
				res := chare.Run(featMain, chare.Config{PEs: c.pes, WireCheck: wire, Balancer: "rotate"})
				require.NoError(t, res.Err)
				require.Equal(t, 0, res.Code)
				require.Equal(t, c.want(c.pes), featOut)
			})
		}
	}
}
