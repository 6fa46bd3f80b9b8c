package pe

import "time"

// A PE's timeline (Config.Timeline): what it did and when — the program's
// entry methods (begin and end, the chare, the message's kind and size),
// the times it waited for messages, and the phases the runtime marks
// (load balancing, checkpoints, recovery, a failure) — for a trace a person
// looks at (--trace). Each PE appends to its own on its own goroutine: no
// lock, and one test per entry method when recording is off.

// Span kinds of a timeline.
const (
	SpanEntry uint8 = iota + 1 // an entry method ran
	SpanIdle                   // the PE waited for messages
	SpanPhase                  // a phase of the runtime (Label), Dur 0 for an instant
)

// Span is one interval of a PE's timeline. Start is nanoseconds from the
// node's timeline origin (Node.TimelineOrigin), on the monotonic clock.
type Span struct {
	Start, Dur int64
	Kind       uint8
	MsgKind    Kind   // entries: the message's kind
	Type       uint32 // entries: the entry's message type (TypeName)
	Coll       uint32 // entries: the chare's collection
	Index      Index  // entries: the chare's index
	Size       uint32 // entries: the message's payload bytes, if known
	// Cont, for an entry, is the continuation that ran in it (a
	// Gather's, which the entry's message completed: the layer above
	// names it), or 0 for the entry method itself.
	Cont  uint32
	Label string // phases
}

// timeline is a PE's recording.
type timeline struct {
	origin time.Time
	spans  []Span
	open   map[string]int64 // phases begun and not ended, by label
	entry  Span             // the entry method running (BeginEntry), its current part
}

func (t *timeline) now() int64 { return int64(time.Since(t.origin)) }

// Recording reports whether this PE records its timeline.
func (p *PE) Recording() bool { return p.tl != nil }

// BeginEntry begins an entry method's span, which EndEntry ends (call
// both only when Recording). It returns the span of an entry already
// running, to pass to EndEntry (an entry run inside another).
func (p *PE) BeginEntry(typ uint32, kind Kind, coll uint32, ix *Index, size uint32) (outer Span) {
	t := p.tl
	outer = t.entry
	t.entry = Span{Start: t.now(), Kind: SpanEntry, MsgKind: kind, Type: typ, Coll: coll, Index: *ix, Size: size}
	return outer
}

// EndEntry ends the entry method's span now; outer is what BeginEntry
// returned.
func (p *PE) EndEntry(outer Span) {
	t := p.tl
	t.entry.Dur = t.now() - t.entry.Start
	t.spans = append(t.spans, t.entry)
	t.entry = outer
}

// SwitchEntry ends the running entry's current part now and begins one
// for continuation cont (0: the entry method itself) of the same chare
// and message, so that a continuation the entry ran is a span of its
// own; it returns the continuation of the part it ended, to switch back
// to once cont returns. Outside an entry method (a constructor, a
// ResumeFromSync) it does nothing. Call it only when Recording.
func (p *PE) SwitchEntry(cont uint32) (was uint32) {
	t := p.tl
	if t.entry.Kind != SpanEntry {
		return 0
	}
	now := t.now()
	t.entry.Dur = now - t.entry.Start
	t.spans = append(t.spans, t.entry)
	was = t.entry.Cont
	t.entry.Start, t.entry.Cont = now, cont
	return was
}

// RecordPhase begins (or, begin false, ends) the phase label on this PE's
// timeline; an instant is a phase with no end (Dur 0). Nothing happens
// when the PE does not record.
func (p *PE) RecordPhase(label string, begin bool) {
	t := p.tl
	if t == nil {
		return
	}
	now := t.now()
	if begin {
		if t.open == nil {
			t.open = map[string]int64{}
		}
		t.open[label] = now
		return
	}
	start, ok := t.open[label]
	if !ok {
		return // ended without a beginning here (a phase a new incarnation finishes)
	}
	delete(t.open, label)
	t.spans = append(t.spans, Span{Start: start, Dur: now - start, Kind: SpanPhase, Label: label})
}

// RecordInstant marks a moment (a failure) on this PE's timeline.
func (p *PE) RecordInstant(label string) {
	if t := p.tl; t != nil {
		t.spans = append(t.spans, Span{Start: t.now(), Kind: SpanPhase, Label: label})
	}
}

// TimelineOrigin is the wall-clock time the node's timelines count from.
func (n *Node) TimelineOrigin() time.Time { return n.tlOrigin }

// Timelines gives each local PE's timeline, phases still open ended at
// the end (call it after Wait; nil without Config.Timeline).
func (n *Node) Timelines() [][]Span {
	if !n.cfg.Timeline {
		return nil
	}
	out := make([][]Span, len(n.pes))
	for i, p := range n.pes {
		t := p.tl
		end := t.now()
		for label, start := range t.open {
			t.spans = append(t.spans, Span{Start: start, Dur: end - start, Kind: SpanPhase, Label: label})
		}
		t.open = nil
		out[i] = t.spans
	}
	return out
}
