package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Charts are drawn with gonum/plot into PNG images (rasterized with the
// plot's own embedded fonts, so they look the same in every browser, offline)
// at twice the CSS size for sharp text on high-density screens.

// Palette gives each target a color, the same in every chart and legend.
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

// TargetColor is target i's color.
func TargetColor(i int) color.RGBA { return Palette[i%len(Palette)] }

const (
	panelW    = 3.3 * vg.Inch
	panelH    = 2.5 * vg.Inch
	chartDPI  = 192
	maxPanels = 48 // bounded: a workload with more phase/op pairs shows the first 48
)

func sansPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	for _, f := range []*plot.Axis{&p.X, &p.Y} {
		f.Label.TextStyle.Font.Variant = "Sans"
		f.Tick.Label.Font.Variant = "Sans"
		f.Tick.Label.Font.Size = vg.Points(8)
		f.Label.TextStyle.Font.Size = vg.Points(9)
	}
	p.Title.TextStyle.Font.Variant = "Sans"
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.Legend.TextStyle.Font.Variant = "Sans"
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.BackgroundColor = color.White
	return p
}

// grid draws panels (row-major, cols per row) into one PNG.
func grid(panels []*plot.Plot, cols int) ([]byte, error) {
	if len(panels) == 0 {
		return nil, nil
	}
	if len(panels) > maxPanels {
		panels = panels[:maxPanels]
	}
	cols = max(1, min(cols, len(panels)))
	rows := (len(panels) + cols - 1) / cols
	table := make([][]*plot.Plot, rows)
	for r := range table {
		table[r] = make([]*plot.Plot, cols)
		for c := range table[r] {
			if i := r*cols + c; i < len(panels) {
				table[r][c] = panels[i]
			}
		}
	}
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(cols)*panelW, vg.Length(rows)*panelH), vgimg.UseDPI(chartDPI),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 3}
	canvases := plot.Align(table, t, dc)
	for r := range table {
		for c := range table[r] {
			if table[r][c] != nil {
				table[r][c].Draw(canvases[r][c])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	return buf.Bytes(), nil
}

// panelKey is one (phase, op) of a workload.
type panelKey struct{ phase, op string }

func panelKeys(w WorkloadReport) []panelKey {
	var out []panelKey
	for _, ph := range phaseNames(w) {
		ops := opNames(w, ph)
		for _, op := range ops {
			if op == "wait" {
				continue // time spent waiting for other threads' output is not a rate
			}
			out = append(out, panelKey{ph, op})
		}
	}
	return out
}

func (k panelKey) title(multiOp bool) string {
	if multiOp {
		return k.phase + " · " + k.op
	}
	return k.phase
}

func multiOps(w WorkloadReport) bool {
	for _, ph := range phaseNames(w) {
		if len(opNames(w, ph)) > 1 {
			return true
		}
	}
	return false
}

// ThroughputChart draws one panel per phase and operation with a bar per
// target: the median of the main figure, whiskers from min to max.
func ThroughputChart(w WorkloadReport) ([]byte, error) {
	var panels []*plot.Plot
	multi := multiOps(w)
	for _, k := range panelKeys(w) {
		p := sansPlot(k.title(multi))
		unit := ""
		var ymax float64
		var values plotter.XYLabels
		for ti, t := range w.Targets {
			_, of, ok := lookup(t, k.phase, k.op)
			if !ok {
				continue
			}
			f, ok := MainFigure(of)
			if !ok || math.IsNaN(float64(f.Median)) {
				continue
			}
			unit = f.Unit
			bar, err := plotter.NewBarChart(plotter.Values{float64(f.Median)}, vg.Points(22))
			if err != nil {
				return nil, fmt.Errorf("bar chart: %w", err)
			}
			bar.XMin = float64(ti)
			bar.Color = TargetColor(ti)
			bar.LineStyle.Width = 0
			p.Add(bar)
			if f.N > 1 {
				eb, err := plotter.NewYErrorBars(errPoint{x: float64(ti), y: float64(f.Median),
					lo: float64(f.Median - f.Min), hi: float64(f.Max - f.Median)})
				if err == nil {
					eb.LineStyle.Width = vg.Points(1)
					eb.CapWidth = vg.Points(8)
					p.Add(eb)
				}
			}
			top := math.Max(float64(f.Max), float64(f.Median))
			ymax = max(ymax, top)
			values.XYs = append(values.XYs, plotter.XY{X: float64(ti), Y: top})
			values.Labels = append(values.Labels, Num(float64(f.Median)))
		}
		if unit == "" {
			continue
		}
		// The median's value above each bar (and its whisker).
		if lbl, err := plotter.NewLabels(values); err == nil {
			for i := range lbl.TextStyle {
				lbl.TextStyle[i].Font.Variant = "Sans"
				lbl.TextStyle[i].Font.Size = vg.Points(7.5)
				lbl.TextStyle[i].XAlign = draw.XCenter
			}
			lbl.Offset = vg.Point{Y: vg.Points(5)}
			p.Add(lbl)
		}
		p.Y.Label.Text = unit
		p.Y.Min, p.Y.Max = 0, ymax*1.2
		if ymax == 0 {
			p.Y.Max = 1
		}
		p.Y.Tick.Marker = linearTicks{}
		p.X.Min, p.X.Max = -0.7, float64(len(w.Targets))-0.3
		p.X.Tick.Marker = targetTicks(len(w.Targets))
		panels = append(panels, p)
	}
	return grid(panels, 4)
}

// errPoint is one point with asymmetric vertical error bars.
type errPoint struct{ x, y, lo, hi float64 }

func (e errPoint) Len() int                            { return 1 }
func (e errPoint) XY(int) (float64, float64)           { return e.x, e.y }
func (e errPoint) YError(int) (float64, float64)       { return e.lo, e.hi }
func (e errPoint) XError(int) (float64, float64)       { return 0, 0 }
func (e errPoint) Value(int) float64                   { return e.y }
func (e errPoint) XYValue(int) (float64, float64, int) { return e.x, e.y, 0 }

// targetTicks labels bar positions T1, T2, ... (the legend names them).
type targetTicks int

func (n targetTicks) Ticks(_, _ float64) []plot.Tick {
	var out []plot.Tick
	for i := 0; i < int(n); i++ {
		out = append(out, plot.Tick{Value: float64(i), Label: fmt.Sprintf("T%d", i+1)})
	}
	return out
}

// LatencyChart draws one panel per phase and operation: the latency at each
// percentile, one line per target, on a log scale.
func LatencyChart(w WorkloadReport) ([]byte, error) {
	names := []string{FigLatP50, FigLatP90, FigLatP99, FigLatP999, FigLatMax}
	labels := []string{"p50", "p90", "p99", "p99.9", "max"}
	var panels []*plot.Plot
	multi := multiOps(w)
	for _, k := range panelKeys(w) {
		p := sansPlot(k.title(multi))
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = durationTicks{}
		p.Y.Label.Text = "latency"
		any := false
		lo, hi := math.Inf(1), math.Inf(-1)
		for ti, t := range w.Targets {
			_, of, ok := lookup(t, k.phase, k.op)
			if !ok {
				continue
			}
			var pts plotter.XYs
			for i, n := range names {
				f, ok := figure(of, n)
				v := float64(f.Median)
				if !ok || math.IsNaN(v) {
					continue
				}
				v = math.Max(v, 0.01) // log scale: a zero latency shows at the floor
				pts = append(pts, plotter.XY{X: float64(i), Y: v})
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotterLinePoints(pts)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = TargetColor(ti), TargetColor(ti)
			line.Width = vg.Points(1.5)
			points.Radius = vg.Points(2.5)
			p.Add(line, points)
			any = true
		}
		if !any {
			continue
		}
		p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
		p.X.Min, p.X.Max = -0.3, float64(len(names))-0.7
		p.X.Tick.Marker = labelTicks(labels)
		panels = append(panels, p)
	}
	return grid(panels, 4)
}

func plotterLinePoints(pts plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, nil, fmt.Errorf("line: %w", err)
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, nil, fmt.Errorf("points: %w", err)
	}
	return l, s, nil
}

type labelTicks []string

func (l labelTicks) Ticks(_, _ float64) []plot.Tick {
	var out []plot.Tick
	for i, s := range l {
		out = append(out, plot.Tick{Value: float64(i), Label: s})
	}
	return out
}

// linearTicks marks a linear axis from its minimum with 4 to 6 steps of 1, 2,
// 2.5 or 5 times a power of ten, labelled compactly (25k, 1.5M).
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if !(span > 0) {
		return []plot.Tick{{Value: lo, Label: Num(lo)}}
	}
	raw := span / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag * 10
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	// One suffix for the whole axis, chosen by its top, so labels line up
	// (5k, 10k, 15k rather than 5000, 10k, 15k).
	div, suffix := 1.0, ""
	switch {
	case hi >= 1e9:
		div, suffix = 1e9, "G"
	case hi >= 1e6:
		div, suffix = 1e6, "M"
	case hi >= 1e4:
		div, suffix = 1e3, "k"
	}
	label := func(v float64) string {
		if v == 0 {
			return "0"
		}
		return trimZeros(fmt.Sprintf("%.4g", v/div)) + suffix
	}
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9 && len(out) < 20; v += step {
		out = append(out, plot.Tick{Value: v, Label: label(v)})
		// A minor tick halfway, unlabelled.
		if mid := v + step/2; mid < hi {
			out = append(out, plot.Tick{Value: mid})
		}
	}
	return out
}

// durationTicks marks a log axis in µs with readable units: powers of ten
// over wide ranges, finer mantissas over narrow ones, at most about 6 labels.
type durationTicks struct{}

func (durationTicks) Ticks(lo, hi float64) []plot.Tick {
	decades := math.Log10(hi / lo)
	var labelled, minor []float64
	switch {
	case decades > 1.5:
		labelled, minor = []float64{1}, []float64{2, 5}
	case decades > 0.6:
		labelled, minor = []float64{1, 2, 5}, []float64{3, 4, 6, 7, 8, 9}
	default:
		labelled, minor = []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8}, nil
	}
	var out []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)) && len(out) < 80; e++ {
		for _, set := range []struct {
			mantissas []float64
			label     bool
		}{{labelled, true}, {minor, false}} {
			for _, m := range set.mantissas {
				v := m * math.Pow(10, e)
				if v < lo || v > hi {
					continue
				}
				t := plot.Tick{Value: v}
				if set.label {
					t.Label = Latency(v)
				}
				out = append(out, t)
			}
		}
	}
	return out
}

// ScalingPoint is one sweep point of a series on a target.
type ScalingPoint struct {
	Threads int
	Value   Figure
}

// ScalingChart draws, for the workloads of one series (the points of a
// sweep), one panel per phase and operation: the main figure against the
// total number of threads, one line per target.
func ScalingChart(series []WorkloadReport, targets []string) ([]byte, error) {
	if len(series) < 2 {
		return nil, nil
	}
	sort.SliceStable(series, func(i, j int) bool { return series[i].Concurrency.Threads < series[j].Concurrency.Threads })
	var panels []*plot.Plot
	multi := multiOps(series[0])
	for _, k := range panelKeys(series[0]) {
		p := sansPlot(k.title(multi))
		p.X.Label.Text = "threads in all"
		unit := ""
		var ymax float64
		for ti, target := range targets {
			var pts plotter.XYs
			for _, w := range series {
				for _, t := range w.Targets {
					if t.Target != target {
						continue
					}
					_, of, ok := lookup(t, k.phase, k.op)
					if !ok {
						continue
					}
					f, ok := MainFigure(of)
					if !ok || math.IsNaN(float64(f.Median)) || w.Concurrency.Threads == 0 {
						continue
					}
					unit = f.Unit
					pts = append(pts, plotter.XY{X: float64(w.Concurrency.Threads), Y: float64(f.Median)})
					ymax = max(ymax, float64(f.Median))
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotterLinePoints(pts)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = TargetColor(ti), TargetColor(ti)
			line.Width = vg.Points(1.5)
			points.Radius = vg.Points(2.5)
			p.Add(line, points)
		}
		if unit == "" {
			continue
		}
		p.Y.Label.Text = unit
		p.Y.Min, p.Y.Max = 0, ymax*1.12
		p.Y.Tick.Marker = linearTicks{}
		p.X.Tick.Marker = threadTicks{}
		panels = append(panels, p)
	}
	return grid(panels, 4)
}

// threadTicks marks integer thread counts only.
type threadTicks struct{}

func (threadTicks) Ticks(lo, hi float64) []plot.Tick {
	step := math.Max(1, math.Pow(2, math.Floor(math.Log2(math.Max(1, (hi-lo)/6)))))
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi && len(out) < 40; v += step {
		out = append(out, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
	}
	return out
}
