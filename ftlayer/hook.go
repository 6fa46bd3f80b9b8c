package ftlayer

import (
	"fmt"
	"io"

	"github.com/charmgo/charmgo/ftlayer/mcml"
	"github.com/charmgo/charmgo/pe"
)

// Arrival is what a Hook says of an envelope that reached its PE.
type Arrival uint8

const (
	Handle  Arrival = iota // handle it now
	Held                   // kept until its turn (Hook.Next hands it back)
	Dropped                // a duplicate or an old incarnation's: never handled
	// Relay: a copy of a broadcast's hop this PE handled already, which
	// a rolled-back PE above it in the tree sent again: not handled here,
	// but sent on down the tree (rolled-back PEs below wait for it; the
	// others drop it)
	Relay
)

// Hook is the fault-tolerance layer as the runtime sees it: one per PE,
// called by the PE's manager on its goroutine for every message it sends
// and every one that reaches it. The runtime never asks which protocol is
// on; NopHook is the default.
type Hook interface {
	// Name is the protocol's name (none, scmel, camel, team).
	Name() string
	// Send stamps env, one hop to PE dst playing role in group g, before
	// it is queued (see SendHop for first and num). env is the caller's
	// only during the call: a hook that logs it keeps a copy.
	Send(dst int, role Role, g, num uint64, first bool, env *pe.Envelope) error
	// Arrive: env reached this PE. Its header (env.FT) may be its
	// sender's memory: the runtime reads it no more once a checkpoint
	// follows the message's handling (which a sender's hook may then
	// reuse), and never passes a handled envelope to Arrive again.
	Arrive(env *pe.Envelope) (Arrival, error)
	// Next hands back a held envelope whose turn has come; the runtime
	// calls it after each envelope it handled, until it reports false.
	Next(env *pe.Envelope) bool
	// Packet handles a packet from another PE's hook.
	Packet(p *Packet) error
	// Idle: the PE ran out of work. The hook sends what it held back to
	// send in batches (acknowledgements).
	Idle()
	// Reduced: this PE, the root of group g, delivered reduction num.
	// result is an envelope of that result which its receiver can handle
	// in place of every child's partial (nil where LogsSent is false):
	// a collective-aware protocol keeps it, instead of the partials, for
	// the root's recovery.
	Reduced(g, num uint64, result *pe.Envelope)
	// Prepare, Checkpoint and Abort bracket a coordinated checkpoint (see
	// Protocol).
	Prepare() Counters
	Checkpoint()
	Abort()
	Stats() Stats

	// Restart makes this hook a PE's new incarnation inc, recovering from
	// ck, its protocol state at the checkpoint the PE was restored from
	// (nil: the start of the run), in rollback rb (the PEs going back
	// with it; what it kept, if it did not fail). While it recovers,
	// complete learns which reductions of the PE's groups are complete
	// at their roots: those up to num of group g need no part from this
	// PE again.
	Restart(ck *Counters, inc uint32, complete func(g, num uint64), rb Rollback)
	// Keep is what this PE, rolled back with a failed one without
	// failing itself, takes into its next incarnation (nil: nothing).
	Keep() *Kept
	// Recovering reports whether this PE is still recovering.
	Recovering() bool
	// PeerFailed: PE y failed, or rolls back, and runs again as
	// incarnation inc; with lists the PEs rolling back with it (nil: its
	// team). The hook sends it what its recovery needs through its net
	// (packets, and logged messages again: Packets of kind PktApp whose
	// Msg.Env is the envelope to send).
	PeerFailed(y int, inc uint32, with []int32) error
	// PeerRecovered: PE y finished recovering.
	PeerRecovered(y int)
	// LogsSent reports whether the hook keeps the messages it stamps, by
	// reference, to send them again: their payloads must not be reused
	// (until OnRelease's function gets them back).
	LogsSent() bool
	// OnRelease sets f, which the hook calls with each envelope it logged
	// when it drops it for good and no PE will read its payload again:
	// a partial of a reduction its root completed, once its parent has let
	// go of it. The runtime may then reuse the values this PE contributed
	// to it. A logged envelope the runtime sends again (PeerFailed) must
	// be a copy, not sharing those values, for this to hold: a hook that
	// releases makes such copies itself.
	OnRelease(f func(env *pe.Envelope))
	// Releases reports whether the hook gives partials back through
	// OnRelease's function before the checkpoint. One that does not
	// keeps them until then: the runtime copies what it contributes to
	// them instead (Reducer.Detach), so its pool stays in use.
	Releases() bool
	// Describe writes, for a dump of a stalled run, what the hook holds
	// and waits for (one or a few indented lines; nothing for none).
	Describe(w io.Writer)
	// Regroup puts the PE in teams t from now on (called right after a
	// Checkpoint whose epoch chose them); a protocol without teams
	// ignores it.
	Regroup(t Teams)
	// Recluster gives a log limit's cluster strategy the dendrogram d
	// from now on (called right after a Checkpoint whose epoch chose it);
	// a hook without one ignores it.
	Recluster(d *mcml.Dendrogram)
	// TakeVolume returns the payload bytes the PE sent each PE since the
	// last call (nil: not measured), to choose teams from.
	TakeVolume() []uint64
	// Witness returns a PE that never rolls back with this one (of
	// another team; under per-PE recovery any other PE), or -1 where every
	// PE rolls back together. What this PE sends it and it sends back is
	// kept by a log that outlives this PE's rollback, so a decision made
	// from measurements (a balancing plan) that goes round through the
	// witness before it is acted on is the same decision in a
	// re-execution as it was the first time.
	Witness() int
}

// Supplied is implemented by a hook whose recovery can tell which PEs
// sent it everything it needs from them (their determinants, the
// messages they logged for it). A PE lost once every PE recovering has
// its part need not be recovered with them: the runtime may keep it down
// and recover it once they caught up (see recovery.Supervisor).
type Supplied interface {
	// TakeSupplied returns the PEs that, since the last call, sent this
	// PE, recovering, everything its recovery needs from them.
	TakeSupplied() []int32
}

// OriginUser is implemented by a hook that names application messages by
// their origin (pe.Origin) instead of by their place in their sender PE's
// sequence. The runtime counts each element's messages only when the hook
// says it does, and answers Origins while the hook stamps a message.
type OriginUser interface {
	UsesOrigins() bool
}

// Origins is what the runtime answers a hook that uses origins: the
// Trees value its factory gets implements it too.
type Origins interface {
	// Origin is the origin of the message being sent, while the hook's
	// Send runs for a message an element sends (its first hop: the hops
	// that pass it on carry it in their header), and false otherwise.
	Origin() (pe.Origin, bool)
}

// Counter is implemented by a hook that corrects the runtime's count of
// messages processed, which quiescence detection sums against the
// messages sent. A protocol without determinants re-executes in another
// order: the messages a rolled-back peer's first execution sent, whose
// sending its count forgot, may not come again, while the copies it
// sends again, dropped, were counted as sent.
type Counter interface {
	// TakeProcessed is what to add to the count of messages processed
	// since the last call (negative: to take away). The runtime asks
	// after each arrival, delivery to an element and failure notice.
	TakeProcessed() int64
}

// ElementDedup is implemented by a hook that recognises a message again
// at the element it is delivered to rather than at the PE it reaches: the
// way such a message goes (a location cache, a section's tree) may
// differ in a re-execution, and its element may have moved since.
type ElementDedup interface {
	// DeliverTo reports whether env, about to be delivered to the element
	// whose names are *names, is new there (it is then recorded); false:
	// a copy, not to deliver. A message delivered to one element several
	// times (a section member listed twice) is named by its occurrence
	// too (pe.MsgName.Num: 0, 1, ...).
	DeliverTo(names *ElementNames, env *pe.Envelope) bool
	// Left: an element with names left this PE for PE to (migrated).
	Left(names *ElementNames, to int)
}

// Wrapper is a hook around another, for a tool that watches what a
// protocol sees (chare.Config.WrapHook): it passes on what the runtime
// asks a hook besides Hook — OriginUser, ElementDedup, Counter — which a
// wrapper embedding Hook alone would turn off unseen.
type Wrapper struct{ Hook }

func (w Wrapper) UsesOrigins() bool {
	ou, ok := w.Hook.(OriginUser)
	return ok && ou.UsesOrigins()
}

func (w Wrapper) DeliverTo(names *ElementNames, env *pe.Envelope) bool {
	if d, ok := w.Hook.(ElementDedup); ok {
		return d.DeliverTo(names, env)
	}
	return true
}

func (w Wrapper) Left(names *ElementNames, to int) {
	if d, ok := w.Hook.(ElementDedup); ok {
		d.Left(names, to)
	}
}

func (w Wrapper) TakeProcessed() int64 {
	if c, ok := w.Hook.(Counter); ok {
		return c.TakeProcessed()
	}
	return 0
}

// NopHook is checkpoint/restart alone: nothing is stamped or logged.
type NopHook struct{}

func (NopHook) Name() string                                              { return "none" }
func (NopHook) Send(int, Role, uint64, uint64, bool, *pe.Envelope) error  { return nil }
func (NopHook) Arrive(*pe.Envelope) (Arrival, error)                      { return Handle, nil }
func (NopHook) Next(*pe.Envelope) bool                                    { return false }
func (NopHook) Packet(*Packet) error                                      { return nil }
func (NopHook) Idle()                                                     {}
func (NopHook) Reduced(uint64, uint64, *pe.Envelope)                      {}
func (NopHook) Prepare() Counters                                         { return Counters{} }
func (NopHook) Checkpoint()                                               {}
func (NopHook) Abort()                                                    {}
func (NopHook) Stats() Stats                                              { return Stats{} }
func (NopHook) Restart(*Counters, uint32, func(uint64, uint64), Rollback) {}
func (NopHook) Keep() *Kept                                               { return nil }
func (NopHook) Recovering() bool                                          { return false }
func (NopHook) PeerFailed(int, uint32, []int32) error                     { return nil }
func (NopHook) PeerRecovered(int)                                         {}
func (NopHook) LogsSent() bool                                            { return false }
func (NopHook) OnRelease(func(*pe.Envelope))                              {}
func (NopHook) Releases() bool                                            { return false }
func (NopHook) Describe(io.Writer)                                        {}
func (NopHook) Regroup(Teams)                                             {}
func (NopHook) Recluster(*mcml.Dendrogram)                                {}
func (NopHook) TakeVolume() []uint64                                      { return nil }
func (NopHook) Witness() int                                              { return -1 }

// CausalHook runs SCMEL or CAMEL (Causal in hop mode) for one PE of the
// runtime. Net carries its packets (acknowledgements) to other PEs.
type CausalHook struct {
	name     string
	s        *Causal
	t        Trees
	net      func(dst int, p *Packet)
	complete func(g, num uint64)
	release  func(env *pe.Envelope)
	lim      LogLimit
	err      error // what went wrong where no error could be returned (Restart)
}

// Protocol is the state machine the hook runs.
func (h *CausalHook) Protocol() *Causal { return h.s }

func (h *CausalHook) Name() string { return h.name }

func (h *CausalHook) Send(dst int, role Role, g, num uint64, first bool, env *pe.Envelope) error {
	hdr, err := h.s.SendHop(int32(dst), role, g, num, first, env.FT, env)
	if err != nil {
		return err
	}
	env.FT = hdr
	if h.s.direct != nil {
		h.doAll(h.s.TakeDirect())
	}
	return nil
}

func (h *CausalHook) Arrive(env *pe.Envelope) (Arrival, error) {
	if h.err != nil {
		return Dropped, h.err
	}
	if env.FT == nil {
		return Handle, nil // not logged: runtime control (checkpoints, this layer's own packets)
	}
	held := h.s.stats.Held
	acts, err := h.s.ReceiveHop(env)
	if err != nil {
		return Dropped, err
	}
	switch {
	case h.run(acts, env):
		return Handle, nil
	case h.s.stats.Held > held:
		return Held, nil
	}
	return Dropped, nil
}

func (h *CausalHook) Next(env *pe.Envelope) bool { return h.run(h.s.Next(), env) }

// run sends the actions' packets and reports whether they deliver a
// message (at most one), which it puts in *env.
func (h *CausalHook) run(acts []Action, env *pe.Envelope) bool {
	got := false
	for i := range acts {
		if a := &acts[i]; a.Kind == ActDeliver {
			*env = *a.Msg.Env
			got = true
			continue
		}
		h.do(&acts[i])
	}
	return got
}

// doAll carries out actions that deliver nothing.
func (h *CausalHook) doAll(acts []Action) {
	for i := range acts {
		h.do(&acts[i])
	}
	if len(h.s.completed) > 0 && h.complete != nil {
		for _, r := range h.s.TakeCompleted() {
			h.complete(r.Group, r.Num)
		}
	}
}

// do carries out an action that delivers nothing. The packet is lent to
// net for the call (a copy of it escaped: an allocation per packet).
func (h *CausalHook) do(a *Action) {
	switch a.Kind {
	case ActSend:
		h.net(int(a.Packet.To), &a.Packet)
	case ActRelease:
		if h.release != nil && a.Msg.Env != nil {
			h.release(a.Msg.Env)
		}
	}
}

func (h *CausalHook) OnRelease(f func(env *pe.Envelope)) { h.release = f }

func (h *CausalHook) Releases() bool { return h.s.keepsResults() }

func (h *CausalHook) Packet(p *Packet) error {
	if h.err != nil {
		return h.err
	}
	acts, err := h.s.Receive(p)
	if err != nil {
		return err
	}
	if p.Kind == PktRecovery && h.complete != nil {
		for _, r := range p.Done {
			h.complete(r.Group, r.Num)
		}
	}
	h.doAll(acts)
	return nil
}

func (h *CausalHook) Idle() {
	h.doAll(h.s.FlushAcks())
}

func (h *CausalHook) Reduced(g, num uint64, result *pe.Envelope) {
	h.doAll(h.s.Reduced(g, num, result))
}

// Restart: see Hook. The statistics of the incarnation it replaces stay
// with that one.
func (h *CausalHook) Restart(ck *Counters, inc uint32, complete func(g, num uint64), rb Rollback) {
	s := NewHopCausal(h.s.me, h.s.n, h.t, h.s.camel, h.lim).withTeams(h.s.teams)
	var zero Counters
	if ck == nil {
		ck = &zero
	}
	h.s, h.complete = restartCausal(s, *ck, inc), complete
	h.s.withRollback(rb)
	if done := h.s.KeptDone(); len(done) > 0 {
		// what it knew before it rolled back, as a fellow's recovery
		// packet would have told it
		if complete != nil {
			for _, r := range done {
				complete(r.Group, r.Num)
			}
		}
		acts, err := h.s.reduced(done, nil)
		if err != nil {
			h.err = fmt.Errorf("PE %d, restarted: %w", h.s.me, err) // the next arrival reports it
			return
		}
		h.doAll(acts)
	}
}

func (h *CausalHook) Keep() *Kept { return h.s.Keep() }

func (h *CausalHook) Recovering() bool { return h.s.Recovering() }

// TakeSupplied implements Supplied.
func (h *CausalHook) TakeSupplied() []int32 { return h.s.TakeSupplied() }

func (h *CausalHook) PeerFailed(y int, inc uint32, with []int32) error {
	acts, err := h.s.PeerFailed(int32(y), inc, with)
	if err != nil {
		return err
	}
	for _, a := range acts {
		if a.Kind == ActSend && a.Packet.Kind == PktApp && h.s.releases(a.Packet.Msg) {
			// A deep copy: this partial's values go back to their
			// contributors once the logs release it, which a late
			// acknowledgement (of a result the failed PE's old
			// incarnation made) can do before y has read it.
			cp := *a.Packet.Msg
			env, err := pe.CopyEnvelope(*cp.Env)
			if err != nil {
				return fmt.Errorf("PE %d: a logged contribution sent again to PE %d: %w", h.s.me, y, err)
			}
			cp.Env = &env
			env.FT = &cp.FTHeader
			a.Packet.Msg = &cp
		}
		h.do(&a)
	}
	return nil
}

func (h *CausalHook) PeerRecovered(y int) { h.s.Recovered(int32(y)) }

func (h *CausalHook) LogsSent() bool { return true }

func (h *CausalHook) Prepare() Counters { return h.s.Prepare() }

// Regroup implements Hook: teams apply to team and camel (as
// camel+teams); scmel keeps every PE alone.
func (h *CausalHook) Regroup(t Teams) {
	if h.name != "scmel" {
		h.s.Regroup(t)
	}
}

func (h *CausalHook) TakeVolume() []uint64 { return h.s.TakeVolume() }

// Recluster implements Hook: the cluster strategy of this PE's log
// limit, and of its next incarnations, takes d's levels.
func (h *CausalHook) Recluster(d *mcml.Dendrogram) {
	if _, ok := h.lim.Strategy.(mcml.Cluster); ok {
		h.lim.Strategy = mcml.ClusterOf(d, int(h.s.me))
		if h.s.lim != nil {
			h.s.lim.Strategy = h.lim.Strategy
			h.s.stats.Reclustered++
		}
	}
}
func (h *CausalHook) Witness() int { return h.s.Witness() }
func (h *CausalHook) Checkpoint()  { h.s.Checkpoint() }
func (h *CausalHook) Abort()       { h.s.Abort() }
func (h *CausalHook) Stats() Stats { return h.s.Stats() }

// Describe implements Hook.
func (h *CausalHook) Describe(w io.Writer) {
	s := h.s
	fmt.Fprintf(w, "  %s: incarnation %d; sent %d, received %d; log %d messages; %d own determinants unacknowledged, %d held for others\n",
		h.Name(), s.inc, s.ssn, s.rsn, len(s.msgLog), len(s.detBuf), len(s.detLog))
	if len(s.failing) > 0 {
		fmt.Fprintf(w, "  PEs %s are recovering: this PE replays to them\n", PEList(s.failing))
	}
	if s.sealed {
		fmt.Fprintf(w, "  a checkpoint is being taken: arrivals are held until its commit (%d held)\n", len(s.held))
	}
	if s.recovering {
		fmt.Fprintf(w, "  recovering: determinants from %d of %d peers, replay complete from %d; %d messages held for their turn (last recorded reception %d)\n",
			s.detsIn, s.collectFrom, s.replayedIn, len(s.held)+len(s.heldRec), s.lastRecorded)
		next := "not recorded"
		for k, r := range s.recorded {
			if r == s.rsn+1 {
				next = fmt.Sprintf("PE %d's message %d (group %d)", k.sender, k.ssn, k.group)
			}
		}
		_, held := s.heldRec[s.rsn+1]
		fmt.Fprintf(w, "  reception %d is next: %s, here: %v\n", s.rsn+1, next, held)
	} else if len(s.held) > 0 && !s.sealed {
		fmt.Fprintf(w, "  %d messages held for their turn\n", len(s.held))
	}
}
