package fttest

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

var programs = []struct {
	p Program
	n int
}{
	{Ring{Laps: 4}, 4},
	{Ring{Laps: 3}, 3},
	{Stencil{Steps: 6}, 4},
	{Stencil{Steps: 5}, 5},
}

// The failure-free run is deterministic for a seed, and different seeds
// interleave differently (so orders really vary).
func TestFailureFreeRuns(t *testing.T) {
	for _, pr := range programs {
		a := Sim{N: pr.n, Seed: 1, Program: pr.p}.Run()
		require.NoError(t, a.Err)
		b := Sim{N: pr.n, Seed: 1, Program: pr.p}.Run()
		require.Equal(t, a.States, b.States)
		require.Greater(t, a.Events, 10)
		require.NoError(t, Check(a, b))
	}
}

// Scenario 1 and 14: one PE fails before any event of the run — before the
// first message, mid-run, at the very end — every PE in turn; the run ends
// in the failure-free state with every message executed once (CAMEL paper
// §2, Theorem 1).
func TestOneFailureAtEveryEventBoundary(t *testing.T) {
	for _, pr := range programs {
		for seed := uint64(1); seed <= 3; seed++ {
			free := Sim{N: pr.n, Seed: seed, Program: pr.p}.Run()
			require.NoError(t, free.Err)
			for at := 0; at <= free.Events; at++ {
				for y := int32(0); y < int32(pr.n); y++ {
					got := Sim{N: pr.n, Seed: seed, Program: pr.p, Crashes: []Crash{{At: at, PE: y}}}.Run()
					if err := Check(free, got); err != nil {
						t.Fatalf("%s n=%d seed %d: PE %d failing before event %d: %v", pr.p.Name(), pr.n, seed, y, at, err)
					}
				}
			}
		}
	}
}

// Scenario 6 (the same PE fails again) and staggered failures of different
// PEs once the previous recovery is over.
func TestRepeatedFailures(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 1))
	runs := 300
	if s := os.Getenv("FT_LONG"); s != "" { // a longer randomized search for local runs
		runs, _ = strconv.Atoi(s)
	}
	for i := 0; i < runs; i++ {
		pr := programs[rng.IntN(len(programs))]
		seed := rng.Uint64()
		free := Sim{N: pr.n, Seed: seed, Program: pr.p}.Run()
		require.NoError(t, free.Err)
		var crashes []Crash
		at := 0
		for k := 0; k < 1+rng.IntN(3); k++ {
			at += rng.IntN(free.Events/2 + 1)
			crashes = append(crashes, Crash{At: at, PE: int32(rng.IntN(pr.n))})
		}
		got := Sim{N: pr.n, Seed: seed, Program: pr.p, Crashes: crashes}.Run()
		if errors.Is(got.Err, ftlayer.ErrConcurrentFailure) {
			continue // two PEs down at once: reported, not survived (see the package doc)
		}
		if err := Check(free, got); err != nil {
			t.Fatalf("%s n=%d seed %d crashes %v: %v", pr.p.Name(), pr.n, seed, crashes, err)
		}
	}
}

// Scenario 7 under SCMEL: two PEs failing at once is detected and reported,
// never a wrong state.
func TestConcurrentFailuresAreReported(t *testing.T) {
	pr := programs[2]
	got := Sim{N: pr.n, Seed: 3, Program: pr.p, Crashes: []Crash{{At: 5, PE: 1}, {At: 5, PE: 2}}}.Run()
	require.ErrorIs(t, got.Err, ftlayer.ErrConcurrentFailure)
}

func TestStatsCountLogAndDeterminants(t *testing.T) {
	free := Sim{N: 4, Seed: 9, Program: Stencil{Steps: 6}}.Run()
	var created, logged uint64
	for _, s := range free.Stats {
		created += s.DetsCreated
		logged += s.LoggedTotal()
	}
	var delivered int
	for _, d := range free.Delivered {
		delivered += len(d)
	}
	require.Equal(t, uint64(delivered), created, "one determinant per reception")
	require.Equal(t, uint64(delivered), logged, "every message logged once (SCMEL)")

	// recovery statistics: replays, restarted PEs, checkpoint bytes
	pr := Stencil{Steps: 6, CkptEvery: 2}
	for _, f := range []ftlayer.Factory{ftlayer.SCMELFactory{}, ftlayer.CAMELFactory{}, ftlayer.NoneFactory{}} {
		got := Sim{N: 4, Seed: 9, Program: pr, Protocol: f, Crashes: []Crash{{At: 30, PE: 2}}}.Run()
		require.NoError(t, got.Err)
		tot := got.Total()
		require.Positive(t, tot.CheckpointBytes, f.Name())
		if f.RollsBackAll() {
			require.Equal(t, uint64(4), tot.RolledBack, "every PE rolled back")
			require.Zero(t, tot.Replayed)
		} else {
			require.Equal(t, uint64(1), tot.RolledBack, "%s: only the failed PE", f.Name())
			require.Positive(t, tot.Replayed, f.Name())
		}
	}
}

var ckptPrograms = []struct {
	p Program
	n int
}{
	{Stencil{Steps: 7, CkptEvery: 3}, 3},
	{Stencil{Steps: 8, CkptEvery: 2}, 4},
}

// Scenario 5 (and 1, 14): with coordinated checkpoints every few steps, a
// failure at every event boundary — before the first checkpoint, while a
// snapshot travels to its buddy, after it was stored but before the
// coordinator heard, after the commit was decided but before it arrived,
// between checkpoints — ends in the failure-free result, under SCMEL and
// under checkpoint/restart.
func TestFailureAtEveryBoundaryWithCheckpoints(t *testing.T) {
	for _, proto := range []ftlayer.Factory{ftlayer.SCMELFactory{}, ftlayer.NoneFactory{}} {
		for _, pr := range ckptPrograms {
			for seed := uint64(1); seed <= 2; seed++ {
				free := Sim{N: pr.n, Seed: seed, Program: pr.p, Protocol: proto}.Run()
				require.NoError(t, free.Err)
				require.Greater(t, free.Checkpoints, 1)
				aborted := 0
				for at := 0; at <= free.Events; at++ {
					for y := int32(0); y < int32(pr.n); y++ {
						got := Sim{N: pr.n, Seed: seed, Program: pr.p, Protocol: proto, Crashes: []Crash{{At: at, PE: y}}}.Run()
						if err := Check(free, got); err != nil {
							t.Fatalf("%s %s n=%d seed %d: PE %d failing before event %d: %v", proto.Name(), pr.p.Name(), pr.n, seed, y, at, err)
						}
						aborted += got.Aborted
						if proto.RollsBackAll() {
							require.Equal(t, pr.n, got.RolledBack)
						} else {
							require.Zero(t, got.RolledBack)
						}
					}
				}
				require.Positive(t, aborted, "some failures hit a checkpoint in progress")
			}
		}
	}
}

// Logs and determinants are dropped only when a checkpoint commits: at the
// end of a run the log holds exactly the messages sent since the last one.
func TestLogsAreCollectedAtCommit(t *testing.T) {
	free := Sim{N: 3, Seed: 5, Program: Stencil{Steps: 6, CkptEvery: 3}}.Run()
	require.NoError(t, free.Err)
	for i, st := range free.Stats {
		// steps 4..6 after the checkpoint at step 3 (the one at 6 is not
		// taken: the run ends there): 2 messages each for steps 3, 4, 5
		require.Equal(t, uint64(6), st.Logged(), "PE %d", i)
		require.Equal(t, uint64(12), st.LoggedTotal(), "PE %d", i)
	}
}
