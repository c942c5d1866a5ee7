package extentstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// flipByte changes one byte of a file behind the store's back: bit rot.
func flipByte(t *testing.T, fs diskfs.FS, name string, off int64) {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCorruption(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			opt := smallOpts(diskfs.NewMem())
			dir := "/dp"
			if fsName == "os" {
				opt.FS, dir = diskfs.OS, t.TempDir()
			}
			s := mustOpen(t, dir, opt)
			defer s.Close()
			rng := rand.New(rand.NewPCG(21, 22))
			large, _ := s.NewExtent(KindLarge)
			small, _ := s.NewExtent(KindSmall)
			data := randBytes(rng, 3000) // blocks 0..5, the last partial
			mustAppend(t, s, large, data)
			files := [][]byte{randBytes(rng, 700), randBytes(rng, 300), randBytes(rng, 900)}
			for _, f := range files {
				mustAppend(t, s, small, f)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			// Punch the middle small file: a hole must not look corrupt.
			if err := s.PunchSmall(small, 700, 300); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(dir, "ext-"+strconv.FormatUint(large, 10))
			flipByte(t, opt.FS, name, 1300) // block 2
			flipByte(t, opt.FS, name, 2999) // block 5, the partial tail

			// ReadAt returns the good prefix and a typed error naming the block.
			p := bytes.Repeat([]byte{0xee}, 3000)
			n, err := s.ReadAt(large, p, 0)
			var ce *CorruptionError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Extent != large || ce.Block != 2 || ce.Offset != 1024 {
				t.Fatalf("ReadAt over a flipped byte: n=%d err=%v", n, err)
			}
			if n != 1024 || !bytes.Equal(p[:n], data[:n]) {
				t.Fatalf("ReadAt returned %d bytes before the bad block, want 1024", n)
			}
			if !bytes.Equal(p[n:], make([]byte, 3000-n)) {
				t.Fatal("ReadAt left bytes of or after the bad block in the buffer")
			}
			// A read of an untouched block still works.
			if _, err := s.ReadAt(large, p[:512], 512); err != nil {
				t.Fatalf("read of a good block: %v", err)
			}
			// Operations that would bless the corruption refuse.
			if err := s.Overwrite(large, 1100, []byte{1, 2}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("overwrite of a partial corrupt block: %v", err)
			}
			if _, err := s.Section(large, 1024, 10, false); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("section over a corrupt block: %v", err)
			}
			// A section covering the corrupt block whole leaves the check to
			// the receiver: its CRC is the block's stored one, which the
			// bytes on disk no longer match. Asked to verify, it refuses.
			sec, err := s.Section(large, 1024, 512, false)
			if err != nil {
				t.Fatalf("section covering a corrupt block whole: %v", err)
			}
			onDisk := make([]byte, 512)
			if _, err := sec.ReadAt(onDisk, 0); err != nil {
				t.Fatal(err)
			}
			if sec.CRC() != crc32.Checksum(data[1024:1536], castagnoli) || sec.CRC() == crc32.Checksum(onDisk, castagnoli) {
				t.Fatal("the section's CRC is not the stored one, or the corrupt bytes match it")
			}
			sec.Close()
			if _, err := s.Section(large, 1024, 512, true); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("verified section over a corrupt block: %v", err)
			}

			bad, err := s.Scrub(context.Background(), ScrubOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(bad) != 2 || bad[0].Block != 2 || bad[1].Block != 5 || bad[0].Extent != large {
				t.Fatalf("scrub found %+v, want blocks 2 and 5 of extent %d", bad, large)
			}
			if b, _ := s.Scrub(context.Background(), ScrubOptions{MaxBad: 1}); len(b) != 1 {
				t.Fatalf("scrub with MaxBad 1 returned %d", len(b))
			}
			// Repair: wrong bytes are refused, the replica's bytes accepted.
			wrong := append([]byte(nil), data[1024:1536]...)
			wrong[0] ^= 1
			if err := s.RepairBlock(large, 2, wrong); !errors.Is(err, ErrRepairMismatch) {
				t.Fatalf("repair with wrong bytes: %v", err)
			}
			for _, b := range bad {
				if err := s.RepairBlock(b.Extent, b.Block, data[b.Offset:b.Offset+b.Length]); err != nil {
					t.Fatalf("repair block %d: %v", b.Block, err)
				}
			}
			if bad, err := s.Scrub(context.Background(), ScrubOptions{}); err != nil || len(bad) != 0 {
				t.Fatalf("scrub after repair: %+v %v", bad, err)
			}
			if got := readAll(t, s, large, 1000); !bytes.Equal(got, data) {
				t.Fatal("content after repair differs")
			}

			// A small extent: a hole plus corruption next to it. The repair
			// source's block holds the deleted file's old bytes (its hole
			// not yet punched): they count as zeros.
			sname := filepath.Join(dir, "ext-"+strconv.FormatUint(small, 10))
			flipByte(t, opt.FS, sname, 600) // block 1 = [512,1024): file 0 tail + hole
			bad, _ = s.Scrub(context.Background(), ScrubOptions{})
			if len(bad) != 1 || bad[0].Extent != small || bad[0].Block != 1 {
				t.Fatalf("scrub: %+v", bad)
			}
			// Punching next to corruption would bless it with a new CRC.
			if err := s.PunchSmall(small, 1000, 900); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("punch of a file sharing a corrupt block: %v", err)
			}
			all := append(append(append([]byte(nil), files[0]...), files[1]...), files[2]...)
			if err := s.RepairBlock(small, 1, all[512:1024]); err != nil {
				t.Fatalf("repair next to a hole: %v", err)
			}
			want := append(append(append([]byte(nil), files[0]...), make([]byte, 300)...), files[2]...)
			if got := readAll(t, s, small, 333); !bytes.Equal(got, want) {
				t.Fatal("small extent after repair differs")
			}
			if err := s.PunchSmall(small, 1000, 900); err != nil {
				t.Fatalf("punch after repair: %v", err)
			}
		})
	}
}

// TestTornWrite: a crash while the tail block is being extended leaves a
// partial block on disk that no record describes; recovery cuts it and the
// tail block's CRC holds. The converse - the record durable but the bytes
// not - cannot happen (the file is fsynced first), unless the disk lies: then
// the missing bytes read as corruption, which a repair fixes.
func TestTornWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for i := range 200 {
		mem := diskfs.NewMem()
		opt := smallOpts(mem)
		s := mustOpen(t, "/dp", opt)
		id, _ := s.NewExtent(KindLarge)
		committed := randBytes(rng, 1+rng.IntN(2000))
		mustAppend(t, s, id, committed)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		for range 1 + rng.IntN(3) {
			mustAppend(t, s, id, randBytes(rng, 1+rng.IntN(1500)))
		}
		mode := []diskfs.CrashMode{diskfs.CrashKeepPrefix, diskfs.CrashKeepSubset}[i%2]
		crashed := mem.Crash(mode, rng)
		s2 := mustOpen(t, "/dp", smallOpts(crashed))
		if got := readAll(t, s2, id, 4096); !bytes.Equal(got, committed) {
			t.Fatalf("case %d: after a torn append: %d bytes, want the %d committed", i, len(got), len(committed))
		}
		if bad, _ := s2.Scrub(context.Background(), ScrubOptions{}); len(bad) != 0 {
			t.Fatalf("case %d: %+v", i, bad)
		}
		s2.Close()
	}

	// The disk lost committed bytes (fsync lied): reads fail, repair works.
	// Without the append journal, which would write the bytes again at Open
	// (TestJournaledAppends).
	mem := diskfs.NewMem()
	noJournal := smallOpts(mem)
	noJournal.JournalAppendBytes = -1
	s := mustOpen(t, "/dp", noJournal)
	id, _ := s.NewExtent(KindLarge)
	data := randBytes(rng, 2000)
	mustAppend(t, s, id, data)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := mem.Open("/dp/ext-" + strconv.FormatUint(id, 10))
	f.Truncate(1100)
	f.Sync()
	f.Close()
	s = mustOpen(t, "/dp", noJournal)
	defer s.Close()
	bad, _ := s.Scrub(context.Background(), ScrubOptions{})
	if len(bad) != 2 || bad[0].Block != 2 || bad[1].Block != 3 {
		t.Fatalf("scrub of a file that lost its tail: %+v", bad)
	}
	for _, b := range bad {
		if err := s.RepairBlock(id, b.Block, data[b.Offset:b.Offset+b.Length]); err != nil {
			t.Fatal(err)
		}
	}
	if got := readAll(t, s, id, 700); !bytes.Equal(got, data) {
		t.Fatal("content after repairing lost bytes differs")
	}
}

// TestTornMetadata cuts and damages the metadata log's last records in every
// way and checks that Open falls back to the state before them, while
// damage inside the snapshot is refused.
func TestTornMetadata(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	mem := diskfs.NewMem()
	opt := smallOpts(mem)
	opt.CompactBytes = 1 << 30 // keep every record
	s := mustOpen(t, "/dp", opt)
	id, _ := s.NewExtent(KindLarge)
	var sizes []int64 // committed size after each record
	var data []byte
	for range 4 {
		p := randBytes(rng, 300)
		mustAppend(t, s, id, p)
		data = append(data, p...)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, int64(len(data)))
	}
	s.Close()
	meta, _ := mem.Stat("/dp/META")
	full := make([]byte, meta.Size)
	f, _ := mem.Open("/dp/META")
	f.ReadAt(full, 0)
	f.Close()
	// Record boundaries.
	var ends []int
	for off := 0; off < len(full); {
		_, n, err := decodeFrame(full[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += n
		ends = append(ends, off)
	}
	// Records: header, snapshot end, then create+state, state x3 (the
	// first Sync commits the creation with the first append).
	snapEnd := ends[1]
	lastStart := ends[len(ends)-2]

	write := func(b []byte) *diskfs.MemFS {
		m := mem.Crash(diskfs.CrashLoseUnsynced, nil)
		f, err := m.Create("/dp/META")
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(b, 0)
		f.Sync()
		f.Close()
		return m
	}
	expectSize := func(what string, m *diskfs.MemFS, want int64) {
		t.Helper()
		s, err := Open("/dp", smallOpts(m))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer s.Close()
		info, err := s.Stat(id)
		if err != nil || info.Size != want {
			t.Fatalf("%s: %+v %v, want size %d", what, info, err, want)
		}
		if got := readAll(t, s, id, 4096); !bytes.Equal(got, data[:want]) {
			t.Fatalf("%s: content differs", what)
		}
	}
	// Every cut inside the last record: the state before it.
	for cut := lastStart; cut < len(full); cut++ {
		expectSize(fmt.Sprintf("cut at %d", cut), write(full[:cut]), sizes[2])
	}
	// Garbage after the last record (a torn next record).
	expectSize("garbage tail", write(append(append([]byte(nil), full...), randBytes(rng, 37)...)), sizes[3])
	expectSize("zero tail", write(append(append([]byte(nil), full...), make([]byte, 4096)...)), sizes[3])
	// Every flipped byte of the last record: the state before it.
	for off := lastStart; off < len(full); off++ {
		b := append([]byte(nil), full...)
		b[off] ^= 0x20
		expectSize(fmt.Sprintf("flip at %d", off), write(b), sizes[2])
	}
	// Damage inside the snapshot is not a crash: refuse.
	for off := 0; off < snapEnd; off += 3 {
		b := append([]byte(nil), full...)
		b[off] ^= 0x20
		if _, err := Open("/dp", smallOpts(write(b))); !errors.Is(err, ErrCorruptMeta) {
			t.Fatalf("snapshot byte %d flipped: Open: %v", off, err)
		}
	}
	if _, err := Open("/dp", smallOpts(write(nil))); !errors.Is(err, ErrCorruptMeta) {
		t.Fatalf("empty META: %v", err)
	}
}

func TestNoSpace(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	t.Run("extent write", func(t *testing.T) {
		mem := diskfs.NewMem()
		rule := &diskfs.Rule{Ops: diskfs.OpWrite, PathContains: "ext-", Skip: 3, Times: 1,
			Err: &diskfs.ShortWrite{N: 100, Err: syscall.ENOSPC}}
		opt := smallOpts(diskfs.Inject(mem, rule))
		s := mustOpen(t, "/dp", opt)
		id, _ := s.NewExtent(KindLarge)
		small, _ := s.NewExtent(KindSmall)
		var acked []byte
		for range 3 {
			p := randBytes(rng, 700)
			mustAppend(t, s, id, p)
			acked = append(acked, p...)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Append(id, int64(len(acked)), randBytes(rng, 700))
		if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append on a full disk: %v", err)
		}
		if !errors.Is(s.Err(), ErrReadOnly) || !errors.Is(s.Err(), ErrNoSpace) {
			t.Fatalf("Err() = %v, want read-only because of ENOSPC", s.Err())
		}
		if _, err := s.Append(id, int64(len(acked)), []byte{1}); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("append when read-only: %v", err)
		}
		if _, err := s.NewExtent(KindLarge); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("create when read-only: %v", err)
		}
		if _, err := s.LeaseSmall(context.Background()); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("lease when read-only: %v", err)
		}
		// Earlier data is intact, and reads, Sync and deletes work.
		if got := readAll(t, s, id, 1000); !bytes.Equal(got, acked) {
			t.Fatal("data written before ENOSPC damaged")
		}
		if err := s.DeleteExtent(small); err != nil {
			t.Fatalf("delete when read-only: %v", err)
		}
		if err := s.Sync(); err != nil {
			t.Fatalf("sync when read-only: %v", err)
		}
		s.Close()
		rule.Disable()
		s = mustOpen(t, "/dp", opt)
		defer s.Close()
		if s.Err() != nil {
			t.Fatalf("reopened store: %v", s.Err())
		}
		if got := readAll(t, s, id, 1000); !bytes.Equal(got, acked) {
			t.Fatal("data after reopen differs")
		}
		if _, err := s.Stat(small); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted extent: %v", err)
		}
		mustAppend(t, s, id, []byte("space again"))
	})
	t.Run("metadata write", func(t *testing.T) {
		mem := diskfs.NewMem()
		rule := &diskfs.Rule{Ops: diskfs.OpWrite, PathContains: "META", Err: &diskfs.ShortWrite{N: 5, Err: syscall.ENOSPC}}
		rule.Disable()
		opt := smallOpts(diskfs.Inject(mem, rule))
		s := mustOpen(t, "/dp", opt)
		id, _ := s.NewExtent(KindLarge)
		acked := randBytes(rng, 1000)
		mustAppend(t, s, id, acked)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, id, randBytes(rng, 500))
		rule.Enable()
		err := s.Sync()
		if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrNoSpace) {
			t.Fatalf("sync with a full disk: %v", err)
		}
		if err := s.Sync(); !errors.Is(err, ErrFailed) {
			t.Fatalf("sync of a failed store: %v", err)
		}
		if _, err := s.ReadAt(id, make([]byte, 10), 0); err != nil {
			t.Fatalf("read of a failed store: %v", err)
		}
		s.Close()
		rule.Disable()
		// The unacknowledged append is gone, the acknowledged bytes stay.
		for _, m := range []diskfs.FS{mem, mem.Crash(diskfs.CrashLoseUnsynced, nil)} {
			s = mustOpen(t, "/dp", smallOpts(m))
			if got := readAll(t, s, id, 4096); !bytes.Equal(got, acked) {
				t.Fatalf("after a failed sync: %d bytes, want the %d acknowledged", len(got), len(acked))
			}
			s.Close()
		}
	})
	t.Run("compaction", func(t *testing.T) {
		// Creating the new log fails (Skip 1: Open's own snapshot passes).
		mem := diskfs.NewMem()
		rule := &diskfs.Rule{Ops: diskfs.OpCreate, PathContains: "META.tmp", Skip: 1, Err: syscall.ENOSPC}
		opt := smallOpts(diskfs.Inject(mem, rule))
		opt.CompactBytes = 512
		s := mustOpen(t, "/dp", opt)
		id, _ := s.NewExtent(KindLarge)
		var acked []byte
		for rule.Failed() == 0 {
			p := randBytes(rng, 100)
			mustAppend(t, s, id, p)
			acked = append(acked, p...)
			if err := s.Sync(); err != nil {
				t.Fatalf("sync whose compaction failed: %v", err) // the deltas were committed
			}
			if len(acked) > 100<<10 {
				t.Fatal("no compaction attempted")
			}
		}
		if !errors.Is(s.Err(), ErrReadOnly) || !errors.Is(s.Err(), ErrNoSpace) {
			t.Fatalf("Err() after a compaction hit ENOSPC: %v", s.Err())
		}
		s.Close()
		for _, m := range []diskfs.FS{mem, mem.Crash(diskfs.CrashLoseUnsynced, nil)} {
			s := mustOpen(t, "/dp", smallOpts(m))
			if got := readAll(t, s, id, 4096); !bytes.Equal(got, acked) {
				t.Fatalf("after a failed compaction: %d bytes, want %d", len(got), len(acked))
			}
			s.Close()
		}
	})
	t.Run("file create", func(t *testing.T) {
		rule := &diskfs.Rule{Ops: diskfs.OpCreate, PathContains: "ext-", Err: syscall.ENOSPC}
		s := mustOpen(t, "/dp", smallOpts(diskfs.Inject(diskfs.NewMem(), rule)))
		defer s.Close()
		if _, err := s.NewExtent(KindLarge); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("create on a full disk: %v", err)
		}
		if !errors.Is(s.Err(), ErrReadOnly) {
			t.Fatalf("Err() = %v", s.Err())
		}
	})
}

func TestIOError(t *testing.T) {
	mem := diskfs.NewMem()
	rule := &diskfs.Rule{Ops: diskfs.OpRead, PathContains: "ext-", Err: syscall.EIO}
	rule.Disable()
	s := mustOpen(t, "/dp", smallOpts(diskfs.Inject(mem, rule)))
	defer s.Close()
	id, _ := s.NewExtent(KindLarge)
	mustAppend(t, s, id, make([]byte, 2000))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	rule.Enable()
	if _, err := s.ReadAt(id, make([]byte, 100), 600); !errors.Is(err, ErrIO) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with EIO: %v", err)
	}
	bad, err := s.Scrub(context.Background(), ScrubOptions{})
	if err != nil || len(bad) != 4 || !errors.Is(bad[0].Err, ErrIO) {
		t.Fatalf("scrub with EIO: %+v %v", bad, err)
	}
	rule.Disable()
	if _, err := s.ReadAt(id, make([]byte, 100), 600); err != nil {
		t.Fatal(err)
	}
	// EIO on a data write fails the store (the disk is not doing what it
	// is told), and on fsync too.
	// (Appends past the journal's bound, so that the round fsyncs the file.)
	wrule := &diskfs.Rule{Ops: diskfs.OpSync, PathContains: "ext-", Err: syscall.EIO}
	o2 := smallOpts(diskfs.Inject(mem, wrule))
	o2.JournalAppendBytes = 5
	s2 := mustOpen(t, "/dp2", o2)
	defer s2.Close()
	id2, _ := s2.NewExtent(KindLarge)
	mustAppend(t, s2, id2, make([]byte, 10))
	if err := s2.Sync(); !errors.Is(err, ErrFailed) || !errors.Is(err, ErrIO) {
		t.Fatalf("sync with EIO: %v", err)
	}
	if _, err := s2.Append(id2, 10, []byte{1}); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed sync: %v", err)
	}
}

func TestScrubPacingAndCancel(t *testing.T) {
	s := mustOpen(t, "/dp", smallOpts(diskfs.NewMem()))
	defer s.Close()
	id, _ := s.NewExtent(KindLarge)
	mustAppend(t, s, id, make([]byte, 8<<10))
	start := time.Now()
	if bad, err := s.Scrub(context.Background(), ScrubOptions{BytesPerSecond: 64 << 10}); err != nil || len(bad) != 0 {
		t.Fatal(bad, err)
	}
	// 8 KiB at 64 KiB/s: at least ~120 ms.
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("paced scrub took %v", el)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Scrub(ctx, ScrubOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled scrub: %v", err)
	}
}
