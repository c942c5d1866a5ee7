package metanode

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// twoParts is a volume of two partitions on a three-node test cluster:
// partition 1 holds the root and inodes 1..2^20, partition 2 the inodes
// above; names of slot 0 route to 1, of slot 1 to 2 (nameIn).
type twoParts struct {
	c      *testCluster
	mc     *metaclient.Client
	p      map[int]*pb.Partition // by slot
	byID   map[uint64]*pb.Partition
	ctx    context.Context
	cancel context.CancelFunc
}

func newTwoParts(t *testing.T) *twoParts {
	t.Helper()
	return newTwoPartsRouted(t, true)
}

// newTwoPartsRouted is newTwoParts whose partitions get the volume's
// routing only if routed (else they accept every name, as a new volume's
// do until the master's first push).
func newTwoPartsRouted(t *testing.T, routed bool) *twoParts {
	t.Helper()
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
	t.Cleanup(pool.Close)
	tp := &twoParts{
		c: c, mc: metaclient.New(pool, func(id uint64) (string, bool) { a, ok := c.addrs[id]; return a, ok }),
		p: map[int]*pb.Partition{0: p1, 1: p2}, byID: map[uint64]*pb.Partition{1: p1, 2: p2},
	}
	tp.ctx, tp.cancel = context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(tp.cancel)
	waitRoot(t, tp.ctx, tp.mc, p1)
	if !routed {
		return tp
	}
	for _, p := range []*pb.Partition{p1, p2} {
		set := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_SetRouting{SetRouting: &metapb.SetRouting{
			Self: p.Id, Current: &metapb.Routing{Version: 1, SlotOwners: []uint64{1, 2}}}}}}}
		if res, err := tp.mc.Txn(tp.ctx, p, set); err != nil || res.Errno != 0 {
			t.Fatalf("set routing on %d: %v %v", p.Id, err, res)
		}
	}
	return tp
}

// home is the partition whose range holds ino.
func (tp *twoParts) home(ino uint64) *pb.Partition {
	if ino <= 1<<20 {
		return tp.p[0]
	}
	return tp.p[1]
}

// inode reads ino from its home (nil if it does not exist).
func (tp *twoParts) inode(t *testing.T, ino uint64) *metapb.Inode {
	t.Helper()
	r, err := tp.mc.GetInode(tp.ctx, tp.home(ino), ino)
	if err != nil {
		t.Fatal(err)
	}
	return r.Inode
}

// txn runs ops on p and wants them to succeed.
func (tp *twoParts) txn(t *testing.T, p *pb.Partition, ops ...*metapb.Op) *metapb.TxnResult {
	t.Helper()
	res, err := tp.mc.Txn(tp.ctx, p, &metapb.Txn{Ops: ops, RequestId: rand.Uint64() | 1})
	if err != nil || res.Errno != 0 {
		t.Fatalf("txn on %d: %v %v", p.Id, err, res)
	}
	return res
}

// name sends a by-inode request to partition p.
func (tp *twoParts) name(t *testing.T, p *pb.Partition, req *metapb.PathRequest) *metapb.PathResponse {
	t.Helper()
	resp, err := tp.mc.Path(tp.ctx, p, req)
	if err != nil {
		t.Fatalf("%v %d/%s on %d: %v", req.Op, req.ParentIno, req.Path, p.Id, err)
	}
	return resp
}

// counter sums a counter over the cluster's hosts: the series whose
// labels include the given name=value pairs (all series without pairs).
func (tp *twoParts) counter(t *testing.T, name string, pairs ...string) float64 {
	t.Helper()
	has := func(m *dto.Metric) bool {
		for i := 0; i+1 < len(pairs); i += 2 {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] }) {
				return false
			}
		}
		return true
	}
	var sum float64
	for _, h := range tp.c.hosts {
		mfs, err := h.env.Registry.(prometheus.Gatherer).Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					if has(m) {
						sum += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return sum
}

func createReq(parent uint64, name string, typ metapb.FileType) *metapb.PathRequest {
	mode := uint32(0o644)
	if typ == metapb.FileType_FILE_TYPE_DIRECTORY {
		mode = 0o755
	}
	return &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_CREATE, ParentIno: parent, Path: []byte(name),
		Create: &metapb.Inode{Type: typ, Mode: mode}, RequestId: rand.Uint64() | 1, OpId: rand.Uint64() | 1}
}

func unlinkReq(parent uint64, name string) *metapb.PathRequest {
	return &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_UNLINK, ParentIno: parent, Path: []byte(name),
		RequestId: rand.Uint64() | 1, OpId: rand.Uint64() | 1}
}

// TestNameFollowUps: a create, mkdir and unlink sent by inode to the name's
// partition, whose parent (and inode) are homed on the other partition, are
// one client request each; the partition touches the parent, drops the
// link and evicts on the other partition itself; a retry of the same
// request changes nothing more; a file the client has open is not evicted.
func TestNameFollowUps(t *testing.T) {
	tp := newTwoParts(t)
	f, d := nameIn("f", 1), nameIn("d", 1)
	root0 := tp.inode(t, RootIno)
	requests := func() float64 { return tp.counter(t, "cairn_meta_client_requests_total") }
	r0 := requests()

	req := createReq(RootIno, f, metapb.FileType_FILE_TYPE_REGULAR)
	c := tp.name(t, tp.p[1], req)
	if c.Errno != 0 || !c.ParentTouched || c.Inode.GetIno() <= 1<<20 || c.Dentry.GetParent() != RootIno {
		t.Fatalf("create below a parent homed elsewhere: %v", c)
	}
	if n := requests() - r0; n != 1 {
		t.Errorf("create: %v client requests, want 1", n)
	}
	root1 := tp.inode(t, RootIno)
	if root1.MtimeNs <= root0.MtimeNs || root1.Nlink != root0.Nlink {
		t.Errorf("root after the create: mtime %d -> %d, nlink %d -> %d", root0.MtimeNs, root1.MtimeNs, root0.Nlink, root1.Nlink)
	}
	if pa := c.GetParentAttrs(); pa.GetIno() != RootIno || pa.GetMtimeNs() != root1.MtimeNs || pa.GetCtimeNs() != root1.CtimeNs || pa.GetNlink() != root1.Nlink {
		t.Errorf("create: parent attributes %v, want the parent's after the touch %v", pa, root1)
	}
	if again := tp.name(t, tp.p[1], req); again.Errno != 0 || again.Inode.GetIno() != c.Inode.GetIno() {
		t.Fatalf("retried create: %v", again)
	}
	if r := tp.inode(t, RootIno); r.MtimeNs != root1.MtimeNs {
		t.Errorf("the retried create touched the parent again")
	}
	// An existing name: EEXIST, and the parent is not touched.
	if dup := tp.name(t, tp.p[1], createReq(RootIno, f, metapb.FileType_FILE_TYPE_REGULAR)); metapb.Errno(dup.Errno) != metapb.EEXIST {
		t.Fatalf("create of an existing name: %v", dup)
	}
	if r := tp.inode(t, RootIno); r.MtimeNs != root1.MtimeNs {
		t.Errorf("a failed create touched the parent")
	}

	// mkdir: the parent's link count grows once, also when retried.
	mreq := createReq(RootIno, d, metapb.FileType_FILE_TYPE_DIRECTORY)
	m := tp.name(t, tp.p[1], mreq)
	if m.Errno != 0 || !m.ParentTouched || m.Inode.GetParent() != RootIno {
		t.Fatalf("mkdir: %v", m)
	}
	tp.name(t, tp.p[1], mreq)
	if r := tp.inode(t, RootIno); r.Nlink != root0.Nlink+1 {
		t.Errorf("root nlink %d after a mkdir and its retry, want %d", r.Nlink, root0.Nlink+1)
	}

	// Lookup by inode: one request, and a missing name is ENOENT.
	if l := tp.name(t, tp.p[1], &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP, ParentIno: RootIno, Path: []byte(f)}); l.Errno != 0 || l.Inode.GetIno() != c.Inode.GetIno() {
		t.Fatalf("lookup: %v", l)
	}
	if l := tp.name(t, tp.p[1], &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP, ParentIno: RootIno, Path: []byte(nameIn("nope", 1))}); metapb.Errno(l.Errno) != metapb.ENOENT {
		t.Fatalf("lookup of a missing name: %v", l)
	}

	// unlink: the inode is homed with the name, the parent elsewhere.
	r1 := requests()
	ureq := unlinkReq(RootIno, f)
	u := tp.name(t, tp.p[1], ureq)
	if u.Errno != 0 || !u.LinkDropped || !u.Evicted || !u.ParentTouched || u.Nlink != 0 {
		t.Fatalf("unlink: %v", u)
	}
	if n := requests() - r1; n != 1 {
		t.Errorf("unlink: %v client requests, want 1", n)
	}
	if r := tp.inode(t, RootIno); u.GetParentAttrs().GetMtimeNs() != r.MtimeNs || u.GetParentAttrs().GetNlink() != r.Nlink {
		t.Errorf("unlink: parent attributes %v, want %v", u.GetParentAttrs(), r)
	}
	if in := tp.inode(t, c.Inode.Ino); in != nil {
		t.Errorf("unlinked inode still there: %v", in)
	}
	if again := tp.name(t, tp.p[1], ureq); again.Errno != 0 || !again.LinkDropped || !again.Evicted {
		t.Fatalf("retried unlink (its name is gone): %v", again)
	}

	// A second name on partition 2 for an inode homed on 1 (a hard link):
	// unlinking it drops the link on partition 1, then the last name's
	// unlink there evicts.
	g, h := nameIn("g", 0), nameIn("h", 1)
	gc := tp.name(t, tp.p[0], createReq(RootIno, g, metapb.FileType_FILE_TYPE_REGULAR))
	if r := tp.inode(t, RootIno); !gc.ParentTouched || gc.GetParentAttrs().GetMtimeNs() != r.MtimeNs || gc.GetParentAttrs().GetIno() != RootIno {
		t.Errorf("create with the parent homed here: parent attributes %v, want %v", gc.GetParentAttrs(), r)
	}
	ino := gc.Inode.GetIno()
	tp.txn(t, tp.p[0], &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: 1}}})
	tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: RootIno, Name: []byte(h), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR}}})
	lreq := unlinkReq(RootIno, h)
	if u := tp.name(t, tp.p[1], lreq); u.Errno != 0 || !u.LinkDropped || u.Nlink != 1 || u.Evicted {
		t.Fatalf("unlink of a name whose inode is homed elsewhere: %v", u)
	}
	tp.name(t, tp.p[1], lreq) // a retry does not drop the link twice
	if in := tp.inode(t, ino); in.GetNlink() != 1 {
		t.Fatalf("nlink %d after unlinking one of two names (and a retry)", in.GetNlink())
	}
	// The client has the file open: the last unlink leaves the eviction
	// to its last close.
	kreq := unlinkReq(RootIno, g)
	kreq.KeepOpen = []uint64{ino}
	if u := tp.name(t, tp.p[0], kreq); u.Errno != 0 || u.Nlink != 0 || u.Evicted {
		t.Fatalf("unlink of an open file: %v", u)
	}
	if in := tp.inode(t, ino); in == nil || in.Nlink != 0 {
		t.Fatalf("open unlinked inode: %v", in)
	}
	if tp.counter(t, "cairn_meta_follow_ups_received_total") == 0 {
		t.Error("no follow-up was counted")
	}

	// The last name of an inode homed elsewhere (a file renamed to a name
	// on the other partition): its home drops the link and evicts in one
	// follow-up.
	x, y := nameIn("x", 0), nameIn("y", 1)
	xc := tp.name(t, tp.p[0], createReq(RootIno, x, metapb.FileType_FILE_TYPE_REGULAR))
	xino := xc.Inode.GetIno()
	tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: RootIno, Name: []byte(y), Ino: xino, Type: metapb.FileType_FILE_TYPE_REGULAR}}})
	tp.txn(t, tp.p[0], &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: RootIno, Name: []byte(x), ExpectIno: xino}}})
	evicts := tp.counter(t, "cairn_meta_follow_ups_total")
	if u := tp.name(t, tp.p[1], unlinkReq(RootIno, y)); u.Errno != 0 || !u.LinkDropped || u.Nlink != 0 || !u.Evicted {
		t.Fatalf("unlink of the last name of an inode homed elsewhere: %v", u)
	}
	if in := tp.inode(t, xino); in != nil {
		t.Errorf("inode left after its last name went: %v", in)
	}
	if n := tp.counter(t, "cairn_meta_follow_ups_total") - evicts; n != 2 {
		t.Errorf("%v follow-ups for the unlink, want 2 (the parent's touch, the link with the eviction)", n)
	}
}

// TestCreateUnderRemovedParent: a create whose parent, homed on the other
// partition, was removed (or is no directory, or is being removed) fails
// with ENOENT (ENOTDIR) and leaves neither a name nor an inode behind.
func TestCreateUnderRemovedParent(t *testing.T) {
	tp := newTwoParts(t)
	dname := nameIn("d", 0)
	dc := tp.name(t, tp.p[0], createReq(RootIno, dname, metapb.FileType_FILE_TYPE_DIRECTORY))
	if dc.Errno != 0 {
		t.Fatalf("mkdir: %v", dc)
	}
	dir := dc.Inode.Ino
	fc := tp.name(t, tp.p[0], createReq(RootIno, nameIn("file", 0), metapb.FileType_FILE_TYPE_REGULAR))
	if fc.Errno != 0 {
		t.Fatalf("create: %v", fc)
	}
	inodes := func() uint64 {
		st, err := tp.mc.Stats(tp.ctx, tp.p[1], 0)
		if err != nil {
			t.Fatal(err)
		}
		return st.Inodes
	}
	n0 := inodes()

	// Fenced (an rmdir is checking it): refused at once, not touched.
	tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: dir, Token: 9}}})
	before := tp.inode(t, dir)
	if r := tp.name(t, tp.p[1], createReq(dir, nameIn("x", 1), metapb.FileType_FILE_TYPE_REGULAR)); metapb.Errno(r.Errno) != metapb.ENOENT {
		t.Fatalf("create under a fenced parent: %v", r)
	}
	if after := tp.inode(t, dir); after.MtimeNs != before.MtimeNs {
		t.Errorf("a create refused under a fence touched the parent")
	}
	tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: dir, Token: 9}}})

	// Removed (its rmdir done): the TouchDir finds it gone.
	tp.txn(t, tp.p[0],
		&metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: RootIno, Name: []byte(dname), ExpectIno: dir}}},
		&metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: dir, Delta: -2}}},
		&metapb.Op{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: dir}}})
	for _, typ := range []metapb.FileType{metapb.FileType_FILE_TYPE_REGULAR, metapb.FileType_FILE_TYPE_DIRECTORY} {
		x := nameIn("x", 1)
		req := createReq(dir, x, typ)
		if r := tp.name(t, tp.p[1], req); metapb.Errno(r.Errno) != metapb.ENOENT {
			t.Fatalf("%v under a removed parent: %v", typ, r)
		}
		if r := tp.name(t, tp.p[1], req); metapb.Errno(r.Errno) != metapb.ENOENT {
			t.Fatalf("retried %v under a removed parent: %v", typ, r)
		}
		if l := tp.name(t, tp.p[1], &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP, ParentIno: dir, Path: []byte(x)}); metapb.Errno(l.Errno) != metapb.ENOENT {
			t.Fatalf("name left under the removed parent: %v", l)
		}
	}
	// Not a directory.
	if r := tp.name(t, tp.p[1], createReq(fc.Inode.Ino, nameIn("y", 1), metapb.FileType_FILE_TYPE_REGULAR)); metapb.Errno(r.Errno) != metapb.ENOTDIR {
		t.Fatalf("create under a file: %v", r)
	}
	if n := tp.counter(t, "cairn_meta_follow_ups_total", "step", "undo_create", "outcome", "ok"); n != 5 {
		t.Errorf("%v creates taken back, want 5 (a file and a directory under the removed parent, twice each, a file under a file)", n)
	}
	if n := inodes(); n != n0 {
		t.Errorf("partition 2 holds %d inodes after the refused creates, want %d", n, n0)
	}
}

// TestInheritLayout: a create that asks for its parent's layout gets the
// parent's layout attribute, read at the plan when the parent is homed
// with the name, else from the parent's home (and remembered for a few
// seconds), and the volume's default without one.
func TestInheritLayout(t *testing.T) {
	tp := newTwoParts(t)
	dc := tp.name(t, tp.p[0], createReq(RootIno, nameIn("d", 0), metapb.FileType_FILE_TYPE_DIRECTORY))
	if dc.Errno != 0 {
		t.Fatalf("mkdir: %v", dc)
	}
	dir := dc.Inode.Ino
	tp.txn(t, tp.p[0], &metapb.Op{Op: &metapb.Op_SetXattr{SetXattr: &metapb.SetXattr{Ino: dir, Name: clustermap.LayoutAttr, Value: []byte("cdc")}}})
	create := func(p *pb.Partition, parent uint64, name string, typ metapb.FileType) *metapb.PathResponse {
		t.Helper()
		req := createReq(parent, name, typ)
		req.InheritLayout = true
		r := tp.name(t, p, req)
		if r.Errno != 0 {
			t.Fatalf("create %s: %v", name, r)
		}
		return r
	}
	for slot, where := range []string{"homed with the name", "homed elsewhere"} {
		r := create(tp.p[slot], dir, nameIn("f", slot), metapb.FileType_FILE_TYPE_REGULAR)
		if r.Inode.Layout != metapb.FileLayout_FILE_LAYOUT_CDC || string(r.LayoutAttr) != "cdc" {
			t.Errorf("file below a cdc directory %s: layout %v, attribute %q", where, r.Inode.Layout, r.LayoutAttr)
		}
		if r := create(tp.p[slot], dir, nameIn("s", slot), metapb.FileType_FILE_TYPE_DIRECTORY); string(r.LayoutAttr) != "cdc" {
			t.Errorf("directory below a cdc directory %s: attribute %q to copy", where, r.LayoutAttr)
		}
		if r := create(tp.p[slot], RootIno, nameIn("g", slot), metapb.FileType_FILE_TYPE_REGULAR); r.Inode.Layout != metapb.FileLayout_FILE_LAYOUT_EXTENT || len(r.LayoutAttr) != 0 {
			t.Errorf("file below the root (%s): layout %v, attribute %q", where, r.Inode.Layout, r.LayoutAttr)
		}
	}
}
