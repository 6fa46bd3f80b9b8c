package ftsim

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// long is FT_LONG (0 if unset): the long mode runs 150·FT_LONG random
// failure runs more per protocol in the random sweeps.
func long() int {
	n, _ := strconv.Atoi(os.Getenv("FT_LONG"))
	return max(n, 0)
}

// sweepStride is how many events a sweep steps over between two failure
// points: every one under FT_LONG, underRace under -race, else normal.
func sweepStride(normal, underRace int) int {
	switch {
	case raceOn:
		return underRace
	case long() > 0:
		return 1
	}
	return normal
}

// withDir gives random failure runs under checkpoint/restart a checkpoint
// directory: failures that overlap are one failure of all their PEs
// there, and a PE and its buddy among them take both copies of its
// snapshot with them (the run would end saying so); from the directory
// it recovers.
func withDir(t *testing.T, c chare.Config) chare.Config {
	if c.FT == "none" || c.FT == "pessimist" {
		// (under pessimist failures due at one moment are one failure,
		// which may take a PE and its buddy)
		c.CheckpointDir = t.TempDir()
	}
	return c
}

// protocols are what every sweep runs: each protocol; team-based logging
// and CAMEL with teams, in teams of two PEs.
var protocols = []chare.Config{{FT: "none"}, {FT: "scmel"}, {FT: "camel"}, {FT: "team", Teams: "2"}, {FT: "camel", Teams: "2"}, {FT: "pessimist"}}

// protoStride is a sweep's stride for a protocol: pessimist's single
// failures every other event (its PEs failing at once are swept every
// other event too, TestPessimistFailuresOfSeveralPEsAtOnce), to keep the
// suite in CI's budget; every event under FT_LONG.
func protoStride(c chare.Config, stride int) int {
	if c.FT == "pessimist" && long() == 0 {
		return max(stride, 2)
	}
	return stride
}

// protoName names a configuration of protocols for a subtest.
func protoName(c chare.Config) string {
	if c.Teams != "" && c.FT != "team" {
		return c.FT + "+teams"
	}
	return c.FT
}

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

// Every protocol, a PE failing before every event of a run: each run
// ends with the failure-free results. The 5 PEs take the events in turn,
// four by four (every PE before every event under FT_LONG; CI's budget
// has no room for more).
func TestFailuresAtEveryEvent(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	stride := sweepStride(4, 17) // (CI's budget: every event under FT_LONG)
	for _, pc := range protocols {
		ft := pc.FT
		name := protoName(pc)
		t.Run(name, func(t *testing.T) {
			runs := 0
			events, err := Sweep(Mix, args, chare.Config{PEs: 5, FT: ft, Teams: pc.Teams, Branching: 2}, 7, []int{0, 1, 2, 3, 4}, protoStride(pc, stride), func(free chare.Result, f Failure) {
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
	trials := 150 * (1 + long())
	if raceOn {
		trials = 20
	}
	for _, pc := range protocols {
		ft := pc.FT
		name := protoName(pc)
		t.Run(name, func(t *testing.T) {
			ran, err := RandomFailures(Mix, args, withDir(t, pc), trials, rand.New(rand.NewPCG(uint64(len(ft)), 3)), func(free, res chare.Result, cfg chare.Config) {
				require.NoError(t, res.Err, "%s, %d PEs, branching %d, seed %d, kills %v", ft, cfg.PEs, cfg.Branching, cfg.Seed, cfg.Kills)
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), "%s, %d PEs, branching %d, seed %d, kills %v", ft, cfg.PEs, cfg.Branching, cfg.Seed, cfg.Kills)
			})
			require.NoError(t, err)
			t.Logf("%s: %d runs with every failure, of %d", ft, ran, trials)
		})
	}
}

func chainLogsOf(t *testing.T, r chare.Result) []ChainLog {
	t.Helper()
	return mainOf[*ChainMain](t, r).All
}

// mainOf is a run's main chare, of type M.
func mainOf[M any](t *testing.T, r chare.Result) M {
	t.Helper()
	m, ok := r.Main.(M)
	require.True(t, ok, "no main chare: %v", r.Err)
	return m
}

// The order-sensitive program: a PE failing before every event (the 4
// PEs in turn, four by four; every PE before every event under
// FT_LONG; a stride of them under -race), and random failures, each
// run's logs consistent.
func TestFailuresReplayTheOrderThatHappened(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	stride, trials := sweepStride(4, 17), 100 // (CI's budget)
	if long() > 0 {
		trials = 150 * (1 + long())
	}
	if raceOn {
		trials = 20
	}
	for _, pc := range protocols {
		ft := pc.FT
		name := protoName(pc)
		t.Run(name, func(t *testing.T) {
			runs := 0
			events, err := Sweep(chainMain, args, chare.Config{PEs: 4, FT: ft, Teams: pc.Teams, Branching: 2}, 11, []int{0, 1, 2, 3}, protoStride(pc, stride), func(free chare.Result, f Failure) {
				runs++
				require.NoError(t, f.Res.Err, "%s, %v", ft, f)
				require.NoError(t, checkChain(chainLogsOf(t, f.Res), args.Steps), "%s, %v", ft, f)
			})
			require.NoError(t, err)
			ran, err := RandomFailures(chainMain, args, withDir(t, pc), trials, rand.New(rand.NewPCG(uint64(len(ft)), 5)), func(free, res chare.Result, cfg chare.Config) {
				require.NoError(t, checkChain(chainLogsOf(t, free), args.Steps))
				require.NoError(t, res.Err, "%s, %d PEs, branching %d, seed %d, kills %v", ft, cfg.PEs, cfg.Branching, cfg.Seed, cfg.Kills)
				require.NoError(t, checkChain(chainLogsOf(t, res), args.Steps), "%s, %d PEs, branching %d, seed %d, kills %v", ft, cfg.PEs, cfg.Branching, cfg.Seed, cfg.Kills)
			})
			require.NoError(t, err)
			runs += ran
			t.Logf("%s: %d runs (%d events without a failure)", ft, runs, events)
		})
	}
}

// Every PE failing in the middle of what its handler sends, after each
// message it hands over: a multicast forwarded to some children only, a
// partial sent and the acknowledgements not (spec scenarios 2 and 4).
func TestFailuresInTheMiddleOfAHandler(t *testing.T) {
	stride := 1
	if raceOn {
		stride = 13
	}
	for _, pc := range protocols {
		ft := pc.FT
		name := protoName(pc)
		t.Run(name, func(t *testing.T) {
			runs := 0
			n, err := SweepHandOvers(Mix, MixArgs{Steps: 6, Ckpt: 3}, chare.Config{PEs: 5, FT: ft, Teams: pc.Teams, Branching: 2}, 7, []int{0, 1, 2, 3, 4}, stride, func(free chare.Result, f Failure) {
				runs++
				require.NoError(t, f.Res.Err, "%s, PE %d after hand-over %d", ft, f.PE, f.Event)
				require.Equal(t, mixLogs(t, free), mixLogs(t, f.Res), "%s, PE %d after hand-over %d", ft, f.PE, f.Event)
			})
			require.NoError(t, err)
			runs2 := 0
			_, err = SweepHandOvers(chainMain, MixArgs{Steps: 6, Ckpt: 3}, chare.Config{PEs: 4, FT: ft, Teams: pc.Teams, Branching: 2}, 11, []int{0, 1, 2, 3}, stride, func(free chare.Result, f Failure) {
				runs2++
				require.NoError(t, f.Res.Err, "%s, PE %d after hand-over %d", ft, f.PE, f.Event)
				require.NoError(t, checkChain(chainLogsOf(t, f.Res), 6), "%s, PE %d after hand-over %d", ft, f.PE, f.Event)
			})
			require.NoError(t, err)
			t.Logf("%s: %d runs over %d hand-overs, %d of the order-sensitive program", ft, runs, n, runs2)
		})
	}
}

// Found by the sweeps: a PE's recovery ended when the marker that a
// survivor's replay was complete (a system message) overtook the
// replayed application messages, which bring back the determinants it
// keeps for others; a failure of one of those next found them missing
// and its own recovery waited forever for its first reception. The
// marker now travels behind them (pe.FlagAppLane).
func TestRecoveryEndsOnlyOnceTheReplaysAreIn(t *testing.T) {
	for _, c := range []struct {
		ft    string
		kills []chare.Kill
	}{
		{"scmel", []chare.Kill{{PE: 1, Step: -1, HandOver: 4}, {PE: 0, Step: -1, HandOver: 8}, {PE: 0, Step: -1, Event: 291}}},
		{"camel", []chare.Kill{{PE: 1, Step: -1, HandOver: 4}, {PE: 0, Step: -1, HandOver: 9}, {PE: 0, Step: -1, Event: 320}}},
	} {
		res := Run(chainMain, MixArgs{Steps: 6, Ckpt: 3}, chare.Config{PEs: 3, FT: c.ft, Branching: 4, Kills: c.kills}, 801819729420238534)
		if Unfired(res) {
			continue // the interleaving no longer reaches every moment
		}
		require.NoError(t, res.Err, c.ft)
		require.NoError(t, checkChain(chainLogsOf(t, res), 6), c.ft)
	}
}

// A PE and its buddy failing before the same event: nobody holds one of
// their snapshots any more, and the checkpoint directory has it (or the
// run starts again, before the first checkpoint).
func TestAPEAndItsBuddyFailingTogether(t *testing.T) {
	stride := sweepStride(8, 37) // (CI's budget: every event under FT_LONG)
	for _, pc := range protocols {
		ft := pc.FT
		name := protoName(pc)
		t.Run(name, func(t *testing.T) {
			cfg := chare.Config{PEs: 4, FT: ft, Teams: pc.Teams, Branching: 2}
			free := Run(Mix, MixArgs{Steps: 6, Ckpt: 3}, cfg, 5)
			require.NoError(t, free.Err)
			for e := 1; e <= free.Stats.Events; e += stride {
				c := cfg
				c.CheckpointDir = t.TempDir()
				c.Kills = []chare.Kill{{PE: 1, Step: -1, Event: e}, {PE: 2, Step: -1, Event: e}}
				res := Run(Mix, MixArgs{Steps: 6, Ckpt: 3}, c, 5)
				if Unfired(res) {
					continue // the second waited for the first's recovery, and the run ended first
				}
				require.NoError(t, res.Err, "%s, before event %d", ft, e)
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), "%s, before event %d", ft, e)
				require.Equal(t, 2, res.Stats.FT.Failures)
			}
		})
	}
}

// Spec scenarios 7 and 8 under team-based logging (teams {0,1}, {2,3}
// and {4,5}): two failures in the same team (at once: one team failure; or
// one after the other) and in different teams (at once: the second team
// waits for the first to catch up, down once the first has what it needs
// from it; or staggered), before every stride-th
// event. Each run ends with the failure-free results, having rolled back
// the failed teams alone — unless a failure struck while a checkpoint was
// being taken, when every PE rolls back.
func TestTwoFailuresInTeams(t *testing.T) {
	// (CI's budget, every event under FT_LONG; TestFailureQueuedBehindARecovery
	// sweeps teams failing while another recovers too)
	stride := sweepStride(5, 41)
	args := MixArgs{Steps: 6, Ckpt: 3}
	for _, ft := range []string{"team", "camel"} {
		cfg := chare.Config{PEs: 6, FT: ft, Teams: "2", Branching: 2}
		free := Run(Mix, args, cfg, 5)
		require.NoError(t, free.Err)
		twoFailures(t, cfg, free, args, stride)
	}
}

func twoFailures(t *testing.T, cfg chare.Config, free chare.Result, args MixArgs, stride int) {
	for _, c := range []struct {
		name     string
		a, b     int // the PEs that fail
		later    int // events between the two failures
		teamOnly int // PEs rolled back when neither struck in a checkpoint
	}{
		{"same team at once", 0, 1, 0, 2},
		{"same team staggered", 1, 0, 57, 4},
		{"different teams at once", 1, 2, 0, 4},
		{"different teams staggered", 5, 0, 57, 4},
	} {
		t.Run(protoName(cfg)+" "+c.name, func(t *testing.T) {
			runs, alone := 0, 0
			for e := 1; e+c.later <= free.Stats.Events; e += stride {
				rc := cfg
				rc.Kills = []chare.Kill{{PE: c.a, Step: -1, Event: e}, {PE: c.b, Step: -1, Event: e + c.later}}
				res := Run(Mix, args, rc, 5)
				if Unfired(res) {
					continue // the second waited for the first's recovery, and the run ended first
				}
				runs++
				require.NoError(t, res.Err, "%s, before event %d", c.name, e)
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), "%s, before event %d", c.name, e)
				require.Equal(t, 2, res.Stats.FT.Failures, "%s, before event %d", c.name, e)
				if res.Stats.FT.PEsRolledBack == c.teamOnly {
					alone++
				}
			}
			require.Positive(t, alone, "no run rolled back the failed teams alone")
			t.Logf("%s: %d runs, %d of them rolled back only the failed teams", c.name, runs, alone)
		})
	}
}

// Found by the log limit's random runs (issue 36), without any limit: a
// recovered inner node of a reduction tree sends its partials again as it
// re-executes, and each takes along the determinants its children's
// partials brought since, which may be new. The root dropped the copy of
// an earlier round whole, and with it a leaf's new determinant: the
// leaf's next failure found the order of that reception nowhere and its
// recovery waited for ever. A copy's determinants now go on as a first
// copy's would.
func TestTwoFailuresKeepTheDeterminantsOfReexecutedPartials(t *testing.T) {
	args := MixArgs{Steps: 8, Ckpt: 3}
	const seed = 11744652261470521225
	cfg := chare.Config{PEs: 6, Branching: 3, FT: "camel", Seed: seed}
	free := Run(Mix, args, cfg, seed)
	require.NoError(t, free.Err)
	cfg.Kills = []chare.Kill{{PE: 5, Step: -1, Event: 1229}, {PE: 1, Step: -1, Event: 1019}}
	res := Run(Mix, args, cfg, seed)
	require.False(t, Unfired(res), "both failures happen")
	require.NoError(t, res.Err)
	require.Equal(t, mixLogs(t, free), mixLogs(t, res))
	require.Equal(t, 2, res.Stats.FT.Failures)
}

// Runs the sweeps found ending wrongly, each pinned by its seed and its
// failures (the moments are the schedules' of the day they were found):
//
//   - three failures one after another, camel with teams (the random
//     runs): team {4,5} recovered, and PE 4's re-execution made its
//     reception 8 again. PE 0 had stored that reception's determinant
//     from PE 4's old incarnation and acknowledged it again, so the new
//     incarnation dropped it before sending it on. Then team {0,1} failed
//     and recovered: nothing brought it back to them (the old
//     incarnation's message that carried it was gone with its log). When
//     PE 5 failed again, PE 4's recovery found reception 8's order
//     nowhere and waited for ever. A new incarnation now drops only what
//     it sent on itself.
//   - a team failing with its root's broadcast in flight (the sweeps
//     under FT_LONG, once DoneInserting went down the spanning tree and
//     the schedules moved): team {0,1} failed while the broadcast of the
//     next step was on its way to another team, which had it from the
//     root with the root's determinants; a third team had it from PE 1,
//     the root's teammate, without them, and replied. The team's
//     re-execution found none of those receptions recorded and took the
//     reply before a message of the step before: the run ended with
//     another result and no error. A copy a teammate passes on to
//     another team now takes the team's determinants not yet safe.
func TestFailuresTheSweepsFound(t *testing.T) {
	for _, c := range []struct {
		name  string
		steps int
		seed  uint64
		kills []chare.Kill
	}{
		{"a team failing again after its determinants' holders recovered", 8, 12875571126376018924,
			[]chare.Kill{{PE: 5, Step: -1, Event: 218}, {PE: 0, Step: -1, HandOver: 48}, {PE: 5, Step: -1, Event: 752}}},
		{"a team failing with its root's broadcast in flight", 6, 5,
			[]chare.Kill{{PE: 0, Step: -1, Event: 889}, {PE: 1, Step: -1, Event: 889}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := MixArgs{Steps: c.steps, Ckpt: 3}
			cfg := chare.Config{PEs: 6, FT: "camel", Teams: "2", Branching: 2}
			free := Run(Mix, args, cfg, c.seed)
			require.NoError(t, free.Err)
			cfg.Kills = c.kills
			res := Run(Mix, args, cfg, c.seed)
			require.False(t, Unfired(res), "every failure happens")
			require.NoError(t, res.Err)
			require.Equal(t, mixLogs(t, free), mixLogs(t, res))
		})
	}
}

// A PE failed and recovered, then another whose checkpoint predates the
// first failure: its restarted incarnation took the first PE's old
// incarnation's partial, still waiting for it, and its re-execution's for
// the same reduction, numbered otherwise ("second partial"; found by the
// random runs under FT_LONG). A survivor's recovery packet says its
// incarnation now, and what is older is dropped.
func TestTwoFailuresTheSecondRestartedFromBeforeTheFirst(t *testing.T) {
	for _, limit := range []uint64{0, 256} {
		cfg := chare.Config{FT: "scmel", LogLimit: limit, PEs: 4, Branching: 3}
		free := Run(Mix, MixArgs{Steps: 8, Ckpt: 3}, cfg, 12994499601787273718)
		require.NoError(t, free.Err)
		cfg.Kills = []chare.Kill{{PE: 0, Step: -1, Event: 451}, {PE: 3, Step: -1, Event: 424}}
		res := Run(Mix, MixArgs{Steps: 8, Ckpt: 3}, cfg, 12994499601787273718)
		require.NoError(t, res.Err, "limit %d", limit)
		require.Len(t, res.Stats.FT.Recoveries, 2)
		require.Equal(t, mixLogs(t, free), mixLogs(t, res), "limit %d", limit)
	}
}
