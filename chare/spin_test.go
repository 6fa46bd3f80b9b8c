package chare

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// By default PEs spin only where each has a core, and not in a test
// binary (this one: the default gives none here).
func TestSpinFlagAndDefault(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	cases := []struct {
		args    []string
		local   int // PEs of the process
		onHost  int // PEs of the job on its host
		polls   int // what the PE layer is given
		wantErr string
	}{
		{args: nil, local: 1, onHost: 1, polls: 0}, // a test binary
		{args: []string{"--spin", "auto"}, local: 1, onHost: 1, polls: 0},
		{args: []string{"--spin", "0"}, local: 1, onHost: 1, polls: 0},     // never
		{args: []string{"--spin", "300"}, local: 1, onHost: 1, polls: 300}, // a cap of the user's
		{args: []string{"--spin", "300"}, local: procs + 1, onHost: procs + 1, polls: 300},
		{args: []string{"--spin", "-1"}, wantErr: "flag --spin"},
		{args: []string{"--spin", "lots"}, wantErr: "flag --spin"},
	}
	for _, c := range cases {
		cfg, err := ParseFlags(c.args)
		if c.wantErr != "" {
			require.ErrorContains(t, err, c.wantErr, c.args)
			continue
		}
		require.NoError(t, err, c.args)
		require.Equal(t, c.polls, spinPolls(cfg.SpinPolls, c.local, c.onHost, false), c.args)
	}
}

// Where a program that is not a test spins by default: PEs with a core
// each.
func TestSpinsWhereEveryPEHasACore(t *testing.T) {
	procs, cpus := runtime.GOMAXPROCS(0), runtime.NumCPU()
	cases := []struct {
		local, onHost int
		spins         bool
	}{
		{local: procs, onHost: procs, spins: procs <= cpus},
		{local: procs + 1, onHost: procs + 1, spins: false}, // PEs share the process's threads
		{local: 1, onHost: cpus + 1, spins: false},          // other processes' PEs share the host
	}
	for _, c := range cases {
		require.Equal(t, c.spins, spinsByDefault(c.local, c.onHost, false), c)
	}
	// in a job of several processes a P is left for the links' readers
	require.Equal(t, procs >= 2 && procs-1 <= cpus, spinsByDefault(procs-1, procs-1, true))
	require.False(t, spinsByDefault(procs, procs, true))
}

// Processes that share a host take their share of its cores; a process
// alone on its host keeps what Go gave it.
func TestProcessesShareTheirHostsCores(t *testing.T) {
	for _, c := range []struct {
		local, onHost, cpus, procs, want int
	}{
		{1, 1, 2, 2, 0},    // one process
		{2, 2, 2, 2, 0},    // one process of 2 PEs
		{1, 2, 2, 2, 1},    // 2 processes of 1 PE on 2 cores: a core each
		{2, 4, 2, 2, 1},    // 2 of 2 PEs on 2 cores
		{1, 4, 2, 2, 1},    // 4 of 1 PE on 2 cores: at least one
		{8, 16, 16, 16, 8}, // 2 of 8 PEs on 16 cores: a core each
		{1, 2, 16, 16, 8},  // 2 of 1 PE on 16 cores: half the cores each
		{8, 32, 16, 16, 4}, // 4 of 8 PEs on 16 cores
		{4, 16, 8, 3, 2},   // 4 of 4 PEs on 8 cores
		{4, 16, 8, 2, 0},   // already no more than its share
	} {
		require.Equal(t, c.want, hostShare(c.local, c.onHost, c.cpus, c.procs), "%+v", c)
	}
}

// A process of a job of several processes collects less often where it
// shares its host's cores, with a soft limit at three quarters of its
// host's share of the memory available; what the environment sets is
// the user's.
func TestCollectorOfAJobOfSeveralProcesses(t *testing.T) {
	for _, c := range []struct {
		gogc, limit string
		procs, cpus int
		avail       uint64
		percent     int
		wantLimit   int64
	}{
		{"", "", 2, 2, 8 << 30, ownCoreGCPercent, 3 << 30}, // a core each
		{"", "", 16, 2, 64 << 30, jobGCPercent, 3 << 30},   // sharing the cores
		{"", "", 1, 4, 4 << 30, ownCoreGCPercent, 3 << 30},
		{"", "", 3, 2, 0, jobGCPercent, 0}, // memory unknown: no limit
		{"", "2GiB", 2, 2, 8 << 30, ownCoreGCPercent, 0},
		{"100", "", 2, 2, 8 << 30, 0, 0},
		{"off", "", 16, 2, 8 << 30, 0, 0},
	} {
		p, l := collectorFor(c.gogc, c.limit, c.procs, c.cpus, c.avail)
		require.Equal(t, c.percent, p, "%+v", c)
		require.Equal(t, c.wantLimit, l, "%+v", c)
	}
}
