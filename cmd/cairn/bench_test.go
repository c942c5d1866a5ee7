package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// benchCLI runs the cairn command line in-process with its output captured,
// and returns the exit code run() would give.
func benchCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	_, err := root.ExecuteC()
	code := 0
	if err != nil {
		code = exitRuntime
		var ue usageError
		if asUsage(err, &ue) {
			code = exitUsage
		}
		out.WriteString("ERROR: " + err.Error())
	}
	return out.String(), code
}

func asUsage(err error, ue *usageError) bool {
	for e := err; e != nil; {
		if u, ok := e.(usageError); ok {
			*ue = u
			return true
		}
		uw, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = uw.Unwrap()
	}
	return false
}

func TestBenchRunSideBySide(t *testing.T) {
	a, b, out := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "report")
	text, code := benchCLI(t, "bench", "run", "--workload", "metadata", "--target", "posix:"+a, "--target", "posix:"+b,
		"--out", out, "--set", "files=30", "--set", "trees=1", "--threads", "2", "--repetitions", "2", "--progress", "lines")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, text)
	}
	for _, want := range []string{"FileCreation", "VS FIRST", "posix:" + b, "report: " + filepath.Join(out, "report.json")} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	r, err := report.Read(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Workloads) != 1 || len(r.Workloads[0].Targets) != 2 || r.Config.Repetitions != 2 {
		t.Fatalf("report %+v", r.Config)
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Fatal(err)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	wl := filepath.Join(dir, "w.yaml")
	os.WriteFile(wl, []byte("kind: seq-read\nblok_size: 4KiB\n"), 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "run", "--target", "posix:" + dir}, "no workload"},
		{[]string{"bench", "run", "--workload", "metadta", "--target", "posix:" + dir}, `did you mean "metadata"`},
		{[]string{"bench", "run", "--workload", "metadata"}, "no target"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + filepath.Join(dir, "nope")}, "does not exist"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + file}, "is not a directory"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:/proc"}, "is not writable"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "nfs:/x"}, `unknown scheme "nfs"`},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "cairn:127.0.0.1:1/default"}, "no master at 127.0.0.1:1 answered"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + dir, "--threads", "0"}, "threads: value must be at least 1, got 0"},
		{[]string{"bench", "run", "--workload", "seq-read", "--target", "posix:" + dir, "--set", "file_size=-1"}, "cannot be negative"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + dir, "--set", "blocksize=4K"}, `no workload of this run has a key "blocksize"`},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + dir, "--set", "novalue"}, "want KEY=VALUE"},
		{[]string{"bench", "run", "-f", wl, "--target", "posix:" + dir}, `w.yaml:2: workload seq-read: unknown key "blok_size"`},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + dir, "--sweep", "files=1,2"}, "cannot be swept"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + dir, "--progress", "fancy"}, "want auto, bars, lines or off"},
		{[]string{"bench", "run", "--workload", "metadata", "--target", "posix:" + dir, "--local=false"}, "needs at least one --worker"},
		{[]string{"bench", "replay", filepath.Join(dir, "missing.trace"), "--target", "posix:" + dir}, "no such file"},
		{[]string{"bench", "replay", file, "--target", "posix:" + dir}, "not a cairn trace"},
		{[]string{"bench", "trace-stats", file}, "not a cairn trace"},
		{[]string{"bench", "worker"}, "exactly one of --listen ADDR and --stdio"},
		{[]string{"bench", "record", "--", "true"}, "--out TRACE is required"},
		{[]string{"bench", "workloads", "nope"}, `unknown workload "nope"`},
		{[]string{"bench", "overhead"}, "--target posix:DIR is required"},
		{[]string{"bench", "run", "--nosuchflag"}, "unknown flag"},
	}
	for _, tc := range tests {
		text, code := benchCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(text, tc.want) {
			t.Errorf("%v: exit %d, output:\n%s\nwant exit 2 and %q", tc.args, code, text, tc.want)
		}
	}
}

func TestBenchWorkloadsList(t *testing.T) {
	text, code := benchCLI(t, "bench", "workloads")
	if code != 0 {
		t.Fatal(text)
	}
	for _, k := range []string{"metadata", "seq-write", "seq-read", "random-read", "random-write", "skip-read", "mixed",
		"iterative", "massive", "small-files", "dl-traversal", "insert", "replay", "every workload also has"} {
		if !strings.Contains(text, k) {
			t.Errorf("list lacks %s", k)
		}
	}
	text, _ = benchCLI(t, "bench", "workloads", "dl-traversal")
	if !strings.Contains(text, "burst") || !strings.Contains(text, "threads") {
		t.Errorf("dl-traversal keys:\n%s", text)
	}
}

// TestBenchRecordReplay records a real program (a shell building and
// compiling a small C project with make, when cc and make exist) with strace,
// prints the trace's statistics and replays it on another directory.
func TestBenchRecordReplay(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("strace is not installed (apt-get install strace)")
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := filepath.Join(t.TempDir(), "build.trace")
	script := "mkdir -p src && printf 'int main(void){return 0;}\\n' > src/m.c && printf 'm: m.c\\n\\tcc -o m m.c\\n' > src/Makefile && " +
		"cp -r src build && ls -R build > /dev/null && rm -r src"
	if _, err := exec.LookPath("make"); err == nil {
		if _, err := exec.LookPath("cc"); err == nil {
			script += " && make -s -C build"
		}
	}
	text, code := benchCLI(t, "bench", "record", "--out", tr, "--root", root, "--cwd", root, "--", "sh", "-c", "cd "+root+" && "+script)
	if code != 0 {
		t.Fatalf("record: exit %d\n%s", code, text)
	}
	f, err := os.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := optrace.Read(f, 1_000_000)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.Events) < 20 || parsed.Header.Source != "strace" {
		t.Fatalf("%d records from %s", len(parsed.Events), parsed.Header.Source)
	}
	text, code = benchCLI(t, "bench", "trace-stats", tr)
	if code != 0 || !strings.Contains(text, "closest built-in workload") || !strings.Contains(text, "mkdir") {
		t.Fatalf("trace-stats: exit %d\n%s", code, text)
	}
	dst, out := t.TempDir(), filepath.Join(t.TempDir(), "rep")
	text, code = benchCLI(t, "bench", "replay", tr, "--target", "posix:"+dst, "--out", out, "--progress", "off", "--threads", "2")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, text)
	}
	r, err := report.Read(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ops, mismatches float64
	for _, p := range r.Workloads[0].Targets[0].Phases {
		for _, o := range p.Ops {
			for _, fig := range o.Figures {
				switch fig.Name {
				case report.FigOps:
					ops += float64(fig.Median)
				case report.FigErrors:
					mismatches += float64(fig.Median)
				}
			}
		}
	}
	if ops != 2*float64(len(parsed.Events)) {
		t.Fatalf("replayed %v operations, want 2 x %d", ops, len(parsed.Events))
	}
	// A replay is an approximation (a stat cannot tell lstat from stat, for
	// example), but almost every operation must reproduce its recorded outcome.
	if mismatches > ops/20 {
		t.Fatalf("%v of %v replayed operations differ from the recording:\n%s", mismatches, ops, text)
	}
}
