package mcml

import (
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/ftlayer/teams"
)

// Dendrogram is a hierarchical clustering of the PEs: a binary tree whose
// leaves are the PEs and whose every node is the cluster of the leaves
// under it.
type Dendrogram struct {
	n     int
	nodes []dnode // leaves 0..n-1 are the PEs; the last node is the root
}

type dnode struct {
	members     []int // in order
	left, right int   // children (-1: a leaf)
	parent      int
}

// N is the number of PEs.
func (d *Dendrogram) N() int { return d.n }

// IndexDendrogram clusters n PEs by their numbers, halving: with 8, the
// clusters are [0-7], [0-3], [4-7], [0-1], … (the paper's example, and
// what Cluster uses before any communication was measured).
func IndexDendrogram(n int) *Dendrogram {
	d := &Dendrogram{n: n}
	for p := range n {
		d.nodes = append(d.nodes, dnode{members: []int{p}, left: -1, right: -1, parent: -1})
	}
	var build func(lo, hi int) int
	build = func(lo, hi int) int {
		if hi-lo == 1 {
			return lo
		}
		mid := lo + (hi-lo+1)/2
		return d.join(build(lo, mid), build(mid, hi))
	}
	if n > 0 {
		build(0, n)
	}
	return d
}

// join adds the cluster of nodes a and b and returns it.
func (d *Dendrogram) join(a, b int) int {
	m := append(slices.Clone(d.nodes[a].members), d.nodes[b].members...)
	slices.Sort(m)
	d.nodes = append(d.nodes, dnode{members: m, left: a, right: b, parent: -1})
	id := len(d.nodes) - 1
	d.nodes[a].parent, d.nodes[b].parent = id, id
	return id
}

// BuildDendrogram clusters the PEs of m bottom up (agglomerative, average
// linkage): it joins, again and again, the two clusters with the most
// traffic between them per pair of their PEs (both directions), until one
// is left. Clusters with no traffic between them are joined last, the two
// smallest (then the lowest PEs) first, so that a graph with no traffic
// at all gives a balanced tree. O(n³) time, n the PEs: a few hundred
// milliseconds at a thousand PEs, once a checkpoint.
func BuildDendrogram(m *teams.Matrix) (*Dendrogram, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	n := m.N
	d := &Dendrogram{n: n}
	for p := range n {
		d.nodes = append(d.nodes, dnode{members: []int{p}, left: -1, right: -1, parent: -1})
	}
	// w[x][y]: traffic between the clusters in slots x and y (both
	// ways); a join's cluster takes its first part's slot
	w := make([][]float64, n)
	for u := range n {
		w[u] = make([]float64, n)
		for v := range n {
			if u != v {
				w[u][v] = m.At(u, v) + m.At(v, u)
			}
		}
	}
	node := make([]int, n) // the cluster in each slot
	slots := make([]int, n)
	for i := range n {
		node[i], slots[i] = i, i
	}
	size := func(x int) int { return len(d.nodes[node[x]].members) }
	for len(slots) > 1 {
		bx, by := -1, -1
		best := -1.0
		for i := 0; i < len(slots); i++ {
			for j := i + 1; j < len(slots); j++ {
				x, y := slots[i], slots[j]
				link := w[x][y] / float64(size(x)*size(y))
				if link > best || link == best && best == 0 && smallerPair(d, node[x], node[y], node[bx], node[by]) {
					best, bx, by = link, x, y
				}
			}
		}
		node[bx] = d.join(node[bx], node[by])
		for _, o := range slots {
			if o != bx && o != by {
				w[bx][o] += w[by][o]
				w[o][bx] = w[bx][o]
			}
		}
		slots = slices.DeleteFunc(slots, func(x int) bool { return x == by })
	}
	if len(d.nodes) != max(2*n-1, 0) {
		return nil, fmt.Errorf("mcml: dendrogram of %d PEs has %d nodes", n, len(d.nodes))
	}
	return d, nil
}

// smallerPair reports whether clusters a, b make a smaller pair than c,
// d: fewer PEs together, then the lower first PE.
func smallerPair(dg *Dendrogram, a, b, c, d int) bool {
	sa, sc := len(dg.nodes[a].members)+len(dg.nodes[b].members), len(dg.nodes[c].members)+len(dg.nodes[d].members)
	if sa != sc {
		return sa < sc
	}
	return min(dg.nodes[a].members[0], dg.nodes[b].members[0]) < min(dg.nodes[c].members[0], dg.nodes[d].members[0])
}

// Levels is, for PE me, the PEs of each cluster that holds it, from the
// smallest up, less those of the cluster below (and less me): with the
// index dendrogram of 8 PEs, PE 5's are [4], [6 7], [0 1 2 3] — the
// clusters [4-5], [4-7], [0-7] of the paper's example.
func (d *Dendrogram) Levels(me int) [][]int {
	if me < 0 || me >= d.n {
		return nil
	}
	var out [][]int
	below, at := d.nodes[me].members, d.nodes[me].parent
	for at >= 0 {
		var level []int
		for _, p := range d.nodes[at].members {
			if !slices.Contains(below, p) {
				level = append(level, p)
			}
		}
		out = append(out, level)
		below, at = d.nodes[at].members, d.nodes[at].parent
	}
	return out
}

// Clusters is every cluster of the dendrogram with more than one PE, from
// the root down (breadth first): for reports and tests.
func (d *Dendrogram) Clusters() [][]int {
	if len(d.nodes) == 0 {
		return nil
	}
	var out [][]int
	queue := []int{len(d.nodes) - 1}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		nd := d.nodes[x]
		if nd.left < 0 {
			continue
		}
		out = append(out, nd.members)
		queue = append(queue, nd.left, nd.right)
	}
	return out
}

// Joins is the dendrogram as the joins that built it, in order: the two
// nodes each put together (the PEs are nodes 0..n-1, the k-th join's
// cluster node n+k). It is what travels to the PEs (FromJoins).
func (d *Dendrogram) Joins() [][2]int32 {
	out := make([][2]int32, 0, max(len(d.nodes)-d.n, 0))
	for _, nd := range d.nodes[d.n:] {
		out = append(out, [2]int32{int32(nd.left), int32(nd.right)})
	}
	return out
}

// FromJoins is the dendrogram of n PEs that joins built (Joins). Joins
// that do not make one (a node joined twice or before it exists, too few
// or too many) are refused, naming the first wrong one.
func FromJoins(n int, joins [][2]int32) (*Dendrogram, error) {
	if n < 1 {
		return nil, fmt.Errorf("mcml: a dendrogram of %d PEs", n)
	}
	if len(joins) != n-1 {
		return nil, fmt.Errorf("mcml: %d joins for %d PEs (want %d)", len(joins), n, n-1)
	}
	d := &Dendrogram{n: n}
	for p := range n {
		d.nodes = append(d.nodes, dnode{members: []int{p}, left: -1, right: -1, parent: -1})
	}
	for k, j := range joins {
		a, b := int(j[0]), int(j[1])
		for _, x := range []int{a, b} {
			if x < 0 || x >= len(d.nodes) {
				return nil, fmt.Errorf("mcml: join %d names node %d, of %d so far", k, x, len(d.nodes))
			}
			if d.nodes[x].parent >= 0 {
				return nil, fmt.Errorf("mcml: join %d names node %d, joined before", k, x)
			}
		}
		if a == b {
			return nil, fmt.Errorf("mcml: join %d joins node %d to itself", k, a)
		}
		d.join(a, b)
	}
	return d, nil
}
