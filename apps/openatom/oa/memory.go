package oa

import (
	"fmt"

	"github.com/charmgo/charmgo/chare"
)

// Memory a run needs at its peak, estimated from its parameters before it
// starts (README: the formula and the runs behind it). Per state: its
// coefficients in GSpace with Hψ and the messages of a pass (4 copies of
// its P plane waves, 16 bytes each); its N planes in RealSpace, each
// N² complex values while the potential is awaited, with the transposes
// in flight (3 copies); the PairCalcs' copies of its chunks, left, right
// and Hψ on the Λ pass, in each of the B blocks of its row and column
// (6·B copies). Everything twice over the live heap: the Go runtime lets
// the heap grow to twice what is live between collections.
const (
	memBase      = 32 << 20 // the Go runtime, the program, the arrays' bookkeeping
	memHeadroom  = 2
	bytesComplex = 16
)

// EstimateMemory is the memory, in bytes, a run of p needs at its peak.
func EstimateMemory(p Params) uint64 {
	g := NewGeometry(p.Grid, 1)
	pts := uint64(g.Points())
	n3 := uint64(p.Grid * p.Grid * p.Grid)
	perState := bytesComplex * (4*pts + 3*n3 + 6*uint64(p.blocks())*pts)
	return memBase + memHeadroom*uint64(p.States)*perState
}

// fits refuses a run whose estimate exceeds limit (0: the machine's
// available memory; unknown: no check).
func fits(p Params, pes int, limit uint64) error {
	what := "the --max-memory limit"
	if limit == 0 {
		limit, what = chare.AvailableMemory(), "this machine's available memory"
	}
	need := EstimateMemory(p)
	if limit == 0 || need <= limit {
		return nil
	}
	return fmt.Errorf("%d states on a %d³ grid with grain %d on %d PEs need about %d MiB, more than %s (%d MiB): use fewer states, a smaller grid, a larger --grain, or --max-memory to say how much it may use",
		p.States, p.Grid, p.Grain, pes, need>>20, what, limit>>20)
}
