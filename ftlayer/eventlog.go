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
	// are skipped. It returns once they are safe.
	Commit(pe int32, evs []Event, covered uint64) error
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
	for i, e := range evs {
		if e.Sender < 0 || int(e.Sender) >= st.n {
			return fmt.Errorf("event log: PE %d's event %d names sender %d, outside 0..%d", pe, i, e.Sender, st.n-1)
		}
		if i > 0 && e.Seq <= evs[i-1].Seq {
			return fmt.Errorf("event log: PE %d's events out of order (delivery %d after %d)", pe, e.Seq, evs[i-1].Seq)
		}
		if e.Seq > covered {
			return fmt.Errorf("event log: PE %d's event at delivery %d, past the %d its commit covers", pe, e.Seq, covered)
		}
	}
	list := st.byPE[pe]
	var last uint64
	if len(list) > 0 {
		last = list[len(list)-1].Seq
	}
	for _, e := range evs {
		if e.Seq > last {
			list = append(list, e)
		}
	}
	st.byPE[pe] = list
	st.covered[pe] = max(st.covered[pe], covered)
	return nil
}

// Events: see EventLog.
func (st *EventStore) Events(pe int32, from uint64) ([]Event, uint64, error) {
	if err := st.check(pe); err != nil {
		return nil, 0, err
	}
	list := st.byPE[pe]
	i, _ := slices.BinarySearchFunc(list, from+1, func(e Event, seq uint64) int {
		switch {
		case e.Seq < seq:
			return -1
		case e.Seq > seq:
			return 1
		}
		return 0
	})
	return slices.Clone(list[i:]), st.covered[pe], nil
}

// Truncate: see EventLog. Nothing after upTo needs an event before it:
// a PE's first delivery after a checkpoint is always an event.
func (st *EventStore) Truncate(pe int32, upTo uint64) {
	if st.check(pe) != nil {
		return
	}
	list := st.byPE[pe]
	k := 0
	for k < len(list) && list[k].Seq <= upTo {
		k++
	}
	st.byPE[pe] = append(list[:0], list[k:]...)
}

// Reset: see EventLog.
func (st *EventStore) Reset() {
	for i := range st.byPE {
		st.byPE[i], st.covered[i] = nil, 0
	}
}

// Held is the number of events held for PE pe.
func (st *EventStore) Held(pe int32) int {
	if st.check(pe) != nil {
		return 0
	}
	return len(st.byPE[pe])
}

// MemEventLog is the event logger of a job in one process: the PEs'
// failures discard their goroutines and state, not this, which the
// launcher owns. Safe for concurrent use.
type MemEventLog struct {
	mu sync.Mutex
	st *EventStore
}

// NewMemEventLog holds the events of n PEs.
func NewMemEventLog(n int) *MemEventLog { return &MemEventLog{st: NewEventStore(n)} }

func (l *MemEventLog) Commit(pe int32, evs []Event, covered uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.Commit(pe, evs, covered)
}

func (l *MemEventLog) Events(pe int32, from uint64) ([]Event, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.Events(pe, from)
}

func (l *MemEventLog) Truncate(pe int32, upTo uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Truncate(pe, upTo)
}

func (l *MemEventLog) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Reset()
}
