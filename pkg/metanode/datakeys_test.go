package metanode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/chunker"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

func TestExtentKeyProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    *metapb.ExtentKey
		bad  bool
	}{
		{"a key", &metapb.ExtentKey{FileOffset: 4096, PartitionId: 3, ExtentId: 9, ExtentOffset: 8192, Size: 4096}, false},
		{"the last byte a file can have", &metapb.ExtentKey{FileOffset: math.MaxInt64 - 1, PartitionId: 3, Size: 1}, false},
		{"the last byte an extent can have", &metapb.ExtentKey{PartitionId: 3, ExtentOffset: math.MaxInt64 - 1, Size: 1}, false},
		{"partition 0", &metapb.ExtentKey{Size: 1}, true},
		{"size 0", &metapb.ExtentKey{PartitionId: 3}, true},
		{"a file range past int64", &metapb.ExtentKey{FileOffset: math.MaxInt64, PartitionId: 3, Size: 1}, true},
		{"a file range overflowing uint64", &metapb.ExtentKey{FileOffset: math.MaxUint64, PartitionId: 3, Size: 2}, true},
		{"a size past int64", &metapb.ExtentKey{PartitionId: 3, Size: 1 << 63}, true},
		{"an extent range past int64", &metapb.ExtentKey{PartitionId: 3, ExtentOffset: 1 << 63, Size: 1}, true},
		{"an extent range overflowing uint64", &metapb.ExtentKey{PartitionId: 3, ExtentOffset: math.MaxUint64, Size: 1}, true},
	} {
		if why := extentKeyProblem(tc.k); (why != "") != tc.bad {
			t.Errorf("%s: %q, want bad %v", tc.name, why, tc.bad)
		}
	}
}

func TestChunkProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *metapb.Chunk
		bad  bool
	}{
		{"a chunk", &metapb.Chunk{PartitionId: 3, ExtentId: 1, ExtentOffset: 4096, Size: 65536}, false},
		{"the largest chunk", &metapb.Chunk{PartitionId: 3, Size: dataproto.MaxChunk}, false},
		{"partition 0", &metapb.Chunk{Size: 1}, true},
		{"size 0", &metapb.Chunk{PartitionId: 3}, true},
		{"larger than a frame", &metapb.Chunk{PartitionId: 3, Size: dataproto.MaxChunk + 1}, true},
		{"an extent range past int64", &metapb.Chunk{PartitionId: 3, ExtentOffset: math.MaxInt64, Size: 1}, true},
		{"an extent range overflowing uint64", &metapb.Chunk{PartitionId: 3, ExtentOffset: math.MaxUint64, Size: 1}, true},
	} {
		if why := chunkProblem(tc.c); (why != "") != tc.bad {
			t.Errorf("%s: %q, want bad %v", tc.name, why, tc.bad)
		}
	}
}

// TestTxnDataRefs: the data partitions a Txn would store, each once with
// the first place it is named, from extent keys, splices and chunk
// registrations, but not from chunk lookups or releases; an impossible
// key refuses the Txn with EINVAL naming it.
func TestTxnDataRefs(t *testing.T) {
	key := func(pid uint64) *metapb.ExtentKey { return &metapb.ExtentKey{PartitionId: pid, ExtentId: 1, Size: 10} }
	chunk := func(pid uint64) *metapb.Chunk {
		return &metapb.Chunk{Fingerprint: []byte{1}, PartitionId: pid, ExtentId: 1, Size: 10}
	}
	appendOp := func(keys ...*metapb.ExtentKey) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{Ino: 5, Extents: keys}}}
	}
	refsOp := func(items ...*metapb.ChunkRef) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{Items: items}}}
	}
	for _, tc := range []struct {
		name string
		ops  []*metapb.Op
		want []dataRef
		bad  string // part of the refusal's message
	}{
		{"no data", []*metapb.Op{{Op: &metapb.Op_Setattr{Setattr: &metapb.Setattr{Ino: 5}}}}, nil, ""},
		{"extent keys", []*metapb.Op{appendOp(key(3), key(4), key(3))}, []dataRef{{3, "op 0 extent key 0"}, {4, "op 0 extent key 1"}}, ""},
		{"a splice", []*metapb.Op{{Op: &metapb.Op_SpliceChunks{SpliceChunks: &metapb.SpliceChunks{Chunks: []*metapb.Chunk{chunk(7)}}}}}, []dataRef{{7, "op 0 chunk 0"}}, ""},
		{"registrations, not lookups or releases", []*metapb.Op{refsOp(
			&metapb.ChunkRef{Chunk: chunk(0), Delta: 1},
			&metapb.ChunkRef{Chunk: chunk(8), Delta: -1},
			&metapb.ChunkRef{Chunk: chunk(9), Delta: 2},
		)}, []dataRef{{9, "op 0 chunk ref 2"}}, ""},
		{"across ops", []*metapb.Op{appendOp(key(3)), refsOp(&metapb.ChunkRef{Chunk: chunk(3), Delta: 1})}, []dataRef{{3, "op 0 extent key 0"}}, ""},
		{"an empty key", []*metapb.Op{appendOp(key(3), &metapb.ExtentKey{PartitionId: 3})}, nil, "op 0 extent key 1 is empty"},
		{"a key past int64", []*metapb.Op{appendOp(&metapb.ExtentKey{PartitionId: 3, ExtentOffset: 1 << 63, Size: 1})}, nil, "op 0 extent key 0 extent range"},
		{"a chunk of partition 0", []*metapb.Op{{Op: &metapb.Op_SpliceChunks{SpliceChunks: &metapb.SpliceChunks{Chunks: []*metapb.Chunk{chunk(0)}}}}}, nil, "op 0 chunk 0 names no data partition"},
		{"a huge registration", []*metapb.Op{refsOp(&metapb.ChunkRef{Chunk: &metapb.Chunk{PartitionId: 3, Size: math.MaxUint32}, Delta: 1})}, nil, "op 0 chunk ref 0 has"},
	} {
		refs, r := txnDataRefs(&metapb.Txn{Ops: tc.ops})
		switch {
		case tc.bad != "":
			if r == nil || r.errno != metapb.EINVAL || !strings.Contains(r.msg, tc.bad) {
				t.Errorf("%s: %v, want EINVAL with %q", tc.name, r, tc.bad)
			}
		case r != nil:
			t.Errorf("%s: refused: %v", tc.name, r)
		case len(refs) != len(tc.want):
			t.Errorf("%s: %v, want %v", tc.name, refs, tc.want)
		default:
			for i := range refs {
				if refs[i] != tc.want[i] {
					t.Errorf("%s: %v, want %v", tc.name, refs, tc.want)
				}
			}
		}
	}
}

// clientCtx is the context of a call made with a client certificate, as
// the gRPC server hands it to the service.
func clientCtx(ctx context.Context) context.Context {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "writer", OrganizationalUnit: []string{string(pki.KindClient)}}, SerialNumber: big.NewInt(42)}
	return peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}})
}

// dataMap is a cluster map source for tests: volume 1 (meta partition 1,
// data partitions 10 and 11), volume 2 (data partition 20), and data
// partitions added later with add; it counts its reads.
type dataMap struct {
	mu    sync.Mutex
	m     *pb.ClusterMap
	reads atomic.Int64
	fail  atomic.Bool // reads fail (the masters are unreachable)
}

func newDataMap() *dataMap {
	data := func(id, vol uint64) *pb.Partition {
		return &pb.Partition{Id: id, VolumeId: vol, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{1, 2, 3}}
	}
	return &dataMap{m: &pb.ClusterMap{Epoch: 1,
		Volumes: map[uint64]*pb.Volume{
			1: {Id: 1, Name: "v", MetaPartitions: []uint64{1}, DataPartitions: []uint64{10, 11}},
			2: {Id: 2, Name: "w", DataPartitions: []uint64{20}},
		},
		Partitions: map[uint64]*pb.Partition{10: data(10, 1), 11: data(11, 1), 20: data(20, 2),
			1: {Id: 1, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1}},
	}}
}

func (d *dataMap) read(context.Context) (*pb.ClusterMap, error) {
	d.reads.Add(1)
	if d.fail.Load() {
		return nil, errors.New("no master answers")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return proto.Clone(d.m).(*pb.ClusterMap), nil
}

// add gives volume vol a new data partition id, as the master does when
// its writable partitions run low.
func (d *dataMap) add(id, vol uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m.Epoch++
	d.m.Partitions[id] = &pb.Partition{Id: id, VolumeId: vol, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{1, 2, 3}}
	d.m.Volumes[vol].DataPartitions = append(d.m.Volumes[vol].DataPartitions, id)
}

// TestDataRefsRefused: on a real meta partition of volume 1, a client
// certificate's AppendExtents, SpliceChunks and chunk registrations that
// name another volume's data partition (EACCES), one the map does not have
// or an impossible key (EINVAL) are refused before anything is replicated,
// and its chunk drops (EPERM); a data partition the master added after the
// node last read the map is accepted (the node reads it again); cluster
// nodes and admins are not checked.
func TestDataRefsRefused(t *testing.T) {
	dm := newDataMap()
	part := &pb.Partition{Id: 1, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1}
	c := newTestClusterOf(t, Options{CollectInterval: -1, ClusterMap: dm.read}, part)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.leader(t)
	svc := &service{h: leader}
	cctx := clientCtx(ctx)
	// The client's receipts for what it wrote (checkWritten): extent 1 of
	// partitions 10, 11 and 12, whole.
	receipts := giveGrantKey(t, leader, grant.Write, grant.Range{Partition: 10, Extent: 1, Hi: 1 << 40},
		grant.Range{Partition: 11, Extent: 1, Hi: 1 << 40}, grant.Range{Partition: 12, Extent: 1, Hi: 1 << 40})
	for {
		r, err := svc.GetInode(ctx, &metapb.GetInodeRequest{PartitionId: 1, Ino: RootIno})
		if err == nil && r.Errno == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	txn := func(ctx context.Context, ops ...*metapb.Op) *metapb.TxnResult {
		t.Helper()
		resp, err := svc.Txn(ctx, &metapb.TxnRequest{PartitionId: 1, Txn: &metapb.Txn{Ops: ops}, Receipts: receipts})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Result
	}
	res := txn(cctx, createTxn(RootIno, "f").Ops...)
	if res.Errno != 0 {
		t.Fatalf("create: %v", res)
	}
	f := res.Results[0].Inode.Ino
	cdc := txn(cctx, createChunked("g")...)
	if cdc.Errno != 0 {
		t.Fatalf("create a chunked file: %v", cdc)
	}
	g := cdc.Results[0].Inode.Ino
	appendKey := func(pid uint64) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{Ino: f,
			Extents: []*metapb.ExtentKey{{FileOffset: 0, PartitionId: pid, ExtentId: 1, Size: 4096}}}}}
	}
	fp := chunker.Sum(chunker.FastCDC1, []byte("chunk"))
	chunkAt := func(pid uint64) *metapb.Chunk {
		return &metapb.Chunk{Fingerprint: fp[:], Size: 5, PartitionId: pid, ExtentId: 1}
	}
	splice := func(pid uint64) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_SpliceChunks{SpliceChunks: &metapb.SpliceChunks{Ino: g, BaseGen: 1, Chunks: []*metapb.Chunk{chunkAt(pid)}}}}
	}
	register := func(pid uint64) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{Items: []*metapb.ChunkRef{{Chunk: chunkAt(pid), Delta: 1}}}}}
	}

	if res := txn(cctx, appendKey(10)); res.Errno != 0 {
		t.Fatalf("append on the volume's partition 10: %v", res)
	}
	for _, tc := range []struct {
		name string
		op   *metapb.Op
		want metapb.Errno
	}{
		{"an extent key of volume 2's partition", appendKey(20), metapb.EACCES},
		{"an extent key of no partition", appendKey(99), metapb.EINVAL},
		{"an extent key naming the meta partition", appendKey(1), metapb.EINVAL},
		{"an empty extent key", &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{Ino: f,
			Extents: []*metapb.ExtentKey{{FileOffset: 8192, PartitionId: 10, ExtentId: 1}}}}}, metapb.EINVAL},
		{"an extent key past int64", &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: &metapb.AppendExtents{Ino: f,
			Extents: []*metapb.ExtentKey{{FileOffset: 8192, PartitionId: 10, ExtentId: 1, ExtentOffset: 1 << 63, Size: 1}}}}}, metapb.EINVAL},
		{"a splice of volume 2's partition", splice(20), metapb.EACCES},
		{"a chunk registered at volume 2's partition", register(20), metapb.EACCES},
		{"a chunk drop", &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{SourcePartition: 1,
			Items: []*metapb.ChunkRef{{Chunk: chunkAt(10), Delta: -1, DropSeq: 1 << 40}}}}}, metapb.EPERM},
	} {
		res := txn(cctx, tc.op)
		if metapb.Errno(res.Errno) != tc.want || res.Message == "" {
			t.Errorf("%s: %v %q, want %v", tc.name, metapb.Errno(res.Errno), res.Message, tc.want)
		}
	}
	// Nothing of the refused ops reached the partition.
	var in *metapb.Inode
	leader.partition(1).sm.read(func(mp *metapartition.Partition) { in, _ = mp.GetInode(f) })
	if len(in.GetExtents()) != 1 || in.Extents[0].PartitionId != 10 || in.Size != 4096 {
		t.Fatalf("file after the refusals: %v", in)
	}
	if n := testutil.ToFloat64(leader.metrics.dataRefsRefused); n != 7 {
		t.Fatalf("%v refusals counted, want 7 (the drop is refused as an internal op)", n)
	}

	// A partition the master adds is accepted at once, although the node
	// read the map before.
	dm.add(12, 1)
	if res := txn(cctx, appendKey(12), splice(12)); res.Errno != 0 {
		t.Fatalf("append and splice on the new partition 12: %v", res)
	}
	if res := txn(cctx, register(11)); res.Errno != 0 || res.Results[0].Chunks[0].Chunk.PartitionId != 11 {
		t.Fatalf("register a chunk at partition 11: %v", res)
	}

	// Nodes and admins are trusted (the collector drops what they store
	// wrong).
	if res := txn(ctx, appendKey(20)); res.Errno != 0 {
		t.Fatalf("a node's append on partition 20: %v", res)
	}

	// Without a readable map an unknown partition is UNAVAILABLE, which
	// the client retries; a known one needs no read.
	dm.fail.Store(true)
	if _, err := svc.Txn(cctx, &metapb.TxnRequest{PartitionId: 1, Txn: &metapb.Txn{Ops: []*metapb.Op{appendKey(77)}}, Receipts: receipts}); status.Code(err) != codes.Unavailable {
		t.Fatalf("append on partition 77 without a map: %v, want UNAVAILABLE", err)
	}
	if res := txn(cctx, appendKey(11)); res.Errno != 0 {
		t.Fatalf("append on partition 11 without a map: %v", res)
	}
}

// TestMapSince: callers wanting a map read after the same moment share one
// read, and reads are spaced by minMapRefetch.
func TestMapSince(t *testing.T) {
	dm := newDataMap()
	h := &Host{opts: Options{ClusterMap: dm.read}}
	p := &peers{h: h}
	ctx := context.Background()
	since := time.Now()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m, err := p.mapSince(ctx, since); err != nil || m == nil {
				t.Errorf("mapSince: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := dm.reads.Load(); n != 1 {
		t.Fatalf("%d reads for callers of one moment, want 1", n)
	}
	start := time.Now()
	if _, err := p.mapSince(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < minMapRefetch/2 || dm.reads.Load() != 2 {
		t.Fatalf("a second read after %v (%d reads), want one after about %v", d, dm.reads.Load(), minMapRefetch)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.mapSince(cctx, time.Now()); err == nil {
		t.Fatal("a read for a cancelled caller")
	}
}
