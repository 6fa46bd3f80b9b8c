package ftlayer

import (
	"slices"

	"github.com/charmgo/charmgo/ftlayer/mcml"
)

// Memory-constrained message logging (MCML, papers/002 §IV): a PE whose
// sender-based log would pass its limit at a send stops logging on one of
// its channels (the destination mcml's Strategy chooses) and drops what it
// logged for it. Its later messages on that channel are not logged; the
// determinants of their receptions still are. A failure of the channel's
// receiver then rolls this PE back with it (it re-sends those messages by
// re-executing), and every PE that stopped logging to a PE rolling back
// rolls back too: the rollback set (mcml.RollbackSet), which the launcher
// computes from what the PEs told it (ChannelGate) and announces with the
// failure. Logging starts again on every channel at the next coordinated
// checkpoint.
//
// What counts against the limit: everything the PE's log holds (the
// statistics' Log, every kind). What a channel is: a point-to-point hop
// and, under SCMEL, a hop of a collective (logged like one), to one PE.
// Under CAMEL a multicast's one copy at its root, the partials (released
// at their reduction's acknowledgement) and the results a keeper holds
// serve a group, not one channel: they count but are never dropped, so
// a limit below what they take cannot be met (the sends over it are
// counted). A PE of the rollback set that did not fail hands back the
// results it kept for a fellow root, re-places its own results' copies
// as a root, and tells its fellows which reductions it knew complete
// (Kept).
//
// A PE rolled back with a failed one did not fail: it keeps the
// determinants it holds for others and knows its own receptions' order
// (the paper's assumption, Fig. 5), which Keep hands its next
// incarnation. Only the failed PEs lose their memory, as under SCMEL.

// LogLimit configures MCML on one PE.
type LogLimit struct {
	// Bytes is the most the PE's log may hold (0: no limit).
	Bytes uint64
	// Strategy chooses the channel to stop logging on.
	Strategy mcml.Strategy
	// Gate is asked before a channel stops logging, and told when every
	// channel logs again.
	Gate ChannelGate
	// Exempt: this PE logs every channel whatever its log holds (PE 0
	// and its witness in a run that balances load: see Hook.Witness).
	Exempt bool
}

// ChannelGate is the launcher's side of MCML: it keeps which channels
// each PE stopped logging on since its last checkpoint, to compute a
// failure's rollback set.
type ChannelGate interface {
	// StopLogging asks whether PE me may stop logging its messages to
	// dst, and records it if so. It says no while a failure's rollback
	// set is being recovered: the set was computed from the channels as
	// they were.
	StopLogging(me, dst int) bool
	// LoggingOn: PE me logs every channel again (a checkpoint committed).
	LoggingOn(me int)
}

// HookConfig is what a protocol's hooks need besides the job's shape.
type HookConfig struct {
	// Teams groups the PEs (the zero Teams unless the protocol has Teams).
	Teams Teams
	// Limit bounds each PE's log (zero: no limit).
	Limit LogLimit
	// Events is the event logger (the pessimist protocol's).
	Events EventLog
}

// logLimit is one PE's MCML state.
type logLimit struct {
	LogLimit
	ch  *mcml.Channels
	off int // channels not logged now
	// own: this PE's determinants since the checkpoint, in reception
	// order: a rollback of this PE that is not a failure replays them
	own []Det
}

func newLogLimit(l LogLimit, me, n int) *logLimit {
	if l.Bytes == 0 {
		return nil
	}
	if l.Strategy == nil {
		l.Strategy = mcml.Heaviest{}
	}
	return &logLimit{LogLimit: l, ch: mcml.NewChannels(me, n)}
}

// onChannel reports whether m travels on a channel MCML may stop logging
// on: one hop to another PE, not a collective's shared copy.
func (s *Causal) onChannel(m *Message) bool {
	return m.Recver >= 0 && int(m.Recver) < s.n && m.Recver != s.me && !(s.camel && m.Kind == KindReduction)
}

// logSend logs m, sent to PE to, unless its channel is not logged; past
// the limit it first stops logging on channels until the log is back
// under it (Algorithm 1, lines 7–12).
func (s *Causal) logSend(m *Message, to int32) {
	l := s.lim
	on := s.onChannel(m)
	if on && l.ch.Off[to] {
		s.countUnlogged(m)
		return
	}
	own := int32(-1)
	if on {
		own = to
	}
	s.fitLimit(m.bytes(), own)
	if on && l.ch.Off[to] {
		s.countUnlogged(m)
		return
	}
	s.log(m)
}

func (s *Causal) countUnlogged(m *Message) {
	s.stats.Unlogged.TotalMsgs++
	s.stats.Unlogged.TotalBytes += m.bytes()
}

// fitLimit stops logging on channels until the log and add fit the
// limit, or no channel holds anything, or stopping must wait: while this
// PE or another recovers (the rollback set being recovered was computed
// from the channels as they were) and while a checkpoint is being taken
// (its commit forgets the channels turned off before it). When no
// channel holds anything, the message's own (to; -1: it is on none)
// stops logging: it alone would pass the limit.
func (s *Causal) fitLimit(add uint64, to int32) {
	l := s.lim
	for s.logBytes+add > l.Bytes {
		if l.Exempt || s.recovering || len(s.failing) > 0 || s.sealed {
			s.stats.OverLimit++
			return
		}
		dst, ok := l.Strategy.Choose(l.ch)
		if !ok && to >= 0 && !l.ch.Off[to] {
			dst, ok = int(to), true
		}
		if !ok {
			s.stats.OverLimit++ // only collectives' shared copies left
			return
		}
		if l.Gate != nil && !l.Gate.StopLogging(int(s.me), dst) {
			s.stats.OverLimit++
			return
		}
		s.stopLogging(int32(dst))
		if int32(dst) == to {
			return // the message goes unlogged
		}
	}
}

// stopLogging is TURNCHANNELLOGOFF for the channel to dst: its logged
// messages are dropped and its next ones are not logged.
func (s *Causal) stopLogging(dst int32) {
	l := s.lim
	keep := s.msgLog[:0]
	for _, e := range s.msgLog {
		if m := e.m; !m.released && m.Recver == dst && s.onChannel(m) {
			s.countLog(m, false)
			continue
		}
		keep = append(keep, e)
	}
	clear(s.msgLog[len(keep):])
	s.msgLog = keep
	l.ch.Off[dst] = true
	l.off++
	s.stats.ChannelsOff++
}

// countChannel keeps each channel's logged bytes (countLog's part).
func (s *Causal) countChannel(m *Message, in bool) {
	if !s.onChannel(m) {
		return
	}
	c := &s.lim.ch.Logged[m.Recver]
	if in {
		*c += m.bytes()
	} else {
		*c -= min(*c, m.bytes())
	}
}

// loggingOnAgain: a checkpoint's snapshot was taken; what is sent from
// now on may be needed by a rollback to it, so every channel logs.
func (l *logLimit) loggingOnAgain() {
	clear(l.ch.Off)
	l.off = 0
}

// ChannelsOff lists the PEs this PE does not log its messages to now.
func (s *Causal) ChannelsOff() []int32 {
	if s.lim == nil || s.lim.off == 0 {
		return nil
	}
	var out []int32
	for d, off := range s.lim.ch.Off {
		if off {
			out = append(out, int32(d))
		}
	}
	return out
}

// Kept is what a PE that rolls back without failing takes into its next
// incarnation (see Hook.Keep): the determinants it holds for others and
// its own since the checkpoint.
//
// Under CAMEL also what its re-execution does not make again: the
// reduction results it keeps for roots (as a keeper: their partials
// were released, and a root rolled back with it gets them from here),
// its own results' copies (as a root: its keeper may have failed with
// it), and which reductions of each group it knew complete (a fellow
// waiting for a partial that was released learns it needs none).
type Kept struct {
	detLog []Det
	own    []Det

	results, ownResults []*Message
	done                []keptDone
}

// keptDone is what a PE kept of a group's completed reductions, with
// what its next incarnation cannot ask its trees yet (it restarts before
// its snapshot sets them up): the group's root, whether this PE roots or
// keeps it, and its members.
type keptDone struct {
	g, num           uint64
	root, keeper     int32
	asRoot, asKeeper bool
	members          []bool
}

// Keep is this PE's Kept.
func (s *Causal) Keep() *Kept {
	k := &Kept{detLog: s.detLog}
	if s.lim != nil {
		k.own = s.lim.own
	}
	if s.camel {
		for _, e := range s.msgLog {
			if isResult(e.m) && !e.m.released {
				k.results = append(k.results, e.m)
			}
		}
		for _, e := range s.kept {
			if isResult(e.m) {
				k.ownResults = append(k.ownResults, e.m)
			}
		}
		for _, g := range s.coll.sortedGroups() {
			st := s.coll.state[g]
			if st.done == 0 {
				continue
			}
			d := keptDone{g: g, num: st.done, root: s.coll.t.Root(g), keeper: s.keeper(g), asRoot: s.coll.isRoot(g), asKeeper: s.keeper(g) == s.me,
				members: make([]bool, s.n)}
			for p := range s.n {
				d.members[p] = s.coll.t.Has(g, int32(p))
			}
			k.done = append(k.done, d)
		}
	}
	return k
}

// Rollback says which PEs a failure rolls back (Set) and which of them
// failed (Failed); the others take their Kept along (Kept, for this PE if
// it is one of them).
type Rollback struct {
	Set, Failed []int32
	Kept        *Kept
}

// rollbackSet is a restarted PE's view of its failure.
type rollbackSet struct {
	in, failed []bool
	told       []bool // fellows this PE sent its determinants to
	keeps      bool   // this PE did not fail
	kept       *Kept  // what it kept (CAMEL: its fellows' results)
	// own: the determinants of the receptions this PE replays from its
	// own order, which it hands a PE outside the set to store before its
	// recovery may end (asked: sent; storing: not yet answered; see
	// storeOwnOrder)
	own            []Det
	asked, storing bool
}

// storedOrder is what a PE rolled back without failing handed PE at to
// store: the determinants of its own order (see storeOwnOrder).
type storedOrder struct {
	at   int32
	dets []Det
}

// storeOwnOrder hands the order this PE, rolled back without failing,
// replays to a PE outside the rollback, once. A PE that failed with this
// rollback may have held (and acknowledged) some of those determinants,
// and nothing else holds them: the survivors stored this PE's later
// determinants, so they take its own lists, which its re-execution sends
// again, as known; the copies its re-execution sends are dropped, and
// those in flight when it fails again are an old incarnation's. Its
// next failure then found a gap under receptions the survivors' state
// depends on (found by ftsim). The recovery ends only once they are
// stored (receiveStore), and a failure of the PE holding them sends them
// again to its new incarnation (storeAgain), whose re-execution does not
// bring them back as it brings back piggybacked ones.
func (s *Causal) storeOwnOrder(r *rollbackSet) []Action {
	if r.asked || len(r.own) == 0 {
		return nil
	}
	for i := range int32(s.n) {
		if p := (s.me + 1 + i) % int32(s.n); !r.in[p] && !s.teams.Same(p, s.me) {
			r.asked, r.storing = true, true
			s.ownStored = &storedOrder{at: p, dets: r.own}
			s.noteCarried(r.own)
			return []Action{{Kind: ActSend, Packet: Packet{Kind: PktStore, From: s.me, To: p, Dets: r.own}}}
		}
	}
	return nil // (every PE outside this PE's team rolls back: nothing depends on the order)
}

// receiveStore is PktStore: with Dets, another PE's order to store and
// answer; without, the answer to this PE's, which lets its recovery end.
func (s *Causal) receiveStore(p *Packet, out []Action) []Action {
	if len(p.Dets) > 0 {
		// appended whole: what this PE may hold of it already is held
		// twice, which is harmless
		for _, d := range p.Dets {
			if d.Recver == p.From {
				s.detLog = append(s.detLog, d)
			}
		}
		return append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktStore, From: s.me, To: p.From}})
	}
	if r := s.rb; r != nil && r.storing && s.ownStored != nil && p.From == s.ownStored.at {
		r.storing = false
		s.removeAcked(r.own)
		out = s.endRecovery(out)
	}
	return out
}

// storeAgain sends the order this PE had PE y store to y's new
// incarnation.
func (s *Causal) storeAgain(y int32) []Action {
	if o := s.ownStored; o != nil && o.at == y && len(o.dets) > 0 {
		return []Action{{Kind: ActSend, Packet: Packet{Kind: PktStore, From: s.me, To: y, Dets: o.dets}}}
	}
	return nil
}

// ownStoredCovered drops, of the order this PE had stored, what a
// checkpoint at reception rsn covers.
func (s *Causal) ownStoredCovered(rsn uint64) {
	o := s.ownStored
	if o == nil {
		return
	}
	i := 0
	for i < len(o.dets) && o.dets[i].RSN <= rsn {
		i++
	}
	if o.dets = o.dets[i:]; len(o.dets) == 0 {
		s.ownStored = nil
	}
}

func (r *rollbackSet) has(p int32) bool { return r != nil && int(p) < len(r.in) && p >= 0 && r.in[p] }

// withRollback makes s, restarted, part of rollback rb: it counts the
// answers of the PEs outside the set and of the fellows that keep their
// determinants, and a fellow that did not fail replays its own
// receptions in their order.
func (s *Causal) withRollback(rb Rollback) {
	if len(rb.Set) == 0 {
		return
	}
	r := &rollbackSet{in: make([]bool, s.n), failed: make([]bool, s.n), told: make([]bool, s.n), keeps: rb.Kept != nil}
	for _, p := range rb.Set {
		if p >= 0 && int(p) < s.n {
			r.in[p] = true
		}
	}
	for _, p := range rb.Failed {
		if p >= 0 && int(p) < s.n {
			r.failed[p] = true
		}
	}
	size, keepers := 0, 0
	for p := range s.n {
		if r.in[p] {
			size++
			if !r.failed[p] && int32(p) != s.me {
				keepers++
			}
		}
	}
	s.rb = r
	s.replayFrom = s.n - size
	s.collectFrom = s.replayFrom + keepers
	if k := rb.Kept; k != nil {
		r.kept = k
		// The determinants it held for others are kept, to hand to
		// failed PEs, but are not taken as stored: each is stored again
		// when a message brings it again. As a root, a partial's copy
		// (and so the kept result) carries only what is new to it, and
		// the message that brought these first is gone with the old
		// incarnation: the root's next failure found a child's
		// reception's determinant nowhere, and the child, failing after
		// it, delivered a multicast ahead of a reception the multicast
		// depended on (found by ftsim).
		s.detLog, s.inherited = k.detLog, len(k.detLog)
		s.fwdSeen = nil
		clear(s.detTop)
		for _, d := range k.own {
			if d.RSN > s.rsn {
				s.recorded[msgKey{d.Sender, d.Group, d.SSN}] = d.RSN
				s.lastRecorded = max(s.lastRecorded, d.RSN)
				r.own = append(r.own, d)
			}
		}
		// the results it keeps for roots, logged again: no partial
		// brings them back (their senders released them), and a root
		// failing later, alone, gets them from this log (found by ftsim:
		// a keeper rolled back with its root, then the root's team
		// failed, and the root waited for partials of a reduction whose
		// result had died with the keeper's first incarnation)
		for _, m := range k.results {
			if st, err := s.coll.group(m.Group); err == nil && !st.kept.has(m.Num) {
				st.kept.add(m.Num)
				s.log(m)
			}
		}
		// its own results, in the turn of the partials they stand for:
		// its keeper may be rolling back with it (a survivor keeper
		// replays them too: placing one twice is harmless)
		for _, m := range k.ownResults {
			if _, err := s.coll.group(m.Group); err == nil {
				s.hold(m)
			}
		}
	}
}

// toFellowsStraight sends multicast m, which this root makes again as it
// re-executes in a rollback, straight to the PEs of the rollback in its
// group (failed or not) whose parent in the group's tree rolled back
// without failing, and to those that did not fail whose parent rolled
// back, besides down the tree. Such a parent delivers, and
// forwards, the multicast only in the turn it recorded, which may come
// after a message the PE below sends only once it has the multicast
// (found by ftsim: a cycle of waits; first with a failed PE below, then
// with one rolled back without failing, which replays its own recorded
// order, where the multicast came straight from the root in the run it
// recorded). The same for a PE of the rollback that did not fail, below
// a parent that failed with it: it replays its own order, from an
// earlier run, in which the parent forwarded the multicast before a
// reception the parent's new order now puts first — and that reception
// is of a message the PE below sends only after the multicast (found by
// ftsim: a parent whose failure in an earlier rollback had moved the
// multicast after that reception, the copy it forwarded then dropped as
// a duplicate below). A survivor root replays its multicasts to a failed
// PE straight that way (PeerFailed); a root rolled back has none logged.
// A copy that also comes down the tree is a duplicate there. (Sent to
// every member of the set, failed ones below failed parents too, the
// copies stalled other random runs.)
func (s *Causal) toFellowsStraight(m *Message) {
	for y := range int32(s.n) {
		if p := s.coll.t.Parent(m.Group, y); y != s.me && s.rb.has(y) && s.coll.t.Has(m.Group, y) && p != s.me && p >= 0 && s.rb.has(p) && (!s.rb.failed[p] || !s.rb.failed[y]) {
			s.direct = append(s.direct, Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: y, Msg: m}})
			s.stats.Replayed++
		}
	}
}

// TakeDirect returns the sends a hop made besides itself (see
// toFellowsStraight), to be carried out after it.
func (s *Causal) TakeDirect() []Action {
	out := s.direct
	s.direct = nil
	return out
}

// rollsBackWith reports whether PE a rolls back with y in the failure
// this PE recovers from or replays to (its team, or the rollback set).
func (s *Causal) rollsBackWith(a, y int32) bool {
	switch {
	case s.teams.Same(a, y):
		return true
	case s.rb != nil:
		return s.rb.has(a) && s.rb.has(y)
	case s.failSet != nil:
		return slices.Contains(s.failSet, a) && slices.Contains(s.failSet, y)
	}
	return false
}

// fellowFailed is PeerFailed for y, rolled back with this restarted PE:
// one that did not fail sends y the determinants it holds for it.
func (s *Causal) fellowFailed(y int32, inc uint32) []Action {
	s.incMap[y] = max(s.incMap[y], inc)
	if s.relay != nil {
		s.relay[y], s.relayUp[y], s.carryStale = nil, nil, true
	}
	r := s.rb
	if !r.keeps || r.told[y] {
		return nil
	}
	r.told[y] = true
	rec := Packet{Kind: PktRecovery, From: s.me, To: y, Inc: s.inc}
	for _, d := range s.detLog {
		if d.Recver == y {
			rec.Dets = append(rec.Dets, d)
		}
	}
	out := []Action{{Kind: ActSend, Packet: rec}}
	out = append(out, s.storeOwnOrder(r)...)
	if !s.camel {
		return out
	}
	// which reductions of y's groups were complete: as their root, or as
	// the keeper of a root rolling back too (y may wait for a partial
	// its sender released)
	out[0].Packet.Done = s.fellowDone(y)
	// y failed keeping the results of groups this PE roots: they come
	// back from this PE's copies, in this incarnation's name (the old one
	// did not fail, and y knows only this one), as a survivor root's do
	// (PeerFailed). This PE told y, and its fellows, that those
	// reductions were complete (fellowDone): none of them sends a partial
	// again, and this PE may fail again before its re-execution hands y
	// the result anew (found by ftsim: the root's copy was on its way
	// when it failed, and the reduction's partials were nowhere).
	if r.failed[y] {
		// (the trees are not set up yet: what the PE kept says whose
		// keeper y is)
		for _, d := range r.kept.done {
			if !d.asRoot || d.keeper != y {
				continue
			}
			for _, m := range r.kept.ownResults {
				if m.Group == d.g {
					c := &hopMsg{Message: *m, env: *m.Env}
					c.Inc, c.Env = s.inc, &c.env
					c.env.FT = &c.FTHeader // (the envelope carries the header between processes)
					out[0].Packet.Relog = append(out[0].Packet.Relog, &c.Message)
				}
			}
		}
	}
	// the results this PE kept for y, a root: y's partials' senders
	// released them, and this PE's re-execution does not make them
	for _, m := range r.kept.results {
		if m.Sender == y {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: y, Msg: m}})
			s.stats.Replayed++
		}
	}
	return out
}

// fellowDone is the reductions of y's groups this PE, rolled back with y
// without failing, knew complete: as their keeper when their root rolls
// back too, or as their root when their keeper failed. Only a keeper's
// word is safe while it lives: a root knows a reduction complete before
// its keeper has the result (the copy may be on its way, and is dropped
// as the root's old incarnation's), and a fellow told so by the root
// sends no partial for it again, so the root's next failure found the
// result nowhere (found by ftsim). A keeper that failed knows nothing,
// and the root's copies reach it again as the root places them.
func (s *Causal) fellowDone(y int32) []Reduced {
	var done []Reduced
	for _, d := range s.rb.kept.done {
		keeperFailed := d.keeper >= 0 && int(d.keeper) < len(s.rb.failed) && s.rb.failed[d.keeper]
		if d.members[y] && (d.asRoot && keeperFailed || d.asKeeper && d.root != y && s.rollsBackWith(d.root, y)) {
			done = append(done, Reduced{d.g, d.num})
		}
	}
	return done
}

// sameFailure reports whether y rolls back with the PEs this survivor is
// replaying to.
func (s *Causal) sameFailure(y int32) bool {
	if len(s.failing) == 0 {
		return true
	}
	if s.failSet != nil {
		return slices.Contains(s.failSet, y)
	}
	return s.teams.Same(s.failing[0], y)
}

// KeptDone is, for a PE restarted in a rollback without having failed,
// the reductions of its groups it knew complete at their roots (CAMEL):
// it needs to contribute to none of them again, and may wait for no
// partial their senders released. Not those of the groups it roots: it
// delivers their results again, from its copies or its keeper's.
func (s *Causal) KeptDone() []Reduced {
	if s.rb == nil || s.rb.kept == nil {
		return nil
	}
	var out []Reduced
	for _, d := range s.rb.kept.done {
		if !d.asRoot { // a root gets its results back instead (withRollback)
			out = append(out, Reduced{d.g, d.num})
		}
	}
	return out
}
