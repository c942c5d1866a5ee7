package client

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/datanode"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
)

// startWithData starts the fake metadata cluster plus real in-process data
// nodes 2 and 3 holding data partition 1 (node 1 of the map is the fake
// meta node), and opens volume "v" with opts.
func startWithData(t *testing.T, opts Options) (*Volume, *datanodetest.Cluster) {
	t.Helper()
	v, dc, _ := startWithDataMap(t, opts, nil)
	return v, dc
}

// startWithDataMap is startWithData with prep changing the map (under the
// fake's lock) before the volume is opened.
func startWithDataMap(t testing.TB, opts Options, prep func(m *pb.ClusterMap)) (*Volume, *datanodetest.Cluster, *fakeCluster) {
	t.Helper()
	dc := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{2, 3}}, Options: datanode.Options{
		AlignDelay: 100 * time.Millisecond, AlignInterval: 500 * time.Millisecond, AlignQuietPeriod: 200 * time.Millisecond,
	}})
	f, _ := startFake(t)
	f.mu.Lock()
	f.m.Partitions[1] = &pb.Partition{Id: 1, VolumeId: 4, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{2, 3}}
	f.m.Volumes[4].DataPartitions = []uint64{1}
	for _, id := range []uint64{2, 3} {
		f.m.Nodes[id] = &pb.Node{Id: id, Role: pb.Role_ROLE_DATA, DataAddr: dc.DataAddrs()[id], State: pb.NodeState_NODE_STATE_ALIVE}
	}
	addr := f.m.Nodes[1].Addr
	if prep != nil {
		prep(f.m)
	}
	f.mu.Unlock()
	dc.SetEpoch(f.m.Epoch)
	if err := dc.Assign(); err != nil {
		t.Fatal(err)
	}
	return openFakeVolume(t, addr, opts), dc, f
}

// openFakeVolume opens volume "v" of the fake cluster at addr, with no
// periodic map refresh; each call is another client.
func openFakeVolume(t testing.TB, addr string, opts Options) *Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts.RefreshInterval = -1
	v, err := Open(ctx, []string{addr}, "v", &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// createFile creates name in the root of v holding data and returns its
// inode.
func createFile(t *testing.T, v *Volume, name string, data []byte) uint64 {
	t.Helper()
	ctx := context.Background()
	in, err := v.Create(ctx, RootIno, name, 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.OpenFile(ctx, in.Ino, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return in.Ino
}

// pattern returns n bytes that differ from those of another seed.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i%251)
	}
	return p
}

func readWhole(t *testing.T, f *File, size int) []byte {
	t.Helper()
	buf := make([]byte, size+10)
	n, err := f.ReadAt(buf, 0)
	if err != io.EOF && err != nil {
		t.Fatalf("read: %v", err)
	}
	return buf[:n]
}

// TestWriteBackVsModel writes a file, then applies seeded random writes
// over it (mostly in-place overwrites, some past the end, some holes) with
// reads through the same handle, flushes and a truncate, comparing with a
// byte model: through the handle, through a handle opened after each flush
// and after close. With write-back on, overwrites must not reach the data
// nodes before a flush point or the buffer bound.
func TestWriteBackVsModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound int
	}{
		{"default", 0},
		{"small bound", 64 << 10},
		{"write-through", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := startWithData(t, Options{WriteBackBytes: tc.bound})
			ctx := context.Background()
			a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, uint64(tc.bound)))
			model := make([]byte, 1<<20)
			for i := range model {
				model[i] = byte(rng.IntN(256))
			}
			if _, err := f.WriteAt(model, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			sent := v.Stats().BytesToData
			// Overwrites inside the file: buffered unless write-through.
			for i := 0; i < 64; i++ {
				off := rng.IntN(len(model) - 4096)
				p := make([]byte, 4096)
				for j := range p {
					p[j] = byte(rng.IntN(256))
				}
				if n, err := f.WriteAt(p, int64(off)); err != nil || n != len(p) {
					t.Fatalf("overwrite at %d: %d, %v", off, n, err)
				}
				copy(model[off:], p)
			}
			got := v.Stats().BytesToData - sent
			switch {
			case tc.bound == 0 && got != 0:
				t.Fatalf("%d bytes sent before a flush point with write-back on", got)
			case tc.bound < 0 && got != 64*4096:
				t.Fatalf("write-through sent %d bytes, want %d", got, 64*4096)
			case tc.bound > 0 && (got == 0 || got > 64*4096):
				t.Fatalf("bound %d: %d bytes sent, want some and at most %d", tc.bound, got, 64*4096)
			}
			if r := readWhole(t, f, len(model)); !bytes.Equal(r, model) {
				t.Fatal("handle does not read its own overwrites")
			}
			for round := 0; round < 6; round++ {
				for i := 0; i < 40; i++ {
					off := rng.IntN(len(model) + 64<<10)
					p := make([]byte, 1+rng.IntN(70000))
					for j := range p {
						p[j] = byte(rng.IntN(256))
					}
					if n, err := f.WriteAt(p, int64(off)); err != nil || n != len(p) {
						t.Fatalf("round %d: write %d at %d: %d, %v", round, len(p), off, n, err)
					}
					if end := off + len(p); end > len(model) {
						model = append(model, make([]byte, end-len(model))...)
					}
					copy(model[off:], p)
					if i%7 == 0 {
						ro := rng.IntN(len(model))
						buf := make([]byte, rng.IntN(200000))
						n, err := f.ReadAt(buf, int64(ro))
						if err != nil && err != io.EOF {
							t.Fatal(err)
						}
						if want := model[ro:min(len(model), ro+len(buf))]; !bytes.Equal(buf[:n], want) {
							t.Fatalf("round %d: read %d at %d differs from the model", round, len(buf), ro)
						}
					}
				}
				if round == 3 {
					cut := len(model) / 2
					if err := f.Truncate(ctx, uint64(cut)); err != nil {
						t.Fatal(err)
					}
					model = model[:cut]
				} else if err := f.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if r := readWhole(t, f, len(model)); !bytes.Equal(r, model) {
					t.Fatalf("round %d: handle's view differs from the model", round)
				}
				g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
				if err != nil {
					t.Fatal(err)
				}
				if r := readWhole(t, g, len(model)); !bytes.Equal(r, model) {
					t.Fatalf("round %d: a handle opened after the flush differs from the model", round)
				}
				if err := g.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Close(ctx); err != nil {
				t.Fatal(err)
			}
			g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close(ctx)
			if r := readWhole(t, g, len(model)); !bytes.Equal(r, model) {
				t.Fatal("file differs from the model after close")
			}
		})
	}
}

// TestWriteBackErrors checks that a write-back failure is reported: by the
// flush that sends the buffer, or, when the buffer bound triggered the
// send, by the write and once more by the next flush point.
func TestWriteBackErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound int
	}{
		{"at flush", 0},
		{"at the bound", 8 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, dc := startWithData(t, Options{WriteBackBytes: tc.bound, OpTimeout: 2 * time.Second})
			ctx := context.Background()
			a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close(ctx)
			if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 256<<10), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			dc.Stop(2)
			dc.Stop(3)
			var werr error
			for i := 0; i < 4 && werr == nil; i++ {
				_, werr = f.WriteAt(bytes.Repeat([]byte{2}, 4096), int64(i*8192))
			}
			ferr := f.Flush(ctx)
			if tc.bound == 0 {
				if werr != nil || ferr == nil {
					t.Fatalf("write: %v, flush: %v; want the flush to fail", werr, ferr)
				}
			} else if werr == nil || ferr == nil {
				t.Fatalf("write: %v, flush: %v; want both to fail", werr, ferr)
			}
			if d := f.lay.(*extentLayout).dirty; d.len() != 0 {
				t.Fatalf("%d bytes still buffered after a failed write-back", d.len())
			}
			if err := f.Flush(ctx); err != nil {
				t.Fatalf("flush after the reported failure: %v", err)
			}
		})
	}
}

// TestWriteBackUnderSequentialWriter checks that bytes a sequential writer
// lays over buffered overwrites win: the writer started in a hole runs on
// over an existing key whose range holds older dirty bytes.
func TestWriteBackUnderSequentialWriter(t *testing.T) {
	v, _ := startWithData(t, Options{})
	ctx := context.Background()
	a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	model := make([]byte, 300<<10)
	write := func(off int, c byte, n int) {
		t.Helper()
		p := bytes.Repeat([]byte{c}, n)
		if _, err := f.WriteAt(p, int64(off)); err != nil {
			t.Fatalf("write %d at %d: %v", n, off, err)
		}
		copy(model[off:], p)
	}
	write(0, 1, 10<<10)
	write(200<<10, 2, 100<<10) // past the end: keys [0,10K) and [200K,300K), a hole between
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	write(250<<10, 3, 10<<10) // buffered over the second key
	write(10<<10, 4, 10<<10)  // a writer in the hole
	write(20<<10, 5, 250<<10) // the writer runs on over the dirty range
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	if r := readWhole(t, g, len(model)); !bytes.Equal(r, model) {
		t.Fatal("older buffered overwrites were sent over the writer's newer bytes")
	}
}

// TestWriteBackTruncatedElsewhere checks that a truncation reported to the
// handle drops buffered overwrites beyond the new size: their keys are cut,
// and the bytes must read as zeros once the file grows again.
func TestWriteBackTruncatedElsewhere(t *testing.T) {
	v, _ := startWithData(t, Options{})
	ctx := context.Background()
	a, err := v.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 200<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{2}, 20<<10), 90<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Setattr(ctx, a.Ino, SetattrIn{Valid: SetSize, Size: 100 << 10}); err != nil {
		t.Fatal(err)
	}
	f.Truncated(100 << 10)
	if err := f.Truncate(ctx, 200<<10); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte{1}, 90<<10), bytes.Repeat([]byte{2}, 10<<10)...)
	want = append(want, make([]byte, 100<<10)...)
	if r := readWhole(t, f, len(want)); !bytes.Equal(r, want) {
		t.Fatal("bytes buffered beyond a truncation came back")
	}
}

// TestSparseWritesVsModel writes scattered pieces into a sparse file (a
// random write into a file made by truncate: every piece lands in a hole,
// some over pieces still in the writer, some over keys already recorded),
// reading random ranges through the handle and through a new handle after
// each flush, compared with a byte model.
func TestSparseWritesVsModel(t *testing.T) {
	v, _ := startWithData(t, Options{})
	ctx := context.Background()
	a, err := v.Create(ctx, RootIno, "sparse", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.OpenFile(ctx, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	if err := f.Truncate(ctx, size); err != nil {
		t.Fatal(err)
	}
	model := make([]byte, size)
	rng := rand.New(rand.NewPCG(11, 12))
	check := func(step string, h *File, off, n int) {
		t.Helper()
		buf := make([]byte, n)
		got, err := h.ReadAt(buf, int64(off))
		if err != nil && err != io.EOF {
			t.Fatalf("%s: read at %d: %v", step, off, err)
		}
		if want := model[off:min(off+n, size)]; !bytes.Equal(buf[:got], want) {
			t.Fatalf("%s: read of %d bytes at %d differs from the model", step, n, off)
		}
	}
	for round := range 6 {
		for i := range 300 {
			n := 1 + rng.IntN(16<<10)
			off := rng.IntN(size - n)
			if i%3 == 0 {
				off = off &^ 4095 // aligned, as fio writes
				n = 4096
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.IntN(255) + 1)
			}
			if w, err := f.WriteAt(p, int64(off)); err != nil || w != n {
				t.Fatalf("round %d write %d at %d: %d, %v", round, i, off, w, err)
			}
			copy(model[off:], p)
			if i%50 == 0 {
				check("through the handle", f, rng.IntN(size-65536), 1+rng.IntN(65536))
			}
		}
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		g, err := v.OpenFile(ctx, a.Ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		check("through a new handle", g, 0, size)
		if err := g.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
