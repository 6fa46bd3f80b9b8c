package oa

import (
	"fmt"
	"strconv"

	"github.com/charmgo/charmgo/chare"
)

// Params are the proxy's arguments: `openatom [states [grid [steps]]]`
// and its own flags.
type Params struct {
	States int // ns: electronic states (bands)
	Grid   int // N: grid points a side (even, 8 to 32)
	Steps  int
	// Chunks is Gc, how many g-space chunks each state is cut into.
	Chunks int
	// Grain is how many states a PairCalc block holds (B = States/Grain
	// blocks a side).
	Grain int
	// Seed chooses the initial states' perturbation.
	Seed uint64
	// CkptPeriod, if set, takes a coordinated checkpoint at the end of
	// every CkptPeriod-th step (the runtime's --ckpt-period N).
	CkptPeriod int
	// LBPeriod, if set, ends every LBPeriod-th step (but the last) with a
	// load-balancing step of GSpace, RealSpace and PairCalc (AtSync). A
	// run with a balancer (+balancer) and no period balances every
	// DefaultLBPeriod steps.
	LBPeriod int
	// Progress prints the energy line every Progress steps (and the last).
	Progress int
	// MaxMemory, if set, refuses a run whose estimate is larger (bytes).
	MaxMemory uint64
	// NSCap is the most Newton–Schulz iterations an orthonormalisation may
	// take; NSTol the residual max|ZY − I| it must reach.
	NSCap int
	NSTol float64
	// For the tests that each invariant catches a broken kernel: a wrong
	// twiddle in every FFT, a Newton–Schulz iteration whose Z update is
	// skipped, a density that counts state 0 at half its occupation, a
	// transpose message GSpace(0,0) does not send at step 2; and a
	// potential of 1 everywhere (the FFT round trip GS→RS→GS then returns
	// ψ itself, checked to 1e-12).
	BrokenFFT, SkipNSUpdate, BrokenDensity, DropTranspose, UnitPotential bool
	// StepInOrtho, for the tests of failures in the middle of the
	// Newton–Schulz iteration: step k is reported to the runtime
	// (chare.AtStep, where --kill PE@k fires) by Ortho(0,0) after the
	// first iteration of step k's orthonormalisation instead of as the
	// step begins (steps 1 to Steps−1: the last has none).
	StepInOrtho bool
}

// DefaultParams: 32 states on a 16³ grid, 20 steps, 4 chunks, grain 8.
func DefaultParams() Params {
	return Params{States: 32, Grid: 16, Steps: 20, Chunks: 4, Grain: 8, Seed: 1, Progress: 1,
		NSCap: 40, NSTol: 1e-12}
}

// Limits of the arguments.
const (
	MinGrid, MaxGrid     = 8, 32
	MinStates, MaxStates = 1, 128
	MaxSteps             = 100000
)

// ParseArgs reads the positional arguments.
func ParseArgs(args []string, p *Params) error {
	names := []string{"states", "grid", "steps"}
	if len(args) > len(names) {
		return fmt.Errorf("too many arguments (%d): usage openatom [states [grid [steps]]]", len(args))
	}
	ranges := [][2]int{{MinStates, MaxStates}, {MinGrid, MaxGrid}, {1, MaxSteps}}
	dst := []*int{&p.States, &p.Grid, &p.Steps}
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
	return nil
}

// Validate checks the parameters together (each error names what to
// change).
func (p Params) Validate() error {
	switch {
	case p.Grid%2 != 0:
		return fmt.Errorf("grid %d: must be even", p.Grid)
	case p.Grid < MinGrid || p.Grid > MaxGrid:
		return fmt.Errorf("grid %d: out of range (want %d to %d)", p.Grid, MinGrid, MaxGrid)
	case p.States < MinStates || p.States > MaxStates:
		return fmt.Errorf("states %d: out of range (want %d to %d)", p.States, MinStates, MaxStates)
	case p.Grain < 1 || p.States%p.Grain != 0:
		return fmt.Errorf("--grain %d: must divide the %d states", p.Grain, p.States)
	case p.Steps < 1:
		return fmt.Errorf("steps %d: want at least 1", p.Steps)
	case p.NSCap < 1:
		return fmt.Errorf("--ns-cap %d: want at least 1", p.NSCap)
	}
	g := NewGeometry(p.Grid, 1)
	if pts := g.Points(); p.States > pts {
		return fmt.Errorf("%d states on a %d³ grid: its sphere holds %d plane waves, so at most %d states (use a larger grid)", p.States, p.Grid, pts, pts)
	}
	if p.Chunks < 1 || p.Chunks > len(g.Lines) {
		return fmt.Errorf("--chunks %d: want 1 to %d (the sphere's z-lines on a %d³ grid)", p.Chunks, len(g.Lines), p.Grid)
	}
	return nil
}

func (p Params) blocks() int { return p.States / p.Grain }

// DefaultLBPeriod is the load-balancing period of a run with a balancer
// and no --lb-period.
const DefaultLBPeriod = 5

// lbStep reports whether step k ends with a load-balancing step.
func (p Params) lbStep(k int) bool {
	return p.LBPeriod > 0 && k > 0 && k < p.Steps && k%p.LBPeriod == 0
}

// timeStep is the steepest-descent step: half the inverse of the largest
// kinetic energy on the sphere, so every step stays close to
// orthonormal and Newton–Schulz converges.
func (p Params) timeStep() float64 {
	r := p.Grid / 4
	return 1 / float64(r*r)
}

// occupation is the number of electrons a state holds.
const occupation = 2.0

// Flags are the proxy's own flags.
func Flags(p *Params) []chare.Flag {
	whole := func(dst *int, min int, what string) func(string) error {
		return func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < min {
				return fmt.Errorf("%q is not a whole number of %s (want %d or more)", v, what, min)
			}
			*dst = n
			return nil
		}
	}
	return []chare.Flag{
		{Name: "--chunks", Arg: "Gc", Usage: "g-space chunks per state (default 4)", Set: whole(&p.Chunks, 1, "chunks")},
		{Name: "--grain", Arg: "G", Usage: "states per PairCalc block; must divide the states (default 8)", Set: whole(&p.Grain, 1, "states")},
		{Name: "--seed", Arg: "S", Usage: "seed of the initial states (default 1)",
			Set: func(v string) error {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return fmt.Errorf("%q is not a whole number", v)
				}
				p.Seed = n
				return nil
			}},
		{Name: "--lb-period", Arg: "N", Usage: fmt.Sprintf("balance load (AtSync) at the end of every N-th step (default: every %d with +balancer, else never)", DefaultLBPeriod), Set: whole(&p.LBPeriod, 1, "steps")},
		{Name: "--progress", Arg: "N", Usage: "print the energy line every N steps (default 1)", Set: whole(&p.Progress, 1, "steps")},
		{Name: "--ns-cap", Arg: "N", Usage: "most Newton–Schulz iterations per orthonormalisation (default 40)", Set: whole(&p.NSCap, 1, "iterations")},
		{Name: "--max-memory", Arg: "SIZE", Usage: "refuse a run whose estimated memory exceeds SIZE (4G, 512M; default: the machine's available memory)",
			Set: func(v string) error {
				n, err := chare.ParseSize(v)
				p.MaxMemory = n
				return err
			}},
	}
}
