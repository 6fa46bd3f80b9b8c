package ftlayer

import (
	"encoding/binary"
	"testing"
)

// BenchmarkSCMELPerMessage is the protocol's cost on one message's path:
// Send on one PE (stamp, piggyback, log) and Receive on another (checks,
// rsn, determinant, ack), with the ack processed every 8 messages as a
// steady flow would. Compare with a cross-PE message (~250 ns one way in
// process, bench/README.md).
func BenchmarkSCMELPerMessage(b *testing.B) {
	a, c := NewSCMEL(0, 2, Collectives{}), NewSCMEL(1, 2, Collectives{})
	payload := make([]byte, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		out := a.Send(1, payload)
		acts, _ := c.Receive(&out)
		for _, x := range acts {
			if x.Kind == ActSend && x.Packet.Kind == PktAck {
				a.Receive(&x.Packet)
			}
		}
		if i%8 == 7 { // c answers now and then, carrying its determinants
			back := c.Send(0, payload)
			acts, _ := a.Receive(&back)
			for _, x := range acts {
				if x.Kind == ActSend && x.Packet.Kind == PktAck {
					c.Receive(&x.Packet)
				}
			}
		}
		if i%1024 == 1023 { // a checkpoint now and then keeps the logs bounded
			a.Prepare()
			c.Prepare()
			a.Checkpoint()
			c.Checkpoint()
		}
	}
}

// benchNet runs protocols of n PEs over an in-memory FIFO network: every
// packet is received at once, in order.
type benchNet struct {
	pes   []Protocol
	queue []Packet
}

func newBenchNet(f Factory, n int) *benchNet {
	net := &benchNet{}
	for i := 0; i < n; i++ {
		net.pes = append(net.pes, f.New(int32(i), n))
	}
	return net
}

func (n *benchNet) send(p Packet) {
	n.queue = append(n.queue[:0], p)
	n.drain()
}

func (n *benchNet) run(acts []Action, err error) {
	if err != nil {
		panic(err)
	}
	n.queue = n.queue[:0]
	for _, a := range acts {
		if a.Kind == ActSend {
			n.queue = append(n.queue, a.Packet)
		}
	}
	n.drain()
}

func (n *benchNet) drain() {
	for head := 0; head < len(n.queue); head++ {
		p := &n.queue[head]
		acts, err := n.pes[p.To].Receive(p)
		if err != nil {
			panic(err)
		}
		for _, a := range acts {
			if a.Kind == ActSend {
				n.queue = append(n.queue, a.Packet)
			}
		}
		for acts := n.pes[p.To].Next(); len(acts) > 0; acts = n.pes[p.To].Next() {
		}
	}
}

func (n *benchNet) checkpoint() {
	for _, p := range n.pes {
		p.Prepare()
	}
	for _, p := range n.pes {
		p.Checkpoint()
	}
}

// BenchmarkPerMessage is each protocol's cost per message on its send and
// receive paths, with the acks it causes, over 7 PEs: point to point
// (PE i to i+1), a multicast over a binary tree (root → 2 children → 4
// grandchildren, reported per delivery), a reduction back up it (every PE
// contributes, the root delivers; reported per contribution). "none" is
// the baseline: no logging, no determinants.
func BenchmarkPerMessage(b *testing.B) {
	gs := NewGroups()
	if err := gs.Add(1, []int32{0, 1, 2, 3, 4, 5, 6}, 2); err != nil {
		b.Fatal(err)
	}
	coll := Collectives{Groups: gs, Combine: func(_ uint64, a, c []byte) []byte {
		binary.LittleEndian.PutUint64(a, binary.LittleEndian.Uint64(a)+binary.LittleEndian.Uint64(c))
		return a
	}}
	for _, f := range []Factory{NoneFactory{Coll: coll}, SCMELFactory{Coll: coll}, CAMELFactory{Coll: coll}} {
		b.Run(f.Name()+"/p2p", func(b *testing.B) {
			net := newBenchNet(f, 7)
			payload := make([]byte, 64)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				from := int32(i % 7)
				net.send(net.pes[from].Send((from+1)%7, payload))
				if i%1024 == 1023 {
					net.checkpoint()
				}
			}
		})
		b.Run(f.Name()+"/multicast", func(b *testing.B) {
			net := newBenchNet(f, 7)
			payload := make([]byte, 64)
			b.ReportAllocs()
			for i := 0; i < b.N; i += 6 { // 6 deliveries per multicast
				net.run(net.pes[0].Multicast(1, payload))
				if i%1024 < 6 {
					net.checkpoint()
				}
			}
		})
		b.Run(f.Name()+"/reduction", func(b *testing.B) {
			net := newBenchNet(f, 7)
			b.ReportAllocs()
			val := make([]byte, 8)
			for i := 0; i < b.N; i += 7 { // 7 contributions per reduction
				for pe := 6; pe >= 0; pe-- {
					net.run(net.pes[pe].Contribute(1, val))
				}
				if i%1024 < 7 {
					net.checkpoint()
				}
			}
		})
	}
}
