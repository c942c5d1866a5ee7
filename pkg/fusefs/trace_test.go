package fusefs

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/optrace"
)

func newTestTracer(t *testing.T) (*tracer, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	rec, err := optrace.NewRecorder(&buf, optrace.Header{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return newTracer(rec), &buf
}

func TestTracerPaths(t *testing.T) {
	tr, _ := newTestTracer(t)
	if p := tr.path(1); p != "/" {
		t.Fatalf("root %q", p)
	}
	tr.learn(1, "a", 10)
	tr.learn(10, "b", 11)
	tr.learn(11, "f", 12)
	if p := tr.path(12); p != "/a/b/f" {
		t.Fatalf("path %q", p)
	}
	if p := tr.child(11, "g"); p != "/a/b/g" {
		t.Fatalf("child %q", p)
	}
	if p := tr.child(1, "x"); p != "/x" {
		t.Fatalf("child of root %q", p)
	}
	// Renaming a directory moves everything below it.
	tr.renamed(10, "b", 1, "c", 0)
	if p := tr.path(12); p != "/c/f" {
		t.Fatalf("after rename %q", p)
	}
	// Exchange swaps two names.
	tr.learn(1, "d", 20)
	tr.renamed(1, "c", 1, "d", 2) // RENAME_EXCHANGE
	if p, q := tr.path(11), tr.path(20); p != "/d" || q != "/c" {
		t.Fatalf("after exchange %q %q", p, q)
	}
	// Forget counts the kernel's references.
	tr.learn(11, "f", 12) // a second lookup
	tr.forget(12, 1)
	if p := tr.path(12); p != "/d/f" {
		t.Fatalf("after one forget %q", p)
	}
	tr.forget(12, 1)
	if p := tr.path(12); p != "/.cairn-unknown/ino-12" {
		t.Fatalf("forgotten node %q", p)
	}
	tr.forget(99, 5) // unknown: ignored
	tr.removed(1, "a")
	if _, ok := tr.children[childKey{1, "a"}]; ok {
		t.Fatal("removed name still mapped")
	}
	// A cycle (a corrupt map) ends at the depth bound instead of looping.
	tr.learn(30, "x", 31)
	tr.learn(31, "y", 30)
	if p := tr.path(30); len(p) == 0 || p[0] != '/' {
		t.Fatalf("cycle %q", p)
	}
}

func TestTracerBounded(t *testing.T) {
	tr, _ := newTestTracer(t)
	for i := range uint64(maxTraceNodes + 10) {
		tr.learn(1, "n", 100+i)
	}
	if len(tr.nodes) != maxTraceNodes {
		t.Fatalf("%d nodes kept, bound %d", len(tr.nodes), maxTraceNodes)
	}
}

func TestTracerRecords(t *testing.T) {
	tr, buf := newTestTracer(t)
	tr.learn(1, "d", 5)
	h := &fuse.InHeader{NodeId: 5, Caller: fuse.Caller{Pid: 77}}
	now := time.Now()
	tr.open(now, h, 3, tr.child(5, "f"), syscall.O_CREAT|syscall.O_WRONLY, 0o100644, fuse.OK)
	tr.io(now, h, optrace.OpWrite, 3, 0, 100, fuse.OK, 100)
	tr.io(now, h, optrace.OpRead, 3, 100, 50, fuse.EIO, 0)
	o := tr.closed(3)
	tr.record(now, h, optrace.Event{Op: optrace.OpClose, Handle: o.id, Path: o.path}, fuse.OK, 0)
	tr.stat(now, h, "/d/nope", fuse.ENOENT, nil)
	tr.open(now, h, 4, "/d/missing", 0, 0, fuse.ENOENT)
	if err := tr.rec.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := optrace.Read(buf, 100)
	if err != nil {
		t.Fatal(err)
	}
	ev := got.Events
	if len(ev) != 6 {
		t.Fatalf("%d records: %+v", len(ev), ev)
	}
	if ev[0].Op != optrace.OpOpen || ev[0].Path != "/d/f" || ev[0].Handle == 0 || ev[0].Mode != 0o644 || ev[0].TID != 77 {
		t.Errorf("open %+v", ev[0])
	}
	if ev[1].Handle != ev[0].Handle || ev[1].Result != 100 || ev[1].Size != 100 || ev[1].Path != "/d/f" {
		t.Errorf("write %+v", ev[1])
	}
	if ev[2].Result != -int64(syscall.EIO) || ev[2].Offset != 100 {
		t.Errorf("read %+v", ev[2])
	}
	if ev[3].Op != optrace.OpClose || ev[3].Handle != ev[0].Handle {
		t.Errorf("close %+v", ev[3])
	}
	if ev[4].Result != -int64(syscall.ENOENT) || ev[4].Flags != optrace.StatNoFollow {
		t.Errorf("stat %+v", ev[4])
	}
	if ev[5].Handle != 0 || ev[5].Result != -int64(syscall.ENOENT) {
		t.Errorf("failed open %+v", ev[5])
	}
}
