package md

import (
	"fmt"
	"strings"
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
	p := params(3, 3, 3, 13)
	p.FirstLB, p.LBPeriod, p.CkptPeriod, p.Given = 6, 6, 4, 7
	bases := map[int]Report{}
	for _, pes := range []int{4, 8} {
		bases[pes] = run(t, p, chare.Config{PEs: pes, Branching: 2})
	}
	cases := []struct {
		name      string
		pes       int
		branching int
		kills     []chare.Kill
		together  bool // two teams recover together
	}{
		{"a team before the first checkpoint", 4, 0, []chare.Kill{{PE: 3, Step: 2}}, false},
		{"a team past the balancing", 4, 0, []chare.Kill{{PE: 1, Step: 7}}, false},
		{"a team as step 8 begins, binary trees", 4, 2, []chare.Kill{{PE: 3, Step: 8}}, false},
		{"two teams at once", 8, 0, []chare.Kill{{PE: 1, Step: 7}, {PE: 5, Step: 7}}, true},
		{"a team twice", 8, 2, []chare.Kill{{PE: 7, Step: 7}, {PE: 7, Step: 10}}, false},
	}
	for i, c := range cases {
		for seed := uint64(1 + i%2); seed <= uint64(1+i%2); seed++ { // one order each, two between them
			t.Run(fmt.Sprintf("%s/seed %d", c.name, seed), func(t *testing.T) {
				var notices strings.Builder
				r := run(t, p, chare.Config{PEs: c.pes, Branching: c.branching, FT: "spmd", Teams: "2", Kills: c.kills,
					Deterministic: true, Seed: seed, Notices: &notices})
				requireSameEnergies(t, bases[c.pes], r, c.name)
				ft := r.Ops.FT
				require.Equal(t, len(c.kills), ft.Failures)
				if c.together {
					require.Len(t, ft.Recoveries, 1, notices.String())
					require.Len(t, ft.Recoveries[0].Set, 4, "two teams of 2: %s", notices.String())
				}
				require.Positive(t, ft.Log.Replayed)
			})
		}
	}
}
