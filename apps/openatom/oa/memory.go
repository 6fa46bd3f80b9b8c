package oa

import (
	"fmt"

	"github.com/charmgo/charmgo/chare"
)

// Memory a run needs at its peak, estimated from its parameters before it
// starts: a fit of the peak resident set of runs on 2 PEs from 4 states
// on 8³ to 128 on 32³ (README: the table), rounded up by a quarter so it
// bounds them all. Per state and grid point: the state's real-space
// planes, all alive between the density and the potential, and the
// transposes (about 37 bytes a point); per state and plane: the
// RealSpace element and its messages' fixed costs (about 20 KiB). Within
// one process the multicasts share their payloads: the PairCalcs' copies
// cost nothing there.
const (
	memBase          = 20 << 20 // the Go runtime, the program, the arrays' bookkeeping
	memPerStatePoint = 37       // bytes
	memPerStatePlane = 20 << 10 // bytes
)

// EstimateMemory is the memory, in bytes, a run of p needs at its peak.
func EstimateMemory(p Params) uint64 {
	ns, n := uint64(p.States), uint64(p.Grid)
	need := memBase + ns*(memPerStatePoint*n*n*n+memPerStatePlane*n)
	return need + need/4
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
