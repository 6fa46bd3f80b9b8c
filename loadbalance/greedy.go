package loadbalance

// peHeap is a min-heap of PEs by load (ties: lower PE first) that knows
// where each PE is, so a PE's load can change in place.
type peHeap struct {
	pes  []int32
	pos  []int // by PE: index in pes, or -1
	load []float64
}

func newPEHeap(pes []int32, load []float64) *peHeap {
	h := &peHeap{pes: append([]int32(nil), pes...), pos: make([]int, len(load)), load: load}
	for p := range h.pos {
		h.pos[p] = -1
	}
	for i, p := range h.pes {
		h.pos[p] = i
	}
	for i := len(h.pes)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	return h
}

func (h *peHeap) less(i, j int) bool {
	a, b := h.pes[i], h.pes[j]
	if h.load[a] != h.load[b] {
		return h.load[a] < h.load[b]
	}
	return a < b
}

func (h *peHeap) swap(i, j int) {
	h.pes[i], h.pes[j] = h.pes[j], h.pes[i]
	h.pos[h.pes[i]], h.pos[h.pes[j]] = i, j
}

func (h *peHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h.pes) {
			return
		}
		c := l
		if r := l + 1; r < len(h.pes) && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}

func (h *peHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// min is the least-loaded PE.
func (h *peHeap) min() int32 { return h.pes[0] }

// addTo puts load l on PE p (which must be in the heap).
func (h *peHeap) addTo(p int32, l float64) {
	h.load[p] += l
	i := h.pos[p]
	h.down(i)
	h.up(i)
}

// add puts load l on the least-loaded PE and returns it.
func (h *peHeap) add(l float64) int32 {
	p := h.pes[0]
	h.addTo(p, l)
	return p
}

// greedy places the heaviest migratable object on the least-loaded PE,
// then the next, ignoring where objects are (Charm++'s GreedyLB): the
// best balance a list schedule gets, at the price of moving most objects.
type greedy struct{}

func (greedy) Name() string { return "greedy" }

func (greedy) Plan(st *Stats) []Move {
	where, _ := greedyPlace(st)
	return st.MovesTo(where)
}

func greedyPlace(st *Stats) (where []int32, loads []float64) {
	loads = st.Background()
	h := newPEHeap(st.Available(), loads)
	where = st.Placement()
	for _, i := range st.migratableByLoad() {
		where[i] = h.add(st.Load(int(i)))
	}
	return where, loads
}

// greedyRefine is greedy that prefers not to move (Charm++'s
// GreedyRefineLB): objects are taken heaviest first as in greedy, and one
// stays on its PE when that keeps the PE within tolerance of the maximum
// load greedy reaches; otherwise it goes to the least-loaded PE.
type greedyRefine struct{ tol float64 }

func (greedyRefine) Name() string { return "greedyrefine" }

func (g greedyRefine) Plan(st *Stats) []Move {
	gw, gl := greedyPlace(st)
	greedyMax := 0.0
	for _, p := range st.Available() {
		greedyMax = max(greedyMax, gl[p])
	}
	limit := greedyMax * (1 + g.tol)
	loads := st.Background()
	h := newPEHeap(st.Available(), loads)
	where := st.Placement()
	for _, i := range st.migratableByLoad() {
		l := st.Load(int(i))
		cur := st.Objs[i].PE
		if !st.PEs[cur].Unavailable && loads[cur]+l <= limit {
			h.addTo(cur, l)
			continue
		}
		where[i] = h.add(l)
	}
	mx := 0.0
	for _, p := range st.Available() {
		mx = max(mx, loads[p])
	}
	if mx > limit {
		return st.MovesTo(gw) // keeping objects cost more balance than allowed
	}
	return st.MovesTo(where)
}
