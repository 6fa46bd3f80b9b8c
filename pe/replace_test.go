package pe

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// incarnation counts what one incarnation of a PE handled. Type 2 asks the
// PE to have itself replaced (from its own goroutine); type 3 stops the
// run; others are just counted.
type incarnation struct {
	handled atomic.Int64
	replace func()
	pinged  chan struct{} // type 4 is sent here
}

func (h *incarnation) Handle(p *PE, env *Envelope) {
	h.handled.Add(1)
	switch env.Type {
	case 2:
		p.Node().FailPE(p.ID())
		go h.replace()
		// the rest of this message still runs, but what it buffers for
		// other PEs dies with the incarnation
		p.Send(0, &Envelope{Type: 9, Kind: KindP2P})
	case 3:
		p.Node().Stop(0)
	case 4:
		h.pinged <- struct{}{}
	}
}

func TestReplaceFailsOnePEAndStartsAnother(t *testing.T) {
	var mu sync.Mutex
	var gens [2][]*incarnation
	made := make(chan struct{}, 8)
	pinged := make(chan struct{}, 8)
	var n *Node
	var mk func(p *PE) Handler
	mk = func(p *PE) Handler {
		h := &incarnation{pinged: pinged}
		h.replace = func() {
			old := n.Replace(p.ID(), mk)
			require.Same(t, h, old)
		}
		mu.Lock()
		gens[p.ID()] = append(gens[p.ID()], h)
		mu.Unlock()
		made <- struct{}{}
		return h
	}
	var err error
	n, err = NewNode(Config{NumPEs: 2}, mk)
	require.NoError(t, err)
	<-made
	<-made
	n.Start()
	n.Inject(1, Envelope{Type: 2, Kind: KindP2P})
	select {
	case <-made: // replaced from its own goroutine
	case <-time.After(10 * time.Second):
		t.Fatal("PE 1 was not replaced")
	}
	// and from outside, once it runs (it handled a message), while it is
	// most likely parked
	n.Inject(1, Envelope{Type: 4, Kind: KindP2P})
	<-pinged
	require.True(t, n.FailPE(1))
	require.False(t, n.FailPE(1), "failing already")
	old := n.Replace(1, mk)
	<-made
	mu.Lock()
	require.Same(t, gens[1][1], old)
	mu.Unlock()
	n.Inject(1, Envelope{Type: 1, Kind: KindP2P})
	n.Inject(1, Envelope{Type: 3, Kind: KindP2P})
	code, err := n.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Len(t, gens[1], 3)
	require.Equal(t, int64(1), gens[1][0].handled.Load())
	require.Equal(t, int64(2), gens[1][2].handled.Load(), "the newest incarnation gets what is sent after it started")
	require.Equal(t, int64(1), gens[1][1].handled.Load(), "the ping")
	require.Equal(t, int64(0), gens[0][0].handled.Load(), "a dying PE's buffered sends are never delivered")
	require.False(t, n.FailPE(1), "no failure once the run stopped")
	require.Nil(t, n.Replace(1, mk), "nothing to replace")
}

// generation tags what one incarnation of the whole node handles: a
// message carries the generation of its sender in Seq, and type 5 asks
// the receiver to send it back (a ping-pong that keeps batches in
// flight).
type generation struct {
	gen     uint64
	handled atomic.Int64
	stale   atomic.Int64 // messages from an earlier generation
	prev    Handler
	failed  bool
}

func (h *generation) Handle(p *PE, env *Envelope) {
	h.handled.Add(1)
	if env.Type == 5 && env.Seq != h.gen {
		h.stale.Add(1)
	}
	switch env.Type {
	case 5:
		if h.handled.Load() < 2000 {
			p.Send((p.ID()+1)%p.NumPEs(), &Envelope{Type: 5, Kind: KindP2P, Seq: h.gen})
		} else if p.ID() == 0 && h.gen == 1 {
			p.Node().Stop(0)
		}
	}
}

func TestRollBackDiscardsEverythingInFlight(t *testing.T) {
	n, err := NewNode(Config{NumPEs: 3, FlushEvery: 4}, func(p *PE) Handler { return &generation{} })
	require.NoError(t, err)
	n.Start()
	for i := 0; i < 3; i++ {
		for k := 0; k < 8; k++ {
			n.Inject(i, Envelope{Type: 5, Kind: KindP2P})
		}
	}
	require.True(t, n.FailPE(1))
	var prevs []Handler
	ok := n.RollBack(func(p *PE, prev Handler, failed bool) Handler {
		prevs = append(prevs, prev)
		require.Equal(t, p.ID() == 1, failed, "PE %d", p.ID())
		return &generation{gen: 1, prev: prev, failed: failed}
	}, func(p *PE) []Envelope {
		return []Envelope{{Type: 5, Kind: KindP2P, Seq: 1}}
	})
	require.True(t, ok)
	require.Len(t, prevs, 3)
	require.Zero(t, n.Injected(), "RollBack's first envelopes are not counted as injected")
	code, err := n.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code)
	for i := 0; i < 3; i++ {
		h := n.PE(i).Handler().(*generation)
		require.Equal(t, uint64(1), h.gen)
		require.Zero(t, h.stale.Load(), "PE %d got messages sent before the rollback", i)
		require.Positive(t, h.handled.Load())
	}
	require.False(t, n.RollBack(func(p *PE, prev Handler, failed bool) Handler { return prev },
		func(*PE) []Envelope { return nil }), "no rollback once the run stopped")
}

// order records the types PE 1 handles; type 7 on PE 0 sends three
// application messages, then a system message, then one in the system
// lane marked to go behind the application messages.
type order struct {
	got *[]uint32
}

func (h order) Handle(p *PE, env *Envelope) {
	if p.ID() == 0 {
		for i := 0; i < 3; i++ {
			p.Send(1, &Envelope{Type: 1, Kind: KindP2P})
		}
		p.Send(1, &Envelope{Type: 2, Kind: KindSystem, Flags: FlagAppLane})
		p.Send(1, &Envelope{Type: 3, Kind: KindSystem})
		return
	}
	*h.got = append(*h.got, env.Type)
	if len(*h.got) == 5 {
		p.Node().Stop(0)
	}
}

func TestAppLaneSystemMessagesDoNotOvertake(t *testing.T) {
	var got []uint32
	n, err := NewNode(Config{NumPEs: 2}, func(p *PE) Handler { return order{&got} })
	require.NoError(t, err)
	n.Start()
	n.Inject(0, Envelope{Type: 7, Kind: KindP2P})
	_, err = n.Wait()
	require.NoError(t, err)
	require.Equal(t, []uint32{3, 1, 1, 1, 2}, got, "the plain system message overtakes; the marked one comes behind the application messages")
}

// seqCheck: PEs 0 and 1 each send 2,000 numbered messages to PE 2, which
// checks that each sender's arrive in order.
type seqCheck struct {
	next  *[2]uint64
	bad   *int
	total *int
}

func (h seqCheck) Handle(p *PE, env *Envelope) {
	switch p.ID() {
	case 0, 1:
		for i := uint64(1); i <= 2000; i++ {
			p.Send(2, &Envelope{Type: 1, Kind: KindP2P, Seq: i})
			if i%7 == 0 {
				p.Send(2, &Envelope{Type: 2, Kind: KindSystem, Seq: i})
			}
		}
	case 2:
		if env.Type == 1 {
			if env.Seq != h.next[env.Src]+1 {
				*h.bad++
			}
			h.next[env.Src] = env.Seq
			if *h.total++; *h.total == 4000 {
				p.Node().Stop(0)
			}
		}
	}
}

func TestChaosKeepsEveryChannelFIFO(t *testing.T) {
	var next [2]uint64
	var bad, total int
	n, err := NewNode(Config{NumPEs: 3, Chaos: 42, FlushEvery: 8}, func(p *PE) Handler { return seqCheck{&next, &bad, &total} })
	require.NoError(t, err)
	n.Start()
	n.Inject(0, Envelope{Type: 1, Kind: KindP2P})
	n.Inject(1, Envelope{Type: 1, Kind: KindP2P})
	_, err = n.Wait()
	require.NoError(t, err)
	require.Equal(t, 4000, total)
	require.Zero(t, bad, "a channel delivered out of order")
}
