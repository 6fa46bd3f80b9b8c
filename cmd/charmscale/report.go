package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmgo/charmgo/internal/atomicfile"
)

// row is a point's figures over its runs: medians and spread.
type row struct {
	point
	Runs, Failed               int
	Ms                         spread // ms/step, each run's mean over its steps
	Wall                       spread // seconds
	SpeedUp, Efficiency        float64
	OverheadPct                float64 // against none at the same PEs and layout, no kill
	Recovery                   spread  // ms from the failure to the program resuming, runs with a kill
	CaughtUp                   spread  // ms from the failure to the run back where it was
	RolledBack                 float64 // PEs rolled back, median
	ExtraWall                  float64 // s: the median wall time over the failure-free point's, runs with a kill
	hasSpeedUp, hasOverhead    bool
	hasRecovery, hasRolledBack bool
}

// spread is a figure's median, least and most over a point's runs.
type spread struct{ Median, Min, Max float64 }

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Sorted(slices.Values(xs))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{m, s[0], s[len(s)-1]}
}

type report struct {
	sw        *sweep
	opt       options
	results   []result
	rows      []*row
	plotFiles []string
}

func newReport(sw *sweep, opt options, results []result) *report {
	rep := &report{sw: sw, opt: opt, results: results}
	byPoint := map[point]*row{}
	// rows in the sweep's order: layout, protocol, kill, then PEs
	for _, ppn := range sw.PPN {
		for _, ft := range sw.FT {
			for _, kill := range sw.Kills {
				for _, pes := range sw.PEs {
					p := point{PEs: pes, PPN: ppn, FT: ft, Kill: kill}
					r := &row{point: p}
					byPoint[p] = r
					rep.rows = append(rep.rows, r)
				}
			}
		}
	}
	ms, wall, rec, caught, rolled := map[point][]float64{}, map[point][]float64{}, map[point][]float64{}, map[point][]float64{}, map[point][]float64{}
	for _, res := range results {
		r := byPoint[res.point]
		r.Runs++
		if res.Failed != "" || res.Summary == nil {
			r.Failed++
			continue
		}
		if m := res.msPerStep(); m > 0 {
			ms[res.point] = append(ms[res.point], m)
		}
		wall[res.point] = append(wall[res.point], res.Summary.WallSeconds)
		if res.Kill != "-" {
			rec[res.point] = append(rec[res.point], res.Summary.FaultTolerance.RecoveryMs)
			caught[res.point] = append(caught[res.point], res.Summary.FaultTolerance.CaughtUpMs)
			rolled[res.point] = append(rolled[res.point], float64(res.Summary.FaultTolerance.PEsRolledBack))
		}
	}
	rep.rows = slices.DeleteFunc(rep.rows, func(r *row) bool { return r.Runs == 0 }) // left out of the plan
	for _, r := range rep.rows {
		r.Ms, r.Wall = spreadOf(ms[r.point]), spreadOf(wall[r.point])
		if len(rec[r.point]) > 0 {
			r.Recovery, r.CaughtUp, r.hasRecovery = spreadOf(rec[r.point]), spreadOf(caught[r.point]), true
			r.RolledBack, r.hasRolledBack = spreadOf(rolled[r.point]).Median, true
		}
	}
	// speed-up and efficiency against each series' fewest PEs, for the
	// runs without a failure (a failure's cost is its own column)
	for _, r := range rep.rows {
		if r.Kill != "-" {
			continue
		}
		var base *row
		for _, b := range rep.rows {
			if b.series() == r.series() && !math.IsNaN(b.Ms.Median) && (base == nil || b.PEs < base.PEs) {
				base = b
			}
		}
		if base == nil || math.IsNaN(r.Ms.Median) {
			continue
		}
		if sw.weak() { // the work grows with the PEs: efficiency is time against time
			r.Efficiency = base.Ms.Median / r.Ms.Median
			r.SpeedUp = r.Efficiency * float64(r.PEs) // scaled: the ideal is the PEs, as for strong scaling
		} else {
			r.SpeedUp = base.Ms.Median / r.Ms.Median * float64(base.PEs)
			r.Efficiency = r.SpeedUp / float64(r.PEs)
		}
		r.hasSpeedUp = true
	}
	// a failure's cost in wall time: against the same point without it
	for _, r := range rep.rows {
		if r.Kill == "-" || math.IsNaN(r.Wall.Median) {
			continue
		}
		if free, ok := byPoint[point{PEs: r.PEs, PPN: r.PPN, FT: r.FT, Kill: "-"}]; ok && !math.IsNaN(free.Wall.Median) {
			r.ExtraWall = r.Wall.Median - free.Wall.Median
		} else {
			r.ExtraWall = math.NaN()
		}
	}
	// fault tolerance's cost: against none at the same PEs and layout
	for _, r := range rep.rows {
		if r.FT == "none" || r.Kill != "-" || math.IsNaN(r.Ms.Median) {
			continue
		}
		if none, ok := byPoint[point{PEs: r.PEs, PPN: r.PPN, FT: "none", Kill: "-"}]; ok && !math.IsNaN(none.Ms.Median) {
			r.OverheadPct, r.hasOverhead = 100*(r.Ms.Median/none.Ms.Median-1), true
		}
	}
	return rep
}

// write writes the tables, the plots and scaling.md into OUT.
func (rep *report) write() error {
	out := rep.sw.Out
	if err := writeFile(filepath.Join(out, "table.csv"), rep.tableCSV()); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(out, "runs.csv"), rep.runsCSV()); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(out, "table.md"), []byte(rep.tableMarkdown())); err != nil {
		return err
	}
	files, err := rep.plots(filepath.Join(out, "plots"))
	if err != nil {
		return err
	}
	rep.plotFiles = files
	return writeFile(filepath.Join(out, "scaling.md"), []byte(rep.markdown(out)))
}

func writeFile(path string, b []byte) error {
	if err := atomicfile.WriteBytes(path, 0o644, false, b); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return ""
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

func (rep *report) tableCSV() []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"pes", "processes", "ppn", "protocol", "kill", "runs", "failed",
		"ms_per_step_median", "ms_per_step_min", "ms_per_step_max", "wall_s_median",
		"speedup", "efficiency", "ft_overhead_pct", "recovery_ms_median", "recovery_ms_min", "recovery_ms_max", "caught_up_ms_median", "caught_up_ms_min", "caught_up_ms_max", "extra_wall_s", "pes_rolled_back"})
	for _, r := range rep.rows {
		procs, ppn := 1, r.PEs
		if r.PPN > 0 {
			procs, ppn = r.PEs/r.PPN, r.PPN
		}
		opt := func(ok bool, x float64, prec int) string {
			if !ok {
				return ""
			}
			return num(x, prec)
		}
		w.Write([]string{strconv.Itoa(r.PEs), strconv.Itoa(procs), strconv.Itoa(ppn), r.FT, strings.TrimPrefix(r.Kill, "-"),
			strconv.Itoa(r.Runs), strconv.Itoa(r.Failed),
			num(r.Ms.Median, 4), num(r.Ms.Min, 4), num(r.Ms.Max, 4), num(r.Wall.Median, 3),
			opt(r.hasSpeedUp, r.SpeedUp, 3), opt(r.hasSpeedUp, r.Efficiency, 3), opt(r.hasOverhead, r.OverheadPct, 1),
			opt(r.hasRecovery, r.Recovery.Median, 2), opt(r.hasRecovery, r.Recovery.Min, 2), opt(r.hasRecovery, r.Recovery.Max, 2),
			opt(r.hasRecovery, r.CaughtUp.Median, 2), opt(r.hasRecovery, r.CaughtUp.Min, 2), opt(r.hasRecovery, r.CaughtUp.Max, 2),
			opt(r.hasRecovery, r.ExtraWall, 3),
			opt(r.hasRolledBack, r.RolledBack, 0)})
	}
	w.Flush()
	return b.Bytes()
}

func (rep *report) runsCSV() []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"id", "pes", "ppn", "protocol", "kill", "rep", "ok", "ms_per_step", "median_ms_per_step", "wall_s", "recovery_ms", "caught_up_ms", "pes_rolled_back", "failed"})
	for _, r := range rep.results {
		rec := []string{r.ID, strconv.Itoa(r.PEs), strconv.Itoa(r.PPN), r.FT, strings.TrimPrefix(r.Kill, "-"), strconv.Itoa(r.Rep)}
		if s := r.Summary; s != nil && r.Failed == "" {
			med := ""
			if s.Steps != nil {
				med = num(s.Steps.MedianMs, 4)
			}
			rec = append(rec, "true", num(r.msPerStep(), 4), med, num(s.WallSeconds, 3),
				num(s.FaultTolerance.RecoveryMs, 2), num(s.FaultTolerance.CaughtUpMs, 2), strconv.Itoa(s.FaultTolerance.PEsRolledBack), "")
		} else {
			rec = append(rec, "false", "", "", "", "", "", "", r.Failed)
		}
		w.Write(rec)
	}
	w.Flush()
	return b.Bytes()
}

func (rep *report) tableMarkdown() string {
	var b strings.Builder
	rec := slices.ContainsFunc(rep.rows, func(r *row) bool { return r.hasRecovery })
	ovh := slices.ContainsFunc(rep.rows, func(r *row) bool { return r.hasOverhead })
	b.WriteString("| PEs | processes × PEs | protocol | kill | runs | ms/step: median (min–max) | speed-up | efficiency |")
	sep := "|---:|---|---|---|---:|---:|---:|---:|"
	if ovh {
		b.WriteString(" FT overhead |")
		sep += "---:|"
	}
	if rec {
		b.WriteString(" recovery ms | caught up ms: median (min–max) | extra wall s | PEs rolled back |")
		sep += "---:|---:|---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, r := range rep.rows {
		kill := r.Kill
		if kill == "-" {
			kill = "—"
		}
		runs := strconv.Itoa(r.Runs)
		if r.Failed > 0 {
			runs = fmt.Sprintf("%d (%d failed)", r.Runs, r.Failed)
		}
		ms, su, eff := "—", "—", "—"
		if !math.IsNaN(r.Ms.Median) {
			ms = fmt.Sprintf("%.2f (%.2f–%.2f)", r.Ms.Median, r.Ms.Min, r.Ms.Max)
		}
		if r.hasSpeedUp {
			su, eff = fmt.Sprintf("%.2f", r.SpeedUp), fmt.Sprintf("%.0f%%", 100*r.Efficiency)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s |", r.PEs, r.layout(), r.FT, kill, runs, ms, su, eff)
		if ovh {
			o := "—"
			if r.hasOverhead {
				o = fmt.Sprintf("%+.1f%%", r.OverheadPct)
				if math.Abs(r.OverheadPct) < 0.05 {
					o = "0.0%"
				}
			}
			fmt.Fprintf(&b, " %s |", o)
		}
		if rec {
			o, cu, ex, rb := "—", "—", "—", "—"
			if r.hasRecovery {
				o = fmt.Sprintf("%.1f", r.Recovery.Median)
				cu = fmt.Sprintf("%.1f (%.1f–%.1f)", r.CaughtUp.Median, r.CaughtUp.Min, r.CaughtUp.Max)
				if !math.IsNaN(r.ExtraWall) {
					ex = fmt.Sprintf("%+.2f", r.ExtraWall)
				}
				rb = fmt.Sprintf("%.0f", r.RolledBack)
			}
			fmt.Fprintf(&b, " %s | %s | %s | %s |", o, cu, ex, rb)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// markdown is the report: what ran, where, the table, the plots (their
// paths relative to dir, where the Markdown goes).
func (rep *report) markdown(dir string) string {
	sw := rep.sw
	var b strings.Builder
	title := sw.Title
	if title == "" {
		title = "Scaling of " + filepath.Base(sw.Program)
	}
	fmt.Fprintf(&b, "### %s\n\n", title)
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Made by `%s` on %s (%d cores, %s, %s), %s.\n", rep.opt.commandLine, host, runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH,
		runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	if sw.weak() {
		var at []string
		for _, p := range sw.PEs {
			at = append(at, fmt.Sprintf("%d PEs: `%s`", p, strings.Join(sw.ArgsAt[p], " ")))
		}
		fmt.Fprintf(&b, "Weak scaling: the work grows with the PEs (%s); efficiency is the fewest PEs' ms/step over this one's, speed-up that times the PEs over the fewest.\n", strings.Join(at, ", "))
	} else {
		fmt.Fprintf(&b, "Strong scaling: `%s %s` at every PE count; speed-up is the fewest PEs' ms/step over this one's, times those PEs; efficiency is speed-up over PEs.\n",
			filepath.Base(sw.Program), strings.Join(sw.Args, " "))
	}
	fmt.Fprintf(&b, "Each point ran %d times, interleaved with the others; a run's ms/step is its mean over its steps, each step as it last ran (a checkpoint's time included; work a failure made the run do again is not: that is in the failure's columns), and the table gives the median and the spread (min–max) over its runs.", sw.Reps)
	if slices.ContainsFunc(rep.rows, func(r *row) bool { return r.hasOverhead }) {
		b.WriteString(" FT overhead is a protocol's median ms/step over `none`'s at the same PEs and layout.")
	}
	if slices.ContainsFunc(rep.rows, func(r *row) bool { return r.hasRecovery }) {
		b.WriteString(" For a failure: recovery and caught up are the runtime's own measures (the summary's `recovery_ms`, `caught_up_ms`), from the failure to the program resuming and to the run back where it was when the PE failed; extra wall is the run's median wall time over the same point's without the failure.")
	}
	b.WriteString("\n\n")
	b.WriteString(rep.tableMarkdown())
	b.WriteString("\n")
	for _, f := range rep.plotFiles {
		rel, err := filepath.Rel(dir, f)
		if err != nil {
			rel = f
		}
		name := strings.TrimSuffix(filepath.Base(f), filepath.Ext(f))
		fmt.Fprintf(&b, "![%s](%s)\n", strings.ReplaceAll(name, "_", " "), filepath.ToSlash(rel))
	}
	return b.String()
}

const (
	readmeBegin = "<!-- charmscale:begin -->"
	readmeEnd   = "<!-- charmscale:end -->"
)

// intoReadme puts the report between the markers of a Markdown file.
func (rep *report) intoReadme(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("flag --readme: %w", err)
	}
	s := string(b)
	i, j := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		return fmt.Errorf("flag --readme %s: no lines %s and %s (in that order) to put the report between", path, readmeBegin, readmeEnd)
	}
	body := rep.markdown(filepath.Dir(path))
	s = s[:i+len(readmeBegin)] + "\n" + body + s[j:]
	return writeFile(path, []byte(s))
}
