package md

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// closureOf is the rollback set of a failure of failed, computed here
// from the channels not logged (off[z] lists the PEs z stopped logging
// to) and the teams (PEs in blocks of team; 1: none), to a fixpoint: an
// implementation of its own, to hold the runtime's against.
func closureOf(off [][]int32, failed, team, n int) []int32 {
	in := map[int32]bool{}
	for p := failed / team * team; p < min(failed/team*team+team, n); p++ {
		in[int32(p)] = true
	}
	for grew := true; grew; {
		grew = false
		for z := range n {
			if in[int32(z)] {
				continue
			}
			join := false
			for _, y := range off[z] {
				join = join || in[y]
			}
			for m := z / team * team; m < min(z/team*team+team, n); m++ {
				join = join || in[int32(m)] // a teammate rolls back
			}
			if join {
				in[int32(z)], grew = true, true
			}
		}
	}
	var out []int32
	for p := range in {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// A log limit (MCML, issue 36) at 40% of the protocol's unconstrained
// peak: a
// failure of each PE late in an epoch, when PEs stopped logging on some
// channels, under scmel, camel and team, with and without a balancer (which
// keeps PE 0 and its witness logging every channel): the energies and
// atoms are bitwise the failure-free run's; the rollback set each
// recovery reports is the closure over the channels not logged when it
// failed; every channel a PE turned off went through the launcher's
// record; and without failures each PE's log stays under the limit.
func TestALogLimitEndsInTheFailureFreeResult(t *testing.T) {
	p := params(3, 3, 3, 13)
	p.CkptPeriod = 4 // checkpoints at steps 4, 8 and 12
	base := run(t, p, chare.Config{PEs: 4})
	peakOf := func(c chare.Config) uint64 {
		free := run(t, p, chare.Config{PEs: 4, FT: c.FT, Teams: c.Teams, Balancer: "none"})
		var peak uint64
		for _, l := range free.Ops.FT.PELog {
			peak = max(peak, l.PeakTotal)
		}
		return peak
	}
	peak := peakOf(chare.Config{FT: "scmel"})
	limit := peak * 4 / 10
	bounded := run(t, p, chare.Config{PEs: 4, FT: "scmel", Balancer: "none", LogLimit: limit})
	requireSameEnergies(t, base, bounded, "a limit, no failure")
	for pe, l := range bounded.Ops.FT.PELog {
		// while a recovery or a checkpoint is under way no channel is
		// turned off, and a log may pass the limit (counted as sends over
		// it); without failures, only the checkpoints' windows
		require.LessOrEqual(t, l.PeakTotal, limit, "PE %d's log peak without failures", pe)
	}
	cases := []chare.Config{{FT: "scmel", Balancer: "none"}, {FT: "scmel"}, {FT: "team", Teams: "2", Balancer: "none"},
		{FT: "scmel", Balancer: "none", LogLimitStrategy: "cluster"}, {FT: "camel", Balancer: "none"},
		{FT: "camel", Teams: "2", Balancer: "none"}}
	steps := []int{7, 11}
	if raceOn {
		cases, steps = cases[:1], steps[:1]
	}
	bigger := 0
	for _, c := range cases {
		peak := peak
		if c.FT != "scmel" {
			peak = peakOf(c)
		}
		limit := peak * 4 / 10
		if c.FT == "camel" {
			// most of CAMEL's log is its shared copies, which no channel
			// drops: a tighter limit reaches the channels
			limit = peak / 10
		}
		steps := steps
		if c.Balancer == "" || c.Teams != "" || c.LogLimitStrategy != "" {
			steps = steps[len(steps)-1:] // late in the epoch; both steps for plain scmel
		}
		for _, step := range steps {
			for y := range 4 {
				if raceOn && y != 1 {
					continue
				}
				cfg := c
				cfg.PEs, cfg.LogLimit, cfg.Kills = 4, limit, []chare.Kill{{PE: y, Step: step}}
				name := fmt.Sprintf("%s (balancer %q, %s), PE %d at step %d, limit %d of %d", ftName(c), c.Balancer, cmp.Or(c.LogLimitStrategy, "heaviest"), y, step, limit, peak)
				r := run(t, p, cfg)
				requireSameEnergies(t, base, r, name)
				ft := r.Ops.FT
				require.Equal(t, 1, ft.Failures, name)
				require.Len(t, ft.Recoveries, 1, name)
				rc := ft.Recoveries[0]
				team := 1
				if c.Teams != "" {
					team = 2
				}
				require.Equal(t, closureOf(rc.Off, y, team, 4), rc.Set, "%s: the rollback set over %v", name, rc.Off)
				require.Equal(t, len(rc.Set), rc.PEs, name)
				if len(rc.Set) > team {
					bigger++
				}
				t.Logf("%s: rollback set %v (chain %d) off %v, %d off", name, rc.Set, rc.Chain, rc.Off, ft.Log.ChannelsOff)
				require.Positive(t, ft.Log.ChannelsOff, name)
				if c.LogLimitStrategy == "cluster" {
					require.Positive(t, ft.Log.Reclustered, "%s: the checkpoints' dendrograms reached the hooks", name)
				}
				require.Equal(t, ft.ChannelsOffGranted, ft.Log.ChannelsOff, "%s: every channel turned off went through the record", name)
				if c.Balancer == "" {
					// PE 0 and its witness log every channel: a failure
					// of another never takes them along
					require.True(t, y < 2 || !slices.Contains(rc.Set, 0) && !slices.Contains(rc.Set, 1), "%s: set %v", name, rc.Set)
				}
			}
		}
	}
	if !raceOn {
		require.Positive(t, bigger, "some failures roll back more than the failed PE's team")
	}
}
