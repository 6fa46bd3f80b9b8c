package fttest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

var protocols = []ftlayer.Factory{ftlayer.SCMELFactory{}, ftlayer.CAMELFactory{}, ftlayer.NoneFactory{}}

// The LeanMD-like pattern runs to the same end under every protocol and
// every schedule; the protocols deliver the same collectives.
func TestCellsFailureFree(t *testing.T) {
	for _, pr := range []struct {
		c Cells
		n int
	}{
		{Cells{Steps: 4, Width: 2, K: 2, Pad: 16}, 5},
		{Cells{Steps: 3, Width: 3, K: 2, Pad: 32}, 8},
		{Cells{Steps: 5, CkptEvery: 2, Width: 1, K: 3, Pad: 16}, 3},
		{Cells{Steps: 3, Width: 4, K: 4, Pad: 24}, 9},
	} {
		var first Result
		for i, proto := range protocols {
			for seed := uint64(1); seed <= 3; seed++ {
				got := Sim{N: pr.n, Seed: seed, Program: pr.c, Protocol: proto}.Run()
				require.NoError(t, got.Err, "%s %+v", proto.Name(), pr.c)
				if i == 0 && seed == 1 {
					first = got
					require.Equal(t, pr.c.Steps, got.States[0].Step)
				}
				require.NoError(t, Check(first, got), "%s seed %d %+v", proto.Name(), seed, pr.c)
			}
		}
	}
}

// Scenarios 1–4 and 14 on the LeanMD-like pattern: one PE fails before
// any event — an intermediate node mid-multicast, a reduction root or leaf
// before or after its part — every PE in turn, with and without
// checkpoints, under every protocol (CAMEL paper §3.1's cases).
//
// In CI each (event, PE) pair is tried once, losing the failed PE's
// packets in flight or not in turn; FT_LONG=1 tries both, with two seeds.
func TestCellsOneFailureAtEveryBoundary(t *testing.T) {
	long := os.Getenv("FT_LONG") != ""
	seeds := uint64(1)
	if long {
		seeds = 2
	}
	for _, pr := range []struct {
		c Cells
		n int
	}{
		{Cells{Steps: 3, Width: 2, K: 2, Pad: 24}, 5},
		{Cells{Steps: 5, CkptEvery: 2, Width: 2, K: 2, Pad: 24}, 5},
	} {
		for _, proto := range protocols {
			for seed := uint64(1); seed <= seeds; seed++ {
				free := Sim{N: pr.n, Seed: seed, Program: pr.c, Protocol: proto}.Run()
				require.NoError(t, free.Err)
				for at := 0; at <= free.Events; at++ {
					for y := int32(0); y < int32(pr.n); y++ {
						for _, lose := range []bool{false, true} {
							if !long && lose != ((at+int(y))%2 == 0) {
								continue
							}
							got := Sim{N: pr.n, Seed: seed, Program: pr.c, Protocol: proto, Crashes: []Crash{{At: at, PE: y, LoseAll: lose}}}.Run()
							if err := Check(free, got); err != nil {
								t.Fatalf("%s %+v seed %d: PE %d failing before event %d (losing its packets: %v): %v", proto.Name(), pr.c, seed, y, at, lose, err)
							}
						}
					}
				}
			}
		}
	}
}

// Randomized search (scenarios 1–4, 6, 7 and 14 by chance): two to four
// failures at random moments, some right after the previous recovery
// ended, some overlapping it (those must be reported as unsupported,
// never end wrong), optionally losing the failed PE's packets in flight.
// CAMEL as published (Verbatim) fails some of these runs: the fixes
// described on ftlayer.Causal are what the search found. FT_LONG=N runs N
// cases per protocol.
func TestCellsRandomFailures(t *testing.T) {
	runs := 300
	if s := os.Getenv("FT_LONG"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	for _, proto := range []ftlayer.Factory{ftlayer.CAMELFactory{}, ftlayer.SCMELFactory{}, ftlayer.NoneFactory{}, ftlayer.CAMELFactory{Verbatim: true}} {
		rng := rand.New(rand.NewPCG(7, 7))
		var bad, unsupported, checked int
		var first error
		for i := 0; i < runs; i++ {
			c := Cells{Steps: 4 + rng.Int64N(4), CkptEvery: rng.Int64N(4), Width: 1 + rng.IntN(3), K: 1 + rng.IntN(3), Pad: 24}
			n := 3 + rng.IntN(6)
			seed := rng.Uint64()
			free := Sim{N: n, Seed: seed, Program: c, Protocol: proto}.Run()
			require.NoError(t, free.Err)
			var crashes []Crash
			at := 0
			for k := 0; k < 2+rng.IntN(3); k++ {
				at += rng.IntN(free.Events/3 + 1)
				cr := Crash{At: at, PE: int32(rng.IntN(n)), LoseAll: rng.IntN(2) == 0}
				if k > 0 && rng.IntN(2) == 0 {
					cr.When, cr.Of, cr.Optional = "recovered", crashes[k-1].PE, true
				}
				crashes = append(crashes, cr)
			}
			got := Sim{N: n, Seed: seed, Program: c, Protocol: proto, Crashes: crashes}.Run()
			if errors.Is(got.Err, ftlayer.ErrConcurrentFailure) {
				unsupported++
				continue
			}
			checked++
			if err := Check(free, got); err != nil {
				bad++
				if first == nil {
					first = fmt.Errorf("n=%d seed %d %+v crashes %+v: %w", n, seed, c, crashes, err)
				}
			}
		}
		t.Logf("%s: %d runs checked, %d wrong, %d reported unsupported", proto.Name(), checked, bad, unsupported)
		if proto.Name() == "camel-verbatim" {
			require.Positive(t, bad, "the published algorithm's known failures are no longer found: is the search still exploring?")
			continue
		}
		require.NoError(t, first)
		require.Greater(t, checked, runs/3)
	}
}
