package ftsim

import (
	"fmt"

	"github.com/charmgo/charmgo/chare"
)

// chain is a program whose every state depends on the order its messages
// arrived in: each element hashes every message it gets into H, and every
// message it sends carries a hash of H. It logs what it sent and got, and
// checkChain holds the logs against each other: a recovery that replays
// a PE's receptions in another order than they first happened makes
// messages with other hashes than the ones the others already got (an
// orphan), and one that loses or repeats a message shows too. Its
// results are the logs, not values a failure-free run must share: after
// a failure the interleaving differs.
type ChainMain struct {
	E     chare.ArrayProxy[ChainE]
	Sec   chare.SectionProxy[ChainE]
	Step  int
	Steps int
	Ckpt  int
	Got   int
	All   []ChainLog
}

// ChainE is one element: its hash, its step and what it got of each.
type ChainE struct {
	H    uint64
	Step int
	Got  []int // messages got, by step
	Seq  uint64
	Sent []ChainRec
	Rcvd []ChainRec
}

// ChainRec is a message sent (Peer: its receiver) or got (Peer: its
// sender), with its number at the sender and its hash.
type ChainRec struct {
	Peer int32
	Seq  uint64
	H    uint64
}

// ChainLog is an element's logs, gathered at the end.
type ChainLog struct {
	Sent, Recv []ChainRec
}

type chainTickMsg struct {
	Step int
	Sec  chare.SectionProxy[ChainE]
}

type chainMsg struct {
	From int32
	Seq  uint64
	H    uint64
	Step int
}

const chainElems = 8

var (
	chainMain    = chare.NewMainTypeOf[ChainMain, MixArgs]("ftsim.chain.Main")
	chainET      = chare.NewType[ChainE, struct{}]("ftsim.chain.E")
	chainGo      *chare.Entry[ChainE, int]
	chainRecv    *chare.Entry[ChainE, chainMsg]
	chainTick    *chare.Entry[ChainE, chainTickMsg]
	chainReport  *chare.Entry[ChainE, struct{}]
	chainDone    *chare.Entry[ChainMain, int64]
	chainLogs    *chare.Entry[ChainMain, []ChainLog]
	chainResume  *chare.Entry[ChainMain, struct{}]
	chainConcat  = chare.Concat[ChainLog]()
	chainTargets = [...]int{1, 3}
)

func init() {
	chainGo = chare.NewEntry(chainET, (*ChainE).Go)
	chainRecv = chare.NewEntry(chainET, (*ChainE).Recv)
	chainTick = chare.NewEntry(chainET, (*ChainE).Tick)
	chainReport = chare.NewEntry(chainET, (*ChainE).Report)
	chainDone = chare.NewEntry(chainMain, (*ChainMain).Done)
	chainLogs = chare.NewEntry(chainMain, (*ChainMain).Logs)
	chainResume = chare.NewEntry(chainMain, (*ChainMain).Resume)
}

func chainMix(h, v uint64) uint64 {
	h ^= v + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	h *= 0xff51afd7ed558ccd
	return h ^ h>>33
}

func (m *ChainMain) Init(ctx *chare.Ctx, a MixArgs) {
	m.Steps, m.Ckpt = a.Steps, a.Ckpt
	m.E = chainET.NewArray(ctx, []int{chainElems}, struct{}{})
	m.Sec = m.E.Section(ctx, []chare.Index{chare.Idx(1), chare.Idx(2), chare.Idx(5), chare.Idx(5)})
	chare.StepRange(ctx, 1, m.Steps)
	m.next(ctx)
}

func (m *ChainMain) next(ctx *chare.Ctx) {
	m.Step++
	if m.Step > m.Steps {
		chainReport.Broadcast(ctx, m.E, struct{}{})
		return
	}
	chare.AtStep(ctx, m.Step)
	chainGo.Broadcast(ctx, m.E, m.Step)
	chainTick.Multicast(ctx, m.Sec, chainTickMsg{m.Step, m.Sec})
}

// Done: every element got its step's messages (an array reduction), and
// the section members their tick (a section reduction).
func (m *ChainMain) Done(ctx *chare.Ctx, _ int64) {
	if m.Got++; m.Got < 2 {
		return
	}
	m.Got = 0
	if m.Step == m.Ckpt {
		chare.Checkpoint(ctx, chainResume.CallbackTo(chainMain.MainProxy()))
		return
	}
	m.next(ctx)
}

func (m *ChainMain) Resume(ctx *chare.Ctx, _ struct{}) { m.next(ctx) }

func (m *ChainMain) Logs(ctx *chare.Ctx, logs []ChainLog) {
	m.All = logs
	ctx.Exit(0)
}

func (e *ChainE) Init(ctx *chare.Ctx, _ struct{}) { e.H = uint64(ctx.Index().C[0]) }

func (e *ChainE) Go(ctx *chare.Ctx, s int) {
	i := int(ctx.Index().C[0])
	e.H, e.Step = chainMix(e.H, uint64(s)), s
	for _, d := range chainTargets {
		t := (i + d) % chainElems
		e.Seq++
		h := chainMix(e.H, e.Seq)
		e.Sent = append(e.Sent, ChainRec{Peer: int32(t), Seq: e.Seq, H: h})
		chainRecv.Send(ctx, chare.ThisArray[ChainE](ctx).At(t), chainMsg{From: int32(i), Seq: e.Seq, H: h, Step: s})
	}
	if s == 4 && i == 2 { // moves after the checkpoint
		ctx.Migrate((ctx.PE() + 1) % ctx.NumPEs())
	}
	e.check(ctx, s)
}

func (e *ChainE) Recv(ctx *chare.Ctx, m chainMsg) {
	e.H = chainMix(e.H, m.H)
	e.Rcvd = append(e.Rcvd, ChainRec{Peer: m.From, Seq: m.Seq, H: m.H})
	for len(e.Got) <= m.Step {
		e.Got = append(e.Got, 0)
	}
	e.Got[m.Step]++
	e.check(ctx, m.Step)
}

func (e *ChainE) check(ctx *chare.Ctx, s int) {
	if s == e.Step && s < len(e.Got) && e.Got[s] == len(chainTargets) {
		chare.Contribute(ctx, chare.SumInt64, 1, chainDone.CallbackTo(chainMain.MainProxy()))
	}
}

func (e *ChainE) Tick(ctx *chare.Ctx, t chainTickMsg) {
	e.H = chainMix(e.H, 1000+uint64(t.Step))
	chare.ContributeSection(ctx, t.Sec, chare.SumInt64, 1, chainDone.CallbackTo(chainMain.MainProxy()))
}

func (e *ChainE) Report(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, chainConcat, ChainLog{Sent: e.Sent, Recv: e.Rcvd}, chainLogs.CallbackTo(chainMain.MainProxy()))
}

// checkChain holds the elements' logs against each other: every message
// got was sent with that hash (no orphan: a replay made it again the
// same), to that element, and got exactly once; none was lost.
func checkChain(logs []ChainLog, steps int) error {
	if len(logs) != chainElems {
		return fmt.Errorf("%d logs, want %d", len(logs), chainElems)
	}
	n, err := checkChainLogs(logs)
	if err != nil {
		return err
	}
	if want := chainElems * len(chainTargets) * steps; n != want {
		return fmt.Errorf("%d messages sent and got, want %d", n, want)
	}
	return nil
}

// checkChainLogs is checkChain for any program that logs as chain does
// (its elements' logs, in index order): it returns how many messages
// were sent, each got once.
func checkChainLogs(logs []ChainLog) (int, error) {
	type key struct {
		from int32
		seq  uint64
	}
	sent := map[key]ChainRec{}
	for i, l := range logs {
		for _, r := range l.Sent {
			k := key{int32(i), r.Seq}
			if _, dup := sent[k]; dup {
				return 0, fmt.Errorf("element %d sent message %d twice", i, r.Seq)
			}
			sent[k] = r
		}
	}
	got := map[key]bool{}
	for j, l := range logs {
		for _, r := range l.Recv {
			k := key{r.Peer, r.Seq}
			s, ok := sent[k]
			switch {
			case !ok:
				return 0, fmt.Errorf("element %d got message %d of element %d, which it never sent", j, r.Seq, r.Peer)
			case s.Peer != int32(j):
				return 0, fmt.Errorf("element %d got message %d of element %d, sent to element %d", j, r.Seq, r.Peer, s.Peer)
			case s.H != r.H:
				return 0, fmt.Errorf("element %d got message %d of element %d with hash %x; its sender's history has %x (an orphan: the sender's recovery went otherwise)", j, r.Seq, r.Peer, r.H, s.H)
			case got[k]:
				return 0, fmt.Errorf("element %d got message %d of element %d twice", j, r.Seq, r.Peer)
			}
			got[k] = true
		}
	}
	if len(sent) != len(got) {
		return 0, fmt.Errorf("%d messages sent and %d got", len(sent), len(got))
	}
	return len(sent), nil
}
