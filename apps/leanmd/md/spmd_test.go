package md

import (
	"fmt"
	"os"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// Logging without determinants (--ft spmd) recovers LeanMD bitwise: one
// team failing before the first checkpoint, past a balancing step, on
// binary trees; two teams failing at once; a team failing twice. The
// runs are deterministic (every PE on one goroutine, interleaved by a
// seed), each seed another order of messages.
func TestSPMDRecoversLeanMDBitwise(t *testing.T) {
	notUnderRace(t)
	p, bases := spmdBases(t, 2)
	cases := []spmdCase{
		{"a team before the first checkpoint", 4, 0, []chare.Kill{{PE: 3, Step: 2}}, false},
		{"a team past the balancing", 4, 0, []chare.Kill{{PE: 1, Step: 7}}, false},
		{"a team as step 8 begins, binary trees", 4, 2, []chare.Kill{{PE: 3, Step: 8}}, false},
		{"two teams at once", 8, 0, []chare.Kill{{PE: 1, Step: 7}, {PE: 5, Step: 7}}, true},
		{"a team twice", 8, 2, []chare.Kill{{PE: 7, Step: 7}, {PE: 7, Step: 10}}, false},
	}
	for i, c := range cases {
		seed := uint64(1 + i%2) // one order each, two between them
		t.Run(fmt.Sprintf("%s/seed %d", c.name, seed), func(t *testing.T) {
			r := run(t, p, chare.Config{PEs: c.pes, Branching: c.branching, FT: "spmd", Teams: "2", Kills: c.kills,
				Deterministic: true, Seed: seed})
			requireSameEnergies(t, bases[c.pes], r, c.name)
			ft := r.Ops.FT
			require.Equal(t, len(c.kills), ft.Failures)
			if c.together {
				requireRecoveredTogether(t, r)
			}
			require.Positive(t, ft.Log.Replayed)
		})
	}
}

// spmdCase is a failure schedule for LeanMD under spmd, in teams of 2.
type spmdCase struct {
	name      string
	pes       int
	branching int
	kills     []chare.Kill
	together  bool // two teams fail at once and recover together
}

// requireRecoveredTogether: the run's two failed teams of 2 (PEs 0-1
// and 4-5) recovered as one set, the re-execution making again messages
// the survivors had.
func requireRecoveredTogether(t *testing.T, r Report) {
	t.Helper()
	rcs := r.Ops.FT.Recoveries
	require.Len(t, rcs, 1)
	require.Equal(t, []int32{0, 1, 4, 5}, rcs[0].Set)
	require.Positive(t, rcs[0].Orphans, "messages the survivors had that the re-execution made again")
}

// Logging without determinants under the real scheduler, on schedules
// that once ended wrong: a rolled-back root's broadcast relayed by a
// survivor (its children had it: delivered twice), a team failing while
// another had recovered from the same checkpoint (a copy of a held
// message left uncounted: quiescence never came), and elements that
// migrated out of a team carrying what its teammates had sent them (sent
// again after that team's rollback, and delivered a second time); and
// two teams failing at once, which recover together. Each schedule runs
// once (three times under FT_LONG: orders vary from run to run).
func TestSPMDUnderTheRealScheduler(t *testing.T) {
	notUnderRace(t)
	p, bases := spmdBases(t, 0)
	for _, c := range []spmdCase{
		{"a root relayed again", 8, 2, []chare.Kill{{PE: 1, Step: 8}}, false},
		{"a team after another's recovery", 8, 2, []chare.Kill{{PE: 0, Step: 6}, {PE: 5, Step: 8}}, false},
		{"elements that left the team", 4, 0, []chare.Kill{{PE: 3, Step: 7}, {PE: 1, Step: 8}}, false},
		{"two teams at once", 8, 0, []chare.Kill{{PE: 1, Step: 7}, {PE: 5, Step: 7}}, true},
	} {
		reps := 1
		if os.Getenv("FT_LONG") != "" {
			reps = 3 // orders vary from run to run
		}
		for i := range reps {
			t.Run(fmt.Sprintf("%s/%d", c.name, i), func(t *testing.T) {
				cfg := chare.Config{PEs: c.pes, Branching: c.branching, FT: "spmd", Teams: "2", Kills: c.kills}
				if !c.together {
					failures(t, p, bases[c.pes], cfg, c.name)
					return
				}
				r := run(t, p, cfg)
				requireSameEnergies(t, bases[c.pes], r, c.name)
				require.Equal(t, bases[c.pes].StateHash, r.StateHash, "final atoms")
				requireRecoveredTogether(t, r)
			})
		}
	}
}

// spmdBases is the failure tests' LeanMD (13 steps, balancing at step 6
// and 12, checkpoints every 4) and its failure-free runs on 4 and 8 PEs,
// on trees of the given arity (0: the default).
func spmdBases(t *testing.T, branching int) (Params, map[int]Report) {
	t.Helper()
	p := params(3, 3, 3, 13)
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	p.Atoms = lightAtoms
	bases := map[int]Report{}
	for _, pes := range []int{4, 8} {
		bases[pes] = run(t, p, chare.Config{PEs: pes, Branching: branching})
	}
	return p, bases
}

// A team failing while another recovers (PE 5's while PEs 0-1 recover
// from PE 1's failure at step 7): the team recovering restarts again
// with it, the two as one set, and LeanMD ends bitwise as without
// failures. Deterministic runs, the second failure at moments spread
// over the first's recovery.
func TestSPMDTeamFailingWhileAnotherRecovers(t *testing.T) {
	notUnderRace(t)
	p, bases := spmdBases(t, 2)
	cfg := chare.Config{PEs: 8, Branching: 2, FT: "spmd", Teams: "2", Deterministic: true, Seed: 1}
	first := cfg
	first.Kills = []chare.Kill{{PE: 1, Step: 7}}
	n := run(t, p, first).Ops.Events
	again := 0
	for _, at := range []int{38, 41, 44, 50, 60} { // per cent of the run's events
		c := cfg
		c.Kills = []chare.Kill{{PE: 1, Step: 7}, {PE: 5, Step: -1, Event: n * at / 100}}
		r := run(t, p, c)
		requireSameEnergies(t, bases[8], r, fmt.Sprintf("second failure at event %d", n*at/100))
		require.Equal(t, bases[8].StateHash, r.StateHash, "final atoms")
		for _, rc := range r.Ops.FT.Recoveries {
			if len(rc.Again) > 0 {
				require.Equal(t, []int32{0, 1}, rc.Again)
				require.Equal(t, []int32{0, 1, 4, 5}, rc.Set)
				again++
			}
		}
	}
	require.Positive(t, again, "PEs 0-1 restarted again with PEs 4-5")
}
