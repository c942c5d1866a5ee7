package client

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Removing names: unlink, and rmdir with the fences that keep a directory
// empty while its name goes.

// Unlink removes the non-directory name in parent (EISDIR for a
// directory) with one request to the name's partition (a by-inode UNLINK,
// PathRequest.parent_ino), which runs the whole order: DeleteDentry
// (expecting the inode it looks up), Link -1 on the inode's home (same Txn
// when homed there) and Evict at 0 links, TouchDir of the parent (same Txn
// when homed there); the steps homed elsewhere are its follow-ups. An
// inode this Volume has open is not evicted: the last Close does it. A
// missing name costs one more request, which tells ENOENT from ENOTDIR.
func (v *Volume) Unlink(ctx context.Context, parent uint64, name string) error {
	const op = "unlink"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkName(op, name); err != nil {
		return err
	}
	req := &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_UNLINK, RequestId: newID(), OpId: newID()}
	v.keepOpen(req)
	resp, err := v.nameReq(ctx, op, parent, name, req)
	if err != nil {
		return err
	}
	switch e := syscall.Errno(resp.GetErrno()); e {
	case 0:
	case syscall.ENOENT:
		if err := v.checkDir(ctx, op, parent); err != nil {
			return err
		}
		return errnoErr(op, e, "%d/%q: %s", parent, name, resp.GetMessage())
	default:
		return errnoErr(op, e, "%d/%q: %s", parent, name, resp.GetMessage())
	}
	v.afterUnlink(ctx, op, req, resp, resp.GetDentry().GetIno())
	if resp.GetParentTouched() {
		noteAttrs(ctx, resp.GetParentAttrs())
	}
	return nil
}

// maxKeepOpen is the most open inodes an unlink lists (keepOpen).
const maxKeepOpen = 1024

// keepOpen lists this Volume's open inodes in an unlink request, so that
// the partition leaves their eviction to the last Close; with more than
// maxKeepOpen it asks the partition to evict nothing.
func (v *Volume) keepOpen(req *metapb.PathRequest) {
	v.openMu.Lock()
	defer v.openMu.Unlock()
	if len(v.opens) > maxKeepOpen {
		req.KeepAll = true
		return
	}
	for ino := range v.opens {
		req.KeepOpen = append(req.KeepOpen, ino)
	}
}

// afterUnlink runs what an unlink's partition reported undone (or a
// rename's, for the inode it replaced): the Link -1 of inode ino (with the
// request id the partition used), the Evict at 0
// links (deferred to the last Close of a file open here), the parent's
// TouchDir (same op id). Failures leave a link count too high or a stale
// parent (see the relaxations).
func (v *Volume) afterUnlink(ctx context.Context, op string, req *metapb.PathRequest, resp *metapb.PathResponse, ino uint64) {
	v.dropDisk(ino)
	switch {
	case !resp.GetLinkDropped():
		id := metapb.FollowUpID(req.RequestId, metapb.FollowUpLink)
		res, err := v.txnID(ctx, op, byIno(ino), id, opLink(ino, -1))
		if err == nil && res.GetResults()[0].GetInode().GetNlink() == 0 {
			v.evict(ctx, op, ino)
		}
	case resp.GetNlink() == 0 && !resp.GetEvicted():
		v.evict(ctx, op, ino)
	}
	if parent := resp.GetParent(); !resp.GetParentTouched() && parent != 0 {
		_, _ = v.txn(ctx, op, byIno(parent), opTouchDir(parent, 0, req.OpId))
	}
}

// fenceEmpty fences dir, named (parent, name), on every partition and
// reports whether no partition holds a name under it, for rmdir and a
// rename over a directory. The returned unfence lifts the fences; call it
// in every case (it is nil when err is not). If the volume gained a
// partition meanwhile (growth), that one is fenced too before the check
// counts.
func (v *Volume) fenceEmpty(ctx context.Context, op string, parent uint64, name string, dir uint64) (empty bool, unfence func(), err error) {
	for {
		w := v.current()
		parts := w.all()
		unfence, children, err := v.fenceOn(ctx, op, dir, newID(), false, nsOwners(w, parent, name, dir), parts)
		if err != nil {
			return false, nil, err
		}
		if !samePartitions(parts, v.current().all()) {
			unfence()
			if ctx.Err() != nil {
				return false, nil, transportErr(op, ctx.Err())
			}
			continue
		}
		// Each partition checked for names under dir as it placed its
		// fence (which no new name passes): that answers, unless one
		// is of an earlier version that does not check.
		if children != childrenUnknown {
			return children == childrenNone, unfence, nil
		}
		// A listing that agrees on the routing, so that a name being
		// moved counts on one partition at least.
		resps, _, err := v.dirPage(ctx, op, dir, "", 1, false)
		if err != nil {
			unfence()
			return false, nil, err
		}
		for _, r := range resps {
			if len(r.GetDentries()) > 0 {
				return false, unfence, nil
			}
		}
		return true, unfence, nil
	}
}

// nsLock takes a namespace lock (Fence.lock) on directory dir on every
// partition, for a change of what paths through dir resolve to or who may
// search it (directory rename, chmod, chown): every partition's namespace
// replica forgets dir, and fetches of it wait until unlock. parent and name
// are dir's dentry (parent 0 when unknown: only dir's home is locked
// first). unlock is nil when err is not.
func (v *Volume) nsLock(ctx context.Context, op string, parent uint64, name string, dir uint64) (unlock func(), err error) {
	for {
		w := v.current()
		parts := w.all()
		unlock, _, err := v.fenceOn(ctx, op, dir, newID(), true, nsOwners(w, parent, name, dir), parts)
		if err != nil || samePartitions(parts, v.current().all()) {
			return unlock, err
		}
		unlock()
		if ctx.Err() != nil {
			return nil, transportErr(op, ctx.Err())
		}
	}
}

// nsOwners lists the partitions a namespace replica fetches dir's entry
// from: the dentry's (parent, name), when known, and dir's home.
func nsOwners(w *view, parent uint64, name string, dir uint64) map[uint64]bool {
	out := map[uint64]bool{}
	if parent != 0 {
		if p, err := w.route(parent, name); err == nil {
			out[p.GetId()] = true
		}
	}
	if p, err := w.home(dir); err == nil {
		out[p.GetId()] = true
	}
	return out
}

func samePartitions(a, b []*pb.Partition) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.Partition) bool { return x.GetId() == y.GetId() })
}

// fenceOn fences dir with token (lock: with a namespace lock) on every
// partition of parts, first on the owners, then on the others. The owners
// go first because a fenced owner refuses namespace fetches of dir: once it holds
// the fence, no other partition's replica can learn dir's old entry again,
// and the fence on that partition then drops what it learnt before
// (FalconFS §4.3, the owner locks before it invalidates). Another fence on
// dir (EBUSY) is waited for, up to ~1 s. unfence lifts what was placed,
// also after ctx ended. children sums what the partitions answered about
// names under dir (fences only, not locks).
func (v *Volume) fenceOn(ctx context.Context, op string, dir, token uint64, lock bool, owners map[uint64]bool, parts []*pb.Partition) (unfence func(), children childrenAnswer, err error) {
	unfence = func() {
		// Also after the operation's deadline: a fence left behind blocks
		// creates under dir until it expires.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.opts.AttemptTimeout)
		defer cancel()
		_ = v.each(parts, func(p *pb.Partition) error {
			_, err := v.txn(uctx, op, byID(p.GetId()), &metapb.Op{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: dir, Token: token}}})
			return err
		})
	}
	var first, rest []*pb.Partition
	for _, p := range parts {
		if owners[p.GetId()] {
			first = append(first, p)
		} else {
			rest = append(rest, p)
		}
	}
	var (
		mu  sync.Mutex
		sum childrenAnswer
	)
	fence := func(p *pb.Partition) error {
		res, err := v.txn(ctx, op, byID(p.GetId()), &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: dir, Token: token, Lock: lock}}})
		if err == nil && len(res.GetResults()) > 0 {
			mu.Lock()
			sum = sum.add(res.GetResults()[0])
			mu.Unlock()
		}
		return err
	}
	backoff := backoffMin
	for {
		sum = childrenNone
		err = v.each(first, fence)
		if err == nil {
			err = v.each(rest, fence)
		}
		if err == nil {
			return unfence, sum, nil
		}
		unfence()
		if !isErrno(err, syscall.EBUSY) || backoff > backoffMax {
			return nil, childrenUnknown, err
		}
		// Another rmdir/rename/chmod holds the fence: wait for it.
		select {
		case <-ctx.Done():
			return nil, childrenUnknown, transportErr(op, ctx.Err())
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// childrenAnswer sums the fences' answers about names under a directory.
type childrenAnswer int

const (
	childrenNone    childrenAnswer = iota // every partition answered: none
	childrenSome                          // some partition holds a name
	childrenUnknown                       // some partition did not say
)

// add folds one partition's Fence result in.
func (c childrenAnswer) add(r *metapb.OpResult) childrenAnswer {
	switch {
	case c == childrenSome || r.HasChildren != nil && r.GetHasChildren():
		return childrenSome
	case r.HasChildren == nil:
		return childrenUnknown
	}
	return c
}

// Rmdir removes the empty directory name in parent: ENOTDIR if it is not a
// directory, ENOTEMPTY if it has names. It is one request when the name's
// partition also homes the directory (PATH_OP_RMDIR: that partition runs
// the protocol below itself); otherwise, or when that partition leaves it
// to the client (rmdirAnswer), the client runs it. Order: fence the
// directory on every partition, check each holds no child, DeleteDentry
// (expect a directory), Link -2 and Evict on its home, TouchDir -1 on the
// parent, unfence. When the name's partition is the directory's home
// (rmdirOwnerLast), that partition's fence and check ride in the Txn that
// deletes the name.
func (v *Volume) Rmdir(ctx context.Context, parent uint64, name string) error {
	const op = "rmdir"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkName(op, name); err != nil {
		return err
	}
	req := &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_RMDIR, RequestId: newID(), OpId: newID()}
	resp, err := v.nameReq(ctx, op, parent, name, req)
	if err != nil {
		return err
	}
	if done, err := v.rmdirAnswer(ctx, op, parent, req, resp); done {
		return err
	}
	if h, ok := ctx.Value(rmdirHintKey{}).(*NameHint); ok && h != nil && !h.Absent && h.Ino != 0 && h.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		err := v.rmdir(ctx, parent, name, h.Ino)
		if !staleHint(err) {
			return err
		}
		// Not the directory the hint says (gone, replaced, or another
		// with names in it): nothing changed; look it up.
	}
	d, _, err := v.lookupDentry(ctx, op, parent, name)
	if err != nil {
		return err
	}
	if d == nil {
		return errnoErr(op, syscall.ENOENT, "%d/%q", parent, name)
	}
	if !isDirType(d.GetType()) {
		return errnoErr(op, syscall.ENOTDIR, "%d/%q", parent, name)
	}
	return v.rmdir(ctx, parent, name, d.GetIno())
}

// rmdirAnswer reads the answer to an rmdir the name's partition ran
// (PATH_OP_RMDIR, one request: it fences the directory on the other
// partitions itself). done is false when the partition left the rmdir to
// the client, having changed nothing: EXDEV (the directory is homed on
// another partition, or a partition did not say whether it lists names),
// EBUSY (another operation holds the directory; the client's protocol
// waits for it), EINVAL (a node of an earlier version, which does not
// know the operation: the name was checked here). A parent's TouchDir the
// partition could not deliver is sent here (same op id).
func (v *Volume) rmdirAnswer(ctx context.Context, op string, parent uint64, req *metapb.PathRequest, resp *metapb.PathResponse) (done bool, err error) {
	if left, err := v.serverErr(ctx, op, parent, req, resp); left || err != nil {
		return !left, err
	}
	noteChanging(ctx, resp.GetDentry().GetIno())
	if resp.GetParentTouched() {
		noteAttrs(ctx, resp.GetParentAttrs())
	} else if p := resp.GetParent(); p != 0 {
		if res, err := v.txn(ctx, op, byIno(p), opTouchDir(p, -1, req.OpId)); err == nil {
			noteDir(ctx, p, res.GetResults())
		}
	}
	return true, nil
}

// serverErr reads the errno of an operation a partition ran for this
// client (PATH_OP_RMDIR, PATH_OP_RENAME). left is true when the partition
// left it to the client, having changed nothing: EXDEV, EBUSY (the
// client's protocol waits longer for a held fence), or EINVAL (a node of
// an earlier version, which does not know the operation; the names were
// checked here). Otherwise err is the operation's error, nil when done;
// an ENOENT of a request by inode first checks the parent (checkDir), for
// the errno the client's own protocol would give.
func (v *Volume) serverErr(ctx context.Context, op string, parent uint64, req *metapb.PathRequest, resp *metapb.PathResponse) (left bool, err error) {
	switch e := syscall.Errno(resp.GetErrno()); e {
	case 0:
		return false, nil
	case syscall.EXDEV, syscall.EBUSY, syscall.EINVAL:
		return true, nil
	case syscall.ENOENT:
		if req.ParentIno != 0 {
			if err := v.checkDir(ctx, op, parent); err != nil {
				return false, err
			}
		}
		return false, errnoErr(op, e, "%q: %s", req.Path, resp.GetMessage())
	default:
		return false, errnoErr(op, e, "%q: %s", req.Path, resp.GetMessage())
	}
}

type rmdirHintKey struct{}

// WithRmdirHint returns a context under which Rmdir takes dir (nil:
// unknown) for what its name holds instead of looking it up, as Rename
// takes WithRenameHints. The fences and the Txn that deletes the name
// expect that directory, so a stale hint fails them, changes nothing, and
// the rmdir starts over with a lookup.
func WithRmdirHint(ctx context.Context, dir *NameHint) context.Context {
	return context.WithValue(ctx, rmdirHintKey{}, dir)
}

// rmdir removes directory dir, named name in parent (Rmdir).
func (v *Volume) rmdir(ctx context.Context, parent uint64, name string, dir uint64) error {
	const op = "rmdir"
	noteChanging(ctx, dir)
	if done, err := v.rmdirOwnerLast(ctx, op, parent, name, dir); done {
		return err
	}
	empty, unfence, err := v.fenceEmpty(ctx, op, parent, name, dir)
	if err != nil {
		return err
	}
	if !empty {
		unfence()
		return errnoErr(op, syscall.ENOTEMPTY, "%d/%q", parent, name)
	}
	_, then, err := v.nameStepThen(ctx, op, parent, name,
		[]*metapb.Op{opDeleteDentry(parent, name, dir, metapb.FileType_FILE_TYPE_DIRECTORY)},
		rmdirSteps(parent, dir))
	if err != nil {
		// Lifted before answering: a caller told the directory is still
		// there may create in it at once.
		unfence()
		if isErrno(err, syscall.ESTALE) {
			err = errnoErr(op, syscall.ENOENT, "%d/%q changed meanwhile", parent, name)
		}
		return err
	}
	// The name is gone: the fences now only refuse names under a
	// directory nobody can reach, so they are lifted in the background
	// (inode numbers are not reused, so no new directory inherits them).
	v.background(unfence)
	noteDir(ctx, parent, then)
	return nil
}

// rmdirOwnerLast is rmdir for a directory whose name's partition O is
// also its home: it fences the directory on every other partition (each
// answers whether it lists a name under it), then runs one Txn on O that
// fences it there with require_empty, deletes the name and drops the
// inode. That Txn's check and delete are one step, so O needs no fence of
// its own beforehand: two Raft writes fewer than fencing O first and
// lifting it. The namespace replicas stay right without the owners-first
// order because a partition neither caches nor resolves through a
// directory it has fenced (docs/design.md, "Stateless clients"). After a
// success the fences are lifted in batches (oweUnfences). done is false,
// with nothing changed, when the protocol does not apply (O is not the
// home, the partitions changed, a partition of an earlier version did not
// answer for its names): the caller then runs the general one.
func (v *Volume) rmdirOwnerLast(ctx context.Context, op string, parent uint64, name string, dir uint64) (done bool, err error) {
	w := v.current()
	owner, err := w.route(parent, name)
	if err != nil {
		return false, nil
	}
	if home, err := w.home(dir); err != nil || home.GetId() != owner.GetId() {
		return false, nil
	}
	parts := w.all()
	others := make([]*pb.Partition, 0, len(parts))
	for _, p := range parts {
		if p.GetId() != owner.GetId() {
			others = append(others, p)
		}
	}
	token := newID()
	unfence, children, err := v.fenceOn(ctx, op, dir, token, false, nil, others)
	if err != nil {
		return true, err
	}
	switch {
	case children == childrenSome:
		unfence()
		return true, errnoErr(op, syscall.ENOTEMPTY, "%d/%q", parent, name)
	case children == childrenUnknown || !samePartitions(parts, v.current().all()):
		unfence()
		return false, nil
	}
	last := &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: dir, Token: token, RequireEmpty: true}}}
	res, then, err := v.nameStepThen(ctx, op, parent, name,
		[]*metapb.Op{last, opDeleteDentry(parent, name, dir, metapb.FileType_FILE_TYPE_DIRECTORY)},
		rmdirSteps(parent, dir))
	if err != nil {
		unfence()
		if isErrno(err, syscall.ESTALE) {
			err = errnoErr(op, syscall.ENOENT, "%d/%q changed meanwhile", parent, name)
		}
		return true, err
	}
	ids := make([]uint64, len(parts))
	for i, p := range parts {
		ids[i] = p.GetId()
	}
	v.oweUnfences(ids, dir, token)
	noteDir(ctx, parent, res.GetResults())
	noteDir(ctx, parent, then)
	return true, nil
}

// rmdirSteps are the steps of an rmdir beside the name's delete: the
// directory's Link -2 and Evict on its home, the parent's TouchDir. Those
// homed on the name's partition ride in its Txn, the others are its then
// steps (best effort: a failure leaves a leak fsck reports, or a stale
// parent mtime and nlink).
func rmdirSteps(parent, dir uint64) []homedOp {
	return []homedOp{{dir, opLink(dir, -2)}, {dir, opEvict(dir)}, {parent, opTouchDir(parent, -1, newID())}}
}

// noteDir passes on the attributes of directory ino that a TouchDir among
// results answered (WithAttrs).
func noteDir(ctx context.Context, ino uint64, results []*metapb.OpResult) {
	for _, r := range results {
		if in := r.GetInode(); in.GetIno() == ino {
			noteAttrs(ctx, in)
		}
	}
}
