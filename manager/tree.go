package manager

import "sort"

// DefaultBranching is the default arity of spanning trees.
const DefaultBranching = 4

// Tree is a k-ary spanning tree over a list of PEs; Members[0] is the root
// and member i's children are members k·i+1 … k·i+k. It is the
// rootMap/parentMap/childrenMap of the CAMEL paper's Table 2 for one group.
// Over PEs of several processes (NewTreeIn) it is two-level instead.
type Tree struct {
	Members []int
	K       int
	pos     map[int]int
	// parent and children, where the tree is not the heap above
	// (NewTreeIn across processes)
	up   map[int]int
	down map[int][]int
	// all: the tree over every PE of the job rooted at PE 0 (PETreeIn),
	// which every collection spans: its shape follows from the PE count
	// and layout alone, so it is computed, not listed (Members is nil),
	// and costs nothing per PE however many PEs the job has
	all    int
	layout Layout
}

// Layout says which process runs each PE: the job's PEs dealt to its
// processes in blocks, as pe/cluster does (Block: the first n mod procs
// processes one PE more). Procs ≤ 1 is one process.
type Layout struct{ PEs, Procs int }

// ProcessOf is the process that runs pe.
func (l Layout) ProcessOf(pe int) int {
	if l.Procs <= 1 || l.PEs <= 0 {
		return 0
	}
	q, extra := l.PEs/l.Procs, l.PEs%l.Procs
	if pe < extra*(q+1) {
		return pe / (q + 1)
	}
	return extra + (pe-extra*(q+1))/q
}

// NewTreeIn builds the tree of members (root first) for layout l: in
// one process, NewTree's. Across processes each process's members form
// a k-ary tree under the first of them in members' order (the root, in
// the root's process), and those first members a k-ary tree under the
// root: one partial a process goes between processes, one message a
// process comes down, where a tree that ignores the layout crosses
// between processes on most of its edges. Every PE builds the same tree
// from the same members and layout.
func NewTreeIn(members []int, k int, l Layout) *Tree {
	t := NewTree(members, k)
	if l.Procs <= 1 {
		return t
	}
	var order []int // processes, by their first member
	groups := map[int][]int{}
	for _, m := range members {
		r := l.ProcessOf(m)
		if groups[r] == nil {
			order = append(order, r)
		}
		groups[r] = append(groups[r], m)
	}
	if len(order) == 1 {
		return t
	}
	t.up, t.down = make(map[int]int, len(members)), make(map[int][]int, len(members))
	heap := func(list []int) {
		for i := 1; i < len(list); i++ {
			p := list[(i-1)/t.K]
			t.up[list[i]] = p
			t.down[p] = append(t.down[p], list[i])
		}
	}
	leaders := make([]int, len(order))
	for i, r := range order {
		leaders[i] = groups[r][0]
	}
	heap(leaders) // first: a leader sends to other processes before its own
	for _, r := range order {
		heap(groups[r])
	}
	t.up[members[0]] = -1
	return t
}

// PETreeIn is PETree for layout l. Rooted at PE 0 it is computed as it is
// walked, not listed: the same tree as NewTreeIn's over PEs 0..n-1.
func PETreeIn(n, root, k int, l Layout) *Tree {
	if root != 0 || n <= 0 || l.Procs > 1 && (l.PEs != n || l.Procs > n) {
		return NewTreeIn(PETree(n, root, k).Members, k, l)
	}
	if k < 2 {
		k = DefaultBranching
	}
	return &Tree{K: k, all: n, layout: l}
}

// block gives the PEs process r runs under l (as pe/cluster's Block).
func (l Layout) block(r int) (first, count int) {
	if l.Procs <= 1 {
		return 0, l.PEs
	}
	q, extra := l.PEs/l.Procs, l.PEs%l.Procs
	first = r*q + min(r, extra)
	count = q
	if r < extra {
		count++
	}
	return first, count
}

// split reports whether the computed tree (all) is two-level: its PEs
// are in several processes.
func (t *Tree) split() bool { return t.layout.Procs > 1 }

// allParent is Parent for the computed tree, for a PE in it.
func (t *Tree) allParent(pe int) int {
	if !t.split() {
		if pe == 0 {
			return -1
		}
		return (pe - 1) / t.K
	}
	r := t.layout.ProcessOf(pe)
	first, _ := t.layout.block(r)
	if pe != first { // under its process's first PE
		return first + (pe-first-1)/t.K
	}
	if r == 0 {
		return -1
	}
	lead, _ := t.layout.block((r - 1) / t.K) // the first PE of another process
	return lead
}

// allChildren is Children for the computed tree, for a PE in it: a
// process's first PE has the first PEs of other processes first, then
// its own process's.
func (t *Tree) allChildren(pe int, dst []int) []int {
	if !t.split() {
		for c := t.K*pe + 1; c <= t.K*pe+t.K && c < t.all; c++ {
			dst = append(dst, c)
		}
		return dst
	}
	r := t.layout.ProcessOf(pe)
	first, count := t.layout.block(r)
	if pe == first {
		for q := t.K*r + 1; q <= t.K*r+t.K && q < t.layout.Procs; q++ {
			lead, _ := t.layout.block(q)
			dst = append(dst, lead)
		}
	}
	i := pe - first
	for c := t.K*i + 1; c <= t.K*i+t.K && c < count; c++ {
		dst = append(dst, first+c)
	}
	return dst
}

// List gives the tree's PEs, root first (a new slice for the computed
// tree over every PE: 0 … n-1).
func (t *Tree) List() []int {
	if t.all > 0 {
		out := make([]int, t.all)
		for i := range out {
			out[i] = i
		}
		return out
	}
	return t.Members
}

// Size is the number of PEs in the tree.
func (t *Tree) Size() int {
	if t.all > 0 {
		return t.all
	}
	return len(t.Members)
}

// SectionTreeIn is SectionTree for layout l.
func SectionTreeIn(root int, pes []int, k int, l Layout) *Tree {
	return NewTreeIn(SectionTree(root, pes, k).Members, k, l)
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
func (t *Tree) Root() int {
	if t.all > 0 {
		return 0
	}
	return t.Members[0]
}

// Contains reports whether pe is in the tree.
func (t *Tree) Contains(pe int) bool {
	if t.all > 0 {
		return pe >= 0 && pe < t.all
	}
	_, ok := t.pos[pe]
	return ok
}

// Parent returns pe's parent, or -1 for the root or a PE outside the tree.
func (t *Tree) Parent(pe int) int {
	if t.all > 0 {
		if !t.Contains(pe) {
			return -1
		}
		return t.allParent(pe)
	}
	i, ok := t.pos[pe]
	if !ok || i == 0 {
		return -1
	}
	if t.up != nil {
		return t.up[pe]
	}
	return t.Members[(i-1)/t.K]
}

// Children appends pe's children to dst.
func (t *Tree) Children(pe int, dst []int) []int {
	if t.all > 0 {
		if !t.Contains(pe) {
			return dst
		}
		return t.allChildren(pe, dst)
	}
	i, ok := t.pos[pe]
	if !ok {
		return dst
	}
	if t.down != nil {
		return append(dst, t.down[pe]...)
	}
	for c := t.K*i + 1; c <= t.K*i+t.K && c < len(t.Members); c++ {
		dst = append(dst, t.Members[c])
	}
	return dst
}

// Subtree appends every member of pe's subtree (pe included) to dst.
func (t *Tree) Subtree(pe int, dst []int) []int {
	if !t.Contains(pe) {
		return dst
	}
	stack := []int{pe}
	var kids []int
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		dst = append(dst, p)
		kids = t.Children(p, kids[:0])
		stack = append(stack, kids...)
	}
	return dst
}

// subtreeIn counts, for a gather up the tree over every PE, what a PE
// waits for before its subtree's part goes to its parent: its own part
// and each child's subtree's.
type subtreeIn struct {
	own  bool
	kids int
}

// add counts this PE's own part (own) or a child's, and reports whether
// the subtree's part is complete.
func (g *subtreeIn) add(m *Manager, own bool) bool {
	if own {
		g.own = true
	} else {
		g.kids++
	}
	return g.own && g.kids >= len(m.everyPE().Children(m.Me(), m.kids[:0]))
}
