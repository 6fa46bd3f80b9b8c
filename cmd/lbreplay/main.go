// Command lbreplay runs load-balancing strategies offline: on the stats a
// run dumped (+LBDump FILE), or on a synthetic instance it generates, and
// prints for each step the figures +LBDebug prints live — PE load max/avg
// before and predicted after, chares moved, bytes between PEs, strategy
// time — and whether the plan equals the one the run made.
//
//	go run ./cmd/lbreplay --stats lb.dump --balancer greedyrefine
//	go run ./cmd/lbreplay --generate pes=1024,objs=100000,skew=0.5,pattern=mesh,hot=256 --balancer graph
//	go run ./cmd/lbreplay --generate pes=64,objs=4000 --out synthetic.dump
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmgo/charmgo/loadbalance"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "lbreplay: %v\n", err)
		os.Exit(2)
	}
}

// balancers collects repeated --balancer flags.
type balancers []string

func (b *balancers) String() string { return strings.Join(*b, ",") }
func (b *balancers) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			*b = append(*b, n)
		}
	}
	return nil
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lbreplay", flag.ContinueOnError)
	fs.SetOutput(out)
	stats := fs.String("stats", "", "stats file a run wrote with +LBDump")
	gen := fs.String("generate", "", "generate a synthetic instance: pes=N,objs=M,skew=S,pattern=none|ring|mesh|random,degree=D,placement=block|random,hot=H,seed=X")
	outFile := fs.String("out", "", "write the stats (read or generated) to this file")
	var names balancers
	fs.Var(&names, "balancer", "strategy to run (repeat, or separate by commas, to compare several); default: the one each step recorded")
	tol := fs.Float64("tolerance", 0, "imbalance the strategies accept (default: the recorded one, else 0.03)")
	seed := fs.Uint64("seed", 0, "seed of the randomized strategies (default: the recorded one)")
	repeat := fs.Int("repeat", 1, "time each strategy over so many runs (the median is printed)")
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: lbreplay (--stats FILE | --generate SPEC) [--balancer NAME]... [--out FILE]\n\nstrategies:\n")
		for _, n := range loadbalance.Names() {
			fmt.Fprintf(out, "  %s\n", n)
		}
		fmt.Fprintln(out)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if (*stats == "") == (*gen == "") {
		return fmt.Errorf("give one of --stats FILE and --generate SPEC")
	}
	if *repeat < 1 {
		return fmt.Errorf("flag --repeat: %d: want at least 1", *repeat)
	}
	var recs []loadbalance.Record
	if *stats != "" {
		f, err := os.Open(*stats)
		if err != nil {
			return fmt.Errorf("flag --stats: %w", err)
		}
		recs, err = loadbalance.ReadDump(f, *stats)
		f.Close()
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return fmt.Errorf("%s: no balancing step in the file", *stats)
		}
	} else {
		spec, err := parseSynthetic(*gen)
		if err != nil {
			return fmt.Errorf("flag --generate: %w", err)
		}
		st, err := loadbalance.Generate(spec)
		if err != nil {
			return fmt.Errorf("flag --generate: %w", err)
		}
		recs = []loadbalance.Record{{Stats: *st}}
	}
	for _, n := range names {
		if _, err := loadbalance.New(n, loadbalance.Options{}); err != nil {
			return fmt.Errorf("flag --balancer: %w", err)
		}
	}
	var dump *loadbalance.DumpWriter
	if *outFile != "" {
		f, err := os.Create(*outFile)
		if err != nil {
			return fmt.Errorf("flag --out: %w", err)
		}
		defer f.Close()
		dump = loadbalance.NewDumpWriter(f)
	}
	for _, rec := range recs {
		st := &rec.Stats
		what := ""
		if rec.Coll != "" {
			what = " of " + rec.Coll
		}
		fmt.Fprintf(out, "step %d%s: %d PEs, %d chares (%d migratable), %d communication records\n",
			st.Step, what, len(st.PEs), len(st.Objs), migratable(st), len(st.Comm))
		run := names
		if len(run) == 0 {
			if rec.Strategy == "" {
				run = []string{"greedy", "refine", "greedyrefine", "graph"}
			} else {
				run = []string{rec.Strategy}
			}
		}
		for _, name := range run {
			opt := rec.Options
			if *tol > 0 {
				opt.Tolerance = *tol
			}
			if *seed != 0 {
				opt.Seed = *seed
			}
			s, _ := loadbalance.New(name, opt)
			var moves []loadbalance.Move
			var times []time.Duration
			for range *repeat {
				t0 := time.Now()
				m, err := loadbalance.Run(s, st)
				times = append(times, time.Since(t0))
				if err != nil {
					return fmt.Errorf("step %d: %w", st.Step, err)
				}
				moves = m
			}
			slices.Sort(times)
			sm := st.Summarize(s.Name(), moves)
			fmt.Fprintf(out, "  %-13s PE load max/avg %.3f -> %.3f predicted; moved %d of %d chares (%.1f%%), %d bytes; cross-PE bytes %d -> %d; strategy %.2f ms",
				s.Name(), sm.MaxAvgBefore, sm.MaxAvgAfter, sm.Moved, sm.Objs, 100*float64(sm.Moved)/float64(max(sm.Objs, 1)), sm.MovedBytes,
				sm.CrossBytesBefore, sm.CrossBytesAfter, float64(times[len(times)/2].Microseconds())/1e3)
			if rec.Strategy == s.Name() {
				if slices.Equal(moves, rec.Moves) {
					fmt.Fprintf(out, "; same plan as the run")
				} else {
					fmt.Fprintf(out, "; NOT the plan the run made (%d moves there)", len(rec.Moves))
				}
			}
			fmt.Fprintln(out)
		}
		if dump != nil {
			if err := dump.Write(&rec); err != nil {
				return fmt.Errorf("flag --out: %w", err)
			}
		}
	}
	return nil
}

func migratable(st *loadbalance.Stats) int {
	n := 0
	for _, o := range st.Objs {
		if o.Migratable {
			n++
		}
	}
	return n
}

// parseSynthetic reads key=value pairs into a synthetic instance.
func parseSynthetic(spec string) (loadbalance.Synthetic, error) {
	g := loadbalance.Synthetic{PEs: 64, Objs: 4000, Skew: 0.5, Pattern: "mesh", Placement: "block", Degree: 4, Seed: 1}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return g, fmt.Errorf("%q is not key=value", kv)
		}
		var err error
		switch k {
		case "pes":
			g.PEs, err = strconv.Atoi(v)
		case "objs":
			g.Objs, err = strconv.Atoi(v)
		case "skew":
			g.Skew, err = strconv.ParseFloat(v, 64)
		case "pattern":
			g.Pattern = v
		case "degree":
			g.Degree, err = strconv.Atoi(v)
		case "placement":
			g.Placement = v
		case "hot":
			g.Hot, err = strconv.Atoi(v)
		case "seed":
			g.Seed, err = strconv.ParseUint(v, 10, 64)
		default:
			return g, fmt.Errorf("unknown key %q (pes, objs, skew, pattern, degree, placement, hot, seed)", k)
		}
		if err != nil {
			return g, fmt.Errorf("%s: %q is not a number", k, v)
		}
	}
	if g.PEs < 1 || g.PEs > 1<<20 || g.Objs < 0 || g.Objs > 1<<26 {
		return g, fmt.Errorf("pes=%d objs=%d: want 1 to %d PEs and 0 to %d chares", g.PEs, g.Objs, 1<<20, 1<<26)
	}
	return g, nil
}
