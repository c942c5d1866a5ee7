package client

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// testChunking cuts small chunks so that small files have many of them.
var testChunking = chunker.Config{Algorithm: chunker.FastCDC1, MinSize: 256, AvgSize: 1024, MaxSize: 4096}

// startChunked opens a volume whose new files are chunked, with real data
// nodes and the fake meta partitions holding the chunk index.
func startChunked(t *testing.T, opts Options) *Volume {
	t.Helper()
	v, _ := startWithDataMap(t, opts, func(m *pb.ClusterMap) {
		vol := m.Volumes[4]
		vol.DefaultLayout = uint32(metapb.FileLayout_FILE_LAYOUT_CDC)
		vol.Chunking = clustermap.ChunkLayoutOf(testChunking)
		vol.ChunkIndexPartitions = vol.MetaPartitions
	})
	return v
}

func randBytes(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.IntN(256))
	}
	return p
}

// checkLayout verifies the committed layout: chunked, chunks covering
// exactly the size, every chunk located.
func checkLayout(t *testing.T, v *Volume, ino uint64, size int) {
	t.Helper()
	in, err := v.getInode(context.Background(), "test", ino)
	if err != nil {
		t.Fatal(err)
	}
	if in.GetLayout() != metapb.FileLayout_FILE_LAYOUT_CDC {
		t.Fatalf("inode %d layout %v, want CDC", ino, in.GetLayout())
	}
	var sum uint64
	for _, c := range in.GetChunks() {
		if c.GetPartitionId() == 0 || len(c.GetFingerprint()) != chunker.FingerprintSize {
			t.Fatalf("chunk without location or fingerprint: %v", c)
		}
		sum += uint64(c.GetSize())
	}
	if sum != uint64(size) || in.GetSize() != uint64(size) {
		t.Fatalf("chunks sum to %d, size %d, want %d", sum, in.GetSize(), size)
	}
}

// TestChunkedVsModel applies seeded random writes, POSIX-style inserts
// (write the inserted bytes and the old tail), truncates and reopens to a
// chunked file and to a byte model, comparing after every step through the
// writing handle and through a fresh handle.
func TestChunkedVsModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		buffer int
	}{{"default buffer", 0}, {"small buffer", 8 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			v := startChunked(t, Options{ChunkBufferBytes: tc.buffer})
			ctx := context.Background()
			a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, uint64(tc.buffer)))
			model := randBytes(rng, 64<<10)
			if _, err := f.WriteAt(model, 0); err != nil {
				t.Fatal(err)
			}
			for round := range 12 {
				switch op := rng.IntN(4); op {
				case 0: // overwrites and appends
					for range 1 + rng.IntN(8) {
						off := rng.IntN(len(model) + 2048)
						p := randBytes(rng, 1+rng.IntN(3000))
						if _, err := f.WriteAt(p, int64(off)); err != nil {
							t.Fatal(err)
						}
						if end := off + len(p); end > len(model) {
							model = append(model, make([]byte, end-len(model))...)
						}
						copy(model[off:], p)
					}
				case 1: // insert: write the new bytes and the old tail after them
					off := rng.IntN(len(model))
					ins := randBytes(rng, 1+rng.IntN(500))
					tail := append([]byte(nil), model[off:]...)
					if _, err := f.WriteAt(append(ins, tail...), int64(off)); err != nil {
						t.Fatal(err)
					}
					model = append(append(model[:off:off], ins...), tail...)
				case 2: // delete: write the tail earlier, then truncate
					off := rng.IntN(len(model))
					n := min(len(model)-off, 1+rng.IntN(2000))
					tail := append([]byte(nil), model[off+n:]...)
					if _, err := f.WriteAt(tail, int64(off)); err != nil {
						t.Fatal(err)
					}
					if err := f.Truncate(ctx, uint64(len(model)-n)); err != nil {
						t.Fatal(err)
					}
					model = append(model[:off:off], tail...)
				case 3: // truncate up (a hole) or down
					size := rng.IntN(len(model) + 20000)
					if err := f.Truncate(ctx, uint64(size)); err != nil {
						t.Fatal(err)
					}
					if size > len(model) {
						model = append(model, make([]byte, size-len(model))...)
					}
					model = model[:size]
				}
				if r := readWhole(t, f, len(model)); !bytes.Equal(r, model) {
					t.Fatalf("round %d: the handle's view differs from the model", round)
				}
				if err := f.Flush(ctx); err != nil {
					t.Fatalf("round %d: flush: %v", round, err)
				}
				checkLayout(t, v, a.Ino, len(model))
				g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
				if err != nil {
					t.Fatal(err)
				}
				if r := readWhole(t, g, len(model)); !bytes.Equal(r, model) {
					t.Fatalf("round %d: a new handle reads other bytes than the model", round)
				}
				_ = g.Close(ctx)
			}
			if err := f.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestChunkedDedupAndInsert: the same bytes under a second name send
// nothing to the data nodes; an insert in the middle of a cached file
// sends only the chunks around it.
func TestChunkedDedupAndInsert(t *testing.T) {
	v := startChunked(t, Options{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	data := randBytes(rng, 512<<10)
	write := func(name string, p []byte) uint64 {
		a, err := v.Create(ctx, RootIno, name, 0o644, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		f, err := v.OpenFile(ctx, a.Ino, syscall.O_WRONLY)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(p, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	before := v.Stats().BytesToData
	ino := write("a", data)
	first := v.Stats().BytesToData - before
	if first < int64(len(data)) || first > int64(len(data))+int64(testChunking.MaxSize) {
		t.Fatalf("first copy sent %d bytes, want about %d", first, len(data))
	}
	write("b", data)
	if again := v.Stats().BytesToData - before - first; again != 0 {
		t.Fatalf("second copy sent %d bytes, want 0 (dedup)", again)
	}
	if v.Stats().DedupBytes < int64(len(data)) {
		t.Fatalf("dedup counter %d, want at least %d", v.Stats().DedupBytes, len(data))
	}

	f, err := v.OpenFile(ctx, ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	off := len(data) / 2
	tail := readWhole(t, f, len(data))[off:]
	sent := v.Stats().BytesToData
	ins := randBytes(rng, 4096)
	if _, err := f.WriteAt(append(append([]byte(nil), ins...), tail...), int64(off)); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	got := v.Stats().BytesToData - sent
	if limit := int64(len(ins) + 4*testChunking.MaxSize); got > limit {
		t.Fatalf("insert of %d bytes sent %d bytes, want at most %d", len(ins), got, limit)
	}
	want := append(append(append([]byte(nil), data[:off]...), ins...), tail...)
	if r := readWhole(t, f, len(want)); !bytes.Equal(r, want) {
		t.Fatal("file differs after the insert")
	}
	_ = f.Close(ctx)
	checkLayout(t, v, ino, len(want))
}

// TestChunkedConcurrentWriters: two handles rewrite one file at once; the
// result is exactly one writer's bytes, never a mix.
func TestChunkedConcurrentWriters(t *testing.T) {
	v := startChunked(t, Options{})
	ctx := context.Background()
	a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	contents := [][]byte{randBytes(rng, 100<<10), randBytes(rng, 100<<10)}
	for round := range 5 {
		var wg sync.WaitGroup
		for _, p := range contents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := v.OpenFile(ctx, a.Ino, syscall.O_WRONLY)
				if err != nil {
					t.Error(err)
					return
				}
				for off := 0; off < len(p); off += 8192 {
					if _, err := f.WriteAt(p[off:min(len(p), off+8192)], int64(off)); err != nil {
						t.Error(err)
					}
				}
				if err := f.Close(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		r := readWhole(t, g, 100<<10)
		_ = g.Close(ctx)
		if !bytes.Equal(r, contents[0]) && !bytes.Equal(r, contents[1]) {
			t.Fatalf("round %d: file is a mix of two writers", round)
		}
	}
}

// TestDirectoryLayoutAttr: a directory's user.cairn.layout chooses the
// layout of new files in it and passes to new subdirectories; a bad value
// is EINVAL.
func TestDirectoryLayoutAttr(t *testing.T) {
	_, v := startFakeMap(t, func() *pb.ClusterMap {
		m := testMap()
		vol := m.Volumes[4]
		vol.Chunking = clustermap.ChunkLayoutOf(testChunking)
		vol.ChunkIndexPartitions = vol.MetaPartitions
		return m
	}())
	ctx := context.Background()
	layoutOf := func(ino uint64) metapb.FileLayout {
		t.Helper()
		in, err := v.getInode(ctx, "test", ino)
		if err != nil {
			t.Fatal(err)
		}
		return in.GetLayout()
	}
	plain, err := v.Create(ctx, RootIno, "plain", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := layoutOf(plain.Ino); l != metapb.FileLayout_FILE_LAYOUT_EXTENT {
		t.Fatalf("file in the root: %v, want the volume's default (extents)", l)
	}
	d, err := v.Mkdir(ctx, RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.SetXattr(ctx, d.Ino, LayoutAttr, []byte("chunks"), 0); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("bad layout value: %v, want EINVAL", err)
	}
	if err := v.SetXattr(ctx, d.Ino, LayoutAttr, []byte("cdc"), 0); err != nil {
		t.Fatal(err)
	}
	f, err := v.Create(ctx, d.Ino, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := layoutOf(f.Ino); l != metapb.FileLayout_FILE_LAYOUT_CDC {
		t.Fatalf("file in a cdc directory: %v", l)
	}
	sub, err := v.Mkdir(ctx, d.Ino, "sub", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if val, err := v.GetXattr(ctx, sub.Ino, LayoutAttr); err != nil || string(val) != "cdc" {
		t.Fatalf("subdirectory attribute %q, %v; want inherited cdc", val, err)
	}
	g, err := v.Create(ctx, sub.Ino, "g", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := layoutOf(g.Ino); l != metapb.FileLayout_FILE_LAYOUT_CDC {
		t.Fatalf("file in an inheriting subdirectory: %v", l)
	}
}
