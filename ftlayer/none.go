package ftlayer

import (
	"fmt"
	"github.com/charmgo/charmgo/pe"
	"slices"
)

// NoneFactory makes the checkpoint/restart baseline: nothing is logged and
// a failure rolls every PE back to the last committed checkpoint.
type NoneFactory struct{ Coll Collectives }

func (NoneFactory) Name() string       { return "none" }
func (NoneFactory) RollsBackAll() bool { return true }
func (f NoneFactory) New(me int32, n int) Protocol {
	return &None{me: me, incMap: make([]uint32, n), coll: newColls(me, f.Coll)}
}
func (f NoneFactory) Restart(me int32, n int, ck Counters, inc uint32) Protocol {
	p := &None{me: me, ssn: ck.SSN, incMap: make([]uint32, n), coll: newColls(me, f.Coll)}
	copy(p.incMap, ck.IncMap)
	p.coll.restore(ck.Groups)
	p.inc = inc
	p.incMap[me] = inc
	p.stats.RolledBack = 1
	return p
}

// None is the checkpoint/restart baseline's per-PE protocol: messages are
// stamped (sequence and incarnation, so a rolled-back run's stale messages
// are dropped) and delivered as they come; nothing is logged. Collectives
// travel hop by hop along their trees.
type None struct {
	me     int32
	ssn    uint64
	inc    uint32
	incMap []uint32
	coll   colls
	stats  Stats
	out    []Action
}

func (p *None) msg(kind MsgKind, g uint64, to int32, num uint64, payload []byte) Action {
	p.ssn++
	m := &Message{Kind: kind, Payload: payload, FTHeader: pe.FTHeader{Group: g, Sender: p.me, Recver: to, SSN: p.ssn, Num: num, Inc: p.inc}}
	return Action{Kind: ActSend, Packet: Packet{Kind: PktApp, From: p.me, To: to, Msg: m}}
}

func (p *None) Send(to int32, payload []byte) Packet { return p.msg(KindP2P, 0, to, 0, payload).Packet }

func (p *None) Multicast(g uint64, payload []byte) ([]Action, error) {
	st, err := p.coll.rootOf(g)
	if err != nil {
		return nil, err
	}
	st.mcastSent++
	return p.forward(g, st.mcastSent, payload, nil), nil
}

func (p *None) forward(g uint64, num uint64, payload []byte, out []Action) []Action {
	for _, c := range p.coll.t.Children(g, p.me) {
		out = append(out, p.msg(KindMulticast, g, c, num, payload))
	}
	return out
}

func (p *None) Contribute(g uint64, payload []byte) ([]Action, error) {
	st, err := p.coll.group(g)
	if err != nil {
		return nil, err
	}
	st.contributed++
	p.coll.add(g, st, st.contributed, -1, payload)
	return p.fold(g, st, nil), nil
}

func (p *None) fold(g uint64, st *groupState, out []Action) []Action {
	for {
		k, val, ok := p.coll.ready(g, st)
		if !ok {
			return out
		}
		if p.coll.isRoot(g) {
			out = append(out, p.coll.result(g, k, val))
			continue
		}
		out = append(out, p.msg(KindReduction, g, p.coll.t.Parent(g, p.me), k, val))
	}
}

func (p *None) Receive(pk *Packet) ([]Action, error) {
	if pk.Kind != PktApp {
		return nil, nil
	}
	m := pk.Msg
	if m.Sender < 0 || int(m.Sender) >= len(p.incMap) {
		return nil, fmt.Errorf("PE %d: message from PE %d, outside 0..%d", p.me, m.Sender, len(p.incMap)-1)
	}
	if m.Inc < p.incMap[m.Sender] {
		p.stats.Dropped++
		return nil, nil
	}
	out := p.out[:0]
	defer func() { p.out = out[:0] }()
	switch m.Kind {
	case KindMulticast:
		if _, err := p.coll.group(m.Group); err != nil {
			return nil, err
		}
		out = p.forward(m.Group, m.Num, m.Payload, append(out, Action{Kind: ActDeliver, Msg: m}))
		return out, nil
	case KindReduction:
		st, err := p.coll.group(m.Group)
		if err != nil {
			return nil, err
		}
		if st.has(m.Num, m.Sender) {
			return nil, fmt.Errorf("PE %d: contribution %d to group %d from PE %d came twice", p.me, m.Num, m.Group, m.Sender)
		}
		p.coll.add(m.Group, st, m.Num, m.Sender, m.Payload)
		out = p.fold(m.Group, st, out)
		return out, nil
	}
	out = append(out, Action{Kind: ActDeliver, Msg: m})
	return out, nil
}

func (p *None) Next() []Action    { return nil }
func (p *None) Abort()            {}
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
	return Counters{SSN: p.ssn, Inc: p.inc, IncMap: slices.Clone(p.incMap), Groups: p.coll.snapshot()}
}
func (p *None) Stats() Stats { return p.stats }
