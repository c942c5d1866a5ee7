package client

import (
	"context"
	"syscall"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Creating names: create, mkdir, mknod, symlink and link, each one request
// in the common case, with the parent's touch and the fallbacks for names
// homed away from their inode.

// Create makes a regular file name in parent with permission bits mode
// (after the caller's umask) owned by uid:gid. EEXIST if the name exists.
// Its data layout is the parent's LayoutAttr, else the volume's default.
func (v *Volume) Create(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (*Attr, error) {
	in, err := v.createFile(ctx, parent, name, mode, uid, gid)
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
}

// CreateFile is Create followed by OpenFile(flags) of the new file, opened
// from the inode the create returned: one metadata request in all (a FUSE
// CREATE). O_TRUNC is ignored (the file is new). If the open fails, the
// file exists and its attributes are returned with the error.
func (v *Volume) CreateFile(ctx context.Context, parent uint64, name string, mode, uid, gid uint32, flags int) (*Attr, *File, error) {
	in, err := v.createFile(ctx, parent, name, mode, uid, gid)
	if err != nil {
		return nil, nil, err
	}
	octx, cancel := v.opCtx(ctx)
	defer cancel()
	f, err := v.openInode(octx, "open", in, flags&^syscall.O_TRUNC)
	return toAttr(in), f, err
}

func (v *Volume) createFile(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (*metapb.Inode, error) {
	in, _, err := v.create(ctx, "create", parent, name, &metapb.CreateInode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: mode & 0o7777, Uid: uid, Gid: gid})
	return in, err
}

// Mkdir makes a directory; the parent's link count grows by one. A
// parent's LayoutAttr is copied to the new directory, so that a subtree
// keeps its layout (best effort: if that second step fails, the directory
// exists and its files take the volume's default).
func (v *Volume) Mkdir(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (*Attr, error) {
	const op = "mkdir"
	in, val, err := v.create(ctx, op, parent, name, &metapb.CreateInode{Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: mode & 0o7777, Uid: uid, Gid: gid})
	if err != nil {
		return nil, err
	}
	v.inheritLayout(ctx, op, in.GetIno(), val)
	return toAttr(in), nil
}

// inheritLayout copies a parent's LayoutAttr (val, nil: none) to the new
// directory dir: a second request, only when the parent has one. It is
// not noted as a change this client's next creates must wait out
// (dirLayouts.forget): a partition knows the new directory's attribute
// only if a create in it came between the two steps.
func (v *Volume) inheritLayout(ctx context.Context, op string, dir uint64, val []byte) {
	if val == nil {
		return
	}
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := v.setXattr(ctx, op, dir, LayoutAttr, val, 0); err == nil {
		v.layouts.put(dir, val)
	}
}

// Mknod makes a regular file, fifo, socket or character/block device; the
// type comes from mode's S_IFMT bits (0 is a regular file) and rdev applies
// to devices only. A directory or symlink type is EINVAL (use Mkdir or
// Symlink).
func (v *Volume) Mknod(ctx context.Context, parent uint64, name string, mode uint32, rdev uint64, uid, gid uint32) (*Attr, error) {
	t, ok := fileType(mode)
	if !ok || t == metapb.FileType_FILE_TYPE_DIRECTORY || t == metapb.FileType_FILE_TYPE_SYMLINK {
		return nil, errnoErr("mknod", syscall.EINVAL, "mode %#o", mode)
	}
	if t != metapb.FileType_FILE_TYPE_CHAR_DEVICE && t != metapb.FileType_FILE_TYPE_BLOCK_DEVICE {
		rdev = 0
	}
	in, _, err := v.create(ctx, "mknod", parent, name, &metapb.CreateInode{Type: t, Mode: mode & 0o7777, Rdev: rdev, Uid: uid, Gid: gid})
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
}

// Symlink makes a symbolic link name -> target (1..4096 bytes, no NUL).
func (v *Volume) Symlink(ctx context.Context, parent uint64, name, target string, uid, gid uint32) (*Attr, error) {
	in, _, err := v.create(ctx, "symlink", parent, name, &metapb.CreateInode{Type: metapb.FileType_FILE_TYPE_SYMLINK, Mode: 0o777, Target: []byte(target), Uid: uid, Gid: gid})
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
}

// create makes the inode ci describes under (parent, name) with one
// request to the partition the name routes to (a by-inode CREATE,
// PathRequest.parent_ino). That partition makes the inode and the name in
// one Txn, with the parent's TouchDir in it when the parent is homed
// there; else it sends the TouchDir to the parent's home itself (see
// docs/design.md): a parent found removed (ENOENT) or not a directory
// (ENOTDIR) takes the create back and fails it. Only when the partition
// could not reach the parent's home does the client send that TouchDir
// (same op id). A regular file's layout is the parent's LayoutAttr, which
// the partition reads (and returns, val, for a new directory to copy;
// nil: none). When the name's partition has no inode number left (its
// range was cut by growth), the inode is made on another partition first
// (createElsewhere).
func (v *Volume) create(ctx context.Context, op string, parent uint64, name string, ci *metapb.CreateInode) (in *metapb.Inode, val []byte, err error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkName(op, name); err != nil {
		return nil, nil, err
	}
	ci.Parent = parent // every inode knows its first directory (metapb.Inode.parent)
	inherit := v.hasLayouts()
	if inherit && v.layouts.changedRecently(parent) {
		// This client changed the parent's LayoutAttr moments ago: the
		// partition may remember the old one, so read it here.
		inherit = false
		if val, err = v.dirLayoutAttr(ctx, op, parent); err != nil {
			return nil, nil, err
		}
		if ci.Type == metapb.FileType_FILE_TYPE_REGULAR {
			ci.Layout = v.layoutOf(val)
		}
	}
	req := &metapb.PathRequest{
		Op:        metapb.PathOp_PATH_OP_CREATE,
		Create:    &metapb.Inode{Type: ci.Type, Mode: ci.Mode, Uid: ci.Uid, Gid: ci.Gid, Rdev: ci.Rdev, Target: ci.Target, Layout: ci.Layout},
		RequestId: newID(), OpId: newID(), InheritLayout: inherit,
	}
	resp, err := v.nameReq(ctx, op, parent, name, req)
	if err != nil {
		return nil, nil, err
	}
	switch e := syscall.Errno(resp.GetErrno()); e {
	case 0:
	case syscall.ENOSPC:
		if inherit {
			if val, err = v.dirLayoutAttr(ctx, op, parent); err != nil {
				return nil, nil, err
			}
			if ci.Type == metapb.FileType_FILE_TYPE_REGULAR {
				ci.Layout = v.layoutOf(val)
			}
		}
		in, err = v.createElsewhere(ctx, op, parent, name, ci, v.RouteName(parent, name))
		return in, val, err
	default:
		return nil, nil, &Error{Op: op, Errno: e, Msg: resp.GetMessage()}
	}
	if inherit && len(resp.GetLayoutAttr()) > 0 {
		val = resp.GetLayoutAttr()
	}
	in = resp.GetInode()
	if resp.GetParentTouched() {
		noteAttrs(ctx, resp.GetParentAttrs())
	} else {
		touch := v.createTouch(parent, ci)
		touch.GetTouchDir().OpId = req.OpId
		if err := v.touchAfterCreate(ctx, op, parent, name, in, touch); err != nil {
			return nil, nil, err
		}
	}
	return in, val, nil
}

// createTouch is the parent's TouchDir of a create (nlink +1 for a
// directory).
func (v *Volume) createTouch(parent uint64, ci *metapb.CreateInode) *metapb.Op {
	var delta int32
	if isDirType(ci.Type) {
		delta = 1
	}
	return opTouchDir(parent, delta, newID())
}

// touchAfterCreate runs the parent's TouchDir on its home after the name
// was made elsewhere. If the parent was removed after the check, the name
// and its inode are taken back and the create fails with ENOENT. Other
// failures leave the parent's mtime/nlink stale (see the package's
// relaxations); the name exists, so the create succeeded.
func (v *Volume) touchAfterCreate(ctx context.Context, op string, parent uint64, name string, in *metapb.Inode, touch *metapb.Op) error {
	_, err := v.txn(ctx, op, byIno(parent), touch)
	if !isErrno(err, syscall.ENOENT) && !isErrno(err, syscall.ENOTDIR) {
		return nil
	}
	ino := in.GetIno()
	_, _, _ = v.nameStepThen(ctx, op, parent, name, []*metapb.Op{opDeleteDentry(parent, name, ino, 0)},
		[]homedOp{{ino, opLink(ino, -int32(in.GetNlink()))}, {ino, opEvict(ino)}})
	return errnoErr(op, syscall.ENOENT, "parent %d was removed", parent)
}

// createElsewhere makes the inode on another partition than the name's
// (full) one, the open-ended one first, then the name, as a hard link
// would: a crash in between leaves an orphan inode, never a name without
// an inode. A failed name step takes the inode back.
func (v *Volume) createElsewhere(ctx context.Context, op string, parent uint64, name string, ci *metapb.CreateInode, full uint64) (*metapb.Inode, error) {
	if err := v.checkDir(ctx, op, parent); err != nil {
		return nil, err
	}
	w := v.current()
	var in *metapb.Inode
	var err error
	for i := len(w.byStart) - 1; i >= 0 && in == nil; i-- {
		p := w.byStart[i]
		if p.GetId() == full {
			continue
		}
		var res *metapb.TxnResult
		res, err = v.txn(ctx, op, byID(p.GetId()), opCreateInode(ci))
		switch {
		case err == nil:
			in = res.GetResults()[0].GetInode()
		case !isErrno(err, syscall.ENOSPC):
			return nil, err
		}
	}
	if in == nil {
		if err == nil {
			err = errnoErr(op, syscall.ENOSPC, "no meta partition of volume %q has an inode number left", v.name)
		}
		return nil, err
	}
	ino := in.GetIno()
	undo := func() {
		_, _ = v.runHomed(ctx, op, []homedOp{{ino, opLink(ino, -int32(in.GetNlink()))}, {ino, opEvict(ino)}})
	}
	touch := v.createTouch(parent, ci)
	_, rest, err := v.nameStep(ctx, op, parent, name, []*metapb.Op{opCreateDentry(parent, name, ino, ci.Type)}, []homedOp{{parent, touch}})
	if err != nil {
		undo()
		return nil, err
	}
	if len(rest) > 0 {
		if err := v.touchAfterCreate(ctx, op, parent, name, in, touch); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// Link gives inode ino the additional name newName in newParent: EPERM for
// a directory, EEXIST if the name exists. Order: Link +1 on the inode's
// home, then CreateDentry (one Txn when both are on one partition); a
// failed CreateDentry drops the link again.
func (v *Volume) Link(ctx context.Context, ino, newParent uint64, newName string) (*Attr, error) {
	const op = "link"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkName(op, newName); err != nil {
		return nil, err
	}
	in, err := v.getInode(ctx, op, ino)
	if err != nil {
		return nil, err
	}
	if in.GetNlink() == 0 {
		return nil, errnoErr(op, syscall.ENOENT, "inode %d has no links", ino)
	}
	if isDirType(in.GetType()) {
		// link(2) resolves the new name first: EEXIST/ENOENT/ENOTDIR win.
		d, _, err := v.lookupDentry(ctx, op, newParent, newName)
		if err != nil {
			return nil, err
		}
		if d != nil {
			return nil, errnoErr(op, syscall.EEXIST, "%d/%q", newParent, newName)
		}
		return nil, errnoErr(op, syscall.EPERM, "inode %d is a directory", ino)
	}
	if in.GetParent() != newParent {
		if err := v.sameQuotas(ctx, op, ino, in.GetParent(), newParent); err != nil {
			return nil, err
		}
	}
	var attr *metapb.Inode
	err = replanned(ctx, op, func() (err error) {
		attr, err = v.linkOnce(ctx, ino, in.GetType(), newParent, newName)
		return err
	})
	if err != nil {
		return nil, err
	}
	return toAttr(attr), nil
}

func (v *Volume) linkOnce(ctx context.Context, ino uint64, typ metapb.FileType, newParent uint64, newName string) (*metapb.Inode, error) {
	const op = "link"
	w := v.current()
	p, err := w.route(newParent, newName)
	if err != nil {
		return nil, &Error{Op: op, Errno: syscall.EIO, Err: err}
	}
	ph, err := w.home(newParent)
	if err != nil {
		return nil, errnoErr(op, syscall.ENOENT, "parent %d", newParent)
	}
	pi, err := w.home(ino)
	if err != nil {
		return nil, err
	}
	if ph.GetId() != p.GetId() {
		if err := v.checkDir(ctx, op, newParent); err != nil {
			return nil, err
		}
	}
	touch := opTouchDir(newParent, 0, newID())
	create := opCreateDentry(newParent, newName, ino, typ)
	if pi.GetId() == p.GetId() {
		// One Txn; a routing change before it applied plans it again.
		ops, then := fold(w, p.GetId(), []*metapb.Op{opLink(ino, 1), create}, []homedOp{{newParent, touch}})
		res, _, err := v.txnThen(ctx, op, pinned(p.GetId(), nameKey{newParent, newName}), ops, then)
		if err != nil {
			return nil, err
		}
		return res.GetResults()[0].GetInode(), nil
	}
	res, err := v.txn(ctx, op, byIno(ino), opLink(ino, 1))
	if err != nil {
		return nil, err
	}
	attr := res.GetResults()[0].GetInode()
	// The link is counted: from here on the name step follows the routing
	// by itself instead of starting over.
	_, _, err = v.nameStepThen(ctx, op, newParent, newName, []*metapb.Op{create}, []homedOp{{newParent, touch}})
	if err != nil {
		v.dropLinks(ctx, op, ino, 1)
		return nil, err
	}
	return attr, nil
}

// dropLinks takes n links from ino on its home and evicts it if none is
// left. Failures leave a link count too high (a leak fsck reports).
func (v *Volume) dropLinks(ctx context.Context, op string, ino uint64, n int32) {
	res, err := v.txn(ctx, op, byIno(ino), opLink(ino, -n))
	if err == nil && res.GetResults()[0].GetInode().GetNlink() == 0 {
		v.evict(ctx, op, ino)
	}
}

// evict removes an inode without links. An inode this Volume has open
// (OpenFile) is evicted when its last File closes instead; handles of
// other clients are not known (see the relaxations).
func (v *Volume) evict(ctx context.Context, op string, ino uint64) {
	if v.deferEvict(ino) {
		return
	}
	_, _ = v.txn(ctx, op, byIno(ino), opEvict(ino))
}
