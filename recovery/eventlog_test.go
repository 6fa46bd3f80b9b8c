package recovery

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe/cluster"
)

// memNet carries the event logs' messages between processes of a test:
// each send is queued, and the test hands messages over one at a time
// (deliver), so every interleaving is the test's choice.
type memNet struct {
	mu     sync.Mutex
	queued sync.Cond // a message was queued
	queue  []netMsg
	logs   []*ReplicatedEventLog
	down   []bool
	gen    uint64
}

type netMsg struct {
	from, to int
	b        []byte
}

// procJob is one process's view of memNet.
type procJob struct {
	net  *memNet
	rank int
}

func (j procJob) SendService(to int, b []byte) error {
	n := j.net
	n.mu.Lock()
	if n.down[to] {
		n.mu.Unlock()
		return fmt.Errorf("process %d: %w", to, cluster.ErrUnreachable)
	}
	n.queue = append(n.queue, netMsg{j.rank, to, b})
	n.queued.Broadcast()
	n.mu.Unlock()
	return nil
}

func (j procJob) ReplyService(to int, b []byte) error { return j.SendService(to, b) }

func (j procJob) Generation() uint64 {
	j.net.mu.Lock()
	defer j.net.mu.Unlock()
	return j.net.gen
}

// newMemNet makes procs processes of ppn PEs each, their logs running
// until done closes.
func newMemNet(procs, ppn int, done chan struct{}) *memNet {
	n := &memNet{down: make([]bool, procs)}
	n.queued.L = &n.mu
	for r := range procs {
		n.logs = append(n.logs, NewReplicatedEventLog(procJob{n, r}, done, r, procs, procs*ppn, r*ppn, ppn, false))
	}
	return n
}

// sends waits until k messages are queued.
func (n *memNet) sends(k int) {
	n.mu.Lock()
	for len(n.queue) < k {
		n.queued.Wait()
	}
	n.mu.Unlock()
}

// deliver hands over the first queued message from process from to
// process to, and reports whether there was one.
func (n *memNet) deliver(from, to int) bool {
	n.mu.Lock()
	for i, m := range n.queue {
		if m.from == from && m.to == to {
			n.queue = append(n.queue[:i], n.queue[i+1:]...)
			l := n.logs[to]
			n.mu.Unlock()
			l.Receive(from, m.b)
			return true
		}
	}
	n.mu.Unlock()
	return false
}

// drain hands over every queued message, and those they cause, in order.
func (n *memNet) drain() {
	for {
		n.mu.Lock()
		if len(n.queue) == 0 {
			n.mu.Unlock()
			return
		}
		m := n.queue[0]
		n.queue = n.queue[1:]
		l := n.logs[m.to]
		n.mu.Unlock()
		l.Receive(m.from, m.b)
	}
}

// replace loses process r and starts its replacement, which every other
// process links to (and hands what it sends it then).
func (n *memNet) replace(r, ppn int, done chan struct{}) {
	n.lose(r)
	n.restart(r, ppn, done)
	for q, l := range n.logs {
		if q != r {
			l.Linked(r)
		}
	}
	n.drain() // what they sent it again
}

// restart starts process r's replacement (nobody linked to it yet).
func (n *memNet) restart(r, ppn int, done chan struct{}) {
	procs := len(n.logs)
	l := NewReplicatedEventLog(procJob{n, r}, done, r, procs, procs*ppn, r*ppn, ppn, true)
	n.mu.Lock()
	n.down[r] = false
	n.logs[r] = l
	n.mu.Unlock()
}

// lose marks process r lost everywhere and drops what was queued for it.
func (n *memNet) lose(r int) {
	n.mu.Lock()
	n.down[r] = true
	keep := n.queue[:0]
	for _, m := range n.queue {
		if m.to == r || m.from == r {
			continue
		}
		keep = append(keep, m)
	}
	n.queue = keep
	n.mu.Unlock()
	for q, l := range n.logs {
		if q != r {
			l.Lost(r)
		}
	}
}

func evs(pairs ...uint64) []ftlayer.Event {
	var out []ftlayer.Event
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, ftlayer.Event{Seq: pairs[i], Sender: int32(pairs[i+1])})
	}
	return out
}

// returned reports whether c has a value yet, without waiting.
func returned(c chan error) bool {
	select {
	case err := <-c:
		c <- err
		return true
	default:
		return false
	}
}

// A commit carries the counts of other PEs' deliveries this PE holds (a
// send without a commit left them with it: see ftlayer.Pessimist.Send):
// each goes where its PE's events are held — its own process and that
// process's replicas, this one among them or not — at the same time as
// the commit's own events go to this process's replicas, and Commit
// returns once every one of them that is up holds what it was sent.
func TestACommitCarriesCountsWhereTheirPEsEventsAre(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	n := newMemNet(4, 2, done) // PEs 0-1 in process 0, 2-3 in 1, ...
	res := make(chan error, 1)
	// process 1 commits PE 2's events with PE 6's count (PE 6 is
	// process 3's, whose replicas are processes 0 and 1: held here at
	// once) and PE 3's (its own: to its replicas, 2 and 3)
	go func() {
		res <- n.logs[1].Commit(2, evs(1, 0), 1, []ftlayer.Cover{{PE: 6, Covered: 9}, {PE: 3, Covered: 5}})
	}()
	n.sends(2 + 2 + 2) // PE 2's events to 2 and 3; PE 6's count to 3 and 0; PE 3's to 2 and 3
	_, covered, _ := n.logs[1].store.Events(6, 0)
	require.Equal(t, uint64(9), covered, "this process is one of PE 6's replicas")
	for n.deliver(1, 3) {
	}
	for n.deliver(1, 2) {
	}
	for n.deliver(3, 1) || n.deliver(2, 1) {
	}
	require.False(t, returned(res), "returned before process 0 holds PE 6's count")
	n.lose(0)
	require.NoError(t, <-res, "a lost process is not waited for")
	for _, r := range []int{1, 3} {
		_, covered, err := n.logs[r].store.Events(6, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(9), covered, "process %d", r)
	}
	_, covered, _ = n.logs[2].store.Events(6, 0)
	require.Zero(t, covered, "process 2 holds nothing of PE 6's")
	for _, r := range []int{1, 2, 3} {
		_, covered, _ := n.logs[r].store.Events(3, 0)
		require.Equal(t, uint64(5), covered, "process %d", r)
	}
	require.EqualError(t, n.logs[1].Commit(2, nil, 1, []ftlayer.Cover{{PE: 8, Covered: 1}}), "event log: a count for PE 8, outside 0..7")
}

// A commit returns once both replicas hold the events, not before; a
// replica lost meanwhile is not waited for.
func TestACommitWaitsForBothReplicas(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	n := newMemNet(4, 1, done)
	res := make(chan error, 1)
	go func() { res <- n.logs[0].Commit(0, evs(1, 3, 4, 2), 5, nil) }()
	n.sends(2) // to processes 1 and 2, the next two
	require.True(t, n.deliver(0, 1))
	require.True(t, n.deliver(1, 0)) // 1's acknowledgement
	require.False(t, returned(res), "returned with one replica's acknowledgement")
	require.False(t, n.deliver(0, 3), "process 3 is no replica of process 0")
	require.True(t, n.deliver(0, 2))
	require.True(t, n.deliver(2, 0))
	require.NoError(t, <-res)
	for _, r := range []int{1, 2} {
		got, covered, err := n.logs[r].store.Events(0, 0)
		require.NoError(t, err)
		require.Equal(t, evs(1, 3, 4, 2), got, "process %d", r)
		require.Equal(t, uint64(5), covered)
	}

	go func() { res <- n.logs[0].Commit(0, evs(6, 1), 7, nil) }()
	n.sends(2)
	require.True(t, n.deliver(0, 1))
	require.True(t, n.deliver(1, 0))
	n.lose(2)
	require.NoError(t, <-res)
	// and a commit while 2 is lost goes to 1 alone
	require.NoError(t, func() error {
		go func() { res <- n.logs[0].Commit(0, evs(8, 3), 9, nil) }()
		n.sends(1)
		n.drain()
		return <-res
	}())
}

// A replacement's PEs get their events back from the replicas; a
// replacement replica gets the events it holds again as it joins, and
// hands them back when the process it holds them for is lost next.
func TestAReplacementFetchesItsEventsFromItsReplicas(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	n := newMemNet(4, 2, done)
	commit := func(r int, p int32, e []ftlayer.Event, covered uint64) {
		res := make(chan error, 1)
		go func() { res <- n.logs[r].Commit(p, e, covered, nil) }()
		n.sends(2)
		n.drain()
		require.NoError(t, <-res)
	}
	commit(0, 0, evs(1, 4), 3)
	commit(1, 2, evs(1, 0, 3, 5), 4)
	commit(1, 3, evs(1, 7), 2)
	commit(1, 2, evs(6, 1), 8)
	n.replace(1, 2, done)
	fetch := func(r int, p int32, asks int) ([]ftlayer.Event, uint64, error) {
		type got struct {
			evs     []ftlayer.Event
			covered uint64
			err     error
		}
		res := make(chan got, 1)
		go func() {
			e, c, err := n.logs[r].Events(p, 0)
			res <- got{e, c, err}
		}()
		n.sends(asks)
		n.drain()
		g := <-res
		return g.evs, g.covered, g.err
	}
	got, covered, err := fetch(1, 2, 2)
	require.NoError(t, err)
	require.Equal(t, evs(1, 0, 3, 5, 6, 1), got)
	require.Equal(t, uint64(8), covered)
	got, covered, err = fetch(1, 3, 2)
	require.NoError(t, err)
	require.Equal(t, evs(1, 7), got)
	require.Equal(t, uint64(2), covered)

	// process 0's events are held by 1 and 2: 1's replacement got them
	// as it joined, and is the last holder once 0 and 2 are lost
	n.lose(0)
	n.lose(2)
	n.restart(0, 2, done)
	got, covered, err = fetch(0, 0, 1)
	require.NoError(t, err)
	require.Equal(t, evs(1, 4), got)
	require.Equal(t, uint64(3), covered)
}

// A replacement whose replicas were all replaced since its PEs began,
// none of them given the events again, finds them nowhere: an error
// names them, never an empty log taken for "no events".
func TestEventsNoReplicaHoldsAreAnError(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	n := newMemNet(3, 1, done)
	res := make(chan error, 1)
	go func() { res <- n.logs[0].Commit(0, evs(1, 2), 2, nil) }()
	n.sends(2)
	n.drain()
	require.NoError(t, <-res)
	n.lose(0)
	for _, r := range []int{1, 2} {
		n.lose(r)
		n.restart(r, 1, done)
	}
	n.restart(0, 1, done)
	type got struct {
		evs []ftlayer.Event
		err error
	}
	out := make(chan got, 1)
	go func() {
		e, _, err := n.logs[0].Events(0, 0)
		out <- got{e, err}
	}()
	n.sends(2)
	n.drain()
	g := <-out
	require.ErrorContains(t, g.err, "PE 0's events: no process holds them")
	require.Nil(t, g.evs)
}

// The store follows the job's rollback generation: a global rollback
// empties it, a message from before it is dropped (and acknowledged, so
// nothing waits), and one from after it that came first is kept.
func TestTheStoreFollowsTheRollbackGeneration(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	n := newMemNet(2, 1, done)
	l := n.logs[1]
	send := func(m eventMsg) {
		b, err := msgpack.Marshal(&m)
		require.NoError(t, err)
		l.Receive(0, b)
	}
	send(eventMsg{Kind: evCommit, Gen: 0, ID: 1, PE: 0, Covered: 3, Evs: packEvents(evs(1, 1))})
	require.Equal(t, 1, l.store.Held(0))
	// process 0 rolled back first and committed anew, in generation 1
	send(eventMsg{Kind: evCommit, Gen: 1, ID: 2, PE: 0, Covered: 2, Evs: packEvents(evs(2, 1))})
	l.Reset() // this process's rollback, to generation 1 too: keeps it
	got, covered, err := l.store.Events(0, 0)
	require.NoError(t, err)
	require.Equal(t, evs(2, 1), got)
	require.Equal(t, uint64(2), covered)
	send(eventMsg{Kind: evCommit, Gen: 0, ID: 3, PE: 0, Covered: 9, Evs: packEvents(evs(5, 1))})
	got, _, _ = l.store.Events(0, 0)
	require.Equal(t, evs(2, 1), got, "a commit of the rolled-back generation is not kept")
	n.mu.Lock()
	require.Len(t, n.queue, 3, "every commit acknowledged")
	n.gen = 1
	n.mu.Unlock()
	l.Reset() // the next rollback, to generation 2
	require.Zero(t, l.store.Held(0))
}

func FuzzDecodeEventMsg(f *testing.F) {
	for _, m := range []eventMsg{
		{Kind: evCommit, Gen: 1, ID: 2, PE: 3, Covered: 9, Evs: packEvents(evs(1, 0, 4, 2))},
		{Kind: evAck, ID: 7},
		{Kind: evEvents, ID: 1, PE: 0, Known: true, Evs: []uint64{1}},
		{Kind: evFetch, PE: -1},
	} {
		b, err := msgpack.Marshal(&m)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0xc1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, got, err := decodeEventMsg(b, 8)
		if err != nil {
			return
		}
		require.True(t, m.Kind >= evCommit && m.Kind <= evLoad)
		require.Len(t, got, len(m.Evs)/2)
		for _, e := range got {
			require.True(t, e.Sender >= 0 && e.Sender < 8)
		}
		if m.Kind != evAck {
			require.True(t, m.PE >= 0 && m.PE < 8)
		}
	})
}
