package pe

import "testing"

// runNode runs numPEs PEs with handlers from mk, starting with one envelope
// injected on PE 0, and times it.
func runNode(b *testing.B, numPEs int, mk func(p *PE) Handler) {
	n, err := NewNode(Config{NumPEs: numPEs}, mk)
	if err != nil {
		b.Fatal(err)
	}
	n.Inject(0, Envelope{Type: testType, Kind: KindP2P})
	b.ResetTimer()
	n.Start()
	if _, err := n.Wait(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPERoundTrip is the PE layer alone: two PEs bounce an envelope
// through their inboxes with a handler that does nothing else.
func BenchmarkPERoundTrip(b *testing.B) {
	runNode(b, 2, func(p *PE) Handler { return &pingPong{limit: 2 * b.N} })
}

type streamH struct{ left int }

func (h *streamH) Handle(p *PE, env *Envelope) {
	if p.ID() == 0 {
		for i := 0; i < 64 && h.left > 0; i++ {
			p.Send(1, &Envelope{Type: testType, Kind: KindP2P, Seq: uint64(h.left)})
			h.left--
		}
		if h.left > 0 {
			p.Send(0, &Envelope{Type: testType, Kind: KindP2P})
		}
		return
	}
	if env.Seq == 1 {
		p.Node().Stop(0)
	}
}

// BenchmarkPEStream is the PE layer alone: PE 0 streams envelopes to PE 1.
func BenchmarkPEStream(b *testing.B) {
	runNode(b, 2, func(p *PE) Handler { return &streamH{left: b.N} })
}

type selfH struct{ left int }

func (h *selfH) Handle(p *PE, env *Envelope) {
	if h.left--; h.left <= 0 {
		p.Node().Stop(0)
		return
	}
	p.Send(p.ID(), &Envelope{Type: testType, Kind: KindP2P, Seq: env.Seq + 1})
}

// BenchmarkPELocalHop is the PE layer's floor for a same-PE send + dispatch.
func BenchmarkPELocalHop(b *testing.B) {
	runNode(b, 1, func(p *PE) Handler { return &selfH{left: b.N} })
}

// An idle PE's spin that finds nothing: what a poll costs, so
// Config.SpinPolls can be read as time (ns/op is per poll).
func BenchmarkSpinPoll(b *testing.B) {
	n, err := NewNode(Config{NumPEs: 1, SpinPolls: b.N}, func(*PE) Handler { return nil })
	if err != nil {
		b.Fatal(err)
	}
	p := n.pes[0]
	p.spinNow = b.N
	b.ResetTimer()
	if p.spinWait() {
		b.Fatal("found work")
	}
}
