package manager

import (
	"fmt"
	"slices"
	"strings"

	"github.com/charmgo/charmgo/pe"
)

// LBStrategy decides migrations at an AtSync point from where every element
// is. It must be a pure function of its input so a plan can be replayed.
type LBStrategy func(coll string, numPEs int, where []ElemPlace) []Move

// ElemPlace is one element's position at an AtSync point.
type ElemPlace struct {
	Index pe.Index
	PE    int32
}

// RotateStrategy moves every element to the next PE (a test strategy that
// exercises migration of everything).
func RotateStrategy(_ string, n int, where []ElemPlace) []Move {
	if n < 2 {
		return nil
	}
	out := make([]Move, len(where))
	for i, w := range where {
		out[i] = Move{Index: w.Index, From: w.PE, To: (w.PE + 1) % int32(n)}
	}
	return out
}

type syncState struct {
	// atSync counts the local elements that reached AtSync this epoch
	// (or arrived with it): never fewer than there are, so syncCheck
	// looks at them all only once the count says all may be there.
	atSync   int
	reported map[pe.Index]bool // local elements already reported this epoch
	// root
	places  []ElemPlace
	planned bool
	done    int
	// every PE
	plan     *PlanMsg
	expect   int
	arrived  int
	sentDone bool
}

// AtSync marks e as ready for load balancing. When every element of the
// array has called it, the strategy runs, elements migrate, and each gets
// ResumeFromSync.
func (m *Manager) AtSync(e *Element) {
	if e.AtSync {
		return
	}
	e.AtSync = true
	e.Coll.sync.atSync++
	m.syncCheck(e.Coll)
}

func (m *Manager) syncCheck(c *Collection) {
	if c.sync.atSync < len(c.local) {
		return // some local element has not reached AtSync: no need to look
	}
	var idx []pe.Index
	for _, e := range c.Locals() {
		if !e.AtSync {
			return
		}
		if !c.sync.reported[e.Index] {
			idx = append(idx, e.Index)
		}
	}
	if len(idx) == 0 {
		return
	}
	if c.sync.reported == nil {
		c.sync.reported = map[pe.Index]bool{}
	}
	pes := make([]int32, len(idx))
	for i, ix := range idx {
		c.sync.reported[ix] = true
		pes[i] = int32(m.Me())
	}
	m.sendSys(0, tSync, &SyncMsg{Coll: c.ID, Indices: idx, PEs: pes})
}

func (m *Manager) onSync(sm *SyncMsg) {
	c := m.coll(sm.Coll)
	if c == nil {
		m.failf("AtSync report for unknown collection %d", sm.Coll)
		return
	}
	for i, ix := range sm.Indices {
		c.sync.places = append(c.sync.places, ElemPlace{Index: ix, PE: sm.PEs[i]})
	}
	m.syncCheckRoot(c)
}

// syncCheckRoot starts the plan once every element reported (root only).
func (m *Manager) syncCheckRoot(c *Collection) {
	if m.Me() != 0 || c.sync.planned || !c.red.Enabled() || len(c.sync.places) == 0 {
		return
	}
	if int64(len(c.sync.places)) < c.red.SubtreeCount(c.red.NextReport()) {
		return
	}
	c.sync.planned = true
	var moves []Move
	if m.opt.Strategy != nil && c.Kind == CollArray && c.Migratable {
		moves = m.opt.Strategy(c.Name, m.NumPEs(), c.sync.places)
	}
	plan := &PlanMsg{Coll: c.ID, Moves: moves}
	for p := 0; p < m.NumPEs(); p++ {
		m.sendSys(p, tPlan, plan)
	}
}

func (m *Manager) onPlan(pm *PlanMsg) {
	c := m.coll(pm.Coll)
	c.sync.plan = pm
	me := int32(m.Me())
	for _, mv := range pm.Moves {
		if mv.To == me && mv.From != me {
			c.sync.expect++
		}
	}
	for _, mv := range pm.Moves {
		if mv.From == me && mv.To != me {
			if e := c.get(mv.Index); e != nil {
				m.migrateOut(e, int(mv.To))
			} else {
				m.failf("load-balancing plan moves %s%v from PE %d, which does not hold it", c.Name, mv.Index, me)
				return
			}
		}
	}
	m.syncMaybeDone(c)
}

func (m *Manager) syncArrived(c *Collection, e *Element) {
	c.sync.arrived++
	m.syncMaybeDone(c)
}

func (m *Manager) syncMaybeDone(c *Collection) {
	if c.sync.plan == nil || c.sync.sentDone || c.sync.arrived < c.sync.expect {
		return
	}
	c.sync.sentDone = true
	m.sendSys(0, tPlanDone, &PlanDoneMsg{Coll: c.ID})
}

func (m *Manager) onPlanDone(pd *PlanDoneMsg) {
	c := m.coll(pd.Coll)
	c.sync.done++
	if c.sync.done < m.NumPEs() {
		return
	}
	for p := 0; p < m.NumPEs(); p++ {
		m.sendSys(p, tResume, &ResumeMsg{Coll: c.ID})
	}
}

func (m *Manager) onResume(rm *ResumeMsg) {
	c := m.coll(rm.Coll)
	c.sync = syncState{}
	for _, e := range append([]*Element(nil), c.Locals()...) {
		if !e.AtSync {
			continue
		}
		e.AtSync = false
		e.Epoch++
		m.host.ResumeFromSync(m, e)
		m.afterInvoke(e)
	}
}

type qdState struct {
	// a probe waiting for this PE to go idle
	probe     uint64
	probeFrom bool
	// root
	running    bool
	inWave     bool
	wave       uint64
	replies    int
	sent, proc uint64
	prevSent   uint64
	prevProc   uint64
	prevOK     bool
	waiters    []qdWaiter
}

type qdWaiter struct {
	pe  int
	tag uint64
}

// EndQDTag is the quiescence detection that ends a run which went quiet
// (asked for once main's constructor returned). It is released only at a
// quiet moment that releases no other detection.
const EndQDTag uint64 = 0

// StartQD asks PE 0 to detect quiescence and then call Host.Quiescent(tag)
// on this PE.
func (m *Manager) StartQD(tag uint64) {
	if tag&ckptQDTag == 0 && !slices.Contains(m.qdAsked, tag) {
		m.qdAsked = append(m.qdAsked, tag)
	}
	m.PE.Send(0, &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Req: true, Tag: tag, From: int32(m.Me())}})
}

func (m *Manager) onQDProbe(p *QDProbeMsg) {
	if p.Req {
		if p.Done {
			if p.Tag&ckptQDTag != 0 {
				m.ckptQuiescent(p.Tag &^ ckptQDTag)
				return
			}
			i := slices.Index(m.qdAsked, p.Tag)
			if i < 0 {
				return // answered already (asked again after PE 0 failed)
			}
			m.qdAsked = slices.Delete(m.qdAsked, i, i+1)
			m.host.Quiescent(m, p.Tag)
			return
		}
		// root: a new request. Waves start once the process is idle.
		m.qd.waiters = append(m.qd.waiters, qdWaiter{pe: int(p.From), tag: p.Tag})
		if !m.qd.running {
			m.qd.running = true
			m.qd.prevOK = false
			m.armQD()
		}
		return
	}
	if p.Idle {
		if m.qd.running && !m.qd.inWave {
			m.qdWave()
		}
		return
	}
	m.qd.probe = p.Wave
	m.qd.probeFrom = true
}

func (m *Manager) armQD() {
	m.PE.Node().ArmIdleNotice(0, pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Idle: true}})
}

func (m *Manager) qdWave() {
	m.qd.inWave = true
	m.qd.wave++
	// Messages injected from outside the PEs were processed but never
	// sent by one.
	m.qd.replies, m.qd.sent, m.qd.proc = 0, m.PE.Node().Injected(), 0
	for p := 0; p < m.NumPEs(); p++ {
		m.PE.Send(p, &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Wave: m.qd.wave}})
	}
}

func (m *Manager) qdIdle() {
	if !m.qd.probeFrom || m.Recovering() {
		return // a recovering PE answers once it caught up
	}
	m.qd.probeFrom = false
	m.PE.Send(0, &pe.Envelope{Type: tQDReply, Kind: pe.KindSystem, Payload: &QDReplyMsg{Wave: m.qd.probe, Sent: m.Sent, Processed: m.Processed}})
}

func (m *Manager) onQDReply(r *QDReplyMsg) {
	if r.Wave != m.qd.wave {
		return
	}
	m.qd.replies++
	m.qd.sent += r.Sent
	m.qd.proc += r.Processed
	if m.qd.replies < m.NumPEs() {
		return
	}
	m.qd.inWave = false
	ok := m.qd.sent == m.qd.proc
	if ok && m.qd.prevOK && m.qd.sent == m.qd.prevSent && m.qd.proc == m.qd.prevProc {
		w := m.qd.waiters
		end := func(x qdWaiter) bool { return x.tag == EndQDTag }
		if i := slices.IndexFunc(w, func(x qdWaiter) bool { return x.tag&ckptQDTag != 0 }); i >= 0 {
			// A checkpoint waiting for this quiet moment goes alone: it
			// resumes the program, so the others wait for the next one.
			w, m.qd.waiters = w[i:i+1], slices.Delete(slices.Clone(w), i, i+1)
		} else if i := slices.IndexFunc(w, end); i >= 0 && len(w) > 1 {
			// The program's own detections go first: their callbacks
			// may give it more to do, so the run ends at a quiet
			// moment that releases nothing else.
			w, m.qd.waiters = slices.DeleteFunc(slices.Clone(w), end), w[i:i+1]
		} else {
			m.qd.waiters = nil
		}
		if len(m.qd.waiters) > 0 {
			m.qd.prevOK = false
			m.armQD()
		} else {
			m.qd.running = false
		}
		for _, x := range w {
			m.PE.Send(x.pe, &pe.Envelope{Type: tQDProbe, Kind: pe.KindSystem, Payload: &QDProbeMsg{Req: true, Done: true, Tag: x.tag}})
		}
		return
	}
	m.qd.prevOK, m.qd.prevSent, m.qd.prevProc = ok, m.qd.sent, m.qd.proc
	if ok {
		m.qdWave() // confirm with a second wave
	} else {
		m.armQD() // busy: try again when the process is next idle
	}
}

// CheckQuiet runs on PE 0 when the program has gone quiet and its run
// would end: with nothing in flight, no unfinished work will ever be
// finished, so every PE reports its own (Pending). If there is none, then
// runs; otherwise the run fails with a QuietError naming the first piece
// and holding every PE's description.
func (m *Manager) CheckQuiet(then func()) {
	m.quiet = quietCheck{then: then, pending: make([][]string, m.NumPEs()), dumps: make([]string, m.NumPEs())}
	for p := 0; p < m.NumPEs(); p++ {
		m.PE.Send(p, &pe.Envelope{Type: tStranded, Kind: pe.KindSystem, Payload: &StrandedMsg{}})
	}
}

// StrandedMsg asks a PE for its unfinished work (Reply: here it is, and
// its description if there is any).
type StrandedMsg struct {
	Reply   bool
	Pending []string `msgpack:",omitempty"`
	Dump    string   `msgpack:",omitempty"`
}

type quietCheck struct {
	then    func()
	replies int
	pending [][]string
	dumps   []string
}

// QuietError ends a run that went quiet with work unfinished. Its message
// is one line; Dump describes every PE that had some.
type QuietError struct {
	First string // the first unfinished piece of work found
	More  int    // how many more there are
	State string // every PE's description that had some
}

// Dump is the state of the PEs that had unfinished work.
func (e *QuietError) Dump() string { return e.State }

func (e *QuietError) Error() string {
	msg := "the run went quiet with work unfinished: " + e.First
	if e.More > 0 {
		msg += fmt.Sprintf(" (and %d more: see the dump)", e.More)
	}
	return msg
}

func (m *Manager) onStranded(env *pe.Envelope) {
	s := env.Payload.(*StrandedMsg)
	if !s.Reply {
		r := &StrandedMsg{Reply: true, Pending: m.Pending()}
		if len(r.Pending) > 0 {
			var b strings.Builder
			m.Describe(&b)
			r.Dump = b.String()
		}
		m.PE.Send(0, &pe.Envelope{Type: tStranded, Kind: pe.KindSystem, Payload: r})
		return
	}
	q := &m.quiet
	if q.then == nil {
		return
	}
	q.pending[env.Src], q.dumps[env.Src] = s.Pending, s.Dump
	if q.replies++; q.replies < m.NumPEs() {
		return
	}
	then := q.then
	q.then = nil
	var all []string
	for _, p := range q.pending {
		all = append(all, p...)
	}
	if len(all) == 0 {
		then()
		return
	}
	m.Fail(&QuietError{First: MostTelling(all), More: len(all) - 1, State: strings.Join(q.dumps, "")})
}
