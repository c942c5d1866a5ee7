package lab

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cairnfs/cairn/pkg/history"
)

// Stall is how one fault of a run hurt the clients: the longest time,
// while it was in force, in which no write (no read) of any client
// succeeded. With every worker waiting on the fault's victim, it is the
// time the cluster took to route around it.
type Stall struct {
	Fault       int           `json:"fault"`
	Spec        string        `json:"spec"`
	Kind        FaultKind     `json:"kind"`
	Lasted      time.Duration `json:"lasted"`
	LongestGapW time.Duration `json:"longest_write_gap"`
	LongestGapR time.Duration `json:"longest_read_gap"`
}

func isWrite(k history.Kind) bool {
	switch k {
	case history.Write, history.Append, history.Create, history.Unlink, history.Rename:
		return true
	}
	return false
}

// Stalls measures each injected fault of events against the operations.
func Stalls(ops []history.Op, events []NemesisEvent) []Stall {
	type span struct {
		at, heal time.Duration
		spec     string
	}
	spans := map[int]*span{}
	var order []int
	for _, e := range events {
		if e.Err != "" {
			continue
		}
		if !e.Heal {
			spans[e.Fault] = &span{at: e.At, heal: -1, spec: e.Spec}
			order = append(order, e.Fault)
		} else if sp := spans[e.Fault]; sp != nil {
			sp.heal = e.At
		}
	}
	var out []Stall
	for _, id := range order {
		sp := spans[id]
		if sp.heal < 0 {
			continue
		}
		kind, _, _ := strings.Cut(sp.spec, " ")
		st := Stall{Fault: id, Spec: sp.spec, Kind: FaultKind(kind), Lasted: sp.heal - sp.at}
		st.LongestGapW = stallOf(ops, sp.at, sp.heal, true)
		st.LongestGapR = stallOf(ops, sp.at, sp.heal, false)
		out = append(out, st)
	}
	return out
}

// stallOf is the longest time in [at, heal] between successes of writes
// (or reads), counting from at and to heal.
func stallOf(ops []history.Op, at, heal time.Duration, writes bool) (gap time.Duration) {
	var ends []time.Duration
	for _, op := range ops {
		if !op.Final && op.Outcome == history.OK && isWrite(op.Kind) == writes {
			if end := time.Duration(op.End); end >= at && end <= heal {
				ends = append(ends, end)
			}
		}
	}
	slices.Sort(ends)
	last := at
	for _, e := range ends {
		gap = max(gap, e-last)
		last = e
	}
	return max(gap, heal-last)
}

// writeReport writes report.md and timeline.svg into the run's directory.
func writeReport(r *JepsenResult, ops []history.Op) error {
	var b strings.Builder
	verdict := "no anomaly found"
	if r.Failed() {
		verdict = "FAILED"
	}
	c := countOutcomes(ops)
	fmt.Fprintf(&b, "# Nemesis run, seed %d: %s\n\n", r.Seed, verdict)
	fmt.Fprintf(&b, "%v of faults; %d operations (%d ok, %d failed, %d unknown); %d faults injected.\n\n",
		r.Duration, c.total, c.ok, c.fail, c.unknown, len(r.Stalls))
	fmt.Fprintf(&b, "![timeline](timeline.svg)\n\n## Checker\n\n```\n%s\n```\n\n", r.Report.String())
	if r.Recovered {
		fmt.Fprintf(&b, "Every node alive and every partition healthy %.1fs after the heal.\n\n", r.RecoveredIn.Seconds())
	} else {
		fmt.Fprintf(&b, "**Not recovered** %.0fs after the heal: %s\n\n", r.RecoveredIn.Seconds(), r.Unrecovered)
	}
	fsck := "clean"
	if !r.FsckClean {
		fsck = "**not clean**"
	}
	fmt.Fprintf(&b, "`cairn fsck`: %s\n\n```\n%s\n```\n\n", fsck, r.Fsck)
	if r.Reclaimed > 0 {
		fmt.Fprintf(&b, "The first check found %d orphan inodes left by operations cut short; the masters' sweeper reclaimed them", r.Reclaimed)
		if r.FsckClean {
			fmt.Fprintf(&b, " within %.0fs.\n\n", r.ReclaimedIn.Seconds())
		} else {
			b.WriteString(" not all within the wait.\n\n")
		}
	}
	b.WriteString("## Faults\n\nSeconds; a gap is the longest time while the fault was in force in which no write (no read) of any client succeeded.\n\n")
	b.WriteString("| fault | lasted | write gap | read gap |\n|---|---:|---:|---:|\n")
	for _, s := range r.Stalls {
		fmt.Fprintf(&b, "| %d `%s` | %.1f | %.1f | %.1f |\n", s.Fault, s.Spec, s.Lasted.Seconds(), s.LongestGapW.Seconds(), s.LongestGapR.Seconds())
	}
	for _, e := range r.Events {
		if e.Err != "" {
			fmt.Fprintf(&b, "\nNot injected at %.1fs: `%s`: %s\n", e.At.Seconds(), e.Spec, e.Err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.Out, "report.md"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("jepsen report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.Out, "timeline.svg"), []byte(timelineSVG(r, ops)), 0o644); err != nil {
		return fmt.Errorf("jepsen report: %w", err)
	}
	return nil
}

// timelineSVG draws, per second, the operations that completed (ok,
// failed, unknown, stacked) and the slowest one's latency, under bands for
// the faults in force.
func timelineSVG(r *JepsenResult, ops []history.Op) string {
	const (
		w, h             = 1000, 420
		left, right, top = 60, 20, 20
		rateH, latH, gap = 160, 140, 40
	)
	var end time.Duration = r.Duration
	for _, op := range ops {
		if !op.Final {
			end = max(end, time.Duration(op.End))
		}
	}
	secsN := int(math.Ceil(end.Seconds())) + 1
	okN, failN, unkN := make([]int, secsN), make([]int, secsN), make([]int, secsN)
	lat := make([]time.Duration, secsN)
	for _, op := range ops {
		if op.Final {
			continue
		}
		i := min(int(time.Duration(op.End).Seconds()), secsN-1)
		switch op.Outcome {
		case history.OK:
			okN[i]++
		case history.Fail:
			failN[i]++
		default:
			unkN[i]++
		}
		lat[i] = max(lat[i], time.Duration(op.End-op.Start))
	}
	maxRate := 1
	for i := range okN {
		maxRate = max(maxRate, okN[i]+failN[i]+unkN[i])
	}
	x := func(t float64) float64 { return left + t/float64(secsN)*(w-left-right) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	// Fault bands.
	starts := map[int]NemesisEvent{}
	for _, e := range r.Events {
		if e.Err != "" {
			continue
		}
		if !e.Heal {
			starts[e.Fault] = e
			continue
		}
		if s, ok := starts[e.Fault]; ok {
			x0, x1 := x(s.At.Seconds()), x(e.At.Seconds())
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f4c7c3" opacity="0.5"/>`+"\n", x0, top, max(x1-x0, 1), rateH+gap+latH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" transform="rotate(90 %.1f %d)" fill="#a33">%s</text>`+"\n", x0+2, top+2, x0+2, top+2, html.EscapeString(s.Spec))
		}
	}
	// Completed operations per second.
	bw := max((w-left-right)/float64(secsN), 1)
	for i := range okN {
		y := float64(top + rateH)
		for _, part := range []struct {
			n     int
			color string
		}{{okN[i], "#4a9"}, {failN[i], "#58c"}, {unkN[i], "#e93"}} {
			hgt := float64(part.n) / float64(maxRate) * rateH
			if hgt > 0 {
				y -= hgt
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x(float64(i)), y, bw, hgt, part.color)
			}
		}
	}
	fmt.Fprintf(&b, `<text x="4" y="%d">%d/s</text><text x="4" y="%d">0</text>`+"\n", top+10, maxRate, top+rateH)
	fmt.Fprintf(&b, `<text x="%d" y="%d">operations completed per second: ok (green), failed (blue), unknown (orange)</text>`+"\n", left, top+rateH+14)
	// Slowest latency per second, log scale from 1 ms to 100 s.
	ly := func(d time.Duration) float64 {
		v := math.Log10(max(d.Seconds(), 1e-3))
		return float64(top+rateH+gap+latH) - (v+3)/5*latH
	}
	var pts []string
	for i, d := range lat {
		if d > 0 {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(i)+0.5), ly(d)))
		}
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#333" stroke-width="1"/>`+"\n", strings.Join(pts, " "))
	for _, tick := range []struct {
		d     time.Duration
		label string
	}{{time.Millisecond, "1ms"}, {100 * time.Millisecond, "100ms"}, {10 * time.Second, "10s"}} {
		fmt.Fprintf(&b, `<text x="4" y="%.1f">%s</text><line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ccc"/>`+"\n", ly(tick.d), tick.label, left, w-right, ly(tick.d), ly(tick.d))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">slowest operation per second (log scale); x: seconds 0..%d</text>`+"\n", left, h-6, secsN-1)
	b.WriteString("</svg>\n")
	return b.String()
}
