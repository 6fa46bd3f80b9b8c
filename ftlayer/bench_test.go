package ftlayer

import (
	"testing"

	"github.com/charmgo/charmgo/pe"
)

// benchHops runs hooks of n PEs over one binary tree (group 1: PEs
// 0..n-1, rooted at 0) as the runtime's manager calls them: Send on every
// hop, Arrive on every envelope, Idle when a PE's turn ends (the batched
// acknowledgements), Packet for what the hooks send each other. The
// harness itself allocates nothing per message.
type benchHops struct {
	h   *hopNet
	env []pe.Envelope
}

func newBenchHops(b *testing.B, proto string) *benchHops {
	t := &testing.T{}
	c := HookConfig{}
	if proto == "scmel+limit" {
		// a limit never reached: what the machinery costs when it is on
		proto, c.Limit = "scmel", LogLimit{Bytes: 1 << 40}
	}
	h := newHopNetWith(t, 7, 2, proto, c)
	if t.Failed() {
		b.Fatal("hop net")
	}
	return &benchHops{h: h}
}

func (n *benchHops) hop(from, to int, role Role, num uint64, first bool, env *pe.Envelope) {
	if err := n.h.hooks[from].Send(to, role, 1, num, first, env); err != nil {
		panic(err)
	}
	if a, err := n.h.hooks[to].Arrive(env); err != nil || a != Handle {
		panic(err)
	}
}

// settle lets the PEs go idle and delivers the packets that causes.
func (n *benchHops) settle() {
	for _, hk := range n.h.hooks {
		hk.Idle()
	}
	for len(n.h.acks) > 0 {
		p := n.h.acks[0]
		n.h.acks = n.h.acks[1:]
		if err := n.h.hooks[p.To].Packet(&p); err != nil {
			panic(err)
		}
	}
	n.h.acks = n.h.acks[:0]
}

func (n *benchHops) checkpoint() {
	for _, hk := range n.h.hooks {
		hk.Prepare()
	}
	for _, hk := range n.h.hooks {
		hk.Checkpoint()
	}
}

// BenchmarkPerMessage is the fault-tolerance hook's cost per message on
// the runtime's send and receive paths, with the acknowledgements it
// causes, over 7 PEs: point to point (PE i to i+1), a multicast down a
// binary tree (root → 2 children → 4 grandchildren, reported per
// delivery), a reduction's partials up it and its result at the root
// (reported per partial). "none" is the hook the runtime runs without
// message logging; "scmel+limit" is SCMEL under a log limit it never
// reaches (--log-limit: MCML's machinery alone).
func BenchmarkPerMessage(b *testing.B) {
	payload := make([]byte, 64)
	for _, proto := range []string{"none", "scmel", "scmel+limit", "camel"} {
		if proto == "none" {
			b.Run("none/p2p", func(b *testing.B) {
				var hk Hook = NopHook{}
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Payload: payload}
					if hk.Send(1, RoleP2P, 0, 0, false, &env) != nil {
						b.Fatal("send")
					}
					if env.FT != nil {
						hk.Arrive(&env)
					}
				}
			})
			continue
		}
		b.Run(proto+"/p2p", func(b *testing.B) {
			n := newBenchHops(b, proto)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				from := i % 7
				env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Payload: payload}
				n.hop(from, (from+1)%7, RoleP2P, 0, false, &env)
				if i%8 == 7 {
					n.settle()
				}
				if i%1024 == 1023 {
					n.checkpoint()
				}
			}
		})
		b.Run(proto+"/multicast", func(b *testing.B) {
			n := newBenchHops(b, proto)
			b.ReportAllocs()
			for i := 0; i < b.N; i += 6 { // 6 deliveries per multicast
				root := pe.Envelope{Type: 1, Kind: pe.KindMulticast, Payload: payload}
				for c := 1; c <= 2; c++ {
					env := root
					n.hop(0, c, RoleMcastRoot, 0, c == 1, &env)
					for g := 2*c + 1; g <= 2*c+2; g++ {
						fwd := env
						n.hop(c, g, RoleMcastFwd, 0, false, &fwd)
					}
				}
				n.settle()
				if i%1024 < 6 {
					n.checkpoint()
				}
			}
		})
		b.Run(proto+"/reduction", func(b *testing.B) {
			n := newBenchHops(b, proto)
			b.ReportAllocs()
			num := uint64(0)
			for i := 0; i < b.N; i += 6 { // 6 partials per reduction
				num++
				for c := 1; c <= 2; c++ {
					for g := 2*c + 1; g <= 2*c+2; g++ {
						env := pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: payload}
						n.hop(g, c, RolePartial, num, false, &env)
					}
					env := pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: payload}
					n.hop(c, 0, RolePartial, num, false, &env)
				}
				result := pe.Envelope{Type: 1, Kind: pe.KindReduction, Payload: payload}
				n.h.hooks[0].Reduced(1, num, &result)
				n.settle()
				if i%1024 < 6 {
					n.checkpoint()
				}
			}
		})
	}
}

// BenchmarkPessimistPerMessage is the pessimist hook's cost per message
// on the runtime's send and receive paths, as a ping-pong between two
// PEs runs them (each reply continues its sender's run: no commit) and as
// a one-way stream, with a checkpoint every 4096 messages, as a run takes
// them (without, the log only grows, and the benchmark measures the heap's
// growth).
func BenchmarkPessimistPerMessage(b *testing.B) {
	const every = 4096
	for _, c := range []struct {
		name     string
		pingPong bool
	}{{"pingpong", true}, {"stream", false}} {
		b.Run(c.name, func(b *testing.B) {
			events := NewMemEventLog(2)
			hooks := [2]*PessimistHook{}
			for i := range hooks {
				hooks[i] = NewPessimistHook(i, 2, func(int, *Packet) {}, events)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				from := 0
				if c.pingPong {
					from = i % 2
				}
				env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Src: int32(from), Seq: uint64(i)}
				if err := hooks[from].Send(1-from, RoleP2P, 0, 0, false, &env); err != nil {
					b.Fatal(err)
				}
				if a, err := hooks[1-from].Arrive(&env); err != nil || a != Handle {
					b.Fatal(a, err)
				}
				if i%every == every-1 {
					for _, h := range hooks {
						h.Prepare()
					}
					for _, h := range hooks {
						h.Checkpoint()
					}
				}
			}
		})
	}
}
