package recovery

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
	"github.com/charmgo/charmgo/pe/cluster"
)

// Replicas is how many other processes hold each process's PEs' events
// (fewer when the job has fewer other processes). Two: any two processes
// may be lost at once and every lost PE's events survive in a third,
// whichever two they are. Each PE's own process holds them too, to hand
// to a replacement of one of its replicas.
const Replicas = 2

// ReplicatedEventLog is the pessimist protocol's event logger in a job of
// several processes: a commit returns once the next Replicas processes
// after the PE's own (in rank order, round the ring) that are up hold the
// events, so a PE's events survive any set of lost processes that leaves
// one of them. A replacement process fetches its PEs' events from them
// before they restart, and the replicas of the processes it holds events
// for send it theirs again (Linked). Messages travel as service entries
// of the data connections (cluster.Service), so a commit costs one round
// trip on them, to both replicas at once.
//
// Its store is tied to the job's rollback generation: a global rollback
// empties it (Reset), and a message of an older generation than the
// store's is ignored (its sender was rolled back since); one of a newer
// generation, which overtook this process's own rollback, empties it and
// is kept.
type ReplicatedEventLog struct {
	job   serviceJob
	done  <-chan struct{} // closed when the run ends: nothing waits after
	rank  int
	procs int
	first int // this process's PEs: first .. first+count-1
	count int
	// fetchWait bounds how long a replacement waits for its PEs' events
	fetchWait time.Duration

	mu    sync.Mutex
	store *ftlayer.EventStore
	gen   uint64
	// known: the PEs whose events this process holds since they began
	// (a replacement knows none until they are loaded or fetched: what
	// it lacks is unknown, not "no events")
	known   []bool
	lost    []bool // processes lost and not yet linked again
	nextID  uint64
	commits map[uint64]*commitWait
	fetches map[uint64]*fetchWait
}

// serviceJob is what the log needs of the job.
type serviceJob interface {
	SendService(to int, msg []byte) error
	ReplyService(to int, msg []byte) error // from Receive
	Generation() uint64
}

type commitWait struct {
	left map[int]bool // the processes whose acknowledgements are due
	done chan struct{}
}

type fetchWait struct {
	left    map[int]bool
	replies []fetched
	done    chan struct{}
}

// fetched is a replica's answer to a fetch.
type fetched struct {
	evs     []ftlayer.Event
	covered uint64
}

// The kinds of the log's messages.
const (
	evCommit   uint8 = iota + 1 // events of a PE to hold: Evs, Covered; acknowledged with ID
	evAck                       // the commit ID is held
	evTruncate                  // drop PE's events up to UpTo
	evFetch                     // PE's events after From, please (ID)
	evEvents                    // PE's events after From, answering fetch ID: Evs, Covered (Known: it holds them)
	evLoad                      // PE's events since its last checkpoint, for a replica that replaced a lost one
)

// eventMsg is one message of the log between processes.
type eventMsg struct {
	Kind    uint8  `msgpack:"k"`
	Gen     uint64 `msgpack:"g"`
	ID      uint64 `msgpack:"i,omitempty"`
	PE      int32  `msgpack:"p"`
	From    uint64 `msgpack:"f,omitempty"`
	Covered uint64 `msgpack:"c,omitempty"`
	UpTo    uint64 `msgpack:"u,omitempty"`
	// Evs: the events, two numbers each: delivery, sender
	Evs   []uint64 `msgpack:"e,omitempty"`
	Known bool     `msgpack:"n,omitempty"`
}

func packEvents(evs []ftlayer.Event) []uint64 {
	out := make([]uint64, 0, 2*len(evs))
	for _, e := range evs {
		out = append(out, e.Seq, uint64(uint32(e.Sender)))
	}
	return out
}

// decodeEventMsg decodes a message of the log from another process, checking
// what a store cannot: the kind, the PE, the events' shape.
func decodeEventMsg(b []byte, pes int) (eventMsg, []ftlayer.Event, error) {
	var m eventMsg
	if err := pe.UnmarshalMsgpack(b, &m); err != nil {
		return m, nil, fmt.Errorf("an event log message (%d bytes) does not decode: %w", len(b), err)
	}
	if m.Kind < evCommit || m.Kind > evLoad {
		return m, nil, fmt.Errorf("an event log message of unknown kind %d", m.Kind)
	}
	if m.Kind != evAck && (m.PE < 0 || int(m.PE) >= pes) {
		return m, nil, fmt.Errorf("an event log message (kind %d) for PE %d, outside 0..%d", m.Kind, m.PE, pes-1)
	}
	if len(m.Evs)%2 != 0 {
		return m, nil, fmt.Errorf("an event log message for PE %d carries %d numbers, not pairs", m.PE, len(m.Evs))
	}
	evs := make([]ftlayer.Event, len(m.Evs)/2)
	for i := range evs {
		s := m.Evs[2*i+1]
		if s >= uint64(pes) {
			return m, nil, fmt.Errorf("an event log message for PE %d: event %d names sender %d, outside 0..%d", m.PE, i, s, pes-1)
		}
		evs[i] = ftlayer.Event{Seq: m.Evs[2*i], Sender: int32(s)}
	}
	return m, evs, nil
}

// NewReplicatedEventLog is process rank's event logger in a job of procs
// processes running pes PEs, this one first .. first+count-1; replacement
// says it replaces a lost process (its PEs' events are fetched). done is
// closed when the run ends.
func NewReplicatedEventLog(job serviceJob, done <-chan struct{}, rank, procs, pes, first, count int, replacement bool) *ReplicatedEventLog {
	l := &ReplicatedEventLog{job: job, done: done, rank: rank, procs: procs, first: first, count: count, fetchWait: time.Minute,
		store: ftlayer.NewEventStore(pes), gen: job.Generation(), known: make([]bool, pes), lost: make([]bool, procs),
		commits: map[uint64]*commitWait{}, fetches: map[uint64]*fetchWait{}}
	for i := range l.known {
		l.known[i] = !replacement
	}
	return l
}

// replicas are the processes that hold process r's PEs' events.
func (l *ReplicatedEventLog) replicas(r int) []int {
	var out []int
	for i := 1; i <= Replicas && i < l.procs; i++ {
		out = append(out, (r+i)%l.procs)
	}
	return out
}

// liveReplicas are this process's replicas that are up, as a set and in
// order (l.mu held).
func (l *ReplicatedEventLog) liveReplicas() (map[int]bool, []int) {
	set, list := map[int]bool{}, []int(nil)
	for _, r := range l.replicas(l.rank) {
		if !l.lost[r] {
			set[r] = true
			list = append(list, r)
		}
	}
	return set, list
}

func (l *ReplicatedEventLog) local(p int32) bool {
	return int(p) >= l.first && int(p) < l.first+l.count
}

var errEnding = errors.New("the run is ending")

// Commit implements ftlayer.EventLog: the events are held here and sent
// to the replicas that are up, and each count of others goes where its
// PE's events are held — its own process and that process's replicas,
// this one among them or not. It returns once every one of them that is
// up acknowledged (all at once: one round trip).
func (l *ReplicatedEventLog) Commit(p int32, evs []ftlayer.Event, covered uint64, others []ftlayer.Cover) error {
	if !l.local(p) {
		return fmt.Errorf("event log: PE %d commits in process %d, which does not run it", p, l.rank)
	}
	for _, c := range others {
		if c.PE < 0 || int(c.PE) >= l.store.PEs() {
			return fmt.Errorf("event log: a count for PE %d, outside 0..%d", c.PE, l.store.PEs()-1)
		}
	}
	var out posts
	l.mu.Lock()
	if err := l.store.Commit(p, evs, covered); err != nil {
		l.mu.Unlock()
		return err
	}
	l.post(&out, eventMsg{Kind: evCommit, PE: p, Covered: covered, Evs: packEvents(evs)}, l.replicas(l.rank))
	for _, c := range others {
		owner := l.rankOf(c.PE)
		holders := append([]int{owner}, l.replicas(owner)...)
		if slices.Contains(holders, l.rank) {
			_ = l.store.Commit(c.PE, nil, c.Covered) // (no events: nothing to refuse)
		}
		l.post(&out, eventMsg{Kind: evCommit, PE: c.PE, Covered: c.Covered}, holders)
	}
	l.mu.Unlock()
	return l.await(&out)
}

// posts are the messages of one commit and what waits for their
// acknowledgements.
type posts struct {
	sends []post
	waits []*commitWait
}

type post struct {
	r  int
	id uint64
	b  []byte
}

// post adds m, to be acknowledged by every process of to that is up and
// not this one (l.mu held).
func (l *ReplicatedEventLog) post(out *posts, m eventMsg, to []int) {
	left := map[int]bool{}
	for _, r := range to {
		if r != l.rank && !l.lost[r] {
			left[r] = true
		}
	}
	if len(left) == 0 {
		return
	}
	l.nextID++
	m.Gen, m.ID = l.gen, l.nextID
	w := &commitWait{left: left, done: make(chan struct{})}
	l.commits[m.ID] = w
	out.waits = append(out.waits, w)
	b := mustMarshal(m)
	for _, r := range to {
		if left[r] {
			out.sends = append(out.sends, post{r, m.ID, b})
		}
	}
}

// await sends what out holds and waits for its acknowledgements (a
// process lost meanwhile releases what waits for it).
func (l *ReplicatedEventLog) await(out *posts) error {
	for _, sd := range out.sends {
		if err := l.job.SendService(sd.r, sd.b); err != nil {
			if !errors.Is(err, cluster.ErrUnreachable) {
				return fmt.Errorf("event log: committing to process %d: %w", sd.r, err)
			}
			l.answered(sd.id, sd.r) // lost: its loss releases the others too
		}
	}
	for _, w := range out.waits {
		select {
		case <-w.done:
		case <-l.done:
			return errEnding
		}
	}
	return nil
}

// rankOf is the process that runs PE p.
func (l *ReplicatedEventLog) rankOf(p int32) int {
	for r := range l.procs {
		if first, count := cluster.Block(l.store.PEs(), l.procs, r); int(p) < first+count {
			return r
		}
	}
	return l.procs - 1
}

// answered: process r acknowledged commit id, or cannot.
func (l *ReplicatedEventLog) answered(id uint64, r int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.commits[id]; w != nil && w.left[r] {
		delete(w.left, r)
		if len(w.left) == 0 {
			delete(l.commits, id)
			close(w.done)
		}
	}
}

// Events implements ftlayer.EventLog. A replacement's PE fetches its
// events from its replicas the first time; after that this process holds
// them.
func (l *ReplicatedEventLog) Events(p int32, from uint64) ([]ftlayer.Event, uint64, error) {
	l.mu.Lock()
	if !l.local(p) || l.known[p] {
		defer l.mu.Unlock()
		return l.store.Events(p, from)
	}
	l.nextID++
	id := l.nextID
	left, targets := l.liveReplicas()
	if len(targets) == 0 {
		l.mu.Unlock()
		return nil, 0, fmt.Errorf("PE %d's events: every process that held them (%v) was lost", p, l.replicas(l.rank))
	}
	w := &fetchWait{left: left, done: make(chan struct{})}
	l.fetches[id] = w
	b, err := msgpack.Marshal(&eventMsg{Kind: evFetch, Gen: l.gen, ID: id, PE: p, From: from})
	l.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	for _, r := range targets {
		if err := l.job.SendService(r, b); err != nil {
			l.fetchAnswered(id, r, nil)
		}
	}
	timer := time.NewTimer(l.fetchWait)
	defer timer.Stop()
	select {
	case <-w.done:
	case <-l.done:
		return nil, 0, errEnding
	case <-timer.C:
		return nil, 0, fmt.Errorf("PE %d's events: no answer in %v from processes %v, which hold them", p, l.fetchWait, targets)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fetches, id)
	if len(w.replies) == 0 {
		return nil, 0, fmt.Errorf("PE %d's events: no process holds them (processes %v were lost, or replaced since it began)", p, targets)
	}
	// every replica that holds them holds every commit: the answers
	// agree (the fullest is taken all the same)
	best := w.replies[0]
	for _, f := range w.replies[1:] {
		if f.covered > best.covered || f.covered == best.covered && len(f.evs) > len(best.evs) {
			best = f
		}
	}
	// held here from now on, for a replica that replaces a lost one
	if err := l.store.Commit(p, best.evs, best.covered); err != nil {
		return nil, 0, fmt.Errorf("PE %d's events from its replicas: %w", p, err)
	}
	l.known[p] = true
	return best.evs, best.covered, nil
}

func mustMarshal(m eventMsg) []byte {
	b, err := msgpack.Marshal(&m)
	if err != nil {
		panic(fmt.Sprintf("recovery: encode an event log message: %v", err)) // plain fields: cannot fail
	}
	return b
}

// fetchAnswered: process r answered fetch id (reply nil: it cannot, or
// does not hold the events).
func (l *ReplicatedEventLog) fetchAnswered(id uint64, r int, reply *fetched) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.fetches[id]
	if w == nil || !w.left[r] {
		return
	}
	delete(w.left, r)
	if reply != nil {
		w.replies = append(w.replies, *reply)
	}
	if len(w.left) == 0 {
		close(w.done)
	}
}

// Truncate implements ftlayer.EventLog: here and at the replicas (no
// acknowledgement: a replica that misses it holds more than it needs).
func (l *ReplicatedEventLog) Truncate(p int32, upTo uint64) {
	l.mu.Lock()
	l.store.Truncate(p, upTo)
	b := mustMarshal(eventMsg{Kind: evTruncate, Gen: l.gen, PE: p, UpTo: upTo})
	targets := l.replicas(l.rank)
	l.mu.Unlock()
	if !l.local(p) {
		return
	}
	for _, r := range targets {
		_ = l.job.SendService(r, b) // a lost replica holds nothing
	}
}

// Reset implements ftlayer.EventLog: a global rollback to the job's next
// generation empties the store, unless a message of that generation
// emptied it already.
func (l *ReplicatedEventLog) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.job.Generation(); l.gen <= g {
		l.store.Reset()
		l.gen = g + 1
	}
	for i := range l.known {
		l.known[i] = true // every PE begins again, with no events
	}
}

// Receive implements cluster.Service.
func (l *ReplicatedEventLog) Receive(from int, b []byte) {
	m, evs, err := decodeEventMsg(b, l.store.PEs())
	if err != nil {
		return // (the connection's bytes decoded as a frame: a peer's bug, not a threat to this log)
	}
	switch m.Kind {
	case evAck:
		l.answered(m.ID, from)
		return
	case evEvents:
		if !m.Known {
			l.fetchAnswered(m.ID, from, nil)
		} else {
			l.fetchAnswered(m.ID, from, &fetched{evs: evs, covered: m.Covered})
		}
		return
	}
	l.mu.Lock()
	switch {
	case m.Gen < l.gen:
		// its sender rolled back since: nothing of it is kept
		l.mu.Unlock()
		if m.Kind == evCommit {
			_ = l.job.ReplyService(from, mustMarshal(eventMsg{Kind: evAck, ID: m.ID, Gen: m.Gen}))
		}
		return
	case m.Gen > l.gen:
		l.store.Reset()
		l.gen = m.Gen
		for i := range l.known {
			l.known[i] = true
		}
	}
	var reply []byte
	switch m.Kind {
	case evCommit, evLoad:
		_ = l.store.Commit(m.PE, evs, m.Covered) // (checked whole: a bad one is not kept)
		if m.Kind == evLoad {
			l.known[m.PE] = true
		}
		if m.Kind == evCommit {
			reply = mustMarshal(eventMsg{Kind: evAck, ID: m.ID, Gen: m.Gen})
		}
	case evTruncate:
		l.store.Truncate(m.PE, m.UpTo)
	case evFetch:
		held, covered, _ := l.store.Events(m.PE, m.From)
		reply = mustMarshal(eventMsg{Kind: evEvents, ID: m.ID, Gen: l.gen, PE: m.PE, From: m.From, Covered: covered, Evs: packEvents(held), Known: l.known[m.PE]})
	}
	l.mu.Unlock()
	if reply != nil {
		_ = l.job.ReplyService(from, reply)
	}
}

// Lost implements cluster.Service: what waits for r's answers stops
// waiting for them.
func (l *ReplicatedEventLog) Lost(r int) {
	if r < 0 || r >= l.procs {
		return
	}
	l.mu.Lock()
	l.lost[r] = true
	var commits, fetches []uint64
	for id, w := range l.commits {
		if w.left[r] {
			commits = append(commits, id)
		}
	}
	for id, w := range l.fetches {
		if w.left[r] {
			fetches = append(fetches, id)
		}
	}
	l.mu.Unlock()
	for _, id := range commits {
		l.answered(id, r)
	}
	for _, id := range fetches {
		l.fetchAnswered(id, r, nil)
	}
}

// Linked implements cluster.Service: r replaced a lost process. If it
// holds this process's PEs' events, it gets them again (those since the
// last checkpoint, and the commits in flight, which it did not
// acknowledge), before any commit made from now on.
func (l *ReplicatedEventLog) Linked(r int) {
	if r < 0 || r >= l.procs {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost[r] = false
	if !slices.Contains(l.replicas(l.rank), r) {
		return
	}
	for p := int32(l.first); p < int32(l.first+l.count); p++ {
		if !l.known[p] {
			continue // a replacement's PE before its fetch: its replicas hold them
		}
		evs, covered, _ := l.store.Events(p, 0)
		// sent under the lock: a commit after it goes after it
		_ = l.job.SendService(r, mustMarshal(eventMsg{Kind: evLoad, Gen: l.gen, PE: p, Covered: covered, Evs: packEvents(evs)}))
	}
}

// ReplicateEvents makes the event logger of a protocol that needs one
// (AnySet) job's: each process's PEs' events are held by Replicas other
// processes too (ReplicatedEventLog), before any PE starts. ending is
// closed when the run ends here. Without such a protocol it does nothing.
func (s *Supervisor) ReplicateEvents(job *cluster.Job, pes int, ending <-chan struct{}) {
	if !s.anySet {
		return
	}
	first, count := job.PEs()
	l := NewReplicatedEventLog(job, ending, job.Rank(), len(job.Members()), pes, first, count, job.Replacement())
	s.events = l
	job.SetService(l)
}
