package pe

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// A chaos transport (Config.Chaos) stands in, within one process, for the
// wires between processes: it holds hand-overs back for random short
// times and so reorders them across channels, while every channel (one
// sender, one receiver) stays FIFO. A message A→C can then be overtaken by
// A→B→C, as between processes that batch independently: a program or a
// runtime path that counts on causal order across three PEs shows up in
// process, under -race. The seed chooses the delays; the goroutines'
// timing does the rest, so a run is not repeatable (a deterministic run
// is, see deterministic.go).
type chaos struct {
	n     *Node
	mu    sync.Mutex
	rng   *rand.Rand
	chans map[[2]int]*chaosChan
	gen   uint64 // bumped by a rollback: what was held before is dropped
}

type chaosChan struct {
	q       []heldBatch
	running bool // a goroutine is handing this channel's batches over
}

type heldBatch struct {
	sys  bool
	envs []Envelope
}

// maxChaosDelay bounds how long a batch is held back.
const maxChaosDelay = 300 * time.Microsecond

func newChaos(n *Node, seed uint64) *chaos {
	return &chaos{n: n, rng: rand.New(rand.NewPCG(seed, 0xc4a05)), chans: map[[2]int]*chaosChan{}}
}

// Deliver hands the batch over at once, or — half the time, and always
// while the channel holds earlier batches back — holds it back.
func (c *chaos) Deliver(src, dst int, sys bool, batch *[]Envelope) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.chans[[2]int{src, dst}]
	if ch == nil {
		ch = &chaosChan{}
		c.chans[[2]int{src, dst}] = ch
	}
	if len(ch.q) == 0 && !ch.running && c.rng.IntN(2) == 0 {
		c.n.pes[dst].in.handOver(sys, batch)
		return nil
	}
	ch.q = append(ch.q, heldBatch{sys, slices.Clone(*batch)})
	if !ch.running {
		ch.running = true
		go c.release(dst, ch, c.gen)
	}
	return nil
}

// release hands channel ch's held batches over, in order, each after a
// random delay, until none is left or a rollback dropped them.
func (c *chaos) release(dst int, ch *chaosChan, gen uint64) {
	for {
		c.mu.Lock()
		d := time.Duration(c.rng.Int64N(int64(maxChaosDelay)))
		c.mu.Unlock()
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-c.n.done:
			timer.Stop()
			return
		}
		c.mu.Lock()
		if c.gen != gen || len(ch.q) == 0 {
			ch.running = false
			c.mu.Unlock()
			return
		}
		b := ch.q[0]
		ch.q[0] = heldBatch{}
		ch.q = ch.q[1:]
		// under the lock: a rollback bumps gen under it, so nothing held
		// before one is handed over after it
		c.n.pes[dst].in.handOver(b.sys, &b.envs)
		if len(ch.q) == 0 {
			ch.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// drop forgets every held batch (a rollback).
func (c *chaos) drop() {
	c.mu.Lock()
	c.gen++
	for _, ch := range c.chans {
		clear(ch.q)
		ch.q, ch.running = ch.q[:0], false
	}
	c.mu.Unlock()
}
