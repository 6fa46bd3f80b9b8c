package fttest

import (
	"encoding/binary"

	"github.com/charmgo/charmgo/ftlayer"
)

// Ring passes a token around the PEs for Laps laps; every holder also sends
// a side message two PEs on, so receptions interleave and their order
// matters to the state.
type Ring struct {
	Laps int
	Idle int // the last Idle PEs take no part (they run nothing)
}

func (r Ring) Name() string { return "ring" }

// Result: how many messages a ring PE handled does not depend on the order.
func (r Ring) Result(st State) any { return st.Count }

func (r Ring) Init(pe int32, n int) State {
	return State{H: uint64(pe) + 1, Vals: [8]int64{5: int64(n)}}
}

func (r Ring) Start(pe int32, st *State) []Send {
	if pe != 0 {
		return nil
	}
	return []Send{{To: 1 % int32(r.n(st)-int64(r.Idle)), Payload: put(1, 0)}}
}

// n is smuggled through the state: Vals[5] holds the PE count.
func (r Ring) n(st *State) int64 { return st.Vals[5] }

func (r Ring) Handle(pe int32, st *State, in Input) []Send {
	from, payload := in.From, in.Payload
	kind := u64(payload)
	v := u64(payload[8:])
	st.H = mix(st.H, v^uint64(from)<<32)
	st.Count++
	if kind != 1 { // a side message
		return nil
	}
	n := int32(st.Vals[5]) - int32(r.Idle)
	lap := int64(v >> 32)
	if pe == 0 {
		lap++
	}
	if lap >= int64(r.Laps) {
		return nil
	}
	out := []Send{{To: (pe + 1) % n, Payload: put(1, uint64(lap)<<32|st.H&0xffffffff)}}
	if n > 2 {
		out = append(out, Send{To: (pe + 2) % n, Payload: put(2, st.H)})
	}
	return out
}

// Stencil is a 1D periodic stencil: each step every PE sends its value to
// both neighbours and updates it from theirs. With CkptEvery > 0 every PE
// stops after each CkptEvery-th step for a coordinated checkpoint.
type Stencil struct {
	Steps     int64
	CkptEvery int64
}

const waitingBit = 1 << 8

// Waiting reports whether the PE stopped at a checkpoint point.
func (s Stencil) Waiting(st State) bool { return st.Got&waitingBit != 0 }

// Resume continues after the checkpoint: send this step's value, and
// advance if the neighbours' values already came.
func (s Stencil) Resume(pe int32, st *State) []Send {
	st.Got &^= waitingBit
	if st.Step >= s.Steps {
		return nil
	}
	return append(s.emit(pe, st), s.advance(pe, st)...)
}

func (s Stencil) Name() string { return "stencil" }

// Result: the stencil's values depend only on the steps' data.
func (s Stencil) Result(st State) any { return [3]int64{st.Vals[0], st.Step, int64(st.Count)} }

func (s Stencil) Init(pe int32, n int) State {
	return State{H: 7, Vals: [8]int64{int64(pe)*3 + 1, 0, 0, 0, 0, int64(n)}}
}

func (s Stencil) Start(pe int32, st *State) []Send { return s.emit(pe, st) }

func (s Stencil) emit(pe int32, st *State) []Send {
	n := int32(st.Vals[5])
	l, r := (pe+n-1)%n, (pe+1)%n
	return []Send{
		{To: l, Payload: put(uint64(st.Step), uint64(st.Vals[0]), 0)}, // to my left: I am its right
		{To: r, Payload: put(uint64(st.Step), uint64(st.Vals[0]), 1)}, // to my right: I am its left
	}
}

func (s Stencil) Handle(pe int32, st *State, in Input) []Send {
	from, payload := in.From, in.Payload
	step, v, side := int64(u64(payload)), int64(u64(payload[8:])), u64(payload[16:])
	st.H = mix(st.H, uint64(v)^uint64(from)<<40^uint64(step)<<20)
	st.Count++
	if step == 1<<62 { // the nudge: both neighbours' values of the current step are in
		return s.advance(pe, st)
	}
	storeNeighbour(st, step, v, side)
	return s.advance(pe, st)
}

// storeNeighbour keeps a ring neighbour's value of this step or the next:
// Vals[1], Vals[2] (bits 1, 2) for this one, Vals[3], Vals[4] (bits 4, 8)
// for the next.
func storeNeighbour(st *State, step, v int64, side uint64) {
	slot := 1 + int(side)
	bit := int64(1) << side
	if step == st.Step+1 {
		slot += 2
		bit <<= 2
	}
	st.Vals[slot] = v
	st.Got |= bit
}

func (s Stencil) advance(pe int32, st *State) []Send {
	if st.Got&waitingBit != 0 || st.Got&3 != 3 || st.Step >= s.Steps {
		return nil
	}
	st.Vals[0] = (st.Vals[0]*5 + st.Vals[1]*3 - st.Vals[2] + st.Step) % 1000003
	st.Step++
	st.Vals[1], st.Vals[2], st.Vals[3], st.Vals[4] = st.Vals[3], st.Vals[4], 0, 0
	st.Got = st.Got >> 2 & 3
	if st.Step >= s.Steps {
		return nil
	}
	if s.CkptEvery > 0 && st.Step%s.CkptEvery == 0 {
		st.Got |= waitingBit // nothing of this PE is in flight: checkpoint here
		return nil
	}
	out := s.emit(pe, st)
	// both neighbours' next values may already be here
	if st.Got&3 == 3 {
		out = append(out, Send{To: pe, Payload: put(1<<62, 0, 0)}) // a nudge to itself
	}
	return out
}

// Cells is a small LeanMD-like pattern. PE p owns a cell; its group
// (number p+1) is p and the Width PEs on each side, in a K-ary tree rooted
// at p. Each step, p sends its value to both ring neighbours (point to
// point), multicasts its "atoms" (Pad bytes) to its group, and contributes
// its own forces to its group's reduction; every other member, on the
// multicast, contributes forces computed from those atoms; p advances once
// the reduction's result and both neighbours' values are in. With
// CkptEvery > 0 every PE stops after each CkptEvery-th step for a
// coordinated checkpoint (every reduction of the step is then complete).
type Cells struct {
	Steps, CkptEvery int64
	Width, K         int
	Pad              int // bytes of a multicast and of a contribution (a multiple of 8, at least 16)
}

func (c Cells) Name() string { return "cells" }

// Result: values, steps and receptions do not depend on the order.
func (c Cells) Result(st State) any { return [3]int64{st.Vals[0], st.Step, int64(st.Count)} }

func (c Cells) Init(pe int32, n int) State {
	return State{H: 11, Vals: [8]int64{int64(pe)*7 + 3, 0, 0, 0, 0, int64(n)}}
}

// Groups: cell p's group is p, p+1, p-1, p+2, p-2, … (distinct, mod n).
func (c Cells) Groups(n int) *ftlayer.Groups {
	gs := ftlayer.NewGroups()
	for p := 0; p < n; p++ {
		members := []int32{int32(p)}
		seen := map[int32]bool{int32(p): true}
		for d := 1; d <= c.Width; d++ {
			for _, q := range []int{p + d, p - d} {
				m := int32(((q % n) + n) % n)
				if !seen[m] {
					seen[m] = true
					members = append(members, m)
				}
			}
		}
		if err := gs.Add(uint64(p+1), members, c.K); err != nil {
			panic(err) // the program's own groups: a bug here, not input
		}
	}
	return gs
}

// Combine adds contributions lane by lane (commutative and associative).
func (c Cells) Combine(_ uint64, a, b []byte) []byte {
	out := make([]byte, len(a))
	for i := 0; i+8 <= len(a) && i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(out[i:], u64(a[i:])+u64(b[i:]))
	}
	return out
}

func (c Cells) lanes() int { return max(c.Pad/8, 2) }

func (c Cells) Start(pe int32, st *State) []Send { return c.emit(pe, st) }

func (c Cells) Waiting(st State) bool { return st.Got&waitingBit != 0 }

func (c Cells) Resume(pe int32, st *State) []Send {
	st.Got &^= waitingBit
	if st.Step >= c.Steps {
		return nil
	}
	return c.emit(pe, st)
}

// emit starts a step: values to both neighbours, atoms to the group, own
// forces into the reduction.
func (c Cells) emit(pe int32, st *State) []Send {
	n := int32(st.Vals[5])
	l, r := (pe+n-1)%n, (pe+1)%n
	atoms := make([]uint64, c.lanes())
	atoms[0], atoms[1] = uint64(st.Step), uint64(st.Vals[0])
	for i := 2; i < len(atoms); i++ {
		atoms[i] = uint64(st.Vals[0])*uint64(i) + uint64(st.Step)
	}
	if len(atoms) > 2 {
		// The order-dependent hash rides along (forces ignore it): a
		// re-execution that received in another order sends other bytes,
		// which the checker reports as an orphan.
		atoms[len(atoms)-1] = st.H
	}
	return []Send{
		{To: l, Payload: put(uint64(st.Step), uint64(st.Vals[0]), 0)},
		{To: r, Payload: put(uint64(st.Step), uint64(st.Vals[0]), 1)},
		{Kind: ftlayer.KindMulticast, Group: uint64(pe + 1), Payload: put(atoms...)},
		{Kind: ftlayer.KindReduction, Group: uint64(pe + 1), Payload: c.forces(uint64(st.Vals[0]), pe, uint64(st.Step))},
	}
}

func (c Cells) forces(pos uint64, pe int32, step uint64) []byte {
	f := make([]uint64, c.lanes())
	for i := range f {
		f[i] = (pos*uint64(pe+1) + step*uint64(i) + uint64(i*i)) % 1000003
	}
	return put(f...)
}

func (c Cells) Handle(pe int32, st *State, in Input) []Send {
	st.Count++
	switch in.Kind {
	case ftlayer.KindMulticast:
		step, pos := u64(in.Payload), u64(in.Payload[8:])
		st.H = mix(st.H, pos^uint64(in.Group)<<40^step<<20)
		return []Send{{Kind: ftlayer.KindReduction, Group: in.Group, Payload: c.forces(pos, pe, step)}}
	case ftlayer.KindReduction:
		var sum uint64
		for i := 0; i+8 <= len(in.Payload); i += 8 {
			sum += u64(in.Payload[i:])
		}
		st.H = mix(st.H, sum)
		st.Vals[6] = int64(sum % 1000003)
		st.Got |= 16
		return c.advance(pe, st)
	}
	step, v, side := int64(u64(in.Payload)), int64(u64(in.Payload[8:])), u64(in.Payload[16:])
	st.H = mix(st.H, uint64(v)^uint64(in.From)<<40^uint64(step)<<20)
	storeNeighbour(st, step, v, side)
	return c.advance(pe, st)
}

func (c Cells) advance(pe int32, st *State) []Send {
	if st.Got&waitingBit != 0 || st.Got&3 != 3 || st.Got&16 == 0 || st.Step >= c.Steps {
		return nil
	}
	v := st.Vals[0]*5 + st.Vals[1]*3 - st.Vals[2] + st.Vals[6] + st.Step
	st.Vals[0] = (v%1000003 + 1000003) % 1000003
	st.Step++
	st.Vals[1], st.Vals[2], st.Vals[3], st.Vals[4], st.Vals[6] = st.Vals[3], st.Vals[4], 0, 0, 0
	st.Got = st.Got >> 2 & 3
	if st.Step >= c.Steps {
		return nil
	}
	if c.CkptEvery > 0 && st.Step%c.CkptEvery == 0 {
		st.Got |= waitingBit // nothing of this PE is in flight: checkpoint here
		return nil
	}
	return c.emit(pe, st)
}
