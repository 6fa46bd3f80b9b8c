package chare

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/charmgo/charmgo/internal/textlist"
	"github.com/charmgo/charmgo/manager"
)

// What elements wait for, for the dumps of a run that stalled or went
// quiet: the Gathers of their state that wait for messages.

// gatherState is implemented by every Gather: what it waits for and what
// it holds, for a dump.
type gatherState interface {
	waitState() (want GatherWait, have int, held map[int64]int)
}

func (g *Gather[M]) waitState() (GatherWait, int, map[int64]int) {
	held := map[int64]int{}
	for _, r := range g.Refs {
		if r.Ref != g.Want.Ref || g.Want.Then == 0 {
			held[r.Ref] = len(r.Msgs)
		}
	}
	return g.Want, g.Len(g.Want.Ref), held
}

// Waits implements manager.Host: the arrays whose elements here a
// balancing step resumed with nothing to run (no ResumeFromSync), and
// every element of this PE whose state has a Gather waiting (When) for
// messages, with the reference number, the count it waits for and has,
// and what else it holds.
func (h *host) Waits(m *manager.Manager) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(h.unresumed)) {
		c := m.Collection(id)
		if c == nil || len(c.Locals()) == 0 {
			continue
		}
		t := "its type"
		if ti := lookupType(c.Type); ti != nil {
			t = fmt.Sprint(reflect.TypeOf(ti.alloc()))
		}
		out = append(out, fmt.Sprintf("%d elements of %s here were resumed after AtSync with nothing to run: %s has no method ResumeFromSync(ctx *chare.Ctx) (an element other messages drive needs none)", len(c.Locals()), c.Name, t))
	}
	names := m.CollectionNames()
	for _, id := range slices.Sorted(maps.Keys(names)) {
		c := m.Collection(id)
		for _, e := range c.Locals() {
			if e.Obj == nil {
				continue
			}
			for _, g := range gathersOf(e.Obj) {
				want, have, held := g.state.waitState()
				if want.Then == 0 {
					continue
				}
				then := fmt.Sprintf("continuation %#x (not registered)", want.Then)
				if ci, ok := continuations.Get(want.Then); ok {
					then = ci.name
				}
				line := fmt.Sprintf("%s%v waits in its Gather %s for %d messages numbered %d (%d in), then runs %s", c.Name, e.Index, g.field, want.N, want.Ref, have, then)
				if len(held) > 0 {
					var refs []string
					for _, r := range slices.Sorted(maps.Keys(held)) {
						refs = append(refs, fmt.Sprintf("%d numbered %d", held[r], r))
					}
					line += "; it holds " + textlist.Elide(refs, 6)
				}
				out = append(out, line)
			}
		}
	}
	return out
}

type namedGather struct {
	field string // the field's path in the chare's state: In, Halo.North
	state gatherState
}

// gathersOf finds the Gathers among the exported fields of the chare obj
// (a pointer to a struct), in structs it holds by value too.
func gathersOf(obj any) []namedGather {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	var out []namedGather
	var walk func(v reflect.Value, path string, depth int)
	walk = func(v reflect.Value, path string, depth int) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			fv := v.Field(i)
			name := f.Name
			if path != "" {
				name = path + "." + f.Name
			}
			if g, ok := fv.Addr().Interface().(gatherState); ok {
				out = append(out, namedGather{name, g})
				continue
			}
			if fv.Kind() == reflect.Struct && depth < 4 {
				walk(fv, name, depth+1)
			}
		}
	}
	walk(v.Elem(), "", 0)
	return out
}

// misspeltResumeFromSync is the error of an element calling AtSync
// whose type has no ResumeFromSync(ctx *Ctx) but a method spelt near it
// (ResumeFromSynch, or ResumeFromSync with another signature): Go takes
// it for just another method, so nothing would resume the element once
// the balancer is done, and the run would go quiet with no word of why.
// nil where the type has none: an element without ResumeFromSync may
// be driven by other messages (LeanMD's computes are).
func misspeltResumeFromSync(obj any) error {
	t := reflect.TypeOf(obj)
	var near []string
	for i := range t.NumMethod() {
		m := t.Method(i)
		if editDistance(strings.ToLower(m.Name), "resumefromsync") > 2 {
			continue
		}
		var params []string
		for j := 1; j < m.Type.NumIn(); j++ { // In(0) is the receiver
			params = append(params, m.Type.In(j).String())
		}
		near = append(near, fmt.Sprintf("%s(%s)", m.Name, strings.Join(params, ", ")))
	}
	if len(near) == 0 {
		return nil
	}
	return fmt.Errorf("AtSync: %v has no method ResumeFromSync(ctx *chare.Ctx), so nothing would resume it once the load-balancing step is done (it has %s: misspelt, or another signature?)", t, strings.Join(near, ", "))
}
