package ftlayer

import (
	"cmp"
	"iter"
	"slices"

	"github.com/charmgo/charmgo/pe"
)

// ElementNames is what an element keeps of the named messages delivered
// to it since the last checkpoint (a protocol without determinants: see
// ElementDedup): per name (pe.MsgName.Key, its occurrence in Num), the
// PE that delivered it first. It migrates with the element. The zero
// value is empty and ready to use.
//
// An element hears from few sources (an element, a reduction) and from
// each in the order it sends, more or less: names are kept per source in
// a slice sorted by the source's count, so that recording one is an
// append and the element's share of a long run between checkpoints is
// 24 bytes a message, not a map entry keyed by the whole name (LeanMD
// spent 9% of its time in such maps' probes, in memory no cache held).
type ElementNames struct {
	// near: the first two sources' lists, kept in the element's own
	// record, which its delivery has at hand already (a compute of
	// LeanMD hears from its two cells, nothing else); more: the others',
	// found through index (a source: the name, its counts zeroed)
	near  [2]nameList
	more  []nameList
	index map[pe.MsgName]int32
	n     int
}

// nameList is one source's names, sorted by (k, num); top: the last's
// counts, beside the source (in near, in the element's record) so that
// a name above them is found new without reading the slice.
type nameList struct {
	source pe.MsgName
	seen   []seenName
	top    seenName
}

// seenName is a name of its source's: the source's count (Origin.K) and
// the occurrence (Num), and the PE that delivered it first.
type seenName struct {
	k, num uint64
	first  int32
}

func (s seenName) cmp(k, num uint64) int {
	if c := cmp.Compare(s.k, k); c != 0 {
		return c
	}
	return cmp.Compare(s.num, num)
}

// find returns where (k, num) is or would be in l, and whether it is.
func (l *nameList) find(k, num uint64) (int, bool) {
	if n := len(l.seen); n == 0 || l.top.cmp(k, num) < 0 {
		return n, false // a count above all had: the usual case
	}
	return slices.BinarySearchFunc(l.seen, k, func(s seenName, k uint64) int { return s.cmp(k, num) })
}

// sourceOf splits name into its source and its counts.
func sourceOf(name pe.MsgName) (source pe.MsgName, k, num uint64) {
	k, num = name.Origin.K, name.Num
	name.Origin.K, name.Num = 0, 0
	return name, k, num
}

// list returns source's list, nil if the element never heard from it.
func (e *ElementNames) list(source *pe.MsgName) *nameList {
	for i := range e.near {
		l := &e.near[i]
		if l.seen == nil {
			return nil // near fills up first
		}
		if l.source == *source {
			return l
		}
	}
	if i, ok := e.index[*source]; ok {
		return &e.more[i]
	}
	return nil
}

// newList starts source's list.
func (e *ElementNames) newList(source *pe.MsgName) *nameList {
	for i := range e.near {
		if l := &e.near[i]; l.seen == nil {
			l.source = *source
			return l
		}
	}
	if e.index == nil {
		e.index = map[pe.MsgName]int32{}
	}
	e.index[*source] = int32(len(e.more))
	e.more = append(e.more, nameList{source: *source})
	return &e.more[len(e.more)-1]
}

// Len is the number of names kept.
func (e *ElementNames) Len() int { return e.n }

// First reports the PE that delivered the message named name first, if
// the element had it.
func (e *ElementNames) First(name pe.MsgName) (int32, bool) {
	source, k, num := sourceOf(name)
	l := e.list(&source)
	if l == nil {
		return 0, false
	}
	j, found := l.find(k, num)
	if !found {
		return 0, false
	}
	return l.seen[j].first, true
}

// Add records that PE first delivered the message named name (again:
// first is replaced).
func (e *ElementNames) Add(name pe.MsgName, first int32) {
	if j, l, had := e.record(name, first); had {
		l.seen[j].first = first
	}
}

// Record records that PE first delivered the message named name, unless
// the element had it: then it reports the PE that delivered it first.
func (e *ElementNames) Record(name pe.MsgName, first int32) (int32, bool) {
	if j, l, had := e.record(name, first); had {
		return l.seen[j].first, true
	}
	return 0, false
}

// record finds name, or inserts it with first: where it is, in which
// list, and whether it was there.
func (e *ElementNames) record(name pe.MsgName, first int32) (int, *nameList, bool) {
	source, k, num := sourceOf(name)
	l := e.list(&source)
	if l == nil {
		l = e.newList(&source)
	}
	j, found := l.find(k, num)
	if found {
		return j, l, true
	}
	l.seen = slices.Insert(l.seen, j, seenName{k: k, num: num, first: first})
	l.top = l.seen[len(l.seen)-1]
	e.n++
	return j, l, false
}

// All yields every name kept and the PE that delivered it first, source
// by source in the order the element first heard from them.
func (e *ElementNames) All() iter.Seq2[pe.MsgName, int32] {
	return func(yield func(pe.MsgName, int32) bool) {
		for _, lists := range [][]nameList{e.near[:], e.more} {
			for _, l := range lists {
				name := l.source
				for _, s := range l.seen {
					name.Origin.K, name.Num = s.k, s.num
					if !yield(name, s.first) {
						return
					}
				}
			}
		}
	}
}
