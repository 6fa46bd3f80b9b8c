package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// go test -json's events become a line per package, the failures' output,
// and the packages' and top-level tests' times; a subtest's output goes
// with its failure, and lines that are not events (a build error) pass
// through.
func TestReadEvents(t *testing.T) {
	in := `{"Action":"run","Package":"m/a","Test":"TestX"}
{"Action":"output","Package":"m/a","Test":"TestX","Output":"=== RUN   TestX\n"}
{"Action":"output","Package":"m/a","Test":"TestX/sub","Output":"    x_test.go:9: boom\n"}
{"Action":"fail","Package":"m/a","Test":"TestX/sub","Elapsed":1.5}
{"Action":"fail","Package":"m/a","Test":"TestX","Elapsed":2}
{"Action":"pass","Package":"m/a","Test":"TestY","Elapsed":0.25}
{"Action":"output","Package":"m/a","Output":"FAIL\n"}
{"Action":"fail","Package":"m/a","Elapsed":3.5}
# m/b [m/b.test]
{"ImportPath":"m/e [m/e.test]","Action":"build-output","Output":"e_test.go:3:1: syntax error\n"}
{"ImportPath":"m/e [m/e.test]","Action":"build-fail"}
{"Action":"pass","Package":"m/c","Test":"TestZ","Elapsed":7}
{"Action":"pass","Package":"m/c","Elapsed":7.25}
{"Action":"skip","Package":"m/d","Elapsed":0}
`
	var out bytes.Buffer
	pkgs, tests, ok, err := readEvents(strings.NewReader(in), "race", &out, false)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, []pkgResult{{"race", "m/a", 3500 * time.Millisecond, "fail"}, {"race", "m/c", 7250 * time.Millisecond, "pass"}, {"race", "m/d", 0, "skip"}}, pkgs)
	require.Equal(t, []testResult{{"race", "m/a", "TestX", 2 * time.Second, "fail"}, {"race", "m/a", "TestY", 250 * time.Millisecond, "pass"}, {"race", "m/c", "TestZ", 7 * time.Second, "pass"}}, tests)
	s := out.String()
	require.Contains(t, s, "x_test.go:9: boom")
	require.Contains(t, s, "# m/b [m/b.test]")
	require.Contains(t, s, "e_test.go:3:1: syntax error")
	require.Contains(t, s, "FAIL  m/a")
	require.Contains(t, s, "ok    m/c")
	require.NotContains(t, s, "m/d", "a package without tests says nothing")

	var r bytes.Buffer
	spans := []groupSpan{{[]tier{{name: "race"}}, 8 * time.Second}, {[]tier{{name: "chaos"}, {name: "bench"}}, 4 * time.Second}}
	report(&r, pkgs, tests, spans, 12*time.Second, "fast")
	require.Regexp(t, `(?s)7\.2s  race +m/c +pass.*3\.5s  race +m/a +fail.*the ten slowest tests:\n +7\.0s  race +m/c TestZ\n +2\.0s  race +m/a TestX`, r.String())
	require.Contains(t, r.String(), "all tiers: 12s (race 8s, chaos+bench 4s), the host in its fast mode\n")
}

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--long", "-1"}, "testall: flag --long: -1: want 0 or more"},
		{[]string{"--tier", "nosuch"}, `testall: flag --tier: no tier "nosuch"`},
		{[]string{"extra"}, `testall: unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(c.args, &out, &errb), c.args)
		require.Contains(t, errb.String(), c.want)
	}
}

// Every package with tests is in a tier: a package added and left out
// would never run in CI.
func TestEveryPackageWithTestsIsInATier(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err)
	modCmd := exec.Command("go", "list", "-m")
	modCmd.Dir = "../.."
	mod, err := modCmd.Output()
	require.NoError(t, err)
	root := strings.TrimSpace(string(mod))
	for _, pkg := range strings.Fields(string(out)) {
		rel := "." + strings.TrimPrefix(pkg, root)
		found := false
		for _, tr := range tiers() {
			for _, p := range tr.pkgs {
				if p == rel || (strings.HasSuffix(p, "/...") && (rel == strings.TrimSuffix(p, "/...") || strings.HasPrefix(rel, strings.TrimSuffix(p, "...")))) {
					found = true
				}
			}
		}
		require.True(t, found, "%s has tests but is in no tier of cmd/testall", rel)
	}
}

// A tier alongside the one before it runs with it; one chosen alone
// (--tier) runs alone.
func TestGroups(t *testing.T) {
	names := func(gs [][]tier) [][]string {
		var out [][]string
		for _, g := range gs {
			var n []string
			for _, t := range g {
				n = append(n, t.name)
			}
			out = append(out, n)
		}
		return out
	}
	ts := []tier{{name: "a"}, {name: "b", alongside: true}, {name: "c"}, {name: "d", alongside: true}, {name: "e", alongside: true}}
	require.Equal(t, [][]string{{"a", "b"}, {"c", "d", "e"}}, names(groups(ts)))
	require.Equal(t, [][]string{{"d"}}, names(groups(ts[3:4])))
	require.Equal(t, [][]string{{"race"}, {"plain", "chaos"}, {"chaos-md", "purego", "bench"}}, names(groups(tiers())))
}

// A group's tiers run at the same time; each tier's lines come whole, in
// the group's order, its packages' lines with them.
func TestRunGroup(t *testing.T) {
	group := []tier{{name: "one", pkgs: []string{"../../internal/stat"}}, {name: "two", pkgs: []string{"../../internal/atomicfile"}, alongside: true}}
	var out bytes.Buffer
	rs := runGroup(group, 0, nil, &out, false)
	require.Len(t, rs, 2)
	for i, r := range rs {
		require.NoError(t, r.err)
		require.True(t, r.ok)
		require.Equal(t, group[i].name, r.tier)
		require.Len(t, r.pkgs, 1)
	}
	require.Regexp(t, `(?s)^== one: .*\nok +github.com/charmgo/charmgo/internal/stat +[0-9.]+s\n== two: .*\[alongside the tier before\]\nok +github.com/charmgo/charmgo/internal/atomicfile `, out.String())
}

// The suite's environment (the temporary directory testall chose) reaches
// every tier's go test: one pointed at a directory that is not there
// cannot build.
func TestRunGroupPassesTheSuitesEnvironment(t *testing.T) {
	group := []tier{{name: "one", pkgs: []string{"../../internal/stat"}}}
	var out bytes.Buffer
	rs := runGroup(group, 0, []string{"TMPDIR=" + t.TempDir() + "/absent"}, &out, false)
	require.Len(t, rs, 1)
	require.False(t, rs[0].ok, out.String())
	require.Contains(t, out.String(), "absent")
}

// A file over the limit that git tracks is named with its size; one git
// does not track, or one removed from the work tree, is not.
func TestOversizedTracked(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.email=t@t", "-c", "user.name=t"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	git("init", "-q")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "small.go"), []byte("package x\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prog"), make([]byte, maxTrackedBytes+1), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gone"), make([]byte, 2*maxTrackedBytes), 0o644))
	git("add", "small.go", "prog", "gone")
	require.NoError(t, os.Remove(filepath.Join(dir, "gone")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "untracked"), make([]byte, 2*maxTrackedBytes), 0o644))
	big, err := oversizedTracked(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"prog (1.0 MB)"}, big)

	_, err = oversizedTracked(t.TempDir())
	require.ErrorIs(t, err, errNotACheckout)
}

// The repository itself tracks no file over the limit (a 24.9 MB binary,
// examples/imbalance built at the root, once did).
func TestTheRepositoryTracksNoLargeFile(t *testing.T) {
	big, err := oversizedTracked("../..")
	if errors.Is(err, errNotACheckout) {
		t.Skip("not a git checkout")
	}
	require.NoError(t, err)
	require.Empty(t, big)
}

// The suite says first which mode the host is in, from its cross-core
// round trip.
func TestHostFloor(t *testing.T) {
	line, mode := hostFloor()
	if runtime.GOMAXPROCS(0) < 2 {
		require.Equal(t, "one-core", mode)
		return
	}
	require.Contains(t, []string{"fast", "slow"}, mode)
	require.Regexp(t, `^the host's cross-core round trip \(floor-ns\): \d+ / \d+ / \d+ ns, min / median / max of 5: its (fast|slow) mode$`, line)
	require.True(t, strings.HasSuffix(line, mode+" mode"))
}

// The README's way to the runnable examples works: `go test -list
// '^Example' ./chare` lists them (the loop it names among them), where
// the command it gave before, go doc, printed none.
func TestTheREADMEsExamplesCommand(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), "`go test -list '^Example' ./chare`")
	require.Contains(t, string(readme), "go test\n-run Example_iterateUntilConverged -v ./chare")
	cmd := exec.Command("go", "test", "-list", "^Example", "./chare")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"Example_iterateUntilConverged", "Example_atSyncWithABalancer", "Example_checkpointAndRestart", "Example_failureUnderCamel"} {
		require.Contains(t, string(out), want+"\n")
	}
	require.NotContains(t, string(out), "TestExamplesAcrossPEsAndWireCheck", "only the examples")
}
