package ftsim

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

// Sends is what the elements of one run sent, by origin (pe.Origin: the
// element and its message's number among those it sent): the contract of
// message logging without determinants (docs/SPMD.md) is that two
// executions of a program send the same Sends, whatever order their
// messages arrived in. Runs interleaved by different seeds are such
// executions; DiffSends says where a program breaks the contract.
type Sends struct {
	mu  sync.Mutex
	got map[sendKey]SentMsg
	bad []string // messages whose contents could not be hashed
}

// sendKey names a message the same way in every execution: an element's
// by its origin; a reduction's partial, which a PE sends for its
// elements and its children in the reduction's tree, by its group,
// reduction number and sender.
type sendKey struct {
	pe.Origin
	Group, Num uint64
	From       int32
}

func (k sendKey) String() string {
	if k.Group != 0 {
		return fmt.Sprintf("group %#x, reduction %d: PE %d's partial", k.Group, k.Num, k.From)
	}
	return fmt.Sprintf("collection %d, element %v: its message %d", k.Coll, k.Index, k.K)
}

// SentMsg is one message an element sent: what it says (manager.
// ContentHash: entry, destination, payload) and its entry.
type SentMsg struct {
	Hash uint64
	Type uint32
}

// RecordSends returns cfg set to record into a new Sends what every
// element sends, through a hook around the protocol's that names
// messages by their origin.
func RecordSends(cfg chare.Config) (chare.Config, *Sends) {
	s := &Sends{got: map[sendKey]SentMsg{}}
	cfg.WrapHook = func(me int, h ftlayer.Hook, t ftlayer.Trees) ftlayer.Hook {
		o, _ := t.(ftlayer.Origins)
		return &sendRecorder{Wrapper: ftlayer.Wrapper{Hook: h}, me: int32(me), origins: o, to: s}
	}
	return cfg, s
}

// Len is how many messages were recorded.
func (s *Sends) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// sendRecorder is a hook around a protocol's that records each message an
// element sends, at its first hop, before the protocol stamps it.
type sendRecorder struct {
	ftlayer.Wrapper
	me      int32
	origins ftlayer.Origins
	to      *Sends
}

func (r *sendRecorder) UsesOrigins() bool { return r.origins != nil || r.Wrapper.UsesOrigins() }

func (r *sendRecorder) Send(dst int, role ftlayer.Role, g, num uint64, first bool, env *pe.Envelope) error {
	switch {
	case role == ftlayer.RolePartial:
		r.to.record(sendKey{Group: g, Num: num, From: r.me}, env)
	case r.origins != nil && env.Kind != pe.KindSystem:
		if o, ok := r.origins.Origin(); ok {
			r.to.record(sendKey{Origin: o}, env)
		}
	}
	return r.Wrapper.Send(dst, role, g, num, first, env)
}

// record keeps env as message o: its first hop only (a multicast leaves
// its root as several, with one origin).
func (s *Sends) record(o sendKey, env *pe.Envelope) {
	h, ok := manager.ContentHash(env)
	if manager.Measured(env) {
		h, ok = 0, true // that it was sent, not what it says
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, seen := s.got[o]; seen {
		return
	}
	if !ok {
		s.bad = append(s.bad, fmt.Sprintf("%v (%s): its payload does not encode", o, pe.TypeName(env.Type)))
	}
	s.got[o] = SentMsg{Hash: h, Type: env.Type}

}

// DiffSends lists, in origin order and at most max of them, the messages
// in which two runs' Sends differ: sent by one run only, or with other
// contents. Nothing listed: every element sent the same messages in both.
func DiffSends(a, b *Sends, max int) []string {
	var out []string
	out = append(out, a.bad...)
	out = append(out, b.bad...)
	var keys []sendKey
	for o := range a.got {
		keys = append(keys, o)
	}
	for o := range b.got {
		if _, ok := a.got[o]; !ok {
			keys = append(keys, o)
		}
	}
	slices.SortFunc(keys, func(x, y sendKey) int {
		return cmp.Or(cmp.Compare(x.Group, y.Group), cmp.Compare(x.Num, y.Num), cmp.Compare(x.From, y.From),
			cmp.Compare(x.Coll, y.Coll), x.Index.Compare(y.Index), cmp.Compare(x.K, y.K))
	})
	for _, o := range keys {
		if len(out) >= max {
			break
		}
		x, inA := a.got[o]
		y, inB := b.got[o]
		switch {
		case !inA:
			out = append(out, fmt.Sprintf("%v (%s) was sent by the second run only", o, pe.TypeName(y.Type)))
		case !inB:
			out = append(out, fmt.Sprintf("%v (%s) was sent by the first run only", o, pe.TypeName(x.Type)))
		case x.Type != y.Type:
			out = append(out, fmt.Sprintf("%v is %s in one run and %s in the other", o, pe.TypeName(x.Type), pe.TypeName(y.Type)))
		case x != y:
			out = append(out, fmt.Sprintf("%v (%s) has other contents in the other run", o, pe.TypeName(x.Type)))
		}
	}
	return out
}
