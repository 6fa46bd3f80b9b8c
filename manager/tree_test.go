package manager

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/pe"
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
					require.Len(t, seen, tr.Size(), name)
					crossing, perParent := 0, map[int]map[bool]int{}
					for _, p := range tr.List() {
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
					for _, p := range tr.List() {
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

// The tree over every PE that collections span is computed, not listed,
// and is the tree NewTreeIn lists, edge for edge and in the same order of
// children, for every PE count, process count and branching.
func TestTheComputedPETreeIsTheListedOne(t *testing.T) {
	for _, k := range []int{2, 3, 4, 8} {
		for n := 1; n <= 40; n++ {
			for procs := 1; procs <= n; procs++ {
				l := Layout{PEs: n, Procs: procs}
				listed := NewTreeIn(PETree(n, 0, k).Members, k, l)
				computed := PETreeIn(n, 0, k, l)
				require.Nil(t, computed.Members, "n %d procs %d: computed", n, procs)
				require.Equal(t, n, computed.Size())
				require.Equal(t, 0, computed.Root())
				for p := -1; p <= n; p++ {
					require.Equal(t, listed.Contains(p), computed.Contains(p), "n %d procs %d k %d PE %d", n, procs, k, p)
					require.Equal(t, listed.Parent(p), computed.Parent(p), "n %d procs %d k %d: parent of %d", n, procs, k, p)
					require.Equal(t, listed.Children(p, nil), computed.Children(p, nil), "n %d procs %d k %d: children of %d", n, procs, k, p)
				}
				require.ElementsMatch(t, listed.Subtree(0, nil), computed.Subtree(0, nil))
			}
		}
	}
}

// It costs nothing per PE: a job of 16,384 PEs has it in a few words.
func TestTheComputedPETreeOfAHugeJob(t *testing.T) {
	tr := PETreeIn(16384, 0, 4, Layout{PEs: 16384, Procs: 256})
	require.Equal(t, []int{64, 128, 192, 256, 1, 2, 3, 4}, tr.Children(0, nil))
	require.Equal(t, 0, tr.Parent(64))
	require.Equal(t, 64, tr.Parent(65))
	require.Len(t, tr.Subtree(0, nil), 16384)
}

// The block map's PE finds its own elements by arithmetic: exactly those
// Home gives it, in order, for every array shape and PE count.
func TestForBlockIsTheBlockMapsShare(t *testing.T) {
	for _, bounds := range [][]int{{1}, {7}, {16}, {3, 5}, {2, 3, 4}, {100}, {5, 1, 9}} {
		for n := 1; n <= 20; n++ {
			c := &Collection{Kind: CollArray, Map: MapBlock, Bounds: bounds}
			for me := 0; me < n; me++ {
				var want, got []pe.Index
				forEachIndex(bounds, func(ix pe.Index) {
					if c.Home(ix, n) == me {
						want = append(want, ix)
					}
				})
				forBlock(bounds, me, n, func(ix pe.Index) { got = append(got, ix) })
				require.Equal(t, want, got, "bounds %v, PE %d of %d", bounds, me, n)
			}
		}
	}
}
