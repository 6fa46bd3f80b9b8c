package partition

// gainHeap is a max-heap of vertices keyed by their move gain, with each
// vertex's position kept in a table shared by the two sides' heaps (a
// vertex is in at most one), so a gain can change in place.
type gainHeap struct {
	items []int32
	key   []float64 // by vertex
	pos   []int32   // by vertex: index in its heap's items, or -1
}

func (h *gainHeap) less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if h.key[a] != h.key[b] {
		return h.key[a] > h.key[b]
	}
	return a < b
}

func (h *gainHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i]] = int32(i)
	h.pos[h.items[j]] = int32(j)
}

func (h *gainHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *gainHeap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}

func (h *gainHeap) push(v int32) {
	h.pos[v] = int32(len(h.items))
	h.items = append(h.items, v)
	h.up(len(h.items) - 1)
}

func (h *gainHeap) top() (int32, bool) {
	if len(h.items) == 0 {
		return -1, false
	}
	return h.items[0], true
}

func (h *gainHeap) remove(v int32) {
	i := int(h.pos[v])
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items = h.items[:last]
	h.pos[v] = -1
	if i < last {
		h.down(i)
		h.up(i)
	}
}

// fix restores the heap after v's key changed.
func (h *gainHeap) fix(v int32) {
	i := int(h.pos[v])
	h.down(i)
	h.up(i)
}

func (h *gainHeap) reset() {
	for _, v := range h.items {
		h.pos[v] = -1
	}
	h.items = h.items[:0]
}
