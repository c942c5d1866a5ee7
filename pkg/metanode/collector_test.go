package metanode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/datanode"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// chunkVolume is a volume with two meta partitions, 100 (inodes, and a
// chunk index shard) and 101 (the other shard), on a three-replica meta
// cluster whose collector runs every 50 ms with a short grace, and the
// cluster map its collectors read (after edits).
type chunkVolume struct {
	c    *testCluster
	m    *pb.ClusterMap
	vol  *pb.Volume
	src  *pb.Partition
	mc   *metaclient.Client
	ctx  context.Context
	grpc *redirect.Pool
}

func newChunkVolume(t *testing.T, indexParts []uint64, dn *datanodetest.Cluster, edits ...func(m *pb.ClusterMap)) *chunkVolume {
	t.Helper()
	src := &pb.Partition{Id: 100, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1, InodeEnd: 1 << 20}
	other := &pb.Partition{Id: 101, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1<<20 + 1}
	vol := &pb.Volume{Id: 1, Name: "v", MetaPartitions: []uint64{100, 101}, ChunkIndexPartitions: indexParts}
	m := &pb.ClusterMap{Epoch: 1, Volumes: map[uint64]*pb.Volume{1: vol},
		Partitions: map[uint64]*pb.Partition{100: src, 101: other}, Nodes: map[uint64]*pb.Node{}}
	if dn != nil {
		m.Epoch = dn.Epoch()
		for _, p := range dn.Partitions() {
			m.Partitions[p.Id] = p
			vol.DataPartitions = append(vol.DataPartitions, p.Id)
		}
		// Data nodes 1..3 are other processes than meta nodes 1..3: the
		// collector resolves meta nodes through the node's own view first.
		for id, addr := range dn.DataAddrs() {
			m.Nodes[id] = &pb.Node{Id: id, Role: pb.Role_ROLE_DATA, DataAddr: addr, State: pb.NodeState_NODE_STATE_ALIVE}
		}
	}
	for _, edit := range edits {
		edit(m)
	}
	opts := Options{
		CollectInterval: 50 * time.Millisecond,
		ChunkGrace:      500 * time.Millisecond,
		ClusterMap: func(context.Context) (*pb.ClusterMap, error) {
			return proto.Clone(m).(*pb.ClusterMap), nil
		},
	}
	c := newTestClusterOf(t, opts, src, other)
	pool := redirect.NewPool(nil, nil)
	t.Cleanup(pool.Close)
	mc := metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	waitRoot(t, ctx, mc, src)
	return &chunkVolume{c: c, m: m, vol: vol, src: src, mc: mc, ctx: ctx, grpc: pool}
}

// txn applies ops on partition id and fails the test unless they succeed.
func (v *chunkVolume) txn(t *testing.T, id uint64, ops ...*metapb.Op) *metapb.TxnResult {
	t.Helper()
	res, err := v.mc.Txn(v.ctx, v.m.Partitions[id], &metapb.Txn{Ops: ops})
	if err != nil || res.Errno != 0 {
		t.Fatalf("txn on partition %d: %v %v", id, err, res)
	}
	return res
}

// read runs fn on partition id's state on its current leader.
func (v *chunkVolume) read(t *testing.T, id uint64, fn func(mp *metapartition.Partition)) {
	t.Helper()
	v.c.leaderOf(t, id).partition(id).sm.read(fn)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %s", what)
		}
	}
}

type storedChunk struct {
	fp    chunker.Fingerprint
	data  []byte
	loc   dataclient.ChunkLocation
	shard uint64
}

func (s storedChunk) proto() *metapb.Chunk {
	return &metapb.Chunk{Fingerprint: s.fp[:], Size: uint32(s.loc.Size), PartitionId: s.loc.PartitionID, ExtentId: s.loc.ExtentID, ExtentOffset: s.loc.Offset}
}

// chunkForShard makes random chunk contents whose fingerprint's shard is
// shard (0: any).
func chunkForShard(t *testing.T, vol *pb.Volume, rng *rand.Rand, shard uint64) storedChunk {
	t.Helper()
	for {
		data := make([]byte, 20000+rng.IntN(30000))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		fp := chunker.Sum(chunker.FastCDC1, data)
		s, err := clustermap.ChunkShard(vol, fp[:])
		if err != nil {
			t.Fatal(err)
		}
		if shard == 0 || s == shard {
			return storedChunk{fp: fp, data: data, shard: s}
		}
	}
}

func createChunked(name string, chunks ...*metapb.Chunk) []*metapb.Op {
	return []*metapb.Op{
		{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: 0o644, Layout: metapb.FileLayout_FILE_LAYOUT_CDC}}},
		{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: RootIno, Name: []byte(name), Type: metapb.FileType_FILE_TYPE_REGULAR}}},
		{Op: &metapb.Op_SpliceChunks{SpliceChunks: &metapb.SpliceChunks{Chunks: chunks}}},
	}
}

func truncateOp(ino, size uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Setattr{Setattr: &metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_SIZE), Size: size}}}
}

// TestCollectorChunks: a chunked file's dropped chunks travel from its
// partition's free list to their shards (one of them the partition
// itself) as drops, are acknowledged only once applied, and chunks left
// without references are reclaimed after the grace: freed on the data
// nodes and deleted from the index. A chunk still referenced stays.
func TestCollectorChunks(t *testing.T) {
	dn := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}}, Options: datanode.Options{
		AlignDelay: 100 * time.Millisecond, AlignInterval: 500 * time.Millisecond, AlignQuietPeriod: 200 * time.Millisecond,
	}})
	v := newChunkVolume(t, []uint64{100, 101}, dn)
	dc, err := dataclient.New(v.ctx, func(context.Context) (*dataclient.Topology, error) { return dataclient.FromMap(v.m, "v") }, dataclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()

	// a and b are dropped by a truncate; c is kept by a second file.
	rng := rand.New(rand.NewPCG(1, 2))
	chunks := []storedChunk{chunkForShard(t, v.vol, rng, 100), chunkForShard(t, v.vol, rng, 101), chunkForShard(t, v.vol, rng, 0)}
	for i := range chunks {
		loc, err := dc.WriteChunk(v.ctx, chunks[i].fp, chunks[i].data)
		if err != nil {
			t.Fatalf("write chunk %d: %v", i, err)
		}
		chunks[i].loc = loc
	}
	a, b, c := chunks[0], chunks[1], chunks[2]
	// References first (c is named by two files), then the layouts.
	for _, s := range []struct {
		ch   storedChunk
		refs int64
	}{{a, 1}, {b, 1}, {c, 2}} {
		v.txn(t, s.ch.shard, &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{Items: []*metapb.ChunkRef{{Chunk: s.ch.proto(), Delta: s.refs}}}}})
	}
	f := v.txn(t, 100, createChunked("f", a.proto(), b.proto(), c.proto())...).Results[0].Inode.Ino
	v.txn(t, 100, createChunked("g", c.proto())...)

	// The index over gRPC: Scan and PartitionStats of shard 101.
	var on101 []storedChunk
	var bytes101, refBytes101 uint64
	for i, ch := range chunks {
		if ch.shard == 101 {
			on101 = append(on101, ch)
			bytes101 += ch.loc.Size
			refBytes101 += ch.loc.Size * uint64([]int{1, 1, 2}[i])
		}
	}
	scanChunks := func(after []byte) *metapb.ScanResponse {
		t.Helper()
		var resp *metapb.ScanResponse
		err := v.mc.Call(v.ctx, v.m.Partitions[101], func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
			resp, err = m.Scan(ctx, &metapb.ScanRequest{PartitionId: 101, Kind: metapb.ScanKind_SCAN_KIND_CHUNKS, AfterFingerprint: after, Limit: 1}, o...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var scanned [][]byte
	for after := []byte(nil); ; {
		resp := scanChunks(after)
		if resp.Errno != 0 || resp.AppliedIndex == 0 {
			t.Fatalf("scan of the chunk index: %v", resp)
		}
		for _, r := range resp.Chunks {
			scanned = append(scanned, r.Chunk.Fingerprint)
			after = r.Chunk.Fingerprint
		}
		if !resp.More {
			break
		}
	}
	if len(scanned) != len(on101) {
		t.Fatalf("scanned %d entries on shard 101, want %d", len(scanned), len(on101))
	}
	for _, ch := range on101 {
		found := false
		for _, fp := range scanned {
			found = found || bytes.Equal(fp, ch.fp[:])
		}
		if !found {
			t.Fatalf("scan of shard 101 misses %v", ch.fp)
		}
	}
	if resp := scanChunks([]byte{1, 2}); metapb.Errno(resp.Errno) != metapb.EINVAL {
		t.Fatalf("scan after a 2-byte fingerprint: %v", resp)
	}
	st, err := v.mc.Stats(v.ctx, v.m.Partitions[101], 0)
	if err != nil || st.Chunks != uint64(len(on101)) || st.ChunkBytes != bytes101 || st.ChunkRefBytes != refBytes101 || st.ZeroRefChunks != 0 || st.DeadChunks != 0 {
		t.Fatalf("stats of shard 101: %v %v", err, st)
	}

	// The truncate drops a, b and c; the collector gives the references
	// back and acknowledges.
	v.txn(t, 100, truncateOp(f, 0))
	var seqs []uint64
	v.read(t, 100, func(mp *metapartition.Partition) {
		for _, fr := range mp.FreeList() {
			seqs = append(seqs, fr.Seq)
		}
	})
	eventually(t, "the chunk drops leave the free list", func() bool {
		var n int
		v.read(t, 100, func(mp *metapartition.Partition) { n = len(mp.FreeList()) + mp.ChunkStats().PendingDrops })
		return n == 0
	})
	refs := func(ch storedChunk) (*metapb.ChunkRecord, metapb.Errno) {
		var r *metapb.ChunkRecord
		var e metapb.Errno
		v.read(t, ch.shard, func(mp *metapartition.Partition) { r, e = mp.ChunkEntry(ch.fp) })
		return r, e
	}
	if r, e := refs(c); e != 0 || r.Refs != 1 || r.Dead {
		t.Fatalf("c after the drops: %v %v, want 1 reference", r, e)
	}
	// Each shard's watermark for partition 100 is the seq of the last drop
	// it applied: the truncate dropped a, b, c as seqs 1, 2, 3.
	if len(seqs) != 3 || seqs[0] != 1 || seqs[2] != 3 {
		t.Fatalf("free list after the truncate: seqs %v", seqs)
	}
	for _, shard := range []uint64{100, 101} {
		var want uint64
		for i, ch := range chunks {
			if ch.shard == shard {
				want = uint64(i + 1)
			}
		}
		var got uint64
		v.read(t, shard, func(mp *metapartition.Partition) { got = mp.ChunkWatermark(100) })
		if got != want {
			t.Fatalf("watermark of shard %d for partition 100: %d, want %d", shard, got, want)
		}
	}

	// After the grace a and b are reclaimed: gone from the index, freed on
	// the data nodes. c stays.
	eventually(t, "a and b leave the index", func() bool {
		_, ea := refs(a)
		_, eb := refs(b)
		return ea == metapb.ENOENT && eb == metapb.ENOENT
	})
	eventually(t, "a's bytes are freed", func() bool {
		_, err := dc.ReadChunk(v.ctx, a.loc, a.fp)
		return errors.Is(err, dataclient.ErrChunkCorrupt)
	})
	if got, err := dc.ReadChunk(v.ctx, c.loc, c.fp); err != nil || !bytes.Equal(got, c.data) {
		t.Fatalf("c after the reclaim: %v", err)
	}
	if r, e := refs(c); e != 0 || r.Refs != 1 || r.Dead {
		t.Fatalf("c after the reclaim: %v %v", r, e)
	}
	var drops, reclaimed float64
	for _, h := range v.c.hosts {
		drops += testutil.ToFloat64(h.metrics.dropsApplied)
		reclaimed += testutil.ToFloat64(h.metrics.chunksReclaimed)
	}
	if drops != 3 || reclaimed != 2 {
		t.Fatalf("metrics: %v drops applied, %v chunks reclaimed; want 3 and 2", drops, reclaimed)
	}
}

// TestCollectorKeepsDropsWithoutIndex: a volume without chunk index
// partitions cannot take chunk drops; they stay on the free list (and in
// the stats), and so does everything after them.
func TestCollectorKeepsDropsWithoutIndex(t *testing.T) {
	v := newChunkVolume(t, nil, nil)
	fp := chunker.Sum(chunker.FastCDC1, []byte("chunk"))
	ch := &metapb.Chunk{Fingerprint: fp[:], Size: 5, PartitionId: 1, ExtentId: 1}
	f := v.txn(t, 100, createChunked("f", ch)...).Results[0].Inode.Ino
	v.txn(t, 100, truncateOp(f, 0))
	time.Sleep(500 * time.Millisecond) // ten collector rounds
	var free []metapartition.FreedExtent
	v.read(t, 100, func(mp *metapartition.Partition) { free = mp.FreeList() })
	if len(free) != 1 || !free[0].IsChunkDrop() {
		t.Fatalf("free list %v, want the chunk drop kept", free)
	}
	st, err := v.mc.Stats(v.ctx, v.src, 0)
	if err != nil || st.PendingChunkDrops != 1 || st.Chunks != 0 {
		t.Fatalf("stats: %v %v", err, st)
	}
}

// TestCollectorSkipsBadKeys: a deleted file's extent key that names
// another volume's data partition, one the map does not have, or a range
// no data node can serve (stored by a trusted caller, or before the
// request checks) is dropped from the free list and reported, and the
// entries after it are freed; the other volume's bytes stay. A dead chunk
// index entry at another volume's partition is forgotten without freeing
// it.
func TestCollectorSkipsBadKeys(t *testing.T) {
	dn := datanodetest.Start(t, datanodetest.Config{Nodes: 3, Partitions: [][]uint64{{1, 2, 3}, {1, 2, 3}}})
	// Data partition 1 is volume 1's ("v"), 2 volume 2's ("w").
	v := newChunkVolume(t, []uint64{100}, dn, func(m *pb.ClusterMap) {
		for id, vol := range map[uint64]uint64{1: 1, 2: 2} {
			p := proto.Clone(m.Partitions[id]).(*pb.Partition)
			p.VolumeId = vol
			m.Partitions[id] = p
		}
		m.Volumes[1].DataPartitions = []uint64{1}
		m.Volumes[2] = &pb.Volume{Id: 2, Name: "w", DataPartitions: []uint64{2}}
	})
	client := func(volume string) *dataclient.Client {
		dc, err := dataclient.New(v.ctx, func(context.Context) (*dataclient.Topology, error) { return dataclient.FromMap(v.m, volume) }, dataclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dc.Close() })
		return dc
	}
	mine, theirs := client("v"), client("w")
	type file struct {
		name string
		key  *metapb.ExtentKey
		data []byte // nil: not stored anywhere
		good bool
	}
	write := func(dc *dataclient.Client, name string, fill byte, good bool) file {
		data := bytes.Repeat([]byte{fill}, 8192)
		k, err := dc.WriteSmall(v.ctx, 0, data)
		if err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		return file{name, k, data, good}
	}
	files := []file{
		write(mine, "a", 'a', true),
		write(theirs, "foreign", 'f', false),
		write(mine, "c", 'c', true),
		{"unknown", &metapb.ExtentKey{PartitionId: 77, ExtentId: 1, Size: 8192}, nil, false},
		{"past int64", &metapb.ExtentKey{PartitionId: 1, ExtentId: 1 << 40, ExtentOffset: 1 << 63, Size: 8192}, nil, false},
		write(mine, "d", 'd', true),
	}
	// Created first and deleted in this order: the free list holds the
	// bad entries between good ones.
	inos := make([]uint64, len(files))
	for i, f := range files {
		ops := append(createTxn(RootIno, f.name).Ops, &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{
			Extents: []*metapb.ExtentKey{f.key}, Size: f.key.Size}}})
		inos[i] = v.txn(t, 100, ops...).Results[0].Inode.Ino
	}
	for _, ino := range inos {
		v.txn(t, 100, truncateOp(ino, 0))
	}
	eventually(t, "every entry leaves the free list", func() bool {
		var n int
		v.read(t, 100, func(mp *metapartition.Partition) { n = len(mp.FreeList()) })
		return n == 0
	})
	for _, f := range files {
		if f.data == nil {
			continue
		}
		dc, want := mine, make([]byte, len(f.data))
		if !f.good {
			dc, want = theirs, f.data // another volume's bytes are not freed
		}
		got := make([]byte, len(f.data))
		err := dc.ReadExtent(v.ctx, f.key.PartitionId, f.key.ExtentId, int64(f.key.ExtentOffset), int64(f.key.ExtentOffset+f.key.Size), got)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after the collector: %v (freed: %v)", f.name, err, bytes.Equal(got, make([]byte, len(got))))
		}
	}
	skipped := func(kind string) (n float64) {
		for _, h := range v.c.hosts {
			n += testutil.ToFloat64(h.metrics.skipped.WithLabelValues(kind))
		}
		return n
	}
	var freed float64
	for _, h := range v.c.hosts {
		freed += testutil.ToFloat64(h.metrics.freed)
	}
	if skipped("extent") != 3 || freed != 3 {
		t.Fatalf("%v entries skipped, %v freed; want 3 and 3", skipped("extent"), freed)
	}

	// A chunk registered at volume 2's partition, dropped by its only
	// file: after the grace it is forgotten, its bytes left alone.
	rng := rand.New(rand.NewPCG(3, 4))
	ch := chunkForShard(t, v.vol, rng, 100)
	loc, err := theirs.WriteChunk(v.ctx, ch.fp, ch.data)
	if err != nil {
		t.Fatal(err)
	}
	ch.loc = loc
	v.txn(t, 100, &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{Items: []*metapb.ChunkRef{{Chunk: ch.proto(), Delta: 1}}}}})
	g := v.txn(t, 100, createChunked("g", ch.proto())...).Results[0].Inode.Ino
	v.txn(t, 100, truncateOp(g, 0))
	eventually(t, "the foreign chunk leaves the index", func() bool {
		var e metapb.Errno
		v.read(t, 100, func(mp *metapartition.Partition) { _, e = mp.ChunkEntry(ch.fp) })
		return e == metapb.ENOENT
	})
	if got, err := theirs.ReadChunk(v.ctx, ch.loc, ch.fp); err != nil || !bytes.Equal(got, ch.data) {
		t.Fatalf("volume 2's chunk after the reclaim: %v", err)
	}
	if n := skipped("chunk"); n != 1 {
		t.Fatalf("%v chunks skipped, want 1", n)
	}
}

// TestRefusedFree: only a data node's CodeBadRequest makes a key one that
// can never be freed; a refusal of the caller's identity, a missing
// replica or any other error is retried.
func TestRefusedFree(t *testing.T) {
	for _, tc := range []struct {
		err  error
		skip bool
	}{
		{&dataproto.Error{Op: dataproto.OpFree, Code: dataproto.CodeBadRequest, Msg: "free of 0 bytes"}, true},
		{fmt.Errorf("dataclient: free partition 1 extent 2: %w", &dataproto.Error{Code: dataproto.CodeBadRequest}), true},
		{&dataproto.Error{Code: dataproto.CodePermissionDenied, Msg: "revoked"}, false},
		{&dataproto.Error{Code: dataproto.CodeReadOnlyClient}, false},
		{&dataproto.Error{Code: dataproto.CodeUnknownPartition}, false},
		{&dataproto.Error{Code: dataproto.CodeReplicaFailed}, false},
		{errors.New("dataclient: partition 9 is not a data partition of the volume"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := refusedFree(tc.err); (got != "") != tc.skip {
			t.Errorf("%v: %q, want skipped %v", tc.err, got, tc.skip)
		}
	}
}
