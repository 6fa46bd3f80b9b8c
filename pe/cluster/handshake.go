package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
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
	// prove the secret at once; one more is closed as it comes, so a
	// flood of strangers costs a bounded number of goroutines and files.
	MaxHandshakes = 64
)

// gate admits at most a fixed number of connections into their handshake
// at once.
type gate chan struct{}

func newGate(n int) gate { return make(gate, n) }

// enter reports whether a connection may begin its handshake (then it
// must leave).
func (g gate) enter() bool {
	select {
	case g <- struct{}{}:
		return true
	default:
		return false
	}
}

func (g gate) leave() { <-g }

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
		return fmt.Errorf("handshake: %s could not prove the job's secret (another job's process, or not charmgo)", c.RemoteAddr())
	}
	if _, err := c.Write(s.mac([]byte("dialer"), nd, nl, ids(me, want))); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	return nil
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
		return id, fmt.Errorf("handshake: %w", err)
	}
	return id, nil
}
