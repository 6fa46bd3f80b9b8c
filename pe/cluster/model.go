package cluster

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The membership model: a job's upkeep between its processes simulated,
// deterministically, at sizes one host cannot run (1,024 and 16,384
// processes), with the rules the processes themselves follow: the tree
// over the live processes (neighboursAt, as treeNeighbours), heartbeats
// to its neighbours every beatPeriod, a neighbour silent for longer than
// the timeout found hung (silent), a neighbour's broken data link found
// at once, each process passing its first notice of a loss on to its
// neighbours in the tree of its own view, a new neighbour given a whole
// timeout from when it became one (treeLocked), the steward lost
// succeeded by the lowest live rank that the rendezvous tells every
// process of, a recovery's steps broadcast by the steward and reported
// back by every process (Job.Broadcast, Job.Report).
//
// Heartbeats are simulated one by one (each process starts its ticker at
// a seeded random phase), messages take ModelConfig.Latency, and nothing
// else happens: what the model gives is what the membership costs, apart
// from the application's own traffic (its data links: ModelConfig.AppPeers).

// ModelConfig is one simulated job.
type ModelConfig struct {
	Procs            int
	HeartbeatTimeout time.Duration
	// Latency is a control message's time from sender to receiver (and
	// the time a broken data link takes to be noticed).
	Latency time.Duration
	// Duration is how long the job runs, simulated.
	Duration time.Duration
	// Lost is the process lost at LostAt (-1: none); Hung, it hangs (its
	// heartbeats stop, its links stay up) instead of dying.
	Lost   int
	LostAt time.Duration
	Hung   bool
	// RecoverySteps is how many steps the steward broadcasts for the
	// recovery of a loss (each reported back by every process).
	RecoverySteps int
	// AppPeers, if set, names the processes a process's application
	// sends to (its data links beyond the tree's).
	AppPeers func(rank int) []int
	Seed     uint64
}

// ModelProcess is what one simulated process held and sent.
type ModelProcess struct {
	Neighbours int // in the tree, at the end
	DataLinks  int // to its neighbours (at any time) and its application's peers
	// ControlPeers is how many processes it holds a control connection
	// with (those it sent to or heard from).
	ControlPeers              int
	BeatsSent, BeatsReceived  int
	ControlSent, ControlRecvd int           // heartbeats included
	KnewOfLoss                time.Duration // after the loss (-1: never, or none)
	FoundItself               bool          // it found the loss itself (link or silence), not by a notice
	// the simulation's own: who it talks to and links with, whether it
	// knows of the loss, its tree, when it last heard each neighbour
	peers    map[int]bool
	links    map[int]bool
	knows    bool
	parent   int
	children []int
	lastBeat map[int]time.Duration
}

// ModelReport is a simulated job's outcome.
type ModelReport struct {
	Config    ModelConfig
	Depth     int // of the tree over every process
	Processes []ModelProcess
	// FirstFound is when (after the loss) the first process found it,
	// AllKnew when the last live one knew; Notices is how many notices
	// of it went between processes.
	FirstFound, AllKnew time.Duration
	Notices             int
	// Steward is the process steering at the end; RendezvousSent what the
	// launcher's rendezvous sent (its succession notices).
	Steward        int
	RendezvousSent int
}

// modelEvent is a timer firing (a heartbeat tick) or a message arriving.
type modelEvent struct {
	at   time.Duration
	seq  int // ties broken in the order scheduled: deterministic
	kind int
	to   int
	from int
}

const (
	evTick = iota
	evBeat
	evNotice
	evLinkBroken
	evSuccession
	evStep
	evReport
)

type eventHeap []modelEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(modelEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// model is a simulation in progress.
type model struct {
	cfg    ModelConfig
	epoch  time.Time // (silent compares times)
	events eventHeap
	seq    int
	procs  []ModelProcess
	rep    *ModelReport
	lostAt time.Duration
	// withoutLost is the live ranks once the loss is known
	all, withoutLost []int
	steward          int
	stepsLeft        int
	reports          int
}

// SimulateMembership runs the model of cfg.
func SimulateMembership(cfg ModelConfig) (ModelReport, error) {
	switch {
	case cfg.Procs < 2:
		return ModelReport{}, fmt.Errorf("membership model: %d processes, at least 2", cfg.Procs)
	case cfg.HeartbeatTimeout <= 0 || cfg.Latency <= 0 || cfg.Duration <= 0:
		return ModelReport{}, fmt.Errorf("membership model: the timeout, latency and duration must be positive")
	case cfg.Lost >= cfg.Procs:
		return ModelReport{}, fmt.Errorf("membership model: process %d lost, of %d", cfg.Lost, cfg.Procs)
	}
	m := &model{cfg: cfg, epoch: time.Unix(0, 0), rep: &ModelReport{Config: cfg, FirstFound: -1, AllKnew: -1}}
	m.all = make([]int, cfg.Procs)
	for r := range m.all {
		m.all[r] = r
	}
	if cfg.Lost >= 0 {
		m.withoutLost = slices.Delete(slices.Clone(m.all), cfg.Lost, cfg.Lost+1)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6d656d62))
	period := beatPeriod(cfg.HeartbeatTimeout)
	m.procs = make([]ModelProcess, cfg.Procs)
	for r := range m.procs {
		p := &m.procs[r]
		p.peers, p.links, p.lastBeat = map[int]bool{}, map[int]bool{}, map[int]time.Duration{}
		p.KnewOfLoss = -1
	}
	for r := range m.procs {
		p := &m.procs[r]
		m.setView(r, m.all, 0)
		if cfg.AppPeers != nil {
			for _, q := range cfg.AppPeers(r) {
				if q != r {
					p.links[q], m.procs[q].links[r] = true, true
				}
			}
		}
		m.schedule(time.Duration(rng.Int64N(int64(period))), evTick, r, r)
	}
	for r := range m.procs {
		if r != 0 {
			m.peer(r, 0) // the steward's control connection: join, start, results
		}
	}
	if cfg.Lost >= 0 {
		m.lostAt = cfg.LostAt
		if !cfg.Hung {
			// its data links break: each process linked to it finds out
			for q := range m.procs[cfg.Lost].links {
				m.schedule(cfg.LostAt+cfg.Latency, evLinkBroken, q, cfg.Lost)
			}
		}
	}
	m.rep.Depth = treeDepth(cfg.Procs)
	for m.events.Len() > 0 {
		e := heap.Pop(&m.events).(modelEvent)
		if e.at > cfg.Duration {
			break
		}
		m.handle(e, period)
	}
	for r := range m.procs {
		p := &m.procs[r]
		p.Neighbours = len(p.children)
		if p.parent >= 0 {
			p.Neighbours++
		}
		p.DataLinks, p.ControlPeers = len(p.links), len(p.peers)
	}
	m.rep.Processes, m.rep.Steward = m.procs, m.steward
	return *m.rep, nil
}

func (m *model) schedule(at time.Duration, kind, to, from int) {
	heap.Push(&m.events, modelEvent{at: at, seq: m.seq, kind: kind, to: to, from: from})
	m.seq++
}

// send is a control message from one process to another.
func (m *model) send(at time.Duration, kind, from, to int) {
	m.procs[from].ControlSent++
	m.peer(from, to)
	m.schedule(at+m.cfg.Latency, kind, to, from)
}

func (m *model) peer(a, b int) { m.procs[a].peers[b], m.procs[b].peers[a] = true, true }

// gone reports whether process r no longer acts (lost, hung or dead).
func (m *model) gone(r int, at time.Duration) bool { return r == m.cfg.Lost && at >= m.lostAt }

// setView gives process r the tree of the live ranks in view, as
// treeLocked does: links to its neighbours, a new one given a whole
// timeout from now.
func (m *model) setView(r int, view []int, now time.Duration) {
	p := &m.procs[r]
	at, ok := slices.BinarySearch(view, r)
	if !ok {
		return
	}
	old := append(slices.Clone(p.children), p.parent)
	p.parent, p.children = neighboursAt(view, at)
	for _, q := range append(slices.Clone(p.children), p.parent) {
		if q < 0 {
			continue
		}
		if !slices.Contains(old, q) {
			p.lastBeat[q] = now
		}
		p.links[q], m.procs[q].links[r] = true, true
	}
}

func (m *model) handle(e modelEvent, period time.Duration) {
	if m.gone(e.to, e.at) {
		return
	}
	p := &m.procs[e.to]
	switch e.kind {
	case evTick:
		for _, q := range append(slices.Clone(p.children), p.parent) {
			if q >= 0 {
				p.BeatsSent++
				m.send(e.at, evBeat, e.to, q)
			}
		}
		// checkBeats
		for _, q := range append(slices.Clone(p.children), p.parent) {
			if q >= 0 && !(p.knows && q == m.cfg.Lost) && silent(m.epoch.Add(e.at), m.epoch.Add(p.lastBeat[q]), m.cfg.HeartbeatTimeout) {
				m.found(e.to, e.at)
			}
		}
		m.schedule(e.at+period, evTick, e.to, e.to)
	case evBeat:
		p.BeatsReceived++
		p.ControlRecvd++
		p.lastBeat[e.from] = e.at
	case evLinkBroken:
		m.found(e.to, e.at)
	case evNotice:
		p.ControlRecvd++
		m.rep.Notices++
		if !p.knows {
			m.learn(e.to, e.at)
		}
	case evSuccession:
		if !p.knows {
			m.learn(e.to, e.at)
		}
	case evStep:
		p.ControlRecvd++
		m.send(e.at, evReport, e.to, m.steward)
	case evReport:
		p.ControlRecvd++
		if m.reports++; m.reports == len(m.withoutLost)-1 && m.stepsLeft > 0 {
			m.reports = 0
			m.broadcastStep(e.at)
		}
	}
}

// found: process r found the loss itself (a broken link, a silent
// neighbour).
func (m *model) found(r int, at time.Duration) {
	if m.procs[r].knows {
		return
	}
	m.procs[r].FoundItself = true
	if m.rep.FirstFound < 0 {
		m.rep.FirstFound = at - m.lostAt
		if m.cfg.Lost == m.steward {
			// (processLost: the steward's loss goes to the rendezvous,
			// which names the lowest live rank and tells every process)
			m.steward = m.withoutLost[0]
			for q := range m.procs {
				if q != m.cfg.Lost {
					m.rep.RendezvousSent++
					m.schedule(at+2*m.cfg.Latency, evSuccession, q, -1)
				}
			}
		}
	}
	m.learn(r, at)
}

// learn: process r knows of the loss from now: it passes its first
// notice on to its neighbours in its new tree (passLoss), and the
// steward begins the recovery.
func (m *model) learn(r int, at time.Duration) {
	p := &m.procs[r]
	p.knows = true
	p.KnewOfLoss = at - m.lostAt
	m.rep.AllKnew = max(m.rep.AllKnew, p.KnewOfLoss)
	m.setView(r, m.withoutLost, at)
	for _, q := range append(slices.Clone(p.children), p.parent) {
		if q >= 0 {
			m.send(at, evNotice, r, q)
		}
	}
	if r == m.steward && m.cfg.RecoverySteps > 0 && m.stepsLeft == 0 && m.reports == 0 {
		m.stepsLeft = m.cfg.RecoverySteps
		m.broadcastStep(at)
	}
}

// broadcastStep: the steward sends a recovery step to every live
// process (Job.Broadcast), each reports back (Job.Report).
func (m *model) broadcastStep(at time.Duration) {
	m.stepsLeft--
	for _, q := range m.withoutLost {
		if q != m.steward {
			m.send(at, evStep, m.steward, q)
		}
	}
}

// treeDepth is the depth of the tree over n processes (a lone root: 0).
func treeDepth(n int) int {
	d := 0
	for last := n - 1; last > 0; last = (last - 1) / treeFanout {
		d++
	}
	return d
}
