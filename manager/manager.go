// Package manager owns the per-PE manager objects of charmgo: the k-ary
// spanning trees of the PE set and of each array section, reductions
// (accumulate local contributions, agglomerate with the children's partials,
// deliver at the root in canonical order), broadcast and multicast
// forwarding, the location of array elements (home PEs, caches, forwarding
// across migrations), element creation, insertion, deletion and migration,
// AtSync epochs and quiescence detection. Tree and reduction bookkeeping are
// plain state machines (tree.go, reduce.go); this file and its siblings are
// the glue that runs them on a PE. It knows nothing of the user's Go types:
// the chare layer plugs in through Host.
package manager

import (
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
)

// Host is what the chare layer provides: construction, invocation and
// packing of user objects, and delivery of futures.
type Host interface {
	// Construct builds element e (e.Obj is nil) with constructor argument arg.
	Construct(m *Manager, e *Element, arg Lazy)
	// Invoke runs the entry method env.Type on e.
	Invoke(m *Manager, e *Element, env *pe.Envelope)
	// Pack serializes e.Obj for migration.
	Pack(e *Element) ([]byte, error)
	// Checkpoint serializes e.Obj for a checkpoint (migratable or not).
	Checkpoint(e *Element) ([]byte, error)
	// Restore rebuilds e.Obj from a checkpoint (no arrival hook runs).
	Restore(m *Manager, e *Element, state []byte) error
	// Restored runs on PE 0 when every PE restored a checkpoint, just
	// before the program resumes.
	Restored(m *Manager)
	// CheckpointStarting runs on PE 0 when the run is quiet for checkpoint
	// epoch, before it asks every PE for its snapshot; false puts the
	// checkpoint off to the next quiet moment (a PE is recovering).
	CheckpointStarting(m *Manager, epoch uint64) bool
	// CheckpointCommitted runs on PE 0 once every PE committed epoch.
	CheckpointCommitted(m *Manager, epoch uint64)
	// LocalRestored runs on a failed PE's new incarnation when it restored
	// checkpoint epoch (0: the start of the run) to recover alone.
	LocalRestored(m *Manager, epoch uint64)
	// LocalRecovered runs on it once it caught up with the others.
	LocalRecovered(m *Manager)
	// Unpack rebuilds e.Obj on its new PE and runs its arrival hook.
	Unpack(m *Manager, e *Element, state []byte) error
	// ResumeFromSync ends an AtSync epoch for e.
	ResumeFromSync(m *Manager, e *Element)
	// FutureFilled delivers a future's value on its PE.
	FutureFilled(m *Manager, id uint64, v Lazy)
	// Quiescent runs when quiescence detection that this PE asked for
	// (StartQD) finds the run quiescent.
	Quiescent(m *Manager, tag uint64)
	// Records packs this PE's records of the chare layer for a
	// checkpoint (the callbacks of its quiescence detections, its
	// futures), or says why no checkpoint can be taken now.
	Records(m *Manager) ([]byte, error)
	// RestoreRecords rebuilds them from a checkpoint (nil: none).
	RestoreRecords(m *Manager, b []byte) error
	// Pending lists the chare layer's unfinished work on this PE (entry
	// methods blocked on futures), for Manager.Pending.
	Pending(m *Manager) []string
}

// Options configure every manager of a run.
type Options struct {
	Branching int        // spanning-tree arity (default 4)
	Strategy  LBStrategy // AtSync strategy; nil: no migrations
	// CheckpointDir, if set, receives every committed checkpoint as well.
	CheckpointDir string
	OnError       func(error) // how a runtime error ends the run (default: node.Fail)
	// FT makes each PE's message-logging hook (nil: none).
	FT HookFactory
}

// MapFunc places index ix of an array with bounds among n PEs.
type MapFunc func(ix pe.Index, bounds []int, n int) int

// mapFuncs is the registry of user placement functions, by name.
var mapFuncs = pe.NewRegistry[MapFunc]("placement function")

// RegisterMapFunc registers a user placement function under a name and
// returns its id (CreateMsg.MapFn), which every process derives alike.
// Register at package level: a second registration of a name, or a new
// one once a run has started, panics.
func RegisterMapFunc(name string, f MapFunc) uint32 {
	id, err := mapFuncs.Add(name, f)
	if err != nil {
		panic("manager.RegisterMapFunc: " + err.Error())
	}
	return id
}

// Element is the runtime's record of one array element (or group member, or
// the main chare) on its current PE.
type Element struct {
	Coll    *Collection
	Index   pe.Index
	Obj     any
	RedHome int32  // PE whose reduction state counts this element
	RedNo   uint32 // next reduction of the collection it contributes to
	Bcast   uint64 // broadcasts delivered
	Moves   uint32 // migrations so far (orders location updates)
	Secs    map[uint64]*SecMembership
	AtSync  bool
	Epoch   uint32

	migrateTo int
	deleted   bool
}

type loc struct {
	pe    int32
	moves uint32
}

type bcastRec struct {
	seq     uint64
	typ     uint32
	payload any
}

const bcastHistory = 512

// Collection is a PE's view of one array, group or main chare.
type Collection struct {
	ID         uint32
	Kind       CollKind
	Type       uint32
	Name       string
	Bounds     []int
	Map        MapKind
	MapFn      uint32
	Sparse     bool
	Migratable bool
	Creator    int32

	local   map[pe.Index]*Element
	dense   []*Element // lookup by linear index for bounded arrays up to denseLimit elements
	dlocs   []loc      // locations by linear index (dense arrays); pe -2: unknown
	dims    uint8
	bounds  [pe.MaxDims]uint32
	sorted  []*Element
	dirty   bool
	locs    map[pe.Index]loc
	homeBuf map[pe.Index][]pe.Envelope

	tree          *Tree
	red           *Reduction
	doneInserting bool
	countsIn      int
	// counted DoneInserting (see DoneInserting)
	insSent    []uint32 // insertions this PE sent, by PE
	insRecv    uint32   // insertions this PE received
	doneKnown  bool
	doneExpect uint32
	doneSum    []uint32 // the caller: insertions sent to each PE, in all
	doneAsked  int
	bcastHeld  []pe.Envelope // broadcasts that came before this PE's insertions were all in
	countsSent bool

	bcastNext      uint64 // root: last number given out
	bcastDelivered uint64
	history        []bcastRec

	sync syncState
}

// Manager is one PE's manager object. All methods run on that PE.
type Manager struct {
	PE    *pe.PE
	host  Host
	opt   Options
	colls map[uint32]*Collection
	secs  map[uint64]*Section

	pendingColl map[uint32][]pe.Envelope
	pendingSec  map[uint64][]pe.Envelope
	building    map[uint64]*sectionBuild // sections waiting for member locations

	last     *Collection // the collection of the previous message: most runs hit it again
	nextColl uint32
	nextSec  uint64
	acts     []RedAction

	qd       qdState
	quiet    quietCheck
	ckpt     ckptState
	secRoots map[uint64]int // sections rooted elsewhere than their id says (after a restart)
	ft       ftlayer.Hook
	released pe.Envelope // a held envelope the hook handed back
	rec      recoverState
	qdAsked  []uint64 // quiescence detections this PE waits for (not checkpoints')
	// Sent and Processed count application-level messages for quiescence
	// detection.
	Sent, Processed uint64
	// Stats counts what the program asked for, by kind.
	Stats Stats
}

// Stats counts application-level operations and their payload bytes, as a
// program sees them (not the runtime's own tree hops and bookkeeping).
// Bytes count payloads whose size is known (see PayloadSize); Unsized counts
// the others.
type Stats struct {
	P2P, P2PBytes              uint64 // point-to-point sends (callback deliveries included)
	Multicasts, MulticastBytes uint64 // section multicasts issued
	Deliveries                 uint64 // multicast deliveries to section members
	// Deliveries a section sent to a PE its member had left, passed on
	// from there (and the member's contributions sent back to it).
	ForwardedDeliveries           uint64
	Broadcasts, BroadcastBytes    uint64 // collection broadcasts issued
	Contributions, ReductionBytes uint64 // reduction contributions (collections and sections)
	Unsized                       uint64
	// Coordinated checkpoints committed (counted on PE 0), the bytes of
	// every PE's snapshot (each held twice: own PE and buddy) and the time
	// from the request to the last PE's commit.
	Checkpoints, CheckpointBytes, CheckpointNanos uint64
	// Restarts from a checkpoint (counted on PE 0).
	Restarts uint64
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	s.P2P += o.P2P
	s.P2PBytes += o.P2PBytes
	s.Multicasts += o.Multicasts
	s.MulticastBytes += o.MulticastBytes
	s.Deliveries += o.Deliveries
	s.ForwardedDeliveries += o.ForwardedDeliveries
	s.Broadcasts += o.Broadcasts
	s.BroadcastBytes += o.BroadcastBytes
	s.Contributions += o.Contributions
	s.ReductionBytes += o.ReductionBytes
	s.Unsized += o.Unsized
	s.Checkpoints += o.Checkpoints
	s.CheckpointBytes += o.CheckpointBytes
	s.CheckpointNanos += o.CheckpointNanos
	s.Restarts += o.Restarts
}

// Sizer is implemented by payloads that know their size on the wire.
type Sizer = pe.Sizer

// PayloadSize is the wire size of a payload when it can be known cheaply, or
// -1.
func PayloadSize(v any) int { return pe.PayloadSize(v) }

func (s *Stats) bytes(n *uint64, v any) {
	if sz := PayloadSize(v); sz >= 0 {
		*n += uint64(sz)
	} else {
		s.Unsized++
	}
}

// New makes the manager of PE p.
func New(p *pe.PE, host Host, opt Options) *Manager {
	if opt.Branching < 2 {
		opt.Branching = DefaultBranching
	}
	m := &Manager{
		PE: p, host: host, opt: opt,
		colls:       map[uint32]*Collection{},
		secs:        map[uint64]*Section{},
		pendingColl: map[uint32][]pe.Envelope{},
		pendingSec:  map[uint64][]pe.Envelope{},
	}
	m.newHook()
	return m
}

// Of returns the manager of PE p.
func Of(p *pe.PE) *Manager { return p.Handler().(*Manager) }

// Host is the chare layer's per-PE state.
func (m *Manager) Host() Host { return m.host }

// Me is this PE's number.
func (m *Manager) Me() int { return m.PE.ID() }

// NumPEs is the number of PEs in the run.
func (m *Manager) NumPEs() int { return m.PE.NumPEs() }

// Collection returns this PE's view of a collection, or nil.
func (m *Manager) Collection(id uint32) *Collection { return m.coll(id) }

// Fail ends the run with err.
func (m *Manager) Fail(err error) {
	if m.opt.OnError != nil {
		m.opt.OnError(err)
		return
	}
	m.PE.Node().Fail(err)
}

func (m *Manager) failf(format string, args ...any) { m.Fail(fmt.Errorf(format, args...)) }

// send counts an application-level message, has the FT hook stamp it and
// queues it.
func (m *Manager) send(dst int, env *pe.Envelope) {
	if env.Kind != pe.KindSystem || !unlogged(env.Type) {
		if err := m.ft.Send(dst, ftlayer.RoleP2P, 0, 0, false, env); err != nil {
			m.Fail(err)
			return
		}
	}
	if env.Kind != pe.KindSystem || !control(env.Type) {
		m.Sent++
	}
	m.PE.Send(dst, env)
}

func (m *Manager) sendSys(dst int, typ uint32, payload any) {
	m.send(dst, &pe.Envelope{Type: typ, Kind: pe.KindSystem, Payload: payload})
}

// Handle implements pe.Handler.
func (m *Manager) Handle(p *pe.PE, env *pe.Envelope) {
	switch env.Type {
	case tQDProbe:
		p.Bookkeeping()
		m.onQDProbe(env.Payload.(*QDProbeMsg))
		return
	case tQDReply:
		p.Bookkeeping()
		m.onQDReply(env.Payload.(*QDReplyMsg))
		return
	case tDump:
		p.Bookkeeping()
		m.onDump(env.Payload.(*DumpMsg))
		return
	}
	if m.rec.reviving {
		if env.Type == tRecover {
			m.onRecover(env.Payload.(*RecoverMsg))
		} else {
			m.rec.stash = append(m.rec.stash, *env) // until the snapshot is in
		}
		return
	}
	if env.FT != nil {
		switch a, err := m.ft.Arrive(env); {
		case err != nil:
			m.Fail(err)
			return
		case a == ftlayer.Held:
			// counted as processed when the hook hands it back, maybe at
			// once: a kept result can fill the turn the hook waited for
			m.handleReleased()
			return
		case a == ftlayer.Dropped:
			// a copy (a replay, or a message made again by a recovering
			// PE): counted neither as sent nor as processed
			return
		}
	}
	m.handle(env)
	m.handleReleased()
}

// handleReleased handles the envelopes the hook releases, one at a time.
func (m *Manager) handleReleased() {
	if m.ft.Next(&m.released) {
		for ok := true; ok; ok = m.ft.Next(&m.released) {
			m.handle(&m.released)
		}
		m.released = pe.Envelope{} // drop its payload
	}
	if m.rec.recovering {
		m.checkRecovered()
	}
}

func (m *Manager) handle(env *pe.Envelope) {
	if env.Kind != pe.KindSystem || !control(env.Type) {
		m.Processed++
	}
	switch env.Kind {
	case pe.KindSystem:
		m.handleSys(env)
	case pe.KindReduction:
		switch env.Type {
		case tContrib:
			m.onContrib(env)
		case tPartial:
			m.onPartial(env)
		default:
			m.failf("PE %d: unexpected reduction message %s", m.Me(), pe.TypeName(env.Type))
		}
	default:
		m.handleApp(env)
	}
}

// Idle implements pe's idle hook: the fault-tolerance hook sends what it
// batches, and quiescence replies wait for an idle PE (after those
// sends, which they count).
func (m *Manager) Idle(p *pe.PE) {
	m.ft.Idle()
	m.qdIdle()
}

func (m *Manager) handleSys(env *pe.Envelope) {
	switch env.Type {
	case tCreate:
		m.onCreate(env.Payload.(*CreateMsg))
	case tInsert:
		m.onInsert(env)
	case tDone:
		m.onDoneInserting(env)
	case tCount:
		m.onCount(env)
	case tLoc:
		m.onLoc(env)
	case tMigrate:
		m.onMigrate(env)
	case tMigrateReq:
		m.onMigrateReq(env)
	case tLocQuery:
		m.onLocQuery(env)
	case tDelete:
		m.onDelete(env)
	case tDeath:
		m.onDeath(env)
	case tSection:
		m.onSection(env.Payload.(*SectionMsg))
	case tFuture:
		f := env.Payload.(*FutureMsg)
		m.host.FutureFilled(m, f.ID, f.Value)
	case tSync:
		m.onSync(env.Payload.(*SyncMsg))
	case tPlan:
		m.onPlan(env.Payload.(*PlanMsg))
	case tPlanDone:
		m.onPlanDone(env.Payload.(*PlanDoneMsg))
	case tResume:
		m.onResume(env.Payload.(*ResumeMsg))
	case tStranded:
		m.onStranded(env)
	case tCkptStart:
		m.onCkptStart(env.Payload.(*CkptStartMsg))
	case tCkptTake:
		m.onCkptTake(env.Payload.(*CkptTakeMsg))
	case tCkptPacket:
		m.onCkptPacket(env)
	case tCkptDone:
		m.onCkptDone(env)
	case tRestore:
		m.onRestore(env.Payload.(*RestoreMsg))
	case tRestored:
		m.onRestored(env.Payload.(*RestoredMsg))
	case tFTPacket:
		m.onFTPacket(env)
	case tPEFailed:
		m.onPEFailed(env.Payload.(*PEFailedMsg))
	case tHeldCopy:
		m.onHeldCopy(env.Payload.(*HeldCopyMsg))
	case tPeerRecovered:
		m.onPeerRecovered(env.Payload.(*PeerRecoveredMsg))
	case tRecover:
		m.failf("PE %d: a recovery snapshot reached a PE that is not recovering", m.Me())
	default:
		m.failf("PE %d: unknown system message %s", m.Me(), pe.TypeName(env.Type))
	}
}

// collFor returns the collection of env, or buffers env until the
// collection's creation reaches this PE.
func (m *Manager) collFor(id uint32, env *pe.Envelope) *Collection {
	if c := m.coll(id); c != nil {
		return c
	}
	m.pendingColl[id] = append(m.pendingColl[id], *env)
	return nil
}

// NewCollectionID returns a job-wide unique collection id (creator PE in the
// high bits).
func (m *Manager) NewCollectionID() uint32 {
	m.nextColl++
	return uint32(m.Me()+1)<<20 | m.nextColl
}

// Create makes a collection on every PE. Bounded arrays and groups are
// populated at once; sparse arrays wait for Insert and DoneInserting.
//
// The creating PE sets the collection up before Create returns, so the new
// proxy can be used at once (sections, insertions); its local elements are
// constructed then too.
func (m *Manager) Create(cm *CreateMsg) {
	cm.Creator = int32(m.Me())
	for p := 0; p < m.NumPEs(); p++ {
		if p != m.Me() {
			c := *cm
			m.sendSys(p, tCreate, &c)
		}
	}
	c := *cm
	m.onCreate(&c)
}

// MainCollection is the id of the main chare's collection.
const MainCollection uint32 = 1

// Home returns the home PE of an element: it always knows where the element
// is.
func (c *Collection) Home(ix pe.Index, n int) int {
	switch c.Kind {
	case CollGroup:
		return int(ix.C[0])
	case CollMain:
		return 0
	}
	switch c.Map {
	case MapBlock:
		lin, total := linear(ix, c.Bounds)
		return int(lin * int64(n) / total)
	case MapRoundRobin:
		lin, _ := linear(ix, c.Bounds)
		return int(lin % int64(n))
	case MapUser:
		if f, ok := mapFuncs.Get(c.MapFn); ok {
			if p := f(ix, c.Bounds, n); p >= 0 && p < n {
				return p
			}
		}
	}
	return int(ix.Hash() % uint64(n))
}

func boundsTotal(bounds []int) int64 {
	t := int64(1)
	for _, b := range bounds {
		t *= int64(b)
	}
	return t
}

func linear(ix pe.Index, bounds []int) (lin, total int64) {
	total = 1
	for i, b := range bounds {
		lin = lin*int64(b) + int64(ix.C[i])
		total *= int64(b)
	}
	if total == 0 {
		total = 1
	}
	return lin, total
}

// InBounds reports whether ix is a valid index of c.
func (c *Collection) InBounds(ix pe.Index) error {
	switch c.Kind {
	case CollMain:
		if ix.Dims != 1 || ix.C[0] != 0 {
			return fmt.Errorf("main chare has only index [0], not %v", ix)
		}
		return nil
	}
	if c.Bounds == nil {
		if ix.Dims == 0 {
			return fmt.Errorf("index with no coordinates")
		}
		return nil
	}
	if int(ix.Dims) != len(c.Bounds) {
		return fmt.Errorf("index %v has %d dimensions, %s has %d", ix, ix.Dims, c.Name, len(c.Bounds))
	}
	for i, b := range c.Bounds {
		if ix.C[i] < 0 || int(ix.C[i]) >= b {
			return fmt.Errorf("index %v is outside %s's bounds %v (coordinate %d)", ix, c.Name, c.Bounds, i)
		}
	}
	return nil
}

// homeOfSlot is home(c, ix) for an element of a dense array whose slot is
// known: block and round-robin maps need no recomputation.
func (m *Manager) homeOfSlot(c *Collection, ix pe.Index, slot int) int {
	n := m.NumPEs()
	if c.Kind == CollArray {
		switch c.Map {
		case MapBlock:
			return int(int64(slot) * int64(n) / int64(len(c.dense)))
		case MapRoundRobin:
			return slot % n
		}
	}
	return c.Home(ix, n)
}

func (m *Manager) home(c *Collection, ix pe.Index) int {
	return c.Home(ix, m.NumPEs())
}

// denseLimit bounds the per-PE lookup slice of a bounded array (8 bytes an
// element on every PE); larger arrays use the map alone.
const denseLimit = 1 << 16

func (m *Manager) coll(id uint32) *Collection {
	if c := m.last; c != nil && c.ID == id {
		return c
	}
	c := m.colls[id]
	if c != nil {
		m.last = c
	}
	return c
}

// slot is ix's position in the dense table, or -1 when ix is outside the
// bounds.
func (c *Collection) slot(ix pe.Index) int {
	if ix.Dims != c.dims {
		return -1
	}
	if c.dims == 1 {
		if uint32(ix.C[0]) >= c.bounds[0] {
			return -1
		}
		return int(ix.C[0])
	}
	lin := 0
	for i := 0; i < int(c.dims) && i < pe.MaxDims; i++ {
		v := uint32(ix.C[i])
		if v >= c.bounds[i] {
			return -1
		}
		lin = lin*int(c.bounds[i]) + int(v)
	}
	return lin
}

const locUnknown = -2

// eachLoc calls f with every location this PE knows, in index order for
// dense arrays.
func (c *Collection) eachLoc(f func(pe.Index, loc)) {
	if c.dlocs != nil {
		forEachIndex(c.Bounds, func(ix pe.Index) {
			if l, ok := c.getLoc(ix); ok {
				f(ix, l)
			}
		})
		return
	}
	ixs := make([]pe.Index, 0, len(c.locs))
	for ix := range c.locs {
		ixs = append(ixs, ix)
	}
	slices.SortFunc(ixs, pe.Index.Compare)
	for _, ix := range ixs {
		f(ix, c.locs[ix])
	}
}

// getLoc returns the last known location of ix (PE -1: deleted).
func (c *Collection) getLoc(ix pe.Index) (loc, bool) {
	if c.dlocs != nil {
		if i := c.slot(ix); i >= 0 && c.dlocs[i].pe != locUnknown {
			return c.dlocs[i], true
		}
		return loc{}, false
	}
	l, ok := c.locs[ix]
	return l, ok
}

func (c *Collection) setLoc(ix pe.Index, l loc) {
	if c.dlocs != nil {
		if i := c.slot(ix); i >= 0 {
			c.dlocs[i] = l
		}
		return
	}
	c.locs[ix] = l
}

func (c *Collection) get(ix pe.Index) *Element {
	if c.dense != nil {
		if i := c.slot(ix); i >= 0 {
			return c.dense[i]
		}
		return nil
	}
	return c.local[ix]
}

func (c *Collection) put(e *Element) {
	c.local[e.Index] = e
	if c.dense != nil {
		if i := c.slot(e.Index); i >= 0 {
			c.dense[i] = e
		}
	}
	c.dirty = true
}

func (c *Collection) del(ix pe.Index) {
	delete(c.local, ix)
	if c.dense != nil {
		if i := c.slot(ix); i >= 0 {
			c.dense[i] = nil
		}
	}
	c.dirty = true
}

// Locals returns the collection's elements on this PE in index order.
func (c *Collection) Locals() []*Element {
	if c.dirty {
		c.sorted = c.sorted[:0]
		for _, e := range c.local {
			c.sorted = append(c.sorted, e)
		}
		slices.SortFunc(c.sorted, func(a, b *Element) int { return a.Index.Compare(b.Index) })
		c.dirty = false
	}
	return c.sorted
}

// Local returns the element at ix if it is on this PE.
func (c *Collection) Local(ix pe.Index) *Element { return c.get(ix) }

func (m *Manager) onCreate(cm *CreateMsg) {
	c := m.defineCollection(cm)
	if c == nil {
		m.failf("PE %d: collection %s (%d) created twice", m.Me(), cm.Name, cm.Coll)
		return
	}
	me := m.Me()
	switch c.Kind {
	case CollGroup:
		m.newElement(c, pe.Idx(me), cm.Arg)
	case CollMain:
		if me == 0 {
			m.newElement(c, pe.Idx(0), cm.Arg)
		}
	case CollArray:
		if !c.Sparse {
			forEachIndex(c.Bounds, func(ix pe.Index) {
				if m.home(c, ix) == me {
					m.newElement(c, ix, cm.Arg)
				}
			})
		}
	}
	if !c.Sparse {
		c.doneInserting = true
		m.maybeReportCount(c)
	}
	if buf := m.pendingColl[c.ID]; buf != nil {
		delete(m.pendingColl, c.ID)
		for i := range buf {
			m.handle(&buf[i]) // accepted already: not past the FT hook again
			m.Processed--     // counted when it first arrived
		}
	}
}

// defineCollection makes collection cm on this PE, without elements (nil
// if it exists already).
func (m *Manager) defineCollection(cm *CreateMsg) *Collection {
	if m.coll(cm.Coll) != nil {
		return nil
	}
	c := &Collection{
		ID: cm.Coll, Kind: cm.Kind, Type: cm.Type, Name: cm.Name, Bounds: cm.Bounds,
		Map: cm.Map, MapFn: cm.MapFn, Sparse: cm.Sparse, Migratable: cm.Migratable, Creator: cm.Creator,
		local: map[pe.Index]*Element{}, locs: map[pe.Index]loc{}, homeBuf: map[pe.Index][]pe.Envelope{},
	}
	c.tree = PETree(m.NumPEs(), 0, m.opt.Branching)
	c.red = NewReduction(c.tree.Parent(m.Me()), c.tree.Children(m.Me(), nil))
	if num, ok := m.rec.complete[uint64(c.ID)]; ok {
		c.red.doneBelow = uint32(num) // a recovering PE: see completeBefore
	}
	m.colls[c.ID] = c
	if len(c.Bounds) > 0 {
		if total := boundsTotal(c.Bounds); total <= denseLimit && len(c.Bounds) <= pe.MaxDims {
			c.dense = make([]*Element, total)
			c.dlocs = make([]loc, total)
			for i := range c.dlocs {
				c.dlocs[i].pe = locUnknown
			}
			c.dims = uint8(len(c.Bounds))
			for i, b := range c.Bounds {
				c.bounds[i] = uint32(b)
			}
		}
	}
	return c
}

func forEachIndex(bounds []int, f func(pe.Index)) {
	if len(bounds) == 0 {
		return
	}
	for _, b := range bounds {
		if b <= 0 {
			return
		}
	}
	var ix pe.Index
	ix.Dims = uint8(len(bounds))
	for {
		f(ix)
		d := len(bounds) - 1
		for d >= 0 {
			ix.C[d]++
			if int(ix.C[d]) < bounds[d] {
				break
			}
			ix.C[d] = 0
			d--
		}
		if d < 0 {
			return
		}
	}
}

// newElement creates an element homed for reductions on this PE.
func (m *Manager) newElement(c *Collection, ix pe.Index, arg Lazy) *Element {
	e := &Element{Coll: c, Index: ix, RedHome: int32(m.Me()), migrateTo: -1, Bcast: c.bcastDelivered}
	c.put(e)
	c.setLoc(ix, loc{pe: int32(m.Me())})
	m.acts = c.red.AddLocal(0, 1, m.acts[:0])
	m.runActs(c, nil)
	m.host.Construct(m, e, arg)
	m.afterInvoke(e)
	return e
}

// Insert creates element ix of sparse array c on PE onPE (-1: its home).
func (m *Manager) Insert(c *Collection, ix pe.Index, onPE int, arg Lazy) error {
	if c.Kind != CollArray || !c.Sparse {
		return fmt.Errorf("insert %s%v: only sparse arrays take insertions", c.Name, ix)
	}
	if err := c.InBounds(ix); err != nil {
		return fmt.Errorf("insert into %s: %w", c.Name, err)
	}
	if c.doneInserting {
		return fmt.Errorf("insert %s%v after DoneInserting is not supported", c.Name, ix)
	}
	h := m.home(c, ix)
	if onPE < 0 {
		onPE = h
	}
	if onPE >= m.NumPEs() {
		return fmt.Errorf("insert %s%v on PE %d: the run has %d PEs", c.Name, ix, onPE, m.NumPEs())
	}
	if c.insSent == nil {
		c.insSent = make([]uint32, m.NumPEs())
	}
	c.insSent[onPE]++
	// The creation goes out before the location notice so the new element's
	// PE always has it before any message the home forwards to it.
	m.send(onPE, &pe.Envelope{Type: tInsert, Kind: pe.KindSystem, Coll: c.ID, Payload: &InsertMsg{Coll: c.ID, Index: ix, Arg: arg}})
	if _, known := c.getLoc(ix); !known && onPE != m.Me() {
		c.setLoc(ix, loc{pe: int32(onPE)}) // the inserter knows where it put it
	}
	if h != onPE {
		m.sendSys(h, tLoc, &LocMsg{Coll: c.ID, Index: ix, PE: int32(onPE)})
	}
	return nil
}

func (m *Manager) onInsert(env *pe.Envelope) {
	im := env.Payload.(*InsertMsg)
	c := m.collFor(im.Coll, env)
	if c == nil {
		return
	}
	if c.get(im.Index) != nil {
		m.failf("insert %s%v: element already exists on PE %d", c.Name, im.Index, m.Me())
		return
	}
	if c.doneInserting {
		m.failf("insert %s%v reached PE %d after DoneInserting", c.Name, im.Index, m.Me())
		return
	}
	c.insRecv++
	m.newElement(c, im.Index, im.Arg)
	if h := m.home(c, im.Index); h == m.Me() {
		m.flushHomeBuf(c, im.Index)
	}
	m.maybeDoneInserting(c)
}

// DoneInserting ends the insertion phase of a sparse array everywhere;
// broadcasts to it are delivered once it ended on the PE (so they reach
// every element inserted before it).
//
// Insertions travel from the PEs that made them, DoneInserting from the
// one that calls it, so a PE may hear DoneInserting before an insertion
// made for it. Every PE therefore reports how many insertions it sent
// to each PE, and a PE is done once it received as many as were sent to
// it (insertions made before DoneInserting was called are all counted:
// their PEs made them before they answer).
func (m *Manager) DoneInserting(c *Collection) {
	c.doneAsked, c.doneSum = 0, make([]uint32, m.NumPEs())
	for p := 0; p < m.NumPEs(); p++ {
		m.send(p, &pe.Envelope{Type: tDone, Kind: pe.KindSystem, Coll: c.ID, Payload: &DoneInsertingMsg{Coll: c.ID}})
	}
}

func (m *Manager) onDoneInserting(env *pe.Envelope) {
	d := env.Payload.(*DoneInsertingMsg)
	c := m.collFor(d.Coll, env)
	if c == nil {
		return
	}
	switch d.Step {
	case 0:
		sent := c.insSent
		if sent == nil {
			sent = make([]uint32, m.NumPEs())
		}
		m.sendSys(int(env.Src), tDone, &DoneInsertingMsg{Coll: c.ID, Step: 1, Sent: sent})
	case 1:
		if len(d.Sent) != m.NumPEs() || c.doneSum == nil {
			m.failf("DoneInserting %s: a count of %d PEs from PE %d", c.Name, len(d.Sent), env.Src)
			return
		}
		for p, n := range d.Sent {
			c.doneSum[p] += n
		}
		if c.doneAsked++; c.doneAsked == m.NumPEs() {
			for p := 0; p < m.NumPEs(); p++ {
				m.sendSys(p, tDone, &DoneInsertingMsg{Coll: c.ID, Step: 2, Expect: c.doneSum[p]})
			}
		}
	case 2:
		if c.doneInserting {
			return
		}
		c.doneExpect, c.doneKnown = d.Expect, true
		m.maybeDoneInserting(c)
	}
}

// maybeDoneInserting ends this PE's insertion phase once every insertion
// sent to it arrived.
func (m *Manager) maybeDoneInserting(c *Collection) {
	if c.doneInserting || !c.doneKnown || c.insRecv < c.doneExpect {
		return
	}
	c.doneInserting = true
	m.maybeReportCount(c)
	held := c.bcastHeld
	c.bcastHeld = nil
	for i := range held {
		m.onBcastHop(c, &held[i])
	}
}

// maybeReportCount sends this PE's subtree contributor count to its tree
// parent once the local count is final and every child reported, and then
// lets reductions complete.
func (m *Manager) maybeReportCount(c *Collection) {
	if c.countsSent || !c.doneInserting || c.countsIn < len(c.red.Children) {
		return
	}
	c.countsSent = true
	if !c.red.IsRoot() {
		m.sendSys(c.red.Parent, tCount, &CountMsg{Coll: c.ID, Count: c.red.SubtreeCount(0), Final: true})
	}
	m.acts = c.red.Enable(m.acts[:0])
	m.runActs(c, nil)
	m.syncCheckRoot(c)
}

func (m *Manager) onCount(env *pe.Envelope) {
	cm := env.Payload.(*CountMsg)
	if cm.Sec != 0 {
		s := m.secFor(cm.Sec, env)
		if s == nil {
			return
		}
		m.acts = s.red.AddChildCount(int(env.Src), cm.From, cm.Count, m.acts[:0])
		m.runActs(s.coll(m), s)
		if !s.red.IsRoot() {
			m.sendSys(s.red.Parent, tCount, &CountMsg{Coll: cm.Coll, Sec: s.ID, From: cm.From, Count: cm.Count})
		}
		return
	}
	c := m.collFor(cm.Coll, env)
	if c == nil {
		return
	}
	m.acts = c.red.AddChildCount(int(env.Src), cm.From, cm.Count, m.acts[:0])
	m.runActs(c, nil)
	if cm.Final {
		c.countsIn++
		m.maybeReportCount(c)
	} else if !c.red.IsRoot() {
		m.sendSys(c.red.Parent, tCount, &CountMsg{Coll: cm.Coll, From: cm.From, Count: cm.Count})
	}
}
