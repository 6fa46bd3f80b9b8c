package md

import (
	"fmt"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/recovery"
	"github.com/stretchr/testify/require"
)

// Under pessimist, PEs failing at the same step recover together, each
// alone, the others never rolling back: one, two and three PEs of six
// (none holding another's checkpoint copy), at steps before and after a
// checkpoint and the balancing, end with the failure-free energies and
// atoms bitwise. A PE failing with the holder of its checkpoint's copy
// takes both copies with it (as all but one of them failing at once
// does): every PE rolls back, from the checkpoint directory.
func TestPessimistRecoversPEsFailingAtOnce(t *testing.T) {
	notUnderRace(t)
	p := params(3, 3, 3, 13)
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	p.Atoms = lightAtoms
	base := run(t, p, chare.Config{PEs: 6})
	for _, c := range []struct {
		pes  []int
		step int
	}{{[]int{3}, 7}, {[]int{1, 4}, 3}, {[]int{0, 2}, 9}, {[]int{1, 3, 5}, 11}, {[]int{0, 2, 4}, 6}} {
		name := fmt.Sprintf("PEs %v at step %d", c.pes, c.step)
		cfg := chare.Config{PEs: 6, FT: "pessimist"}
		for _, y := range c.pes {
			cfg.Kills = append(cfg.Kills, chare.Kill{PE: y, Step: c.step})
		}
		r := run(t, p, cfg)
		requireSameEnergies(t, base, r, name)
		ft := r.Ops.FT
		require.Equal(t, len(c.pes), ft.Failures, name)
		require.Len(t, ft.Recoveries, 1, name)
		require.Len(t, ft.Recoveries[0].Set, len(c.pes), "%s: the failed PEs alone", name)
		require.Equal(t, len(c.pes), ft.PEsRolledBack, name)
		require.Positive(t, ft.Log.Replayed, name)
		requireRecoveryCounts(t, ft, 6-len(c.pes), name)
		require.Positive(t, ft.Log.Commits, name)
		require.Less(t, ft.Log.Events, ft.Log.Deliveries, name)
	}
	for _, kills := range [][]int{{2, 3}, {0, 1, 2, 3, 5}} { // a PE and its buddy; all but one
		cfg := chare.Config{PEs: 6, FT: "pessimist", CheckpointDir: t.TempDir()}
		for _, y := range kills {
			cfg.Kills = append(cfg.Kills, chare.Kill{PE: y, Step: 7})
		}
		r := run(t, p, cfg)
		requireSameEnergies(t, base, r, fmt.Sprint(kills))
		require.Equal(t, 6, r.Ops.FT.PEsRolledBack, "%v: every PE rolls back", kills)
	}
}

// requireRecoveryCounts checks what the restarted PEs of a run's one
// recovery alone said of it as they caught up: each heard from every
// survivor, and the survivors' markers counted exactly what the
// survivors counted sending again.
func requireRecoveryCounts(t *testing.T, ft recovery.Stats, survivors int, name string) {
	t.Helper()
	require.Len(t, ft.Recoveries, 1, name)
	rc := ft.Recoveries[0]
	require.Equal(t, survivors, rc.Survivors, "%s: survivors heard from", name)
	require.Equal(t, ft.Log.Replayed, rc.Replayed, "%s: the messages sent again, as the survivors and as the restarted PEs count them", name)
	require.Len(t, rc.CaughtUp, len(rc.Set), "%s: each restarted PE's catching up", name)
	for _, c := range rc.CaughtUp {
		require.Contains(t, rc.Set, c.PE, name)
		require.Positive(t, c.After, name)
		require.LessOrEqual(t, c.After, rc.Recovery, name)
	}
}
