package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSummary: a run's report summed up per phase and target, as a
// table and as tab-separated values for scripts.
func TestBenchSummary(t *testing.T) {
	a, b, out := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "report")
	text, code := benchCLI(t, "bench", "run", "--workload", "dl-traversal", "--target", "posix:"+a, "--target", "posix:"+b,
		"--out", out, "--set", "fanout=2", "--set", "depth=1", "--set", "files_per_dir=3", "--set", "file_size=1KiB",
		"--set", "tree=dl-tree", "--threads", "2", "--progress", "off")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, text)
	}
	text, code = benchCLI(t, "bench", "summary", out, "--phase", "epoch-2", "--tsv")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, text)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "workload\tphase\top\ttarget\tops_per_s\t") {
		t.Fatalf("summary:\n%s", text)
	}
	for i, target := range []string{"posix:" + a, "posix:" + b} {
		f := strings.Split(lines[i+1], "\t")
		if len(f) != 11 || f[1] != "epoch-2" || f[2] != "read" || f[3] != target || f[4] == "-" {
			t.Errorf("line %d: %q", i+1, f)
		}
		if (i == 0) != (f[6] == "-") {
			t.Errorf("ratio to first of %s: %q", target, f[6])
		}
		if f[8] != "-" {
			t.Errorf("a posix target without --meta-metrics has server counts: %q", f)
		}
	}
	text, code = benchCLI(t, "bench", "summary", filepath.Join(out, "report.json"))
	if code != 0 || !strings.Contains(text, "META REQ/OPEN (META NODES)") || !strings.Contains(text, "epoch-1") {
		t.Errorf("exit %d:\n%s", code, text)
	}
	if text, code = benchCLI(t, "bench", "summary", out, "--phase", "nope"); code != exitUsage {
		t.Errorf("unknown phase: exit %d:\n%s", code, text)
	}
	// The kept tree is the data set of both targets and stays.
	for _, d := range []string{a, b} {
		if m, _ := filepath.Glob(filepath.Join(d, "dl-tree", "d1", "f.2")); len(m) != 1 {
			t.Errorf("no kept tree in %s", d)
		}
	}
}

func TestBenchMetaMetricsFlag(t *testing.T) {
	a := t.TempDir()
	for _, tc := range []struct{ arg, want string }{
		{"posix:" + a, "want TARGET=MASTER"},
		{"posix:/elsewhere=127.0.0.1:17000/default", "is not one of the targets"},
		{"posix:" + a + "=nohost/default", `master "nohost"`},
	} {
		text, code := benchCLI(t, "bench", "run", "--workload", "dl-traversal", "--target", "posix:"+a, "--meta-metrics", tc.arg, "--progress", "off")
		if code != exitUsage || !strings.Contains(text, tc.want) {
			t.Errorf("--meta-metrics %s: exit %d, want usage error with %q:\n%s", tc.arg, code, tc.want, text)
		}
	}
}
