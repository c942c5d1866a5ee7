package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// ---- Op constructors. ----

func opCreateInode(m *metapb.CreateInode) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: m}}
}

func opCreateDentry(parent uint64, name string, ino uint64, t metapb.FileType) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: parent, Name: []byte(name), Ino: ino, Type: t}}}
}

func opDeleteDentry(parent uint64, name string, expectIno uint64, expectType metapb.FileType) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: parent, Name: []byte(name), ExpectIno: expectIno, ExpectType: expectType}}}
}

func opReplaceDentry(parent uint64, name string, ino uint64, t metapb.FileType, expectIno uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{Parent: parent, Name: []byte(name), Ino: ino, Type: t, ExpectIno: expectIno}}}
}

func opLink(ino uint64, delta int32) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: delta}}}
}

func opTouchDir(ino uint64, delta int32, opID uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: ino, NlinkDelta: delta, OpId: opID}}}
}

func opEvict(ino uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: ino}}}
}

func opSetattr(m *metapb.Setattr) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_Setattr{Setattr: m}}
}

func opSetParent(ino, parent uint64) *metapb.Op {
	return opSetattr(&metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_PARENT), Parent: parent})
}

// ---- Reads. ----

// getInode reads ino from its home partition.
func (v *Volume) getInode(ctx context.Context, op string, ino uint64) (*metapb.Inode, error) {
	var resp *metapb.GetInodeResponse
	err := v.do(ctx, op, byIno(ino), func(ctx context.Context, p *pb.Partition) (err error) {
		resp, err = v.meta.GetInode(ctx, p, ino)
		return err
	})
	if err != nil {
		return nil, err
	}
	if e := resp.GetErrno(); e != 0 {
		return nil, errnoErr(op, syscall.Errno(e), "inode %d", ino)
	}
	return resp.GetInode(), nil
}

// checkDir fails with ENOENT if dir does not exist (or has no links) and
// ENOTDIR if it is not a directory.
func (v *Volume) checkDir(ctx context.Context, op string, dir uint64) error {
	in, err := v.getInode(ctx, op, dir)
	switch {
	case err != nil:
		return err
	case in.GetNlink() == 0:
		return errnoErr(op, syscall.ENOENT, "directory %d is removed", dir)
	case !isDirType(in.GetType()):
		return errnoErr(op, syscall.ENOTDIR, "inode %d is not a directory", dir)
	}
	return nil
}

// lookupDentry finds (parent, name). It returns a nil dentry and a nil
// error when the name does not exist in an existing directory parent; an
// error (ENOENT, ENOTDIR) when parent is not an existing directory. The
// inode is set when it lives on the dentry's partition.
func (v *Volume) lookupDentry(ctx context.Context, op string, parent uint64, name string) (*metapb.Dentry, *metapb.Inode, error) {
	return v.lookupDentryIn(ctx, op, parent, name, false)
}

// lookupDentryIn is lookupDentry; with parentIsDir (the caller knows parent
// is a directory) a missing name costs no second request.
func (v *Volume) lookupDentryIn(ctx context.Context, op string, parent uint64, name string, parentIsDir bool) (*metapb.Dentry, *metapb.Inode, error) {
	var resp *metapb.LookupResponse
	err := v.do(ctx, op, byName(parent, name), func(ctx context.Context, p *pb.Partition) (err error) {
		resp, err = v.meta.Lookup(ctx, p, parent, name)
		if err == nil {
			err = routingCheck(resp.GetErrno(), p.GetId(), "")
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	switch e := syscall.Errno(resp.GetErrno()); e {
	case 0:
		return resp.GetDentry(), resp.GetInode(), nil
	case syscall.ENOENT:
		if parentIsDir {
			return nil, nil, nil
		}
		if err := v.checkDir(ctx, op, parent); err != nil {
			return nil, nil, err
		}
		return nil, nil, nil
	default:
		return nil, nil, errnoErr(op, e, "%d/%q", parent, name)
	}
}

// Lookup returns the attributes of the inode named name in directory
// parent: ENOENT if there is no such name or no such parent, ENOTDIR if
// parent is not a directory, EINVAL/ENAMETOOLONG for a bad name. One
// request when the name exists; a missing name costs a second one, which
// tells ENOENT from ENOTDIR (see LookupChild).
func (v *Volume) Lookup(ctx context.Context, parent uint64, name string) (*Attr, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	a, err := v.lookupChild(ctx, parent, name)
	if isErrno(err, syscall.ENOENT) {
		if cerr := v.checkDir(ctx, "lookup", parent); cerr != nil {
			return nil, cerr
		}
	}
	return a, err
}

// LookupChild is Lookup for a caller that knows parent to be a directory
// (a FUSE mount: the kernel looks names up only in directories it holds,
// and answers ENOENT itself in a removed one): always one request. A
// missing name is ENOENT without checking parent, so a parent that is not
// a directory (or is gone) also gives ENOENT. A name whose inode is homed
// on another partition (renamed or hard-linked) is completed by the
// name's partition.
func (v *Volume) LookupChild(ctx context.Context, parent uint64, name string) (*Attr, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	return v.lookupChild(ctx, parent, name)
}

func (v *Volume) lookupChild(ctx context.Context, parent uint64, name string) (*Attr, error) {
	const op = "lookup"
	if err := checkName(op, name); err != nil {
		return nil, err
	}
	resp, err := v.nameReq(ctx, op, parent, name, &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP})
	if err != nil {
		return nil, err
	}
	if e := syscall.Errno(resp.GetErrno()); e != 0 {
		return nil, errnoErr(op, e, "%d/%q", parent, name)
	}
	in := resp.GetInode()
	if in == nil {
		// The inode's home did not answer the name's partition: ask it.
		if in, err = v.getInode(ctx, op, resp.GetDentry().GetIno()); err != nil {
			return nil, err
		}
	}
	return toAttr(in), nil
}

// GetAttr returns ino's attributes, read from its home partition (ENOENT if
// it does not exist).
func (v *Volume) GetAttr(ctx context.Context, ino uint64) (*Attr, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	in, err := v.getInode(ctx, "getattr", ino)
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
}

// Readlink returns a symlink's target: EINVAL if ino is not a symlink.
func (v *Volume) Readlink(ctx context.Context, ino uint64) (string, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	in, err := v.getInode(ctx, "readlink", ino)
	if err != nil {
		return "", err
	}
	if in.GetType() != metapb.FileType_FILE_TYPE_SYMLINK {
		return "", errnoErr("readlink", syscall.EINVAL, "inode %d is not a symlink", ino)
	}
	return string(in.GetTarget()), nil
}

// ---- Creating names. ----

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
	if isDirType(ci.Type) {
		ci.Parent = parent
	}
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
	_, rest, derr := v.nameStep(ctx, op, parent, name, []*metapb.Op{opDeleteDentry(parent, name, ino, 0)},
		[]homedOp{{ino, opLink(ino, -int32(in.GetNlink()))}, {ino, opEvict(ino)}})
	if derr == nil {
		_, _ = v.runHomed(ctx, op, rest)
	}
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
		ops := []*metapb.Op{opLink(ino, 1), create}
		if ph.GetId() == p.GetId() {
			ops = append(ops, touch)
		}
		res, err := v.txn(ctx, op, pinned(p.GetId(), nameKey{newParent, newName}), ops...)
		if err != nil {
			return nil, err
		}
		if ph.GetId() != p.GetId() {
			_, _ = v.txn(ctx, op, byIno(newParent), touch)
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
	_, rest, err := v.nameStep(ctx, op, newParent, newName, []*metapb.Op{create}, []homedOp{{newParent, touch}})
	if err != nil {
		v.dropLinks(ctx, op, ino, 1)
		return nil, err
	}
	_, _ = v.runHomed(ctx, op, rest)
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

// ---- Removing names. ----

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
	v.afterUnlink(ctx, op, req, resp)
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

// afterUnlink runs what an unlink's partition reported undone: the Link -1
// of the inode (with the request id the partition used), the Evict at 0
// links (deferred to the last Close of a file open here), the parent's
// TouchDir (same op id). Failures leave a link count too high or a stale
// parent (see the relaxations).
func (v *Volume) afterUnlink(ctx context.Context, op string, req *metapb.PathRequest, resp *metapb.PathResponse) {
	ino := resp.GetDentry().GetIno()
	switch {
	case !resp.GetLinkDropped():
		id := metapartition.FollowUpID(req.RequestId, metapartition.FollowUpLink)
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
		unfence, children, err := v.fenceOn(ctx, op, dir, false, nsOwners(w, parent, name, dir), parts)
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
		unlock, _, err := v.fenceOn(ctx, op, dir, true, nsOwners(w, parent, name, dir), parts)
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

// fenceOn fences dir (lock: with a namespace lock) on every partition of
// parts, first on the owners, then on the others. The owners go first
// because a fenced owner refuses namespace fetches of dir: once it holds
// the fence, no other partition's replica can learn dir's old entry again,
// and the fence on that partition then drops what it learnt before
// (FalconFS §4.3, the owner locks before it invalidates). Another fence on
// dir (EBUSY) is waited for, up to ~1 s. unfence lifts what was placed,
// also after ctx ended. children sums what the partitions answered about
// names under dir (fences only, not locks).
func (v *Volume) fenceOn(ctx context.Context, op string, dir uint64, lock bool, owners map[uint64]bool, parts []*pb.Partition) (unfence func(), children childrenAnswer, err error) {
	token := newID()
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
// directory, ENOTEMPTY if it has names. Order: fence the directory on every
// partition, check each holds no child, DeleteDentry (expect a directory),
// Link -2 and Evict on its home, TouchDir -1 on the parent, unfence.
func (v *Volume) Rmdir(ctx context.Context, parent uint64, name string) error {
	const op = "rmdir"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkName(op, name); err != nil {
		return err
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
	dir := d.GetIno()
	empty, unfence, err := v.fenceEmpty(ctx, op, parent, name, dir)
	if err != nil {
		return err
	}
	if !empty {
		unfence()
		return errnoErr(op, syscall.ENOTEMPTY, "%d/%q", parent, name)
	}
	_, rest, err := v.nameStep(ctx, op, parent, name,
		[]*metapb.Op{opDeleteDentry(parent, name, dir, metapb.FileType_FILE_TYPE_DIRECTORY)},
		[]homedOp{{dir, opLink(dir, -2)}, {dir, opEvict(dir)}, {parent, opTouchDir(parent, -1, newID())}})
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
	// Best effort, each on its own and side by side: a failure leaves a
	// leak fsck reports (the inode) or a stale parent (mtime, nlink).
	var dirOps, parentOps []homedOp
	for _, h := range rest {
		if h.ino == dir {
			dirOps = append(dirOps, h)
		} else {
			parentOps = append(parentOps, h)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = v.runHomed(ctx, op, dirOps)
	}()
	_, _ = v.runHomed(ctx, op, parentOps)
	wg.Wait()
	return nil
}

// ---- Attributes. ----

// Setattr changes the attributes in.Valid selects on ino's home and returns
// the new attributes. SetSize truncates (EISDIR for a directory, EINVAL for
// other non-regular files) and cuts the extent map; *Now bits win over the
// explicit times. A change of owner clears setuid, and setgid if group
// execute is set, on regular files, unless the mode is set in the same call
// (as chown(2)).
func (v *Volume) Setattr(ctx context.Context, ino uint64, in SetattrIn) (*Attr, error) {
	const op = "setattr"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if in.Valid&^setattrAll != 0 {
		return nil, errnoErr(op, syscall.EINVAL, "unknown setattr bits %#x", uint32(in.Valid&^setattrAll))
	}
	m := &metapb.Setattr{Ino: ino, Valid: uint32(in.Valid), Mode: in.Mode & 0o7777, Uid: in.Uid, Gid: in.Gid, Size: in.Size}
	if in.Valid&SetAtime != 0 {
		m.AtimeNs = in.Atime.UnixNano()
	}
	if in.Valid&SetMtime != 0 {
		m.MtimeNs = in.Mtime.UnixNano()
	}
	if in.Valid&SetCtime != 0 {
		m.CtimeNs = in.Ctime.UnixNano()
	}
	if in.Valid&(SetUID|SetGID) != 0 && in.Valid&SetMode == 0 {
		cur, err := v.getInode(ctx, op, ino)
		if err != nil {
			return nil, err
		}
		mode := cur.GetMode()
		if cur.GetType() == metapb.FileType_FILE_TYPE_REGULAR {
			mode &^= syscall.S_ISUID
			if mode&syscall.S_IXGRP != 0 {
				mode &^= syscall.S_ISGID
			}
		}
		if mode != cur.GetMode() {
			m.Valid |= uint32(SetMode)
			m.Mode = mode
		}
	}
	// A directory's mode or owner decides who may search it, which every
	// partition's namespace replica caches: the change is made under a
	// namespace lock. Other inodes change in one step; the partition
	// refuses the step for a directory (EISDIR), so files cost no lookup.
	m.RefuseDir = in.Valid&(SetMode|SetUID|SetGID) != 0
	res, err := v.txn(ctx, op, byIno(ino), opSetattr(m))
	if m.RefuseDir && isErrno(err, syscall.EISDIR) && in.Valid&SetSize == 0 {
		unlock, lerr := v.nsLock(ctx, op, 0, "", ino)
		if lerr != nil {
			return nil, lerr
		}
		defer unlock()
		m.RefuseDir = false
		res, err = v.txn(ctx, op, byIno(ino), opSetattr(m))
	}
	if err != nil {
		return nil, err
	}
	return toAttr(res.GetResults()[0].GetInode()), nil
}

// ---- Listing. ----

// ReadDir lists up to limit names of directory dir after the name cursor
// ("" from the start), merged by name (byte order) across all meta
// partitions of the volume, which are asked in parallel. Pass the last name
// returned as the next cursor; more reports whether names may follow. The
// cursor stays valid across concurrent changes: names created behind it
// are not returned, removed ones are skipped. "." and ".." are not listed.
// limit <= 0 means 1024; it is capped at 4096.
func (v *Volume) ReadDir(ctx context.Context, dir uint64, cursor string, limit int) (entries []DirEntry, more bool, err error) {
	return v.readDir(ctx, "readdir", dir, cursor, limit, false)
}

// ReadDirPlus is ReadDir with each entry's attributes (Attr). Inodes homed
// on another partition than their name are fetched from their homes in
// parallel; a name whose inode vanished meanwhile (a racing unlink) is left
// out.
func (v *Volume) ReadDirPlus(ctx context.Context, dir uint64, cursor string, limit int) (entries []DirEntry, more bool, err error) {
	return v.readDir(ctx, "readdirplus", dir, cursor, limit, true)
}

func (v *Volume) readDir(ctx context.Context, op string, dir uint64, cursor string, limit int, plus bool) ([]DirEntry, bool, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if limit <= 0 {
		limit = 1024
	}
	limit = min(limit, 4096)
	if cursor == "" {
		if err := v.checkDir(ctx, op, dir); err != nil {
			return nil, false, err
		}
	}
	resps, _, err := v.dirPage(ctx, op, dir, cursor, limit, plus)
	if err != nil {
		return nil, false, err
	}
	more := false
	var ds []*metapb.Dentry
	inodes := map[uint64]*metapb.Inode{}
	for _, r := range resps {
		more = more || r.GetMore()
		ds = append(ds, r.GetDentries()...)
		for _, in := range r.GetInodes() {
			inodes[in.GetIno()] = in
		}
	}
	slices.SortFunc(ds, func(a, b *metapb.Dentry) int { return strings.Compare(string(a.GetName()), string(b.GetName())) })
	if len(ds) > limit {
		ds, more = ds[:limit], true
	}
	out := make([]DirEntry, len(ds))
	for i, d := range ds {
		out[i] = DirEntry{Name: string(d.GetName()), Ino: d.GetIno(), Type: typeBits(d.GetType())}
	}
	if !plus {
		return out, more, nil
	}
	// Fetch the inodes homed elsewhere, fanOut at a time.
	sem := make(chan struct{}, fanOut)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range out {
		if in, ok := inodes[out[i].Ino]; ok {
			out[i].Attr = toAttr(in)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			in, err := v.getInode(ctx, op, out[i].Ino)
			switch {
			case err == nil:
				out[i].Attr = toAttr(in)
			case !isErrno(err, syscall.ENOENT):
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, false, firstErr
	}
	kept := out[:0]
	for _, e := range out {
		if e.Attr != nil {
			kept = append(kept, e)
		}
	}
	return kept, more, nil
}

// ---- Extended attributes. ----

// xattrNamespaces are the namespaces Linux knows; others are EOPNOTSUPP.
var xattrNamespaces = []string{"user.", "trusted.", "security.", "system."}

func checkXattrNamespace(op, name string) error {
	for _, ns := range xattrNamespaces {
		switch {
		case name == ns:
			return errnoErr(op, syscall.EINVAL, "xattr name %q is only a namespace", name)
		case strings.HasPrefix(name, ns):
			return nil
		}
	}
	if name == "" || len(name) > 255 {
		return errnoErr(op, syscall.ERANGE, "xattr name of %d bytes", len(name))
	}
	return errnoErr(op, syscall.EOPNOTSUPP, "xattr name %q is in no known namespace", name)
}

// GetXattr returns the value of ino's xattr name: ENODATA if it has none.
func (v *Volume) GetXattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	const op = "getxattr"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkXattrNamespace(op, name); err != nil {
		return nil, err
	}
	in, err := v.getInode(ctx, op, ino)
	if err != nil {
		return nil, err
	}
	val, ok := in.GetXattrs()[name]
	if !ok {
		return nil, errnoErr(op, syscall.ENODATA, "inode %d has no xattr %q", ino, name)
	}
	return val, nil
}

// ListXattr returns the names of ino's xattrs, sorted.
func (v *Volume) ListXattr(ctx context.Context, ino uint64) ([]string, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	in, err := v.getInode(ctx, "listxattr", ino)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(in.GetXattrs()))
	for n := range in.GetXattrs() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// SetXattr sets ino's xattr name to value; flags XattrCreate (EEXIST if it
// exists) or XattrReplace (ENODATA if it does not). Values up to 64 KiB
// (E2BIG), 1 MiB per inode (ENOSPC).
func (v *Volume) SetXattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) error {
	const op = "setxattr"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkXattrNamespace(op, name); err != nil {
		return err
	}
	if name == LayoutAttr {
		if _, err := clustermap.ParseLayout(string(value)); err != nil {
			return errnoErr(op, syscall.EINVAL, "%s: %v", LayoutAttr, err)
		}
		defer v.layouts.forget(ino)
	}
	return v.setXattr(ctx, op, ino, name, value, flags)
}

func (v *Volume) setXattr(ctx context.Context, op string, ino uint64, name string, value []byte, flags uint32) error {
	_, err := v.txn(ctx, op, byIno(ino), &metapb.Op{Op: &metapb.Op_SetXattr{SetXattr: &metapb.SetXattr{Ino: ino, Name: name, Value: value, Flags: flags}}})
	return err
}

// RemoveXattr removes ino's xattr name: ENODATA if it has none.
func (v *Volume) RemoveXattr(ctx context.Context, ino uint64, name string) error {
	const op = "removexattr"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := checkXattrNamespace(op, name); err != nil {
		return err
	}
	if name == LayoutAttr {
		defer v.layouts.forget(ino)
	}
	_, err := v.txn(ctx, op, byIno(ino), &metapb.Op{Op: &metapb.Op_RemoveXattr{RemoveXattr: &metapb.RemoveXattr{Ino: ino, Name: name}}})
	return err
}

// ---- Statistics. ----

// statfsBlock is the block size StatFS reports.
const statfsBlock = 4096

// StatFS sums the partitions' statistics: Files is the number of inodes.
// Blocks is the volume's capacity and BlocksFree what is left of it (at most
// what the data nodes have free); an unlimited volume shows the data nodes'
// disk space divided by its replica count. Usage comes from the master's
// latest heartbeats (a second or two behind).
func (v *Volume) StatFS(ctx context.Context) (*StatFS, error) {
	const op = "statfs"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	w := v.current()
	parts := w.all()
	var mu sync.Mutex
	var inodes uint64
	err := v.each(parts, func(p *pb.Partition) error {
		return v.do(ctx, op, byID(p.GetId()), func(ctx context.Context, p *pb.Partition) error {
			st, err := v.meta.Stats(ctx, p, 0)
			if err == nil {
				mu.Lock()
				inodes += st.GetInodes()
				mu.Unlock()
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	total, free, err := v.spaceFigures(ctx)
	if err != nil {
		return nil, err
	}
	blocks, freeBlocks := total/statfsBlock, free/statfsBlock
	const filesMax = 1 << 40
	return &StatFS{
		BlockSize: statfsBlock, Blocks: blocks, BlocksFree: freeBlocks, BlocksAvail: freeBlocks,
		Files: inodes, FilesFree: filesMax - min(inodes, filesMax), NameLen: 255,
	}, nil
}

// dirPage fetches one page of dir (names after cursor, up to limit each)
// from every partition of the view, and returns the responses once they
// agree on the routing (pagesAgree): pages of partitions at different
// points of a routing change could list a moving name twice or not at all.
// Until they agree the map is re-read and the page fetched again, with
// backoff, until ctx ends (ETIMEDOUT). It also returns the view the page
// was read under.
func (v *Volume) dirPage(ctx context.Context, op string, dir uint64, cursor string, limit int, plus bool) ([]*metapb.ReadDirResponse, *view, error) {
	backoff := routeBackoffMin
	for {
		w := v.current()
		parts := w.all()
		resps := make([]*metapb.ReadDirResponse, len(parts))
		err := v.each(parts, func(p *pb.Partition) error {
			i := slices.Index(parts, p)
			return v.do(ctx, op, byID(p.GetId()), func(ctx context.Context, p *pb.Partition) (err error) {
				resps[i], err = v.meta.ReadDir(ctx, p, dir, cursor, uint32(limit), plus)
				return err
			})
		})
		if err != nil {
			return nil, nil, err
		}
		why := pagesAgree(w.routing, resps)
		if why == "" {
			return resps, w, nil
		}
		v.refresh(ctx)
		select {
		case <-ctx.Done():
			return nil, nil, transportErr(op, fmt.Errorf("%w (listing of %d: %s)", ctx.Err(), dir, why))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, routeBackoffMax)
	}
}

// pagesAgree returns "" if the pages of one listing were served under one
// routing state, (version, change in progress), not newer than the view's
// routing version viewRouting; else why not. A partition that never got a
// routing (version 0) and lists nothing here takes no part: it holds no
// name that could be moving (a new partition before the master's first
// push).
func pagesAgree(viewRouting uint64, resps []*metapb.ReadDirResponse) string {
	type state struct {
		version uint64
		moving  bool
	}
	var first *state
	for _, r := range resps {
		if e := syscall.Errno(r.GetErrno()); e == errnoWrongMP || e == errnoMoving {
			return fmt.Sprintf("a partition answered errno %d", e)
		}
		if r.GetRoutingVersion() == 0 && len(r.GetDentries()) == 0 {
			continue
		}
		s := state{r.GetRoutingVersion(), r.GetRoutingMoving()}
		switch {
		case first == nil:
			first = &s
		case s != *first:
			return fmt.Sprintf("pages at routing %+v and %+v", *first, s)
		}
	}
	// Pages that agree list by one routing: the previous one while a
	// change is in progress (its version is the target's minus one), else
	// the current one. The view must know every partition of that routing,
	// so it may not be older; during a change the master's map still holds
	// the previous routing until the switch, which the view may have.
	if first == nil {
		return ""
	}
	listedBy := first.version
	if first.moving && listedBy > 0 {
		listedBy--
	}
	if listedBy > viewRouting {
		return fmt.Sprintf("pages at routing %+v, the map at version %d", *first, viewRouting)
	}
	return ""
}
