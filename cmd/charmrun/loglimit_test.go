package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// A log limit across processes (MCML, issue 36): LeanMD on 4 processes
// of one PE under a limit a quarter of its log's peak, a process ended by
// SIGKILL late in an epoch and replaced. The PEs of other processes that
// stopped logging to it roll back with it (process 0 gathers every
// process's channels first) and the run ends with the one-process,
// failure-free energies, bitwise; among the kills, one rolls back PEs of
// other processes along with the lost one.
func TestALogLimitAcrossProcesses(t *testing.T) {
	plainTierOnly(t)
	bin := buildLeanMD(t)
	params := []string{"2", "2", "2", "41", "1000", "1000", "10"}
	leanmd := func(args ...string) (string, chare.Summary) {
		js := filepath.Join(t.TempDir(), "summary.json")
		var out, errb bytes.Buffer
		code := run(append(append(args, "--watchdog", "60s", "--summary-json", js, bin), params...), &out, &errb)
		require.Equal(t, 0, code, "%v: %s", args, errb.String())
		s := readSummary(t, js)
		return out.String(), s
	}
	out, free := leanmd("+p4", "--ft", "scmel")
	want := energies(t, out)
	var peak uint64
	for _, p := range free.PEs {
		peak = max(peak, p.LogPeakBytes)
	}
	limit := fmt.Sprint(peak / 4)
	across := 0
	for _, kill := range []string{"2@19", "3@29", "1@39"} {
		args := []string{"++n", "4", "++ppn", "1", "--ft", "scmel", "--log-limit", limit, "--kill", kill}
		out, s := leanmd(args...)
		require.Equal(t, want, energies(t, out), "%v", args)
		require.Equal(t, 1, s.FaultTolerance.Failures, "%v", args)
		rc := s.FaultTolerance.Recoveries
		require.Len(t, rc, 1, "%v", args)
		lost := int32(kill[0] - '0')
		require.Contains(t, rc[0].Set, lost, "%v", args)
		require.True(t, slices.IsSorted(rc[0].Set))
		if len(rc[0].Set) > 1 {
			across++
		}
		require.NotNil(t, s.FaultTolerance.LogLimit, "%v", args)
		require.Positive(t, s.FaultTolerance.LogLimit.ChannelsOff, "%v", args)
	}
	require.Positive(t, across, "a rollback set spanning processes")
}
