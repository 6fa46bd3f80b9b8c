package ftlayer

import (
	"fmt"

	"github.com/charmgo/charmgo/pe"
)

// Role is the part one hop plays in the runtime's traffic. In hop mode the
// runtime's manager runs the spanning trees (forwarding multicasts,
// folding reductions); the protocol sees each hop with its role and logs
// it as the CAMEL paper says for that role (§3): SCMEL logs every hop
// alike.
type Role uint8

const (
	// RoleP2P: a message to one PE (an entry method, a request to a
	// group's root, a contribution to the PE that counts it, runtime
	// bookkeeping).
	RoleP2P Role = iota
	// RoleMcastRoot: a multicast leaving its group's root for a child.
	RoleMcastRoot
	// RoleMcastFwd: a multicast an inner node of the tree passes on.
	RoleMcastFwd
	// RolePartial: a reduction's partial result going up to the parent.
	RolePartial
)

// NewHopCausal makes PE me's SCMEL (camel false) or CAMEL protocol in hop
// mode, for a job of n PEs whose groups' trees t describes, its log
// bounded by lim (MCML; the zero LogLimit: unbounded).
func NewHopCausal(me int32, n int, t Trees, camel bool, lim LogLimit) *Causal {
	return newCausal(me, n, t, camel, lim)
}

// SendHop stamps one hop of the runtime's traffic and logs it (or not) as
// its role asks; it returns the header the hop carries. For RoleMcastRoot,
// first marks the multicast's first child (the others share its log entry
// under CAMEL); for RoleMcastFwd, rx is the header the multicast arrived
// with; for RolePartial, num is the reduction's number (from 1). env is
// kept by reference for a replay: its payload must not change after the
// send.
func (s *Causal) SendHop(to int32, role Role, g uint64, num uint64, first bool, rx *pe.FTHeader, env *pe.Envelope) (*pe.FTHeader, error) {
	if to < 0 || int(to) >= s.n {
		return nil, fmt.Errorf("PE %d: send to PE %d, outside 0..%d", s.me, to, s.n-1)
	}
	if s.camel {
		// the hops that make no message of their own
		switch {
		case role == RoleMcastRoot && !first:
			if s.lastRoot == nil || s.lastRoot.Group != g {
				return nil, fmt.Errorf("PE %d: a multicast of group %d continued before it began", s.me, g)
			}
			return &s.lastRoot.FTHeader, nil
		case role == RoleMcastFwd && (rx != nil && rx.Group == g):
			// forwarded unlogged, without the root's determinants
			fwd := *rx
			fwd.Dets, fwd.Recver = nil, -1
			if s.relay != nil && !s.teams.Same(to, s.me) {
				// With teams, a copy leaving the team takes what the team
				// has not yet made safe in another (the root's own, if a
				// teammate, came here to be passed on): the PE it reaches
				// depends on those receptions, and a copy of the root's
				// that carried them may not have arrived anywhere when
				// the team fails (found by ftsim: camel with teams, a
				// team failing while its root's broadcast was in flight
				// to another team, reached a third through a teammate,
				// and the team's re-execution took a reply to it in
				// another order than the one the broadcast depended on;
				// the run ended with another result). The copy is not
				// logged: its receiver keeps them without acknowledging
				// them (Causal.passedOn).
				fwd.Dets = s.carried()
			}
			return &fwd, nil
		}
	}
	// the message and its copy of the envelope in one allocation
	hm := &hopMsg{env: *env}
	m := &hm.Message
	switch role {
	case RoleP2P:
		kind := KindP2P
		if env.Kind == KindSystem {
			kind = KindSystem
		}
		s.number(m, kind, 0, to, 0)
	case RoleMcastRoot:
		st, _ := s.coll.group(g)
		switch {
		case s.camel: // the first child: logged once for the whole group (Algorithm 2)
			st.mcastSent++
			s.ssn++
			*m = Message{Kind: KindMulticast, FTHeader: pe.FTHeader{Group: g, Sender: s.me, Recver: -1, SSN: s.ssn, Num: st.mcastSent, Inc: s.inc}}
			m.Dets = s.piggyback()
			s.lastRoot = m
		default:
			if first {
				st.mcastSent++
			}
			s.number(m, KindMulticast, g, to, st.mcastSent)
		}
	case RoleMcastFwd:
		if rx == nil || rx.Group != g {
			return nil, fmt.Errorf("PE %d: forwarding a multicast of group %d that carries no header of that group", s.me, g)
		}
		s.number(m, KindMulticast, g, to, rx.Num)
	case RolePartial:
		if !s.camel {
			s.number(m, KindReduction, g, to, num)
			break
		}
		s.coll.group(g) // its state, which the reduction's acknowledgement finds
		// No ssn: an inner node folds in arrival order, which is not
		// recorded, so its sends must not shift the ssns of the messages
		// its recorded receptions cause.
		*m = Message{Kind: KindReduction, FTHeader: pe.FTHeader{Group: g, Sender: s.me, Recver: to, Num: num, Inc: s.inc}}
		if s.relay != nil {
			m.Safe = s.safeMark()
		}
		m.Dets = s.upDets(to, to == s.coll.t.Root(g))
	default:
		return nil, fmt.Errorf("PE %d: hop of unknown role %d", s.me, role)
	}
	// m carries a copy of the envelope as sent, whose payload the sender
	// handed over; it is logged unless it goes to this PE itself
	hm.env.FT = &m.FTHeader
	m.Env = &hm.env
	if to != s.me {
		if m.Size = pe.PayloadSize(env.Payload); m.Size < 0 {
			m.Size = encodedSize(env)
		}
		if s.volume == nil {
			s.volume = make([]uint64, s.n)
		}
		s.volume[to] += uint64(m.Size)
		if s.teams.Same(to, s.me) && !(s.camel && role == RoleMcastRoot) {
			// inside the team: a failure rolls the receiver back with
			// this PE, whose re-execution sends it again (a CAMEL
			// multicast's one copy, made at its first child, serves
			// every member: it is logged)
			l := &s.notLogged[m.Kind]
			l.TotalMsgs++
			l.TotalBytes += m.bytes()
			if s.camel && role == RolePartial && len(m.Dets) > 0 {
				if s.upKept == nil {
					s.upKept = map[uint64][]upSent{}
				}
				s.logSeq++
				s.upKept[g] = append(s.upKept[g], upSent{num: num, seq: s.logSeq, dets: m.Dets})
			}
		} else if s.lim == nil {
			s.log(m)
		} else {
			s.logSend(m, to)
		}
	}
	if role == RoleMcastRoot && s.camel && s.rb != nil && s.recovering {
		s.toFellowsStraight(m)
	}
	return &m.FTHeader, nil
}

// encodedSize measures a payload whose type does not know its size by
// encoding it (payloads of runtime bookkeeping, mostly).
func encodedSize(env *pe.Envelope) int {
	ti, ok := pe.LookupType(env.Type)
	if !ok || ti.Encode == nil {
		return 0
	}
	b, err := ti.Encode(env.Payload)
	if err != nil {
		return 0
	}
	return len(b)
}

// Reduced tells the root of group g that the runtime delivered its
// reduction num. Under CAMEL in hop mode the root hands result, the
// envelope of what it delivered, to its first child (the keeper) to keep
// until the checkpoint, and keeps a copy itself; the keeper tells the
// root's other children, which drop what they sent for it. Without a
// result nothing is acknowledged.
func (s *Causal) Reduced(g, num uint64, result *pe.Envelope) []Action {
	if !s.camel {
		return nil
	}
	st, _ := s.coll.group(g)
	if !st.complete(num) {
		return nil
	}
	kids := s.coll.t.Children(g, s.me)
	out := s.out[:0]
	if s.keepsResults() {
		// Without a result nothing is acknowledged: the partials stay
		// until the checkpoint, which is safe, only larger.
		if k := s.keeper(g); k >= 0 && result != nil {
			r := s.keepResultCopy(g, num, result)
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktRedResult, From: s.me, To: k, Relog: []*Message{r}}})
		}
		s.out = out[:0]
		return out
	}
	for _, c := range kids {
		out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktRedAck, From: s.me, To: c, Done: []Reduced{{g, num}}}})
	}
	s.out = out[:0]
	return out
}

// keepsResults: CAMEL in hop mode keeps a completed reduction's result
// instead of the partials that reached its root. The runtime's partials
// carry every contribution of their subtree (its floating-point
// reductions fold once, at the root, in contributor order), so keeping
// them until the checkpoint would keep every contribution; the result is
// the size of one.
func (s *Causal) keepsResults() bool { return s.camel }

// resultMark is the Recver of a kept result: sent by a root for its own
// recovery, held by its keeper.
const resultMark = -2

func isResult(m *Message) bool { return m.Kind == KindReduction && m.Recver == resultMark }

// keeper is the PE that keeps group g's results: its root's first child
// (-1 when the root has none). With teams, the first not in the root's
// team, which fails with the root; when every child is, the first PE
// after the root not in its team (outside the tree: it only keeps the
// results and acknowledges them to the root's children). Without one
// (a single team) nothing is acknowledged, and the partials stay logged
// until the checkpoint.
func (s *Causal) keeper(g uint64) int32 {
	root := s.coll.t.Root(g)
	kids := s.coll.t.Children(g, root)
	for _, c := range kids {
		if !s.teams.Same(c, root) {
			return c
		}
	}
	if len(kids) == 0 {
		return -1
	}
	for i := int32(1); i < int32(s.n); i++ {
		if p := (root + i) % int32(s.n); !s.teams.Same(p, root) {
			return p
		}
	}
	return -1
}

// keepResultCopy makes the root's kept result of reduction num: it
// carries the root's unacknowledged determinants, first, and those its
// children's partials to num brought that were new to it (a root
// recovering from the result instead of the partials gets them back with
// it; the others come back with the messages that brought them first:
// see deliver). All of the root's: the keeper stores them, and the
// determinants a PE holds of another's receptions must have no gap (a
// subset, those of the partials' receptions alone, left recoveries
// waiting for a reception whose determinant came while an earlier one's
// was lost). The copies of the partials are dropped: the result stands
// for them.
func (s *Causal) keepResultCopy(g, num uint64, result *pe.Envelope) *Message {
	// piggyback's slice is full: the first append copies it, and
	// without the partials' it is shared as any piggyback is
	dets := s.piggyback()
	keep := s.kept[:0]
	for _, e := range s.kept {
		if m := e.m; m.Group == g && !isResult(m) && m.Num <= num {
			dets = append(dets, m.Dets...)
			s.countLog(m, false)
			count(&s.copies, m, false)
			continue
		}
		keep = append(keep, e)
	}
	clear(s.kept[len(keep):])
	s.kept = keep
	r := &hopMsg{env: *result}
	r.Message = Message{Kind: KindReduction, FTHeader: pe.FTHeader{Group: g, Sender: s.me, Recver: resultMark, Num: num, Inc: s.inc, Dets: dets}, Env: &r.env}
	r.env.FT = &r.FTHeader
	r.Size = max(pe.PayloadSize(result.Payload), 0)
	s.logSeq++
	s.kept = append(s.kept, logEntry{s.logSeq, &r.Message})
	s.countLog(&r.Message, true)
	count(&s.copies, &r.Message, true)
	return &r.Message
}

// storeResult logs a result this PE keeps for its group's root, unless
// it has it or it comes from an incarnation of the root that failed
// since (the new one makes it again, and nobody dropped a partial for
// it). It reports whether it was new.
func (s *Causal) storeResult(m *Message) (bool, error) {
	if !isResult(m) || m.Sender < 0 || int(m.Sender) >= s.n {
		return false, fmt.Errorf("PE %d: a kept result that is not one (group %d, from PE %d)", s.me, m.Group, m.Sender)
	}
	st, err := s.coll.group(m.Group)
	if err != nil {
		return false, err
	}
	if m.Inc < s.incMap[m.Sender] || st.kept.has(m.Num) {
		return false, nil
	}
	st.kept.add(m.Num)
	s.log(m)
	// Only the root's own determinants, its list first (keepResultCopy),
	// are stored here. Its children's, the root stored when their
	// partials came, and it gets them back from this copy if it fails:
	// a child failing later, once the root has recovered, finds them
	// there, and not both at once (ErrConcurrentFailure).
	if own := m.Dets[:ownRun(m.Dets, m.Sender)]; len(own) > 0 {
		s.storeDets(own, m.Sender)
	}
	if s.teams.On() {
		// and those of the root's teammates it carried (its relays):
		// the root does not hold them, and the root's own that this
		// copy makes safe depend on them
		for i := len(m.Dets[:ownRun(m.Dets, m.Sender)]); i < len(m.Dets); {
			j := runEnd(m.Dets, i)
			if o := m.Dets[i].Recver; o != m.Sender && s.teams.Same(o, m.Sender) {
				s.storeDets(m.Dets[i:j], m.Sender)
			}
			i = j
		}
	}
	return true, nil
}

// keepResult is PktRedResult at the keeper: keep the result, then tell
// the tree (at once, or once this PE has recovered).
func (s *Causal) keepResult(p *Packet, out []Action) ([]Action, error) {
	for _, m := range p.Relog {
		fresh, err := s.storeResult(m)
		if err != nil {
			return out, err
		}
		if !fresh {
			continue
		}
		r := Reduced{m.Group, m.Num}
		if s.recovering {
			s.deferred = append(s.deferred, r)
			continue
		}
		if out, err = s.reduced([]Reduced{r}, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// receiveResult: a kept result reached its root, which recovers from a
// checkpoint before that reduction completed. It is held until the
// determinants place it (placeResult).
func (s *Causal) receiveResult(m *Message, out []Action) ([]Action, error) {
	st, err := s.coll.group(m.Group)
	if err != nil {
		return out, err
	}
	if !s.recovering || m.Num <= st.done {
		s.stats.Dropped++ // complete here already
		return out, nil
	}
	s.stats.Held++
	s.hold(m)
	return out, nil
}

// placeResult files a kept result, once for every child's partial it
// stands for that this PE received after its checkpoint, in that
// partial's recorded turn: each copy says that partial is in (and the
// result is known), so the round completes where it did, and the
// receptions are counted as they were. Partials of that reduction still
// to come are duplicates. The receptions are found from the determinants,
// not the tree: a PE recovering from far back may not have set up the
// group yet.
func (s *Causal) placeResult(m *Message) {
	if s.byRound == nil {
		s.byRound = map[[2]uint64][]recordedAt{}
		for k, r := range s.recorded {
			if k.group != 0 {
				key := [2]uint64{k.group, k.ssn}
				s.byRound[key] = append(s.byRound[key], recordedAt{k.sender, r})
			}
		}
	}
	st := s.coll.state[m.Group]
	placed := false
	for _, at := range s.byRound[[2]uint64{m.Group, m.Num}] {
		if w := st.redFrom(at.sender); !w.has(m.Num) {
			w.add(m.Num)
		}
		if at.rsn <= s.rsn {
			continue
		}
		if s.heldRec == nil {
			s.heldRec = map[uint64]*Message{}
		}
		if s.heldRec[at.rsn] != nil {
			s.stats.Dropped++ // the partial itself, replayed: the result stands for it
		}
		cp := &hopMsg{Message: *m, env: *m.Env}
		cp.Sender, cp.env.Src, cp.Env = at.sender, at.sender, &cp.env
		cp.env.FT = &cp.FTHeader
		if placed {
			cp.Dets = nil // brought back once
		}
		s.heldRec[at.rsn], placed = &cp.Message, true
	}
	if !placed {
		s.stats.Dropped++ // every partial it stands for was delivered
	}
}

// recordedAt is a recorded reception of a partial: its sender and rsn.
type recordedAt struct {
	sender int32
	rsn    uint64
}

// ReceiveHop handles an envelope that arrived with a header: it returns
// the actions (at most one delivery, of this envelope or of none).
func (s *Causal) ReceiveHop(env *pe.Envelope) ([]Action, error) {
	h := env.FT
	kind := KindP2P
	switch {
	case h.Group != 0 && (env.Kind == KindMulticast || env.Kind == KindReduction):
		kind = env.Kind
	case env.Kind == KindSystem:
		kind = KindSystem
	}
	// The record is reused: a message delivered at once (most) is done
	// with when this returns, and one kept longer is copied (keep).
	s.rx.fill(env, kind)
	return s.Receive(&Packet{Kind: PktApp, From: h.Sender, To: s.me, Msg: &s.rx.Message})
}

func hopMessage(env *pe.Envelope, kind MsgKind) *Message {
	hm := &hopMsg{}
	hm.fill(env, kind)
	hm.env.FT = &hm.FTHeader
	return &hm.Message
}

// fill makes hm the record of env, arrived with its header. The record's
// envelope keeps env's header (which nobody changes): the runtime keeps
// the envelope it delivers, and reads the header when it passes a
// multicast on, after hm is reused.
func (hm *hopMsg) fill(env *pe.Envelope, kind MsgKind) {
	hm.env = *env
	hm.Message = Message{FTHeader: *env.FT, Kind: kind, Env: &hm.env}
	if size := pe.PayloadSize(env.Payload); size > 0 {
		hm.Size = size
	}
}

// keep returns m to keep past the current Receive: the record ReceiveHop
// reuses is copied.
func (s *Causal) keep(m *Message) *Message {
	if m != &s.rx.Message {
		return m
	}
	cp := &hopMsg{Message: s.rx.Message, env: s.rx.env}
	cp.Env = &cp.env
	cp.env.FT = &cp.FTHeader
	return &cp.Message
}

// LoggedMessage rebuilds a logged message from its envelope (which
// carries its header): the contributions a root hands back to a
// recovering child (Packet.Relog) travel between PEs as envelopes.
func LoggedMessage(env *pe.Envelope) (*Message, error) {
	if env.FT == nil {
		return nil, fmt.Errorf("a logged message without its header (%s)", pe.TypeName(env.Type))
	}
	if env.Kind != pe.KindReduction {
		return nil, fmt.Errorf("a logged %s is not a contribution (kind %d)", pe.TypeName(env.Type), env.Kind)
	}
	return hopMessage(env, KindReduction), nil
}

// hopMsg keeps a received message and its envelope in one allocation.
type hopMsg struct {
	Message
	env pe.Envelope
}
