// Command benchtable summarizes `go test -bench -count N` output: the median
// and min–max of each benchmark's ns/op, and within each family (the name
// before the first underscore) every entry's ratio to the family's first
// entry, which is charmgo's.
//
//	go test -run '^$' -bench . -count 5 ./bench/ | go run ./bench/cmd/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var line = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

type sample struct{ nsop, allocs float64 }

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	runs := map[string][]sample{}
	var order []string
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := m[1]
		s := sample{nsop: -1, allocs: -1}
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
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark lines on standard input")
	}
	med := map[string]float64{}
	fmt.Fprintf(out, "| benchmark | runs | median ns/op | min–max | allocs/op | ÷ first of family |\n|---|---|---|---|---|---|\n")
	for _, name := range order {
		ss := runs[name]
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = s.nsop
		}
		sort.Float64s(v)
		m := v[len(v)/2]
		if len(v)%2 == 0 {
			m = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
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
		fmt.Fprintf(out, "| %s | %d | %.1f | %.1f–%.1f | %s | %s |\n", name, len(v), m, v[0], v[len(v)-1], allocs, ratio)
	}
	return nil
}
