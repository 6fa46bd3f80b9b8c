package ftlayer

import (
	"cmp"
	"fmt"
	"github.com/charmgo/charmgo/pe"
	"slices"
)

// Groups holds the PE groups collectives run over and their spanning
// trees (the rootMap, parentMap and childrenMap of the CAMEL paper's
// Table 2). It is built before the run and then only read.
type Groups struct {
	trees map[uint64]*tree
}

type tree struct {
	members  []int32
	parent   map[int32]int32
	children map[int32][]int32
}

// NewGroups makes an empty set of groups.
func NewGroups() *Groups { return &Groups{trees: map[uint64]*tree{}} }

// Add makes group id over members, rooted at members[0], as a k-ary tree
// in member order (the children of the i-th member are members k·i+1 …
// k·i+k).
func (gs *Groups) Add(id uint64, members []int32, k int) error {
	switch {
	case id <= 0:
		return fmt.Errorf("group id %d: ids start at 1", id)
	case gs.trees[id] != nil:
		return fmt.Errorf("group %d is defined twice", id)
	case len(members) == 0:
		return fmt.Errorf("group %d has no members", id)
	case k < 1:
		return fmt.Errorf("group %d: branching factor %d, want at least 1", id, k)
	}
	t := &tree{members: slices.Clone(members), parent: map[int32]int32{}, children: map[int32][]int32{}}
	for i, m := range members {
		if m < 0 {
			return fmt.Errorf("group %d: member %d is not a PE", id, m)
		}
		if _, dup := t.parent[m]; dup {
			return fmt.Errorf("group %d lists PE %d twice", id, m)
		}
		t.parent[m] = -1
		if i > 0 {
			p := members[(i-1)/k]
			t.parent[m] = p
			t.children[p] = append(t.children[p], m)
		}
	}
	gs.trees[id] = t
	return nil
}

func (gs *Groups) get(g uint64) *tree {
	if gs == nil {
		return nil
	}
	return gs.trees[g]
}

// Root is group g's root (-1 if there is no such group).
func (gs *Groups) Root(g uint64) int32 {
	if t := gs.get(g); t != nil {
		return t.members[0]
	}
	return -1
}

// Has reports whether pe is a member of group g.
func (gs *Groups) Has(g uint64, pe int32) bool {
	t := gs.get(g)
	if t == nil {
		return false
	}
	_, ok := t.parent[pe]
	return ok
}

// Parent is pe's parent in group g's tree (-1 at the root).
func (gs *Groups) Parent(g uint64, pe int32) int32 { return gs.get(g).parent[pe] }

// Children are pe's children in group g's tree.
func (gs *Groups) Children(g uint64, pe int32) []int32 { return gs.get(g).children[pe] }

// Members are group g's members, root first.
func (gs *Groups) Members(g uint64) []int32 {
	if t := gs.get(g); t != nil {
		return t.members
	}
	return nil
}

// IDs lists the groups in increasing order.
func (gs *Groups) IDs() []uint64 {
	if gs == nil {
		return nil
	}
	ids := make([]uint64, 0, len(gs.trees))
	for id := range gs.trees {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// groupState is one PE's state in one group: multicast numbers, the
// reduction it is folding, and (CAMEL) what it knows to be complete.
type groupState struct {
	mcastSent   uint64 // as root: multicasts sent
	mcastRecv   window // multicasts received, by number
	contributed uint64 // own contributions made
	forwarded   uint64 // reductions folded and passed up (delivered, at the root)
	done        uint64 // CAMEL: reductions known complete at the root
	parts       map[uint64]*partial
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

// partial is a reduction being folded on one PE.
type partial struct {
	own  bool
	from []int32 // children whose contributions are in
	val  []byte
	has  bool
}

// Trees answers where a PE stands in a group's spanning tree. Groups
// implements it for the simulator; the runtime implements it over its
// own trees, which it builds and rebuilds as sections come and go.
type Trees interface {
	Root(g uint64) int32
	Parent(g uint64, pe int32) int32
	Children(g uint64, pe int32) []int32
	Has(g uint64, pe int32) bool
}

// colls is one PE's side of every group it belongs to.
type colls struct {
	me      int32
	c       Collectives
	t       Trees
	ext     bool // the runtime runs the trees (hop mode): no validation, no folding here
	state   map[uint64]*groupState
	scratch []int32
}

func newColls(me int32, c Collectives) colls {
	return colls{me: me, c: c, t: c.Groups, state: map[uint64]*groupState{}}
}

// group returns this PE's state in g, or an error naming what is wrong
// with g for this PE.
func (c *colls) group(g uint64) (*groupState, error) {
	if st := c.state[g]; st != nil {
		return st, nil
	}
	if c.ext {
		st := &groupState{}
		c.state[g] = st
		return st, nil
	}
	if !c.c.Groups.Has(g, c.me) {
		if c.c.Groups.Root(g) < 0 {
			return nil, fmt.Errorf("PE %d: no group %d", c.me, g)
		}
		return nil, fmt.Errorf("PE %d is not a member of group %d", c.me, g)
	}
	if c.c.Combine == nil {
		return nil, fmt.Errorf("PE %d: group %d used without a Combine function", c.me, g)
	}
	st := &groupState{parts: map[uint64]*partial{}}
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

// rootOf returns g's state for a multicast from this PE, which must be
// g's root.
func (c *colls) rootOf(g uint64) (*groupState, error) {
	st, err := c.group(g)
	if err != nil {
		return nil, err
	}
	if !c.isRoot(g) {
		return nil, fmt.Errorf("PE %d multicasts to group %d, whose root is PE %d", c.me, g, c.c.Groups.Root(g))
	}
	return st, nil
}

// result is the delivery of reduction k's folded value at g's root.
func (c *colls) result(g uint64, k uint64, val []byte) Action {
	return Action{Kind: ActDeliver, Msg: &Message{Kind: KindReduction, Payload: val, FTHeader: pe.FTHeader{Group: g, Sender: c.me, Recver: c.me, Num: k}}}
}

func (c *colls) isRoot(g uint64) bool { return c.t.Root(g) == c.me }

// add folds a contribution (from a child, or from < 0 for this PE's own)
// into reduction k. It reports false if that contribution is already in.
func (c *colls) add(g uint64, st *groupState, k uint64, from int32, val []byte) bool {
	p := st.parts[k]
	if p == nil {
		p = &partial{}
		st.parts[k] = p
	}
	if from < 0 {
		if p.own {
			return false
		}
		p.own = true
	} else {
		if slices.Contains(p.from, from) {
			return false
		}
		p.from = append(p.from, from)
	}
	if !p.has {
		p.val, p.has = val, true
	} else {
		p.val = c.c.Combine(g, p.val, val)
	}
	return true
}

// has reports whether reduction k already holds from's contribution
// (from < 0: this PE's own), or was passed on.
func (st *groupState) has(k uint64, from int32) bool {
	if k <= st.forwarded || k <= st.done {
		return true
	}
	p := st.parts[k]
	if p == nil {
		return false
	}
	if from < 0 {
		return p.own
	}
	return slices.Contains(p.from, from)
}

// ready pops the next reduction whose contributions are all in.
func (c *colls) ready(g uint64, st *groupState) (uint64, []byte, bool) {
	k := st.forwarded + 1
	p := st.parts[k]
	if p == nil || !p.own || len(p.from) < len(c.c.Groups.Children(g, c.me)) {
		return 0, nil, false
	}
	delete(st.parts, k)
	st.forwarded = k
	return k, p.val, true
}

// complete records that reductions up to k are complete at the root:
// nothing of them is needed any more.
func (st *groupState) complete(k uint64) bool {
	if k <= st.done {
		return false
	}
	st.done = k
	st.forwarded = max(st.forwarded, k)
	for n := range st.parts {
		if n <= k {
			delete(st.parts, n)
		}
	}
	return true
}

// GroupCounters is one group's protocol state in a checkpoint.
type GroupCounters struct {
	ID                           uint64
	McastSent                    uint64
	McastRecv                    uint64   // every multicast up to this received
	McastMore                    []uint64 // and these beyond it
	Contributed, Forwarded, Done uint64
	Parts                        []PartCounters
}

// PartCounters is a reduction being folded when a checkpoint was taken.
type PartCounters struct {
	Num  uint64
	Own  bool
	From []int32
	Val  []byte
	Has  bool
}

func (c *colls) snapshot() []GroupCounters {
	var out []GroupCounters
	for id, st := range c.state {
		gc := GroupCounters{ID: id, McastSent: st.mcastSent, McastRecv: st.mcastRecv.contig,
			Contributed: st.contributed, Forwarded: st.forwarded, Done: st.done}
		for n := range st.mcastRecv.extra {
			gc.McastMore = append(gc.McastMore, n)
		}
		slices.Sort(gc.McastMore)
		for n, p := range st.parts {
			gc.Parts = append(gc.Parts, PartCounters{Num: n, Own: p.own, From: slices.Clone(p.from), Val: p.val, Has: p.has})
		}
		slices.SortFunc(gc.Parts, func(a, b PartCounters) int { return int(a.Num) - int(b.Num) })
		out = append(out, gc)
	}
	slices.SortFunc(out, func(a, b GroupCounters) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (c *colls) restore(gcs []GroupCounters) {
	for _, gc := range gcs {
		st := &groupState{mcastSent: gc.McastSent, contributed: gc.Contributed, forwarded: gc.Forwarded, done: gc.Done,
			parts: map[uint64]*partial{}}
		st.mcastRecv.contig = gc.McastRecv
		for _, n := range gc.McastMore {
			st.mcastRecv.add(n)
		}
		for _, p := range gc.Parts {
			st.parts[p.Num] = &partial{own: p.Own, from: slices.Clone(p.From), val: p.Val, has: p.Has}
		}
		c.state[gc.ID] = st
	}
}
