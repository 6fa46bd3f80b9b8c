package md

import (
	"fmt"

	"github.com/charmgo/charmgo/chare"
)

// Memory a run needs, estimated from its arguments before it starts (see
// README: the formula and the measurements behind it). Per atom: its
// state, its share of the positions each cell multicasts and of the
// force arrays reduced back, of the sections and computes; per atom and
// per PE that holds part of a cell's section (at most the section's 75
// members' PEs, 38 distinct): one element of that PE's running sum of the
// section's forces; per pair of PEs: the batch buffers. Everything is
// counted twice over the live heap, as the Go runtime lets the heap grow
// to twice what is live between collections.
const (
	memBase       = 24 << 20 // the Go runtime, the program, the main chare
	memPerAtom    = 700      // bytes, with the collector's headroom
	memPerAtomPE  = 220      // bytes per PE holding part of a section
	memPerPEPair  = 48       // bytes of batch buffers per pair of PEs
	sectionMaxPEs = NumNbrs/2 + 1
)

// Atoms is the number of atoms a run of p's box starts with.
func Atoms(p Params) int {
	n, total := p.cells(), 0
	for id := 0; id < n; id++ {
		total += numParticles(id, n, p.Atoms)
	}
	return total
}

// EstimateMemory is the memory, in bytes, a run of p on pes PEs needs at
// its peak (resident set), by the formula above: an upper bound, within
// about 30% of what runs measured.
func EstimateMemory(p Params, pes int) uint64 {
	atoms := uint64(Atoms(p))
	share := uint64(min(pes, sectionMaxPEs))
	return memBase + atoms*(memPerAtom+memPerAtomPE*share) + memPerPEPair*uint64(pes)*uint64(pes)
}

// fits refuses a run whose estimate exceeds limit (0: the machine's
// available memory; unknown: no check).
func fits(p Params, pes int, limit uint64) error {
	what := "the --max-memory limit"
	if limit == 0 {
		limit, what = chare.AvailableMemory(), "this machine's available memory"
	}
	need := EstimateMemory(p, pes)
	if limit == 0 || need <= limit {
		return nil
	}
	return fmt.Errorf("a %dx%dx%d box (%d atoms) on %d PEs needs about %s, more than %s (%s): use a smaller box, fewer PEs, or --max-memory to say how much it may use",
		p.X, p.Y, p.Z, Atoms(p), pes, mib(need), what, mib(limit))
}

func mib(b uint64) string {
	if b >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
