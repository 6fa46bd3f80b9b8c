package ftsim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/recovery"
)

// A PE failing while another recovers, under the protocols that recover
// one failure at a time, fails at once if the recovering PEs hold
// everything they need from it, and recovers once they caught up (its
// failure queued); otherwise it waits, alive, for them. Across processes
// a lost process cannot wait alive: this is how its loss is recovered
// without a global rollback, and here every moment of it is swept.
func TestFailureQueuedBehindARecovery(t *testing.T) {
	stride := sweepStride(7, 31) // (every event under FT_LONG)
	for _, c := range []struct {
		name  string
		cfg   chare.Config
		kills []teamKills
	}{
		{"scmel", chare.Config{PEs: 5, FT: "scmel", Branching: 2}, []teamKills{{0, 2, 6}, {1, 3, 12}, {4, 1, 25}, {2, 4, 40}}},
		{"camel", chare.Config{PEs: 5, FT: "camel", Branching: 2}, []teamKills{{0, 2, 6}, {1, 3, 12}, {4, 1, 25}, {2, 4, 40}}},
		// (the team after a team holds its checkpoint's copies: a team
		// failing while the holder of its copies recovers waits until
		// they are back there)
		{"team", chare.Config{PEs: 8, FT: "team", Teams: "2", Branching: 2}, []teamKills{{0, 4, 6}, {2, 1, 12}, {5, 7, 25}, {6, 3, 40}}},
	} {
		for _, prog := range []string{"mix", "chain"} {
			t.Run(c.name+"/"+prog, func(t *testing.T) {
				kills := c.kills
				if long() == 0 {
					kills = kills[:2] // (CI's budget: all four under FT_LONG)
				}
				runs, queued := sweepPairs(t, prog, c.cfg, kills, stride, func(r recovery.RecoveryStats) bool { return r.Queued > 0 })
				require.Positive(t, queued, "failures queued behind a recovery")
				t.Logf("%d runs, %d with a failure queued", runs, queued)
			})
		}
	}
}
