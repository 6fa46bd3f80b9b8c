package ftlayer

import (
	"fmt"
	"slices"
)

// Groups is a fixed set of PE groups and their k-ary spanning trees,
// the Trees of the hop-mode tests.
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
