package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// The pessimist protocol across processes (issue 37): each process's PEs'
// events are held by the next two processes too, so a SIGKILLed process,
// or two at once, is replaced and its PEs recover together, each alone,
// from their checkpoints and the events their replicas hand back; the
// survivors never roll back, and the energies are the one-process,
// failure-free ones, bitwise. Two processes lost at once that held each
// other's checkpoint copies roll every PE back (from --ckpt-dir here).
// The first three cases run under FT_LONG: the fourth loses a process,
// then two at once.
func TestPessimistAcrossProcesses(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "41", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	for _, c := range []struct {
		name      string
		args      []string
		kill      []int
		staggered bool // the first kill's recovery first: PEs first and first+1 caught up
		notice    string
		rolled    int  // PEs rolled back
		long      bool // under FT_LONG only (the others cover it: the suite's time)
	}{
		{"one process", []string{"++n", "3", "++ppn", "2"}, []int{1}, false,
			"charmgo: process 1 (PEs 2..3) was lost; its replacement's PEs recover together, each alone (pessimist): the others replay its messages", 2, true},
		{"two processes at once", []string{"++n", "4", "++ppn", "2"}, []int{1, 3}, false,
			"charmgo: process 1 (PEs 2..3) was lost, and process 3 (PEs 6..7) was lost; their replacements' PEs recover together, each alone (pessimist): the others replay their messages", 4, true},
		{"one after the other", []string{"++n", "4", "++ppn", "2"}, []int{1, 2}, true,
			"charmgo: process 2 (PEs 4..5) was lost; its replacement's PEs recover together, each alone (pessimist)", 4, true},
		// process 1's events are held by processes 2 and 3: 2's
		// replacement gets them from 1 again as it joins (Linked), and is
		// the only one left to hand them back when 1 and 3 go next
		{"a replica replaced, then the two processes it held events for", []string{"++n", "4", "++ppn", "2"}, []int{2, 1, 3}, true,
			"charmgo: process 1 (PEs 2..3) was lost, and process 3 (PEs 6..7) was lost; their replacements' PEs recover together, each alone (pessimist)", 6, false},
		{"two holding each other's checkpoint copies, at once", []string{"++n", "4", "++ppn", "2", "--ckpt-dir", t.TempDir()}, []int{1, 2}, false,
			"(PE 2 and PE 4, which holds the second copy of its checkpoint, were lost at once: every PE rolls back); every PE rolls back to checkpoint", 8, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.long && os.Getenv("FT_LONG") == "" {
				t.Skip("FT_LONG: the case after it loses one process, then two at once")
			}
			s := killProcesses(t, cr, leanmd, params, want, append(c.args, "--ft", "pessimist"), c.kill, c.staggered, c.notice)
			require.Equal(t, c.rolled, s.FaultTolerance.PEsRolledBack, "%+v", s.FaultTolerance)
			require.NotNil(t, s.FaultTolerance.Events)
			require.Positive(t, s.FaultTolerance.Events.Commits)
		})
	}
}

// killProcesses runs LeanMD (params) under charmrun with args, SIGKILLs
// the processes kill once step 15 began (with staggered, the second once
// the first's two PEs caught up: a loss during a recovery rolls every PE
// back), and requires the job to end well, to have said notice, and to
// end in the failure-free energies want; it returns the job's summary.
func killProcesses(t *testing.T, cr, leanmd string, params []string, want string, args []string, kill []int, staggered bool, notice string) chare.Summary {
	t.Helper()
	js := filepath.Join(t.TempDir(), "summary.json")
	j := startJob(t, cr, leanmd, append(args, "--watchdog", "20s", "--summary-json", js), params, "Step 15 Benchmark")
	for i, r := range kill {
		if i == 1 && staggered {
			first := 2 * kill[0]
			j.err.waitFor(t, fmt.Sprintf("PE %d caught up", first), 20*time.Second)
			j.err.waitFor(t, fmt.Sprintf("PE %d caught up", first+1), 20*time.Second)
		}
		j.signal(t, r, syscall.SIGKILL)
	}
	require.Equal(t, 0, j.waitWithin(t, 60*time.Second), j.err.String())
	require.Contains(t, j.err.String(), notice)
	require.Equal(t, want, energies(t, j.out.String()))
	return readSummary(t, js)
}
