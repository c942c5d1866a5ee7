package extentstore

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

var quiet = slog.New(slog.DiscardHandler)

// smallOpts are options scaled down so that tests cross block, extent and
// compaction boundaries with little data.
func smallOpts(fs diskfs.FS) Options {
	return Options{
		FS:               fs,
		BlockSize:        512,
		SmallFileMax:     1024,
		SmallExtentBytes: 8 << 10,
		OpenSmallExtents: 2,
		ExtentMaxBytes:   256 << 10,
		MaxWriteBytes:    8 << 10,
		CompactBytes:     4 << 10,
		Logger:           quiet,
	}
}

func mustOpen(t testing.TB, dir string, opt Options) *Store {
	t.Helper()
	s, err := Open(dir, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// readAll reads a whole extent through ReadAt in pieces of step bytes.
func readAll(t testing.TB, s *Store, id uint64, step int) []byte {
	t.Helper()
	info, err := s.Stat(id)
	if err != nil {
		t.Fatalf("Stat(%d): %v", id, err)
	}
	out := make([]byte, 0, info.Size)
	buf := make([]byte, step)
	for off := int64(0); ; {
		n, err := s.ReadAt(id, buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReadAt(%d, off %d): %v", id, off, err)
		}
	}
	if int64(len(out)) != info.Size {
		t.Fatalf("extent %d: read %d bytes, size %d", id, len(out), info.Size)
	}
	return out
}

func mustAppend(t testing.TB, s *Store, id uint64, p []byte) int64 {
	t.Helper()
	info, err := s.Stat(id)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Append(id, info.Size, p)
	if err != nil {
		t.Fatalf("Append(%d, %d, %d bytes): %v", id, info.Size, len(p), err)
	}
	return n
}

func TestAppendRead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		blockSize int
		writes    []int
		readSteps []int
	}{
		{"aligned", 512, []int{512, 1024, 512}, []int{512, 1000, 7}},
		{"unaligned", 512, []int{1, 511, 3, 700, 2000, 5}, []int{1, 513, 4096}},
		{"one big", 1024, []int{8 << 10}, []int{100, 1024, 3000}},
		{"single byte appends", 512, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []int{1, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			opt := smallOpts(diskfs.NewMem())
			opt.BlockSize = tc.blockSize
			s := mustOpen(t, "/dp", opt)
			id, err := s.NewExtent(KindLarge)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			for _, n := range tc.writes {
				p := randBytes(rng, n)
				size := mustAppend(t, s, id, p)
				want = append(want, p...)
				if size != int64(len(want)) {
					t.Fatalf("size %d, want %d", size, len(want))
				}
			}
			check := func(s *Store) {
				for _, step := range tc.readSteps {
					if got := readAll(t, s, id, step); !bytes.Equal(got, want) {
						t.Fatalf("step %d: content differs", step)
					}
				}
				// Random ranges, some past the end.
				for range 50 {
					off := rng.Int64N(int64(len(want)) + 10)
					n := rng.IntN(2000)
					p := make([]byte, n)
					got, err := s.ReadAt(id, p, off)
					wantN := max(0, min(n, len(want)-int(off)))
					if got != wantN {
						t.Fatalf("ReadAt(off %d, %d): n=%d want %d (err %v)", off, n, got, wantN, err)
					}
					if wantN < n && err != io.EOF {
						t.Fatalf("ReadAt(off %d, %d): err %v, want EOF", off, n, err)
					}
					if wantN == n && err != nil {
						t.Fatalf("ReadAt: %v", err)
					}
					if wantN > 0 && !bytes.Equal(p[:got], want[off:off+int64(got)]) {
						t.Fatalf("ReadAt(off %d, %d): wrong bytes", off, n)
					}
				}
			}
			check(s)
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			if info, _ := s.Stat(id); info.Committed != int64(len(want)) {
				t.Fatalf("committed %d after Sync, want %d", info.Committed, len(want))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, "/dp", opt)
			defer s.Close()
			check(s)
		})
	}
}

func TestBadInput(t *testing.T) {
	s := mustOpen(t, "/dp", smallOpts(diskfs.NewMem()))
	defer s.Close()
	large, _ := s.NewExtent(KindLarge)
	small, _ := s.NewExtent(KindSmall)
	mustAppend(t, s, large, make([]byte, 100))
	mustAppend(t, s, small, make([]byte, 100))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	var offErr *OffsetError
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"append at wrong offset", func() error { _, err := s.Append(large, 50, []byte{1}); return err }(), ErrOffset},
		{"append past size", func() error { _, err := s.Append(large, 101, []byte{1}); return err }(), ErrOffset},
		{"append empty", func() error { _, err := s.Append(large, 100, nil); return err }(), ErrInvalid},
		{"append too large", func() error { _, err := s.Append(large, 100, make([]byte, 8<<10+1)); return err }(), ErrTooLarge},
		{"small file too large", func() error { _, err := s.Append(small, 100, make([]byte, 1025)); return err }(), ErrTooLarge},
		{"append unknown", func() error { _, err := s.Append(999, 0, []byte{1}); return err }(), ErrNotFound},
		{"read unknown", func() error { _, err := s.ReadAt(999, make([]byte, 1), 0); return err }(), ErrNotFound},
		{"read negative", func() error { _, err := s.ReadAt(large, make([]byte, 1), -1); return err }(), ErrInvalid},
		{"read past EOF", func() error { _, err := s.ReadAt(large, make([]byte, 1), 100); return err }(), io.EOF},
		{"overwrite past committed", s.Overwrite(large, 90, make([]byte, 20)), ErrOutOfRange},
		{"overwrite negative", s.Overwrite(large, -1, make([]byte, 2)), ErrInvalid},
		{"overwrite at max offset", s.Overwrite(large, 1<<63-2, make([]byte, 20)), ErrOutOfRange},
		{"punch at max offset", s.PunchSmall(small, 1<<63-2, 20), ErrOutOfRange},
		{"punch huge", s.PunchSmall(small, 10, 1<<63-1), ErrOutOfRange},
		{"section at max offset", func() error { _, err := s.Section(large, 1<<63-2, 20, false); return err }(), io.ErrUnexpectedEOF},
		{"read at max offset", func() error { _, err := s.ReadAt(large, make([]byte, 10), 1<<63-2); return err }(), io.EOF},
		{"punch large", s.PunchSmall(large, 0, 10), ErrWrongKind},
		{"punch past committed", s.PunchSmall(small, 90, 20), ErrOutOfRange},
		{"punch empty", s.PunchSmall(small, 0, 0), ErrInvalid},
		{"create existing", s.CreateExtent(large, KindLarge), ErrExists},
		{"create id 0", s.CreateExtent(0, KindLarge), ErrInvalid},
		{"create bad kind", s.CreateExtent(77, Kind(9)), ErrInvalid},
		{"delete unknown", s.DeleteExtent(999), ErrNotFound},
		{"repair out of range", s.RepairBlock(large, 5, make([]byte, 512)), ErrOutOfRange},
		{"repair wrong length", s.RepairBlock(large, 0, make([]byte, 10)), ErrInvalid},
		{"section past size", func() error { _, err := s.Section(large, 90, 20, false); return err }(), io.ErrUnexpectedEOF},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	_, err := s.Append(large, 7, []byte{1})
	if !errors.As(err, &offErr) || offErr.Size != 100 || offErr.Off != 7 {
		t.Errorf("OffsetError = %#v", offErr)
	}
	full := smallOpts(diskfs.NewMem())
	full.ExtentMaxBytes = 8 << 10
	s2 := mustOpen(t, "/dp", full)
	defer s2.Close()
	id, _ := s2.NewExtent(KindLarge)
	mustAppend(t, s2, id, make([]byte, 8<<10))
	if _, err := s2.Append(id, 8<<10, []byte{1}); !errors.Is(err, ErrExtentFull) {
		t.Errorf("append past extent max: %v", err)
	}
	if _, err := Open("/x", Options{FS: diskfs.NewMem(), BlockSize: 1000}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad block size: %v", err)
	}
}

func TestOverwrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	opt := smallOpts(diskfs.NewMem())
	s := mustOpen(t, "/dp", opt)
	id, _ := s.NewExtent(KindLarge)
	want := randBytes(rng, 5000)
	for off := 0; off < len(want); off += 1000 {
		mustAppend(t, s, id, want[off:off+1000])
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	// Appends pending when the overwrite comes: it commits them too.
	more := randBytes(rng, 300)
	mustAppend(t, s, id, more)
	want = append(want, more...)
	for _, r := range []struct{ off, n int }{{0, 1}, {511, 2}, {100, 1500}, {1024, 512}, {4999, 1}, {3000, 2000}} {
		p := randBytes(rng, r.n)
		if err := s.Overwrite(id, int64(r.off), p); err != nil {
			t.Fatalf("Overwrite(%d,%d): %v", r.off, r.n, err)
		}
		copy(want[r.off:], p)
		if got := readAll(t, s, id, 700); !bytes.Equal(got, want) {
			t.Fatalf("after overwrite (%d,%d): content differs", r.off, r.n)
		}
	}
	if info, _ := s.Stat(id); info.Committed != int64(len(want)) {
		t.Fatalf("committed %d, want %d: the overwrite commits pending appends", info.Committed, len(want))
	}
	// No Sync: an overwrite is durable when it returns. Simulate a crash.
	mem := opt.FS.(*diskfs.MemFS)
	opt.FS = mem.Crash(diskfs.CrashLoseUnsynced, nil)
	s2 := mustOpen(t, "/dp", opt)
	defer s2.Close()
	if got := readAll(t, s2, id, 4096); !bytes.Equal(got, want) {
		t.Fatal("overwrites lost in crash")
	}
	if bad, err := s2.Scrub(context.Background(), ScrubOptions{}); err != nil || len(bad) != 0 {
		t.Fatalf("scrub after recovery: %v %v", bad, err)
	}
}

func TestSmallFiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	opt := smallOpts(diskfs.NewMem())
	s := mustOpen(t, "/dp", opt)
	ctx := context.Background()
	type file struct {
		ext  uint64
		off  int64
		data []byte
	}
	var files []file
	extents := map[uint64]bool{}
	for i := range 40 {
		l, err := s.LeaseSmall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		data := randBytes(rng, 1+rng.IntN(1024))
		info, _ := s.Stat(l.Extent())
		if _, err := s.Append(l.Extent(), info.Size, data); err != nil {
			t.Fatal(err)
		}
		files = append(files, file{l.Extent(), info.Size, data})
		extents[l.Extent()] = true
		if i%3 == 0 {
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		l.Release()
	}
	// 40 files of ~512 bytes in 8 KiB extents: several extents, rolled.
	if len(extents) < 2 {
		t.Errorf("small files used %d extents; expected rolling at 8 KiB", len(extents))
	}
	for id := range extents {
		if info, _ := s.Stat(id); info.Kind != KindSmall || info.Size > opt.SmallExtentBytes+int64(opt.SmallFileMax) {
			t.Errorf("extent %d: %+v", id, info)
		}
	}
	// Leases are exclusive and bounded.
	l1, _ := s.LeaseSmall(ctx)
	l2, _ := s.LeaseSmall(ctx)
	if l1.Extent() == l2.Extent() {
		t.Fatal("two leases on one extent")
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := s.LeaseSmall(tctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third lease with OpenSmallExtents=2: %v", err)
	}
	cancel()
	l1.Release()
	l1.Release() // idempotent
	l3, err := s.LeaseSmall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l3.Release()
	l2.Release()

	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	// Punch every other file.
	for i, f := range files {
		if i%2 == 0 {
			if err := s.PunchSmall(f.ext, f.off, int64(len(f.data))); err != nil {
				t.Fatal(err)
			}
			files[i].data = make([]byte, len(f.data))
		}
	}
	// Again: a retry by the collector is a no-op.
	if err := s.PunchSmall(files[0].ext, files[0].off, int64(len(files[0].data))); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		for i, f := range files {
			p := make([]byte, len(f.data))
			if _, err := s.ReadAt(f.ext, p, f.off); err != nil {
				t.Fatalf("file %d: %v", i, err)
			}
			if !bytes.Equal(p, f.data) {
				t.Fatalf("file %d (punched=%v): wrong content", i, i%2 == 0)
			}
		}
		if bad, err := s.Scrub(ctx, ScrubOptions{}); err != nil || len(bad) != 0 {
			t.Fatalf("scrub: %v %v", bad, err)
		}
	}
	check(s) // before the punches are committed
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	check(s)
	u, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.PunchedBytes == 0 || u.LogicalBytes == 0 {
		t.Errorf("usage %+v", u)
	}
	s.Close()
	s = mustOpen(t, "/dp", opt)
	defer s.Close()
	check(s)
	u2, _ := s.Usage()
	if u2.LogicalBytes != u.LogicalBytes || u2.PunchedBytes != u.PunchedBytes {
		t.Errorf("usage after reopen %+v, before %+v", u2, u)
	}
}

// TestPunchFreesSpace runs on the real file system: punched small files
// must give their blocks back (st_blocks, what du counts).
func TestPunchFreesSpace(t *testing.T) {
	dir := t.TempDir()
	opt := Options{Logger: quiet} // defaults: 128 KiB blocks, 128 KiB small files
	s := mustOpen(t, dir, opt)
	defer s.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	type file struct {
		ext uint64
		off int64
		n   int64
	}
	var files []file
	l, err := s.LeaseSmall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 512 {
		data := randBytes(rng, 4096)
		off, err := s.Append(l.Extent(), func() int64 { i, _ := s.Stat(l.Extent()); return i.Size }(), data)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{l.Extent(), off - 4096, 4096})
	}
	l.Release()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	before, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if before.PhysicalBytes < 2<<20 {
		t.Fatalf("2 MiB of small files use %d bytes on disk", before.PhysicalBytes)
	}
	for _, f := range files[:500] {
		if err := s.PunchSmall(f.ext, f.off, f.n); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	after, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	freed := before.PhysicalBytes - after.PhysicalBytes
	t.Logf("physical %d -> %d bytes (freed %d of %d punched)", before.PhysicalBytes, after.PhysicalBytes, freed, 500*4096)
	if freed < 500*4096*9/10 {
		t.Fatalf("punching 2000 KiB freed only %d bytes", freed)
	}
	// Cross-check with stat of the file itself.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "ext-"+strconv.FormatUint(files[0].ext, 10)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 16*4096+64<<10 {
		t.Fatalf("extent file still has %d bytes allocated", st.Blocks*512)
	}
	// The remaining files are intact.
	for _, f := range files[500:] {
		p := make([]byte, f.n)
		if _, err := s.ReadAt(f.ext, p, f.off); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDelete(t *testing.T) {
	mem := diskfs.NewMem()
	opt := smallOpts(mem)
	s := mustOpen(t, "/dp", opt)
	a, _ := s.NewExtent(KindLarge)
	b, _ := s.NewExtent(KindSmall)
	mustAppend(t, s, a, make([]byte, 1000))
	mustAppend(t, s, b, make([]byte, 100))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	sec, err := s.Section(a, 0, 1000, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteExtent(a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadAt(a, make([]byte, 1), 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read deleted: %v", err)
	}
	if err := s.CreateExtent(a, KindLarge); !errors.Is(err, ErrExists) {
		t.Fatalf("recreate before the deletion commits: %v", err)
	}
	if _, err := mem.Stat("/dp/ext-" + strconv.FormatUint(a, 10)); err != nil {
		t.Fatalf("file removed before Sync: %v", err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Stat("/dp/ext-" + strconv.FormatUint(a, 10)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file of deleted extent after Sync: %v", err)
	}
	// The section stays readable.
	p := make([]byte, 10)
	if _, err := sec.ReadAt(p, 0); err != nil {
		t.Fatalf("section of deleted extent: %v", err)
	}
	sec.Close()
	if err := s.DeleteExtent(b); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, "/dp", opt)
	defer s.Close()
	if len(s.Extents()) != 0 {
		t.Fatalf("extents after deleting all: %+v", s.Extents())
	}
	// Ids are never reused.
	c, _ := s.NewExtent(KindLarge)
	if c <= b {
		t.Fatalf("new id %d reuses an old one (<= %d)", c, b)
	}
}

func TestSection(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, fsName := range []string{"os", "mem"} {
		t.Run(fsName, func(t *testing.T) {
			opt := smallOpts(diskfs.NewMem())
			dir := "/dp"
			if fsName == "os" {
				opt.FS = diskfs.OS
				dir = t.TempDir()
			}
			s := mustOpen(t, dir, opt)
			defer s.Close()
			id, _ := s.NewExtent(KindSmall)
			data := randBytes(rng, 1000)
			mustAppend(t, s, id, data[:500])
			mustAppend(t, s, id, data[500:])
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			sec, err := s.Section(id, 100, 700, false)
			if err != nil {
				t.Fatal(err)
			}
			defer sec.Close()
			got := make([]byte, 800)
			n, err := sec.ReadAt(got, 0)
			if n != 700 || err != io.EOF || !bytes.Equal(got[:n], data[100:800]) {
				t.Fatalf("section ReadAt: n=%d err=%v", n, err)
			}
			f, off, length, ok := sec.File()
			if ok != (fsName == "os") {
				t.Fatalf("File() ok=%v on %s", ok, fsName)
			}
			if ok {
				raw := make([]byte, length)
				if _, err := f.ReadAt(raw, off); err != nil || !bytes.Equal(raw, data[100:800]) {
					t.Fatalf("raw file read: %v", err)
				}
			}
			// The CRC, from stored block CRCs (512-byte blocks here) and
			// the edges read, is the bytes' CRC for any range, verified
			// or not: aligned, unaligned, one block, inside one block,
			// the whole extent, up to its partial last block.
			for _, r := range [][2]int64{{0, 512}, {0, 1000}, {100, 700}, {512, 488}, {1, 1}, {511, 2}, {600, 10}, {0, 1024 - 24}} {
				for _, all := range []bool{false, true} {
					sec, err := s.Section(id, r[0], r[1], all)
					if err != nil {
						t.Fatalf("section %v: %v", r, err)
					}
					if want := crc32.Checksum(data[r[0]:r[0]+r[1]], castagnoli); sec.CRC() != want {
						t.Errorf("section %v (verify all %v): CRC %08x, want %08x", r, all, sec.CRC(), want)
					}
					sec.Close()
				}
			}
			if err := s.PunchSmall(id, 0, 500); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Section(id, 400, 200, false); !errors.Is(err, ErrPunched) {
				t.Fatalf("section over a hole: %v", err)
			}
		})
	}
}

// TestConcurrent runs writers, syncers, readers and a scrubber at once; run
// with -race.
func TestConcurrent(t *testing.T) {
	opt := smallOpts(diskfs.NewMem())
	opt.OpenSmallExtents = 4
	s := mustOpen(t, "/dp", opt)
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	type written struct {
		ext  uint64
		off  int64
		data []byte
	}
	results := make(chan written, 1000)
	for w := range 4 {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for i := range 30 {
				var id uint64
				var release func()
				if i%2 == 0 {
					l, err := s.LeaseSmall(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					id, release = l.Extent(), l.Release
				} else {
					var err error
					if id, err = s.NewExtent(KindLarge); err != nil {
						t.Error(err)
						return
					}
					release = func() {}
				}
				data := randBytes(rng, 1+rng.IntN(1024))
				info, _ := s.Stat(id)
				if _, err := s.Append(id, info.Size, data); err != nil {
					t.Error(err)
					return
				}
				if err := s.Sync(); err != nil {
					t.Error(err)
					return
				}
				release()
				results <- written{id, info.Size, data}
			}
		}(w)
	}
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if bad, err := s.Scrub(ctx, ScrubOptions{}); err != nil || len(bad) > 0 {
				t.Errorf("scrub: %v %v", bad, err)
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	bg.Wait()
	close(results)
	for r := range results {
		p := make([]byte, len(r.data))
		if _, err := s.ReadAt(r.ext, p, r.off); err != nil || !bytes.Equal(p, r.data) {
			t.Fatalf("extent %d at %d: %v", r.ext, r.off, err)
		}
	}
}

func TestCompaction(t *testing.T) {
	mem := diskfs.NewMem()
	opt := smallOpts(mem)
	opt.CompactBytes = 2 << 10
	s := mustOpen(t, "/dp", opt)
	rng := rand.New(rand.NewPCG(11, 12))
	id, _ := s.NewExtent(KindLarge)
	var want []byte
	var maxMeta int64
	for range 300 {
		p := randBytes(rng, 1+rng.IntN(300))
		mustAppend(t, s, id, p)
		want = append(want, p...)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		fi, err := mem.Stat("/dp/META")
		if err != nil {
			t.Fatal(err)
		}
		maxMeta = max(maxMeta, fi.Size)
	}
	// 300 rounds of ~40-byte records would be 12 KiB; compaction keeps the
	// log near the snapshot (~4 bytes per block) plus CompactBytes.
	snap := int64(len(want))/512*4 + 200
	if maxMeta > snap*2+opt.CompactBytes+1024 {
		t.Fatalf("metadata log grew to %d bytes (snapshot ~%d)", maxMeta, snap)
	}
	s.Close()
	s = mustOpen(t, "/dp", opt)
	defer s.Close()
	if !bytes.Equal(readAll(t, s, id, 1000), want) {
		t.Fatal("content after compactions differs")
	}
}

func TestLocked(t *testing.T) {
	mem := diskfs.NewMem()
	s := mustOpen(t, "/dp", smallOpts(mem))
	if _, err := Open("/dp", smallOpts(mem)); !errors.Is(err, diskfs.ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
	s.Close()
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.NewExtent(KindLarge); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	s = mustOpen(t, "/dp", smallOpts(mem))
	s.Close()
}

// A retired lease frees its slot but never hands the extent out again.
func TestSmallLeaseRetire(t *testing.T) {
	s := mustOpen(t, "/dp", smallOpts(diskfs.NewMem()))
	ctx := context.Background()
	l, err := s.LeaseSmall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	retired := l.Extent()
	if _, err := s.Append(retired, 0, []byte("half a file")); err != nil {
		t.Fatal(err)
	}
	l.Retire()
	l.Release() // no-op after Retire
	for range 5 {
		l2, err := s.LeaseSmall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l2.Extent() == retired {
			t.Fatal("a retired extent was leased again")
		}
		l2.Release()
	}
	if got := readAll(t, s, retired, 4); string(got) != "half a file" {
		t.Fatalf("retired extent reads %q", got)
	}
}

// Only extents created since the store opened and since the last seal are
// leased: a store reopened, or sealed when its replica stops being primary,
// puts the next small file in a new extent. A lease out during the seal is
// not taken back.
func TestSmallPoolSealed(t *testing.T) {
	mem := diskfs.NewMem()
	s := mustOpen(t, "/dp", smallOpts(mem))
	ctx := context.Background()
	lease := func() *SmallLease {
		t.Helper()
		l, err := s.LeaseSmall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(l.Extent(), mustStat(t, s, l.Extent()).Size, []byte("a small file")); err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := lease()
	first := l.Extent()
	l.Release()
	if l = lease(); l.Extent() != first {
		t.Fatalf("extent %d leased after %d was released: the pool does not reuse", l.Extent(), first)
	}
	l.Release()

	out := lease()
	s.SealSmall()
	if l = lease(); l.Extent() == first || l.Extent() == out.Extent() {
		t.Fatalf("extent %d leased again after the seal", l.Extent())
	}
	sealed := l.Extent()
	l.Release()
	out.Release() // leased before the seal: not handed out again
	for range 3 {
		if l = lease(); l.Extent() != sealed {
			t.Fatalf("leased extent %d, want %d, the only one made since the seal", l.Extent(), sealed)
		}
		l.Release()
	}
	must(t, s.Sync())
	s.Close()

	s = mustOpen(t, "/dp", smallOpts(mem))
	defer s.Close()
	if l = lease(); l.Extent() <= sealed {
		t.Fatalf("a reopened store leased extent %d, made before it opened", l.Extent())
	}
	l.Release()
}

// RaiseIDs skips ids, never goes back, and its floor holds across a reopen
// once an id above it was handed out.
func TestRaiseIDs(t *testing.T) {
	mem := diskfs.NewMem()
	s := mustOpen(t, "/dp", smallOpts(mem))
	newID := func() uint64 {
		t.Helper()
		id, err := s.NewExtent(KindLarge)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if id := newID(); id >= 1<<32 {
		t.Fatalf("first id %d", id)
	}
	s.RaiseIDs(2 << 32)
	if id := newID(); id != 2<<32 {
		t.Fatalf("id %d after RaiseIDs(2<<32)", id)
	}
	s.RaiseIDs(1 << 32) // lower: no effect
	if id := newID(); id != 2<<32+1 {
		t.Fatalf("id %d after a lower floor", id)
	}
	must(t, s.Sync())
	s.Close()
	s = mustOpen(t, "/dp", smallOpts(mem))
	defer s.Close()
	if id := newID(); id <= 2<<32+1 {
		t.Fatalf("id %d after reopening: an id handed out before came back", id)
	}
}

func mustStat(t testing.TB, s *Store, id uint64) ExtentInfo {
	t.Helper()
	info, err := s.Stat(id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestUnpunched(t *testing.T) {
	holes := []span{{10, 20}, {30, 40}}
	for _, tc := range []struct {
		off, end int64
		want     []Range
	}{
		{0, 50, []Range{{0, 10}, {20, 10}, {40, 10}}},
		{0, 10, []Range{{0, 10}}},
		{10, 20, nil},
		{12, 35, []Range{{20, 10}}},
		{15, 45, []Range{{20, 10}, {40, 5}}},
		{40, 40, nil},
		{41, 60, []Range{{41, 19}}},
	} {
		got := unpunched(holes, tc.off, tc.end)
		if !slices.Equal(got, tc.want) {
			t.Errorf("unpunched [%d,%d): got %v, want %v", tc.off, tc.end, got, tc.want)
		}
	}
	if got := unpunched(nil, 5, 9); !slices.Equal(got, []Range{{5, 4}}) {
		t.Errorf("no holes: got %v", got)
	}
}
