package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmgo/charmgo/chare"
)

// sweep is a scaling experiment as declared.
type sweep struct {
	Title    string
	Program  string
	Args     []string         // at every PE count (strong scaling)
	ArgsAt   map[int][]string // by PE count (weak scaling)
	PEs      []int
	PPN      []int    // 0: one process holding every PE
	FT       []string // protocols
	Kills    []string // --kill values ("-": none; "a+b": two)
	Reps     int
	Flags    []string // runtime flags for every run
	Nodelist string
	Srun     bool
	Listen   string
	Out      string
}

func (sw *sweep) setArgsAt(where, v string) error {
	n, args, ok := strings.Cut(v, ":")
	pes, err := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err != nil || pes < 1 {
		return fmt.Errorf("%s %s: give PES:ARGS, e.g. 4:6 3 3 101", where, v)
	}
	sw.ArgsAt[pes] = strings.Fields(args)
	return nil
}

// complete fills the defaults and checks the sweep can run.
func (sw *sweep) complete() error {
	if sw.Program == "" {
		return errors.New("no program: give it after the options, or as program: in --file")
	}
	if len(sw.PEs) == 0 {
		return errors.New("no PE counts: give --pes (e.g. 1,2,4) or pes: in --file")
	}
	if len(sw.PPN) == 0 {
		sw.PPN = []int{0}
	}
	if len(sw.FT) == 0 {
		sw.FT = []string{"none"}
	}
	if len(sw.Kills) == 0 {
		sw.Kills = []string{"-"}
	}
	if sw.Reps == 0 {
		sw.Reps = 3
	}
	if sw.Reps < 1 {
		return fmt.Errorf("flag --reps %d: give at least 1", sw.Reps)
	}
	if sw.Out == "" {
		sw.Out = "charmscale-out"
	}
	if sw.Srun && sw.Nodelist != "" {
		return errors.New("flags --srun and --nodelist: give one (srun places the processes itself)")
	}
	if sw.Listen == "" {
		sw.Listen = "127.0.0.1"
		if sw.Srun || sw.Nodelist != "" {
			sw.Listen = "0.0.0.0"
		}
	}
	if len(sw.ArgsAt) > 0 {
		for _, p := range sw.PEs {
			if _, ok := sw.ArgsAt[p]; !ok {
				return fmt.Errorf("weak scaling (--args-at) gives no arguments for %d PEs: give them for every PE count", p)
			}
		}
	}
	for _, k := range sw.Kills {
		if k == "-" {
			continue
		}
		for _, one := range strings.Split(k, "+") {
			if _, err := killPE(one); err != nil {
				return fmt.Errorf("flag --kill %s: %w", k, err)
			}
		}
	}
	return nil
}

// weak: the arguments change with the PE count.
func (sw *sweep) weak() bool { return len(sw.ArgsAt) > 0 }

func (sw *sweep) argsFor(pes int) []string {
	if sw.weak() {
		return sw.ArgsAt[pes]
	}
	return sw.Args
}

func killPE(k string) (int, error) {
	pe, step, ok := strings.Cut(k, "@")
	n, err := strconv.Atoi(pe)
	if _, serr := strconv.Atoi(step); !ok || err != nil || serr != nil || n < 0 {
		return 0, fmt.Errorf("%q is not PE@STEP", k)
	}
	return n, nil
}

// point is one combination of the sweep; a run is a point's repetition.
type point struct {
	PEs  int
	PPN  int
	FT   string
	Kill string
}

// layout names the point's process layout.
func (p point) layout() string {
	if p.PPN == 0 {
		return "1 process"
	}
	return fmt.Sprintf("%d×%d", p.PEs/p.PPN, p.PPN)
}

// series is the points a line of a plot joins: all but the PE count.
func (p point) series() point { p.PEs = 0; return p }

func (p point) seriesName() string {
	name := "one process"
	if p.PPN > 0 {
		name = fmt.Sprintf("%d PE per process", p.PPN)
		if p.PPN > 1 {
			name = fmt.Sprintf("%d PEs per process", p.PPN)
		}
	}
	name += ", " + p.FT
	if p.Kill != "-" {
		name += ", kill " + p.Kill
	}
	return name
}

type plannedRun struct {
	point
	Rep  int
	ID   string   // the file name of its results
	Argv []string // the command
}

// plan is every run of the sweep, repetition by repetition (so that the
// machine's noise falls on every point alike and the first pass gives an
// estimate for all), and what it left out and why.
func (sw *sweep) plan(charmrun, program, srunCommand string) ([]plannedRun, []string) {
	var runs []plannedRun
	var notes []string
	noted := map[string]bool{}
	note := func(s string) {
		if !noted[s] {
			noted[s] = true
			notes = append(notes, s)
		}
	}
	for rep := 1; rep <= sw.Reps; rep++ {
		for _, pes := range sw.PEs {
			for _, ppn := range sw.PPN {
				if ppn > 0 && pes%ppn != 0 {
					note(fmt.Sprintf("left out: %d PEs in processes of %d", pes, ppn))
					continue
				}
				for _, ft := range sw.FT {
					for _, kill := range sw.Kills {
						if kill != "-" && !killFits(kill, pes) {
							note(fmt.Sprintf("left out: kill %s on %d PEs (no such PE)", kill, pes))
							continue
						}
						p := point{PEs: pes, PPN: ppn, FT: ft, Kill: kill}
						r := plannedRun{point: p, Rep: rep}
						r.Argv = sw.command(p, charmrun, program, srunCommand)
						r.ID = runID(p, rep, sw.hashOf(p))
						runs = append(runs, r)
					}
				}
			}
		}
	}
	return runs, notes
}

func killFits(kill string, pes int) bool {
	for _, one := range strings.Split(kill, "+") {
		if n, _ := killPE(one); n >= pes {
			return false
		}
	}
	return true
}

// command is how a point runs, without the summary's file (added per run).
func (sw *sweep) command(p point, charmrun, program, srunCommand string) []string {
	var rt []string
	rt = append(rt, "--ft", p.FT, "--progress-line", "off")
	if p.Kill != "-" {
		for _, one := range strings.Split(p.Kill, "+") {
			rt = append(rt, "--kill", one)
		}
	}
	rt = append(rt, sw.Flags...)
	args := sw.argsFor(p.PEs)
	if sw.Srun {
		procs, ppn := 1, p.PEs
		if p.PPN > 0 {
			procs, ppn = p.PEs/p.PPN, p.PPN
		}
		argv := []string{srunCommand, "-n", strconv.Itoa(procs), program, "++ppn", strconv.Itoa(ppn),
			"--rendezvous-dir", filepath.Join(sw.Out, "rendezvous"), "--listen", sw.Listen}
		return append(append(argv, rt...), args...)
	}
	argv := []string{charmrun, "+p" + strconv.Itoa(p.PEs)}
	if p.PPN > 0 {
		argv = append(argv, "++ppn", strconv.Itoa(p.PPN))
	}
	if sw.Nodelist != "" {
		argv = append(argv, "++nodelist", sw.Nodelist)
	}
	if p.PPN > 0 || sw.Nodelist != "" {
		argv = append(argv, "--listen", sw.Listen)
	}
	argv = append(argv, rt...)
	return append(append(argv, program), args...)
}

// hashOf names what a point's result depends on besides the point: the
// program, its arguments, the runtime flags, where it runs. A sweep run
// again with any of them changed does not take the old results.
func (sw *sweep) hashOf(p point) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s\x00%q\x00%q\x00%s\x00%v\x00%s", filepath.Base(sw.Program), sw.argsFor(p.PEs), sw.Flags, sw.Nodelist, sw.Srun, sw.Listen)
	return fmt.Sprintf("%08x", h.Sum32())
}

func runID(p point, rep int, hash string) string {
	kill := "nokill"
	if p.Kill != "-" {
		kill = "kill" + strings.NewReplacer("@", "at", "+", "-").Replace(p.Kill)
	}
	return fmt.Sprintf("p%d-ppn%d-%s-%s-r%d-%s", p.PEs, p.PPN, p.FT, kill, rep, hash)
}

// result is a run's outcome: its summary, or why it has none.
type result struct {
	plannedRun
	Summary *chare.Summary
	Elapsed time.Duration // as charmscale timed it
	Failed  string        // the run's last line of error, if it failed
}

// msPerStep is the run's mean ms per step (every step's time counts: a
// checkpoint's, a recovery's), or its wall time where it has no steps.
func (r *result) msPerStep() float64 {
	if s := r.Summary; s != nil && s.Steps != nil && s.Steps.Count > 0 {
		return s.Steps.MeanMs
	}
	return 0
}

// runsDir holds each finished run's summary, by ID.
func runsDir(out string) string { return filepath.Join(out, "runs") }

// kept reads the run's summary if a sweep before this one finished it.
func kept(out string, r plannedRun) (*chare.Summary, error) {
	b, err := os.ReadFile(filepath.Join(runsDir(out), r.ID+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s chare.Summary
	if err := json.Unmarshal(b, &s); err != nil || s.Schema != chare.SummarySchema {
		return nil, fmt.Errorf("%s: not a summary of schema %s", r.ID+".json", chare.SummarySchema)
	}
	return &s, nil
}

// launch runs one point's repetition and keeps its summary.
func launch(ctx context.Context, out string, r plannedRun, timeout time.Duration) result {
	res := result{plannedRun: r}
	dir := runsDir(out)
	final := filepath.Join(dir, r.ID+".json")
	tmp := filepath.Join(dir, r.ID+".json.part")
	logPath := filepath.Join(dir, r.ID+".log")
	os.Remove(tmp)
	argv := slices.Clone(r.Argv)
	// the summary's flag goes with the runtime's flags, before the
	// program's arguments (srun: after the program, which parses it)
	at := slices.Index(argv, "--ft")
	argv = slices.Insert(argv, at, "--summary-json", tmp)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 10 * time.Second // ended, a run that lingers is killed
	if slices.Contains(argv, "--rendezvous-dir") {
		// srun: the processes prove the secret to each other, and meet in
		// a file named after the job (SLURM's job and step where there
		// is one; else this, a name no run before had)
		cmd.Env = append(os.Environ(), "CHARMGO_JOB_SECRET="+secret(), "CHARMGO_JOB_ID="+r.ID+"-"+secret()[:8])
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		res.Failed = err.Error()
		return res
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "$ %s\n", strings.Join(argv, " "))
	var tail bytes.Buffer
	cmd.Stdout = logFile
	cmd.Stderr = io.MultiWriter(logFile, &tail)
	ownGroup(cmd)
	began := time.Now()
	err = cmd.Run()
	res.Elapsed = time.Since(began)
	if err != nil {
		os.Remove(tmp)
		res.Failed = lastLine(tail.String())
		switch {
		case ctx.Err() == context.DeadlineExceeded:
			res.Failed = fmt.Sprintf("over the --timeout of %v", timeout)
		case res.Failed == "":
			res.Failed = err.Error()
		}
		return res
	}
	b, err := os.ReadFile(tmp)
	var s chare.Summary
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil || s.Schema != chare.SummarySchema {
		res.Failed = fmt.Sprintf("exit 0 without a summary of schema %s (%v): see %s", chare.SummarySchema, err, logPath)
		return res
	}
	if err := os.Rename(tmp, final); err != nil {
		res.Failed = err.Error()
		return res
	}
	res.Summary = &s
	return res
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

func secret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}
