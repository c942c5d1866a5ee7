package client

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/chunkgc"
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
	v, _ := startChunkedFake(t, opts)
	return v
}

func startChunkedFake(t *testing.T, opts Options) (*Volume, *fakeCluster) {
	t.Helper()
	v, _, f := startWithDataMap(t, opts, func(m *pb.ClusterMap) {
		vol := m.Volumes[4]
		vol.DefaultLayout = uint32(metapb.FileLayout_FILE_LAYOUT_CDC)
		vol.Chunking = clustermap.ChunkLayoutOf(testChunking)
		vol.ChunkIndexPartitions = vol.MetaPartitions
	})
	return v, f
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
	write := func(name string, p []byte) uint64 { return createFile(t, v, name, p) }
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

// fakeSource is a chunkgc.Source over the fake cluster's partitions.
type fakeSource struct{ f *fakeCluster }

func (s fakeSource) ScanChunks(_ context.Context, part uint64, after []byte, limit uint32) ([]*metapb.ChunkRecord, bool, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	var fp chunker.Fingerprint
	copy(fp[:], after)
	recs, more := s.f.parts[part].ScanChunks(fp, int(limit))
	return recs, more, nil
}

func (s fakeSource) ScanLayouts(_ context.Context, part, afterIno uint64, limit uint32) ([]*metapb.Inode, bool, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	in, more := s.f.parts[part].ScanInodes(afterIno, int(limit), true)
	return in, more, nil
}

func (s fakeSource) PendingChunkDrops(_ context.Context, part uint64) (uint64, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return uint64(s.f.parts[part].ChunkStats().PendingDrops), nil
}

func (s fakeSource) Txn(_ context.Context, part uint64, txn *metapb.Txn) (*metapb.TxnResult, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.now++
	return s.f.parts[part].ApplyBatch(&metapb.Batch{NowNs: s.f.now, Txns: []*metapb.Txn{txn}})[0], nil
}

// applyDrops plays the meta nodes' collector: every chunk drop on a free
// list is applied to its shard, then acknowledged.
func applyDrops(t *testing.T, f *fakeCluster, vol *pb.Volume) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, src := range vol.GetMetaPartitions() {
		p := f.parts[src]
		var last uint64
		for _, fe := range p.FreeList() {
			last = fe.Seq
			if !fe.IsChunkDrop() {
				continue
			}
			shard, err := clustermap.ChunkShard(vol, fe.Fingerprint[:])
			if err != nil {
				t.Fatal(err)
			}
			f.now++
			op := &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{SourcePartition: src,
				Items: []*metapb.ChunkRef{{Chunk: fe.Chunk(), Delta: -1, DropSeq: fe.Seq}}}}}
			if r := f.parts[shard].ApplyBatch(&metapb.Batch{NowNs: f.now, Txns: []*metapb.Txn{{Ops: []*metapb.Op{op}}}})[0]; r.Errno != 0 {
				t.Fatalf("apply drop %d: %s", fe.Seq, r.Message)
			}
		}
		if last != 0 {
			f.now++
			ack := &metapb.Op{Op: &metapb.Op_AckFreed{AckFreed: &metapb.AckFreed{UptoSeq: last}}}
			if r := p.ApplyBatch(&metapb.Batch{NowNs: f.now, Txns: []*metapb.Txn{{Ops: []*metapb.Op{ack}}}})[0]; r.Errno != 0 {
				t.Fatalf("ack: %s", r.Message)
			}
		}
	}
}

// TestChunkedCrashLeavesOnlyLeaks crashes a client after each possible
// number of metadata requests of a commit (references taken, chunks
// registered, layout spliced or not) and checks what is left: the file
// reads as its old or its new bytes, and a recount finds only leaked
// references (never a count too low or a layout naming a chunk the index
// lacks); cairn gc's correction then leaves the volume clean, with the
// leaked chunks collectable.
func TestChunkedCrashLeavesOnlyLeaks(t *testing.T) {
	v, f := startChunkedFake(t, Options{OpTimeout: 300 * time.Millisecond, AttemptTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	vol := v.current().vol
	rng := rand.New(rand.NewPCG(9, 9))
	for n := 0; n < 8; n++ {
		name := fmt.Sprintf("f%d", n)
		a, err := v.Create(ctx, RootIno, name, 0o644, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		old := randBytes(rng, 40<<10)
		h, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt(old, 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// An edit that shares chunks with the old bytes and with another
		// file, and adds new ones.
		edit := append(append([]byte(nil), old[:10<<10]...), randBytes(rng, 20<<10)...)
		if _, err := h.WriteAt(edit, 0); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.dieAfter = n
		f.mu.Unlock()
		flushErr := h.Flush(ctx)
		f.mu.Lock()
		f.dieAfter = -1
		f.mu.Unlock()
		h.closed = true // the crashed client never closes

		newBytes := append(append([]byte(nil), edit...), old[len(edit):]...)
		g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got := readWhole(t, g, len(old))
		_ = g.Close(ctx)
		switch {
		case bytes.Equal(got, newBytes):
		case bytes.Equal(got, old) && flushErr != nil:
		default:
			t.Fatalf("crash after %d requests (flush: %v): the file is neither its old nor its new bytes", n, flushErr)
		}
		applyDrops(t, f, vol)
		in, err := chunkgc.Collect(ctx, fakeSource{f}, vol, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		rep := chunkgc.Recount(in)
		if rep.Serious() {
			t.Fatalf("crash after %d requests: recount found more than leaks: %+v", n, rep.Findings)
		}
		t.Logf("crash after %d requests (flush: %v): %d leaked references", n, flushErr, rep.LeakedRefs)
		if _, err := chunkgc.Apply(ctx, fakeSource{f}, rep, newID); err != nil {
			t.Fatal(err)
		}
		if in, err = chunkgc.Collect(ctx, fakeSource{f}, vol, 0, nil); err != nil {
			t.Fatal(err)
		}
		if rep := chunkgc.Recount(in); len(rep.Findings) != 0 {
			t.Fatalf("crash after %d requests: after gc: %+v", n, rep.Findings)
		}
	}
}

// TestChunkedStreamingAppend writes a file in small sequential writes
// (streamed: cut and uploaded while writing), long enough to commit
// several times (more than maxChunksPerSplice chunks), with a read in the
// middle and appends after reopening; every byte goes to the data nodes
// about once.
func TestChunkedStreamingAppend(t *testing.T) {
	v := startChunked(t, Options{})
	ctx := context.Background()
	a, err := v.Create(ctx, RootIno, "log", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(21, 22))
	model := randBytes(rng, 6<<20) // about 6000 chunks of 1 KiB on average
	before := v.Stats().BytesToData
	f, err := v.OpenFile(ctx, a.Ino, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	half := len(model) / 2
	for off := 0; off < half; off += 7000 {
		if _, err := f.WriteAt(model[off:min(half, off+7000)], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	// A read of what was just written ends the stream (commits it).
	buf := make([]byte, 1000)
	if _, err := f.ReadAt(buf, int64(half-1000)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, model[half-1000:half]) {
		t.Fatal("a read during an append returns other bytes")
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := v.OpenFile(ctx, a.Ino, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	for off := half; off < len(model); off += 65536 {
		if _, err := g.WriteAt(model[off:min(len(model), off+65536)], 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, v, a.Ino, len(model))
	r, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if got := readWhole(t, r, len(model)); !bytes.Equal(got, model) {
		t.Fatal("the appended file differs from what was written")
	}
	if sent := v.Stats().BytesToData - before; sent > int64(len(model))+int64(len(model))/50 {
		t.Fatalf("sent %d bytes for a %d-byte file, want each byte about once", sent, len(model))
	}
}

// TestChunkedMissingChunkIsEIO: a chunk whose bytes are gone from every
// replica makes reads of it fail with EIO naming its fingerprint, never
// return zeros; the other chunks still read.
func TestChunkedMissingChunkIsEIO(t *testing.T) {
	v := startChunked(t, Options{ChunkCacheBytes: -1})
	ctx := context.Background()
	a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(rand.New(rand.NewPCG(3, 4)), 64<<10)
	f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := v.getInode(ctx, "test", a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	lost := in.GetChunks()[1]
	dc, err := v.dataClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Free(ctx, []*metapb.ExtentKey{chunkLocation(lost).ExtentKey(0)}); err != nil {
		t.Fatal(err)
	}
	g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	first := make([]byte, in.GetChunks()[0].GetSize())
	if _, err := g.ReadAt(first, 0); err != nil || !bytes.Equal(first, data[:len(first)]) {
		t.Fatalf("the intact first chunk: %v", err)
	}
	buf := make([]byte, lost.GetSize())
	_, err = g.ReadAt(buf, int64(len(first)))
	fp, _ := fingerprintOf(lost)
	if !isErrno(err, syscall.EIO) || !strings.Contains(err.Error(), fp.String()) {
		t.Fatalf("read of a lost chunk: %v; want EIO naming %v", err, fp)
	}
}

// BenchmarkSeqWrite writes 64 MiB files of unique bytes in 1 MiB writes,
// closing each, to a volume of each layout (default chunking) on
// in-process data nodes and meta partitions, for the initial-write cost of
// chunking in one run: go test -run '^$' -bench SeqWrite ./pkg/client/
func BenchmarkSeqWrite(b *testing.B) {
	const size = 64 << 20
	data := randBytes(rand.New(rand.NewPCG(1, 1)), size)
	for _, layout := range []metapb.FileLayout{metapb.FileLayout_FILE_LAYOUT_EXTENT, metapb.FileLayout_FILE_LAYOUT_CDC} {
		b.Run(clustermap.LayoutName(layout), func(b *testing.B) {
			v, _, _ := startWithDataMap(b, Options{}, func(m *pb.ClusterMap) {
				vol := m.Volumes[4]
				vol.DefaultLayout = uint32(layout)
				vol.Chunking = clustermap.ChunkLayoutOf(chunker.Default())
				vol.ChunkIndexPartitions = vol.MetaPartitions
			})
			ctx := context.Background()
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				// Unique bytes per file, so dedup removes nothing.
				for off := 0; off < size; off += 4096 {
					data[off] ^= byte(i + 1)
				}
				a, err := v.Create(ctx, RootIno, fmt.Sprintf("f%d", i), 0o644, 0, 0)
				if err != nil {
					b.Fatal(err)
				}
				f, err := v.OpenFile(ctx, a.Ino, syscall.O_WRONLY)
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < size; off += 1 << 20 {
					if _, err := f.WriteAt(data[off:off+1<<20], int64(off)); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
