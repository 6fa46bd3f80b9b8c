package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmgo/charmgo/internal/testbuild"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/chare"
)

// The programs the tests run, built once for the test binary.
var programs *testbuild.Programs

func TestMain(m *testing.M) { os.Exit(testbuild.Run(m, &programs)) }

// build builds a package of this module once, named name.
func build(t *testing.T, pkg, name string) string { return programs.Build(t, pkg, name) }

// sweepArgs is a small LeanMD sweep, each run a fraction of a second and
// watched by the program's watchdog.
func sweepArgs(t *testing.T, out string, extra ...string) []string {
	args := []string{"--charmrun", build(t, "../charmrun", "charmrun"), "--out", out, "--timeout", "2m", "--flags", "--watchdog 60s"}
	return append(append(args, extra...), build(t, "../../apps/leanmd", "leanmd"), "2", "2", "2", "8")
}

func readCSV(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	return out
}

func summaries(t *testing.T, out string) map[string]chare.Summary {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(out, "runs", "*.json"))
	require.NoError(t, err)
	got := map[string]chare.Summary{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var s chare.Summary
		require.NoError(t, json.Unmarshal(b, &s), f)
		got[strings.TrimSuffix(filepath.Base(f), ".json")] = s
	}
	return got
}

// A two-point sweep: each run's summary kept, the table's figures are the
// runs' (ms/step, speed-up, efficiency), the report and plots written.
func TestATwoPointSweep(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(sweepArgs(t, out, "--pes", "1,2", "--reps", "1"), &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "2 runs (2 points × 1 repetitions); 0 finished before")
	require.Contains(t, stdout.String(), "1 left, about", "an estimate after the first run")

	runs := summaries(t, out)
	require.Len(t, runs, 2)
	byPEs := map[int]chare.Summary{}
	for _, s := range runs {
		require.Equal(t, 0, s.ExitCode)
		require.NotNil(t, s.Steps)
		byPEs[s.Layout.PEs] = s
	}
	rows := readCSV(t, filepath.Join(out, "table.csv"))
	require.Len(t, rows, 2)
	for _, r := range rows {
		pes, _ := strconv.Atoi(r["pes"])
		s := byPEs[pes]
		require.Equal(t, strconv.FormatFloat(s.Steps.MeanMs, 'f', 4, 64), r["ms_per_step_median"], "PEs %d: the run's mean ms/step", pes)
		require.Equal(t, r["ms_per_step_median"], r["ms_per_step_min"], "one run: no spread")
		require.Equal(t, "1", r["runs"])
		require.Equal(t, "0", r["failed"])
		require.Equal(t, "none", r["protocol"])
	}
	speedup := byPEs[1].Steps.MeanMs / byPEs[2].Steps.MeanMs
	require.Equal(t, strconv.FormatFloat(speedup, 'f', 3, 64), rows[1]["speedup"])
	require.Equal(t, strconv.FormatFloat(speedup/2, 'f', 3, 64), rows[1]["efficiency"])
	require.Equal(t, "1.000", rows[0]["speedup"])

	md, err := os.ReadFile(filepath.Join(out, "table.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), fmt.Sprintf("| 2 | 1 process | none | — | 1 | %.2f (%.2f–%.2f) | %.2f |", byPEs[2].Steps.MeanMs, byPEs[2].Steps.MeanMs, byPEs[2].Steps.MeanMs, speedup))
	for _, p := range []string{"ms_per_step", "speedup", "efficiency"} {
		st, err := os.Stat(filepath.Join(out, "plots", p+".png"))
		require.NoError(t, err, p)
		require.Positive(t, st.Size())
	}
	for _, p := range []string{"ft_overhead", "recovery"} {
		_, err := os.Stat(filepath.Join(out, "plots", p+".png"))
		require.True(t, os.IsNotExist(err), "%s: nothing to show, no plot", p)
	}
	report, err := os.ReadFile(filepath.Join(out, "scaling.md"))
	require.NoError(t, err)
	require.Contains(t, string(report), "![speedup](plots/speedup.png)")
	require.Contains(t, string(report), "Strong scaling: `leanmd 2 2 2 8`")

	// into a README, between its markers, with the plots' paths from there
	readme := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(readme, []byte("# x\n\n<!-- charmscale:begin -->\nold\n<!-- charmscale:end -->\n\nafter\n"), 0o644))
	stdout.Reset()
	code = run(append([]string{"--readme", readme}, sweepArgs(t, out, "--pes", "1,2", "--reps", "1")...), &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "2 finished before")
	b, err := os.ReadFile(readme)
	require.NoError(t, err)
	rel, _ := filepath.Rel(filepath.Dir(readme), filepath.Join(out, "plots", "speedup.png"))
	require.Contains(t, string(b), "("+filepath.ToSlash(rel)+")")
	require.NotContains(t, string(b), "old")
	require.True(t, strings.HasSuffix(string(b), "<!-- charmscale:end -->\n\nafter\n"))
}

// A sweep killed in the middle (SIGKILL: no chance to tidy up) resumes:
// the same command keeps every finished run's summary, untouched, and
// runs only the rest.
func TestAKilledSweepResumes(t *testing.T) {
	bin := build(t, ".", "charmscale")
	out := t.TempDir()
	args := sweepArgs(t, out, "--pes", "1,2", "--reps", "3")
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(pipe)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "[2/6]") {
			break
		}
	}
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()

	before := summaries(t, out)
	require.GreaterOrEqual(t, len(before), 2)
	require.Less(t, len(before), 6, "killed before the end")
	mtimes := map[string]time.Time{}
	for id := range before {
		st, err := os.Stat(filepath.Join(out, "runs", id+".json"))
		require.NoError(t, err)
		mtimes[id] = st.ModTime()
	}

	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), fmt.Sprintf("%d finished before", len(before)))
	require.Contains(t, stdout.String(), fmt.Sprintf("%d to run", 6-len(before)))
	require.Equal(t, 6-len(before), strings.Count(stdout.String(), "ms/step, "), "only the runs not finished ran")
	after := summaries(t, out)
	require.Len(t, after, 6)
	for id, s := range before {
		require.Equal(t, s, after[id], "%s kept", id)
		st, err := os.Stat(filepath.Join(out, "runs", id+".json"))
		require.NoError(t, err)
		require.Equal(t, mtimes[id], st.ModTime(), "%s not written again", id)
	}
	parts, _ := filepath.Glob(filepath.Join(out, "runs", "*.part"))
	require.Empty(t, parts, "the killed run's half-written summary is gone")
	rows := readCSV(t, filepath.Join(out, "table.csv"))
	require.Len(t, rows, 2)
	for _, r := range rows {
		require.Equal(t, "3", r["runs"])
	}
}

// Processes started by srun (here a stand-in that starts them on this
// machine with SLURM's variables), a protocol against none, a failure:
// the table has the overhead and the recovery, the plots theirs.
func TestASweepUnderSrunWithAFailure(t *testing.T) {
	srun := filepath.Join(t.TempDir(), "srun")
	require.NoError(t, os.WriteFile(srun, []byte(`#!/bin/sh
# a stand-in for srun -n N PROGRAM ARGS: N processes here, as SLURM starts them
[ "$1" = "-n" ] || { echo "srun stand-in: want -n N" >&2; exit 2; }
n=$2; shift 2
i=0; pids=""
while [ $i -lt $n ]; do SLURM_PROCID=$i SLURM_NTASKS=$n "$@" & pids="$pids $!"; i=$((i+1)); done
st=0; for p in $pids; do wait $p || st=$?; done
exit $st
`), 0o755))
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(sweepArgs(t, out, "--srun", "--srun-command", srun, "--listen", "127.0.0.1", "--pes", "2", "--ppn", "1",
		"--ft", "none,camel", "--reps", "1"), &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	for _, s := range summaries(t, out) {
		require.Len(t, s.Layout.Processes, 2, "two processes under srun")
	}
	rows := readCSV(t, filepath.Join(out, "table.csv"))
	require.Len(t, rows, 2)
	require.Equal(t, "camel", rows[1]["protocol"])
	require.NotEmpty(t, rows[1]["ft_overhead_pct"])

	// a failure: charmrun replaces the killed process (srun cannot)
	out = t.TempDir()
	code = run(sweepArgs(t, out, "--pes", "2", "--ppn", "1", "--ft", "camel", "--kill", "-,1@4", "--reps", "1"), &stdout, &stderr)
	require.Equal(t, 0, code, "%s%s", stdout.String(), stderr.String())
	rows = readCSV(t, filepath.Join(out, "table.csv"))
	require.Len(t, rows, 2)
	require.Equal(t, "1@4", rows[1]["kill"])
	require.NotEmpty(t, rows[1]["recovery_ms_median"])
	require.Equal(t, "1", rows[1]["pes_rolled_back"])
	_, err := os.Stat(filepath.Join(out, "plots", "recovery.png"))
	require.NoError(t, err)
}

// A sweep that cannot be run is refused by name, before any run.
func TestBadSweeps(t *testing.T) {
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, strconv.Itoa(len(body))+".sweep")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"prog"}, "no PE counts"},
		{[]string{"--pes", "1,2"}, "no program"},
		{[]string{"--pes", "1,x", "prog"}, `--pes 1,x: "x" is not a whole number`},
		{[]string{"--pes", "0", "prog"}, `"0" is not a whole number of at least 1`},
		{[]string{"--pes", "1", "--reps", "-1", "prog"}, "flag --reps -1"},
		{[]string{"--pes", "1", "--kill", "1at3", "prog"}, `flag --kill 1at3: "1at3" is not PE@STEP`},
		{[]string{"--pes", "1,2", "--args-at", "1:2 2 2 8", "prog"}, "gives no arguments for 2 PEs"},
		{[]string{"--pes", "1", "--srun", "--nodelist", "nodes", "prog"}, "--srun and --nodelist: give one"},
		{[]string{"--pes", "1", "--plots", "gif", "prog"}, "flag --plots gif"},
		{[]string{"--file", filepath.Join(dir, "none")}, "flag --file: open"},
		{[]string{"--file", file("program: x\nspeed: 3\n")}, ".sweep:2: speed: no such key"},
		{[]string{"--file", file("program: x\npes 1 2\n")}, `.sweep:2: "pes 1 2" is not "key: value"`},
		{[]string{"--file", file("program: x y\n")}, ".sweep:1: program: one program"},
		{[]string{"--file", file("program: x\npes: 1 two\n")}, `.sweep:2: pes 1 two: "two" is not`},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(c.args, &stdout, &stderr), "%v", c.args)
		require.Contains(t, stderr.String(), c.want, "%v", c.args)
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %s", stderr.String())
	}
	// a sweep file, and the command line over it
	sw, _, err := parse([]string{"--reps", "5", "--file", file("# a sweep\ntitle: t\nprogram: ./leanmd\nargs: 3 3 3 101\npes: 1 2 4  # counts\nppn: 0 2\nft: none camel\nkill: - 1@50\nreps: 2\nflags: +balancer GreedyLB\n")})
	require.NoError(t, err)
	require.Equal(t, &sweep{Title: "t", Program: "./leanmd", Args: []string{"3", "3", "3", "101"}, ArgsAt: map[int][]string{},
		PEs: []int{1, 2, 4}, PPN: []int{0, 2}, FT: []string{"none", "camel"}, Kills: []string{"-", "1@50"}, Reps: 5,
		Flags: []string{"+balancer", "GreedyLB"}, Listen: "127.0.0.1", Out: "charmscale-out"}, sw)
	runs, notes := sw.plan("charmrun", "/bin/leanmd", "srun")
	require.Equal(t, []string{"left out: kill 1@50 on 1 PEs (no such PE)", "left out: 1 PEs in processes of 2"}, notes)
	require.Len(t, runs, 5*(2+8+8)) // 1 PE: one layout, two protocols, no kill; 2 and 4 PEs: two layouts × two protocols × two kills
	require.Equal(t, []string{"charmrun", "+p4", "++ppn", "2", "--listen", "127.0.0.1", "--ft", "camel", "--progress-line", "off", "--kill", "1@50",
		"+balancer", "GreedyLB", "/bin/leanmd", "3", "3", "3", "101"}, runs[len(runs)/5-1].Argv)
}
