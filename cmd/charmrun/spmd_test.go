package main

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Logging without determinants across processes (issue 38): each
// process's PEs are a team; a SIGKILLed process is replaced and its team
// re-executes from the last checkpoint while the others go on, and two
// processes lost at once recover together, as one set. The energies are
// the one-process, failure-free ones, bitwise. With one PE a process,
// each PE is a team of its own, and two lost at once recover together
// too: that case runs in CI, the others under FT_LONG (it covers their
// path but for the teams' size).
func TestSPMDAcrossProcesses(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "41", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	for _, c := range []struct {
		name   string
		ppn    int
		kill   []int
		notice string
		long   bool
	}{
		{"one process", 2, []int{1},
			"charmgo: process 1 (PEs 2..3) was lost; its PEs are one team: its replacement recovers them from the last checkpoint (spmd): the others replay its messages", true},
		{"two processes at once", 2, []int{1, 3},
			"charmgo: process 1 (PEs 2..3) was lost, and process 3 (PEs 6..7) was lost; their PEs are whole teams: their replacements recover them together from the last checkpoint (spmd): the others replay their messages", true},
		{"two processes of one PE at once", 1, []int{1, 3},
			"charmgo: process 1 (PE 1) was lost, and process 3 (PE 3) was lost; their PEs are whole teams: their replacements recover them together from the last checkpoint (spmd): the others replay their messages", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.long && os.Getenv("FT_LONG") == "" {
				t.Skip("FT_LONG: the last case loses two processes at once")
			}
			ft := killProcesses(t, cr, leanmd, params, want, []string{"++n", "4", "++ppn", strconv.Itoa(c.ppn), "--ft", "spmd"}, c.kill, false, c.notice).FaultTolerance
			require.Equal(t, c.ppn*len(c.kill), ft.PEsRolledBack, "%+v", ft)
			require.Len(t, ft.Recoveries, 1, "one recovery: %+v", ft)
			require.Positive(t, ft.Recoveries[0].Orphans, "orphans made again, reported by the replacements' PEs")
		})
	}
}
