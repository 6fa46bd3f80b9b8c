package manager

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmgo/charmgo/pe"
)

// Quiescence detection (Charm++'s CkStartQD): PE 0 counts. Every PE keeps
// how many application messages it sent and processed (Manager.Sent,
// Processed); once the process has gone idle, PE 0 asks every PE for its
// counts (a wave), and when two waves in a row find the sums equal and
// unchanged, nothing was in flight between them: the detections waiting
// are released. A wave goes down the spanning tree over every PE and its
// sums come back up it (each PE adds its subtree's), so no PE sends or
// receives more than its children's worth. qdRoot is that counting and
// qdGather a PE's part of a wave's sums, plain state machines; the
// handlers below carry the probes and replies.

// qdState is a PE's part of quiescence detection.
type qdState struct {
	// probeFrom: a wave's probe came; this PE's own counts go in once it
	// is idle
	probeFrom bool
	gather    qdGather
	root      qdRoot // PE 0
}

// qdGather is a PE's part of a wave: the probe came down from its parent
// (or the wave began here, at the root) and went on to its children; the
// PE answers once it has gone idle itself and every child answered, with
// its subtree's sums and how many PEs they count.
type qdGather struct {
	wave       uint64
	active     bool // the probe of wave came and the answer has not gone
	own        bool // this PE's counts are in
	kids       int  // children still to answer
	pes        int  // PEs counted
	sent, proc uint64
}

// probe begins wave here, with children to hear from (an earlier wave's
// part is dropped: it was abandoned).
func (g *qdGather) probe(wave uint64, children int) {
	*g = qdGather{wave: wave, active: true, kids: children}
}

// self adds this PE's counts; it reports whether the subtree is complete.
func (g *qdGather) self(sent, proc uint64) bool {
	if !g.active || g.own {
		return false
	}
	g.own, g.pes, g.sent, g.proc = true, g.pes+1, g.sent+sent, g.proc+proc
	return g.complete()
}

// child adds a child's answer for wave (pes PEs); it reports whether the
// subtree is complete. An answer for another wave, or one too many, is
// dropped.
func (g *qdGather) child(wave uint64, pes int, sent, proc uint64) bool {
	if !g.active || wave != g.wave || g.kids == 0 {
		return false
	}
	g.kids--
	g.pes, g.sent, g.proc = g.pes+pes, g.sent+sent, g.proc+proc
	return g.complete()
}

func (g *qdGather) complete() bool {
	if g.own && g.kids == 0 {
		g.active = false
		return true
	}
	return false
}

type qdWaiter struct {
	pe  int
	tag uint64
}

// EndQDTag is the quiescence detection asked for once main's constructor
// returned: a run that goes quiet before the program ended it fails (it
// went quiet before it was done), unless the program said that
// quiescence ends it (QuietEndsTag, which then goes in its place).
// QuietEndsTag is that saying (EndWhenQuiet): quiet, the run ends. Both
// are released only at a quiet moment that releases no other detection.
const (
	EndQDTag     uint64 = 0
	QuietEndsTag uint64 = 1 << 62
)

// ends reports whether x ends the run when released.
func ends(x qdWaiter) bool { return x.tag == EndQDTag || x.tag == QuietEndsTag }

// qdRoot is PE 0's counting: detections asked for, the wave in flight and
// the sums of the last two.
type qdRoot struct {
	running    bool // detections wait
	inWave     bool
	wave       uint64
	replies    int
	sent, proc uint64
	prevSent   uint64
	prevProc   uint64
	prevOK     bool
	waiters    []qdWaiter
	busy       int // waves in a row that found messages in flight
}

// qdNext is what the root does after a wave's last reply.
type qdNext uint8

const (
	qdWait      qdNext = iota // the wave is not complete
	qdWaveAgain               // quiet once: confirm with a second wave at once
	qdArm                     // busy, or detections still wait: wave when the process next goes idle
	qdStop                    // nothing waits any more
)

// request records a detection asked for; it reports whether counting
// starts (the caller arms the idle notice).
func (q *qdRoot) request(w qdWaiter) bool {
	q.waiters = append(q.waiters, w)
	if q.running {
		return false
	}
	q.running, q.prevOK = true, false
	return true
}

// idle: the process went idle; it reports whether a wave starts now.
func (q *qdRoot) idle() bool { return q.running && !q.inWave }

// startWave begins a wave and returns its number.
func (q *qdRoot) startWave() uint64 {
	q.inWave = true
	q.wave++
	q.replies, q.sent, q.proc = 0, 0, 0
	return q.wave
}

func firstLocal(n *pe.Node) int {
	first, _ := n.LocalPEs()
	return first
}

// reply adds the counts of pes PEs to wave (of n PEs). Once every PE answered it
// says what comes next and which waiting detections are released: at a
// quiet moment a checkpoint's goes alone (it resumes the program, so the
// others wait for the next), and the end of the run's only with nothing
// else (the program's own callbacks may give it more to do). busy says a
// checkpoint is being taken: its messages are not counted, and the
// program resumes when it ends, so no moment during it is quiet (in one
// process every PE parked meant nothing was in flight, and a checkpoint
// was over; between processes, or under a chaos transport, its messages
// can be on their way while every PE waits).
func (q *qdRoot) reply(wave, sent, proc uint64, pes, n int, busy bool) (release []qdWaiter, next qdNext) {
	if wave != q.wave || !q.inWave {
		return nil, qdWait // an old wave's
	}
	q.replies += pes
	q.sent += sent
	q.proc += proc
	if q.replies < n {
		return nil, qdWait
	}
	q.inWave = false
	ok := q.sent == q.proc && !busy
	if ok {
		q.busy = 0
	} else {
		q.busy++
	}
	if !(ok && q.prevOK && q.sent == q.prevSent && q.proc == q.prevProc) {
		q.prevOK, q.prevSent, q.prevProc = ok, q.sent, q.proc
		if ok {
			return nil, qdWaveAgain
		}
		return nil, qdArm
	}
	w := q.waiters
	if i := slices.IndexFunc(w, func(x qdWaiter) bool { return x.tag&ckptQDTag != 0 }); i >= 0 {
		w, q.waiters = w[i:i+1], slices.Delete(slices.Clone(w), i, i+1)
	} else if others := slices.DeleteFunc(slices.Clone(w), ends); len(others) > 0 && len(others) < len(w) {
		w, q.waiters = others, slices.DeleteFunc(slices.Clone(w), func(x qdWaiter) bool { return !ends(x) })
	} else {
		q.waiters = nil
		if slices.ContainsFunc(w, func(x qdWaiter) bool { return x.tag == QuietEndsTag }) {
			// the program said quiescence ends it: not a run that went
			// quiet before it was done
			w = slices.DeleteFunc(w, func(x qdWaiter) bool { return x.tag == EndQDTag })
		}
	}
	if len(q.waiters) > 0 {
		q.prevOK = false
		return w, qdArm
	}
	q.running = false
	return w, qdStop
}

// peerFailed: a PE failed, and its probe or reply with it. A wave in
// flight is abandoned (a new one starts once everything is quiet, the new
// incarnation answering only once it caught up); it reports whether to
// arm the idle notice for it.
func (q *qdRoot) peerFailed() bool {
	if !q.inWave {
		return false
	}
	q.inWave, q.prevOK = false, false
	q.wave++
	return true
}

// EndWhenQuiet says the run ends (exit 0) once it is quiescent: PE 0
// asks for QuietEndsTag as its own detection (kept in its snapshot, so a
// restart or a recovery of PE 0 asks again).
func (m *Manager) EndWhenQuiet() {
	m.PE.Send(0, &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Req: true, Tag: QuietEndsTag, From: int32(m.Me())}})
}

// StartQD asks PE 0 to detect quiescence and then call Host.Quiescent(tag)
// on this PE.
func (m *Manager) StartQD(tag uint64) {
	if tag&ckptQDTag == 0 && !slices.Contains(m.qdAsked, tag) {
		m.qdAsked = append(m.qdAsked, tag)
	}
	m.PE.Send(0, &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Req: true, Tag: tag, From: int32(m.Me())}})
}

func (m *Manager) onQDProbe(p *QDProbeMsg) {
	switch {
	case p.Req && p.Done: // a detection this PE asked for is over
		if p.Tag&ckptQDTag != 0 {
			m.ckptQuiescent(p.Tag &^ ckptQDTag)
			return
		}
		i := slices.Index(m.qdAsked, p.Tag)
		if i < 0 {
			return // answered already (asked again after PE 0 failed)
		}
		m.qdAsked = slices.Delete(m.qdAsked, i, i+1)
		m.PE.Ran()
		m.host.Quiescent(m, p.Tag)
	case p.Req: // root: a new request; waves start once the process is idle
		from := int(p.From)
		if p.Tag == QuietEndsTag { // PE 0's own, whoever said it (EndWhenQuiet)
			if from = 0; !slices.Contains(m.qdAsked, p.Tag) {
				m.qdAsked = append(m.qdAsked, p.Tag)
			}
		}
		if m.qd.root.request(qdWaiter{pe: from, tag: p.Tag}) {
			m.armQD()
		}
	case p.Idle:
		if m.qd.root.idle() {
			m.qdWave()
		}
	default: // a wave's probe: on down the tree; answered once this PE is idle
		m.qdProbe(p.Wave)
	}
}

// qdProbe takes this PE's part in wave: the probe goes on to its
// children, and its own counts go in once it is idle (qdIdle).
func (m *Manager) qdProbe(wave uint64) {
	var buf [8]int
	kids := m.everyPE().Children(m.Me(), buf[:0])
	for _, c := range kids {
		m.PE.Send(c, &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Wave: wave}})
	}
	m.qd.gather.probe(wave, len(kids))
	m.qd.probeFrom = true
}

func (m *Manager) armQD() {
	m.PE.Node().ArmIdleNotice(0, pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Idle: true}}, qdBackoff(m.qd.root.busy))
}

// qdBackoff is how long the process must stay idle before a wave, after
// busy waves in a row found messages in flight: none at first; then from
// 50 µs, doubling, up to 10 ms. With several processes, process 0 goes
// idle whenever it waits for the others, which are busy: without it, a
// wave would cross the job at every such moment.
func qdBackoff(busy int) time.Duration {
	if busy == 0 {
		return 0
	}
	return min(50*time.Microsecond<<min(busy-1, 16), 10*time.Millisecond)
}

// qdWave begins a wave: its probe comes to PE 0 as to any PE (a message,
// so that PE 0's own counts go in at its next idle moment, even when the
// wave began in its idle hook).
func (m *Manager) qdWave() {
	w := m.qd.root.startWave()
	m.PE.Send(m.Me(), &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Wave: w}})
}

func (m *Manager) qdIdle() {
	if !m.qd.probeFrom || m.Recovering() {
		return // a recovering PE answers once it caught up
	}
	m.qd.probeFrom = false
	sent := m.Sent
	if node := m.PE.Node(); m.Me() == firstLocal(node) {
		// Messages handed in from outside the PEs (the launcher's) were
		// processed but sent by none: each process's first PE counts
		// its process's as sent.
		sent += node.Injected()
	}
	if m.qd.gather.self(sent, m.Processed) {
		m.qdAnswer()
	}
}

// onQDReply: a child's subtree answered.
func (m *Manager) onQDReply(r *QDReplyMsg) {
	if m.qd.gather.child(r.Wave, int(r.PEs), r.Sent, r.Processed) {
		m.qdAnswer()
	}
}

// qdAnswer sends this PE's subtree's sums up the tree; at the root, they
// are the wave's.
func (m *Manager) qdAnswer() {
	g := &m.qd.gather
	if parent := m.everyPE().Parent(m.Me()); parent >= 0 {
		m.PE.Send(parent, &pe.Envelope{Type: tQDReply, Kind: pe.KindSystem, Payload: &QDReplyMsg{Wave: g.wave, Sent: g.sent, Processed: g.proc, PEs: int32(g.pes)}})
		return
	}
	release, next := m.qd.root.reply(g.wave, g.sent, g.proc, g.pes, m.NumPEs(), m.ckpt.taking)
	switch next {
	case qdWaveAgain:
		m.qdWave()
	case qdArm:
		m.armQD()
	}
	for _, x := range release {
		m.PE.Send(x.pe, &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Req: true, Done: true, Tag: x.tag}})
	}
}

// CheckQuiet runs on PE 0 when the program has gone quiet and its run
// would end: with nothing in flight, no unfinished work will ever be
// finished, so every PE reports its own (Pending). If there is none, then
// runs; otherwise the run fails with a QuietError naming the first piece
// and holding every PE's description. A nil then fails the run either
// way: it went quiet before the program ended it. The question goes down
// the spanning tree over every PE and the answers are merged up it.
func (m *Manager) CheckQuiet(then func()) {
	q := &m.quiet
	q.round++
	q.asked, q.then = true, then
	q.in, q.answers = subtreeIn{}, nil
	m.PE.Send(m.Me(), &pe.Envelope{Type: tStranded, Kind: pe.KindSystem, Payload: &StrandedMsg{Round: q.round, All: then == nil}})
}

// StrandedMsg asks a PE for its unfinished work, or (Reply) answers for
// the PEs of a subtree of the tree over every PE.
type StrandedMsg struct {
	Round   uint64 // PE 0's question it asks or answers
	All     bool   // describe the PE even with nothing unfinished, and what its elements wait for
	Reply   bool
	Answers []StrandedAnswer `msgpack:",omitempty"`
}

// StrandedAnswer is one PE's unfinished work, and its description if
// there is any.
type StrandedAnswer struct {
	PE      int32
	Pending []string `msgpack:",omitempty"`
	Waits   []string `msgpack:",omitempty"`
	Dump    string   `msgpack:",omitempty"`
}

type quietCheck struct {
	asked bool   // PE 0: a question is out
	then  func() // nil: the run fails whatever is pending
	round uint64 // PE 0: the last question; every PE: the one it gathers
	// this PE's answer and its children's subtrees', as they come
	in      subtreeIn
	answers []StrandedAnswer
}

// QuietError ends a run that went quiet with work unfinished, or before
// the program ended it (Unended). Its message is one line; Dump describes
// every PE that had unfinished work, or every PE.
type QuietError struct {
	First   string // the first unfinished piece of work found
	More    int    // how many more there are
	State   string // every PE's description that had some
	Unended bool   // the program neither ended the run nor said quiescence ends it
	// Waiting is, for a run Unended with no work unfinished, the first
	// thing an element waits for (Manager.Waits): what stopped it, most
	// likely; MoreWaiting counts the others
	Waiting     string
	MoreWaiting int
}

// Dump is the state of the PEs that had unfinished work.
func (e *QuietError) Dump() string { return e.State }

func (e *QuietError) Error() string {
	msg := "the run went quiet with work unfinished: " + e.First
	if e.Unended {
		msg = "the run went quiet before the program ended it (no Exit came, and the program did not say that quiescence ends it: chare.EndWhenQuiet)"
		if e.First == "" {
			if e.Waiting != "" {
				msg += "; waiting: " + e.Waiting
				if e.MoreWaiting > 0 {
					msg += fmt.Sprintf(" (and %d more: see the dump)", e.MoreWaiting)
				}
			}
			return msg
		}
		msg += "; unfinished: " + e.First
	}
	if e.More > 0 {
		msg += fmt.Sprintf(" (and %d more: see the dump)", e.More)
	}
	return msg
}

func (m *Manager) onStranded(env *pe.Envelope) {
	s := env.Payload.(*StrandedMsg)
	q := &m.quiet
	if s.Round != q.round {
		if s.Reply || s.Round < q.round {
			return // an answer to an older question
		}
		q.round, q.in, q.answers = s.Round, subtreeIn{}, nil
	}
	if !s.Reply {
		// (as the answers: not stamped or counted, the run being over)
		for _, k := range m.everyPE().Children(m.Me(), m.kids[:0]) {
			cp := *s
			m.PE.Send(k, &pe.Envelope{Type: tStranded, Kind: pe.KindSystem, Payload: &cp})
		}
		a := StrandedAnswer{PE: int32(m.Me()), Pending: m.Pending()}
		if s.All {
			a.Waits = m.Waits()
		}
		if len(a.Pending) > 0 || s.All {
			var b strings.Builder
			m.Describe(&b)
			a.Dump = b.String()
		}
		q.answers = append(q.answers, a)
	} else {
		q.answers = append(q.answers, s.Answers...)
	}
	if !q.in.add(m, !s.Reply) {
		return
	}
	answers := q.answers
	q.in, q.answers = subtreeIn{}, nil
	if m.Me() != 0 {
		m.PE.Send(m.everyPE().Parent(m.Me()), &pe.Envelope{Type: tStranded, Kind: pe.KindSystem, Payload: &StrandedMsg{Round: s.Round, Reply: true, Answers: answers}})
		return
	}
	if !q.asked {
		return
	}
	m.quietAnswered(answers)
}

// quietAnswered: every PE answered PE 0's question (CheckQuiet).
func (m *Manager) quietAnswered(answers []StrandedAnswer) {
	q := &m.quiet
	slices.SortFunc(answers, func(a, b StrandedAnswer) int { return cmp.Compare(a.PE, b.PE) })
	var all, waits, dumps []string
	for _, a := range answers {
		all = append(all, a.Pending...)
		waits = append(waits, a.Waits...)
		dumps = append(dumps, a.Dump)
	}
	then := q.then
	q.asked, q.then = false, nil
	switch {
	case then == nil:
		e := &QuietError{Unended: true, State: strings.Join(dumps, "")}
		if len(all) > 0 {
			e.First, e.More = MostTelling(all), len(all)-1
		}
		if len(waits) > 0 {
			e.Waiting, e.MoreWaiting = waits[0], len(waits)-1
		}
		m.Fail(e)
	case len(all) == 0:
		then()
	default:
		m.Fail(&QuietError{First: MostTelling(all), More: len(all) - 1, State: strings.Join(dumps, "")})
	}
}
