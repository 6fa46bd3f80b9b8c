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
// mode, for a job of n PEs whose groups' trees t describes.
func NewHopCausal(me int32, n int, t Trees, camel bool) *Causal {
	s := newCausal(me, n, Collectives{}, camel)
	s.coll.t, s.coll.ext = t, true
	return s
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
	var m *Message
	switch role {
	case RoleP2P:
		kind := KindP2P
		if env.Kind == KindSystem {
			kind = KindSystem
		}
		m = s.header(kind, 0, to, 0, nil)
	case RoleMcastRoot:
		st, _ := s.coll.group(g)
		switch {
		case first && s.camel:
			// logged once for the whole group (Algorithm 2)
			st.mcastSent++
			s.ssn++
			m = &Message{Kind: KindMulticast, FTHeader: pe.FTHeader{Group: g, Sender: s.me, Recver: -1, SSN: s.ssn, Num: st.mcastSent, Inc: s.inc}}
			m.Dets = s.piggyback()
			s.lastRoot = m
		case s.camel:
			if s.lastRoot == nil || s.lastRoot.Group != g {
				return nil, fmt.Errorf("PE %d: a multicast of group %d continued before it began", s.me, g)
			}
			return &s.lastRoot.FTHeader, nil
		default:
			if first {
				st.mcastSent++
			}
			m = s.header(KindMulticast, g, to, st.mcastSent, nil)
		}
	case RoleMcastFwd:
		if rx == nil || rx.Group != g {
			return nil, fmt.Errorf("PE %d: forwarding a multicast of group %d that carries no header of that group", s.me, g)
		}
		if s.camel {
			// forwarded unlogged, without the root's determinants
			fwd := *rx
			fwd.Dets, fwd.Recver = nil, -1
			return &fwd, nil
		}
		m = s.header(KindMulticast, g, to, rx.Num, nil)
	case RolePartial:
		if !s.camel {
			m = s.header(KindReduction, g, to, num, nil)
			break
		}
		st, _ := s.coll.group(g)
		st.forwarded = max(st.forwarded, num)
		// No ssn: an inner node folds in arrival order, which is not
		// recorded, so its sends must not shift the ssns of the messages
		// its recorded receptions cause.
		m = &Message{Kind: KindReduction, FTHeader: pe.FTHeader{Group: g, Sender: s.me, Recver: to, Num: num, Inc: s.inc}}
		if to == s.coll.t.Root(g) {
			m.Dets = s.piggyback()
		}
	default:
		return nil, fmt.Errorf("PE %d: hop of unknown role %d", s.me, role)
	}
	// m carries a copy of the envelope as sent, whose payload the sender
	// handed over; it is logged unless it goes to this PE itself
	e := *env
	e.FT = &m.FTHeader
	m.Env = &e
	if to != s.me {
		if m.Size = pe.PayloadSize(env.Payload); m.Size < 0 {
			m.Size = encodedSize(env)
		}
		s.log(m)
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
// reduction num. Under CAMEL the news goes down the tree, and the
// partials logged for it are dropped (those sent to the root stay until
// the checkpoint).
func (s *Causal) Reduced(g, num uint64) []Action {
	if !s.camel {
		return nil
	}
	st, _ := s.coll.group(g)
	if !st.complete(num) {
		return nil
	}
	out := s.out[:0]
	for _, c := range s.coll.t.Children(g, s.me) {
		out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktRedAck, From: s.me, To: c, Done: []Reduced{{g, num}}}})
	}
	s.out = out[:0]
	return out
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
	return s.Receive(&Packet{Kind: PktApp, From: h.Sender, To: s.me, Msg: hopMessage(env, kind)})
}

func hopMessage(env *pe.Envelope, kind MsgKind) *Message {
	hm := &hopMsg{env: *env}
	hm.Message = Message{FTHeader: *env.FT, Kind: kind, Env: &hm.env}
	hm.env.FT = &hm.FTHeader
	if size := pe.PayloadSize(env.Payload); size > 0 {
		hm.Size = size
	}
	return &hm.Message
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
