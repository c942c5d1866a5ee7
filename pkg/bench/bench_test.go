package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

// The test binary doubles as the worker and master processes of these tests,
// selected by CAIRN_BENCH_TEST_ROLE, so that processes and hosts run the real
// code paths without building the cairn binary.
const roleEnv = "CAIRN_BENCH_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "stdio":
		err := ServeStdio(context.Background(), ServeOptions{WorkerCommand: selfCommand(), WorkerEnv: []string{roleEnv + "=stdio"}})
		exitOn(err)
	case "die":
		// A worker that answers setup and then dies, like a crash mid-run.
		c := newConn(os.Stdin, os.Stdout, os.Stdin)
		m, err := c.expect(context.Background(), time.Minute, msgSetup)
		exitOn(err)
		c.send(&message{Type: msgReady, Ready: &Ready{Facts: collectFacts(nil)}})
		_ = m
		fmt.Fprintln(os.Stderr, "worker: simulated crash")
		os.Exit(3)
	case "listen":
		d, err := Listen(os.Getenv("CAIRN_BENCH_TEST_ADDR"), ServeOptions{WorkerCommand: selfCommand(), WorkerEnv: []string{roleEnv + "=stdio"}})
		exitOn(err)
		fmt.Printf("LISTENING %s\n", d.Addr())
		exitOn(d.Serve(context.Background(), os.Getenv("CAIRN_BENCH_TEST_ONCE") == "1"))
	case "master":
		var a masterArgs
		exitOn(json.Unmarshal([]byte(os.Getenv("CAIRN_BENCH_TEST_ARGS")), &a))
		specs, err := workload.ResolveAll([]string{a.Kind}, a.Set)
		exitOn(err)
		rep, err := Run(context.Background(), Options{Targets: a.Targets, Workloads: specs, Remote: a.Remote,
			Local: false, Repetitions: 1, SetupTimeout: 30 * time.Second, Log: os.Stderr})
		exitOn(err)
		_, err = report.Write(a.Out, rep)
		exitOn(err)
	}
	os.Exit(0)
}

type masterArgs struct {
	Targets []string          `json:"targets"`
	Remote  []string          `json:"remote"`
	Kind    string            `json:"kind"`
	Set     map[string]string `json:"set"`
	Out     string            `json:"out"`
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "test helper:", err)
		os.Exit(1)
	}
}

func selfCommand() []string {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{self, "-test.run=^$"}
}

func specs(t *testing.T, kind string, set map[string]string) []*workload.Spec {
	t.Helper()
	s, err := workload.ResolveAll([]string{kind}, set)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tinyMeta() map[string]string {
	return map[string]string{"files": "30", "threads": "2", "trees": "1", "tree_fanout": "2", "tree_depth": "1", "tree_files": "2", "duration": "20s"}
}

// checkPlausible fails unless every phase of every target measured a
// positive rate without errors.
func checkPlausible(t *testing.T, r *report.Report) {
	t.Helper()
	for _, w := range r.Workloads {
		for _, tr := range w.Targets {
			if len(tr.Phases) == 0 {
				t.Fatalf("%s on %s: no phases", w.Name, tr.Target)
			}
			for _, p := range tr.Phases {
				for _, o := range p.Ops {
					for _, f := range o.Figures {
						switch f.Name {
						case report.FigOpsRate:
							if !(float64(f.Median) > 0) {
								t.Errorf("%s %s %s %s: ops/s %v", w.Name, tr.Target, p.Phase, o.Op, f.Median)
							}
						case report.FigErrors:
							if f.Max != 0 {
								t.Errorf("%s %s %s %s: %v errors (%s)", w.Name, tr.Target, p.Phase, o.Op, f.Max, o.FirstError)
							}
						}
					}
				}
			}
		}
	}
}

func TestRunSideBySideInProcess(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	rep, err := Run(context.Background(), Options{
		Targets: []string{"posix:" + a, "posix:" + b}, Workloads: specs(t, "metadata", tinyMeta()),
		Local: true, Repetitions: 2, Command: []string{"cairn", "bench", "run"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 0 {
		t.Fatalf("failures: %+v", rep.Failures)
	}
	w := rep.Workloads[0]
	if len(w.Targets) != 2 || len(w.Targets[0].Repetitions) != 2 || len(w.Targets[1].Repetitions) != 2 {
		t.Fatalf("targets/repetitions: %+v", w.Targets)
	}
	if w.Concurrency != (report.Concurrency{Nodes: 1, Processes: 1, Threads: 2}) {
		t.Fatalf("concurrency %+v", w.Concurrency)
	}
	// Interleaved: target a's repetition 2 started after target b's repetition 1.
	if !w.Targets[0].Repetitions[1].StartedAt.After(w.Targets[1].Repetitions[0].StartedAt) {
		t.Errorf("repetitions not interleaved across targets")
	}
	checkPlausible(t, rep)
	f, ok := w.Targets[1].Find(workload.PhaseFileCreation, "create", report.FigOpsRate)
	if !ok || !(float64(f.RatioToFirst) > 0) || f.N != 2 || len(f.Values) != 2 {
		t.Fatalf("second target's figure %+v", f)
	}
	if f0, _ := w.Targets[0].Find(workload.PhaseFileCreation, "create", report.FigOpsRate); !isNaN(float64(f0.RatioToFirst)) {
		t.Fatalf("first target has a ratio %v", f0.RatioToFirst)
	}
	for _, d := range []string{a, b} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("%s not cleaned up: %v", d, left)
		}
	}
	table := report.Table(rep)
	for _, want := range []string{"DirCreation", "FileCreation", "TreeRemoval", "VS FIRST", "posix:" + b, "×"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	checkReportFiles(t, rep)
}

func isNaN(f float64) bool { return f != f }

// checkReportFiles writes report.json and report.html and checks the JSON
// schema: the top-level keys, and that every figure has a unit and
// min/median/max over as many values as there are repetitions.
func checkReportFiles(t *testing.T, rep *report.Report) {
	t.Helper()
	out := t.TempDir()
	paths, err := report.Write(out, rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("wrote %v", paths)
	}
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "tool", "run_id", "started_at", "finished_at", "master", "config", "workloads", "failures"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("report.json lacks %q", k)
		}
	}
	if doc["schema"] != report.Schema {
		t.Errorf("schema %v", doc["schema"])
	}
	master := doc["master"].(map[string]any)
	for _, k := range []string{"hostname", "kernel", "cpus", "go_version"} {
		if _, ok := master[k]; !ok {
			t.Errorf("master facts lack %q", k)
		}
	}
	reps := int(doc["config"].(map[string]any)["repetitions"].(float64))
	figures := 0
	walkFigs := func(figs []any) {
		for _, fi := range figs {
			f := fi.(map[string]any)
			figures++
			if u, _ := f["unit"].(string); u == "" {
				t.Errorf("figure %v has no unit", f["name"])
			}
			for _, k := range []string{"name", "values", "n", "min", "median", "max", "mean", "ratio_to_first"} {
				if _, ok := f[k]; !ok {
					t.Errorf("figure %v lacks %q", f["name"], k)
				}
			}
			if v, _ := f["values"].([]any); len(v) != reps {
				t.Errorf("figure %v has %d values, want %d", f["name"], len(v), reps)
			}
		}
	}
	for _, wi := range doc["workloads"].([]any) {
		w := wi.(map[string]any)
		for _, k := range []string{"name", "kind", "series", "spec", "concurrency", "targets"} {
			if _, ok := w[k]; !ok {
				t.Errorf("workload lacks %q", k)
			}
		}
		if vals := w["spec"].(map[string]any)["values"].(map[string]any); vals["threads"] == nil {
			t.Errorf("spec values lack threads: %v", vals)
		}
		for _, ti := range w["targets"].([]any) {
			tr := ti.(map[string]any)
			if r, _ := tr["repetitions"].([]any); len(r) != reps {
				t.Errorf("target %v: %d repetitions", tr["target"], len(r))
			}
			for _, ri := range tr["repetitions"].([]any) {
				for _, wsi := range ri.(map[string]any)["workers"].([]any) {
					ws := wsi.(map[string]any)
					if ws["status"] != "ok" || ws["facts"] == nil {
						t.Errorf("worker status %v", ws)
					}
				}
			}
			for _, pi := range tr["phases"].([]any) {
				p := pi.(map[string]any)
				walkFigs(p["figures"].([]any))
				for _, oi := range p["ops"].([]any) {
					walkFigs(oi.(map[string]any)["figures"].([]any))
				}
			}
		}
	}
	if figures < 20 {
		t.Errorf("only %d figures in report.json", figures)
	}
	back, err := report.Read(filepath.Join(out, "report.json"))
	if err != nil || len(back.Workloads) != len(rep.Workloads) {
		t.Fatalf("read back: %v", err)
	}
	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<img class=\"chart\"", "data:image/png;base64,", "Throughput", "Latency percentiles"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "http://", "https://"} {
		if strings.Contains(string(html), bad) {
			t.Errorf("report.html is not offline: contains %q", bad)
		}
	}
}

func TestRunWorkerProcesses(t *testing.T) {
	dir := t.TempDir()
	set := map[string]string{"processes": "2", "threads": "2", "files": "2", "file_size": "64KiB", "block_size": "16KiB", "ops": "40", "shuffle": "true", "duration": "20s"}
	rep, err := Run(context.Background(), Options{
		Targets: []string{"posix:" + dir}, Workloads: specs(t, "mixed", set), Local: true,
		WorkerCommand: selfCommand(), WorkerEnv: []string{roleEnv + "=stdio"}, SetupTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 0 {
		t.Fatalf("failures: %+v", rep.Failures)
	}
	w := rep.Workloads[0]
	if w.Concurrency != (report.Concurrency{Nodes: 1, Processes: 2, Threads: 4}) {
		t.Fatalf("concurrency %+v", w.Concurrency)
	}
	ws := w.Targets[0].Repetitions[0].Workers
	if len(ws) != 2 || ws[0].Name != "local/p0" || ws[1].Name != "local/p1" {
		t.Fatalf("workers %+v", ws)
	}
	checkPlausible(t, rep)
	if f, _ := w.Targets[0].Find("mixed", "read", report.FigOps); float64(f.Median)+mustFind(t, w.Targets[0], "mixed", "write", report.FigOps) != 160 {
		t.Fatalf("4 threads x 40 ops: got %v reads", f.Median)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("not cleaned up: %v", left)
	}
}

func mustFind(t *testing.T, tr report.TargetReport, phase, op, fig string) float64 {
	t.Helper()
	f, ok := tr.Find(phase, op, fig)
	if !ok {
		t.Fatalf("no figure %s/%s/%s", phase, op, fig)
	}
	return float64(f.Median)
}

// startDaemon runs a worker daemon (a child process of the test binary) on
// addr, optionally inside a network namespace, and returns its address.
func startDaemon(t *testing.T, ctx context.Context, prefix []string, addr string) string {
	t.Helper()
	args := append(append([]string{}, prefix...), selfCommand()...)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"=listen", "CAIRN_BENCH_TEST_ADDR="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "LISTENING ") {
			t.Fatalf("worker daemon did not start: %q %s", l, stderr.String())
		}
		return strings.TrimPrefix(l, "LISTENING ")
	case <-time.After(20 * time.Second):
		t.Fatalf("worker daemon did not start within 20s: %s", stderr.String())
	}
	return ""
}

func TestRunRemoteDaemon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := startDaemon(t, ctx, nil, "127.0.0.1:0")
	dir := t.TempDir()
	set := map[string]string{"processes": "2", "threads": "1", "fanout": "2", "depth": "2", "files_per_dir": "4", "file_size": "4KiB", "epochs": "1"}
	rep, err := Run(ctx, Options{Targets: []string{"posix:" + dir}, Workloads: specs(t, "dl-traversal", set), Local: true, Remote: []string{addr},
		WorkerCommand: selfCommand(), WorkerEnv: []string{roleEnv + "=stdio"}, SetupTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 0 {
		t.Fatalf("failures: %+v", rep.Failures)
	}
	w := rep.Workloads[0]
	// Two nodes (this one and the daemon), two processes each.
	if w.Concurrency != (report.Concurrency{Nodes: 2, Processes: 4, Threads: 4}) {
		t.Fatalf("concurrency %+v", w.Concurrency)
	}
	// The 16 files are read once per epoch across all four processes.
	if n := mustFind(t, w.Targets[0], "epoch-1", "read", report.FigOps); n != 16 {
		t.Fatalf("epoch read %v files, want 16", n)
	}
	checkPlausible(t, rep)
}

// fakeWorker accepts one session, answers setup, and after start never
// answers: a hung worker.
func fakeWorker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c := newConn(nc, nc, nc)
		defer c.Close()
		ctx := context.Background()
		if _, err := c.expect(ctx, 10*time.Second, msgSetup); err != nil {
			return
		}
		c.send(&message{Type: msgReady, Ready: &Ready{Facts: collectFacts(nil)}})
		c.expect(ctx, 10*time.Second, msgStart)
		c.recv(ctx, 30*time.Second) // hang until the master hangs up
	}()
	return ln.Addr().String()
}

func TestWorkerNeverReports(t *testing.T) {
	dir := t.TempDir()
	hung := fakeWorker(t)
	start := time.Now()
	rep, err := Run(context.Background(), Options{Targets: []string{"posix:" + dir}, Workloads: specs(t, "metadata", tinyMeta()),
		Local: true, Remote: []string{hung}, WorkerTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("the master waited %v for a hung worker", el)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].Worker != hung || rep.Failures[0].Stage != "run" ||
		!strings.Contains(rep.Failures[0].Error, "no answer within 2s") {
		t.Fatalf("failures %+v", rep.Failures)
	}
	w := rep.Workloads[0]
	if w.Concurrency.Processes != 1 || w.Concurrency.Threads != 2 {
		t.Fatalf("the local worker's results were not kept: %+v", w.Concurrency)
	}
	checkPlausible(t, rep)
	ws := w.Targets[0].Repetitions[0].Workers
	if len(ws) != 2 || ws[0].Status != "ok" || ws[1].Status != "failed" || ws[1].Name != hung {
		t.Fatalf("worker statuses %+v", ws)
	}
	if !strings.Contains(report.Table(rep), "worker "+hung+" failed at run") {
		t.Fatalf("table does not name the failed worker:\n%s", report.Table(rep))
	}
}

func TestWorkerDies(t *testing.T) {
	dir := t.TempDir()
	set := tinyMeta()
	set["processes"] = "2"
	rep, err := Run(context.Background(), Options{Targets: []string{"posix:" + dir}, Workloads: specs(t, "metadata", set),
		Local: true, WorkerCommand: selfCommand(), WorkerEnv: []string{roleEnv + "=die"}, WorkerTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 2 {
		t.Fatalf("failures %+v", rep.Failures)
	}
	for _, f := range rep.Failures {
		if f.Stage != "run" || !strings.Contains(f.Error, "exit status 3") || !strings.Contains(f.Error, "simulated crash") {
			t.Errorf("failure %+v", f)
		}
	}
	if rep.Workloads[0].Targets[0].Repetitions[0].Error != "every worker failed" {
		t.Errorf("repetition error %q", rep.Workloads[0].Targets[0].Repetitions[0].Error)
	}
	// The report still renders.
	if _, err := report.Write(t.TempDir(), rep); err != nil {
		t.Fatal(err)
	}
}

func TestBadTargets(t *testing.T) {
	dir := t.TempDir()
	rep, err := Run(context.Background(), Options{Targets: []string{"posix:" + filepath.Join(dir, "missing")},
		Workloads: specs(t, "metadata", tinyMeta()), Local: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].Stage != "setup" || !strings.Contains(rep.Failures[0].Error, "does not exist") {
		t.Fatalf("failures %+v", rep.Failures)
	}
	for _, bad := range []Options{
		{Targets: []string{"nfs:/x"}, Workloads: specs(t, "metadata", nil), Local: true},
		{Workloads: specs(t, "metadata", nil), Local: true},
		{Targets: []string{"posix:" + dir}, Local: true},
		{Targets: []string{"posix:" + dir}, Workloads: specs(t, "metadata", nil)},
	} {
		if _, err := Run(context.Background(), bad); err == nil {
			t.Errorf("Run(%+v) accepted", bad)
		}
	}
	if err := checkAllowed("posix:/etc", []string{"/tmp"}); err == nil {
		t.Error("a target outside the allow list was accepted")
	}
	if err := checkAllowed("posix:/tmp/x/y", []string{"/tmp/x"}); err != nil {
		t.Errorf("allowed target refused: %v", err)
	}
	if err := checkAllowed("posix:/tmp/xy", []string{"/tmp/x"}); err == nil {
		t.Error("/tmp/xy accepted as below /tmp/x")
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	rep, err := Run(context.Background(), Options{Targets: []string{"posix:" + dir},
		Workloads: specs(t, "small-files", map[string]string{"sizes": "4KiB", "files": "20"}), Local: true,
		Sweep: &workload.Sweep{Key: "threads", Values: []int64{1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Workloads) != 2 || rep.Workloads[0].Name != "small-files@threads=1" || rep.Workloads[1].Concurrency.Threads != 2 ||
		rep.Workloads[1].Series != "small-files" {
		t.Fatalf("sweep workloads %+v", rep.Workloads)
	}
	png, err := report.ScalingChart(rep.Workloads, rep.Config.Targets)
	if err != nil || len(png) < 1000 {
		t.Fatalf("scaling chart: %d bytes, %v", len(png), err)
	}
}

func TestOverheadRuns(t *testing.T) {
	res, err := Overhead(context.Background(), OverheadOptions{Target: "posix:" + t.TempDir(), Threads: 1, Files: 2,
		FileSize: 4 << 20, BlockSize: 1 << 20, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Workload != "seq-write" || res[1].Workload != "seq-read" {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if len(r.DirectMiBs) != 3 || !(r.DirectMedian > 0) || !(r.FrameworkMedian > 0) {
			t.Fatalf("%+v", r)
		}
		// On a busy shared machine single rounds are noisy; a framework that
		// costs as much as the file system would show here regardless.
		if !raceEnabled && r.DifferencePct > 50 {
			t.Errorf("%s: the framework measured %.1f%% less than the direct loop", r.Workload, r.DifferencePct)
		}
	}
	if _, err := Overhead(context.Background(), OverheadOptions{Target: "cairn:h:1/v", Threads: 1, Files: 1, FileSize: 1, BlockSize: 1, Rounds: 1}); err == nil {
		t.Fatal("overhead accepted a non-posix target")
	}
}
