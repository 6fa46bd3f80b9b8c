// Package ftlayer owns charmgo's fault tolerance: message-logging protocols
// written as deterministic state machines — events in (an application send,
// a network packet, an acknowledgement, a checkpoint, a failure notice, a
// restart), actions out (packets to send, messages to deliver to the
// application in order) — with no goroutines, clocks or I/O inside, so a
// simulator (ftlayer/fttest) can crash any PE at any message boundary and
// check the outcome deterministically.
//
// Protocols and the failures they survive:
//
//   - SCMEL (simple causal message logging, Algorithm 1 of the CAMEL paper,
//     papers/000): one failed PE at a time, the others keep running and
//     replay to it. A second failure before the first PE finished recovering
//     is detected and reported as unsupported (ErrConcurrentFailure), never
//     silently mishandled. The same PE (or another) may fail again once
//     recovery completed.
package ftlayer

import (
	"errors"
	"fmt"
)

// Det is a determinant: the reception of message (Sender, SSN) was the
// RSN-th reception on Recver.
type Det struct {
	Sender, Recver int32
	SSN, RSN       uint64
}

// Message is an application message as the protocol sees it: a header and
// an opaque payload it never looks into.
type Message struct {
	Sender, Recver int32
	SSN            uint64
	Inc            uint32 // the sender's incarnation
	Dets           []Det  // determinants piggybacked on it
	Payload        []byte
}

// PacketKind says what a packet between two PEs' protocols carries.
type PacketKind uint8

const (
	PktApp      PacketKind = iota + 1 // an application message
	PktAck                            // acknowledges piggybacked determinants
	PktRecovery                       // a survivor's determinants for a recovering PE
)

// Packet is one unit the network carries between PEs.
type Packet struct {
	Kind     PacketKind
	From, To int32
	Msg      *Message // PktApp
	Dets     []Det    // PktAck, PktRecovery
}

// ActionKind says what a protocol asks its host to do.
type ActionKind uint8

const (
	ActSend    ActionKind = iota + 1 // put Packet on the network
	ActDeliver                       // hand Msg to the application (in the order given)
)

// Action is one output of a protocol.
type Action struct {
	Kind   ActionKind
	Packet Packet
	Msg    *Message
}

// Stats is what every protocol reports.
type Stats struct {
	Logged, LoggedBytes uint64 // messages in the sender-based log (now)
	LoggedTotal         uint64 // messages ever logged
	DetsCreated         uint64
	DetsPiggybacked     uint64 // determinant copies carried on messages
	DetsAcked           uint64
	Replayed            uint64 // logged messages re-sent to a recovering PE
	Dropped             uint64 // old or duplicate messages suppressed
	Held                uint64 // messages held back to keep the recorded order
}

// ErrConcurrentFailure is reported when a PE fails while another is still
// recovering: simple causal logging keeps one copy of each determinant, so
// two simultaneous failures may lose the order of some receptions.
var ErrConcurrentFailure = errors.New("a second PE failed while one was still recovering: unsupported by this protocol")

// Protocol is one PE's message-logging state machine.
type Protocol interface {
	// Send logs and stamps an application message from this PE.
	Send(to int32, payload []byte) []Action
	// Receive handles a packet from the network.
	Receive(p *Packet) ([]Action, error)
	// Checkpoint: a coordinated checkpoint was committed; what it covers
	// need not be kept.
	Checkpoint()
	// PeerFailed: PE y failed and is restarting as incarnation inc.
	PeerFailed(y int32, inc uint32) ([]Action, error)
	// Recovered: PE y finished recovering (every PE learns it).
	Recovered(y int32)
	// Recovering reports whether this PE is replaying after a restart.
	Recovering() bool
	Stats() Stats
}

func (d Det) String() string {
	return fmt.Sprintf("<%d→%d ssn %d rsn %d>", d.Sender, d.Recver, d.SSN, d.RSN)
}
