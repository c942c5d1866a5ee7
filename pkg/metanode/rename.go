package metanode

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/clustermap"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/nsreplica"
	"github.com/cairnfs/cairn/pkg/perm"
)

// rename within one directory in one request (PATH_OP_RENAME; FalconFS:
// the client sends one request and the servers do the rest). The
// partition the old name routes to runs the order the client's protocol
// keeps (client.Rename): the new name first, then the old name's delete,
// so that a crash in between leaves one name too many, never none.
//
//   - Both names here: one Txn deletes the old name, creates or replaces
//     the new one and, for what is homed here, sets the moved inode's
//     ctime, drops the replaced inode's link and touches the parent.
//   - The new name on another partition: a follow-up places it there
//     (CreateDentry; a name there is looked up and replaced if it is not a
//     directory), then this partition's Txn deletes the old name. If that
//     Txn is refused (the old name changed meanwhile), the request id is
//     first claimed here by an empty Txn, so that no retry of the request
//     can delete the old name later, and the placement is taken back; the
//     client then runs its own protocol (EXDEV).
//
// Afterwards what is homed elsewhere follows as an unlink's steps do
// (followup.go): the parent's TouchDir, the replaced inode's Link -1 (with
// its Evict at 0 links unless the client has the file open), and the
// moved inode's ctime.
//
// A directory's move must reach the namespace replicas first: it is
// locked on every partition before the steps above (renameLock) and
// unlocked after. A directory over a directory (which must be empty: the
// client's protocol fences it), a sticky directory whose check needs an
// owner homed elsewhere, or a new name another operation is moving or
// fencing are answered EXDEV, changing nothing, and the client runs its
// own protocol.
//
// A placement whose request is retried: the placement's own request id
// comes from the rename's (placementID), so a retry (another attempt, maybe
// by a later leader) is answered the earlier attempt's result and goes on
// with it. A new name that already names the moved file under another
// request's placement is not adopted: with one link that is another rename
// of the same file between its placement and its Txn (or one that died
// there), and going on with it would let whichever Txn loses take back
// the placement the winner's acknowledged rename left as the file's only
// name (a lab run found exactly that). It is answered EXDEV, and the
// client's protocol waits for the other rename. With more links it may
// be a hard link, and rename(2) of two names of one inode does nothing;
// a directory never has two names, and its renames hold its locks. A
// crash after the Txn and before the replaced inode's Link -1 leaves that
// inode one link too many, without a name (fsck reports it), as a client
// that dies at that point does.

// isRename reports whether op is a rename run on the server, with or
// without RENAME_NOREPLACE.
func isRename(op metapb.PathOp) bool {
	return op == metapb.PathOp_PATH_OP_RENAME || op == metapb.PathOp_PATH_OP_RENAME_NOREPLACE
}

// renamePlace is the step of a rename plan that runs before its Txn when
// the new name routes to another partition: placing the new name there.
type renamePlace struct {
	part uint64          // the new name's partition
	dir  nsreplica.Entry // the directory of both names
	cred perm.Cred       // the caller, for a replaced name's sticky check
	name string          // the new name
	from string          // the old name
	// noreplace: a new name that exists ends the rename with EEXIST
	// (RENAME_NOREPLACE) instead of being replaced.
	noreplace bool
	src       *metapb.Dentry // what the old name holds
	nlink     uint32         // src's links; 0: not known here (homed elsewhere)
	// dst is what the new name held before (nil: nothing), known once
	// placed.
	dst *metapb.Dentry
	// keep: the client has dst open, so it is not evicted here.
	keep bool
	// pend is the mark of the placement, once placed (pending).
	pend *metapb.PendingRename
	same *metapb.PathResponse // the answer when both names hold one inode
}

// stickyCheck applies directory dir's sticky rule to cred removing or
// replacing a name whose inode is in (nil: homed on another partition):
// OK, EPERM, or EXDEV when the owner it needs is not known here.
func stickyCheck(dir nsreplica.Entry, cred perm.Cred, in *metapb.Inode) metapb.Errno {
	switch {
	case dir.Mode&syscall.S_ISVTX == 0:
		return metapb.OK
	case in == nil:
		return metapb.EXDEV
	case !perm.MayDelete(cred, dir.Mode, dir.Uid, in.GetUid()):
		return metapb.EPERM
	}
	return metapb.OK
}

// planRename is the rename step with the parent resolved here.
func (s *service) planRename(p *partition, mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, name string, cred perm.Cred) pathPlan {
	newName := string(req.NewName)
	if e := nameErrno(newName); e != metapb.OK {
		return pathPlan{resp: pathErr(e, req.NewName, "rename: not a valid new name")}
	}
	res, answered := mp.Answered(req.RequestId)
	if req.RequestId != 0 && (!answered || len(res.GetResults()) == 0) {
		// A resolver may have committed this rename while its attempts
		// were cut off (resolve.go): the commit is its answer, or the
		// retry would find its old name gone and answer ENOENT. Also
		// when an attempt claimed the request id after the resolver had
		// taken its new name over (renameRefused): the rename happened.
		if rf, ok := mp.Answered(rolledForwardID(placementID(req.RequestId))); ok && rf.GetErrno() == 0 {
			res, answered = rf, true
		}
	}
	if answered {
		return s.renameAnswered(p, mp, req, base, dir, newName, res)
	}
	exdev := func(format string, args ...any) pathPlan {
		r := pathErr(metapb.EXDEV, req.Path, format, args...)
		r.Parent = dir.Ino
		return pathPlan{resp: r}
	}
	src, in, e := mp.Lookup(dir.Ino, name)
	switch {
	case e == metapb.ENOENT && req.RequestId != 0:
		r := pathErr(e, req.Path, "rename")
		r.Parent = dir.Ino
		if owner, routed := mp.Route(dir.Ino, newName); !routed || owner != p.id {
			// An earlier attempt may have placed the new name and been
			// cut off before its commit, while another operation took
			// the old name: that placement is taken back first.
			if !routed {
				owner = 0
			}
			return pathPlan{resp: r, takeBack: &takeBack{part: owner, dir: dir.Ino, name: newName, id: placementID(req.RequestId)}}
		}
		return pathPlan{resp: r}
	case e != metapb.OK:
		r := pathErr(e, req.Path, "rename")
		r.Parent = dir.Ino
		return pathPlan{resp: r}
	}
	switch stickyCheck(dir, cred, in) {
	case metapb.EXDEV:
		return exdev("rename: sticky directory, inode homed elsewhere")
	case metapb.EPERM:
		return pathPlan{resp: pathErr(metapb.EPERM, req.Path, "sticky directory")}
	}
	moved := &metapb.Dentry{Parent: dir.Ino, Name: req.NewName, Ino: src.GetIno(), Type: src.GetType()}
	isDir := src.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY
	var lock *renameLock
	if isDir {
		lock = &renameLock{dir: src.GetIno()}
	}
	noreplace := req.Op == metapb.PathOp_PATH_OP_RENAME_NOREPLACE
	switch {
	case newName == name && noreplace:
		return pathPlan{resp: pathErr(metapb.EEXIST, req.NewName, "rename: the new name exists")}
	case newName == name:
		base.Dentry, base.ParentTouched = moved, true
		return pathPlan{resp: base} // rename(2) onto itself does nothing
	}
	del := &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
		Parent: dir.Ino, Name: []byte(name), ExpectIno: src.GetIno(), ExpectType: src.GetType()}}}
	follow := &followUp{name: newName, parent: dir.Ino}
	var ctime []*metapb.Op // the moved inode's ctime: in the Txn when homed here
	if in != nil {
		ctime = []*metapb.Op{{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: src.GetIno()}}}} // delta 0: ctime = now
	} else {
		follow.ctimeIno = src.GetIno()
	}
	var touch *metapb.Op
	if t := (&metapb.TouchDir{Ino: dir.Ino, OpId: req.OpId}); mp.Holds(dir.Ino) {
		touch = &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: t}}
	} else {
		follow.touch, follow.parallel = t, true
	}
	owner, routed := mp.Route(dir.Ino, newName)
	if !routed || owner != p.id {
		// The new name lives on another partition: placed there first
		// (pathHere), then this Txn. A partition that has not got the
		// volume's routing yet (a new volume, until the master's first
		// push) accepts every name, so its own check proves nothing: the
		// cluster map's routing, the clients', says where the name goes
		// (owner 0: placeNew reads it).
		// The Txn holds the pending new name: it must not wait for
		// another rename's on the old name (EBUSY ends the rename here;
		// the client's protocol starts over).
		del.GetDeleteDentry().Held = true
		ops := append([]*metapb.Op{del}, ctime...)
		if touch != nil {
			ops = append(ops, touch)
		}
		same := proto.Clone(base).(*metapb.PathResponse)
		same.Dentry, same.ParentTouched = moved, true
		if !routed {
			owner = 0
		}
		place := &renamePlace{part: owner, dir: dir, cred: cred, name: newName, from: name, noreplace: noreplace, src: src, nlink: in.GetNlink(), same: same}
		plan := txnPlan(req, "rename", dir.Ino, ops, func(res *metapb.TxnResult) *metapb.PathResponse {
			return renameAnswer(base, dir.Ino, moved, place.dst.GetIno(), res)
		})
		plan.follow, plan.rename, plan.dirLock = follow, place, lock
		return plan
	}
	dst, dstIn, de := mp.Lookup(dir.Ino, newName)
	if de != metapb.OK && de != metapb.ENOENT {
		return pathPlan{resp: pathErr(de, req.NewName, "rename: the new name")}
	}
	ops := []*metapb.Op{del}
	var replaced uint64
	switch {
	case dst == nil:
		ops = append(ops, &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
			Parent: dir.Ino, Name: req.NewName, Ino: src.GetIno(), Type: src.GetType()}}})
	case dst.GetIno() == src.GetIno() && !isDir && (in == nil || in.GetNlink() == 1):
		// One file with one link under both names: another rename of it
		// (run by a client's protocol, a step at a time) is between
		// placing the new name and deleting the old. Answering "nothing
		// to do" would answer from a state no rename leaves, and two
		// renames of one name would both succeed; the client's protocol
		// waits for the other one (a lab run found both succeeding).
		return exdev("rename: another rename of inode %d is under way", src.GetIno())
	case noreplace:
		return pathPlan{resp: pathErr(metapb.EEXIST, req.NewName, "rename: the new name exists")}
	case dst.GetIno() == src.GetIno():
		base.Dentry, base.ParentTouched = moved, true
		return pathPlan{resp: base} // two names of one inode: nothing to do
	case dst.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY && isDir:
		// Over a directory, which must be empty: the client's protocol
		// fences it first.
		return exdev("rename of a directory over a directory")
	case dst.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY:
		return pathPlan{resp: pathErr(metapb.EISDIR, req.NewName, "rename: the new name is a directory")}
	case isDir:
		return pathPlan{resp: pathErr(metapb.ENOTDIR, req.NewName, "rename of a directory over a non-directory")}
	case stickyCheck(dir, cred, dstIn) == metapb.EPERM:
		return pathPlan{resp: pathErr(metapb.EPERM, req.NewName, "sticky directory")}
	case stickyCheck(dir, cred, dstIn) == metapb.EXDEV:
		return exdev("rename: sticky directory, replaced inode homed elsewhere")
	default:
		replaced = dst.GetIno()
		ops = append(ops, &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{
			Parent: dir.Ino, Name: req.NewName, Ino: src.GetIno(), Type: src.GetType(), ExpectIno: replaced}}})
	}
	ops = append(ops, ctime...)
	if replaced != 0 {
		follow.unlinkIno, follow.keep = replaced, keptOpen(req, replaced)
		if follow.remoteLink = dstIn == nil; !follow.remoteLink {
			ops = append(ops, &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: replaced, Delta: -1, EvictAtZero: !follow.keep}}})
		}
	}
	if touch != nil {
		ops = append(ops, touch)
	}
	plan := txnPlan(req, "rename", dir.Ino, ops, func(res *metapb.TxnResult) *metapb.PathResponse {
		return renameAnswer(base, dir.Ino, moved, replaced, res)
	})
	plan.again = func(res *metapb.TxnResult) bool {
		// A name changed since the lookups: look again.
		switch metapb.Errno(res.Errno) {
		case metapb.ESTALE, metapb.ENOENT, metapb.EEXIST, metapb.EISDIR, metapb.ENOTDIR:
			return res.FailedOp <= 1
		}
		return false
	}
	plan.follow, plan.dirLock = follow, lock
	return plan
}

// renameAnswered answers a retry of a rename whose request id this
// partition has already applied: the rename's Txn (the retry re-proposes
// nothing; its follow-ups are sent again, their ids make them no-ops), or
// the empty Txn that claimed the id after a refused Txn (EXDEV: the
// client runs its own protocol). The inode a cross-partition rename
// replaced is not known any more: its link is taken only by the attempt
// that placed the new name.
func (s *service) renameAnswered(p *partition, mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, newName string, res *metapb.TxnResult) pathPlan {
	if len(res.GetResults()) == 0 {
		r := pathErr(metapb.EXDEV, req.Path, "rename: an earlier attempt was refused")
		r.Parent = dir.Ino
		return pathPlan{resp: r}
	}
	src := res.GetResults()[0].GetDentry()
	moved := &metapb.Dentry{Parent: dir.Ino, Name: req.NewName, Ino: src.GetIno(), Type: src.GetType()}
	follow := &followUp{name: newName, parent: dir.Ino}
	if !mp.Holds(dir.Ino) {
		follow.touch, follow.parallel = &metapb.TouchDir{Ino: dir.Ino, OpId: req.OpId}, true
	}
	if !mp.Holds(src.GetIno()) {
		follow.ctimeIno = src.GetIno()
	}
	plan := txnPlan(req, "rename", dir.Ino, nil, func(res *metapb.TxnResult) *metapb.PathResponse {
		return renameAnswer(base, dir.Ino, moved, 0, res)
	})
	plan.follow = follow
	if owner, routed := mp.Route(dir.Ino, newName); routed && owner != p.id {
		// The attempt that renamed it may have died before settling the
		// new name.
		plan.settle = &settleStep{part: owner, parent: dir.Ino, name: newName, ino: src.GetIno(), id: placementID(req.RequestId)}
	}
	if src.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY {
		// The attempt that renamed it may have died holding its locks:
		// take them over, so that they are lifted now.
		plan.dirLock = &renameLock{dir: src.GetIno()}
	}
	return plan
}

// settleStep is a new name to settle after a rename's Txn answered.
type settleStep struct {
	part, parent uint64
	name         string
	ino, id      uint64 // the renamed inode; the mark's rename id
}

// renameAnswer reads a rename Txn's result (a fresh or a remembered one):
// the parent's attributes when its TouchDir ran in it, and the replaced
// inode's link when it was homed here.
func renameAnswer(base *metapb.PathResponse, parent uint64, moved *metapb.Dentry, replaced uint64, res *metapb.TxnResult) *metapb.PathResponse {
	base.Dentry, base.Replaced, base.LinkDropped = moved, replaced, true
	seen := 0
	rs := res.GetResults()
	if len(rs) > 0 {
		rs = rs[1:] // the old name's delete
	}
	for _, r := range rs {
		switch in := r.GetInode(); {
		case in == nil:
		case in.GetIno() == parent:
			base.ParentTouched, base.ParentAttrs = true, in
		case replaced != 0 && in.GetIno() == replaced:
			base.Nlink, base.Evicted = in.GetNlink(), r.GetEvicted()
			seen++
		}
	}
	if replaced != 0 && seen == 0 {
		base.LinkDropped = false // the follow-up says (finishUnlink)
	}
	return base
}

// placeNew places a cross-partition rename's new name on its partition
// before the rename's Txn: nil when placed (r.dst says what it replaced),
// else the answer that ends the rename, having changed nothing. An error
// says the placement's outcome is unknown (its partition did not answer
// in time): it may have applied, so the rename is not handed to the
// client's protocol (EXDEV), which would leave the placed name to the
// resolver, and so make a rename the client was told had failed; the
// client retries the request, whose attempt finds the placement its own.
func (s *service) placeNew(ctx context.Context, p *partition, req *metapb.PathRequest, r *renamePlace) (*metapb.PathResponse, error) {
	exdev := func(format string, args ...any) (*metapb.PathResponse, error) {
		resp := pathErr(metapb.EXDEV, req.Path, format, args...)
		resp.Parent = r.dir.Ino
		return resp, nil
	}
	unknown := func(err error) (*metapb.PathResponse, error) {
		return nil, status.Errorf(codes.Unavailable, "rename: placing the new name on partition %d: outcome unknown: %v", r.part, err)
	}
	if r.part == 0 {
		part, err := s.routeByMap(ctx, p.volume, r.dir.Ino, r.name)
		if err != nil {
			return exdev("rename: %v", err)
		}
		r.part = part
	}
	pend := r.pending(req)
	r.pend = pend
	create := &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{
		Parent: r.dir.Ino, Name: []byte(r.name), Ino: r.src.GetIno(), Type: r.src.GetType(), Pending: pend}}}
	// The placement's request id comes from the rename's, so that a retry
	// of the rename (another attempt, maybe by a later leader) is answered
	// the earlier attempt's result instead of finding the name taken.
	res, err := s.followUpOn(ctx, "rename_place", r.part, &metapb.Txn{Ops: []*metapb.Op{create}, RequestId: placementID(req.RequestId)})
	switch e := metapb.Errno(res.GetErrno()); {
	case err != nil:
		return unknown(err)
	case e == metapb.OK:
		return nil, nil
	case e != metapb.EEXIST && e != metapb.EMOVING:
		// ENOENT: the directory is fenced there (an rmdir is checking
		// it); EWRONGMP: the name is moving. The client's protocol
		// waits for the one and follows the other.
		return exdev("rename: placing the new name: %s", res.GetMessage())
	}
	// The name exists, or is pending (EMOVING, or a routing move): an
	// earlier attempt of this request may have placed it, over a name
	// (a replace, under an id of its own, whose answer was lost). Handed
	// to the client's protocol, that placement was left to the resolver,
	// which rolled the rename forward after the client had been told it
	// failed (the simulation, seeds 1011 and 5178).
	part, err := s.h.peers.partition(ctx, r.part)
	if err != nil {
		return exdev("rename: %v", err)
	}
	look, err := s.h.peers.meta.FetchPending(ctx, part, r.dir.Ino, r.name)
	if err != nil || look.GetErrno() != 0 {
		return exdev("rename: the new name changed while it was placed")
	}
	dst := look.GetDentry()
	isDir := r.src.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY
	switch {
	case dst.GetPending().GetId() == pend.GetId() && dst.GetIno() == r.src.GetIno():
		// An earlier attempt's placement whose answer was forgotten; its
		// mark says what it replaced, whose link the rename then drops.
		if ino := dst.GetPending().GetReplacedIno(); ino != 0 {
			r.dst = &metapb.Dentry{Parent: r.dir.Ino, Name: []byte(r.name), Ino: ino, Type: dst.GetPending().GetReplacedType()}
			r.keep = keptOpen(req, ino)
		}
		return nil, nil
	case dst.GetPending() != nil:
		// Another rename's new name, not settled: the client's protocol
		// waits for it.
		return exdev("rename: the new name is another rename's, not settled yet")
	case dst.GetIno() == r.src.GetIno():
		if isDir {
			// An earlier attempt's placement: a directory never has two
			// names, and its renames hold its locks, one at a time.
			return nil, nil
		}
		if s.linksOf(ctx, p, r) == 1 {
			// Another rename of the same file is between its placement
			// and its Txn (or died there): not this request's (its own
			// placement is answered above). Going on with it would make
			// this rename's undo, or that one's, take away the only
			// name of a file whose rename was acknowledged. The client's
			// protocol looks again.
			return exdev("rename: another rename of inode %d is under way", r.src.GetIno())
		}
		if r.noreplace {
			return pathErr(metapb.EEXIST, []byte(r.name), "rename: the new name exists"), nil
		}
		return r.same, nil // two names of one inode: nothing to do
	case r.noreplace:
		return pathErr(metapb.EEXIST, []byte(r.name), "rename: the new name exists"), nil
	case dst.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY && isDir:
		return exdev("rename of a directory over a directory")
	case dst.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY:
		return pathErr(metapb.EISDIR, []byte(r.name), "rename: the new name is a directory"), nil
	case isDir:
		return pathErr(metapb.ENOTDIR, []byte(r.name), "rename of a directory over a non-directory"), nil
	case stickyCheck(r.dir, r.cred, look.GetInode()) == metapb.EXDEV:
		// The sticky check needs the replaced inode's owner, homed
		// elsewhere: the client's protocol reads it.
		return exdev("rename: sticky directory, replaced inode homed elsewhere")
	case stickyCheck(r.dir, r.cred, look.GetInode()) == metapb.EPERM:
		return pathErr(metapb.EPERM, []byte(r.name), "sticky directory"), nil
	}
	replace := &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{
		Parent: r.dir.Ino, Name: []byte(r.name), Ino: r.src.GetIno(), Type: r.src.GetType(), ExpectIno: dst.GetIno(), Pending: pend}}}
	res, err = s.followUpOn(ctx, "rename_place", r.part, &metapb.Txn{Ops: []*metapb.Op{replace}, RequestId: newFenceToken()})
	switch {
	case err != nil:
		return unknown(err)
	case res.GetErrno() != 0:
		return exdev("rename: the new name changed while it was replaced")
	}
	r.dst, r.keep = dst, keptOpen(req, dst.GetIno())
	return nil, nil
}

// pending is the mark r's placement puts on the new name: pending under
// an id fixed by the request's (as the placement's request id is), so that
// every attempt of the request settles or takes back the same mark. The
// placement keeps it (r.pend): a request without an id gets a fresh one
// per call.
func (r *renamePlace) pending(req *metapb.PathRequest) *metapb.PendingRename {
	return &metapb.PendingRename{Id: placementID(req.RequestId), FromParent: r.dir.Ino, FromName: []byte(r.from)}
}

// settle ends the pending state of a committed rename's new name on
// partition part. Best effort: the rename stands either way, and a name
// left pending is settled by its partition's resolver (resolve.go).
func (s *service) settle(ctx context.Context, st *settleStep) {
	op := &metapb.Op{Op: &metapb.Op_SettleDentry{SettleDentry: &metapb.SettleDentry{
		Parent: st.parent, Name: []byte(st.name), Ino: st.ino, Id: st.id}}}
	res, err := s.followUpOn(ctx, "rename_settle", st.part, &metapb.Txn{Ops: []*metapb.Op{op}})
	if err != nil || res.GetErrno() != 0 {
		s.h.log.Warn("renamed name not settled", "partition", st.part, "parent", st.parent, "name", st.name, "err", err, "errno", res.GetErrno())
	}
}

// placementID is the request id of the placement of a rename's new name:
// fixed by the rename's request id (a fresh one when it has none), never 0
// and never with the top bit that marks locks.
func placementID(requestID uint64) uint64 {
	return idFor("rename-place", requestID)
}

// rolledForwardID is the request id under which a resolver commits the
// stale rename whose new name was placed under placement id placed (the
// mark's id, taken over or not): a retry of that rename finds the commit
// under it as its answer (planRename).
func rolledForwardID(placed uint64) uint64 {
	return idFor("rename-rolled-forward", placed&^(1<<63))
}

// idFor derives a request id from another, for a step of its operation:
// fixed by the step and the id (a fresh one when the id is 0), never 0 and
// never with the top bit set (resolverID's).
func idFor(step string, requestID uint64) uint64 {
	if requestID == 0 {
		return newFenceToken()
	}
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], requestID)
	h.Write([]byte(step))
	h.Write(b[:])
	if id := h.Sum64() >> 1; id != 0 {
		return id
	}
	return 1
}

// renameCleanupTimeout bounds the clean-up of a refused rename
// (renameRefused), which outlives its request.
const renameCleanupTimeout = 30 * time.Second

// renameRefused ends a cross-partition rename whose Txn was refused after
// its new name was placed. It claims the request id here with an empty
// Txn first: once that applies, no attempt of the request deletes the old
// name, so the placement can be taken back (with what it replaced put
// back) and the client runs its own protocol (EXDEV). If the claim finds
// the rename applied (another attempt's Txn), again says to answer that.
//
// The claim and the undo run on after the request's context ends: a client
// whose attempt timed out (a slow or cut link) would otherwise leave the
// placement behind, a name the failed rename never made that the resolver
// later settles.
func (s *service) renameRefused(ctx context.Context, p *partition, req *metapb.PathRequest, r *renamePlace, refused *metapb.PathResponse) (resp *metapb.PathResponse, again bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renameCleanupTimeout)
	defer cancel()
	res, err := p.merger.submit(ctx, &metapb.Txn{RequestId: req.RequestId})
	switch {
	case err != nil:
		// Not known whether the claim applied: the placement stays (one
		// name too many), as after a crash at this point.
		s.h.log.Warn("refused rename's new name left in place", "partition", p.id, "parent", r.dir.Ino, "name", r.name, "err", err)
		return refused, false
	case len(res.GetResults()) > 0:
		return nil, true
	}
	id := r.pend.GetId()
	undo := &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
		Parent: r.dir.Ino, Name: []byte(r.name), ExpectIno: r.src.GetIno(), Undo: id}}}
	if d := r.dst; d != nil {
		undo = &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{
			Parent: r.dir.Ino, Name: []byte(r.name), Ino: d.GetIno(), Type: d.GetType(), ExpectIno: r.src.GetIno(), Undo: id}}}
	}
	ures, err := s.followUpOn(ctx, "rename_undo", r.part, &metapb.Txn{Ops: []*metapb.Op{undo}, RequestId: newFenceToken()})
	if err != nil || ures.GetErrno() != 0 {
		s.h.log.Warn("refused rename's new name not taken back", "partition", p.id, "parent", r.dir.Ino, "name", r.name, "err", err, "errno", ures.GetErrno())
		if metapb.Errno(ures.GetErrno()) == metapb.ESTALE && s.awaitRolledForward(ctx, p, id) {
			// The resolver took the new name over and rolled the
			// rename forward (that is what refused its Txn): it
			// happened, and planned again it is answered so.
			return nil, true
		}
	} else {
		s.h.log.Info("refused rename's new name taken back", "partition", p.id, "request", req.RequestId, "parent", r.dir.Ino,
			"name", r.name, "on", r.part, "why", refused.GetMessage())
	}
	out := pathErr(metapb.EXDEV, req.Path, "rename: the old name changed: %s", refused.GetMessage())
	out.Parent = r.dir.Ino
	return out, false
}

// routeByMap returns the meta partition the cluster map's live routing of
// volume sends (parent, name) to, as clients route it.
func (s *service) routeByMap(ctx context.Context, volume, parent uint64, name string) (uint64, error) {
	m, err := s.h.peers.clusterMap(ctx)
	if err != nil {
		return 0, err
	}
	v := m.GetVolumes()[volume]
	if v == nil {
		return 0, fmt.Errorf("volume %d is not in the cluster map", volume)
	}
	t, err := clustermap.RoutingTable(v.GetSlotOwners(), v.GetExceptions())
	if err != nil {
		return 0, fmt.Errorf("volume %d: %w", volume, err)
	}
	part, _ := t.Route(parent, name)
	if part == 0 {
		return 0, fmt.Errorf("volume %d routes %q nowhere", volume, name)
	}
	return part, nil
}

// linksOf returns the link count of the renamed inode: known from the
// plan when homed here, else read from its home (0 if it cannot be).
func (s *service) linksOf(ctx context.Context, p *partition, r *renamePlace) uint32 {
	if r.nlink != 0 {
		return r.nlink
	}
	home, err := s.h.peers.home(ctx, p.volume, r.src.GetIno())
	if err != nil {
		return 0
	}
	g, err := s.h.peers.meta.FetchInode(ctx, home, r.src.GetIno())
	if err != nil || g.GetErrno() != 0 {
		return 0
	}
	return g.GetInode().GetNlink()
}

// renameLock is a directory rename's namespace lock (Fence.lock) on every
// partition of the volume: every namespace replica forgets the directory,
// and fetches of it wait, until the rename is done and the locks lifted.
// The partitions a replica fetches the directory's entry from (this one,
// which holds the old name, and the directory's home) are locked first,
// so that no replica can learn the old entry again once the others
// dropped it (FalconFS §4.3; the client's nsLock keeps the same order).
type renameLock struct {
	dir      uint64
	token    uint64
	takeover bool
	parts    []uint64 // every partition of the volume, once locked
}

// lockDir takes l's locks, under a token attempts of the request take
// over (attemptToken): nil when every partition holds one, else the
// answer that ends the rename, with every lock placed lifted: EBUSY (an
// operation still holds the directory after about a second of waiting;
// the client's protocol waits longer) or EXDEV (a partition did not
// answer, or the volume's partitions changed).
func (s *service) lockDir(ctx context.Context, p *partition, req *metapb.PathRequest, l *renameLock) *metapb.PathResponse {
	all, err := s.volumeParts(ctx, p.volume)
	if err != nil || !slices.Contains(all, p.id) {
		return pathErr(metapb.EXDEV, req.Path, "rename: the volume's partitions are not known here")
	}
	l.token, l.takeover = s.attemptToken(p, req)
	first := []uint64{p.id}
	if home, err := s.h.peers.home(ctx, p.volume, l.dir); err == nil && home.GetId() != p.id {
		first = append(first, home.GetId())
	}
	rest := slices.DeleteFunc(slices.Clone(all), func(id uint64) bool { return slices.Contains(first, id) })
	lock := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: l.dir, Token: l.token, Lock: true, Takeover: l.takeover}}}}}
	for backoff := lockBackoffMin; ; backoff *= 2 {
		busy, unknown := false, false
		for _, ids := range [][]uint64{first, rest} {
			for _, a := range s.sendEach(ctx, "rename_lock", ids, lock) {
				switch {
				case a.err != nil:
					unknown = true
				case metapb.Errno(a.res.GetErrno()) == metapb.EBUSY:
					busy = true
				case a.res.GetErrno() != 0:
					unknown = true
				}
			}
			if busy || unknown {
				break
			}
		}
		if !busy && !unknown {
			if now, err := s.volumeParts(ctx, p.volume); err != nil || !slices.Equal(now, all) {
				unknown = true // the partitions changed under the locks
			}
		}
		if !busy && !unknown {
			l.parts = all
			return nil
		}
		s.liftNow(l.dir, l.token, all)
		if unknown {
			return pathErr(metapb.EXDEV, req.Path, "rename: not every partition took the lock on directory %d", l.dir)
		}
		if backoff > lockBackoffMax {
			return pathErr(metapb.EBUSY, req.Path, "rename: directory %d is held by another operation", l.dir)
		}
		// Another operation holds the directory (often an earlier
		// rename's locks, lifted in a batch a moment later): wait.
		select {
		case <-ctx.Done():
			return pathErr(metapb.EBUSY, req.Path, "rename: directory %d is held by another operation", l.dir)
		case <-time.After(backoff):
		}
	}
}

// The waits of lockDir for a directory another operation holds: doubling
// from lockBackoffMin while at most lockBackoffMax, about a second in all.
const (
	lockBackoffMin = 5 * time.Millisecond
	lockBackoffMax = 320 * time.Millisecond
)
