package client

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// fakeCluster is one process serving a master (GetMap only) and a meta
// node whose partitions are in-process state machines without Raft. With
// loseReplies it applies every third Txn and then answers UNAVAILABLE, as a
// leader that dies after committing would: the client must retry with the
// same request id and get the remembered result.
type fakeCluster struct {
	pb.UnimplementedMasterServer
	metapb.UnimplementedMetaNodeServer

	mu          sync.Mutex
	parts       map[uint64]*metapartition.Partition
	m           *pb.ClusterMap
	now         int64
	txns        int
	lost        int
	loseReplies bool
	// dieAfter >= 0 answers that many more Txns, then refuses every Txn
	// (UNAVAILABLE) until it is set back to -1: a client that crashed
	// mid-operation, as far as the metadata can tell.
	dieAfter int

	// Routing as docs/routing.md has the partitions apply it; a partition
	// without an entry accepts every name (as one that never got a
	// routing).
	routing  map[uint64]*fakeRouting
	refused  map[metapb.Errno]int // routing refusals answered
	readDirs int                  // ReadDir calls answered
	// onGetMap, if set, runs (under mu) before every GetMap answer: a test
	// moves the routing forward when the client re-reads the map.
	onGetMap func()
	// onRefuse, if set, runs (under mu) after every routing refusal.
	onRefuse func()
	// thenUndone answers a Txn's then steps undone, as a partition whose
	// homes did not answer in time: the client must run them itself.
	thenUndone bool
	thenRun    int // then groups the fake ran itself
	// homeSilent answers lookups without the inode, as a name's
	// partition whose inode's home did not answer: the client asks the
	// home itself. vanish[ino] > 0 answers that many GetInodes of ino
	// ENOENT, as a home that freed the inode (a rename over its name)
	// between the name's answer and the client's question.
	homeSilent bool
	vanish     map[uint64]int
}

// fakeRouting is one partition's copy of the routing.
type fakeRouting struct {
	version   uint64
	cur, prev *hybridindex.Table
	sealed    bool
}

// check answers for a name as the table of docs/routing.md says; listed is
// whether ReadDir shows the name.
func (r *fakeRouting) check(part, parent uint64, name string, mutation bool) (e metapb.Errno, listed bool) {
	if r == nil || r.cur == nil {
		return 0, true
	}
	own := func(t *hybridindex.Table) bool { id, _ := t.Route(parent, name); return id == part }
	cur := own(r.cur)
	if r.prev == nil {
		if cur {
			return 0, true
		}
		return metapb.EWRONGMP, false
	}
	prev := own(r.prev)
	switch {
	case prev && cur:
		return 0, true
	case prev && r.sealed:
		return metapb.EWRONGMP, true
	case prev && mutation:
		return metapb.EMOVING, true
	case prev:
		return 0, true
	case cur:
		return metapb.EMOVING, false
	}
	return metapb.EWRONGMP, false
}

func (f *fakeCluster) refuse(e metapb.Errno) {
	if f.refused == nil {
		f.refused = map[metapb.Errno]int{}
	}
	f.refused[e]++
	if f.onRefuse != nil {
		f.onRefuse()
	}
}

// dentryNames returns the names the dentry ops of t touch.
func dentryNames(t *metapb.Txn) []nameKey {
	var out []nameKey
	for _, op := range t.GetOps() {
		switch {
		case op.GetCreateDentry() != nil:
			out = append(out, nameKey{op.GetCreateDentry().GetParent(), string(op.GetCreateDentry().GetName())})
		case op.GetDeleteDentry() != nil:
			out = append(out, nameKey{op.GetDeleteDentry().GetParent(), string(op.GetDeleteDentry().GetName())})
		case op.GetReplaceDentry() != nil:
			out = append(out, nameKey{op.GetReplaceDentry().GetParent(), string(op.GetReplaceDentry().GetName())})
		}
	}
	return out
}

func (f *fakeCluster) GetMap(context.Context, *pb.GetMapRequest) (*pb.GetMapResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.onGetMap != nil {
		f.onGetMap()
	}
	return &pb.GetMapResponse{Map: proto.Clone(f.m).(*pb.ClusterMap)}, nil
}

func (f *fakeCluster) part(id uint64) (*metapartition.Partition, error) {
	p, ok := f.parts[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "meta partition %d is not on this node", id)
	}
	return p, nil
}

func (f *fakeCluster) Txn(_ context.Context, req *metapb.TxnRequest) (*metapb.TxnResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dieAfter == 0 {
		return nil, status.Error(codes.Unavailable, "client crashed")
	}
	if f.dieAfter > 0 {
		f.dieAfter--
	}
	p, err := f.part(req.PartitionId)
	if err != nil {
		return nil, err
	}
	for _, n := range dentryNames(req.Txn) {
		if e, _ := f.routing[req.PartitionId].check(req.PartitionId, n.parent, n.name, true); e != 0 {
			f.refuse(e)
			return &metapb.TxnResponse{Result: &metapb.TxnResult{Errno: int32(e), Message: fmt.Sprintf("%d/%q", n.parent, n.name)}}, nil
		}
	}
	f.now++
	res := p.ApplyBatch(&metapb.Batch{NowNs: f.now, Txns: []*metapb.Txn{req.Txn}})[0]
	f.txns++
	resp := &metapb.TxnResponse{Result: res}
	if res.Errno == 0 && len(req.Then) > 0 {
		resp.Then = f.then(req.Txn.RequestId, req.Then)
	}
	if f.loseReplies && f.txns%3 == 0 {
		f.lost++
		return nil, status.Error(codes.Unavailable, "reply lost after commit")
	}
	return resp, nil
}

// then runs a Txn's then steps as a meta node does (f.mu held): groups of
// consecutive steps on one inode, each a Txn on its home under the derived
// request id; with thenUndone it runs none.
func (f *fakeCluster) then(id uint64, then []*metapb.HomedOp) []*metapb.ThenGroup {
	var out []*metapb.ThenGroup
	for i, h := range then {
		if n := len(out); n > 0 && then[out[n-1].Steps[0]].Ino == h.Ino {
			out[n-1].Steps = append(out[n-1].Steps, uint32(i))
			continue
		}
		out = append(out, &metapb.ThenGroup{Steps: []uint32{uint32(i)}, RequestId: metapb.FollowUpID(id, metapb.FollowUpThen+uint64(i))})
	}
	if f.thenUndone {
		return out
	}
	for _, g := range out {
		t := &metapb.Txn{RequestId: g.RequestId}
		for _, st := range g.Steps {
			t.Ops = append(t.Ops, then[st].Op)
		}
		g.Result, g.Done = f.followUp(then[g.Steps[0]].Ino, t), true
		f.thenRun++
	}
	return out
}

// apply applies t on p as the next Raft entry (f.mu held).
func (f *fakeCluster) apply(p *metapartition.Partition, t *metapb.Txn) *metapb.TxnResult {
	f.now++
	return p.ApplyBatch(&metapb.Batch{NowNs: f.now, Txns: []*metapb.Txn{t}})[0]
}

// homeOf returns the partition whose range holds ino (f.mu held).
func (f *fakeCluster) homeOf(ino uint64) *metapartition.Partition {
	for _, p := range f.parts {
		if p.Holds(ino) {
			if _, e := p.GetInode(ino); e == 0 {
				return p
			}
		}
	}
	for _, p := range f.parts {
		if p.Holds(ino) {
			return p
		}
	}
	return nil
}

// followUp applies a follow-up Txn on the home of ino, as a meta node
// sends it.
func (f *fakeCluster) followUp(ino uint64, t *metapb.Txn) *metapb.TxnResult {
	h := f.homeOf(ino)
	if h == nil {
		return &metapb.TxnResult{Errno: int32(metapb.ENOENT)}
	}
	return f.apply(h, t)
}

// Path serves by-inode requests (PathRequest.parent_ino) as a meta node
// does: the routing check, the Txn on the name's partition and the
// follow-ups on the other partitions, in order. loseReplies and dieAfter
// treat a CREATE or UNLINK as one Txn.
func (f *fakeCluster) Path(_ context.Context, req *metapb.PathRequest) (*metapb.PathResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.ParentIno == 0 {
		return nil, status.Error(codes.Unimplemented, "the fake serves names by inode only")
	}
	mutation := req.Op != metapb.PathOp_PATH_OP_LOOKUP
	if mutation && f.dieAfter == 0 {
		return nil, status.Error(codes.Unavailable, "client crashed")
	}
	p, err := f.part(req.PartitionId)
	if err != nil {
		return nil, err
	}
	parent, name := req.ParentIno, string(req.Path)
	r := f.routing[req.PartitionId]
	if e, _ := r.check(req.PartitionId, parent, name, mutation); e != 0 {
		f.refuse(e)
		resp := &metapb.PathResponse{Errno: int32(e), Parent: parent}
		if r != nil {
			resp.RoutingVersion = r.version
			if e == metapb.EWRONGMP {
				resp.Owner, _ = r.cur.Route(parent, name)
			}
		}
		return resp, nil
	}
	var resp *metapb.PathResponse
	switch req.Op {
	case metapb.PathOp_PATH_OP_LOOKUP:
		d, in, e := p.Lookup(parent, name)
		resp = &metapb.PathResponse{Errno: int32(e), Parent: parent, Dentry: d, Inode: in}
		if f.homeSilent {
			resp.Inode = nil
		} else if e == 0 && in == nil {
			if h := f.homeOf(d.Ino); h != nil {
				resp.Inode, _ = h.GetInode(d.Ino)
			}
		}
		return resp, nil
	case metapb.PathOp_PATH_OP_CREATE:
		resp = f.pathCreate(p, req, parent, name)
	case metapb.PathOp_PATH_OP_UNLINK:
		resp = f.pathUnlink(p, req, parent, name)
	default:
		return &metapb.PathResponse{Errno: int32(metapb.EINVAL)}, nil
	}
	if f.dieAfter > 0 {
		f.dieAfter--
	}
	f.txns++
	if f.loseReplies && f.txns%3 == 0 {
		f.lost++
		return nil, status.Error(codes.Unavailable, "reply lost after commit")
	}
	return resp, nil
}

func (f *fakeCluster) pathCreate(p *metapartition.Partition, req *metapb.PathRequest, parent uint64, name string) *metapb.PathResponse {
	c := req.Create
	ci := &metapb.CreateInode{Type: c.Type, Mode: c.Mode, Uid: c.Uid, Gid: c.Gid, Rdev: c.Rdev, Target: c.Target, Layout: c.Layout}
	var delta int32
	if isDirType(c.Type) {
		ci.Parent, delta = parent, 1
	}
	var attr []byte
	if req.InheritLayout {
		if h := f.homeOf(parent); h != nil {
			in, _ := h.GetInode(parent)
			attr = in.GetXattrs()[LayoutAttr]
		}
		if c.Type == metapb.FileType_FILE_TYPE_REGULAR {
			for _, vol := range f.m.Volumes {
				ci.Layout = metapb.FileLayout(vol.GetDefaultLayout())
			}
			if l, err := clustermap.ParseLayout(string(attr)); attr != nil && err == nil {
				ci.Layout = l
			}
		}
	}
	touch := opTouchDir(parent, delta, req.OpId)
	ops := []*metapb.Op{opCreateInode(ci), opCreateDentry(parent, name, 0, c.Type)}
	local := p.Holds(parent)
	if local {
		ops = append(ops, touch)
	}
	res := f.apply(p, &metapb.Txn{Ops: ops, RequestId: req.RequestId})
	if res.Errno != 0 {
		return &metapb.PathResponse{Errno: res.Errno, Message: res.Message, Parent: parent}
	}
	in := res.Results[0].Inode
	resp := &metapb.PathResponse{Parent: parent, Inode: in, Dentry: res.Results[1].Dentry, ParentTouched: true, LayoutAttr: attr}
	if local {
		return resp
	}
	if tr := f.followUp(parent, &metapb.Txn{Ops: []*metapb.Op{touch}}); tr.Errno == int32(metapb.ENOENT) || tr.Errno == int32(metapb.ENOTDIR) {
		f.apply(p, &metapb.Txn{Ops: []*metapb.Op{opDeleteDentry(parent, name, in.Ino, 0), opLink(in.Ino, -int32(in.Nlink)), opEvict(in.Ino)},
			RequestId: metapb.FollowUpID(req.RequestId, metapb.FollowUpUndo)})
		return &metapb.PathResponse{Errno: tr.Errno, Parent: parent, Message: "parent removed"}
	}
	return resp
}

func (f *fakeCluster) pathUnlink(p *metapartition.Partition, req *metapb.PathRequest, parent uint64, name string) *metapb.PathResponse {
	var d *metapb.Dentry
	var in *metapb.Inode
	if res, ok := p.Answered(req.RequestId); ok {
		d = res.Results[0].Dentry
		in, _ = p.GetInode(d.Ino)
	} else {
		var e metapb.Errno
		if d, in, e = p.Lookup(parent, name); e != 0 {
			return &metapb.PathResponse{Errno: int32(e), Parent: parent}
		}
		if isDirType(d.Type) {
			return &metapb.PathResponse{Errno: int32(metapb.EISDIR), Parent: parent}
		}
	}
	keep := req.KeepAll || slices.Contains(req.KeepOpen, d.Ino)
	ops := []*metapb.Op{opDeleteDentry(parent, name, d.Ino, d.Type)}
	if in != nil {
		ops = append(ops, opLink(d.Ino, -1))
		if in.Nlink == 1 && !keep {
			ops = append(ops, opEvict(d.Ino))
		}
	}
	if p.Holds(parent) {
		ops = append(ops, opTouchDir(parent, 0, req.OpId))
	}
	res := f.apply(p, &metapb.Txn{Ops: ops, RequestId: req.RequestId})
	if res.Errno != 0 {
		return &metapb.PathResponse{Errno: res.Errno, Message: res.Message, Parent: parent}
	}
	resp := &metapb.PathResponse{Parent: parent, Dentry: d, LinkDropped: true, ParentTouched: true}
	for _, r := range res.Results[1:] {
		if r.Inode.GetIno() == d.Ino {
			if resp.Inode == nil {
				resp.Inode, resp.Nlink = r.Inode, r.Inode.Nlink
			} else {
				resp.Evicted = true
			}
		}
	}
	if !p.Holds(d.Ino) {
		lr := f.followUp(d.Ino, &metapb.Txn{Ops: []*metapb.Op{opLink(d.Ino, -1)}, RequestId: metapb.FollowUpID(req.RequestId, metapb.FollowUpLink)})
		if lr.Errno == 0 {
			resp.Inode, resp.Nlink = lr.Results[0].Inode, lr.Results[0].Inode.Nlink
			if resp.Nlink == 0 && !keep {
				er := f.followUp(d.Ino, &metapb.Txn{Ops: []*metapb.Op{opEvict(d.Ino)}, RequestId: metapb.FollowUpID(req.RequestId, metapb.FollowUpEvict)})
				resp.Evicted = er.Errno == 0
			}
		}
	}
	if !p.Holds(parent) {
		f.followUp(parent, &metapb.Txn{Ops: []*metapb.Op{opTouchDir(parent, 0, req.OpId)}})
	}
	return resp
}

func (f *fakeCluster) Lookup(_ context.Context, req *metapb.LookupRequest) (*metapb.LookupResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.part(req.PartitionId)
	if err != nil {
		return nil, err
	}
	r := f.routing[req.PartitionId]
	if e, _ := r.check(req.PartitionId, req.Parent, string(req.Name), false); e != 0 {
		f.refuse(e)
		return &metapb.LookupResponse{Errno: int32(e)}, nil
	}
	d, in, e := p.Lookup(req.Parent, string(req.Name))
	resp := &metapb.LookupResponse{Errno: int32(e), Dentry: d, Inode: in}
	if r != nil {
		resp.RoutingVersion = r.version
	}
	return resp, nil
}

func (f *fakeCluster) GetInode(_ context.Context, req *metapb.GetInodeRequest) (*metapb.GetInodeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.part(req.PartitionId)
	if err != nil {
		return nil, err
	}
	if f.vanish[req.Ino] > 0 {
		f.vanish[req.Ino]--
		return &metapb.GetInodeResponse{Errno: int32(metapb.ENOENT)}, nil
	}
	in, e := p.GetInode(req.Ino)
	return &metapb.GetInodeResponse{Errno: int32(e), Inode: in}, nil
}

func (f *fakeCluster) ReadDir(_ context.Context, req *metapb.ReadDirRequest) (*metapb.ReadDirResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.part(req.PartitionId)
	if err != nil {
		return nil, err
	}
	f.readDirs++
	r := f.routing[req.PartitionId]
	var ds []*metapb.Dentry
	for _, d := range p.ReadDir(req.Parent, string(req.After), 1<<30) {
		if _, listed := r.check(req.PartitionId, req.Parent, string(d.GetName()), false); listed && len(ds) <= int(req.Limit) {
			ds = append(ds, d)
		}
	}
	resp := &metapb.ReadDirResponse{}
	if r != nil {
		resp.RoutingVersion, resp.RoutingMoving = r.version, r.prev != nil
	}
	if len(ds) > int(req.Limit) {
		ds, resp.More = ds[:req.Limit], true
	}
	resp.Dentries = ds
	if req.Plus {
		for _, d := range ds {
			if in, e := p.GetInode(d.Ino); e == 0 {
				resp.Inodes = append(resp.Inodes, in)
			}
		}
	}
	return resp, nil
}

func (f *fakeCluster) PartitionStats(_ context.Context, req *metapb.PartitionStatsRequest) (*metapb.PartitionStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.part(req.PartitionId)
	if err != nil {
		return nil, err
	}
	st := p.Stats(0)
	return &metapb.PartitionStatsResponse{Inodes: uint64(st.Inodes), Dentries: uint64(st.Dentries)}, nil
}

// startFake serves a volume "v" of three partitions on loopback and opens it.
func startFake(t testing.TB) (*fakeCluster, *Volume) {
	return startFakeMap(t, testMap())
}

// startFakeMap serves the map m (volume "v", partition 10 holding the
// root) on loopback and opens volume "v".
func startFakeMap(t testing.TB, m *pb.ClusterMap) (*fakeCluster, *Volume) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCluster{parts: map[uint64]*metapartition.Partition{}, routing: map[uint64]*fakeRouting{}, dieAfter: -1}
	f.m = m
	f.m.Nodes[1].Addr = lis.Addr().String()
	for id, p := range f.m.Partitions {
		p.Replicas = []uint64{1}
		mp, err := metapartition.New(p.InodeStart, p.InodeEnd)
		if err != nil {
			t.Fatal(err)
		}
		f.parts[id] = mp
	}
	root := &metapb.Txn{Ops: []*metapb.Op{opCreateInode(&metapb.CreateInode{Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: 0o755, WantIno: 1})}}
	if r := f.parts[10].ApplyBatch(&metapb.Batch{NowNs: 1, Txns: []*metapb.Txn{root}})[0]; r.Errno != 0 {
		t.Fatal(r.Message)
	}
	s := grpc.NewServer()
	pb.RegisterMasterServer(s, f)
	metapb.RegisterMetaNodeServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := Open(ctx, []string{lis.Addr().String()}, "v", &Options{RefreshInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return f, v
}

// TestExactlyOnceUnderLostReplies runs a namespace workload while every
// third Txn reply is lost after the partition applied it. Without request
// ids, retried creates would fail with EEXIST, unlinks with ENOENT and link
// counts would drift; with them every operation succeeds exactly once.
func TestExactlyOnceUnderLostReplies(t *testing.T) {
	f, v := startFake(t)
	f.mu.Lock()
	f.loseReplies = true
	f.mu.Unlock()
	ctx := context.Background()
	d, err := v.Mkdir(ctx, RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 30 {
		n := fmt.Sprintf("f%02d", i)
		if _, err := v.Create(ctx, d.Ino, n, 0o644, 0, 0); err != nil {
			t.Fatalf("create %s: %v", n, err)
		}
		want = append(want, n)
	}
	for i := 0; i < 30; i += 3 {
		n := fmt.Sprintf("f%02d", i)
		if err := v.Unlink(ctx, d.Ino, n); err != nil {
			t.Fatalf("unlink %s: %v", n, err)
		}
		want = slices.DeleteFunc(want, func(s string) bool { return s == n })
	}
	for i := 1; i < 30; i += 3 {
		from, to := fmt.Sprintf("f%02d", i), fmt.Sprintf("g%02d", i)
		if err := v.Rename(ctx, d.Ino, from, RootIno, to, 0); err != nil {
			t.Fatalf("rename %s: %v", from, err)
		}
		want = slices.DeleteFunc(want, func(s string) bool { return s == from })
	}
	sub, err := v.Mkdir(ctx, d.Ino, "sub", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Link(ctx, mustLookup(t, v, d.Ino, "f02").Ino, sub.Ino, "l"); err != nil {
		t.Fatal(err)
	}
	if a := mustLookup(t, v, d.Ino, "f02"); a.Nlink != 2 {
		t.Fatalf("nlink after link %d", a.Nlink)
	}
	if err := v.Rmdir(ctx, d.Ino, "sub"); ErrnoOf(err) != syscall.ENOTEMPTY {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	if err := v.Unlink(ctx, sub.Ino, "l"); err != nil {
		t.Fatal(err)
	}
	if err := v.Rmdir(ctx, d.Ino, "sub"); err != nil {
		t.Fatal(err)
	}
	var got []string
	cursor := ""
	for {
		ents, more, err := v.ReadDirPlus(ctx, d.Ino, cursor, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			got = append(got, e.Name)
			if e.Attr == nil || e.Attr.Nlink != 1 {
				t.Errorf("%s: attributes %+v", e.Name, e.Attr)
			}
		}
		if !more {
			break
		}
		cursor = ents[len(ents)-1].Name
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listing %v, want %v", got, want)
	}
	if a, err := v.GetAttr(ctx, d.Ino); err != nil || a.Nlink != 2 {
		t.Fatalf("d: %+v %v (nlink must be back at 2)", a, err)
	}
	if a, err := v.GetAttr(ctx, RootIno); err != nil || a.Nlink != 3 {
		t.Fatalf("root: %+v %v", a, err)
	}
	st, err := v.StatFS(ctx)
	if err != nil || st.Files != uint64(2+len(want)+10) {
		t.Fatalf("statfs %+v %v, want %d files", st, err, 2+len(want)+10)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost == 0 {
		t.Fatal("no reply was lost")
	}
	t.Logf("%d txns, %d replies lost and retried", f.txns, f.lost)
}

func mustLookup(t *testing.T, v *Volume, parent uint64, name string) *Attr {
	t.Helper()
	a, err := v.Lookup(context.Background(), parent, name)
	if err != nil {
		t.Fatalf("lookup %d/%s: %v", parent, name, err)
	}
	return a
}

// TestUnknownPartitionRefresh: a partition the node no longer hosts makes
// the client re-read the map, and the operation ends with a bounded error.
func TestUnknownPartitionRefresh(t *testing.T) {
	f, v := startFake(t)
	f.mu.Lock()
	delete(f.parts, 12)
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := v.GetAttr(ctx, 5000)
	if n := ErrnoOf(err); n != syscall.ETIMEDOUT {
		t.Fatalf("GetAttr on a lost partition: %v (%v)", err, n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
}

// TestLookupAgainWhenTheInodeVanished: a lookup whose inode is fetched in
// a second request, and is gone by then (a rename over the name freed it),
// looks the name up again instead of answering ENOENT for a name that
// exists; a bounded number of times.
func TestLookupAgainWhenTheInodeVanished(t *testing.T) {
	fake, v := startFake(t)
	ctx := context.Background()
	a, err := v.Create(ctx, RootIno, "a", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	fake.homeSilent = true
	fake.vanish = map[uint64]int{a.Ino: lookupAttempts - 1}
	fake.mu.Unlock()
	got, err := v.LookupChild(ctx, RootIno, "a")
	if err != nil || got.Ino != a.Ino {
		t.Fatalf("lookup while the inode vanished %d times: %v, %v", lookupAttempts-1, got, err)
	}
	fake.mu.Lock()
	fake.vanish[a.Ino] = lookupAttempts
	fake.mu.Unlock()
	if _, err := v.LookupChild(ctx, RootIno, "a"); ErrnoOf(err) != syscall.ENOENT {
		t.Fatalf("an inode gone at every attempt: %v, want ENOENT", err)
	}
	if _, err := v.LookupChild(ctx, RootIno, "missing"); ErrnoOf(err) != syscall.ENOENT {
		t.Fatalf("a missing name: %v", err)
	}
}
