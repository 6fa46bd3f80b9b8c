// Command charmscale runs a scaling experiment: a sweep of one program over
// PE counts, process layouts, fault-tolerance protocols, kills and
// repetitions, each run launched through charmrun (or srun), its summary
// kept as JSON (--summary-json), and the whole written up as a table
// (Markdown and CSV) and plots (ms/step, speed-up, parallel efficiency,
// fault-tolerance overhead, recovery time) with medians and spread.
//
//	charmscale --pes 1,2,4 --ppn 0,1 --ft none,camel --reps 3 ./leanmd 3 3 3 101
//	charmscale --file bench/scaling/leanmd.sweep
//
// A sweep resumes: every finished run's JSON stays in OUT/runs, and the
// same command skips it. After each run it says how long the rest will
// take, from the runs so far.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const usage = `usage: charmscale [options] [program [program arguments]]

Runs program over every combination of --pes, --ppn, --ft and --kill,
--reps times each, through charmrun; keeps each run's summary in OUT/runs
(a sweep run again skips the runs it finished); writes OUT/table.md,
OUT/table.csv, OUT/runs.csv, OUT/scaling.md and plots in OUT.

program: an executable or the directory of a Go main package (built once
into OUT/bin). Its arguments are the same at every PE count (strong
scaling) unless --args-at gives them per PE count (weak scaling).

options:
  --file FILE          the sweep declared in FILE: lines "key: value", keys
                       as the options below without dashes (program, args,
                       args@N, pes, ppn, ft, kill, reps, flags, nodelist,
                       srun, listen, title, out), lists space-separated,
                       '#' to the end of a line a comment; options given on
                       the command line win over the file's
  --pes LIST           PE counts in all, e.g. 1,2,4,8 (required)
  --ppn LIST           process layouts: 0 one process holding every PE (the
                       default), M processes of M PEs each (PE counts M does
                       not divide are left out)
  --ft LIST            protocols (--ft of the program; default none)
  --kill LIST          failures to inject, each a --kill value PE@STEP (join
                       several with +), '-' for none (the default)
  --reps N             runs of each point (default 3)
  --args-at N:ARGS     the program's arguments at N PEs (weak scaling; one
                       per PE count, repeatable)
  --flags "FLAGS"      runtime flags for every run (e.g. "+balancer GreedyLB")
  --nodelist FILE      start the processes over ssh on FILE's hosts
                       (charmrun ++nodelist)
  --srun               start them with srun instead of charmrun (a
                       rendezvous directory in OUT, a secret per run)
  --srun-command CMD   the srun to run (default srun)
  --listen HOST        the processes' address (default 127.0.0.1 on this
                       machine, 0.0.0.0 with --nodelist or --srun)
  --charmrun PATH      charmrun to launch with (default: beside charmscale,
                       on $PATH, or built from this module)
  --timeout D          a run that takes longer is ended and counted failed
                       (default 30m; its watchdog is the program's own)
  --out DIR            where results go (default charmscale-out)
  --title TEXT         the report's title
  --readme FILE        also put the report into FILE between the lines
                       <!-- charmscale:begin --> and <!-- charmscale:end -->
  --plots png|svg      the plots' format (default png)
  --dry-run            list the runs and stop
  -h, --help           this text
`

var errHelp = errors.New("help")

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	sw, opt, err := parse(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "charmscale: %v\n", err)
		return 2
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stop)
	return execute(sw, opt, stop, stdout, stderr)
}

// options are how charmscale runs the sweep (not what the sweep is).
type options struct {
	charmrun    string
	srunCommand string
	timeout     time.Duration
	readme      string
	plots       string
	dryRun      bool
	commandLine string // as the report shows it
}

// parse reads the command line and the sweep file it names.
func parse(args []string) (*sweep, options, error) {
	fs := flag.NewFlagSet("charmscale", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sw := &sweep{ArgsAt: map[int][]string{}}
	opt := options{commandLine: "charmscale " + strings.Join(args, " ")}
	var file, pes, ppn, ft, kill, flags, listen string
	var reps int
	var argsAt []string
	var srun bool
	fs.StringVar(&file, "file", "", "")
	fs.StringVar(&pes, "pes", "", "")
	fs.StringVar(&ppn, "ppn", "", "")
	fs.StringVar(&ft, "ft", "", "")
	fs.StringVar(&kill, "kill", "", "")
	fs.IntVar(&reps, "reps", 0, "")
	fs.Func("args-at", "", func(v string) error { argsAt = append(argsAt, v); return nil })
	fs.StringVar(&flags, "flags", "", "")
	fs.StringVar(&sw.Nodelist, "nodelist", "", "")
	fs.BoolVar(&srun, "srun", false, "")
	fs.StringVar(&opt.srunCommand, "srun-command", "srun", "")
	fs.StringVar(&listen, "listen", "", "")
	fs.StringVar(&opt.charmrun, "charmrun", "", "")
	fs.DurationVar(&opt.timeout, "timeout", 30*time.Minute, "")
	fs.StringVar(&sw.Out, "out", "", "")
	fs.StringVar(&sw.Title, "title", "", "")
	fs.StringVar(&opt.readme, "readme", "", "")
	fs.StringVar(&opt.plots, "plots", "png", "")
	fs.BoolVar(&opt.dryRun, "dry-run", false, "")
	help := fs.Bool("h", false, "")
	fs.BoolVar(help, "help", false, "")
	if err := fs.Parse(args); err != nil {
		return nil, opt, err
	}
	if *help {
		return nil, opt, errHelp
	}
	if file != "" {
		if err := readSweepFile(file, sw); err != nil {
			return nil, opt, err
		}
	}
	// the command line wins over the file
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	if rest := fs.Args(); len(rest) > 0 {
		sw.Program, sw.Args = rest[0], rest[1:]
	}
	if set["pes"] {
		if sw.PEs, err = intList("--pes", pes, 1); err != nil {
			return nil, opt, err
		}
	}
	if set["ppn"] {
		if sw.PPN, err = intList("--ppn", ppn, 0); err != nil {
			return nil, opt, err
		}
	}
	if set["ft"] {
		sw.FT = splitList(ft)
	}
	if set["kill"] {
		sw.Kills = splitList(kill)
	}
	if set["reps"] {
		sw.Reps = reps
	}
	for _, a := range argsAt {
		if err := sw.setArgsAt("--args-at", a); err != nil {
			return nil, opt, err
		}
	}
	if set["flags"] {
		sw.Flags = strings.Fields(flags)
	}
	if set["srun"] {
		sw.Srun = srun
	}
	if set["listen"] {
		sw.Listen = listen
	}
	if opt.plots != "png" && opt.plots != "svg" {
		return nil, opt, fmt.Errorf("flag --plots %s: give png or svg", opt.plots)
	}
	if opt.timeout <= 0 {
		return nil, opt, fmt.Errorf("flag --timeout %v: give a positive duration", opt.timeout)
	}
	return sw, opt, sw.complete()
}

// readSweepFile reads a sweep declared as "key: value" lines.
func readSweepFile(path string, sw *sweep) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("flag --file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("%s:%d: %q is not \"key: value\"", path, n, line)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		where := fmt.Sprintf("%s:%d: %s", path, n, key)
		switch {
		case key == "program":
			fields := strings.Fields(value)
			if len(fields) != 1 {
				return fmt.Errorf("%s: one program (its arguments go under args)", where)
			}
			sw.Program = fields[0]
		case key == "args":
			sw.Args = strings.Fields(value)
		case strings.HasPrefix(key, "args@"):
			if err := sw.setArgsAt(where, strings.TrimPrefix(key, "args@")+":"+value); err != nil {
				return err
			}
		case key == "pes":
			if sw.PEs, err = intList(where, value, 1); err != nil {
				return err
			}
		case key == "ppn":
			if sw.PPN, err = intList(where, value, 0); err != nil {
				return err
			}
		case key == "ft":
			sw.FT = splitList(value)
		case key == "kill":
			sw.Kills = splitList(value)
		case key == "reps":
			if sw.Reps, err = strconv.Atoi(value); err != nil {
				return fmt.Errorf("%s: %q is not a number", where, value)
			}
		case key == "flags":
			sw.Flags = strings.Fields(value)
		case key == "nodelist":
			sw.Nodelist = value
		case key == "srun":
			if sw.Srun, err = strconv.ParseBool(value); err != nil {
				return fmt.Errorf("%s: %q is not true or false", where, value)
			}
		case key == "listen":
			sw.Listen = value
		case key == "title":
			sw.Title = value
		case key == "out":
			sw.Out = value
		default:
			return fmt.Errorf("%s: no such key (program, args, args@N, pes, ppn, ft, kill, reps, flags, nodelist, srun, listen, title, out)", where)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("flag --file %s: %w", path, err)
	}
	return nil
}

// splitList splits "a,b c" into its items.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

// intList parses a list of whole numbers, each at least least.
func intList(where, s string, least int) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < least {
			return nil, fmt.Errorf("%s %s: %q is not a whole number of at least %d", where, s, f, least)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: an empty list", where)
	}
	return out, nil
}
