package chare_test

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// Programs that break the rules. Each must end promptly with a non-zero exit
// and an error naming the collection, the index and the entry at fault.

type ErrMain struct{}

type Victim struct{}

// ErrCase selects the misbehaviour main triggers.
var errCase string

var (
	errMain    = chare.NewMainType[ErrMain]("errors.Main")
	victims    = chare.NewType[Victim, struct{}]("errors.Victim")
	sparseVics = chare.NewType[Victim, struct{}]("errors.SparseVictim")
	poke       *chare.Entry[Victim, int]
	pokeSparse *chare.Entry[Victim, int]
	boom       *chare.Entry[Victim, string]
	mixed      *chare.Entry[Victim, int]
	mainGotInt *chare.Entry[ErrMain, int64]
	mainGotAlt *chare.Entry[ErrMain, int64]
)

func init() {
	poke = chare.NewEntry(victims, (*Victim).Poke)
	pokeSparse = chare.NewEntry(sparseVics, (*Victim).Poke)
	boom = chare.NewEntry(victims, (*Victim).Boom)
	mixed = chare.NewEntry(victims, (*Victim).Mixed)
	mainGotInt = chare.NewEntry(errMain, (*ErrMain).GotInt)
	mainGotAlt = chare.NewEntry(errMain, (*ErrMain).GotAlt)
}

func (v *Victim) Init(*chare.Ctx, struct{}) {}

func (v *Victim) Poke(ctx *chare.Ctx, n int) {}

func (v *Victim) Boom(ctx *chare.Ctx, why string) {
	if ctx.Index().C[0] == 3 {
		var m map[string]int
		m[why] = 1 // nil map write: a panic inside an entry method
	}
}

// Mixed: element 2 contributes with another reducer, or another callback.
func (v *Victim) Mixed(ctx *chare.Ctx, mode int) {
	me := ctx.Index().C[0]
	cb := mainGotInt.CallbackTo(errMain.MainProxy())
	switch {
	case mode == 0 && me == 2:
		chare.Contribute(ctx, chare.MaxInt64, 1, cb)
	case mode == 1 && me == 2:
		chare.Contribute(ctx, chare.SumInt64, 1, mainGotAlt.CallbackTo(errMain.MainProxy()))
	default:
		chare.Contribute(ctx, chare.SumInt64, 1, cb)
	}
}

func (m *ErrMain) GotInt(ctx *chare.Ctx, v int64) { ctx.Exit(0) }
func (m *ErrMain) GotAlt(ctx *chare.Ctx, v int64) { ctx.Exit(0) }

func (m *ErrMain) Init(ctx *chare.Ctx, args []string) {
	arr := victims.NewArray(ctx, []int{4, 4}, struct{}{})
	switch errCase {
	case "out-of-bounds":
		poke.Send(ctx, arr.At(4, 0), 1)
	case "wrong-dims":
		poke.Send(ctx, arr.At(1), 1)
	case "never-inserted":
		sp := sparseVics.NewSparseArray(ctx, nil)
		sparseVics.Insert(ctx, sp, chare.Idx(1, 1), -1, struct{}{})
		sp.DoneInserting(ctx)
		pokeSparse.Send(ctx, sp.At(7, 7), 1)
	case "panic":
		boom.Broadcast(ctx, arr, "x")
	case "reducer-mismatch":
		one := victims.NewArray(ctx, []int{6}, struct{}{})
		mixed.Broadcast(ctx, one, 0)
	case "callback-mismatch":
		one := victims.NewArray(ctx, []int{6}, struct{}{})
		mixed.Broadcast(ctx, one, 1)
	}
}

func TestBadInputEndsTheRunWithAClearError(t *testing.T) {
	cases := []struct {
		name string
		want []string
	}{
		{"out-of-bounds", []string{"errors.Victim", "[4,0]", "errors.Victim.Poke", "outside", "bounds [4 4]"}},
		{"wrong-dims", []string{"errors.Victim", "[1]", "errors.Victim.Poke", "1 dimensions", "has 2"}},
		{"never-inserted", []string{"errors.SparseVictim", "[7,7]", "errors.SparseVictim.Poke", "never inserted"}},
		{"panic", []string{"errors.Victim[3,", "entry errors.Victim.Boom panicked", "assignment to entry in nil map", "goroutine"}},
		{"reducer-mismatch", []string{"errors.Victim", "reduction 0", "uses reducer", "max.int64", "sum.int64", "[2]"}},
		{"callback-mismatch", []string{"errors.Victim", "callback", "[2]"}},
	}
	for _, c := range cases {
		for _, pes := range []int{1, 3} {
			t.Run(c.name, func(t *testing.T) {
				errCase = c.name
				res := chare.Run(errMain, chare.Config{PEs: pes})
				require.Error(t, res.Err)
				require.NotEqual(t, 0, res.Code)
				for _, w := range c.want {
					require.Contains(t, res.Err.Error(), w)
				}
			})
		}
	}
}

func TestParseFlags(t *testing.T) {
	cases := []struct {
		args    []string
		pes     int
		wire    bool
		rest    []string
		wantErr string
	}{
		{args: []string{"+p4", "3", "3"}, pes: 4, rest: []string{"3", "3"}},
		{args: []string{"+p", "2", "--wire-check", "x"}, pes: 2, wire: true, rest: []string{"x"}},
		{args: []string{"--pes=3", "--", "+p9"}, pes: 3, rest: []string{"+p9"}},
		{args: []string{"--pes", "0"}, wantErr: "flag --pes: 0 is out of range"},
		{args: []string{"+pfour"}, wantErr: `flag +p: "four" is not a whole number`},
		{args: []string{"--bogus"}, wantErr: "unknown runtime flag --bogus"},
		{args: []string{"+balancer", "FancyLB"}, wantErr: `unknown load balancer "FancyLB"`},
		{args: []string{"--pes"}, wantErr: "flag --pes needs a value"},
	}
	for _, c := range cases {
		cfg, err := chare.ParseFlags(c.args)
		if c.wantErr != "" {
			require.ErrorContains(t, err, c.wantErr, c.args)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.pes, cfg.PEs)
		require.Equal(t, c.wire, cfg.WireCheck)
		require.Equal(t, c.rest, cfg.Args)
	}
}
