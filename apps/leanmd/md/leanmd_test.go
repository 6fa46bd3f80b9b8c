package md

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/loadbalance"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/recovery"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// notUnderRace skips t under the race detector: the README's test
// command runs it whole without it (the plain tier). Its concern is the
// computation (physics, counts, flags, protocols' results), which the
// detector does not look at; the recovery, migration and checkpoint cases
// that run under it cover what it could find.
func notUnderRace(t *testing.T) {
	t.Helper()
	if raceOn {
		t.Skip("runs without -race in the plain tier (go run ./cmd/testall)")
	}
}

func run(t *testing.T, p Params, cfg chare.Config) Report {
	t.Helper()
	if cfg.Balancer == "" {
		cfg.Balancer = "rotate"
	}
	r, err := Run(p, cfg, io.Discard)
	require.NoError(t, err)
	return r
}

func params(x, y, z, steps int) Params {
	p := DefaultParams()
	p.X, p.Y, p.Z, p.Steps, p.Given = x, y, z, steps, 4
	return p
}

// lightAtoms is the atoms a cell starts with in the tests of the runtime
// (fault tolerance, balancing): a tenth of the original's, the same
// cells, computes and messages, a hundredth of the force work, which was
// most of their time (Params.Atoms).
var lightAtoms = [2]int{10, 25}

// Small boxes, past a migration and a load-balancing step: energy is
// conserved within the tolerance, and every PE count, with and without
// --wire-check, gives bitwise the same energies and final atoms.
func TestEndToEndDeterministicAcrossPEs(t *testing.T) {
	cases := []struct {
		x, y, z int
		runs    []chare.Config
	}{
		{2, 2, 2, []chare.Config{{PEs: 2}, {PEs: 3, WireCheck: true}}},
		{3, 3, 3, []chare.Config{{PEs: 2, WireCheck: true}}},
		{4, 3, 2, []chare.Config{{PEs: 3}}},
	}
	for _, c := range cases {
		if raceOn && c.x != 2 {
			continue // the plain tier runs the larger boxes
		}
		t.Run(fmt.Sprintf("%dx%dx%d", c.x, c.y, c.z), func(t *testing.T) {
			p := params(c.x, c.y, c.z, 21)
			base := run(t, p, chare.Config{PEs: 1})
			require.True(t, base.EnergyOK, "drift %g", base.RelDrift)
			require.Equal(t, c.x*c.y*c.z, base.Cells)
			require.Equal(t, 38*c.x*c.y*c.z, base.Computes)
			require.Len(t, base.StepMs, 21)
			require.NotZero(t, base.PE0, "potential energy is counted")
			for _, cfg := range c.runs {
				if raceOn && cfg.WireCheck {
					continue // a minute a run under -race; the plain tier runs it
				}
				r := run(t, p, cfg)
				for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
					require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]), "energies on %+v", cfg)
				}
				require.Equal(t, base.StateHash, r.StateHash, "final atoms on %+v", cfg)
				require.Equal(t, base.Atoms, r.Atoms)
			}
		})
	}
}

// Message counts per step are exactly the spec's formulas: C multicasts,
// 75·C deliveries, 75·C contributions, C force results, and 75·C atom
// messages every 20th step. Two runs that differ by 20 steps (one of them a
// migration step) differ by exactly that.
func TestMessageCountsPerStep(t *testing.T) {
	notUnderRace(t)
	for _, dims := range [][3]int{{2, 2, 2}, {3, 2, 2}} {
		p := params(dims[0], dims[1], dims[2], 20)
		p.FirstLB = 1000 // no AtSync: count the step's own traffic only
		a := run(t, p, chare.Config{PEs: 2}).Ops.Ops
		p.Steps = 40
		b := run(t, p, chare.Config{PEs: 2}).Ops.Ops
		c := uint64(dims[0] * dims[1] * dims[2])
		require.Equal(t, 20*c, b.Multicasts-a.Multicasts, "multicasts %v", dims)
		require.Equal(t, 20*75*c, b.Deliveries-a.Deliveries, "deliveries %v", dims)
		require.Equal(t, 20*75*c, b.Contributions-a.Contributions, "contributions %v", dims)
		require.Equal(t, 20*c+75*c, b.P2P-a.P2P, "point-to-point %v", dims)
		require.Equal(t, a.Unsized, b.Unsized, "every per-step payload's size is known")
	}
}

// A kernel with the wrong force sign must fail the energy check.
func TestBrokenKernelFailsTheEnergyCheck(t *testing.T) {
	notUnderRace(t)
	p := params(3, 3, 3, 21)
	p.BrokenKernel = true
	r, err := Run(p, chare.Config{PEs: 2}, io.Discard)
	require.NoError(t, err) // the run works; its verdict is in the report (and exit code 1)
	require.False(t, r.EnergyOK)
	require.Greater(t, r.RelDrift, DefaultTolerance)
}

// --original-physics: the original counts no potential energy.
func TestOriginalPhysics(t *testing.T) {
	notUnderRace(t)
	p := params(3, 3, 3, 3)
	p.Original = true
	r := run(t, p, chare.Config{PEs: 2})
	require.Zero(t, r.PE0)
	require.Zero(t, r.PE1)
	require.True(t, r.EnergyOK) // the absolute check cannot fail
}

func TestParseArgs(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"3", "3"}, "needs all three dimensions"},
		{[]string{"3", "x", "3"}, `argument Y: "x" is not a whole number (want 1 to 64)`},
		{[]string{"-1", "3", "3"}, "argument X: -1 is out of range (want 1 to 64)"},
		{[]string{"3", "3", "3", "0"}, "argument steps: 0 is out of range (want 1 to 1073741824)"},
		{[]string{"3", "3", "3", "10", "20", "0"}, "argument LBperiod: 0 is out of range"},
		{[]string{"1", "2", "3", "4", "5", "6", "7", "8"}, "too many arguments (8)"},
	}
	for _, c := range cases {
		p := DefaultParams()
		require.ErrorContains(t, ParseArgs(c.args, &p), c.want, c.args)
	}
	p := DefaultParams()
	require.NoError(t, ParseArgs([]string{"4", "4", "4", "100"}, &p))
	require.Equal(t, [5]int{4, 4, 4, 100, 20}, [5]int{p.X, p.Y, p.Z, p.Steps, p.FirstLB})
}

// LeanMD's checkpoint cadence takes real coordinated checkpoints: they do
// not change the run (bitwise energies and final atoms), and the last one
// on disk holds every cell and every compute exactly once, with the cells
// at the checkpoint's step.
func TestCheckpointsAreTakenAndComplete(t *testing.T) {
	p := params(2, 2, 2, 21)
	base := run(t, p, chare.Config{PEs: 2})
	p.CkptPeriod, p.Given = 10, 7
	dir := t.TempDir()
	r := run(t, p, chare.Config{PEs: 2, CheckpointDir: dir, WireCheck: true})
	require.Equal(t, uint64(2), r.Ops.Ops.Checkpoints, "at steps 10 and 20")
	for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
		require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]))
	}
	require.Equal(t, base.StateHash, r.StateHash)

	latest, err := manager.ReadLatest(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(2), latest.Epoch)
	seen := map[string]int{}
	for pe := 0; pe < 2; pe++ {
		_, s, err := manager.ReadSnapshotFile(dir, latest, pe)
		require.NoError(t, err)
		for _, c := range s.Collections {
			seen[c.Name] += len(c.Elements)
			if c.Name != "leanmd.Cell" {
				continue
			}
			for _, e := range c.Elements {
				var cell Cell
				require.NoError(t, msgpack.Unmarshal(e.State, &cell))
				require.Equal(t, 20, cell.Step, "cell %v", e.Index)
				require.NotEmpty(t, cell.Atoms)
			}
		}
	}
	require.Equal(t, 8, seen["leanmd.Cell"])
	require.Equal(t, 8*38, seen["leanmd.Compute"])

	// A new run restarted from the last checkpoint (step 20, after the
	// load-balancing step moved computes and sections were rebuilt) ends
	// in the same state, bitwise, running only the last step.
	rs := run(t, p, chare.Config{PEs: 2, Restart: dir, WireCheck: true})
	require.Equal(t, uint64(1), rs.Ops.Ops.Restarts)
	for _, v := range [][2]float64{{base.KE1, rs.KE1}, {base.PE1, rs.PE1}, {base.KE0, rs.KE0}, {base.PE0, rs.PE0}} {
		require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]))
	}
	require.Equal(t, base.StateHash, rs.StateHash)
	require.Less(t, rs.Ops.Ops.Multicasts, r.Ops.Ops.Multicasts/10, "only the steps after the checkpoint ran")

	// and on other PE counts: every element finds a new place, sections
	// new trees (on 1 PE a section's root PE is gone)
	for _, pes := range []int{1, 3} {
		rp := run(t, p, chare.Config{PEs: pes, Restart: dir})
		require.Equal(t, base.StateHash, rp.StateHash, "restarted on %d PEs", pes)
		require.Equal(t, math.Float64bits(base.PE1), math.Float64bits(rp.PE1))
	}
}

// Failures: a PE killed before the first checkpoint, mid-iteration after
// load balancing moved computes since the checkpoint (scenario 11), while
// a checkpoint is being taken, and again right after a recovery (the
// coordinator, PE 0, first). Under checkpoint/restart (--ft none) every PE
// rolls back; under scmel and camel the failed PE alone does and the
// others replay its messages (a failure during a checkpoint rolls every PE
// back: the protocols recover a PE from a complete checkpoint). Every run
// ends in the failure-free state, bitwise, on 2 and 4 PEs, with
// --wire-check too. Checkpoints at steps 4, 8, 12; load balancing at 6 and
// 12 (under -race a subset: the plain tier runs them all without it).
// FT_LONG=N adds N random schedules per protocol and PE count (2, 4
// and 8; up to three PEs failing, at any step, some at once).
func TestFailuresEndInTheFailureFreeResult(t *testing.T) {
	p := params(3, 3, 3, 13)
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	p.Atoms = lightAtoms
	schedules := append([]schedule{
		{name: "before the first checkpoint", kills: []chare.Kill{{PE: 1, Step: 2}}},
		{name: "mid-iteration", kills: []chare.Kill{{PE: 1, Step: 7}}},
		{name: "during a checkpoint", kills: []chare.Kill{{PE: 1, Step: -1, Checkpoint: 2}}},
		{name: "right after a recovery", kills: []chare.Kill{{PE: 0, Step: 10}, {PE: 1, Step: 11}}},
		{name: "the coordinator during a checkpoint", kills: []chare.Kill{{PE: 0, Step: -1, Checkpoint: 2}}},
		// PE 0 keeps the results of the sections PE 1 roots; both
		// recover from the first checkpoint (on 4 PEs under camel the
		// root's recovery waited for ever in one run of five: the
		// keeper's had kept a result that overtook an earlier one)
		{name: "a keeper, then its root", kills: []chare.Kill{{PE: 0, Step: 3}, {PE: 1, Step: 4}}},
		// Found by FT_LONG: elements that balancing moved at step 6 carry
		// the section contributions they held at AtSync; the destination
		// took those values back into the float64 pool, while the
		// migration stayed in its sender's log (the same memory, within a
		// process), so a PE recovering through step 6 added forces the
		// pool had given to another contribution since (about one run in
		// four on binary trees; now they are not the destination's to
		// recycle).
		{name: "as step 8 begins, past the balancing", kills: []chare.Kill{{PE: 3, Step: 8}}, branching: 2},
	}, randomSchedules(3, 4)...)
	for _, pes := range []int{2, 4} {
		base := run(t, p, chare.Config{PEs: pes})
		for _, pc := range ftConfigs {
			proto, teams := pc.FT, pc.Teams
			if teams != "" && pes < 4 {
				continue // teams of 2 need 4 PEs (a snapshot's copy lives in another team)
			}
			for i, sc := range schedules {
				if pes == 4 && i%2 == 0 && i < 4 {
					continue // half the schedules on 4 PEs, to keep CI short
				}
				if raceOn && !underRace[fmt.Sprint(pes, ftName(pc), i)] {
					continue // the plain tier runs them all without -race
				}
				var kills []chare.Kill
				for _, k := range sc.kills {
					if k.PE < pes {
						kills = append(kills, k)
					}
				}
				if len(kills) == 0 {
					continue
				}
				// --wire-check: every protocol mid-iteration, on one PE count
				// each; not under -race, where it costs a minute a run (the
				// README's command runs these cases again without -race)
				wire := (i == 1 && (proto == "none") == (pes == 4) || proto == "camel" && pes == 4 && i == 1) && !raceOn
				t.Run(fmt.Sprintf("%d PEs %s %s", pes, ftName(pc), sc.name), func(t *testing.T) {
					failures(t, p, base, chare.Config{PEs: pes, Branching: sc.branching, FT: proto, Teams: teams, Kills: kills, WireCheck: wire}, sc.name)
				})
			}
		}
	}
	// On 8 PEs the spanning trees (4-ary) have two levels: PE 1 is an
	// inner node of the array's tree and of many sections' trees, PE 7
	// a leaf below PE 1; binary trees have three. Bugs lived only here:
	// quiescence counts off after an inner node skipped the rounds its
	// root had completed (the next checkpoint waited for ever); nobody
	// holding the determinants of a PE two levels down (its replay
	// received in another order and ended in other energies, or in a
	// deadlock, in about two runs of three); and determinants that
	// reached a root by two paths, the later first, stored only in part
	// (the recovery waited for ever, in about one run of six per kill).
	if raceOn {
		return // the plain tier runs 8 PEs
	}
	base := run(t, p, chare.Config{PEs: 8})
	eight := append([]schedule{
		{name: "an inner node, a checkpoint after its recovery", kills: []chare.Kill{{PE: 1, Step: 7}}},
		{name: "two levels down", kills: []chare.Kill{{PE: 7, Step: 3}, {PE: 7, Step: 10}}},
		{name: "three levels down", kills: []chare.Kill{{PE: 7, Step: 7}, {PE: 7, Step: 10}, {PE: 7, Step: 12}}, branching: 2},
	}, randomSchedules(8, 8)...)
	for i := 3; i < len(eight); i += 2 {
		eight[i].branching = 2 // every other random schedule on binary trees
	}
	for _, pc := range ftConfigs {
		proto, teams := pc.FT, pc.Teams
		for _, sc := range eight {
			t.Run(fmt.Sprintf("8 PEs %s %s", ftName(pc), sc.name), func(t *testing.T) {
				failures(t, p, base, chare.Config{PEs: 8, Branching: sc.branching, FT: proto, Teams: teams, Kills: sc.kills}, sc.name)
			})
		}
	}
}

type schedule struct {
	name      string
	kills     []chare.Kill
	branching int // the trees' arity, if not the default
}

// randomSchedules makes FT_LONG random failure schedules of PEs 0..pes-1
// (none without it), from a seed of their own.
func randomSchedules(seed uint64, pes int) []schedule {
	n, _ := strconv.Atoi(os.Getenv("FT_LONG"))
	rng := rand.New(rand.NewPCG(uint64(n), seed))
	var out []schedule
	for i := 0; i < n; i++ {
		var ks []chare.Kill
		for k := 0; k < 1+rng.IntN(3); k++ {
			// Kills at one step are one failure of several PEs
			// under none (with no checkpoint directory, one whose
			// PEs hold both copies of a snapshot cannot be
			// recovered), so the steps differ.
			kill := chare.Kill{PE: rng.IntN(pes), Step: 1 + rng.IntN(13)}
			if !slices.ContainsFunc(ks, func(o chare.Kill) bool { return o.Step == kill.Step }) {
				ks = append(ks, kill)
			}
		}
		out = append(out, schedule{name: fmt.Sprintf("random %d", i), kills: ks})
	}
	return out
}

// underRace are the schedules run under -race (pes, protocol, schedule):
// a global rollback, a PE recovering alone from a checkpoint a failure
// interrupted, a team recovering (with determinants, and without); the
// plain tier runs them all.
var underRace = map[string]bool{"2none1": true, "2camel2": true, "4team1": true, "4spmd1": true}

// ftConfigs are the protocols the failure tests run: each, and team-based
// logging and CAMEL with teams in teams of 2 PEs.
var ftConfigs = []chare.Config{{FT: "none"}, {FT: "scmel"}, {FT: "camel"}, {FT: "team", Teams: "2"}, {FT: "camel", Teams: "2"}, {FT: "pessimist"}, {FT: "spmd", Teams: "2"}}

// ftName names a protocol configuration (camel with teams: camel+teams).
func ftName(c chare.Config) string {
	if c.Teams != "" && c.FT != "team" && c.FT != "spmd" {
		return c.FT + "+teams"
	}
	return c.FT
}

// failures runs one failure schedule and checks its run against base.
func failures(t *testing.T, p Params, base Report, cfg chare.Config, name string) {
	pes, proto, kills := cfg.PEs, cfg.FT, cfg.Kills
	r := run(t, p, cfg)
	ft := r.Ops.FT
	require.Equal(t, len(kills), ft.Failures)
	switch {
	case proto == "none":
		require.Equal(t, pes*len(kills), ft.PEsRolledBack, "every PE rolls back")
	case cfg.Teams == "2" && !strings.HasPrefix(name, "random"):
		require.Equal(t, 2*len(kills), ft.PEsRolledBack, "the failed PE's team of 2 rolls back")
		require.Positive(t, ft.Log.Replayed)
		require.Len(t, ft.Recoveries, len(kills))
		for _, rc := range ft.Recoveries {
			require.Equal(t, 1, rc.Failures)
			require.Equal(t, 2, rc.PEs)
			require.Len(t, rc.Set, 2, "the failed PE's team")
			require.Zero(t, rc.Chain, "no log limit: no PE joins through a channel")
			require.Positive(t, rc.Recovery)
		}
		require.Len(t, ft.Teams, pes/2)
		var logged, inside uint64
		for k, tm := range ft.Teams {
			require.Equal(t, []int32{int32(2 * k), int32(2*k + 1)}, tm.PEs)
			require.Positive(t, tm.Log.LoggedTotal(), "team %d logged what it sent to other teams", k)
			logged += tm.Log.LoggedTotal()
			inside += tm.Log.NotLogged[ftlayer.KindP2P].TotalMsgs + tm.Log.NotLogged[ftlayer.KindReduction].TotalMsgs
		}
		require.Equal(t, ft.Log.LoggedTotal(), logged, "the teams' logs sum to the run's")
		require.Positive(t, inside, "messages inside teams, not logged")
	case !strings.HasPrefix(name, "random"):
		require.Equal(t, len(kills), ft.PEsRolledBack, "only the failed PE rolls back")
		require.Positive(t, ft.Log.Replayed)
	}
	require.Positive(t, ft.Recovery)
	for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
		require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]), "energies")
	}
	require.Equal(t, base.StateHash, r.StateHash, "final atoms")
	switch name {
	case "before the first checkpoint":
		require.Equal(t, []uint64{0}, ft.Restored, "back to the start")
	case "mid-iteration":
		require.Equal(t, []uint64{1}, ft.Restored, "back to step 4, before the load balancing")
		require.Greater(t, ft.CaughtUp, ft.Recovery-1, "back where it failed, after resuming")
		if proto == "none" {
			require.Less(t, base.Ops.Ops.Multicasts, r.Ops.Ops.Multicasts, "steps 5..7 ran twice")
		}
	case "during a checkpoint", "the coordinator during a checkpoint":
		// PE 1 (PE 0) fails as checkpoint 2 begins: none rolls every PE back to
		// checkpoint 1; scmel and camel recover PE 1 alone from it, and
		// checkpoint 2 is taken once it caught up
		require.Equal(t, []uint64{1}, ft.Restored, "the interrupted checkpoint is not used")
		if proto != "none" {
			require.Equal(t, base.Ops.Ops.Checkpoints, r.Ops.Ops.Checkpoints, "every checkpoint taken")
		}
	}
}

// Message logging (scmel, camel) stamps, logs and acknowledges every
// message and holds deliveries around checkpoints, yet a failure-free run
// ends bitwise where the run without it does, with and without
// --wire-check (which carries the headers and determinants through the
// wire codec). CAMEL logs each multicast once, at its root: on binary
// trees of 5 PEs, less than SCMEL, which logs every hop.
func TestMessageLoggingLeavesTheResultUnchanged(t *testing.T) {
	notUnderRace(t)
	p := params(3, 3, 3, 13)
	p.Atoms = lightAtoms
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	for _, pes := range []int{2, 5} {
		base := run(t, p, chare.Config{PEs: pes, Branching: 2})
		logs := map[string]ftlayer.Stats{}
		for _, c := range []chare.Config{{FT: "scmel"}, {FT: "camel"}, {FT: "camel", WireCheck: true}} {
			c.PEs, c.Branching = pes, 2
			if c.WireCheck && pes == 2 {
				continue // once is enough, and it is the slow one
			}
			t.Run(fmt.Sprintf("%d PEs %s wire %v", pes, c.FT, c.WireCheck), func(t *testing.T) {
				r := run(t, p, c)
				for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
					require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]), "energies")
				}
				require.Equal(t, base.StateHash, r.StateHash, "final atoms")
				ft := r.Ops.FT
				require.Equal(t, c.FT, ft.Protocol)
				require.Positive(t, ft.Log.LoggedTotal())
				require.Positive(t, ft.Log.DetsCreated)
				require.Positive(t, ft.Log.DetsAcked)
				require.Zero(t, ft.Failures)
				require.Equal(t, base.Ops.Ops.Checkpoints, r.Ops.Ops.Checkpoints)
				if !c.WireCheck {
					logs[c.FT] = ft.Log
				}
			})
		}
		sc, ca := logs["scmel"].Log[ftlayer.KindMulticast], logs["camel"].Log[ftlayer.KindMulticast]
		if pes > 3 {
			require.Less(t, ca.TotalBytes, sc.TotalBytes, "%d PEs: CAMEL logs multicasts once, at the root", pes)
		} else {
			require.Equal(t, ca.TotalBytes, sc.TotalBytes, "%d PEs: every multicast tree is a root and one child", pes)
		}
	}
}

// --ckpt-period overrides LeanMD's own cadence: every N steps, or at the
// first step boundary past a time since the last checkpoint (each step
// then ends at a barrier where cell (0,0,0) decides; here, a tiny period:
// every step). The result stays the failure-free one, a failure included.
func TestCheckpointPeriodFlag(t *testing.T) {
	notUnderRace(t)
	p := params(2, 2, 2, 9)
	base := run(t, p, chare.Config{PEs: 2})
	for _, c := range []struct {
		cfg  chare.Config
		want uint64
	}{
		{chare.Config{PEs: 2, CkptSteps: 3, FT: "camel", Kills: []chare.Kill{{PE: 1, Step: 5}}}, 3},
		{chare.Config{PEs: 2, CkptEvery: time.Nanosecond, Kills: []chare.Kill{{PE: 0, Step: 5}}}, 9},
	} {
		r := run(t, p, c.cfg)
		require.Equal(t, base.StateHash, r.StateHash)
		require.Equal(t, math.Float64bits(base.KE1), math.Float64bits(r.KE1))
		require.Equal(t, 1, r.Ops.FT.Failures)
		require.GreaterOrEqual(t, r.Ops.Ops.Checkpoints, c.want-1, "%+v", c.cfg) // one may be rolled back
	}
}

// requireSameEnergies checks a run's energies and final atoms against the
// failure-free run's, bitwise.
func requireSameEnergies(t *testing.T, base, r Report, msg string) {
	t.Helper()
	for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
		require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]), "energies: %s", msg)
	}
	require.Equal(t, base.StateHash, r.StateHash, "final atoms: %s", msg)
}

// A failure after --restart resumes the restored run — from the PEs'
// memory, or, where no PE holds a copy (one PE; both holders failed),
// from the checkpoint directory or the checkpoint the run was restarted
// from — and never starts the command line's (here the default 3×3×3,
// 1001-step) problem afresh: the energies are the uninterrupted run's and
// the summary reports the restored run's parameters. Where no copy is
// anywhere, the run ends with an error that says so.
func TestAFailureAfterARestartResumesTheRestoredRun(t *testing.T) {
	notUnderRace(t)
	p := params(2, 2, 2, 25)
	p.CkptPeriod, p.Given = 10, 7
	base := run(t, p, chare.Config{PEs: 2})
	dir := t.TempDir()
	r := run(t, p, chare.Config{PEs: 2, FT: "camel", CheckpointDir: dir}) // the last checkpoint: step 20
	requireSameEnergies(t, base, r, "with checkpoints")
	for _, c := range []struct {
		name string
		cfg  chare.Config
	}{
		{"1 PE, none", chare.Config{PEs: 1, Kills: []chare.Kill{{PE: 0, Step: 23}}}},
		{"1 PE, camel", chare.Config{PEs: 1, FT: "camel", Kills: []chare.Kill{{PE: 0, Step: 23}}}},
		{"2 PEs, none, both at once", chare.Config{PEs: 2, Kills: []chare.Kill{{PE: 0, Step: 23}, {PE: 1, Step: 23}}}},
		{"2 PEs, camel", chare.Config{PEs: 2, FT: "camel", Kills: []chare.Kill{{PE: 1, Step: 23}}}},
		{"3 PEs, scmel", chare.Config{PEs: 3, FT: "scmel", Kills: []chare.Kill{{PE: 0, Step: 22}}}},
	} {
		c.cfg.Restart = dir
		r := run(t, DefaultParams(), c.cfg) // the command line's parameters: a restart ignores them
		requireSameEnergies(t, base, r, c.name)
		require.Equal(t, len(c.cfg.Kills), r.Ops.FT.Failures, c.name)
		require.Equal(t, []uint64{2}, r.Ops.FT.Restored[:1], c.name)
		require.Equal(t, [4]int{2, 2, 2, 25}, [4]int{r.Params.X, r.Params.Y, r.Params.Z, r.Params.Steps}, "%s: the restored run's parameters", c.name)
		require.Equal(t, 1322, r.Atoms, c.name)
	}

	// not restarted: both PEs fail at once after checkpoint 2; the
	// directory holds it, and without one nothing does
	r = run(t, p, chare.Config{PEs: 2, CheckpointDir: t.TempDir(), Kills: []chare.Kill{{PE: 0, Step: 23}, {PE: 1, Step: 23}}})
	requireSameEnergies(t, base, r, "both PEs, the directory's copy")
	require.Equal(t, []uint64{2}, r.Ops.FT.Restored)
	require.Equal(t, 2, r.Ops.FT.Failures)
	for _, cfg := range []chare.Config{
		{PEs: 2, Kills: []chare.Kill{{PE: 0, Step: 23}, {PE: 1, Step: 23}}},
		{PEs: 1, FT: "camel", Kills: []chare.Kill{{PE: 0, Step: 23}}},
	} {
		_, err := Run(p, cfg, io.Discard)
		require.ErrorContains(t, err, "no copy of PE 0's snapshot of checkpoint 2 survives", "%+v", cfg)
		require.ErrorContains(t, err, "give --ckpt-dir to keep one on disk")
	}
	// restarting from a checkpoint of the last step ends at once, with
	// the uninterrupted run's energies
	last := t.TempDir()
	p20 := p
	p20.Steps = 20
	base20 := run(t, p20, chare.Config{PEs: 2})
	run(t, p20, chare.Config{PEs: 2, CheckpointDir: last})
	requireSameEnergies(t, base20, run(t, DefaultParams(), chare.Config{PEs: 3, Restart: last}), "restarted at the last step")
}

// Failures injected where they cannot happen — step 0, past the last
// step, at or before the step a restart resumes after — are refused with
// one line and exit 2 before the run does any work; one at step 1
// happens (every PE starts again under none; the PE alone under camel).
// Two at one step are each counted, under every protocol; a time that
// comes after the run ended is an error too.
func TestInjectedFailuresHappenOrAreRefused(t *testing.T) {
	notUnderRace(t)
	p := params(2, 2, 2, 12)
	p.CkptPeriod, p.Given = 5, 7
	dir := t.TempDir()
	base := run(t, p, chare.Config{PEs: 2, CheckpointDir: dir}) // restarts resume after step 10
	for _, c := range []struct {
		cfg  chare.Config
		want string
	}{
		{chare.Config{PEs: 2, Kills: []chare.Kill{{PE: 1, Step: 0}}}, "flag --kill: PE 1 at step 0 can never happen: the program runs steps 1 to 12"},
		{chare.Config{PEs: 2, FT: "camel", Kills: []chare.Kill{{PE: 1, Step: 13}}}, "PE 1 at step 13 can never happen: the program runs steps 1 to 12"},
		{chare.Config{PEs: 2, Restart: dir, Kills: []chare.Kill{{PE: 0, Step: 10}}}, "PE 0 at step 10 can never happen: the program runs steps 11 to 12 after resuming from " + dir},
		{chare.Config{PEs: 2, Kills: []chare.Kill{{PE: 0, Step: -1, After: time.Hour}}}, "flag --kill: PE 0 after 1h0m0s never happened: the run ended first"},
	} {
		res, err := Run(p, c.cfg, io.Discard)
		require.ErrorContains(t, err, c.want)
		require.ErrorAs(t, err, new(chare.InputError))
		if c.cfg.Kills[0].Step >= 0 {
			require.Less(t, res.Ops.Ops.Multicasts, uint64(8), "refused before a step ran")
		}
	}
	for _, ft := range []string{"none", "scmel", "camel"} {
		r := run(t, p, chare.Config{PEs: 2, FT: ft, Kills: []chare.Kill{{PE: 1, Step: 1}}})
		requireSameEnergies(t, base, r, ft+" at step 1")
		require.Equal(t, []uint64{0}, r.Ops.FT.Restored, ft)
		r = run(t, p, chare.Config{PEs: 2, FT: ft, Kills: []chare.Kill{{PE: 0, Step: 3}, {PE: 1, Step: 3}, {PE: 1, Step: 3}}})
		requireSameEnergies(t, base, r, ft+", three at one step")
		require.Equal(t, 3, r.Ops.FT.Failures, ft)
	}
}

// A run whose estimated memory does not fit is refused before it starts,
// naming the estimate and the limit; the estimate counts the atoms a run
// makes, and grows with the box and the PE count.
func TestMemoryEstimateRefusesRunsThatDoNotFit(t *testing.T) {
	notUnderRace(t)
	p := params(3, 3, 3, 3)
	r := run(t, p, chare.Config{PEs: 2})
	require.Equal(t, r.Atoms, Atoms(p))
	require.Equal(t, 4638, Atoms(p))
	require.Less(t, EstimateMemory(p, 2), EstimateMemory(p, 4))
	require.Less(t, EstimateMemory(p, 2), EstimateMemory(params(4, 4, 4, 3), 2))

	p.MaxMemory = 16 << 20
	_, err := Run(p, chare.Config{PEs: 2}, io.Discard)
	require.ErrorAs(t, err, new(chare.InputError))
	require.EqualError(t, err, fmt.Sprintf("a 3x3x3 box (4638 atoms) on 2 PEs needs about %d MiB, more than the --max-memory limit (16 MiB): use a smaller box, fewer PEs, or --max-memory to say how much it may use", EstimateMemory(p, 2)>>20))
	big := params(64, 64, 64, 3)
	big.MaxMemory = 1 << 40
	require.NoError(t, fits(big, 2, big.MaxMemory), "a limit given overrides the machine's")
	require.Error(t, fits(big, 2, 1<<30))

	for _, c := range []struct {
		in   string
		want uint64
	}{{"4G", 4 << 30}, {"512M", 512 << 20}, {"512MiB", 512 << 20}, {"2kb", 2048}, {"1048576", 1 << 20}, {"1T", 1 << 40}} {
		got, err := chare.ParseSize(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	for _, bad := range []string{"", "0", "-1G", "lots", "4X", "99999999999T"} {
		_, err := chare.ParseSize(bad)
		require.Error(t, err, bad)
	}
}

// Runs share nothing: two runs with different parameters at once in one
// process end as each does alone, bitwise, each printing only its own
// lines.
func TestTwoRunsAtOnce(t *testing.T) {
	pa, pb := params(2, 2, 2, 9), params(3, 2, 2, 7)
	pb.Tolerance = 0.5
	alone := []Report{run(t, pa, chare.Config{PEs: 2}), run(t, pb, chare.Config{PEs: 3})}
	var outs [2]strings.Builder
	got := make([]Report, 2)
	errs := make([]error, 2)
	done := make(chan int)
	for i, p := range []Params{pa, pb} {
		go func() {
			got[i], errs[i] = Run(p, chare.Config{PEs: 2 + i, Balancer: "rotate"}, &outs[i])
			done <- i
		}()
	}
	<-done
	<-done
	for i := range got {
		require.NoError(t, errs[i])
		requireSameEnergies(t, alone[i], got[i], fmt.Sprint("run ", i))
		require.Equal(t, alone[i].Params.X, got[i].Params.X)
	}
	require.Contains(t, outs[0].String(), "Cell Array Dimension X:2 Y:2 Z:2")
	require.NotContains(t, outs[0].String(), "X:3 Y:2 Z:2")
	require.Contains(t, outs[1].String(), "Cell Array Dimension X:3 Y:2 Z:2")
	require.Contains(t, outs[1].String(), "allowed 5.000e-01")
}

// LeanMD run deterministically (every PE on one goroutine, a seeded
// interleaving) with failures at random moments — before an event, or in
// the middle of a handler after a message its PE handed over — under
// every protocol: the energies and the final atoms are the failure-free
// run's, bitwise. The sweeps of package ftsim do the same for every
// moment of smaller programs.
func TestFailuresAtRandomMomentsOfADeterministicRun(t *testing.T) {
	notUnderRace(t)
	p := params(2, 2, 2, 12)
	p.Atoms = lightAtoms
	p.CkptPeriod = 5
	base := run(t, p, chare.Config{PEs: 4})
	trials := 12
	if raceOn {
		trials = 1 // one goroutine runs it: the README's command runs them all without -race
	}
	for _, ft := range []string{"none", "scmel", "camel"} {
		rng := rand.New(rand.NewPCG(uint64(len(ft)), 9))
		ran := 0
		for trial := 0; trial < trials; trial++ {
			cfg := chare.Config{PEs: 3 + rng.IntN(2), FT: ft, Deterministic: true, Seed: rng.Uint64(), Balancer: "rotate"}
			free := run(t, p, cfg)
			requireSameEnergies(t, base, free, "deterministic, no failure")
			for i := 0; i < 1+rng.IntN(2); i++ {
				k := chare.Kill{PE: rng.IntN(cfg.PEs), Step: -1}
				if rng.IntN(3) == 0 {
					k.HandOver = 1 + rng.Uint64N(free.Ops.PEs[k.PE].HandedOver())
				} else {
					k.Event = 1 + rng.IntN(free.Ops.Events)
				}
				cfg.Kills = append(cfg.Kills, k)
			}
			r, err := Run(p, cfg, io.Discard)
			var unfired *recovery.UnfiredError
			if errors.As(err, &unfired) {
				continue // the run ended before a failure's moment came
			}
			require.NoError(t, err, "%s, %d PEs, seed %d, %v", ft, cfg.PEs, cfg.Seed, cfg.Kills)
			requireSameEnergies(t, base, r, fmt.Sprintf("%s, %d PEs, seed %d, %v", ft, cfg.PEs, cfg.Seed, cfg.Kills))
			ran++
		}
		t.Logf("%s: %d runs with failures", ft, ran)
	}
}

// --teams auto: every PE alone until the second checkpoint, which puts
// the PEs in the teams Algorithm 1 chose from the traffic measured before
// it; a failure after it rolls back the failed PE's team alone (whichever
// PEs that is), bitwise as the failure-free run; under team and camel.
func TestAutoTeamsRecoverTheFailedTeam(t *testing.T) {
	notUnderRace(t)
	p := params(3, 3, 3, 13)
	p.Atoms = lightAtoms
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	base := run(t, p, chare.Config{PEs: 4})
	for _, ft := range []string{"team", "camel"} {
		if raceOn && ft == "team" {
			continue
		}
		t.Run(ft, func(t *testing.T) {
			var notices strings.Builder
			r := run(t, p, chare.Config{PEs: 4, FT: ft, Teams: "auto", Kills: []chare.Kill{{PE: 1, Step: 10}}, Notices: &notices})
			require.Contains(t, notices.String(), "charmgo: checkpoint 2 puts the PEs in teams")
			f := r.Ops.FT
			require.Equal(t, 1, f.Failures)
			require.NotEmpty(t, f.Teams, "teams chosen")
			require.Len(t, f.Recoveries, 1)
			require.Contains(t, notices.String(), "charmgo: PE 1 failed (injected: PE 1 at step 10); its team, PEs {")
			require.Equal(t, 2, f.Recoveries[0].PEs, "PE 1's team of 2 (of at most half the PEs) rolled back alone")
			requireRecoveryCounts(t, f, 2, ft)
			require.Equal(t, []uint64{2}, f.Restored)
			for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
				require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]), "energies")
			}
			require.Equal(t, base.StateHash, r.StateHash, "final atoms")
		})
	}
}

// --teams auto with failures around the checkpoints that choose teams:
// as the second (choosing) checkpoint begins (the checkpoint waits, the
// PE recovers under the teams before), as the third begins (under the
// chosen teams), between them, and at its step; then PE 1 again. Each
// recovery rolls back one team (at most 2 PEs) and the run ends bitwise
// as the failure-free one.
func TestAutoTeamsAroundTheirCheckpoints(t *testing.T) {
	notUnderRace(t)
	p := params(3, 3, 3, 13)
	p.Atoms = lightAtoms
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	base := run(t, p, chare.Config{PEs: 4})
	for _, ft := range []string{"team", "camel"} {
		for i, k := range []chare.Kill{{PE: 1, Step: -1, Checkpoint: 2}, {PE: 0, Step: -1, Checkpoint: 3}, {PE: 2, Step: 9}, {PE: 3, Step: 12}} {
			if raceOn && i > 0 {
				continue
			}
			var notices strings.Builder
			r := run(t, p, chare.Config{PEs: 4, FT: ft, Teams: "auto", Kills: []chare.Kill{k, {PE: 1, Step: 11}}, Notices: &notices})
			require.Len(t, r.Ops.FT.Recoveries, 2, "%s %v\n%s", ft, k, notices.String())
			for _, rc := range r.Ops.FT.Recoveries {
				require.LessOrEqual(t, rc.PEs, 2, "%s %v: one team of at most half the PEs\n%s", ft, k, notices.String())
			}
			require.Equal(t, base.StateHash, r.StateHash, "%s %v: final atoms", ft, k)
			require.Equal(t, math.Float64bits(base.PE1), math.Float64bits(r.PE1), "%s %v: energies", ft, k)
		}
	}
}

// drift is a strategy that plans differently each time it is asked, as a
// re-execution's measurements differ from the first execution's: every
// object moves on by one PE more than at the call before.
type drift struct{ calls int32 }

func (*drift) Name() string { return "drift" }

func (d *drift) Plan(st *loadbalance.Stats) []loadbalance.Move {
	d.calls++
	where := st.Placement()
	for i, o := range st.Objs {
		if o.Migratable {
			where[i] = (o.PE + d.calls) % int32(len(st.PEs))
		}
	}
	return st.MovesTo(where)
}

// Teams of 3 on 6 PEs recover through balancing steps, with every
// strategy: a kill in PE 0's team (PE 2) rolls back the PEs that measured
// and planned, whose re-execution would plan from other measurements; a
// kill in the other team (PE 4) rolls back PEs that only carried a plan
// out. A plan goes round through a PE of another team before it is
// carried out, so the re-execution carries out the plan the other team
// did (under camel with teams on a busy machine, greedyrefine's second
// plan moved chares the other team never sent, and the run hung or went
// quiet). drift plans anew at every call, so that case fails every time
// the plan does not go round. Balancing at steps 6 and 12, checkpoints at
// 4, 8 and 12; kills as steps 6 and 7 begin (FT_LONG: 8, 12 and 13 too).
// Bitwise against the failure-free run.
func TestFailuresOfTeamsOfThreeThroughBalancing(t *testing.T) {
	p := params(2, 2, 2, 13)
	p.Atoms = lightAtoms
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	base := run(t, p, chare.Config{PEs: 6})
	steps := []int{6, 7}
	if os.Getenv("FT_LONG") != "" {
		steps = append(steps, 8, 12, 13)
	}
	strategies := append(slices.Clone(builtinStrategies), "drift")
	for _, strategy := range strategies {
		for _, pc := range []chare.Config{{FT: "team", Teams: "3"}, {FT: "camel", Teams: "3"}} {
			for _, kill := range []int{2, 4} {
				for _, step := range steps {
					if raceOn && (strategy != "drift" || step != 7 || (kill == 2) != (pc.FT == "team")) {
						continue // the plain tier runs them all without -race
					}
					name := fmt.Sprintf("%s %s PE %d at %d", strategy, ftName(pc), kill, step)
					t.Run(name, func(t *testing.T) {
						cfg := chare.Config{PEs: 6, FT: pc.FT, Teams: pc.Teams, Balancer: strategy, Strategies: []loadbalance.Strategy{&drift{}},
							Kills: []chare.Kill{{PE: kill, Step: step}}}
						r := run(t, p, cfg)
						ft := r.Ops.FT
						require.Equal(t, 1, ft.Failures)
						require.Equal(t, 3, ft.PEsRolledBack, "the failed PE's team of 3")
						if step <= 7 {
							require.Equal(t, []uint64{1}, ft.Restored, "from checkpoint 1, before the balancing at step 6")
						}
						for _, v := range [][2]float64{{base.KE0, r.KE0}, {base.KE1, r.KE1}, {base.PE0, r.PE0}, {base.PE1, r.PE1}} {
							require.Equal(t, math.Float64bits(v[0]), math.Float64bits(v[1]), "energies")
						}
						require.Equal(t, base.StateHash, r.StateHash, "final atoms")
						require.Equal(t, 2, r.Ops.LB.Steps, "two balancing steps, each counted once")
					})
				}
			}
		}
	}
}

// builtinStrategies are the built-in strategies' names.
var builtinStrategies = []string{"greedy", "refine", "greedyrefine", "graph", "random", "rotate", "dummy"}

// Under camel and team, a PE (team) failing while another recovers goes
// down as soon as the recovering PEs have everything they need from it,
// and recovers once they caught up: the run ends bitwise as without
// failures. Both kills strike at step 7 (on goroutines, not simulated):
// the first's recovery starts, and the second waits for it.
func TestFailureQueuedBehindARecovery(t *testing.T) {
	notUnderRace(t)
	p, bases := spmdBases(t, 2)
	for _, c := range []struct {
		cfg   chare.Config
		kills []chare.Kill
		set   []int32
	}{
		{chare.Config{PEs: 4, Branching: 2, FT: "camel"}, []chare.Kill{{PE: 1, Step: 7}, {PE: 3, Step: 7}}, []int32{3}},
		{chare.Config{PEs: 8, Branching: 2, FT: "team", Teams: "2"}, []chare.Kill{{PE: 1, Step: 7}, {PE: 5, Step: 7}}, []int32{4, 5}},
	} {
		t.Run(c.cfg.FT, func(t *testing.T) {
			cfg := c.cfg
			cfg.Kills = c.kills
			r := run(t, p, cfg)
			requireSameEnergies(t, bases[cfg.PEs], r, "two failures, the second queued")
			rcs := r.Ops.FT.Recoveries
			require.Len(t, rcs, 2)
			require.Zero(t, rcs[0].Queued)
			require.Positive(t, rcs[1].Queued, "the second failure was queued")
			require.Equal(t, c.set, rcs[1].Set)
			require.GreaterOrEqual(t, rcs[1].Recovery, rcs[1].Queued, "a recovery counts from its failure")
		})
	}
}

// The locality placement (--placement local) changes where cells and
// computes run, never the result: the energies and final atoms are the
// original placement's, bitwise. It gives every PE one box of neighbouring
// cells (each cell's neighbours but a surface on its own PE), and with more
// PEs than cells, a cell each to as many PEs as there are cells.
func TestLocalPlacement(t *testing.T) {
	p := params(4, 3, 2, 11)
	base := run(t, p, chare.Config{PEs: 3})
	local := p
	local.Local = true
	r := run(t, local, chare.Config{PEs: 3})
	require.Equal(t, base.StateHash, r.StateHash)
	require.Equal(t, math.Float64bits(base.PE1), math.Float64bits(r.PE1))

	place := func(bounds []int, n int) map[int][][3]int {
		boxes := map[int][][3]int{}
		for x := range bounds[0] {
			for y := range bounds[1] {
				for z := range bounds[2] {
					pe := localCell(chare.Idx(x, y, z), bounds, n)
					boxes[pe] = append(boxes[pe], [3]int{x, y, z})
				}
			}
		}
		return boxes
	}
	for _, c := range []struct {
		bounds []int
		n      int
	}{{[]int{16, 16, 8}, 1024}, {[]int{8, 8, 8}, 64}, {[]int{6, 6, 6}, 16}, {[]int{3, 3, 3}, 4}, {[]int{2, 2, 2}, 64}} {
		boxes := place(c.bounds, c.n)
		cells := c.bounds[0] * c.bounds[1] * c.bounds[2]
		require.Len(t, boxes, min(c.n, cells), "%v on %d PEs: PEs with cells", c.bounds, c.n)
		for pe, cs := range boxes {
			require.True(t, pe >= 0 && pe < c.n)
			// a box: its cells fill the bounding box they span
			var lo, hi [3]int
			lo = cs[0]
			hi = cs[0]
			for _, q := range cs {
				for d := range 3 {
					lo[d], hi[d] = min(lo[d], q[d]), max(hi[d], q[d])
				}
			}
			require.Equal(t, (hi[0]-lo[0]+1)*(hi[1]-lo[1]+1)*(hi[2]-lo[2]+1), len(cs), "%v on %d PEs: PE %d's cells %v", c.bounds, c.n, pe, cs)
		}
	}
}
