package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Every TCP connection of the job (between processes' data planes, and
// from a process to charmrun's rendezvous) opens with a challenge in both
// directions: each side sends a fresh nonce and answers the other's with
// an HMAC under the job's secret, so each proves it holds the secret
// without sending it, and a recorded exchange cannot be replayed.
//
//	dialer → listener:  "CGH1", dialer id (4), dialer nonce (32)
//	listener → dialer:  listener nonce (32), HMAC("listener", both nonces, both ids)
//	dialer → listener:  HMAC("dialer", both nonces, both ids)
//	listener → dialer:  0 (welcome) or 1 (refused: a proven peer the
//	                    listener does not take, as a process of the job
//	                    that is connected already, or dials it itself)
//
// Ids are ranks (charmrun's rendezvous is CharmrunID).
const (
	handshakeMagic = "CGH1"
	nonceSize      = 32
	macSize        = 32
	// CharmrunID is the id charmrun's rendezvous proves itself with.
	CharmrunID = 0xFFFFFFFF
	// DefaultHandshakeTimeout bounds a handshake on every listener of a
	// job (data plane, control plane's TLS, charmrun's rendezvous): a
	// client that connects and does not prove the job's secret within it
	// is dropped.
	DefaultHandshakeTimeout = 10 * time.Second
	// MaxHandshakes is how many connections one listener lets try to
	// prove the secret at once; up to MaxHandshakeQueue more wait for
	// their turn (a job's processes all dial process 0 as they start),
	// each within the handshake timeout counted from its arrival, and one
	// more than both is closed as it comes, so a flood of strangers costs
	// a bounded number of goroutines and files.
	MaxHandshakes = 64
	// MaxHandshakeQueue: connections waiting to begin their handshake.
	MaxHandshakeQueue = 512
)

// gate admits at most a fixed number of connections into their handshake
// at once, and queues a bounded number more.
type gate struct {
	slots   chan struct{}
	pending *atomic.Int32 // in a handshake, or waiting for a slot
	limit   int32         // the most pending: slots and queue
}

func newGate(slots, queue int) gate {
	return gate{slots: make(chan struct{}, slots), pending: new(atomic.Int32), limit: int32(slots + queue)}
}

// reserve reports whether a connection may wait for its handshake (then
// it must call enter, and leave if enter admits it, or cancel if not).
// It never blocks: a listener's accept loop calls it before it starts the
// connection's goroutine.
func (g gate) reserve() bool {
	if g.pending.Add(1) > g.limit {
		g.pending.Add(-1)
		return false
	}
	return true
}

// enter waits, until deadline, for a connection that reserved its place
// to begin its handshake, and reports whether it may (then it must
// leave); if not, its place is given up.
func (g gate) enter(deadline time.Time) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-t.C:
		g.pending.Add(-1)
		return false
	}
}

// leave ends an admitted connection's handshake.
func (g gate) leave() {
	<-g.slots
	g.pending.Add(-1)
}

// dataID is the id a process dials the data plane with: its rank in the
// low 16 bits, its incarnation above (so that a process that has not yet
// heard its peer was replaced can tell the replacement's connection from
// the lost process's: processLost). Ranks stay below 2^16 (MaxPEs), and
// incarnations below 2^15, so a data id is never CharmrunID.
func dataID(rank, inc int) uint32 { return uint32(rank)&0xFFFF | uint32(inc&0x7FFF)<<16 }

// splitDataID gives the rank and incarnation a data id names.
func splitDataID(id uint32) (rank, inc int) { return int(id & 0xFFFF), int(id>>16) & 0x7FFF }

func ids(a, b uint32) []byte {
	var x [8]byte
	binary.BigEndian.PutUint32(x[:], a)
	binary.BigEndian.PutUint32(x[4:], b)
	return x[:]
}

// dialHandshake proves the dialing side (id me) to a listener that must
// be id want.
func dialHandshake(c net.Conn, s Secret, me, want uint32) error {
	c.SetDeadline(time.Now().Add(DefaultHandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	var hello [4 + 4 + nonceSize]byte
	copy(hello[:], handshakeMagic)
	binary.BigEndian.PutUint32(hello[4:], me)
	nd := hello[8:]
	if _, err := rand.Read(nd); err != nil {
		return err
	}
	if _, err := c.Write(hello[:]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	var reply [nonceSize + macSize]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return fmt.Errorf("handshake: no answer from %s: %w (not a charmgo process of this job?)", c.RemoteAddr(), err)
	}
	nl := reply[:nonceSize]
	if !hmac.Equal(reply[nonceSize:], s.mac([]byte("listener"), nd, nl, ids(want, me))) {
		return strangerError{addr: c.RemoteAddr().String()}
	}
	if _, err := c.Write(s.mac([]byte("dialer"), nd, nl, ids(me, want))); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	var welcome [1]byte
	if _, err := io.ReadFull(c, welcome[:]); err != nil {
		return fmt.Errorf("handshake: no welcome from %s: %w", c.RemoteAddr(), err)
	}
	if welcome[0] != 0 {
		return errRefused
	}
	return nil
}

// errRefused: a listener that proved the job's secret did not take the
// connection (connected already, or it dials this process itself).
var errRefused = errors.New("handshake: the peer did not take the connection (connected already, or it dials this process)")

// strangerError: a listener answered and could not prove the job's
// secret. Dialing it again cannot help.
type strangerError struct{ addr string }

func (e strangerError) Error() string {
	return fmt.Sprintf("handshake: %s could not prove the job's secret (another job's process, or not charmgo)", e.addr)
}

// acceptHandshake proves the listening side (id me) and checks the
// dialer's proof, within timeout; then accept says whether the dialer's id
// is one the listener expects. It returns the dialer's id.
func acceptHandshake(c net.Conn, s Secret, me uint32, timeout time.Duration, accept func(id uint32) error) (uint32, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	var hello [4 + 4 + nonceSize]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return 0, fmt.Errorf("handshake: %w", err)
	}
	if string(hello[:4]) != handshakeMagic {
		return 0, fmt.Errorf("handshake: bytes 0-3: %q is not a charmgo greeting", hello[:4])
	}
	id := binary.BigEndian.Uint32(hello[4:])
	nd := hello[8:]
	var reply [nonceSize + macSize]byte
	nl := reply[:nonceSize]
	if _, err := rand.Read(nl); err != nil {
		return id, err
	}
	copy(reply[nonceSize:], s.mac([]byte("listener"), nd, nl, ids(me, id)))
	if _, err := c.Write(reply[:]); err != nil {
		return id, fmt.Errorf("handshake: %w", err)
	}
	var proof [macSize]byte
	if _, err := io.ReadFull(c, proof[:]); err != nil {
		return id, fmt.Errorf("handshake: no proof of the job's secret came: %w", err)
	}
	if !hmac.Equal(proof[:], s.mac([]byte("dialer"), nd, nl, ids(id, me))) {
		return id, fmt.Errorf("handshake: the peer claiming id %d could not prove the job's secret", id)
	}
	// Only a proven peer learns whether its id was welcome.
	if err := accept(id); err != nil {
		c.Write([]byte{1})
		return id, fmt.Errorf("handshake: %w", err)
	}
	if _, err := c.Write([]byte{0}); err != nil {
		return id, fmt.Errorf("handshake: %w", err)
	}
	return id, nil
}
