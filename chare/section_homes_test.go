package chare_test

import (
	"fmt"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// A section is made on a PE whose location cache is stale: its members
// moved twice, and that PE heard of the first move only (a message it sent
// was forwarded and corrected its cache). The section must still place
// every member where it is, so no delivery takes a detour through a PE
// the member left (nor, under message logging, a logged hop).

type Hopper struct{ Hops int }

type HopMain struct {
	Arr   chare.ArrayProxy[Hopper]
	Phase int
	N     int
}

var (
	hopMain  = chare.NewMainType[HopMain]("hop.Main")
	hopperT  = chare.NewType[Hopper, struct{}]("hop.Hopper")
	hopGo    *chare.Entry[Hopper, struct{}]
	hopPing  *chare.Entry[Hopper, struct{}]
	hopSec   *chare.Entry[Hopper, chare.SectionProxy[Hopper]]
	hopDone  *chare.Entry[HopMain, struct{}]
	hopSum   *chare.Entry[HopMain, int64]
	hopTotal int64
)

func init() {
	hopGo = chare.NewEntry(hopperT, (*Hopper).Hop)
	hopPing = chare.NewEntry(hopperT, (*Hopper).Ping)
	hopSec = chare.NewEntry(hopperT, (*Hopper).InSection)
	hopDone = chare.NewEntry(hopMain, (*HopMain).Done)
	hopSum = chare.NewEntry(hopMain, (*HopMain).Sum)
}

func (h *Hopper) Init(ctx *chare.Ctx, _ struct{}) {}

func (h *Hopper) Hop(ctx *chare.Ctx, _ struct{}) {
	h.Hops++
	ctx.Migrate((ctx.PE() + 1) % ctx.NumPEs())
}

func (h *Hopper) Migrated(ctx *chare.Ctx) {
	chare.Contribute(ctx, chare.Barrier, struct{}{}, hopDone.CallbackTo(hopMain.MainProxy()))
}

func (h *Hopper) Ping(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, chare.Barrier, struct{}{}, hopDone.CallbackTo(hopMain.MainProxy()))
}

func (h *Hopper) InSection(ctx *chare.Ctx, sec chare.SectionProxy[Hopper]) {
	chare.ContributeSection(ctx, sec, chare.SumInt64, int64(h.Hops), hopSum.CallbackTo(hopMain.MainProxy()))
}

func (m *HopMain) Init(ctx *chare.Ctx, args []string) {
	m.N = 2 * ctx.NumPEs()
	m.Arr = hopperT.NewArray(ctx, []int{m.N}, struct{}{}, chare.BlockMap())
	hopGo.Broadcast(ctx, m.Arr, struct{}{})
}

func (m *HopMain) Done(ctx *chare.Ctx, _ struct{}) {
	switch m.Phase++; m.Phase {
	case 1: // moved once: main's PE learns where (a ping is forwarded)
		for i := 0; i < m.N; i++ {
			hopPing.Send(ctx, m.Arr.At(i), struct{}{})
		}
	case 2: // moved again: main's PE is not told
		hopGo.Broadcast(ctx, m.Arr, struct{}{})
	case 3:
		all := make([]chare.Index, m.N)
		for i := range all {
			all[i] = chare.Idx(i)
		}
		sec := m.Arr.Section(ctx, all)
		hopSec.Multicast(ctx, sec, sec)
	}
}

func (m *HopMain) Sum(ctx *chare.Ctx, v int64) {
	hopTotal = v
	ctx.Exit(0)
}

func TestSectionPlacesMembersWhereTheyAreNotWhereACacheSays(t *testing.T) {
	for _, c := range []struct {
		pes int
		ft  string
	}{{4, ""}, {5, ""}, {4, "camel"}, {5, "scmel"}} {
		t.Run(fmt.Sprintf("p%d/%s", c.pes, c.ft), func(t *testing.T) {
			hopTotal = 0
			res := chare.Run(hopMain, chare.Config{PEs: c.pes, FT: c.ft})
			require.NoError(t, res.Err)
			require.Equal(t, int64(2*2*c.pes), hopTotal, "every member hopped twice and contributed once")
			require.Equal(t, uint64(2*c.pes), res.Stats.Ops.Deliveries)
			require.Zero(t, res.Stats.Ops.ForwardedDeliveries, "deliveries sent where a member had been")
		})
	}
}

// A multicast reaches each PE of its section's tree as one message, and
// the members there run together, as one more message to that PE: under
// message logging that is two determinants per PE, not one per member.
// The root PE's own members run after the entry method that multicast
// returns, never inside it.

type Listener struct{}

type ListenMain struct {
	Arr  chare.ArrayProxy[Listener]
	Sec  chare.SectionProxy[Listener]
	Sent int
}

var (
	listenMain  = chare.NewMainType[ListenMain]("listen.Main")
	listenerT   = chare.NewType[Listener, struct{}]("listen.Listener")
	listenHear  *chare.Entry[Listener, chare.SectionProxy[Listener]]
	listenReady *chare.Entry[ListenMain, struct{}]
	listenSum   *chare.Entry[ListenMain, int64]
	listenLog   []string // entries run on PE 0, in order
)

func init() {
	listenHear = chare.NewEntry(listenerT, (*Listener).Hear)
	listenReady = chare.NewEntry(listenMain, (*ListenMain).Ready)
	listenSum = chare.NewEntry(listenMain, (*ListenMain).Sum)
}

func (l *Listener) Init(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, chare.Barrier, struct{}{}, listenReady.CallbackTo(listenMain.MainProxy()))
}

func (l *Listener) Hear(ctx *chare.Ctx, sec chare.SectionProxy[Listener]) {
	if ctx.PE() == 0 {
		listenLog = append(listenLog, "member")
	}
	chare.ContributeSection(ctx, sec, chare.SumInt64, 1, listenSum.CallbackTo(listenMain.MainProxy()))
}

func (m *ListenMain) Init(ctx *chare.Ctx, args []string) {
	m.Arr = listenerT.NewArray(ctx, []int{40}, struct{}{}, chare.BlockMap())
}

func (m *ListenMain) Ready(ctx *chare.Ctx, _ struct{}) {
	all := make([]chare.Index, 40)
	for i := range all {
		all[i] = chare.Idx(i)
	}
	m.Sec = m.Arr.Section(ctx, all)
	m.multicast(ctx)
}

func (m *ListenMain) multicast(ctx *chare.Ctx) {
	listenHear.Multicast(ctx, m.Sec, m.Sec)
	m.Sent++
	listenLog = append(listenLog, "main")
}

func (m *ListenMain) Sum(ctx *chare.Ctx, v int64) {
	if v != 40 {
		ctx.Fail(fmt.Errorf("multicast %d: %d members contributed, want 40", m.Sent, v))
		return
	}
	if m.Sent < 10 {
		m.multicast(ctx)
		return
	}
	ctx.Exit(0)
}

func TestMulticastRunsAPEsMembersAsOneMessage(t *testing.T) {
	for _, ft := range []string{"", "camel", "scmel"} {
		t.Run("ft="+ft, func(t *testing.T) {
			listenLog = nil
			res := chare.Run(listenMain, chare.Config{PEs: 4, FT: ft, WireCheck: ft == "scmel"})
			require.NoError(t, res.Err)
			require.Equal(t, uint64(400), res.Stats.Ops.Deliveries)
			// PE 0 holds members 0..9: each multicast is main's entry,
			// then its ten members
			want := []string{}
			for range 10 {
				want = append(want, "main")
				for range 10 {
					want = append(want, "member")
				}
			}
			require.Equal(t, want, listenLog)
			if ft != "" {
				// per multicast: 3 tree hops, and a message on each PE
				// for its members; the rest is the setup and the sums'
				// callbacks (far fewer than the 400 deliveries)
				require.Less(t, res.Stats.FT.Log.DetsCreated, uint64(150), "determinants")
			}
		})
	}
}
