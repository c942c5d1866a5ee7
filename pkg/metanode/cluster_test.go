package metanode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/node"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// testCluster is three meta hosts in one process, each with its own Pebble
// store on disk, multi-raft host and gRPC server on loopback: everything of a
// meta node but the node shell.
type testCluster struct {
	hosts []*Host
	addrs map[uint64]string
	part  *pb.Partition   // the first of parts
	parts []*pb.Partition // every host holds a replica of each
	stop  []func()
}

func newTestCluster(tb testing.TB, opts Options) *testCluster {
	tb.Helper()
	return newTestClusterOf(tb, opts, &pb.Partition{
		Id: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1,
	})
}

// newTestClusterOf is newTestCluster with the given meta partitions, each
// replicated on nodes 1, 2 and 3.
func newTestClusterOf(tb testing.TB, opts Options, parts ...*pb.Partition) *testCluster {
	tb.Helper()
	c := &testCluster{addrs: map[uint64]string{}, part: parts[0], parts: parts}
	lns := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns[id], c.addrs[id] = ln, ln.Addr().String()
	}
	resolve := func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for id := uint64(1); id <= 3; id++ {
		db, err := pebble.Open(filepath.Join(tb.TempDir(), "db"), &pebble.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		tr := multiraft.NewGRPCTransport(multiraft.NodeID(id), func(n multiraft.NodeID) (string, bool) { return resolve(uint64(n)) }, log)
		rh, err := multiraft.NewHost(multiraft.Config{NodeID: multiraft.NodeID(id), DB: db, Transport: tr, TickInterval: 20 * time.Millisecond, Logger: log})
		if err != nil {
			tb.Fatal(err)
		}
		tr.SetHost(rh)
		reg := prometheus.NewRegistry()
		srv := daemon.NewRPCServer(reg, nil)
		tr.Register(srv)
		h, err := New(node.Env{NodeID: id, DB: db, Raft: rh, RPC: srv, Registry: reg, Logger: log, Resolve: resolve}, opts)
		if err != nil {
			tb.Fatal(err)
		}
		rh.Start()
		if err := h.Assign(c.parts); err != nil {
			tb.Fatal(err)
		}
		ln := lns[id]
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		c.hosts = append(c.hosts, h)
		c.stop = append(c.stop, func() {
			srv.Stop()
			<-done
			h.Close()
			tr.Close()
			rh.Stop()
			db.Close()
		})
	}
	tb.Cleanup(func() {
		for _, s := range c.stop {
			s()
		}
	})
	return c
}

// leader waits until one host leads the (first) partition and returns it.
func (c *testCluster) leader(tb testing.TB) *Host {
	tb.Helper()
	return c.leaderOf(tb, c.part.Id)
}

// leaderOf waits until one host leads partition id and returns it.
func (c *testCluster) leaderOf(tb testing.TB, id uint64) *Host {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, h := range c.hosts {
			if st, err := h.env.Raft.Status(multiraft.GroupID(id)); err == nil && st.IsLeader {
				return h
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("no leader of partition %d after 10s", id)
	return nil
}

func createTxn(parent uint64, name string) *metapb.Txn {
	return &metapb.Txn{Ops: []*metapb.Op{
		{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: 0o644}}},
		{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: parent, Name: []byte(name), Type: metapb.FileType_FILE_TYPE_REGULAR}}},
	}}
}

// TestServiceOverGRPC drives the MetaNode service through metaclient: the
// volume root appears on its own, creates commit on all replicas, reads see
// them, a follower redirects, and malformed requests are refused.
func TestServiceOverGRPC(t *testing.T) {
	c := newTestCluster(t, Options{})
	c.leader(t)
	pool := redirect.NewPool(nil, nil)
	defer pool.Close()
	mc := metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var root *metapb.GetInodeResponse
	for {
		r, err := mc.GetInode(ctx, c.part, RootIno)
		if err != nil {
			t.Fatal(err)
		}
		if r.Errno == 0 {
			root = r
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Open to all and sticky: users of a shared mount remove only their
	// own files from it.
	if root.Inode.Type != metapb.FileType_FILE_TYPE_DIRECTORY || root.Inode.Mode&0o7777 != 0o1777 {
		t.Fatalf("root inode %v, want a directory of mode 1777", root.Inode)
	}
	for i := range 20 {
		res, err := mc.Txn(ctx, c.part, createTxn(RootIno, fmt.Sprintf("f%02d", i)))
		if err != nil || res.Errno != 0 {
			t.Fatalf("create f%02d: %v %v", i, err, res)
		}
	}
	if res, err := mc.Txn(ctx, c.part, createTxn(RootIno, "f00")); err != nil || res.Errno != 17 {
		t.Fatalf("duplicate create: %v %v", err, res)
	}
	lk, err := mc.Lookup(ctx, c.part, RootIno, "f07")
	if err != nil || lk.Errno != 0 || lk.Inode == nil || lk.Inode.Ino != lk.Dentry.Ino {
		t.Fatalf("lookup: %v %v", err, lk)
	}
	var names []string
	after := ""
	for {
		page, err := mc.ReadDir(ctx, c.part, RootIno, after, 7, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Dentries {
			names = append(names, string(d.Name))
		}
		if len(page.Inodes) != len(page.Dentries) {
			t.Fatalf("readdirplus returned %d inodes for %d names", len(page.Inodes), len(page.Dentries))
		}
		if !page.More {
			break
		}
		after = names[len(names)-1]
	}
	if len(names) != 20 || names[0] != "f00" || names[19] != "f19" {
		t.Fatalf("readdir: %v", names)
	}
	// Every replica applied the creates.
	for _, h := range c.hosts {
		deadline := time.Now().Add(5 * time.Second)
		for {
			var n int
			h.partition(c.part.Id).sm.read(func(mp *metapartition.Partition) { n = mp.Stats(0).Dentries })
			if n == 20 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d holds %d dentries, want 20", h.env.NodeID, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A follower names the leader.
	var trailerMD metadata.MD
	leader := c.leader(t)
	for _, h := range c.hosts {
		if h == leader {
			continue
		}
		cc, err := pool.Conn(c.addrs[h.env.NodeID])
		if err != nil {
			t.Fatal(err)
		}
		_, err = metapb.NewMetaNodeClient(cc).Txn(ctx, &metapb.TxnRequest{PartitionId: c.part.Id, Txn: createTxn(RootIno, "x")}, grpc.Trailer(&trailerMD))
		if addr, ok := redirect.Leader(err, trailerMD); !ok || addr != c.addrs[leader.env.NodeID] {
			t.Fatalf("follower answered %v (leader %q), want a redirect to %s", err, addr, c.addrs[leader.env.NodeID])
		}
		break
	}
	// Malformed requests.
	if _, err := mc.Txn(ctx, c.part, &metapb.Txn{}); err == nil {
		t.Fatal("empty txn accepted")
	}
	// A partition no replica hosts is retried (it may be opening) until the
	// caller's deadline.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := mc.Txn(short, &pb.Partition{Id: 99, Replicas: []uint64{1}}, createTxn(1, "y")); !errors.Is(err, redirect.ErrNoLeader) {
		t.Fatalf("unknown partition: %v", err)
	}
}

// BenchmarkCreateMerging measures creates per second on a three-replica meta
// partition with request merging on and off, in the same run: 64 concurrent
// callers, every create a Raft proposal replicated and fsynced on disk.
func BenchmarkCreateMerging(b *testing.B) {
	for _, merging := range []bool{true, false} {
		b.Run(fmt.Sprintf("merging=%v", merging), func(b *testing.B) {
			c := newTestCluster(b, Options{DisableMerging: !merging})
			p := c.leader(b).partition(c.part.Id)
			var next atomic.Int64
			const callers = 64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						res, err := p.merger.submit(ctx, createTxn(RootIno, fmt.Sprintf("w%d-%d", w, i)))
						cancel()
						if err != nil || res.Errno != 0 {
							b.Errorf("create: %v %v", err, res)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
		})
	}
}

// waitRoot waits until the volume root exists on the partition.
func waitRoot(t *testing.T, ctx context.Context, mc *metaclient.Client, part *pb.Partition) {
	t.Helper()
	for {
		r, err := mc.GetInode(ctx, part, RootIno)
		if err != nil {
			t.Fatal(err)
		}
		if r.Errno == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRoutingOverGRPC: Scan pages over gRPC, and after a SetRouting that
// gives every name to another partition, dentry ops come back as
// TxnResult.errno EWRONGMP (not as gRPC errors), reads carry the routing
// version, and a not-owned Scan lists what a migration would move.
func TestRoutingOverGRPC(t *testing.T) {
	c := newTestCluster(t, Options{})
	c.leader(t)
	pool := redirect.NewPool(nil, nil)
	defer pool.Close()
	mc := metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitRoot(t, ctx, mc, c.part)
	for i := range 5 {
		if res, err := mc.Txn(ctx, c.part, createTxn(RootIno, fmt.Sprintf("f%d", i))); err != nil || res.Errno != 0 {
			t.Fatalf("create f%d: %v %v", i, err, res)
		}
	}
	scan := func(req *metapb.ScanRequest) (inodes []uint64, dentries []string, version uint64) {
		t.Helper()
		req.PartitionId = c.part.Id
		for {
			var resp *metapb.ScanResponse
			err := mc.Call(ctx, c.part, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
				resp, err = m.Scan(ctx, req, o...)
				return err
			})
			if err != nil || resp.Errno != 0 {
				t.Fatalf("scan %v: %v %v", req, err, resp)
			}
			if resp.AppliedIndex == 0 {
				t.Fatalf("scan answered applied index 0")
			}
			for _, in := range resp.Inodes {
				inodes = append(inodes, in.Ino)
				req.AfterIno = in.Ino
			}
			for _, d := range resp.Dentries {
				dentries = append(dentries, string(d.Name))
				req.AfterParent, req.AfterName = d.Parent, d.Name
			}
			version = resp.RoutingVersion
			if !resp.More {
				return inodes, dentries, version
			}
		}
	}
	inos, _, _ := scan(&metapb.ScanRequest{Kind: metapb.ScanKind_SCAN_KIND_INODES, Limit: 2})
	if fmt.Sprint(inos) != "[1 2 3 4 5 6]" {
		t.Fatalf("scanned inodes %v", inos)
	}
	_, names, v := scan(&metapb.ScanRequest{Kind: metapb.ScanKind_SCAN_KIND_DENTRIES, Limit: 3})
	if fmt.Sprint(names) != "[f0 f1 f2 f3 f4]" || v != 0 {
		t.Fatalf("scanned dentries %v (routing v%d)", names, v)
	}
	if _, names, _ := scan(&metapb.ScanRequest{Kind: metapb.ScanKind_SCAN_KIND_DENTRIES, NotOwned: true}); len(names) != 0 {
		t.Fatalf("not-owned scan without routing: %v", names)
	}
	var bad *metapb.ScanResponse
	err := mc.Call(ctx, c.part, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		bad, err = m.Scan(ctx, &metapb.ScanRequest{PartitionId: c.part.Id}, o...)
		return err
	})
	if err != nil || metapb.Errno(bad.Errno) != metapb.EINVAL {
		t.Fatalf("scan without a kind: %v %v", err, bad)
	}

	// Partition 2 owns every slot now.
	set := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_SetRouting{SetRouting: &metapb.SetRouting{
		Self: c.part.Id, Current: &metapb.Routing{Version: 1, SlotOwners: []uint64{2, 2}},
	}}}}}
	if res, err := mc.Txn(ctx, c.part, set); err != nil || res.Errno != 0 {
		t.Fatalf("set routing: %v %v", err, res)
	}
	res, err := mc.Txn(ctx, c.part, createTxn(RootIno, "g"))
	if err != nil || metapb.Errno(res.Errno) != metapb.EWRONGMP {
		t.Fatalf("create after the routing moved away: %v %v, want errno EWRONGMP", err, res)
	}
	lk, err := mc.Lookup(ctx, c.part, RootIno, "f1")
	if err != nil || metapb.Errno(lk.Errno) != metapb.EWRONGMP || lk.RoutingVersion != 1 {
		t.Fatalf("lookup: %v %v", err, lk)
	}
	rd, err := mc.ReadDir(ctx, c.part, RootIno, "", 10, false)
	if err != nil || len(rd.Dentries) != 0 || rd.RoutingVersion != 1 || rd.RoutingMoving {
		t.Fatalf("readdir: %v %v", err, rd)
	}
	_, names, v = scan(&metapb.ScanRequest{Kind: metapb.ScanKind_SCAN_KIND_DENTRIES, NotOwned: true, Limit: 2})
	if fmt.Sprint(names) != "[f0 f1 f2 f3 f4]" || v != 1 {
		t.Fatalf("not-owned scan: %v (routing v%d)", names, v)
	}
	var st *metapb.PartitionStatsResponse
	err = mc.Call(ctx, c.part, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		st, err = m.PartitionStats(ctx, &metapb.PartitionStatsRequest{PartitionId: c.part.Id, TopNames: 2, CountNames: [][]byte{[]byte("f3"), []byte("zz")}}, o...)
		return err
	})
	if err != nil || st.RoutingVersion != 1 || st.RoutingMoving || st.InodeStart != 1 || st.InodeEnd != 0 || st.MemoryBytes == 0 ||
		len(st.NamedCounts) != 2 || st.NamedCounts[0].Count != 1 || st.NamedCounts[1].Count != 0 || len(st.TopNames) != 2 || string(st.TopNames[0].Name) != "f0" {
		t.Fatalf("stats: %v %v", err, st)
	}
}

// TestRangeCut: when the map cuts the partition's inode range, the leader
// makes every replica stop allocating above the cut.
func TestRangeCut(t *testing.T) {
	if !needsCut(0, 10) || needsCut(0, 0) || needsCut(10, 10) || needsCut(5, 10) || !needsCut(11, 10) {
		t.Fatal("needsCut")
	}
	c := newTestCluster(t, Options{})
	c.leader(t)
	pool := redirect.NewPool(nil, nil)
	defer pool.Close()
	mc := metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitRoot(t, ctx, mc, c.part)
	cut := proto.Clone(c.part).(*pb.Partition)
	cut.InodeEnd = 3
	for _, h := range c.hosts {
		if err := h.Assign([]*pb.Partition{cut}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range c.hosts {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var end uint64
			h.partition(c.part.Id).sm.read(func(mp *metapartition.Partition) { _, end = mp.Range() })
			if end == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: range end %d, want 3", h.env.NodeID, end)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i, want := range []int32{0, 0, int32(metapb.ENOSPC)} {
		if res, err := mc.Txn(ctx, cut, createTxn(RootIno, fmt.Sprintf("f%d", i))); err != nil || res.Errno != want {
			t.Fatalf("create %d: %v %v, want errno %d", i, err, res, want)
		}
	}
}
