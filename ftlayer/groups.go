package ftlayer

import (
	"cmp"
	"slices"
)

// groupState is one PE's state in one group: multicast numbers, the
// reduction it is folding, and (CAMEL) what it knows to be complete.
type groupState struct {
	mcastSent uint64 // as root: multicasts sent
	mcastRecv window // multicasts received, by number
	done      uint64 // CAMEL: reductions known complete at the root
	// incFrom: the root's incarnation multicasts were delivered from,
	// as change points (number, incarnation); numbers are delivered in
	// order, so incarnations only grow.
	incFrom     []incPoint
	reforwarded map[uint64]uint32 // multicasts forwarded again, and from which incarnation
	// hop mode (CAMEL): the reductions whose partial came from each child
	fromKid map[int32]*window
	// hop mode (CAMEL): the results kept for the root, by number. Not in
	// order: a keeper that failed gets the root's results again in its
	// recovery, after any the root sent its old incarnation, which reach
	// the new one first.
	kept window
}

func (st *groupState) redFrom(pe int32) *window {
	w := st.fromKid[pe]
	if w == nil {
		if st.fromKid == nil {
			st.fromKid = map[int32]*window{}
		}
		w = &window{}
		st.fromKid[pe] = w
	}
	return w
}

type incPoint struct {
	num uint64
	inc uint32
}

// deliveredInc is the root incarnation multicast n was delivered from (0
// if unknown: delivered before this PE's restart).
func (st *groupState) deliveredInc(n uint64) uint32 {
	var inc uint32
	for _, p := range st.incFrom {
		if p.num > n {
			break
		}
		inc = p.inc
	}
	return inc
}

func (st *groupState) noteInc(n uint64, inc uint32) {
	if k := len(st.incFrom); k == 0 || st.incFrom[k-1].inc < inc {
		st.incFrom = append(st.incFrom, incPoint{n, inc})
	}
}

// Trees answers where a PE stands in a group's spanning tree: the
// runtime implements it over its own trees, which it builds and rebuilds
// as sections come and go (the tests over fixed ones, groups_test.go).
type Trees interface {
	Root(g uint64) int32
	Parent(g uint64, pe int32) int32
	Children(g uint64, pe int32) []int32
	Has(g uint64, pe int32) bool
}

// colls is one PE's side of every group it belongs to.
type colls struct {
	me      int32
	t       Trees
	state   map[uint64]*groupState
	scratch []int32
}

// group returns this PE's state in g, or an error naming what is wrong
// with g for this PE.
func (c *colls) group(g uint64) (*groupState, error) {
	if st := c.state[g]; st != nil {
		return st, nil
	}
	st := &groupState{}
	c.state[g] = st
	return st, nil
}

// sortedGroups lists the groups this PE has state in, in id order (so
// that what a protocol sends does not depend on map order).
func (c *colls) sortedGroups() []uint64 {
	ids := make([]uint64, 0, len(c.state))
	for id := range c.state {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (c *colls) isRoot(g uint64) bool { return c.t.Root(g) == c.me }

// complete records that reductions up to k are complete at the root:
// nothing of them is needed any more.
func (st *groupState) complete(k uint64) bool {
	if k <= st.done {
		return false
	}
	st.done = k
	return true
}

// GroupCounters is one group's protocol state in a checkpoint.
type GroupCounters struct {
	ID        uint64
	McastSent uint64
	McastRecv uint64   // every multicast up to this received
	McastMore []uint64 // and these beyond it
	Done      uint64
}

func (c *colls) snapshot() []GroupCounters {
	var out []GroupCounters
	for id, st := range c.state {
		gc := GroupCounters{ID: id, McastSent: st.mcastSent, McastRecv: st.mcastRecv.contig, Done: st.done}
		for n := range st.mcastRecv.extra {
			gc.McastMore = append(gc.McastMore, n)
		}
		slices.Sort(gc.McastMore)
		out = append(out, gc)
	}
	slices.SortFunc(out, func(a, b GroupCounters) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (c *colls) restore(gcs []GroupCounters) {
	for _, gc := range gcs {
		st := &groupState{mcastSent: gc.McastSent, done: gc.Done}
		st.mcastRecv.contig = gc.McastRecv
		for _, n := range gc.McastMore {
			st.mcastRecv.add(n)
		}
		c.state[gc.ID] = st
	}
}
