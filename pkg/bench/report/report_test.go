package report

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/stats"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

func opResult(name string, count, bytes, errs int64, lat ...time.Duration) workload.OpResult {
	o := workload.OpResult{Name: name}
	o.Count, o.Bytes, o.Errors = count, bytes, errs
	for _, d := range lat {
		o.Latency.Record(d)
	}
	return o
}

func rep(window time.Duration, ops ...workload.OpResult) Repetition {
	return Repetition{Phases: []workload.PhaseResult{{Name: "write", StartNs: 0, EndNs: int64(window), Ops: ops}}}
}

func fig(t *testing.T, figs []Figure, name string) Figure {
	t.Helper()
	for _, f := range figs {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no figure %s", name)
	return Figure{}
}

func TestSummarizeFigures(t *testing.T) {
	reps := []Repetition{
		rep(2*time.Second, opResult("write", 200, 200<<20, 0, time.Millisecond, 3*time.Millisecond)),
		rep(time.Second, opResult("write", 300, 300<<20, 1, 2*time.Millisecond)),
		rep(4*time.Second, opResult("write", 400, 400<<20, 0, time.Millisecond)),
	}
	pf := Summarize(reps)
	if len(pf) != 1 || pf[0].Phase != "write" || len(pf[0].Ops) != 1 {
		t.Fatalf("%+v", pf)
	}
	figs := pf[0].Ops[0].Figures
	tests := []struct {
		name, unit       string
		values           []float64
		min, median, max float64
	}{
		{FigOpsRate, "ops/s", []float64{100, 300, 100}, 100, 100, 300},
		{FigThroughput, "MiB/s", []float64{100, 300, 100}, 100, 100, 300},
		{FigBytesPerOp, "B", []float64{1 << 20, 1 << 20, 1 << 20}, 1 << 20, 1 << 20, 1 << 20},
		{FigErrors, "count", []float64{0, 1, 0}, 0, 0, 1},
		{FigOps, "count", []float64{200, 300, 400}, 200, 300, 400},
	}
	for _, tc := range tests {
		f := fig(t, figs, tc.name)
		if f.Unit != tc.unit || f.N != 3 || float64(f.Min) != tc.min || float64(f.Median) != tc.median || float64(f.Max) != tc.max {
			t.Errorf("%s: %+v", tc.name, f)
		}
		for i, v := range tc.values {
			if math.Abs(float64(f.Values[i])-v) > 1e-9 {
				t.Errorf("%s value %d = %v, want %v", tc.name, i, f.Values[i], v)
			}
		}
	}
	if f := fig(t, figs, FigLatMax); float64(f.Max) != 3000 || f.Unit != "µs" || f.Better != "lower" {
		t.Errorf("latency max %+v", f)
	}
	if f := fig(t, pf[0].Figures, FigDuration); float64(f.Median) != 2 || f.Unit != "s" {
		t.Errorf("duration %+v", f)
	}
}

func TestSummarizeMissingRepetition(t *testing.T) {
	reps := []Repetition{
		rep(time.Second, opResult("write", 10, 0, 0, time.Millisecond)),
		{Error: "every worker failed"},
		rep(time.Second, opResult("write", 30, 0, 0, time.Millisecond)),
	}
	f := fig(t, Summarize(reps)[0].Ops[0].Figures, FigOpsRate)
	if f.N != 2 || len(f.Values) != 3 || !math.IsNaN(float64(f.Values[1])) || float64(f.Median) != 20 {
		t.Fatalf("%+v", f)
	}
	if _, ok := MainFigure(Summarize(reps)[0].Ops[0]); !ok {
		t.Fatal("no main figure")
	}
}

func TestRatios(t *testing.T) {
	w := WorkloadReport{Targets: []TargetReport{
		{Target: "a", Phases: Summarize([]Repetition{rep(time.Second, opResult("write", 100, 100<<20, 0, time.Millisecond))})},
		{Target: "b", Phases: Summarize([]Repetition{rep(time.Second, opResult("write", 50, 50<<20, 0, 2*time.Millisecond))})},
		{Target: "c", Phases: Summarize([]Repetition{{Error: "failed"}})},
	}}
	SetRatios(&w)
	a, _ := w.Targets[0].Find("write", "write", FigThroughput)
	b, _ := w.Targets[1].Find("write", "write", FigThroughput)
	lat, _ := w.Targets[1].Find("write", "write", FigLatP50)
	if !math.IsNaN(float64(a.RatioToFirst)) || float64(b.RatioToFirst) != 0.5 {
		t.Fatalf("ratios a %v b %v", a.RatioToFirst, b.RatioToFirst)
	}
	if r := float64(lat.RatioToFirst); math.Abs(r-2) > 0.1 {
		t.Fatalf("latency ratio %v, want about 2", r)
	}
	if _, ok := w.Targets[2].Find("write", "write", FigThroughput); ok {
		t.Fatal("a failed target has figures")
	}
}

func TestNumAndLatency(t *testing.T) {
	nums := map[float64]string{0: "0", 7: "7", 2.5: "2.50", 12.34: "12.3", 999: "999", 9999: "9999", 12345: "12.3k",
		123456: "123k", 1234567: "1.23M", 2e9: "2G", math.NaN(): "-"}
	for v, want := range nums {
		if got := Num(v); got != want {
			t.Errorf("Num(%v) = %q, want %q", v, got, want)
		}
	}
	lats := map[float64]string{1.5: "1.5 µs", 250: "250 µs", 1500: "1.5 ms", 2.5e6: "2.50 s"}
	for v, want := range lats {
		if got := Latency(v); got != want {
			t.Errorf("Latency(%v) = %q, want %q", v, got, want)
		}
	}
}

func sampleReport() *Report {
	mk := func(target string, scale int64) TargetReport {
		reps := []Repetition{
			rep(time.Second, opResult("write", 100*scale, 100<<20*scale, 0, time.Millisecond, 2*time.Millisecond)),
			rep(time.Second, opResult("write", 110*scale, 110<<20*scale, 0, time.Millisecond)),
		}
		reps[0].Phases[0].Truncated = true
		return TargetReport{Target: target, Repetitions: reps, Phases: Summarize(reps)}
	}
	spec, _ := workload.Resolve("seq-write", map[string]string{"threads": "2"})
	w := WorkloadReport{Name: "seq-write", Kind: "seq-write", Series: "seq-write", Spec: spec,
		Concurrency: Concurrency{Nodes: 1, Processes: 1, Threads: 2},
		Targets:     []TargetReport{mk("posix:/a", 1), mk("posix:/b", 2)}}
	SetRatios(&w)
	return &Report{Schema: Schema, RunID: "r", Config: Config{Targets: []string{"posix:/a", "posix:/b"}, Repetitions: 2},
		Workloads: []WorkloadReport{w},
		Failures:  []Failure{{Workload: "seq-write", Target: "posix:/b", Repetition: 2, Worker: "10.0.0.9:7070", Stage: "run", Error: "no answer within 1m"}}}
}

func TestTable(t *testing.T) {
	out := Table(sampleReport())
	for _, want := range []string{"seq-write", "write*", "posix:/a", "posix:/b", "2.00×", "105 [100–110]", "FAILURES (1)",
		"worker 10.0.0.9:7070 failed at run: no answer within 1m", "hit its time bound"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestTableClientFigures: a target whose client counts its traffic gets a
// line with metadata requests per open and per operation and bytes sent.
func TestTableClientFigures(t *testing.T) {
	reps := []Repetition{rep(time.Second, opResult("open", 10, 0, 0, time.Millisecond))}
	reps[0].Phases[0].Extra = map[string]float64{"meta_requests_per_open": 1.04, "meta_requests_per_op": 1.04, "data_sent_bytes": 3 << 20}
	spec, _ := workload.Resolve("seq-write", nil)
	w := WorkloadReport{Name: "seq-write", Spec: spec, Concurrency: Concurrency{Nodes: 1, Processes: 1, Threads: 1},
		Targets: []TargetReport{{Target: "cairn:m/v", Repetitions: reps, Phases: Summarize(reps)}}}
	out := Table(&Report{Schema: Schema, Config: Config{Repetitions: 1}, Workloads: []WorkloadReport{w}})
	want := "write on cairn:m/v: 1.04 metadata requests per open, 1.04 per operation, 3 MiB sent to data nodes"
	if !strings.Contains(out, want) {
		t.Fatalf("table lacks %q:\n%s", want, out)
	}
	reps[0].Phases[0].Extra = map[string]float64{"meta_requests_per_op": 3.5, "data_sent_bytes": 0}
	w.Targets[0].Phases = Summarize(reps)
	out = Table(&Report{Schema: Schema, Config: Config{Repetitions: 1}, Workloads: []WorkloadReport{w}})
	if want := "write on cairn:m/v: 3.50 metadata requests per operation (the client's count)\n"; !strings.Contains(out, want) {
		t.Fatalf("table lacks %q:\n%s", want, out)
	}
}

// TestTableHostCPU: the host's busy time per operation gets its line, with
// the hypervisor's share when it is large, and its units.
func TestTableHostCPU(t *testing.T) {
	reps := []Repetition{rep(time.Second, opResult("write", 100, 0, 0, time.Millisecond))}
	reps[0].Phases[0].Extra = map[string]float64{"host_cpu_seconds": 0.5, "host_steal_seconds": 0.01, "host_cpu_ms_per_op": 5}
	spec, _ := workload.Resolve("seq-write", nil)
	w := WorkloadReport{Name: "seq-write", Spec: spec, Concurrency: Concurrency{Nodes: 1, Processes: 1, Threads: 1},
		Targets: []TargetReport{{Target: "posix:/mnt/x", Repetitions: reps, Phases: Summarize(reps)}}}
	table := func() string {
		return Table(&Report{Schema: Schema, Config: Config{Repetitions: 1}, Workloads: []WorkloadReport{w}})
	}
	out := table()
	want := "write on posix:/mnt/x: 5.00 ms of the host's CPU per operation (every process and the kernel)\n"
	if !strings.Contains(out, want) {
		t.Fatalf("table lacks %q:\n%s", want, out)
	}
	if f := fig(t, w.Targets[0].Phases[0].Figures, "host_cpu_ms_per_op"); f.Unit != "ms" {
		t.Errorf("host CPU per operation in %q", f.Unit)
	}
	if f := fig(t, w.Targets[0].Phases[0].Figures, "host_cpu_seconds"); f.Unit != "s" {
		t.Errorf("host CPU in %q", f.Unit)
	}
	reps[0].Phases[0].Extra["host_steal_seconds"] = 0.2
	w.Targets[0].Phases = Summarize(reps)
	out = table()
	if want := "(every process and the kernel; the hypervisor took another 0.20 s)"; !strings.Contains(out, want) {
		t.Fatalf("table lacks %q:\n%s", want, out)
	}
}

// TestTableServerFigures: the counts from the meta nodes' metrics are shown
// next to the client's, labelled, and a node that could not be read is a
// note rather than a zero.
func TestTableServerFigures(t *testing.T) {
	reps := []Repetition{rep(time.Second, opResult("read", 100, 0, 0, time.Millisecond))}
	reps[0].Phases[0].Extra = map[string]float64{"meta_requests_per_open": 2, "meta_requests_per_op": 2,
		"server_meta_requests": 100, "server_meta_requests_per_open": 1, "server_ns_fetches": 3, "server_ns_fetches_per_open": 0.03,
		"server_meta_nodes": 3, "server_ns_replica_entries": 1000, "server_ns_replica_bytes": 96000, "server_ns_replica_bytes_per_entry": 96}
	spec, _ := workload.Resolve("dl-traversal", nil)
	w := WorkloadReport{Name: "dl-traversal", Spec: spec, Concurrency: Concurrency{Nodes: 1, Processes: 1, Threads: 1},
		Targets: []TargetReport{{Target: "cairn-cached:m/v", Repetitions: reps, Phases: Summarize(reps)}}}
	r := &Report{Schema: Schema, Config: Config{Repetitions: 1, Targets: []string{"cairn-cached:m/v"}}, Workloads: []WorkloadReport{w}}
	out := Table(r)
	want := "write on cairn-cached:m/v: 2.00 metadata requests per open, 2.00 per operation (the client's count); " +
		"1.00 metadata requests per open and 0.03 namespace fetches per open from the meta nodes' metrics (3 nodes, every client of the cluster); " +
		"namespace replicas 96 B per entry (1000 entries at the end)\n"
	if !strings.Contains(out, want) {
		t.Fatalf("table lacks %q:\n%s", want, out)
	}
	if f := fig(t, w.Targets[0].Phases[0].Figures, "server_ns_replica_bytes_per_entry"); f.Unit != "B" {
		t.Errorf("bytes per entry in %q", f.Unit)
	}
	page, err := HTML(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "from the meta nodes&#39; metrics") {
		t.Errorf("report.html lacks the meta nodes' counts")
	}

	// A node that could not be read: no server figure, a note instead.
	reps[0].Phases[0].Extra = map[string]float64{"opens": 100}
	reps[0].Phases[0].Notes = []string{"meta node 127.0.0.1:1 could not be read after the phase: connection refused"}
	w.Targets[0].Phases = Summarize(reps)
	r.Workloads[0] = w
	out = Table(r)
	for _, want := range []string{
		"write on cairn-cached:m/v: no counts from the meta nodes' metrics (see the notes)\n",
		"    note: meta node 127.0.0.1:1 could not be read after the phase: connection refused\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "0.00 metadata requests") {
		t.Errorf("a zero where the count is unknown:\n%s", out)
	}

	if got := w.Targets[0].Phases[0].Notes; len(got) != 1 {
		t.Errorf("notes %v", got)
	}
	page, err = HTML(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "could not be read after the phase") {
		t.Errorf("report.html lacks the note")
	}
	// A phase that opens nothing: the meta nodes' counts per operation.
	reps[0].Phases[0].Extra = map[string]float64{"server_meta_requests": 40, "server_meta_requests_per_op": 1, "server_ns_fetches": 0, "server_ns_fetches_per_op": 0}
	reps[0].Phases[0].Notes = nil
	w.Targets[0].Phases = Summarize(reps)
	r.Workloads[0] = w
	if out = Table(r); !strings.Contains(out, "write on cairn-cached:m/v: 1.00 metadata requests per operation and 0.00 namespace fetches per operation from the meta nodes' metrics\n") {
		t.Errorf("per operation:\n%s", out)
	}
}

func TestHTMLAndCharts(t *testing.T) {
	r := sampleReport()
	page, err := HTML(r)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	for _, want := range []string{"<!DOCTYPE html>", "data:image/png;base64,", "Throughput", "Latency percentiles", "10.0.0.9:7070", "2.00×"} {
		if !strings.Contains(s, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "src=\"http", "href=\"http", "@import"} {
		if strings.Contains(s, bad) {
			t.Errorf("report.html is not self-contained: %q", bad)
		}
	}
	for name, draw := range map[string]func(WorkloadReport) ([]byte, error){"throughput": ThroughputChart, "latency": LatencyChart} {
		b, err := draw(r.Workloads[0])
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s chart is not a PNG: %v", name, err)
		}
		if img.Bounds().Dx() < 400 || img.Bounds().Dy() < 300 {
			t.Errorf("%s chart is %v", name, img.Bounds())
		}
	}
	if b, _ := ScalingChart(r.Workloads, r.Config.Targets); b != nil {
		t.Error("a scaling chart from a single point")
	}
}

func TestTicks(t *testing.T) {
	ticks := linearTicks{}.Ticks(0, 26000)
	var labels []string
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if strings.Join(labels, ",") != "0,5k,10k,15k,20k,25k" {
		t.Errorf("linear ticks %v", labels)
	}
	labels = nil
	for _, tk := range (durationTicks{}).Ticks(2000, 6300) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if len(labels) < 3 {
		t.Errorf("a narrow latency axis has only %v", labels)
	}
	_ = stats.Float(0)
}
