package dataclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/datanode"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/diskfs"
	"github.com/cairnfs/cairn/pkg/metapb"
)

func nodeOptions() datanode.Options {
	return datanode.Options{
		AlignDelay:       100 * time.Millisecond,
		AlignInterval:    500 * time.Millisecond,
		AlignQuietPeriod: 200 * time.Millisecond,
	}
}

// source serves the in-process cluster's topology (every node alive, as a
// master that has not noticed a death yet would say).
func source(c *datanodetest.Cluster) dataclient.Source {
	return func(ctx context.Context) (*dataclient.Topology, error) {
		t := &dataclient.Topology{Epoch: c.Epoch(), Partitions: c.Partitions(), Nodes: map[uint64]dataclient.Node{}}
		for id, addr := range c.DataAddrs() {
			t.Nodes[id] = dataclient.Node{Addr: addr, Alive: true}
		}
		return t, nil
	}
}

func newClient(t testing.TB, c *datanodetest.Cluster, opts dataclient.Options) *dataclient.Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	cl, err := dataclient.New(context.Background(), source(c), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeFile writes data in writes of random sizes and returns the keys.
func writeFile(t testing.TB, cl *dataclient.Client, data []byte, seed uint64) []*metapb.ExtentKey {
	t.Helper()
	w := cl.NewWriter(context.Background(), 0)
	r := rand.New(rand.NewPCG(seed, 1))
	for off := 0; off < len(data); {
		n := min(1+r.IntN(300<<10), len(data)-off)
		if _, err := w.Write(data[off : off+n]); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
		off += n
	}
	keys, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, keys, uint64(len(data)))
	return keys
}

// checkKeys: the keys cover [0, size) exactly, in order.
func checkKeys(t testing.TB, keys []*metapb.ExtentKey, size uint64) {
	t.Helper()
	var at uint64
	for _, k := range keys {
		if k.FileOffset != at || k.Size == 0 {
			t.Fatalf("keys do not tile the file: key %+v at %d", k, at)
		}
		at += k.Size
	}
	if at != size {
		t.Fatalf("keys cover %d bytes, want %d", at, size)
	}
}

func readAll(t testing.TB, cl *dataclient.Client, keys []*metapb.ExtentKey, size int64) []byte {
	t.Helper()
	return readAllCtx(context.Background(), t, cl, keys, size)
}

func readAllCtx(ctx context.Context, t testing.TB, cl *dataclient.Client, keys []*metapb.ExtentKey, size int64) []byte {
	t.Helper()
	r := cl.NewReader(ctx, keys, size)
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestWriteAndReadBack(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{ExtentBytes: 4 << 20})
	data := randBytes(21<<20+12345, 1)
	keys := writeFile(t, cl, data, 1)
	if len(keys) < 5 {
		t.Fatalf("%d keys for 21 MiB in 4 MiB extents", len(keys))
	}
	if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("sequential read differs")
	}
	r := cl.NewReader(context.Background(), keys, int64(len(data)))
	defer r.Close()
	rnd := rand.New(rand.NewPCG(2, 2))
	for range 50 {
		off := rnd.Int64N(int64(len(data)))
		buf := make([]byte, 1+rnd.IntN(3<<20))
		n, err := r.ReadAt(buf, off)
		if err != nil && !(errors.Is(err, io.EOF) && off+int64(len(buf)) > int64(len(data))) {
			t.Fatalf("read at %d: %v", off, err)
		}
		if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
			t.Fatalf("random read at %d differs", off)
		}
	}
	// A hole (no key) reads as zeros.
	holey := []*metapb.ExtentKey{keys[0]}
	got := readAll(t, cl, holey, int64(keys[0].Size)+1000)
	if !bytes.Equal(got[:keys[0].Size], data[:keys[0].Size]) || !bytes.Equal(got[keys[0].Size:], make([]byte, 1000)) {
		t.Fatal("hole does not read as zeros")
	}
	// A hole between keys reads as zeros too, although the reads above
	// left read-ahead buffers full of data to be reused: whole chunks, and
	// the start of the chunk where the next key begins 1000 bytes in.
	k2 := keys[2]
	late := &metapb.ExtentKey{FileOffset: k2.FileOffset + 1000, PartitionId: k2.PartitionId, ExtentId: k2.ExtentId, ExtentOffset: k2.ExtentOffset + 1000, Size: k2.Size - 1000}
	gap := []*metapb.ExtentKey{keys[0], late}
	want := slices.Clone(data[:k2.FileOffset+k2.Size])
	clear(want[keys[1].FileOffset:late.FileOffset])
	if got := readAll(t, cl, gap, int64(len(want))); !bytes.Equal(got, want) {
		t.Fatal("a hole between two keys does not read as zeros")
	}
}

// A small file goes to a shared small extent, as one key.
func TestSmallFileWriter(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	var last *metapb.ExtentKey
	for i := range 5 {
		data := randBytes(4096+i, uint64(i))
		keys := writeFile(t, cl, data, 3)
		if len(keys) != 1 {
			t.Fatalf("small file has %d keys", len(keys))
		}
		if last != nil && (keys[0].ExtentId != last.ExtentId || keys[0].ExtentOffset != last.ExtentOffset+last.Size) {
			t.Fatalf("small files not packed: %+v after %+v", keys[0], last)
		}
		last = keys[0]
		if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
			t.Fatal("small file differs")
		}
	}
}

// Small files keep to one partition for Options.SmallStickiness (so that
// concurrent ones share its group commit), move off it when it fails, and
// spread over the partitions as the stickiness lapses.
func TestSmallFilesKeepToAPartition(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{
		Nodes:      4,
		Partitions: [][]uint64{{1, 2}, {2, 1}, {3, 4}, {4, 3}},
		Options:    nodeOptions(),
	})
	partitionsOf := func(cl *dataclient.Client, n int, pause time.Duration) map[uint64]int {
		t.Helper()
		seen := map[uint64]int{}
		for i := range n {
			k, err := cl.WriteSmall(context.Background(), 0, randBytes(4096, uint64(i)))
			if err != nil {
				t.Fatalf("small file %d: %v", i, err)
			}
			seen[k.PartitionId]++
			time.Sleep(pause)
		}
		return seen
	}

	// A partition per file: 24 files all on one of 4 partitions has
	// probability 4^-23.
	if seen := partitionsOf(newClient(t, c, dataclient.Options{SmallStickiness: -1}), 24, 0); len(seen) < 2 {
		t.Fatalf("without stickiness every small file went to one partition: %v", seen)
	}
	// Lapsing stickiness spreads them too.
	if seen := partitionsOf(newClient(t, c, dataclient.Options{SmallStickiness: 20 * time.Millisecond}), 24, 25*time.Millisecond); len(seen) < 2 {
		t.Fatalf("small files stayed on one partition after their stickiness lapsed: %v", seen)
	}

	cl := newClient(t, c, dataclient.Options{SmallStickiness: time.Hour, ExcludeFor: time.Hour})
	seen := partitionsOf(cl, 24, 0)
	if len(seen) != 1 {
		t.Fatalf("small files written in a row went to %d partitions: %v", len(seen), seen)
	}
	var first uint64
	for id := range seen {
		first = id
	}
	// Stop the head of that partition: the next files fail over and keep
	// to one partition of the other pair of nodes.
	head := c.Partitions()[first-1].Replicas[0]
	c.Stop(head)
	seen = partitionsOf(cl, 24, 0)
	if len(seen) != 1 {
		t.Fatalf("after node %d stopped, small files went to %d partitions: %v", head, len(seen), seen)
	}
	for id := range seen {
		if slices.Contains(c.Partitions()[id-1].Replicas, head) {
			t.Fatalf("small files went to partition %d, which has the stopped node %d", id, head)
		}
	}
}

// A follower killed in the middle of a write (three data nodes; two of the
// partitions have node 3 as their last replica, two have only nodes 1 and
// 2): the writer moves the bytes that were not acknowledged to another
// partition and the file reads back whole.
func TestWriterFailsOverWhenFollowerDies(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{
		Nodes:      3,
		Partitions: [][]uint64{{1, 2, 3}, {2, 1, 3}, {1, 2}, {2, 1}},
		Options:    nodeOptions(),
	})
	cl := newClient(t, c, dataclient.Options{ExtentBytes: 2 << 20, ExcludeFor: 3 * time.Second})
	data := randBytes(48<<20, 4)
	w := cl.NewWriter(context.Background(), 0)
	var once sync.Once
	for off := 0; off < len(data); off += 256 << 10 {
		if off >= 16<<20 {
			once.Do(func() { c.Stop(3) })
		}
		if _, err := w.Write(data[off : off+256<<10]); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	keys, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, keys, uint64(len(data)))
	st := cl.Stats()
	t.Logf("%d keys, %d write failures", len(keys), st.WriteFailures)
	if st.WriteFailures == 0 {
		t.Fatal("no write failed over although node 3 died mid-write")
	}
	for _, k := range keys {
		if k.FileOffset >= 20<<20 && (k.PartitionId == 1 || k.PartitionId == 2) {
			t.Errorf("key %+v is on a partition with the dead node", k)
		}
	}
	if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("file differs after failover")
	}
}

// Reads move to another replica when the primary is gone.
func TestReadFailsOverToReplica(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	data := randBytes(5<<20, 5)
	keys := writeFile(t, cl, data, 5)
	c.Stop(1)
	if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("read after the primary died differs")
	}
	if cl.Stats().ReadFailovers == 0 {
		t.Fatal("no read failed over")
	}
}

// A block that rotted on the replica a reader asks first (the primary):
// its bytes fail the CRC the replica sent, the reader asks the same replica
// again with FlagVerify, the replica finds the block corrupt, and another
// replica serves the bytes. The replica is not reported as failed.
func TestReadCorruptBlockFailsOver(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	var reported atomic.Int64
	cl := newClient(t, c, dataclient.Options{ReportFailure: func(uint64, error) { reported.Add(1) }})
	data := randBytes(2<<20, 11)
	keys := writeFile(t, cl, data, 11)
	k := keys[0]
	path := filepath.Join(c.Node(1).Dir, fmt.Sprintf("dp-%d", k.PartitionId), fmt.Sprintf("ext-%d", k.ExtentId))
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage!"), int64(k.ExtentOffset)+3*(128<<10)+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("read over a corrupt block on the primary differs")
	}
	if st := cl.Stats(); st.ReadCRCErrors == 0 || st.ReadFailovers == 0 {
		t.Fatalf("stats %+v: the corrupt block was not noticed, or no other replica served it", st)
	}
	if reported.Load() != 0 {
		t.Fatal("the replica with a corrupt block was reported as failed")
	}
}

// A writer whose map is older than a restarted node's view is told so,
// refreshes, and goes on.
func TestStaleEpochRefresh(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	writeFile(t, cl, randBytes(1<<20, 6), 6)
	c.SetEpoch(7)
	c.Stop(2)
	c.Restart(2) // reopens its partition at epoch 7
	before := cl.Stats().Refreshes
	data := randBytes(3<<20, 7)
	keys := writeFile(t, cl, data, 7)
	if cl.Stats().Refreshes == before {
		t.Fatal("the client did not refresh its map")
	}
	if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("differs")
	}
}

// Overwrites replace bytes in place through Raft; reads see them.
func TestOverwrite(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	data := randBytes(3<<20, 8)
	keys := writeFile(t, cl, data, 8)
	patch := randBytes(1<<20+100, 9)
	const at = 1<<20 - 50 // file offset, inside the first key (one extent)
	k := keys[0]
	if k.Size < at+uint64(len(patch)) {
		t.Fatalf("first key %+v too short for the test", k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.Overwrite(ctx, k.PartitionId, k.ExtentId, int64(k.ExtentOffset)+at, patch); err != nil {
		t.Fatal(err)
	}
	copy(data[at:], patch)
	if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("overwrite not visible")
	}
	if err := cl.Overwrite(ctx, k.PartitionId, k.ExtentId, int64(k.ExtentOffset+k.Size)-10, make([]byte, 20)); dataproto.CodeOf(errors.Unwrap(err)) != dataproto.CodeOutOfRange && !isCode(err, dataproto.CodeOutOfRange) {
		t.Fatalf("overwrite past the end: %v", err)
	}
}

func isCode(err error, code dataproto.Code) bool {
	var pe *dataproto.Error
	return errors.As(err, &pe) && pe.Code == code
}

// Freeing a file deletes its large extents and punches its small ones.
func TestFree(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	cl := newClient(t, c, dataclient.Options{})
	big := writeFile(t, cl, randBytes(2<<20, 10), 10)
	small := writeFile(t, cl, randBytes(5000, 11), 11)
	other := randBytes(6000, 12)
	otherKeys := writeFile(t, cl, other, 12)
	ctx := context.Background()
	if failed, err := cl.Free(ctx, append(big, small...)); err != nil || len(failed) != 0 {
		t.Fatalf("free: %v %v", failed, err)
	}
	if failed, err := cl.Free(ctx, append(big, small...)); err != nil || len(failed) != 0 {
		t.Fatalf("free again: %v %v", failed, err)
	}
	buf := make([]byte, 10)
	k := big[0]
	if err := cl.ReadExtent(ctx, k.PartitionId, k.ExtentId, 0, int64(k.Size), buf); !isCode(errors.Unwrap(errors.Unwrap(err)), dataproto.CodeNotFound) && err == nil {
		t.Fatalf("read of a freed extent: %v", err)
	}
	if got := readAll(t, cl, small, 5000); !bytes.Equal(got, make([]byte, 5000)) {
		t.Fatal("freed small file still has bytes")
	}
	if got := readAll(t, cl, otherKeys, int64(len(other))); !bytes.Equal(got, other) {
		t.Fatal("neighbour of a freed small file changed")
	}
}

// A follower whose disk fills up turns its partitions read-only: writes
// move to other partitions, and what was written before stays readable.
func TestFullDiskFailsOver(t *testing.T) {
	full := &diskfs.Rule{Ops: diskfs.OpWrite, PathContains: "ext-", Err: syscall.ENOSPC}
	full.Disable()
	c := datanodetest.Start(t, datanodetest.Config{
		Nodes:      4,
		Partitions: [][]uint64{{1, 2, 3}, {1, 2, 4}},
		NodeOptions: func(id uint64) datanode.Options {
			o := nodeOptions()
			if id == 3 {
				o.Store.FS = diskfs.Inject(diskfs.OS, full)
			}
			return o
		},
	})
	// 256 KiB extents: each picks a partition at random, so some go to the
	// full one (all 32 missing it has probability 2^-32).
	cl := newClient(t, c, dataclient.Options{PacketBytes: 64 << 10, ExtentBytes: 256 << 10, ExcludeFor: 3 * time.Second})
	before := randBytes(8<<20, 30)
	beforeKeys := writeFile(t, cl, before, 30)
	full.Enable()
	after := randBytes(8<<20, 31)
	afterKeys := writeFile(t, cl, after, 31)
	if full.Failed() == 0 || cl.Stats().WriteFailures == 0 {
		t.Fatalf("no write hit the full disk (%d injected failures, %d write failures)", full.Failed(), cl.Stats().WriteFailures)
	}
	for _, k := range afterKeys {
		if k.PartitionId == 1 {
			t.Fatalf("key %+v on the partition whose follower's disk is full", k)
		}
	}
	if got := readAll(t, cl, beforeKeys, int64(len(before))); !bytes.Equal(got, before) {
		t.Fatal("data written before the disk filled up differs")
	}
	if got := readAll(t, cl, afterKeys, int64(len(after))); !bytes.Equal(got, after) {
		t.Fatal("data written after the disk filled up differs")
	}
}

// A follower that stops answering (its disk hangs on fsync) holds a write
// up for at most the chain's timeout; the write then moves on.
func TestSlowFollowerFailsOver(t *testing.T) {
	var slow atomic.Bool
	hang := diskfs.InjectorFunc(func(op diskfs.Op) error {
		if slow.Load() && op.Kind == diskfs.OpSync {
			time.Sleep(4 * time.Second)
		}
		return nil
	})
	c := datanodetest.Start(t, datanodetest.Config{
		Nodes:      4,
		Partitions: [][]uint64{{1, 2, 3}, {1, 2, 4}},
		NodeOptions: func(id uint64) datanode.Options {
			o := nodeOptions()
			o.Chain.ReadTimeout = 1500 * time.Millisecond
			if id == 3 {
				o.Store.FS = diskfs.Inject(diskfs.OS, hang)
			}
			return o
		},
	})
	cl := newClient(t, c, dataclient.Options{PacketBytes: 64 << 10, ExtentBytes: 256 << 10, ExcludeFor: 3 * time.Second})
	slow.Store(true)
	defer slow.Store(false)
	data := randBytes(8<<20, 40)
	start := time.Now()
	keys := writeFile(t, cl, data, 40)
	took := time.Since(start)
	t.Logf("8 MiB with a hung follower: %s, %d write failures", took.Round(time.Millisecond), cl.Stats().WriteFailures)
	if cl.Stats().WriteFailures == 0 {
		t.Fatal("no write met the hung follower")
	}
	if took > 20*time.Second {
		t.Fatalf("the write took %s", took)
	}
	for _, k := range keys {
		if k.PartitionId == 1 {
			t.Fatalf("key %+v acknowledged through the hung follower", k)
		}
	}
	if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("differs")
	}
}

// Scattered writes through one Writer moved by Seek (a random write into a
// sparse file): the bytes travel in full packets of few extents, every
// piece reads back at its file offset, the gaps as zeros, also when a
// replica dies half-way and the packets in flight move to another
// partition.
func TestWriterSeek(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{
		Nodes:      3,
		Partitions: [][]uint64{{1, 2, 3}, {2, 1, 3}, {1, 2}, {2, 1}},
		Options:    nodeOptions(),
	})
	cl := newClient(t, c, dataclient.Options{ExtentBytes: 2 << 20, ExcludeFor: 3 * time.Second})
	const piece, pieces = 4096, 1500
	size := 4 * piece * pieces // a quarter of the file is written
	want := make([]byte, size)
	rnd := rand.New(rand.NewPCG(7, 7))
	slots := rnd.Perm(size / piece)[:pieces]
	w := cl.NewWriter(context.Background(), uint64(slots[0]*piece))
	for i, slot := range slots {
		if i == pieces/2 {
			c.Stop(3)
		}
		off := slot * piece
		p := randBytes(piece, uint64(i))
		copy(want[off:], p)
		w.Seek(uint64(off))
		if _, err := w.Write(p); err != nil {
			t.Fatalf("write %d at %d: %v", i, off, err)
		}
	}
	keys, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	extents := map[[2]uint64]bool{}
	var covered uint64
	for _, k := range keys {
		extents[[2]uint64{k.PartitionId, k.ExtentId}] = true
		covered += k.Size
	}
	t.Logf("%d pieces: %d keys in %d extents, %d write failures", pieces, len(keys), len(extents), cl.Stats().WriteFailures)
	if covered != piece*pieces {
		t.Fatalf("keys cover %d bytes, want %d", covered, piece*pieces)
	}
	if len(extents) > 8 {
		t.Errorf("%d pieces of %d bytes went to %d extents: the writer did not pack them", pieces, piece, len(extents))
	}
	// The keys in write order, laid over each other as a file's map is.
	sorted := append([]*metapb.ExtentKey(nil), keys...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].FileOffset < sorted[j].FileOffset })
	if got := readAll(t, cl, sorted, int64(size)); !bytes.Equal(got, want) {
		t.Fatalf("scattered writes read back differently (equal prefix %d)", commonPrefix(got, want))
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// A writer's acknowledged packets give their buffers to the next ones:
// a stream of many packets allocates about a window's worth, not one per
// packet, and the bytes read back whole (a recycled buffer's old bytes
// never leak into a later packet).
func TestWriterRecyclesPackets(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	const packet, window = 64 << 10, 4
	cl := newClient(t, c, dataclient.Options{PacketBytes: packet, MaxInflightPackets: window, ExtentBytes: 4 << 20})
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for i := range 3 {
		// Not a multiple of the packet: each file's last packet is short.
		data := randBytes(8<<20+1000*i, uint64(40+i))
		keys := writeFile(t, cl, data, uint64(40+i))
		if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
			t.Fatalf("file %d differs", i)
		}
	}
	// 3 files of 128 packets each. A writer needs the window, the packet
	// being filled and the one being sent; the bound is looser because
	// the race detector makes sync.Pool drop a quarter of what it is given.
	if n := cl.Stats().PacketBuffers; n > 3*128/2 {
		t.Fatalf("3 files of 128 packets allocated %d packet buffers: packets are not recycled", n)
	}
}

// Files larger than the small-file threshold and smaller than a packet
// are one packet each, grown from a small buffer; the writer takes no
// packet buffer it will not fill. (It used to take the next packet's when
// the last one left: a 512 KiB buffer allocated and dropped per file.)
func TestWriterTakesNoBufferAtClose(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	const packet = 256 << 10
	cl := newClient(t, c, dataclient.Options{PacketBytes: packet, SmallFileBytes: 16 << 10, ExtentBytes: 4 << 20})
	const files = 32
	for i := range files {
		data := randBytes(100<<10+i, uint64(60+i))
		keys := writeFile(t, cl, data, uint64(60+i))
		if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
			t.Fatalf("file %d differs", i)
		}
	}
	if n := cl.Stats().PacketBuffers; n != 0 {
		t.Fatalf("%d files of one short packet each took %d packet buffers, want none", files, n)
	}
}

// Readers of small files recycle their chunk buffers when they close: a
// client reading many small files one after another does not allocate a
// chunk (ReadChunkBytes, zeroed) per file. With the garbage collector off
// (it empties the pool), 64 reads allocate far fewer than 64 chunks; the
// race detector makes the pool drop a quarter of what it is given, so the
// bound leaves room for that.
func TestReaderRecyclesChunks(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	const chunk = 1 << 20
	cl := newClient(t, c, dataclient.Options{ExtentBytes: 4 << 20, ReadChunkBytes: chunk})
	data := randBytes(4096, 3)
	keys := writeFile(t, cl, data, 1)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	readAll(t, cl, keys, int64(len(data))) // the pool's first buffer
	before := cl.Stats().ChunkBuffers
	const reads = 64
	for range reads {
		if got := readAll(t, cl, keys, int64(len(data))); !bytes.Equal(got, data) {
			t.Fatal("read differs")
		}
	}
	if n := cl.Stats().ChunkBuffers - before; n > reads/2 {
		t.Fatalf("%d reads of a 4 KiB file allocated %d chunk buffers: chunks are not recycled", reads, n)
	}
}

// A replica that takes the request and never answers (its host cut off
// without a word: a zone down, a partition) costs a read
// ReadAttemptTimeout, not the operation's whole time, and the next read
// goes to another replica first. Before ReadAttemptTimeout, a read under
// an operation deadline shorter than the connection's read timeout failed
// every time, and the replica was never found silent.
func TestReadMovesOnFromSilentReplica(t *testing.T) {
	c := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: nodeOptions()})
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	go func() {
		for {
			conn, err := hole.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	var silent atomic.Bool
	var reported atomic.Int64
	src := func(ctx context.Context) (*dataclient.Topology, error) {
		t, err := source(c)(ctx)
		if err == nil && silent.Load() {
			n := t.Nodes[1]
			n.Addr = hole.Addr().String()
			t.Nodes[1] = n
		}
		return t, err
	}
	cl, err := dataclient.New(context.Background(), src, dataclient.Options{ReadAttemptTimeout: 500 * time.Millisecond,
		ReportFailure: func(uint64, error) { reported.Add(1) }, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	data := randBytes(256<<10, 9)
	keys := writeFile(t, cl, data, 9)
	silent.Store(true)
	if err := cl.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		// An operation's bound, below the connection's 10 s read timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		start := time.Now()
		got := readAllCtx(ctx, t, cl, keys, int64(len(data)))
		cancel()
		if !bytes.Equal(got, data) {
			t.Fatalf("read %d differs", i)
		}
		t.Logf("read %d with replica 1 silent: %s", i, time.Since(start).Round(time.Millisecond))
	}
	if reported.Load() == 0 {
		t.Fatal("the silent replica was not reported")
	}
	if n := cl.Stats().ReadFailovers; n != 1 {
		t.Fatalf("%d reads failed over; want 1 (the second read knows the replica is silent)", n)
	}
}
