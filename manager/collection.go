package manager

// Collections: a PE's view of an array, group or main chare — its
// definition, its local elements (a dense table for bounded arrays), each
// element's home PE, and its creation on every PE.

import (
	"fmt"
	"github.com/charmgo/charmgo/ftlayer"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

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
	// Sends counts the messages the element sent while a hook that names
	// messages by their origin was on (see pe.Origin): kept, migrated and
	// checkpointed with the element, so that its k-th message has the same
	// name in a re-execution.
	Sends uint64
	// FTNames: what the hook keeps of the messages delivered to the
	// element since the checkpoint (ftlayer.ElementDedup)
	FTNames ftlayer.ElementNames

	lb        lbElem // load-balancing measurements since the last step
	packed    int    // size of its packed state when it last migrated
	held      []HeldContrib
	migrateTo int
	deleted   bool
}

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
	// DoneInserting's counts of this PE's subtree, by PE they were sent
	// to: its own in, and how many of its children's
	insUp      map[int32]uint32
	insIn      subtreeIn
	bcastHeld  []pe.Envelope // broadcasts that came before this PE's insertions were all in
	countsSent bool

	bcastNext      uint64 // root: last number given out
	bcastDelivered uint64
	history        []bcastRec

	sync     syncState
	lbPeriod lbPeriod // this PE's measuring period for the collection
	lbSteps  int      // PE 0: balancing steps of the collection so far
}

// collFor returns the collection of env, or buffers env until the
// collection's creation reaches this PE.
func (m *Manager) collFor(id uint32, env *pe.Envelope) *Collection {
	if c := m.coll(id); c != nil {
		return c
	}
	m.keepOrigin(env)
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
//
// The other PEs hear of it down the spanning tree over every PE (PE 0's,
// which the creator, if another PE, sends it to first): each passes it
// to its children before it makes its own part, so no PE sends more than
// the tree's branching of them, where the creator used to send one to
// every PE (and its process linked to every other). A message for an
// element of the collection that comes to a PE before the collection
// waits for it (collFor).
func (m *Manager) Create(cm *CreateMsg) {
	cm.Creator, cm.Relay = int32(m.Me()), true
	if m.Me() == 0 {
		m.relayCreate(cm, nil)
	} else {
		c := *cm
		m.sendSys(0, tCreate, &c)
	}
	c := *cm
	m.onCreate(&c)
}

// relayCreate passes a creation on to this PE's children in the tree over
// every PE (via: the header it came with; nil: made here).
func (m *Manager) relayCreate(cm *CreateMsg, via *pe.FTHeader) {
	m.relayDown(tCreate, via, func() any { c := *cm; return &c })
}

// onCreateMsg is a creation that came as a message: passed on down the
// tree if it travels it, and made here unless this PE created it (made
// then).
func (m *Manager) onCreateMsg(cm *CreateMsg, via *pe.FTHeader) {
	if cm.Relay {
		m.relayCreate(cm, via)
		if int(cm.Creator) == m.Me() {
			return
		}
	}
	m.onCreate(cm)
}

// everyPE is the spanning tree over every PE of the job, rooted at PE 0
// (computed, not listed: PETreeIn).
func (m *Manager) everyPE() *Tree {
	if m.allPEs == nil {
		m.allPEs = PETreeIn(m.NumPEs(), 0, m.opt.Branching, m.layout())
	}
	return m.allPEs
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

// denseProcessLimit bounds the slots of one array's lookup tables over
// every PE of a process (24 bytes a slot): an array of an element a PE on
// 16,384 PEs in one process would hold 268 million; past it, each PE
// knows the locations it learns (a map) and computes the rest.
const denseProcessLimit = 1 << 22

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
func (c *Collection) slot(ix *pe.Index) int {
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

func (c *Collection) get(ix pe.Index) *Element { return c.lookup(&ix) }

// lookup is get without copying the index (the per-message path).
func (c *Collection) lookup(ix *pe.Index) *Element {
	if c.dense != nil {
		if i := c.slot(ix); i >= 0 {
			return c.dense[i]
		}
		return nil
	}
	return c.local[*ix]
}

func (c *Collection) put(e *Element) {
	c.local[e.Index] = e
	if c.dense != nil {
		if i := c.slot(&e.Index); i >= 0 {
			c.dense[i] = e
		}
	}
	c.dirty = true
}

func (c *Collection) del(ix pe.Index) {
	delete(c.local, ix)
	if c.dense != nil {
		if i := c.slot(&ix); i >= 0 {
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
		switch {
		case c.Sparse:
		case c.Map == MapBlock:
			// this PE's block, found without visiting the others' (an
			// array of an element a PE, on 16,384 PEs, is 16,384 indices
			// on each of them)
			forBlock(c.Bounds, me, m.NumPEs(), func(ix pe.Index) { m.newElement(c, ix, cm.Arg) })
		default:
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
	c.tree = PETreeIn(m.NumPEs(), 0, m.opt.Branching, m.layout())
	c.red = NewReduction(c.tree.Parent(m.Me()), c.tree.Children(m.Me(), nil))
	if num, ok := m.rec.complete[uint64(c.ID)]; ok {
		c.red.doneBelow = uint32(num) // a recovering PE: see completeBefore
	}
	m.colls[c.ID] = c
	if m.lb.on {
		m.lbStartPeriod(c)
	}
	if len(c.Bounds) > 0 {
		total := boundsTotal(c.Bounds)
		perProcess := int64(m.NumPEs()) / int64(max(m.layout().Procs, 1)) // PEs holding a table each
		if total <= denseLimit && total*perProcess <= denseProcessLimit && len(c.Bounds) <= pe.MaxDims {
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

// forBlock calls f with each index of an array of bounds that the block
// map homes on PE me of n (those whose linear number lin has lin·n/total
// = me), in order.
func forBlock(bounds []int, me, n int, f func(pe.Index)) {
	if len(bounds) == 0 || n <= 0 {
		return
	}
	total := boundsTotal(bounds)
	if total <= 0 {
		return
	}
	lo := (int64(me)*total + int64(n) - 1) / int64(n)
	hi := (int64(me+1)*total + int64(n) - 1) / int64(n)
	for lin := lo; lin < hi && lin < total; lin++ {
		var ix pe.Index
		ix.Dims = uint8(len(bounds))
		rest := lin
		for d := len(bounds) - 1; d >= 0; d-- {
			ix.C[d] = int32(rest % int64(bounds[d]))
			rest /= int64(bounds[d])
		}
		f(ix)
	}
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
	m.PE.Ran()
	m.host.Construct(m, e, arg)
	m.afterInvoke(e)
	return e
}
