package pe

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
)

// A deterministic run (Config.Deterministic) is the runtime itself —
// the same handlers, queues, lanes and hand-over — with its goroutines
// and clocks taken out: the goroutine that calls Wait runs every PE, one
// event at a time. An event is either a PE handling one message (its
// sends go on the wire at once, and when it runs out of work its idle
// hook runs as a parking PE's would) or the delivery of the first
// message on one wire: a (sender, receiver, lane) channel, FIFO as the
// hand-over between two PEs is, while wires interleave in any order. A
// seeded generator chooses each event among all that can happen, so a
// seed is an interleaving, and a simulation can fail a PE before any
// event (Config.OnEvent). Work that a launcher does on a goroutine of
// its own (Node.Later: a new incarnation, a rollback) runs between two
// events.
type deterministic struct {
	rng   *rand.Rand
	wires map[wire][]Envelope
	live  []wire // wires with messages, in order
	mu    sync.Mutex
	later []func()
	event int
	trace uint64 // a hash of every choice made
}

type wire struct {
	src, dst int
	sys      bool
}

func (a wire) less(b wire) bool {
	if a.src != b.src {
		return a.src < b.src
	}
	if a.dst != b.dst {
		return a.dst < b.dst
	}
	return !a.sys && b.sys
}

func newDeterministic(seed uint64) *deterministic {
	return &deterministic{rng: rand.New(rand.NewPCG(seed, 0x5eed)), wires: map[wire][]Envelope{}}
}

// Deliver puts a PE's hand-over on its wire.
func (d *deterministic) Deliver(src, dst int, sys bool, batch *[]Envelope) error {
	w := wire{src, dst, sys}
	if len(d.wires[w]) == 0 {
		i, _ := slices.BinarySearchFunc(d.live, w, func(a, b wire) int {
			switch {
			case a.less(b):
				return -1
			case b.less(a):
				return 1
			}
			return 0
		})
		d.live = slices.Insert(d.live, i, w)
	}
	d.wires[w] = append(d.wires[w], *batch...)
	return nil
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
// StallEvents events, the PEs handled only the runtime's bookkeeping
// (PE.Bookkeeping: quiescence waves that never find the run quiet): the
// deterministic run's watchdog.
var (
	ErrNothingToDo = errors.New("no PE has anything to do, and the run has not ended")
	ErrNoProgress  = errors.New("the PEs handle only the runtime's bookkeeping")
)

// StallEvents is how many events of bookkeeping alone end a deterministic
// run (ErrNoProgress).
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
			if p.life.Load() == peRunning && (p.in.pending.Load() || p.sysq.len()+p.appq.len() > 0) {
				ready = append(ready, i)
			}
		}
		choices := len(ready) + len(d.live)
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
		if c < len(ready) {
			d.note(uint64(ready[c]))
			n.pes[ready[c]].step()
			continue
		}
		w := d.live[c-len(ready)]
		d.note(1<<32 | uint64(w.src)<<16 | uint64(w.dst)<<1 | uint64(b2i(w.sys)))
		q := d.wires[w]
		env := q[0]
		q[0] = Envelope{}
		if q = q[1:]; len(q) == 0 {
			delete(d.wires, w)
			d.live = slices.Delete(d.live, c-len(ready), c-len(ready)+1)
		} else {
			d.wires[w] = q
		}
		n.pes[w.dst].in.push(w.sys, []Envelope{env})
	}
	n.doneOnce.Do(func() { close(n.done) })
}

func (d *deterministic) note(v uint64) {
	d.trace = (d.trace ^ v) * 0x100000001b3
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Trace is a hash of every choice a deterministic run made: two runs with
// the same trace ran the same interleaving.
func (n *Node) Trace() uint64 {
	if n.det == nil {
		return 0
	}
	return n.det.trace
}

// step handles one message, as one turn of run's loop does.
func (p *PE) step() {
	if p.in.pending.Load() {
		p.grab()
	}
	q := &p.sysq
	if q.len() == 0 {
		q = &p.appq
	}
	if q.len() == 0 {
		return
	}
	p.cur = q.buf[q.head]
	q.buf[q.head] = Envelope{}
	q.head++
	p.dispatch(&p.cur)
	p.cur = Envelope{}
	p.Stats.Processed++
	if p.dead() {
		return // fail-stop: what it buffered is never sent
	}
	if p.in.pending.Load() {
		p.grab()
	}
	if p.sysq.len()+p.appq.len() == 0 && p.idle != nil {
		p.idle.Idle(p)
	}
	p.Flush()
}
