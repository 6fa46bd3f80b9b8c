package chare_test

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/ftsim"
	"github.com/stretchr/testify/require"
)

// sendsRun runs a program deterministically, interleaved by seed, and
// returns what its elements sent.
type sendsRun func(seed uint64) (*ftsim.Sends, error)

func mainSends[C any](m *chare.Type[C, []string], cfg chare.Config) sendsRun {
	return func(seed uint64) (*ftsim.Sends, error) {
		cfg, s := ftsim.RecordSends(cfg)
		return s, ftsim.Run(m, nil, cfg, seed).Err
	}
}

// Which of the chare feature programs keep the contract of message
// logging without determinants (docs/SPMD.md: every element sends the
// same messages in the same order, whatever order its own arrive in):
// each runs interleaved by three seeds, and what its elements sent is
// compared (ftsim.DiffSends). Every one of them keeps it: an element that
// hears from several others acts once it has heard from all of them (a
// reduction, a count, a Gather), or answers each message by itself.
func TestTheFeatureProgramsSendTheSameMessagesInEveryOrder(t *testing.T) {
	feat := func(name string, pes int) sendsRun {
		return func(seed uint64) (*ftsim.Sends, error) {
			featCase, featOut, featSteps = name, nil, nil
			cfg, s := ftsim.RecordSends(chare.Config{PEs: pes, Balancer: "rotate"})
			return s, ftsim.Run(featMain, nil, cfg, seed).Err
		}
	}
	cases := []struct {
		name string
		run  sendsRun
	}{
		{"group", feat("group", 4)},
		{"sparse6", feat("sparse6", 3)},
		{"atsync", feat("atsync", 3)},
		{"bcast-migrate", feat("bcast-migrate", 3)},
		{"packed", feat("packed", 3)},
		{"quiescence", feat("quiescence", 3)},
		{"future-set", feat("future-set", 3)},
		{"more", func(seed uint64) (*ftsim.Sends, error) {
			moreOut = nil
			return mainSends(moreMain, chare.Config{PEs: 3, Branching: 2})(seed)
		}},
		{"example group", mainSends(grpMain, chare.Config{PEs: 3})},
		{"example future", mainSends(askMain, chare.Config{PEs: 2})},
		{"example atsync", mainSends(lbMain, chare.Config{PEs: 3, Balancer: "rotate"})},
		{"example camel", mainSends(ftMain, chare.Config{PEs: 3})},
		{"example gather", mainSends(waitMain, chare.Config{PEs: 2})},
		{"example ring", mainSends(ringMain, chare.Config{PEs: 3})},
		{"example sum", mainSends(sumMain, chare.Config{PEs: 3})},
		{"example section", mainSends(secMain, chare.Config{PEs: 3})},
		{"example migration", mainSends(migMain, chare.Config{PEs: 3})},
		{"example quiescence", mainSends(quietMain, chare.Config{PEs: 3})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			first, err := c.run(1)
			require.NoError(t, err)
			require.Positive(t, first.Len(), "nothing recorded")
			for seed := uint64(2); seed <= 3; seed++ {
				other, err := c.run(seed)
				require.NoError(t, err)
				require.Empty(t, ftsim.DiffSends(first, other, 5), "seeds 1 and %d", seed)
			}
		})
	}
}
