package recovery

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// Restart is a checkpoint to resume from, placed on the run's PEs: each
// PE's encoded snapshot, the checkpoint's epoch, and where each snapshot
// came from (for errors).
type Restart struct {
	Snaps [][]byte
	Epoch uint64
	From  []string
}

// LoadCheckpoint reads the last complete checkpoint in dir, one snapshot
// per PE, has check accept each snapshot (that it is this program's:
// file names it), and places its elements on pes PEs in procs processes
// with branching-ary trees, redistributing them if the checkpoint was
// taken on another count or with other trees.
func LoadCheckpoint(dir string, pes, branching, procs int, check func(file string, s *manager.PESnapshot) error) (Restart, error) {
	latest, err := manager.ReadLatest(dir)
	if err != nil {
		return Restart{}, err
	}
	old := int(latest.NumPEs)
	snaps, decoded, err := manager.ReadSnapshots(dir, latest)
	if err != nil {
		return Restart{}, err
	}
	if err := manager.CheckCheckpoint(decoded); err != nil {
		return Restart{}, fmt.Errorf("checkpoint %d in %s: %w", latest.Epoch, dir, err)
	}
	for p, s := range decoded {
		if err := check(manager.SnapshotFile(dir, latest.Epoch, p), s); err != nil {
			return Restart{}, err
		}
	}
	from := make([]string, pes)
	if old == pes && int(decoded[0].Branching) == branching && max(int(decoded[0].Procs), 1) == max(procs, 1) {
		for p := range from {
			from[p] = manager.SnapshotFile(dir, latest.Epoch, p)
		}
		return Restart{Snaps: snaps, Epoch: latest.Epoch, From: from}, nil
	}
	// another PE count (or other trees): every element finds a new place
	moved, err := Redistribute(decoded, pes, branching, procs)
	if err != nil {
		return Restart{}, fmt.Errorf("restarting the %d-PE checkpoint in %s on %d PEs: %w", old, dir, pes, err)
	}
	out := make([][]byte, pes)
	for p, s := range moved {
		if out[p], err = msgpack.Marshal(s); err != nil {
			return Restart{}, err
		}
		from[p] = fmt.Sprintf("checkpoint %d in %s (its %d PEs' snapshots placed on %d)", latest.Epoch, dir, old, pes)
	}
	return Restart{Snaps: out, Epoch: latest.Epoch, From: from}, nil
}

// Redistribute turns a checkpoint of len(old) PEs into one of n PEs, for a
// restart on another PE count. Elements of bounded arrays go to their home
// on n PEs, those of sparse arrays round-robin in index order, the main
// chare to PE 0; every PE learns every element's place. Reduction homes
// become the new PEs and contributor counts are recounted over the new
// trees (branching k); sections keep their ids and members, get new homes
// and trees, and a root on the new PEs (recorded where the id's own root
// no longer exists). Groups, one member per PE, cannot change PE count.
// On the same PE count it serves a restart with another tree arity, or
// in another number of processes (procs: the trees keep each process's
// PEs together, manager.Layout).
func Redistribute(old []*manager.PESnapshot, n, k, procs int) ([]*manager.PESnapshot, error) {
	if n < 1 || len(old) == 0 {
		return nil, fmt.Errorf("redistribute %d snapshots over %d PEs", len(old), n)
	}
	out := make([]*manager.PESnapshot, n)
	for p := range out {
		out[p] = &manager.PESnapshot{Version: manager.SnapshotVersion, PE: int32(p), NumPEs: int32(n), Branching: int32(k), Procs: int32(max(procs, 0)), Epoch: old[0].Epoch}
	}
	for _, s := range old {
		for _, o := range out {
			o.NextColl, o.NextSec = max(o.NextColl, s.NextColl), max(o.NextSec, s.NextSec)
		}
		if s.Resume != nil {
			out[0].Resume = s.Resume
		}
		// quiescence detections and the chare layer's records stay on
		// their PE (the end-of-run detection is PE 0's, with main)
		if int(s.PE) < n {
			out[s.PE].QDAsked, out[s.PE].Host = s.QDAsked, s.Host
		} else if len(s.QDAsked) > 0 || len(s.Host) > 0 {
			return nil, fmt.Errorf("PE %d's checkpoint holds quiescence detections or futures it waits for: it cannot be restarted on %d PEs", s.PE, n)
		}
	}
	where := map[uint32]map[pe.Index]int32{} // collection -> element -> new PE
	layout := manager.Layout{PEs: n, Procs: procs}
	tree := manager.PETreeIn(n, 0, k, layout)
	for ci, def := range old[0].Collections {
		if def.Kind == manager.CollGroup && len(old) != n {
			return nil, fmt.Errorf("%s is a group (one member per PE): it cannot be restarted on %d PEs instead of %d", def.Name, n, len(old))
		}
		type elem struct {
			ix pe.Index
			es manager.ElemSnapshot
		}
		var all []elem
		var bcast uint64
		for _, s := range old {
			if ci >= len(s.Collections) || s.Collections[ci].Coll != def.Coll {
				return nil, fmt.Errorf("PE %d's checkpoint does not list collection %s (%d) as PE 0's does", s.PE, def.Name, def.Coll)
			}
			cs := s.Collections[ci]
			if cs.RedNext != def.RedNext && cs.ReducesHere() {
				return nil, fmt.Errorf("%s: reduction round %d on PE %d, %d on PE 0: the checkpoint was not taken at a synchronization point", def.Name, cs.RedNext, s.PE, def.RedNext)
			}
			bcast = max(bcast, cs.BcastDelivered)
			for _, es := range cs.Elements {
				all = append(all, elem{pe.IndexOf(es.Index), es})
			}
		}
		slices.SortFunc(all, func(a, b elem) int { return a.ix.Compare(b.ix) })
		c := &manager.Collection{Kind: def.Kind, Map: def.Map, MapFn: def.MapFn, Bounds: def.Bounds}
		place := map[pe.Index]int32{}
		local := make([]int64, n)
		for i, e := range all {
			p := i % n
			if !def.Sparse || def.Kind != manager.CollArray {
				p = c.Home(e.ix, n)
			}
			place[e.ix] = int32(p)
			local[p]++
		}
		where[def.Coll] = place
		for p, o := range out {
			cs := def
			cs.BcastDelivered = bcast
			cs.RedLocal = local[p]
			cs.RedChildren = nil
			for _, ch := range tree.Children(p, nil) {
				var sum int64
				for _, q := range tree.Subtree(ch, nil) {
					sum += local[q]
				}
				cs.RedChildren = append(cs.RedChildren, sum)
			}
			cs.Locs, cs.Elements = nil, nil
			for _, e := range all {
				if int(place[e.ix]) != p {
					cs.Locs = append(cs.Locs, manager.LocSnapshot{Index: e.es.Index, PE: place[e.ix], Moves: e.es.Moves})
					continue
				}
				es := e.es
				es.RedHome = int32(p)
				es.Secs = slices.Clone(es.Secs)
				for si := range es.Secs { // its sections count it where it now is
					es.Secs[si].Home = int32(p)
				}
				cs.Elements = append(cs.Elements, es)
			}
			o.Collections = append(o.Collections, cs)
		}
	}
	// sections: one copy of each set-up, new homes, a new tree
	seen := map[uint64]bool{}
	for _, s := range old {
		for i, sm := range s.Sections {
			if seen[sm.Sec] {
				continue
			}
			seen[sm.Sec] = true
			place := where[sm.Coll]
			nm := sm
			nm.Homes = make([]int32, len(sm.Members))
			pes := make([]int, len(sm.Members))
			for j, ix := range sm.Members {
				p, ok := place[ix]
				if !ok {
					return nil, fmt.Errorf("section %d: member %v is in no PE's checkpoint", sm.Sec, ix)
				}
				nm.Homes[j], pes[j] = p, int(p)
			}
			root := manager.SectionRoot(sm.Sec)
			if root >= n {
				root %= n
				for _, o := range out {
					o.SecRoots = append(o.SecRoots, manager.SecRoot{Sec: sm.Sec, Root: int32(root)})
				}
			}
			t := manager.SectionTreeIn(root, pes, k, layout)
			nm.Tree, nm.K = t.Members, t.K
			for _, p := range t.Members {
				out[p].Sections = append(out[p].Sections, nm)
				out[p].SecRounds = append(out[p].SecRounds, s.SecRounds[i])
			}
		}
	}
	for _, o := range out {
		slices.SortFunc(o.SecRoots, func(a, b manager.SecRoot) int { return cmp.Compare(a.Sec, b.Sec) })
	}
	return out, nil
}
