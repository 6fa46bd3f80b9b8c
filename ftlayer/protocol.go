// Package ftlayer owns charmgo's fault tolerance: message-logging protocols
// written as deterministic state machines — events in (an application send,
// a multicast, a reduction contribution, a network packet, an
// acknowledgement, a checkpoint, a failure notice, a restart), actions out
// (packets to send, messages to deliver to the application in order) — with
// no goroutines, clocks or I/O inside, so a simulator (ftlayer/fttest) can
// crash any PE at any message boundary and check the outcome
// deterministically.
//
// Collectives run over PE groups (Groups), each with a k-ary spanning tree
// rooted at its first member: a multicast goes from the root down the tree
// and every other member delivers it; a reduction folds one contribution
// per member up the tree and the root delivers the result.
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
//   - none (checkpoint/restart): any failure, and any number of them, one
//     after another or at once (as long as a PE and its buddy do not fail
//     together); every PE rolls back to the last committed checkpoint.
//     Collectives travel hop by hop along the trees.
//   - scmel (simple causal message logging, Algorithm 1 of the CAMEL paper,
//     papers/000): one failed PE at a time; only it rolls back, the others
//     keep running and replay to it. Collectives travel hop by hop as
//     ordinary logged messages (every hop logged, every reception
//     determined), the baseline CAMEL is measured against.
//   - camel (collective-aware message logging, Algorithms 2–3): the same
//     failures as scmel, with a multicast logged once at its root,
//     reduction contributions logged until the root's acknowledgement
//     (those reaching the root until the next checkpoint) and determinants
//     for reductions only at the root. In hop mode a completed reduction
//     keeps its result instead of the contributions that reached the
//     root: once, at the root's first child (the keeper), and a copy at
//     the root (see Causal.Reduced).
//
// Under scmel and camel a second PE failing while one is still recovering
// (collecting determinants or replaying) is reported as unsupported
// (ErrConcurrentFailure), never silently mishandled. The same PE may fail
// again while it recovers, and any PE may fail once a recovery completed
// (which is when every survivor's replay has arrived).
//
// The host's side of the contract: it runs one delivery at a time —
// after the actions of Receive (or Next) it runs the application's
// handler, then calls Next until it returns nothing; it calls Prepare when
// a PE's snapshot is taken and Checkpoint or Abort when its epoch commits
// or is abandoned (messages are held in between), then drains Next again;
// on a failure it calls PeerFailed on every survivor and restarts the
// failed PE with Factory.Restart from its checkpoint.
//
// The running system uses the same state machines in hop mode (hops.go,
// hook.go): the runtime's manager runs the spanning trees itself and calls
// a Hook on every hop it sends, naming the hop's role (point to point, a
// multicast leaving its root or forwarded by an inner node, a partial
// result going up), and on every envelope that arrives. The header travels
// on the envelope (pe.FTHeader); logged messages keep the envelope itself,
// payload by reference; under camel, a partial dropped because its
// reduction is kept (ActRelease) goes back to the runtime, which reuses
// the values its PE contributed (Hook.OnRelease), and a partial sent
// again to a failed PE is a deep copy. NopHook is checkpoint/restart
// alone. A failed PE
// recovers alone: the runtime restores its snapshot, calls Hook.Restart on
// its new incarnation and Hook.PeerFailed on every survivor, whose logged
// messages go to it again through the hook's net; while it recovers, the
// reductions its roots report complete are passed over (Restart's
// complete), as its children dropped what they sent for them.
package ftlayer

import (
	"errors"

	"github.com/charmgo/charmgo/pe"
)

// MsgKind says how a message travels: point to point, down a group's
// multicast tree, or up its reduction tree. It is the envelope's kind, so
// the runtime hands it over as is.
type MsgKind = pe.Kind

const (
	KindP2P       = pe.KindP2P
	KindMulticast = pe.KindMulticast
	KindReduction = pe.KindReduction
	KindSystem    = pe.KindSystem // runtime bookkeeping, logged point to point
	numKinds      = KindSystem + 1
)

// Det is a determinant (see pe.Det: the runtime carries them on envelopes).
type Det = pe.Det

// Message is an application message as the protocol sees it: a header (the
// one the runtime carries on its envelopes) and a payload it never looks
// into.
type Message struct {
	pe.FTHeader
	Kind    MsgKind
	Payload []byte // the simulator's payload
	// Env is the runtime's envelope, payload included (nil in the
	// simulator): what a replay re-sends. Size is its payload's bytes for
	// the statistics.
	Env  *pe.Envelope
	Size int
	// released: dropped from its sender's log by a release (the entry
	// may linger there until the log is compacted)
	released bool
}

// bytes is the payload size the statistics count.
func (m *Message) bytes() uint64 {
	if m.Env != nil {
		return uint64(m.Size)
	}
	return uint64(len(m.Payload))
}

// PacketKind says what a packet between two PEs' protocols carries.
type PacketKind uint8

const (
	PktApp      PacketKind = iota + 1 // an application message
	PktAck                            // acknowledges piggybacked determinants
	PktRecovery                       // a survivor's determinants (and reductions done) for a recovering PE
	PktRedAck                         // CAMEL: reduction Num of Group is complete (travels down the tree)
	PktReplayed                       // a survivor re-sent all it logged for a recovering PE (after them on the channel)
	// PktRedResult (CAMEL, hop mode): a root hands its first child
	// (the keeper) the result of a reduction to keep until the next
	// checkpoint, in Relog; the keeper acknowledges the reduction to the
	// root's other children, which may then drop what they sent for it.
	PktRedResult
)

// Packet is one unit the network carries between PEs.
type Packet struct {
	Kind     PacketKind
	From, To int32
	Msg      *Message  // PktApp
	Dets     []Det     // PktAck, PktRecovery
	Done     []Reduced // PktRecovery, PktRedAck
	// Relog: PktRecovery (CAMEL), what a recovering PE logged that its
	// root holds a copy of — its contributions to complete reductions (the
	// simulated protocol) or the results it keeps (hop mode);
	// PktRedResult, the result to keep.
	Relog []*Message
	Ckpt  *CkptMsg // the checkpoint protocol's packets
}

// Reduced says that a group's reductions up to Num are complete at its root.
type Reduced struct {
	Group uint64
	Num   uint64
}

// ActionKind says what a protocol asks its host to do.
type ActionKind uint8

const (
	ActSend    ActionKind = iota + 1 // put Packet on the network
	ActDeliver                       // hand Msg to the application (in the order given)
	// ActRelease: Msg, which this PE sent and logged, left its log for
	// good, and no PE will read its payload again (see Hook.OnRelease).
	ActRelease
)

// Action is one output of a protocol. A delivered Msg of KindReduction is
// a reduction's result, at the group's root.
type Action struct {
	Kind   ActionKind
	Packet Packet
	Msg    *Message
}

// LogStats counts a sender-based log's messages of one kind.
type LogStats struct {
	Msgs, Bytes           uint64 // in the log now
	TotalMsgs, TotalBytes uint64 // ever logged
	PeakBytes             uint64 // the most this kind ever held at once
	// AtCheckpointBytes: the most this kind held when a checkpoint's
	// snapshot was taken (what a commit drops; the run is quiet then, so
	// nothing in flight is counted)
	AtCheckpointBytes uint64
}

// Stats is what every protocol reports. Log is indexed by MsgKind.
type Stats struct {
	Log [numKinds]LogStats
	// RootCopies: what CAMEL roots keep of their reductions (counted in
	// Log[KindReduction] too): copies of their children's contributions,
	// or in hop mode of the results their keepers hold.
	RootCopies      LogStats
	DetsCreated     uint64
	DetsPiggybacked uint64 // determinant copies carried on messages
	DetsAcked       uint64
	Replayed        uint64 // logged messages re-sent to a recovering PE
	Dropped         uint64 // old or duplicate messages suppressed
	Held            uint64 // messages held back to keep the recorded order
	// RolledBack is 1 for an incarnation restarted from a checkpoint
	// (summed over a PE's incarnations by the host).
	RolledBack uint64
	// CheckpointBytes is filled in by the host from its Checkpointer.
	CheckpointBytes uint64
}

// Total sums one field of the per-kind log statistics over every kind.
func (s Stats) Total(field func(LogStats) uint64) (n uint64) {
	for _, l := range s.Log {
		n += field(l)
	}
	return n
}

// Logged is the number of messages in the log now, all kinds.
func (s Stats) Logged() uint64 { return s.Total(func(l LogStats) uint64 { return l.Msgs }) }

// LoggedBytes is the payload bytes in the log now, all kinds.
func (s Stats) LoggedBytes() uint64 { return s.Total(func(l LogStats) uint64 { return l.Bytes }) }

// LoggedTotal is the number of messages ever logged, all kinds.
func (s Stats) LoggedTotal() uint64 { return s.Total(func(l LogStats) uint64 { return l.TotalMsgs }) }

// LoggedTotalBytes is the payload bytes ever logged, all kinds.
func (s Stats) LoggedTotalBytes() uint64 {
	return s.Total(func(l LogStats) uint64 { return l.TotalBytes })
}

// Peak is the sum of the kinds' peaks: at least the most the log held at
// once.
func (s Stats) Peak() uint64 { return s.Total(func(l LogStats) uint64 { return l.PeakBytes }) }

// AtCheckpoint is the sum of the kinds' logs at a checkpoint (see
// LogStats.AtCheckpointBytes).
func (s Stats) AtCheckpoint() uint64 {
	return s.Total(func(l LogStats) uint64 { return l.AtCheckpointBytes })
}

// Add sums two PEs' (or incarnations') statistics; peaks add too, which
// bounds the job's peak from above.
func (s *Stats) Add(o Stats) {
	for k := range s.Log {
		a, b := &s.Log[k], o.Log[k]
		a.Msgs += b.Msgs
		a.Bytes += b.Bytes
		a.TotalMsgs += b.TotalMsgs
		a.TotalBytes += b.TotalBytes
		a.PeakBytes += b.PeakBytes
		a.AtCheckpointBytes += b.AtCheckpointBytes
	}
	s.RootCopies.Msgs += o.RootCopies.Msgs
	s.RootCopies.Bytes += o.RootCopies.Bytes
	s.RootCopies.TotalMsgs += o.RootCopies.TotalMsgs
	s.RootCopies.TotalBytes += o.RootCopies.TotalBytes
	s.RootCopies.PeakBytes += o.RootCopies.PeakBytes
	s.DetsCreated += o.DetsCreated
	s.DetsPiggybacked += o.DetsPiggybacked
	s.DetsAcked += o.DetsAcked
	s.Replayed += o.Replayed
	s.Dropped += o.Dropped
	s.Held += o.Held
	s.RolledBack += o.RolledBack
	s.CheckpointBytes += o.CheckpointBytes
}

// ErrConcurrentFailure is reported when a PE fails while another is still
// recovering: causal logging keeps one copy of each determinant, so two
// simultaneous failures may lose the order of some receptions.
var ErrConcurrentFailure = errors.New("a second PE failed while one was still recovering: unsupported by this protocol")

// Protocol is one PE's message-logging state machine.
type Protocol interface {
	// Send logs and stamps an application message from this PE; the
	// packet is what to put on the network.
	Send(to int32, payload []byte) Packet
	// Multicast sends payload to every other member of group g, whose
	// root this PE must be.
	Multicast(g uint64, payload []byte) ([]Action, error)
	// Contribute is this PE's part of group g's next reduction; the root
	// delivers the folded result once every member contributed.
	Contribute(g uint64, payload []byte) ([]Action, error)
	// Receive handles a packet from the network. It delivers at most one
	// message: after executing its actions (running the application's
	// handler, whose sends must come before anything the next delivery
	// causes), the host calls Next until it returns nothing. The actions
	// of Receive and Next are valid until the next call of either (the
	// buffer is reused).
	Receive(p *Packet) ([]Action, error)
	// Next delivers the next held message whose turn has come, if any.
	Next() []Action
	// Prepare is called when this PE's checkpoint snapshot is taken: it
	// returns the counters to save and marks what the snapshot covers.
	Prepare() Counters
	// Checkpoint: the checkpoint Prepare marked was committed; what it
	// covers need not be kept (what came after it must be). Messages that
	// arrived since Prepare were held: the host resumes the application,
	// then calls Next until it returns nothing.
	Checkpoint()
	// Abort: the checkpoint Prepare marked was abandoned (a PE failed
	// before it was decided); held messages are released through Next.
	Abort()
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

// Collectives is what protocols need to run multicasts and reductions:
// the groups' trees and the reduction's combine function.
type Collectives struct {
	Groups *Groups
	// Combine folds two contributions to group g's reduction. It must be
	// commutative and associative: intermediate tree nodes fold in
	// arrival order, which CAMEL does not record (paper §3.4).
	Combine func(g uint64, a, b []byte) []byte
}

// SCMELFactory makes SCMEL protocols.
type SCMELFactory struct{ Coll Collectives }

func (SCMELFactory) Name() string                   { return "scmel" }
func (f SCMELFactory) New(me int32, n int) Protocol { return NewSCMEL(me, n, f.Coll) }
func (SCMELFactory) RollsBackAll() bool             { return false }
func (f SCMELFactory) Restart(me int32, n int, ck Counters, inc uint32) Protocol {
	return RestartSCMEL(me, n, f.Coll, ck, inc)
}

// CAMELFactory makes CAMEL protocols.
type CAMELFactory struct {
	Coll Collectives
	// Verbatim runs Algorithms 2–3 exactly as published, without the two
	// fixes described on Causal. It is wrong under some failure
	// sequences and exists only for the tests that show it.
	Verbatim bool
}

func (f CAMELFactory) Name() string {
	if f.Verbatim {
		return "camel-verbatim"
	}
	return "camel"
}
func (f CAMELFactory) New(me int32, n int) Protocol {
	s := NewCAMEL(me, n, f.Coll)
	s.verbat = f.Verbatim
	return s
}
func (CAMELFactory) RollsBackAll() bool { return false }
func (f CAMELFactory) Restart(me int32, n int, ck Counters, inc uint32) Protocol {
	s := RestartCAMEL(me, n, f.Coll, ck, inc)
	s.verbat = f.Verbatim
	return s
}
