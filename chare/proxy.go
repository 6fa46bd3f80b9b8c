package chare

import (
	"fmt"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

// ArrayProxy refers to a whole chare array. Proxies are plain values: store
// them in chare state and send them in messages.
type ArrayProxy[C any] struct{ Coll uint32 }

// At is the proxy of the element with these coordinates.
func (a ArrayProxy[C]) At(c ...int) ElemProxy[C] {
	if len(c) == 1 {
		// built whole, in place: a fresh index copied into a fresh proxy
		// cost a store-forwarding stall per copy
		return ElemProxy[C]{Coll: a.Coll, Index: pe.Index{Dims: 1, C: [pe.MaxDims]int32{int32(c[0])}}}
	}
	return ElemProxy[C]{Coll: a.Coll, Index: pe.Idx(c...)}
}

// Elem is the proxy of element ix.
func (a ArrayProxy[C]) Elem(ix Index) ElemProxy[C] { return ElemProxy[C]{Coll: a.Coll, Index: ix} }

func (a ArrayProxy[C]) collection(*C) uint32 { return a.Coll }

// GroupProxy refers to a group: one element per PE.
type GroupProxy[C any] struct{ Coll uint32 }

// OnPE is the proxy of the group's element on PE p.
func (g GroupProxy[C]) OnPE(p int) ElemProxy[C] { return ElemProxy[C]{Coll: g.Coll, Index: pe.Idx(p)} }

func (g GroupProxy[C]) collection(*C) uint32 { return g.Coll }

// ElemProxy refers to one element (of an array, a group, or the main chare).
type ElemProxy[C any] struct {
	Coll  uint32
	Index Index
}

// SectionProxy refers to a section of an array: multicast to it, and
// contribute to its reductions with ContributeSection.
type SectionProxy[C any] struct {
	Coll uint32
	Sec  uint64
}

// Collection is an array or a group of C: the target of a broadcast.
type Collection[C any] interface {
	collection(*C) uint32
}

// ArrayOption configures a new array.
type ArrayOption func(*manager.CreateMsg)

// BlockMap places contiguous blocks of linearized indices on each PE (the
// default for arrays with bounds).
func BlockMap() ArrayOption { return func(c *manager.CreateMsg) { c.Map = manager.MapBlock } }

// RoundRobinMap deals linearized indices to PEs in turn.
func RoundRobinMap() ArrayOption { return func(c *manager.CreateMsg) { c.Map = manager.MapRoundRobin } }

// MapFunc is a user placement function: which of n PEs element ix of an
// array with these bounds starts on (and has as home).
type MapFunc = manager.MapFunc

// RegisterMap registers a placement function under a name (at package
// level, so every process agrees on it; a name registered twice panics)
// and returns the option that selects it.
func RegisterMap(name string, f MapFunc) ArrayOption {
	id := manager.RegisterMapFunc(name, f)
	return func(c *manager.CreateMsg) { c.Map, c.MapFn = manager.MapUser, id }
}

// Named sets the array's name in errors and statistics (default: the type's).
func Named(name string) ArrayOption { return func(c *manager.CreateMsg) { c.Name = name } }

// NewArray creates an array with the given bounds (1 to 6 dimensions), every
// element constructed with arg.
func (t *Type[C, A]) NewArray(ctx *Ctx, bounds []int, arg A, opts ...ArrayOption) ArrayProxy[C] {
	if len(bounds) == 0 || len(bounds) > pe.MaxDims {
		ctx.Fail(fmt.Errorf("new array of %s: %d dimensions, want 1 to %d", t.info.name, len(bounds), pe.MaxDims))
		return ArrayProxy[C]{}
	}
	for i, b := range bounds {
		if b < 0 {
			ctx.Fail(fmt.Errorf("new array of %s: dimension %d is %d", t.info.name, i, b))
			return ArrayProxy[C]{}
		}
	}
	return t.create(ctx, manager.CollArray, append([]int(nil), bounds...), false, arg, opts)
}

// NewSparseArray creates an empty array whose elements come by Insert;
// reductions over it complete once DoneInserting was called. bounds may be
// nil (any index) or limit each coordinate.
func (t *Type[C, A]) NewSparseArray(ctx *Ctx, bounds []int, opts ...ArrayOption) ArrayProxy[C] {
	var zero A
	opts = append([]ArrayOption{func(c *manager.CreateMsg) { c.Map = manager.MapHash }}, opts...)
	if bounds != nil {
		opts[0] = BlockMap()
	}
	return t.create(ctx, manager.CollArray, bounds, true, zero, opts)
}

// NewGroup creates a group: one element on every PE.
func (t *Type[C, A]) NewGroup(ctx *Ctx, arg A) GroupProxy[C] {
	return GroupProxy[C]{Coll: t.create(ctx, manager.CollGroup, nil, false, arg, nil).Coll}
}

func (t *Type[C, A]) create(ctx *Ctx, kind manager.CollKind, bounds []int, sparse bool, arg A, opts []ArrayOption) ArrayProxy[C] {
	if t.info.kind == manager.CollMain {
		ctx.Fail(fmt.Errorf("%s is the main chare type; it has one instance, made by Run", t.info.name))
		return ArrayProxy[C]{}
	}
	cm := &manager.CreateMsg{
		Coll: ctx.m.NewCollectionID(), Kind: kind, Type: t.info.id, Name: t.info.name,
		Bounds: bounds, Sparse: sparse, Migratable: t.info.migratable, Arg: manager.Lazy{V: arg},
	}
	for _, o := range opts {
		o(cm)
	}
	ctx.m.Create(cm)
	return ArrayProxy[C]{Coll: cm.Coll}
}

// Insert creates element ix of a sparse array on PE onPE (-1: the index's
// home PE), constructed with arg.
func (t *Type[C, A]) Insert(ctx *Ctx, a ArrayProxy[C], ix Index, onPE int, arg A) {
	c := ctx.m.Collection(a.Coll)
	if c == nil {
		ctx.Fail(fmt.Errorf("insert %v: array %d is not known on PE %d yet", ix, a.Coll, ctx.PE()))
		return
	}
	if err := ctx.m.Insert(c, ix, onPE, manager.Lazy{V: arg}); err != nil {
		ctx.Fail(err)
	}
}

// DoneInserting ends the insertion phase of a sparse array: reductions
// over it complete, and broadcasts to it reach every element inserted
// before the call (on each PE, once every insertion made for it arrived).
func (a ArrayProxy[C]) DoneInserting(ctx *Ctx) {
	c := ctx.m.Collection(a.Coll)
	if c == nil {
		ctx.Fail(fmt.Errorf("DoneInserting: array %d is not known on PE %d yet", a.Coll, ctx.PE()))
		return
	}
	ctx.m.DoneInserting(c)
}

// Migrate moves element e to PE p, wherever it is now.
func (e ElemProxy[C]) Migrate(ctx *Ctx, p int) {
	if err := ctx.m.MigrateElement(e.Coll, e.Index, p); err != nil {
		ctx.Fail(err)
	}
}

// Delete removes element e, wherever it is now.
func (e ElemProxy[C]) Delete(ctx *Ctx) { ctx.m.DeleteElement(e.Coll, e.Index) }

// Section makes a section of the array from a list of indices. The calling
// PE becomes the root of the section's multicast and reduction tree.
func (a ArrayProxy[C]) Section(ctx *Ctx, members []Index) SectionProxy[C] {
	c := ctx.m.Collection(a.Coll)
	if c == nil {
		ctx.Fail(fmt.Errorf("section: array %d is not known on PE %d yet", a.Coll, ctx.PE()))
		return SectionProxy[C]{}
	}
	id, err := ctx.m.NewSection(c, members)
	if err != nil {
		ctx.Fail(err)
		return SectionProxy[C]{}
	}
	return SectionProxy[C]{Coll: a.Coll, Sec: id}
}

// SectionWhere makes a section of the elements of a bounded array whose
// index satisfies keep.
func (a ArrayProxy[C]) SectionWhere(ctx *Ctx, keep func(Index) bool) SectionProxy[C] {
	c := ctx.m.Collection(a.Coll)
	if c == nil || c.Bounds == nil {
		ctx.Fail(fmt.Errorf("section: array %d is not a bounded array known on PE %d", a.Coll, ctx.PE()))
		return SectionProxy[C]{}
	}
	var members []Index
	forEach(c.Bounds, func(ix Index) {
		if keep(ix) {
			members = append(members, ix)
		}
	})
	return a.Section(ctx, members)
}

func forEach(bounds []int, f func(Index)) {
	n := 1
	for _, b := range bounds {
		n *= b
	}
	for lin := 0; lin < n; lin++ {
		var ix Index
		ix.Dims = uint8(len(bounds))
		r := lin
		for d := len(bounds) - 1; d >= 0; d-- {
			ix.C[d] = int32(r % bounds[d])
			r /= bounds[d]
		}
		f(ix)
	}
}

// Send invokes the entry on one element, asynchronously.
//
// Small messages without pointers (numbers, small structs of numbers: up to
// 16 bytes) travel inside the envelope: such a send allocates nothing.
func (en *Entry[C, M]) Send(ctx *Ctx, to ElemProxy[C], msg M) {
	env := pe.Envelope{Type: en.id, Coll: to.Coll, Kind: pe.KindP2P, Index: to.Index}
	if en.inline {
		env.Flags = manager.FlagInline
		*(*M)(env.Inline()) = msg
	} else {
		env.Payload = msg
	}
	if err := ctx.m.SendEnvFrom(ctx.e, &env); err != nil {
		ctx.Fail(err)
	}
}

// Broadcast invokes the entry on every element of an array or group.
func (en *Entry[C, M]) Broadcast(ctx *Ctx, to Collection[C], msg M) {
	if to.collection(nil) == 0 {
		ctx.Fail(fmt.Errorf("broadcast %s: the proxy was never made (zero value)", en.name))
		return
	}
	ctx.m.BroadcastFrom(ctx.e, to.collection(nil), en.id, msg)
}

// Multicast invokes the entry on every member of a section.
func (en *Entry[C, M]) Multicast(ctx *Ctx, to SectionProxy[C], msg M) {
	if to.Sec == 0 {
		ctx.Fail(fmt.Errorf("multicast %s: the section proxy was never made (zero value)", en.name))
		return
	}
	ctx.m.MulticastFrom(ctx.e, to.Coll, to.Sec, en.id, msg)
}

// Callback is where a reduction result (or a future value) of type R goes.
type Callback[R any] struct{ CB manager.Callback }

// CallbackTo sends results to this entry of one element.
func (en *Entry[C, M]) CallbackTo(to ElemProxy[C]) Callback[M] {
	return Callback[M]{CB: manager.Callback{Kind: manager.CBElem, Coll: to.Coll, Index: to.Index, Entry: en.id}}
}

// CallbackBroadcast broadcasts results to this entry of an array or group.
func (en *Entry[C, M]) CallbackBroadcast(to Collection[C]) Callback[M] {
	return Callback[M]{CB: manager.Callback{Kind: manager.CBBroadcast, Coll: to.collection(nil), Entry: en.id}}
}

// MainProxy is the proxy of the main chare.
func (t *Type[C, A]) MainProxy() ElemProxy[C] {
	return ElemProxy[C]{Coll: manager.MainCollection, Index: pe.Index{Dims: 1}}
}
