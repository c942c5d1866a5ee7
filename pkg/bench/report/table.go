package report

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
)

// MainFigure is the figure a table's ratio column and the throughput chart
// use for an operation: MiB/s when it moves data, items/s when one operation
// covers many entries, ops/s otherwise.
func MainFigure(o OpFigures) (Figure, bool) {
	var ops, items, tput *Figure
	for i := range o.Figures {
		switch o.Figures[i].Name {
		case FigOpsRate:
			ops = &o.Figures[i]
		case FigItemsRate:
			items = &o.Figures[i]
		case FigThroughput:
			tput = &o.Figures[i]
		}
	}
	switch {
	case tput != nil:
		return *tput, true
	case items != nil:
		return *items, true
	case ops != nil:
		return *ops, true
	}
	return Figure{}, false
}

func figure(o OpFigures, name string) (Figure, bool) {
	for _, f := range o.Figures {
		if f.Name == name {
			return f, true
		}
	}
	return Figure{}, false
}

// Num formats a number with a k/M/G suffix and three significant digits.
func Num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimZeros(fmt.Sprintf("%.3g", v/1e9)) + "G"
	case a >= 1e6:
		return trimZeros(fmt.Sprintf("%.3g", v/1e6)) + "M"
	case a >= 1e4:
		return trimZeros(fmt.Sprintf("%.3g", v/1e3)) + "k"
	case a >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func trimZeros(s string) string {
	if strings.Contains(s, "e") {
		return s
	}
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Latency formats microseconds with a unit that keeps it short.
func Latency(us float64) string {
	switch {
	case math.IsNaN(us):
		return "-"
	case us >= 1e6:
		return fmt.Sprintf("%.2f s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.3g ms", us/1e3)
	}
	return fmt.Sprintf("%.3g µs", us)
}

func spread(f Figure) string {
	if f.N <= 1 {
		return Num(float64(f.Median))
	}
	return fmt.Sprintf("%s [%s–%s]", Num(float64(f.Median)), Num(float64(f.Min)), Num(float64(f.Max)))
}

// perSpread is spread for a ratio (requests per open): always two decimals
// below 100, so that 1 and 1.04 line up.
func perSpread(f Figure) string {
	one := func(v float64) string {
		if math.IsNaN(v) || math.Abs(v) >= 100 {
			return Num(v)
		}
		return fmt.Sprintf("%.2f", v)
	}
	if f.N <= 1 {
		return one(float64(f.Median))
	}
	return fmt.Sprintf("%s [%s–%s]", one(float64(f.Median)), one(float64(f.Min)), one(float64(f.Max)))
}

// Table renders the run as the terminal table: for every workload, one line
// per phase, operation and target, with median [min–max] over repetitions,
// latency percentiles and the ratio of the main figure to the first target.
func Table(r *Report) string {
	var b strings.Builder
	for _, w := range r.Workloads {
		c := w.Concurrency
		fmt.Fprintf(&b, "\n%s", w.Name)
		if d := w.Spec.Describe(); d != "" {
			fmt.Fprintf(&b, " (%s)", d)
		}
		reps := r.Config.Repetitions
		fmt.Fprintf(&b, " — %d node(s) × %d process(es), %d threads in all; %d repetition(s), median [min–max]\n",
			c.Nodes, c.Processes, c.Threads, reps)
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PHASE\tOP\tTARGET\tOPS/S\tMiB/S\tP50\tP99\tERRORS\tVS FIRST\t")
		for _, phase := range phaseNames(w) {
			for _, op := range opNames(w, phase) {
				for ti, t := range w.Targets {
					pf, of, ok := lookup(t, phase, op)
					if !ok {
						fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t\t\n", phase, op, t.Target)
						continue
					}
					cells := []string{phase, op, t.Target}
					if ti > 0 {
						cells[0], cells[1] = "", ""
					}
					if pf.Truncated {
						cells[0] += "*"
					}
					ops, _ := figure(of, FigOpsRate)
					cells = append(cells, spread(ops))
					if tp, ok := figure(of, FigThroughput); ok {
						cells = append(cells, spread(tp))
					} else if it, ok := figure(of, FigItemsRate); ok {
						cells = append(cells, spread(it)+" items/s")
					} else {
						cells = append(cells, "-")
					}
					p50, _ := figure(of, FigLatP50)
					p99, _ := figure(of, FigLatP99)
					errs, _ := figure(of, FigErrors)
					cells = append(cells, Latency(float64(p50.Median)), Latency(float64(p99.Median)), Num(float64(errs.Max)))
					ratio := ""
					if m, ok := MainFigure(of); ok && ti > 0 && !math.IsNaN(float64(m.RatioToFirst)) {
						ratio = fmt.Sprintf("%.2f×", float64(m.RatioToFirst))
					}
					cells = append(cells, ratio)
					fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
				}
			}
		}
		tw.Flush()
		for _, t := range w.Targets {
			for _, p := range t.Phases {
				var dur, rec Figure
				for _, f := range p.Figures {
					switch f.Name {
					case FigDuration:
						dur = f
					case "recorded_s":
						rec = f
					}
				}
				if rec.N > 0 && dur.N > 0 {
					fmt.Fprintf(&b, "  %s on %s: took %s s for a trace recorded over %s s (%.2f× the recorded time)\n",
						p.Phase, t.Target, spread(dur), Num(float64(rec.Median)), float64(dur.Median)/float64(rec.Median))
				}
			}
		}
		writeClientFigures(&b, w)
		if truncatedAny(w) {
			fmt.Fprintln(&b, "  * the phase hit its time bound (key duration) before finishing its count")
		}
		for _, t := range w.Targets {
			for _, p := range t.Phases {
				for _, o := range p.Ops {
					if o.FirstError != "" {
						fmt.Fprintf(&b, "  %s %s %s: first error: %s\n", t.Target, p.Phase, o.Op, o.FirstError)
					}
				}
			}
		}
	}
	if len(r.Failures) > 0 {
		fmt.Fprintf(&b, "\nFAILURES (%d)\n", len(r.Failures))
		for _, f := range r.Failures {
			who := "run"
			if f.Worker != "" {
				who = "worker " + f.Worker
			}
			fmt.Fprintf(&b, "  %s on %s, repetition %d: %s failed at %s: %s\n", f.Workload, f.Target, f.Repetition, who, f.Stage, f.Error)
		}
	}
	return b.String()
}

// writeClientFigures adds a line per phase and target with traffic
// figures (clientLines), and the phase's notes below it.
func writeClientFigures(b *strings.Builder, w WorkloadReport) {
	for _, l := range clientLines(w) {
		if l.Text != "" {
			fmt.Fprintf(b, "  %s on %s: %s\n", l.Phase, l.Target, l.Text)
		} else {
			fmt.Fprintf(b, "  %s on %s:\n", l.Phase, l.Target)
		}
		for _, n := range l.Notes {
			fmt.Fprintf(b, "    note: %s\n", n)
		}
	}
}

// clientLine is one phase on one target: the sentence with its traffic
// figures and the notes on what is missing.
type clientLine struct {
	Phase, Target, Text string
	Notes               []string
}

// clientLines describes, for every phase and target that has them, the
// client's own counts (the SDK backends: metadata requests per open and per
// operation, bytes sent to data nodes) and the counts from the meta nodes'
// metrics (requests and namespace fetches per open, or per operation in
// phases that open nothing; namespace replica bytes per entry) and the
// host's busy CPU time per operation, each labelled with where it comes
// from.
func clientLines(w WorkloadReport) []clientLine {
	var out []clientLine
	for _, t := range w.Targets {
		for _, p := range t.Phases {
			figs := map[string]Figure{}
			for _, f := range p.Figures {
				if f.N > 0 {
					figs[f.Name] = f
				}
			}
			var client []string
			if f, ok := figs["meta_requests_per_open"]; ok {
				client = append(client, perSpread(f)+" metadata requests per open")
			}
			if f, ok := figs["meta_requests_per_op"]; ok {
				what := " metadata requests per operation"
				if len(client) > 0 {
					what = " per operation"
				}
				client = append(client, perSpread(f)+what)
			}
			if f, ok := figs["data_sent_bytes"]; ok && f.Median > 0 {
				client = append(client, Num(float64(f.Median)/(1<<20))+" MiB sent to data nodes")
			}
			var server []string
			for _, c := range []struct{ fig, what string }{
				{"server_meta_requests", " metadata requests"}, {"server_ns_fetches", " namespace fetches"},
			} {
				if f, ok := figs[c.fig+"_per_open"]; ok {
					server = append(server, perSpread(f)+c.what+" per open")
				} else if f, ok := figs[c.fig+"_per_op"]; ok {
					server = append(server, perSpread(f)+c.what+" per operation")
				} else if f, ok := figs[c.fig]; ok {
					server = append(server, spread(f)+c.what)
				}
			}
			var parts []string
			if len(client) > 0 {
				parts = append(parts, strings.Join(client, ", ")+" (the client's count)")
			}
			if len(server) > 0 {
				from := " from the meta nodes' metrics"
				if f, ok := figs["server_meta_nodes"]; ok {
					from += fmt.Sprintf(" (%s nodes, every client of the cluster)", Num(float64(f.Median)))
				}
				parts = append(parts, strings.Join(server, " and ")+from)
			}
			if f, ok := figs["server_ns_replica_bytes_per_entry"]; ok {
				s := "namespace replicas " + Num(float64(f.Median)) + " B per entry"
				if e, ok := figs["server_ns_replica_entries"]; ok {
					s += " (" + Num(float64(e.Median)) + " entries at the end)"
				}
				parts = append(parts, s)
			}
			if f, ok := figs["host_cpu_ms_per_op"]; ok {
				s := perSpread(f) + " ms of the host's CPU per operation (every process and the kernel"
				if st, ok := figs["host_steal_seconds"]; ok && st.Median > 0 {
					if b, ok := figs["host_cpu_seconds"]; ok && b.Median > 0 && float64(st.Median) > 0.05*float64(b.Median) {
						s += "; the hypervisor took another " + Num(float64(st.Median)) + " s"
					}
				}
				parts = append(parts, s+")")
			}
			if len(server) == 0 && len(p.Notes) > 0 {
				parts = append(parts, "no counts from the meta nodes' metrics (see the notes)")
			}
			if len(parts) > 0 || len(p.Notes) > 0 {
				out = append(out, clientLine{Phase: p.Phase, Target: t.Target, Text: strings.Join(parts, "; "), Notes: p.Notes})
			}
		}
	}
	return out
}

func truncatedAny(w WorkloadReport) bool {
	for _, t := range w.Targets {
		for _, p := range t.Phases {
			if p.Truncated {
				return true
			}
		}
	}
	return false
}

// phaseNames lists the phases of a workload in order, across targets.
func phaseNames(w WorkloadReport) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range w.Targets {
		for _, p := range t.Phases {
			if !seen[p.Phase] {
				seen[p.Phase] = true
				out = append(out, p.Phase)
			}
		}
	}
	return out
}

func opNames(w WorkloadReport, phase string) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range w.Targets {
		for _, p := range t.Phases {
			if p.Phase != phase {
				continue
			}
			for _, o := range p.Ops {
				if !seen[o.Op] {
					seen[o.Op] = true
					out = append(out, o.Op)
				}
			}
		}
	}
	return out
}

func lookup(t TargetReport, phase, op string) (PhaseFigures, OpFigures, bool) {
	for _, p := range t.Phases {
		if p.Phase != phase {
			continue
		}
		for _, o := range p.Ops {
			if o.Op == op {
				return p, o, true
			}
		}
	}
	return PhaseFigures{}, OpFigures{}, false
}
