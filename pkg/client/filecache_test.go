package client

import (
	"bytes"
	"context"
	"syscall"
	"testing"
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
	pattern := func(n int, seed byte) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = seed + byte(i%251)
		}
		return p
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
