package report

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Write creates dir if needed and writes report.json and report.html into it.
// It returns the paths written.
func Write(dir string, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create report directory: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode report.json: %w", err)
	}
	jp := filepath.Join(dir, "report.json")
	if err := writeFileAtomic(jp, append(js, '\n')); err != nil {
		return nil, err
	}
	page, err := HTML(r)
	if err != nil {
		return []string{jp}, err
	}
	hp := filepath.Join(dir, "report.html")
	if err := writeFileAtomic(hp, page); err != nil {
		return []string{jp}, err
	}
	return []string{jp, hp}, nil
}

// writeFileAtomic writes through a temporary file and a rename, so a reader
// never sees half a report.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Read loads a report.json and checks its schema.
func Read(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("report %s: %w", path, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("report %s: schema %q, want %q", path, r.Schema, Schema)
	}
	return &r, nil
}

type htmlChart struct {
	Title string
	Note  string
	Src   template.URL
	Width int // CSS pixels: the PNG is drawn at twice that
}

type htmlTarget struct {
	Label, Name, Color string
}

type htmlRow struct {
	Phase, Op, Target, Color  string
	Ops, Tput, P50, P99, Errs string
	Ratio                     string
	RatioClass                string
	First                     bool
	Truncated                 bool
}

type htmlWorkload struct {
	Name, Kind, Describe string
	Concurrency          Concurrency
	Charts               []htmlChart
	Rows                 []htmlRow
	Errors               []string
	Traffic              []clientLine
}

type htmlPage struct {
	R         *Report
	Targets   []htmlTarget
	Workloads []htmlWorkload
	Scaling   []htmlChart
	Failures  []Failure
	Hosts     []HostFacts
	Duration  string
}

func dataURL(png []byte) template.URL {
	return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png))
}

// chart wraps a PNG for the page, shown at half its pixel width (it is drawn
// at 192 dpi for sharp text on high-density screens).
func chart(title, note string, data []byte) htmlChart {
	c := htmlChart{Title: title, Note: note, Src: dataURL(data)}
	if cfg, err := png.DecodeConfig(bytes.NewReader(data)); err == nil {
		c.Width = cfg.Width / 2
	}
	return c
}

func hexColor(i int) string {
	c := TargetColor(i)
	return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
}

// HTML renders the report as one self-contained page: no scripts, no
// external style sheets or fonts, charts as inline PNG data.
func HTML(r *Report) ([]byte, error) {
	pg := htmlPage{R: r, Failures: r.Failures, Duration: r.FinishedAt.Sub(r.StartedAt).Round(1e8).String()}
	for i, t := range r.Config.Targets {
		pg.Targets = append(pg.Targets, htmlTarget{Label: fmt.Sprintf("T%d", i+1), Name: t, Color: hexColor(i)})
	}
	targetIndex := map[string]int{}
	for i, t := range r.Config.Targets {
		targetIndex[t] = i
	}
	seenHost := map[string]bool{}
	for _, w := range r.Workloads {
		hw := htmlWorkload{Name: w.Name, Kind: w.Kind, Concurrency: w.Concurrency}
		if w.Spec != nil {
			hw.Describe = w.Spec.Describe()
		}
		if img, err := ThroughputChart(w); err != nil {
			return nil, err
		} else if img != nil {
			hw.Charts = append(hw.Charts, chart("Throughput", "median over repetitions, whiskers from min to max; MiB/s where data moves, items/s for whole trees, operations/s otherwise", img))
		}
		if img, err := LatencyChart(w); err != nil {
			return nil, err
		} else if img != nil {
			hw.Charts = append(hw.Charts, chart("Latency percentiles", "median over repetitions, log scale", img))
		}
		for _, phase := range phaseNames(w) {
			for _, op := range opNames(w, phase) {
				for ti, t := range w.Targets {
					pf, of, ok := lookup(t, phase, op)
					if !ok {
						continue
					}
					row := htmlRow{Phase: phase, Op: op, Target: t.Target, Color: hexColor(targetIndex[t.Target]), First: ti == 0, Truncated: pf.Truncated}
					ops, _ := figure(of, FigOpsRate)
					row.Ops = spread(ops)
					row.Tput = "–"
					if tp, ok := figure(of, FigThroughput); ok {
						row.Tput = spread(tp)
					} else if it, ok := figure(of, FigItemsRate); ok {
						row.Tput = spread(it) + " items/s"
					}
					p50, _ := figure(of, FigLatP50)
					p99, _ := figure(of, FigLatP99)
					errs, _ := figure(of, FigErrors)
					row.P50, row.P99, row.Errs = Latency(float64(p50.Median)), Latency(float64(p99.Median)), Num(float64(errs.Max))
					if m, ok := MainFigure(of); ok && ti > 0 && !math.IsNaN(float64(m.RatioToFirst)) {
						v := float64(m.RatioToFirst)
						row.Ratio = fmt.Sprintf("%.2f×", v)
						switch {
						case v >= 1.05:
							row.RatioClass = "up"
						case v <= 0.95:
							row.RatioClass = "down"
						}
					}
					hw.Rows = append(hw.Rows, row)
					if of.FirstError != "" {
						hw.Errors = append(hw.Errors, fmt.Sprintf("%s · %s %s: %s", t.Target, phase, op, of.FirstError))
					}
				}
			}
		}
		hw.Traffic = clientLines(w)
		for _, t := range w.Targets {
			for _, rep := range t.Repetitions {
				for _, ws := range rep.Workers {
					if ws.Facts != nil && !seenHost[ws.Facts.Hostname+"|"+t.Target] {
						seenHost[ws.Facts.Hostname+"|"+t.Target] = true
						pg.Hosts = append(pg.Hosts, *ws.Facts)
					}
				}
			}
		}
		pg.Workloads = append(pg.Workloads, hw)
	}
	// Scaling: the workloads of each series with more than one point.
	bySeries := map[string][]WorkloadReport{}
	var order []string
	for _, w := range r.Workloads {
		if _, ok := bySeries[w.Series]; !ok {
			order = append(order, w.Series)
		}
		bySeries[w.Series] = append(bySeries[w.Series], w)
	}
	for _, s := range order {
		img, err := ScalingChart(bySeries[s], r.Config.Targets)
		if err != nil {
			return nil, err
		}
		if img != nil {
			key := "threads or processes"
			if r.Config.Sweep != nil {
				key = r.Config.Sweep.Key
			}
			pg.Scaling = append(pg.Scaling, chart(s, "median of the main figure against the total number of threads, sweeping "+key, img))
		}
	}
	sort.SliceStable(pg.Hosts, func(i, j int) bool { return pg.Hosts[i].Hostname < pg.Hosts[j].Hostname })
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, pg); err != nil {
		return nil, fmt.Errorf("render report.html: %w", err)
	}
	return buf.Bytes(), nil
}

var pageTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"bytes": func(n int64) string {
		if n <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	},
	"join": strings.Join,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cairn bench — {{.R.RunID}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",Arial,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#eceff1;padding:18px 28px}
header h1{margin:0 0 6px 0;font-size:22px} header .meta{font-size:13px;color:#b0bec5}
main{padding:8px 28px 40px 28px;max-width:1400px}
h2{margin-top:34px;border-bottom:2px solid #cfd8dc;padding-bottom:4px;font-size:19px}
h3{font-size:15px;margin:22px 0 4px 0;color:#37474f}
.note{font-size:12px;color:#607d8b;margin:0 0 6px 0}
.legend span{display:inline-block;margin:4px 18px 4px 0;font-size:14px}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
table{border-collapse:collapse;font-size:13px;background:#fff;margin:8px 0}
th,td{padding:4px 10px;border-bottom:1px solid #eceff1;text-align:right;white-space:nowrap}
th{background:#eceff1;color:#37474f;font-weight:600}
td.l,th.l{text-align:left}
tr.grp td{border-top:1px solid #b0bec5}
.up{color:#2e7d32;font-weight:600} .down{color:#c62828;font-weight:600}
img.chart{max-width:100%;height:auto;border:1px solid #e0e0e0;background:#fff}
.charts{display:flex;flex-wrap:wrap;gap:10px 22px;align-items:flex-start}
.charts figure{margin:0;max-width:100%}
.fail{background:#fff3f3;border-left:4px solid #c62828;padding:8px 12px;font-size:13px}
.err{font-size:12px;color:#b71c1c}
details{margin:8px 0} summary{cursor:pointer;color:#37474f}
code{font-size:12px}
ul.traffic{font-size:13px;margin:6px 0;padding-left:20px} ul.traffic li{margin:2px 0}
</style></head><body>
<header><h1>cairn bench report</h1>
<div class="meta">run {{.R.RunID}} · started {{.R.StartedAt.Format "2006-01-02 15:04:05 MST"}} · took {{.Duration}} · {{.R.Config.Repetitions}} repetition(s) per target, targets interleaved{{if .R.Config.RemoteWorkers}} · remote workers {{join .R.Config.RemoteWorkers ", "}}{{end}}</div></header>
<main>
<h2>Targets</h2>
<div class="legend">{{range .Targets}}<span><i class="sw" style="background:{{.Color}}"></i><b>{{.Label}}</b> {{.Name}}</span>{{end}}</div>
<p class="note">Ratios (“vs T1”) divide each target's median by the first target's; above 1 means more throughput for rates, longer time for latencies.</p>
{{if .Failures}}<h2>Failures</h2><div class="fail">{{range .Failures}}<div>{{.Workload}} on {{.Target}}, repetition {{.Repetition}}: {{if .Worker}}worker <b>{{.Worker}}</b>{{else}}run{{end}} failed at {{.Stage}}: {{.Error}}</div>{{end}}</div>{{end}}
{{range .Workloads}}
<h2>{{.Name}}</h2>
<p class="note">kind <b>{{.Kind}}</b>{{if .Describe}} · {{.Describe}}{{end}} · {{.Concurrency.Nodes}} node(s) × {{.Concurrency.Processes}} process(es), {{.Concurrency.Threads}} threads in all</p>
<div class="charts">{{range .Charts}}<figure{{if .Width}} style="width:{{.Width}}px"{{end}}><h3>{{.Title}}</h3><p class="note">{{.Note}}</p><img class="chart" alt="{{.Title}}" src="{{.Src}}"{{if .Width}} width="{{.Width}}"{{end}}></figure>{{end}}</div>
<h3>Figures</h3><p class="note">median [min–max] over repetitions{{if $.R.Config.Repetitions}}{{end}}; * = the phase hit its time bound</p>
<table><tr><th class="l">phase</th><th class="l">op</th><th class="l">target</th><th>ops/s</th><th>MiB/s</th><th>p50</th><th>p99</th><th>errors</th><th>vs T1</th></tr>
{{range .Rows}}<tr{{if .First}} class="grp"{{end}}><td class="l">{{if .First}}{{.Phase}}{{if .Truncated}}*{{end}}{{end}}</td><td class="l">{{if .First}}{{.Op}}{{end}}</td><td class="l"><i class="sw" style="background:{{.Color}}"></i>{{.Target}}</td><td>{{.Ops}}</td><td>{{.Tput}}</td><td>{{.P50}}</td><td>{{.P99}}</td><td>{{.Errs}}</td><td class="{{.RatioClass}}">{{.Ratio}}</td></tr>
{{end}}</table>
{{range .Errors}}<div class="err">first error: {{.}}</div>{{end}}
{{if .Traffic}}<h3>Metadata requests</h3><p class="note">the client's count: what this benchmark's client sent (SDK targets); from the meta nodes' metrics: what the meta nodes received from every client of the cluster during the phase, read before and after it</p>
<ul class="traffic">{{range .Traffic}}<li><b>{{.Phase}}</b> on {{.Target}}: {{.Text}}{{range .Notes}}<div class="err">note: {{.}}</div>{{end}}</li>{{end}}</ul>{{end}}
{{end}}
{{if .Scaling}}<h2>Scaling</h2><div class="charts">{{range .Scaling}}<figure{{if .Width}} style="width:{{.Width}}px"{{end}}><h3>{{.Title}}</h3><p class="note">{{.Note}}</p><img class="chart" alt="scaling of {{.Title}}" src="{{.Src}}"{{if .Width}} width="{{.Width}}"{{end}}></figure>{{end}}</div>{{end}}
<h2>Machines</h2>
<table><tr><th class="l">host</th><th class="l">kernel</th><th class="l">CPU</th><th>cores</th><th>memory</th><th class="l">target mounted on</th></tr>
<tr><td class="l">{{.R.Master.Hostname}} (master)</td><td class="l">{{.R.Master.Kernel}}</td><td class="l">{{.R.Master.CPUModel}}</td><td>{{.R.Master.CPUs}}</td><td>{{bytes .R.Master.MemoryBytes}}</td><td class="l"></td></tr>
{{range .Hosts}}<tr><td class="l">{{.Hostname}}</td><td class="l">{{.Kernel}}</td><td class="l">{{.CPUModel}}</td><td>{{.CPUs}}</td><td>{{bytes .MemoryBytes}}</td><td class="l">{{with .Target}}{{index . "path"}}: {{index . "fs_type"}} {{index . "mount_source"}} ({{index . "mount_options"}}){{end}}</td></tr>{{end}}
</table>
<details><summary>Command and configuration</summary><p><code>{{join .R.Command " "}}</code></p>
<p class="note">Every figure with its unit, every repetition and each workload's full configuration are in report.json next to this file.</p></details>
</main></body></html>
`))
