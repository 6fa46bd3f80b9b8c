package md

import (
	"io"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/ftsim"
	"github.com/stretchr/testify/require"
)

// LeanMD keeps the contract of message logging without determinants
// (docs/SPMD.md): every element sends the same messages, in the same
// order, whatever order its own arrive in. Runs interleaved by other
// seeds take them in other orders; past a particle migration, balancing
// steps that move elements by measured loads and checkpoints, they send
// the same messages.
func TestLeanMDSendsTheSameMessagesInEveryOrder(t *testing.T) {
	notUnderRace(t)
	p := params(2, 2, 2, MigrateStep+2)
	p.FirstLB, p.LBPeriod, p.CkptPeriod = 5, 8, 10 // balancing at 5, 13, 21; checkpoints at 10, 20
	// A balancer that moves elements by a rule: one that goes by measured
	// loads places them otherwise in each run, and sets sections up again
	// otherwise (in a recovery its plan is the first execution's, kept by
	// the witness; see ftlayer.Hook).
	balancer := "rotate"
	sendsOf := func(seed uint64) *ftsim.Sends {
		cfg, s := ftsim.RecordSends(chare.Config{PEs: 3, Deterministic: true, Seed: seed, Balancer: balancer})
		_, err := Run(p, cfg, io.Discard)
		require.NoError(t, err, "seed %d", seed)
		require.Positive(t, s.Len())
		return s
	}
	first := sendsOf(1)
	for seed := uint64(2); seed <= 3; seed++ {
		require.Empty(t, ftsim.DiffSends(first, sendsOf(seed), 10), "seeds 1 and %d", seed)
	}
}
