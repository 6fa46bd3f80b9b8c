package cluster

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/charmgo/charmgo/pe"
)

// writeThrough is the largest batch a PE writes to an idle connection
// itself: a reply or two, where the writer's wake-up would be most of the
// latency. Larger batches (a busy PE's) go to the writer, which sends
// while the PE goes on.
const writeThrough = 4

// maxQueued bounds the bytes waiting for one peer: a PE handing over more
// waits until the writer has sent what is queued (back-pressure), so a
// slow peer never makes memory grow without bound.
const maxQueued = 8 << 20

// link is the data plane to one peer process: one TCP connection, written
// by one writer goroutine and read by one reader goroutine. PEs append
// their batches to the frame being gathered; the writer sends it whole and
// gathers the next meanwhile, so the busier the PEs, the larger the frames.
type link struct {
	peer int
	inc  int // the peer's incarnation when the link was made
	conn net.Conn
	gen  *atomic.Uint64 // the job's rollback generation

	mu      sync.Mutex
	ready   sync.Cond // the writer waits for entries
	room    sync.Cond // senders wait for the queue to drain
	frame   []byte    // being gathered: a header, then count entries
	count   int
	spare   []byte
	closing bool
	writing bool // a frame is being written (by the writer or a PE), or the link waits for its connection
	// running: the writer and reader were started (once: Job.runLink)
	running atomic.Bool
	// pending: the connection is being made (a link opened on first use:
	// newPendingLink); what is sent meanwhile waits in the frame
	pending bool
	fail    func(error) // the connection failed: the peer is lost
	err     error       // set once writing failed: every later send fails with it

	// scratch holds each local PE's encoding, done outside the lock (each
	// PE touches only its own slot).
	scratch [][]byte
	first   int

	// down: the peer is gone (or this link was replaced): what is sent
	// to it is dropped.
	down atomic.Bool
	// During a recovery step the reader holds what arrives (held, in
	// order) instead of handing it to PEs that are being replaced.
	hmu     sync.Mutex
	holding bool
	held    []heldFrame
}

// heldFrame is a decoded frame the reader holds.
type heldFrame struct {
	gen     uint64
	entries []entry
}

type entry struct {
	dst int
	env pe.Envelope
}

func newLink(peer int, conn net.Conn, gen *atomic.Uint64, first, local int) *link {
	l := &link{peer: peer, conn: conn, gen: gen, first: first, scratch: make([][]byte, local)}
	l.ready.L, l.room.L = &l.mu, &l.mu
	l.frame = pe.AppendFrameHeader(nil)
	return l
}

// newPendingLink is a link to peer whose connection is yet to come
// (connect): what is sent to it is gathered meanwhile, and goes once it
// is up.
func newPendingLink(peer int, gen *atomic.Uint64, first, local int) *link {
	l := newLink(peer, nil, gen, first, local)
	l.pending, l.writing = true, true
	return l
}

// connect gives a pending link its connection; it reports whether it
// took it (not once connected, or ending).
func (l *link) connect(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.pending || l.closing {
		return false
	}
	l.conn, l.pending, l.writing = c, false, false
	if l.count > 0 {
		l.ready.Signal() // what was gathered meanwhile is the writer's
	}
	return true
}

// isPending reports whether the link still waits for its connection.
func (l *link) isPending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// deliver queues batch (sent by local PE src) for PE dst of the peer.
func (l *link) deliver(src, dst int, batch []pe.Envelope) error {
	if l.down.Load() {
		return nil
	}
	buf := l.scratch[src-l.first][:0]
	var err error
	for i := range batch {
		if buf, err = pe.AppendFrameEntry(buf, dst, &batch[i]); err != nil {
			return err
		}
	}
	l.scratch[src-l.first] = buf
	return l.enqueue(buf, len(batch), true, true)
}

// enqueue queues n encoded entries (buf) for the peer; with room, once
// what is queued fits under maxQueued; with through, written by the
// caller itself when nothing is queued (never from a connection's
// reader: two readers writing to each other's full connections would
// wait for each other).
func (l *link) enqueue(buf []byte, n int, room, through bool) error {
	l.mu.Lock()
	for room && len(l.frame) > maxQueued && l.err == nil && !l.closing {
		l.room.Wait()
	}
	if l.down.Load() {
		l.mu.Unlock()
		return nil
	}
	if l.err != nil || l.closing {
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = errors.New("the job is ending")
		}
		return fmt.Errorf("to process %d: %w", l.peer, err)
	}
	if through && l.count == 0 && !l.writing && n <= writeThrough {
		// Nothing queued and nobody writing: this PE writes the frame
		// itself, saving the writer's wake-up on the way (what a round
		// trip pays twice). When frames queue up, the writer sends them.
		l.frame = append(l.frame, buf...)
		l.count += n
		frame, count := l.take()
		l.mu.Unlock()
		l.send(frame, count)
		return nil
	}
	if l.count == 0 && !l.writing {
		l.ready.Signal()
	}
	l.frame = append(l.frame, buf...)
	l.count += n
	l.mu.Unlock()
	return nil
}

// take takes the frame gathered so far, for sending; l.mu is held.
func (l *link) take() ([]byte, int) {
	frame, count := l.frame, l.count
	l.frame, l.count = pe.AppendFrameHeader(l.spare[:0]), 0
	l.spare = nil
	l.writing = true
	l.room.Broadcast()
	return frame, count
}

// send writes a frame take took; a failure of the connection is the
// peer's loss (fail). It reports whether the frame went.
func (l *link) send(frame []byte, count int) bool {
	err := pe.FinishFrame(frame, l.gen.Load(), count)
	if err == nil {
		_, err = l.conn.Write(frame)
	}
	l.mu.Lock()
	l.writing = false
	if err != nil {
		l.err = err
		l.room.Broadcast()
	} else if cap(frame) <= 2*maxQueued {
		l.spare = frame[:0]
	}
	if l.count > 0 || err != nil {
		l.ready.Signal() // what queued meanwhile is the writer's
	}
	fail := l.fail
	l.mu.Unlock()
	if err != nil && fail != nil {
		fail(fmt.Errorf("sending to process %d: %w", l.peer, err))
	}
	return err == nil
}

// write sends frames until close is called and everything queued is sent,
// or until writing fails (then fail is told once).
func (l *link) write(fail func(error)) {
	l.mu.Lock()
	l.fail = fail
	l.mu.Unlock()
	for {
		l.mu.Lock()
		for (l.count == 0 || l.writing) && !l.closing && l.err == nil {
			l.ready.Wait()
		}
		if l.count == 0 || l.err != nil || l.writing {
			l.mu.Unlock()
			return
		}
		frame, count := l.take()
		l.mu.Unlock()
		if !l.send(frame, count) {
			return
		}
	}
}

// close stops the writer once what is queued is sent.
func (l *link) close() {
	l.mu.Lock()
	l.closing = true
	l.ready.Broadcast()
	l.room.Broadcast()
	l.mu.Unlock()
}

// shut ends the link: its writer stops, its connection closes.
func (l *link) shut() {
	l.close()
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// dropQueued discards what is gathered and not sent yet (every PE of the
// process stopped for a rollback: none of it may arrive after).
func (l *link) dropQueued() {
	l.mu.Lock()
	l.frame, l.count = pe.AppendFrameHeader(l.frame[:0]), 0
	l.room.Broadcast()
	l.mu.Unlock()
}

// hold makes the reader keep what arrives until release.
func (l *link) hold() {
	l.hmu.Lock()
	l.holding = true
	l.hmu.Unlock()
}

// release hands what the reader held to the PEs, in order: frames of the
// job's generation now; older ones are dropped, newer ones stay held.
func (l *link) release(node *pe.Node) {
	l.hmu.Lock()
	defer l.hmu.Unlock()
	cur := l.gen.Load()
	keep := l.held[:0]
	for _, f := range l.held {
		switch {
		case f.gen > cur:
			keep = append(keep, f)
		case f.gen == cur:
			handIn(node, f.entries)
		}
	}
	clear(l.held[len(keep):])
	l.held = keep
	l.holding = false
}

// handIn gives entries to their PEs, a batch per PE and lane, keeping
// their order.
func handIn(node *pe.Node, entries []entry) {
	for i := 0; i < len(entries); {
		dst, sys := entries[i].dst, entries[i].env.SystemLane()
		var batch []pe.Envelope
		for ; i < len(entries) && entries[i].dst == dst && entries[i].env.SystemLane() == sys; i++ {
			batch = append(batch, entries[i].env)
		}
		node.HandIn(dst, sys, &batch)
	}
}

// read hands every frame from the peer to the local PEs (first ..
// first+count-1), and its entries for the process itself to serve, until
// the connection ends; it returns the error that
// ended it (io.EOF for a clean end). Frames of an older rollback
// generation than the job's are dropped.
func (l *link) read(node *pe.Node, first, count int, serve func(from int, env *pe.Envelope) error) error {
	r := pe.NewFrameReader(l.conn)
	var dec pe.FrameDecoder
	sys := make([][]pe.Envelope, count)
	app := make([][]pe.Envelope, count)
	var served error
	deliver := func(dst int, env *pe.Envelope) {
		if dst == pe.ServiceDst {
			// the process's own: at once, held or not
			if err := serve(l.peer, env); err != nil && served == nil {
				served = err
			}
			return
		}
		i := dst - first
		if env.SystemLane() {
			sys[i] = append(sys[i], *env)
		} else {
			app[i] = append(app[i], *env)
		}
	}
	for {
		gen, n, body, off, err := r.Next()
		if err != nil {
			return err
		}
		if err := dec.Decode(body, n, first, first+count, off, deliver); err != nil {
			return err
		}
		if served != nil {
			return fmt.Errorf("byte %d: %w", off, served)
		}
		l.hmu.Lock()
		cur := l.gen.Load()
		if gen != cur || l.holding {
			if gen >= cur {
				// Held in the order it came, until the recovery step
				// that makes gen the job's generation is done.
				f := heldFrame{gen: gen}
				for i := range sys {
					for _, e := range sys[i] {
						f.entries = append(f.entries, entry{first + i, e})
					}
					for _, e := range app[i] {
						f.entries = append(f.entries, entry{first + i, e})
					}
				}
				l.held = append(l.held, f)
			}
			l.hmu.Unlock()
			for i := range sys {
				clear(sys[i])
				clear(app[i])
				sys[i], app[i] = sys[i][:0], app[i][:0]
			}
			continue
		}
		// Handed in under the lock: a rollback that stops and clears the
		// PEs waits for it, so nothing of before reaches them after.
		for i := range sys {
			if len(sys[i]) > 0 {
				node.HandIn(first+i, true, &sys[i])
			}
			if len(app[i]) > 0 {
				node.HandIn(first+i, false, &app[i])
			}
		}
		l.hmu.Unlock()
	}
}
