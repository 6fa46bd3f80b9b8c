// Package ftlayer owns charmgo's message logging: the protocols as
// deterministic state machines — an envelope sent or arriving, a packet
// from a peer, a checkpoint, a failure notice in; envelopes to handle in
// order and packets to send out — with no goroutines, clocks or I/O, and
// the coordinated checkpoint's two phases (Checkpointer). The runtime
// calls them through a Hook on every hop it sends and every envelope that
// arrives (hook.go, hops.go); nothing in the runtime names a protocol:
// it looks one up by name (ProtocolSpec) and asks whether a failed PE
// recovers alone.
//
// Protocols and the failures they survive:
//
//   - none (checkpoint/restart; NopHook): any failures, one after another
//     or at once, as long as a PE and its buddy (the next PE) do not fail
//     together without a checkpoint directory; every PE rolls back to the
//     last checkpoint (or to the start, before the first).
//   - scmel (Algorithm 1 of the CAMEL paper, papers/000): one PE at a
//     time recovers alone, the others replay to it; collectives are
//     logged hop by hop as ordinary messages. A failure due while a PE
//     recovers waits until it caught up; a PE failing while a checkpoint
//     is being taken rolls every PE back, as under none.
//   - camel (Algorithms 2–3): the same failures as scmel, with a
//     multicast logged once at its root and a reduction's result kept
//     instead of its partials (by the root's first child, the keeper);
//     see Causal for where it departs from the paper.
//   - team (team-based logging, Meneses et al., papers/001 §2): PEs are
//     grouped in teams (Teams); messages between teams are logged as
//     under scmel, messages inside one are not, and every reception's
//     determinant, inside a team too, is safe only once a PE of another
//     team holds it (teammates pass each other's on: see Causal.teams).
//     A failure rolls back the failed PE's whole team to the last
//     checkpoint (each PE's second snapshot copy lives in another
//     team), and the other teams replay to it what they logged. Failure
//     sets: any PEs of one team at once (one team failure); failures
//     in one team or in different teams one after the other, each
//     after the team before caught up; failures in different teams at
//     once, or one due while a team recovers, wait until it caught up
//     (injected failures: the launcher holds them back; a process lost
//     meanwhile rolls every PE back), since each
//     determinant is held in one other team; a lost process that is not
//     exactly one team, or a failure while a checkpoint is being taken,
//     rolls every PE back, as under none. Teams change only at a
//     coordinated checkpoint (Hook.Regroup, Checkpointer.Regroup: the
//     checkpoint's copies go to holders in other teams of the new ones).
//   - camel with teams (camel+teams; the CAMEL paper's future work, §6):
//     CAMEL's collectives between teams, team logging inside them — a
//     multicast logged once at its root (whatever team its first child
//     is in), a partial to a teammate not logged (its determinants kept,
//     without the payload, until the reduction's acknowledgement), a
//     reduction's result kept by the root's first child in another team
//     (none when every child is a teammate: the partials then stay
//     logged until the checkpoint), which also tells a recovering team
//     which of its root's reductions are complete. The same failure
//     sets as team.
//   - a log limit on scmel, camel or team (MCML, papers/002; limit.go): a PE
//     whose log would pass its limit stops logging on a channel, and a
//     failure rolls back with the failed PE (or team) every PE that
//     stopped logging to one of the set, to the closure; those that did
//     not fail keep the order of their receptions and the determinants
//     they hold for others. The same failure sets as the protocol under
//     it; across processes the launcher gathers every process's channels
//     before it computes the set (recovery.Processes).
//   - pessimist (papers/003; pessimist.go, eventlog.go): every message
//     logged by its sender, and the order of each PE's deliveries
//     committed to an event logger (EventLog) before the PE sends again;
//     only a delivery from another sender than the one before is an
//     event (the refined model: see Pessimist). Any PEs failing at once
//     recover together, each alone from its log and the survivors'
//     replays, the survivors never rolling back; within one process
//     the logger is the launcher's (MemEventLog). A failure due while
//     PEs recover waits until they caught up, and a failure while a
//     checkpoint is taken rolls every PE back, as under the others.
//   - spmd (papers/004; spmd.go, docs/SPMD.md; in progress): teams as
//     under team, no determinants: a message between teams is logged
//     and named (pe.MsgName) the same way in every execution of a
//     program whose elements send the same messages whatever order
//     theirs arrive in; a failed team re-executes in any order, the
//     survivors drop its copies by name, and a survivor's message reaches
//     it only once no orphan of a lower phase is missing. Teams failing
//     at once recover together.
//
// A second failure during a recovery that the launcher did not hold back
// is reported (ErrConcurrentFailure), never silently mishandled.
//
// Where recovery lives: the launcher's side (injected failures, a failed
// PE's new incarnation, stopping and restarting every PE for a global
// rollback, loading a checkpoint and redistributing it on another PE
// count, the statistics) in package recovery; each PE's side in package
// manager — recover.go (a PE recovering alone: its snapshot from its
// buddy, the survivors' determinants and replays through this package),
// rollback.go (every PE going back to a checkpoint, agreed by messages:
// offers, a plan, snapshots sent by their holders), checkpoint.go,
// ckptfile.go and validate.go (snapshots, their files and checks). No PE
// reads another's memory: everything a recovery needs travels as
// messages, so PEs in other processes recover the same way. Package ftsim
// runs all of it, deterministically, failing PEs before every event.
//
// Layering (go list -deps): pe ← ftlayer ← manager ← recovery ← chare ←
// ftsim and the programs; ftlayer imports pe alone.
package ftlayer

import (
	"cmp"
	"errors"
	"slices"

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
// one the runtime carries on its envelopes) and the runtime's envelope,
// payload included, which it never looks into: what a replay re-sends.
// Size is its payload's bytes for the statistics.
type Message struct {
	pe.FTHeader
	Kind MsgKind
	Env  *pe.Envelope
	Size int
	// released: dropped from its sender's log by a release (the entry
	// may linger there until the log is compacted)
	released bool
	// elem (spmd, held): recognised again by the element it is delivered
	// to, not by the PE
	elem bool
}

// bytes is the payload size the statistics count.
func (m *Message) bytes() uint64 { return uint64(m.Size) }

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
	// PktStore (under a log limit): a PE rolled back without failing
	// hands a PE outside its rollback the determinants of its own order,
	// to store; the answer, without Dets, says they are stored.
	PktStore
	// PktMark (spmd): the lowest phase among the messages this survivor
	// had from rolled-back PEs and has not had again from their
	// re-execution (Covered; MaxUint64: none), to a recovering PE of
	// incarnation Inc.
	PktMark
	// PktAgain (spmd): the messages Names, which the receiver passed on
	// to this PE before a rollback, came again from the re-execution by
	// another way: if the receiver had them from a rolled-back PE, they
	// are orphans had again.
	PktAgain
	// PktPhase (spmd): the messages Names, which the receiver logged
	// for this PE, were had here before with the lower phases Phases (a
	// re-execution stamped its copy with a higher phase than its first
	// execution did): their log entries take those.
	PktPhase
	// PktOrphans (spmd): a survivor's orphans, to a restarted PE of
	// incarnation Inc: the messages Names it had from PEs rolled back
	// since, with the phases Phases they had then. A re-execution sends
	// such a message again with that phase (its own may be higher: it
	// takes its messages in another order), which is what the message
	// depends on.
	PktOrphans
	// PktRestarted (spmd): the sender restarted from its team's last
	// checkpoint and runs as incarnation Inc: the receiver answers it
	// with its mark, its orphans and its log for it.
	PktRestarted
	// PktMade (spmd): the restarted PE's incarnation Inc made the
	// messages Names again (as messageOf names them), which the receiver
	// listed as orphans (PktOrphans): they are orphans had again, wherever
	// their copies go (an element that had one here may receive the copy
	// elsewhere in the re-execution, before it migrates here again).
	PktMade
)

// Packet is one unit the network carries between PEs.
type Packet struct {
	Kind     PacketKind
	From, To int32
	Msg      *Message  // PktApp
	Dets     []Det     // PktAck, PktRecovery
	Done     []Reduced // PktRecovery, PktRedAck
	// Inc (PktRecovery): the sender's incarnation, which a restarted PE's
	// checkpoint may predate
	Inc uint32
	// Covered (PktReplayed, pessimist): how far the recovering PE's
	// deliveries went by what it told this survivor instead of
	// committing (see Pessimist.Send)
	Covered uint64
	// Relog: PktRecovery (CAMEL), the results a recovering keeper kept,
	// from their root's copies; PktRedResult, the result to keep.
	Relog []*Message
	Ckpt  *CkptMsg // the checkpoint protocol's packets
	// Replayed (PktReplayed): how many logged messages the survivor sent
	// the recovering PE again before this packet
	Replayed uint64
	Names    []pe.MsgName // PktAgain, PktPhase, PktOrphans, PktMade
	Phases   []uint64     // PktPhase
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
	RootCopies LogStats
	// NotLogged counts, by kind, the messages sent to teammates, which
	// team-based logging does not log (TotalMsgs and TotalBytes alone).
	NotLogged       [numKinds]LogStats
	DetsCreated     uint64
	DetsPiggybacked uint64 // determinant copies carried on messages
	DetsAcked       uint64
	Replayed        uint64 // logged messages re-sent to a recovering PE
	Dropped         uint64 // old or duplicate messages suppressed
	Held            uint64 // messages held back to keep the recorded order
	// RolledBack is 1 for an incarnation restarted from a checkpoint
	// (summed over a PE's incarnations by the host).
	RolledBack uint64
	// Under a log limit (MCML): the messages sent on channels not logged
	// (TotalMsgs and TotalBytes alone), the channels turned off, and the
	// sends that found the log over its limit and could not bring it
	// under (nothing left to turn off, or not now: see fitLimit).
	Unlogged    LogStats
	ChannelsOff uint64
	OverLimit   uint64
	// PeakTotal is the most the whole log held at once (Peak, the sum of
	// the kinds' peaks, bounds it from above).
	PeakTotal uint64
	// Reclustered counts the dendrograms of measured traffic a log
	// limit's cluster strategy was given (one a checkpoint at most).
	Reclustered uint64
	// CheckpointBytes is filled in by the host from its Checkpointer.
	CheckpointBytes uint64
	// The pessimist protocol's refined event model: deliveries made,
	// events among them (deliveries from another sender than the
	// delivery before), the commits to the event logger (one before a
	// send that follows new events) and the events they carried (a
	// recovering PE does not commit again what the log holds), and the
	// deliveries and events by entry method or system message.
	Deliveries, Events, Commits, EventsCommitted uint64
	// CommitsSpared: sends after new deliveries that needed no commit,
	// their destination having sent every one of them (see
	// Pessimist.Send)
	CommitsSpared uint64
	// RecordsReused: records of the pessimist's sender-based log handed
	// out again, from chunks a checkpoint took back (see sentRecords)
	RecordsReused uint64
	Entries       []EntryEvents
	// A restarted incarnation's recovery: the survivors whose replay came
	// (ReplaysFrom) and the logged messages they said they sent again
	// (ReplayedIn)
	ReplaysFrom, ReplayedIn uint64
	// spmd: the orphans had again from a re-execution (dropped), and the
	// named messages sent to other teams with their headers' bytes on
	// the wire
	OrphansAgain, Named, NameBytes uint64
	// OrphansMade (spmd, a restarted incarnation): the messages the
	// survivors listed as orphans that its re-execution made again (their
	// copies the survivors skip)
	OrphansMade uint64
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
	for k := range s.NotLogged {
		s.NotLogged[k].TotalMsgs += o.NotLogged[k].TotalMsgs
		s.NotLogged[k].TotalBytes += o.NotLogged[k].TotalBytes
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
	s.ReplaysFrom += o.ReplaysFrom
	s.ReplayedIn += o.ReplayedIn
	s.OrphansAgain += o.OrphansAgain
	s.OrphansMade += o.OrphansMade
	s.Named += o.Named
	s.NameBytes += o.NameBytes
	s.Dropped += o.Dropped
	s.Held += o.Held
	s.RolledBack += o.RolledBack
	s.Unlogged.TotalMsgs += o.Unlogged.TotalMsgs
	s.Unlogged.TotalBytes += o.Unlogged.TotalBytes
	s.ChannelsOff += o.ChannelsOff
	s.OverLimit += o.OverLimit
	s.PeakTotal += o.PeakTotal
	s.Deliveries += o.Deliveries
	s.Events += o.Events
	s.Commits += o.Commits
	s.EventsCommitted += o.EventsCommitted
	s.CommitsSpared += o.CommitsSpared
	s.RecordsReused += o.RecordsReused
	for _, e := range o.Entries {
		i, found := slices.BinarySearchFunc(s.Entries, e.Type, func(a EntryEvents, t uint32) int { return cmp.Compare(a.Type, t) })
		if !found {
			s.Entries = slices.Insert(s.Entries, i, EntryEvents{Type: e.Type})
		}
		s.Entries[i].Deliveries += e.Deliveries
		s.Entries[i].Events += e.Events
	}
	s.Reclustered += o.Reclustered
	s.CheckpointBytes += o.CheckpointBytes
}

// ErrConcurrentFailure is reported when a PE fails while another is still
// recovering: causal logging keeps one copy of each determinant, so two
// simultaneous failures may lose the order of some receptions.
var ErrConcurrentFailure = errors.New("a second PE failed while one was still recovering: unsupported by this protocol")
