package metanode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/nsreplica"
)

func renameReq(parent uint64, from, to string) *metapb.PathRequest {
	return &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_RENAME, ParentIno: parent, Path: []byte(from), NewName: []byte(to),
		RequestId: rand.Uint64() | 1, OpId: rand.Uint64() | 1}
}

// namesAre reports, as of when, unless from (in the root, on slot 1's
// partition) names inode wantFrom and to (slot 0's) names wantTo (0:
// nothing).
func (tp *twoParts) namesAre(t *testing.T, when, from string, wantFrom uint64, to string, wantTo uint64) {
	t.Helper()
	if gotFrom, gotTo := tp.holds(t, 1, from), tp.holds(t, 0, to); gotFrom != wantFrom || gotTo != wantTo {
		t.Errorf("%s: %s holds %d, want %d; %s holds %d, want %d", when, from, gotFrom, wantFrom, to, gotTo, wantTo)
	}
}

// holds returns the inode name names in the root (0: none).
func (tp *twoParts) holds(t *testing.T, slot int, name string) uint64 {
	t.Helper()
	l := tp.name(t, tp.p[slot], &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP, ParentIno: RootIno, Path: []byte(name)})
	switch metapb.Errno(l.Errno) {
	case metapb.OK:
		return l.Dentry.GetIno()
	case metapb.ENOENT:
		return 0
	}
	t.Fatalf("lookup %s: %v", name, l)
	return 0
}

// TestRenameOnServer: a rename within one directory sent to the old name's
// partition is one client request whether the new name routes there or to
// the other partition, moves the inode, replaces a file (dropping its link
// and evicting it on its home), touches the parent once also when
// retried, and leaves what it does not run (a directory) to the client,
// changing nothing.
func TestRenameOnServer(t *testing.T) {
	testRenameOnServer(t, newTwoParts(t))
}

// TestRenameOnServerUnrouted: partitions that have not got the volume's
// routing yet accept every name; a rename still puts the new name where
// the cluster map routes it, where clients look for it.
func TestRenameOnServerUnrouted(t *testing.T) {
	testRenameOnServer(t, newTwoPartsRouted(t, false))
}

func testRenameOnServer(t *testing.T, tp *twoParts) {
	requests := func() float64 { return tp.counter(t, "cairn_meta_client_requests_total") }
	mk := func(slot int, name string) uint64 {
		t.Helper()
		c := tp.name(t, tp.p[slot], createReq(RootIno, name, metapb.FileType_FILE_TYPE_REGULAR))
		if c.Errno != 0 {
			t.Fatalf("create %s: %v", name, c)
		}
		return c.Inode.GetIno()
	}
	rename := func(slot int, req *metapb.PathRequest) *metapb.PathResponse {
		t.Helper()
		before := requests()
		resp := tp.name(t, tp.p[slot], req)
		if n := requests() - before; n != 1 {
			t.Errorf("rename %s -> %s: %v client requests, want 1", req.Path, req.NewName, n)
		}
		return resp
	}

	for _, tc := range []struct {
		name             string
		fromSlot, toSlot int
		replace          bool
	}{
		{"one partition", 1, 1, false},
		{"one partition, replacing", 1, 1, true},
		{"two partitions", 1, 0, false},
		{"two partitions, replacing", 0, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := nameIn("from-"+tc.name, tc.fromSlot), nameIn("to-"+tc.name, tc.toSlot)
			ino := mk(tc.fromSlot, from)
			var old uint64
			if tc.replace {
				old = mk(tc.toSlot, to)
			}
			root0, in0 := tp.inode(t, RootIno), tp.inode(t, ino)
			req := renameReq(RootIno, from, to)
			r := rename(tc.fromSlot, req)
			if r.Errno != 0 || r.Dentry.GetIno() != ino || r.Replaced != old || !r.ParentTouched || !r.LinkDropped {
				t.Fatalf("rename: %v", r)
			}
			if tc.replace && (r.Nlink != 0 || !r.Evicted) {
				t.Errorf("replaced inode: nlink %d, evicted %v; want 0, true", r.Nlink, r.Evicted)
			}
			if got := tp.holds(t, tc.toSlot, to); got != ino {
				t.Errorf("%s holds %d, want %d", to, got, ino)
			}
			if got := tp.holds(t, tc.fromSlot, from); got != 0 {
				t.Errorf("%s still holds %d", from, got)
			}
			root1, in1 := tp.inode(t, RootIno), tp.inode(t, ino)
			if root1.MtimeNs <= root0.MtimeNs || root1.Nlink != root0.Nlink {
				t.Errorf("root: mtime %d -> %d, nlink %d -> %d", root0.MtimeNs, root1.MtimeNs, root0.Nlink, root1.Nlink)
			}
			if in1.CtimeNs <= in0.CtimeNs || in1.Nlink != 1 {
				t.Errorf("moved inode: ctime %d -> %d, nlink %d", in0.CtimeNs, in1.CtimeNs, in1.Nlink)
			}
			if tc.replace {
				if in := tp.inode(t, old); in != nil {
					t.Errorf("replaced inode left: %v", in)
				}
			}
			// A retry of the same request changes nothing more.
			if again := tp.name(t, tp.p[tc.fromSlot], req); again.Errno != 0 || again.Dentry.GetIno() != ino {
				t.Fatalf("retried rename: %v", again)
			}
			if r := tp.inode(t, RootIno); r.MtimeNs != root1.MtimeNs {
				t.Errorf("the retried rename touched the parent again")
			}
			if got := tp.holds(t, tc.toSlot, to); got != ino {
				t.Errorf("after the retry %s holds %d, want %d", to, got, ino)
			}
		})
	}

	t.Run("noreplace", func(t *testing.T) {
		// RENAME_NOREPLACE over a name on the same or the other
		// partition: EEXIST in one request, both names as they were;
		// onto a free name it renames as a plain rename does.
		for _, toSlot := range []int{1, 0} {
			from, to := nameIn(fmt.Sprintf("nf%d", toSlot), 1), nameIn(fmt.Sprintf("nt%d", toSlot), toSlot)
			ino, kept := mk(1, from), mk(toSlot, to)
			req := renameReq(RootIno, from, to)
			req.Op = metapb.PathOp_PATH_OP_RENAME_NOREPLACE
			if r := rename(1, req); metapb.Errno(r.Errno) != metapb.EEXIST {
				t.Fatalf("noreplace over %s (partition slot %d): %v, want EEXIST", to, toSlot, r)
			}
			if tp.holds(t, 1, from) != ino || tp.holds(t, toSlot, to) != kept {
				t.Fatalf("after a refused noreplace: %s holds %d, %s %d; want %d, %d", from, tp.holds(t, 1, from), to, tp.holds(t, toSlot, to), ino, kept)
			}
			free := nameIn(fmt.Sprintf("nn%d", toSlot), toSlot)
			req = renameReq(RootIno, from, free)
			req.Op = metapb.PathOp_PATH_OP_RENAME_NOREPLACE
			if r := rename(1, req); r.Errno != 0 || r.Dentry.GetIno() != ino {
				t.Fatalf("noreplace onto the free name %s: %v", free, r)
			}
			if tp.holds(t, toSlot, free) != ino || tp.holds(t, 1, from) != 0 {
				t.Fatalf("after noreplace onto %s: it holds %d, %s %d", free, tp.holds(t, toSlot, free), from, tp.holds(t, 1, from))
			}
		}
		self := nameIn("nself", 1)
		mk(1, self)
		req := renameReq(RootIno, self, self)
		req.Op = metapb.PathOp_PATH_OP_RENAME_NOREPLACE
		if r := rename(1, req); metapb.Errno(r.Errno) != metapb.EEXIST {
			t.Errorf("noreplace onto itself: %v, want EEXIST", r)
		}
	})

	t.Run("an inode homed elsewhere", func(t *testing.T) {
		// A file renamed before keeps its home: the name's partition
		// runs the rename, the home sets the ctime.
		a, b, c := nameIn("ea", 1), nameIn("eb", 0), nameIn("ec", 0)
		ino := mk(1, a)
		if r := rename(1, renameReq(RootIno, a, b)); r.Errno != 0 {
			t.Fatalf("first rename: %v", r)
		}
		in0 := tp.inode(t, ino)
		over := mk(0, c)
		if r := rename(0, renameReq(RootIno, b, c)); r.Errno != 0 || r.Replaced != over || !r.Evicted {
			t.Fatalf("rename of an inode homed elsewhere, over a file: %v", r)
		}
		if tp.holds(t, 0, c) != ino || tp.holds(t, 0, b) != 0 {
			t.Errorf("after the rename: %s holds %d, %s %d", c, tp.holds(t, 0, c), b, tp.holds(t, 0, b))
		}
		if in1 := tp.inode(t, ino); in1.CtimeNs <= in0.CtimeNs || in1.Nlink != 1 {
			t.Errorf("moved inode: ctime %d -> %d, nlink %d", in0.CtimeNs, in1.CtimeNs, in1.Nlink)
		}
	})

	t.Run("directories", func(t *testing.T) {
		// A directory renamed within its parent, to a name on the other
		// partition and then on its own: one request each; the paths
		// below it resolve through the new name once its namespace locks
		// are lifted, and not through the old one.
		a, b, c := nameIn("da", 1), nameIn("db", 0), nameIn("dc", 0)
		mk := tp.name(t, tp.p[1], createReq(RootIno, a, metapb.FileType_FILE_TYPE_DIRECTORY))
		if mk.Errno != 0 {
			t.Fatalf("mkdir: %v", mk)
		}
		dino := mk.Inode.GetIno()
		child := nameIn("child", 1)
		if r := tp.name(t, tp.p[1], createReq(dino, child, metapb.FileType_FILE_TYPE_REGULAR)); r.Errno != 0 {
			t.Fatalf("create under the directory: %v", r)
		}
		lookupPath := func(path string) metapb.Errno {
			t.Helper()
			r, err := tp.mc.Path(tp.ctx, tp.p[1], &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP, Path: []byte(path)})
			if err != nil {
				t.Fatalf("lookup %s: %v", path, err)
			}
			return metapb.Errno(r.Errno)
		}
		if e := lookupPath("/" + a + "/" + child); e != metapb.OK {
			t.Fatalf("lookup through the directory before the renames: %v", e)
		}
		for _, step := range []struct {
			slot     int
			from, to string
		}{{1, a, b}, {0, b, c}} {
			if r := rename(step.slot, renameReq(RootIno, step.from, step.to)); r.Errno != 0 || r.Dentry.GetIno() != dino {
				t.Fatalf("rename of a directory %s -> %s: %v", step.from, step.to, r)
			}
		}
		if tp.holds(t, 0, c) != dino || tp.holds(t, 1, a) != 0 || tp.holds(t, 0, b) != 0 {
			t.Fatalf("after the renames: %s holds %d, %s %d, %s %d", c, tp.holds(t, 0, c), a, tp.holds(t, 1, a), b, tp.holds(t, 0, b))
		}
		if e := lookupPath("/" + c + "/" + child); e != metapb.OK {
			t.Errorf("lookup through the new name: %v", e)
		}
		if e := lookupPath("/" + a + "/" + child); e != metapb.ENOENT {
			t.Errorf("lookup through the old name: %v, want ENOENT", e)
		}
		if r := tp.inode(t, RootIno); r.GetNlink() != mkNlink(t, tp) {
			t.Errorf("root nlink %d after renames within it", r.GetNlink())
		}

		// An attempt under an earlier leader died holding its lock on the
		// other partition: the retry takes it over, renames, and lifts it.
		e := nameIn("dd", 0)
		req := renameReq(RootIno, c, e)
		st, err := tp.c.leaderOf(t, 1).env.Raft.Status(multiraft.GroupID(1))
		if err != nil || st.Term == 0 {
			t.Fatalf("status of partition 1: %v %v", st, err)
		}
		dead := metapartition.TakeoverToken(metapb.FollowUpID(req.RequestId, metapb.FollowUpFenceToken), st.Term-1)
		tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: dino, Token: dead, Lock: true, Takeover: true}}})
		if r := rename(0, req); r.Errno != 0 {
			t.Fatalf("rename after a dead attempt's lock: %v", r)
		}
		if e := lookupPath("/" + e + "/" + child); e != metapb.OK {
			t.Errorf("lookup through the name after the takeover: %v", e)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		f, dir, dir2, missing := nameIn("rf", 1), nameIn("rd", 0), nameIn("re", 1), nameIn("rm", 1)
		ino := mk(1, f)
		for _, d := range []string{dir, dir2} {
			if c := tp.name(t, tp.p[map[string]int{dir: 0, dir2: 1}[d]], createReq(RootIno, d, metapb.FileType_FILE_TYPE_DIRECTORY)); c.Errno != 0 {
				t.Fatalf("mkdir: %v", c)
			}
		}
		for _, c := range []struct {
			what string
			slot int
			req  *metapb.PathRequest
			want metapb.Errno
		}{
			{"a file over a directory", 1, renameReq(RootIno, f, dir), metapb.EISDIR},
			{"a directory over a file", 0, renameReq(RootIno, dir, f), metapb.ENOTDIR},
			{"a directory over a directory (left to the client)", 0, renameReq(RootIno, dir, dir2), metapb.EXDEV},
			{"a missing name", 1, renameReq(RootIno, missing, nameIn("rm2", 0)), metapb.ENOENT},
			{"an invalid new name", 1, renameReq(RootIno, f, "a/b"), metapb.EINVAL},
		} {
			if r := rename(c.slot, c.req); metapb.Errno(r.Errno) != c.want {
				t.Errorf("rename of %s: %v, want %v", c.what, r, c.want)
			}
		}
		if tp.holds(t, 1, f) != ino || tp.holds(t, 0, dir) == 0 {
			t.Error("a refused rename changed a name")
		}
	})

	t.Run("an earlier attempt's placement", func(t *testing.T) {
		// An attempt of this request that placed the new name and died:
		// the placement's request id is the rename's own, so the retry
		// is answered the placement and goes on.
		from, to := nameIn("pf", 1), nameIn("pt", 0)
		ino := mk(1, from)
		req := renameReq(RootIno, from, to)
		placeAs(t, tp, tp.p[0], to, ino, placementID(req.RequestId))
		if r := rename(1, req); r.Errno != 0 {
			t.Fatalf("rename after its own placement: %v", r)
		}
		if tp.holds(t, 0, to) != ino || tp.holds(t, 1, from) != 0 {
			t.Errorf("after the rename: %s holds %d, %s %d", to, tp.holds(t, 0, to), from, tp.holds(t, 1, from))
		}
		// Another request's placement (a rename of the same file under
		// way, or one that died): not adopted, left to the client's
		// protocol, changing nothing.
		from, to = nameIn("of", 1), nameIn("ot", 0)
		ino = mk(1, from)
		place(t, tp, tp.p[0], to, ino)
		if r := rename(1, renameReq(RootIno, from, to)); metapb.Errno(r.Errno) != metapb.EXDEV {
			t.Fatalf("rename after another's placement: %v, want EXDEV", r)
		}
		if tp.holds(t, 0, to) != ino || tp.holds(t, 1, from) != ino {
			t.Errorf("a rename left to the client changed a name")
		}
		// Two links: the new name may be a hard link, and rename(2) of
		// two names of one inode does nothing.
		from, to = nameIn("hf", 1), nameIn("ht", 0)
		ino = mk(1, from)
		tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: 1}}})
		place(t, tp, tp.p[0], to, ino)
		if r := rename(1, renameReq(RootIno, from, to)); r.Errno != 0 {
			t.Fatalf("rename onto a hard link: %v", r)
		}
		if tp.holds(t, 0, to) != ino || tp.holds(t, 1, from) != ino {
			t.Errorf("rename onto a hard link changed a name")
		}
	})

	t.Run("a refused Txn", func(t *testing.T) {
		// The old name changed after the new one was placed: the request
		// id is claimed, the placement taken back, and a retry of the
		// request is left to the client.
		from, to := nameIn("cf", 1), nameIn("ct", 0)
		ino := mk(1, from)
		req, r := placePending(t, tp, from, to, ino)
		h := tp.c.leaderOf(t, 2)
		s := &service{h: h}
		p := h.parts[2]
		resp, again := s.renameRefused(tp.ctx, p, req, r, pathErr(metapb.ESTALE, req.Path, "changed"))
		if again || metapb.Errno(resp.Errno) != metapb.EXDEV {
			t.Fatalf("refused rename: %v, again %v; want EXDEV", resp, again)
		}
		if tp.holds(t, 0, to) != 0 || tp.holds(t, 1, from) != ino {
			t.Errorf("after the refusal: %s holds %d, %s %d", to, tp.holds(t, 0, to), from, tp.holds(t, 1, from))
		}
		if retry := tp.name(t, tp.p[1], req); metapb.Errno(retry.Errno) != metapb.EXDEV {
			t.Errorf("retry of a refused rename: %v, want EXDEV", retry)
		}
		if tp.holds(t, 0, to) != 0 || tp.holds(t, 1, from) != ino {
			t.Errorf("the retry of a refused rename changed a name")
		}
	})

	t.Run("a placement whose partition did not answer", func(t *testing.T) {
		// Whether the new name was placed is not known: the rename is not
		// left to the client's protocol (EXDEV), which would leave a
		// placed name to the resolver, which then completes a rename the
		// client was told had failed. The client retries the request,
		// whose attempt places the name (or finds it placed) and goes on.
		from, to := nameIn("uf", 1), nameIn("ut", 0)
		ino := mk(1, from)
		h := tp.c.leaderOf(t, 2)
		s := &service{h: h}
		req := renameReq(RootIno, from, to)
		r := &renamePlace{part: 1, dir: nsreplica.Entry{Ino: RootIno}, name: to, from: from, src: &metapb.Dentry{Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR}}
		gone, cancel := context.WithCancel(tp.ctx)
		cancel()
		if resp, err := s.placeNew(gone, h.parts[2], req, r); resp != nil || status.Code(err) != codes.Unavailable {
			t.Fatalf("placement without an answer: %v, %v; want an Unavailable error", resp, err)
		}
		if resp, err := s.placeNew(tp.ctx, h.parts[2], req, r); resp != nil || err != nil {
			t.Fatalf("the retry's placement: %v, %v", resp, err)
		}
		look, err := tp.mc.FetchPending(tp.ctx, tp.p[0], RootIno, to)
		if err != nil || look.GetErrno() != 0 || look.GetDentry().GetIno() != ino || look.GetDentry().GetPending().GetId() != placementID(req.RequestId) {
			t.Errorf("the retry did not place %s: %v %v", to, look, err)
		}
	})

	t.Run("a retry whose old name another operation took", func(t *testing.T) {
		// An attempt placed the new name (over a file, or where nothing
		// was) and was cut off before its commit; another operation then
		// removed the old name. The retry answers ENOENT and takes the
		// placement back: the replaced file gets its name again. Left
		// behind, the resolver settled it, and the new name named the
		// renamed file beside its other name (the simulation, seed 162).
		for _, over := range []bool{true, false} {
			from, to := nameIn(fmt.Sprintf("tf-%v", over), 1), nameIn(fmt.Sprintf("tt-%v", over), 0)
			ino := mk(1, from)
			var replaced uint64
			req := renameReq(RootIno, from, to)
			pend := &metapb.PendingRename{Id: placementID(req.RequestId), FromParent: RootIno, FromName: []byte(from)}
			placement := &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
				Parent: RootIno, Name: []byte(to), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR, Pending: pend}}}
			if over {
				replaced = mk(0, to)
				placement = &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{
					Parent: RootIno, Name: []byte(to), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR, ExpectIno: replaced, Pending: pend}}}
			}
			tp.txn(t, tp.p[0], placement)
			tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: RootIno, Name: []byte(from), ExpectIno: ino}}})
			if r := tp.name(t, tp.p[1], req); metapb.Errno(r.Errno) != metapb.ENOENT {
				t.Fatalf("over a file %v: the retry: %v, want ENOENT", over, r)
			}
			if got := tp.holds(t, 0, to); got != replaced {
				t.Errorf("over a file %v: after the retry %s holds %d, want %d", over, to, got, replaced)
			}
			if r := tp.name(t, tp.p[1], req); metapb.Errno(r.Errno) == 0 {
				t.Errorf("over a file %v: a later retry succeeded: %v", over, r)
			}
		}
	})

	t.Run("a retry of a placement over a name whose answer was lost", func(t *testing.T) {
		// An earlier attempt found the new name taken and replaced it
		// (pending, under a request id of its own), and its answer was
		// lost. The retry's create finds the name pending (EMOVING): it
		// must recognise its own placement and go on, knowing from the
		// mark what it replaced, not hand the rename to the client, which
		// left the placement to the resolver, which completed the rename
		// after the client had been told it failed (the simulation, seeds
		// 1011 and 5178).
		from, to := nameIn("lf", 1), nameIn("lt", 0)
		ino, old := mk(1, from), mk(0, to)
		req := renameReq(RootIno, from, to)
		pend := &metapb.PendingRename{Id: placementID(req.RequestId), FromParent: RootIno, FromName: []byte(from)}
		tp.txn(t, tp.p[0], &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{
			Parent: RootIno, Name: []byte(to), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR, ExpectIno: old, Pending: pend}}})
		h := tp.c.leaderOf(t, 2)
		s := &service{h: h}
		r := &renamePlace{part: 1, dir: nsreplica.Entry{Ino: RootIno}, name: to, from: from, src: &metapb.Dentry{Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR}}
		if resp, err := s.placeNew(tp.ctx, h.parts[2], req, r); resp != nil || err != nil {
			t.Fatalf("the retry's placement: %v, %v; want its own placement found", resp, err)
		}
		if r.dst.GetIno() != old {
			t.Errorf("the retry's placement replaced %v, want inode %d", r.dst, old)
		}
		if resp := tp.name(t, tp.p[1], req); resp.Errno != 0 || resp.GetReplaced() != old {
			t.Fatalf("the retried rename: %v", resp)
		}
		tp.namesAre(t, "after the retried rename", from, 0, to, ino)
	})

	t.Run("a refused Txn whose new name the resolver rolled forward", func(t *testing.T) {
		// The attempt stalled past pendingStale: the resolver took its new
		// name over and committed the rename itself, which is what refused
		// the attempt's Txn. The rename happened: the attempt and every
		// retry answer success, not EXDEV, which handed the client's
		// protocol a rename it then answered ENOENT (the simulation, seed
		// 2859).
		from, to := nameIn("wf", 1), nameIn("wt", 0)
		ino := mk(1, from)
		req, r := placePending(t, tp, from, to, ino)
		h1 := tp.c.leaderOf(t, 1)
		look, err := tp.mc.FetchPending(tp.ctx, tp.p[0], RootIno, to)
		if err != nil {
			t.Fatal(err)
		}
		if err := (&service{h: h1}).resolveName(tp.ctx, ledPartition{part: h1.parts[1], volume: 7}, look.GetDentry()); err != nil {
			t.Fatalf("resolve: %v", err)
		}
		h := tp.c.leaderOf(t, 2)
		s := &service{h: h}
		if resp, again := s.renameRefused(tp.ctx, h.parts[2], req, r, pathErr(metapb.ENOENT, req.Path, "gone")); !again {
			t.Errorf("refused after a roll-forward: %v, want planned again", resp)
		}
		if resp := tp.name(t, tp.p[1], req); resp.Errno != 0 {
			t.Errorf("retry of a rename the resolver rolled forward: %v, want success", resp)
		}
		tp.namesAre(t, "after the roll-forward", from, 0, to, ino)
	})

	t.Run("a refused Txn whose client stopped waiting", func(t *testing.T) {
		// The clean-up is the node's job even when the request's context
		// ended (the client's attempt timed out): a placement left behind
		// is settled by the resolver later, a name the failed rename never
		// made (found by the simulation, seed 261).
		from, to := nameIn("gf", 1), nameIn("gt", 0)
		ino := mk(1, from)
		req, r := placePending(t, tp, from, to, ino)
		h := tp.c.leaderOf(t, 2)
		s := &service{h: h}
		gone, cancel := context.WithCancel(tp.ctx)
		cancel()
		if _, again := s.renameRefused(gone, h.parts[2], req, r, pathErr(metapb.ESTALE, req.Path, "changed")); again {
			t.Fatal("refused rename: again")
		}
		if tp.holds(t, 0, to) != 0 || tp.holds(t, 1, from) != ino {
			t.Errorf("after the refusal: %s holds %d, %s %d", to, tp.holds(t, 0, to), from, tp.holds(t, 1, from))
		}
	})
}

// placePending places the new name to (in the root, on slot 0's
// partition) of a rename of from (slot 1's) to to, pending, as the rename's
// first step does, and returns the rename's request and placement.
func placePending(t *testing.T, tp *twoParts, from, to string, ino uint64) (*metapb.PathRequest, *renamePlace) {
	t.Helper()
	req := renameReq(RootIno, from, to)
	r := &renamePlace{part: 1, dir: nsreplica.Entry{Ino: RootIno}, name: to, from: from, src: &metapb.Dentry{Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR}}
	r.pend = r.pending(req)
	res, err := tp.mc.Txn(tp.ctx, tp.p[0], &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
		Parent: RootIno, Name: []byte(to), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR, Pending: r.pend}}}}})
	if err != nil || res.Errno != 0 {
		t.Fatalf("place %s pending: %v %v", to, err, res)
	}
	return req, r
}

// place gives name (in the root) on partition p to inode ino, as a
// rename's placement does.
func place(t *testing.T, tp *twoParts, p *pb.Partition, name string, ino uint64) {
	t.Helper()
	placeAs(t, tp, p, name, ino, rand.Uint64()>>1|1)
}

// placeAs is place with the Txn's request id.
func placeAs(t *testing.T, tp *twoParts, p *pb.Partition, name string, ino, requestID uint64) {
	t.Helper()
	res, err := tp.mc.Txn(tp.ctx, p, &metapb.Txn{RequestId: requestID, Ops: []*metapb.Op{{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
		Parent: RootIno, Name: []byte(name), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR}}}}})
	if err != nil || res.Errno != 0 {
		t.Fatalf("place %s: %v %v", name, err, res)
	}
}

// mkNlink is the root's link count as its directories say it should be:
// 2 and one per subdirectory, counted by listing both partitions.
func mkNlink(t *testing.T, tp *twoParts) uint32 {
	t.Helper()
	n := uint32(2)
	for _, p := range []*pb.Partition{tp.p[0], tp.p[1]} {
		r, err := tp.mc.ReadDir(tp.ctx, p, RootIno, "", 1000, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range r.GetDentries() {
			if d.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY {
				n++
			}
		}
	}
	return n
}

// TestConcurrentRenamesOfOneFile: two renames of the same file to the same
// new name on another partition, sent at once, as two clients do. One
// succeeds; the other must not take back (or adopt) the placement of the
// one that succeeded: the file keeps its new name, and the old one is gone.
func TestConcurrentRenamesOfOneFile(t *testing.T) {
	tp := newTwoParts(t)
	for round := range 40 {
		from, to := nameIn(fmt.Sprintf("from-%d", round), 1), nameIn(fmt.Sprintf("to-%d", round), 0)
		c := tp.name(t, tp.p[1], createReq(RootIno, from, metapb.FileType_FILE_TYPE_REGULAR))
		if c.Errno != 0 {
			t.Fatalf("create %s: %v", from, c)
		}
		ino := c.Inode.GetIno()
		var resps [2]*metapb.PathResponse
		var errs [2]error
		var wg sync.WaitGroup
		for i := range resps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resps[i], errs[i] = tp.mc.Path(tp.ctx, tp.p[1], renameReq(RootIno, from, to))
			}()
		}
		wg.Wait()
		ok := 0
		for i, r := range resps {
			if errs[i] != nil {
				t.Fatalf("round %d: rename %d: %v", round, i, errs[i])
			}
			if r.Errno == 0 {
				ok++
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of two renames of one name succeeded: %v, %v", round, ok, resps[0], resps[1])
		}
		if got := tp.holds(t, 0, to); got != ino {
			t.Fatalf("round %d: after %d acknowledged renames (%v, %v), %s holds %d, want %d", round, ok, resps[0], resps[1], to, got, ino)
		}
		if got := tp.holds(t, 1, from); got != 0 {
			t.Fatalf("round %d: %s still holds %d", round, from, got)
		}
	}
}

// TestRenameSeesAnotherUnderWay: a rename whose old and new names, on one
// partition, both name one file with one link finds another rename of it
// between its two steps (a client's protocol places the new name, then
// deletes the old): EXDEV, so that the client waits for it, not "nothing
// to do", which let two renames of one name both succeed. Two names of a
// file with two links are hard links: nothing to do.
func TestRenameSeesAnotherUnderWay(t *testing.T) {
	tp := newTwoParts(t)
	for _, links := range []int32{0, 1} {
		from, to := nameIn(fmt.Sprintf("from-%d", links), 1), nameIn(fmt.Sprintf("to-%d", links), 1)
		c := tp.name(t, tp.p[1], createReq(RootIno, from, metapb.FileType_FILE_TYPE_REGULAR))
		if c.Errno != 0 {
			t.Fatalf("create %s: %v", from, c)
		}
		ino := c.Inode.GetIno()
		if links > 0 {
			tp.txn(t, tp.home(ino), &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: links}}})
		}
		tp.txn(t, tp.p[1], &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
			Parent: RootIno, Name: []byte(to), Ino: ino, Type: metapb.FileType_FILE_TYPE_REGULAR}}})
		r := tp.name(t, tp.p[1], renameReq(RootIno, from, to))
		want := metapb.EXDEV
		if links > 0 {
			want = metapb.OK
		}
		if metapb.Errno(r.Errno) != want {
			t.Errorf("%d extra links: rename %s -> %s = %v, want %v", links, from, to, r, want)
		}
		if tp.holds(t, 1, from) != ino || tp.holds(t, 1, to) != ino {
			t.Errorf("%d extra links: the rename changed the names", links)
		}
	}
}
