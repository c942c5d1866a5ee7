package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// readAllCairn reads ino's whole contents through a fresh handle.
func readAllCairn(t *testing.T, ctx context.Context, v *client.Volume, ino uint64) []byte {
	t.Helper()
	f, err := v.OpenFile(ctx, ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	var out []byte
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
}

// TestFileRandomVsLocal applies random writes, overwrites, sparse writes,
// truncates, reads, flushes and reopens to a Cairn file and a local file
// and compares them byte for byte, through the handle and after reopening.
func TestFileRandomVsLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fr")
	startUp(t, dir)
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(7, 11))

	for round := 0; round < 3; round++ {
		a, err := v.Create(ctx, client.RootIno, "rand"+string(rune('a'+round)), 0o644, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		lp := filepath.Join(t.TempDir(), "local")
		lf, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		size := func() int64 {
			st, err := lf.Stat()
			if err != nil {
				t.Fatal(err)
			}
			return st.Size()
		}
		for i := 0; i < 120; i++ {
			cur := size()
			switch op := rng.IntN(10); {
			case op < 4: // write somewhere: inside, at the end, or past it
				off := rng.Int64N(cur + 300<<10 + 1)
				if rng.IntN(3) == 0 {
					off = cur
				}
				data := make([]byte, 1+rng.IntN(300<<10))
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				if _, err := lf.WriteAt(data, off); err != nil {
					t.Fatal(err)
				}
				if n, err := f.WriteAt(data, off); err != nil || n != len(data) {
					t.Fatalf("op %d: write %d at %d: %d, %v", i, len(data), off, n, err)
				}
			case op < 6: // read
				off := rng.Int64N(cur + 10)
				n := 1 + rng.IntN(400<<10)
				want := make([]byte, n)
				wn, _ := lf.ReadAt(want, off)
				got := make([]byte, n)
				gn, err := f.ReadAt(got, off)
				if err != nil && err != io.EOF {
					t.Fatalf("op %d: read %d at %d: %v", i, n, off, err)
				}
				if gn != wn || !bytes.Equal(got[:gn], want[:wn]) {
					t.Fatalf("op %d: read %d at %d (size %d): got %d bytes, want %d, equal=%v", i, n, off, cur, gn, wn, bytes.Equal(got[:min(gn, wn)], want[:min(gn, wn)]))
				}
			case op < 8: // truncate up or down
				sz := rng.Int64N(cur*3/2 + 1<<10)
				if err := lf.Truncate(sz); err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(ctx, uint64(sz)); err != nil {
					t.Fatalf("op %d: truncate %d: %v", i, sz, err)
				}
			case op < 9:
				if err := f.Flush(ctx); err != nil {
					t.Fatalf("op %d: flush: %v", i, err)
				}
			default: // close and reopen
				if err := f.Close(ctx); err != nil {
					t.Fatalf("op %d: close: %v", i, err)
				}
				if f, err = v.OpenFile(ctx, a.Ino, syscall.O_RDWR); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(lp)
		if err != nil {
			t.Fatal(err)
		}
		lf.Close()
		got := readAllCairn(t, ctx, v, a.Ino)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: contents differ: %d bytes vs %d local", round, len(got), len(want))
		}
		at, err := v.GetAttr(ctx, a.Ino)
		if err != nil || at.Size != uint64(len(want)) {
			t.Fatalf("round %d: size %v (%v), want %d", round, at, err, len(want))
		}
	}
}

// TestFileFlags checks O_APPEND, O_TRUNC, small files, empty files and
// read-only handles.
func TestFileFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ff")
	startUp(t, dir)
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := v.Create(ctx, client.RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.OpenFile(ctx, a.Ino, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 1), 0); err != nil {
		t.Fatal("a write-only handle reads in the SDK (the kernel checks modes):", err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f, err = v.OpenFile(ctx, a.Ino, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(" world"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAllCairn(t, ctx, v, a.Ino); string(got) != "hello world" {
		t.Fatalf("after O_APPEND: %q", got)
	}
	r, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteAt([]byte("x"), 0); client.ErrnoOf(err) != syscall.EBADF {
		t.Fatalf("write on a read-only handle: %v, want EBADF", err)
	}
	r.Close(ctx)
	f, err = v.OpenFile(ctx, a.Ino, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAllCairn(t, ctx, v, a.Ino); len(got) != 0 {
		t.Fatalf("after O_TRUNC: %q", got)
	}
	d, err := v.Mkdir(ctx, client.RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.OpenFile(ctx, d.Ino, syscall.O_RDONLY); client.ErrnoOf(err) != syscall.EISDIR {
		t.Fatalf("open of a directory: %v, want EISDIR", err)
	}
}

// TestFileLargeSequential writes a 64 MiB file sequentially in 1 MiB
// writes and reads it back in another handle, checking SHA-256.
func TestFileLargeSequential(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fl")
	startUp(t, dir)
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := v.Create(ctx, client.RootIno, "big", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.OpenFile(ctx, a.Ino, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	h := sha256.New()
	buf := make([]byte, 1<<20)
	start := time.Now()
	const total = 64 << 20
	for off := 0; off < total; off += len(buf) {
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		h.Write(buf)
		if _, err := f.WriteAt(buf, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote 64 MiB in %v", time.Since(start))
	want := h.Sum(nil)
	start = time.Now()
	r, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	h.Reset()
	var n int64
	for {
		k, err := r.ReadAt(buf, n)
		h.Write(buf[:k])
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("read 64 MiB in %v", time.Since(start))
	if n != total || !bytes.Equal(h.Sum(nil), want) {
		t.Fatalf("read %d bytes, sha256 mismatch=%v", n, !bytes.Equal(h.Sum(nil), want))
	}
}
