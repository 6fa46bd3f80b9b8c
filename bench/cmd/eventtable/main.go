// Command eventtable measures the pessimist protocol's refined event
// model the way papers/003's Table I does: for each program and PE count
// it runs once under --ft pessimist and reports the messages delivered,
// the share that were non-deterministic events (a delivery from another
// PE than the delivery before it), the commits to the event logger per
// message, the sends that needed no commit (their destination sent every
// delivery since the last), and the entry method with the most events.
// Each run's results are checked against a run without fault tolerance
// (bitwise, where the program reports energies).
//
//	go run ./bench/cmd/eventtable                        # every program, 2, 4 and 8 PEs
//	go run ./bench/cmd/eventtable -progs leanmd -pes 16
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/charmgo/charmgo/bench/internal/summaries"
)

// prog is a program to measure, with the arguments of its run.
type prog struct {
	name, pkg string
	args      []string
}

var progs = []prog{
	// 3×3×3 cells, 41 steps, no balancing, a checkpoint every 10 steps
	{"leanmd", "./apps/leanmd", []string{"3", "3", "3", "41", "1000", "1000", "10"}},
	// 32 states on a 16³ grid, 40 steps, a checkpoint every 10 steps
	{"openatom", "./apps/openatom", []string{"32", "16", "40", "--ckpt-period", "10"}},
	// an imbalanced stencil, balanced by greedy
	{"imbalance", "./examples/imbalance", []string{"+balancer", "greedy"}},
	// a 2D Jacobi relaxation (halo exchange by reference number)
	{"jacobi2d", "./examples/jacobi2d", []string{"-iters", "200"}},
}

// summary is the part of a run's --summary-json this reads.
type summary struct {
	FaultTolerance struct {
		Events *struct {
			Deliveries uint64 `json:"deliveries"`
			Events     uint64 `json:"events"`
			Commits    uint64 `json:"commits"`
			Spared     uint64 `json:"commits_spared"`
			ByEntry    []struct {
				Entry      string `json:"entry"`
				Deliveries uint64 `json:"deliveries"`
				Events     uint64 `json:"events"`
			} `json:"by_entry"`
		} `json:"events"`
	} `json:"fault_tolerance"`
	Results []summaries.Result `json:"results"`
}

func main() {
	progList := flag.String("progs", "leanmd,openatom,imbalance,jacobi2d", "programs ("+names()+")")
	peList := flag.String("pes", "2,4,8", "PE counts")
	flag.Parse()
	dir, err := os.MkdirTemp("", "eventtable")
	check(err)
	defer os.RemoveAll(dir)
	fmt.Println("| program | PEs | deliveries | events | % events | commits per delivery | sends that needed none, per delivery | most events (entry: events of deliveries) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---|")
	for _, name := range strings.Split(*progList, ",") {
		p, ok := find(name)
		if !ok {
			fail("unknown program %q (want %s)", name, names())
		}
		bin := filepath.Join(dir, p.name)
		if out, err := exec.Command("go", "build", "-o", bin, p.pkg).CombinedOutput(); err != nil {
			fail("go build %s: %v\n%s", p.pkg, err, out)
		}
		for _, ps := range strings.Split(*peList, ",") {
			_, err := strconv.Atoi(ps)
			check(err)
			free := run(bin, dir, p.args, []string{"+p" + ps})
			s := run(bin, dir, p.args, []string{"+p" + ps, "--ft", "pessimist"})
			ev := s.FaultTolerance.Events
			if ev == nil || ev.Deliveries == 0 {
				fail("%s +p%s: no events in the summary", p.name, ps)
			}
			if !sameResults(free, s) {
				fail("%s +p%s: the results under pessimist differ from the run without fault tolerance:\n%v\n%v", p.name, ps, free.Results, s.Results)
			}
			top := ""
			var most uint64
			for _, e := range ev.ByEntry {
				if e.Events > most {
					most, top = e.Events, fmt.Sprintf("%s: %d of %d", e.Entry, e.Events, e.Deliveries)
				}
			}
			fmt.Printf("| %s | %s | %d | %d | %.1f | %.2f | %.2f | %s |\n", p.name, ps, ev.Deliveries, ev.Events,
				100*float64(ev.Events)/float64(ev.Deliveries), float64(ev.Commits)/float64(ev.Deliveries), float64(ev.Spared)/float64(ev.Deliveries), top)
		}
	}
}

func names() string {
	var out []string
	for _, p := range progs {
		out = append(out, p.name)
	}
	return strings.Join(out, ", ")
}

func find(name string) (prog, bool) {
	for _, p := range progs {
		if p.name == name {
			return p, true
		}
	}
	return prog{}, false
}

// run runs bin for the table and reads its summary.
func run(bin, dir string, args, flags []string) summary {
	var s summary
	check(summaries.Run(bin, dir, args, flags, &s))
	return s
}

// computed names the results two runs must have alike.
func computed(name string) bool {
	return !strings.Contains(name, "ms") && !strings.Contains(name, "time") && !strings.Contains(name, "per_s")
}

// sameResults: every result that is not a time (a program may report
// none).
func sameResults(a, b summary) bool {
	same, _ := summaries.Same(a.Results, b.Results, computed)
	return same
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "eventtable: "+format+"\n", args...)
	os.Exit(1)
}
