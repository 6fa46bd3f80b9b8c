package chare

import (
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

// The teams each protocol gets. camel over processes of several PEs makes
// each process a team unless --teams says otherwise (a lost process
// recovers alone instead of rolling every PE back); where a process holds
// more than half the PEs, or in one process, every PE is alone. team and
// spmd take a process a team by default; scmel has none.
func TestChooseTeams(t *testing.T) {
	spec := func(name string) ftlayer.ProtocolSpec {
		s, err := ftlayer.LookupProtocol(name)
		require.NoError(t, err)
		return s
	}
	for _, c := range []struct {
		name      string
		cfg       Config
		teams     string // Teams.String(), "" for none
		wantError string
	}{
		{"camel, 2 processes of 2 PEs", Config{FT: "camel", PEs: 4, Procs: 2}, "{0-1} {2-3}", ""},
		{"camel, 3 processes of 2 PEs", Config{FT: "camel", PEs: 6, Procs: 3}, "{0-1} {2-3} {4-5}", ""},
		{"camel, a PE a process", Config{FT: "camel", PEs: 2, Procs: 2}, "", ""},
		{"camel, one process", Config{FT: "camel", PEs: 4}, "", ""},
		{"camel, a process of more than half the PEs", Config{FT: "camel", PEs: 5, Procs: 2}, "", ""},
		{"camel, --teams 1 asked (every PE alone)", Config{FT: "camel", PEs: 4, Procs: 2, Teams: "1"}, "", ""},
		{"camel, --teams process asked", Config{FT: "camel", PEs: 4, Procs: 2, Teams: "process"}, "{0-1} {2-3}", ""},
		{"scmel, 2 processes of 2 PEs", Config{FT: "scmel", PEs: 4, Procs: 2}, "", ""},
		{"team, 2 processes of 2 PEs", Config{FT: "team", PEs: 4, Procs: 2}, "{0-1} {2-3}", ""},
		{"team, a process of more than half the PEs", Config{FT: "team", PEs: 5, Procs: 2}, "", "flag --teams process"},
	} {
		t.Run(c.name, func(t *testing.T) {
			teams, _, err := chooseTeams(c.cfg, spec(c.cfg.FT), 1)
			if c.wantError != "" {
				require.ErrorContains(t, err, c.wantError)
				return
			}
			require.NoError(t, err)
			if c.teams == "" {
				require.False(t, teams.On(), "%v", teams)
				return
			}
			require.Equal(t, c.teams, teams.String())
		})
	}
}
