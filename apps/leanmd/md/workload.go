package md

// StepWorkload is every compute of a LeanMD box at its initial state: the
// force-kernel calls of one step, for benchmarks.
type StepWorkload struct {
	cells        [][]Vec3
	self         []int
	pairA, pairB []int
	shift        []Vec3
	Pairs        int // pair evaluations (distance tests) per step
	buf          []Vec3
	k            kernel
}

// NewStepWorkload builds the workload of a dx×dy×dz box.
func NewStepWorkload(dx, dy, dz int) *StepWorkload {
	w := &StepWorkload{buf: make([]Vec3, 1024), k: newKernel(false, false)}
	for x := 0; x < dx; x++ {
		for y := 0; y < dy; y++ {
			for z := 0; z < dz; z++ {
				ps := initialParticles(x, y, z, dx, dy, dz, [2]int{})
				pos := make([]Vec3, len(ps))
				for i := range ps {
					pos[i] = ps[i].Pos
				}
				w.cells = append(w.cells, pos)
			}
		}
	}
	id := func(x, y, z int) int { return wrap(z, dz) + dz*(wrap(y, dy)+wrap(x, dx)*dy) }
	for x := 0; x < dx; x++ {
		for y := 0; y < dy; y++ {
			for z := 0; z < dz; z++ {
				for num := NumNbrs / 2; num < NumNbrs; num++ {
					ox, oy, oz := offset(num)
					a := id(x, y, z)
					if ox == 0 && oy == 0 && oz == 0 {
						w.self = append(w.self, a)
						n := len(w.cells[a])
						w.Pairs += n * (n - 1) / 2
						continue
					}
					b := id(x+ox, y+oy, z+oz)
					w.pairA, w.pairB = append(w.pairA, a), append(w.pairB, b)
					w.shift = append(w.shift, imageShift(x, y, z, ox, oy, oz, dx, dy, dz))
					w.Pairs += len(w.cells[a]) * len(w.cells[b])
				}
			}
		}
	}
	return w
}

// Run computes every force of the step once.
func (w *StepWorkload) Run() { w.run(false) }

// RunScalar is Run through the scalar kernel, which runs where the CPU
// has no AVX-512: the baseline of the vector kernel's figures.
func (w *StepWorkload) RunScalar() { w.run(true) }

func (w *StepWorkload) run(scalar bool) {
	k, buf := &w.k, w.buf
	for _, a := range w.self {
		f := buf[:len(w.cells[a])]
		clear(f)
		if scalar {
			k.selfForcesScalar(w.cells[a], f)
		} else {
			k.selfForces(w.cells[a], f)
		}
	}
	for i := range w.pairA {
		a, b := w.cells[w.pairA[i]], w.cells[w.pairB[i]]
		f := buf[:len(a)+len(b)]
		clear(f)
		if scalar {
			k.pairForcesScalar(a, b, w.shift[i], f[:len(a)], f[len(a):])
		} else {
			k.pairForces(a, b, w.shift[i], f[:len(a)], f[len(a):])
		}
	}
}
