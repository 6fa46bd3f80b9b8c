// Package partition splits a weighted undirected graph into parts of
// balanced weight while cutting as little edge weight as it can: multilevel
// bisection (coarsen by heavy-edge matching, bisect the coarsest graph by
// growing a region from several seeds, refine with Fiduccia–Mattheyses on
// the way back up) and k-way partitioning by recursive bisection.
//
// It is the one partitioner of charmgo: the communication-aware load
// balancer partitions the chare graph with it, and fault tolerance's team
// partitioning bisects the PE communication matrix with it. It is a pure
// function of its input and seed: no goroutines, clocks or I/O.
package partition

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Edge is an undirected edge of weight W between vertices U and V.
type Edge struct {
	U, V int32
	W    float64
}

// Graph is an undirected graph with vertex and edge weights in compressed
// adjacency form: the neighbours of v are Adj[XAdj[v]:XAdj[v+1]], with
// the edges' weights alongside in EWeight. Every edge is listed at both
// ends; there are no self loops and no repeated neighbours.
type Graph struct {
	VWeight []float64
	XAdj    []int32
	Adj     []int32
	EWeight []float64
}

// N is the number of vertices.
func (g *Graph) N() int { return len(g.VWeight) }

// TotalWeight is the sum of the vertex weights.
func (g *Graph) TotalWeight() float64 {
	t := 0.0
	for _, w := range g.VWeight {
		t += w
	}
	return t
}

// FromEdges builds a graph of n vertices with weights vw (nil: all 1) from
// an edge list: edges given twice or in both directions are merged (their
// weights add up), self loops and edges of weight ≤ 0 are dropped.
func FromEdges(n int, vw []float64, edges []Edge) (*Graph, error) {
	if vw == nil {
		vw = make([]float64, n)
		for i := range vw {
			vw[i] = 1
		}
	}
	if len(vw) != n {
		return nil, fmt.Errorf("partition: %d vertex weights for %d vertices", len(vw), n)
	}
	for i, w := range vw {
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("partition: vertex %d has weight %v", i, w)
		}
	}
	deg := make([]int32, n+1)
	for _, e := range edges {
		if e.U < 0 || e.V < 0 || int(e.U) >= n || int(e.V) >= n {
			return nil, fmt.Errorf("partition: edge %d–%d outside vertices 0..%d", e.U, e.V, n-1)
		}
		if math.IsNaN(e.W) || math.IsInf(e.W, 0) {
			return nil, fmt.Errorf("partition: edge %d–%d has weight %v", e.U, e.V, e.W)
		}
		if e.U == e.V || e.W <= 0 {
			continue
		}
		deg[e.U+1]++
		deg[e.V+1]++
	}
	for i := 1; i <= n; i++ {
		deg[i] += deg[i-1]
	}
	adj := make([]int32, deg[n])
	ew := make([]float64, deg[n])
	fill := slices.Clone(deg[:n])
	for _, e := range edges {
		if e.U == e.V || e.W <= 0 {
			continue
		}
		adj[fill[e.U]], ew[fill[e.U]] = e.V, e.W
		fill[e.U]++
		adj[fill[e.V]], ew[fill[e.V]] = e.U, e.W
		fill[e.V]++
	}
	g := &Graph{VWeight: vw, XAdj: deg, Adj: adj, EWeight: ew}
	g.mergeDuplicates()
	return g, nil
}

// mergeDuplicates sums repeated neighbours of each vertex into one edge.
func (g *Graph) mergeDuplicates() {
	n := g.N()
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = -1
	}
	out := int32(0)
	start := int32(0)
	for v := 0; v < n; v++ {
		first := out
		for i := start; i < g.XAdj[v+1]; i++ {
			u, w := g.Adj[i], g.EWeight[i]
			if p := pos[u]; p >= first {
				g.EWeight[p] += w
				continue
			}
			pos[u] = out
			g.Adj[out], g.EWeight[out] = u, w
			out++
		}
		start = g.XAdj[v+1]
		g.XAdj[v+1] = out
	}
	g.Adj, g.EWeight = g.Adj[:out], g.EWeight[:out]
}

// Cut is the weight of the edges whose ends are in different parts.
func (g *Graph) Cut(part []int32) float64 {
	cut := 0.0
	for v := range g.N() {
		for i := g.XAdj[v]; i < g.XAdj[v+1]; i++ {
			if u := g.Adj[i]; int(u) > v && part[u] != part[v] {
				cut += g.EWeight[i]
			}
		}
	}
	return cut
}

// PartWeights sums the vertex weights of each of k parts.
func (g *Graph) PartWeights(part []int32, k int) []float64 {
	w := make([]float64, k)
	for v, p := range part {
		w[p] += g.VWeight[v]
	}
	return w
}

// subgraph is the graph induced by the vertices keep (in order), with the
// map from its vertices to g's.
func (g *Graph) subgraph(keep []int32) *Graph {
	idx := make([]int32, g.N())
	for i := range idx {
		idx[i] = -1
	}
	for i, v := range keep {
		idx[v] = int32(i)
	}
	s := &Graph{VWeight: make([]float64, len(keep)), XAdj: make([]int32, len(keep)+1)}
	for i, v := range keep {
		s.VWeight[i] = g.VWeight[v]
		for j := g.XAdj[v]; j < g.XAdj[v+1]; j++ {
			if u := idx[g.Adj[j]]; u >= 0 {
				s.Adj = append(s.Adj, u)
				s.EWeight = append(s.EWeight, g.EWeight[j])
			}
		}
		s.XAdj[i+1] = int32(len(s.Adj))
	}
	return s
}

// byWeightDesc orders vertices heaviest first, then by number.
func byWeightDesc(w []float64) func(a, b int32) int {
	return func(a, b int32) int {
		if c := cmp.Compare(w[b], w[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
}
