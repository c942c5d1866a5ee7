package metanode

import (
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// TestRmdirTakesOverDeadAttempt: an rmdir whose earlier attempt (under an
// earlier leader) fenced the directory on the other partition and died
// takes that fence over and removes the directory in one request, where
// a fence of another request still makes it EBUSY; the dead attempt's
// lift afterwards changes nothing.
func TestRmdirTakesOverDeadAttempt(t *testing.T) {
	tp := newTwoParts(t)
	mkdir := func(name string) uint64 {
		t.Helper()
		c := tp.name(t, tp.p[1], createReq(RootIno, name, metapb.FileType_FILE_TYPE_DIRECTORY))
		if c.Errno != 0 {
			t.Fatalf("mkdir %s: %v", name, c)
		}
		return c.Inode.GetIno()
	}
	rmdirReq := func(name string) *metapb.PathRequest {
		return &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_RMDIR, ParentIno: RootIno, Path: []byte(name),
			RequestId: rand.Uint64() | 1, OpId: rand.Uint64() | 1}
	}
	st, err := tp.c.leaderOf(t, 2).env.Raft.Status(multiraft.GroupID(2))
	if err != nil || st.Term == 0 {
		t.Fatalf("status of partition 2: %v %v", st, err)
	}
	dead := func(req *metapb.PathRequest) uint64 {
		return metapartition.TakeoverToken(metapb.FollowUpID(req.RequestId, metapb.FollowUpFenceToken), st.Term-1)
	}
	fenceOn := func(dir, token uint64, takeover bool) {
		t.Helper()
		tp.txn(t, tp.p[0], &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: dir, Token: token, Takeover: takeover}}})
	}

	// The directory is homed with its name on partition 2; the dead
	// attempt fenced it on partition 1.
	a := nameIn("td", 1)
	dir := mkdir(a)
	req := rmdirReq(a)
	fenceOn(dir, dead(req), true)
	if r := tp.name(t, tp.p[1], req); r.Errno != 0 {
		t.Fatalf("rmdir after a dead attempt: %v", r)
	}
	if tp.holds(t, 1, a) != 0 {
		t.Fatalf("%s is still there", a)
	}
	res, err := tp.mc.Txn(tp.ctx, tp.p[0], &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: dir, Token: dead(req)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the dead attempt's late lift: errno %v", metapb.Errno(res.Errno))

	// A fence of another request: EBUSY, the directory stays.
	b := nameIn("tb", 1)
	dir = mkdir(b)
	other := rmdirReq(b)
	fenceOn(dir, dead(other), true)
	if r := tp.name(t, tp.p[1], rmdirReq(b)); metapb.Errno(r.Errno) != metapb.EBUSY {
		t.Fatalf("rmdir of a directory another request fenced: %v, want EBUSY", r)
	}
	if tp.holds(t, 1, b) == 0 {
		t.Fatalf("%s was removed under another request's fence", b)
	}
}
