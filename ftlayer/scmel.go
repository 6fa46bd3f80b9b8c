package ftlayer

import "fmt"

type msgKey struct {
	sender int32
	ssn    uint64
}

// window records which messages of one sender were received: every channel
// sequence number up to contig, plus any later ones that overtook others
// (none on FIFO channels). It answers "received already?" without hashing.
type window struct {
	contig uint64
	extra  map[uint64]bool
}

func (w *window) has(csn uint64) bool {
	return csn <= w.contig || len(w.extra) > 0 && w.extra[csn]
}

func (w *window) add(csn uint64) {
	if csn != w.contig+1 {
		if w.extra == nil {
			w.extra = map[uint64]bool{}
		}
		w.extra[csn] = true
		return
	}
	w.contig++
	for len(w.extra) > 0 && w.extra[w.contig+1] {
		delete(w.extra, w.contig+1)
		w.contig++
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
}

// SCMEL is simple causal message logging (CAMEL paper, Algorithm 1) for one
// PE. Section numbers in comments refer to that paper.
//
// Besides the paper's ssn (per sender, over all its messages), messages
// carry a channel sequence number per (sender, receiver): receivers use it
// to recognise duplicates in O(1), and it survives checkpoints, so a
// duplicate from before a checkpoint is still recognised after it.
type SCMEL struct {
	me      int32
	n       int
	inc     uint32
	incMap  []uint32
	ssn     uint64
	rsn     uint64
	sendCSN []uint64
	recv    []window
	msgLog  []*Message // sent since the checkpoint (sender-based log)
	detLog  []Det      // other PEs' determinants, stored for them
	detBuf  []Det      // own determinants not yet acknowledged

	// recovery of this PE (§2, procedure RECEIVEDETS)
	recovering   bool
	recorded     map[msgKey]uint64 // the recorded reception order
	detsFrom     map[int32]bool
	lastRecorded uint64
	held         []*Message // messages waiting for their turn

	failing int32 // a peer that is recovering, or -1
	stats   Stats
	mark    checkpointMark
}

// checkpointMark is what a checkpoint's snapshot covers: messages sent and
// received up to it, determinants stored before it.
type checkpointMark struct {
	ssn, rsn uint64
	detLog   int
}

// NewSCMEL makes PE me's protocol for a job of n PEs, from the start.
func NewSCMEL(me int32, n int) *SCMEL {
	return &SCMEL{me: me, n: n, incMap: make([]uint32, n), sendCSN: make([]uint64, n), recv: make([]window, n), failing: -1}
}

// Snapshot is the protocol state a checkpoint saves.
func (s *SCMEL) Snapshot() Counters {
	c := Counters{SSN: s.ssn, RSN: s.rsn, Inc: s.inc, IncMap: append([]uint32(nil), s.incMap...),
		SendCSN: append([]uint64(nil), s.sendCSN...), RecvCSN: make([]uint64, s.n), RecvMore: make([][]uint64, s.n)}
	for i := range s.recv {
		c.RecvCSN[i] = s.recv[i].contig
		for csn := range s.recv[i].extra {
			c.RecvMore[i] = append(c.RecvMore[i], csn)
		}
	}
	return c
}

// RestartSCMEL makes the new incarnation inc of PE me from its checkpoint.
// It holds every application message until all other PEs sent the
// determinants they keep for it, then replays in the recorded order.
func RestartSCMEL(me int32, n int, ck Counters, inc uint32) *SCMEL {
	s := NewSCMEL(me, n)
	s.ssn, s.rsn, s.inc = ck.SSN, ck.RSN, inc
	copy(s.incMap, ck.IncMap)
	copy(s.sendCSN, ck.SendCSN)
	for i := range s.recv {
		if i < len(ck.RecvCSN) {
			s.recv[i].contig = ck.RecvCSN[i]
		}
		if i < len(ck.RecvMore) {
			for _, csn := range ck.RecvMore[i] {
				s.recv[i].add(csn)
			}
		}
	}
	s.incMap[me] = inc
	s.recovering = n > 1
	s.recorded = map[msgKey]uint64{}
	s.detsFrom = map[int32]bool{}
	s.lastRecorded = ck.RSN
	return s
}

// Recovering reports whether this PE is still replaying.
func (s *SCMEL) Recovering() bool { return s.recovering }

// Phase names where this PE's recovery stands: "collecting" determinants,
// "replaying" logged messages, or "" when it is not recovering.
func (s *SCMEL) Phase() string {
	switch {
	case !s.recovering:
		return ""
	case len(s.detsFrom) < s.n-1:
		return "collecting"
	}
	return "replaying"
}

// Stats reports the protocol's counters.
func (s *SCMEL) Stats() Stats {
	st := s.stats
	st.Logged = uint64(len(s.msgLog))
	st.LoggedBytes = 0
	for _, m := range s.msgLog {
		st.LoggedBytes += uint64(len(m.Payload))
	}
	return st
}

// Send is SENDMSG: stamp, piggyback the unacknowledged determinants, log.
func (s *SCMEL) Send(to int32, payload []byte) []Action {
	s.ssn++
	s.sendCSN[to]++
	m := &Message{Sender: s.me, Recver: to, SSN: s.ssn, CSN: s.sendCSN[to], Inc: s.inc, Payload: payload}
	if to != s.me && len(s.detBuf) > 0 {
		// A message to itself carries none: this PE's own determinants
		// are only safe once another PE holds them.
		m.Dets = append([]Det(nil), s.detBuf...)
		s.stats.DetsPiggybacked += uint64(len(m.Dets))
	}
	s.msgLog = append(s.msgLog, m)
	s.stats.LoggedTotal++
	return []Action{{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: to, Msg: m}}}
}

// Receive handles one packet.
func (s *SCMEL) Receive(p *Packet) ([]Action, error) {
	switch p.Kind {
	case PktAck: // RECEIVEDETACK
		s.removeAcked(p.Dets)
		return nil, nil
	case PktRecovery: // RECEIVEDETS
		if !s.recovering {
			return nil, nil // a late copy: this PE is done recovering
		}
		for _, d := range p.Dets {
			if d.Recver != s.me || d.RSN <= s.rsn {
				continue // not ours, or from before the checkpoint
			}
			s.recorded[msgKey{d.Sender, d.SSN}] = d.RSN
			s.lastRecorded = max(s.lastRecorded, d.RSN)
		}
		s.detsFrom[p.From] = true
		return s.release(nil), nil
	case PktApp:
		return s.receiveMsg(p.Msg), nil
	}
	return nil, fmt.Errorf("PE %d: packet of unknown kind %d", s.me, p.Kind)
}

// removeAcked drops acknowledged determinants from detBuf. Both lists are
// in rsn order (determinants are made in reception order, and an ack
// returns a copy of what was piggybacked), so one merge pass does it.
func (s *SCMEL) removeAcked(acked []Det) {
	if len(acked) == 0 {
		return
	}
	kept := s.detBuf[:0]
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

// receiveMsg is RECEIVEMSG with OUTOFORDER: old and duplicate messages are
// dropped, messages ahead of the recorded order are held.
func (s *SCMEL) receiveMsg(m *Message) []Action {
	if m.Inc < s.incMap[m.Sender] {
		s.stats.Dropped++ // from a failed incarnation
		return nil
	}
	if s.recv[m.Sender].has(m.CSN) {
		s.stats.Dropped++ // already received (a re-execution's re-send, a replay)
		return nil
	}
	if !s.canDeliver(m) {
		s.stats.Held++
		s.held = append(s.held, m)
		return nil
	}
	out := s.deliver(m, nil)
	if len(s.held) > 0 || s.recovering {
		out = s.release(out)
	}
	return out
}

// canDeliver reports whether m is next: while recovering, only once every
// peer's determinants are in, and then in the recorded order; messages
// without a recorded reception come after the recorded ones.
func (s *SCMEL) canDeliver(m *Message) bool {
	if !s.recovering && len(s.held) == 0 {
		return true // the usual case: nothing to keep in order
	}
	return s.canDeliverHeld(m)
}

func (s *SCMEL) deliver(m *Message, out []Action) []Action {
	s.rsn++
	s.recv[m.Sender].add(m.CSN)
	s.detBuf = append(s.detBuf, Det{Sender: m.Sender, Recver: s.me, SSN: m.SSN, RSN: s.rsn})
	s.stats.DetsCreated++
	if len(m.Dets) > 0 && m.Sender != s.me {
		s.detLog = append(s.detLog, m.Dets...)
		out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktAck, From: s.me, To: m.Sender, Dets: m.Dets}})
	}
	return append(out, Action{Kind: ActDeliver, Msg: m})
}

// release delivers held messages whose turn has come, and ends recovery
// once the recorded order is exhausted.
func (s *SCMEL) release(out []Action) []Action {
	for progress := true; progress; {
		progress = false
		for i := 0; i < len(s.held); i++ {
			m := s.held[i]
			if s.recv[m.Sender].has(m.CSN) {
				s.held = append(s.held[:i], s.held[i+1:]...) // a duplicate after all
				i--
				s.stats.Dropped++
				continue
			}
			if s.canDeliverHeld(m) {
				s.held = append(s.held[:i], s.held[i+1:]...)
				out = s.deliver(m, out)
				progress = true
				break
			}
		}
	}
	if s.recovering && len(s.detsFrom) >= s.n-1 && s.rsn >= s.lastRecorded {
		s.recovering = false
		s.recorded = nil
	}
	return out
}

// canDeliverHeld is the ordering rule itself (for a held message, or a new
// one while recovering or while others are held).
func (s *SCMEL) canDeliverHeld(m *Message) bool {
	if s.recovering && len(s.detsFrom) < s.n-1 {
		return false
	}
	if r, ok := s.recorded[msgKey{m.Sender, m.SSN}]; ok {
		return r == s.rsn+1
	}
	return s.rsn >= s.lastRecorded
}

// Prepare marks what the checkpoint being taken covers.
func (s *SCMEL) Prepare() Counters {
	s.mark = checkpointMark{ssn: s.ssn, rsn: s.rsn, detLog: len(s.detLog)}
	return s.Snapshot()
}

// Checkpoint is CHECKPOINT: the coordinated checkpoint Prepare marked was
// committed, so the logs and determinants it covers are dropped. What came
// after the snapshot stays: a neighbour may have resumed, and sent to this
// PE, before the commit reached it.
func (s *SCMEL) Checkpoint() {
	m := s.mark
	keep := s.msgLog[:0]
	for _, x := range s.msgLog {
		if x.SSN > m.ssn {
			keep = append(keep, x)
		}
	}
	clear(s.msgLog[len(keep):])
	s.msgLog = keep
	s.detLog = append([]Det(nil), s.detLog[min(m.detLog, len(s.detLog)):]...)
	buf := s.detBuf[:0]
	for _, d := range s.detBuf {
		if d.RSN > m.rsn {
			buf = append(buf, d)
		}
	}
	s.detBuf = buf
	s.mark = checkpointMark{ssn: s.ssn, rsn: s.rsn, detLog: len(s.detLog)}
}

// PeerFailed is FAILURE(y) on a survivor: note y's new incarnation, send y
// the determinants of its receptions this PE holds, then re-send the
// messages it logged for y.
func (s *SCMEL) PeerFailed(y int32, inc uint32) ([]Action, error) {
	if s.recovering || (s.failing >= 0 && s.failing != y) {
		return nil, fmt.Errorf("PE %d failed while PE %d was recovering: %w", y, s.recoveringPE(), ErrConcurrentFailure)
	}
	s.failing = y
	s.incMap[y] = inc
	var dets []Det
	for _, d := range s.detLog {
		if d.Recver == y {
			dets = append(dets, d)
		}
	}
	out := []Action{{Kind: ActSend, Packet: Packet{Kind: PktRecovery, From: s.me, To: y, Dets: dets}}}
	for _, m := range s.msgLog {
		if m.Recver == y {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: s.me, To: y, Msg: m}})
			s.stats.Replayed++
		}
	}
	return out, nil
}

func (s *SCMEL) recoveringPE() int32 {
	if s.recovering {
		return s.me
	}
	return s.failing
}

// Recovered: PE y finished recovering.
func (s *SCMEL) Recovered(y int32) {
	if s.failing == y {
		s.failing = -1
	}
}
