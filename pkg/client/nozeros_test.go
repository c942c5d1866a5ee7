package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/dataclient"
)

// TestFailedWriteLeavesNoZeros: when every data node is gone, a write or
// fsync fails with EIO (the replicas are lost, not the space), and the file
// keeps its old size and bytes: no size ever covers bytes that no data node
// holds (they would read as zeros). Covered: a new small file, an append to
// an existing file, and a write into a hole past the end.
func TestFailedWriteLeavesNoZeros(t *testing.T) {
	old := []byte("hello world\n")
	for _, tc := range []struct {
		name string
		at   func(size int) int64 // where the failing write goes
		n    int
		prep bool // write old first
	}{
		{"new small file", func(int) int64 { return 0 }, 12, false},
		{"append", func(size int) int64 { return int64(size) }, 300 << 10, true},
		{"past the end", func(size int) int64 { return int64(size) + 1<<20 }, 64 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, dc := startWithData(t, Options{OpTimeout: 3 * time.Second, Data: dataclient.Options{WaitWritable: time.Second}})
			ctx := context.Background()
			a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			if tc.prep {
				f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(old, 0); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(ctx); err != nil {
					t.Fatal(err)
				}
				want = old
			}
			dc.Stop(2)
			dc.Stop(3)
			f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			_, werr := f.WriteAt(bytes.Repeat([]byte{7}, tc.n), tc.at(len(want)))
			serr := f.Fsync(ctx)
			err = errors.Join(werr, serr)
			if !errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write %v, fsync %v: want EIO", werr, serr)
			}
			if got := f.Size(); got != uint64(len(want)) {
				t.Fatalf("size after the failure: %d, want %d", got, len(want))
			}
			_ = f.Close(ctx)
			attr, err := v.GetAttr(ctx, a.Ino)
			if err != nil {
				t.Fatal(err)
			}
			if attr.Size != uint64(len(want)) {
				t.Fatalf("recorded size %d, want %d", attr.Size, len(want))
			}
			if len(want) == 0 {
				return
			}
			dc.Restart(2)
			dc.Restart(3)
			r, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			buf := make([]byte, 1<<20)
			n, err := r.ReadAt(buf, 0)
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:n], want) {
				t.Fatalf("read back %q, want %q", buf[:n], want)
			}
		})
	}
}
