package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	benchfs "github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/localcluster"
)

// benchReport is the part of report.json the tests read.
type benchReport struct {
	Workloads []struct {
		Name    string `json:"name"`
		Targets []struct {
			Target      string `json:"target"`
			Repetitions []struct {
				Error  string `json:"error"`
				Phases []struct {
					Name  string `json:"name"`
					Error string `json:"error"`
					Ops   []struct {
						Name       string `json:"name"`
						Count      int64  `json:"count"`
						Errors     int64  `json:"errors"`
						Bytes      int64  `json:"bytes"`
						FirstError string `json:"first_error"`
					} `json:"ops"`
					Extra map[string]float64 `json:"extra"`
				} `json:"phases"`
			} `json:"repetitions"`
		} `json:"targets"`
	} `json:"workloads"`
	Failures []struct {
		Error string `json:"error"`
	} `json:"failures"`
}

// TestBenchCairnTarget runs `cairn bench run` with the native backend
// (cairn:MASTERS/default) against a `cairn up` cluster: the metadata workload
// and a sequential write then read, with tiny sizes. Every phase must have
// run its operations without an error, the data phases must have moved the
// bytes, and every phase must report the SDK's metadata requests (per open
// where it opened files).
func TestBenchCairnTarget(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bc")
	startUp(t, dir, "--mount", "")
	l, err := localcluster.LoadLayout(dir)
	must(t, err)
	target := "cairn:" + strings.Join(l.MasterAddrs(), ",") + "/default?tls=" + localcluster.TLSDir(dir, localcluster.AdminIdentity)
	t.Run("semantics", func(t *testing.T) { cairnBackendSemantics(t, target) })
	out := filepath.Join(t.TempDir(), "out")
	start := time.Now()
	stdout := mustCairn(t, "bench", "run", "--target", target, "--out", out, "--progress", "off",
		"--workload", "metadata", "--workload", "seq-write", "--workload", "seq-read",
		"--set", "files=20", "--set", "trees=1", "--set", "tree_fanout=2", "--set", "tree_depth=1", "--set", "tree_files=2",
		"--set", "file_size=64KiB", "--set", "block_size=16KiB", "--threads", "2", "--set", "duration=30s")
	t.Logf("bench run on %s: %s\n%s", target, time.Since(start).Round(time.Millisecond), stdout)
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	must(t, err)
	var rep benchReport
	must(t, json.Unmarshal(b, &rep))
	if len(rep.Failures) > 0 {
		t.Fatalf("failures: %+v", rep.Failures)
	}
	want := map[string]bool{"metadata": false, "seq-write": false, "seq-read": false}
	for _, w := range rep.Workloads {
		want[w.Name] = true
		for _, tr := range w.Targets {
			if tr.Target != target {
				t.Errorf("%s: target %q, want %q", w.Name, tr.Target, target)
			}
			for _, r := range tr.Repetitions {
				if r.Error != "" {
					t.Errorf("%s: %s", w.Name, r.Error)
				}
				for _, ph := range r.Phases {
					var count, bytes int64
					for _, o := range ph.Ops {
						count += o.Count
						bytes += o.Bytes
						if o.Errors > 0 {
							t.Errorf("%s/%s/%s: %d errors, first: %s", w.Name, ph.Name, o.Name, o.Errors, o.FirstError)
						}
					}
					if count == 0 || ph.Error != "" {
						t.Errorf("%s/%s: %d operations, error %q", w.Name, ph.Name, count, ph.Error)
					}
					if (w.Name == "seq-write" || w.Name == "seq-read") && bytes < 2*4*64<<10 {
						t.Errorf("%s/%s: moved %d bytes, want at least %d", w.Name, ph.Name, bytes, 2*4*64<<10)
					}
					mr, ok := ph.Extra["meta_requests_per_op"]
					if !ok || mr <= 0 || ph.Extra["meta_requests"] <= 0 {
						t.Errorf("%s/%s: no metadata request figures: %v", w.Name, ph.Name, ph.Extra)
					}
					if po, ok := ph.Extra["meta_requests_per_open"]; ok && (po < 1 || po > 100) {
						t.Errorf("%s/%s: implausible %.1f metadata requests per open", w.Name, ph.Name, po)
					}
					t.Logf("%-10s %-13s ops %5d bytes %8d  meta req/op %5.2f  meta req/open %5.2f", w.Name, ph.Name, count, bytes,
						mr, ph.Extra["meta_requests_per_open"])
				}
			}
		}
	}
	for n, seen := range want {
		if !seen {
			t.Errorf("workload %s missing from the report", n)
		}
	}
}

// cairnBackendSemantics drives the cairn backend in-process through every
// call of the fsys interface, as the posix backend's unit test does.
func cairnBackendSemantics(t *testing.T, target string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := benchfs.Open(ctx, target, benchfs.Options{Confined: true})
	must(t, err)
	defer f.Close()
	must(t, benchfs.MkdirAll(f, "sem/d", 0o755))
	if err := f.Mkdir("sem/d", 0o755); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second mkdir: %v", err)
	}
	fh, err := f.OpenFile("sem/d/a", syscall.O_CREAT|syscall.O_RDWR|syscall.O_EXCL, 0o640)
	must(t, err)
	if _, err := f.OpenFile("sem/d/a", syscall.O_CREAT|syscall.O_RDWR|syscall.O_EXCL, 0o640); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL on an existing file: %v", err)
	}
	if n, err := fh.Write([]byte("hello world")); n != 11 || err != nil {
		t.Fatalf("write %d %v", n, err)
	}
	if _, err := fh.WriteAt([]byte("W"), 6); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if n, err := fh.ReadAt(buf, 6); n != 5 || err != nil || string(buf) != "World" {
		t.Fatalf("readat %d %v %q", n, err, buf)
	}
	if n, err := fh.ReadAt(buf, 9); n != 2 || err != io.EOF {
		t.Fatalf("readat past end %d %v", n, err)
	}
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(fh)
	if err != nil || string(all) != "hello World" {
		t.Fatalf("read all %q %v", all, err)
	}
	must(t, fh.Sync())
	must(t, fh.Truncate(5))
	st, err := fh.Stat()
	if err != nil || st.Size() != 5 || st.Mode().Perm() != 0o640 || !st.Mode().IsRegular() {
		t.Fatalf("fstat %v %v", st, err)
	}
	must(t, fh.Close())
	if err := fh.Close(); err == nil {
		t.Error("second close succeeded")
	}
	must(t, f.Rename("sem/d/a", "sem/d/b"))
	if _, err := f.Stat("sem/d/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of renamed file: %v", err)
	}
	must(t, f.Link("sem/d/b", "sem/d/c"))
	must(t, f.Symlink("b", "sem/d/l"))
	must(t, f.Symlink("/sem/../../sem/d", "sem/up")) // ".." never leaves the volume
	if s, err := f.Readlink("sem/d/l"); err != nil || s != "b" {
		t.Fatalf("readlink %q %v", s, err)
	}
	if st, err := f.Lstat("sem/d/l"); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("lstat %v %v", st, err)
	}
	if st, err := f.Stat("sem/d/l"); err != nil || st.Size() != 5 {
		t.Fatalf("stat through link %v %v", st, err)
	}
	if st, err := f.Stat("sem/up/l"); err != nil || st.Size() != 5 {
		t.Fatalf("stat through two links %v %v", st, err)
	}
	must(t, f.Symlink("../d/b", "sem/d/dotdot")) // ".." below cached directories
	if st, err := f.Stat("sem/d/dotdot"); err != nil || st.Size() != 5 {
		t.Fatalf("stat through a link with .. %v %v", st, err)
	}
	must(t, f.Chmod("sem/d/b", 0o600))
	must(t, f.Truncate("sem/d/b", 2))
	if st, _ := f.Stat("sem/d/c"); st == nil || st.Size() != 2 || st.Mode().Perm() != 0o600 {
		t.Fatalf("hard link sees %v", st)
	}
	ents, err := f.ReadDir("sem/d")
	if err != nil || len(ents) != 4 {
		t.Fatalf("readdir %v %v", ents, err)
	}
	for _, e := range ents {
		if info, err := e.Info(); err != nil || info.Name() != e.Name() {
			t.Errorf("entry %s: %v %v", e.Name(), info, err)
		}
	}
	if err := f.Unlink("sem/d"); err == nil {
		t.Fatal("unlink of a directory succeeded")
	}
	if err := f.Rmdir("sem/d/b"); err == nil {
		t.Fatal("rmdir of a file succeeded")
	}
	if err := f.Rmdir("sem/d"); err == nil {
		t.Fatal("rmdir of a non-empty directory succeeded")
	}
	must(t, f.Unlink("sem/d/dotdot"))
	if _, err := f.Stat("sem/d/b/x"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("stat below a file: %v, want ENOTDIR", err)
	}
	// A directory renamed away must not be found again at its old path
	// through the backend's directory cache.
	must(t, f.Mkdir("sem/d2", 0o755))
	must(t, benchfs.WriteFile(f, "sem/d2/x", []byte("x"), 0))
	must(t, f.Rename("sem/d2", "sem/d3"))
	if _, err := f.Stat("sem/d2/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat through a renamed directory: %v", err)
	}
	if _, err := f.Stat("sem/d3/x"); err != nil {
		t.Errorf("stat at the new path: %v", err)
	}
	for _, bad := range []string{"../x", "/etc/passwd", "a//b", "a/../b"} {
		if _, err := f.Stat(bad); err == nil {
			t.Errorf("stat of invalid path %q succeeded", bad)
		}
	}
	st, err = f.Stat(".")
	if err != nil || !st.IsDir() {
		t.Fatalf("stat of root: %v %v", st, err)
	}
	must(t, benchfs.RemoveAll(f, "sem"))
	if _, err := f.Stat("sem"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("sem still exists: %v", err)
	}
	c, ok := f.(benchfs.Counter)
	if !ok || c.Counters()["meta_requests"] <= 0 || c.Counters()["opens"] <= 0 {
		t.Errorf("counters %v", c)
	}
	if d, ok := f.(benchfs.Describer); !ok || d.Describe()["volume"] != "default" {
		t.Errorf("describe: %v", ok)
	}
	// A volume that does not exist is a clear message.
	if _, err := benchfs.Open(ctx, strings.Replace(target, "/default", "/nope", 1), benchfs.Options{}); err == nil ||
		!strings.Contains(err.Error(), `volume "nope" does not exist`) {
		t.Errorf("open of a missing volume: %v", err)
	}
}
