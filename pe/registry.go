package pe

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
)

// Registry holds values registered under names, each with an id derived
// from its name alone (a hash), so every process of a job — whatever order
// its packages registered things in — gives a name the same id without
// talking to the others, and ids in messages and checkpoint files mean
// the same everywhere. Values are registered at package initialization;
// once Seal is called (when a run starts) a new name is an error, so a
// value a message may name is known in every process before the first
// message. Lookups by id take no lock and no allocation.
type Registry[T any] struct {
	what   string // what the values are, for errors ("message type")
	mu     sync.Mutex
	names  map[string]uint32
	tab    atomic.Pointer[idTable[T]]
	sealed atomic.Bool
}

// NewRegistry makes an empty registry of what ("message type", "reducer").
func NewRegistry[T any](what string) *Registry[T] {
	return &Registry[T]{what: what, names: map[string]uint32{}}
}

// NameID is the id a registry gives name: a 32-bit FNV-1a hash, never 0.
func NameID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	if id := h.Sum32(); id != 0 {
		return id
	}
	return 1
}

// Add registers v under name and returns its id. A name registered
// already, another name with the same id (a hash collision: rename one),
// or a new name after Seal is an error.
func (r *Registry[T]) Add(name string, v T) (uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.names[name]; dup {
		return 0, fmt.Errorf("a %s named %q is registered already", r.what, name)
	}
	if r.sealed.Load() {
		return 0, fmt.Errorf("%s %q registered after a run started: register it at package level (var x = ...), so that every process knows it before any message names it", r.what, name)
	}
	id := NameID(name)
	old := r.tab.Load()
	if old != nil {
		if e, ok := old.find(id); ok {
			return 0, fmt.Errorf("%s names %q and %q have the same id %#x: rename one", r.what, e.name, name, id)
		}
	}
	r.names[name] = id
	r.tab.Store(old.with(idEntry[T]{id: id, name: name, v: v}))
	return id, nil
}

// Get returns the value registered under id.
func (r *Registry[T]) Get(id uint32) (T, bool) {
	if t := r.tab.Load(); t != nil {
		if e, ok := t.find(id); ok {
			return e.v, true
		}
	}
	var zero T
	return zero, false
}

// ID returns the id of the value registered under name.
func (r *Registry[T]) ID(name string) (uint32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.names[name]
	return id, ok
}

// Name returns the name registered under id ("" if none).
func (r *Registry[T]) Name(id uint32) string {
	if t := r.tab.Load(); t != nil {
		if e, ok := t.find(id); ok {
			return e.name
		}
	}
	return ""
}

// Digest is a hash of every registered name: processes of one job, which
// must know the same names, compare it when they meet.
func (r *Registry[T]) Digest() uint64 {
	r.mu.Lock()
	names := make([]string, 0, len(r.names))
	for n := range r.names {
		names = append(names, n)
	}
	r.mu.Unlock()
	slices.Sort(names)
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// Seal ends registration of new names (Add of a known name still says it
// is a duplicate).
func (r *Registry[T]) Seal() { r.sealed.Store(true) }

// idTable is an open-addressing table keyed by id (a hash already: its
// low bits place it), replaced whole on every registration.
type idTable[T any] struct {
	mask    uint32
	entries []idEntry[T] // id 0: empty
	n       int
}

type idEntry[T any] struct {
	id   uint32
	name string
	v    T
}

func (t *idTable[T]) find(id uint32) (idEntry[T], bool) {
	for i := id & t.mask; ; i = (i + 1) & t.mask {
		e := t.entries[i]
		if e.id == id {
			return e, true
		}
		if e.id == 0 {
			return idEntry[T]{}, false
		}
	}
}

// with returns a new table holding t's entries and e (at most half full).
func (t *idTable[T]) with(e idEntry[T]) *idTable[T] {
	n := 1
	if t != nil {
		n += t.n
	}
	size := uint32(16)
	for int(size) < 2*n {
		size *= 2
	}
	out := &idTable[T]{mask: size - 1, entries: make([]idEntry[T], size), n: n}
	put := func(e idEntry[T]) {
		i := e.id & out.mask
		for out.entries[i].id != 0 {
			i = (i + 1) & out.mask
		}
		out.entries[i] = e
	}
	if t != nil {
		for _, x := range t.entries {
			if x.id != 0 {
				put(x)
			}
		}
	}
	put(e)
	return out
}
