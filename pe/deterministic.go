package pe

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
)

// A deterministic run (Config.Deterministic) is the runtime itself —
// the same handlers, queues, lanes and hand-over — with its goroutines
// and clocks taken out: the goroutine that calls Wait runs every PE, one
// event at a time. An event is either a PE handling one message (its
// sends go on the wire at once, and when it runs out of work its idle
// hook runs as a parking PE's would) or the delivery of a message from
// one wire, the channel from one PE to another: its first message, or
// its first system message, which may overtake the application messages
// ahead of it (a PE hands its system lane over before its application
// lane, and empties its own system lane first) while an application
// message never overtakes anything. Wires interleave in any order. A
// seeded generator chooses each event among all that can happen, so a
// seed is an interleaving, and a simulation can fail a PE before any
// event (Config.OnEvent) or after any message it hands over
// (Config.OnHandOver). Work that a launcher does on a goroutine of its
// own (Node.Later: a new incarnation, a rollback) runs between two
// events.
type deterministic struct {
	node  *Node
	sent  []uint64 // messages each PE handed to another
	rng   *rand.Rand
	wires map[wire][]onWire
	live  []wire // wires with messages, in order
	mu    sync.Mutex
	later []func()
	event int
	trace uint64 // a hash of every choice made
}

type wire struct{ src, dst int }

type onWire struct {
	env Envelope
	sys bool // in the system lane
}

func (a wire) compare(b wire) int {
	if a.src != b.src {
		return a.src - b.src
	}
	return a.dst - b.dst
}

func newDeterministic(n *Node, seed uint64) *deterministic {
	return &deterministic{node: n, sent: make([]uint64, len(n.pes)), rng: rand.New(rand.NewPCG(seed, 0x5eed)), wires: map[wire][]onWire{}}
}

// Deliver puts a PE's hand-over on its wire.
func (d *deterministic) Deliver(src, dst int, sys bool, batch *[]Envelope) error {
	w := wire{src, dst}
	if len(d.wires[w]) == 0 {
		i, _ := slices.BinarySearchFunc(d.live, w, wire.compare)
		d.live = slices.Insert(d.live, i, w)
	}
	for _, env := range *batch {
		d.wires[w] = append(d.wires[w], onWire{env, sys})
	}
	if f := d.node.cfg.OnHandOver; f != nil {
		for range *batch {
			d.sent[src]++
			f(d.node, src, d.sent[src])
		}
	}
	return nil
}

// overtaker is the position of w's first system message if application
// messages are ahead of it (it may go first), or -1.
func (d *deterministic) overtaker(w wire) int {
	q := d.wires[w]
	if q[0].sys {
		return -1
	}
	for i := range q {
		if q[i].sys {
			return i
		}
	}
	return -1
}

// take delivers message i of wire w (its position in live: at) to its
// receiver.
func (d *deterministic) take(w wire, at, i int) {
	q := d.wires[w]
	m := q[i]
	q = slices.Delete(q, i, i+1)
	if len(q) == 0 {
		delete(d.wires, w)
		d.live = slices.Delete(d.live, at, at+1)
	} else {
		d.wires[w] = q
	}
	d.node.pes[w.dst].in.push(m.sys, []Envelope{m.env})
}

// clear drops everything on the wires (a rollback).
func (d *deterministic) clear() {
	clear(d.wires)
	d.live = d.live[:0]
}

// Later runs f on a goroutine of its own, or, in a deterministic run,
// between two events: what a launcher does beside the PEs (starting a
// new incarnation, a rollback) must not race with them there.
func (n *Node) Later(f func()) {
	if n.det == nil {
		go f()
		return
	}
	n.det.mu.Lock()
	n.det.later = append(n.det.later, f)
	n.det.mu.Unlock()
}

// Events is the number of events a deterministic run has run.
func (n *Node) Events() int {
	if n.det == nil {
		return 0
	}
	return n.det.event
}

// Deterministic reports whether the node runs its PEs one event at a
// time on Wait's goroutine.
func (n *Node) Deterministic() bool { return n.det != nil }

// ErrNothingToDo ends a deterministic run in which no event can happen
// and the run has not ended: every PE waits for a message nobody sends
// (the run would hang). ErrNoProgress ends one in which, for
// StallEvents events, no PE ran an entry method (PE.Ran) — the PEs passed
// only the runtime's own messages round (quiescence waves that never find
// the run quiet, a message forwarded back and forth): the deterministic
// run's watchdog.
var (
	ErrNothingToDo = errors.New("no PE has anything to do, and the run has not ended")
	ErrNoProgress  = errors.New("the PEs pass only the runtime's own messages round, and no entry method runs")
)

// StallEvents is how many events without an entry method end a
// deterministic run (ErrNoProgress).
const StallEvents = 100_000

// drive runs a deterministic run to its end.
func (n *Node) drive() {
	d := n.det
	announced := -1
	lastProgress, since := n.Progress(), 0
	for !n.stopped.Load() {
		d.mu.Lock()
		later := d.later
		d.later = nil
		d.mu.Unlock()
		if len(later) > 0 {
			for _, f := range later {
				f()
			}
			continue
		}
		if n.cfg.OnEvent != nil && announced < d.event {
			announced = d.event
			n.cfg.OnEvent(n, d.event)
			continue // it may have failed PEs, or left work for Later
		}
		var ready []int
		for i, p := range n.pes {
			if p.life.Load() == peRunning && (p.pending() || p.sysq.len()+p.appq.len() > 0) {
				ready = append(ready, i)
			}
		}
		// the wires' choices: each one's first message, and its first
		// system message where application messages are ahead of it
		var over []int // wire index in live, per overtaking choice
		for i, w := range d.live {
			if d.overtaker(w) >= 0 {
				over = append(over, i)
			}
		}
		// every PE idle while messages are on the wires: between
		// processes (or under a chaos transport) the idle notice can
		// come then too
		idleNow := 0
		if len(ready) == 0 && len(d.live) > 0 && n.idleArmed.Load() {
			idleNow = 1
		}
		choices := len(ready) + len(d.live) + len(over) + idleNow
		if choices == 0 {
			if n.idleArmed.CompareAndSwap(true, false) {
				n.pes[n.idleDst].in.push(true, []Envelope{n.idleEnv})
				continue
			}
			n.Fail(fmt.Errorf("%w (after event %d)", ErrNothingToDo, d.event))
			break
		}
		if n.cfg.MaxEvents > 0 && d.event >= n.cfg.MaxEvents {
			n.Fail(fmt.Errorf("the run did not end within %d events", d.event))
			break
		}
		if p := n.Progress(); p != lastProgress {
			lastProgress, since = p, d.event
		} else if d.event-since >= StallEvents {
			n.Fail(fmt.Errorf("%w (events %d to %d)", ErrNoProgress, since, d.event))
			break
		}
		d.event++
		c := d.rng.IntN(choices)
		switch {
		case c < len(ready):
			d.note(uint64(ready[c]))
			n.pes[ready[c]].step()
		case c < len(ready)+len(d.live):
			at := c - len(ready)
			w := d.live[at]
			d.note(1<<32 | uint64(w.src)<<16 | uint64(w.dst)<<1)
			d.take(w, at, 0)
		case c == choices-idleNow && idleNow == 1:
			d.note(2 << 32)
			if n.idleArmed.CompareAndSwap(true, false) {
				n.pes[n.idleDst].in.push(true, []Envelope{n.idleEnv})
			}
		default:
			at := over[c-len(ready)-len(d.live)]
			w := d.live[at]
			d.note(1<<32 | uint64(w.src)<<16 | uint64(w.dst)<<1 | 1)
			d.take(w, at, d.overtaker(w))
		}
	}
	n.doneOnce.Do(func() { close(n.done) })
}

func (d *deterministic) note(v uint64) {
	d.trace = (d.trace ^ v) * 0x100000001b3
}

// Trace is a hash of every choice a deterministic run made: two runs with
// the same trace ran the same interleaving.
func (n *Node) Trace() uint64 {
	if n.det == nil {
		return 0
	}
	return n.det.trace
}

// step handles one message, as one turn of run's loop does (its lines
// are run's, repeated: a shared helper is not inlined, and run is the hot
// path).
func (p *PE) step() {
	defer func() {
		if r := recover(); r != nil {
			p.panicked(r, debug.Stack())
		}
	}()
	if p.pending() {
		p.grab()
	}
	q := &p.sysq
	if q.len() == 0 {
		q = &p.appq
	}
	if q.len() == 0 {
		return
	}
	p.dispatchFront(q)
	p.Stats.Processed++
	if p.dead() {
		return // fail-stop: what it buffered is never sent
	}
	if p.pending() {
		p.grab()
	}
	if p.sysq.len()+p.appq.len() == 0 && p.idle != nil {
		p.idle.Idle(p)
	}
	p.Flush()
}
