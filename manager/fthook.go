package manager

import (
	"fmt"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// The fault-tolerance hook (ftlayer.Hook) sits on the manager's send and
// receive paths. The manager tells it what part each hop plays in its
// trees — a multicast leaving its root or forwarded, a partial result going
// up — so a collective-aware protocol can log accordingly, and never asks
// which protocol is on.
//
// Group ids, as the hook sees them: a collection's (its PE tree, rooted at
// PE 0) is its collection id; a section's is its section id (>= 1<<40).

// HookFactory makes PE me's hook; t answers for the PE's trees and net
// carries the hook's packets.
type HookFactory func(me, n int, t ftlayer.Trees, net func(dst int, p *ftlayer.Packet)) ftlayer.Hook

// FTPacketMsg carries a packet between two PEs' hooks: acknowledgements,
// and what a recovering PE is sent (determinants, completed reductions,
// and its own contributions handed back, with their headers).
type FTPacketMsg struct {
	Kind  ftlayer.PacketKind
	Dets  []pe.Det
	Done  []ftlayer.Reduced
	Relog Envelopes `msgpack:",omitempty"`
	// Covered and Inc: see ftlayer.Packet
	Covered uint64 `msgpack:",omitempty"`
	Inc     uint32 `msgpack:",omitempty"`
	// Replayed and Names: see ftlayer.Packet
	Replayed uint64       `msgpack:",omitempty"`
	Names    []pe.MsgName `msgpack:",omitempty"`
	Phases   []uint64     `msgpack:",omitempty"`
}

// Envelopes travel inside a message as they are within a process, and in
// their wire form (pe.EncodeEnvelope) between processes. A root hands a
// recovering child back megabytes of contributions: encoding them only to
// decode them on the same process cost CAMEL's recovery more time than
// its replay.
type Envelopes []pe.Envelope

// EncodeMsgpack implements msgpack.CustomEncoder.
func (es Envelopes) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(len(es)); err != nil {
		return err
	}
	var b []byte
	for i := range es {
		var err error
		if b, err = pe.EncodeEnvelope(b[:0], &es[i]); err != nil {
			return fmt.Errorf("envelope %d: %w", i, err)
		}
		if err := enc.EncodeBytes(b); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (es *Envelopes) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil || n <= 0 {
		*es = nil
		return err
	}
	out := make(Envelopes, 0, min(n, 1024)) // n is not trusted
	for i := 0; i < n; i++ {
		b, err := dec.DecodeBytes()
		if err != nil {
			return fmt.Errorf("envelope %d: %w", i, err)
		}
		env, used, err := pe.DecodeEnvelope(b)
		if err == nil && used != len(b) {
			err = fmt.Errorf("%d bytes after the envelope", len(b)-used)
		}
		if err != nil {
			return fmt.Errorf("envelope %d: %w", i, err)
		}
		out = append(out, env)
	}
	*es = out
	return nil
}

var tFTPacket uint32

func init() { tFTPacket = RegisterMsgpackType[*FTPacketMsg]("mgr.ftPacket") }

// unlogged reports system messages no protocol logs: the runtime's
// control (see control), which is coordinated, not replayed, and the
// global restart's order to restore. (Quiescence probes bypass the send
// path altogether.)
func unlogged(typ uint32) bool { return typ == tRestore || control(typ) }

func (m *Manager) newHook() {
	m.ft, m.ftOn = ftlayer.NopHook{}, false
	if m.opt.FT != nil {
		m.ft = m.opt.FT(m.Me(), m.NumPEs(), treesOf{m}, m.ftNet)
		_, nop := m.ft.(ftlayer.NopHook)
		m.ftOn = !nop
	}
	ou, ok := m.ft.(ftlayer.OriginUser)
	m.origins = ok && ou.UsesOrigins()
	m.dedup, _ = m.ft.(ftlayer.ElementDedup)
	m.counter, _ = m.ft.(ftlayer.Counter)
	m.ft.OnRelease(m.logReleased)
}

// stamp has the hook stamp env, one hop to PE dst, through a scratch
// envelope: env itself, passed to an interface method, would escape, and
// every caller's envelope with it (one allocation per message, with or
// without a protocol). It reports false if the run failed.
func (m *Manager) stamp(dst int, role ftlayer.Role, g, num uint64, first bool, env *pe.Envelope) bool {
	s := m.ftEnv
	if s == nil {
		s = new(pe.Envelope)
	}
	m.ftEnv = nil // a hook that sends from Send gets a scratch of its own
	*s = *env
	err := m.ft.Send(dst, role, g, num, first, s)
	*env = *s
	*s = pe.Envelope{}
	m.ftEnv = s
	if err != nil {
		m.Fail(err)
		return false
	}
	return true
}

// takeProcessed applies the hook's correction of the count of messages
// processed (ftlayer.Counter).
func (m *Manager) takeProcessed() {
	if m.counter != nil {
		if d := m.counter.TakeProcessed(); d != 0 {
			m.Processed = uint64(int64(m.Processed) + d)
		}
	}
}

// logReleased takes back what this PE contributed to a partial its log let
// go of (see Hook.OnRelease): its reducer may reuse the values.
func (m *Manager) logReleased(env *pe.Envelope) {
	pm, ok := env.Payload.(*PartialMsg)
	if !ok || len(pm.owned) == 0 || pm.p == nil {
		return
	}
	if red := LookupReducer(pm.p.Reducer); red != nil && red.Recycle != nil {
		for _, v := range pm.owned {
			red.Recycle(v)
		}
	}
	pm.owned = nil
}

func (m *Manager) ftNet(dst int, p *ftlayer.Packet) {
	if p.Kind == ftlayer.PktApp {
		// a logged message sent again: a copy, not counted as sent
		env := *p.Msg.Env
		m.PE.Send(dst, &env)
		return
	}
	msg := &FTPacketMsg{Kind: p.Kind, Dets: p.Dets, Done: p.Done, Covered: p.Covered, Inc: p.Inc, Replayed: p.Replayed, Names: p.Names, Phases: p.Phases}
	if len(p.Relog) > 0 {
		msg.Relog = make(Envelopes, len(p.Relog))
		for i, r := range p.Relog {
			msg.Relog[i] = *r.Env
		}
	}
	env := &pe.Envelope{Type: tFTPacket, Kind: pe.KindSystem, Payload: msg}
	if p.Kind == ftlayer.PktReplayed {
		// It says every replayed message was sent: it must not overtake
		// them, and the replays of application messages go in the
		// application lane. (Overtaking them, it ended the recovery
		// before they came, and the determinants they bring back for
		// others were missing when one of those failed next.)
		env.Flags = pe.FlagAppLane
	}
	m.send(dst, env)
}

func (m *Manager) onFTPacket(env *pe.Envelope) {
	msg := env.Payload.(*FTPacketMsg)
	p := &ftlayer.Packet{Kind: msg.Kind, From: env.Src, To: int32(m.Me()), Dets: msg.Dets, Done: msg.Done, Covered: msg.Covered, Inc: msg.Inc, Replayed: msg.Replayed, Names: msg.Names, Phases: msg.Phases}
	for i := range msg.Relog {
		lm, err := ftlayer.LoggedMessage(&msg.Relog[i])
		if err != nil {
			m.Fail(fmt.Errorf("PE %d: logged contribution %d from PE %d: %w", m.Me(), i, env.Src, err))
			return
		}
		p.Relog = append(p.Relog, lm)
	}
	if err := m.ft.Packet(p); err != nil {
		m.Fail(err)
	}
}

// FT is this PE's fault-tolerance hook.
func (m *Manager) FT() ftlayer.Hook { return m.ft }

// sendHop sends one hop of a collective, telling the hook its role.
func (m *Manager) sendHop(dst int, role ftlayer.Role, g, num uint64, first bool, env *pe.Envelope) {
	if m.ftOn && !m.stamp(dst, role, g, num, first, env) {
		return
	}
	m.Sent++
	m.PE.Send(dst, env)
}

// sendTree sends env down tree t to this PE's children: from the root it
// leaves as a new multicast, from an inner node it is forwarded.
func (m *Manager) sendTree(t *Tree, g uint64, env *pe.Envelope) {
	var kids [8]int
	role := ftlayer.RoleMcastFwd
	if t.Root() == m.Me() {
		role = ftlayer.RoleMcastRoot
	}
	ch := t.Children(m.Me(), kids[:0])
	for i, c := range ch {
		m.sendHop(c, role, g, 0, i == 0, env)
	}
	if len(ch) > 0 {
		// Hand the hops over now: the PE is about to deliver to its own
		// elements, which may take long, and the children's PEs wait for
		// nothing else (held in the batch, a broadcast reached the other
		// PEs only after this one had run its elements: 2 PEs worked one
		// after the other).
		m.PE.Flush()
	}
}

// treesOf answers the hook's questions about the manager's trees, and
// about the origin of the message it stamps (ftlayer.Origins).
type treesOf struct{ m *Manager }

func (t treesOf) Origin() (pe.Origin, bool) { return t.m.origin, t.m.hasOrigin }

// Result implements ftlayer.Namer.
func (t treesOf) Result() (g, num uint64, ok bool) {
	r := t.m.result
	return r.g, r.num, r.on
}

// ContentsHash implements ftlayer.Namer: what a message of the runtime's
// own says, except where that differs from one execution to the next
// while the message is the same: an element's migration (its state may
// hold measurements) is named by the element and its move; a
// measurement (loads, a plan made from them, the bytes a step moved,
// a dump) by its type and collection (and a plan by its way round the
// witness), its number on its channel telling it apart: two
// collections' balancing steps interleave differently from one
// execution to the next, one collection's follow each other.
func (t treesOf) ContentsHash(env *pe.Envelope) uint64 {
	switch env.Type {
	case tMigrate:
		if mm, ok := env.Payload.(*MigrateMsg); ok {
			return hashOf(env.Type, mm.Coll, mm.Index, mm.Moves)
		}
	case tPlan:
		if pm, ok := env.Payload.(*PlanMsg); ok {
			return hashOf(env.Type, pm.Coll, pm.Round, pm.Periodic)
		}
		return hashOf(env.Type)
	case tLBPart:
		if pm, ok := env.Payload.(*LBPartMsg); ok {
			return hashOf(env.Type, pm.Coll)
		}
		return hashOf(env.Type)
	case tPlanDone:
		if pd, ok := env.Payload.(*PlanDoneMsg); ok {
			return hashOf(env.Type, pd.Coll)
		}
		return hashOf(env.Type)
	case tStranded:
		return hashOf(env.Type)
	case tSection:
		// a section's setup says where its members are as its root
		// learnt it, which a re-execution may learn in another order: a
		// section (its id, the same) is set up on a PE once
		if sm, ok := env.Payload.(*SectionMsg); ok {
			return hashOf(env.Type, sm.Sec)
		}
	}
	if Measured(env) {
		return hashOf(env.Type)
	}
	h, ok := ContentHash(env)
	if !ok {
		return hashOf(env.Type, "unencodable")
	}
	return h
}

// BcastHop implements ftlayer.Namer.
func (t treesOf) BcastHop(env *pe.Envelope) bool {
	return env.Kind == pe.KindMulticast && env.Flags == flagBcastHop
}

// PEAddressed implements ftlayer.Namer: a broadcast's request and hops,
// and a section multicast's request to its root, go to PEs fixed in every
// execution; a multicast's hops follow its section's tree, which a
// balancing step may set up again at a moment that varies.
func (t treesOf) PEAddressed(env *pe.Envelope) bool {
	return env.Kind == pe.KindMulticast && (env.Flags == flagBcastReq || env.Flags == flagBcastHop || env.Flags == flagSecReq)
}

// Hint implements ftlayer.Namer: location updates and queries, and
// dumps, may come twice or not again without harm.
func (t treesOf) Hint(env *pe.Envelope) bool {
	switch env.Type {
	case tLoc, tLocQuery, tDump:
		return true
	}
	return false
}

// from starts a message element e sends (nil: the runtime's own): for a
// hook that names messages by their origin, e counts it and the hook is
// told its origin until sent ends it.
func (m *Manager) from(e *Element) {
	if m.origins && e != nil {
		e.Sends++
		m.origin, m.hasOrigin = pe.Origin{Coll: e.Coll.ID, Index: e.Index, K: e.Sends}, true
	}
}

// keepOrigin gives env, an element's message this PE keeps before it
// sends it on (its section or collection is not set up here yet), the
// origin it is being sent with: sent on later, it is named by it. (A
// header of its own, numbered 0 on no channel: the hook stamps the hop
// that carries it, and takes only its name.)
func (m *Manager) keepOrigin(env *pe.Envelope) {
	if m.hasOrigin && env.FT == nil {
		env.FT = &pe.FTHeader{Sender: int32(m.Me()), Recver: int32(m.Me()), Inc: m.rec.inc,
			Name: &pe.MsgName{Kind: pe.NameOrigin, Origin: m.origin, At: int32(m.Me()), AtInc: m.rec.inc}}
	}
}

// sent ends what from started.
func (m *Manager) sent() { m.hasOrigin = false }

func (t treesOf) tree(g uint64) *Tree {
	if g < 1<<32 {
		if c := t.m.colls[uint32(g)]; c != nil {
			return c.tree
		}
		return nil
	}
	if s := t.m.secs[g]; s != nil {
		return s.Tree
	}
	return nil
}

func (t treesOf) Root(g uint64) int32 {
	if g >= 1<<32 {
		return int32(t.m.sectionRoot(g)) // known before the section is set up here
	}
	if tr := t.tree(g); tr != nil {
		return int32(tr.Root())
	}
	return -1
}

func (t treesOf) Parent(g uint64, p int32) int32 {
	if tr := t.tree(g); tr != nil {
		return int32(tr.Parent(int(p)))
	}
	return -1
}

func (t treesOf) Children(g uint64, p int32) []int32 {
	tr := t.tree(g)
	if tr == nil {
		return nil
	}
	var kids [8]int
	var out []int32
	for _, c := range tr.Children(int(p), kids[:0]) {
		out = append(out, int32(c))
	}
	return out
}

func (t treesOf) Has(g uint64, p int32) bool {
	tr := t.tree(g)
	return tr != nil && tr.Contains(int(p))
}
