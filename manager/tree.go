package manager

import "sort"

// DefaultBranching is the default arity of spanning trees.
const DefaultBranching = 4

// Tree is a k-ary spanning tree over a list of PEs; Members[0] is the root
// and member i's children are members k·i+1 … k·i+k. It is the
// rootMap/parentMap/childrenMap of the CAMEL paper's Table 2 for one group.
type Tree struct {
	Members []int
	K       int
	pos     map[int]int
}

// NewTree builds the tree of members (root first). k < 2 means
// DefaultBranching.
func NewTree(members []int, k int) *Tree {
	if k < 2 {
		k = DefaultBranching
	}
	t := &Tree{Members: members, K: k, pos: make(map[int]int, len(members))}
	for i, m := range members {
		t.pos[m] = i
	}
	return t
}

// PETree is the tree over PEs 0..n-1 rooted at root (the PE list rotated so
// root comes first).
func PETree(n, root, k int) *Tree {
	m := make([]int, n)
	for i := range m {
		m[i] = (root + i) % n
	}
	return NewTree(m, k)
}

// SectionTree is the tree over the distinct PEs of a section, rooted at
// root; the other PEs follow in ascending order so every process builds the
// same tree.
func SectionTree(root int, pes []int, k int) *Tree {
	seen := map[int]bool{root: true}
	rest := make([]int, 0, len(pes))
	for _, p := range pes {
		if !seen[p] {
			seen[p] = true
			rest = append(rest, p)
		}
	}
	sort.Ints(rest)
	return NewTree(append([]int{root}, rest...), k)
}

// Root is the tree's root PE.
func (t *Tree) Root() int { return t.Members[0] }

// Contains reports whether pe is in the tree.
func (t *Tree) Contains(pe int) bool { _, ok := t.pos[pe]; return ok }

// Parent returns pe's parent, or -1 for the root or a PE outside the tree.
func (t *Tree) Parent(pe int) int {
	i, ok := t.pos[pe]
	if !ok || i == 0 {
		return -1
	}
	return t.Members[(i-1)/t.K]
}

// Children appends pe's children to dst.
func (t *Tree) Children(pe int, dst []int) []int {
	i, ok := t.pos[pe]
	if !ok {
		return dst
	}
	for c := t.K*i + 1; c <= t.K*i+t.K && c < len(t.Members); c++ {
		dst = append(dst, t.Members[c])
	}
	return dst
}

// Subtree appends every member of pe's subtree (pe included) to dst.
func (t *Tree) Subtree(pe int, dst []int) []int {
	i, ok := t.pos[pe]
	if !ok {
		return dst
	}
	stack := []int{i}
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		dst = append(dst, t.Members[j])
		for c := t.K*j + 1; c <= t.K*j+t.K && c < len(t.Members); c++ {
			stack = append(stack, c)
		}
	}
	return dst
}
