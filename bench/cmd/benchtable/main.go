// Command benchtable summarizes `go test -bench -count N` output: the median
// and min–max of each benchmark's ns/op, their spread (max ÷ min, and
// "two modes" where the runs fall in two groups 1.3× or more apart: a
// defect to find, not noise to average; and the range of the machine's
// cross-core floor where the runs report it, floor-ns), and within each
// family (the name
// before the first underscore) every entry's ratio to the family's first
// entry, which is charmgo's.
//
//	go test -run '^$' -bench . -count 5 ./bench/ | go run ./bench/cmd/benchtable
//
// With --against FILE it compares the run on standard input with the one
// FILE holds (bench/baseline.txt: the output the table in bench/README.md
// was made from, its commit in a comment line) and prints each charmgo
// benchmark's change, adjusted by how much faster or slower this machine
// ran the baselines (raw channels, protoactor-go) than FILE's did; it
// exits 1 if one got slower than --tolerance allows.
//
//	go test -run '^$' -bench 'PingPong_|Stream_|LocalSend' -count 5 ./bench/ > /tmp/now.txt
//	go run ./bench/cmd/benchtable --against bench/baseline.txt < /tmp/now.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var line = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// sample is one run's figures; floor is its floor-ns metric (the
// machine's cross-core round trip measured beside it), -1 if none.
type sample struct{ nsop, allocs, floor float64 }

func main() {
	fs := flag.NewFlagSet("benchtable", flag.ContinueOnError)
	against := fs.String("against", "", "compare with the `file` of a recorded run (bench/baseline.txt)")
	tol := fs.Float64("tolerance", 0.15, "a charmgo benchmark this much slower (adjusted) than the recorded run fails the comparison")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	var err error
	if *against == "" {
		err = run(os.Stdin, os.Stdout)
	} else {
		var slower bool
		if slower, err = compareFile(*against, os.Stdin, os.Stdout, *tol); err == nil && slower {
			fmt.Fprintf(os.Stderr, "benchtable: slower than %s beyond the tolerance (%.0f%%)\n", *against, 100**tol)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
}

// parse reads benchmark lines: each benchmark's samples, in first-seen
// order, and the comment lines (# ...).
func parse(in io.Reader) (runs map[string][]sample, order, notes []string, err error) {
	runs = map[string][]sample{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); strings.HasPrefix(t, "#") {
			notes = append(notes, t)
			continue
		}
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := m[1]
		s := sample{nsop: -1, allocs: -1, floor: -1}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.nsop = v // the last ns/op wins: programs report their own
			case "allocs/op":
				s.allocs = v
			case "floor-ns":
				s.floor = v
			}
		}
		if s.nsop < 0 {
			continue
		}
		if _, seen := runs[name]; !seen {
			order = append(order, name)
		}
		runs[name] = append(runs[name], s)
	}
	return runs, order, notes, sc.Err()
}

// median of the samples' ns/op, and their min and max.
func median(ss []sample) (m, lo, hi float64) {
	v := sorted(ss)
	m = v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return m, v[0], v[len(v)-1]
}

func run(in io.Reader, out io.Writer) error {
	runs, order, _, err := parse(in)
	if err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark lines on standard input")
	}
	med := map[string]float64{}
	fmt.Fprintf(out, "| benchmark | runs | median ns/op | min–max | max ÷ min | allocs/op | ÷ first of family |\n|---|---|---|---|---|---|---|\n")
	for _, name := range order {
		ss := runs[name]
		m, lo, hi := median(ss)
		med[name] = m
		allocs := "—"
		if ss[0].allocs >= 0 {
			allocs = strconv.FormatFloat(ss[0].allocs, 'f', -1, 64)
		}
		ratio := ""
		fam, _, _ := strings.Cut(name, "_")
		for _, other := range order {
			if of, _, _ := strings.Cut(other, "_"); of == fam {
				if base := med[other]; other != name && base > 0 {
					ratio = fmt.Sprintf("%.2f×", m/base)
				}
				break
			}
		}
		spread := fmt.Sprintf("%.2f", hi/lo)
		if lo2, hi2, ok := twoModes(ss); ok {
			spread += fmt.Sprintf(" **two modes**: %d runs ≤ %.1f, %d ≥ %.1f", lo2, maxOf(ss, lo2), hi2, minOf(ss, lo2))
		}
		if flo, fhi, ok := floors(ss); ok {
			spread += fmt.Sprintf("; the machine's floor %.0f–%.0f ns", flo, fhi)
		}
		fmt.Fprintf(out, "| %s | %d | %.1f | %.1f–%.1f | %s | %s | %s |\n", name, len(ss), m, lo, hi, spread, allocs, ratio)
	}
	return nil
}

// modeGap is how far apart (as a ratio) two neighbouring runs' ns/op must
// be for twoModes to split the runs there: noise on this machine spreads
// one mode by 10–20%, the fast path's two modes were 3–5× apart.
const modeGap = 1.3

// twoModes reports whether the runs' ns/op fall in two groups: sorted,
// two neighbours modeGap or more apart. It gives how many runs are below
// the widest such gap and how many above.
func twoModes(ss []sample) (below, above int, ok bool) {
	v := sorted(ss)
	best, at := 0.0, -1
	for i := 0; i+1 < len(v); i++ {
		if r := v[i+1] / v[i]; v[i] > 0 && r >= modeGap && r > best {
			best, at = r, i
		}
	}
	if at < 0 {
		return 0, 0, false
	}
	return at + 1, len(v) - at - 1, true
}

// floors is the range of the runs' floor-ns, if they report one.
func floors(ss []sample) (lo, hi float64, ok bool) {
	for _, s := range ss {
		if s.floor < 0 {
			continue
		}
		if !ok || s.floor < lo {
			lo = s.floor
		}
		if !ok || s.floor > hi {
			hi = s.floor
		}
		ok = true
	}
	return lo, hi, ok
}

func sorted(ss []sample) []float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = s.nsop
	}
	sort.Float64s(v)
	return v
}

// maxOf is the largest of the n smallest ns/op; minOf the smallest of
// the others.
func maxOf(ss []sample, n int) float64 { return sorted(ss)[n-1] }
func minOf(ss []sample, n int) float64 { return sorted(ss)[n] }

func compareFile(path string, now io.Reader, out io.Writer, tol float64) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return compare(f, now, out, tol, path)
}

// isCharmgo: a benchmark of charmgo's own (the others are baselines).
func isCharmgo(name string) bool {
	_, variant, _ := strings.Cut(name, "_")
	return strings.HasPrefix(variant, "Charmgo")
}

// compare prints, for every charmgo benchmark in both runs, its median
// then and now and the change adjusted by the machine's: the geometric
// mean of now ÷ then over the baselines both runs have. It reports
// whether one got slower than 1+tol (adjusted).
func compare(then, now io.Reader, out io.Writer, tol float64, name string) (bool, error) {
	tRuns, tOrder, notes, err := parse(then)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	nRuns, nOrder, _, err := parse(now)
	if err != nil {
		return false, fmt.Errorf("standard input: %w", err)
	}
	if len(tOrder) == 0 {
		return false, fmt.Errorf("%s: no benchmark lines", name)
	}
	if len(nOrder) == 0 {
		return false, fmt.Errorf("no benchmark lines on standard input")
	}
	logSum, n := 0.0, 0
	var bases []string
	for _, b := range tOrder {
		if isCharmgo(b) || nRuns[b] == nil {
			continue
		}
		t, _, _ := median(tRuns[b])
		m, _, _ := median(nRuns[b])
		if t > 0 && m > 0 {
			logSum += math.Log(m / t)
			n++
			bases = append(bases, b)
		}
	}
	machine := 1.0
	if n > 0 {
		machine = math.Exp(logSum / float64(n))
	}
	for _, l := range notes {
		fmt.Fprintf(out, "%s %s\n", name, l)
	}
	fmt.Fprintf(out, "machine: the baselines (%s) ran %.2f× as long as in %s\n\n", strings.Join(bases, ", "), machine, name)
	fmt.Fprintf(out, "| benchmark | then ns/op | now ns/op | now ÷ then | adjusted | |\n|---|---|---|---|---|---|\n")
	slower, compared := false, 0
	for _, b := range nOrder {
		if !isCharmgo(b) || tRuns[b] == nil {
			continue
		}
		t, _, _ := median(tRuns[b])
		m, _, _ := median(nRuns[b])
		if t <= 0 {
			continue
		}
		compared++
		adj := m / t / machine
		mark := ""
		switch {
		case adj > 1+tol:
			mark, slower = "SLOWER", true
		case adj < 1/(1+tol):
			mark = "faster"
		}
		fmt.Fprintf(out, "| %s | %.1f | %.1f | %.2f× | %.2f× | %s |\n", b, t, m, m/t, adj, mark)
	}
	if compared == 0 {
		return false, fmt.Errorf("no charmgo benchmark is in both %s and standard input", name)
	}
	return slower, nil
}
