package manager

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/pe/cluster"
)

// Layout places PEs in processes as pe/cluster's Block does.
func TestLayoutIsTheClustersBlocks(t *testing.T) {
	for n := 1; n <= 24; n++ {
		for procs := 1; procs <= n; procs++ {
			l := Layout{PEs: n, Procs: procs}
			for r := 0; r < procs; r++ {
				first, count := cluster.Block(n, procs, r)
				for p := first; p < first+count; p++ {
					require.Equal(t, r, l.ProcessOf(p), "PE %d of %d in %d processes", p, n, procs)
				}
			}
		}
	}
}

// Across processes a tree keeps each process's PEs together: it spans
// every member once, parents and children agree, and exactly one edge
// enters each process but the root's (one partial a process goes up, one
// message a process comes down); within a process the members form a
// tree of the arity asked for, and so do the processes' first members. In
// one process it is NewTree's, edge for edge.
func TestTreesKeepEachProcesssPEsTogether(t *testing.T) {
	type layout struct{ pes, procs int }
	for _, l := range []layout{{4, 2}, {8, 2}, {8, 4}, {7, 3}, {16, 4}, {64, 8}, {5, 5}, {6, 1}, {3, 2}} {
		for _, k := range []int{2, 3, 4} {
			lay := Layout{PEs: l.pes, Procs: l.procs}
			for _, root := range []int{0, l.pes - 1, l.pes / 2} {
				check := func(name string, tr *Tree) {
					t.Helper()
					seen := map[int]int{}
					for _, p := range tr.Subtree(tr.Root(), nil) {
						seen[p]++
					}
					require.Len(t, seen, len(tr.Members), name)
					crossing, perParent := 0, map[int]map[bool]int{}
					for _, p := range tr.Members {
						require.Equal(t, 1, seen[p], "%s: PE %d reached once", name, p)
						kids := tr.Children(p, nil)
						perParent[p] = map[bool]int{}
						for _, c := range kids {
							require.Equal(t, p, tr.Parent(c), "%s: %d's child %d", name, p, c)
							cross := lay.ProcessOf(c) != lay.ProcessOf(p)
							perParent[p][cross]++
							if cross {
								crossing++
							}
						}
						require.LessOrEqual(t, perParent[p][false], k, "%s: PE %d's children in its process", name, p)
						require.LessOrEqual(t, perParent[p][true], k, "%s: PE %d's children in other processes", name, p)
					}
					require.Equal(t, -1, tr.Parent(tr.Root()), name)
					procs := map[int]bool{}
					for _, p := range tr.Members {
						procs[lay.ProcessOf(p)] = true
					}
					require.Equal(t, len(procs)-1, crossing, "%s: edges between processes", name)
				}
				name := fmt.Sprintf("%d PEs in %d processes, k=%d, root %d", l.pes, l.procs, k, root)
				check(name, PETreeIn(l.pes, root, k, lay))
				var sec []int
				for p := l.pes - 1; p >= 0; p -= 2 {
					sec = append(sec, p)
				}
				if len(sec) > 0 {
					check(name+", a section", SectionTreeIn(sec[len(sec)-1], sec, k, lay))
				}
				if l.procs == 1 {
					plain := PETree(l.pes, root, k)
					for _, p := range plain.Members {
						got := PETreeIn(l.pes, root, k, lay)
						require.Equal(t, plain.Parent(p), got.Parent(p))
						require.Equal(t, plain.Children(p, nil), got.Children(p, nil))
					}
				}
			}
		}
	}
	// 4 PEs in 2 processes, the default arity: the tree that ignored the
	// layout sent two of its three edges between the processes
	tr := PETreeIn(4, 0, DefaultBranching, Layout{PEs: 4, Procs: 2})
	require.Equal(t, []int{2, 1}, tr.Children(0, nil))
	require.Equal(t, []int{3}, tr.Children(2, nil))
	require.Equal(t, []int{1, 2, 3}, PETree(4, 0, DefaultBranching).Children(0, nil))
}
