package ftsim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// Scenario 12 of the FT test matrix (specs/ft-scenarios.md): a log limit
// (MCML). The limits are a few hundred bytes a PE, against Mix's logs of
// a few kilobytes an epoch: channels stop logging in the middle of each
// epoch, a failure rolls back with the failed PE those that stopped
// logging to it and, through them, chains of PEs, and every channel logs
// again after each checkpoint (failures early in an epoch roll back the
// failed PE alone).
var limited = []chare.Config{{FT: "scmel", LogLimit: 256}, {FT: "scmel", LogLimit: 1024}, {FT: "team", Teams: "2", LogLimit: 256},
	{FT: "scmel", LogLimit: 256, LogLimitStrategy: "cluster"}, {FT: "camel", LogLimit: 128},
	{FT: "camel", Teams: "2", LogLimit: 128}}

func limitName(c chare.Config) string {
	ft := c.FT
	if c.Teams != "" && ft != "team" {
		ft += "+teams"
	}
	return fmt.Sprintf("%s,limit=%d,%s", ft, c.LogLimit, cmp.Or(c.LogLimitStrategy, "heaviest"))
}

// rollbackShapes counts a sweep's recoveries by the size of their
// rollback sets beyond the failed PE's team, and by their chains.
type rollbackShapes struct {
	bigger, chains, alone int
}

func (r *rollbackShapes) note(t *testing.T, c chare.Config, f Failure) {
	t.Helper()
	for _, rec := range f.Res.Stats.FT.Recoveries {
		if rec.Set == nil {
			continue // a global rollback (a failure while a checkpoint was taken)
		}
		require.Contains(t, rec.Set, int32(f.PE), "%s, %v: the failed PE is in its rollback set %v", limitName(c), f, rec.Set)
		require.True(t, slices.IsSorted(rec.Set))
		team := 1
		if c.Teams != "" {
			team = 2
		}
		switch {
		case len(rec.Set) > team:
			r.bigger++
		default:
			r.alone++
		}
		if rec.Chain >= 2 {
			r.chains++
		}
		require.Equal(t, len(rec.Set), rec.PEs)
	}
}

// Every PE failing before every event (every 5th; under FT_LONG every
// one; a stride under -race) of a run whose PEs stop logging on
// channels: each run ends with the failure-free results, and among the
// failures are rollback sets larger than the failed PE (its channel's
// senders roll back with it), chains of them, and failures that roll
// back alone (logging on again after a checkpoint).
func TestLogLimitFailuresAtEveryEvent(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	stride := sweepStride(5, 29) // (CI's budget)
	for _, c := range limited {
		t.Run(limitName(c), func(t *testing.T) {
			c.PEs, c.Branching = 5, 2
			var shapes rollbackShapes
			runs := 0
			events, err := Sweep(Mix, args, c, 7, []int{0, 1, 2, 3, 4}, stride, func(free chare.Result, f Failure) {
				runs++
				require.NoError(t, f.Res.Err, "%s, %v", limitName(c), f)
				require.Equal(t, mixLogs(t, free), mixLogs(t, f.Res), "%s, %v", limitName(c), f)
				require.Equal(t, 1, f.Res.Stats.FT.Failures, "%s, %v", limitName(c), f)
				require.NotZero(t, free.Stats.FT.Log.ChannelsOff, "the limit turns channels off")
				shapes.note(t, c, f)
			})
			require.NoError(t, err)
			t.Logf("%s: %d runs over %d events: %d rollback sets larger than the failed PE's team (%d with chains of 2 or more), %d alone",
				limitName(c), runs, events, shapes.bigger, shapes.chains, shapes.alone)
			if !raceOn {
				require.NotZero(t, shapes.bigger, "senders on unlogged channels roll back")
				require.NotZero(t, shapes.alone, "after a checkpoint every channel logs")
				if c.LogLimit <= 256 {
					require.NotZero(t, shapes.chains, "chains of unlogged channels")
				}
			}
		})
	}
}

// The order-sensitive program under a limit, every PE failing before
// every 4th event (every one under FT_LONG), and several failures at
// random in a run: no
// rolled-back PE replays its receptions in another order than they
// happened (an orphan would show in the logs).
func TestLogLimitReplaysTheOrderThatHappened(t *testing.T) {
	args := MixArgs{Steps: 6, Ckpt: 3}
	stride, trials := 4, 50*(1+long())
	switch {
	case raceOn:
		stride, trials = 23, 10
	case long() > 0:
		stride = 1
	}
	for _, c := range limited {
		t.Run(limitName(c), func(t *testing.T) {
			cfg := c
			cfg.PEs, cfg.Branching = 4, 2
			var shapes rollbackShapes
			_, err := Sweep(chainMain, args, cfg, 11, []int{0, 1, 2, 3}, stride, func(free chare.Result, f Failure) {
				require.NoError(t, f.Res.Err, "%s, %v", limitName(c), f)
				require.NoError(t, checkChain(chainLogsOf(t, f.Res), args.Steps), "%s, %v", limitName(c), f)
				shapes.note(t, cfg, f)
			})
			require.NoError(t, err)
			if !raceOn {
				require.NotZero(t, shapes.bigger)
			}
			ran, err := RandomFailures(chainMain, args, c, trials, rand.New(rand.NewPCG(c.LogLimit, 12)), func(free, res chare.Result, rc chare.Config) {
				require.NoError(t, res.Err, "%s, %d PEs, branching %d, seed %d, kills %v", limitName(c), rc.PEs, rc.Branching, rc.Seed, rc.Kills)
				require.NoError(t, checkChain(chainLogsOf(t, res), args.Steps), "%s, %d PEs, branching %d, seed %d, kills %v", limitName(c), rc.PEs, rc.Branching, rc.Seed, rc.Kills)
			})
			require.NoError(t, err)
			t.Logf("%s: %d sets larger than the failed team; %d random runs with every failure, of %d", limitName(c), shapes.bigger, ran, trials)
		})
	}
}

// Several failures in one run of Mix under a limit, at random events of
// random PEs over random interleavings.
func TestLogLimitRandomFailures(t *testing.T) {
	args := MixArgs{Steps: 8, Ckpt: 3}
	trials := 100 * (1 + long())
	if raceOn {
		trials = 10
	}
	for _, c := range limited {
		t.Run(limitName(c), func(t *testing.T) {
			ran, err := RandomFailures(Mix, args, c, trials, rand.New(rand.NewPCG(c.LogLimit, 3)), func(free, res chare.Result, rc chare.Config) {
				require.NoError(t, res.Err, "%s, %d PEs, branching %d, seed %d, kills %v", limitName(c), rc.PEs, rc.Branching, rc.Seed, rc.Kills)
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), "%s, %d PEs, branching %d, seed %d, kills %v", limitName(c), rc.PEs, rc.Branching, rc.Seed, rc.Kills)
			})
			require.NoError(t, err)
			t.Logf("%s: %d runs with every failure, of %d", limitName(c), ran, trials)
		})
	}
}

// Two failures in a run under a limit, the second after the first's
// recovery, of a PE its rollback set took along or of another: the second
// is a failure of its own, whose set is computed afresh (found by LeanMD
// runs: the PEs of the first set took the second failed PE for a fellow
// of the first rollback and replayed nothing to it).
func TestLogLimitTwoFailuresOneAfterTheOther(t *testing.T) {
	args := MixArgs{Steps: 8, Ckpt: 3}
	stride := 9
	if raceOn {
		stride = 97
	}
	c := chare.Config{FT: "scmel", LogLimit: 256, PEs: 5, Branching: 2}
	free := Run(Mix, args, c, 3)
	require.NoError(t, free.Err)
	afterASet, runs := 0, 0
	for e := 1; e <= free.Stats.Events; e += stride {
		for _, gap := range []int{40, 160} {
			for _, pq := range [][2]int{{1, 2}, {3, 0}, {2, 2}} {
				cfg := c
				cfg.Kills = []chare.Kill{{PE: pq[0], Step: -1, Event: e}, {PE: pq[1], Step: -1, Event: e + gap}}
				res := Run(Mix, args, cfg, 3)
				if Unfired(res) {
					continue
				}
				runs++
				name := fmt.Sprintf("PE %d before event %d, PE %d before event %d", pq[0], e, pq[1], e+gap)
				require.NoError(t, res.Err, name)
				require.Equal(t, mixLogs(t, free), mixLogs(t, res), name)
				if rs := res.Stats.FT.Recoveries; len(rs) == 2 && len(rs[0].Set) > 1 && rs[1].Set != nil && slices.Contains(rs[0].Set, int32(pq[1])) {
					afterASet++
				}
			}
		}
	}
	t.Logf("%d runs with both failures; %d whose second failed PE had rolled back with the first", runs, afterASet)
	if !raceOn {
		require.NotZero(t, afterASet)
	}
}

// Runs under a limit in which a root rolled back with its keeper, a
// failed PE with an inner node of its multicasts' tree, or any PE
// without failing, then another failure came (found by the random runs
// under FT_LONG; named for them, so that the mutations' runs take them
// too). In the
// first, the keeper, rolled back without failing, had
// dropped the results it kept: its re-execution does not make them, and
// the root's later failure found them nowhere. In the second, the root
// had told its fellows a reduction complete whose result was still on
// its way to the keeper, the keeper dropped it (the root's old
// incarnation's), and the fellows sent no partial for it again.
func TestLogLimitFailuresAfterARollback(t *testing.T) {
	teams := chare.Config{FT: "camel", Teams: "2", LogLimit: 128, PEs: 7}
	camel := func(pes, branching int) chare.Config {
		return chare.Config{FT: "camel", LogLimit: 128, PEs: pes, Branching: branching}
	}
	scmel := func(limit uint64, strategy string, pes, branching int) chare.Config {
		return chare.Config{FT: "scmel", LogLimit: limit, LogLimitStrategy: strategy, PEs: pes, Branching: branching}
	}
	branching := func(c chare.Config, b int) chare.Config { c.Branching = b; return c }
	for _, r := range []struct {
		why   string
		cfg   chare.Config
		chain bool // the order-sensitive program, checked by its logs (else Mix, against a failure-free run)
		seed  uint64
		kills []chare.Kill
	}{
		{"a keeper rolled back without failing dropped the results it kept", branching(teams, 3), false, 7114443935915565398,
			[]chare.Kill{{PE: 0, Step: -1, Event: 1183}, {PE: 0, Step: -1, Event: 1197}}},
		{"a root told its fellows a reduction complete whose result was on its way to its keeper", branching(teams, 4), true, 1341811054534183918,
			[]chare.Kill{{PE: 3, Step: -1, Event: 634}, {PE: 3, Step: -1, HandOver: 24}, {PE: 0, Step: -1, HandOver: 122}}},
		// a keeper failed in a rollback in which its root did not, heard
		// from the root which reductions were complete, and told the
		// root's other children to drop their partials of one whose
		// result it no longer had; the root failed next and waited
		{"a keeper acknowledged a result it did not hold", camel(4, 3), false, 16009483518335382477,
			[]chare.Kill{{PE: 1, Step: -1, Event: 802}, {PE: 3, Step: -1, Event: 564}, {PE: 0, Step: -1, HandOver: 140}}},
		// a keeper failed in a rollback in which its root did not, was
		// told the root's reductions were complete (so sent no partial
		// for them again), and got the last result again only from the
		// root's re-execution — whose copy was on its way when the root
		// failed; now the root hands it its kept results as it restarts
		{"a failed keeper waited for a result only its root's re-execution made", camel(3, 3), false, 917142029731216221,
			[]chare.Kill{{PE: 1, Step: -1, HandOver: 63}, {PE: 0, Step: -1, HandOver: 94}}},
		// a failed PE whose multicast came down through an inner node
		// rolled back without failing, which delivered (and forwarded)
		// it only in the turn it had recorded, after a message the
		// failed PE sends only once it has the multicast: a cycle, until
		// the root sent the multicast straight to the failed PE too
		{"a failed PE below an inner node rolled back without failing", camel(6, 3), true, 4868385870984694878,
			[]chare.Kill{{PE: 1, Step: -1, HandOver: 54}, {PE: 1, Step: -1, Event: 721}, {PE: 5, Step: -1, Event: 846}}},
		// a PE rolled back without failing, below an inner node of a
		// multicast's tree rolled back with it, replays its recorded
		// order, in which the multicast came straight from the root (it
		// had failed in the first rollback): it waited for its parent's
		// forward, which waited for a message it sends once it has the
		// multicast
		{"a PE rolled back without failing below an inner node rolled back too", camel(7, 2), false, 8556973420410111290,
			[]chare.Kill{{PE: 5, Step: -1, HandOver: 26}, {PE: 2, Step: -1, Event: 596}, {PE: 4, Step: -1, Event: 97}}},
		// a root rolled back without failing kept the determinants it
		// held for others, and took a child's as stored when the child's
		// partial brought them again, so the result it kept did not carry
		// them; the root failed next (with them), then the child's team,
		// which delivered the next step's multicast ahead of the
		// reception that multicast depended on (its determinant lost),
		// and its contribution counted for the wrong reduction
		{"a root rolled back without failing took its inherited determinants for stored", branching(teams, 4), true, 14295414038499445631,
			[]chare.Kill{{PE: 1, Step: -1, HandOver: 70}, {PE: 5, Step: -1, HandOver: 23}, {PE: 2, Step: -1, Event: 1078}}},
		// a PE rolled back without failing replays its own order, some
		// of which only a PE failing with it held; the survivors took
		// those as stored (they had stored later ones), the copies its
		// re-execution sent were dropped, and its next failure found a
		// reception's order nowhere: now a PE outside the rollback
		// stores the order before the recovery ends
		{"a PE rolled back without failing held the only copy of its order", scmel(1024, "", 7, 4), false, 5873861987927455493,
			[]chare.Kill{{PE: 0, Step: -1, HandOver: 107}, {PE: 1, Step: -1, Event: 253}}},
		{"a PE rolled back without failing held the only copy of its order (cluster)", scmel(256, "cluster", 5, 4), false, 7867880976812262481,
			[]chare.Kill{{PE: 1, Step: -1, HandOver: 59}, {PE: 4, Step: -1, Event: 567}, {PE: 0, Step: -1, Event: 590}}},
		{"a PE rolled back without failing held the only copy of its order (teams)", branching(teams, 2), false, 6140042847698953385,
			[]chare.Kill{{PE: 5, Step: -1, HandOver: 3}, {PE: 0, Step: -1, HandOver: 91}}},
		{"a PE rolled back without failing held the only copy of its order (team)", chare.Config{FT: "team", Teams: "2", LogLimit: 256, PEs: 5, Branching: 4}, false, 10353988255505780870,
			[]chare.Kill{{PE: 2, Step: -1, HandOver: 1}, {PE: 0, Step: -1, Event: 163}}},
		// the PE that stored it failed, then the PE rolled back: the
		// stored order is sent to the storing PE's new incarnation
		{"the PE storing a rolled-back PE's order failed before it", scmel(256, "", 3, 3), false, 4775460983218494031,
			[]chare.Kill{{PE: 2, Step: -1, Event: 54}, {PE: 0, Step: -1, Event: 195}, {PE: 1, Step: -1, Event: 13}}},
		// (a wrong answer of a first version of the store, which
		// dropped the order once stored)
		{"a rolled-back PE's stored order and two more failures", camel(7, 2), false, 14597386050983630190,
			[]chare.Kill{{PE: 4, Step: -1, HandOver: 36}, {PE: 1, Step: -1, Event: 190}, {PE: 2, Step: -1, Event: 175}}},
		// a root rolled back without failing completed a reduction from
		// the result its keeper kept, and told a failed PE so; an inner
		// node rolled back with it heard it only in its protocol, and
		// its runtime waited for that PE's partial, which the PE, failed
		// again, did not send (now the runtime hears every completion a
		// restarted incarnation's protocol hears)
		{"an inner node rolled back waited for a partial of a reduction its root completed", camel(6, 3), false, 9012982173757027274,
			[]chare.Kill{{PE: 4, Step: -1, Event: 1118}, {PE: 4, Step: -1, Event: 882}}},
		{"an inner node rolled back waited for a partial of a reduction its root completed (teams)", branching(teams, 2), true, 1807410452188694073,
			[]chare.Kill{{PE: 6, Step: -1, Event: 767}, {PE: 3, Step: -1, Event: 420}, {PE: 2, Step: -1, Event: 38}}},
		// a PE rolled back without failing replays an order in which its
		// parent, failed with it, forwarded a multicast before a message
		// the PE sends only after it; the parent's own order, made anew
		// in an earlier rollback, has the multicast after that message
		{"a PE rolled back without failing below a failed parent waited for a multicast", branching(chare.Config{FT: "camel", Teams: "2", LogLimit: 128, PEs: 5}, 3), true, 12438829641129717539,
			[]chare.Kill{{PE: 0, Step: -1, Event: 738}, {PE: 3, Step: -1, Event: 870}, {PE: 1, Step: -1, HandOver: 36}}},
		{"a PE rolled back without failing below a failed parent waited for a multicast (7 PEs)", branching(teams, 4), false, 2947530114073129039,
			[]chare.Kill{{PE: 0, Step: -1, Event: 563}, {PE: 5, Step: -1, Event: 44}}},
		{"an inner node rolled back waited for a partial of a reduction its root completed (teams, 6 PEs)", chare.Config{FT: "camel", Teams: "2", LogLimit: 128, PEs: 6, Branching: 2}, false, 3470697502217132710,
			[]chare.Kill{{PE: 5, Step: -1, HandOver: 41}, {PE: 4, Step: -1, Event: 873}}},
	} {
		c := r.cfg
		c.Kills = r.kills
		if r.chain {
			chain := MixArgs{Steps: 6, Ckpt: 3}
			res := Run(chainMain, chain, c, r.seed)
			require.NoError(t, res.Err, "%s: kills %v", r.why, r.kills)
			require.Len(t, res.Stats.FT.Recoveries, len(r.kills), r.why)
			require.NoError(t, checkChain(chainLogsOf(t, res), chain.Steps), r.why)
			continue
		}
		mix := MixArgs{Steps: 8, Ckpt: 3}
		free := Run(Mix, mix, r.cfg, r.seed)
		require.NoError(t, free.Err, r.why)
		res := Run(Mix, mix, c, r.seed)
		require.NoError(t, res.Err, "%s: kills %v", r.why, r.kills)
		require.Len(t, res.Stats.FT.Recoveries, len(r.kills), r.why)
		require.Equal(t, mixLogs(t, free), mixLogs(t, res), r.why)
	}
}
