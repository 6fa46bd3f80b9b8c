package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

// Two processes SIGKILLed one after the other, the second while the
// first's replacement recovers (its PEs restored their checkpoint and
// replay): the team recovering restarts again with the second's, the two
// as one set, and the job ends bitwise as without failures; so too when
// the second is the replacement itself. The second loss may come too
// late (the first caught up meanwhile: two recoveries in turn, also
// bitwise); each case runs until it came in time, three times at most.
func TestSPMDProcessLostWhileAnotherRecovers(t *testing.T) {
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"3", "3", "3", "41", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, 8, params)
	for _, c := range []struct {
		name       string
		second     int
		set, again []int32
		notice     string
	}{
		{"another process", 3, []int32{2, 3, 6, 7}, []int32{2, 3},
			"charmgo: process 3 (PEs 6..7) was lost; its replacement's PEs and PEs {2-3}, which were recovering still and restart again, recover together from the last checkpoint (spmd): the others replay its messages"},
		{"the replacement", 1, []int32{2, 3}, []int32{2, 3}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for try := 1; ; try++ {
				js := filepath.Join(t.TempDir(), "summary.json")
				j := startJob(t, cr, leanmd, []string{"++n", "4", "++ppn", "2", "--ft", "spmd", "--watchdog", "20s", "--summary-json", js}, params, "Step 15 Benchmark")
				j.signal(t, 1, syscall.SIGKILL)
				j.err.waitFor(t, "PE 2 restored checkpoint", 20*time.Second)
				j.findKids(t) // process 1's replacement
				j.signal(t, c.second, syscall.SIGKILL)
				require.Equal(t, 0, j.waitWithin(t, 60*time.Second), j.err.String())
				require.Equal(t, want, energies(t, j.out.String()))
				ft := readSummary(t, js).FaultTolerance
				require.Len(t, ft.Recoveries, 2, "%+v", ft)
				if ft.Recoveries[1].Again == nil {
					t.Logf("try %d: the second loss came after the first recovery:\n%s", try, j.err.String())
					require.Less(t, try, 3, "the second loss never came during the first recovery")
					continue
				}
				require.Contains(t, j.err.String(), c.notice)
				require.Equal(t, c.again, ft.Recoveries[1].Again)
				require.Equal(t, c.set, ft.Recoveries[1].Set)
				return
			}
		})
	}
}
