// Package chare is charmgo's user API: chare types and their typed entry
// methods, proxies to arrays (1D–6D), groups, sections and the main chare,
// asynchronous sends, broadcasts and multicasts, reductions with callbacks
// and futures, migration, AtSync, quiescence and Exit.
//
// A chare is a Go value that lives on one PE at a time and is only touched
// by its entry methods, which its PE runs one at a time: chare code needs no
// locks. Messages are handed over on send: the sender must not change a
// payload after sending it (in process it is passed by reference; between
// processes, and under --wire-check, it is encoded with msgpack).
//
// A chare's state migrates and is checkpointed as msgpack of its exported
// fields, or through Pack/Unpack when it implements Migratable; a type
// whose state msgpack would not bring back whole is refused when it is
// registered (see NewType).
package chare

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// Index is an array index of 1 to 6 integer coordinates.
type Index = pe.Index

// Idx builds an index: Idx(1, 2, 3).
func Idx(c ...int) Index { return pe.Idx(c...) }

// Migratable is implemented by chares that pack their own state for
// migration and checkpoints instead of msgpack of their exported fields.
type Migratable interface {
	Pack() ([]byte, error)
	Unpack([]byte) error
}

// Migrated is implemented by chares that want to act after arriving on a
// new PE (Charm++'s ckJustMigrated).
type Migrated interface {
	Migrated(ctx *Ctx)
}

// ResumeFromSync is implemented by chares that call AtSync: it runs when
// the load-balancing step the chare waited for is over.
type ResumeFromSync interface {
	ResumeFromSync(ctx *Ctx)
}

type typeInfo struct {
	id         uint32
	name       string
	kind       manager.CollKind
	alloc      func() any
	construct  func(obj any, ctx *Ctx, arg manager.Lazy) error
	unpack     func(b []byte) (any, error)
	migratable bool
	threaded   bool // the constructor may block on futures (main)
}

type entryInfo struct {
	name     string
	typ      uint32 // owning chare type
	threaded bool
	measured bool // its messages carry measurements (Measurement)
	invoke   func(obj any, ctx *Ctx, env *pe.Envelope)
}

// The registries of chare types and entry methods: ids derived from names
// (pe.Registry), filled at package initialization, so every process agrees
// on them and dispatch reads them without a lock. An entry method's id is
// its message type's.
var (
	chareTypes = pe.NewRegistry[*typeInfo]("chare type")
	entries    = pe.NewRegistry[*entryInfo]("entry method")
)

func lookupEntry(id uint32) *entryInfo {
	e, _ := entries.Get(id)
	return e
}

func lookupType(id uint32) *typeInfo {
	t, _ := chareTypes.Get(id)
	return t
}

// sealRegistries ends registration (a run starts): a type, entry method,
// reducer or placement function a message may name must be registered at
// package level, where every process of the job registers it too.
func sealRegistries() {
	chareTypes.Seal()
	entries.Seal()
	continuations.Seal()
	manager.SealRegistries()
}

// Type is a registered chare type C whose constructor takes an A.
type Type[C any, A any] struct {
	info *typeInfo
}

// TypeOption changes how a chare type is registered.
type TypeOption func(*typeInfo)

// NotMigratable keeps elements of the type on the PE they were created on
// (load balancers leave them alone).
func NotMigratable() TypeOption { return func(t *typeInfo) { t.migratable = false } }

// NewType registers chare type C, whose elements are built by their
// Init(ctx, arg A) method (the constructor entry method). Unless C
// implements Migratable, its state is msgpack of its exported fields, and
// a C holding something msgpack would not bring back whole after a
// migration, a checkpoint or a restart — an unexported field, a channel, a
// function, a complex number, an interface — panics here, naming the
// field (tag one msgpack:"-" that need not survive). The name must be
// the same in every process of a job: register at package level,
//
//	var Cells = chare.NewType[Cell, CellArgs]("leanmd.Cell")
func NewType[C any, A any, PC interface {
	*C
	Init(*Ctx, A)
}](name string, opts ...TypeOption) *Type[C, A] {
	t := &typeInfo{name: name, kind: manager.CollArray, migratable: true}
	t.alloc = func() any { return new(C) }
	t.construct = func(obj any, ctx *Ctx, l manager.Lazy) error {
		a, err := manager.LazyAs[A](l)
		if err != nil {
			return fmt.Errorf("constructor argument: %w", err)
		}
		PC(obj.(*C)).Init(ctx, a)
		return nil
	}
	t.unpack = func(b []byte) (any, error) {
		c := new(C)
		if mg, ok := any(c).(Migratable); ok {
			return c, mg.Unpack(b)
		}
		return c, pe.UnmarshalMsgpack(b, c)
	}
	for _, o := range opts {
		o(t)
	}
	if err := checkState(reflect.TypeFor[C]()); err != nil {
		panic(fmt.Sprintf("chare.NewType(%q): %v: its state would not survive a migration or a checkpoint (export the field, tag it msgpack:\"-\" if it need not survive, or give %s Pack and Unpack)", name, err, reflect.TypeFor[C]().Name()))
	}
	id, err := chareTypes.Add(name, t)
	if err != nil {
		panic("chare.NewType: " + err.Error())
	}
	t.id = id
	return &Type[C, A]{info: t}
}

// NewMainType registers the main chare type: its Init runs once, on PE 0,
// with the program's arguments, and may block on futures.
func NewMainType[C any, PC interface {
	*C
	Init(*Ctx, []string)
}](name string) *Type[C, []string] {
	t := NewType[C, []string, PC](name, NotMigratable())
	t.info.kind = manager.CollMain
	t.info.threaded = true
	return t
}

// NewMainTypeOf registers a main chare type whose Init takes a value of
// the program's own (its parameters) instead of the command line's
// arguments; RunWith hands it the value.
func NewMainTypeOf[C any, A any, PC interface {
	*C
	Init(*Ctx, A)
}](name string) *Type[C, A] {
	t := NewType[C, A, PC](name, NotMigratable())
	t.info.kind = manager.CollMain
	t.info.threaded = true
	return t
}

// Name is the type's registered name.
func (t *Type[C, A]) Name() string { return t.info.name }

// Entry is a typed entry method of chare type C taking an M.
type Entry[C any, M any] struct {
	id     uint32
	name   string
	inline bool // M travels in the envelope, not boxed in an interface
}

// EntryOption changes how an entry method runs.
type EntryOption func(*entryInfo)

// Threaded lets the entry method block on futures (Charm++'s [threaded]):
// its PE runs other messages meanwhile and resumes it when the future is
// filled. It costs a goroutine per invocation.
func Threaded() EntryOption { return func(e *entryInfo) { e.threaded = true } }

// Measurement says the entry's messages carry measurements — times,
// loads, sizes of memory — which differ from one execution to the next
// whatever the program does. The checks that a program sends the same
// messages in every execution (--ft-verify, ftsim.DiffSends; see
// docs/SPMD.md) then compare that such a message was sent, not its
// contents. Nothing the program sends after it may depend on them.
func Measurement() EntryOption { return func(e *entryInfo) { e.measured = true } }

// NewEntry registers method, a method expression of C such as
// (*Block).Ghost, as an entry method taking an M: a misspelt method or a
// wrong message type is a compile error. The entry is named after the
// method (type.Method), the same in every process of a job.
//
// Go forbids a package-level variable whose initializer refers to a
// method that refers back to the variable (an "initialization cycle"),
// and an entry method usually sends to entries of its own type: declare
// entries as variables and register them in an init function,
//
//	var ghost *chare.Entry[Block, Ghost]
//
//	func init() { ghost = chare.NewEntry(blocks, (*Block).Ghost) }
//
// (an entry none of whose methods refers back may be a package-level
// var with its initializer, as in examples/hello).
func NewEntry[C any, A any, M any](t *Type[C, A], method func(*C, *Ctx, M), opts ...EntryOption) *Entry[C, M] {
	name, err := methodName[C](method)
	if err != nil {
		panic("chare.NewEntry: " + err.Error())
	}
	return NewEntryFunc(t, name, method, opts...)
}

// methodName is the name of fn, a method expression of C's ((*C).Name
// or C.Name), from its symbol; an error if fn is not one (a function
// literal, another type's method).
func methodName[C any](fn any) (string, error) {
	v := reflect.ValueOf(fn)
	if v.IsNil() {
		return "", errors.New("a nil method")
	}
	ptr, val := reflect.TypeFor[*C](), reflect.TypeFor[C]()
	sym := ""
	if f := runtime.FuncForPC(v.Pointer()); f != nil {
		sym = f.Name()
	}
	i := strings.LastIndex(sym, ").")
	name := ""
	if i >= 0 {
		name = sym[i+2:]
	}
	if _, ok := ptr.MethodByName(name); name == "" || !ok {
		return "", fmt.Errorf("%s is not a method expression of %s (such as (*%s).Method); to register a function, name it with NewEntryFunc", sym, ptr, val.Name())
	}
	return name, nil
}

// NewEntryNamed registers the exported method of C named method as an
// entry method taking an M, looked up by reflection: a misspelt name or
// a wrong type panics when the program starts. Prefer NewEntry, which
// the compiler checks; this form is for names that come from data (a
// tool registering what a file lists).
func NewEntryNamed[M any, C any, A any](t *Type[C, A], method string, opts ...EntryOption) *Entry[C, M] {
	mt, ok := reflect.TypeFor[*C]().MethodByName(method)
	if !ok {
		panic(fmt.Sprintf("chare.NewEntryNamed: %s has no exported method %s", reflect.TypeFor[*C](), method))
	}
	fn, ok := mt.Func.Interface().(func(*C, *Ctx, M))
	if !ok {
		panic(fmt.Sprintf("chare.NewEntryNamed: %s.%s is %s, want func(*Ctx, %s)", reflect.TypeFor[*C](), method, mt.Type, reflect.TypeFor[M]()))
	}
	return NewEntryFunc(t, method, fn, opts...)
}

// NewEntryFunc registers fn as entry method name of t: a function that
// is not a method of C (a closure, a method of another type), named by
// the caller.
func NewEntryFunc[C any, A any, M any](t *Type[C, A], name string, fn func(*C, *Ctx, M), opts ...EntryOption) *Entry[C, M] {
	full := t.info.name + "." + name
	ei := &entryInfo{name: full, typ: t.info.id}
	for _, o := range opts {
		o(ei)
	}
	codec := manager.MsgpackCodec[M]()
	id := pe.RegisterType(pe.TypeInfo{Name: full, Encode: codec.Encode, Append: codec.Append, Decode: codec.Decode, Measured: ei.measured})
	ei.invoke = func(obj any, ctx *Ctx, env *pe.Envelope) {
		var m M
		if env.Flags == manager.FlagInline {
			m = *(*M)(env.Inline())
		} else if env.Payload != nil {
			var ok bool
			if m, ok = env.Payload.(M); !ok {
				panic(fmt.Sprintf("entry %s takes %s, got %T", full, reflect.TypeFor[M](), env.Payload))
			}
		}
		fn(obj.(*C), ctx, m)
	}
	if eid, err := entries.Add(full, ei); err != nil || eid != id {
		panic(fmt.Sprintf("chare.NewEntry: entry method %s: %v (id %#x, message type %#x)", full, err, eid, id))
	}
	return &Entry[C, M]{id: id, name: full, inline: inlinable(reflect.TypeFor[M]())}
}

// inlinable reports whether values of t can travel in an envelope's inline
// area: small enough, and holding no pointers the garbage collector would
// need to see.
func inlinable(t reflect.Type) bool {
	return t.Size() <= pe.InlineSize && t.Size() > 0 && pointerFree(t)
}

func pointerFree(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return pointerFree(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if !pointerFree(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// Name is the entry's full name (type.entry).
func (e *Entry[C, M]) Name() string { return e.name }

// host implements manager.Host for one PE.
type host struct {
	ctx     Ctx        // reused for every non-threaded invocation
	running *entryInfo // the entry method Invoke runs (for Panicked)
	lastID  uint32     // the entry method Invoke looked up last
	lastEnt *entryInfo
	futures map[uint64]*futureState
	nextFut uint64
	qd      map[uint64]manager.Callback
	nextQD  uint64
	run     *runState
	// unresumed: the collections whose elements a load-balancing step
	// resumed here with no ResumeFromSync to run: a dump says so, in
	// case nothing else drives them (Waits)
	unresumed map[uint32]bool
}

func identity(m *manager.Manager, e *manager.Element) string {
	return fmt.Sprintf("%s%v on PE %d", e.Coll.Name, e.Index, m.Me())
}

func (h *host) Construct(m *manager.Manager, e *manager.Element, arg manager.Lazy) {
	ti := lookupType(e.Coll.Type)
	if ti == nil {
		m.Fail(fmt.Errorf("%s: unknown chare type %d", identity(m, e), e.Coll.Type))
		return
	}
	// The object exists while Init runs: a threaded Init (main) may wait
	// on futures while the chare's other entry methods run.
	e.Obj = ti.alloc()
	call := func(ctx *Ctx) {
		if err := ti.construct(e.Obj, ctx, arg); err != nil {
			m.Fail(fmt.Errorf("%s: construct %s: %w", identity(m, e), ti.name, err))
		}
	}
	if ti.threaded {
		h.runThreaded(m, e, "constructor", call, func() {
			if e.Coll.Kind == manager.CollMain {
				// main returned: end the run once nothing is left to do.
				m.StartQD(manager.EndQDTag)
			}
		})
		return
	}
	h.guard(m, e, "constructor", call)
}

// guard runs f as entry method `what` of e, turning a panic into an error
// that names the chare and ends the run.
func (h *host) guard(m *manager.Manager, e *manager.Element, what string, f func(ctx *Ctx)) {
	ctx := &h.ctx
	saved := *ctx // entry methods nest when one creates an array
	ctx.m, ctx.e, ctx.th, ctx.hasRef = m, e, nil, false
	defer func() {
		if r := recover(); r != nil {
			m.Fail(fmt.Errorf("%s: %s panicked: %v\n%s", identity(m, e), what, r, debug.Stack()))
		}
		*ctx = saved
	}()
	f(ctx)
}

func (h *host) Invoke(m *manager.Manager, e *manager.Element, env *pe.Envelope) {
	// Runs of one entry method are common (a stream, a ping-pong): the
	// last one found is kept before the registry is asked.
	ent := h.lastEnt
	if env.Type != h.lastID || ent == nil {
		ent = lookupEntry(env.Type)
		h.lastID, h.lastEnt = env.Type, ent
	}
	if ent == nil {
		m.Fail(fmt.Errorf("%s: message %s is not an entry method", identity(m, e), pe.TypeName(env.Type)))
		return
	}
	if ent.typ != e.Coll.Type {
		m.Fail(fmt.Errorf("%s: entry %s belongs to another chare type", identity(m, e), ent.name))
		return
	}
	if e.Obj == nil {
		m.Fail(fmt.Errorf("%s: entry %s reached an element that was never constructed", identity(m, e), ent.name))
		return
	}
	if ent.threaded {
		own := *env // the queue slot is reused once Invoke returns
		h.runThreaded(m, e, ent.name, func(ctx *Ctx) { ent.invoke(e.Obj, ctx, &own) }, nil)
		return
	}
	// guard's logic, inline and without its deferred recover: a panic
	// leaves the PE's loop, which recovers once and asks Panicked, and
	// the run ends, so ctx need not be restored on the way out.
	ctx := &h.ctx
	saved, outer := *ctx, h.running
	ctx.m, ctx.e, ctx.th = m, e, nil
	h.running = ent
	ent.invoke(e.Obj, ctx, env)
	*ctx, h.running = saved, outer
}

// Panicked reports a panic that left the entry method Invoke was running.
func (h *host) Panicked(m *manager.Manager, r any, stack []byte) bool {
	if h.running == nil || h.ctx.e == nil {
		return false
	}
	m.Fail(fmt.Errorf("%s: entry %s panicked: %v\n%s", identity(m, h.ctx.e), h.running.name, r, stack))
	return true
}

func (h *host) Pack(e *manager.Element) ([]byte, error) {
	if ti := lookupType(e.Coll.Type); ti != nil && !ti.migratable {
		return nil, fmt.Errorf("chare type %s is not migratable", ti.name)
	}
	if mg, ok := e.Obj.(Migratable); ok {
		return mg.Pack()
	}
	return msgpack.Marshal(e.Obj)
}

// Checkpoint packs any chare, migratable or not: msgpack, or its own Pack.
func (h *host) Checkpoint(e *manager.Element) ([]byte, error) {
	if mg, ok := e.Obj.(Migratable); ok {
		return mg.Pack()
	}
	return msgpack.Marshal(e.Obj)
}

// Restore rebuilds a chare from its checkpoint.
func (h *host) Restore(m *manager.Manager, e *manager.Element, state []byte) error {
	ti := lookupType(e.Coll.Type)
	if ti == nil {
		return fmt.Errorf("unknown chare type %d", e.Coll.Type)
	}
	obj, err := ti.unpack(state)
	if err != nil {
		return err
	}
	e.Obj = obj
	return nil
}

func (h *host) Unpack(m *manager.Manager, e *manager.Element, state []byte) error {
	if err := h.Restore(m, e, state); err != nil {
		return err
	}
	if mg, ok := e.Obj.(Migrated); ok {
		h.guard(m, e, "Migrated", mg.Migrated)
	}
	return nil
}

func (h *host) ResumeFromSync(m *manager.Manager, e *manager.Element) {
	if r, ok := e.Obj.(ResumeFromSync); ok {
		h.guard(m, e, "ResumeFromSync", r.ResumeFromSync)
		return
	}
	if h.unresumed == nil {
		h.unresumed = map[uint32]bool{}
	}
	h.unresumed[e.Coll.ID] = true
}

func (h *host) Quiescent(m *manager.Manager, tag uint64) {
	switch tag {
	case manager.QuietEndsTag: // quiet, as the program said it ends: unless it left work unfinished
		node := m.PE.Node()
		m.CheckQuiet(func() { node.Stop(0) })
		return
	case manager.EndQDTag: // quiet before the program ended it
		m.CheckQuiet(nil)
		return
	}
	cb, ok := h.qd[tag]
	if !ok {
		return
	}
	delete(h.qd, tag)
	m.DeliverCallback(cb, struct{}{})
}

// Pending implements manager.Host: entry methods blocked on futures.
func (h *host) Pending(m *manager.Manager) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(h.futures)) {
		if st := h.futures[id]; st.waiter != nil {
			out = append(out, fmt.Sprintf("%s on PE %d waits on future %d, which nothing filled", st.waiter.what, m.Me(), id))
		}
	}
	return out
}
