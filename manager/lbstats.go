package manager

// The load-balancing database, each PE's side: how long every element's
// entry methods took since the last balancing step (wall clock, and the
// thread's CPU clock when asked for), what each element sent to whom, and
// how long the PE sat idle. A balancing step turns it into the PE's part
// of loadbalance.Stats (lbOwnPart), merged with its tree children's on the
// way up to PE 0, and starts a new period.

import (
	"cmp"
	"slices"
	"time"

	"github.com/charmgo/charmgo/loadbalance"
	"github.com/charmgo/charmgo/pe"
)

// Balancer decides balancing steps on PE 0. The chare layer wraps a chain
// of loadbalance strategies in one, with the reports and dumps the user
// asked for; the manager only measures, gathers and migrates.
type Balancer interface {
	// Plan decides step st.Step of collection coll with the strategy it
	// names.
	Plan(coll string, st *loadbalance.Stats) (moves []loadbalance.Move, strategy string, err error)
	// Stepped reports a finished step (its migrations done).
	Stepped(r LBStepReport)
}

// LBStepReport is what a balancing step did.
type LBStepReport struct {
	Coll     string
	Strategy string
	Summary  loadbalance.Summary
	// PlanNanos is the time the strategy took; StepNanos the time from
	// the last report reaching PE 0 to the last PE's migrations done.
	PlanNanos, StepNanos int64
	// MovedBytes is the packed state that migrated.
	MovedBytes int64
	// SectionsMoved is how many sections were set up again to follow
	// their members.
	SectionsMoved int
}

// LBOptions configure load balancing.
type LBOptions struct {
	// Balancer decides the steps; nil: AtSync resumes at once, nothing
	// moves, nothing is measured.
	Balancer Balancer
	// Off stops the measurements (a balancer then sees no loads).
	Off bool
	// CPUTime measures each entry method's CPU time too and balances by
	// it (the PEs must run on threads of their own: pe.Config.LockThreads).
	CPUTime bool
	// Periodic balances when PE 0 gets a tick (LBTickType) instead of at
	// AtSync, which is then refused (see lbperiodic.go).
	Periodic bool
}

// lbDest is whom an element sent to: an element, or a section.
type lbDest struct {
	Coll  uint32
	Index pe.Index
	Sec   uint64
}

type lbCount struct{ msgs, bytes uint64 }

// lbElem is one element's measurements since the last step.
type lbElem struct {
	wall, cpu int64
	sent      map[lbDest]*lbCount
	last      lbDest // the previous destination and its counter: most sends repeat it
	lastC     *lbCount
}

// lbState is the PE's side of the database.
type lbState struct {
	on, cpu      bool
	cur          *Element // the element whose entry method runs
	periodicBusy int      // PE 0: collections in a periodic step
}

// lbPeriod is when a collection's current measuring period began on this
// PE: each collection balances on its own schedule, so each has its own.
type lbPeriod struct {
	start       time.Time
	idle, cpu   int64
	initialized bool
}

func (m *Manager) lbInit() {
	m.lb.on = m.opt.LB.Balancer != nil && !m.opt.LB.Off
	m.lb.cpu = m.lb.on && m.opt.LB.CPUTime
}

func (m *Manager) lbStartPeriod(c *Collection) {
	c.lbPeriod = lbPeriod{start: time.Now(), idle: m.PE.Stats.IdleNanos, initialized: true}
	if m.lb.cpu {
		c.lbPeriod.cpu = pe.ThreadCPU()
	}
}

// invoke runs entry method env on e, measured when balancing is on (small
// enough to inline: the unmeasured path costs one test).
func (m *Manager) invoke(e *Element, env *pe.Envelope) {
	m.ran = true
	if m.recording {
		m.invokeRecorded(e, env)
		return
	}
	if m.lb.on {
		m.invokeMeasured(e, env)
		return
	}
	m.host.Invoke(m, e, env)
}

// invokeRecorded is invoke on a PE that records its timeline.
func (m *Manager) invokeRecorded(e *Element, env *pe.Envelope) {
	var size uint32
	if env.Flags != FlagInline {
		size = uint32(min(uint64(max(PayloadSize(env.Payload), 0)), 1<<32-1)) // -1: no size
	}
	outer := m.PE.BeginEntry(env.Type, env.Kind, e.Coll.ID, &e.Index, size)
	if m.lb.on {
		m.invokeMeasured(e, env)
	} else {
		m.host.Invoke(m, e, env)
	}
	m.PE.EndEntry(outer)
}

func (m *Manager) invokeMeasured(e *Element, env *pe.Envelope) {
	outer := m.lb.cur
	m.lb.cur = e
	var c0 int64
	if m.lb.cpu {
		c0 = pe.ThreadCPU()
	}
	t0 := time.Now()
	m.host.Invoke(m, e, env)
	e.lb.wall += int64(time.Since(t0))
	if m.lb.cpu {
		e.lb.cpu += pe.ThreadCPU() - c0
	}
	m.lb.cur = outer
}

// lbSent records that the running element sent bytes to d.
func (m *Manager) lbSent(d lbDest, bytes int) {
	e := m.lb.cur
	if e == nil {
		return
	}
	c := e.lb.lastC
	if c == nil || e.lb.last != d {
		if c = e.lb.sent[d]; c == nil {
			if e.lb.sent == nil {
				e.lb.sent = map[lbDest]*lbCount{}
			}
			c = &lbCount{}
			e.lb.sent[d] = c
		}
		e.lb.last, e.lb.lastC = d, c
	}
	c.msgs++
	if bytes > 0 {
		c.bytes += uint64(bytes)
	}
}

// lbOwnPart is this PE's part of a step's statistics: every local element
// of c with its measurements (which start again), the PE's other chares
// (not moved by this step, but their load is the PE's and their messages
// are edges) and the PE's own figures for the collection's period.
func (m *Manager) lbOwnPart(c *Collection) *LBPartMsg {
	els := c.Locals()
	pm := &LBPartMsg{Coll: c.ID, Indices: make([]pe.Index, len(els)), PEs: make([]int32, len(els)), Loads: make([]ObjLoad, len(els))}
	me := int32(m.Me())
	var busy, cpu int64
	for i, e := range els {
		pm.Indices[i], pm.PEs[i], pm.Loads[i] = e.Index, me, e.lbLoad()
		busy += e.lb.wall
		cpu += e.lb.cpu
		pm.Comm = e.lb.appendComm(pm.Comm, int32(i))
		e.lb = lbElem{}
	}
	for _, id := range sortedKeys(m.colls) {
		oc := m.colls[id]
		if oc == c {
			continue
		}
		for _, e := range oc.Locals() {
			from := int32(len(els) + len(pm.Others))
			pm.Others = append(pm.Others, OtherObj{Coll: oc.ID, Index: e.Index, PE: me, Load: e.lbLoad()})
			busy += e.lb.wall
			cpu += e.lb.cpu
			pm.Comm = e.lb.appendComm(pm.Comm, from)
		}
	}
	if !c.lbPeriod.initialized { // restored from a checkpoint: measured from now on
		m.lbStartPeriod(c)
	}
	wall := int64(time.Since(c.lbPeriod.start))
	idle := m.PE.Stats.IdleNanos - c.lbPeriod.idle
	bg := wall - idle - busy
	if m.lb.cpu {
		bg = pe.ThreadCPU() - c.lbPeriod.cpu - cpu
	}
	pm.Figs = []PEFigure{{PE: me, Stats: loadbalance.PEStats{Wall: secs(wall), Busy: secs(busy), Idle: secs(idle), Background: secs(max(bg, 0))}}}
	m.lbStartPeriod(c)
	return pm
}

// merge appends another subtree's part to p.
func (p *LBPartMsg) merge(o *LBPartMsg) {
	ni, no := int32(len(p.Indices)), int32(len(p.Others))
	oi := int32(len(o.Indices))
	// p's objects are Indices then Others; after the merge, p's Indices,
	// o's Indices, p's Others, o's Others
	for i := range p.Comm {
		if p.Comm[i].From >= ni {
			p.Comm[i].From += oi
		}
	}
	for _, cm := range o.Comm {
		if cm.From < oi {
			cm.From += ni
		} else {
			cm.From += ni + no
		}
		p.Comm = append(p.Comm, cm)
	}
	p.Indices = append(p.Indices, o.Indices...)
	p.PEs = append(p.PEs, o.PEs...)
	p.Loads = append(p.Loads, o.Loads...)
	p.Others = append(p.Others, o.Others...)
	p.Figs = append(p.Figs, o.Figs...)
}

// lbLoad is e's measurements and its section memberships (whose
// multicasts reach it, and which may be set up again where it is).
func (e *Element) lbLoad() ObjLoad {
	return ObjLoad{Wall: e.lb.wall, CPU: e.lb.cpu, Bytes: e.packed, Mems: e.lbMems()}
}

// appendComm appends what the element sent, in a fixed order (not map
// order: the same measurements make the same message).
func (l *lbElem) appendComm(out []ObjComm, from int32) []ObjComm {
	start := len(out)
	for d, n := range l.sent {
		out = append(out, ObjComm{From: from, ToColl: d.Coll, To: d.Index, Sec: d.Sec, Msgs: n.msgs, Bytes: n.bytes})
	}
	slices.SortFunc(out[start:], func(a, b ObjComm) int {
		if c := cmp.Compare(a.Sec, b.Sec); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ToColl, b.ToColl); c != 0 {
			return c
		}
		return a.To.Compare(b.To)
	})
	return out
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

// ObjLoad is one element's measurements in a SyncMsg (nanoseconds).
type ObjLoad struct {
	Wall, CPU int64
	Bytes     int      // its packed state at its last migration (0: never moved)
	Mems      []SecMem // its section memberships
}

// OtherObj is a chare of another collection in a SyncMsg: its load since
// its own collection's last step, and no move.
type OtherObj struct {
	Coll  uint32
	Index pe.Index
	PE    int32
	Load  ObjLoad
}

// ObjComm is what element From (an index into the LBPartMsg's elements,
// then its Others) sent to element (ToColl, To) or, Sec set, multicast
// to section Sec.
type ObjComm struct {
	From   int32
	ToColl uint32
	To     pe.Index
	Sec    uint64
	Msgs   uint64
	Bytes  uint64
}

// measured says whether a step has anything to balance: always at AtSync
// (the program asked); in a periodic step, only if some element ran
// since the last (an idle program is left where it is).
func (g *lbGather) measured(periodic bool) bool {
	if !periodic {
		return true
	}
	for _, o := range g.st.Objs {
		if o.Wall > 0 || o.CPU > 0 {
			return true
		}
	}
	return false
}

// objKey names a chare in a step's stats.
type objKey struct {
	coll uint32
	ix   pe.Index
}

// lbGather collects one step's stats on PE 0 from the reports.
type lbGather struct {
	st      loadbalance.Stats
	obj     map[objKey]int32   // chare -> index in st.Objs
	comm    []ObjComm          // with From rewritten to an index into st.Objs
	members map[uint64][]int32 // section -> its members among st.Objs
	mems    map[int32][]SecMem // the balanced collection's objects' memberships
	peSeen  []bool
}

func (g *lbGather) add(m *Manager, c *Collection, sm *LBPartMsg) {
	if g.obj == nil {
		g.obj = map[objKey]int32{}
		g.st.PEs = make([]loadbalance.PEStats, m.NumPEs())
		g.peSeen = make([]bool, m.NumPEs())
		g.members = map[uint64][]int32{}
		g.mems = map[int32][]SecMem{}
	}
	for _, f := range sm.Figs {
		if f.PE >= 0 && int(f.PE) < len(g.peSeen) && !g.peSeen[f.PE] {
			g.peSeen[f.PE] = true
			g.st.PEs[f.PE] = f.Stats
		}
	}
	at := make([]int32, 0, len(sm.Indices)+len(sm.Others)) // SyncMsg object -> st.Objs
	put := func(o loadbalance.Obj, mems []SecMem) {
		k := objKey{o.Coll, o.Index}
		i, ok := g.obj[k]
		if ok { // reported again (it moved in this epoch)
			g.st.Objs[i] = o
		} else {
			i = int32(len(g.st.Objs))
			g.obj[k] = i
			g.st.Objs = append(g.st.Objs, o)
			for _, sm := range mems {
				g.members[sm.Sec] = append(g.members[sm.Sec], i)
			}
		}
		if o.Coll == c.ID {
			g.mems[i] = mems
		}
		at = append(at, i)
	}
	migratable := c.Migratable && c.Kind == CollArray
	for i, ix := range sm.Indices {
		o := loadbalance.Obj{Coll: c.ID, Index: ix, PE: sm.PEs[i], Migratable: migratable}
		if i < len(sm.Loads) {
			o.Wall, o.CPU, o.Bytes = secs(sm.Loads[i].Wall), secs(sm.Loads[i].CPU), sm.Loads[i].Bytes
		}
		var mems []SecMem
		if i < len(sm.Loads) {
			mems = sm.Loads[i].Mems
		}
		put(o, mems)
	}
	for _, oo := range sm.Others {
		put(loadbalance.Obj{Coll: oo.Coll, Index: oo.Index, PE: oo.PE, Wall: secs(oo.Load.Wall), CPU: secs(oo.Load.CPU)}, oo.Load.Mems)
	}
	for _, cm := range sm.Comm {
		if cm.From >= 0 && int(cm.From) < len(at) {
			cm.From = at[cm.From]
			g.comm = append(g.comm, cm)
		}
	}
}

// stats resolves the communication records into edges between the
// gathered objects (a multicast counts once towards each member) and
// returns the step's stats.
func (g *lbGather) stats(step int, cpu bool) *loadbalance.Stats {
	g.st.Step, g.st.CPUTime = step, cpu
	edges := map[[2]int32]*loadbalance.Comm{}
	add := func(from, to int32, msgs, bytes uint64) {
		if from == to {
			return
		}
		k := [2]int32{from, to}
		e := edges[k]
		if e == nil {
			e = &loadbalance.Comm{From: from, To: to}
			edges[k] = e
		}
		e.Msgs += msgs
		e.Bytes += bytes
	}
	for _, cm := range g.comm {
		if cm.Sec == 0 {
			if to, ok := g.obj[objKey{cm.ToColl, cm.To}]; ok {
				add(cm.From, to, cm.Msgs, cm.Bytes)
			}
			continue
		}
		for _, to := range g.members[cm.Sec] {
			add(cm.From, to, cm.Msgs, cm.Bytes)
		}
	}
	g.st.Comm = make([]loadbalance.Comm, 0, len(edges))
	for _, e := range edges {
		g.st.Comm = append(g.st.Comm, *e)
	}
	st := g.st
	sortObjs(&st)
	return &st
}

// sortObjs puts the objects in index order (not the order the reports
// came in), so equal measurements give equal plans.
func sortObjs(st *loadbalance.Stats) {
	perm := make([]int32, len(st.Objs))
	for i := range perm {
		perm[i] = int32(i)
	}
	slices.SortFunc(perm, func(a, b int32) int {
		if c := cmp.Compare(st.Objs[a].Coll, st.Objs[b].Coll); c != 0 {
			return c
		}
		return st.Objs[a].Index.Compare(st.Objs[b].Index)
	})
	newAt := make([]int32, len(perm))
	objs := make([]loadbalance.Obj, len(perm))
	for to, from := range perm {
		newAt[from] = int32(to)
		objs[to] = st.Objs[from]
	}
	st.Objs = objs
	for i := range st.Comm {
		st.Comm[i].From, st.Comm[i].To = newAt[st.Comm[i].From], newAt[st.Comm[i].To]
	}
	slices.SortFunc(st.Comm, func(a, b loadbalance.Comm) int {
		if c := cmp.Compare(a.From, b.From); c != 0 {
			return c
		}
		return cmp.Compare(a.To, b.To)
	})
}
