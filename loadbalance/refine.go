package loadbalance

import (
	"cmp"
	"slices"
)

// refine moves work off overloaded PEs and nothing else (Charm++'s
// RefineLB): while the most loaded PE is above the average by more than
// the tolerance, its largest object that fits on the least-loaded PE
// without taking that one over the threshold moves there. Objects on
// unavailable PEs all move first. A PE nothing can be taken from is left
// as it is, so a balanced input is left alone.
type refine struct{ tol float64 }

func (refine) Name() string { return "refine" }

func (r refine) Plan(st *Stats) []Move {
	return st.MovesTo(refinePlace(st, st.Placement(), r.tol))
}

// refinePlace refines placement where (changed in place and returned).
func refinePlace(st *Stats, where []int32, tol float64) []int32 {
	avail := st.Available()
	loads := st.Background()
	for i, p := range where {
		if st.Objs[i].Migratable {
			loads[p] += st.Load(i)
		}
	}
	h := newPEHeap(avail, loads)
	// Objects on unavailable PEs go to the least-loaded PE, heaviest first.
	for _, i := range st.migratableByLoad() {
		if p := where[i]; st.PEs[p].Unavailable {
			l := st.Load(int(i))
			loads[p] -= l
			where[i] = h.add(l)
		}
	}
	total := 0.0
	for _, p := range avail {
		total += loads[p]
	}
	threshold := total / float64(len(avail)) * (1 + tol)
	// each available PE's migratable objects, lightest first
	objs := make([][]int32, len(st.PEs))
	for i, p := range where {
		if st.Objs[i].Migratable && !st.PEs[p].Unavailable {
			objs[p] = append(objs[p], int32(i))
		}
	}
	for _, p := range avail {
		slices.SortFunc(objs[p], func(a, b int32) int {
			if c := cmp.Compare(st.Load(int(a)), st.Load(int(b))); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
	}
	// donors, most loaded first; each is worked on until it is under the
	// threshold or nothing it holds fits anywhere
	donors := slices.Clone(avail)
	slices.SortFunc(donors, func(a, b int32) int {
		if c := cmp.Compare(loads[b], loads[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, d := range donors {
		for loads[d] > threshold {
			to := h.min()
			if to == d {
				break
			}
			room := threshold - loads[to]
			// the largest object of d that fits in room and makes d lighter
			// than it leaves to (no ping-pong)
			list := objs[d]
			k, _ := slices.BinarySearchFunc(list, room, func(o int32, r float64) int { return cmp.Compare(st.Load(int(o)), r) })
			for k < len(list) && st.Load(int(list[k])) <= room {
				k++
			}
			k--
			if k < 0 {
				break
			}
			o := list[k]
			l := st.Load(int(o))
			if l <= 0 {
				break // moving load-free objects changes nothing
			}
			objs[d] = slices.Delete(list, k, k+1)
			where[o] = to
			h.addTo(d, -l)
			h.addTo(to, l)
			objs[to] = insertSorted(objs[to], o, st)
		}
	}
	return where
}

func insertSorted(list []int32, o int32, st *Stats) []int32 {
	k, _ := slices.BinarySearchFunc(list, o, func(a, b int32) int {
		if c := cmp.Compare(st.Load(int(a)), st.Load(int(b))); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return slices.Insert(list, k, o)
}
