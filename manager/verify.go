package manager

import (
	"fmt"
	"hash/fnv"

	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// --ft-verify checks what message logging takes for granted: that a PE
// re-executing after a failure sends what its first execution sent. Each
// PE keeps a hash of every logged message it handles since its last
// checkpoint, by its place on its channel; a copy that arrives again — a
// recovered PE re-sending, as it re-executes, what this PE had from its
// first execution — is dropped by the protocol, and here compared: other
// contents end the run, naming the message, its entry and both PEs. A
// program whose entries are not deterministic (a map's order, a clock, a
// random number, a reading of the PE it runs on) fails so instead of
// ending with another answer.

// verifyKey is a message's place: its sender and, by protocol, its
// channel number, group and number in it; under a protocol that names
// messages (spmd), its name and the element it is delivered to.
type verifyKey struct {
	sender   int32
	group    uint64
	csn, num uint64
	name     pe.MsgName
	index    pe.Index
}

func keyOf(env *pe.Envelope) verifyKey {
	h := env.FT
	if h.Name != nil {
		return verifyKey{name: h.Name.Key(), index: env.Index}
	}
	return verifyKey{sender: h.Sender, group: h.Group, csn: h.CSN, num: h.Num}
}

// hashOf hashes values that print the same in every execution.
func hashOf(vs ...any) uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, vs...)
	return h.Sum64()
}

// ContentHash is what a message says: its type, destination and payload
// (inline in Seq and Aux, or encoded), not its protocol header, which a
// new incarnation stamps anew, nor, for a multicast, the runtime's
// routing in Seq and Aux (the section's current id, which changes when
// the section is set up again after a balancing step, at a moment that
// varies from run to run; a broadcast's number): its payload names the
// section the program multicasts to, if the program put it there.
func ContentHash(env *pe.Envelope) (uint64, bool) {
	h := fnv.New64a()
	seq, aux := env.Seq, env.Aux
	if env.Kind == pe.KindMulticast {
		seq, aux = 0, 0
	}
	fmt.Fprintf(h, "%d/%d/%v/%d/%d:", env.Type, env.Coll, env.Index, seq, aux)
	if env.Kind == pe.KindReduction && env.Payload != nil {
		// a contribution or partial holds its values unencoded until it
		// crosses a process: its type's codec encodes them (as the
		// reducer's codec says; no map's order to fear)
		if ti, ok := pe.LookupType(env.Type); ok && ti.Encode != nil {
			b, err := ti.Encode(env.Payload)
			if err != nil {
				return 0, false
			}
			h.Write(b)
			return h.Sum64(), true
		}
	}
	if env.Payload != nil {
		// msgpack with a map's keys in order (the types' own codecs
		// encode a map in Go's random order: the same message would
		// hash otherwise)
		enc := msgpack.NewEncoder(h)
		enc.SetSortMapKeys(true)
		if err := enc.Encode(env.Payload); err != nil {
			return 0, false
		}
	}
	return h.Sum64(), true
}

// Measured reports whether env carries measurements, which differ from
// one execution to the next (chare.Measurement): its type's messages do,
// or it is a contribution to, or a partial of, a reduction whose result
// goes to an entry whose messages do.
func Measured(env *pe.Envelope) bool {
	if pe.Measured(env.Type) {
		return true
	}
	switch p := env.Payload.(type) {
	case *ContribMsg:
		return p.CB.Entry != 0 && pe.Measured(p.CB.Entry)
	case *PartialMsg:
		cb := p.CB
		if p.p != nil {
			cb = p.p.CB
		}
		return cb.Entry != 0 && pe.Measured(cb.Entry)
	}
	return false
}

// deliverTo asks the hook whether env is new at element e (a copy had
// already is not delivered; under --ft-verify it is compared).
func (m *Manager) deliverTo(e *Element, env *pe.Envelope) bool {
	ok := m.dedup.DeliverTo(&e.FTNames, env)
	m.takeProcessed()
	if m.opt.FTVerify && env.FT != nil && env.FT.Name != nil {
		if !ok {
			if err := m.verifyDropped(env); err != nil {
				m.Fail(err)
			}
		} else if h, ok := ContentHash(env); ok {
			if m.verified == nil {
				m.verified = map[verifyKey]uint64{}
			}
			m.verified[keyOf(env)] = h
		}
	}
	return ok
}

// verifyHandled records a logged message this PE handles.
func (m *Manager) verifyHandled(env *pe.Envelope) {
	if env.FT == nil {
		return
	}
	if n := env.FT.Name; n != nil && m.dedup != nil && (n.Kind == pe.NameOrigin || n.Kind == pe.NameResult) && !(treesOf{m}).PEAddressed(env) {
		return // recognised at its element: recorded there (deliverTo)
	}
	if h, ok := ContentHash(env); ok {
		if m.verified == nil {
			m.verified = map[verifyKey]uint64{}
		}
		m.verified[keyOf(env)] = h
	}
}

// verifyDropped compares a copy the protocol dropped with the message
// this PE handled at its place, if it did.
func (m *Manager) verifyDropped(env *pe.Envelope) error {
	if env.FT == nil || env.Type == tLBPart || Measured(env) {
		// (a balancing step's load measurements are measured anew, and
		// differ: the plan made from the first ones reaches a PE that
		// re-executes through the log of its witness, see Hook.Witness;
		// so do a program's, chare.Measurement)
		return nil
	}
	was, ok := m.verified[keyOf(env)]
	if !ok {
		return nil // an old incarnation's, or a replay of one not handled here
	}
	now, ok := ContentHash(env)
	if !ok {
		return nil
	}
	m.Stats.Verified++
	if now == was {
		return nil
	}
	if n := env.FT.Name; n != nil {
		return fmt.Errorf("--ft-verify: %v (%s, to %v) came to PE %d again after a rollback with other contents than its first execution sent: the program is not send-deterministic (an element sends otherwise depending on the order its messages come in, or reads a map's order, a clock, a random number?), and logging without determinants cannot recover it",
			n, pe.TypeName(env.Type), env.Index, m.Me())
	}
	return fmt.Errorf("--ft-verify: PE %d re-executing after a failure sent PE %d its message %d (%s, to %v) with other contents than its first execution did: the entry is not deterministic (a map's order, a clock, a random number?), and message logging cannot recover it",
		env.FT.Sender, m.Me(), max(env.FT.CSN, env.FT.Num), pe.TypeName(env.Type), env.Index)
}
