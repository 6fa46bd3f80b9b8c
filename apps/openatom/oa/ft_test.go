package oa

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/recovery"
)

var ftConfigs = []chare.Config{{FT: "none"}, {FT: "scmel"}, {FT: "camel"}, {FT: "team", Teams: "2"}, {FT: "camel", Teams: "2"}, {FT: "pessimist"}}

func ftName(c chare.Config) string {
	if c.Teams != "" && c.FT != "team" {
		return c.FT + "+teams"
	}
	return c.FT
}

// Under every protocol, a PE killed as a step begins and a PE killed in
// the middle of the Newton–Schulz iteration (after its first residual),
// with and without checkpoints, two failures in one run: the run ends
// with the failure-free energies, bitwise, and says what it recovered.
func TestFailuresEndInTheFailureFreeEnergies(t *testing.T) {
	p := tiny(8, 8, 7, 3, 4)
	base := run(t, p, chare.Config{PEs: 4})
	cases := []struct {
		name       string
		kills      []chare.Kill
		inOrtho    bool
		ckptPeriod int
		wantFailed int
	}{
		{"as step 3 begins", []chare.Kill{{PE: 1, Step: 3}}, false, 0, 1},
		{"mid Newton–Schulz of step 2", []chare.Kill{{PE: 2, Step: 2}}, true, 0, 1},
		{"mid Newton–Schulz, after a checkpoint", []chare.Kill{{PE: 0, Step: 5}}, true, 2, 1},
		{"twice, a checkpoint between", []chare.Kill{{PE: 3, Step: 2}, {PE: 1, Step: 6}}, false, 3, 2},
	}
	for _, pc := range ftConfigs {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s %s", ftName(pc), c.name), func(t *testing.T) {
				q := p
				q.StepInOrtho, q.CkptPeriod = c.inOrtho, c.ckptPeriod
				cfg := pc
				cfg.PEs, cfg.Kills = 4, c.kills
				r := run(t, q, cfg)
				require.Equal(t, base.Energies, r.Energies)
				require.Equal(t, c.wantFailed, r.Ops.FT.Failures)
				require.Positive(t, r.Ops.FT.PEsRolledBack)
			})
		}
	}
}

// With a balancer moving GSpace, RealSpace and PairCalc elements every
// two steps, and a failure after a balancing step: the same energies.
func TestBalancingKeepsTheEnergies(t *testing.T) {
	p := tiny(8, 8, 7, 3, 4)
	p.LBPeriod = 2
	base := run(t, tiny(8, 8, 7, 3, 4), chare.Config{PEs: 3})
	for _, b := range []string{"greedy", "refine", "rotate"} {
		r := run(t, p, chare.Config{PEs: 3, Balancer: b})
		require.Equal(t, base.Energies, r.Energies, b)
		require.NotNil(t, r.Ops.LB, b)
		require.Positive(t, r.Ops.LB.Steps, b)
	}
	r := run(t, p, chare.Config{PEs: 4, Balancer: "rotate", FT: "camel", Kills: []chare.Kill{{PE: 1, Step: 4}}})
	require.Equal(t, base.Energies, r.Energies)
	require.Equal(t, 1, r.Ops.FT.Failures)
}

// A run restarted from its checkpoint directory, on another PE count,
// ends with the uninterrupted run's energies.
func TestARestartEndsWithTheSameEnergies(t *testing.T) {
	p := tiny(8, 8, 6, 3, 4)
	p.CkptPeriod = 4
	dir := t.TempDir()
	base := run(t, p, chare.Config{PEs: 3, CheckpointDir: dir})
	r, err := Run(DefaultParams(), chare.Config{PEs: 2, Restart: dir}, io.Discard)
	require.NoError(t, err)
	require.True(t, r.Restarted)
	require.Equal(t, base.Energies, r.Energies)
}

// The proxy run deterministically (every PE on one goroutine, a seeded
// interleaving) with failures at random moments — before an event, or
// in the middle of a handler after a message its PE handed over — under
// none, scmel and camel: the energies are the failure-free run's.
func TestFailuresAtRandomMomentsOfADeterministicRun(t *testing.T) {
	p := tiny(8, 8, 5, 3, 4)
	p.CkptPeriod = 3
	base := run(t, p, chare.Config{PEs: 4})
	trials := 6
	if raceOn {
		trials = 2
	}
	for _, ft := range []string{"none", "scmel", "camel"} {
		rng := rand.New(rand.NewPCG(uint64(len(ft)), 34))
		for trial := 0; trial < trials; trial++ {
			cfg := chare.Config{PEs: 3 + rng.IntN(2), FT: ft, Deterministic: true, Seed: rng.Uint64()}
			free := run(t, p, cfg)
			require.Equal(t, base.Energies, free.Energies, "deterministic, no failure")
			k := chare.Kill{PE: rng.IntN(cfg.PEs), Step: -1}
			if rng.IntN(3) == 0 {
				k.HandOver = 1 + rng.Uint64N(free.Ops.PEs[k.PE].HandedOver())
			} else {
				k.Event = 1 + rng.IntN(free.Ops.Events)
			}
			cfg.Kills = []chare.Kill{k}
			r, err := Run(p, cfg, io.Discard)
			var unfired *recovery.UnfiredError
			if errors.As(err, &unfired) {
				continue
			}
			require.NoError(t, err, "%s, %d PEs, seed %d, %v", ft, cfg.PEs, cfg.Seed, cfg.Kills)
			require.Equal(t, base.Energies, r.Energies, "%s, %d PEs, seed %d, %v", ft, cfg.PEs, cfg.Seed, cfg.Kills)
		}
	}
}

// FT_LONG: every failure point of a small deterministic run — a PE
// failing before each event in turn, under none, scmel and camel, with a
// checkpoint in the middle — ends with the failure-free energies (the
// simulator's sweeps, on OpenAtom's traffic; ftsim cannot import an
// application, so the sweep lives here).
func TestEveryFailurePointOfASmallRun(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FT_LONG"))
	if n == 0 {
		t.Skip("FT_LONG: the exhaustive sweep (go run ./cmd/testall --long 1)")
	}
	if raceOn {
		t.Skip("one goroutine runs it: the plain tier runs it without -race")
	}
	p := tiny(4, 8, 3, 2, 2)
	p.CkptPeriod = 2
	base := run(t, p, chare.Config{PEs: 3})
	for _, ft := range []string{"none", "scmel", "camel"} {
		cfg := chare.Config{PEs: 3, FT: ft, Deterministic: true, Seed: 5}
		free := run(t, p, cfg)
		require.Equal(t, base.Energies, free.Energies)
		ran := 0
		for ev := 1; ev <= free.Ops.Events; ev++ {
			cfg.Kills = []chare.Kill{{PE: ev % cfg.PEs, Step: -1, Event: ev}}
			r, err := Run(p, cfg, io.Discard)
			var unfired *recovery.UnfiredError
			if errors.As(err, &unfired) {
				continue
			}
			require.NoError(t, err, "%s, event %d", ft, ev)
			require.Equal(t, base.Energies, r.Energies, "%s, PE %d before event %d", ft, ev%cfg.PEs, ev)
			ran++
		}
		t.Logf("%s: %d failure points of %d events", ft, ran, free.Ops.Events)
	}
}

// A log limit on the proxy (issue 36) under camel (and scmel, team): 8 PEs,
// a limit at which channels turn off, kills of several PEs late in an
// epoch. Every run ends with the failure-free energies, bitwise; the
// PEs that stopped logging to the failed one rolled back with it — some
// failures roll back a set between the failed PE and every PE (the
// others' replay and the kept PEs' re-execution together).
func TestALogLimitKeepsTheEnergies(t *testing.T) {
	if raceOn {
		t.Skip("8 PEs of the default proxy: the plain tier runs it")
	}
	p := DefaultParams()
	p.Steps, p.CkptPeriod = 20, 10
	base := run(t, p, chare.Config{PEs: 8})
	partial := 0
	for _, c := range []struct {
		cfg   chare.Config
		kills []int
	}{
		{chare.Config{FT: "camel", LogLimit: 2 << 20, LogLimitStrategy: "cluster"}, []int{1, 4, 6}},
		{chare.Config{FT: "scmel", LogLimit: 2 << 20}, []int{2, 5}},
		{chare.Config{FT: "team", Teams: "2", LogLimit: 1 << 20}, []int{3}},
	} {
		for _, y := range c.kills {
			cfg := c.cfg
			cfg.PEs, cfg.Kills = 8, []chare.Kill{{PE: y, Step: 19}}
			r := run(t, p, cfg)
			name := fmt.Sprintf("%s, limit %d, PE %d at step 19", ftName(cfg), cfg.LogLimit, y)
			require.Equal(t, base.Energies, r.Energies, name)
			require.Equal(t, 1, r.Ops.FT.Failures, name)
			rc := r.Ops.FT.Recoveries
			require.Len(t, rc, 1, name)
			require.Contains(t, rc[0].Set, int32(y), name)
			if len(rc[0].Set) > 1 && len(rc[0].Set) < 8 && cfg.Teams == "" {
				partial++
			}
			t.Logf("%s: rollback set %v (chain %d)", name, rc[0].Set, rc[0].Chain)
		}
	}
	require.Positive(t, partial, "a set larger than the failed PE and smaller than every PE")
}
