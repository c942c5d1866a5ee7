package metanode

import (
	"syscall"

	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/nsreplica"
	"github.com/cairnfs/cairn/pkg/perm"
)

// planUnlink is the unlink step with the parent resolved here:
// [DeleteDentry (expecting the inode looked up, not a directory), Link -1
// when the inode is homed here, Evict when that takes its last link (and
// the client does not have it open), TouchDir parent when homed here].
// The steps homed elsewhere are this partition's follow-ups (followup.go):
// the parent's TouchDir alongside the Txn, the inode's Link -1 (and Evict
// at 0) after it. A retry of an unlink whose Txn applied (its name is gone
// now) is answered from the remembered result and finishes the follow-ups.
func (s *service) planUnlink(mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, name string, cred perm.Cred) pathPlan {
	if res, ok := mp.Answered(req.RequestId); ok && len(res.GetResults()) > 0 {
		d := res.Results[0].GetDentry()
		del := &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
			Parent: dir.Ino, Name: []byte(name), ExpectIno: d.GetIno(), ExpectType: d.GetType()}}}
		return s.unlinkPlan(mp, req, base, dir, d, []*metapb.Op{del}, false)
	}
	d, in, e := mp.Lookup(dir.Ino, name)
	switch {
	case e != metapb.OK:
		return pathPlan{resp: pathErr(e, req.Path, "unlink")}
	case d.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY:
		return pathPlan{resp: pathErr(metapb.EISDIR, req.Path, "unlink of a directory")}
	}
	if dir.Mode&syscall.S_ISVTX != 0 {
		if in == nil {
			// The sticky check needs the file's owner, homed elsewhere:
			// the client takes the inode path (errno EXDEV, never shown).
			r := pathErr(metapb.EXDEV, req.Path, "sticky directory, inode homed elsewhere")
			r.Parent, r.Dentry = dir.Ino, d
			return pathPlan{resp: r}
		}
		if !perm.MayDelete(cred, dir.Mode, dir.Uid, in.GetUid()) {
			return pathPlan{resp: pathErr(metapb.EPERM, req.Path, "sticky directory")}
		}
	}
	ops := []*metapb.Op{{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
		Parent: dir.Ino, Name: []byte(name), ExpectIno: d.GetIno(), ExpectType: d.GetType()}}}}
	evicting := false
	if in != nil {
		ops = append(ops, &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: d.GetIno(), Delta: -1}}})
		if in.GetNlink() == 1 && !keptOpen(req, d.GetIno()) {
			ops = append(ops, &metapb.Op{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: d.GetIno()}}})
			evicting = true
		}
	}
	if mp.Holds(dir.Ino) {
		ops = append(ops, &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: dir.Ino, OpId: req.OpId}}})
	}
	return s.unlinkPlan(mp, req, base, dir, d, ops, evicting)
}

// unlinkPlan proposes ops, the unlink of name d in dir, and plans the
// follow-ups this partition owes: the parent's TouchDir and the inode's
// link when they are homed elsewhere. A Txn refused because the name
// changed since the lookup (ESTALE, or the type), or because the inode
// gained a link before its Evict (EBUSY), is planned again.
func (s *service) unlinkPlan(mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, d *metapb.Dentry, ops []*metapb.Op, evicting bool) pathPlan {
	follow := &followUp{name: string(d.GetName()), parent: dir.Ino, unlinkIno: d.GetIno(), keep: keptOpen(req, d.GetIno())}
	if !mp.Holds(dir.Ino) {
		follow.touch = &metapb.TouchDir{Ino: dir.Ino, OpId: req.OpId}
		follow.parallel = true
	}
	follow.remoteLink = !mp.Holds(d.GetIno())
	plan := guardedPlan(mp, req, "unlink", dir.Ino, ops, func(res *metapb.TxnResult) *metapb.PathResponse {
		return unlinkAnswer(base, d, dir.Ino, res)
	})
	plan.again = func(res *metapb.TxnResult) bool {
		switch metapb.Errno(res.Errno) {
		case metapb.ESTALE, metapb.EISDIR, metapb.ENOTDIR:
			return res.FailedOp == 0
		case metapb.EBUSY:
			return evicting && res.FailedOp == 2
		}
		return false
	}
	plan.follow = follow
	return plan
}

// unlinkAnswer reads an unlink Txn's result (a fresh one or a remembered
// one): the deleted name, then the inode's Link and Evict results if it
// is homed here, and the parent's TouchDir if it is.
func unlinkAnswer(base *metapb.PathResponse, d *metapb.Dentry, parent uint64, res *metapb.TxnResult) *metapb.PathResponse {
	base.Dentry = d
	seen := 0
	for _, r := range res.GetResults()[1:] {
		switch in := r.GetInode(); in.GetIno() {
		case d.GetIno():
			if seen == 0 {
				base.Inode, base.Nlink = in, in.GetNlink()
			}
			seen++
		case parent:
			base.ParentTouched, base.ParentAttrs = true, in
		}
	}
	base.LinkDropped = seen > 0
	base.Evicted = seen > 1
	return base
}
