// Package ftlayer owns charmgo's fault tolerance: message-logging protocols
// written as deterministic state machines — events in (an application send,
// a network packet, an acknowledgement, a checkpoint, a failure notice, a
// restart), actions out (packets to send, messages to deliver to the
// application in order) — with no goroutines, clocks or I/O inside, so a
// simulator (ftlayer/fttest) can crash any PE at any message boundary and
// check the outcome deterministically.
//
// Checkpoints (Checkpointer) are coordinated, two-phase (collect, then
// commit) and double in memory: each PE's snapshot is held by itself and
// by its buddy (the next PE). A failure before the coordinator decided to
// commit aborts the epoch: recovery uses the last committed checkpoint and
// no log is dropped early. A failure after the decision keeps the epoch.
// A PE and its buddy failing at once lose a checkpoint: that is reported,
// not survived.
//
// Protocols and the failures they survive:
//
//   - none (checkpoint/restart): any single failure, and further ones after
//     each restart; every PE rolls back to the last committed checkpoint.
//   - SCMEL (simple causal message logging, Algorithm 1 of the CAMEL paper,
//     papers/000): one failed PE at a time; only it rolls back, the others
//     keep running and replay to it. A second failure while a PE is still
//     recovering is reported as unsupported (ErrConcurrentFailure), never
//     silently mishandled. The same PE (or another) may fail again once
//     recovery completed, or while it is recovering (the same PE again).
//
// Still to come (issue "fault-tolerance core"): CAMEL's collective-aware
// logging, message kinds and their statistics, the simulated LeanMD-like
// pattern with multicasts and reductions, and the SCMEL-vs-CAMEL figures.
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
	CSN            uint64 // sequence number on the (Sender, Recver) channel
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
	Ckpt     *CkptMsg // the checkpoint protocol's packets
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
	// Prepare is called when this PE's checkpoint snapshot is taken: it
	// returns the counters to save and marks what the snapshot covers.
	Prepare() Counters
	// Checkpoint: the checkpoint Prepare marked was committed; what it
	// covers need not be kept (what came after it must be).
	Checkpoint()
	// PeerFailed: PE y failed and is restarting as incarnation inc.
	PeerFailed(y int32, inc uint32) ([]Action, error)
	// Recovered: PE y finished recovering (every PE learns it).
	Recovered(y int32)
	// Recovering reports whether this PE is replaying after a restart.
	Recovering() bool
	// Snapshot is the protocol state a coordinated checkpoint saves.
	Snapshot() Counters
	Stats() Stats
}

// Factory makes a protocol's per-PE state machines.
type Factory interface {
	Name() string
	New(me int32, n int) Protocol
	// Restart makes the new incarnation inc of a failed PE from its
	// checkpoint.
	Restart(me int32, n int, ck Counters, inc uint32) Protocol
	// RollsBackAll reports whether a failure rolls every PE back to the
	// checkpoint (checkpoint/restart) instead of the failed one alone.
	RollsBackAll() bool
}

// SCMELFactory makes SCMEL protocols.
type SCMELFactory struct{}

func (SCMELFactory) Name() string                 { return "scmel" }
func (SCMELFactory) New(me int32, n int) Protocol { return NewSCMEL(me, n) }
func (SCMELFactory) RollsBackAll() bool           { return false }
func (SCMELFactory) Restart(me int32, n int, ck Counters, inc uint32) Protocol {
	return RestartSCMEL(me, n, ck, inc)
}

// NoneFactory makes the checkpoint/restart baseline: nothing is logged and
// a failure rolls every PE back to the last committed checkpoint.
type NoneFactory struct{}

func (NoneFactory) Name() string                 { return "none" }
func (NoneFactory) New(me int32, n int) Protocol { return &None{me: me, incMap: make([]uint32, n)} }
func (NoneFactory) RollsBackAll() bool           { return true }
func (NoneFactory) Restart(me int32, n int, ck Counters, inc uint32) Protocol {
	p := &None{me: me, ssn: ck.SSN, incMap: make([]uint32, n)}
	copy(p.incMap, ck.IncMap)
	p.inc = inc
	p.incMap[me] = inc
	return p
}

// None is the checkpoint/restart baseline's per-PE protocol: messages are
// stamped (sequence and incarnation, so a rolled-back run's stale messages
// are dropped) and delivered as they come; nothing is logged.
type None struct {
	me     int32
	ssn    uint64
	inc    uint32
	incMap []uint32
	stats  Stats
}

func (p *None) Send(to int32, payload []byte) []Action {
	p.ssn++
	m := &Message{Sender: p.me, Recver: to, SSN: p.ssn, Inc: p.inc, Payload: payload}
	return []Action{{Kind: ActSend, Packet: Packet{Kind: PktApp, From: p.me, To: to, Msg: m}}}
}

func (p *None) Receive(pk *Packet) ([]Action, error) {
	if pk.Kind != PktApp {
		return nil, nil
	}
	if pk.Msg.Inc < p.incMap[pk.Msg.Sender] {
		p.stats.Dropped++
		return nil, nil
	}
	return []Action{{Kind: ActDeliver, Msg: pk.Msg}}, nil
}

func (p *None) Checkpoint()       {}
func (p *None) Prepare() Counters { return p.Snapshot() }

// PeerFailed: under global rollback every PE restarts; a survivor only
// learns the new incarnation numbers (the host restarts it too).
func (p *None) PeerFailed(y int32, inc uint32) ([]Action, error) {
	p.incMap[y] = inc
	return nil, nil
}

func (p *None) Recovered(int32)  {}
func (p *None) Recovering() bool { return false }
func (p *None) Snapshot() Counters {
	return Counters{SSN: p.ssn, Inc: p.inc, IncMap: append([]uint32(nil), p.incMap...)}
}
func (p *None) Stats() Stats { return p.stats }

func (d Det) String() string {
	return fmt.Sprintf("<%d→%d ssn %d rsn %d>", d.Sender, d.Recver, d.SSN, d.RSN)
}
