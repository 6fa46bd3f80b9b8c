package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// pointsWithSpread is a series' medians with their spread, for error bars.
type pointsWithSpread struct {
	plotter.XYs
	plotter.YErrors
}

// figure is one plot: a line per series, against the PEs.
type figure struct {
	file, title, yLabel string
	value               func(*row) (spread, bool) // the row's figure, if it has one
	include             func(*row) bool
	ideal               func(pes float64) float64 // a reference line, or nil
	idealName           string
	legendTop           bool // else at the bottom
	legendLeft          bool // else at the right
}

// plots draws the sweep's figures into dir; those with nothing to show
// (no protocol but none: no overhead) are left out.
func (rep *report) plots(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("the plots: %w", err)
	}
	noKill := func(r *row) bool { return r.Kill == "-" }
	if !slices.ContainsFunc(rep.rows, noKill) {
		noKill = func(*row) bool { return true }
	}
	weak := rep.sw.weak()
	figs := []figure{
		{file: "ms_per_step", title: "Time per step", yLabel: "ms/step (median, min–max)",
			value: func(r *row) (spread, bool) { return r.Ms, !math.IsNaN(r.Ms.Median) }, include: noKill, legendTop: true},
		{file: "speedup", title: map[bool]string{false: "Speed-up (strong scaling)", true: "Scaled speed-up (weak scaling)"}[weak], yLabel: "speed-up",
			value: func(r *row) (spread, bool) {
				return spread{r.SpeedUp, r.SpeedUp * r.Ms.Median / r.Ms.Max, r.SpeedUp * r.Ms.Median / r.Ms.Min}, r.hasSpeedUp
			},
			include: noKill, ideal: func(p float64) float64 { return p }, idealName: "ideal", legendTop: true, legendLeft: true},
		{file: "efficiency", title: map[bool]string{false: "Parallel efficiency (strong scaling)", true: "Parallel efficiency (weak scaling)"}[weak], yLabel: "efficiency",
			value: func(r *row) (spread, bool) {
				return spread{r.Efficiency, r.Efficiency * r.Ms.Median / r.Ms.Max, r.Efficiency * r.Ms.Median / r.Ms.Min}, r.hasSpeedUp
			},
			include: noKill, ideal: func(float64) float64 { return 1 }, idealName: "ideal", legendLeft: true},
		{file: "ft_overhead", title: "Fault tolerance's cost, failure-free", yLabel: "ms/step over none's (%)",
			value:   func(r *row) (spread, bool) { return spread{r.OverheadPct, r.OverheadPct, r.OverheadPct}, r.hasOverhead },
			include: func(r *row) bool { return r.hasOverhead }, ideal: func(float64) float64 { return 0 }, idealName: "none", legendTop: true, legendLeft: true},
		{file: "recovery", title: "Recovering from one failure", yLabel: "ms from the failure until caught up",
			value:   func(r *row) (spread, bool) { return r.CaughtUp, r.hasRecovery },
			include: func(r *row) bool { return r.hasRecovery }, legendTop: true, legendLeft: true},
	}
	var files []string
	for _, f := range figs {
		path := filepath.Join(dir, f.file+"."+rep.opt.plots)
		drawn, err := rep.drawFigure(f, path)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", path, err)
		}
		if drawn {
			files = append(files, path)
		} else {
			os.Remove(path) // a figure a sweep before drew, with nothing to show now
		}
	}
	return files, nil
}

func (rep *report) drawFigure(f figure, path string) (bool, error) {
	p := plot.New()
	p.Title.Text = f.title
	p.X.Label.Text = "PEs"
	p.Y.Label.Text = f.yLabel
	p.Legend.Top, p.Legend.Left = f.legendTop, f.legendLeft
	var ticks []plot.Tick
	for _, pes := range slices.Sorted(slices.Values(rep.sw.PEs)) {
		ticks = append(ticks, plot.Tick{Value: float64(pes), Label: strconv.Itoa(pes)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	// one line per series, in the table's order
	var order []point
	bySeries := map[point]*pointsWithSpread{}
	for _, r := range rep.rows {
		if !f.include(r) {
			continue
		}
		v, ok := f.value(r)
		if !ok {
			continue
		}
		s := r.series()
		ps := bySeries[s]
		if ps == nil {
			ps = &pointsWithSpread{}
			bySeries[s] = ps
			order = append(order, s)
		}
		ps.XYs = append(ps.XYs, plotter.XY{X: float64(r.PEs), Y: v.Median})
		ps.YErrors = append(ps.YErrors, struct{ Low, High float64 }{v.Median - v.Min, v.Max - v.Median})
	}
	if len(order) == 0 {
		return false, nil
	}
	for i, s := range order {
		ps := bySeries[s]
		line, marks, err := plotter.NewLinePoints(ps.XYs)
		if err != nil {
			return false, err
		}
		line.Color, marks.Color = plotutil.Color(i), plotutil.Color(i)
		line.Width = vg.Points(1.5)
		marks.Shape = plotutil.Shape(i)
		bars, err := plotter.NewYErrorBars(ps)
		if err != nil {
			return false, err
		}
		bars.Color = plotutil.Color(i)
		bars.CapWidth = vg.Points(6)
		p.Add(line, marks, bars)
		p.Legend.Add(s.seriesName(), line, marks)
	}
	if f.ideal != nil {
		ref := plotter.NewFunction(f.ideal)
		ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		ref.Color = color.Gray{Y: 0x60}
		p.Add(ref)
		p.Legend.Add(f.idealName, ref)
	}
	lo, hi := float64(slices.Min(rep.sw.PEs)), float64(slices.Max(rep.sw.PEs))
	pad := math.Max(0.3, (hi-lo)*0.05)
	p.X.Min, p.X.Max = lo-pad, hi+pad
	if f.ideal != nil {
		p.Y.Min = math.Min(p.Y.Min, f.ideal(lo))
		p.Y.Max = math.Max(p.Y.Max, f.ideal(hi))
	}
	p.Y.Min = math.Min(p.Y.Min, 0)        // from zero: a ratio read off a bar from zero
	p.Y.Max += 0.08 * (p.Y.Max - p.Y.Min) // room for the lines at the top
	p.Add(plotter.NewGrid())
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.ThumbnailWidth = vg.Points(24)
	return true, p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
