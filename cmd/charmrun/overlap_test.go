package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

// Two processes SIGKILLed one after the other, the second while the
// first's replacement recovers (its PEs restored their checkpoint and
// replay): under spmd the team recovering restarts again with the
// second's, the two as one set; so too when the second is the
// replacement itself; under pessimist, the first's PEs not yet caught up
// restart again with the second's. The job ends bitwise as without
// failures. The second loss may come too late (the first caught up
// meanwhile: two recoveries in turn, also bitwise); each case runs until
// it came in time, five times at most. Under pessimist the first's PEs
// catch up fast, each alone: the second loss comes as soon as the first's
// recovery is decided, before they restored (they restart again empty).
func TestProcessLostWhileAnotherRecovers(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"3", "3", "3", "41", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	for _, c := range []struct {
		name   string
		ft     string
		when   []string // the notices after which the second process is lost
		second int
		// again: the PEs that may restart again (under pessimist, those
		// of them not caught up yet); notice's %s: the ones that did
		again  []int32
		notice string
	}{
		{"spmd, another process", "spmd", []string{"PE 2 restored checkpoint"}, 3, []int32{2, 3},
			"charmgo: process 3 (PEs 6..7) was lost; its replacement's PEs and PEs %s, which were recovering still and restart again, recover together from the last checkpoint (spmd): the others replay its messages"},
		{"spmd, the replacement", "spmd", []string{"PE 2 restored checkpoint"}, 1, []int32{2, 3}, ""},
		// process 2's PEs hold the copies of process 1's checkpoint: the
		// PEs recovering restored theirs, and keep them as they restart
		{"spmd, the holder of its copies", "spmd", []string{"PE 2 restored checkpoint", "PE 3 restored checkpoint"}, 2, []int32{2, 3},
			"charmgo: process 2 (PEs 4..5) was lost; its replacement's PEs and PEs %s, which were recovering still and restart again, recover together from the last checkpoint (spmd): the others replay its messages"},
		{"pessimist, another process", "pessimist", []string{"its replacement's PEs recover together, each alone"}, 3, []int32{2, 3},
			"charmgo: process 3 (PEs 6..7) was lost; its replacement's PEs and PEs %s, which were recovering still and restart again, recover together, each alone (pessimist): the others replay its messages"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lost := []int32{2 * int32(c.second), 2*int32(c.second) + 1}
			for try := 1; ; try++ {
				js := filepath.Join(t.TempDir(), "summary.json")
				j := startJob(t, cr, leanmd, []string{"++n", "4", "++ppn", "2", "--ft", c.ft, "--watchdog", "20s", "--summary-json", js}, params, "Step 15 Benchmark")
				j.signal(t, 1, syscall.SIGKILL)
				for _, w := range c.when {
					j.err.waitFor(t, w, 20*time.Second)
				}
				j.findKids(t) // process 1's replacement
				j.signal(t, c.second, syscall.SIGKILL)
				require.Equal(t, 0, j.waitWithin(t, 60*time.Second), j.err.String())
				require.Equal(t, want, energies(t, j.out.String()))
				ft := readSummary(t, js).FaultTolerance
				require.Len(t, ft.Recoveries, 2, "%+v", ft)
				again := ft.Recoveries[1].Again
				if again == nil {
					t.Logf("try %d: the second loss came after the first recovery:\n%s", try, j.err.String())
					require.Less(t, try, 5, "the second loss never came during the first recovery")
					continue
				}
				require.Subset(t, c.again, again)
				if c.notice != "" {
					require.Contains(t, j.err.String(), fmt.Sprintf(c.notice, ftlayer.PEList(again)))
				}
				set := slices.Sorted(slices.Values(slices.Concat(lost, again)))
				require.Equal(t, slices.Compact(set), ft.Recoveries[1].Set)
				return
			}
		})
	}
}

// Under camel and team, a process lost while another recovers, once the
// recovering PEs have everything they need from its PEs (the replays of
// its PEs are in), stays down until they caught up, and its replacement
// recovers it then, alone: no global rollback. The job ends bitwise as
// without failures. The second loss may come too early (a global
// rollback, also bitwise) or too late (two recoveries in turn); each case
// runs until it came in time, five times at most. Under team the lost
// process's checkpoint copies live in the one recovering (PE 4 holds PE
// 2's): they wait until they are back there; a loss before they are
// rolls every PE back from --ckpt-dir.
func TestProcessLostQueuedBehindARecovery(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"3", "3", "3", "41", "20", "20", "10", "--progress", "1"}
	for _, c := range []struct {
		name, ft      string
		layout        []string
		pes           int
		first, second int    // the processes lost
		when          string // the notice after which the second is lost
		notice        string
	}{
		{"camel", "camel", []string{"++n", "4", "++ppn", "1"}, 4, 1, 3, "PE 1 restored checkpoint",
			"charmgo: process 3 (PE 3) was lost; PE 1, recovering, holds everything it needs from it: its replacement recovers it once they caught up"},
		// (a second loss too early, before PE 4 held PE 2's copy again,
		// rolls every PE back from the directory, and the case runs again:
		// without it, no copy of PE 2's snapshot was left, exit 1)
		{"team", "team", []string{"++n", "4", "++ppn", "2", "--teams", "process", "--ckpt-dir", "DIR"}, 8, 2, 1, "PE 5 restored checkpoint",
			"charmgo: process 1 (PEs 2..3) was lost; PEs {4-5}, recovering, hold everything they need from it: its replacement recovers it once they caught up"},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := failureFree(t, leanmd, params)
			for try := 1; ; try++ {
				js := filepath.Join(t.TempDir(), "summary.json")
				layout := slices.Clone(c.layout)
				if i := slices.Index(layout, "DIR"); i >= 0 {
					layout[i] = t.TempDir()
				}
				args := slices.Concat(layout, []string{"--ft", c.ft, "--watchdog", "20s", "--summary-json", js})
				j := startJob(t, cr, leanmd, args, params, "Step 15 Benchmark")
				j.signal(t, c.first, syscall.SIGKILL)
				j.err.waitFor(t, c.when, 20*time.Second)
				j.findKids(t) // the first's replacement
				j.signal(t, c.second, syscall.SIGKILL)
				require.Equal(t, 0, j.waitWithin(t, 60*time.Second), j.err.String())
				require.Equal(t, want, energies(t, j.out.String()))
				ft := readSummary(t, js).FaultTolerance
				if len(ft.Recoveries) != 2 || ft.Recoveries[1].QueuedMs == 0 {
					t.Logf("try %d: the second loss was not queued (%d recoveries):\n%s", try, len(ft.Recoveries), j.err.String())
					require.Less(t, try, 5, "the second loss was never queued")
					continue
				}
				require.Contains(t, j.err.String(), c.notice)
				require.Equal(t, 2, ft.Failures)
				return
			}
		})
	}
}
