package ftlayer

import "testing"

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
