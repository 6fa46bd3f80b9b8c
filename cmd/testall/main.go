// Command testall runs the project's tests, as the README says and CI
// does: in tiers, each a `go test -json` over some packages, then a table
// of the time each package took and the slowest tests.
//
//	go run ./cmd/testall              # the suite (what CI runs)
//	go run ./cmd/testall --long 10    # with FT_LONG=10: the exhaustive sweeps
//
// It runs the runtime's packages under the race detector (their tests
// run PEs, processes and networks at once; LeanMD's the cases that
// exercise recovery, migration and checkpoints), the state machines, the
// strategies, the deterministic simulations and every LeanMD test without
// it (the detector finds nothing there and slows them tenfold), and the
// chare package, the examples and LeanMD's determinism tests again under
// a chaos transport. CI (.ci/run) holds every package to 3 minutes in one
// tier, from the table this prints: the suite must fit a 2-core machine
// under go test's own 10-minute limit even when the machine is busy.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/charmgo/charmgo/internal/crosscore"
	"github.com/charmgo/charmgo/internal/syncio"
)

// tier is one `go test` run of the suite.
type tier struct {
	name string
	race bool
	tags string   // -tags, if any
	env  []string // added to the environment
	run  string   // -run, if any
	// bench: -bench, run briefly (-benchtime=100x) so the benchmarks
	// cannot rot
	bench string
	pkgs  []string
	// alongside: it runs at the same time as the tier before it (short
	// tiers whose longest package leaves the other core idle: on CI's
	// two cores the suite is that much shorter); its lines come after
	// that tier's
	alongside bool
}

// tiers is the suite. Packages are relative to the module's root.
func tiers() []tier {
	return []tier{
		// the runtime: PEs, processes and networks run at once, and the
		// detector looks at every access (LeanMD's package runs its
		// recovery, migration and checkpoint cases, charmrun's the
		// launcher in the test binary and one job of race-built
		// processes, chare's tests of several processes one layout; the
		// plain and chaos tiers all)
		// (in each tier the longest packages first: go test starts them
		// in this order, two at a time, and the tier lasts as long as its
		// longest package and whatever started after it)
		{name: "race", race: true, pkgs: []string{"./cmd/charmrun", "./apps/leanmd/md", "./chare", "./pe/...", "./examples/...", "./apps/openatom/...", "./bench"}},
		// state machines, strategies, the deterministic simulator (one
		// goroutine), LeanMD's every case and sweep, charmrun's every
		// job (its processes are built without the detector): no detector
		{name: "plain", pkgs: []string{"./apps/leanmd/md", "./ftsim", "./cmd/charmrun", "./apps/openatom/...", "./internal/...", "./manager", "./recovery", "./ftlayer/...", "./loadbalance/...", "./cmd/lbreplay", "./cmd/teams", "./cmd/membermodel", "./cmd/testall", "./cmd/charmscale", "./bench/cmd/..."}},
		// messages between PEs held back and reordered across channels,
		// as between processes
		// (beside the plain tier: the chaos transport's delays are most
		// of its time, and a core the plain tier's two packages at a time
		// leave idle runs it)
		{name: "chaos", env: []string{"CHARMGO_TRANSPORT_CHAOS=1"}, pkgs: []string{"./chare", "./examples/..."}, alongside: true},
		{name: "chaos-md", env: []string{"CHARMGO_TRANSPORT_CHAOS=1"}, run: "Deterministic|LeavesTheResult", pkgs: []string{"./apps/leanmd/md"}},
		// LeanMD's scalar force kernel, which runs where the CPU has no
		// AVX-512 (the tiers above run the vector one where it has):
		// the golden energies through it
		{name: "purego", tags: "purego", run: "Golden|KernelAgainst", pkgs: []string{"./apps/leanmd/md"}, alongside: true},
		// every benchmark of the fast path and its baselines, 100
		// iterations each (BenchmarkLeanMD runs whole simulations: the
		// tests above run LeanMD)
		{name: "bench", run: "^$", bench: "^Benchmark(PingPong|Stream|LocalSend|Reduce|Multicast|Procs|LeanMDKernel|PE|Frame|Registry|Spin|PayloadSize)", pkgs: []string{"./bench", "./pe"}, alongside: true},
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// pkgResult is one package's outcome in one tier.
type pkgResult struct {
	tier, pkg string
	elapsed   time.Duration
	action    string // pass, fail, skip
}

// testResult is one top-level test's outcome.
type testResult struct {
	tier, pkg, test string
	elapsed         time.Duration
	action          string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	long := fs.Int("long", 0, "FT_LONG: random failure schedules per protocol, and the exhaustive sweeps (0: the default tier)")
	only := fs.String("tier", "", "run only this tier (race, plain, chaos, chaos-md, purego, bench)")
	verbose := fs.Bool("v", false, "print every test's output, not only failures'")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "testall: unexpected argument %q (flags: --long N, --tier NAME, -v)\n", fs.Arg(0))
		return 2
	}
	if *long < 0 {
		fmt.Fprintf(stderr, "testall: flag --long: %d: want 0 or more\n", *long)
		return 2
	}
	start := time.Now()
	// a binary or a data set committed by mistake fails the suite before
	// any test runs: CI runs this command
	switch big, err := oversizedTracked("."); {
	case errors.Is(err, errNotACheckout):
		fmt.Fprintf(stdout, "testall: not a git checkout: the tracked files' sizes are not checked\n")
	case err != nil:
		fmt.Fprintf(stderr, "testall: checking the tracked files' sizes: %v\n", err)
		return 1
	case len(big) > 0:
		fmt.Fprintf(stderr, "testall: files over %d bytes are tracked (binaries and data do not belong in the repository: git rm --cached them): %s\n", maxTrackedBytes, strings.Join(big, ", "))
		return 1
	}
	// the tests' temporary files in memory where the user left TMPDIR
	// unset (memoryTempDir)
	var env []string
	if os.Getenv("TMPDIR") == "" {
		if dir := memoryTempDir(); dir != "" {
			defer os.RemoveAll(dir)
			env = append(env, "TMPDIR="+dir)
			fmt.Fprintf(stdout, "testall: temporary files in %s (tmpfs)\n", dir)
		}
	}
	var pkgs []pkgResult
	var tests []testResult
	failed := false
	var chosen []tier
	for _, t := range tiers() {
		if *only == "" || t.name == *only {
			chosen = append(chosen, t)
		}
	}
	if len(chosen) == 0 {
		fmt.Fprintf(stderr, "testall: flag --tier: no tier %q (race, plain, chaos, chaos-md, purego, bench)\n", *only)
		return 2
	}
	// which mode the host is in: the suite's time depends on it
	floor, mode := hostFloor()
	fmt.Fprintf(stdout, "testall: %s\n", floor)
	var spans []groupSpan
	for _, group := range groups(chosen) {
		began := time.Now()
		results := runGroup(group, *long, env, stdout, *verbose)
		spans = append(spans, groupSpan{group, time.Since(began)})
		for _, r := range results {
			if r.err != nil {
				fmt.Fprintf(stderr, "testall: %s: %v\n", r.tier, r.err)
				return 1
			}
			pkgs, tests = append(pkgs, r.pkgs...), append(tests, r.tests...)
			failed = failed || !r.ok
		}
	}
	report(stdout, pkgs, tests, spans, time.Since(start), mode)
	if failed {
		fmt.Fprintf(stderr, "testall: FAIL (see the failures above)\n")
		return 1
	}
	fmt.Fprintf(stdout, "testall: ok in %s\n", time.Since(start).Round(time.Second))
	return 0
}

// groups splits the tiers into those that run at the same time: a tier
// and the tiers alongside it.
func groups(ts []tier) [][]tier {
	var out [][]tier
	for _, t := range ts {
		if t.alongside && len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], t)
		} else {
			out = append(out, []tier{t})
		}
	}
	return out
}

// tierResult is what one tier's go test gave.
type tierResult struct {
	tier  string
	pkgs  []pkgResult
	tests []testResult
	ok    bool
	err   error
}

// runGroup runs the tiers of a group at the same time, with env added to
// each one's environment. A tier alone prints as it goes; in a group of
// several, each tier's lines wait and come in the group's order once all
// ended.
func runGroup(group []tier, long int, env []string, out io.Writer, verbose bool) []tierResult {
	results := make([]tierResult, len(group))
	if len(group) == 1 {
		results[0] = runTier(group[0], long, env, out, verbose)
		return results
	}
	// (go test's standard error is copied in by exec as its events are
	// read: a syncio.Writer, not the buffer itself)
	bufs := make([]bytes.Buffer, len(group))
	var wg sync.WaitGroup
	for i, t := range group {
		wg.Go(func() { results[i] = runTier(t, long, env, &syncio.Writer{W: &bufs[i]}, verbose) })
	}
	wg.Wait()
	for i := range bufs {
		out.Write(bufs[i].Bytes())
	}
	return results
}

// runTier runs one tier's go test, with suiteEnv and the tier's own
// added to the environment, printing its lines to out.
func runTier(t tier, long int, suiteEnv []string, out io.Writer, verbose bool) tierResult {
	env := append(append(os.Environ(), suiteEnv...), t.env...)
	if long > 0 {
		env = append(env, "FT_LONG="+strconv.Itoa(long))
	}
	args := []string{"test", "-json", "-count=1"}
	if t.race {
		args = append(args, "-race")
	}
	if t.tags != "" {
		args = append(args, "-tags", t.tags)
	}
	if t.run != "" {
		args = append(args, "-run", t.run)
	}
	if t.bench != "" {
		args = append(args, "-bench", t.bench, "-benchtime=100x")
	}
	if long > 0 {
		args = append(args, "-timeout", "0") // the long tier may take hours
	}
	args = append(args, t.pkgs...)
	alongside := ""
	if t.alongside {
		alongside = " [alongside the tier before]"
	}
	fmt.Fprintf(out, "== %s: go %s%s%s\n", t.name, strings.Join(args, " "), envNote(t.env, long), alongside)
	p, ts, ok, err := goTest(args, env, t.name, out, verbose)
	return tierResult{tier: t.name, pkgs: p, tests: ts, ok: ok, err: err}
}

func envNote(env []string, long int) string {
	if long > 0 {
		env = append(slices.Clone(env), "FT_LONG="+strconv.Itoa(long))
	}
	if len(env) == 0 {
		return ""
	}
	return " (" + strings.Join(env, " ") + ")"
}

// goTest runs go with args and reads its -json events (readEvents).
func goTest(args, env []string, tierName string, out io.Writer, verbose bool) ([]pkgResult, []testResult, bool, error) {
	cmd := exec.Command("go", args...)
	cmd.Env = env
	cmd.Stderr = out // build errors
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, false, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, false, err
	}
	pkgs, tests, ok, err := readEvents(pipe, tierName, out, verbose)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return pkgs, tests, false, err
	}
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return pkgs, tests, false, err
		}
		ok = false
	}
	return pkgs, tests, ok, nil
}

// readEvents reads `go test -json` events from r: it prints a line per
// package as go test does, and a failed test's or package's output (every
// output with verbose); it returns the packages' and top-level tests'
// results and whether all passed.
func readEvents(r io.Reader, tierName string, out io.Writer, verbose bool) ([]pkgResult, []testResult, bool, error) {
	var pkgs []pkgResult
	var tests []testResult
	outputs := map[[2]string][]string{} // package, test -> its output
	ok := true
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, sc.Text()) // not an event: pass it on
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "build-output": // the compiler's, for a package that does not build
			fmt.Fprint(out, e.Output)
		case "build-fail":
			ok = false
		case "output":
			if verbose {
				fmt.Fprint(out, e.Output)
			}
			outputs[key] = append(outputs[key], e.Output)
		case "pass", "fail", "skip":
			d := time.Duration(e.Elapsed * float64(time.Second))
			if e.Action == "fail" {
				ok = false
				if !verbose {
					fmt.Fprint(out, strings.Join(outputs[key], ""))
				}
			}
			delete(outputs, key)
			switch {
			case e.Test == "":
				pkgs = append(pkgs, pkgResult{tier: tierName, pkg: e.Package, elapsed: d, action: e.Action})
				if e.Action != "skip" || d > 0 {
					fmt.Fprintf(out, "%-4s  %-50s %8.1fs\n", map[string]string{"pass": "ok", "fail": "FAIL", "skip": "--"}[e.Action], e.Package, d.Seconds())
				}
			case !strings.Contains(e.Test, "/"):
				tests = append(tests, testResult{tier: tierName, pkg: e.Package, test: e.Test, elapsed: d, action: e.Action})
			}
		}
	}
	return pkgs, tests, ok, sc.Err()
}

// groupSpan is how long a group of tiers took, from the start of its go
// tests to the end of the last: the suite's time is theirs, summed.
type groupSpan struct {
	tiers []tier
	took  time.Duration
}

// report prints every package's time in every tier, slowest first, the
// ten slowest tests, and each group's time.
func report(w io.Writer, pkgs []pkgResult, tests []testResult, spans []groupSpan, total time.Duration, mode string) {
	slices.SortFunc(pkgs, func(a, b pkgResult) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintf(w, "\ntime per package and tier (go test -json), slowest first:\n")
	for _, p := range pkgs {
		if p.action == "skip" && p.elapsed == 0 {
			continue // no test files
		}
		fmt.Fprintf(w, "  %8.1fs  %-8s %-44s %s\n", p.elapsed.Seconds(), p.tier, strings.TrimPrefix(p.pkg, "github.com/charmgo/charmgo/"), p.action)
	}
	slices.SortFunc(tests, func(a, b testResult) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintf(w, "the ten slowest tests:\n")
	for _, t := range tests[:min(10, len(tests))] {
		fmt.Fprintf(w, "  %8.1fs  %-8s %s %s\n", t.elapsed.Seconds(), t.tier, strings.TrimPrefix(t.pkg, "github.com/charmgo/charmgo/"), t.test)
	}
	var each []string
	for _, g := range spans {
		var names []string
		for _, t := range g.tiers {
			names = append(names, t.name)
		}
		each = append(each, fmt.Sprintf("%s %s", strings.Join(names, "+"), g.took.Round(time.Second)))
	}
	fmt.Fprintf(w, "all tiers: %s (%s), the host in its %s mode\n", total.Round(time.Second), strings.Join(each, ", "), mode)
}

// hostFloor measures the host's cross-core round trip (5 times 100,000
// round trips, about 0.1 s in the fast mode) and says which mode that
// is, in a line and a word: on this project's machines the suite takes about twice as long in
// the slow one, whose processes' messages cross cores slowly.
func hostFloor() (line, mode string) {
	if runtime.GOMAXPROCS(0) < 2 {
		return "one core: no cross-core round trip to measure", "one-core"
	}
	var ns []float64
	for range 5 {
		ns = append(ns, float64(crosscore.RoundTrips(100_000).Nanoseconds())/1e5)
	}
	slices.Sort(ns)
	mode = "fast"
	if ns[2] >= slowFloorNs {
		mode = "slow"
	}
	return fmt.Sprintf("the host's cross-core round trip (floor-ns): %.0f / %.0f / %.0f ns, min / median / max of 5: its %s mode", ns[0], ns[2], ns[4], mode), mode
}

// slowFloorNs divides the host's modes: about 110 ns in the fast one,
// 500–1,000 ns in the slow one (bench/README).
const slowFloorNs = 300
