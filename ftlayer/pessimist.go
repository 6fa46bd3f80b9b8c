package ftlayer

import (
	"fmt"
	"io"
	"slices"
	"unsafe"

	"github.com/charmgo/charmgo/ftlayer/mcml"
	"github.com/charmgo/charmgo/pe"
)

// Pessimist is one PE's pessimistic message logging with a refined event
// model (papers/003, Bouteiller, Bosilca, Dongarra): every message a PE
// sends to another is kept in its memory (sender-based logging), and the
// order of its deliveries is committed to an event logger (EventLog)
// before anything it sends after them leaves, so no PE ever depends on a
// delivery order that a failure can lose. Any set of PEs can fail at
// once: each restarts from its checkpoint, reads its events back, and
// delivers again in their order what the survivors send it again from
// their logs and what the other restarted PEs send again as they
// re-execute; the survivors never roll back.
//
// The refined model, in charmgo's terms. A PE runs one entry method at a
// time, and what it sends on each channel is numbered in the order it
// sends (the receiver drops a copy by that number), so the order of its
// deliveries is what a re-execution must follow: two deliveries may swap
// only if neither sends on a channel the other sends on and neither reads
// what the other writes, which the runtime cannot know before it runs
// them. What it knows without asking is a channel's order: messages from
// one PE reach another in the order sent. So a delivery from the same PE
// as the delivery before it needs no record of which message it is — the
// channel says — and only a delivery from another PE is an event (Event:
// where the run of a sender begins); it is the message-driven
// counterpart of MPI's ANY_SOURCE receive. Where a run ends is not known
// from the channel, though: the scheduler could have picked another PE's
// message had it come first, and a re-execution must not. So before the
// PE sends to another PE after deliveries not yet committed, it commits
// the events made since its last commit and how far its deliveries went
// (one commit: the paper merges the events between two sends); a PE that
// delivers without sending commits nothing. A PE receiving from one PE at
// a time (a pipeline, a ping-pong) logs no event at all, only how far it
// went; one receiving from many in turn logs about one event a message.
// A commit of the launcher's memory (one process) costs a lock and an
// append.
type Pessimist struct {
	me        int32
	n         int
	inc       uint32
	channels          // (recv: the channel numbers delivered)
	rsn       uint64  // deliveries made since the start
	last      int32   // the sender of the last delivery (-1: none since a checkpoint or restart)
	pending   []Event // events not committed yet
	committed uint64  // the deliveries the last commit covered
	// runFrom: the sender of every delivery since the last commit (-1:
	// none since; -2: more than one)
	runFrom int32
	// heldFor: per PE, how far its deliveries went by what it told this
	// PE instead of committing (FTHeader.Safe of a message delivered
	// here; nil until one came); heldDirty: the PEs whose count this PE
	// has not committed for them since
	heldFor   []uint64
	heldDirty []int32
	commit    Commit // what Send hands the host (reused)

	senderLog
	records sentRecords
	held    []*Message // arrivals waiting for their turn, in arrival order
	sealed  bool       // a snapshot was taken and its commit has not come: arrivals are held
	mark    struct{ logSeq, rsn, record uint64 }

	// recovery of this PE
	recovering bool
	set        []bool  // the PEs that restarted with this one (this one included)
	replay     []Event // the events logged for this PE after its checkpoint
	next       int     // replay[:next] start at or before the next delivery
	lastLogged uint64  // the last logged event's delivery (the checkpoint's: none)
	upTo       uint64  // deliveries that must follow the log (its commits covered them)
	replayFrom int     // survivors, which replay to this PE
	replayedIn int     // of them, those whose replay is complete
	failing    []int32 // peers recovering, to which this PE replayed

	stats     Stats
	entries   map[uint32]*EntryEvents
	lastEntry *EntryEvents // the entry of the last delivery (most repeat it)
}

// EntryEvents counts a PE's deliveries of one entry method or system
// message (Type, as the runtime registered it) and how many were events.
type EntryEvents struct {
	Type       uint32
	Deliveries uint64
	Events     uint64
}

// NewPessimist is PE me's pessimistic logging in a job of n PEs, from the
// start of the run.
func NewPessimist(me int32, n int) *Pessimist {
	s := &Pessimist{me: me, n: n, channels: newChannels(n),
		last: -1, runFrom: -1, entries: map[uint32]*EntryEvents{}}
	return s
}

// restartPessimist makes s (new) PE me's incarnation inc, restored from
// checkpoint counters ck, rolled back with the PEs of set (nil: alone),
// whose events after the checkpoint are evs, its commits having covered
// its deliveries up to covered.
func restartPessimist(s *Pessimist, ck Counters, inc uint32, set []int32, evs []Event, covered uint64) *Pessimist {
	s.inc, s.rsn, s.committed = inc, ck.RSN, ck.RSN
	s.restoreChannels(ck)
	s.incMap[s.me] = inc
	s.set = make([]bool, s.n)
	s.set[s.me] = true
	for _, p := range set {
		if p >= 0 && int(p) < s.n {
			s.set[p] = true
		}
	}
	size := 0
	for _, in := range s.set {
		if in {
			size++
		}
	}
	s.replay, s.lastLogged = evs, ck.RSN
	if len(evs) > 0 {
		s.lastLogged = evs[len(evs)-1].Seq
	}
	s.upTo = max(s.lastLogged, covered)
	s.committed = max(s.committed, s.upTo) // what the log holds already
	s.replayFrom = s.n - size
	s.recovering = s.replayFrom > 0 || s.upTo > s.rsn
	s.mark.rsn = ck.RSN
	s.stats.RolledBack = 1
	return s
}

// Snapshot is the protocol state a checkpoint saves.
func (s *Pessimist) Snapshot() Counters {
	c := Counters{RSN: s.rsn, Inc: s.inc}
	s.snapshotChannels(&c)
	return c
}

// Commit is what the host must hand the event logger before a message
// leaves: the PE's events since its last commit (maybe none), that its
// deliveries reached Covered, and the counts of other PEs' deliveries
// this PE holds for them (Others; see Send). Its slices are the host's
// until the PE's next delivery.
type Commit struct {
	Events  []Event
	Covered uint64
	Others  []Cover
}

// Send numbers a message to PE to (a hop of any role: every hop is a
// message on its channel) and logs it unless it stays on this PE. When
// the PE delivered messages since its last commit and the message goes
// to another PE, the host must commit what commit says before the
// message leaves (nil: nothing). A message to this PE itself needs no
// commit: nothing outside sees it.
//
// Nor does one whose destination sent every delivery since the last
// commit, with no event among them (a pipeline's or a ping-pong's
// steady state): the deliveries continue the run of the last committed
// event, so only how far they went is missing, and it goes with the
// message (FTHeader.Safe), held by the one PE that will depend on it.
// Should this PE fail, that PE, surviving, hands it back with the end of
// its replay, and a restarted PE delivers past its log only once every
// survivor has (turn). Should both fail, nothing outside depends on the
// count unless the destination sent something elsewhere since, and its
// commit before that carried the count to the logger (Others): so the
// latency of a PE whose deliveries are all deterministic is none's.
func (s *Pessimist) Send(to int32, env *pe.Envelope) (hdr *pe.FTHeader, commit *Commit, err error) {
	if to < 0 || int(to) >= s.n {
		return nil, nil, fmt.Errorf("PE %d: send to PE %d, outside 0..%d", s.me, to, s.n-1)
	}
	kind := KindP2P
	switch {
	case env.Kind == KindSystem:
		kind = KindSystem
	case env.Kind == KindMulticast || env.Kind == KindReduction:
		kind = env.Kind
	}
	s.sendCSN[to]++
	if to == s.me {
		// not logged: its header alone, which the collector frees once
		// handled (a record would hold its chunk until a checkpoint)
		return &pe.FTHeader{Sender: s.me, Recver: to, CSN: s.sendCSN[to], Inc: s.inc}, nil, nil
	}
	hm := s.records.take()
	hm.env = *env
	m := &hm.Message
	*m = Message{Kind: kind, FTHeader: pe.FTHeader{Sender: s.me, Recver: to, CSN: s.sendCSN[to], Inc: s.inc}, Env: &hm.env}
	hm.env.FT = &m.FTHeader
	if m.Size = pe.PayloadSize(env.Payload); m.Size < 0 {
		m.Size = encodedSize(env)
	}
	s.logSeq++
	s.msgLog = append(s.msgLog, logEntry{s.logSeq, m})
	s.countLog(m, true)
	if s.rsn > s.committed {
		if len(s.pending) == 0 && s.runFrom == to {
			m.Safe = s.rsn
			s.stats.CommitsSpared++
			return &m.FTHeader, nil, nil
		}
		s.commit = Commit{Events: s.pending, Covered: s.rsn, Others: s.commit.Others[:0]}
		for _, p := range s.heldDirty {
			s.commit.Others = append(s.commit.Others, Cover{PE: p, Covered: s.heldFor[p]})
		}
		s.heldDirty = s.heldDirty[:0]
		s.pending = s.pending[:0]
		s.committed = s.rsn
		s.stats.Commits++
		s.stats.EventsCommitted += uint64(len(s.commit.Events))
		return &m.FTHeader, &s.commit, nil
	}
	return &m.FTHeader, nil, nil
}

// holdCount keeps how far PE p's deliveries went, which p's message,
// delivered here, carried instead of a commit (see Send).
func (s *Pessimist) holdCount(p int32, upTo uint64) {
	if s.heldFor == nil {
		s.heldFor = make([]uint64, s.n)
	}
	if upTo <= s.heldFor[p] {
		return
	}
	if !slices.Contains(s.heldDirty, p) {
		s.heldDirty = append(s.heldDirty, p)
	}
	s.heldFor[p] = upTo
}

// Committed is the deliveries the last commit covered (what the host
// passes the logger with Send's events).
func (s *Pessimist) Committed() uint64 { return s.committed }

func (s *Pessimist) countLog(m *Message, in bool) { s.tally(m, in, &s.stats.PeakTotal) }

// Arrive is a message reaching this PE: Handle (it is delivered now: its
// delivery is counted), Held (until its turn: Next hands it back) or
// Dropped (a copy, or an old incarnation's).
func (s *Pessimist) Arrive(env *pe.Envelope) (Arrival, error) {
	h := env.FT
	if h.Sender < 0 || int(h.Sender) >= s.n {
		return Dropped, fmt.Errorf("PE %d: a message from PE %d, outside 0..%d", s.me, h.Sender, s.n-1)
	}
	if h.Inc > s.incMap[h.Sender] {
		s.newIncarnation(h.Sender, h.Inc) // its notice is on its way
	}
	if h.Inc < s.incMap[h.Sender] || s.recv[h.Sender].has(h.CSN) || s.isHeld(h.Sender, h.CSN) {
		s.stats.Dropped++
		return Dropped, nil
	}
	if s.deliverable(h.Sender, h.CSN) {
		// the envelope as it came is what is delivered: no copy of the
		// header, which stays in its sender's log
		s.deliver(h.Sender, h.CSN, h.Safe, env.Type)
		return Handle, nil
	}
	kind := KindP2P
	if env.Kind == KindSystem || env.Kind == KindMulticast || env.Kind == KindReduction {
		kind = env.Kind
	}
	cp := &hopMsg{}
	cp.fill(env, kind)
	cp.env.FT = &cp.FTHeader
	s.held = append(s.held, &cp.Message)
	s.stats.Held++
	return Held, nil
}

func (s *Pessimist) isHeld(sender int32, csn uint64) bool {
	for _, m := range s.held {
		if m.Sender == sender && m.CSN == csn {
			return true
		}
	}
	return false
}

// newIncarnation: PE p runs as incarnation inc from now on; what its
// older ones sent that waits here is dropped (the new one sends it again
// as it re-executes, or a log replays it).
func (s *Pessimist) newIncarnation(p int32, inc uint32) {
	s.incMap[p] = inc
	s.held = dropOlder(s.held, p, inc, &s.stats.Dropped)
}

// turn says which sender's message the next delivery must be (forced),
// or that none may be delivered yet (wait): the log's order, up to the
// deliveries its commits covered; free after them.
func (s *Pessimist) turn() (sender int32, forced, wait bool) {
	if !s.recovering {
		return -1, false, false
	}
	pos := s.rsn + 1
	if pos > s.upTo {
		// a survivor may hold a count past the log's (see Send), which
		// comes with the end of its replay
		return -1, false, s.replayedIn < s.replayFrom
	}
	for s.next < len(s.replay) && s.replay[s.next].Seq <= pos {
		s.next++
	}
	if s.next == 0 {
		// a commit covered this delivery, but no event says whose: the
		// log is not this PE's (a bug), and a guess could go otherwise
		return -1, false, true
	}
	return s.replay[s.next-1].Sender, true, false
}

// deliverable says whether the message CSN from PE from may be
// delivered now.
func (s *Pessimist) deliverable(from int32, csn uint64) bool {
	if s.sealed || csn != s.recv[from].contig+1 {
		return false
	}
	sender, forced, wait := s.turn()
	return !wait && (!forced || sender == from)
}

// deliver counts the delivery of message csn from PE from, of entry
// (or system message) typ, which carried safe (FTHeader.Safe): its
// channel number, and an event if it begins a run of its sender.
func (s *Pessimist) deliver(from int32, csn, safe uint64, typ uint32) {
	s.recv[from].add(csn)
	s.rsn++
	switch {
	case s.rsn == s.committed+1:
		s.runFrom = from
	case s.runFrom != from:
		s.runFrom = -2
	}
	if safe > 0 && from != s.me {
		s.holdCount(from, safe)
	}
	e := s.lastEntry
	if e == nil || e.Type != typ {
		if e = s.entries[typ]; e == nil {
			e = &EntryEvents{Type: typ}
			s.entries[typ] = e
		}
		s.lastEntry = e
	}
	e.Deliveries++
	s.stats.Deliveries++
	if from != s.last {
		s.last = from
		e.Events++
		s.stats.Events++
		if s.rsn > s.lastLogged {
			s.pending = append(s.pending, Event{Seq: s.rsn, Sender: from})
		}
	}
}

// Next hands back a held message whose turn has come, counting its
// delivery.
func (s *Pessimist) Next() (*Message, bool) {
	for i, m := range s.held {
		if s.deliverable(m.Sender, m.CSN) {
			s.held = slices.Delete(s.held, i, i+1)
			s.deliver(m.Sender, m.CSN, m.Safe, m.Env.Type)
			return m, true
		}
	}
	s.endRecovery()
	return nil, false
}

func (s *Pessimist) endRecovery() {
	if s.recovering && s.replayedIn == s.replayFrom && s.rsn >= s.upTo {
		s.recovering = false
		// a later failure of a PE that restarted with this one is a
		// failure of its own: this PE replays to it
		s.replay, s.set = nil, nil
	}
}

// Recovering reports whether this PE is still recovering.
func (s *Pessimist) Recovering() bool { return s.recovering }

// Receive handles a packet from another PE's protocol: a survivor
// saying its replay to this recovering PE is complete.
func (s *Pessimist) Receive(p *Packet) error {
	if p.From < 0 || int(p.From) >= s.n {
		return fmt.Errorf("PE %d: a packet from PE %d, outside 0..%d", s.me, p.From, s.n-1)
	}
	if p.Kind != PktReplayed {
		return fmt.Errorf("PE %d: packet of kind %d from PE %d (pessimist)", s.me, p.Kind, p.From)
	}
	if s.recovering && !s.set[p.From] && (p.Inc == 0 || p.Inc == s.inc) {
		// (a replay's end for an incarnation of this PE that restarted
		// again since is not this one's)
		s.upTo = max(s.upTo, p.Covered)
		s.replayedIn++
		s.stats.ReplaysFrom++
		s.stats.ReplayedIn += p.Replayed
		s.endRecovery()
	}
	return nil
}

// PeerFailed: PE y restarted as incarnation inc, with the PEs of with
// (nil: alone). A survivor sends it again what it logged for it, then
// says so; a PE restarted with it has nothing logged, and sends it again
// what it sends it as it re-executes.
func (s *Pessimist) PeerFailed(y int32, inc uint32, with []int32) ([]Action, error) {
	if y < 0 || int(y) >= s.n || y == s.me {
		return nil, fmt.Errorf("PE %d told that PE %d failed (PEs are 0..%d)", s.me, y, s.n-1)
	}
	s.newIncarnation(y, max(inc, s.incMap[y]))
	if s.set != nil && s.set[y] {
		return nil, nil
	}
	if !slices.Contains(s.failing, y) {
		s.failing = append(s.failing, y)
	}
	var out []Action
	for _, e := range s.msgLog {
		if e.m.Recver == y {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: y, Msg: e.m}})
		}
	}
	s.stats.Replayed += uint64(len(out))
	end := Packet{Kind: PktReplayed, From: s.me, To: y, Inc: s.incMap[y], Replayed: uint64(len(out))}
	if s.heldFor != nil {
		end.Covered = s.heldFor[y]
	}
	return append(out, Action{Kind: ActSend, Packet: end}), nil
}

// Recovered: PE y finished recovering.
func (s *Pessimist) Recovered(y int32) {
	if i := slices.Index(s.failing, y); i >= 0 {
		s.failing = slices.Delete(s.failing, i, i+1)
	}
}

// Prepare marks the snapshot a coordinated checkpoint takes: arrivals
// wait for its commit (where the application resumes among them is not
// recorded, and a restart from the snapshot resumes first).
func (s *Pessimist) Prepare() Counters {
	for k := range s.logged {
		l := &s.logged[k]
		l.AtCheckpointBytes = max(l.AtCheckpointBytes, l.Bytes)
	}
	s.mark.logSeq, s.mark.rsn, s.mark.record = s.logSeq, s.rsn, s.records.next
	s.sealed = true
	return s.Snapshot()
}

// Abort: the checkpoint Prepare marked was abandoned.
func (s *Pessimist) Abort() { s.sealed = false }

// Checkpoint: the checkpoint Prepare marked was committed. What it covers
// leaves the log, and its deliveries need no events any more (the host
// truncates the event log to the delivery it returns); the next delivery
// is an event.
func (s *Pessimist) Checkpoint() (truncate uint64) {
	keep := s.msgLog[:0]
	for _, e := range s.msgLog {
		if e.seq <= s.mark.logSeq {
			s.countLog(e.m, false)
			continue
		}
		keep = append(keep, e)
	}
	clear(s.msgLog[len(keep):])
	s.msgLog = keep
	if len(s.failing) == 0 {
		// (copies replayed to a recovering PE are not counted by the
		// quiescence a checkpoint waits for: their records stay until a
		// checkpoint finds none in flight)
		s.records.release(s.mark.record)
	}
	k := 0
	for k < len(s.pending) && s.pending[k].Seq <= s.mark.rsn {
		k++
	}
	s.pending = append(s.pending[:0], s.pending[k:]...)
	s.last = -1
	s.sealed = false
	return s.mark.rsn
}

// Stats is this incarnation's statistics.
func (s *Pessimist) Stats() Stats {
	st := s.stats
	st.Log = s.logged
	st.RecordsReused = s.records.reused
	for _, e := range s.entries {
		st.Entries = append(st.Entries, *e)
	}
	slices.SortFunc(st.Entries, func(a, b EntryEvents) int { return int(a.Type) - int(b.Type) })
	return st
}

var _ Hook = (*PessimistHook)(nil)

// PessimistHook runs Pessimist for one PE of the runtime; events reach
// the event logger through log, packets other PEs through net.
type PessimistHook struct {
	s      *Pessimist
	events EventLog
	net    func(dst int, p *Packet)
	err    error // what went wrong where no error could be returned (Restart)
}

// NewPessimistHook is PE me's pessimist hook in a job of n PEs.
func NewPessimistHook(me, n int, net func(dst int, p *Packet), events EventLog) *PessimistHook {
	return &PessimistHook{s: NewPessimist(int32(me), n), events: events, net: net}
}

// Protocol is the state machine the hook runs.
func (h *PessimistHook) Protocol() *Pessimist { return h.s }

func (h *PessimistHook) Name() string { return "pessimist" }

func (h *PessimistHook) Send(dst int, _ Role, _, _ uint64, _ bool, env *pe.Envelope) error {
	if h.err != nil {
		return h.err
	}
	hdr, commit, err := h.s.Send(int32(dst), env)
	if err != nil {
		return err
	}
	if commit != nil {
		// before the message leaves: nothing outside this PE may depend on
		// a delivery order the logger does not hold
		if err := h.events.Commit(h.s.me, commit.Events, commit.Covered, commit.Others); err != nil {
			return fmt.Errorf("PE %d: event logger: %w", h.s.me, err)
		}
	}
	env.FT = hdr
	return nil
}

func (h *PessimistHook) Arrive(env *pe.Envelope) (Arrival, error) {
	if h.err != nil {
		return Dropped, h.err
	}
	if env.FT == nil {
		return Handle, nil // the runtime's control: not logged
	}
	return h.s.Arrive(env)
}

func (h *PessimistHook) Next(env *pe.Envelope) bool {
	m, ok := h.s.Next()
	if ok {
		*env = *m.Env
	}
	return ok
}

func (h *PessimistHook) Packet(p *Packet) error {
	if h.err != nil {
		return h.err
	}
	return h.s.Receive(p)
}

func (h *PessimistHook) Idle()                                {}
func (h *PessimistHook) Reduced(uint64, uint64, *pe.Envelope) {}
func (h *PessimistHook) Prepare() Counters                    { return h.s.Prepare() }
func (h *PessimistHook) Abort()                               { h.s.Abort() }
func (h *PessimistHook) Stats() Stats                         { return h.s.Stats() }
func (h *PessimistHook) Keep() *Kept                          { return nil }
func (h *PessimistHook) Recovering() bool                     { return h.s.Recovering() }
func (h *PessimistHook) PeerRecovered(y int)                  { h.s.Recovered(int32(y)) }
func (h *PessimistHook) LogsSent() bool                       { return true }
func (h *PessimistHook) OnRelease(func(env *pe.Envelope))     {}
func (h *PessimistHook) Releases() bool                       { return false }
func (h *PessimistHook) Regroup(Teams)                        {}
func (h *PessimistHook) Recluster(*mcml.Dendrogram)           {}
func (h *PessimistHook) TakeVolume() []uint64                 { return nil }
func (h *PessimistHook) Checkpoint()                          { h.events.Truncate(h.s.me, h.s.Checkpoint()) }

// Witness implements Hook: the next PE, which in one process also holds
// this PE's checkpoint copy. Any set of PEs may fail at once under this
// protocol, but a PE failing with the holder of its copy rolls every PE
// back, so a balancing plan that went round through PE 0's witness is
// the same whenever PE 0 re-executes alone.
func (h *PessimistHook) Witness() int {
	if h.s.n < 2 {
		return -1
	}
	return int(h.s.me+1) % h.s.n
}

// Restart implements Hook: the new incarnation reads its events back
// from the logger.
func (h *PessimistHook) Restart(ck *Counters, inc uint32, _ func(g, num uint64), rb Rollback) {
	var zero Counters
	if ck == nil {
		ck = &zero
	}
	evs, covered, err := h.events.Events(h.s.me, ck.RSN)
	if err != nil {
		h.err = fmt.Errorf("PE %d, restarted: event logger: %w", h.s.me, err)
		return
	}
	h.s = restartPessimist(NewPessimist(h.s.me, h.s.n), *ck, inc, rb.Set, evs, covered)
}

func (h *PessimistHook) PeerFailed(y int, inc uint32, with []int32) error {
	acts, err := h.s.PeerFailed(int32(y), inc, with)
	sendAll(h.net, acts)
	return err
}

// sendAll puts the packets of acts (all ActSend) on net.
func sendAll(net func(dst int, p *Packet), acts []Action) {
	for i := range acts {
		net(int(acts[i].Packet.To), &acts[i].Packet)
	}
}

// Describe implements Hook.
func (h *PessimistHook) Describe(w io.Writer) {
	s := h.s
	fmt.Fprintf(w, "  pessimist: incarnation %d; %d deliveries (last from PE %d), %d events not committed; log %d messages; %d held\n",
		s.inc, s.rsn, s.last, len(s.pending), len(s.msgLog), len(s.held))
	if s.sealed {
		fmt.Fprintf(w, "  a checkpoint is being taken: arrivals are held until its commit\n")
	}
	if len(s.failing) > 0 {
		fmt.Fprintf(w, "  PEs %s are recovering: this PE replayed to them\n", PEList(s.failing))
	}
	if s.recovering {
		sender, forced, wait := s.turn()
		next := "any sender"
		switch {
		case wait:
			next = "none: the log covers it but names no sender"
		case forced:
			next = fmt.Sprintf("PE %d's next message", sender)
		}
		fmt.Fprintf(w, "  recovering: replays complete from %d of %d survivors; the log's order up to delivery %d; delivery %d is next: %s\n",
			s.replayedIn, s.replayFrom, s.upTo, s.rsn+1, next)
	}
}

// sentRecords hands out the records of the messages a PE sends (its log's
// and their headers, which their envelopes point at), a chunk at a time,
// and takes chunks back for reuse once a checkpoint has covered every
// record in them: a run that checkpoints sends without allocating.
//
// Reuse is safe because the runtime takes a checkpoint only at
// quiescence, when every message it counts has been handled, and reads
// the header of a handled envelope no more (Hook.Arrive; a message
// forwarded is stamped anew, one kept, as a broadcast for an element to
// come, is handed on without its protocol). The copies a survivor
// replays to a recovering PE are not counted: no chunk is taken back
// while this PE replays to one (Checkpoint). A restarted PE's records are
// new: an old incarnation's envelopes still in flight keep theirs.
type sentRecords struct {
	chunks [][]hopMsg // in use, oldest first; the last one is being filled
	used   int        // records handed out of the last chunk
	free   [][]hopMsg
	first  uint64 // the number of chunks[0]'s first record
	next   uint64 // the number of the next record
	reused uint64 // records in the chunks handed out again
}

// recordChunk is how many records fill a chunk of 16 KiB (an allocator
// size class).
const recordChunk = 16384 / int(unsafe.Sizeof(hopMsg{}))

// take is the next record.
func (r *sentRecords) take() *hopMsg {
	if len(r.chunks) == 0 || r.used == recordChunk {
		var c []hopMsg
		if n := len(r.free); n > 0 {
			c, r.free = r.free[n-1], r.free[:n-1]
			r.reused += uint64(recordChunk)
		} else {
			c = make([]hopMsg, recordChunk)
		}
		r.chunks = append(r.chunks, c)
		r.used = 0
	}
	hm := &r.chunks[len(r.chunks)-1][r.used]
	r.used++
	r.next++
	return hm
}

// release takes back the chunks all of whose records were handed out
// before record upTo (the one being filled stays).
func (r *sentRecords) release(upTo uint64) {
	n := 0
	for n < len(r.chunks)-1 && r.first+uint64(recordChunk) <= upTo {
		clear(r.chunks[n]) // the payloads they point at may go
		r.free = append(r.free, r.chunks[n])
		r.first += uint64(recordChunk)
		n++
	}
	r.chunks = append(r.chunks[:0], r.chunks[n:]...)
}
