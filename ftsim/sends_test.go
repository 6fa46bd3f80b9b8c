package ftsim

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// sendsOf runs a program deterministically, interleaved by seed, and
// returns what its elements sent.
func sendsOf[C, A any](t *testing.T, main *chare.Type[C, A], arg A, cfg chare.Config, seed uint64) *Sends {
	t.Helper()
	cfg, s := RecordSends(cfg)
	r := Run(main, arg, cfg, seed)
	require.NoError(t, r.Err, "seed %d", seed)
	require.Positive(t, s.Len(), "seed %d: nothing recorded", seed)
	return s
}

// Mix keeps the contract of logging without determinants: whatever order
// its messages arrive in, every element sends the same messages in the
// same order (docs/SPMD.md). Runs interleaved by other seeds take them in
// other orders.
func TestMixSendsTheSameMessagesInEveryOrder(t *testing.T) {
	cfg := chare.Config{PEs: 3}
	first := sendsOf(t, Mix, MixArgs{Steps: 6, Ckpt: 3}, cfg, 1)
	for seed := uint64(2); seed <= 4; seed++ {
		other := sendsOf(t, Mix, MixArgs{Steps: 6, Ckpt: 3}, cfg, seed)
		require.Empty(t, DiffSends(first, other, 10), "seeds 1 and %d", seed)
	}
}

// Stamp breaks it on purpose (each pass carries a clock's reading), and
// the comparison of two runs says so, naming the message.
func TestAClockInAMessageIsFoundByComparingTwoRuns(t *testing.T) {
	cfg := chare.Config{PEs: 2}
	a := sendsOf(t, StampProgram, 4, cfg, 1)
	b := sendsOf(t, StampProgram, 4, cfg, 1)
	diff := DiffSends(a, b, 3)
	require.NotEmpty(t, diff)
	require.Contains(t, diff[0], "ftsim.stamp.Ring")
	t.Log(diff)
}
