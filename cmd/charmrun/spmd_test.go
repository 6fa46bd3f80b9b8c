package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// Logging without determinants across processes (issue 38): each
// process's PEs are a team; a SIGKILLed process is replaced and its team
// re-executes from the last checkpoint while the others go on, and two
// processes lost at once recover together, as one set. The energies are
// the one-process, failure-free ones, bitwise. The first case runs under
// FT_LONG (the second covers it).
func TestSPMDAcrossProcesses(t *testing.T) {
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"3", "3", "3", "41", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, 8, params)
	for _, c := range []struct {
		name   string
		kill   []int
		notice string
		long   bool
	}{
		{"one process", []int{1},
			"charmgo: process 1 (PEs 2..3) was lost; its PEs are one team: its replacement recovers them from the last checkpoint (spmd): the others replay its messages", true},
		{"two processes at once", []int{1, 3},
			"charmgo: process 1 (PEs 2..3) was lost, and process 3 (PEs 6..7) was lost; their PEs are whole teams: their replacements recover them together from the last checkpoint (spmd): the others replay their messages", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.long && os.Getenv("FT_LONG") == "" {
				t.Skip("FT_LONG: the case after it loses two processes at once")
			}
			ft := killProcesses(t, cr, leanmd, params, want, []string{"++n", "4", "++ppn", "2", "--ft", "spmd"}, c.kill, false, c.notice).FaultTolerance
			require.Equal(t, 2*len(c.kill), ft.PEsRolledBack, "%+v", ft)
			require.Len(t, ft.Recoveries, 1, "one recovery: %+v", ft)
			require.Positive(t, ft.Recoveries[0].Orphans, "orphans made again, reported by the replacements' PEs")
		})
	}
}
