// Package report turns the measurements of a cairn bench run into what people
// read: the figures (every one with its unit, over repetitions as
// min/median/max, and as a ratio to the first target), the terminal table,
// report.json and an offline report.html with charts. Building figures from
// results is pure; only Write touches the disk.
package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/stats"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

// Schema identifies the layout of report.json; it changes when a field
// changes meaning or disappears.
const Schema = "cairn-bench-report/1"

// HostFacts describe a machine that ran a master or workers.
type HostFacts struct {
	Hostname    string            `json:"hostname"`
	OS          string            `json:"os"`
	Kernel      string            `json:"kernel"`
	Arch        string            `json:"arch"`
	CPUs        int               `json:"cpus"`
	CPUModel    string            `json:"cpu_model,omitempty"`
	MemoryBytes int64             `json:"memory_bytes,omitempty"`
	GoVersion   string            `json:"go_version"`
	Target      map[string]string `json:"target,omitempty"` // what the target is mounted on, seen from this host
}

// Config is how the run was invoked.
type Config struct {
	Targets        []string        `json:"targets"`
	RemoteWorkers  []string        `json:"remote_workers,omitempty"`
	LocalWorkers   bool            `json:"local_workers"`
	Repetitions    int             `json:"repetitions"`
	Sweep          *workload.Sweep `json:"sweep,omitempty"`
	SetupTimeoutS  float64         `json:"setup_timeout_s"`
	WorkerTimeoutS float64         `json:"worker_timeout_s,omitempty"`
}

// Report is the whole of report.json.
type Report struct {
	Schema     string           `json:"schema"`
	Tool       string           `json:"tool"`
	RunID      string           `json:"run_id"`
	Command    []string         `json:"command,omitempty"`
	StartedAt  time.Time        `json:"started_at"`
	FinishedAt time.Time        `json:"finished_at"`
	Master     HostFacts        `json:"master"`
	Config     Config           `json:"config"`
	Workloads  []WorkloadReport `json:"workloads"`
	Failures   []Failure        `json:"failures"`
}

// Concurrency is the parallelism a workload ran with.
type Concurrency struct {
	Nodes     int `json:"nodes"`
	Processes int `json:"processes"` // worker processes in total
	Threads   int `json:"threads"`   // threads in total
}

// WorkloadReport is one workload (one point of a sweep) on every target.
type WorkloadReport struct {
	Name        string         `json:"name"`
	Kind        string         `json:"kind"`
	Series      string         `json:"series"` // the name without the sweep point: points of one series form a scaling curve
	Spec        *workload.Spec `json:"spec"`
	Concurrency Concurrency    `json:"concurrency"`
	Targets     []TargetReport `json:"targets"`
}

// TargetReport is one workload on one target: every repetition, and the
// figures over them.
type TargetReport struct {
	Target      string         `json:"target"`
	Repetitions []Repetition   `json:"repetitions"`
	Phases      []PhaseFigures `json:"phases"`
}

// Repetition is one run of a workload on a target: each worker's fate and the
// phases merged across workers.
type Repetition struct {
	Index     int                    `json:"index"`
	StartedAt time.Time              `json:"started_at"`
	DurationS float64                `json:"duration_s"`
	Workers   []WorkerStatus         `json:"workers"`
	Phases    []workload.PhaseResult `json:"phases"`
	Error     string                 `json:"error,omitempty"`
}

// WorkerStatus says how one worker process fared.
type WorkerStatus struct {
	Name    string     `json:"name"`
	Node    string     `json:"node"` // "local" or the remote address
	Host    string     `json:"host,omitempty"`
	Threads int        `json:"threads"`
	Status  string     `json:"status"` // ok, partial (stopped early), failed
	Error   string     `json:"error,omitempty"`
	Facts   *HostFacts `json:"facts,omitempty"`
}

// Failure is a worker or run that went wrong, named, with the stage.
type Failure struct {
	Workload   string `json:"workload"`
	Target     string `json:"target"`
	Repetition int    `json:"repetition"`
	Worker     string `json:"worker,omitempty"`
	Stage      string `json:"stage"` // connect, setup, run, cleanup
	Error      string `json:"error"`
}

// PhaseFigures are the figures of one phase over the repetitions.
type PhaseFigures struct {
	Phase     string      `json:"phase"`
	Truncated bool        `json:"truncated,omitempty"`
	Figures   []Figure    `json:"figures"` // of the phase as a whole
	Ops       []OpFigures `json:"ops"`
	// Notes say which figures are missing and why (a meta node whose
	// metrics could not be read), prefixed with the repetition when there
	// are several.
	Notes []string `json:"notes,omitempty"`
}

// OpFigures are the figures of one operation of a phase.
type OpFigures struct {
	Op         string   `json:"op"`
	FirstError string   `json:"first_error,omitempty"`
	Figures    []Figure `json:"figures"`
}

// Figure is one measured quantity over repetitions.
type Figure struct {
	Name   string        `json:"name"`
	Unit   string        `json:"unit"`
	Better string        `json:"better,omitempty"` // "higher" or "lower"; empty when neither
	Values []stats.Float `json:"values"`           // one per repetition, null where a repetition lacks it
	stats.Summary
	// RatioToFirst is this target's median over the first target's median,
	// null for the first target and where either is missing or zero.
	RatioToFirst stats.Float `json:"ratio_to_first"`
}

// Figure names. Rates are over the phase's window: the earliest start to the
// latest end across all workers.
const (
	FigOpsRate    = "ops_rate"
	FigThroughput = "throughput"
	FigItemsRate  = "items_rate"
	FigLatMean    = "latency_mean"
	FigLatP50     = "latency_p50"
	FigLatP90     = "latency_p90"
	FigLatP99     = "latency_p99"
	FigLatP999    = "latency_p999"
	FigLatMax     = "latency_max"
	FigOps        = "ops"
	FigBytes      = "bytes"
	FigErrors     = "errors"
	FigBytesPerOp = "bytes_per_op"
	FigDuration   = "duration"
)

// Latencies lists the latency figures with their quantile (0 for the mean, 1
// for the maximum).
var Latencies = []struct {
	Name string
	Q    float64
}{{FigLatMean, 0}, {FigLatP50, 0.5}, {FigLatP90, 0.9}, {FigLatP99, 0.99}, {FigLatP999, 0.999}, {FigLatMax, 1}}

type pointFigure struct {
	name, unit, better string
	v                  float64
}

// opPoint computes one operation's figures in one repetition.
func opPoint(o *workload.OpResult, window time.Duration) []pointFigure {
	out := []pointFigure{{FigOpsRate, "ops/s", "higher", stats.Rate(float64(o.Count), window)}}
	if o.Bytes > 0 {
		out = append(out, pointFigure{FigThroughput, "MiB/s", "higher", stats.Rate(float64(o.Bytes)/(1<<20), window)})
		out = append(out, pointFigure{FigBytesPerOp, "B", "", float64(o.Bytes) / float64(max(o.Count, 1))})
	}
	if o.Items > 0 {
		out = append(out, pointFigure{FigItemsRate, "items/s", "higher", stats.Rate(float64(o.Items), window)})
	}
	for _, l := range Latencies {
		var d time.Duration
		switch l.Name {
		case FigLatMean:
			d = o.Latency.Mean()
		case FigLatMax:
			d = o.Latency.Max()
		default:
			d = o.Latency.Quantile(l.Q)
		}
		out = append(out, pointFigure{l.Name, "µs", "lower", float64(d) / 1e3})
	}
	out = append(out,
		pointFigure{FigOps, "count", "", float64(o.Count)},
		pointFigure{FigBytes, "B", "", float64(o.Bytes)},
		pointFigure{FigErrors, "count", "lower", float64(o.Errors)})
	return out
}

// Summarize computes a target's phase figures from its repetitions. Phases
// and operations keep the order of their first appearance.
func Summarize(reps []Repetition) []PhaseFigures {
	type key struct{ phase, op, fig string }
	values := map[key][]stats.Float{}
	meta := map[key]pointFigure{}
	var phaseOrder []string
	opOrder := map[string][]string{}
	figOrder := map[[2]string][]string{}
	truncated := map[string]bool{}
	notes := map[string][]string{}
	firstErr := map[[2]string]string{}
	seenPhase, seenOp := map[string]bool{}, map[[2]string]bool{}
	add := func(k key, f pointFigure, rep, n int) {
		v := values[k]
		for len(v) < n {
			v = append(v, stats.Float(math.NaN()))
		}
		if _, ok := meta[k]; !ok {
			meta[k] = f
			figOrder[[2]string{k.phase, k.op}] = append(figOrder[[2]string{k.phase, k.op}], k.fig)
		}
		v[rep] = stats.Float(f.v)
		values[k] = v
	}
	for ri, r := range reps {
		for _, p := range r.Phases {
			if !seenPhase[p.Name] {
				seenPhase[p.Name] = true
				phaseOrder = append(phaseOrder, p.Name)
			}
			truncated[p.Name] = truncated[p.Name] || p.Truncated
			for _, n := range p.Notes {
				if len(reps) > 1 {
					n = fmt.Sprintf("repetition %d: %s", r.Index, n)
				}
				if !slices.Contains(notes[p.Name], n) {
					notes[p.Name] = append(notes[p.Name], n)
				}
			}
			window := time.Duration(p.EndNs - p.StartNs)
			add(key{p.Name, "", FigDuration}, pointFigure{FigDuration, "s", "lower", window.Seconds()}, ri, len(reps))
			for _, x := range sortedExtra(p.Extra) {
				add(key{p.Name, "", x}, pointFigure{x, extraUnit(x), "", p.Extra[x]}, ri, len(reps))
			}
			for i := range p.Ops {
				o := &p.Ops[i]
				ok := [2]string{p.Name, o.Name}
				if !seenOp[ok] {
					seenOp[ok] = true
					opOrder[p.Name] = append(opOrder[p.Name], o.Name)
				}
				if firstErr[ok] == "" {
					firstErr[ok] = o.FirstError
				}
				for _, f := range opPoint(o, window) {
					add(key{p.Name, o.Name, f.name}, f, ri, len(reps))
				}
			}
		}
	}
	build := func(phase, op string) []Figure {
		var out []Figure
		for _, fn := range figOrder[[2]string{phase, op}] {
			k := key{phase, op, fn}
			m := meta[k]
			v := values[k]
			for len(v) < len(reps) {
				v = append(v, stats.Float(math.NaN()))
			}
			fl := make([]float64, len(v))
			for i, x := range v {
				fl[i] = float64(x)
			}
			out = append(out, Figure{Name: fn, Unit: m.unit, Better: m.better, Values: v, Summary: stats.Summarize(fl),
				RatioToFirst: stats.Float(math.NaN())})
		}
		return out
	}
	var out []PhaseFigures
	for _, ph := range phaseOrder {
		pf := PhaseFigures{Phase: ph, Truncated: truncated[ph], Figures: build(ph, ""), Notes: notes[ph]}
		for _, op := range opOrder[ph] {
			pf.Ops = append(pf.Ops, OpFigures{Op: op, FirstError: firstErr[[2]string{ph, op}], Figures: build(ph, op)})
		}
		out = append(out, pf)
	}
	return out
}

func sortedExtra(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// extraUnit reads the unit from an extra figure's name suffix (recorded_s).
func extraUnit(name string) string {
	switch {
	case strings.HasSuffix(name, "_bytes_per_entry"):
		return "B"
	case strings.HasSuffix(name, "_seconds"):
		return "s"
	case strings.HasSuffix(name, "_ms_per_op"):
		return "ms"
	case len(name) > 2 && name[len(name)-2:] == "_s":
		return "s"
	case len(name) > 6 && name[len(name)-6:] == "_bytes":
		return "B"
	}
	return "count"
}

// SetRatios fills RatioToFirst of every figure of every target after the
// first, against the same figure of the first target.
func SetRatios(w *WorkloadReport) {
	if len(w.Targets) == 0 {
		return
	}
	first := map[[3]string]float64{}
	for _, p := range w.Targets[0].Phases {
		for _, f := range p.Figures {
			first[[3]string{p.Phase, "", f.Name}] = float64(f.Median)
		}
		for _, o := range p.Ops {
			for _, f := range o.Figures {
				first[[3]string{p.Phase, o.Op, f.Name}] = float64(f.Median)
			}
		}
	}
	ratio := func(k [3]string, f *Figure) {
		base, ok := first[k]
		m := float64(f.Median)
		if ok && base != 0 && !math.IsNaN(base) && !math.IsNaN(m) {
			f.RatioToFirst = stats.Float(m / base)
		}
	}
	for ti := 1; ti < len(w.Targets); ti++ {
		for pi := range w.Targets[ti].Phases {
			p := &w.Targets[ti].Phases[pi]
			for fi := range p.Figures {
				ratio([3]string{p.Phase, "", p.Figures[fi].Name}, &p.Figures[fi])
			}
			for oi := range p.Ops {
				o := &p.Ops[oi]
				for fi := range o.Figures {
					ratio([3]string{p.Phase, o.Op, o.Figures[fi].Name}, &o.Figures[fi])
				}
			}
		}
	}
}

// Find returns a figure of a target's phase (op "" for phase-level figures).
func (t *TargetReport) Find(phase, op, fig string) (Figure, bool) {
	for _, p := range t.Phases {
		if p.Phase != phase {
			continue
		}
		figs := p.Figures
		if op != "" {
			figs = nil
			for _, o := range p.Ops {
				if o.Op == op {
					figs = o.Figures
				}
			}
		}
		for _, f := range figs {
			if f.Name == fig {
				return f, true
			}
		}
	}
	return Figure{}, false
}
