package fttest

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
	return State{H: uint64(pe) + 1, Vals: [6]int64{5: int64(n)}}
}

func (r Ring) Start(pe int32, st *State) []Send {
	if pe != 0 {
		return nil
	}
	return []Send{{To: 1 % int32(r.n(st)-int64(r.Idle)), Payload: put(1, 0)}}
}

// n is smuggled through the state: Vals[5] holds the PE count.
func (r Ring) n(st *State) int64 { return st.Vals[5] }

func (r Ring) Handle(pe int32, st *State, from int32, payload []byte) []Send {
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
	return State{H: 7, Vals: [6]int64{int64(pe)*3 + 1, 0, 0, 0, 0, int64(n)}}
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

func (s Stencil) Handle(pe int32, st *State, from int32, payload []byte) []Send {
	step, v, side := int64(u64(payload)), int64(u64(payload[8:])), u64(payload[16:])
	st.H = mix(st.H, uint64(v)^uint64(from)<<40^uint64(step)<<20)
	st.Count++
	if step == 1<<62 { // the nudge: both neighbours' values of the current step are in
		return s.advance(pe, st)
	}
	slot := 1 + int(side) // 1: left, 2: right (this step); 3, 4: next step
	bit := int64(1) << side
	if step == st.Step+1 {
		slot += 2
		bit <<= 2
	}
	st.Vals[slot] = v
	st.Got |= bit
	return s.advance(pe, st)
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
