package metanode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
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
		pool := redirect.NewPool(nil, nil)
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
	add(0, &metapb.TxnRequest{PartitionId: part, Txn: createTxn(RootIno, "t"), Then: []*metapb.HomedOp{
		{Ino: RootIno, Op: &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: RootIno, OpId: 9}}}},
		{Ino: 1 << 62, Op: &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: 1 << 62, Delta: -1}}}},
		{Op: &metapb.Op{}}}})
	add(1, &metapb.PathRequest{PartitionId: part})
	add(1, &metapb.PathRequest{PartitionId: part, Op: metapb.PathOp_PATH_OP_RMDIR, ParentIno: RootIno, Path: []byte("a"), RequestId: 7})
	add(1, &metapb.PathRequest{PartitionId: part, Op: metapb.PathOp_PATH_OP_RMDIR, Path: []byte("/a/.."), RequestId: 8})
	add(1, &metapb.PathRequest{PartitionId: part, Op: metapb.PathOp_PATH_OP_RENAME, ParentIno: RootIno, Path: []byte("a"), NewName: []byte("b"), RequestId: 9})
	add(1, &metapb.PathRequest{PartitionId: part, Op: metapb.PathOp_PATH_OP_RENAME, Path: []byte("/a"), NewName: []byte("../x"), RequestId: 10})
	add(1, &metapb.PathRequest{PartitionId: part, Op: metapb.PathOp_PATH_OP_RENAME, Path: []byte("/a"), RequestId: 11})
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

// restrictedCaps are the client capabilities FuzzRestricted calls with:
// each makes the service take the checks of one kind of client
// (pkg/capability): read-only, confined to a directory, ids mapped.
var restrictedCaps = []capability.Caps{
	{ReadOnly: true},
	{Path: "/a", RootIno: 2},
	{RootSquash: true, UIDMap: []capability.IDRange{{Client: 1000, Cluster: 5000, Count: 10}}},
}

// FuzzRestricted is FuzzService for clients with capabilities: the first
// byte picks the capabilities, the second the method, the rest is the
// request, handed to the leader's service in-process as a client
// certificate's call would be. The capability checks (access.go,
// subtree.go, idmap.go) read every field of hostile requests; none may
// crash the node or stop the partition.
func FuzzRestricted(f *testing.F) {
	c := newTestCluster(f, Options{})
	leader := c.leader(f)
	svc := &service{h: leader}
	pool := redirect.NewPool(nil, nil)
	f.Cleanup(pool.Close)
	mc := metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok })
	part := c.part.GetId()
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "fuzz", OrganizationalUnit: []string{string(pki.KindClient)}}, SerialNumber: big.NewInt(7)}
	base := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}})
	add := func(caps, method byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{caps, method}, b...))
	}
	nilOps := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_CreateInode{}}, {Op: &metapb.Op_Setattr{}}, {Op: &metapb.Op_CreateDentry{}}, {Op: &metapb.Op_Fence{}}}}
	for caps := range restrictedCaps {
		add(byte(caps), 0, &metapb.TxnRequest{PartitionId: part, Txn: createTxn(RootIno, "a")})
		add(byte(caps), 0, &metapb.TxnRequest{PartitionId: part, Txn: nilOps})
		add(byte(caps), 0, &metapb.TxnRequest{PartitionId: part, Txn: &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Setattr{Setattr: &metapb.Setattr{Ino: RootIno, Valid: 0xffff, Uid: 0, Mode: 0o7777}}}}}, Cred: &metapb.Cred{Uid: 0}})
		add(byte(caps), 1, &metapb.PathRequest{PartitionId: part, Op: metapb.PathOp_PATH_OP_CREATE, Path: []byte("/../x"), Create: &metapb.Inode{Mode: 0o6777}})
		add(byte(caps), 1, &metapb.PathRequest{PartitionId: part, Op: metapb.PathOp_PATH_OP_UNLINK, ParentIno: 1 << 62, Path: []byte("x")})
		add(byte(caps), 2, &metapb.LookupRequest{PartitionId: part, Parent: 1 << 62, Name: []byte("a")})
		add(byte(caps), 3, &metapb.GetInodeRequest{PartitionId: part, Ino: RootIno, Access: 7})
		add(byte(caps), 4, &metapb.ReadDirRequest{PartitionId: part, Parent: RootIno, Plus: true})
	}
	methods := []func(ctx context.Context, b []byte) error{
		func(ctx context.Context, b []byte) error { return direct(ctx, b, &metapb.TxnRequest{}, svc.Txn) },
		func(ctx context.Context, b []byte) error { return direct(ctx, b, &metapb.PathRequest{}, svc.Path) },
		func(ctx context.Context, b []byte) error { return direct(ctx, b, &metapb.LookupRequest{}, svc.Lookup) },
		func(ctx context.Context, b []byte) error {
			return direct(ctx, b, &metapb.GetInodeRequest{}, svc.GetInode)
		},
		func(ctx context.Context, b []byte) error {
			return direct(ctx, b, &metapb.ReadDirRequest{}, svc.ReadDir)
		},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		ctx, cancel := context.WithTimeout(capability.NewContext(base, restrictedCaps[int(data[0])%len(restrictedCaps)]), 3*time.Second)
		defer cancel()
		_ = methods[int(data[1])%len(methods)](ctx, data[2:])

		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		r, err := mc.GetInode(ctx2, c.part, RootIno)
		if err != nil || r.GetErrno() != 0 {
			t.Fatalf("the partition stopped serving after %x: %v %v", data, err, r)
		}
	})
}

// direct decodes body into req and hands it to a service method.
func direct[Req proto.Message, Resp any](ctx context.Context, body []byte, req Req, method func(context.Context, Req) (Resp, error)) error {
	if err := proto.Unmarshal(body, req); err != nil {
		return err
	}
	_, err := method(ctx, req)
	return err
}
