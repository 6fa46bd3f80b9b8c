package cluster

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/charmgo/charmgo/pe"
)

// The message path between processes, measured on its own: two nodes of
// one PE each, in this test process, joined by a pair of links over a
// real loopback TCP connection (the links, frames, readers and hand-ins
// a job's processes use; only the job's control plane is left out), so
// that go test counts the allocations of both ends.

// linkRemote carries a node's remote batches over one link.
type linkRemote struct{ l *link }

func (r linkRemote) Deliver(src, dst int, _ bool, batch []pe.Envelope) error {
	return r.l.deliver(src, dst, batch)
}

func (linkRemote) RolledBack() {}

// linkPair runs two one-PE nodes of a two-PE job (PE 0 and PE 1) over
// loopback links, with the handlers mk makes, starting with env on PE 0;
// it returns once a handler stops them both.
func linkPair(b *testing.B, mk func(p *pe.PE, stop func()) pe.Handler, env pe.Envelope) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c0, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c1, ok := <-accepted
	if !ok {
		b.Fatal("accept failed")
	}
	var gen atomic.Uint64
	l0 := newLink(1, c0, &gen, 0, 1)
	l1 := newLink(0, c1, &gen, 1, 1)
	var nodes [2]*pe.Node
	stop := func() {
		nodes[0].Stop(0)
		nodes[1].Stop(0)
	}
	for i, l := range []*link{l0, l1} {
		n, err := pe.NewNode(pe.Config{NumPEs: 2, FirstPE: i, LocalPEs: 1, Remote: linkRemote{l}, SpinPolls: 65536},
			func(p *pe.PE) pe.Handler { return mk(p, stop) })
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = n
	}
	for i, l := range []*link{l0, l1} {
		go l.write(func(error) {})
		go l.read(nodes[i], i, 1, func(int, *pe.Envelope) error { return nil })
	}
	nodes[0].Inject(0, env)
	b.ReportAllocs()
	b.ResetTimer()
	nodes[0].Start()
	nodes[1].Start()
	for _, n := range nodes {
		if _, err := n.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	l0.shut()
	l1.shut()
}

// pingPongH bounces a message between PE 0 and PE 1 until it has made
// hops hops; with payload, it carries a uint64 payload (encoded and
// decoded on the way), else the count travels in the envelope.
type pingPongH struct {
	hops    uint64
	payload bool
	stop    func()
}

func (h pingPongH) Handle(p *pe.PE, env *pe.Envelope) {
	n := env.Seq
	if h.payload {
		n = env.Payload.(uint64)
	}
	if n >= h.hops {
		h.stop()
		return
	}
	out := &pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Seq: n + 1}
	if h.payload {
		out.Seq, out.Payload = 0, n+1
	}
	p.Send(1-p.ID(), out)
}

// BenchmarkLinkPingPong is a round trip between processes, the count in
// the envelope: what a small inline message costs.
func BenchmarkLinkPingPong(b *testing.B) {
	linkPair(b, func(_ *pe.PE, stop func()) pe.Handler {
		return pingPongH{hops: 2 * uint64(b.N), stop: stop}
	}, pe.Envelope{Type: tokenType, Kind: pe.KindP2P})
}

// BenchmarkLinkPingPongPayload is the same with an encoded payload.
func BenchmarkLinkPingPongPayload(b *testing.B) {
	linkPair(b, func(_ *pe.PE, stop func()) pe.Handler {
		return pingPongH{hops: 2 * uint64(b.N), payload: true, stop: stop}
	}, pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: uint64(0)})
}

// streamLinkH streams messages from PE 0 to PE 1, 64 at a time, each
// with a payload to encode and decode; PE 1 stops the pair at the last.
type streamLinkH struct {
	left *int
	n    uint64
	stop func()
}

func (h streamLinkH) Handle(p *pe.PE, env *pe.Envelope) {
	if p.ID() == 1 {
		if env.Payload.(uint64) == h.n {
			h.stop()
		}
		return
	}
	for i := 0; i < 64 && *h.left > 0; i++ {
		p.Send(1, &pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: h.n - uint64(*h.left) + 1})
		*h.left--
	}
	if *h.left > 0 {
		p.Send(0, &pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: uint64(0)})
	}
}

// BenchmarkLinkStream is one way, PE 0 to PE 1 (ns/op and allocs/op a
// message).
func BenchmarkLinkStream(b *testing.B) {
	left := b.N
	linkPair(b, func(_ *pe.PE, stop func()) pe.Handler {
		return streamLinkH{left: &left, n: uint64(b.N), stop: stop}
	}, pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: uint64(0)})
}
