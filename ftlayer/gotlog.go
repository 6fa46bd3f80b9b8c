package ftlayer

import (
	"iter"

	"github.com/charmgo/charmgo/pe"
)

// gotLog is spmd's record of the named messages from other teams a PE
// handled since the checkpoint (and of those its elements got): per
// name, what gotName says. It answers as a map keyed by name would, the
// last record of a name winning, but it is kept as a log in the order
// the messages came until a question needs the map: failure-free,
// nothing asks (a copy comes only after a rollback, and orphans are
// counted only then), and appending to a log costs a run a small part of
// what a map of every message since the checkpoint costs in probes of
// memory no cache holds.
type gotLog struct {
	recs []gotRec
	idx  map[pe.MsgName]int32 // nil: not built yet (index)
}

// gotRec is one record of the log: a message had (its name, gotName), or
// (left) that the element had it here migrated to g.leftTo.
type gotRec struct {
	key  pe.MsgName
	g    gotName
	left bool
}

// put records key as g.
func (l *gotLog) put(key *pe.MsgName, g gotName) {
	if l.idx != nil {
		if i, ok := l.idx[*key]; ok {
			l.recs[i].g = g
			return
		}
		l.idx[*key] = int32(len(l.recs))
	} else if n := len(l.recs); n > 0 && !l.recs[n-1].left && l.recs[n-1].key == *key {
		// a multicast delivered to several elements here, one after the
		// other: one record, as the map would keep
		l.recs[n-1].g = g
		return
	}
	l.recs = append(l.recs, gotRec{key: *key, g: g})
}

// leftTo notes that the element that had key here migrated to PE to.
func (l *gotLog) leftTo(key *pe.MsgName, to int32) {
	if l.idx == nil {
		l.recs = append(l.recs, gotRec{key: *key, g: gotName{leftTo: to}, left: true})
		return
	}
	if i, ok := l.idx[*key]; ok && l.recs[i].g.elem {
		l.recs[i].g.leftTo = to
	}
}

// index builds the map from the log, once.
func (l *gotLog) index() {
	if l.idx != nil {
		return
	}
	l.idx = make(map[pe.MsgName]int32, len(l.recs))
	for i := range l.recs {
		r := &l.recs[i]
		if !r.left {
			l.idx[r.key] = int32(i)
			continue
		}
		if j, ok := l.idx[r.key]; ok && l.recs[j].g.elem {
			l.recs[j].g.leftTo = r.g.leftTo
		}
	}
}

// get returns what the log says of key.
func (l *gotLog) get(key *pe.MsgName) (gotName, bool) {
	l.index()
	i, ok := l.idx[*key]
	if !ok {
		return gotName{}, false
	}
	return l.recs[i].g, true
}

// all yields every name recorded, with its record (to read or change).
func (l *gotLog) all() iter.Seq2[pe.MsgName, *gotName] {
	l.index()
	return func(yield func(pe.MsgName, *gotName) bool) {
		for k, i := range l.idx {
			if !yield(k, &l.recs[i].g) {
				return
			}
		}
	}
}

// len is the number of names recorded.
func (l *gotLog) len() int {
	l.index()
	return len(l.idx)
}

// reset empties the log (a checkpoint).
func (l *gotLog) reset() {
	clear(l.recs)
	l.recs = l.recs[:0]
	l.idx = nil
}
