package extentstore

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// syncCounter counts fsyncs of extent files and of the metadata log, and
// renames (a snapshot replacing the log).
type syncCounter struct {
	mu                 sync.Mutex
	ext, meta, renames int
}

func (c *syncCounter) Inject(op diskfs.Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case op.Kind == diskfs.OpSync && strings.Contains(op.Path, "ext-"):
		c.ext++
	case op.Kind == diskfs.OpSync && strings.Contains(op.Path, metaName): // META, or META.tmp renamed over it
		c.meta++
	case op.Kind == diskfs.OpRename:
		c.renames++
	}
	return nil
}

func (c *syncCounter) take() (ext, meta, renames int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ext, meta, renames = c.ext, c.meta, c.renames
	c.ext, c.meta, c.renames = 0, 0, 0
	return
}

// errorCounter is a slog handler that counts records at level Error.
type errorCounter struct {
	mu sync.Mutex
	n  int
}

func (h *errorCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}
func (h *errorCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorCounter) WithGroup(string) slog.Handler      { return h }

// TestJournaledAppends checks the append journal: a round of small appends
// fsyncs the log and no extent file; the bytes survive a crash that loses
// every unsynced write, with no alarm at recovery; appends past the bound,
// or after a write in place, fsync the file; and the round that rewrites the
// log fsyncs the files whose bytes only the old log held.
func TestJournaledAppends(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	mem := diskfs.NewMem()
	cnt := &syncCounter{}
	opt := smallOpts(diskfs.Inject(mem, cnt))
	opt.CompactBytes = 1 << 20 // no compaction until the last part
	s := mustOpen(t, "/dp", opt)
	ids := make([]uint64, 3)
	want := map[uint64][]byte{}
	for i := range ids {
		id, err := s.NewExtent(KindLarge)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	appendSync := func(n int) {
		t.Helper()
		for _, id := range ids {
			p := randBytes(rng, n)
			mustAppend(t, s, id, p)
			want[id] = append(want[id], p...)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	cnt.take()

	// Small appends: the log's fsync only.
	for range 3 {
		appendSync(700)
		if ext, meta, _ := cnt.take(); ext != 0 || meta != 1 {
			t.Fatalf("a round of small appends to 3 extents: %d extent fsyncs, %d log fsyncs; want 0 and 1", ext, meta)
		}
	}

	// A crash that keeps only what was synced loses none of them.
	check := func(fs diskfs.FS, what string) {
		t.Helper()
		errs := &errorCounter{}
		o := smallOpts(fs)
		o.Logger = slog.New(errs)
		s2 := mustOpen(t, "/dp", o)
		defer s2.Close()
		for _, id := range ids {
			if got := readAll(t, s2, id, 333); !bytes.Equal(got, want[id]) {
				t.Fatalf("%s: extent %d: %d bytes, want %d", what, id, len(got), len(want[id]))
			}
		}
		if bad, err := s2.Scrub(context.Background(), ScrubOptions{}); err != nil || len(bad) != 0 {
			t.Fatalf("%s: scrub: %+v %v", what, bad, err)
		}
		if errs.n != 0 {
			t.Fatalf("%s: recovery logged %d errors", what, errs.n)
		}
	}
	check(mem.Crash(diskfs.CrashLoseUnsynced, rng), "crash after journaled rounds")

	// Past the bound: the file is fsynced.
	for _, id := range ids[:1] {
		for range 2 {
			p := randBytes(rng, opt.MaxWriteBytes*3/4)
			mustAppend(t, s, id, p)
			want[id] = append(want[id], p...)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if ext, _, _ := cnt.take(); ext != 1 {
		t.Fatalf("appends past the journal's bound: %d extent fsyncs, want 1", ext)
	}

	// An overwrite in place, then an append: the file is fsynced.
	op := OverwriteOp{ID: ids[1], Off: 10, P: randBytes(rng, 100)}
	if errs := s.OverwriteBatch([]OverwriteOp{op}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	copy(want[ids[1]][10:], op.P)
	p := randBytes(rng, 50)
	mustAppend(t, s, ids[1], p)
	want[ids[1]] = append(want[ids[1]], p...)
	cnt.take()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if ext, _, _ := cnt.take(); ext != 1 {
		t.Fatalf("an append after an overwrite: %d extent fsyncs, want 1", ext)
	}
	check(mem.Crash(diskfs.CrashLoseUnsynced, rng), "crash after mixed rounds")

	// The round that rewrites the log fsyncs every file the old log covered,
	// also those it has nothing new for.
	appendSync(100)
	if ext, _, _ := cnt.take(); ext != 0 {
		t.Fatalf("a round of small appends: %d extent fsyncs", ext)
	}
	s.opt.CompactBytes = 1
	p = randBytes(rng, 10)
	mustAppend(t, s, ids[0], p)
	want[ids[0]] = append(want[ids[0]], p...)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	ext, _, renames := cnt.take()
	if renames != 1 || ext != len(ids) {
		t.Fatalf("compacting round: %d renames, %d extent fsyncs; want 1 and %d", renames, ext, len(ids))
	}
	check(mem.Crash(diskfs.CrashLoseUnsynced, rng), "crash after compaction")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactGivesBackDeletedBytes: small files journaled in the log and
// then punched or deleted leave their bytes in the log's tail until it is
// rewritten; Compact rewrites it at once, leaving the snapshot alone, and
// a crash right after loses no live byte.
func TestCompactGivesBackDeletedBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	mem := diskfs.NewMem()
	opt := smallOpts(mem)
	opt.CompactBytes = 64 << 20 // no compaction by growth
	s := mustOpen(t, "/dp", opt)
	small, err := s.NewExtent(KindSmall)
	if err != nil {
		t.Fatal(err)
	}
	large, err := s.NewExtent(KindLarge)
	if err != nil {
		t.Fatal(err)
	}
	var kept []byte
	const files, size = 200, 1 << 10
	for i := range files {
		p := randBytes(rng, size)
		mustAppend(t, s, small, p)
		mustAppend(t, s, large, p[:100])
		if i == files-1 {
			kept = p
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PunchSmall(small, 0, (files-1)*size); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteExtent(large); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	before := s.Journal()
	if tail := before.Bytes - before.SnapshotBytes; tail < files*size {
		t.Fatalf("log tail %d bytes before Compact, want at least the %d journaled", tail, files*size)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	after := s.Journal()
	if after.Bytes != after.SnapshotBytes || after.Bytes > before.Bytes/20 {
		t.Fatalf("after Compact: log %d bytes, snapshot %d; before %d", after.Bytes, after.SnapshotBytes, before.Bytes)
	}
	s2 := mustOpen(t, "/dp", smallOpts(mem.Crash(diskfs.CrashLoseUnsynced, rng)))
	defer s2.Close()
	got := readAll(t, s2, small, 1<<20)
	if len(got) != files*size || !bytes.Equal(got[(files-1)*size:], kept) || !bytes.Equal(got[:(files-1)*size], make([]byte, (files-1)*size)) {
		t.Fatalf("after a crash past Compact: %d bytes, the kept file equal %v", len(got), bytes.Equal(got[len(got)-size:], kept))
	}
	if _, err := s2.Stat(large); err == nil {
		t.Fatal("the deleted extent is back after the crash")
	}
	_ = s.Close()
}
