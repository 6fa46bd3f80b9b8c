package md

import (
	"fmt"
	"math"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// Every strategy, on 1 to 4 PEs, past two balancing steps: the energies and
// final atoms are bitwise those of a run that never balances, and the run
// reports its steps.
func TestBalancersLeaveTheResultUnchanged(t *testing.T) {
	p := params(3, 3, 3, 9)
	p.FirstLB, p.LBPeriod = 3, 3
	p.Atoms = lightAtoms
	base := run(t, p, chare.Config{PEs: 1, Balancer: "dummy"})
	for _, strategy := range []string{"greedy", "refine", "greedyrefine", "graph", "random", "rotate", "dummy"} {
		for pes := 1; pes <= 4; pes++ {
			if raceOn && (pes != 3 || strategy != "greedyrefine") {
				continue // the plain tier runs them all without -race
			}
			t.Run(fmt.Sprintf("%s on %d PEs", strategy, pes), func(t *testing.T) {
				r := run(t, p, chare.Config{PEs: pes, Balancer: strategy, WireCheck: pes == 3 && strategy == "greedyrefine" && !raceOn})
				sameResult(t, base, r)
				require.NotNil(t, r.Ops.LB)
				require.GreaterOrEqual(t, r.Ops.LB.Steps, 2, "steps 3 and 6 balance the computes (9, the last, may not finish before the run ends)")
				if pes > 1 && (strategy == "rotate" || strategy == "random") {
					require.Positive(t, r.Ops.LB.Moved)
				}
				if strategy == "dummy" || pes == 1 {
					require.Zero(t, r.Ops.LB.Moved)
				}
			})
		}
	}
}

// A PE killed after a balancing step that followed measured loads: the
// PEs that recover alone (scmel, camel) re-execute the step and must make
// the plan the others already carried out, PE 0 (which plans) included.
func TestAFailureAfterABalancingStepEndsInTheFailureFreeResult(t *testing.T) {
	p := params(3, 3, 3, 13)
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	p.Atoms = lightAtoms
	for _, tc := range []struct {
		ft, balancer string
		kill         chare.Kill
	}{
		{"camel", "greedyrefine", chare.Kill{PE: 0, Step: 7}},
		{"camel", "graph", chare.Kill{PE: 1, Step: 8}},
		{"scmel", "refine", chare.Kill{PE: 0, Step: 8}},
		{"none", "greedy", chare.Kill{PE: 2, Step: 7}},
	} {
		if raceOn && tc.balancer != "greedyrefine" {
			continue // the plain tier runs them all without -race
		}
		t.Run(fmt.Sprintf("%s %s kill PE %d at step %d", tc.ft, tc.balancer, tc.kill.PE, tc.kill.Step), func(t *testing.T) {
			base := run(t, p, chare.Config{PEs: 3, Balancer: tc.balancer})
			r := run(t, p, chare.Config{PEs: 3, Balancer: tc.balancer, FT: tc.ft, Kills: []chare.Kill{tc.kill}})
			require.Equal(t, 1, r.Ops.FT.Failures)
			sameResult(t, base, r)
			require.NotNil(t, r.Ops.LB)
			require.GreaterOrEqual(t, r.Ops.LB.Steps, 2)
		})
	}
}

func sameResult(t *testing.T, base, r Report) {
	t.Helper()
	for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
		require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]), "energies")
	}
	require.Equal(t, base.StateHash, r.StateHash, "final atoms")
	require.Equal(t, base.Atoms, r.Atoms)
}

// A run rolled back past a balancing step numbers the next step on from
// the checkpoint's count: a chain of strategies (rotate at the first step,
// dummy after) runs dummy at step 12 after a rollback to step 8, as
// without the failure (the count was not in the snapshot: the rolled-back
// run took step 12 for its first and rotated every chare again), and each
// step is reported once.
func TestABalancingChainGoesOnAfterARollback(t *testing.T) {
	p := params(2, 2, 2, 13)
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	for _, ft := range []string{"none", "team"} {
		cfg := chare.Config{PEs: 4, Balancer: "rotate,dummy", FT: ft}
		if ft == "team" {
			cfg.Teams = "2"
		}
		base := run(t, p, cfg)
		require.Equal(t, 2, base.Ops.LB.Steps)
		cfg.Kills = []chare.Kill{{PE: 0, Step: 9}} // past checkpoint 2 (step 8), before step 12's balancing
		r := run(t, p, cfg)
		require.Equal(t, []uint64{2}, r.Ops.FT.Restored, ft)
		sameResult(t, base, r)
		require.Equal(t, 2, r.Ops.LB.Steps, "%s: each step reported once", ft)
		require.Equal(t, base.Ops.LB.Moved, r.Ops.LB.Moved, "%s: rotate at the first step only", ft)
	}
}
