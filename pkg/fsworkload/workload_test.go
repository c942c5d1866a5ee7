package fsworkload

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/checker"
	"github.com/cairnfs/cairn/pkg/history"
)

// TestWorkloadOnLocalFS runs the nemesis workload for two "hosts" on one
// local directory, a file system whose every operation is linearizable
// but for reads that overlap a write of the same page: its history must
// check clean, and the history file must read back as recorded. The two
// hosts share one kernel, so a write on one can tear a read on the other
// (the page cache copies a write into the page while another reader
// copies out of it); the checker excuses such a read only on the writer's
// own host, so the check sees both as the one host they are.
func TestWorkloadOnLocalFS(t *testing.T) {
	dir := t.TempDir()
	var file bytes.Buffer
	rec := history.NewRecorder(&file)
	start := time.Now()
	w, err := New(Config{Root: "run", Hosts: map[string]Files{"c1": Dir(dir), "c2": Dir(dir)},
		WorkersPerHost: 3, Registers: 3, Dirs: 1, Names: 3, Pause: time.Millisecond, Seed: 7}, rec, start)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Setup(); err != nil {
		t.Fatal(err)
	}
	w.Run(context.Background(), time.Now().Add(1500*time.Millisecond))
	if err := w.Final(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	ops := rec.Ops()
	oneKernel := slices.Clone(ops)
	for i := range oneKernel {
		oneKernel[i].Host = "kernel"
	}
	rep := checker.Check(oneKernel, checker.Options{})
	if len(rep.Anomalies) > 0 || len(rep.Undecided) > 0 {
		t.Fatalf("a local file system's history: %s", rep)
	}
	kinds := map[history.Kind]int{}
	for _, op := range ops {
		kinds[op.Kind]++
	}
	for _, k := range []history.Kind{history.Write, history.Read, history.Append, history.ReadAppends, history.Create,
		history.Unlink, history.Rename, history.Stat, history.List} {
		if kinds[k] == 0 {
			t.Errorf("no %s operation in %d", k, len(ops))
		}
	}
	back, err := history.ReadOps(&file)
	if err != nil || len(back) != len(ops) {
		t.Fatalf("history file: %d ops, %v; recorded %d", len(back), err, len(ops))
	}
	t.Logf("%d operations: %s", len(ops), rep)
}

// TestUnlinkIsUnlinkAlone: the workload's unlink is unlink(2) and nothing
// else. os.Remove falls back to rmdir(2) and reports its errno, which made
// an unlink that timed out after removing its name read as ENOENT: here an
// empty directory, which os.Remove would remove, stays, and the error is
// unlink's own (EISDIR), which leaves the outcome unknown.
func TestUnlinkIsUnlinkAlone(t *testing.T) {
	root := Dir(t.TempDir())
	d := root.path("d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	err := root.Unlink("d")
	if !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("unlink of a directory: %v, want EISDIR", err)
	}
	if _, serr := os.Stat(d); serr != nil {
		t.Fatalf("the directory is gone: %v", serr)
	}
	if o, _ := outcomeOf(history.Unlink, err); o != history.Unknown {
		t.Fatalf("outcome of an unlink failing with EISDIR: %v, want unknown", o)
	}
	if o, _ := outcomeOf(history.Unlink, root.Unlink("d/missing")); o != history.Fail {
		t.Fatalf("outcome of an unlink of a missing name: %v, want a failure", o)
	}
}
