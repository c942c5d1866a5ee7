package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/bench/report"
)

func newBenchSummaryCmd() *cobra.Command {
	var (
		phase, op string
		tsv       bool
	)
	cmd := &cobra.Command{
		Use:   "summary REPORT",
		Short: "Print the main figures of a report, one line per phase, operation and target",
		Long: `Read a report (its directory or report.json) and print, for every workload,
phase, operation and target: operations/s, MiB/s, the main figure's ratio to
the first target, and the metadata requests per open — the client's own count
(SDK targets) and the count from the meta nodes' metrics (every client of the
cluster during the phase). --tsv prints tab-separated values with a header,
"-" where a figure is missing, for scripts.`,
		Example: `  cairn bench summary bench-reports/dl-traversal-20261122T101500Z --phase epoch-2
  cairn bench summary out/report.json --tsv`,
		Args: exactArgs(1, "the report directory or report.json"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if st, err := os.Stat(path); err == nil && st.IsDir() {
				path = filepath.Join(path, "report.json")
			}
			r, err := report.Read(path)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			rows := summaryRows(r, phase, op)
			if len(rows) == 0 {
				return usagef(cmd, "%s: no phase %q and operation %q in the report", path, phase, op)
			}
			writeSummary(cmd.OutOrStdout(), rows, tsv)
			return nil
		},
	}
	cmd.Flags().StringVar(&phase, "phase", "", "only this phase (e.g. epoch-2)")
	cmd.Flags().StringVar(&op, "op", "", "only this operation (e.g. read)")
	cmd.Flags().BoolVar(&tsv, "tsv", false, "tab-separated values with a header")
	return cmd
}

// summaryRow is one phase, operation and target of a report.
type summaryRow struct {
	workload, phase, op, target           string
	ops, mib, ratio                       float64
	clientPerOpen, serverPerOpen, fetches float64
	notes                                 int
}

func summaryRows(r *report.Report, phase, op string) []summaryRow {
	var out []summaryRow
	nan := math.NaN()
	median := func(figs []report.Figure, name string) float64 {
		for _, f := range figs {
			if f.Name == name && f.N > 0 {
				return float64(f.Median)
			}
		}
		return nan
	}
	for _, w := range r.Workloads {
		// Phase by phase, operation by operation, the targets in their
		// order, so that a phase's targets are next to each other.
		var keys [][2]string
		seen := map[[2]string]bool{}
		for _, t := range w.Targets {
			for _, p := range t.Phases {
				for _, o := range p.Ops {
					k := [2]string{p.Phase, o.Op}
					if !seen[k] && (phase == "" || p.Phase == phase) && (op == "" || o.Op == op) {
						seen[k] = true
						keys = append(keys, k)
					}
				}
			}
		}
		for _, k := range keys {
			for _, t := range w.Targets {
				for _, p := range t.Phases {
					if p.Phase != k[0] {
						continue
					}
					for _, o := range p.Ops {
						if o.Op != k[1] {
							continue
						}
						row := summaryRow{workload: w.Name, phase: p.Phase, op: o.Op, target: t.Target,
							ops: median(o.Figures, report.FigOpsRate), mib: median(o.Figures, report.FigThroughput), ratio: nan,
							clientPerOpen: median(p.Figures, "meta_requests_per_open"), serverPerOpen: median(p.Figures, "server_meta_requests_per_open"),
							fetches: median(p.Figures, "server_ns_fetches_per_open"), notes: len(p.Notes)}
						if m, ok := report.MainFigure(o); ok {
							row.ratio = float64(m.RatioToFirst)
						}
						out = append(out, row)
					}
				}
			}
		}
	}
	return out
}

func writeSummary(w io.Writer, rows []summaryRow, tsv bool) {
	num := func(v float64, digits int) string {
		if math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf("%.*f", digits, v)
	}
	if tsv {
		fmt.Fprintln(w, "workload\tphase\top\ttarget\tops_per_s\tmib_per_s\tratio_to_first\tclient_meta_requests_per_open\tserver_meta_requests_per_open\tserver_ns_fetches_per_open\tnotes")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.workload, r.phase, r.op, r.target,
				num(r.ops, 1), num(r.mib, 2), num(r.ratio, 3), num(r.clientPerOpen, 3), num(r.serverPerOpen, 3), num(r.fetches, 3), r.notes)
		}
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tPHASE\tOP\tTARGET\tOPS/S\tMiB/S\tVS FIRST\tMETA REQ/OPEN (CLIENT)\tMETA REQ/OPEN (META NODES)\tNS FETCHES/OPEN\t")
	for _, r := range rows {
		ratio := "first"
		if !math.IsNaN(r.ratio) {
			ratio = fmt.Sprintf("%.2f×", r.ratio)
		} else if r.target != rows[0].target {
			ratio = "-"
		}
		server := num(r.serverPerOpen, 2)
		if r.notes > 0 {
			server += " (see notes)"
		}
		cells := []string{r.workload, r.phase, r.op, r.target, report.Num(r.ops), num(r.mib, 1), ratio, num(r.clientPerOpen, 2), server, num(r.fetches, 2)}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	tw.Flush()
}
