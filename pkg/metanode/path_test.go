package metanode

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// nameIn returns a name with prefix that two slots route to slot want.
func nameIn(prefix string, want int) string {
	for i := 0; ; i++ {
		if n := fmt.Sprintf("%s%d", prefix, i); hybridindex.SlotOf(n, 2) == want {
			return n
		}
	}
}

// TestPathOverGRPC resolves paths across two partitions (slot 0 on 1, slot
// 1 on 2): a missing directory is fetched from its owner and kept, a
// fetch of a fenced directory waits for the fence, a name sent to the wrong
// partition is forwarded to its owner, a symlink in the middle is handed to
// the client, and a missing intermediate directory is ENOENT.
func TestPathOverGRPC(t *testing.T) {
	p1 := &pb.Partition{Id: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1, InodeEnd: 1 << 20, VolumeId: 7}
	p2 := &pb.Partition{Id: 2, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1<<20 + 1, VolumeId: 7}
	var c *testCluster
	cmap := func(context.Context) (*pb.ClusterMap, error) {
		m := &pb.ClusterMap{Epoch: 1, Partitions: map[uint64]*pb.Partition{1: p1, 2: p2}, Nodes: map[uint64]*pb.Node{},
			Volumes: map[uint64]*pb.Volume{7: {Id: 7, Name: "v", MetaPartitions: []uint64{1, 2}, SlotOwners: []uint64{1, 2}}}}
		for id, a := range c.addrs {
			m.Nodes[id] = &pb.Node{Id: id, Addr: a}
		}
		return m, nil
	}
	c = newTestClusterOf(t, Options{ClusterMap: cmap, CollectInterval: -1}, p1, p2)
	pool := redirect.NewPool(nil, nil)
	defer pool.Close()
	mc := metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitRoot(t, ctx, mc, p1)
	for _, p := range []*pb.Partition{p1, p2} {
		set := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_SetRouting{SetRouting: &metapb.SetRouting{
			Self: p.Id, Current: &metapb.Routing{Version: 1, SlotOwners: []uint64{1, 2}}}}}}}
		if res, err := mc.Txn(ctx, p, set); err != nil || res.Errno != 0 {
			t.Fatalf("set routing on %d: %v %v", p.Id, err, res)
		}
	}
	parts := map[int]*pb.Partition{0: p1, 1: p2}
	dir, file, link := nameIn("d", 0), nameIn("f", 1), nameIn("l", 1)
	path := func(p *pb.Partition, op metapb.PathOp, pth string, create *metapb.Inode) *metapb.PathResponse {
		t.Helper()
		resp, err := mc.Path(ctx, p, &metapb.PathRequest{Op: op, Path: []byte(pth), Cred: &metapb.Cred{}, Create: create, RequestId: uint64(time.Now().UnixNano())})
		if err != nil {
			t.Fatalf("%v %s: %v", op, pth, err)
		}
		return resp
	}
	mkdir := path(parts[0], metapb.PathOp_PATH_OP_CREATE, "/"+dir, &metapb.Inode{Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: 0o755})
	if mkdir.Errno != 0 || !mkdir.ParentTouched {
		t.Fatalf("mkdir: %v", mkdir)
	}
	d := mkdir.Inode.Ino
	// The file's partition does not know the directory: it fetches it,
	// and touches it on its home itself.
	if r := path(parts[1], metapb.PathOp_PATH_OP_CREATE, "/"+dir+"/"+file, &metapb.Inode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: 0o644}); r.Errno != 0 || r.Parent != d || !r.ParentTouched {
		t.Fatalf("create below a directory of the other partition: %v", r)
	}
	leader2 := c.leaderOf(t, 2)
	if st := leader2.partition(2).ns.Stats(); st.Entries != 2 { // the root and the directory
		t.Errorf("replica of partition 2 holds %d entries, want 2", st.Entries)
	}
	if r := path(parts[1], metapb.PathOp_PATH_OP_LOOKUP, "/"+dir+"/"+file, nil); r.Errno != 0 || r.Inode == nil {
		t.Fatalf("lookup: %v", r)
	}
	// Sent to the wrong partition: forwarded to the owner; a forwarded
	// request is not forwarded again, the owner comes back instead.
	if r := path(parts[0], metapb.PathOp_PATH_OP_LOOKUP, "/"+dir+"/"+file, nil); r.Errno != 0 || r.Inode == nil || string(r.Dentry.GetName()) != file {
		t.Fatalf("lookup on the wrong partition: %v", r)
	}
	fwd, err := mc.Path(ctx, parts[0], &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP, Path: []byte("/" + dir + "/" + file), Cred: &metapb.Cred{}, Forwarded: true})
	if err != nil || metapb.Errno(fwd.Errno) != metapb.EWRONGMP || fwd.Owner != 2 {
		t.Fatalf("forwarded lookup on the wrong partition: %v %v", fwd, err)
	}
	if r := path(parts[1], metapb.PathOp_PATH_OP_LOOKUP, "/nope/"+file, nil); metapb.Errno(r.Errno) != metapb.ENOENT {
		t.Fatalf("missing directory: %v", r)
	}
	if r := path(parts[1], metapb.PathOp_PATH_OP_CREATE, "/"+link, &metapb.Inode{Type: metapb.FileType_FILE_TYPE_SYMLINK, Mode: 0o777, Target: []byte(dir)}); r.Errno != 0 {
		t.Fatalf("symlink: %v", r)
	}
	if r := path(parts[1], metapb.PathOp_PATH_OP_LOOKUP, "/"+link+"/"+file, nil); !r.Symlink || r.SymlinkAt != 0 || string(r.SymlinkTarget) != dir {
		t.Fatalf("symlink in the middle: %v", r)
	}

	// A namespace lock on the directory: partition 2 forgets it, and its
	// next resolution waits until the lock is lifted.
	lock := func(p *pb.Partition, op *metapb.Op) {
		t.Helper()
		if res, err := mc.Txn(ctx, p, &metapb.Txn{Ops: []*metapb.Op{op}}); err != nil || res.Errno != 0 {
			t.Fatalf("%v on %d: %v %v", op, p.Id, err, res)
		}
	}
	for _, p := range []*pb.Partition{p1, p2} {
		lock(p, &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: d, Token: 5, Lock: true}}})
	}
	if st := leader2.partition(2).ns.Stats(); st.Entries != 1 {
		t.Errorf("after the lock partition 2 holds %d entries, want 1 (the root)", st.Entries)
	}
	lifted := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		lifted <- time.Now()
		for _, p := range []*pb.Partition{p1, p2} {
			if _, err := mc.Txn(ctx, p, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: d, Token: 5}}}}}); err != nil {
				t.Error(err)
			}
		}
	}()
	r := path(parts[1], metapb.PathOp_PATH_OP_LOOKUP, "/"+dir+"/"+file, nil)
	done := time.Now()
	if r.Errno != 0 {
		t.Fatalf("lookup after the lock: %v", r)
	}
	if at := <-lifted; done.Before(at) {
		t.Errorf("the lookup through a locked directory answered before the lock was lifted")
	}
}
