package ftsim

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

func mixLogs(t *testing.T, r chare.Result) [3][]int64 {
	t.Helper()
	m, ok := r.Main.(*MixMain)
	require.True(t, ok, "no main chare: %v", r.Err)
	return [3][]int64{m.ALog, m.SLog, m.SecLog}
}

func TestDeterministicRunsRepeatAndEndLikeRealOnes(t *testing.T) {
	real := chare.RunWith(Mix, MixArgs{Steps: 6, Ckpt: 3}, chare.Config{PEs: 3})
	require.NoError(t, real.Err)
	traces := map[uint64]bool{}
	for seed := uint64(1); seed <= 5; seed++ {
		a := Run(Mix, MixArgs{Steps: 6, Ckpt: 3}, chare.Config{PEs: 3}, seed)
		require.NoError(t, a.Err)
		b := Run(Mix, MixArgs{Steps: 6, Ckpt: 3}, chare.Config{PEs: 3}, seed)
		require.NoError(t, b.Err)
		require.Equal(t, a.Stats.Trace, b.Stats.Trace, "seed %d: the same seed, the same run", seed)
		traces[a.Stats.Trace] = true
		require.Equal(t, mixLogs(t, real), mixLogs(t, a))
		t.Logf("seed %d: %d events", seed, a.Stats.Events)
	}
}

// Every protocol, every PE failing before every event of a run: each run
// ends with the failure-free results.
func TestFailuresAtEveryEvent(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	stride := 1
	if raceOn {
		stride = 17
	}
	for _, ft := range []string{"none", "scmel", "camel"} {
		t.Run(ft, func(t *testing.T) {
			runs := 0
			events, err := Sweep(Mix, args, chare.Config{PEs: 5, FT: ft, Branching: 2}, 7, []int{0, 1, 2, 3, 4}, stride, func(free chare.Result, f Failure) {
				runs++
				require.NoError(t, f.Res.Err, "%s, %v", ft, f)
				require.Equal(t, mixLogs(t, free), mixLogs(t, f.Res), "%s, %v", ft, f)
				require.Equal(t, 1, f.Res.Stats.FT.Failures, "%s, %v", ft, f)
			})
			require.NoError(t, err)
			t.Logf("%s: %d runs over %d events", ft, runs, events)
		})
	}
}

// Several failures in one run, at random events of random PEs (a failure
// due while a PE recovers waits until it caught up), over random
// interleavings: each run ends with the failure-free results, or — when
// a later failure's moment never came — says so.
func TestRandomFailuresInOneRun(t *testing.T) {
	args := MixArgs{Steps: 8, Ckpt: 3}
	trials := 150
	if raceOn {
		trials = 20
	}
	for _, ft := range []string{"none", "scmel", "camel"} {
		t.Run(ft, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(len(ft)), 3))
			ran, skipped := 0, 0
			for trial := 0; trial < trials; trial++ {
				pes := 3 + rng.IntN(5)
				seed := rng.Uint64()
				cfg := chare.Config{PEs: pes, FT: ft, Branching: 2 + rng.IntN(3)}
				free := Run(Mix, args, cfg, seed)
				require.NoError(t, free.Err)
				kills := make([]chare.Kill, 2+rng.IntN(2))
				for i := range kills {
					kills[i] = chare.Kill{PE: rng.IntN(pes), Step: -1, Event: 1 + rng.IntN(free.Stats.Events)}
				}
				slices.SortFunc(kills, func(a, b chare.Kill) int { return a.Event - b.Event })
				cfg.Kills = kills
				res := Run(Mix, args, cfg, seed)
				if res.Code == 2 && strings.Contains(res.Err.Error(), "never happened") {
					skipped++
					continue
				}
				ran++
				require.NoError(t, res.Err, "%s, %d PEs, branching %d, seed %d, kills %v", ft, pes, cfg.Branching, seed, kills)
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), "%s, %d PEs, branching %d, seed %d, kills %v", ft, pes, cfg.Branching, seed, kills)
			}
			t.Logf("%s: %d runs with every failure, %d where one never came", ft, ran, skipped)
		})
	}
}

func chainLogsOf(t *testing.T, r chare.Result) []ChainLog {
	t.Helper()
	m, ok := r.Main.(*ChainMain)
	require.True(t, ok, "no main chare: %v", r.Err)
	return m.All
}

// The order-sensitive program: every PE failing before every event (a
// stride of them under -race), and random failures, each run's logs
// consistent.
func TestFailuresReplayTheOrderThatHappened(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	stride, trials := 1, 150
	if raceOn {
		stride, trials = 17, 20
	}
	for _, ft := range []string{"none", "scmel", "camel"} {
		t.Run(ft, func(t *testing.T) {
			runs := 0
			events, err := Sweep(chainMain, args, chare.Config{PEs: 4, FT: ft, Branching: 2}, 11, []int{0, 1, 2, 3}, stride, func(free chare.Result, f Failure) {
				runs++
				require.NoError(t, f.Res.Err, "%s, %v", ft, f)
				require.NoError(t, checkChain(chainLogsOf(t, f.Res), args.Steps), "%s, %v", ft, f)
			})
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(uint64(len(ft)), 5))
			for trial := 0; trial < trials; trial++ {
				pes := 3 + rng.IntN(5)
				seed := rng.Uint64()
				cfg := chare.Config{PEs: pes, FT: ft, Branching: 2 + rng.IntN(3)}
				free := Run(chainMain, args, cfg, seed)
				require.NoError(t, free.Err)
				require.NoError(t, checkChain(chainLogsOf(t, free), args.Steps))
				kills := make([]chare.Kill, 2+rng.IntN(2))
				for i := range kills {
					kills[i] = chare.Kill{PE: rng.IntN(pes), Step: -1, Event: 1 + rng.IntN(free.Stats.Events)}
				}
				slices.SortFunc(kills, func(a, b chare.Kill) int { return a.Event - b.Event })
				cfg.Kills = kills
				res := Run(chainMain, args, cfg, seed)
				if res.Code == 2 && strings.Contains(res.Err.Error(), "never happened") {
					continue
				}
				runs++
				require.NoError(t, res.Err, "%s, %d PEs, branching %d, seed %d, kills %v", ft, pes, cfg.Branching, seed, kills)
				require.NoError(t, checkChain(chainLogsOf(t, res), args.Steps), "%s, %d PEs, branching %d, seed %d, kills %v", ft, pes, cfg.Branching, seed, kills)
			}
			t.Logf("%s: %d runs (%d events without a failure)", ft, runs, events)
		})
	}
}
