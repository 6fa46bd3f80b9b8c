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
	}
}

func TestReplaceFailsOnePEAndStartsAnother(t *testing.T) {
	var mu sync.Mutex
	var gens [2][]*incarnation
	made := make(chan struct{}, 8)
	var n *Node
	var mk func(p *PE) Handler
	mk = func(p *PE) Handler {
		h := &incarnation{}
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
	// and from outside, while it is most likely parked
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
	require.Equal(t, int64(0), gens[1][1].handled.Load())
	require.Equal(t, int64(2), gens[1][2].handled.Load(), "the newest incarnation gets what is sent after it started")
	require.Equal(t, int64(0), gens[0][0].handled.Load(), "a dying PE's buffered sends are never delivered")
	require.False(t, n.FailPE(1), "no failure once the run stopped")
	require.Nil(t, n.Replace(1, mk), "nothing to replace")
}
