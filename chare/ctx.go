package chare

import (
	"fmt"
	"io"
	"maps"
	"runtime/debug"
	"slices"
	"time"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// Ctx is what an entry method gets: who and where it is, and the runtime's
// operations on its behalf. A Ctx is only valid during the call that received
// it (and, for threaded entries, until the entry returns).
type Ctx struct {
	m  *manager.Manager
	e  *manager.Element
	th *thread
	// the reference number the entry put its message under (Gather.Put):
	// unset again when the call returns, with the rest of the Ctx
	ref    int64
	hasRef bool
}

// PE is the PE running the entry method.
func (c *Ctx) PE() int { return c.m.Me() }

// NumPEs is the number of PEs in the run.
func (c *Ctx) NumPEs() int { return c.m.NumPEs() }

// Index is the running element's index (PE number for groups, [0] for main).
func (c *Ctx) Index() Index { return c.e.Index }

// Out is where the run's chares print (Config.Stdout).
func (c *Ctx) Out() io.Writer { return hostOf(c.m).run.stdout }

// Started is when this process began the run (a run restarted from a
// checkpoint began with the restart).
func (c *Ctx) Started() time.Time { return hostOf(c.m).run.start }

// Fail ends the run with an error naming this chare.
func (c *Ctx) Fail(err error) {
	c.m.Fail(fmt.Errorf("%s%v on PE %d: %w", c.e.Coll.Name, c.e.Index, c.m.Me(), err))
}

// Exit ends the run on every PE with this exit code once the current entry
// method returns.
func (c *Ctx) Exit(code int) { c.m.PE.Node().Stop(code) }

// Migrate moves the running element to PE pe after this entry method
// returns. Messages sent to it meanwhile are forwarded, never lost.
func (c *Ctx) Migrate(pe int) {
	if err := c.m.RequestMigration(c.e, pe); err != nil {
		c.Fail(err)
	}
}

// AtSync says the element is ready for load balancing; ResumeFromSync is
// called on it when every element of its array got there and the balancer's
// migrations are done. An element whose type has no ResumeFromSync but
// a method spelt near it (ResumeFromSynch) ends the run at once with an
// error naming both; one with neither is resumed by other messages, or
// the run goes quiet saying that nothing resumed it.
func (c *Ctx) AtSync() {
	if c.e.Coll.Kind != manager.CollArray {
		c.Fail(fmt.Errorf("AtSync: only array elements take part in load balancing"))
		return
	}
	if _, ok := c.e.Obj.(ResumeFromSync); !ok && !c.m.BalancesPeriodically() {
		if err := misspeltResumeFromSync(c.e.Obj); err != nil {
			c.Fail(err)
			return
		}
	}
	c.m.AtSync(c.e)
}

// Delete removes the running element after this entry method returns.
func (c *Ctx) Delete() { c.m.RequestDelete(c.e) }

// This returns a proxy to the running element.
func This[C any](ctx *Ctx) ElemProxy[C] {
	return ElemProxy[C]{Coll: ctx.e.Coll.ID, Index: ctx.e.Index}
}

// ThisArray returns a proxy to the running element's array.
func ThisArray[C any](ctx *Ctx) ArrayProxy[C] { return ArrayProxy[C]{Coll: ctx.e.Coll.ID} }

// ThisGroup is the group of the running group member.
func ThisGroup[C any](ctx *Ctx) GroupProxy[C] { return GroupProxy[C]{Coll: ctx.e.Coll.ID} }

// Object returns the chare running on this Ctx as a *C, or nil.
func Object[C any](ctx *Ctx) *C {
	c, _ := ctx.e.Obj.(*C)
	return c
}

// Checkpoint takes a coordinated checkpoint of the whole run (Charm++'s
// CkStartMemCheckpoint): every chare's state (msgpack, or its Migratable
// Pack) and its runtime records, held by its PE and by a buddy PE, and
// written to the checkpoint directory if one was given. Call it where none
// of the program's messages is in flight (after a barrier); cb receives
// struct{}{} once every PE committed it.
func Checkpoint(ctx *Ctx, cb Callback[struct{}]) { ctx.m.StartCheckpoint(cb.CB) }

// StartQD delivers to cb (with struct{}{}) once no message is in flight or
// being processed anywhere.
func StartQD(ctx *Ctx, cb Callback[struct{}]) {
	h := hostOf(ctx.m)
	h.nextQD++
	if h.qd == nil {
		h.qd = map[uint64]manager.Callback{}
	}
	h.qd[h.nextQD] = cb.CB
	ctx.m.StartQD(h.nextQD)
}

// EndWhenQuiet says the run ends once it is quiescent — no message in
// flight, no entry method running, on any PE — with exit code 0, as
// Charm++'s CkStartQD(CkCallback(CkCallback::ckExit)) does: for programs
// whose end is that nothing is left to do. Without it, or ctx.Exit, a run
// that goes quiet fails: a program that stops sending before it is done
// (a lost message, a chare whose state did not survive) must not look
// like one that finished. Either way a run that goes quiet with work
// unfinished (a reduction some element never contributed to, a future
// waited on) fails, naming it. Call it from any entry method (main's Init
// is the usual place); it holds across restarts and recoveries.
func EndWhenQuiet(ctx *Ctx) { ctx.m.EndWhenQuiet() }

func hostOf(m *manager.Manager) *host { return m.Host().(*host) }

// thread is a threaded entry method's goroutine. It and its PE's goroutine
// hand control back and forth over channels, so exactly one of them runs at
// a time and the chare still needs no locks.
type thread struct {
	resume chan struct{}
	yield  chan bool // true: finished
	done   func()    // runs on the PE when the thread finishes
	what   string    // the entry method, for errors: "ck.Main constructor"
}

// runThreaded runs f on its own goroutine and waits until it finishes or
// blocks on a future. done runs on the PE when f finishes.
func (h *host) runThreaded(m *manager.Manager, e *manager.Element, what string, f func(*Ctx), done func()) {
	th := &thread{resume: make(chan struct{}), yield: make(chan bool), done: done, what: e.Coll.Name + " " + what}
	ctx := &Ctx{m: m, e: e, th: th}
	go func() {
		<-th.resume
		defer func() {
			if r := recover(); r != nil {
				m.Fail(fmt.Errorf("%s: %s panicked: %v\n%s", identity(m, e), what, r, debug.Stack()))
			}
			th.yield <- true
		}()
		f(ctx)
	}()
	h.switchTo(th)
}

// switchTo hands the PE to th until it blocks or finishes.
func (h *host) switchTo(th *thread) {
	th.resume <- struct{}{}
	if finished := <-th.yield; finished && th.done != nil {
		th.done()
	}
}

// suspend blocks the calling thread and gives its PE back.
func (th *thread) suspend() {
	th.yield <- false
	<-th.resume
}

type futureState struct {
	filled bool
	v      manager.Lazy
	waiter *thread
	done   func()
}

// Future is a value that a reduction or another chare will provide later.
// It belongs to the PE that made it; Get blocks a threaded entry method
// (such as main's constructor) until the value arrives.
type Future[T any] struct {
	PE int32
	ID uint64
}

// NewFuture makes a future owned by the running PE.
func NewFuture[T any](ctx *Ctx) Future[T] {
	h := hostOf(ctx.m)
	h.nextFut++
	if h.futures == nil {
		h.futures = map[uint64]*futureState{}
	}
	h.futures[h.nextFut] = &futureState{}
	return Future[T]{PE: int32(ctx.m.Me()), ID: h.nextFut}
}

// Callback returns a callback that fills the future.
func (f Future[T]) Callback() Callback[T] {
	return Callback[T]{CB: manager.Callback{Kind: manager.CBFuture, PE: f.PE, Future: f.ID}}
}

// Set fills the future from any chare.
func (f Future[T]) Set(ctx *Ctx, v T) {
	ctx.m.DeliverCallback(f.Callback().CB, v)
}

// Get waits for the future's value. It must be called on the future's PE,
// from a threaded entry method (main's constructor is one).
func (f Future[T]) Get(ctx *Ctx) (T, error) {
	var zero T
	if int(f.PE) != ctx.m.Me() {
		return zero, fmt.Errorf("future %d belongs to PE %d, Get called on PE %d", f.ID, f.PE, ctx.m.Me())
	}
	h := hostOf(ctx.m)
	st := h.futures[f.ID]
	if st == nil {
		return zero, fmt.Errorf("future %d: unknown or already taken", f.ID)
	}
	if !st.filled {
		if ctx.th == nil {
			return zero, fmt.Errorf("future %d: Get in an entry method that is not threaded would block its PE", f.ID)
		}
		st.waiter = ctx.th
		ctx.th.suspend()
	}
	delete(h.futures, f.ID)
	v, err := manager.LazyAs[T](st.v)
	if err != nil {
		return zero, fmt.Errorf("future %d: %w", f.ID, err)
	}
	return v, nil
}

func (h *host) FutureFilled(m *manager.Manager, id uint64, v manager.Lazy) {
	st := h.futures[id]
	if st == nil {
		m.Fail(fmt.Errorf("PE %d: value for unknown future %d", m.Me(), id))
		return
	}
	if st.filled {
		m.Fail(fmt.Errorf("PE %d: future %d filled twice", m.Me(), id))
		return
	}
	st.filled, st.v = true, v
	if th := st.waiter; th != nil {
		st.waiter = nil
		h.switchTo(th)
	}
}

// hostRecords is what a checkpoint keeps of a PE's host: the callbacks of
// the quiescence detections it asked for and its futures (a restored run
// delivers to them as the checkpoint's run would have).
type hostRecords struct {
	NextQD  uint64
	QD      []qdRecord `msgpack:",omitempty"`
	NextFut uint64
	Futures []futureRecord `msgpack:",omitempty"`
}

type qdRecord struct {
	Tag uint64
	CB  manager.Callback
}

type futureRecord struct {
	ID     uint64
	Filled bool
	V      manager.Lazy
}

// Records implements manager.Host.
func (h *host) Records(m *manager.Manager) ([]byte, error) {
	r := hostRecords{NextQD: h.nextQD, NextFut: h.nextFut}
	for _, tag := range slices.Sorted(maps.Keys(h.qd)) {
		r.QD = append(r.QD, qdRecord{Tag: tag, CB: h.qd[tag]})
	}
	for _, id := range slices.Sorted(maps.Keys(h.futures)) {
		st := h.futures[id]
		if st.waiter != nil {
			return nil, fmt.Errorf("%s waits on future %d: a blocked threaded entry method cannot be checkpointed (checkpoint from a callback instead)", st.waiter.what, id)
		}
		r.Futures = append(r.Futures, futureRecord{ID: id, Filled: st.filled, V: st.v})
	}
	if r.NextQD == 0 && r.NextFut == 0 {
		return nil, nil
	}
	return msgpack.Marshal(&r)
}

// RestoreRecords implements manager.Host.
func (h *host) RestoreRecords(m *manager.Manager, b []byte) error {
	h.qd, h.futures, h.nextQD, h.nextFut = nil, nil, 0, 0
	if len(b) == 0 {
		return nil
	}
	var r hostRecords
	if err := pe.UnmarshalMsgpack(b, &r); err != nil {
		return fmt.Errorf("the chare layer's records: %w", err)
	}
	h.nextQD, h.nextFut = r.NextQD, r.NextFut
	for _, q := range r.QD {
		if h.qd == nil {
			h.qd = map[uint64]manager.Callback{}
		}
		h.qd[q.Tag] = q.CB
	}
	for _, f := range r.Futures {
		if h.futures == nil {
			h.futures = map[uint64]*futureState{}
		}
		h.futures[f.ID] = &futureState{filled: f.Filled, v: f.V}
	}
	return nil
}
