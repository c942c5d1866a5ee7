package metanode

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// TestResolvePending: the resolver of a stale pending name rolls its rename
// forward when the old name still names the file (the old name is deleted,
// the new one settled) and settles it when the old name is gone (the
// commit applied); either way it takes the mark over first, so that the
// rename's own undo is refused afterwards.
func TestResolvePending(t *testing.T) {
	tp := newTwoParts(t)
	h := tp.c.leaderOf(t, 1)
	s := &service{h: h}
	lp := ledPartition{part: h.parts[1], volume: 7}
	place := func(to, from string, ino, id uint64) {
		t.Helper()
		res, err := tp.mc.Txn(tp.ctx, tp.p[0], &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
			Parent: RootIno, Name: []byte(to), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR,
			Pending: &metapb.PendingRename{Id: id, FromParent: RootIno, FromName: []byte(from)}}}}}})
		if err != nil || res.Errno != 0 {
			t.Fatalf("place %s pending: %v %v", to, err, res)
		}
	}
	pendingOf := func(name string) *metapb.Dentry {
		t.Helper()
		l, err := tp.mc.FetchPending(tp.ctx, tp.p[0], RootIno, name)
		if err != nil {
			t.Fatal(err)
		}
		return l.GetDentry()
	}
	undo := func(name string, ino, id uint64) metapb.Errno {
		t.Helper()
		res, err := tp.mc.Txn(tp.ctx, tp.p[0], &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
			Parent: RootIno, Name: []byte(name), ExpectIno: ino, Undo: id}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return metapb.Errno(res.Errno)
	}

	// Not committed: rolled forward.
	from, to := nameIn("rf", 1), nameIn("rt", 0)
	c := tp.name(t, tp.p[1], createReq(RootIno, from, metapb.FileType_FILE_TYPE_REGULAR))
	if c.Errno != 0 {
		t.Fatalf("create %s: %v", from, c)
	}
	ino := c.Inode.GetIno()
	place(to, from, ino, 41)
	if err := s.resolveName(tp.ctx, lp, pendingOf(to)); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if tp.holds(t, 1, from) != 0 || tp.holds(t, 0, to) != ino || pendingOf(to).GetPending() != nil {
		t.Errorf("rolled forward: %s holds %d, %s %d (%v)", from, tp.holds(t, 1, from), to, tp.holds(t, 0, to), pendingOf(to))
	}
	if e := undo(to, ino, 41); e != metapb.ESTALE {
		t.Errorf("the rename's undo after the resolver: %v, want ESTALE", e)
	}

	// Committed (the old name is gone): settled.
	to2 := nameIn("rs", 0)
	place(to2, nameIn("gone", 1), ino+1000, 42)
	if err := s.resolveName(tp.ctx, lp, pendingOf(to2)); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if d := pendingOf(to2); d.GetIno() != ino+1000 || d.GetPending() != nil {
		t.Errorf("settled: %v", d)
	}

	// A resolver that stopped after taking the name over is gone on with.
	from3, to3 := nameIn("tf", 1), nameIn("tt", 0)
	c = tp.name(t, tp.p[1], createReq(RootIno, from3, metapb.FileType_FILE_TYPE_REGULAR))
	ino3 := c.Inode.GetIno()
	place(to3, from3, ino3, 43)
	if err := s.settleHere(tp.ctx, lp, pendingOf(to3), 43, resolverID(43)); err != nil {
		t.Fatal(err)
	}
	if e := undo(to3, ino3, 43); e != metapb.ESTALE {
		t.Errorf("the rename's undo after a take-over: %v, want ESTALE", e)
	}
	if err := s.resolveName(tp.ctx, lp, pendingOf(to3)); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if tp.holds(t, 1, from3) != 0 || tp.holds(t, 0, to3) != ino3 {
		t.Errorf("after a take-over: %s holds %d, %s %d", from3, tp.holds(t, 1, from3), to3, tp.holds(t, 0, to3))
	}
}

// TestRetryOfRolledForwardRename: a rename whose client lost the answer
// while the resolver rolled it forward retries with its request id, and
// must be answered success, not ENOENT for its old name (which the
// resolver deleted). A simulated cluster found this: the old name of a
// rename that reported ENOENT was gone afterwards (test/sim, seed 261).
func TestRetryOfRolledForwardRename(t *testing.T) {
	tp := newTwoParts(t)
	h := tp.c.leaderOf(t, 1)
	s := &service{h: h}
	lp := ledPartition{part: h.parts[1], volume: 7}
	from, to := nameIn("lf", 1), nameIn("lt", 0)
	c := tp.name(t, tp.p[1], createReq(RootIno, from, metapb.FileType_FILE_TYPE_REGULAR))
	if c.Errno != 0 {
		t.Fatalf("create %s: %v", from, c)
	}
	ino := c.Inode.GetIno()
	// The rename placed the new name and died before its commit, as its
	// client's first attempt would leave it.
	req, _ := placePending(t, tp, from, to, ino)
	l, err := tp.mc.FetchPending(tp.ctx, tp.p[0], RootIno, to)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.resolveName(tp.ctx, lp, l.GetDentry()); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	// The client's retry, to the old name's partition.
	r := tp.name(t, tp.p[1], req)
	if r.Errno != 0 {
		t.Fatalf("retry of a rename the resolver rolled forward: %v %s", metapb.Errno(r.Errno), r.Message)
	}
	if tp.holds(t, 1, from) != 0 || tp.holds(t, 0, to) != ino {
		t.Errorf("after the retry: %s holds %d, %s %d", from, tp.holds(t, 1, from), to, tp.holds(t, 0, to))
	}
}

// TestReadDirWaitsForPendingNames: a listing that meets a rename's new
// name not settled yet is answered EMOVING (before the rename's commit the
// name must not show, after it must, and the partition cannot tell which);
// once settled, the name is listed.
func TestReadDirWaitsForPendingNames(t *testing.T) {
	tp := newTwoParts(t)
	from, to := nameIn("lf", 1), nameIn("lt", 0)
	c := tp.name(t, tp.p[1], createReq(RootIno, from, metapb.FileType_FILE_TYPE_REGULAR))
	if c.Errno != 0 {
		t.Fatalf("create %s: %v", from, c)
	}
	ino := c.Inode.GetIno()
	txn := func(op *metapb.Op) {
		t.Helper()
		res, err := tp.mc.Txn(tp.ctx, tp.p[0], &metapb.Txn{Ops: []*metapb.Op{op}})
		if err != nil || res.Errno != 0 {
			t.Fatalf("%v: %v %v", op, err, res)
		}
	}
	txn(&metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: RootIno, Name: []byte(to), Ino: ino,
		Type: metapb.FileType_FILE_TYPE_REGULAR, Pending: &metapb.PendingRename{Id: 77, FromParent: RootIno, FromName: []byte(from)}}}})
	r, err := tp.mc.ReadDir(tp.ctx, tp.p[0], RootIno, "", 100, true)
	if err != nil || metapb.Errno(r.Errno) != metapb.EMOVING || len(r.Dentries) != 0 {
		t.Fatalf("listing with %s pending: %v, errno %v, %d names; want EMOVING and none", to, err, metapb.Errno(r.GetErrno()), len(r.GetDentries()))
	}
	txn(&metapb.Op{Op: &metapb.Op_SettleDentry{SettleDentry: &metapb.SettleDentry{Parent: RootIno, Name: []byte(to), Ino: ino, Id: 77}}})
	r, err = tp.mc.ReadDir(tp.ctx, tp.p[0], RootIno, "", 100, true)
	if err != nil || r.Errno != 0 {
		t.Fatalf("listing once settled: %v %v", err, r)
	}
	listed := false
	for _, d := range r.Dentries {
		listed = listed || string(d.Name) == to
	}
	if !listed {
		t.Fatalf("%s not listed once settled: %v", to, r.Dentries)
	}
}
