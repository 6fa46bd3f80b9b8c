// Command mcmltable measures memory-constrained message logging (MCML,
// --log-limit) the way papers/002's Table II does: for each application
// and PE count it runs once without a limit to find the largest log a PE
// reaches (its peak), then with limits θ of that peak, and reports the
// largest log a PE reached under the limit and the rollback set a
// failure of each PE would have had, on average over every PE at every
// step (as % of the PEs) and its chain; it then kills a few PEs for real
// at a late step of an epoch and checks the runs end bitwise as the
// failure-free one did and report the rollback set they took.
//
//	go run ./bench/cmd/mcmltable                       # LeanMD and OpenAtom, 8 and 16 PEs, θ 30..70%, heaviest and cluster
//	go run ./bench/cmd/mcmltable -apps leanmd -pes 4 -theta 50 -strategy cluster
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/charmgo/charmgo/bench/internal/summaries"
)

// app is a program to measure, with the arguments of its run.
type app struct {
	name, pkg string
	args      []string
	killStep  int // a step late in an epoch
}

var apps = map[string]app{
	// 3×3×3 cells, 41 steps, no balancing, a checkpoint every 10 steps
	"leanmd": {"leanmd", "./apps/leanmd", []string{"3", "3", "3", "41", "1000", "1000", "10"}, 19},
	// 32 states on a 16³ grid, 40 steps, a checkpoint every 10 steps
	"openatom": {"openatom", "./apps/openatom", []string{"32", "16", "40", "--ckpt-period", "10"}, 19},
}

// summary is the part of a run's --summary-json this reads.
type summary struct {
	PEs []struct {
		LogPeakBytes uint64 `json:"log_peak_bytes"`
	} `json:"pes"`
	FaultTolerance struct {
		Recoveries []struct {
			Set   []int32 `json:"rollback_set"`
			Chain int     `json:"rollback_chain"`
		} `json:"recoveries"`
		LogLimit *struct {
			ChannelsOff   uint64  `json:"channels_turned_off"`
			OverLimit     uint64  `json:"sends_over_limit"`
			LargestPeakPE uint64  `json:"largest_pe_peak_bytes"`
			ExpectedSet   float64 `json:"expected_rollback_set"`
			ExpectedChain float64 `json:"expected_rollback_chain"`
			LargestSet    int     `json:"largest_rollback_set"`
		} `json:"log_limit"`
	} `json:"fault_tolerance"`
	Results []summaries.Result `json:"results"`
}

func main() {
	appList := flag.String("apps", "leanmd,openatom", "applications (leanmd, openatom)")
	peList := flag.String("pes", "8,16", "PE counts")
	thetas := flag.String("theta", "30,40,50,60,70", "limits, in % of the unconstrained peak")
	ft := flag.String("ft", "scmel", "protocol (scmel, camel, or team; -teams for team and camel with teams)")
	teams := flag.String("teams", "", "--teams for -ft team, or camel's teams")
	kills := flag.Int("kills", 2, "PEs killed for real per limit (PEs 1, n/2, ...), checked bitwise")
	strategies := flag.String("strategy", "heaviest,cluster", "--log-limit-strategy values (papers/002 Table V compares them)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "mcmltable")
	check(err)
	defer os.RemoveAll(dir)
	fmt.Printf("| app | PEs | θ | strategy | limit (bytes) | largest PE log | ÷ unconstrained | channels off | expected set (%% of PEs) | chain | largest set | killed: sets (chain) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range strings.Split(*appList, ",") {
		a, ok := apps[name]
		if !ok {
			fail("unknown app %q (want leanmd, openatom)", name)
		}
		bin := filepath.Join(dir, a.name)
		out, err := exec.Command("go", "build", "-o", bin, a.pkg).CombinedOutput()
		if err != nil {
			fail("go build %s: %v\n%s", a.pkg, err, out)
		}
		for _, ps := range strings.Split(*peList, ",") {
			n, err := strconv.Atoi(ps)
			check(err)
			proto := []string{"+p" + ps, "--ft", *ft}
			if *teams != "" {
				proto = append(proto, "--teams", *teams)
			}
			free := run(bin, dir, a.args, proto)
			var peak uint64
			for _, p := range free.PEs {
				peak = max(peak, p.LogPeakBytes)
			}
			// without a limit a failure rolls back the failed PE's team
			team := 1
			if t, err := strconv.Atoi(*teams); err == nil && t > 0 {
				team = min(t, n)
			}
			fmt.Printf("| %s | %d | ∞ | – | – | %d | 1.00 | 0 | %.1f | 0 | %d | |\n", name, n, peak, 100*float64(team)/float64(n), team)
			for _, ts := range strings.Split(*thetas, ",") {
				theta, err := strconv.Atoi(ts)
				check(err)
				limit := peak * uint64(theta) / 100
				for _, strategy := range strings.Split(*strategies, ",") {
					lim := append(slices.Clone(proto), "--log-limit", strconv.FormatUint(limit, 10), "--log-limit-strategy", strategy)
					s := run(bin, dir, a.args, lim)
					ll := s.FaultTolerance.LogLimit
					if ll == nil {
						fail("%s %v: no log_limit in the summary", name, lim)
					}
					var killed []string
					for k := range *kills {
						pe := k * n / max(*kills, 1)
						if k == 0 {
							pe = 1
						}
						r := run(bin, dir, a.args, append(lim, "--kill", fmt.Sprintf("%d@%d", pe, a.killStep)))
						if !sameResults(free, r) {
							fail("%s %v, PE %d killed at step %d: the results differ from the failure-free run's", name, lim, pe, a.killStep)
						}
						for _, rc := range r.FaultTolerance.Recoveries {
							killed = append(killed, fmt.Sprintf("PE %d: %d (%d)", pe, len(rc.Set), rc.Chain))
						}
					}
					fmt.Printf("| %s | %d | %d%% | %s | %d | %d | %.2f | %d | %.1f | %.2f | %d | %s |\n", name, n, theta, strategy, limit, ll.LargestPeakPE,
						float64(ll.LargestPeakPE)/float64(peak), ll.ChannelsOff, 100*ll.ExpectedSet/float64(n), ll.ExpectedChain, ll.LargestSet, strings.Join(killed, "; "))
				}
			}
		}
	}
}

// run runs bin with args and flags and returns its summary; a run that
// fails ends the command.
// run runs bin for the table and reads its summary.
func run(bin, dir string, args, flags []string) summary {
	var s summary
	check(summaries.Run(bin, dir, args, flags, &s))
	return s
}

// computed names the results two runs must have alike.
func computed(name string) bool {
	return strings.Contains(name, "energy") || strings.Contains(name, "ortho")
}

// sameResults: the energies (and OpenAtom's orthonormality), which both
// programs report.
func sameResults(a, b summary) bool {
	same, n := summaries.Same(a.Results, b.Results, computed)
	return same && n > 0
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "mcmltable: "+format+"\n", a...)
	os.Exit(1)
}
