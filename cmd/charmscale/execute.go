package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// execute runs the sweep's runs that are not done yet, then writes the
// report from every run's summary. stop ends it between or during runs:
// the run under way is ended and left out, the finished ones stay.
func execute(sw *sweep, opt options, stop <-chan os.Signal, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "charmscale: %v\n", err)
		return 1
	}
	if err := os.MkdirAll(runsDir(sw.Out), 0o755); err != nil {
		return fail(fmt.Errorf("flag --out: %w", err))
	}
	if sw.Srun { // where process 0 of each run leaves its address
		if err := os.MkdirAll(filepath.Join(sw.Out, "rendezvous"), 0o755); err != nil {
			return fail(fmt.Errorf("flag --out: %w", err))
		}
	}
	program, err := resolveProgram(sw.Program, sw.Out, stderr)
	if err != nil {
		return fail(err)
	}
	charmrun := ""
	if !sw.Srun {
		if charmrun, err = resolveCharmrun(opt.charmrun, sw.Out, stderr); err != nil {
			return fail(err)
		}
	}
	runs, notes := sw.plan(charmrun, program, opt.srunCommand)
	for _, n := range notes {
		fmt.Fprintf(stdout, "charmscale: %s\n", n)
	}
	if len(runs) == 0 {
		return fail(errors.New("the sweep has no runs: every point was left out"))
	}
	if opt.dryRun {
		for _, r := range runs {
			fmt.Fprintf(stdout, "%s: %s\n", r.ID, strings.Join(r.Argv, " "))
		}
		return 0
	}

	var results []result
	var todo []plannedRun
	for _, r := range runs {
		s, err := kept(sw.Out, r)
		if err != nil {
			fmt.Fprintf(stdout, "charmscale: %v: running it again\n", err)
		}
		if s == nil {
			todo = append(todo, r)
			continue
		}
		results = append(results, result{plannedRun: r, Summary: s, Elapsed: time.Duration(s.WallSeconds * float64(time.Second))})
	}
	fmt.Fprintf(stdout, "charmscale: %d runs (%d points × %d repetitions); %d finished before, kept in %s; %d to run\n",
		len(runs), len(runs)/sw.Reps, sw.Reps, len(results), runsDir(sw.Out), len(todo))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	timed := []result{} // this sweep's runs, timed as they ran
	for i, r := range todo {
		res := launch(ctx, sw.Out, r, opt.timeout)
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "charmscale: interrupted during %s: %d of %d runs finished (kept in %s); the same command resumes the sweep\n",
				r.ID, len(results), len(runs), runsDir(sw.Out))
			return 130
		}
		results = append(results, res)
		timed = append(timed, res)
		what := fmt.Sprintf("[%d/%d] %d PEs, %s, %s", len(results), len(runs), r.PEs, r.layout(), r.FT)
		if r.Kill != "-" {
			what += ", kill " + r.Kill
		}
		what += fmt.Sprintf(", run %d", r.Rep)
		if res.Failed != "" {
			fmt.Fprintf(stdout, "%s: failed: %s (%s)\n", what, res.Failed, filepath.Join(runsDir(sw.Out), r.ID+".log"))
		} else {
			fmt.Fprintf(stdout, "%s: %.2f ms/step, %.1f s", what, res.msPerStep(), res.Elapsed.Seconds())
			if left := todo[i+1:]; len(left) > 0 {
				fmt.Fprintf(stdout, "; %d left, about %s (from the %s so far)", len(left), round(estimate(left, timed)), plural(len(timed), "run"))
			}
			fmt.Fprintln(stdout)
		}
	}

	failed := 0
	for _, r := range results {
		if r.Failed != "" {
			failed++
		}
	}
	rep := newReport(sw, opt, results)
	if err := rep.write(); err != nil {
		return fail(err)
	}
	if opt.readme != "" {
		if err := rep.intoReadme(opt.readme); err != nil {
			return fail(err)
		}
	}
	fmt.Fprintf(stdout, "charmscale: the table: %s; the plots: %s\n", filepath.Join(sw.Out, "table.md"), strings.Join(rep.plotFiles, ", "))
	if failed > 0 {
		fmt.Fprintf(stderr, "charmscale: %d of %d runs failed (their logs are in %s); the same command runs them again\n", failed, len(runs), runsDir(sw.Out))
		return 1
	}
	return 0
}

// estimate is how long runs will take, each as long as the runs timed so
// far that are most like it: the same point, else the same PEs and
// layout, else the same PEs, else any.
func estimate(runs []plannedRun, timed []result) time.Duration {
	var total time.Duration
	for _, r := range runs {
		for _, like := range []func(result) bool{
			func(t result) bool { return t.point == r.point },
			func(t result) bool { return t.PEs == r.PEs && t.PPN == r.PPN },
			func(t result) bool { return t.PEs == r.PEs },
			func(result) bool { return true },
		} {
			var sum time.Duration
			n := 0
			for _, t := range timed {
				if like(t) {
					sum += t.Elapsed
					n++
				}
			}
			if n > 0 {
				total += sum / time.Duration(n)
				break
			}
		}
	}
	return total
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func round(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

// resolveProgram is the program to run: an executable, or a Go main
// package's directory built once into OUT/bin.
func resolveProgram(prog, out string, stderr io.Writer) (string, error) {
	if st, err := os.Stat(prog); err == nil && st.IsDir() {
		bin, err := filepath.Abs(filepath.Join(out, "bin", filepath.Base(filepath.Clean(prog))))
		if err != nil {
			return "", err
		}
		pkg := prog
		if !strings.HasPrefix(pkg, ".") && !filepath.IsAbs(pkg) {
			pkg = "./" + pkg
		}
		fmt.Fprintf(stderr, "charmscale: building %s\n", pkg)
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Stderr = stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("program %s: go build: %w", prog, err)
		}
		return bin, nil
	}
	path, err := exec.LookPath(prog)
	if err != nil {
		return "", fmt.Errorf("program %s: %w", prog, err)
	}
	return filepath.Abs(path)
}

// resolveCharmrun finds charmrun: the one named, the one beside this
// command, the one on $PATH, or one built from this module.
func resolveCharmrun(named, out string, stderr io.Writer) (string, error) {
	if named != "" {
		path, err := exec.LookPath(named)
		if err != nil {
			return "", fmt.Errorf("flag --charmrun %s: %w", named, err)
		}
		return filepath.Abs(path)
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "charmrun")
		if st, err := os.Stat(beside); err == nil && !st.IsDir() {
			return beside, nil
		}
	}
	if path, err := exec.LookPath("charmrun"); err == nil {
		return filepath.Abs(path)
	}
	bin, err := filepath.Abs(filepath.Join(out, "bin", "charmrun"))
	if err != nil {
		return "", err
	}
	fmt.Fprintln(stderr, "charmscale: building charmrun")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/charmgo/charmgo/cmd/charmrun")
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("no charmrun beside charmscale or on $PATH, and building it failed (%w): give --charmrun PATH", err)
	}
	return bin, nil
}
