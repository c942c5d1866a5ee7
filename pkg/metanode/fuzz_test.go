package metanode

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

var (
	fuzzOnce sync.Once
	fuzzC    *testCluster
	fuzzMC   *metaclient.Client
	fuzzMeta metapb.MetaNodeClient // raw, to the first partition's leader
)

// FuzzService decodes arbitrary bytes as a request of one of the meta
// node's methods (the first byte picks which), sends it to the leader of a
// real 3-replica meta partition, and then checks that the partition still
// answers: no request, however hostile, may crash a meta node or make the
// partition stop serving.
func FuzzService(f *testing.F) {
	fuzzOnce.Do(func() {
		fuzzC = newTestCluster(f, Options{})
		leader := fuzzC.leader(f)
		pool := redirect.NewPool(nil)
		f.Cleanup(pool.Close)
		fuzzMC = metaclient.New(pool, func(id uint64) (string, bool) { a, ok := fuzzC.addrs[id]; return a, ok })
		cc, err := pool.Conn(fuzzC.addrs[leader.env.NodeID])
		if err != nil {
			f.Fatal(err)
		}
		fuzzMeta = metapb.NewMetaNodeClient(cc)
	})
	part := fuzzC.part.GetId()
	add := func(method byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{method}, b...))
	}
	add(0, &metapb.TxnRequest{PartitionId: part, Txn: createTxn(RootIno, "a")})
	add(0, &metapb.TxnRequest{PartitionId: part, Txn: &metapb.Txn{Ops: []*metapb.Op{{}}}})
	add(0, &metapb.TxnRequest{PartitionId: 1 << 60})
	add(1, &metapb.PathRequest{PartitionId: part})
	add(2, &metapb.LookupRequest{PartitionId: part, Parent: RootIno, Name: []byte("a")})
	add(2, &metapb.LookupRequest{PartitionId: part, Parent: RootIno, Name: []byte("../\x00")})
	add(3, &metapb.GetInodeRequest{PartitionId: part, Ino: 1 << 62})
	add(4, &metapb.ReadDirRequest{PartitionId: part, Parent: RootIno, Limit: 1 << 30})
	add(5, &metapb.ScanRequest{PartitionId: part})
	add(6, &metapb.PartitionStatsRequest{PartitionId: part})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		body := data[1:]
		method := fuzzMethods[int(data[0])%len(fuzzMethods)]
		_ = method(ctx, body) // any answer, error or not, is fine; the partition must go on

		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		r, err := fuzzMC.GetInode(ctx2, fuzzC.part, RootIno)
		if err != nil || r.GetErrno() != 0 {
			t.Fatalf("the partition stopped serving after method %d %x: %v %v", int(data[0])%len(fuzzMethods), body, err, r)
		}
	})
}

// fuzzMethods decode a request of one of the meta node's methods and send
// it to fuzzMeta; FuzzService's first byte picks one (its seeds use these
// indexes).
var fuzzMethods = []func(ctx context.Context, body []byte) error{
	func(ctx context.Context, b []byte) error { return call(ctx, b, &metapb.TxnRequest{}, fuzzMeta.Txn) },
	func(ctx context.Context, b []byte) error { return call(ctx, b, &metapb.PathRequest{}, fuzzMeta.Path) },
	func(ctx context.Context, b []byte) error {
		return call(ctx, b, &metapb.LookupRequest{}, fuzzMeta.Lookup)
	},
	func(ctx context.Context, b []byte) error {
		return call(ctx, b, &metapb.GetInodeRequest{}, fuzzMeta.GetInode)
	},
	func(ctx context.Context, b []byte) error {
		return call(ctx, b, &metapb.ReadDirRequest{}, fuzzMeta.ReadDir)
	},
	func(ctx context.Context, b []byte) error { return call(ctx, b, &metapb.ScanRequest{}, fuzzMeta.Scan) },
	func(ctx context.Context, b []byte) error {
		return call(ctx, b, &metapb.PartitionStatsRequest{}, fuzzMeta.PartitionStats)
	},
}

// call decodes body into req and sends it with method.
func call[Req proto.Message, Resp any](ctx context.Context, body []byte, req Req, method func(context.Context, Req, ...grpc.CallOption) (Resp, error)) error {
	if err := proto.Unmarshal(body, req); err != nil {
		return err
	}
	_, err := method(ctx, req)
	return err
}
