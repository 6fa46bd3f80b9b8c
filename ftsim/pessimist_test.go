package ftsim

import (
	"fmt"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/recovery"
	"github.com/stretchr/testify/require"
)

// Under pessimist, PEs failing at the same moment recover together, each
// alone: pairs and a triple of PEs (none holding another's checkpoint
// copy) failing before every stride-th event of both programs. Each run
// ends with the failure-free results, having rolled back exactly the
// failed PEs, in one recovery.
func TestPessimistFailuresOfSeveralPEsAtOnce(t *testing.T) {
	stride := 2
	if raceOn {
		stride = 31
	}
	for _, c := range []struct {
		pes  int
		sets [][]int
	}{
		{5, [][]int{{0, 2}, {1, 3}, {2, 4}}},
		{7, [][]int{{0, 2, 4}, {1, 3, 5}, {1, 4}}},
	} {
		cfg := chare.Config{PEs: c.pes, FT: "pessimist", Branching: 2}
		for _, prog := range []string{"mix", "chain"} {
			t.Run(fmt.Sprintf("%d PEs, %s", c.pes, prog), func(t *testing.T) {
				run := func(cfg chare.Config) chare.Result { return runMixOrChain(prog, cfg) }
				free := run(cfg)
				require.NoError(t, free.Err)
				require.Positive(t, free.Stats.FT.Log.Events)
				lg := free.Stats.FT.Log
				require.Less(t, lg.Events, lg.Deliveries, "a run of one sender's messages is one event")
				require.LessOrEqual(t, lg.EventsCommitted, lg.Events)
				t.Logf("without failures: %d deliveries, %d events, %d commits carrying %d of them, %d sends with no commit (their destination holds the count)",
					lg.Deliveries, lg.Events, lg.Commits, lg.EventsCommitted, lg.CommitsSpared)
				runs, local := 0, 0
				for e := 1; e <= free.Stats.Events; e += stride {
					for _, set := range c.sets {
						cf := cfg
						for _, p := range set {
							cf.Kills = append(cf.Kills, chare.Kill{PE: p, Step: -1, Event: e})
						}
						res := run(cf)
						name := fmt.Sprintf("PEs %v before event %d", set, e)
						require.NoError(t, res.Err, name)
						if prog == "mix" {
							require.Equal(t, mixLogs(t, free), mixLogs(t, res), name)
						} else {
							require.NoError(t, checkChain(chainLogsOf(t, res), 6), name)
						}
						require.Equal(t, len(set), res.Stats.FT.Failures, name)
						runs++
						if rs := res.Stats.FT.Recoveries; len(rs) == 1 && rs[0].Set != nil {
							require.Len(t, rs[0].Set, len(set), name)
							local++
						}
					}
				}
				t.Logf("%d runs, %d recovered by the failed PEs alone (the others failed while a checkpoint was taken: every PE rolled back)", runs, local)
				require.Greater(t, local, runs*3/4)
			})
		}
	}
}

// --ft-verify: a program that is not deterministic (its passes carry the
// clock) recovers under every logging protocol with the right count, but
// a recovered PE re-sends other contents than it sent the first time,
// and with --ft-verify the run fails saying so, naming the entry; the
// deterministic programs pass it, copies compared.
func TestFTVerifyCatchesAProgramThatIsNotDeterministic(t *testing.T) {
	for _, ft := range []string{"scmel", "camel", "pessimist"} {
		cfg := chare.Config{PEs: 3, FT: ft, Kills: []chare.Kill{{PE: 1, Step: 20}}}
		res := Run(StampProgram, 40, cfg, 4)
		require.NoError(t, res.Err, ft)
		require.Equal(t, 40, res.Main.(*StampMain).Passes, ft)
		cfg.FTVerify = true
		res = Run(StampProgram, 40, cfg, 4)
		require.ErrorContains(t, res.Err, "--ft-verify: PE ", ft)
		require.ErrorContains(t, res.Err, "ftsim.stamp.Ring.Pass", ft)
		require.ErrorContains(t, res.Err, "the entry is not deterministic", ft)

		cfg = chare.Config{PEs: 4, FT: ft, FTVerify: true, Kills: []chare.Kill{{PE: 2, Step: 5}}}
		res = Run(Mix, MixArgs{Steps: 6, Ckpt: 3}, cfg, 4)
		require.NoError(t, res.Err, ft)
		require.Positive(t, res.Stats.Ops.Verified, "%s: copies compared", ft)
	}
}

// Under pessimist, PEs failing while others recover recover together with
// them: those not caught up yet restart again, every third moment of
// both programs (a PE, then another or the same a few events later, none
// holding the other's checkpoint copy). Each run ends with the
// failure-free results; in some the second failure struck before the
// first recovery had caught up.
func TestPessimistFailureWhileOthersRecover(t *testing.T) {
	// found by the random sweeps: PE 3 failing in the middle of a
	// handler while it recovered, the incarnation replaced finished the
	// handler and said it caught up, and PE 2, whose checkpoint copy the
	// new incarnation had not had back yet, failed as if nobody recovered
	cfg := chare.Config{PEs: 6, FT: "pessimist", Branching: 3, Kills: []chare.Kill{{PE: 3, Step: -1, HandOver: 50}, {PE: 3, Step: -1, Event: 564}, {PE: 2, Step: -1, HandOver: 39}}}
	free := Run(Mix, MixArgs{Steps: 8, Ckpt: 3}, chare.Config{PEs: 6, FT: "pessimist", Branching: 3}, 14234768597549175510)
	res := Run(Mix, MixArgs{Steps: 8, Ckpt: 3}, cfg, 14234768597549175510)
	require.NoError(t, res.Err)
	require.Equal(t, mixLogs(t, free), mixLogs(t, res))
	require.Equal(t, 3, res.Stats.FT.Failures)

	stride := sweepStride(3, 31) // (every event under FT_LONG)
	for _, prog := range []string{"mix", "chain"} {
		t.Run(prog, func(t *testing.T) {
			cfg := chare.Config{PEs: 5, FT: "pessimist", Branching: 2}
			runs, again := sweepPairs(t, prog, cfg, []teamKills{{0, 2, 3}, {1, 3, 8}, {4, 1, 20}, {2, 2, 6}}, stride,
				func(r recovery.RecoveryStats) bool { return len(r.Again) > 0 })
			require.Positive(t, again, "PEs restarted again with another's failure")
			t.Logf("%d runs, %d with PEs restarted again", runs, again)
		})
	}
}

// sweepPairs runs prog (runMixOrChain) under cfg with each pair of kills
// at every stride-th event of its failure-free run, checks each run's
// result against the failure-free one (mix) or the chain's invariants
// (chain), and counts the runs and the recoveries counts picks.
func sweepPairs(t *testing.T, prog string, cfg chare.Config, kills []teamKills, stride int, counts func(recovery.RecoveryStats) bool) (runs, counted int) {
	t.Helper()
	free := runMixOrChain(prog, cfg)
	require.NoError(t, free.Err)
	for e := 1; e <= free.Stats.Events; e += stride {
		for _, k := range kills {
			c := cfg
			c.Kills = []chare.Kill{{PE: k.first, Step: -1, Event: e}, {PE: k.second, Step: -1, Event: e + k.after}}
			res := runMixOrChain(prog, c)
			if Unfired(res) {
				continue
			}
			runs++
			require.NoError(t, res.Err, "kills %v", c.Kills)
			if prog == "mix" {
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), "kills %v", c.Kills)
			} else {
				require.NoError(t, checkChain(chainLogsOf(t, res), 6), "kills %v", c.Kills)
			}
			for _, r := range res.Stats.FT.Recoveries {
				if counts(r) {
					counted++
				}
			}
		}
	}
	return runs, counted
}

// runMixOrChain runs Mix or the order-sensitive chain program ("mix",
// "chain"), 6 steps with a checkpoint every 3, interleaved by seed 9.
func runMixOrChain(prog string, cfg chare.Config) chare.Result {
	if prog == "mix" {
		return Run(Mix, MixArgs{Steps: 6, Ckpt: 3}, cfg, 9)
	}
	return Run(chainMain, MixArgs{Steps: 6, Ckpt: 3}, cfg, 9)
}
