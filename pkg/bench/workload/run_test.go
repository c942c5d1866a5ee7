package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// runWorkers runs spec with `workers` in-process workers on target, the way
// the master does: setup everywhere, then run everywhere together, then
// cleanup. It returns each worker's result.
func runWorkers(t *testing.T, f fsys.FS, spec *Spec, workers int) []*Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := "rep"
	var runners []*Runner
	for w := 0; w < workers; w++ {
		r, err := NewRunner(f, spec, Placement{Worker: w, Workers: workers, Dir: dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runners = append(runners, r)
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i, r := range runners {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.Setup(ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
	results := make([]*Result, workers)
	for i, r := range runners {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = r.Run(ctx) }()
	}
	wg.Wait()
	for _, r := range runners {
		if err := r.Cleanup(ctx); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
	}
	if err := CleanupShared(f, spec, dir); err != nil {
		t.Fatalf("cleanup shared: %v", err)
	}
	return results
}

func openTemp(t *testing.T, confined bool) (fsys.FS, string) {
	t.Helper()
	dir := t.TempDir()
	f, err := fsys.Open(context.Background(), "posix:"+dir, fsys.Options{Confined: confined})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, dir
}

// merged returns the run-wide result of each phase.
func merged(results []*Result) map[string]PhaseResult {
	byName := map[string][]PhaseResult{}
	for _, r := range results {
		for _, p := range r.Phases {
			byName[p.Name] = append(byName[p.Name], p)
		}
	}
	out := map[string]PhaseResult{}
	for n, ps := range byName {
		out[n] = MergePhases(ps)
	}
	return out
}

func op(p PhaseResult, name string) OpResult {
	for _, o := range p.Ops {
		if o.Name == name {
			return o
		}
	}
	return OpResult{}
}

// TestEveryWorkloadTiny runs every built-in workload at a tiny size with 2
// workers of 2 threads on a temporary directory and checks that every phase
// measured plausible, non-zero figures without errors, and that nothing is
// left behind.
func TestEveryWorkloadTiny(t *testing.T) {
	const workers, threads = 2, 2
	g := int64(workers * threads)
	traceFile := writeTestTrace(t)
	tests := []struct {
		kind  string
		set   map[string]string
		check func(t *testing.T, ph map[string]PhaseResult)
	}{
		{"metadata", map[string]string{"files": "20", "file_size": "100", "trees": "2", "tree_fanout": "2", "tree_depth": "1", "tree_files": "2"},
			func(t *testing.T, ph map[string]PhaseResult) {
				want := map[string][2]any{
					PhaseDirCreation: {"mkdir", 20 * g}, PhaseDirStat: {"stat", 20 * g}, PhaseDirRemoval: {"rmdir", 20 * g},
					PhaseFileCreation: {"create", 20 * g}, PhaseFileStat: {"stat", 20 * g}, PhaseFileRead: {"read", 20 * g},
					PhaseRename: {"rename", 20 * g}, PhaseFileRemoval: {"unlink", 20 * g}, PhaseTreeCreation: {"tree", 2 * g},
					PhaseTreeRemoval: {"tree", 2 * g},
				}
				for p, w := range want {
					if o := op(ph[p], w[0].(string)); o.Count != w[1].(int64) {
						t.Errorf("%s: %s count %d, want %d", p, w[0], o.Count, w[1])
					}
				}
				if b := op(ph[PhaseFileRead], "read").Bytes; b != 100*20*g {
					t.Errorf("FileRead bytes %d", b)
				}
				// A tree of fanout 2, depth 1: 3 directories with 2 files each.
				if items := op(ph[PhaseTreeCreation], "tree").Items; items != 9*2*g {
					t.Errorf("TreeCreation items %d, want %d", items, 9*2*g)
				}
				if items := op(ph[PhaseTreeRemoval], "tree").Items; items != 9*2*g {
					t.Errorf("TreeRemoval items %d, want %d", items, 9*2*g)
				}
			}},
		{"metadata", map[string]string{"files": "10", "shared_dir": "true", "phases": "FileCreation,FileStat,FileRemoval"},
			func(t *testing.T, ph map[string]PhaseResult) {
				if len(ph) != 3 || op(ph[PhaseFileStat], "stat").Count != 10*g {
					t.Errorf("shared dir phases %v", ph)
				}
			}},
		{"seq-write", map[string]string{"files": "2", "file_size": "64KiB", "block_size": "16KiB", "fsync": "true"},
			func(t *testing.T, ph map[string]PhaseResult) {
				o := op(ph["write"], "write")
				if o.Bytes != 2*64<<10*g || o.Count != 2*4*g {
					t.Errorf("write bytes %d count %d", o.Bytes, o.Count)
				}
				if op(ph["write"], "fsync").Count != 2*g {
					t.Errorf("fsync count %d", op(ph["write"], "fsync").Count)
				}
			}},
		{"seq-read", map[string]string{"files": "2", "file_size": "uniform(10KiB,20KiB)", "block_size": "4KiB", "drop_cache": "true"},
			func(t *testing.T, ph map[string]PhaseResult) {
				o := op(ph["read"], "read")
				if o.Bytes < 2*10<<10*g || o.Bytes > 2*20<<10*g {
					t.Errorf("read bytes %d", o.Bytes)
				}
			}},
		{"random-read", map[string]string{"files": "2", "file_size": "64KiB", "block_size": "4KiB", "ops": "50"},
			func(t *testing.T, ph map[string]PhaseResult) {
				if o := op(ph["read"], "read"); o.Count != 50*g || o.Bytes != 50*4096*g {
					t.Errorf("random read count %d bytes %d", o.Count, o.Bytes)
				}
			}},
		{"random-read", map[string]string{"files": "1", "file_size": "64KiB", "block_size": "4KiB", "ops": "50", "shared": "true"},
			func(t *testing.T, ph map[string]PhaseResult) {
				if o := op(ph["read"], "read"); o.Count != 50*g || o.Bytes != 50*4096*g {
					t.Errorf("shared random read count %d bytes %d", o.Count, o.Bytes)
				}
			}},
		{"random-write", map[string]string{"files": "2", "file_size": "64KiB", "block_size": "4KiB", "ops": "50", "fsync": "true"},
			func(t *testing.T, ph map[string]PhaseResult) {
				if o := op(ph["write"], "write"); o.Count != 50*g || o.Bytes != 50*4096*g {
					t.Errorf("random write count %d bytes %d", o.Count, o.Bytes)
				}
			}},
		{"skip-read", map[string]string{"files": "2", "file_size": "256KiB", "block_size": "4KiB", "skip_size": "uniform(0,16KiB)"},
			func(t *testing.T, ph map[string]PhaseResult) {
				o := op(ph["read"], "read")
				// About 256/(4+8) reads per file: skips make it fewer than 64.
				if o.Count < 2*10*g || o.Count >= 2*64*g || o.Bytes <= 0 {
					t.Errorf("skip read count %d bytes %d", o.Count, o.Bytes)
				}
			}},
		{"mixed", map[string]string{"files": "4", "file_size": "8KiB", "ops": "40", "read_ratio": "0.5", "shuffle": "true"},
			func(t *testing.T, ph map[string]PhaseResult) {
				r, w := op(ph["mixed"], "read"), op(ph["mixed"], "write")
				if r.Count+w.Count != 40*g || r.Count == 0 || w.Count == 0 || r.Bytes != r.Count*8192 || w.Bytes != w.Count*8192 {
					t.Errorf("mixed read %+v write %+v", r.Count, w.Count)
				}
			}},
		{"iterative", map[string]string{"iterations": "2", "files": "2", "file_size": "8KiB", "shuffle": "true"},
			func(t *testing.T, ph map[string]PhaseResult) {
				r, w := op(ph["iterate"], "read"), op(ph["iterate"], "write")
				if r.Count != 2*2*g || w.Count != 2*2*g || r.Bytes != 2*2*8192*g {
					t.Errorf("iterative read %d (%d B) write %d", r.Count, r.Bytes, w.Count)
				}
			}},
		{"massive", map[string]string{"files": "8", "file_size": "16KiB", "block_size": "4KiB", "ops": "100", "shuffle": "true"},
			func(t *testing.T, ph map[string]PhaseResult) {
				r, w := op(ph["massive"], "read"), op(ph["massive"], "write")
				if r.Count+w.Count != 100*g || r.Bytes > r.Count*4096 || r.Bytes < r.Count {
					t.Errorf("massive read %d (%d B) write %d", r.Count, r.Bytes, w.Count)
				}
			}},
		{"small-files", map[string]string{"sizes": "1KiB,16KiB", "files": "10"},
			func(t *testing.T, ph map[string]PhaseResult) {
				for _, sz := range []int64{1024, 16384} {
					w, r := op(ph["write-"+FormatSize(sz)], "write"), op(ph["read-"+FormatSize(sz)], "read")
					if w.Count != 10*g || r.Count != 10*g || r.Bytes != 10*sz*g || w.Bytes != 10*sz*g {
						t.Errorf("size %d: write %d/%d read %d/%d", sz, w.Count, w.Bytes, r.Count, r.Bytes)
					}
				}
			}},
		{"dl-traversal", map[string]string{"fanout": "3", "depth": "2", "files_per_dir": "5", "file_size": "uniform(1KiB,2KiB)", "epochs": "2", "burst": "2"},
			func(t *testing.T, ph map[string]PhaseResult) {
				for _, e := range []string{"epoch-1", "epoch-2"} {
					// Sharded: each epoch reads each of the 45 files once across all threads.
					if o := op(ph[e], "read"); o.Count != 45 || o.Bytes < 45*1024 || o.Bytes > 45*2048 {
						t.Errorf("%s: %d reads of %d bytes", e, o.Count, o.Bytes)
					}
				}
			}},
		{"dl-traversal", map[string]string{"fanout": "2", "depth": "1", "files_per_dir": "3", "file_size": "1KiB", "epochs": "1", "shard": "false", "mode": "write"},
			func(t *testing.T, ph map[string]PhaseResult) {
				if o := op(ph["epoch-1"], "write"); o.Count != 6*g || o.Bytes != 6*1024*g {
					t.Errorf("unsharded write: %d writes of %d bytes", o.Count, o.Bytes)
				}
			}},
		{"insert", map[string]string{"file_size": "256KiB", "insert_size": "4KiB", "block_size": "64KiB", "ops": "4"},
			func(t *testing.T, ph map[string]PhaseResult) {
				for _, p := range []string{"insert", "overwrite", "delete"} {
					o := op(ph[p], p)
					if o.Count != 4*g || o.Bytes <= 0 {
						t.Errorf("%s: count %d bytes %d", p, o.Count, o.Bytes)
					}
				}
				// Insertion moves the tail, overwriting does not.
				if op(ph["insert"], "insert").Bytes <= op(ph["overwrite"], "overwrite").Bytes {
					t.Errorf("insert moved %d bytes, overwrite %d", op(ph["insert"], "insert").Bytes, op(ph["overwrite"], "overwrite").Bytes)
				}
				if b := op(ph["overwrite"], "overwrite").Bytes; b != 4*4096*g {
					t.Errorf("overwrite bytes %d", b)
				}
			}},
		{"replay", map[string]string{"trace": traceFile},
			func(t *testing.T, ph map[string]PhaseResult) {
				p := ph["replay"]
				var total int64
				for _, o := range p.Ops {
					total += o.Count
					if o.Errors != 0 {
						t.Errorf("replay op %s: %d mismatches: %s", o.Name, o.Errors, o.FirstError)
					}
				}
				if total != 12*g {
					t.Errorf("replayed %d operations, want %d", total, 12*g)
				}
				if p.Extra["records"] != 12 || p.Extra["recorded_s"] <= 0 {
					t.Errorf("extra %v", p.Extra)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			raw := map[string]string{"threads": fmt.Sprint(threads), "duration": "30s"}
			for k, v := range tc.set {
				raw[k] = v
			}
			spec, err := Resolve(tc.kind, raw)
			if err != nil {
				t.Fatal(err)
			}
			f, dir := openTemp(t, spec.Confined())
			results := runWorkers(t, f, spec, workers)
			for _, r := range results {
				if r.Error != "" {
					t.Fatalf("worker error: %s", r.Error)
				}
				if len(r.Phases) != len(mustNew(t, spec).Phases()) {
					t.Fatalf("%d phases, want %d", len(r.Phases), len(mustNew(t, spec).Phases()))
				}
			}
			ph := merged(results)
			for name, p := range ph {
				if p.EndNs <= p.StartNs || p.Threads != int(g) || p.Truncated || p.Error != "" {
					t.Errorf("phase %s: window [%d,%d] threads %d truncated %v error %q", name, p.StartNs, p.EndNs, p.Threads, p.Truncated, p.Error)
				}
				for _, o := range p.Ops {
					if o.Name == "wait" {
						continue
					}
					if o.Count <= 0 || o.Latency.Count() != uint64(o.Count) || o.Latency.Max() <= 0 {
						t.Errorf("phase %s op %s: count %d latency count %d max %v", name, o.Name, o.Count, o.Latency.Count(), o.Latency.Max())
					}
					if o.Errors != 0 && tc.kind != "replay" {
						t.Errorf("phase %s op %s: %d errors, first: %s", name, o.Name, o.Errors, o.FirstError)
					}
				}
			}
			tc.check(t, ph)
			left, _ := os.ReadDir(dir)
			if len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func mustNew(t *testing.T, s *Spec) Workload {
	w, err := s.New()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// writeTestTrace records a small application through the recording wrapper
// and returns the trace file: the same path the FUSE recorder will take.
func writeTestTrace(t *testing.T) string {
	t.Helper()
	src, _ := openTemp(t, false)
	// The application expects an input file and a directory to exist.
	if err := fsys.MkdirAll(src, "in", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile(src, "in/data", bytes.Repeat([]byte("z"), 10000), 0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "app.trace")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := optrace.NewRecorder(out, optrace.Header{Source: "fsys-recorder"})
	if err != nil {
		t.Fatal(err)
	}
	app := func(tid int64, name string) {
		f := fsys.Record(src, rec, tid)
		in, _ := f.OpenFile("in/data", syscall.O_RDONLY, 0)
		buf := make([]byte, 4096)
		for {
			if _, err := in.Read(buf); err != nil {
				break
			}
		}
		in.Close()
		_ = f.Mkdir("out-"+name, 0o755)
		o, _ := f.OpenFile("out-"+name+"/r", syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
		o.Write(buf)
		o.Close()
		f.Stat("out-" + name + "/missing") // fails, and must fail on replay too
	}
	// Two recorded threads (tids) one after the other: open, 4 reads (the last
	// at EOF), close, mkdir, open, write, close, stat, rename: 12 records.
	app(1, "a")
	time.Sleep(time.Millisecond)
	f := fsys.Record(src, rec, 2)
	if err := f.Rename("out-a/r", "out-a/s"); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplayCountsMismatches replays a trace whose recording saw a file that
// the prestate cannot know about, and checks the replay reports the mismatch.
func TestReplayCountsMismatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.trace")
	content := optrace.Magic + "\n" +
		"0\t10\t1\tmkdir\t0\t0\t0\t0\t0\t755\t/d\t\n" +
		"20\t10\t1\tmkdir\t-17\t0\t0\t0\t0\t755\t/d\t\n" + // EEXIST when recorded and on replay: a match
		"40\t10\t1\trmdir\t-39\t0\t0\t0\t0\t0\t/d\t\n" + // ENOTEMPTY when recorded, succeeds on replay: a mismatch
		"60\t10\t2\tstat\t0\t0\t0\t-1\t0\t0\t/d\t\n" // the rmdir above removed it: a mismatch
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := Resolve("replay", map[string]string{"trace": path, "pace": "recorded", "speed": "1000"})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := openTemp(t, true)
	res := runWorkers(t, f, spec, 1)
	p := merged(res)["replay"]
	var errs int64
	for _, o := range p.Ops {
		errs += o.Errors
	}
	if errs != 2 || op(p, "rmdir").Errors != 1 || op(p, "stat").Errors != 1 || op(p, "mkdir").Errors != 0 {
		t.Fatalf("mismatches %d: %+v", errs, p.Ops)
	}
	if !strings.Contains(op(p, "rmdir").FirstError, "failed when recorded (directory not empty), succeeded on replay") {
		t.Fatalf("message %q", op(p, "rmdir").FirstError)
	}
}

// TestReplayStopsAtTimeBound checks that a replay at the recorded pace is cut
// by the phase's time bound and says so.
func TestReplayStopsAtTimeBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slow.trace")
	content := optrace.Magic + "\n" +
		"0\t10\t1\tmkdir\t0\t0\t0\t0\t0\t755\t/a\t\n" +
		"60000000000\t10\t1\tmkdir\t0\t0\t0\t0\t0\t755\t/b\t\n" // one minute later
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := Resolve("replay", map[string]string{"trace": path, "pace": "recorded", "duration": "300ms"})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := openTemp(t, true)
	start := time.Now()
	res := runWorkers(t, f, spec, 1)
	if time.Since(start) > 10*time.Second {
		t.Fatalf("replay ignored its time bound")
	}
	p := merged(res)["replay"]
	if !p.Truncated || op(p, "mkdir").Count != 1 {
		t.Fatalf("truncated %v, mkdirs %d", p.Truncated, op(p, "mkdir").Count)
	}
}

// noSpaceFS fails every write once a byte budget is spent, like a full disk.
type noSpaceFS struct {
	fsys.FS
	mu     sync.Mutex
	budget int64
}

func (n *noSpaceFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	f, err := n.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &noSpaceFile{File: f, fs: n}, nil
}

type noSpaceFile struct {
	fsys.File
	fs *noSpaceFS
}

func (f *noSpaceFile) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.budget < int64(len(b)) {
		return 0, &fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	}
	f.fs.budget -= int64(len(b))
	return f.File.Write(b)
}

// TestFullDiskKeepsPartialResults fills the "disk" during the second phase:
// the first phase's results are kept, the run stops with a clear message.
func TestFullDiskKeepsPartialResults(t *testing.T) {
	base, _ := openTemp(t, false)
	f := &noSpaceFS{FS: base, budget: 20 * 1000}
	spec, err := Resolve("small-files", map[string]string{"sizes": "1000,5000", "files": "10", "threads": "2"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(f, spec, Placement{Workers: 1, Dir: "rep"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	res := r.Run(ctx)
	if len(res.Phases) != 3 {
		t.Fatalf("%d phases run, want 3 (write-1000, read-1000, write-5000 then stop)", len(res.Phases))
	}
	if op(res.Phases[0], "write").Errors != 0 || op(res.Phases[1], "read").Count != 20 {
		t.Fatalf("first phases damaged: %+v", res.Phases[:2])
	}
	if !strings.Contains(res.Error, "phase write-5000") || !strings.Contains(res.Error, "no space left on device") ||
		!strings.Contains(res.Error, "1 later phases skipped") {
		t.Fatalf("error %q", res.Error)
	}
	if !errors.Is(syscall.ENOSPC, syscall.ENOSPC) || res.Phases[2].Error == "" {
		t.Fatalf("phase error missing")
	}
}

// TestTimeBound checks that a phase stops at its time bound and is marked.
func TestTimeBound(t *testing.T) {
	f, _ := openTemp(t, false)
	spec, err := Resolve("metadata", map[string]string{"files": "10000000", "duration": "200ms", "phases": "DirCreation,DirRemoval"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res := runWorkers(t, f, spec, 1)
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("took %v", el)
	}
	p := res[0].Phases[0]
	if !p.Truncated || op(p, "mkdir").Count == 0 || op(p, "mkdir").Count >= 10000000 {
		t.Fatalf("phase %+v", p)
	}
	// Removal removes exactly what creation made.
	if rm := op(res[0].Phases[1], "rmdir"); rm.Errors != 0 || (rm.Count != op(p, "mkdir").Count && !res[0].Phases[1].Truncated) {
		t.Fatalf("rmdir %d (errors %d) after %d mkdirs", rm.Count, rm.Errors, op(p, "mkdir").Count)
	}
}
