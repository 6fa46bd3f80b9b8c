package ftsim

import (
	"math/rand/v2"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/recovery"
	"github.com/stretchr/testify/require"
)

// Logging without determinants, a PE (its team) failing before every
// event of Mix: each run ends with the failure-free results.
func TestSPMDFailuresAtEveryEvent(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	cfg := chare.Config{PEs: 5, FT: "spmd", Teams: "2", Branching: 2}
	free := Run(Mix, args, cfg, 7)
	require.NoError(t, free.Err)
	runs := 0
	events, err := Sweep(Mix, args, cfg, 7, []int{0, 1, 2, 3, 4}, sweepStride(2, 17), func(free chare.Result, f Failure) {
		runs++
		require.NoError(t, f.Res.Err, "%v", f)
		require.Equal(t, mixLogs(t, free), mixLogs(t, f.Res), "%v", f)
		require.Equal(t, 1, f.Res.Stats.FT.Failures, "%v", f)
	})
	require.NoError(t, err)
	t.Logf("%d runs over %d events", runs, events)
}

// Several failures in one run, at random moments of random PEs (before an
// event or right after a hand-over; teams failing at one moment recover
// together, a team failing while teams recover restarts them again with
// it, or waits for them where copies of checkpoints cross; where both
// copies of a checkpoint went, every PE rolls back to the checkpoint
// directory's), over random interleavings and layouts: each run ends
// with the failure-free results.
func TestSPMDRandomFailuresInOneRun(t *testing.T) {
	trials := 150 * (1 + long())
	if raceOn {
		trials = 20
	}
	// teams of two, of one PE (every PE a team of its own) and chosen at
	// checkpoints: each has had failures of its own
	for i, teams := range []string{"2", "1", "auto"} {
		t.Run("teams "+teams, func(t *testing.T) {
			ran, err := RandomFailures(Mix, MixArgs{Steps: 8, Ckpt: 3}, chare.Config{FT: "spmd", Teams: teams, CheckpointDir: t.TempDir()}, trials, rand.New(rand.NewPCG(38+uint64(i), 3)), func(free, res chare.Result, cfg chare.Config) {
				require.NoError(t, res.Err, "%d PEs, branching %d, seed %d, kills %v", cfg.PEs, cfg.Branching, cfg.Seed, cfg.Kills)
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), "%d PEs, branching %d, seed %d, kills %v", cfg.PEs, cfg.Branching, cfg.Seed, cfg.Kills)
			})
			require.NoError(t, err)
			t.Logf("%d runs with every failure, of %d", ran, trials)
		})
	}
}

// A PE failing right after each message it hands over (a message on its
// way, its sender gone), every PE in turn: each run ends with the
// failure-free results.
func TestSPMDFailuresAfterEveryHandOver(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	cfg := chare.Config{PEs: 5, FT: "spmd", Teams: "2", Branching: 2}
	runs := 0
	events, err := SweepHandOvers(Mix, args, cfg, 7, []int{0, 1, 2, 3, 4}, sweepStride(2, 17), func(free chare.Result, f Failure) {
		runs++
		require.NoError(t, f.Res.Err, "%v", f)
		require.Equal(t, mixLogs(t, free), mixLogs(t, f.Res), "%v", f)
	})
	require.NoError(t, err)
	t.Logf("%d runs over %d hand-overs", runs, events)
}

// A program that is not send-deterministic: Stamp's passes carry the
// clock, Chain's elements send hashes of what they got in the order they
// got it. Logging without determinants cannot recover them (Chain's logs
// come out inconsistent), and with --ft-verify a recovery says so, naming
// the message and its entry: Chain with a PE failing before every third
// event ends either as it must or with that line, never otherwise.
func TestSPMDVerifyCatchesAProgramThatIsNotSendDeterministic(t *testing.T) {
	cfg := chare.Config{PEs: 4, FT: "spmd", Teams: "2", FTVerify: true, Kills: []chare.Kill{{PE: 1, Step: 20}}}
	res := Run(StampProgram, 40, cfg, 4)
	require.ErrorContains(t, res.Err, "--ft-verify: ")
	require.ErrorContains(t, res.Err, "ftsim.stamp.Ring.Pass")
	require.ErrorContains(t, res.Err, "not send-deterministic")

	args := MixArgs{Steps: 6, Ckpt: 3}
	caught, runs := 0, 0
	_, err := Sweep(chainMain, args, chare.Config{PEs: 4, FT: "spmd", Teams: "2", Branching: 2, FTVerify: true}, 11, []int{0, 1, 2, 3}, sweepStride(3, 17), func(free chare.Result, f Failure) {
		runs++
		if f.Res.Err != nil {
			require.ErrorContains(t, f.Res.Err, "--ft-verify: ", "%v", f)
			require.ErrorContains(t, f.Res.Err, "not send-deterministic", "%v", f)
			caught++
			return
		}
		require.NoError(t, checkChain(chainLogsOf(t, f.Res), args.Steps), "%v", f)
	})
	require.NoError(t, err)
	require.Positive(t, caught)
	t.Logf("chain: %d of %d runs caught", caught, runs)

	cfg = chare.Config{PEs: 5, FT: "spmd", Teams: "2", FTVerify: true, Kills: []chare.Kill{{PE: 2, Step: 5}}}
	res = Run(Mix, MixArgs{Steps: 6, Ckpt: 3}, cfg, 4)
	require.NoError(t, res.Err)
	require.Positive(t, res.Stats.Ops.Verified, "copies compared")
}

// Two teams failing at one moment recover together, every moment of a
// run (a PE of each, the copies of their checkpoints held outside both
// teams; where not, every PE rolls back): each run ends with the
// failure-free results.
func TestSPMDTwoTeamsAtOnce(t *testing.T) {
	runs, joint := twoTeams(t, []teamKills{{0, 4, 0}, {1, 5, 0}, {2, 7, 0}, {3, 4, 0}}, func(r recovery.RecoveryStats) bool {
		return len(r.Set) == 4 && r.Failures == 2
	})
	require.Positive(t, joint, "two teams recovered together")
	t.Logf("%d runs, %d recoveries of two teams together", runs, joint)
}

// A team failing while another recovers recovers together with it, the
// other restarting again, every moment of a run (a PE of one team, then
// a PE of another a few events later; neither team holds a copy of a
// checkpoint the other needs; or a PE of the same team again): each run
// ends with the failure-free results, and in some the second failure
// struck before the first recovery had caught up.
func TestSPMDTeamFailingWhileAnotherRecovers(t *testing.T) {
	runs, again := twoTeams(t, []teamKills{{0, 5, 2}, {6, 2, 15}, {0, 1, 5}}, func(r recovery.RecoveryStats) bool {
		return len(r.Again) > 0
	})
	require.Positive(t, again, "a team restarted again with another")
	t.Logf("%d runs, %d with a team restarted again", runs, again)
}

// So too where the teams hold each other's checkpoint copies (the team
// after a team holds its copies): a team recovering that restored its
// snapshots keeps them, and the copies its owners sent it again, as it
// restarts again; where it has not, or the copy is not back yet, the
// failure waits (in one process; across processes every PE rolls back).
func TestSPMDTeamFailingWhileItsCopyHolderRecovers(t *testing.T) {
	// found by the random trials: PE 4 (a team of one) restarted again
	// with PEs 0-1, keeping its memory (it holds the copy of PE 2's
	// checkpoint, PE 1 holds its); when PEs 0-1 failed again, without
	// it, it took them for PEs restarting with it and never answered them
	// (the hand-overs moved when quiescence waves took the spanning tree:
	// PE 0 no longer answers itself by a message)
	cfg := chare.Config{PEs: 5, FT: "spmd", Teams: "2", Branching: 4, CheckpointDir: t.TempDir(),
		Kills: []chare.Kill{{PE: 0, Step: -1, HandOver: 86}, {PE: 1, Step: -1, HandOver: 38}, {PE: 4, Step: -1, HandOver: 29}}}
	free := Run(Mix, MixArgs{Steps: 8, Ckpt: 3}, chare.Config{PEs: 5, FT: "spmd", Teams: "2", Branching: 4}, 55526573379941699)
	res := Run(Mix, MixArgs{Steps: 8, Ckpt: 3}, cfg, 55526573379941699)
	require.NoError(t, res.Err)
	require.Equal(t, mixLogs(t, free), mixLogs(t, res))
	require.Len(t, res.Stats.FT.Recoveries, 3)
	require.Equal(t, []int32{4}, res.Stats.FT.Recoveries[1].Again)

	runs, again := twoTeams(t, []teamKills{{0, 3, 20}, {2, 1, 20}, {5, 7, 40}}, func(r recovery.RecoveryStats) bool {
		return len(r.Again) > 0
	})
	require.Positive(t, again, "a team restarted again with the holder of its copies, or the team whose copies it holds")
	t.Logf("%d runs, %d with a team restarted again", runs, again)
}

// Teams that restarted together recover as one team until the next
// checkpoint: their re-execution exchanged messages as teammates do,
// with phases of its own, and one of them re-executing alone later would
// hold those messages behind orphans that need them (found by the random
// trials on 6 PEs: PEs 4-5 waited for ever). A team of 6 PEs fails (PE
// 3's), the team after it (PE 5's) while it recovers, so both restart
// together; then PE 5 again, after it handed over a message: the first
// team restarts with it, every seventh moment of the run. The same with
// teams of one PE (4 PEs, PE 1 then PE 3): each PE is a team, and the
// two join and merge as teams do.
func TestSPMDTeamsThatRecoveredTogetherFailAgainTogether(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	for _, tc := range []struct {
		pes           int
		teams         string
		first, second int
		after         int // the second's failure, events after the first's
	}{{6, "2", 3, 5, 20}, {4, "1", 1, 3, 20}} {
		merged, runs := 0, 0
		for _, branching := range []int{2, 4} {
			cfg := chare.Config{PEs: tc.pes, FT: "spmd", Teams: tc.teams, Branching: branching}
			free := Run(Mix, args, cfg, 7)
			require.NoError(t, free.Err)
			for e := 1; e < free.Stats.Events; e += sweepStride(7, 61) {
				for _, h := range []uint64{5, 15} {
					c := cfg
					c.Kills = []chare.Kill{{PE: tc.first, Step: -1, Event: e}, {PE: tc.second, Step: -1, Event: e + tc.after}, {PE: tc.second, Step: -1, HandOver: h}}
					res := Run(Mix, args, c, 7)
					if Unfired(res) {
						continue
					}
					runs++
					require.NoError(t, res.Err, "teams %s, branching %d, kills %v", tc.teams, branching, c.Kills)
					require.Equal(t, mixLogs(t, free), mixLogs(t, res), "teams %s, branching %d, kills %v", tc.teams, branching, c.Kills)
					for _, r := range res.Stats.FT.Recoveries {
						if len(r.Merged) > 0 {
							merged++
						}
					}
				}
			}
		}
		require.Positive(t, merged, "teams of %s: teams that recovered together restarted together again", tc.teams)
		t.Logf("teams of %s: %d runs, %d with merged teams restarted together", tc.teams, runs, merged)
	}
}

// Found by random runs of two failures (8 PEs in teams of 2, about one
// run in 40 stalled since the runtime's own messages went down the
// spanning tree): a PE passing a collection's creation on to its
// children sent it as a message of its own, stamped with its own phase,
// higher than the broadcasts to the new collection that it passed on
// with their maker's. Recovering, it held the creation behind a
// survivor's orphan of a lower phase — a broadcast it could make again
// only once it had the collection. A relay now keeps the phase of the
// message it passes on.
func TestSPMDRelayedCreationKeepsItsPhase(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	for _, c := range []struct {
		seed  uint64
		kills []chare.Kill
	}{
		{16, []chare.Kill{{PE: 3, Step: -1, Event: 198}, {PE: 3, Step: -1, Event: 220}}},
		{20, []chare.Kill{{PE: 2, Step: -1, Event: 379}, {PE: 4, Step: -1, Event: 426}}},
		{24, []chare.Kill{{PE: 5, Step: -1, Event: 304}, {PE: 3, Step: -1, Event: 334}}},
		{29, []chare.Kill{{PE: 3, Step: -1, Event: 222}, {PE: 1, Step: -1, Event: 261}}},
		{36, []chare.Kill{{PE: 2, Step: -1, Event: 393}, {PE: 0, Step: -1, Event: 452}}},
	} {
		cfg := chare.Config{PEs: 8, FT: "spmd", Teams: "2", Branching: 2}
		free := Run(Mix, args, cfg, c.seed)
		require.NoError(t, free.Err)
		cfg.Kills = c.kills
		res := Run(Mix, args, cfg, c.seed)
		require.False(t, Unfired(res), "seed %d: both failures happen", c.seed)
		require.NoError(t, res.Err, "seed %d, kills %v", c.seed, c.kills)
		require.Equal(t, mixLogs(t, free), mixLogs(t, res), "seed %d, kills %v", c.seed, c.kills)
	}
}

// teamKills: PE first fails, and PE second after more events (0: at the
// same moment).
type teamKills struct{ first, second, after int }

// twoTeams runs Mix on 8 PEs in teams of 2 with each of kills at every
// third event (sweepStride: every event under FT_LONG, every 29th under
// the race detector), each run ending with the failure-free results, and
// returns how many runs had both failures and how many recoveries
// counted.
func twoTeams(t *testing.T, kills []teamKills, counts func(recovery.RecoveryStats) bool) (runs, counted int) {
	t.Helper()
	args := MixArgs{Steps: 6, Ckpt: 3}
	cfg := chare.Config{PEs: 8, FT: "spmd", Teams: "2", Branching: 2}
	free := Run(Mix, args, cfg, 7)
	require.NoError(t, free.Err)
	for e := 1; e <= free.Stats.Events; e += sweepStride(3, 29) {
		for _, k := range kills {
			c := cfg
			c.Kills = []chare.Kill{{PE: k.first, Step: -1, Event: e}, {PE: k.second, Step: -1, Event: e + k.after}}
			res := Run(Mix, args, c, 7)
			if Unfired(res) {
				continue
			}
			runs++
			require.NoError(t, res.Err, "kills %v", c.Kills)
			require.Equal(t, mixLogs(t, free), mixLogs(t, res), "kills %v", c.Kills)
			for _, r := range res.Stats.FT.Recoveries {
				if counts(r) {
					counted++
				}
			}
		}
	}
	return runs, counted
}

// Runs of the random trials that once stalled or failed (each a message
// held behind an orphan it depends on, or a broadcast overtaking one
// held: see ftlayer's TestSPMDOrphanNamedByItsContentsKeepsItsFirstPhase,
// TestSPMDSurvivorListsAnOrphanWithTheLowestPhaseItHad and
// TestSPMDBroadcastAgainIsRelayedOnlyOnceHandled) end with the
// failure-free logs.
func TestSPMDRandomTrialsThatOnceStalled(t *testing.T) {
	ev := func(pe, event int) chare.Kill { return chare.Kill{PE: pe, Step: -1, Event: event} }
	ho := func(pe int, n uint64) chare.Kill { return chare.Kill{PE: pe, Step: -1, HandOver: n} }
	for _, c := range []struct {
		name          string
		teams         string
		pes, branches int
		seed          uint64
		kills         []chare.Kill
	}{
		{"trials seed 808", "2", 5, 4, 14304224994937111232, []chare.Kill{ev(1, 28), ho(2, 18), ev(0, 440)}},
		{"trials seed 111", "1", 7, 3, 4782113849504771900, []chare.Kill{ev(4, 283), ev(1, 488), ev(5, 197)}},
		{"trials seed 606", "1", 6, 3, 1558228300059218436, []chare.Kill{ev(2, 785), ev(0, 300), ev(5, 744)}},
		{"trials seed 15", "2", 6, 2, 7008080731784583512, []chare.Kill{ev(0, 638), ev(4, 168), ev(1, 241)}},
		{"trials seed 10", "1", 4, 2, 2388570117555020301, []chare.Kill{ho(3, 35), ev(1, 467), ho(0, 65)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := MixArgs{Steps: 8, Ckpt: 3}
			cfg := chare.Config{PEs: c.pes, FT: "spmd", Teams: c.teams, Branching: c.branches}
			free := Run(Mix, args, cfg, c.seed)
			require.NoError(t, free.Err)
			cfg.Kills, cfg.Seed, cfg.CheckpointDir = c.kills, c.seed, t.TempDir()
			res := Run(Mix, args, cfg, c.seed)
			require.False(t, Unfired(res), "every failure happens")
			require.NoError(t, res.Err)
			require.Equal(t, mixLogs(t, free), mixLogs(t, res))
		})
	}
}
