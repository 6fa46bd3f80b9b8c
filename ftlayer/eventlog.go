package ftlayer

import (
	"fmt"
	"slices"
	"sync"
)

// Event is a non-deterministic delivery in the pessimist protocol's
// refined event model: from delivery Seq on (a PE's deliveries are
// counted from the start of the run, or of the global rollback it began
// again from), the PE delivers the messages of Sender, in their channel's
// order, until its next event. A delivery from the same sender as the
// delivery before it is deterministic: the channel's order says which
// message it is, and no event records it.
type Event struct {
	Seq    uint64
	Sender int32
}

// EventLog is the pessimist protocol's event logger: it holds every PE's
// events where the failure of any set of PEs does not reach them. A PE
// commits its events, and how far its deliveries went, before anything it
// sends after them leaves, so nothing outside a PE ever depends on a
// delivery of its that the log cannot replay in the same place.
type EventLog interface {
	// Commit appends PE pe's events, in delivery order, and records that
	// its deliveries reached covered; events at or before the last it
	// holds for pe are already there (a recovering PE replays them) and
	// are skipped. It records too, for each PE others names, that its
	// deliveries reached the count given, in the order its events say:
	// a PE that sent a message without committing (see Pessimist.Send)
	// left the count with the receiver, which commits it for it before
	// anything it sends elsewhere leaves. It returns once all are safe.
	Commit(pe int32, evs []Event, covered uint64, others []Cover) error
	// Events returns PE pe's events after delivery from, and the
	// deliveries its commits covered.
	Events(pe int32, from uint64) (evs []Event, covered uint64, err error)
	// Truncate drops PE pe's events up to delivery upTo: a committed
	// checkpoint covers them.
	Truncate(pe int32, upTo uint64)
	// Reset drops every event: a global rollback starts every PE's
	// deliveries afresh.
	Reset()
}

// Cover is how far PE PE's deliveries went (see EventLog.Commit).
type Cover struct {
	PE      int32
	Covered uint64
}

// EventStore is the events of a job's PEs as an event logger holds them:
// the state machine behind every EventLog (one process's MemEventLog, a
// process's replica of others' events). Not safe for concurrent use.
type EventStore struct {
	n       int
	byPE    [][]Event
	covered []uint64
}

// NewEventStore holds the events of n PEs.
func NewEventStore(n int) *EventStore {
	return &EventStore{n: n, byPE: make([][]Event, n), covered: make([]uint64, n)}
}

func (st *EventStore) check(pe int32) error {
	if pe < 0 || int(pe) >= st.n {
		return fmt.Errorf("event log: PE %d out of range 0..%d", pe, st.n-1)
	}
	return nil
}

// Commit: see EventLog. Events out of delivery order, or naming a sender
// outside the job, are refused whole.
func (st *EventStore) Commit(pe int32, evs []Event, covered uint64) error {
	if err := st.check(pe); err != nil {
		return err
	}
	return st.commit(pe, int(pe), evs, covered)
}

// commit appends pe's events at index i (a MemEventLog's store holds
// one PE's, at 0).
func (st *EventStore) commit(pe int32, i int, evs []Event, covered uint64) error {
	for j, e := range evs {
		if e.Sender < 0 || int(e.Sender) >= st.n {
			return fmt.Errorf("event log: PE %d's event %d names sender %d, outside 0..%d", pe, j, e.Sender, st.n-1)
		}
		if j > 0 && e.Seq <= evs[j-1].Seq {
			return fmt.Errorf("event log: PE %d's events out of order (delivery %d after %d)", pe, e.Seq, evs[j-1].Seq)
		}
		if e.Seq > covered {
			return fmt.Errorf("event log: PE %d's event at delivery %d, past the %d its commit covers", pe, e.Seq, covered)
		}
	}
	list := st.byPE[i]
	var last uint64
	if len(list) > 0 {
		last = list[len(list)-1].Seq
	}
	for _, e := range evs {
		if e.Seq > last {
			list = append(list, e)
		}
	}
	st.byPE[i] = list
	st.covered[i] = max(st.covered[i], covered)
	return nil
}

// Events: see EventLog.
func (st *EventStore) Events(pe int32, from uint64) ([]Event, uint64, error) {
	if err := st.check(pe); err != nil {
		return nil, 0, err
	}
	return st.events(int(pe), from)
}

func (st *EventStore) events(i int, from uint64) ([]Event, uint64, error) {
	list := st.byPE[i]
	k, _ := slices.BinarySearchFunc(list, from+1, func(e Event, seq uint64) int {
		switch {
		case e.Seq < seq:
			return -1
		case e.Seq > seq:
			return 1
		}
		return 0
	})
	return slices.Clone(list[k:]), st.covered[i], nil
}

// Truncate: see EventLog. Nothing after upTo needs an event before it:
// a PE's first delivery after a checkpoint is always an event.
func (st *EventStore) Truncate(pe int32, upTo uint64) {
	if st.check(pe) == nil {
		st.truncate(int(pe), upTo)
	}
}

func (st *EventStore) truncate(i int, upTo uint64) {
	list := st.byPE[i]
	k := 0
	for k < len(list) && list[k].Seq <= upTo {
		k++
	}
	st.byPE[i] = append(list[:0], list[k:]...)
}

// Reset: see EventLog.
func (st *EventStore) Reset() {
	for i := range st.byPE {
		st.byPE[i], st.covered[i] = nil, 0
	}
}

// PEs is the number of PEs whose events the store holds.
func (st *EventStore) PEs() int { return st.n }

// Held is the number of events held for PE pe.
func (st *EventStore) Held(pe int32) int {
	if st.check(pe) != nil {
		return 0
	}
	return len(st.byPE[pe])
}

// MemEventLog is the event logger of a job in one process: the PEs'
// failures discard their goroutines and state, not this, which the
// launcher owns. Each PE's events have a lock of their own: PEs commit
// concurrently, each its own events. Safe for concurrent use.
type MemEventLog struct {
	pes []memEvents
}

type memEvents struct {
	mu sync.Mutex
	st EventStore // of one PE: byPE[0]
	_  [40]byte   // its own cache line
}

// NewMemEventLog holds the events of n PEs.
func NewMemEventLog(n int) *MemEventLog {
	l := &MemEventLog{pes: make([]memEvents, n)}
	for i := range l.pes {
		l.pes[i].st = EventStore{n: n, byPE: make([][]Event, 1), covered: make([]uint64, 1)}
	}
	return l
}

func (l *MemEventLog) of(pe int32) (*memEvents, error) {
	if pe < 0 || int(pe) >= len(l.pes) {
		return nil, fmt.Errorf("event log: PE %d out of range 0..%d", pe, len(l.pes)-1)
	}
	return &l.pes[pe], nil
}

func (l *MemEventLog) Commit(pe int32, evs []Event, covered uint64, others []Cover) error {
	if err := l.commit(pe, evs, covered); err != nil {
		return err
	}
	for _, c := range others {
		if err := l.commit(c.PE, nil, c.Covered); err != nil {
			return err
		}
	}
	return nil
}

func (l *MemEventLog) commit(pe int32, evs []Event, covered uint64) error {
	m, err := l.of(pe)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.commit(pe, 0, evs, covered)
}

func (l *MemEventLog) Events(pe int32, from uint64) ([]Event, uint64, error) {
	m, err := l.of(pe)
	if err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.events(0, from)
}

func (l *MemEventLog) Truncate(pe int32, upTo uint64) {
	if m, err := l.of(pe); err == nil {
		m.mu.Lock()
		m.st.truncate(0, upTo)
		m.mu.Unlock()
	}
}

func (l *MemEventLog) Reset() {
	for i := range l.pes {
		m := &l.pes[i]
		m.mu.Lock()
		m.st.Reset()
		m.mu.Unlock()
	}
}
