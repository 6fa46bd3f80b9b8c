// Package pe owns the processing elements of one OS process: one goroutine
// per PE draining its own multi-producer single-consumer queue (with a system
// lane that always goes first), same-PE sends that touch no atomics, batched
// cross-PE handoff, parking when idle, and the Transport seam behind which
// PEs of other processes will live. It knows nothing of chares: every
// envelope is handed to the Handler the layer above installs.
package pe

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Handler runs on its PE's goroutine and processes one envelope at a time.
// env points into the PE's queue: it is the handler's until Handle
// returns, and a handler that keeps the envelope keeps a copy.
type Handler interface {
	Handle(p *PE, env *Envelope)
}

// PanicHandler is implemented by handlers that report a panic that left
// Handle themselves, naming what they were running (the PE reports it,
// and the message, otherwise). Either way the run fails: the PE's
// goroutine recovers once, outside its loop, instead of once per message.
type PanicHandler interface {
	Panicked(p *PE, env *Envelope, r any, stack []byte)
}

// IdleHandler is implemented by handlers that want to act when their PE
// runs out of work, just before it parks.
type IdleHandler interface {
	Idle(p *PE)
}

// Config sets up a node (the PEs of one process).
type Config struct {
	NumPEs int
	// WireCheck encodes and decodes every message, even between PEs of one
	// process and to the sending PE itself, so tests prove that every
	// message type can cross a process boundary and that no payload is
	// shared mutable state.
	WireCheck bool
	// SpinPolls is the most times an idle PE polls its inbox before it
	// parks; the PE adapts how long it spins to how soon its messages come
	// (see spinWait). 0 parks at once. Spinning pays where every PE has a
	// core of its own (GOMAXPROCS at least the PEs of the process).
	SpinPolls int
	// FlushEvery bounds how many messages a busy PE processes before it
	// hands its buffered cross-PE messages over. Default 64.
	FlushEvery int
	// Chaos, if not zero, seeds a transport that holds hand-overs back for
	// random short times, reordering them across channels while each
	// channel stays FIFO (see chaos.go).
	Chaos uint64
	// Deterministic runs the PEs on the goroutine that calls Wait, one
	// event at a time, chosen by a generator seeded with Seed (see
	// deterministic.go): the same seed gives the same interleaving.
	Deterministic bool
	Seed          uint64
	// OnEvent, in a deterministic run, is called before each event with
	// its number (from 0): a simulation fails PEs there. MaxEvents, if
	// set, ends a deterministic run that has not ended after so many
	// events with an error.
	OnEvent   func(n *Node, event int)
	MaxEvents int
	// OnHandOver, in a deterministic run, is called each time PE src has
	// handed one more message to another PE (count, from 1): a
	// simulation fails a PE there, in the middle of what its handler
	// sends (the rest is never sent).
	OnHandOver func(n *Node, src int, count uint64)
	// FirstPE and LocalPEs are the PEs this process runs when the job
	// spans several processes: FirstPE .. FirstPE+LocalPEs-1 of NumPEs,
	// numbered in the whole job. LocalPEs 0 means every PE is here.
	FirstPE, LocalPEs int
	// Remote carries what local PEs send to the PEs of other processes;
	// it must be set when LocalPEs < NumPEs.
	Remote Remote
	// MeasureIdle times every park (Stats.IdleNanos), for load
	// balancing. It reads the clock twice per park, on the wake-up's
	// critical path (+25% on a cross-PE round trip here): off by default.
	MeasureIdle bool
	// Timeline records every PE's timeline (timeline.go).
	Timeline bool
	// SampleUsage, if positive, looks at every local PE this often and
	// counts the looks that found it parked: Node.Usage. It reads the
	// flag parking keeps anyway, so it costs the PEs nothing (a PE
	// polling for messages, --spin, looks busy).
	SampleUsage time.Duration
	// LockThreads runs each PE's goroutine on an OS thread of its own,
	// so that the thread's CPU clock (ThreadCPU) measures that PE alone:
	// load balancing by CPU time needs it. A wake-up then costs a thread
	// switch: off by default.
	LockThreads bool
}

// Remote carries batches to PEs of other processes. Deliver must be done
// with batch when it returns (the caller reuses it): it encodes or copies
// it, and it may block while the peer's queue is full (back-pressure).
// An error fails the run.
type Remote interface {
	Deliver(src, dst int, sys bool, batch []Envelope) error
	// RolledBack is called by Node.RollBack once every local PE stopped,
	// before any is cleared: nothing queued before may be sent after.
	RolledBack()
}

// Stats counts one PE's traffic. Only the owning PE writes it; read it after
// the node stopped.
type Stats struct {
	Sent      [numKinds]uint64 // envelopes sent, by kind
	SentLocal uint64           // of which to the sending PE itself
	Processed uint64           // envelopes dispatched
	Flushes   uint64           // cross-PE batch handoffs
	// Blocks counts the times the PE blocked waiting for messages (after
	// its spin, if it spins, found none): each costs a wake-up through
	// Go's scheduler.
	Blocks uint64
	// IdleNanos is the time the PE spent parked, waiting for messages
	// (with Config.MeasureIdle).
	IdleNanos int64
}

// HandedOver is how many envelopes the PE handed to other PEs (sent, less
// those to itself): in a deterministic run, the moments Config.OnHandOver
// counts.
func (s *Stats) HandedOver() uint64 {
	var n uint64
	for _, k := range s.Sent {
		n += k
	}
	return n - s.SentLocal
}

// Add accumulates o.
func (s *Stats) Add(o Stats) {
	for k := range s.Sent {
		s.Sent[k] += o.Sent[k]
	}
	s.SentLocal += o.SentLocal
	s.Processed += o.Processed
	s.Flushes += o.Flushes
	s.Blocks += o.Blocks
}

// Node is the set of PEs of this process.
type Node struct {
	cfg       Config
	pes       []*PE // this process's, PE first+i at i
	first     int
	total     int // PEs in the job
	transport Transport
	_         [64]byte
	stopped   atomic.Bool // read by every PE on every message: alone on its cache line
	_         [64]byte
	code      atomic.Int32
	errMu     sync.Mutex
	err       error
	wg        sync.WaitGroup
	done      chan struct{}
	doneOnce  sync.Once
	injected  atomic.Uint64
	usage     []Usage   // by local PE: the sampler's (Config.SampleUsage)
	tlOrigin  time.Time // the timelines' origin (Config.Timeline)
	// remoteProgress: entry methods run by the job's other processes
	// (Progress)
	remoteProgress atomic.Uint64
	_              [64]byte
	parked         atomic.Int32 // PEs blocked in park (written on every park and wake)
	_              [64]byte
	idleArmed      atomic.Bool
	idleMu         sync.Mutex // guards the notice below (armed and fired rarely)
	idleDst        int
	idleEnv        Envelope
	idleAfter      time.Duration
	// allParkedAt counts the moments every PE of the process parked: a
	// delayed idle notice fires only if none came and went meanwhile.
	allParkedAt atomic.Uint64
	det         *deterministic // nil unless cfg.Deterministic
	chaos       *chaos         // nil unless cfg.Chaos
}

// NewNode creates cfg.NumPEs PEs; mk is called once per PE to make its
// handler (the layer above's per-PE state).
func NewNode(cfg Config, mk func(p *PE) Handler) (*Node, error) {
	if cfg.NumPEs < 1 {
		return nil, fmt.Errorf("pe: %d PEs requested, need at least 1", cfg.NumPEs)
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 64
	}
	local := cfg.LocalPEs
	if local == 0 {
		local = cfg.NumPEs
	}
	if cfg.FirstPE < 0 || local < 1 || cfg.FirstPE+local > cfg.NumPEs {
		return nil, fmt.Errorf("pe: PEs %d..%d of %d requested for this process", cfg.FirstPE, cfg.FirstPE+local-1, cfg.NumPEs)
	}
	if local < cfg.NumPEs && (cfg.Remote == nil || cfg.Deterministic) {
		return nil, fmt.Errorf("pe: %d of %d PEs in this process needs a remote transport (and no deterministic run)", local, cfg.NumPEs)
	}
	n := &Node{cfg: cfg, done: make(chan struct{}), first: cfg.FirstPE, total: cfg.NumPEs}
	n.pes = make([]*PE, local)
	for i := range n.pes {
		p := &PE{id: cfg.FirstPE + i, node: n, flushEvery: cfg.FlushEvery, wire: cfg.WireCheck, spin: cfg.SpinPolls, spinNow: cfg.SpinPolls, lockThread: cfg.LockThreads, timeIdle: cfg.MeasureIdle}
		p.in.wake = make(chan struct{}, 1)
		p.in.parkedCount = &n.parked
		// A spinning PE yields where a goroutine its messages depend on
		// may wait for its P: a PE of this process, or a remote link's
		// reader when the PEs take every P.
		p.yieldForLinks = cfg.Remote != nil && local >= runtime.GOMAXPROCS(0)
		p.yieldInSpin = local > runtime.GOMAXPROCS(0) || p.yieldForLinks
		p.ran = &p.ranOwn
		if cfg.Timeline {
			if n.tlOrigin.IsZero() {
				n.tlOrigin = time.Now()
			}
			p.tl = &timeline{origin: n.tlOrigin}
		}
		p.out = make([]*outChunk, (cfg.NumPEs+outChunkSize-1)/outChunkSize)
		p.exited = make(chan struct{})
		n.pes[i] = p
	}
	n.transport = inProcess{n}
	if cfg.Remote != nil && local < cfg.NumPEs {
		n.transport = &mixed{n: n, remote: cfg.Remote}
	} else if cfg.Chaos != 0 && !cfg.Deterministic {
		n.chaos = newChaos(n, cfg.Chaos)
		n.transport = n.chaos
	}
	if cfg.Deterministic {
		n.det = newDeterministic(n, cfg.Seed)
		n.transport = n.det
		for _, p := range n.pes {
			p.flushEvery = 1 // every send is on the wire at once
		}
	}
	for _, p := range n.pes {
		p.handler = mk(p)
		p.idle, _ = p.handler.(IdleHandler)
	}
	return n, nil
}

// NumPEs is the number of PEs in the job.
func (n *Node) NumPEs() int { return n.total }

// LocalPEs gives the PEs this process runs: first .. first+count-1.
func (n *Node) LocalPEs() (first, count int) { return n.first, len(n.pes) }

// IsLocal reports whether PE i runs in this process.
func (n *Node) IsLocal(i int) bool { return uint(i-n.first) < uint(len(n.pes)) }

// PE returns PE i of the job, which must run in this process (IsLocal).
func (n *Node) PE(i int) *PE { return n.pes[i-n.first] }

// WireCheck reports whether every message is encoded.
func (n *Node) WireCheck() bool { return n.cfg.WireCheck }

// Start launches one goroutine per PE.
func (n *Node) Start() {
	if n.det != nil {
		return // Wait runs them
	}
	for _, p := range n.pes {
		n.wg.Add(1)
		go p.run()
	}
	if n.cfg.SampleUsage > 0 {
		n.usage = make([]Usage, len(n.pes))
		n.wg.Add(1)
		go n.sampleUsage(n.cfg.SampleUsage)
	}
}

// Usage is what the usage sampler saw of one PE (Config.SampleUsage):
// how many looks, and how many found it busy (not parked).
type Usage struct {
	Samples, Busy uint64
}

// Utilisation is the share of the looks that found the PE busy (0 with
// no look).
func (u Usage) Utilisation() float64 {
	if u.Samples == 0 {
		return 0
	}
	return float64(u.Busy) / float64(u.Samples)
}

// Usage gives what the sampler saw of each local PE (nil without
// Config.SampleUsage). Call it after Wait.
func (n *Node) Usage() []Usage { return slices.Clone(n.usage) }

// sampleUsage looks at every local PE once a period until the run ends.
func (n *Node) sampleUsage(period time.Duration) {
	defer n.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		for i, p := range n.pes {
			n.usage[i].Samples++
			if !p.in.parked.Load() {
				n.usage[i].Busy++
			}
		}
	}
}

// FailPE fails PE i, fail-stop: its goroutine stops once the message it
// is handling returns, and nothing it buffered for sending leaves. Safe
// from any goroutine, PE i's own included. It reports false if PE i is
// failing already or the run is stopping.
func (n *Node) FailPE(i int) bool {
	p := n.PE(i)
	// The slot keeps its one count in the node's WaitGroup: the dying
	// goroutine leaves it to its successor (Replace).
	if n.stopped.Load() || !p.life.CompareAndSwap(peRunning, peDying) {
		return false
	}
	in := &p.in
	in.pushes.Add(1)
	if in.parked.Load() && in.parked.CompareAndSwap(true, false) {
		in.parkedCount.Add(-1)
		in.signal()
	}
	return true
}

// Replace starts a new incarnation of PE i, which FailPE failed: once the
// old goroutine stopped (Replace waits for it: call it from another
// goroutine), whatever it had queued, buffered or not yet taken from its
// inbox is discarded, and a new goroutine runs mk's handler on an empty
// PE. Messages sent to it from then on reach the new incarnation. It
// returns the old handler (for its statistics: a recovery must not read
// it), or nil if PE i was not failed.
func (n *Node) Replace(i int, mk func(p *PE) Handler) Handler {
	return n.Renew(i, func(p *PE, _ Handler) Handler { return mk(p) })
}

// Renew is Replace for a PE whose old handler its new one takes over
// from: mk gets it (a PE rolled back without failing keeps its memory).
func (n *Node) Renew(i int, mk func(p *PE, old Handler) Handler) Handler {
	p := n.PE(i)
	p.replaceMu.Lock()
	defer p.replaceMu.Unlock()
	if p.life.Load() != peDying {
		return nil
	}
	if n.det == nil {
		<-p.exited
	}
	old := p.handler
	p.clear()
	p.start(func(p *PE) Handler { return mk(p, old) })
	return old
}

// clear discards everything a stopped PE had queued, buffered or not yet
// taken from its inbox.
func (p *PE) clear() {
	in := &p.in
	in.mu.Lock()
	clear(in.sys)
	clear(in.app)
	in.sys, in.app = in.sys[:0], in.app[:0]
	p.taken = in.pushes.Load()
	in.mu.Unlock()
	p.sysq, p.appq = queue{}, queue{}
	for _, c := range p.out {
		if c == nil {
			continue
		}
		for d := range c {
			b := &c[d]
			clear(b.app)
			clear(b.sys)
			b.app, b.sys, b.dirty = b.app[:0], b.sys[:0], false
		}
	}
	p.dirtyList = p.dirtyList[:0]
	p.sinceFlush = 0
}

// start runs a new incarnation of a stopped PE with mk's handler.
func (p *PE) start(mk func(p *PE) Handler) {
	p.ran = &p.ranOwn // until the new handler notes its own
	p.handler = mk(p)
	p.idle, _ = p.handler.(IdleHandler)
	p.exited = make(chan struct{})
	p.life.Store(peRunning)
	if p.node.det == nil {
		go p.run()
	}
}

// RollBack stops every PE of this process at a message boundary (a PE
// that FailPE failed is stopping already), discards everything any of
// them queued, buffered or had in its inbox, and starts each again with
// the handler mk makes from its previous one. For a PE that FailPE
// failed, failed is true: its memory is gone, and its previous handler
// is given for its statistics only.
// Then it hands each PE the envelopes first gives it (uncounted, like
// InjectControl). Nothing sent before the rollback reaches a PE after it:
// every PE stopped before any queue was cleared. Call it from a goroutine
// that is not a PE's (it waits for them). It reports false, starting
// nothing, if the run is stopping.
func (n *Node) RollBack(mk func(p *PE, prev Handler, failed bool) Handler, first func(p *PE) []Envelope) bool {
	for _, p := range n.pes {
		p.replaceMu.Lock()
		defer p.replaceMu.Unlock()
	}
	failed := make([]bool, len(n.pes))
	for i, p := range n.pes {
		failed[i] = p.life.Load() == peDying
		if !failed[i] && !p.life.CompareAndSwap(peRunning, peDying) {
			continue // it stopped with the run: it carries no count any more
		}
		in := &p.in
		in.pushes.Add(1)
		if in.parked.Load() && in.parked.CompareAndSwap(true, false) {
			in.parkedCount.Add(-1)
			in.signal()
		}
	}
	if n.det == nil {
		for _, p := range n.pes {
			<-p.exited
		}
	}
	if n.stopped.Load() {
		// The dying goroutines left their counts to successors that will
		// not come.
		for _, p := range n.pes {
			if p.life.CompareAndSwap(peDying, peExited) && n.det == nil {
				n.wg.Done()
			}
		}
		return false
	}
	n.idleArmed.Store(false)
	n.injected.Store(0)
	if n.chaos != nil {
		n.chaos.drop() // first: nothing it held may reach an inbox cleared below
	}
	if n.cfg.Remote != nil {
		n.cfg.Remote.RolledBack()
	}
	for _, p := range n.pes {
		p.clear()
	}
	if n.det != nil {
		n.det.clear()
	}
	for i, p := range n.pes {
		p.handler = mk(p, p.handler, failed[i])
		p.idle, _ = p.handler.(IdleHandler)
	}
	for _, p := range n.pes {
		for _, env := range first(p) {
			p.in.push(env.SystemLane(), []Envelope{env})
		}
	}
	for _, p := range n.pes {
		p.exited = make(chan struct{})
		p.life.Store(peRunning)
		if n.det == nil {
			go p.run()
		}
	}
	return true
}

// InjectControl hands env to PE dst like Inject, but uncounted: the
// runtime's own control (failure notices), which quiescence detection
// must not wait for.
func (n *Node) InjectControl(dst int, env Envelope) {
	n.PE(dst).in.push(env.SystemLane(), []Envelope{env})
}

// Stop ends the run with an exit code; every PE stops after its current
// message. Safe from any goroutine; the first call wins.
func (n *Node) Stop(code int) {
	if n.stopped.CompareAndSwap(false, true) {
		n.code.Store(int32(code))
		for _, p := range n.pes {
			p.in.signal()
		}
		n.doneOnce.Do(func() { close(n.done) })
	}
}

// Fail ends the run with an error (exit code 1). The first error is kept.
func (n *Node) Fail(err error) {
	n.errMu.Lock()
	if n.err == nil && !n.stopped.Load() {
		n.err = err
	}
	n.errMu.Unlock()
	n.Stop(1)
}

// Outcome is the exit code and error the run is stopping with: final
// once Done is closed.
func (n *Node) Outcome() (int, error) {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return int(n.code.Load()), n.err
}

// Stopped reports whether Stop or Fail was called.
func (n *Node) Stopped() bool { return n.stopped.Load() }

// Done is closed when the run is stopping.
func (n *Node) Done() <-chan struct{} { return n.done }

// Wait blocks until every PE goroutine has returned and gives the exit code
// and the error that ended the run, if any.
func (n *Node) Wait() (int, error) {
	if n.det != nil {
		n.drive()
	}
	<-n.done
	n.wg.Wait()
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return int(n.code.Load()), n.err
}

// Inject hands an envelope to PE dst from any goroutine (tests, launchers).
//
// Injected messages are counted (Injected) so quiescence detection can
// balance them against the messages PEs processed.
func (n *Node) Inject(dst int, env Envelope) {
	n.injected.Add(1)
	sys := env.SystemLane()
	if n.cfg.WireCheck {
		var err error
		if env, err = wireRoundTrip(env); err != nil {
			n.Fail(err)
			return
		}
	}
	n.PE(dst).in.push(sys, []Envelope{env})
}

// HandIn hands a batch that a PE of another process sent to PE dst of
// this one, from the goroutine that received it. Such messages were
// counted by their senders. It takes *batch like Transport.Deliver.
func (n *Node) HandIn(dst int, sys bool, batch *[]Envelope) {
	n.PE(dst).in.handOver(sys, batch)
}

// ArmIdleNotice asks the node to hand env to PE dst (system lane, not
// counted as injected) the next time every PE of the process is parked at
// once — and, if after is positive, has stayed parked for that long.
// Quiescence detection uses it so that its waves run only when the
// process has gone quiet, not on every idle moment of a busy run; the
// delay keeps a process that idles between messages of other processes
// from starting a wave each time.
func (n *Node) ArmIdleNotice(dst int, env Envelope, after time.Duration) {
	n.idleMu.Lock()
	n.idleDst, n.idleEnv, n.idleAfter = dst, env, after
	n.idleArmed.Store(true)
	at, all := n.allParkedAt.Load(), int(n.parked.Load()) == len(n.pes)
	n.idleMu.Unlock()
	if all {
		n.allParked(at)
	}
}

// allParked: every PE of the process parked (the moment numbered at).
func (n *Node) allParked(at uint64) {
	if !n.idleArmed.Load() {
		return // the common case: nothing armed, no lock
	}
	n.idleMu.Lock()
	after := n.idleAfter
	n.idleMu.Unlock()
	if after <= 0 {
		n.fireIdleNotice(func() bool { return true })
		return
	}
	time.AfterFunc(after, func() {
		n.fireIdleNotice(func() bool { return n.allParkedAt.Load() == at && int(n.parked.Load()) == len(n.pes) })
	})
}

// fireIdleNotice hands the armed notice over if still armed and ok says so.
func (n *Node) fireIdleNotice(ok func() bool) {
	n.idleMu.Lock()
	fire := n.idleArmed.Load() && ok()
	dst, env := n.idleDst, n.idleEnv
	if fire {
		n.idleArmed.Store(false)
	}
	n.idleMu.Unlock()
	if fire {
		n.PE(dst).in.push(true, []Envelope{env})
	}
}

// AddInjected counts k envelopes as handed in with Inject: a process
// that replaces a lost one takes over the count of what the lost one was
// handed (its PEs' first messages, which a new incarnation handles
// again), so that quiescence detection's sums balance.
func (n *Node) AddInjected(k uint64) { n.injected.Add(k) }

// Injected is the number of envelopes handed in with Inject.
func (n *Node) Injected() uint64 { return n.injected.Load() }

// Progress is a count that grows whenever a PE of the job ran one of the
// program's entry methods (PE.Ran) since its last flush: this process's
// PEs, and the others' as their heartbeats last told it
// (SetRemoteProgress). Messages of the
// runtime's own — forwarded, retried, recovery's and quiescence's — do
// not count, so a run whose PEs only pass such messages round is seen to
// be stuck as surely as one whose PEs all park. Safe from any goroutine.
// Each PE publishes its part when it hands its buffered messages over (at
// least every FlushEvery messages, and before it parks).
func (n *Node) Progress() uint64 { return n.LocalProgress() + n.remoteProgress.Load() }

// LocalProgress is this process's part of Progress, for the heartbeats
// that tell the other processes.
func (n *Node) LocalProgress() uint64 {
	var t uint64
	for _, p := range n.pes {
		t += p.progress.Load()
	}
	return t
}

// SetRemoteProgress records the job's other processes' parts of
// Progress, as their heartbeats last said.
func (n *Node) SetRemoteProgress(v uint64) { n.remoteProgress.Store(v) }

// Parked reports whether PE i is blocked waiting for messages. Safe from
// any goroutine (a snapshot: it may wake at once).
func (n *Node) Parked(i int) bool { return n.PE(i).in.parked.Load() }

// AllParked reports whether every PE of this process is blocked with
// nothing to do: one count, which a PE joins only once it found no work
// and leaves as soon as a message is handed to it, so it is never seen
// whole while a message waits (PEs asked one at a time can each be seen
// parked, between their turns, while they pass a message round).
func (n *Node) AllParked() bool { return int(n.parked.Load()) == len(n.pes) }

// QueueLens is how many envelopes wait for this PE: in its system lane and
// its application lane, taken from its inbox or not yet. Call it on the
// PE's goroutine.
func (p *PE) QueueLens() (sys, app int) {
	p.in.mu.Lock()
	sys, app = len(p.in.sys), len(p.in.app)
	p.in.mu.Unlock()
	return sys + p.sysq.len(), app + p.appq.len()
}

// Ran notes that one of the program's entry methods ran on this PE: the
// progress watchdogs look for (Node.Progress). Call it on the PE's
// goroutine.
func (p *PE) Ran() { *p.ran = true }

// NoteEntriesIn makes *ran the PE's note that an entry method ran since
// the last flush (Ran sets it, Flush counts and clears it): the handler
// may keep it beside its own hot data, and set it itself.
func (p *PE) NoteEntriesIn(ran *bool) { p.ran = ran }

// Transport carries batches between PEs. The in-process one hands batches
// straight to the destination's inbox; a later one carries them to PEs of
// other processes. Deliver may take *batch (then it leaves an empty slice
// with capacity in its place) or copy it; either way the caller reuses
// *batch afterwards.
type Transport interface {
	Deliver(src, dst int, sys bool, batch *[]Envelope) error
}

type inProcess struct{ n *Node }

func (t inProcess) Deliver(src, dst int, sys bool, batch *[]Envelope) error {
	t.n.pes[dst].in.handOver(sys, batch)
	return nil
}

// mixed hands batches for this process's PEs over in process and the
// others to the remote transport.
type mixed struct {
	n      *Node
	remote Remote
}

func (t *mixed) Deliver(src, dst int, sys bool, batch *[]Envelope) error {
	if i := dst - t.n.first; uint(i) < uint(len(t.n.pes)) {
		t.n.pes[i].in.handOver(sys, batch)
		return nil
	}
	return t.remote.Deliver(src, dst, sys, *batch)
}

// CopyEnvelope returns a deep copy of env, made by encoding it and
// decoding the bytes: a copy that shares no memory with env.
func CopyEnvelope(env Envelope) (Envelope, error) { return wireRoundTrip(env) }

func wireRoundTrip(env Envelope) (Envelope, error) {
	b, err := EncodeEnvelope(nil, &env)
	if err != nil {
		return env, fmt.Errorf("wire check: %s from PE %d: %w", TypeName(env.Type), env.Src, err)
	}
	out, used, err := DecodeEnvelope(b)
	if err != nil {
		return env, fmt.Errorf("wire check: %s from PE %d: %w", TypeName(env.Type), env.Src, err)
	}
	if used != len(b) {
		return env, fmt.Errorf("wire check: %s: decoder used %d of %d bytes", TypeName(env.Type), used, len(b))
	}
	// A connection's reader decodes each frame where it was read and
	// reads the next over it: a decoder that keeps the bytes it was given
	// (TypeInfo.Decode must copy) gets a payload that changes under it.
	// Overwritten here, such a payload is wrong in every wire-checked run.
	for i := range b {
		b[i] = 0xA5
	}
	return out, nil
}

// inbox is the multi-producer side of a PE: a mutex-protected pair of
// slices that the owner swaps out whole, so one lock acquisition moves a
// whole batch.
type inbox struct {
	mu  sync.Mutex
	sys []Envelope
	app []Envelope
	// pushes counts hand-overs (and wake-ups: FailPE); the owner has
	// something to take while it differs from the count it last took
	// (PE.taken). A counter the owner only reads, on a cache line of its
	// own, rather than a flag the owner clears: a spinning owner's polls
	// then cost the producer nothing, and taking costs no write back to
	// the producer's core (ping-pong 390 -> 315 ns for the line of its
	// own).
	_      [64]byte
	pushes atomic.Uint64
	// parked is set by the owner before it blocks and cleared by whoever
	// wakes it (or by the owner if it finds work after all). With pushes
	// it forms a Dekker pair: the owner stores parked then loads pushes, a
	// producer adds to pushes then swaps parked, so a wake-up is never
	// lost and parking takes no lock.
	parked atomic.Bool
	wake   chan struct{}
	// parkedCount is the node's count of parked PEs.
	parkedCount *atomic.Int32
}

func (in *inbox) push(sys bool, batch []Envelope) {
	in.handOver(sys, &batch)
}

// handOver moves *batch into the inbox. When the inbox lane is empty the
// slices are swapped instead of copied, and *batch comes back as the lane's
// old (drained, cleared) buffer.
func (in *inbox) handOver(sys bool, batch *[]Envelope) {
	in.mu.Lock()
	lane := &in.app
	if sys {
		lane = &in.sys
	}
	if len(*lane) == 0 {
		*lane, *batch = *batch, (*lane)[:0]
	} else {
		*lane = append(*lane, *batch...)
		clear(*batch)
		*batch = (*batch)[:0]
	}
	in.mu.Unlock()
	// After the unlock: an owner spinning on pushes that saw it while the
	// lock was still held would wait on the lock (a contended mutex costs
	// both sides). An owner that took the lanes before this count came
	// takes a look at empty lanes at worst.
	in.pushes.Add(1)
	if in.parked.Load() && in.parked.CompareAndSwap(true, false) {
		// Un-count the PE now, not when it gets to run: "every PE parked"
		// must not be seen while a message waits.
		in.parkedCount.Add(-1)
		in.signal()
	}
}

func (in *inbox) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// queue is a FIFO owned by one goroutine.
type queue struct {
	buf  []Envelope
	head int
}

func (q *queue) len() int { return len(q.buf) - q.head }

// push appends e. It never moves or overwrites what is already queued,
// nor the envelope being dispatched (an append that grows the buffer
// leaves the old one as it was): dispatchFront reads it in place.
func (q *queue) push(e *Envelope) { appendEnv(&q.buf, e) }

// dispatchFront hands the front envelope to the handler where it lies,
// then drops it, and reclaims the buffer's drained front. Nothing but push may
// touch q while the handler runs.
func (p *PE) dispatchFront(q *queue) {
	i := q.head
	q.head++
	p.cur = &q.buf[i]
	p.handler.Handle(p, p.cur)
	p.cur = nil
	q.buf[i] = Envelope{} // in the buffer of now, if a push grew it meanwhile
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	} else if q.head > 1024 && q.head > len(q.buf)/2 {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
}

// take moves every envelope of src into q, swapping buffers when q is empty
// so the common case copies nothing. It returns the buffer src should reuse.
func (q *queue) take(src []Envelope) []Envelope {
	if q.len() == 0 {
		old := q.buf[:0]
		q.buf, q.head = src, 0
		return old
	}
	if q.head > 0 && len(q.buf)+len(src) > cap(q.buf) {
		// room at the front first: grown, the buffer would keep the
		// dispatched prefix
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, src...)
	clear(src)
	return src[:0]
}

// PE is one processing element: a goroutine, its queues and its outboxes.
// Every method except those documented otherwise must be called from the
// PE's own goroutine (or from code it is blocked on, such as a threaded
// entry method).
type PE struct {
	id         int
	node       *Node
	handler    Handler
	idle       IdleHandler
	_          [64]byte
	in         inbox // written by other PEs: kept off the owner's cache lines
	_          [64]byte
	sysq, appq queue
	out        []*outChunk // by destination PE, in chunks made on first use (outbox)
	dirtyList  []int
	cur        *Envelope // the envelope being handled, for a panic's report
	sinceFlush int
	flushEvery int
	spin       int    // most polls before parking (Config.SpinPolls)
	spinNow    int    // polls the next spin makes (adaptive)
	taken      uint64 // the inbox's pushes when the PE last took it
	// yieldInSpin: a spinning PE yields now and then (see NewNode)
	yieldInSpin bool
	// yieldForLinks: the PEs take every P of a process with remote
	// links, so a link's writer that a flush woke runs only when a PE
	// lets it: a PE that flushed to another process yields after the
	// message it handles (at most every linkYield). Without it a busy PE
	// held what it sent to another process back until it went idle:
	// CAMEL's determinants, which wait for those messages'
	// acknowledgements, piggybacked ever longer lists, and LeanMD 3×3×3
	// on 2 processes of 1 PE under camel ran at 15.7–17.4 ms a step
	// against 11.1–12.5 with the yield.
	yieldForLinks bool
	remoteFlushed bool          // a flush handed a batch to a remote link (yieldForLinks)
	lastYield     time.Time     // when the PE last yielded for its links
	fullSpin      time.Duration // how long a spin of Config.SpinPolls polls takes (measured once)
	wire          bool
	lockThread    bool
	timeIdle      bool
	Stats         Stats
	// *ran notes that an entry method ran (Ran); progress counts the
	// flushes that found it set (so at least every FlushEvery messages,
	// and before the PE parks) for watchdogs on other goroutines: a store
	// per entry method, no count to load and no atomic operation (an
	// increment per entry cost 1.2 ns of a 35 ns same-PE send).
	ran      *bool // &ranOwn, or the handler's (NoteEntriesIn)
	ranOwn   bool
	tl       *timeline // nil: not recording (Config.Timeline)
	progress atomic.Uint64

	// life: peDying once Replace failed this incarnation; its goroutine
	// stops at the next message boundary, sending nothing more, and
	// closes exited.
	life      atomic.Int32
	exited    chan struct{}
	replaceMu sync.Mutex
}

// ID is the PE's number in the job.
func (p *PE) ID() int { return p.id }

// Node is the process the PE belongs to.
func (p *PE) Node() *Node { return p.node }

// NumPEs is the number of PEs in the job.
func (p *PE) NumPEs() int { return p.node.total }

// Handler returns the layer above's per-PE state.
func (p *PE) Handler() Handler { return p.handler }

// Send queues a copy of env for PE dst, stamped with this PE as its
// source. A send to the PE itself goes to its local queue with no
// synchronisation; a send to another PE is buffered and handed over in a
// batch when the PE goes idle, after FlushEvery messages, or when the
// buffer holds FlushEvery envelopes.
func (p *PE) Send(dst int, env *Envelope) {
	p.Stats.Sent[env.Kind]++
	if dst == p.id {
		if p.wire {
			p.sendLocalWire(env)
			return
		}
		p.Stats.SentLocal++
		q := &p.appq
		if env.SystemLane() {
			q = &p.sysq
		}
		appendEnv(&q.buf, env).Src = int32(p.id)
		return
	}
	ob := p.outbox(dst)
	box := &ob.app
	if env.SystemLane() {
		box = &ob.sys
	}
	// Src goes on the copy: set on env, just before the copy's wide loads
	// read it, it stalled them (store forwarding). Under WireCheck the
	// batch is encoded when it is handed over (flushTo).
	appendEnv(box, env).Src = int32(p.id)
	if !ob.dirty {
		ob.dirty = true
		p.dirtyList = append(p.dirtyList, dst)
	}
	if len(*box) >= p.flushEvery && !p.dead() {
		p.flushTo(dst, ob)
	}
}

// sendLocalWire is a send to this PE itself under WireCheck: what is
// queued is env encoded and decoded again.
func (p *PE) sendLocalWire(env *Envelope) {
	p.Stats.SentLocal++
	q := &p.appq
	if env.SystemLane() {
		q = &p.sysq
	}
	env.Src = int32(p.id)
	e, err := wireRoundTrip(*env)
	if err != nil {
		p.node.Fail(err)
		return
	}
	q.push(&e)
}

// outbox is what a PE has buffered for one destination PE, not yet
// handed over: its system lane's messages and its program's, and whether
// it is on the PE's list to flush.
type outbox struct {
	app, sys []Envelope
	dirty    bool
}

// outChunkSize: a PE's outboxes come in chunks of this many destinations,
// made when the PE first sends to one of them. A PE that talks to a few
// PEs of a job of thousands holds a few chunks (and a pointer for every
// outChunkSize PEs of the job), not an outbox for every PE.
const outChunkSize = 64

type outChunk [outChunkSize]outbox

// outbox is the PE's outbox for dst.
func (p *PE) outbox(dst int) *outbox {
	c := p.out[dst/outChunkSize]
	if c == nil {
		c = new(outChunk)
		p.out[dst/outChunkSize] = c
	}
	return &c[dst%outChunkSize]
}

// appendEnv appends a copy of *e to *buf, in place (append(b, *e) copies
// *e to the stack first), and returns the copy.
func appendEnv(buf *[]Envelope, e *Envelope) *Envelope {
	b := *buf
	n := len(b)
	if n == cap(b) {
		b = slices.Grow(b, 1)
	}
	b = b[:n+1]
	b[n] = *e
	*buf = b
	return &b[n]
}

// Unit counts one unit of work done inside the handler that is running,
// as FlushEvery counts messages: a handler that runs many entry methods
// (a multicast's members on this PE) hands over what they sent to other
// PEs as often as if each had been a message of its own, and the PEs
// waiting for it are not left idle until it returns.
func (p *PE) Unit() {
	if p.sinceFlush++; p.sinceFlush >= p.flushEvery && !p.dead() {
		p.Flush()
	}
}

// Flush hands every buffered cross-PE message over now.
func (p *PE) Flush() {
	if *p.ran {
		*p.ran = false
		p.progress.Add(1)
	}
	for _, dst := range p.dirtyList {
		if ob := p.outbox(dst); ob.dirty {
			p.flushTo(dst, ob)
		}
	}
	p.dirtyList = p.dirtyList[:0]
	p.sinceFlush = 0
}

// flushTo hands over what ob, the outbox for dst, holds.
func (p *PE) flushTo(dst int, ob *outbox) {
	ob.dirty = false
	for _, sys := range [2]bool{true, false} {
		box := &ob.app
		if sys {
			box = &ob.sys
		}
		if len(*box) == 0 {
			continue
		}
		batch := *box
		if p.wire {
			for i := range batch {
				e, err := wireRoundTrip(batch[i])
				if err != nil {
					p.node.Fail(err)
					clear(batch)
					*box = batch[:0]
					return
				}
				batch[i] = e
			}
		}
		if p.yieldForLinks && (dst < p.node.first || dst >= p.node.first+len(p.node.pes)) {
			p.remoteFlushed = true
		}
		if err := p.node.transport.Deliver(p.id, dst, sys, box); err != nil {
			p.node.Fail(fmt.Errorf("PE %d: deliver to PE %d: %w", p.id, dst, err))
		}
		p.Stats.Flushes++
		clear(*box)
		*box = (*box)[:0]
	}
}

// pending reports whether something was handed over since the PE last
// took its inbox.
func (p *PE) pending() bool { return p.in.pushes.Load() != p.taken }

// grab takes everything handed over so far. What a producer counts after
// the load below is taken too if it came before the lock, and looked for
// again (pending) otherwise: its count comes after its hand-over.
func (p *PE) grab() {
	in := &p.in
	n := in.pushes.Load()
	in.mu.Lock()
	if len(in.sys) > 0 {
		in.sys = p.sysq.take(in.sys)
	}
	if len(in.app) > 0 {
		in.app = p.appq.take(in.app)
	}
	in.mu.Unlock()
	p.taken = n
}

const (
	peRunning int32 = iota
	peDying
	peExited
)

func (p *PE) dead() bool { return p.life.Load() == peDying }

func (p *PE) run() {
	if p.lockThread {
		runtime.LockOSThread() // released when the goroutine ends
	}
	defer func() {
		if r := recover(); r != nil {
			p.panicked(r, debug.Stack())
		}
		if p.life.CompareAndSwap(peRunning, peExited) {
			p.node.wg.Done() // else its successor carries the count
		}
		close(p.exited)
	}()
	for !p.node.stopped.Load() {
		if p.dead() {
			return // fail-stop: what it buffered is never sent
		}
		if p.pending() {
			p.grab()
		}
		var q *queue
		switch {
		case p.sysq.len() > 0:
			q = &p.sysq
		case p.appq.len() > 0:
			q = &p.appq
		default:
			if p.idle != nil {
				p.idle.Idle(p)
				if p.sysq.len()+p.appq.len() > 0 {
					continue
				}
			}
			p.Flush()
			p.park()
			continue
		}
		p.dispatchFront(q)
		p.Stats.Processed++
		if p.remoteFlushed && time.Since(p.lastYield) >= linkYield {
			// let the link's writer, which a flush woke, send it now. Twice:
			// one scheduling in 61 takes the global queue first, where a
			// yield puts this goroutine, and would run it again ahead of the
			// writer, which then waited for the next preemption (10 ms; 2
			// runs in 300 of TestABusyPELetsItsLinksRun); the next one
			// cannot.
			p.remoteFlushed = false
			runtime.Gosched()
			runtime.Gosched()
			p.lastYield = time.Now()
		}
		if p.sinceFlush++; p.sinceFlush >= p.flushEvery && !p.dead() {
			p.Flush()
		}
	}
	if !p.dead() {
		p.Flush()
	}
}

// panicked fails the run for a panic that left the handler.
func (p *PE) panicked(r any, stack []byte) {
	env := p.cur
	if env == nil {
		env = &Envelope{}
	}
	if ph, ok := p.handler.(PanicHandler); ok {
		ph.Panicked(p, env, r, stack)
	}
	// The node stops whatever the handler did with the panic (a handler
	// may report errors elsewhere): this PE's goroutine is gone. If the
	// handler failed the run already, its error is the one kept.
	p.node.Fail(fmt.Errorf("PE %d: panic handling %s: %v\n%s", p.id, TypeName(env.Type), r, stack))
}

// linkYield is the least time between a PE's yields for its process's
// links (yieldForLinks): what it sends goes out within it, in batches of
// that much work. A stream between two processes of 1 PE: 50 µs gave
// 109–202 ns a message, 200 µs 114–178, 1 ms 111–271 (TCP: 130–146);
// LeanMD under camel on them ran the same with 50 and 200.
const linkYield = 200 * time.Microsecond

// minSpin is the fewest polls an adaptive spin keeps trying (Config.SpinPolls
// > 0): enough to notice that replies come fast again.
const minSpin = 32

func (p *PE) park() {
	if p.tl != nil {
		start := p.tl.now()
		p.wait()
		p.tl.spans = append(p.tl.spans, Span{Start: start, Dur: p.tl.now() - start, Kind: SpanIdle})
		return
	}
	p.wait()
}

// wait polls for messages (Config.SpinPolls), then blocks until one comes.
func (p *PE) wait() {
	var t0 time.Time
	if p.timeIdle {
		t0 = time.Now()
	}
	if p.spin > 0 {
		var spun time.Time
		if p.fullSpin == 0 && p.spinNow == p.spin {
			spun = time.Now() // once: how long a full spin takes here
		}
		if p.spinWait() {
			if p.timeIdle {
				p.Stats.IdleNanos += int64(time.Since(t0))
			}
			return
		}
		if !spun.IsZero() {
			p.fullSpin = max(time.Since(spun), time.Nanosecond)
		}
		blocked := time.Now()
		p.block(t0)
		p.spinAfterBlock(time.Since(blocked))
		return
	}
	p.block(t0)
}

// spinAfterBlock adapts the spin to how long the PE then waited, blocked:
// a message that came within about a full spin would have been caught by
// one, so the next spin is full; after a longer wait it halves, down to
// minSpin. (Halving after every spin that found nothing was a trap: once
// short, a spin never caught a reply again, so it never grew back, and
// every message cost a wake-up: ping-pong 0.6 µs instead of 0.3.)
func (p *PE) spinAfterBlock(blocked time.Duration) {
	if blocked < 2*p.fullSpin {
		p.spinNow = p.spin
	} else {
		p.spinNow = max(p.spinNow/2, min(minSpin, p.spin))
	}
}

// spinWait busy-polls the inbox before the PE blocks (Charm++'s PEs poll):
// a reply that comes back within the spin costs no park and wake-up (two
// passes through Go's scheduler, and often an OS thread's). A spin that
// finds work doubles the next one, up to Config.SpinPolls; wait shortens
// it after a long wait. The spin does not yield to Go's scheduler while
// every PE of the process has a P of its own: it used to, every 256
// polls, and once the two PEs of a ping-pong came to share a P (Go runs a
// goroutine it wakes on the waker's P) the yields made them take turns at
// it for good, the fast path's slow mode (1.1–1.5 µs a round trip instead
// of 0.3). Without yields, the idle P takes the other PE within a few µs.
// With more PEs than Ps, or as many and a remote link's reader, it yields
// every 256 polls, so what shares a P runs. It reports whether there is
// something to do.
func (p *PE) spinWait() bool {
	for i := 0; i < p.spinNow; i++ {
		if p.pending() || p.node.stopped.Load() || p.dead() {
			p.spinNow = min(2*p.spinNow, p.spin)
			return true
		}
		if p.yieldInSpin && i&255 == 255 {
			runtime.Gosched()
		}
	}
	return false
}

// block parks the PE until a producer wakes it.
func (p *PE) block(t0 time.Time) {
	in := &p.in
	n := p.node
	in.parked.Store(true)
	if p.pending() || n.stopped.Load() {
		if in.parked.CompareAndSwap(true, false) {
			return
		}
		// A producer claimed the wake-up (and un-counted us): take its
		// signal and balance the count.
		n.parked.Add(1)
		<-in.wake
		return
	}
	p.Stats.Blocks++
	// Counted only once no work was found, so the count never exceeds the
	// PEs that are really blocked.
	if int(n.parked.Add(1)) == len(n.pes) {
		n.allParked(n.allParkedAt.Add(1))
	}
	<-in.wake
	if p.timeIdle {
		p.Stats.IdleNanos += int64(time.Since(t0))
	}
}
