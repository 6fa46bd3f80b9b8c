package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Jobs of many processes on one host, all sharing its cores: a job of 16
// processes of one PE, one of them killed mid-run and replaced, ends with
// the failure-free energies, bitwise, and not one warning. FT_LONG adds
// jobs of 64 and 128 processes the same way (a replacement joins a job of
// 64), and hello on 64, 128 and 256 processes (the time each took is
// logged, not asserted: bench/README's "Cost as the job grows" measures it).
func TestManyProcesses(t *testing.T) {
	plainTierOnly(t)
	leanmd := buildLeanMD(t)
	params := []string{"2", "2", "2", "31", "20", "20", "10"}
	want := failureFree(t, leanmd, params)
	procs := []int{16}
	if os.Getenv("FT_LONG") != "" {
		procs = append(procs, 64, 128)
	}
	for _, n := range procs {
		t.Run(fmt.Sprintf("leanmd on %d processes, one killed", n), func(t *testing.T) {
			var out, errb bytes.Buffer
			victim := n/2 + 1
			kill := fmt.Sprintf("%d@15", victim)
			js := filepath.Join(t.TempDir(), "summary.json")
			code := run(append([]string{"++n", fmt.Sprint(n), "++ppn", "1", "--ft", "camel", "--kill", kill, "--watchdog", "60s", "--summary-json", js, leanmd}, params...), &out, &errb)
			errs := errb.String()
			require.Equal(t, 0, code, errs)
			require.Equal(t, want, energies(t, out.String()))
			require.Contains(t, errs, fmt.Sprintf("charmrun: process %d was killed by SIGKILL; starting its replacement", victim))
			require.NotContains(t, errs, "\tWARN\t", "a job of %d processes warned", n)
			// what each process held and sent to be in the job: data links
			// to the processes it sent to (opened on first use; the
			// replacement links to every process as it joins), and
			// heartbeats to its neighbours in the tree alone (at most 9, a
			// second apart; a run this short may end before the first)
			s := readSummary(t, js)
			require.Len(t, s.Layout.Processes, n)
			for _, p := range s.Layout.Processes {
				c := p.Cost
				require.Positive(t, c.PeakRSSBytes, "process %d", p.Rank)
				require.Positive(t, c.DataLinks, "process %d", p.Rank)
				require.LessOrEqual(t, c.DataLinks, n-1, "process %d", p.Rank)
				if p.Rank == victim {
					require.Equal(t, n-1, c.DataLinks, "the replacement")
				}
				require.LessOrEqual(t, float64(c.HeartbeatsSent), 9*(c.Seconds+1), "process %d: heartbeats to its neighbours alone", p.Rank)
			}
			require.Contains(t, out.String(), "processes:      peak memory")
		})
	}
	hello := programs.Build(t, "../../examples/hello", "hello")
	t.Run("hello on 16 processes: no process links to every other", func(t *testing.T) {
		// The runtime's own collectives (the greeters' creation, the
		// reduction, quiescence) go along the spanning trees: process 0
		// links to its neighbours in the process tree (ranks 1 to 8, the
		// PE tree's children among them) and no further; another, to its
		// neighbours in both trees.
		var out, errb bytes.Buffer
		js := filepath.Join(t.TempDir(), "summary.json")
		code := run([]string{"++n", "16", "++ppn", "1", "--watchdog", "60s", "--summary-json", js, hello, "32"}, &out, &errb)
		require.Equal(t, 0, code, errb.String())
		require.Equal(t, 32, strings.Count(out.String(), "says hello"))
		s := readSummary(t, js)
		require.Len(t, s.Layout.Processes, 16)
		for _, p := range s.Layout.Processes {
			bound := 9 + 5 // a parent and 8 children; a parent and 4 children
			if p.Rank == 0 {
				bound = 8
			}
			require.LessOrEqual(t, p.Cost.DataLinks, bound, "process %d", p.Rank)
			// the start (the list of the job's processes and the start
			// itself, each passed down the tree) and the end go to the
			// children alone: process 0 sent the list and the start to
			// all 15 (30 messages with the end's)
			require.LessOrEqual(t, p.Cost.ControlSent-p.Cost.HeartbeatsSent, uint64(3*8+1), "process %d: control messages besides heartbeats", p.Rank)
		}
	})
	jacobi := programs.Build(t, "../../examples/jacobi2d", "jacobi2d")
	t.Run("checkpoints on 16 processes: process 0 links to its tree neighbours and its buddy", func(t *testing.T) {
		// A checkpoint's take and commit go down the tree over every
		// PE, and the PEs' stored copies and commits are merged up it:
		// process 0 links to its children (ranks 1 to 8) and to the
		// process whose copy it holds (15); the blocks' neighbours (1 and
		// 4) are among them. Sent flat, it linked to all 15.
		var out, errb bytes.Buffer
		js := filepath.Join(t.TempDir(), "summary.json")
		code := run([]string{"++n", "16", "++ppn", "1", "--watchdog", "60s", "--summary-json", js, jacobi, "-blocks", "4", "-size", "8", "-iters", "40", "--ckpt-period", "10"}, &out, &errb)
		require.Equal(t, 0, code, errb.String())
		require.Contains(t, out.String(), "checkpoints:    3,")
		s := readSummary(t, js)
		require.Len(t, s.Layout.Processes, 16)
		require.Equal(t, 0, s.Layout.Processes[0].Rank)
		require.LessOrEqual(t, s.Layout.Processes[0].Cost.DataLinks, 9)
	})
	if os.Getenv("FT_LONG") == "" {
		return
	}
	for _, n := range []int{64, 128, 256} {
		t.Run(fmt.Sprintf("hello on %d processes", n), func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			code := run([]string{"++n", fmt.Sprint(n), "++ppn", "1", "--watchdog", "60s", hello, fmt.Sprint(2 * n)}, &out, &errb)
			took := time.Since(start)
			errs := errb.String()
			require.Equal(t, 0, code, errs)
			require.Equal(t, 2*n, strings.Count(out.String(), "says hello"))
			require.NotContains(t, errs, "\tWARN\t", "a job of %d processes warned", n)
			t.Logf("hello on %d processes: %v", n, took)
		})
	}
}

// Jobs of many PEs in one process: hello on 16,384 PEs (the most a job
// runs), a greeter each, and LeanMD on 4,096 (most of them idle: 8 cells)
// end as they should. (Plain tier only: the race detector allows 8,128
// goroutines.)
func TestManyPEs(t *testing.T) {
	plainTierOnly(t)
	hello := programs.Build(t, "../../examples/hello", "hello")
	var out, errb bytes.Buffer
	code := run([]string{"+p16384", "--watchdog", "60s", hello, "16384"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "hello: 16384 greeters on 16384 PEs")
	require.Equal(t, 16384, strings.Count(out.String(), "says hello"))
	leanmd := buildLeanMD(t)
	params := []string{"2", "2", "2", "11"}
	want := failureFree(t, leanmd, params)
	out.Reset()
	errb.Reset()
	code = run(append([]string{"+p4096", "--watchdog", "60s", leanmd}, params...), &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Equal(t, want, energies(t, out.String()))
}
