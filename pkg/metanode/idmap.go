package metanode

import (
	"context"
	"syscall"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/perm"
)

// A client whose capabilities map ids (capability.Caps.MapsIDs: root
// squash, uid and gid maps) cannot be trusted with permission checks: its
// own, and the kernel's behind its mount, ran with the ids it claims, and
// root on the client's host passes them all. For such a client a meta
// node maps the claimed ids and decides every change itself, as Linux
// would for the mapped caller:
//   - path requests: the caller's ids are mapped before the resolution
//     checks them; by-inode names (a mount's) get the parent directory's
//     search and write check the kernel made with the unmapped ids;
//   - a new inode belongs to the mapped caller, keeps the set-group-id bit
//     only in one of its groups;
//   - Txns: each change is checked against the mapped caller of
//     TxnRequest.cred (nobody without one).
//
// Two limits, both documented in docs/security.md: the kernel passes no
// supplementary groups through FUSE, so a mount's caller is judged by its
// uid and primary gid; and a change the client makes on several
// partitions in turn is checked step by step, so a client may drop a link
// count (Link with a negative delta) only on an inode it owns or may
// write.

// mappedCred is the caller of cred as the cluster sees it under c:
// nobody when the client named no caller.
func mappedCred(c capability.Caps, cred *metapb.Cred) perm.Cred {
	if cred == nil {
		return perm.Cred{Uid: capability.Nobody, Gid: capability.Nobody}
	}
	out := perm.Cred{Uid: c.UID(cred.GetUid()), Gid: c.GID(cred.GetGid())}
	for _, g := range cred.GetGroups() {
		out.Groups = append(out.Groups, c.GID(g))
	}
	return out
}

// protoCred is cred on the wire.
func protoCred(c perm.Cred) *metapb.Cred {
	return &metapb.Cred{Uid: c.Uid, Gid: c.Gid, Groups: c.Groups}
}

// ownNew makes a new inode belong to the mapped caller.
func ownNew(c capability.Caps, cred perm.Cred, uid, gid, mode *uint32) {
	*uid = cred.Uid
	*gid = c.OwnerGID(*gid)
	if *gid == 0 && c.RootSquash {
		*gid = cred.Gid // root's group comes from the caller, squashed with it
	}
	if !perm.KeepsSetgid(cred, *gid) {
		*mode &^= syscall.S_ISGID
	}
}

// mapPath maps a path request's caller and new inode for an id-mapping
// client, and checks a by-inode request's parent directory. It returns
// the parent directory's entry for a by-inode request (for the sticky
// check of an unlink), or a refusal.
func (s *service) mapPath(ctx context.Context, p *partition, req *metapb.PathRequest) (dir *dirInfo, r *refusal) {
	c := capability.FromContext(ctx)
	if !c.MapsIDs() {
		return nil, nil
	}
	cred := mappedCred(c, req.Cred)
	req.Cred = protoCred(cred)
	if ci := req.Create; ci != nil {
		ownNew(c, cred, &ci.Uid, &ci.Gid, &ci.Mode)
	}
	if req.ParentIno == 0 {
		return nil, nil // the resolution checks every directory
	}
	want := uint32(perm.Exec)
	if req.Op != metapb.PathOp_PATH_OP_LOOKUP {
		want |= perm.Write
	}
	d, r := s.checkDir(ctx, p, cred, req.ParentIno, want)
	return d, r
}

// dirInfo is a directory as a permission check sees it.
type dirInfo struct {
	ino  uint64
	attr perm.Attr
}

// checkDir refuses (EACCES) unless cred has want on directory ino.
func (s *service) checkDir(ctx context.Context, p *partition, cred perm.Cred, ino uint64, want uint32) (*dirInfo, *refusal) {
	e, ok, err := s.dirOf(ctx, p, ino)
	switch {
	case err != nil:
		return nil, refuse(metapb.EAGAIN, "directory %d: %v", ino, err)
	case !ok:
		return nil, refuse(metapb.ENOENT, "directory %d does not exist", ino)
	case !perm.Allowed(cred, e.Mode, e.Uid, e.Gid, want):
		return nil, refuse(metapb.EACCES, "permission denied on directory %d", ino)
	}
	return &dirInfo{ino: ino, attr: perm.Attr{Mode: e.Mode, Uid: e.Uid, Gid: e.Gid}}, nil
}

// inodeAttr is inode ino's mode and owner, read here or at its home.
func (s *service) inodeAttr(ctx context.Context, p *partition, ino uint64) (perm.Attr, *refusal) {
	var (
		in    *metapb.Inode
		local bool
	)
	p.sm.read(func(mp *metapartition.Partition) {
		if local = mp.Holds(ino); local {
			in, _ = mp.GetInode(ino)
		}
	})
	if !local {
		var err error
		if in, err = s.fetchKept(ctx, p, ino); err != nil {
			return perm.Attr{}, refuse(metapb.EAGAIN, "inode %d: %v", ino, err)
		}
	}
	if in == nil {
		return perm.Attr{}, refuse(metapb.ENOENT, "inode %d does not exist", ino)
	}
	return perm.Attr{Mode: in.GetMode() | in.GetType().ModeBits(), Uid: in.GetUid(), Gid: in.GetGid()}, nil
}

// mayAccess reports whether the caller cred may access inode in as access
// asks (an open): always for a client whose ids are not mapped (its own
// checks count), else as Linux decides for the mapped caller.
func mayAccess(ctx context.Context, cred *metapb.Cred, in *metapb.Inode, access uint32) bool {
	c := capability.FromContext(ctx)
	if !c.MapsIDs() {
		return true
	}
	return perm.Allowed(mappedCred(c, cred), in.GetMode()|in.GetType().ModeBits(), in.GetUid(), in.GetGid(), access)
}

// checkTxn maps the ids of an id-mapping client's Txn (new inodes, owners
// set) and checks each of its changes against the mapped caller.
func (s *service) checkTxn(ctx context.Context, p *partition, req *metapb.TxnRequest) *refusal {
	c := capability.FromContext(ctx)
	if !c.MapsIDs() {
		return nil
	}
	cred := mappedCred(c, req.Cred)
	for _, op := range req.GetTxn().GetOps() {
		var r *refusal
		switch o := op.GetOp().(type) {
		case *metapb.Op_CreateInode:
			if ci := o.CreateInode; ci != nil { // nil: the partition refuses it
				ownNew(c, cred, &ci.Uid, &ci.Gid, &ci.Mode)
			}
		case *metapb.Op_CreateDentry:
			_, r = s.checkDir(ctx, p, cred, o.CreateDentry.GetParent(), perm.Write|perm.Exec)
		case *metapb.Op_DeleteDentry:
			r = s.checkRemove(ctx, p, cred, o.DeleteDentry.GetParent(), string(o.DeleteDentry.GetName()))
		case *metapb.Op_ReplaceDentry:
			r = s.checkRemove(ctx, p, cred, o.ReplaceDentry.GetParent(), string(o.ReplaceDentry.GetName()))
		case *metapb.Op_TouchDir:
			_, r = s.checkDir(ctx, p, cred, o.TouchDir.GetIno(), perm.Write|perm.Exec)
		case *metapb.Op_Fence:
			if o.Fence.GetLock() {
				// A namespace lock for a chmod or chown of the directory,
				// whose Setattr is checked in its turn.
				r = s.checkOwnOrWrite(ctx, p, cred, o.Fence.GetParent(), "lock")
			} else {
				r = s.checkFence(ctx, p, cred, o.Fence.GetParent())
			}
		case *metapb.Op_Unfence:
			// Its token names the fence: only who placed it knows it.
		case *metapb.Op_Setattr:
			r = s.checkSetattr(ctx, p, c, cred, o.Setattr)
		case *metapb.Op_Link:
			if o.Link.GetDelta() < 0 {
				r = s.checkOwnOrWrite(ctx, p, cred, o.Link.GetIno(), "drop a link of")
			}
		case *metapb.Op_SetXattr:
			r = s.checkXattr(ctx, p, cred, o.SetXattr.GetIno(), o.SetXattr.GetName())
		case *metapb.Op_RemoveXattr:
			r = s.checkXattr(ctx, p, cred, o.RemoveXattr.GetIno(), o.RemoveXattr.GetName())
		case *metapb.Op_AppendExtents:
			r = s.checkOwnOrWrite(ctx, p, cred, o.AppendExtents.GetIno(), "write to")
		case *metapb.Op_SpliceChunks:
			r = s.checkOwnOrWrite(ctx, p, cred, o.SpliceChunks.GetIno(), "write to")
		}
		if r != nil {
			return r
		}
	}
	return nil
}

// checkRemove: removing or replacing name in parent needs write and search
// on parent, and in a sticky directory to own the name's inode or the
// directory.
func (s *service) checkRemove(ctx context.Context, p *partition, cred perm.Cred, parent uint64, name string) *refusal {
	d, r := s.checkDir(ctx, p, cred, parent, perm.Write|perm.Exec)
	if r != nil || d.attr.Mode&syscall.S_ISVTX == 0 || cred.Uid == 0 {
		return r
	}
	var victim uint64
	p.sm.read(func(mp *metapartition.Partition) {
		if dn, _, e := mp.Lookup(parent, name); e == metapb.OK {
			victim = dn.GetIno()
		}
	})
	if victim == 0 {
		return nil // nothing to remove: the Txn answers ENOENT
	}
	a, r := s.inodeAttr(ctx, p, victim)
	if r != nil {
		return r
	}
	if !perm.MayDelete(cred, d.attr.Mode, d.attr.Uid, a.Uid) {
		return refuse(metapb.EPERM, "%q in sticky directory %d belongs to another user", name, parent)
	}
	return nil
}

// checkFence: a fence holds a directory being removed or moved, which
// needs write and search on the directory that names it.
func (s *service) checkFence(ctx context.Context, p *partition, cred perm.Cred, dir uint64) *refusal {
	up, ok := s.knownParent(p, dir)
	if !ok {
		var err error
		if up, ok, err = s.fetchParent(ctx, p, dir); err != nil {
			return refuse(metapb.EAGAIN, "directory %d: %v", dir, err)
		}
	}
	if !ok || up == 0 {
		return refuse(metapb.EACCES, "directory %d has no parent to check", dir)
	}
	_, r := s.checkDir(ctx, p, cred, up, perm.Write|perm.Exec)
	return r
}

// checkSetattr maps the owner a Setattr sets and checks each change as
// Linux's setattr_prepare does.
func (s *service) checkSetattr(ctx context.Context, p *partition, c capability.Caps, cred perm.Cred, m *metapb.Setattr) *refusal {
	has := func(b metapb.SetattrValid) bool { return m.GetValid()&uint32(b) != 0 }
	if has(metapb.SetattrValid_SETATTR_UID) {
		m.Uid = c.OwnerUID(m.Uid)
	}
	if has(metapb.SetattrValid_SETATTR_GID) {
		m.Gid = c.OwnerGID(m.Gid)
	}
	a, r := s.inodeAttr(ctx, p, m.GetIno())
	if r != nil {
		return r
	}
	check := func(e int, what string) *refusal {
		if e == 0 {
			return nil
		}
		return refuse(metapb.Errno(e), "%s of inode %d: not allowed to user %d", what, m.GetIno(), cred.Uid)
	}
	if has(metapb.SetattrValid_SETATTR_MODE) {
		if r := check(perm.Chmod(cred, a), "chmod"); r != nil {
			return r
		}
		if !perm.KeepsSetgid(cred, a.Gid) {
			m.Mode &^= syscall.S_ISGID
		}
	}
	if has(metapb.SetattrValid_SETATTR_UID) || has(metapb.SetattrValid_SETATTR_GID) {
		uid, gid := a.Uid, a.Gid
		if has(metapb.SetattrValid_SETATTR_UID) {
			uid = m.Uid
		}
		if has(metapb.SetattrValid_SETATTR_GID) {
			gid = m.Gid
		}
		if r := check(perm.Chown(cred, a, uid, gid), "chown"); r != nil {
			return r
		}
	}
	// Writes and truncations come from files already open, which Linux
	// lets their opener finish whatever the mode became (git writes its
	// objects 0444): the owner may, as anyone with write permission.
	if has(metapb.SetattrValid_SETATTR_SIZE) && cred.Uid != 0 && cred.Uid != a.Uid && !perm.Allowed(cred, a.Mode, a.Uid, a.Gid, perm.Write) {
		return check(perm.EACCES, "truncate")
	}
	if has(metapb.SetattrValid_SETATTR_PARENT) {
		// A rename's move of the pointer: write and search on the old
		// directory and the new one, as the rename itself needs.
		old, ok := s.knownParent(p, m.GetIno())
		if !ok {
			return refuse(metapb.EAGAIN, "inode %d: its directory is unknown here", m.GetIno())
		}
		for _, dir := range []uint64{old, m.GetParent()} {
			if _, r := s.checkDir(ctx, p, cred, dir, perm.Write|perm.Exec); r != nil {
				return r
			}
		}
	}
	explicit := has(metapb.SetattrValid_SETATTR_ATIME) && !has(metapb.SetattrValid_SETATTR_ATIME_NOW) ||
		has(metapb.SetattrValid_SETATTR_MTIME) && !has(metapb.SetattrValid_SETATTR_MTIME_NOW) || has(metapb.SetattrValid_SETATTR_CTIME)
	now := has(metapb.SetattrValid_SETATTR_ATIME_NOW) || has(metapb.SetattrValid_SETATTR_MTIME_NOW)
	if explicit || now {
		if r := check(perm.Times(cred, a, !explicit), "utimes"); r != nil {
			return r
		}
	}
	return nil
}

// checkOwnOrWrite refuses (EACCES) unless cred owns inode ino or may
// write it.
func (s *service) checkOwnOrWrite(ctx context.Context, p *partition, cred perm.Cred, ino uint64, what string) *refusal {
	a, r := s.inodeAttr(ctx, p, ino)
	if r != nil {
		return r
	}
	if cred.Uid == 0 || cred.Uid == a.Uid || perm.Allowed(cred, a.Mode, a.Uid, a.Gid, perm.Write) {
		return nil
	}
	return refuse(metapb.EACCES, "%s inode %d: not allowed to user %d", what, ino, cred.Uid)
}

// checkXattr checks a change of extended attribute name of inode ino.
func (s *service) checkXattr(ctx context.Context, p *partition, cred perm.Cred, ino uint64, name string) *refusal {
	a, r := s.inodeAttr(ctx, p, ino)
	if r != nil {
		return r
	}
	if e := perm.Xattr(cred, a, name); e != 0 {
		return refuse(metapb.Errno(e), "extended attribute %q of inode %d: not allowed to user %d", name, ino, cred.Uid)
	}
	return nil
}
