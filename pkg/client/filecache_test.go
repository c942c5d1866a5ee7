package client

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/diskcache"
)

// TestFileCache reads small files again through new read-only handles and
// counts what reached the data nodes: the second read of an unchanged file
// is served from memory; a change by another client (a new Version) or a
// write through this client is read from the data nodes; files over the
// size bound and a volume with the cache off always go to the data nodes.
func TestFileCache(t *testing.T) {
	v, _, fake := startWithDataMap(t, Options{}, nil)
	ctx := context.Background()
	fake.mu.Lock()
	addr := fake.m.Nodes[1].Addr
	fake.mu.Unlock()
	other := openFakeVolume(t, addr, Options{FileCacheBytes: -1})

	write := func(v *Volume, ino uint64, off int64, p []byte) {
		t.Helper()
		f, err := v.OpenFile(ctx, ino, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// read opens ino read-only, reads it whole and says how many bytes
	// came from the data nodes.
	read := func(v *Volume, ino uint64, size int) ([]byte, int64) {
		t.Helper()
		before := v.Stats().BytesFromData
		f, err := v.OpenFile(ctx, ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(ctx)
		return readWhole(t, f, size), v.Stats().BytesFromData - before
	}

	small, err := v.Create(ctx, RootIno, "small", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(10<<10, 1)
	write(v, small.Ino, 0, want)
	if got, fetched := read(v, small.Ino, len(want)); !bytes.Equal(got, want) || fetched != int64(len(want)) {
		t.Fatalf("first read: %d bytes fetched, content ok %v; want the file fetched once", fetched, bytes.Equal(got, want))
	}
	if got, fetched := read(v, small.Ino, len(want)); !bytes.Equal(got, want) || fetched != 0 {
		t.Fatalf("second read: %d bytes fetched, content ok %v; want it served from memory", fetched, bytes.Equal(got, want))
	}

	// Another client overwrites in place and closes: an open after that
	// sees its bytes (close-to-open), which the cache must not hide.
	patch := pattern(4096, 7)
	write(other, small.Ino, 0, patch)
	copy(want, patch)
	if got, fetched := read(v, small.Ino, len(want)); !bytes.Equal(got, want) || fetched == 0 {
		t.Fatalf("after another client's change: %d bytes fetched, content ok %v", fetched, bytes.Equal(got, want))
	}

	// A reader of this client opened before this client's writer: after
	// the writer's flush it reads the new bytes, as without the cache.
	r, err := v.OpenFile(ctx, small.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if got := readWhole(t, r, len(want)); !bytes.Equal(got, want) {
		t.Fatal("reader opened before the writer: wrong content")
	}
	w, err := v.OpenFile(ctx, small.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	patch = pattern(100, 9)
	if _, err := w.WriteAt(patch, 5000); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	copy(want[5000:], patch)
	if got := readWhole(t, r, len(want)); !bytes.Equal(got, want) {
		t.Fatal("a reader of this client does not see this client's flushed overwrite")
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Over the size bound: always fetched.
	big, err := v.Create(ctx, RootIno, "big", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bigData := pattern(fileCacheMaxSize+1, 3)
	write(v, big.Ino, 0, bigData)
	for i := range 2 {
		if got, fetched := read(v, big.Ino, len(bigData)); !bytes.Equal(got, bigData) || fetched < int64(len(bigData)) {
			t.Fatalf("read %d of a file over the bound: %d bytes fetched, content ok %v", i, fetched, bytes.Equal(got, bigData))
		}
	}

	// The cache off: every read fetches.
	for i := range 2 {
		if got, fetched := read(other, small.Ino, len(want)); !bytes.Equal(got, want) || fetched != int64(len(want)) {
			t.Fatalf("cache off, read %d: %d bytes fetched, content ok %v", i, fetched, bytes.Equal(got, want))
		}
	}
	if st := other.Stats().FileCache; st.Limit != 0 || st.Hits != 0 {
		t.Fatalf("cache off but stats %+v", st)
	}
	if st := v.Stats().FileCache; st.Hits == 0 || st.Bytes == 0 || st.Bytes > st.Limit {
		t.Fatalf("file cache stats %+v", st)
	}
}

// TestFileCacheBlocks: random reads of a file larger than the whole-file
// bound, through read-only handles, fill the file cache in blocks that
// other handles share; another client's change (a new Version) and this
// client's flushed write are seen as without the cache; a file larger than
// the cache is never read in blocks.
func TestFileCacheBlocks(t *testing.T) {
	v, _, fake := startWithDataMap(t, Options{FileCacheBytes: 8 << 20}, nil)
	ctx := context.Background()
	fake.mu.Lock()
	addr := fake.m.Nodes[1].Addr
	fake.mu.Unlock()
	other := openFakeVolume(t, addr, Options{FileCacheBytes: -1})
	// readAt reads 4 KiB at off through handle f and says how many bytes
	// came from the data nodes.
	readAt := func(v *Volume, f *File, off int64) ([]byte, int64) {
		t.Helper()
		before := v.Stats().BytesFromData
		p := make([]byte, 4096)
		if _, err := f.ReadAt(p, off); err != nil {
			t.Fatal(err)
		}
		return p, v.Stats().BytesFromData - before
	}
	open := func(v *Volume, ino uint64, flags int) *File {
		t.Helper()
		f, err := v.OpenFile(ctx, ino, flags)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close(ctx) })
		return f
	}

	data := pattern(4<<20, 1)
	ino := createFile(t, v, "mid", data)
	const off = 1<<20 + 8<<10 // not at 0: a random read
	a := open(v, ino, syscall.O_RDONLY)
	if got, fetched := readAt(v, a, off); !bytes.Equal(got, data[off:off+4096]) || fetched == 0 {
		t.Fatalf("first random read: %d bytes fetched, content ok %v", fetched, bytes.Equal(got, data[off:off+4096]))
	}
	b := open(v, ino, syscall.O_RDONLY)
	if got, fetched := readAt(v, b, off+64<<10); !bytes.Equal(got, data[off+64<<10:off+68<<10]) || fetched != 0 {
		t.Fatalf("another handle's read in the same block: %d bytes fetched, content ok %v; want it from memory", fetched, bytes.Equal(got, data[off+64<<10:off+68<<10]))
	}

	// Another client overwrites in place and closes: a new open sees it.
	patch := pattern(4096, 7)
	w := open(other, ino, syscall.O_RDWR)
	if _, err := w.WriteAt(patch, off); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	copy(data[off:], patch)
	c := open(v, ino, syscall.O_RDONLY)
	if got, _ := readAt(v, c, off); !bytes.Equal(got, patch) {
		t.Fatal("after another client's change and close, a new handle reads the old bytes from the cache")
	}

	// A writer of this client flushes: a reader of this client opened
	// before it reads the new bytes, as without the cache.
	if got, _ := readAt(v, c, off+128<<10); !bytes.Equal(got, data[off+128<<10:off+132<<10]) {
		t.Fatal("wrong content")
	}
	mine := open(v, ino, syscall.O_RDWR)
	patch2 := pattern(4096, 9)
	if _, err := mine.WriteAt(patch2, off+128<<10); err != nil {
		t.Fatal(err)
	}
	if err := mine.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := readAt(v, c, off+128<<10); !bytes.Equal(got, patch2) {
		t.Fatal("a reader of this client does not see this client's flushed overwrite")
	}

	// Larger than the cache: never in blocks.
	huge := pattern(9<<20, 3)
	hino := createFile(t, v, "huge", huge)
	h1, h2 := open(v, hino, syscall.O_RDONLY), open(v, hino, syscall.O_RDONLY)
	readAt(v, h1, 5<<20+4096)
	if got, fetched := readAt(v, h2, 5<<20+8192); !bytes.Equal(got, huge[5<<20+8192:5<<20+12288]) || fetched != 4096 {
		t.Fatalf("a file larger than the cache: %d bytes fetched, want exactly the 4096 read", fetched)
	}
}

// TestDiskCache: with a disk cache under a small memory cache, blocks and
// small files that left memory are read from local disk, not the data
// nodes; a cache file changed on disk is read from the data nodes instead
// (right bytes, counted as corrupt); this client's flush and unlink of a
// file take its blocks off the disk.
func TestDiskCache(t *testing.T) {
	dir := t.TempDir()
	disk, err := diskcache.Open(diskcache.Options{Dir: dir, Limit: 64 << 20, FreeRatio: -1}) // whatever the host's disk holds
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	v, _, _ := startWithDataMap(t, Options{FileCacheBytes: 256 << 10, DiskCache: disk}, nil)
	ctx := context.Background()
	// settle waits until the disk cache holds n blocks.
	settle := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); disk.Stats().Blocks != n; {
			if time.Now().After(deadline) {
				t.Fatalf("the disk cache holds %d blocks, want %d", disk.Stats().Blocks, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	readAt := func(ino uint64, p []byte, off int64) int64 {
		t.Helper()
		before := v.Stats().BytesFromData
		f, err := v.OpenFile(ctx, ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(ctx)
		if _, err := f.ReadAt(p, off); err != nil {
			t.Fatal(err)
		}
		return v.Stats().BytesFromData - before
	}

	data := pattern(2<<20, 1) // 16 blocks: more than memory holds
	ino := createFile(t, v, "big", data)
	p := make([]byte, 4096)
	for b := int64(0); b < 16; b++ {
		readAt(ino, p, b*readBlockBytes+100)
	}
	settle(16)
	// Block 0 left memory long ago: it comes from the disk.
	off := int64(5000)
	if fetched := readAt(ino, p, off); fetched != 0 || !bytes.Equal(p, data[off:off+4096]) {
		t.Fatalf("a block on disk: %d bytes fetched, content ok %v", fetched, bytes.Equal(p, data[off:off+4096]))
	}
	if disk.Stats().Hits == 0 {
		t.Fatal("no disk cache hit counted")
	}

	// Damage block 1 in the file's cache file: the read is right, from
	// the data nodes.
	var victim string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(filepath.Base(path), fmt.Sprintf("%x_", ino)) {
			victim = path
		}
		return nil
	})
	if victim == "" {
		t.Fatal("no cache file of the file")
	}
	vf, err := os.OpenFile(victim, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vf.WriteAt(make([]byte, readBlockBytes), readBlockBytes); err != nil {
		t.Fatal(err)
	}
	vf.Close()
	off = readBlockBytes + 8192
	if fetched := readAt(ino, p, off); fetched == 0 || !bytes.Equal(p, data[off:off+4096]) {
		t.Fatalf("a damaged block: %d bytes fetched, content ok %v", fetched, bytes.Equal(p, data[off:off+4096]))
	}
	if disk.Stats().Corrupt != 1 {
		t.Fatalf("stats %+v", disk.Stats())
	}

	// Small files: kept whole on disk when fetched a second time.
	var small []uint64
	for i := 0; i < 4; i++ {
		small = append(small, createFile(t, v, fmt.Sprintf("s%d", i), pattern(100<<10, byte(i))))
	}
	for _, s := range small {
		readAt(s, make([]byte, 100<<10), 0)
	}
	time.Sleep(50 * time.Millisecond)
	settle(16) // a small file fetched once is not written to the disk
	for _, s := range small {
		readAt(s, make([]byte, 100<<10), 0) // each fetched again: it left memory
	}
	settle(15 + 1 + 4) // 15 blocks, block 1 fetched again, 4 small files
	got := make([]byte, 100<<10)
	if fetched := readAt(small[0], got, 0); fetched != 0 || !bytes.Equal(got, pattern(100<<10, 0)) {
		t.Fatalf("a small file on disk: %d bytes fetched", fetched)
	}

	// A reader of this client opened before this client's flush reads
	// the flushed bytes, not the old ones the disk holds.
	r, err := v.OpenFile(ctx, ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	w, err := v.OpenFile(ctx, ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	patch, at := pattern(4096, 77), 3*readBlockBytes+4096
	if _, err := w.WriteAt(patch, int64(at)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(p, int64(at)); err != nil || !bytes.Equal(p, patch) {
		t.Fatalf("after this client's flush a reader read the old bytes (err %v)", err)
	}

	// This client's unlink takes the file's blocks off the disk.
	if err := v.Unlink(ctx, RootIno, "big"); err != nil {
		t.Fatal(err)
	}
	settle(4)
}

func TestFetchedSet(t *testing.T) {
	var s fetchedSet
	k := func(i int) fileKey { return fileKey{ino: uint64(i), ver: Version{Size: 10, Mtime: 5, Ctime: 6}} }
	if s.again(k(1)) || !s.again(k(1)) {
		t.Fatal("a key is new once, then seen")
	}
	other := k(1)
	other.ver.Ctime++
	if s.again(other) {
		t.Fatal("another Version of the file counted as seen")
	}
	for i := 2; i < fetchedSetSize+2; i++ {
		s.again(k(i))
	}
	if s.again(k(1)) {
		t.Fatal("the oldest key is still remembered past the set's size")
	}
	if !s.again(k(fetchedSetSize)) {
		t.Fatal("a recent key was forgotten")
	}
}
