package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/loadbalance"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// writeDump writes a stats file of 8 PEs with two chares each: chares on
// PEs of one half (0-3, 4-7) talk heavily with each other, and a little
// across.
func writeDump(t *testing.T, records int) string {
	t.Helper()
	st := loadbalance.Stats{Step: 1, PEs: make([]loadbalance.PEStats, 8)}
	for i := 0; i < 16; i++ {
		st.Objs = append(st.Objs, loadbalance.Obj{Index: pe.Idx(i), PE: int32(i / 2), Wall: 1, Migratable: true})
	}
	for a := 0; a < 16; a++ {
		for b := 0; b < 16; b++ {
			if a == b {
				continue
			}
			bytes := uint64(1)
			if a/8 == b/8 {
				bytes = 1000
			}
			st.Comm = append(st.Comm, loadbalance.Comm{From: int32(a), To: int32(b), Msgs: 1, Bytes: bytes})
		}
	}
	path := filepath.Join(t.TempDir(), "lb.dump")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := loadbalance.NewDumpWriter(f)
	for i := 0; i < records; i++ {
		st.Step = i + 1
		require.NoError(t, w.Write(&loadbalance.Record{Coll: "test.Obj", Stats: st, Strategy: "greedy"}))
	}
	require.NoError(t, f.Close())
	return path
}

func TestTeamsFromADump(t *testing.T) {
	path := writeDump(t, 2)
	var out strings.Builder
	require.NoError(t, run([]string{"--stats", path, "--teams", "2"}, &out))
	s := out.String()
	require.Contains(t, s, "8 PEs")
	require.Contains(t, s, "every record added up")
	require.Contains(t, s, "| Algorithm 1 (K*) | 2 | 4 |")
	require.Contains(t, s, "| blocks of 2 | 4 | 2 |")
	require.Contains(t, s, "| one team: coordinated checkpointing | 1 | 8 | 0.0% | 100.0% | 12.40% |")
	require.Contains(t, s, "| one PE a team: full logging | 8 | 1 | 100.0% | 12.5% | 24.55% |")
	require.Contains(t, s, "0: PEs 0-3")
	require.Contains(t, s, "1: PEs 4-7")

	out.Reset()
	require.NoError(t, run([]string{"--stats", path, "--record", "2"}, &out))
	require.Contains(t, out.String(), "record 2, step 2")
}

func TestTeamsBadInput(t *testing.T) {
	path := writeDump(t, 1)
	junk := filepath.Join(t.TempDir(), "junk")
	require.NoError(t, os.WriteFile(junk, []byte("not a dump at all"), 0o644))
	cases := []struct {
		args    []string
		wantErr string
	}{
		{nil, "--stats FILE is required"},
		{[]string{"--stats", junk}, "junk: offset 0: not a stats file"},
		{[]string{"--stats", filepath.Join(t.TempDir(), "missing")}, "no such file"},
		{[]string{"--stats", path, "--record", "3"}, "--record 3: " + path + " holds records 1 to 1"},
		{[]string{"--stats", path, "--alpha", "0", "--beta", "0"}, "not both 0"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
	}
	for _, c := range cases {
		var out strings.Builder
		require.ErrorContains(t, run(c.args, &out), c.wantErr, c.args)
	}
}

// --help prints the usage and exits 0; a bad flag exits 2 with one line.
func TestTeamsHelpExitsZero(t *testing.T) {
	var out, errw strings.Builder
	require.Equal(t, 0, exitCode([]string{"--help"}, &out, &errw))
	require.Contains(t, out.String(), "-stats string")
	require.Empty(t, errw.String())
	out.Reset()
	require.Equal(t, 2, exitCode([]string{"--bogus"}, &out, &errw))
	require.Equal(t, "teams: flag provided but not defined: -bogus\n", errw.String())
}

func TestRanges(t *testing.T) {
	require.Equal(t, "0-3,8,10-11", ranges([]int{0, 1, 2, 3, 8, 10, 11}))
	require.Equal(t, "5", ranges([]int{5}))
}
