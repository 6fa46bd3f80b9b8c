// Package md is LeanMD on charmgo: the Charm++ group's molecular-dynamics
// mini-app (short-range Lennard-Jones forces in a periodic box, decomposed
// into cells and pair computes) with its structure, constants, command line
// and printouts, and its known physics quirks fixed unless
// Params.Original asks for them. Run it with Run, or as the program in
// apps/leanmd.
package md

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/internal/stat"
)

// Params are LeanMD's arguments: `leanmd [X Y Z [steps [firstLB
// [LBperiod [ckptPeriod]]]]]` and its own flags.
type Params struct {
	X, Y, Z    int
	Steps      int
	FirstLB    int
	LBPeriod   int
	CkptPeriod int
	// CkptEvery, if set, checkpoints at the first step boundary after
	// this long since the last checkpoint (--ckpt-period 30s): every
	// step then ends at a barrier, where cell (0,0,0) decides.
	CkptEvery time.Duration
	// Given records which positional arguments were on the command line:
	// the original prints a parameter's line only when it was given.
	Given int
	// Original restores the C++ LeanMD's physics quirks (see README).
	Original bool
	// Progress prints the step line every Progress steps (and at the last
	// step); 1 prints every step, as the original does.
	Progress int
	// Tolerance is the energy check's bound on |E_final − E_initial| / |E_initial|.
	Tolerance float64
	// MaxMemory, if set, is the memory a run may use (bytes): one whose
	// estimate (EstimateMemory) is larger is refused before it starts.
	// Unset, the machine's available memory is the limit.
	MaxMemory uint64
	// BrokenKernel flips the sign of every force (for the test that the
	// energy check catches a broken kernel).
	BrokenKernel bool
	// Local places for locality (--placement local): the cells in boxes
	// of neighbouring cells, a box a PE (localCells), and each compute on
	// the PE of the cell that creates it, so that most of a PE's messages
	// go to the few PEs holding the cells beside its own. Unset, the
	// original's placement: cells in blocks of the array's linear order,
	// computes dealt round-robin from the next PE (every PE talks to
	// almost every other).
	Local bool
	// Kernel names the force kernel (--kernel): "" or "auto" the widest
	// this CPU runs, "avx512", "avx2" or "scalar". All give the same bits.
	Kernel string
	// Atoms, if set, replaces the original's ramp of atoms a cell starts
	// with (100 in the first cell to 250 in the last) by Atoms[0] to
	// Atoms[1]. The runtime's tests use a tenth: the same cells,
	// computes, sections and messages (smaller), a hundredth of the
	// force work, which is most of a run.
	Atoms [2]int
}

// ComputeArgs build a compute.
type ComputeArgs struct {
	P     Params
	Cells chare.ArrayProxy[Cell]
}

// DefaultParams are the original's defaults: 3 3 3 1001 20 20 100000.
func DefaultParams() Params {
	return Params{X: 3, Y: 3, Z: 3, Steps: 1001, FirstLB: 20, LBPeriod: 20, CkptPeriod: 100000,
		Progress: 100, Tolerance: DefaultTolerance}
}

// DefaultTolerance is the relative energy drift a correct run stays under.
// The integrator (semi-implicit Euler with a velocity clamp) does not
// conserve energy exactly; see README for the figures behind the value.
const DefaultTolerance = 0.05

// MaxDim bounds each dimension of the cell array.
const MaxDim = 64

// ParseArgs reads the positional arguments. Errors name the argument and
// the accepted range.
func ParseArgs(args []string, p *Params) error {
	names := []string{"X", "Y", "Z", "steps", "firstLB", "LBperiod", "ckptPeriod"}
	if len(args) > len(names) {
		return fmt.Errorf("too many arguments (%d): usage leanmd [X Y Z [steps [firstLB [LBperiod [ckptPeriod]]]]]", len(args))
	}
	if len(args) > 0 && len(args) < 3 {
		return fmt.Errorf("the cell array needs all three dimensions X Y Z, got %d", len(args))
	}
	ranges := [][2]int{{1, MaxDim}, {1, MaxDim}, {1, MaxDim}, {1, 1 << 30}, {0, 1 << 30}, {1, 1 << 30}, {1, 1 << 30}}
	dst := []*int{&p.X, &p.Y, &p.Z, &p.Steps, &p.FirstLB, &p.LBPeriod, &p.CkptPeriod}
	for i, a := range args {
		v, err := strconv.Atoi(a)
		if err != nil {
			return fmt.Errorf("argument %s: %q is not a whole number (want %d to %d)", names[i], a, ranges[i][0], ranges[i][1])
		}
		if v < ranges[i][0] || v > ranges[i][1] {
			return fmt.Errorf("argument %s: %d is out of range (want %d to %d)", names[i], v, ranges[i][0], ranges[i][1])
		}
		*dst[i] = v
	}
	p.Given = len(args)
	return nil
}

// Flags are LeanMD's own command-line flags.
func Flags(p *Params) []chare.Flag {
	return []chare.Flag{
		{Name: "--original-physics", Usage: "restore the C++ LeanMD's physics quirks (image shift, zero potential energy, absolute energy check)",
			Set: func(string) error { p.Original = true; return nil }},
		{Name: "--kernel", Arg: "NAME", Usage: "the force kernel: auto (the widest this CPU runs), avx512, avx2 or scalar; all give the same bits",
			Set: func(v string) error {
				if _, err := kernelLanes(v); err != nil {
					return err
				}
				p.Kernel = v
				return nil
			}},
		{Name: "--placement", Arg: "P", Usage: "spread (the original's: computes dealt round-robin over the PEs) or local (cells in boxes of neighbours, a box a PE, each compute with its cell)",
			Set: func(v string) error {
				switch v {
				case "spread":
					p.Local = false
				case "local":
					p.Local = true
				default:
					return fmt.Errorf("%q is not a placement (want spread or local)", v)
				}
				return nil
			}},
		{Name: "--progress", Arg: "N", Usage: "print the step line every N steps (1: every step, as the original; default 100)",
			Set: func(v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					return fmt.Errorf("%q is not a whole number of steps (want 1 or more)", v)
				}
				p.Progress = n
				return nil
			}},
		{Name: "--max-memory", Arg: "SIZE", Usage: "refuse a run whose estimated memory exceeds SIZE (4G, 512M; default: the machine's available memory)",
			Set: func(v string) error {
				n, err := chare.ParseSize(v)
				p.MaxMemory = n
				return err
			}},
		{Name: "--tolerance", Arg: "X", Usage: fmt.Sprintf("relative energy drift the check allows (default %g)", DefaultTolerance),
			Set: func(v string) error {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil || !(x > 0) || math.IsInf(x, 0) {
					return fmt.Errorf("%q is not a positive number", v)
				}
				p.Tolerance = x
				return nil
			}},
	}
}

func (p Params) cells() int        { return p.X * p.Y * p.Z }
func (p Params) lbStep(s int) bool { return s >= p.FirstLB && (s-p.FirstLB)%p.LBPeriod == 0 }

// Report is what a run measured.
type Report struct {
	Params   Params
	PEs      int
	Atoms    int
	Cells    int
	Computes int
	StepMs   []float64 // wall time of every step, measured by cell (0,0,0)
	// Kinetic and potential energy at the first and the last step.
	KE0, KE1, PE0, PE1 float64
	RelDrift           float64
	// KernelMs is the time all computes spent in the force kernel.
	KernelMs float64
	EnergyOK bool
	// StateHash hashes every atom's final position and velocity, cell by
	// cell in index order: equal hashes mean bitwise-equal final states.
	StateHash uint64
	Ops       chare.Stats
	Wall      time.Duration
	// Restarted: the run resumed from a checkpoint, so its step times and
	// kernel time include the steps before it, on the checkpoint's PEs.
	Restarted bool
	// Checked: the run was only checked (chare.CheckEnv): nothing ran.
	Checked bool
	// Secondary: this process is not the job's first, which reports the
	// results; this report holds nothing else.
	Secondary bool
	// Processes lists the job's processes (one: the whole run in this one).
	Processes []chare.Process
	// Runtime is the runtime's summary of the run (chare.Summary; its
	// results hold LeanMD's own, as --summary-json writes them).
	Runtime *chare.Summary
}

// ---- chares ----

// Main is LeanMD's main chare.
type Main struct {
	P          Params
	Cells      chare.ArrayProxy[Cell]
	Computes   chare.ArrayProxy[Compute]
	CellFin    []chare.Indexed[CellFinal]
	CompEnergy []float64
	KernelNs   float64 // the computes' time in the force kernel, summed
	StepMs     []float64
	Got        int // of the four final reports (checkpointed: a restart may come between them)
	// this process's own, not migrated or checkpointed: a restart's run
	// starts its clock again
	start  time.Time `msgpack:"-"`
	report Report    `msgpack:"-"` // what the run measured, once it is over (Run returns it)
}

// Cell holds the atoms of one box of the periodic domain.
type Cell struct {
	P        Params
	Atoms    []Particle
	Step     int
	Energy   [2]float64
	Computes []chare.Index // the 75 computes of its section, in offset order
	Sec      chare.SectionProxy[Compute]
	Incoming []ParticlesMsg // atoms from neighbours, this migration round
	Migrate  bool           // waiting for the neighbours' atoms
	StepMs   []float64      // cell (0,0,0) only
	// the step timings of this process's run, not migrated or
	// checkpointed (a restarted or migrated cell starts its clock again)
	last     time.Time `msgpack:"-"`
	lastCkpt time.Time `msgpack:"-"` // cell (0,0,0), under CkptEvery
	sumMs    float64   `msgpack:"-"`
	sumSteps int       `msgpack:"-"`
}

// Compute computes the forces between the atoms of two cells, or within one.
type Compute struct {
	P        Params
	Cells    chare.ArrayProxy[Cell]
	Step     int
	Energy   [2]float64
	KernelNs float64
	Self     bool
	Pending  *PositionsMsg // the first of a pair's two messages this step
}

// SetupMsg tells the cells where the computes are.
type SetupMsg struct {
	Computes chare.ArrayProxy[Compute]
}

// PositionsMsg is a cell's atom positions, multicast to its computes.
type PositionsMsg struct {
	Cell [3]int32
	Pos  []Vec3
	Sec  chare.SectionProxy[Compute] // the cell's section: where its forces are reduced
	CB   chare.Callback[[]float64]   // the cell's ReduceForces
}

// WireSize is the message's size on the wire: 24 bytes an atom.
func (m PositionsMsg) WireSize() int { return 24*len(m.Pos) + 32 }

// ParticlesMsg carries the atoms that left a cell for one neighbour.
type ParticlesMsg struct {
	From  int32 // sender's cell id
	Num   int32 // the neighbour offset they were sent through
	Atoms []Particle
}

// WireSize is the message's size on the wire.
func (m ParticlesMsg) WireSize() int { return int(unsafe.Sizeof(Particle{}))*len(m.Atoms) + 8 }

// CellFinal is what each cell reports at the end.
type CellFinal struct {
	KE    [2]float64
	Atoms int
	Hash  uint64
}

// WireSize is the record's size on the wire.
func (CellFinal) WireSize() int { return 32 }

// WireSize is the message's size on the wire.
func (SetupMsg) WireSize() int { return 4 }

var (
	MainT    = chare.NewMainTypeOf[Main, Params]("leanmd.Main")
	CellT    = chare.NewType[Cell, Params]("leanmd.Cell", chare.NotMigratable())
	ComputeT = chare.NewType[Compute, ComputeArgs]("leanmd.Compute")

	mainRun       *chare.Entry[Main, struct{}]
	mainCellFin   *chare.Entry[Main, []chare.Indexed[CellFinal]]
	mainCompFin   *chare.Entry[Main, []float64]
	mainStepTimes *chare.Entry[Main, []float64]
	mainKernelNs  *chare.Entry[Main, []float64]

	cellCreate    *chare.Entry[Cell, SetupMsg]
	cellRun       *chare.Entry[Cell, struct{}]
	cellForces    *chare.Entry[Cell, []float64]
	cellParticles *chare.Entry[Cell, ParticlesMsg]
	cellCkptStart *chare.Entry[Cell, struct{}]
	cellCkptDone  *chare.Entry[Cell, struct{}]
	computeForces *chare.Entry[Compute, PositionsMsg]
	cellFinalSet  = chare.Set[CellFinal]()
)

func init() {
	mainRun = chare.NewEntry(MainT, (*Main).Run)
	mainCellFin = chare.NewEntry(MainT, (*Main).CellsDone)
	mainCompFin = chare.NewEntry(MainT, (*Main).ComputesDone)
	mainStepTimes = chare.NewEntry(MainT, (*Main).StepTimes, chare.Measurement()) // wall-clock times
	mainKernelNs = chare.NewEntry(MainT, (*Main).KernelTime, chare.Measurement())
	cellCreate = chare.NewEntry(CellT, (*Cell).CreateComputes)
	cellRun = chare.NewEntry(CellT, (*Cell).Run)
	cellForces = chare.NewEntry(CellT, (*Cell).ReduceForces)
	cellParticles = chare.NewEntry(CellT, (*Cell).ReceiveParticles)
	cellCkptStart = chare.NewEntry(CellT, (*Cell).StartCheckpoint)
	cellCkptDone = chare.NewEntry(CellT, (*Cell).CheckpointDone)
	computeForces = chare.NewEntry(ComputeT, (*Compute).CalculateForces)
}

// printf prints to the run's output (chare.Config.Stdout).
func printf(ctx *chare.Ctx, format string, args ...any) { fmt.Fprintf(ctx.Out(), format, args...) }

// Init is main's constructor, given the run's parameters (validated by
// Run): the original's start-up printouts, then the cells, then the
// (empty, sparse) compute array the cells fill.
func (m *Main) Init(ctx *chare.Ctx, p Params) {
	m.P = p
	if steps, every := chare.CheckpointPeriod(ctx); steps > 0 {
		m.P.CkptPeriod = steps
	} else if every > 0 {
		m.P.CkptPeriod, m.P.CkptEvery = 1, every
	}
	p = m.P
	if !chare.StepRange(ctx, 1, p.Steps) { // failures injected at other steps are refused
		return // before the banner: the refusal is the run's one line
	}
	printf(ctx, "\nLENNARD JONES MOLECULAR DYNAMICS START UP ...\n")
	printf(ctx, "\nInput Parameters...\n")
	if p.Given >= 3 {
		printf(ctx, "Cell Array Dimension X:%d Y:%d Z:%d of size %d %d %d\n", p.X, p.Y, p.Z, CellSizeX, CellSizeY, CellSizeZ)
	}
	for i, line := range []string{"Final Step Count:%d\n", "First LB Step:%d\n", "LB Period:%d\n", "FT Period:%d\n"} {
		if p.Given > 3+i {
			printf(ctx, line, []int{p.Steps, p.FirstLB, p.LBPeriod, p.CkptPeriod}[i])
		}
	}
	if p.Local {
		m.Cells = CellT.NewArray(ctx, []int{p.X, p.Y, p.Z}, p, localCells)
	} else {
		m.Cells = CellT.NewArray(ctx, []int{p.X, p.Y, p.Z}, p) // block map, as the original's CellMap
	}
	m.Computes = ComputeT.NewSparseArray(ctx, nil)
	cellCreate.Broadcast(ctx, m.Cells, SetupMsg{Computes: m.Computes})
	printf(ctx, "\nCells: %d X %d X %d .... created\n", p.X, p.Y, p.Z)
}

// Run starts the simulation once every cell inserted its computes.
func (m *Main) Run(ctx *chare.Ctx, _ struct{}) {
	m.Computes.DoneInserting(ctx)
	printf(ctx, "Computes: %d .... created\n", (NumNbrs/2+1)*m.P.cells())
	printf(ctx, "Starting simulation .... \n\n")
	cellRun.Broadcast(ctx, m.Cells, struct{}{})
	m.start = time.Now()
}

// CellsDone receives every cell's kinetic energies and final-state hash.
func (m *Main) CellsDone(ctx *chare.Ctx, v []chare.Indexed[CellFinal]) {
	m.CellFin = v
	m.finish(ctx)
}

// ComputesDone receives the summed potential energies.
func (m *Main) ComputesDone(ctx *chare.Ctx, v []float64) {
	m.CompEnergy = v
	m.finish(ctx)
}

// KernelTime receives the computes' time in the force kernel, summed.
// It is a reduction of its own, apart from the energies: a measurement,
// which differs from run to run (chare.Measurement).
func (m *Main) KernelTime(ctx *chare.Ctx, v []float64) {
	m.KernelNs = v[0]
	m.finish(ctx)
}

// StepTimes receives cell (0,0,0)'s per-step times.
func (m *Main) StepTimes(ctx *chare.Ctx, v []float64) {
	m.StepMs = v
	m.finish(ctx)
}

func (m *Main) finish(ctx *chare.Ctx) {
	if m.Got++; m.Got < 4 {
		return
	}
	r := &m.report
	// the run's own parameters: after --restart, the checkpoint's, not
	// the command line's
	r.Params = m.P
	r.StepMs, r.Cells, r.Computes = m.StepMs, m.P.cells(), (NumNbrs/2+1)*m.P.cells()
	h := uint64(14695981039346656037)
	for i, c := range m.CellFin { // index order: the canonical order of the energy sums
		if i == 0 {
			r.KE0, r.KE1 = c.Value.KE[0], c.Value.KE[1]
		} else {
			r.KE0 += c.Value.KE[0]
			r.KE1 += c.Value.KE[1]
		}
		r.Atoms += c.Value.Atoms
		h = (h ^ c.Value.Hash) * 1099511628211
	}
	r.StateHash = h
	r.PE0, r.PE1, r.KernelMs = m.CompEnergy[0], m.CompEnergy[1], m.KernelNs/1e6
	e0, e1 := r.KE0+r.PE0, r.KE1+r.PE1
	r.RelDrift = math.Abs(e1-e0) / math.Abs(e0)
	absOK := math.Abs(e1-e0) <= EnergyVar
	r.EnergyOK = r.RelDrift <= m.P.Tolerance
	if m.P.Original {
		r.EnergyOK = absOK
	}
	// The original's absolute check, kept for fidelity (it cannot fail: the
	// energies are ~1e-15 in these units), then the relative one.
	if !absOK {
		printf(ctx, "Energy value has varied significantly from %E to %E\n", e0, e1)
		printf(ctx, "\nEnergy conservation test failed for maximum allowed variation of %E units.\nSIMULATION UNSUCCESSFULL\n", EnergyVar)
	} else {
		printf(ctx, "\nEnergy conservation test passed for maximum allowed variation of %E units.\nSIMULATION SUCCESSFULL \n", EnergyVar)
	}
	if !m.P.Original {
		verdict := "passed"
		if !r.EnergyOK {
			verdict = "FAILED"
		}
		printf(ctx, "Relative energy conservation test %s: |E_final - E_initial| / |E_initial| = %.3e (allowed %.3e)\n", verdict, r.RelDrift, m.P.Tolerance)
	}
	if m.start.IsZero() { // restarted from a checkpoint: this process's run
		m.start, r.Restarted = ctx.Started(), true
	}
	r.Wall = time.Since(m.start)
	printf(ctx, "Total application time %f s\n", r.Wall.Seconds())
	for _, v := range []struct {
		name  string
		value any
	}{
		{"atoms", r.Atoms}, {"cells", r.Cells}, {"computes", r.Computes}, {"steps", r.Params.Steps},
		{"ms_per_step_mean", stat.Mean(r.StepMs)}, {"ms_per_step_median", stat.Median(r.StepMs)},
		{"kinetic_energy_first", r.KE0}, {"kinetic_energy_last", r.KE1},
		{"potential_energy_first", r.PE0}, {"potential_energy_last", r.PE1},
		{"relative_energy_drift", r.RelDrift}, {"energy_ok", r.EnergyOK},
		{"force_kernel_ms", r.KernelMs}, {"state_hash", fmt.Sprintf("%016x", r.StateHash)},
	} {
		chare.Report(ctx, v.name, v.value)
	}
	code := 0
	if !r.EnergyOK {
		code = 1
	}
	ctx.Exit(code)
}

// ---- cells ----

// Init places the cell's atoms as the original does (lattice, drand48
// velocities seeded with the cell's id).
func (c *Cell) Init(ctx *chare.Ctx, p Params) {
	ix := ctx.Index()
	c.P, c.Step = p, 1
	c.Atoms = initialParticles(int(ix.C[0]), int(ix.C[1]), int(ix.C[2]), p.X, p.Y, p.Z, p.Atoms)
}

// localCells places the cells for locality (--placement local): the box
// is cut in two across its longest side, the PEs in two in proportion,
// and so on down to a PE each (a box a PE; with more PEs than cells,
// some PEs get none).
var localCells = chare.RegisterMap("leanmd.localCells", localCell)

func localCell(ix chare.Index, bounds []int, n int) int {
	var lo, hi [3]int
	for d := range 3 {
		hi[d] = bounds[d]
	}
	first := 0
	for n > 1 {
		d := 0
		for e := 1; e < 3; e++ {
			if hi[e]-lo[e] > hi[d]-lo[d] {
				d = e
			}
		}
		if hi[d]-lo[d] < 2 {
			break // one cell left: it is the first PE's
		}
		n1 := n / 2
		cut := lo[d] + (hi[d]-lo[d])*n1/n
		cut = min(max(cut, lo[d]+1), hi[d]-1)
		if int(ix.C[d]) < cut {
			hi[d], n = cut, n1
		} else {
			lo[d], first, n = cut, first+n1, n-n1
		}
	}
	return first
}

func offset(num int) (dx, dy, dz int) {
	return num/(NbrsY*NbrsZ) - NbrsX/2, (num%(NbrsY*NbrsZ))/NbrsZ - NbrsY/2, num%NbrsZ - NbrsZ/2
}

// CreateComputes inserts the computes this cell owns (offsets 37..74,
// round-robin from the next PE) and lists all 75 it talks to.
func (c *Cell) CreateComputes(ctx *chare.Ctx, s SetupMsg) {
	ix := ctx.Index()
	x, y, z := int(ix.C[0]), int(ix.C[1]), int(ix.C[2])
	p := c.P
	currPE := ctx.PE()
	c.Computes = make([]chare.Index, NumNbrs)
	for num := 0; num < NumNbrs; num++ {
		dx, dy, dz := offset(num)
		if num >= NumNbrs/2 {
			px1, py1, pz1 := x+KAwayX, y+KAwayY, z+KAwayZ
			cix := chare.Idx(px1, py1, pz1, px1+dx, py1+dy, pz1+dz)
			if !p.Local {
				currPE++
			}
			ComputeT.Insert(ctx, s.Computes, cix, currPE%ctx.NumPEs(), ComputeArgs{P: p, Cells: chare.ThisArray[Cell](ctx)})
			c.Computes[num] = cix
		} else {
			px1, py1, pz1 := wrap(x+dx, p.X)+KAwayX, wrap(y+dy, p.Y)+KAwayY, wrap(z+dz, p.Z)+KAwayZ
			c.Computes[num] = chare.Idx(px1, py1, pz1, px1-dx, py1-dy, pz1-dz)
		}
	}
	c.Sec = chare.SectionProxy[Compute]{Coll: s.Computes.Coll} // made in Run, once the computes exist
	chare.Contribute(ctx, chare.Barrier, struct{}{}, mainRun.CallbackTo(MainT.MainProxy()))
}

// Run knits the cell's computes into its section and starts step 1.
func (c *Cell) Run(ctx *chare.Ctx, _ struct{}) {
	c.Sec = chare.ArrayProxy[Compute]{Coll: c.Sec.Coll}.Section(ctx, c.Computes)
	c.last = time.Now()
	if c.origin(ctx) {
		chare.AtStep(ctx, 1) // failures injected at step 1 happen now
	}
	c.sendPositions(ctx)
}

func (c *Cell) origin(ctx *chare.Ctx) bool {
	ix := ctx.Index()
	return ix.C[0] == 0 && ix.C[1] == 0 && ix.C[2] == 0
}

func (c *Cell) sendPositions(ctx *chare.Ctx) {
	pos := make([]Vec3, len(c.Atoms)) // handed over: a new slice every step
	for i := range c.Atoms {
		pos[i] = c.Atoms[i].Pos
	}
	ix := ctx.Index()
	computeForces.Multicast(ctx, c.Sec, PositionsMsg{Cell: [3]int32{ix.C[0], ix.C[1], ix.C[2]}, Pos: pos, Sec: c.Sec,
		CB: cellForces.CallbackTo(chare.This[Cell](ctx))})
}

// ReduceForces receives the summed forces on this cell's atoms.
func (c *Cell) ReduceForces(ctx *chare.Ctx, f []float64) {
	if len(f) != 3*len(c.Atoms) {
		ctx.Fail(fmt.Errorf("step %d: %d force components for %d atoms", c.Step, len(f), len(c.Atoms)))
		return
	}
	c.updateProperties(f)
	if c.Step%MigrateStep == 0 {
		c.migrateParticles(ctx)
		c.Migrate = true
		c.tryFinishMigration(ctx)
		return
	}
	c.endStep(ctx)
}

// updateProperties integrates one step (semi-implicit Euler, velocity
// clamped), recording the kinetic energy at the first and last steps.
func (c *Cell) updateProperties(f []float64) {
	const dtVel = Delta * 1e-20
	for i := range c.Atoms {
		p := &c.Atoms[i]
		if c.Step == 1 {
			c.Energy[0] += kineticEnergy(p)
		} else if c.Step == c.P.Steps {
			c.Energy[1] += kineticEnergy(p)
		}
		inv := 1 / p.Mass
		p.Acc = Vec3{f[3*i] * inv, f[3*i+1] * inv, f[3*i+2] * inv}
		p.Vel.X = clampVelocity(p.Vel.X + p.Acc.X*dtVel)
		p.Vel.Y = clampVelocity(p.Vel.Y + p.Acc.Y*dtVel)
		p.Vel.Z = clampVelocity(p.Vel.Z + p.Acc.Z*dtVel)
		p.Pos.X += p.Vel.X * Delta
		p.Pos.Y += p.Vel.Y * Delta
		p.Pos.Z += p.Vel.Z * Delta
	}
}

// migrateParticles sends every neighbour (itself and the empty ones
// included) the atoms that left for it: 75 messages.
func (c *Cell) migrateParticles(ctx *chare.Ctx) {
	ix := ctx.Index()
	x, y, z := int(ix.C[0]), int(ix.C[1]), int(ix.C[2])
	p := c.P
	out := make([][]Particle, NumNbrs)
	keep := c.Atoms[:0]
	for _, a := range c.Atoms {
		px, py, pz := migrateTo(a.Pos, x, y, z)
		if px == 0 && py == 0 && pz == 0 {
			keep = append(keep, a)
			continue
		}
		if px < -KAwayX || px > KAwayX || py < -KAwayY || py > KAwayY || pz < -KAwayZ || pz > KAwayZ {
			ctx.Fail(fmt.Errorf("step %d: an atom at %+v moved more than %d cells", c.Step, a.Pos, KAwayZ))
			return
		}
		n := (px+KAwayX)*NbrsY*NbrsZ + (py+KAwayY)*NbrsZ + (pz + KAwayZ)
		out[n] = append(out[n], wrapAround(a, p))
	}
	c.Atoms = keep
	me := int32(z + p.Z*(y+x*p.Y))
	cells := chare.ThisArray[Cell](ctx)
	for num := 0; num < NumNbrs; num++ {
		dx, dy, dz := offset(num)
		cellParticles.Send(ctx, cells.At(wrap(x+dx, p.X), wrap(y+dy, p.Y), wrap(z+dz, p.Z)), ParticlesMsg{From: me, Num: int32(num), Atoms: out[num]})
	}
}

// migrateTo is which neighbour (−2..2 per axis) an atom now belongs to.
func migrateTo(pos Vec3, x, y, z int) (px, py, pz int) {
	side := func(v float64, lo, size float64) int {
		switch {
		case v < lo-size:
			return -2
		case v < lo:
			return -1
		case v > lo+2*size:
			return 2
		case v > lo+size:
			return 1
		}
		return 0
	}
	return side(pos.X, float64(x*CellSizeX), CellSizeX), side(pos.Y, float64(y*CellSizeY), CellSizeY), side(pos.Z, float64(z*CellSizeZ), CellSizeZ)
}

func wrapAround(a Particle, p Params) Particle {
	bx, by, bz := float64(CellSizeX*p.X), float64(CellSizeY*p.Y), float64(CellSizeZ*p.Z)
	if a.Pos.X < 0 {
		a.Pos.X += bx
	}
	if a.Pos.Y < 0 {
		a.Pos.Y += by
	}
	if a.Pos.Z < 0 {
		a.Pos.Z += bz
	}
	if a.Pos.X > bx {
		a.Pos.X -= bx
	}
	if a.Pos.Y > by {
		a.Pos.Y -= by
	}
	if a.Pos.Z > bz {
		a.Pos.Z -= bz
	}
	return a
}

// ReceiveParticles collects the atoms of one neighbour; they may arrive
// before this cell got to its own migration.
func (c *Cell) ReceiveParticles(ctx *chare.Ctx, m ParticlesMsg) {
	c.Incoming = append(c.Incoming, m)
	c.tryFinishMigration(ctx)
}

func (c *Cell) tryFinishMigration(ctx *chare.Ctx) {
	if !c.Migrate || len(c.Incoming) < NumNbrs {
		return
	}
	// Arrival order varies from run to run; appending in (sender, offset)
	// order keeps every later floating-point sum the same.
	sort.Slice(c.Incoming, func(i, j int) bool {
		a, b := c.Incoming[i], c.Incoming[j]
		return a.From < b.From || a.From == b.From && a.Num < b.Num
	})
	for _, m := range c.Incoming {
		c.Atoms = append(c.Atoms, m.Atoms...)
	}
	c.Incoming, c.Migrate = c.Incoming[:0], false
	c.endStep(ctx)
}

func (c *Cell) endStep(ctx *chare.Ctx) {
	if c.origin(ctx) {
		now := time.Now()
		ms := float64(now.Sub(c.last).Nanoseconds()) / 1e6
		c.last = now
		c.StepMs = append(c.StepMs, ms)
		c.sumMs += ms
		c.sumSteps++ // since the last line (or the restart)
		if p := c.P.Progress; p > 0 && (c.Step%p == 0 || c.Step == c.P.Steps || c.Step == 1 && p == 1) {
			printf(ctx, "Step %d Benchmark Time %f ms/step\n", c.Step, c.sumMs/float64(c.sumSteps))
			c.sumMs, c.sumSteps = 0, 0
		}
	}
	if c.P.lbStep(c.Step) {
		ctx.AtSync()
		return
	}
	c.afterLB(ctx)
}

// ResumeFromSync continues after a load-balancing step. The cell's
// section follows the computes that moved by itself (the runtime sets it
// up again where they are now; the C++ LeanMD rebuilds its sections by
// hand here).
func (c *Cell) ResumeFromSync(ctx *chare.Ctx) { c.afterLB(ctx) }

func (c *Cell) afterLB(ctx *chare.Ctx) {
	if c.Step%c.P.CkptPeriod == 0 {
		chare.Contribute(ctx, chare.Barrier, struct{}{}, cellCkptStart.CallbackTo(chare.ThisArray[Cell](ctx).At(0, 0, 0)))
		return
	}
	c.nextStep(ctx)
}

// StartCheckpoint runs on cell (0,0,0) once every cell reached the
// checkpoint: nothing of the step is in flight, so it takes a coordinated
// checkpoint of every chare, and every cell resumes once it is committed.
func (c *Cell) StartCheckpoint(ctx *chare.Ctx, _ struct{}) {
	if every := c.P.CkptEvery; every > 0 {
		if c.lastCkpt.IsZero() { // the run's (or the restart's) first step
			c.lastCkpt = c.last
		}
		if time.Since(c.lastCkpt) < every {
			cellCkptDone.Broadcast(ctx, chare.ThisArray[Cell](ctx), struct{}{}) // not due yet: go on
			return
		}
		c.lastCkpt = time.Now()
	}
	printf(ctx, "[%d] CHECKPOINT at step %d\n", ctx.PE(), c.Step)
	chare.Checkpoint(ctx, cellCkptDone.CallbackBroadcast(chare.ThisArray[Cell](ctx)))
}

// CheckpointDone resumes the cell after a checkpoint (in this run, or in
// a run restarted from it: then the step clock starts now).
func (c *Cell) CheckpointDone(ctx *chare.Ctx, _ struct{}) {
	if c.last.IsZero() {
		c.last = time.Now()
		if c.origin(ctx) { // resumed from the checkpoint: the steps still to run
			chare.StepRange(ctx, c.Step+1, c.P.Steps)
		}
	}
	c.nextStep(ctx)
}

func (c *Cell) nextStep(ctx *chare.Ctx) {
	if c.Step == c.P.Steps {
		h := uint64(14695981039346656037)
		for _, a := range c.Atoms {
			for _, v := range [6]float64{a.Pos.X, a.Pos.Y, a.Pos.Z, a.Vel.X, a.Vel.Y, a.Vel.Z} {
				h = (h ^ math.Float64bits(v)) * 1099511628211
			}
		}
		chare.Contribute(ctx, cellFinalSet, CellFinal{KE: c.Energy, Atoms: len(c.Atoms), Hash: h}, mainCellFin.CallbackTo(MainT.MainProxy()))
		if c.origin(ctx) {
			mainStepTimes.Send(ctx, MainT.MainProxy(), c.StepMs)
		}
		return
	}
	c.Step++
	if c.origin(ctx) {
		chare.AtStep(ctx, c.Step) // failures injected at this step happen now
	}
	c.sendPositions(ctx)
}

// ---- computes ----

// Init sets up a compute; its index says which two cells it pairs.
func (c *Compute) Init(ctx *chare.Ctx, a ComputeArgs) {
	ix := ctx.Index()
	c.P, c.Cells, c.Step = a.P, a.Cells, 1
	c.Self = ix.C[0] == ix.C[3] && ix.C[1] == ix.C[4] && ix.C[2] == ix.C[5]
}

// CalculateForces receives one cell's positions: a self compute works at
// once, a pair compute when it has both cells'.
func (c *Compute) CalculateForces(ctx *chare.Ctx, m PositionsMsg) {
	doEnergy := c.Step == 1 || c.Step == c.P.Steps
	k := newKernelSign(doEnergy, c.P.Original, kernelSign(c.P))
	k.lanes, _ = kernelLanes(c.P.Kernel) // checked when the flag was read
	var e float64
	t0 := time.Now()
	if c.Self {
		f := chare.Float64s(3 * len(m.Pos))
		e = k.selfForces(m.Pos, vecs(f))
		c.KernelNs += float64(time.Since(t0))
		chare.ContributeSection(ctx, m.Sec, chare.SumFloat64s, f, m.CB)
	} else {
		if c.Pending == nil {
			c.Pending = &m
			return
		}
		first, second := *c.Pending, m
		c.Pending = nil
		ix := ctx.Index()
		// The first cell is the one that owns the compute (its index's
		// first half); when both messages come from one cell (a cell and
		// its own image, in boxes under 5 cells) either order is the same.
		own := [3]int32{ix.C[0] - KAwayX, ix.C[1] - KAwayY, ix.C[2] - KAwayZ}
		if second.Cell == own && first.Cell != own {
			first, second = second, first
		}
		var shift Vec3
		if c.P.Original {
			shift = originalShift(first.Cell, second.Cell, c.P.X, c.P.Y, c.P.Z)
		} else {
			shift = imageShift(int(own[0]), int(own[1]), int(own[2]),
				int(ix.C[3]-ix.C[0]), int(ix.C[4]-ix.C[1]), int(ix.C[5]-ix.C[2]), c.P.X, c.P.Y, c.P.Z)
		}
		// Force arrays come from the runtime's pool: the reduction that
		// sums them gives them back.
		fa := chare.Float64s(3 * len(first.Pos))
		fb := chare.Float64s(3 * len(second.Pos))
		e = k.pairForces(first.Pos, second.Pos, shift, vecs(fa), vecs(fb))
		c.KernelNs += float64(time.Since(t0))
		chare.ContributeSection(ctx, first.Sec, chare.SumFloat64s, fa, first.CB)
		chare.ContributeSection(ctx, second.Sec, chare.SumFloat64s, fb, second.CB)
	}
	if c.Step == 1 {
		c.Energy[0] = e
	} else if c.Step == c.P.Steps {
		c.Energy[1] = e
	}
	done := c.Step
	c.Step++
	if c.P.lbStep(done) {
		ctx.AtSync()
		if done == c.P.Steps {
			c.finish(ctx) // the energies do not wait for the balancer
		}
		return
	}
	if done == c.P.Steps {
		c.finish(ctx)
	}
}

func (c *Compute) finish(ctx *chare.Ctx) {
	chare.Contribute(ctx, chare.SumFloat64s, []float64{c.Energy[0], c.Energy[1]}, mainCompFin.CallbackTo(MainT.MainProxy()))
	chare.Contribute(ctx, chare.SumFloat64s, []float64{c.KernelNs}, mainKernelNs.CallbackTo(MainT.MainProxy()))
}

// kernelSign is the sign the force kernel applies (-1: BrokenKernel).
func kernelSign(p Params) float64 {
	if p.BrokenKernel {
		return -1
	}
	return 1
}

// vecs views 3n float64s as n vectors (the force arrays the kernels fill
// and the reductions sum are the same memory).
func vecs(f []float64) []Vec3 {
	if cap(f) < 3 {
		return []Vec3{}
	}
	return unsafe.Slice((*Vec3)(unsafe.Pointer(&f[:1][0])), cap(f)/3)[:len(f)/3]
}

// ---- running ----

// Run runs LeanMD with the given parameters and runtime config, printing
// to w, and returns its report. Runs share nothing: several may go on at
// once in one process.
func Run(p Params, cfg chare.Config, w io.Writer) (Report, error) {
	if p.Progress <= 0 {
		p.Progress = 1 << 30
	}
	if p.Tolerance == 0 {
		p.Tolerance = DefaultTolerance
	}
	if cfg.PEs == 0 {
		cfg.PEs = runtime.GOMAXPROCS(0)
	}
	r := Report{Params: p, PEs: cfg.PEs}
	if _, err := kernelLanes(p.Kernel); err != nil {
		return r, chare.InputError{Err: fmt.Errorf("kernel %w", err)}
	}
	if cfg.Restart == "" { // a restart's box is the checkpoint's, not p's
		if err := fits(p, cfg.PEs, p.MaxMemory); err != nil {
			return r, chare.InputError{Err: err}
		}
	}
	cfg.Stdout = w
	res := chare.RunWith(MainT, p, cfg)
	if m, ok := res.Main.(*Main); ok && m.report.StepMs != nil {
		r = m.report
		r.PEs = cfg.PEs
	}
	r.Ops, r.Processes, r.Runtime = res.Stats, res.Processes, res.Summary
	r.Checked, r.Secondary = res.Checked, res.Process != 0
	if reports, err := res.Reports("leanmd"); !reports {
		return r, err
	}
	if r.StepMs == nil {
		return r, fmt.Errorf("the run went quiet before the simulation finished (a deadlock): %d multicasts, %d deliveries, %d contributions",
			r.Ops.Ops.Multicasts, r.Ops.Ops.Deliveries, r.Ops.Ops.Contributions)
	}
	if res.Code != 0 && r.EnergyOK {
		return r, fmt.Errorf("leanmd exited with code %d", res.Code)
	}
	return r, nil
}

// kernelLanes is the width of the kernel the run's computes ran.
func (r Report) kernelLanes() int {
	lanes, _ := kernelLanes(r.Params.Kernel)
	return lanes
}

// Summary writes the run's summary: sizes, time per step, traffic by kind
// and the energies at full precision.
func (r Report) Summary(w io.Writer) {
	steps := r.StepMs
	fmt.Fprintf(w, "\nSummary\n")
	fmt.Fprintf(w, "  atoms %d, cells %d, computes %d, steps %d, PEs %d\n", r.Atoms, r.Cells, r.Computes, r.Params.Steps, r.PEs)
	if s := chare.ProcessSummary(r.Processes); s != "" {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "  time per step: mean %.3f ms, median %.3f ms\n", stat.Mean(steps), stat.Median(steps))
	if r.Restarted {
		fmt.Fprintf(w, "  force kernel (%s): %.0f ms in all (the steps before the checkpoint included, on its PEs)\n", kernelKind(r.kernelLanes()), r.KernelMs)
	} else {
		fmt.Fprintf(w, "  force kernel (%s): %.1f%% of PE time (%.0f ms over %d PEs), runtime and integration the rest\n", kernelKind(r.kernelLanes()), 100*r.KernelShare(), r.KernelMs, r.PEs)
	}
	if r.Runtime != nil {
		r.Runtime.WriteRuntime(w)
	}
	fmt.Fprintf(w, "  kinetic energy:   first step %.17g, last step %.17g\n", r.KE0, r.KE1)
	fmt.Fprintf(w, "  potential energy: first step %.17g, last step %.17g\n", r.PE0, r.PE1)
}

// KernelShare is the fraction of the PEs' time (steps' wall time × PEs)
// spent in the force kernel.
func (r Report) KernelShare() float64 {
	var wall float64
	for _, v := range r.StepMs {
		wall += v
	}
	if wall == 0 || r.PEs == 0 {
		return 0
	}
	return r.KernelMs / (wall * float64(r.PEs))
}

// MedianStepMs is the median time per step.
func (r Report) MedianStepMs() float64 { return stat.Median(r.StepMs) }
