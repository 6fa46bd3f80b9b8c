package manager

import (
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

// A checkpoint's snapshots come from disk: before anything is rebuilt from
// them, every count, index and PE number they hold is checked (one PE's in
// checkSnapshot, the whole checkpoint's agreement in CheckCheckpoint), so
// restoring and redistributing can trust them: no index outside its
// array, no PE outside the run, no tree of another shape than the one the
// counts were made for.

// maxBranching is the widest spanning tree a run may use (--branching).
const maxBranching = 64

// maxElements bounds a bounded array's element count.
const maxElements = 1 << 31

// checkSnapshot checks what one PE's snapshot holds, on its own.
func checkSnapshot(s *PESnapshot) error {
	switch {
	case s.Version != SnapshotVersion:
		return fmt.Errorf("checkpoint version %d, this build reads %d", s.Version, SnapshotVersion)
	case s.NumPEs < 1 || s.NumPEs > MaxCheckpointPEs:
		return fmt.Errorf("checkpoint of %d PEs", s.NumPEs)
	case s.PE < 0 || s.PE >= s.NumPEs:
		return fmt.Errorf("checkpoint of PE %d in a run of %d PEs", s.PE, s.NumPEs)
	case s.Branching < 2 || s.Branching > maxBranching:
		return fmt.Errorf("spanning trees of arity %d (2 to %d)", s.Branching, maxBranching)
	case s.Procs < 0 || s.Procs > s.NumPEs:
		return fmt.Errorf("spanning trees for %d processes of %d PEs", s.Procs, s.NumPEs)
	}
	n := s.NumPEs
	if s.Resume != nil {
		if err := checkCallback(*s.Resume, n); err != nil {
			return fmt.Errorf("the callback to resume with: %w", err)
		}
	}
	kids := len(PETreeIn(int(n), 0, int(s.Branching), Layout{PEs: int(n), Procs: int(s.Procs)}).Children(int(s.PE), nil))
	colls := map[uint32]*CollSnapshot{}
	for i := range s.Collections {
		c := &s.Collections[i]
		if i > 0 && s.Collections[i-1].Coll >= c.Coll {
			return fmt.Errorf("collection %d listed after %d: out of order", c.Coll, s.Collections[i-1].Coll)
		}
		colls[c.Coll] = c
		if err := checkCollection(c, s.PE, n, kids); err != nil {
			return fmt.Errorf("collection %d (%s): %w", c.Coll, c.Name, err)
		}
	}
	if len(s.SecRounds) != len(s.Sections) {
		return fmt.Errorf("%d sections but %d section rounds", len(s.Sections), len(s.SecRounds))
	}
	secs := map[uint64]bool{}
	for i := range s.Sections {
		sec := &s.Sections[i]
		if secs[sec.Sec] {
			return fmt.Errorf("section %d listed twice", sec.Sec)
		}
		secs[sec.Sec] = true
		if err := checkSection(sec, colls[sec.Coll], s.PE, n); err != nil {
			return fmt.Errorf("section %d: %w", sec.Sec, err)
		}
	}
	for _, r := range s.SecRoots {
		if r.Root < 0 || r.Root >= n {
			return fmt.Errorf("section %d rooted on PE %d, outside 0..%d", r.Sec, r.Root, n-1)
		}
	}
	for _, c := range s.Collections {
		for j, e := range c.Elements {
			for _, m := range e.Secs {
				if !secs[m.Sec] {
					return fmt.Errorf("collection %d (%s), element %d: a member of section %d, which this PE does not set up", c.Coll, c.Name, j, m.Sec)
				}
				if m.Home < 0 || m.Home >= n || m.Count >= max(m.Mult, 1) {
					return fmt.Errorf("collection %d (%s), element %d: section %d membership with home %d, %d of %d contributions", c.Coll, c.Name, j, m.Sec, m.Home, m.Count, m.Mult)
				}
			}
		}
	}
	return nil
}

// checkCollection checks one collection's definition, counts, locations
// and elements on PE me of n, whose array tree has kids children.
func checkCollection(c *CollSnapshot, me, n int32, kids int) error {
	if c.Coll == 0 {
		return fmt.Errorf("collection id 0")
	}
	if c.Kind < CollArray || c.Kind > CollMain {
		return fmt.Errorf("kind %d", c.Kind)
	}
	if c.Map > MapUser {
		return fmt.Errorf("placement %d", c.Map)
	}
	if len(c.Bounds) > pe.MaxDims {
		return fmt.Errorf("%d dimensions, at most %d", len(c.Bounds), pe.MaxDims)
	}
	total := int64(1)
	for _, b := range c.Bounds {
		if b < 1 || int64(b) > maxElements {
			return fmt.Errorf("bounds %v", c.Bounds)
		}
		if total *= int64(b); total > maxElements {
			return fmt.Errorf("bounds %v: more than %d elements", c.Bounds, int64(maxElements))
		}
	}
	if c.RedLocal < 0 || len(c.RedChildren) != kids {
		return fmt.Errorf("%d contributors here and %d subtree counts, for %d tree children", c.RedLocal, len(c.RedChildren), kids)
	}
	for _, k := range c.RedChildren {
		if k < 0 {
			return fmt.Errorf("negative contributor count %d", k)
		}
	}
	for j, l := range c.Locs {
		if err := checkIndex(&c.CreateMsg, l.Index, -1); err != nil {
			return fmt.Errorf("location %d: %w", j, err)
		}
		if l.PE < -1 || l.PE >= n {
			return fmt.Errorf("location %d: index %v on PE %d", j, l.Index, l.PE)
		}
	}
	for j, e := range c.Elements {
		if err := checkIndex(&c.CreateMsg, e.Index, me); err != nil {
			return fmt.Errorf("element %d: %w", j, err)
		}
		if j > 0 && pe.IndexOf(c.Elements[j-1].Index).Compare(pe.IndexOf(e.Index)) >= 0 {
			return fmt.Errorf("element %d: index %v listed after %v", j, e.Index, c.Elements[j-1].Index)
		}
		if e.RedHome < 0 || e.RedHome >= n {
			return fmt.Errorf("element %d: reduction home PE %d", j, e.RedHome)
		}
	}
	return nil
}

// checkIndex checks that ix is an index of collection c (of an element on
// PE me, for groups and main; me < 0: anywhere).
func checkIndex(c *CreateMsg, ix []int32, me int32) error {
	switch c.Kind {
	case CollMain:
		if len(ix) != 1 || ix[0] != 0 || me > 0 {
			return fmt.Errorf("main chare index %v on PE %d", ix, me)
		}
		return nil
	case CollGroup:
		if len(ix) != 1 || ix[0] < 0 || me >= 0 && ix[0] != me {
			return fmt.Errorf("group member index %v on PE %d", ix, me)
		}
		return nil
	}
	if len(ix) < 1 || len(ix) > pe.MaxDims {
		return fmt.Errorf("index %v: 1 to %d coordinates", ix, pe.MaxDims)
	}
	if c.Bounds == nil {
		return nil
	}
	if len(ix) != len(c.Bounds) {
		return fmt.Errorf("index %v for bounds %v", ix, c.Bounds)
	}
	for d, v := range ix {
		if v < 0 || int(v) >= c.Bounds[d] {
			return fmt.Errorf("index %v outside bounds %v", ix, c.Bounds)
		}
	}
	return nil
}

// checkSection checks a section's set-up on PE me of n.
func checkSection(sec *SectionMsg, c *CollSnapshot, me, n int32) error {
	if c == nil {
		return fmt.Errorf("a section of collection %d, which this PE does not hold", sec.Coll)
	}
	if len(sec.Members) == 0 || len(sec.Members) != len(sec.Homes) || len(sec.Tree) == 0 || sec.K < 2 || sec.K > maxBranching {
		return fmt.Errorf("%d members, %d homes, tree of %d PEs, branching %d", len(sec.Members), len(sec.Homes), len(sec.Tree), sec.K)
	}
	if len(sec.Tree) > int(n) {
		return fmt.Errorf("a tree of %d PEs in a run of %d", len(sec.Tree), n)
	}
	seen := map[int]bool{}
	for _, p := range sec.Tree {
		if p < 0 || p >= int(n) || seen[p] {
			return fmt.Errorf("tree PE %d outside 0..%d or listed twice", p, n-1)
		}
		seen[p] = true
	}
	if !seen[int(me)] {
		return fmt.Errorf("set up on PE %d, which is not in its tree %v", me, sec.Tree)
	}
	for i, ix := range sec.Members {
		if err := checkIndex(&c.CreateMsg, coords(ix), -1); err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		if i > 0 && sec.Members[i-1].Compare(ix) > 0 {
			return fmt.Errorf("member %d: %v listed after %v (members are sorted)", i, ix, sec.Members[i-1])
		}
		if h := sec.Homes[i]; h < 0 || h >= n || !seen[int(h)] {
			return fmt.Errorf("member %v homed on PE %d, outside its tree %v", ix, h, sec.Tree)
		}
	}
	return nil
}

// checkCallback checks a callback a checkpoint holds.
func checkCallback(cb Callback, n int32) error {
	switch cb.Kind {
	case CBNone, CBElem, CBBroadcast:
	case CBFuture:
		if cb.PE < 0 || cb.PE >= n {
			return fmt.Errorf("a future on PE %d", cb.PE)
		}
	default:
		return fmt.Errorf("kind %d", cb.Kind)
	}
	if cb.Index.Dims > pe.MaxDims {
		return fmt.Errorf("index of %d dimensions", cb.Index.Dims)
	}
	return nil
}

// CheckCheckpoint checks that the snapshots of one checkpoint, one per PE
// in PE order, agree: one epoch, PE count and tree arity; the same
// collections, defined alike, at the same reduction round; every element
// on one PE only, every group member on its own PE, main on PE 0; every
// element's location records leading to it (a cache may be stale, but
// following the records from any PE, and the home where a PE has none,
// reaches the element: a cycle would forward its messages for ever);
// every section set up alike wherever it is; one callback to resume
// with, on PE 0. fns are the program's placement functions.
func CheckCheckpoint(snaps []*PESnapshot) error {
	if len(snaps) == 0 {
		return fmt.Errorf("a checkpoint of no PEs")
	}
	first := snaps[0]
	if first.Resume == nil {
		return fmt.Errorf("PE 0's snapshot has no callback to resume with")
	}
	where := map[uint32]map[pe.Index]int32{}
	setups := map[uint64]*SectionMsg{}
	for p, s := range snaps {
		if int(s.PE) != p || s.NumPEs != int32(len(snaps)) || s.Epoch != first.Epoch || s.Branching != first.Branching || s.Procs != first.Procs {
			return fmt.Errorf("PE %d's snapshot is PE %d's of %d, epoch %d, arity %d, %d processes; PE 0's is of %d, epoch %d, arity %d, %d processes",
				p, s.PE, s.NumPEs, s.Epoch, s.Branching, s.Procs, first.NumPEs, first.Epoch, first.Branching, first.Procs)
		}
		if p > 0 && s.Resume != nil {
			return fmt.Errorf("PE %d's snapshot has a callback to resume with (only PE 0's may)", p)
		}
		if len(s.Collections) != len(first.Collections) {
			return fmt.Errorf("PE %d's snapshot holds %d collections, PE 0's %d", p, len(s.Collections), len(first.Collections))
		}
		for i := range s.Collections {
			c, d := &s.Collections[i], &first.Collections[i]
			if c.Coll != d.Coll || c.Kind != d.Kind || c.Type != d.Type || c.Name != d.Name || !slices.Equal(c.Bounds, d.Bounds) ||
				c.Map != d.Map || c.MapFn != d.MapFn || c.Sparse != d.Sparse || c.RedNext != d.RedNext && c.ReducesHere() {
				return fmt.Errorf("PE %d's snapshot defines collection %d (%s) otherwise than PE 0's", p, c.Coll, c.Name)
			}
			if where[c.Coll] == nil {
				where[c.Coll] = map[pe.Index]int32{}
			}
			for _, e := range c.Elements {
				ix := pe.IndexOf(e.Index)
				if q, dup := where[c.Coll][ix]; dup {
					return fmt.Errorf("%s%v is in PE %d's and PE %d's snapshots", c.Name, e.Index, q, p)
				}
				where[c.Coll][ix] = int32(p)
			}
		}
		for i := range s.Sections {
			sec := &s.Sections[i]
			if o, ok := setups[sec.Sec]; ok && (o.Coll != sec.Coll || o.K != sec.K || !slices.Equal(o.Tree, sec.Tree) ||
				!slices.Equal(o.Homes, sec.Homes) || !slices.Equal(o.Members, sec.Members)) {
				return fmt.Errorf("section %d is set up otherwise on PE %d than on another PE", sec.Sec, p)
			}
			setups[sec.Sec] = sec
		}
	}
	for _, c := range first.Collections {
		switch c.Kind {
		case CollMain:
			if len(where[c.Coll]) != 1 || where[c.Coll][pe.Idx(0)] != 0 {
				return fmt.Errorf("%s: the main chare must be once, on PE 0", c.Name)
			}
		case CollGroup:
			if len(where[c.Coll]) != len(snaps) {
				return fmt.Errorf("%s: a group with %d members on %d PEs", c.Name, len(where[c.Coll]), len(snaps))
			}
		}
	}
	for i, c := range first.Collections {
		if err := checkLocations(snaps, i, where[c.Coll]); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	for id, sec := range setups {
		for _, p := range sec.Tree {
			if !slices.ContainsFunc(snaps[p].Sections, func(o SectionMsg) bool { return o.Sec == id }) {
				return fmt.Errorf("section %d: PE %d is in its tree but does not set it up", id, p)
			}
		}
	}
	return nil
}

// checkLocations follows, for every element some PE has a location
// record of, the records from each such PE to the element's PE (where
// holds where each element is); a record of -1 says the element was
// deleted. A PE without a record sends to the element's home.
func checkLocations(snaps []*PESnapshot, ci int, where map[pe.Index]int32) error {
	n := len(snaps)
	def := snaps[0].Collections[ci]
	c := &Collection{Kind: def.Kind, Map: def.Map, MapFn: def.MapFn, Bounds: def.Bounds}
	locs := make([]map[pe.Index]int32, n)
	for p, s := range snaps {
		for _, l := range s.Collections[ci].Locs {
			if locs[p] == nil {
				locs[p] = map[pe.Index]int32{}
			}
			locs[p][pe.IndexOf(l.Index)] = l.PE
		}
	}
	for p := range locs {
		for ix := range locs[p] {
			cur := p
			for steps := 0; ; steps++ {
				if q, ok := where[ix]; ok && int(q) == cur {
					break // found
				}
				next := c.Home(ix, n)
				if l, ok := locs[cur][ix]; ok && int(l) != cur {
					if l < 0 {
						break // deleted: a message to it fails, naming it
					}
					next = int(l)
				}
				if next == cur {
					break // the home, which waits for its insertion
				}
				if steps > n {
					return fmt.Errorf("the location records of element %v lead from PE %d round a cycle, never to the element", ix, p)
				}
				cur = next
			}
		}
	}
	return nil
}
