package ftlayer

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

// msgKey names a reception in the recorded order: a message by its
// sender's ssn or, for a CAMEL reduction contribution at the root, by its
// group and reduction number.
type msgKey struct {
	sender int32
	group  uint64
	ssn    uint64
}

// window records which numbers of one sequence were received: every
// number up to contig, plus any later ones that overtook others (none on
// FIFO channels). It answers "received already?" without hashing.
type window struct {
	contig uint64
	extra  map[uint64]bool
}

func (w *window) has(n uint64) bool {
	return n <= w.contig || len(w.extra) > 0 && w.extra[n]
}

// settle marks every number up to the highest received as received: after
// a checkpoint the numbers missing below it will not come (they were
// covered before this PE's restart).
func (w *window) settle() {
	for n := range w.extra {
		w.contig = max(w.contig, n)
	}
	w.extra = nil
}

func (w *window) add(n uint64) {
	if n != w.contig+1 {
		if w.extra == nil {
			w.extra = map[uint64]bool{}
		}
		w.extra[n] = true
		return
	}
	w.contig++
	for len(w.extra) > 0 && w.extra[w.contig+1] {
		delete(w.extra, w.contig+1)
		w.contig++
	}
}

// channels is what a logging protocol knows of its PE's channels: each
// peer's incarnation, the numbers it gave what it sent on each channel,
// and the numbers it received on each (duplicates are dropped by them).
// Causal and Pessimist embed it.
type channels struct {
	incMap  []uint32
	sendCSN []uint64
	recv    []window
}

func newChannels(n int) channels {
	return channels{incMap: make([]uint32, n), sendCSN: make([]uint64, n), recv: make([]window, n)}
}

// restoreChannels takes the channels back to a checkpoint's counters.
func (c *channels) restoreChannels(ck Counters) {
	copy(c.incMap, ck.IncMap)
	copy(c.sendCSN, ck.SendCSN)
	for i := range c.recv {
		if i < len(ck.RecvCSN) {
			c.recv[i].contig = ck.RecvCSN[i]
		}
		if i < len(ck.RecvMore) {
			for _, csn := range ck.RecvMore[i] {
				c.recv[i].add(csn)
			}
		}
	}
}

// snapshotChannels fills a checkpoint's counters of the channels.
func (c *channels) snapshotChannels(ck *Counters) {
	n := len(c.recv)
	ck.IncMap, ck.SendCSN = slices.Clone(c.incMap), slices.Clone(c.sendCSN)
	ck.RecvCSN, ck.RecvMore = make([]uint64, n), make([][]uint64, n)
	for i := range c.recv {
		ck.RecvCSN[i] = c.recv[i].contig
		for csn := range c.recv[i].extra {
			ck.RecvMore[i] = append(ck.RecvMore[i], csn)
		}
		slices.Sort(ck.RecvMore[i])
	}
}

// Counters is the part of a PE's protocol state a coordinated checkpoint
// keeps (the logs are empty right after one).
type Counters struct {
	SSN, RSN uint64
	Inc      uint32
	IncMap   []uint32
	SendCSN  []uint64   // per destination: last channel sequence number sent
	RecvCSN  []uint64   // per sender: all received up to this
	RecvMore [][]uint64 // per sender: received beyond it (out of order)
	Groups   []GroupCounters
}

// logEntry is a logged message; seq orders the log so a checkpoint can
// drop exactly what its snapshot covers.
type logEntry struct {
	seq uint64
	m   *Message
}

// Causal is one PE's causal message logging: SCMEL (CAMEL paper,
// Algorithm 1) or, collective-aware, CAMEL (Algorithms 2–3). Section
// numbers in comments refer to that paper.
//
// Besides the paper's ssn (per sender, over all its messages),
// point-to-point messages carry a channel sequence number per (sender,
// receiver) and multicasts a number per group: receivers use them to
// recognise duplicates in O(1), and they survive checkpoints, so a
// duplicate from before a checkpoint is still recognised after it.
//
// The runtime drives it in hop mode (hops.go): its manager runs the
// trees, folds the reductions and sends every hop through SendHop. Four
// departures from Algorithms 2–3 as published, found by simulations (an
// earlier simulator of a whole-collective mode, since removed, failed the
// published version in about a third of its randomized runs) and by
// LeanMD's failure tests on 6+ PEs:
//
//   - A partial sent to an intermediate node is dropped from its sender's
//     log at the reduction's ack, so determinants that node stored from
//     it would die with the node, and their owner's later recovery would
//     miss them. An intermediate node passes them up with its own
//     partial instead, neither storing nor acknowledging them, and the
//     root stores them and acknowledges them to their owners; there they
//     are as safe as the root's own (in the kept result). A sender's
//     partial to an intermediate node carries only its determinants no
//     earlier partial took there (upDets), and a PE stores what reaches
//     it by several paths once each (storeDets). Carrying none left a
//     hole (LeanMD on 6 and 8 PEs: a PE two levels down failed after its
//     contribution was folded, nobody held its receptions' determinants,
//     its replay received them in another order, and a compute paired
//     one cell's positions of two steps).
//   - A root keeps, and hands back to a recovering keeper, the results of
//     its reductions (see Reduced): the children no longer hold the
//     partials (they were dropped at the ack), yet the root's own later
//     recovery needs them.
//   - A recovering PE defers completion notices (acks) until it has
//     recovered: its children keep what they sent until then.
//   - Old incarnations' multicasts are dropped like any old message (see
//     reforward for how a multicast still completes).
//
// Recovery ends only when every survivor's replay is in (PktReplayed):
// the determinants this PE stores for others come back with replayed
// messages, and a peer failing next must find them.
type Causal struct {
	me    int32
	n     int
	camel bool
	inc   uint32
	channels
	ssn  uint64
	rsn  uint64
	coll colls
	senderLog
	rx hopMsg // the record of the envelope ReceiveHop handles (see keep)
	// relLog: the partials in msgLog that an acknowledgement releases
	// (releases), by group, in the order sent: a release takes a prefix
	// instead of scanning the whole log. Released entries stay in msgLog,
	// marked, until relDead says half of it is released (compactLog).
	relLog  map[uint64][]*Message
	relDead int
	// upKept (CAMEL with teams): the determinants of the partials this
	// PE sent to a teammate, unlogged, by group, in the order sent, until
	// their reduction's acknowledgement: a logged partial brings its
	// determinants back to a recovering PE (PeerFailed), and these must
	// too, until the root holds them.
	upKept map[uint64][]upSent
	kept   []logEntry // CAMEL root: copies of its children's contributions
	copies LogStats
	detLog []Det // other PEs' determinants, stored for them
	// inherited: how many of detLog's first entries a PE rolled back
	// without failing kept from its previous incarnation (see
	// withRollback); they are stored again when they come again
	inherited int
	// passUp (CAMEL in hop mode, an inner node): determinants children's
	// partials brought, to go up with this PE's next partial, whatever
	// its group
	passUp []Det
	// fwdSeen: the determinants stored for owners other than the message's
	// sender since the checkpoint (see storeDets)
	fwdSeen map[Det]struct{}
	// sentTo (CAMEL in hop mode): per intermediate node, the highest own
	// rsn a partial to it carried (see upDets)
	sentTo []uint64
	detBuf []Det    // own determinants not yet acknowledged
	direct []Action // sends a hop made besides itself (TakeDirect)
	out    []Action
	// Acknowledgements held back to go in batches (hop mode, see
	// ackDets): per owner, the determinants stored for it since its last
	// batch; the owners that have some, in the order they got them; how
	// many messages' acknowledgements wait.
	ackHeld   [][]Det
	ackSorted []bool // ackHeld[to] is to's own list: in rsn order
	ackOwners []int32
	ackWait   int
	batchAcks bool

	// recovery of this PE (§2, procedure RECEIVEDETS)
	recovering   bool
	recorded     map[msgKey]uint64 // the recorded reception order
	detsFrom     []bool
	detsIn       int
	replayedIn   int // peers whose replay is complete
	replayedFrom []bool
	// suppliedBy: the peers that sent this PE, recovering, everything its
	// recovery needs from them (determinants and replay), since the last
	// TakeSupplied
	suppliedBy   []int32
	lastRecorded uint64
	// carriedTop is the last of its own receptions whose determinant
	// this incarnation sent on (piggybacked, passed up or stored): an
	// acknowledgement of a later one comes from a PE that stored it from
	// an earlier incarnation's message, which no log holds any more (see
	// removeAcked)
	carriedTop uint64
	byRound    map[[2]uint64][]recordedAt // recorded receptions of partials, by group and number (placeResult)
	held       []*Message                 // messages waiting for their turn
	heldRec    map[uint64]*Message        // of them, those with a recorded reception, by its rsn
	deferred   []Reduced                  // CAMEL: completions heard while recovering

	failing  []int32      // the peers recovering (one team's)
	lastRoot *Message     // hop mode, CAMEL: the multicast this root is sending
	detTop   []uint64     // per owner: the highest rsn in detLog
	detSeen  map[Det]bool // while recovering: what detLog holds
	stats    Stats
	mark     checkpointMark
	// sealed: a snapshot was taken and its commit has not come. Messages
	// are held meanwhile, because where the application resumes among its
	// receptions is not recorded: a restart from the snapshot resumes
	// first, so the first run must too.
	sealed bool

	// Teams (team-based logging): messages to teammates are not logged,
	// and this PE's determinants are safe only once a PE of another team
	// holds them. Until then they travel with every message this PE
	// sends, its teammates' too: relay[t] is what teammate t's last
	// message carried (less this PE's own), which this PE passes on, so
	// that whatever leaves the team carries the determinants of
	// everything it depends on inside the team. carry is detBuf and the
	// relays, joined (rebuilt when carryStale). Under CAMEL some lists
	// are parts of their sender's set (a partial's, a forwarded
	// multicast's) or reach this PE from another team (passed up a
	// reduction tree): their teammates' determinants join relayUp, by
	// owner, in rsn order, each once, until the owner's own list shows
	// them safe (pruneUp).
	teams      Teams
	relay      [][]Det
	relayUp    [][]Det
	safeTop    []uint64 // per teammate: its receptions up to this rsn are safe (FTHeader.Safe)
	carry      []Det
	rel        []Det // of carry, the teammates' part (relayedDets)
	carryStale bool
	notLogged  [numKinds]LogStats // messages to teammates
	// volume: the payload bytes this PE sent each PE since TakeVolume
	// (the row of the communication matrix teams are chosen from)
	volume []uint64

	// lim: MCML's log limit (nil: none; see limit.go)
	lim *logLimit
	// rb: the rollback this incarnation recovers in (nil: none, or a
	// team's); collectFrom and replayFrom: how many PEs send it their
	// determinants and replay to it
	rb                      *rollbackSet
	collectFrom, replayFrom int
	// failSet: the PEs rolling back with those in failing (nil: their
	// team)
	failSet []int32
	// completed (a restarted incarnation): the reductions this PE heard
	// were complete since the host last took them (TakeCompleted)
	completed []Reduced
	// ownStored: the determinants of its own order a rollback made this
	// PE hand another to store (see storeOwnOrder), until a checkpoint
	// covers them
	ownStored *storedOrder
}

// upSent is the determinants an unlogged partial carried (see upKept).
type upSent struct {
	num, seq uint64
	dets     []Det
}

// checkpointMark is what a checkpoint's snapshot covers: messages sent and
// received up to it, determinants stored before it.
type checkpointMark struct {
	logSeq, rsn uint64
	detLog      int
}

func newCausal(me int32, n int, t Trees, camel bool, lim LogLimit) *Causal {
	return &Causal{me: me, n: n, camel: camel, channels: newChannels(n), detTop: make([]uint64, n),
		coll: colls{me: me, t: t, state: map[uint64]*groupState{}}, batchAcks: true,
		lim: newLogLimit(lim, int(me), n)}
}

// withTeams puts s's PE in teams (see Causal.teams).
func (s *Causal) withTeams(t Teams) *Causal {
	s.teams, s.relay, s.relayUp, s.safeTop, s.carryStale = Teams{}, nil, nil, nil, true
	if t.On() {
		s.teams, s.relay, s.relayUp, s.safeTop = t, make([][]Det, s.n), make([][]Det, s.n), make([]uint64, s.n)
	}
	return s
}

// Regroup puts this PE in teams t from now on: right after a
// checkpoint's commit (Checkpoint), when the logs hold only what came
// after the snapshot, none of it sent yet by this PE (it was sealed) and
// what others sent it after their own commit, under t already.
func (s *Causal) Regroup(t Teams) { s.withTeams(t) }

// TakeVolume returns the payload bytes this PE sent each PE since the
// last call (nil: none), and starts counting again.
func (s *Causal) TakeVolume() []uint64 {
	v := s.volume
	s.volume = nil
	return v
}

// Witness is the first PE after this one (cyclically) outside its team:
// it never rolls back with this PE (see Hook.Witness); -1 if there is
// none.
func (s *Causal) Witness() int { return s.teams.WitnessOf(s.me, s.n) }

// outside is the number of PEs in other teams than this one's: those a
// recovery hears from.
func (s *Causal) outside() int { return s.n - s.teams.Size(s.me) }

func restartCausal(s *Causal, ck Counters, inc uint32) *Causal {
	s.ssn, s.rsn, s.inc = ck.SSN, ck.RSN, inc
	s.restoreChannels(ck)
	s.coll.restore(ck.Groups)
	s.incMap[s.me] = inc
	s.recovering = s.n > 1
	s.recorded = map[msgKey]uint64{}
	s.detsFrom, s.replayedFrom = make([]bool, s.n), make([]bool, s.n)
	s.lastRecorded = ck.RSN
	s.stats.RolledBack = 1
	s.collectFrom, s.replayFrom = s.outside(), s.outside()
	return s
}

// Snapshot is the protocol state a checkpoint saves.
func (s *Causal) Snapshot() Counters {
	c := Counters{SSN: s.ssn, RSN: s.rsn, Inc: s.inc, Groups: s.coll.snapshot()}
	s.snapshotChannels(&c)
	return c
}

// Recovering reports whether this PE is still replaying.
func (s *Causal) Recovering() bool { return s.recovering }

// TakeSupplied returns the peers that, since the last call, sent this PE,
// recovering, everything its recovery needs from them: their
// determinants (with the results they keep for it) and their replay.
// A PE rolled back without failing, under a log limit, names none: it
// waits besides for a PE outside the rollback to store its order
// (endRecovery).
func (s *Causal) TakeSupplied() []int32 {
	out := s.suppliedBy
	s.suppliedBy = nil
	return out
}

// peerSupplied notes that peer y's determinants or replay came, and
// names y in TakeSupplied once both did.
func (s *Causal) peerSupplied(y int32) {
	if (s.rb == nil || !s.rb.keeps) && s.detsFrom[y] && s.replayedFrom[y] {
		s.suppliedBy = append(s.suppliedBy, y)
	}
}

func (s *Causal) collecting() bool { return s.recovering && s.detsIn < s.collectFrom }

// Phase names where this PE's recovery stands: "collecting" determinants,
// "replaying" logged messages, or "" when it is not recovering.
func (s *Causal) Phase() string {
	switch {
	case !s.recovering:
		return ""
	case s.collecting():
		return "collecting"
	}
	return "replaying"
}

// Stats reports the protocol's counters.
func (s *Causal) Stats() Stats {
	st := s.stats
	st.Log = s.logged
	st.RootCopies = s.copies
	st.NotLogged = s.notLogged
	return st
}

func (s *Causal) log(m *Message) {
	s.logSeq++
	s.msgLog = append(s.msgLog, logEntry{s.logSeq, m})
	s.countLog(m, true)
	if s.releases(m) {
		if s.relLog == nil {
			s.relLog = map[uint64][]*Message{}
		}
		s.relLog[m.Group] = append(s.relLog[m.Group], m)
	}
}

// senderLog is a PE's sender-based log: what it sent to other PEs since
// its checkpoint, in order, and its figures by kind. Causal and
// Pessimist embed it.
type senderLog struct {
	msgLog []logEntry
	logSeq uint64
	logged [numKinds]LogStats
	// logBytes: what the log holds now, every kind (Stats.PeakTotal)
	logBytes uint64
}

// tally counts m into the log's figures (in) or out of them, and keeps
// the most the log held at once in *peak.
func (l *senderLog) tally(m *Message, in bool, peak *uint64) {
	count(&l.logged[m.Kind], m, in)
	if in {
		l.logBytes += m.bytes()
		*peak = max(*peak, l.logBytes)
	} else {
		l.logBytes -= min(l.logBytes, m.bytes())
	}
}

func (s *Causal) countLog(m *Message, in bool) {
	s.tally(m, in, &s.stats.PeakTotal)
	if s.lim != nil {
		s.countChannel(m, in)
	}
}

func count(l *LogStats, m *Message, in bool) {
	b := m.bytes()
	if in {
		l.Msgs++
		l.Bytes += b
		l.TotalMsgs++
		l.TotalBytes += b
		l.PeakBytes = max(l.PeakBytes, l.Bytes)
		return
	}
	l.Msgs--
	l.Bytes -= b
}

// piggyback returns the determinants to carry: the unacknowledged ones,
// shared with detBuf (which is only ever appended to or replaced, never
// overwritten in place).
func (s *Causal) piggyback() []Det {
	s.noteCarried(s.detBuf)
	if s.relay != nil {
		return s.carried()
	}
	if len(s.detBuf) == 0 {
		return nil
	}
	s.stats.DetsPiggybacked += uint64(len(s.detBuf))
	return s.detBuf[:len(s.detBuf):len(s.detBuf)]
}

// noteCarried: own, a run of this PE's own determinants in rsn order,
// leaves on a message.
func (s *Causal) noteCarried(own []Det) {
	if len(own) > 0 {
		s.carriedTop = max(s.carriedTop, own[len(own)-1].RSN)
	}
}

// carried is piggyback with teams: this PE's determinants not yet held
// by another team, then those its teammates' last messages carried
// (each list is read only once made: a change makes a new one).
func (s *Causal) carried() []Det {
	s.refreshCarry()
	s.stats.DetsPiggybacked += uint64(len(s.carry))
	return s.carry
}

// refreshCarry rebuilds carry and rel if what they join changed.
func (s *Causal) refreshCarry() {
	if !s.carryStale {
		return
	}
	s.carryStale = false
	s.rel = s.relayedDets()
	switch n := len(s.detBuf) + len(s.rel); {
	case n == 0:
		s.carry = nil
	case len(s.rel) == 0:
		s.carry = s.detBuf[:n:n]
	default:
		s.carry = append(append(make([]Det, 0, n), s.detBuf...), s.rel...)
	}
}

// relayedDets is what this PE passes on of its teammates' determinants:
// the lists their last messages carried and relayUp, each determinant
// once, by owner and rsn (teammates pass each other's on, so the same
// determinant comes by many paths: joined as they come, the lists grew
// with every hop around a team). A new slice, read only once made.
func (s *Causal) relayedDets() []Det {
	n := 0
	for i, r := range s.relay {
		n += len(r) + len(s.relayUp[i])
	}
	if n == 0 {
		return nil
	}
	c := make([]Det, 0, n)
	for i, r := range s.relay {
		c = append(append(c, r...), s.relayUp[i]...)
	}
	c = slices.DeleteFunc(c, func(d Det) bool { return d.RSN <= s.safeTop[d.Recver] })
	slices.SortFunc(c, func(a, b Det) int {
		return cmp.Or(cmp.Compare(a.Recver, b.Recver), cmp.Compare(a.RSN, b.RSN))
	})
	return slices.Clip(slices.CompactFunc(c, func(a, b Det) bool { return a.Recver == b.Recver && a.RSN == b.RSN }))
}

// relayFrom keeps what teammate t's message carried of its team's
// determinants but this PE's own, to pass on (see Causal.teams). The
// list is t's whole unsafe set when it sent: it replaces the one before.
// (A list that holds anything else — this PE's own, a PE outside the
// team or outside the job — is copied without it.)
func (s *Causal) relayFrom(t int32, dets []Det) {
	var keep []Det
	for i, d := range dets {
		if !s.mate(d.Recver) {
			if keep == nil {
				keep = append(make([]Det, 0, len(dets)), dets[:i]...)
			}
			continue
		}
		if keep != nil {
			keep = append(keep, d)
		}
	}
	if keep == nil {
		keep = dets[:len(dets):len(dets)]
	}
	if len(keep) == 0 && len(s.relay[t]) == 0 {
		return
	}
	s.relay[t], s.carryStale = keep, true
}

// safeMark is what this PE's messages say of its receptions (FTHeader.Safe):
// those up to it are held in another team (acknowledged), or covered by
// a checkpoint; the oldest it still carries is the first not.
func (s *Causal) safeMark() uint64 {
	if len(s.detBuf) > 0 {
		return s.detBuf[0].RSN - 1
	}
	return s.rsn
}

// noteSafe: teammate t said its receptions up to safe are safe.
func (s *Causal) noteSafe(t int32, safe uint64) {
	if safe > s.safeTop[t] {
		s.safeTop[t], s.carryStale = safe, true
	}
}

// mate reports whether p is this PE's teammate (teams on, p not itself).
func (s *Causal) mate(p int32) bool { return s.relay != nil && p != s.me && s.teams.Same(p, s.me) }

// mergeUp adds to relayUp the determinants of this PE's teammates among
// dets (see Causal.teams).
func (s *Causal) mergeUp(dets []Det) {
	for _, d := range dets {
		if !s.mate(d.Recver) {
			continue
		}
		list := s.relayUp[d.Recver]
		i, found := slices.BinarySearchFunc(list, d.RSN, func(x Det, r uint64) int { return cmp.Compare(x.RSN, r) })
		if !found {
			s.relayUp[d.Recver], s.carryStale = slices.Insert(list, i, d), true
		}
	}
}

// pruneUp drops from relayUp teammate o's determinants up to the last of
// own, o's own list as it sent it (all it had not had made safe, in rsn
// order): those in it o still carries, the others are safe.
func (s *Causal) pruneUp(o int32, own []Det) {
	list := s.relayUp[o]
	if len(own) == 0 || len(list) == 0 {
		return
	}
	last := own[len(own)-1].RSN
	i := 0
	for i < len(list) && list[i].RSN <= last {
		i++
	}
	if i > 0 {
		s.relayUp[o], s.carryStale = slices.Delete(list, 0, i), true
	}
}

// fullList reports whether m's determinants are all its sender did not
// have made safe when it sent m (under SCMEL every message's; under
// CAMEL a point-to-point one's): then they replace what it sent before.
func (s *Causal) fullList(m *Message) bool {
	return !s.camel || m.Kind == KindP2P || m.Kind == KindSystem
}

// number fills in a hop-by-hop message: ssn, channel number,
// determinants. A message to itself carries none: this PE's own
// determinants are only safe once another PE holds them. Nor is it
// logged: its only reader would be this PE's own recovery, which loses
// the log and re-sends it anyway.
func (s *Causal) number(m *Message, kind MsgKind, g uint64, to int32, num uint64) {
	s.ssn++
	s.sendCSN[to]++
	*m = Message{Kind: kind, FTHeader: pe.FTHeader{Group: g, Sender: s.me, Recver: to, SSN: s.ssn, CSN: s.sendCSN[to], Num: num, Inc: s.inc}}
	if to != s.me {
		if s.relay != nil {
			m.Safe = s.safeMark()
		}
		m.Dets = s.piggyback()
		// the acknowledgements held for to ride along: in a
		// request-reply pattern, no acknowledgement packet at all
		m.Acks = s.takeAcks(to)
	}
}

// Receive handles one packet. Its result is valid until the next Receive.
func (s *Causal) Receive(p *Packet) ([]Action, error) {
	out := s.out[:0]
	defer func() { s.out = out[:0] }()
	switch p.Kind {
	case PktAck: // RECEIVEDETACK
		s.removeAcked(p.Dets)
		return nil, nil
	case PktRedAck: // RECEIVEMSGACK
		if s.recovering {
			// Not yet: this PE must regenerate, and log, its contributions
			// to reductions completed since the root answered its recovery
			// (the root's own later recovery needs them); its children
			// must keep theirs until then.
			s.deferred = append(s.deferred, p.Done...)
			return nil, nil
		}
		var err error
		out, err = s.reduced(p.Done, out)
		return out, err
	case PktRedResult:
		var err error
		out, err = s.keepResult(p, out)
		return out, err
	case PktRecovery: // RECEIVEDETS
		if !s.recovering || s.detsFrom[p.From] {
			return nil, nil // a late copy: this PE is done recovering
		}
		s.peerIncarnation(p.From, p.Inc)
		for _, d := range p.Dets {
			if d.Recver != s.me || d.RSN <= s.rsn {
				continue // not ours, or from before the checkpoint
			}
			s.recorded[msgKey{d.Sender, d.Group, d.SSN}] = d.RSN
			s.lastRecorded = max(s.lastRecorded, d.RSN)
		}
		for _, m := range p.Relog { // results it keeps, back from their root
			if _, err := s.storeResult(m); err != nil {
				return nil, err
			}
		}
		var err error
		if out, err = s.reduced(p.Done, out); err != nil {
			return nil, err
		}
		s.detsFrom[p.From] = true
		s.detsIn++
		s.peerSupplied(p.From)
		if !s.collecting() {
			s.sortHeld()
			out = s.endRecovery(out)
		}
		return out, nil
	case PktReplayed:
		if s.recovering && !s.replayedFrom[p.From] {
			s.replayedFrom[p.From] = true
			s.peerSupplied(p.From)
			s.replayedIn++
			s.stats.ReplaysFrom++
			s.stats.ReplayedIn += p.Replayed
			out = s.endRecovery(out)
		}
		return out, nil
	case PktStore:
		return s.receiveStore(p, out), nil
	case PktApp:
		var err error
		out, err = s.receiveMsg(p.Msg, out)
		return out, err
	}
	return nil, fmt.Errorf("PE %d: packet of unknown kind %d", s.me, p.Kind)
}

// reduced applies "reductions up to Num of Group are complete": drop the
// contributions logged for them (except those that went to the root),
// and pass the news down the tree.
func (s *Causal) reduced(done []Reduced, out []Action) ([]Action, error) {
	for _, r := range done {
		st, err := s.coll.group(r.Group)
		if err != nil {
			return out, err
		}
		if !st.complete(r.Num) {
			continue
		}
		if s.inc > 0 {
			s.completed = append(s.completed, r)
		}
		out = s.releasePartials(r, out) // CAMEL alone acknowledges reductions
		for _, c := range s.coll.t.Children(r.Group, s.me) {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktRedAck, From: s.me, To: c, Done: []Reduced{r}}})
		}
		if s.keepsResults() && s.keeper(r.Group) == s.me && st.kept.has(r.Num) {
			// the keeper has the result: the root's other children may
			// drop what they sent for it (not when it only heard the
			// reduction was complete, from a fellow of a rollback: its
			// copy of the result died with its failed incarnation, and
			// the root's next failure would find the partials nowhere;
			// found by ftsim)
			for _, c := range s.coll.t.Children(r.Group, s.coll.t.Root(r.Group)) {
				if c != s.me {
					out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktRedAck, From: s.me, To: c, Done: []Reduced{r}}})
				}
			}
		}
	}
	return out, nil
}

// releasePartials drops this PE's partials of group r.Group up to
// reduction r.Num, which its root completed and whose result a keeper
// holds, and releases them (ActRelease): nothing reads them again. Their
// parent folded them (or forwarded them, and dropped what it forwarded
// before it said so: acknowledgements go down the tree), and copies sent
// again to a recovering PE are the runtime's own. Only this PE's sends
// are in its log here: in this mode what it keeps of others' is results.
func (s *Causal) releasePartials(r Reduced, out []Action) []Action {
	if up := s.upKept[r.Group]; len(up) > 0 {
		k := 0
		for k < len(up) && up[k].num <= r.Num {
			k++
		}
		s.upKept[r.Group] = up[k:]
	}
	list := s.relLog[r.Group]
	i := 0
	for ; i < len(list) && list[i].Num <= r.Num; i++ {
		m := list[i]
		m.released = true
		s.countLog(m, false)
		out = append(out, Action{Kind: ActRelease, Msg: m})
	}
	if i == 0 {
		return out
	}
	clear(list[:i])
	if i == len(list) {
		delete(s.relLog, r.Group)
	} else {
		s.relLog[r.Group] = list[i:]
	}
	if s.relDead += i; 2*s.relDead > len(s.msgLog) {
		s.compactLog()
	}
	return out
}

// compactLog removes the released entries from msgLog, in order.
func (s *Causal) compactLog() {
	keep := s.msgLog[:0]
	for _, e := range s.msgLog {
		if !e.m.released {
			keep = append(keep, e)
		}
	}
	clear(s.msgLog[len(keep):])
	s.msgLog, s.relDead = keep, 0
}

// releases reports whether m, a message in this PE's log, is one that
// releasePartials may release.
func (s *Causal) releases(m *Message) bool {
	return s.keepsResults() && m.Kind == KindReduction && !isResult(m)
}

// removeAcked drops acknowledged determinants from detBuf. Both lists are
// in rsn order (determinants are made in reception order, and an ack
// returns a copy of what was piggybacked); usually the ack covers a
// prefix, which is dropped by reslicing.
func (s *Causal) removeAcked(acked []Det) {
	if len(acked) == 0 || len(s.detBuf) == 0 {
		return
	}
	if acked[len(acked)-1].RSN > s.carriedTop {
		// Not yet sent on by this incarnation: a PE stored it from an
		// earlier incarnation's message (the reception was made again
		// in the same order), which went with that incarnation's log.
		// Were it dropped here, that PE's failure would lose it for
		// good, and this PE's next recovery would wait for it forever
		// (found by ftsim: camel with teams, a team failing again after
		// the holder's team recovered). It goes on with the next message
		// instead, whose log entry brings it back to a holder that fails.
		k, _ := slices.BinarySearchFunc(acked, s.carriedTop+1, func(d Det, r uint64) int { return cmp.Compare(d.RSN, r) })
		if acked = acked[:k]; len(acked) == 0 {
			return
		}
	}
	s.carryStale = true
	if len(acked) <= len(s.detBuf) && (&acked[0] == &s.detBuf[0] || slices.Equal(acked, s.detBuf[:len(acked)])) {
		// (in one process the acknowledgement carries a prefix of the
		// very list this PE piggybacked: no need to compare it)
		s.stats.DetsAcked += uint64(len(acked))
		s.detBuf = s.detBuf[len(acked):]
		return
	}
	// Usually, too, an ack from one peer overlaps what another's already
	// removed: own determinants are numbered without gaps, so the part
	// left is found by its rsn, without a scan or a new slice.
	if first := acked[0].RSN; first <= s.detBuf[0].RSN {
		last := acked[len(acked)-1].RSN
		k, _ := slices.BinarySearchFunc(s.detBuf, last+1, func(d Det, r uint64) int { return cmp.Compare(d.RSN, r) })
		off := int(s.detBuf[0].RSN - first)
		if k == 0 {
			return // acknowledged already
		}
		if off+k <= len(acked) && slices.Equal(acked[off:off+k], s.detBuf[:k]) {
			s.stats.DetsAcked += uint64(k)
			s.detBuf = s.detBuf[k:]
			return
		}
	}
	// A new slice: messages in flight may share the old one.
	kept := make([]Det, 0, len(s.detBuf))
	j := 0
	for _, d := range s.detBuf {
		for j < len(acked) && acked[j].RSN < d.RSN {
			j++
		}
		if j < len(acked) && acked[j] == d {
			s.stats.DetsAcked++
			j++
			continue
		}
		kept = append(kept, d)
	}
	s.detBuf = kept
}

// duplicate is the old/duplicate half of OUTOFORDER. A CAMEL multicast
// from an old incarnation is not dropped: the multicast must complete,
// and the copies it still makes down the tree are the only ones some
// members will get (an intermediate node drops the re-execution's copy as
// a duplicate and forwards nothing).
func (s *Causal) duplicate(m *Message) (bool, error) {
	if m.Sender < 0 || int(m.Sender) >= s.n {
		return false, fmt.Errorf("PE %d: message from PE %d, outside 0..%d", s.me, m.Sender, s.n-1)
	}
	if m.Kind == KindMulticast || m.Kind == KindReduction {
		st, err := s.coll.group(m.Group) // validates it, and makes its state
		if err != nil {
			return false, err
		}
		if !s.camel {
			return m.Inc < s.incMap[m.Sender] || s.recv[m.Sender].has(m.CSN), nil
		}
		if m.Kind == KindMulticast {
			return st.mcastRecv.has(m.Num) || m.Inc < s.incMap[m.Sender], nil
		}
		if isResult(m) {
			return m.Num <= st.done, nil // its placement decided the rest
		}
		return m.Inc < s.incMap[m.Sender] || st.redFrom(m.Sender).has(m.Num), nil
	}
	return m.Inc < s.incMap[m.Sender] || s.recv[m.Sender].has(m.CSN), nil
}

// receiveMsg is RECEIVEMSG with OUTOFORDER: old and duplicate messages are
// dropped, messages ahead of the recorded order are held.
func (s *Causal) receiveMsg(m *Message, out []Action) ([]Action, error) {
	if isResult(m) && s.keepsResults() {
		return s.receiveResult(m, out)
	}
	dup, err := s.duplicate(m)
	if err != nil {
		return out, err
	}
	if dup {
		if s.camel && m.Kind == KindMulticast {
			out = s.reforward(m, out)
		}
		out = s.detsOfCopy(m, out)
		s.stats.Dropped++
		return out, nil
	}
	if len(m.Acks) > 0 && !s.recovering {
		// acknowledgements of this PE's determinants that rode along
		// (see number); a recovering PE gets them again once it runs
		s.removeAcked(m.Acks)
	}
	if s.mustWait(m) {
		s.stats.Held++
		s.hold(m)
		return out, nil
	}
	out = s.deliver(m, out)
	return s.endRecovery(out), nil
}

// reforward passes a duplicate multicast from the root's new incarnation
// down the tree when this PE delivered it from an older one. Old
// incarnations' multicasts are dropped (unlike Algorithm 2, which keeps
// them to make multicasts atomic: one delivered after the survivors
// reported their determinants may reflect receptions the new incarnation
// orders otherwise, an orphan a simulation found). Children that dropped
// this PE's earlier forward get the multicast this way, so it still
// completes.
func (s *Causal) reforward(m *Message, out []Action) []Action {
	st := s.coll.state[m.Group]
	if m.Inc != s.incMap[m.Sender] || !st.mcastRecv.has(m.Num) || st.deliveredInc(m.Num) >= m.Inc || st.reforwarded[m.Num] >= m.Inc {
		return out
	}
	if st.reforwarded == nil {
		st.reforwarded = map[uint64]uint32{}
	}
	st.reforwarded[m.Num] = m.Inc
	kids := s.coll.t.Children(m.Group, s.me)
	if len(kids) == 0 {
		return out
	}
	fwd := *m
	fwd.Dets, fwd.Recver = nil, -1
	for _, c := range kids {
		out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: c, Msg: &fwd}})
	}
	return out
}

// unordered: a CAMEL contribution reaching an intermediate node creates
// no determinant and needs no order (§3.2: its fold is not recorded).
func (s *Causal) unordered(m *Message) bool {
	return s.camel && m.Kind == KindReduction && !s.coll.isRoot(m.Group)
}

func (s *Causal) key(m *Message) msgKey {
	if s.camel && m.Kind == KindReduction {
		return msgKey{m.Sender, m.Group, m.Num}
	}
	return msgKey{m.Sender, 0, m.SSN}
}

// mustWait reports whether m has to be held. Besides the recorded order
// (canDeliver), a CAMEL multicast waits for the group's previous one: the
// tree delivers a group's multicasts in order, and so must a recovery, in
// which the root replays some directly while later ones come down the tree.
func (s *Causal) mustWait(m *Message) bool {
	if s.sealed {
		return true
	}
	if s.camel && m.Kind == KindMulticast && m.Num != s.coll.state[m.Group].mcastRecv.contig+1 {
		return true
	}
	return (s.recovering || len(s.held)+len(s.heldRec) > 0) && !s.canDeliver(m)
}

// canDeliver is the ordering rule: while recovering, only once every peer's
// determinants are in, and then in the recorded order; messages without a
// recorded reception come after the recorded ones.
func (s *Causal) canDeliver(m *Message) bool {
	if s.collecting() {
		return false
	}
	if s.unordered(m) {
		return true
	}
	if r, ok := s.recorded[s.key(m)]; ok {
		return r == s.rsn+1
	}
	return s.rsn >= s.lastRecorded && s.inOrder(m)
}

// inOrder: in hop mode a message no recorded reception orders still goes
// after every earlier one on its channel. The runtime's channels are FIFO
// and its manager counts on it (broadcasts are numbered); a recovering PE
// gets a survivor's messages sent before it heard of the failure ahead of
// the copies it replays of those lost in flight.
func (s *Causal) inOrder(m *Message) bool {
	if m.CSN == 0 || s.camel && m.Kind != KindP2P && m.Kind != KindSystem {
		return true
	}
	return m.CSN == s.recv[m.Sender].contig+1
}

func (s *Causal) deliver(m *Message, out []Action) []Action {
	if isResult(m) {
		// in the turn of the last partial it stands for; the determinants
		// it brings back are those the partials brought, and its root's
		// own (already held by others: not acknowledged). The partial's
		// reception is this PE's again, its determinant made again as a
		// replayed reception's is: the PEs holding it may fail next and
		// get it back only from this PE's messages (with teams, every
		// holder may be in one team).
		s.rsn++
		s.detBuf = append(s.detBuf, Det{Sender: m.Sender, Recver: s.me, Group: m.Group, SSN: m.Num, RSN: s.rsn})
		if s.lim != nil {
			s.lim.own = append(s.lim.own, s.detBuf[len(s.detBuf)-1])
		}
		s.carryStale = true
		s.stats.DetsCreated++
		if len(m.Dets) > 0 {
			s.storeDets(m.Dets, -1) // its sender is the partial's, not the root
		}
		return append(out, Action{Kind: ActDeliver, Msg: m})
	}
	if !s.unordered(m) {
		s.rsn++
		d := Det{Sender: m.Sender, Recver: s.me, SSN: m.SSN, RSN: s.rsn}
		if s.camel && m.Kind == KindReduction {
			d.Group, d.SSN = m.Group, m.Num
		}
		s.detBuf = append(s.detBuf, d)
		if s.lim != nil {
			s.lim.own = append(s.lim.own, d)
		}
		s.carryStale = true
		s.stats.DetsCreated++
	}
	stored := len(s.detLog)
	switch {
	case len(m.Dets) > 0 && m.Sender != s.me && s.passesDetsUp(m):
		s.stashUp(m.Dets)
	case s.mate(m.Sender) && s.fullList(m):
		// a teammate's: not stored here (the team fails as one) but
		// passed on, to whatever leaves the team
		s.noteSafe(m.Sender, m.Safe)
		s.relayFrom(m.Sender, m.Dets)
		s.pruneUp(m.Sender, m.Dets[:ownRun(m.Dets, m.Sender)])
	case s.mate(m.Sender):
		// part of a teammate's list: a partial to this root (which
		// carries all of its own, and what its subtree passed up), a
		// multicast
		if m.Recver >= 0 {
			s.noteSafe(m.Sender, m.Safe) // (not a forwarded multicast: the root's header)
		}
		if s.camel && m.Kind == KindReduction {
			s.pruneUp(m.Sender, m.Dets[:ownRun(m.Dets, m.Sender)])
		}
		if len(m.Dets) > 0 {
			s.storeDets(m.Dets, m.Sender) // teammates' join relayUp
			out = s.ackDets(m, out)
		}
	case len(m.Dets) > 0 && m.Sender != s.me:
		switch {
		case s.passedOn(m):
			// A CAMEL multicast a teammate of its root passed on to this
			// team (SendHop): kept here, not acknowledged. The copy is
			// not logged, so were this PE to fail nothing would bring
			// them back; their owners keep them until a logged message
			// had them stored.
			s.storeDets(m.Dets, m.Sender)
		case s.ownList(m):
			// One run, the sender's, most of it stored already: only its
			// new tail is read (a scan of the whole list per message cost
			// O(unacknowledged) each, microseconds in a stream).
			s.storeOwn(m.Dets, m.Sender)
			out = s.ackRun(m.Dets, m.Sender, true, out)
			out = s.countAck(out)
		default:
			s.storeDets(m.Dets, m.Sender)
			out = s.ackDets(m, out)
		}
	}
	if !s.camel || m.Kind == KindP2P || m.Kind == KindSystem {
		s.recv[m.Sender].add(m.CSN)
	}
	switch m.Kind {
	case KindP2P, KindSystem:
		return append(out, Action{Kind: ActDeliver, Msg: m})
	case KindMulticast: // RECEIVEMULTICASTMSG
		if s.camel {
			st := s.coll.state[m.Group]
			st.mcastRecv.add(m.Num)
			st.noteInc(m.Num, m.Inc)
		}
		// the runtime forwards it down its tree (SendHop)
		return append(out, Action{Kind: ActDeliver, Msg: m})
	default: // RECEIVEREDUCTIONMSG
		if s.camel && s.coll.isRoot(m.Group) {
			// The copy goes into the kept result, which brings back to
			// this PE, should it fail, the determinants it stored from
			// the partial: those new here. The others it stored from an
			// earlier message, which brings them back itself (a partial
			// is released only once its result is kept). A child's list
			// is all it has not had acknowledged, and a burst of partials
			// repeats it: copying it whole made the kept results most of
			// CAMEL's allocation.
			m = s.keep(m)
			m.Dets = s.detLog[stored:len(s.detLog):len(s.detLog)]
			s.logSeq++
			s.kept = append(s.kept, logEntry{s.logSeq, m})
			s.countLog(m, true)
			count(&s.copies, m, true)
		}
		// the runtime folds it and passes the partial up (SendHop)
		s.coll.state[m.Group].redFrom(m.Sender).add(m.Num)
		return append(out, Action{Kind: ActDeliver, Msg: m})
	}
}

// passesDetsUp: m is a partial reaching an intermediate node under CAMEL
// in hop mode, whose determinants go on up (see Causal's first
// departure).
// detsOfCopy keeps the determinants a partial dropped as a copy carries
// (CAMEL): a sender that re-executes sends its partials again, and each
// takes along what its subtree passed up since, which may be new (found
// by ftsim: a leaf's determinant rode up on its recovered parent's copy
// of an earlier round's partial, the root dropped the copy, and the
// leaf's next failure found its reception's order nowhere). They go on
// as a first copy's would: up the tree, or stored and acknowledged at
// the root.
func (s *Causal) detsOfCopy(m *Message, out []Action) []Action {
	if !s.keepsResults() || m.Kind != KindReduction || isResult(m) || len(m.Dets) == 0 || m.Sender == s.me || m.Inc != s.incMap[m.Sender] {
		// (an old incarnation's copy: what it carries is a history its
		// sender's recovery replaced)
		return out
	}
	if s.passesDetsUp(m) {
		s.stashUp(m.Dets)
		return out
	}
	s.storeDets(m.Dets, m.Sender)
	return s.ackDets(m, out)
}

func (s *Causal) passesDetsUp(m *Message) bool {
	return s.keepsResults() && m.Kind == KindReduction && !s.coll.isRoot(m.Group)
}

// stashUp keeps, to pass up, the determinants a child's partial brought.
// Not filtered: one a child brought before may come again by another
// path (another child passing it up), and only a set of everything
// passed up could tell which of them this PE passed on already.
func (s *Causal) stashUp(dets []Det) { s.passUp = append(s.passUp, dets...) }

// upDets is what a partial going up to PE to carries: this PE's
// determinants not yet acknowledged and those its children's partials
// brought since its last one. To an intermediate node, only the own ones
// no earlier partial took there: that node passed those up, or, if it
// fails first, gets them again with the partials still logged here (a
// partial is released only after its round completed, so after the node
// passed up what it brought).
func (s *Causal) upDets(to int32, toRoot bool) []Det {
	own := s.detBuf[:len(s.detBuf):len(s.detBuf)]
	s.noteCarried(own)
	if !toRoot && len(own) > 0 {
		if s.sentTo == nil {
			s.sentTo = make([]uint64, s.n)
		}
		top := &s.sentTo[to]
		i := 0
		for i < len(own) && own[i].RSN <= *top {
			i++
		}
		*top = own[len(own)-1].RSN
		own = own[i:]
	}
	up := s.passUp
	if s.relay != nil {
		// whatever leaves this PE carries its teammates' too (see
		// Causal.teams); up is this PE's own to append to
		s.refreshCarry()
		up = append(up, s.rel...)
	}
	s.stats.DetsPiggybacked += uint64(len(own) + len(up))
	switch {
	case len(up) == 0 && len(own) == 0:
		return nil
	case len(up) == 0:
		return own
	}
	s.passUp = nil
	if len(own) == 0 {
		return up
	}
	return append(own, up...) // own's capacity is full: a new slice
}

// runEnd is the end of the run of determinants of one owner that starts
// at dets[i].
func runEnd(dets []Det, i int) int {
	j := i + 1
	for j < len(dets) && dets[j].Recver == dets[i].Recver {
		j++
	}
	return j
}

// ownRun is the length of the run of owner's determinants dets starts
// with.
func ownRun(dets []Det, owner int32) int {
	if len(dets) == 0 || dets[0].Recver != owner {
		return 0
	}
	return runEnd(dets, 0)
}

// ackDets acknowledges the determinants m brought, stored here, to their
// owners: its sender, and under CAMEL the PEs below it in a reduction
// tree whose determinants its partial passed up. In hop mode they wait,
// to ride on the next message to their owner (number), or to go in one
// packet per owner (FlushAcks): one per message was most of the runtime's
// packets under logging. Waiting is safe, only slower to shrink the
// owner's piggyback: an owner keeps sending what it has not had
// acknowledged.
func (s *Causal) ackDets(m *Message, out []Action) []Action {
	// one ack per run of one owner (usually a single run: the sender's)
	for i := 0; i < len(m.Dets); {
		j := runEnd(m.Dets, i)
		out = s.ackRun(m.Dets[i:j], m.Dets[i].Recver, m.Dets[i].Recver == m.Sender, out)
		i = j
	}
	if len(m.Dets) > 0 {
		out = s.countAck(out)
	}
	return out
}

// ackRun acknowledges run, determinants of PE to, to it (own: the run is
// to's own list, which to sent).
func (s *Causal) ackRun(run []Det, to int32, own bool, out []Action) []Action {
	if to < 0 || int(to) >= s.n || to == s.me || s.mate(to) {
		return out // (a teammate's determinants are safe only in another team)
	}
	if s.batchAcks {
		s.holdAck(to, run, own)
		return out
	}
	return append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktAck, From: s.me, To: to, Dets: run}})
}

// countAck counts a message whose determinants were acknowledged, and
// sends the held acknowledgements every ackBatch of them.
func (s *Causal) countAck(out []Action) []Action {
	if s.batchAcks {
		if s.ackWait++; s.ackWait >= ackBatch {
			out = s.flushAcks(out)
		}
	}
	return out
}

// passedOn reports a CAMEL multicast's copy that a PE other than its root
// passed on (unlogged).
func (s *Causal) passedOn(m *Message) bool {
	return s.camel && m.Kind == KindMulticast && m.Env != nil && int32(m.Env.Src) != m.Sender
}

// ownList reports whether m's determinants are its sender's own list
// (piggyback: every message but a CAMEL partial, whose list carries its
// subtree's too), which is one run of the sender's, in rsn order. Its
// ends are checked; its middle, stored and acknowledged before, is not
// read again.
func (s *Causal) ownList(m *Message) bool {
	d := m.Dets
	return !s.recovering && !(s.camel && m.Kind == KindReduction) &&
		d[0].Recver == m.Sender && d[len(d)-1].Recver == m.Sender
}

// ackBatch is how many messages' acknowledgements may wait for the PE to
// go idle (FlushAcks) before they go anyway: a busy PE's owners must not
// piggyback ever longer lists. LeanMD 3×3×3 on 4 PEs, 101 steps, camel:
// one packet per message sent 54,433 acknowledgements and piggybacked
// 7.02 M determinants; batches of 8, 9,295 and 7.20 M; of 32, 3,833 and
// 7.99 M; only at idle, 3,154 and 9.75 M. Its time per step was the same
// in all four.
const ackBatch = 8

// holdAck keeps dets, determinants of PE to stored here, to acknowledge
// in to's next batch. Held lists share the messages' own (read only: a
// list is copied before anything is written to it, and kept at full
// capacity so an append copies it).
func (s *Causal) holdAck(to int32, dets []Det, own bool) {
	if s.ackHeld == nil {
		s.ackHeld = make([][]Det, s.n)
		s.ackSorted = make([]bool, s.n)
	}
	held := s.ackHeld[to]
	switch {
	case len(held) == 0:
		s.ackOwners = append(s.ackOwners, to)
		s.ackHeld[to], s.ackSorted[to] = dets[:len(dets):len(dets)], own
	case own:
		// The owner's own list is all it had not had acknowledged when it
		// sent it: it stands for the lists held before. What they have
		// and it has not was acknowledged, or came by another path and
		// is left out, which is safe: an owner sends a determinant again
		// until someone acknowledges it.
		s.ackHeld[to], s.ackSorted[to] = dets[:len(dets):len(dets)], true
	default:
		// passed up the tree: only those past the last held (the others
		// are held, mostly, or left out as above)
		last := held[len(held)-1].RSN
		for i, d := range dets {
			if d.RSN > last {
				s.ackHeld[to], s.ackSorted[to] = append(held, dets[i:]...), false
				break
			}
		}
	}
}

// FlushAcks sends the acknowledgements held back (see ackDets): the
// runtime calls it when its PE runs out of work. Each owner's go in
// rsn order, each determinant once, so the owner drops an acknowledged
// prefix without a scan. holdAck keeps successive lists apart, but one
// run passed up the tree may itself join two overlapping lists (a
// child's partials, stashed one after the other): those are sorted.
func (s *Causal) FlushAcks() []Action {
	out := s.flushAcks(s.out[:0])
	s.out = out[:0]
	return out
}

// ascending reports whether dets' rsns strictly increase.
func ascending(dets []Det) bool {
	for i := 1; i < len(dets); i++ {
		if dets[i].RSN <= dets[i-1].RSN {
			return false
		}
	}
	return true
}

func (s *Causal) flushAcks(out []Action) []Action {
	for _, to := range s.ackOwners {
		if dets := s.takeAcks(to); len(dets) > 0 {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktAck, From: s.me, To: to, Dets: dets}})
		}
	}
	s.ackOwners, s.ackWait = s.ackOwners[:0], 0
	return out
}

// takeAcks hands over the acknowledgements held for PE to, in rsn order,
// each once (nil: none held, or dropped by PeerFailed).
func (s *Causal) takeAcks(to int32) []Det {
	if s.ackHeld == nil {
		return nil
	}
	dets := s.ackHeld[to]
	if len(dets) == 0 {
		return nil
	}
	s.ackHeld[to] = nil // the caller has them now
	// an owner's own list is in rsn order as it made it (a list from
	// another process that is not only costs its owner a scan)
	if !s.ackSorted[to] && !ascending(dets) {
		dets = slices.Clone(dets) // it may share a message's list
		slices.SortStableFunc(dets, func(a, b Det) int { return cmp.Compare(a.RSN, b.RSN) })
		dets = slices.Compact(dets)
	}
	return dets
}

// storeDets keeps the determinants a message from sender carried for
// their owners. The sender's own come as all it has not had
// acknowledged, in reception order, so most of them came already on its
// earlier messages: only those past the last one stored for it (detTop)
// are new. Other owners' — passed up a reduction tree by intermediate
// nodes, or in a kept result — are whatever part their path carried, in
// no order across paths, so they do not move detTop: one past it is
// looked up (fwdSeen); one at or below it was either in the owner's own
// list that moved detTop, and stored then, or acknowledged before that
// list was made, and stored where the acknowledgement came from.
func (s *Causal) storeDets(dets []Det, sender int32) {
	if s.recovering {
		s.storeDetsOutOfOrder(dets, sender)
		return
	}
	for i := 0; i < len(dets); {
		owner, j := dets[i].Recver, runEnd(dets, i)
		run := dets[i:j]
		i = j
		if owner < 0 || int(owner) >= s.n {
			continue
		}
		if s.mate(owner) {
			// a teammate's: safe only in another team, so passed on
			s.mergeUp(run)
			continue
		}
		if owner == sender {
			s.storeOwn(run, owner)
			continue
		}
		top := s.detTop[owner]
		for _, d := range run {
			if _, ok := s.fwdSeen[d]; d.RSN > top && !ok {
				if s.fwdSeen == nil {
					s.fwdSeen = map[Det]struct{}{}
				}
				s.fwdSeen[d] = struct{}{}
				s.detLog = append(s.detLog, d)
			}
		}
	}
}

// storeOwn is storeDets for run, the sender owner's own list: only its
// tail past detTop is new, found from the end.
func (s *Causal) storeOwn(run []Det, owner int32) {
	top := &s.detTop[owner]
	k := len(run)
	for k > 0 && run[k-1].RSN > *top && run[k-1].Recver == owner {
		k--
	}
	if k == len(run) {
		return
	}
	*top = max(*top, run[len(run)-1].RSN)
	if len(s.fwdSeen) == 0 {
		s.detLog = append(s.detLog, run[k:]...)
		return
	}
	for _, d := range run[k:] {
		if _, ok := s.fwdSeen[d]; !ok {
			s.detLog = append(s.detLog, d)
		}
	}
}

// storeDetsOutOfOrder is storeDets for a recovering PE, which delivers
// messages out of their senders' order (recorded receptions first, then
// the rest), so a sender's determinants come out of order too: each is
// looked up.
func (s *Causal) storeDetsOutOfOrder(dets []Det, sender int32) {
	if s.detSeen == nil {
		s.detSeen = map[Det]bool{}
		for _, d := range s.detLog[s.inherited:] {
			s.detSeen[d] = true
		}
	}
	for _, d := range dets {
		if d.Recver < 0 || int(d.Recver) >= s.n || s.detSeen[d] {
			continue
		}
		if s.mate(d.Recver) {
			s.mergeUp([]Det{d})
			continue
		}
		s.detSeen[d] = true
		s.detLog = append(s.detLog, d)
		if d.Recver == sender { // see storeDets
			s.detTop[d.Recver] = max(s.detTop[d.Recver], d.RSN)
		}
	}
}

// peerIncarnation: PE p runs as incarnation inc (its recovery packet
// says so). A restarted PE's map of incarnations is its checkpoint's: a
// peer that failed since may have messages of its old incarnation
// waiting here, which its new one sends otherwise numbered (found by
// ftsim: PE 3 failed and recovered, then PE 0; PE 0's new incarnation
// took PE 3's old partial and its re-execution's for the same
// reduction). They are dropped, as are any that come later.
func (s *Causal) peerIncarnation(p int32, inc uint32) {
	if inc <= s.incMap[p] {
		return
	}
	s.incMap[p] = inc
	s.held = dropOlder(s.held, p, inc, &s.stats.Dropped)
	for rsn, m := range s.heldRec {
		if m.Sender == p && m.Inc < inc {
			delete(s.heldRec, rsn)
			s.stats.Dropped++
		}
	}
}

// dropOlder removes from held, in place, what incarnations of PE p older
// than inc sent, counting them in dropped.
func dropOlder(held []*Message, p int32, inc uint32, dropped *uint64) []*Message {
	keep := held[:0]
	for _, m := range held {
		if m.Sender == p && m.Inc < inc {
			*dropped++
			continue
		}
		keep = append(keep, m)
	}
	clear(held[len(keep):])
	return keep
}

// hold keeps m until its turn: by its recorded reception's rsn when that
// is known.
func (s *Causal) hold(m *Message) {
	m = s.keep(m)
	if s.recovering && !s.collecting() {
		if isResult(m) {
			s.placeResult(m)
			return
		}
		if r, ok := s.recorded[s.key(m)]; ok && r > s.rsn && s.heldRec[r] == nil {
			if s.heldRec == nil {
				s.heldRec = map[uint64]*Message{}
			}
			s.heldRec[r] = m
			return
		}
	}
	s.held = append(s.held, m)
}

// sortHeld files the messages held while the determinants were being
// collected under their recorded receptions, now known.
func (s *Causal) sortHeld() {
	held := s.held
	s.held = nil
	for _, m := range held {
		s.hold(m)
	}
}

// Next delivers one held message whose turn has come. One at a time: the
// application's sends for it must be stamped before anything the next
// delivery causes, as they were in the first run.
func (s *Causal) Next() []Action {
	if len(s.held)+len(s.heldRec) == 0 || s.sealed {
		return nil
	}
	out := s.out[:0]
	// the recorded reception whose turn it is, found at once (a PE
	// recovering from far back holds thousands)
	for m := s.heldRec[s.rsn+1]; m != nil && !s.collecting(); m = s.heldRec[s.rsn+1] {
		delete(s.heldRec, s.rsn+1)
		if dup, _ := s.duplicate(m); dup {
			out = s.detsOfCopy(m, out)
			s.stats.Dropped++
			continue
		}
		if s.mustWait(m) {
			s.held = append(s.held, m) // not its turn after all: scanned below
			break
		}
		out = s.endRecovery(s.deliver(m, out))
		s.out = out[:0]
		return out
	}
	for i := 0; i < len(s.held); i++ {
		m := s.held[i]
		if dup, _ := s.duplicate(m); dup {
			s.held = slices.Delete(s.held, i, i+1) // a duplicate after all
			i--
			out = s.detsOfCopy(m, out)
			s.stats.Dropped++
			continue
		}
		if !s.mustWait(m) {
			s.held = slices.Delete(s.held, i, i+1)
			out = s.deliver(m, out)
			break
		}
	}
	out = s.endRecovery(out)
	s.out = out[:0]
	return out
}

// endRecovery ends recovery once every peer answered, the recorded order
// is exhausted and everything the peers replayed is in. Only then are the
// determinants this PE stored for others back (they ride on replayed
// messages): were it declared recovered earlier, a peer failing next
// could lose determinants only this PE's lost copy held. A PE rolled back
// without failing waits, besides, for a PE outside the rollback to store
// its own order (storeOwnOrder), for the same reason.
func (s *Causal) endRecovery(out []Action) []Action {
	if s.recovering && !s.collecting() && s.replayedIn >= s.replayFrom && len(s.held)+len(s.heldRec) == 0 && s.rsn >= s.lastRecorded && (s.rb == nil || !s.rb.storing) {
		s.recovering = false
		s.recorded, s.detSeen, s.byRound = nil, nil, nil
		// a later failure of a fellow is another failure
		s.rb = nil
		out, _ = s.reduced(s.deferred, out) // their groups were checked when they came
		s.deferred = nil
	}
	return out
}

// TakeCompleted returns the reductions a restarted incarnation heard
// were complete since the last call. Its runtime must hear them too: a
// PE that rolled back may wait for a partial of one that a child, told
// it was complete, will not send again, while its own knowledge of the
// completion came another way (its kept result, a root's
// acknowledgement; found by ftsim: a root rolled back without failing
// completed a reduction from its own kept result, and an inner node
// rolled back with it waited for a failed child's partial).
func (s *Causal) TakeCompleted() []Reduced {
	out := s.completed
	s.completed = nil
	return out
}

// Prepare marks what the checkpoint being taken covers.
func (s *Causal) Prepare() Counters {
	for k := range s.logged {
		l := &s.logged[k]
		l.AtCheckpointBytes = max(l.AtCheckpointBytes, l.Bytes)
	}
	s.mark = checkpointMark{logSeq: s.logSeq, rsn: s.rsn, detLog: len(s.detLog)}
	s.sealed = true
	if s.lim != nil {
		s.lim.loggingOnAgain()
	}
	return s.Snapshot()
}

// Abort is called when the checkpoint Prepare marked was abandoned.
func (s *Causal) Abort() { s.sealed = false }

// Checkpoint is CHECKPOINT: the coordinated checkpoint Prepare marked was
// committed, so the logs and determinants it covers are dropped. What came
// after the snapshot stays: a neighbour may have resumed, and sent to this
// PE, before the commit reached it.
func (s *Causal) Checkpoint() {
	m := s.mark
	s.compactLog()
	s.msgLog = s.dropCovered(s.msgLog, m.logSeq, nil)
	clear(s.relLog) // what is left of it, in order
	for _, e := range s.msgLog {
		if s.releases(e.m) && s.relLog != nil {
			s.relLog[e.m.Group] = append(s.relLog[e.m.Group], e.m)
		}
	}
	s.kept = s.dropCovered(s.kept, m.logSeq, &s.copies)
	// A new array (kept partials share the old: see deliver), as large
	// as this period's: the next one stores about as many, and growing
	// by doubling from nothing was most of storeDets' allocation.
	rest := s.detLog[min(m.detLog, len(s.detLog)):]
	s.detLog = append(make([]Det, 0, max(len(s.detLog), 2*len(rest))), rest...)
	// Those dropped may come again (piggybacked until acknowledged): store
	// them again then, as if new. Those kept may be stored twice, which
	// is harmless: which of them were an owner's own list (see
	// storeDets) is not known any more.
	clear(s.detTop)
	s.fwdSeen = nil
	s.inherited = 0 // (the mark came after the recovery that kept them)
	s.ownStoredCovered(m.rsn)
	var buf []Det // a new slice: messages in flight may share the old one
	for _, d := range s.detBuf {
		if d.RSN > m.rsn {
			buf = append(buf, d)
		}
	}
	s.detBuf = buf
	// what teammates' messages brought came before the snapshot (the
	// PE holds what arrives after it until this commit)
	clear(s.relay)
	clear(s.relayUp)
	for g, up := range s.upKept {
		k := 0
		for k < len(up) && up[k].seq <= m.logSeq {
			k++
		}
		s.upKept[g] = up[k:]
	}
	s.carryStale = true
	s.mark = checkpointMark{logSeq: s.logSeq, rsn: s.rsn, detLog: len(s.detLog)}
	s.sealed = false
	if l := s.lim; l != nil {
		k := 0
		for k < len(l.own) && l.own[k].RSN <= m.rsn {
			k++
		}
		// in place: the next period records about as many, and nothing
		// else holds this array (Keep hands it over only to the PE's
		// next incarnation, once this one is gone)
		l.own = l.own[:copy(l.own, l.own[k:])]
		if l.Gate != nil {
			l.Gate.LoggingOn(int(s.me))
		}
	}
	for _, st := range s.coll.state { // what recoveries left behind
		st.reforwarded = nil
		st.kept.settle()
		if k := len(st.incFrom); k > 1 {
			st.incFrom = append(st.incFrom[:0], st.incFrom[k-1])
		}
	}
}

func (s *Causal) dropCovered(log []logEntry, upTo uint64, also *LogStats) []logEntry {
	keep := log[:0]
	for _, e := range log {
		if e.seq <= upTo {
			s.countLog(e.m, false)
			if also != nil {
				count(also, e.m, false)
			}
			continue
		}
		keep = append(keep, e)
	}
	clear(log[len(keep):])
	return keep
}

// PeerFailed is FAILURE(y) on a survivor: note y's new incarnation, send y
// the determinants of its receptions this PE holds (and, as a root, which
// of its reductions are complete), then re-send the messages it logged
// for y: point to point, the multicasts of y's groups (CAMEL logs them
// only at the root, which sends them to y directly) and contributions.
//
// with lists the PEs rolling back with y, y included (nil: y's team).
func (s *Causal) PeerFailed(y int32, inc uint32, with []int32) ([]Action, error) {
	if y < 0 || int(y) >= s.n || y == s.me {
		return nil, fmt.Errorf("PE %d told that PE %d failed (PEs are 0..%d)", s.me, y, s.n-1)
	}
	if s.rb.has(s.me) && s.rb.has(y) {
		// rolled back with it
		return append(s.fellowFailed(y, inc), s.storeAgain(y)...), nil
	}
	if s.teams.Same(y, s.me) {
		// a teammate: this PE failed with it, and recovers with it; its
		// old incarnation's messages are dropped from now on
		s.incMap[y] = max(s.incMap[y], inc)
		if s.relay != nil {
			s.relay[y], s.relayUp[y], s.carryStale = nil, nil, true
		}
		return nil, nil
	}
	if s.recovering || !s.sameFailure(y) {
		return nil, fmt.Errorf("PE %d failed while PE %d was recovering: %w", y, s.recoveringPE(), ErrConcurrentFailure)
	}
	if len(s.failing) == 0 {
		s.failSet = slices.Clone(with)
	}
	if !slices.Contains(s.failing, y) {
		s.failing = append(s.failing, y)
	}
	if s.ackHeld != nil {
		s.ackHeld[y] = nil // its new incarnation may not have made them yet
	}
	s.incMap[y] = inc
	rec := Packet{Kind: PktRecovery, From: s.me, To: y, Inc: s.inc}
	for _, d := range s.detLog {
		if d.Recver == y {
			rec.Dets = append(rec.Dets, d)
		}
	}
	// y's partial was folded here, so y must receive again what it had
	// received then: its determinants this PE passes up are on their way
	// (the next partial takes them, or one still logged took them, and
	// may not have arrived: once its round completes the root has them)
	for _, d := range s.passUp {
		if d.Recver == y {
			rec.Dets = append(rec.Dets, d)
		}
	}
	for _, e := range s.msgLog {
		if m := e.m; s.releases(m) && !m.released {
			for _, d := range m.Dets {
				if d.Recver == y {
					rec.Dets = append(rec.Dets, d)
				}
			}
		}
	}
	for _, g := range slices.Sorted(maps.Keys(s.upKept)) {
		for _, u := range s.upKept[g] {
			for _, d := range u.dets {
				if d.Recver == y {
					rec.Dets = append(rec.Dets, d)
				}
			}
		}
	}
	if s.camel {
		for _, g := range s.coll.sortedGroups() {
			st := s.coll.state[g]
			if root := s.coll.t.Root(g); s.keeper(g) == s.me && root != y && s.rollsBackWith(root, y) && s.coll.t.Has(g, y) && st.done > 0 {
				// the root fails with y: the keeper says which of its
				// reductions are complete (their partials were released;
				// the root itself gets their results back instead)
				rec.Done = append(rec.Done, Reduced{g, st.done})
				continue
			}
			if !s.coll.isRoot(g) || !s.coll.t.Has(g, y) {
				continue
			}
			if st.done > 0 {
				rec.Done = append(rec.Done, Reduced{g, st.done})
			}
			for _, e := range s.kept {
				m := e.m
				if m.Group != g || m.Num > st.done {
					continue
				}
				if isResult(m) && s.keeper(g) == y {
					rec.Relog = append(rec.Relog, m)
				}
			}
		}
	}
	out := []Action{{Kind: ActSend, Packet: rec}}
	var replayed uint64
	for _, e := range s.msgLog {
		m := e.m
		if m.released {
			continue
		}
		if m.Recver == y || s.camel && m.Kind == KindMulticast && s.coll.t.Has(m.Group, y) || isResult(m) && m.Sender == y {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: y, Msg: m}})
			replayed++
		}
	}
	s.stats.Replayed += replayed
	out = append(out, s.storeAgain(y)...)
	return append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktReplayed, From: s.me, To: y, Replayed: replayed}}), nil
}

func (s *Causal) recoveringPE() int32 {
	if s.recovering || len(s.failing) == 0 {
		return s.me
	}
	return s.failing[0]
}

// Recovered: PE y finished recovering.
func (s *Causal) Recovered(y int32) {
	if i := slices.Index(s.failing, y); i >= 0 {
		s.failing = slices.Delete(s.failing, i, i+1)
	}
	if len(s.failing) == 0 {
		s.failSet = nil
	}
}
