package chare

import (
	"fmt"
	"reflect"

	"github.com/charmgo/charmgo/pe"
)

// Gather buffers messages by reference number (an iteration, a step) and
// runs a continuation once the number of them an element waits for has
// arrived: Charm++'s SDAG `when ghost[iter]`, in plain Go. Messages may
// come in any order: before the element reached their number, while it
// waits for another, while it waits at AtSync. A Gather is a field of the
// chare's state, so it migrates and is checkpointed with the element; it
// needs no goroutine.
//
//	type Block struct {
//		Iter   int64
//		Ghosts chare.Gather[Ghost] // by iteration
//	}
//
//	func (b *Block) Ghost(ctx *chare.Ctx, g Ghost) { b.Ghosts.Put(ctx, g.Iter, g) } // an entry
//
//	func (b *Block) iterate(ctx *chare.Ctx) {
//		... send this iteration's ghosts ...
//		chare.When(ctx, &b.Ghosts, b.Iter, 4, compute) // compute's method runs when all 4 are in
//	}
//
// Several entry methods may put into one Gather when their messages share
// a type (a small struct with a field per kind, say). The messages reach
// the continuation in the order they arrived, which varies from run to
// run: sort them (by sender) where the order changes a result.
//
// Its fields are exported so that the element's state carries them; read
// and change them only through Put and When.
type Gather[M any] struct {
	Refs []GatherRef[M] // the messages buffered, by reference number
	Want GatherWait     // what When waits for (Then 0: nothing)
}

// GatherRef is the messages a Gather holds for one reference number.
type GatherRef[M any] struct {
	Ref  int64
	Msgs []M
}

// GatherWait is what a Gather's element waits for: N messages numbered
// Ref, then the continuation whose id is Then.
type GatherWait struct {
	Ref  int64
	N    int
	Then uint32
}

// Put buffers m, numbered ref, and runs the continuation When waits with
// if m completes what it waits for. The reference number is the
// runtime's to see (Ctx.RefNum) for the delivery that put it.
func (g *Gather[M]) Put(ctx *Ctx, ref int64, m M) {
	ctx.ref, ctx.hasRef = ref, true
	i := g.find(ref)
	if i < 0 {
		g.Refs = append(g.Refs, GatherRef[M]{Ref: ref})
		i = len(g.Refs) - 1
	}
	g.Refs[i].Msgs = append(g.Refs[i].Msgs, m)
	if w := g.Want; w.Then != 0 && w.Ref == ref && len(g.Refs[i].Msgs) >= w.N {
		g.fire(ctx, i)
	}
}

// Len is how many messages numbered ref the Gather holds.
func (g *Gather[M]) Len(ref int64) int {
	if i := g.find(ref); i >= 0 {
		return len(g.Refs[i].Msgs)
	}
	return 0
}

func (g *Gather[M]) find(ref int64) int {
	for i := range g.Refs {
		if g.Refs[i].Ref == ref {
			return i
		}
	}
	return -1
}

// fire hands the first Want.N messages of Refs[i] to the continuation
// When waits with, which owns them (it may keep the slice).
func (g *Gather[M]) fire(ctx *Ctx, i int) {
	w := g.Want
	g.Want = GatherWait{}
	r := &g.Refs[i]
	msgs := r.Msgs[:w.N:w.N]
	if rest := r.Msgs[w.N:]; len(rest) > 0 {
		r.Msgs = append([]M(nil), rest...)
	} else {
		last := len(g.Refs) - 1
		g.Refs[i] = g.Refs[last]
		g.Refs[last] = GatherRef[M]{}
		g.Refs = g.Refs[:last]
	}
	c, ok := continuations.Get(w.Then)
	if !ok {
		ctx.Fail(fmt.Errorf("chare.Gather: a continuation with id %#x is not registered (a state from another program?)", w.Then))
		return
	}
	if ctx.m != nil && ctx.m.PE.Recording() { // (nil: the package's tests of Gather alone)
		p := ctx.m.PE
		// the trace shows the continuation as a span of its own, not
		// as time of the entry whose message completed it
		was := p.SwitchEntry(w.Then)
		c.call(ctx, msgs)
		p.SwitchEntry(was)
		return
	}
	c.call(ctx, msgs)
}

// When runs then's method with the n messages numbered ref that g
// gathers: now, if they are all in, or in the Put that brings the last of
// them. A Gather waits for one thing at a time: a second When before the
// first was met replaces it. n < 1 runs it now with none.
func When[C any, M any](ctx *Ctx, g *Gather[M], ref int64, n int, then *Continuation[C, M]) {
	g.Want = GatherWait{Ref: ref, N: max(n, 0), Then: then.id}
	if n < 1 {
		g.fire(ctx, g.ensure(ref))
		return
	}
	if i := g.find(ref); i >= 0 && len(g.Refs[i].Msgs) >= n {
		g.fire(ctx, i)
	}
}

// ensure returns the index of ref's entry in Refs, adding an empty one.
func (g *Gather[M]) ensure(ref int64) int {
	if i := g.find(ref); i >= 0 {
		return i
	}
	g.Refs = append(g.Refs, GatherRef[M]{Ref: ref})
	return len(g.Refs) - 1
}

// RefNum is the reference number the running entry method put its
// message under (Gather.Put), and whether it did: a delivery whose
// message is gathered by number does not depend on the order it came in
// among its number's others.
func (c *Ctx) RefNum() (int64, bool) { return c.ref, c.hasRef }

// Continuation is a method of chare type C that a Gather of M runs with
// the messages it gathered (see When).
type Continuation[C any, M any] struct {
	id   uint32
	name string
}

// Name is the continuation's full name (type.Method).
func (c *Continuation[C, M]) Name() string { return c.name }

type contInfo struct {
	name string
	call func(ctx *Ctx, msgs any)
}

// continuations is the registry of continuations, like entries': ids
// from names, so that an id in a migrated or checkpointed Gather means
// the same method in every process.
var continuations = pe.NewRegistry[*contInfo]("continuation")

// NewContinuation registers method, a method expression of C such as
// (*Block).Compute, as a continuation of Gathers of M: When names it, and
// the Gather runs it with the messages it gathered. Register it as an
// entry is registered (in an init function, see NewEntry).
func NewContinuation[C any, A any, M any](t *Type[C, A], method func(*C, *Ctx, []M)) *Continuation[C, M] {
	name, err := methodName[C](method)
	if err != nil {
		panic("chare.NewContinuation: " + err.Error())
	}
	full := t.info.name + "." + name
	ci := &contInfo{name: full}
	ci.call = func(ctx *Ctx, msgs any) {
		obj, ok := ctx.e.Obj.(*C)
		if !ok {
			ctx.Fail(fmt.Errorf("continuation %s is a method of %s, but the Gather belongs to a %T", full, reflect.TypeFor[*C](), ctx.e.Obj))
			return
		}
		method(obj, ctx, msgs.([]M))
	}
	id, err := continuations.Add(full, ci)
	if err != nil {
		panic("chare.NewContinuation: " + err.Error())
	}
	return &Continuation[C, M]{id: id, name: full}
}
