package manager

import (
	"fmt"
	"slices"
	"sort"

	"github.com/charmgo/charmgo/pe"
)

// Reducer combines contributions. Exact reducers (integer sums, min, max,
// logical and/or, barrier) give the same bits whatever the grouping, so
// partial results are combined anywhere in the tree. Every other reducer is
// canonical: contributions travel as (contributor, value) items merged in
// contributor order and Fold runs once, at the root, over all of them in
// that order — this is what makes floating-point reductions bitwise
// identical across runs, PE counts and recoveries.
type Reducer struct {
	Name  string
	Exact bool
	// Clone copies a contribution before an exact reducer accumulates into
	// it, so a contributor's handed-over value is never written.
	Clone func(v any) any
	// Combine folds x into acc (acc may be updated in place and returned).
	Combine func(acc, x any) (any, error)
	// Fold combines items sorted by contributor (canonical reducers).
	Fold func(items []Item) (any, error)
	// Recycle, if set, takes back a value this PE contributed that a
	// message log kept, by reference, in a partial sent up the tree, once
	// the log releases it (nothing reads it again). Without it such
	// values are left to the garbage collector, and the contributor's
	// next ones are made in new memory.
	Recycle func(v any)
	// Detach, if set, is called on a partial's items before it leaves
	// this PE for a log that keeps it until the checkpoint (one that does
	// not release): it may give the Reusable ones copies of their values,
	// and reuse the values.
	Detach func(items []Item)
	// Codec encodes one contribution value for the wire.
	Codec Codec
	// ResultCodec encodes a result, where its type is not a
	// contribution's (a kept result crosses processes: see
	// Partial.Complete).
	ResultCodec Codec
	// Start, if set, makes an exact reducer's accumulator from its first
	// contribution, of a type of its own: Combine then folds a
	// contribution or another accumulator into it, Clone copies an
	// accumulator, Finish turns the root's into the result, and AccCodec
	// encodes accumulators in partials.
	Start    func(v any) (any, error)
	Finish   func(acc any) (any, error)
	AccCodec Codec
	// Consume, if set, takes back a contribution handed over on this PE
	// (Item.Reusable) once Start or Combine has read it: an exact
	// reducer keeps nothing of it, so its memory may serve the
	// contributor's next one at once.
	Consume func(v any)
}

// Codec encodes values of one Go type for the wire.
type Codec struct {
	Encode func(v any) ([]byte, error)
	// Append, where set, is Encode appending to dst (pe.TypeInfo.Append).
	Append func(dst []byte, v any) ([]byte, error)
	Decode func(b []byte) (any, error)
}

// reducers is the registry of reducers: ids derived from names (see
// pe.Registry), so partials name their reducer alike in every process.
var reducers = pe.NewRegistry[*Reducer]("reducer")

// RegisterReducer adds a reducer and returns its id, derived from its
// name. A name registered already returns the first registration's id
// (Concat[T]() and the like give the same reducer each time they are
// called); a new name once a run has started panics (see pe.Registry).
func RegisterReducer(r *Reducer) uint32 {
	if id, ok := reducers.ID(r.Name); ok {
		return id
	}
	id, err := reducers.Add(r.Name, r)
	if err != nil {
		panic("manager.RegisterReducer: " + err.Error())
	}
	return id
}

// RegisterNewReducer adds a reducer under a name nothing registered yet
// (a user's: two reducers must never share a name, or one would silently
// stand for the other).
func RegisterNewReducer(r *Reducer) (uint32, error) { return reducers.Add(r.Name, r) }

// LookupReducer returns the reducer with this id.
func LookupReducer(id uint32) *Reducer {
	r, _ := reducers.Get(id)
	return r
}

// SealRegistries ends the registration of new reducers, placement
// functions and message types: a run started, and every process must
// know what its messages name.
func SealRegistries() {
	reducers.Seal()
	mapFuncs.Seal()
	pe.SealTypes()
}

func reducerName(id uint32) string {
	if n := reducers.Name(id); n != "" {
		return n
	}
	return fmt.Sprintf("reducer#%d", id)
}

// CallbackKind says where a reduction result goes.
type CallbackKind uint8

const (
	CBNone      CallbackKind = iota
	CBElem                   // an entry of one element (array element, group member on a PE, main)
	CBBroadcast              // an entry broadcast to a whole collection
	CBFuture                 // a future on a PE
)

// Callback names the receiver of a reduction result. It is a comparable
// value so contributors' callbacks can be checked for agreement.
type Callback struct {
	Kind   CallbackKind
	Coll   uint32
	Index  pe.Index
	Entry  uint32
	PE     int32
	Future uint64
}

// Item is one contributor's value in a canonical reduction.
type Item struct {
	Key   pe.Index
	Value any
	own   bool // see Reusable
}

// Reusable reports whether nothing but this reduction refers to Value: it
// was contributed on this PE and never travelled in a message, so no
// message log can send it again. A fold may recycle such a value once it
// has read it.
func (it Item) Reusable() bool { return it.own }

// Partial is a (partial) reduction result travelling up a tree.
type Partial struct {
	Red     uint32
	Reducer uint32
	CB      Callback
	Count   int64
	// Witness is one contributor, to name in errors: the least index
	// among them, so that a partial says the same in every execution
	// whatever order its contributions came in.
	Witness pe.Index
	Items   []Item // canonical reducers: sorted by Key
	Acc     any    // exact reducers
	owned   bool   // Acc is ours to update in place
	// Complete: this is not a partial but the round's result, delivered
	// at the root before its failure and kept by another PE (message
	// logging): it stands in for the partial of the child it comes from,
	// and the root delivers Result instead of folding.
	Complete bool
	Result   any
}

// RedOp is what a reduction state machine asks its host to do.
type RedOp uint8

const (
	RedSendParent RedOp = iota + 1 // send Partial to PE To (the tree parent)
	RedDeliver                     // root: deliver Result to Partial.CB
	RedFail                        // a contributor broke the rules: Err says how
	// RedSkipped: a round complete at the root was passed over (see
	// CompleteBefore); its partial reached the parent from this PE's
	// failed incarnation, which had received Missing children's partials
	// for it that will not come again (their senders' logs let them go).
	// Quiescence detection counted both, so the host counts the partial
	// as sent and the Missing ones as processed.
	RedSkipped
	// RedCopy: a child's partial of a round complete at the root,
	// dropped. It is a copy a child's log sent again; the failed
	// incarnation processed the original, so the host does not count it.
	RedCopy
)

// RedAction is one output of the reduction state machine.
type RedAction struct {
	Op      RedOp
	To      int
	Partial *Partial
	Result  any
	Err     error
	Missing int // RedSkipped
}

// counts is a per-reduction-number count: Base plus every step whose From
// is at or below the round.
type counts struct {
	base  int64
	steps []countStep
}

type countStep struct {
	from  uint32
	delta int64
}

func (c *counts) at(r uint32) int64 {
	n := c.base
	for _, s := range c.steps {
		if s.from <= r {
			n += s.delta
		}
	}
	return n
}

func (c *counts) add(from uint32, delta int64) {
	if from == 0 {
		c.base += delta
		return
	}
	c.steps = append(c.steps, countStep{from, delta})
}

type round struct {
	p        Partial
	result   any   // the kept result, when one came (Partial.Complete)
	complete bool  // result is set
	have     bool  // p.Reducer/CB are set
	got      int64 // contributions from contributors homed here
	children []bool
}

// Reduction is the per-PE state machine of one collection's (or section's)
// reductions: accumulate the contributions of the contributors homed on this
// PE, agglomerate them with the children's partials, send one partial to the
// parent, and at the root deliver results in reduction-number order. It
// holds no goroutines and does no I/O; its host executes the returned
// actions.
//
// Every contributor has a fixed reduction home PE. A contributor that
// migrated away sends its contribution home, so each PE knows statically
// how many contributions each round needs, and waits only for children whose
// subtree has contributors.
type Reduction struct {
	Parent     int
	Children   []int
	local      counts
	childCount []counts
	enabled    bool
	nextReport uint32
	// doneBelow: rounds before it are complete at the root (a PE
	// recovering by replay learned it, and its children may have dropped
	// what they sent for them): such a round waits only for this PE's own
	// contributions, sends nothing up, and drops the children's partials.
	doneBelow uint32
	rounds    map[uint32]*round
	last      *round // the round of the previous contribution
}

// NewReduction makes the state machine for one PE of a tree.
func NewReduction(parent int, children []int) *Reduction {
	return &Reduction{
		Parent:     parent,
		Children:   children,
		childCount: make([]counts, len(children)),
		rounds:     map[uint32]*round{},
	}
}

// IsRoot reports whether this PE is the tree's root.
func (s *Reduction) IsRoot() bool { return s.Parent < 0 }

// NextReport is the lowest reduction number this PE has not yet reported.
func (s *Reduction) NextReport() uint32 { return s.nextReport }

// AddLocal changes the number of contributors homed here for every round from
// `from` on (insertion: +1 from 0; deletion: -1 from the next reduction the
// element would have joined).
func (s *Reduction) AddLocal(from uint32, delta int64, out []RedAction) []RedAction {
	s.local.add(from, delta)
	return s.advance(out)
}

// SetChildCount records how many contributors child i's subtree holds from
// round `from` on (added to what was known).
func (s *Reduction) AddChildCount(child int, from uint32, delta int64, out []RedAction) []RedAction {
	i := slices.Index(s.Children, child)
	if i < 0 {
		return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("count from PE %d, which is not a tree child", child)})
	}
	s.childCount[i].add(from, delta)
	return s.advance(out)
}

// SubtreeCount is the number of contributors in this PE's subtree for round r.
func (s *Reduction) SubtreeCount(r uint32) int64 {
	n := s.local.at(r)
	for i := range s.childCount {
		n += s.childCount[i].at(r)
	}
	return n
}

// Enable lets rounds complete: the counts are final (for arrays, once every
// insertion before DoneInserting is accounted for).
func (s *Reduction) Enable(out []RedAction) []RedAction {
	s.enabled = true
	return s.advance(out)
}

// Counts is the number of contributors of round r: this PE's own, and
// each child's subtree (in Children order) — what a checkpoint keeps.
func (s *Reduction) Counts(r uint32) (local int64, children []int64) {
	children = make([]int64, len(s.childCount))
	for i := range s.childCount {
		children[i] = s.childCount[i].at(r)
	}
	return s.local.at(r), children
}

// Restart makes a fresh state machine continue from a checkpoint: rounds
// before next are complete, and from next on this PE counts local
// contributors and children[i] in child i's subtree.
func (s *Reduction) Restart(next uint32, local int64, children []int64, out []RedAction) []RedAction {
	s.nextReport = next
	s.local = counts{}
	s.local.add(0, local)
	for i := range s.childCount {
		s.childCount[i] = counts{}
		if i < len(children) {
			s.childCount[i].add(0, children[i])
		}
	}
	return s.Enable(out)
}

// CompleteBefore says that every round before r is complete at the root.
func (s *Reduction) CompleteBefore(r uint32, out []RedAction) []RedAction {
	if r > s.doneBelow {
		s.doneBelow = r
	}
	return s.advance(out)
}

// Enabled reports whether Enable was called.
func (s *Reduction) Enabled() bool { return s.enabled }

func (s *Reduction) round(r uint32) *round {
	if rd := s.last; rd != nil && rd.p.Red == r {
		return rd
	}
	rd := s.rounds[r]
	if rd == nil {
		rd = &round{children: make([]bool, len(s.Children))}
		rd.p.Red = r
		s.rounds[r] = rd
	}
	s.last = rd
	return rd
}

// Contribute adds the value of a contributor homed on this PE to round r.
// The value came in a message (a contributor away from its home), so its
// Item is not Reusable.
func (s *Reduction) Contribute(r uint32, key pe.Index, reducer uint32, cb Callback, v any, out []RedAction) []RedAction {
	return s.contribute(r, key, reducer, cb, v, false, out)
}

// ContributeOwned is Contribute for a value handed over on this PE and
// referred to by nothing else: its Item is Reusable.
func (s *Reduction) ContributeOwned(r uint32, key pe.Index, reducer uint32, cb Callback, v any, out []RedAction) []RedAction {
	return s.contribute(r, key, reducer, cb, v, true, out)
}

func (s *Reduction) contribute(r uint32, key pe.Index, reducer uint32, cb Callback, v any, own bool, out []RedAction) []RedAction {
	if r < s.nextReport {
		return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: contribution from %v after the round was complete on this PE (contributed twice?)", r, key)})
	}
	rd := s.round(r)
	red := LookupReducer(reducer)
	if red == nil {
		return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: contribution from %v names unknown reducer %d", r, key, reducer)})
	}
	if err := s.add(rd, Item{key, v, own}, reducer, cb, red); err != nil {
		return append(out, RedAction{Op: RedFail, Err: err})
	}
	rd.got++
	if s.enabled && rd.got > s.local.at(r) {
		return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: %d contributions on this PE, only %d contributors (a contributor contributed twice?)", r, rd.got, s.local.at(r))})
	}
	return s.advance(out)
}

// Child merges a child's partial.
func (s *Reduction) Child(from int, p *Partial, out []RedAction) []RedAction {
	i := slices.Index(s.Children, from)
	if i < 0 {
		return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: partial from PE %d, which is not a tree child", p.Red, from)})
	}
	if p.Red < s.doneBelow {
		return append(out, RedAction{Op: RedCopy}) // the root has this round already
	}
	if p.Red < s.nextReport {
		return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: partial from PE %d after the round was reported", p.Red, from)})
	}
	rd := s.round(p.Red)
	if rd.children[i] {
		return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: second partial from PE %d", p.Red, from)})
	}
	rd.children[i] = true
	if p.Complete {
		if !rd.have {
			// what the delivery needs; this PE's own contributions, if
			// any are still to come, start the round as usual
			rd.p.Reducer, rd.p.CB, rd.p.Witness = p.Reducer, p.CB, p.Witness
		}
		rd.result, rd.complete = p.Result, true
		return s.advance(out)
	}
	if p.Count > 0 {
		red := LookupReducer(p.Reducer)
		if red == nil {
			return append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: partial names unknown reducer %d", p.Red, p.Reducer)})
		}
		if err := s.merge(rd, p, red); err != nil {
			return append(out, RedAction{Op: RedFail, Err: err})
		}
	}
	return s.advance(out)
}

// add folds one local contribution into the round without building a
// Partial for it (the per-contribution path).
func (s *Reduction) add(rd *round, it Item, reducer uint32, cb Callback, red *Reducer) error {
	key, v := it.Key, it.Value
	if !rd.have {
		rd.have = true
		rd.p.Reducer, rd.p.CB, rd.p.Witness, rd.p.Count = reducer, cb, key, 1
		if red.Exact && red.Start != nil {
			acc, err := red.Start(v)
			if err != nil {
				return fmt.Errorf("reduction %d: contribution of %v: %w", rd.p.Red, key, err)
			}
			rd.p.Acc, rd.p.owned = acc, true
			consume(red, it)
		} else if red.Exact {
			rd.p.Acc, rd.p.owned = v, false
		} else {
			// Sized for every contributor of the subtree so neither local
			// appends nor merging the children's partials reallocate.
			rd.p.Items = make([]Item, 1, max(s.SubtreeCount(rd.p.Red), 1))
			rd.p.Items[0] = it
		}
		return nil
	}
	if reducer != rd.p.Reducer || cb != rd.p.CB {
		in := Partial{Red: rd.p.Red, Reducer: reducer, CB: cb, Witness: key}
		return s.merge(rd, &in, red)
	}
	rd.p.Count++
	if key.Compare(rd.p.Witness) < 0 {
		rd.p.Witness = key
	}
	if red.Exact {
		err := combineExact(rd, red, v, key)
		consume(red, it)
		return err
	}
	items := rd.p.Items
	if n := len(items); n == 0 || items[n-1].Key.Compare(key) < 0 {
		rd.p.Items = append(items, it) // contributions usually come in index order
		return nil
	}
	// After any equal keys: a member listed twice contributes twice, in order.
	i := sort.Search(len(items), func(i int) bool { return items[i].Key.Compare(key) > 0 })
	rd.p.Items = slices.Insert(items, i, it)
	return nil
}

// consume gives an exact reducer's contribution back once it was read,
// if it was handed over on this PE.
func consume(red *Reducer, it Item) {
	if it.own && red.Consume != nil {
		red.Consume(it.Value)
	}
}

// handOver readies p's items to leave this PE in a message a log keeps:
// none is Reusable by whoever folds them (the log may send them again).
// If the log releases it (releases), it returns the values this PE
// contributed, for red.Recycle then (nil if red has no Recycle);
// otherwise red.Detach may swap them for copies first.
func (p *Partial) handOver(red *Reducer, releases bool) []any {
	var owned []any
	if !releases && red != nil && red.Detach != nil && len(p.Items) > 0 {
		red.Detach(p.Items)
	}
	for i := range p.Items {
		it := &p.Items[i]
		if !it.own {
			continue
		}
		it.own = false
		if releases && red != nil && red.Recycle != nil {
			if owned == nil {
				owned = make([]any, 0, len(p.Items)-i) // one allocation, not a doubling each
			}
			owned = append(owned, it.Value)
		}
	}
	return owned
}

func (s *Reduction) merge(rd *round, in *Partial, red *Reducer) error {
	if !rd.have {
		rd.have = true
		rd.p.Reducer, rd.p.CB, rd.p.Witness = in.Reducer, in.CB, in.Witness
		rd.p.Count = in.Count
		if len(in.Items) > 0 {
			// A copy: the child's partial may be in its sender's log (the
			// same memory, within a process), and its items are not ours.
			rd.p.Items = mergeItems(make([]Item, 0, max(int(s.SubtreeCount(rd.p.Red)), len(in.Items))), in.Items)
		}
		rd.p.Acc, rd.p.owned = in.Acc, in.owned
		return nil
	}
	if in.Reducer != rd.p.Reducer {
		return fmt.Errorf("reduction %d: contributor %v uses reducer %s but contributor %v uses %s", rd.p.Red, in.Witness, reducerName(in.Reducer), rd.p.Witness, reducerName(rd.p.Reducer))
	}
	if in.CB != rd.p.CB {
		return fmt.Errorf("reduction %d: contributor %v names callback %+v but contributor %v names %+v", rd.p.Red, in.Witness, in.CB, rd.p.Witness, rd.p.CB)
	}
	rd.p.Count += in.Count
	if in.Witness.Compare(rd.p.Witness) < 0 {
		rd.p.Witness = in.Witness
	}
	if red.Exact {
		return combineExact(rd, red, in.Acc, in.Witness)
	}
	rd.p.Items = mergeItems(rd.p.Items, in.Items)
	return nil
}

// combineExact folds x (from contributor or subtree witness) into the
// round's accumulator, cloning the first contribution before writing to it:
// a contributor's handed-over value is never modified.
func combineExact(rd *round, red *Reducer, x any, witness pe.Index) error {
	if !rd.p.owned {
		rd.p.Acc = red.Clone(rd.p.Acc)
		rd.p.owned = true
	}
	acc, err := red.Combine(rd.p.Acc, x)
	if err != nil {
		return fmt.Errorf("reduction %d: combining contribution of %v with %v: %w", rd.p.Red, witness, rd.p.Witness, err)
	}
	rd.p.Acc = acc
	return nil
}

// mergeItems merges b, a child's items, into a; both are sorted by key.
// When a has the room, the merge runs from the back, in place; otherwise
// into a new list. b's items come in a message: in a they are not
// Reusable.
func mergeItems(a, b []Item) []Item {
	if len(b) == 1 && (len(a) == 0 || a[len(a)-1].Key.Compare(b[0].Key) < 0) {
		return append(a, Item{b[0].Key, b[0].Value, false})
	}
	if len(a) == 0 && cap(a) >= len(b) {
		a = a[:len(b)]
		for i, it := range b {
			a[i] = Item{it.Key, it.Value, false}
		}
		return a
	}
	if cap(a) >= len(a)+len(b) {
		i, j := len(a)-1, len(b)-1
		a = a[:len(a)+len(b)]
		for k := len(a) - 1; j >= 0; k-- {
			if i >= 0 && a[i].Key.Compare(b[j].Key) > 0 {
				a[k] = a[i]
				i--
			} else {
				a[k] = Item{b[j].Key, b[j].Value, false}
				j--
			}
		}
		return a
	}
	out := make([]Item, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if b[j].Key.Compare(a[i].Key) < 0 {
			out = append(out, Item{b[j].Key, b[j].Value, false})
			j++
		} else {
			out = append(out, a[i])
			i++
		}
	}
	out = append(out, a[i:]...)
	for _, it := range b[j:] {
		out = append(out, Item{it.Key, it.Value, false})
	}
	return out
}

func (s *Reduction) ready(r uint32, rd *round) bool {
	if rd.got != s.local.at(r) {
		return false
	}
	for i, in := range rd.children {
		if !in && s.childCount[i].at(r) > 0 {
			return false
		}
	}
	return true
}

// advance reports every round that is complete, in order.
func (s *Reduction) advance(out []RedAction) []RedAction {
	for s.enabled {
		r := s.nextReport
		if s.SubtreeCount(r) == 0 {
			return out
		}
		rd := s.rounds[r]
		if r < s.doneBelow {
			if n := s.local.at(r); n > 0 && (rd == nil || rd.got != n) {
				return out
			}
			missing := 0
			for i := range s.childCount {
				if s.childCount[i].at(r) > 0 && (rd == nil || !rd.children[i]) {
					missing++
				}
			}
			delete(s.rounds, r)
			if s.last == rd {
				s.last = nil
			}
			s.nextReport++
			out = append(out, RedAction{Op: RedSkipped, To: s.Parent, Missing: missing})
			continue
		}
		if rd == nil || !s.ready(r, rd) {
			return out
		}
		delete(s.rounds, r)
		if s.last == rd {
			s.last = nil
		}
		s.nextReport++
		p := rd.p
		p.Red = r
		if !s.IsRoot() {
			// Whoever gets it must not write into its accumulator: the
			// parent in this process receives this very value, and a
			// message log keeps it by reference to send again.
			p.owned = false
			out = append(out, RedAction{Op: RedSendParent, To: s.Parent, Partial: &p})
			continue
		}
		red := LookupReducer(p.Reducer)
		var res any
		switch {
		case rd.complete:
			res = rd.result
		case red.Exact && red.Finish != nil:
			var err error
			if res, err = red.Finish(p.Acc); err != nil {
				out = append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: %w", r, err)})
				continue
			}
		case red.Exact:
			res = p.Acc
		default:
			var err error
			if res, err = red.Fold(p.Items); err != nil {
				out = append(out, RedAction{Op: RedFail, Err: fmt.Errorf("reduction %d: %w", r, err)})
				continue
			}
		}
		out = append(out, RedAction{Op: RedDeliver, Partial: &p, Result: res})
	}
	return out
}
