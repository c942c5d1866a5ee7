package client

import (
	"context"
	"syscall"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
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
	return v.getInodeFor(ctx, op, ino, 0)
}

// getInodeFor is getInode for the caller of ctx (WithCred) about to access
// the inode (perm.Read, Write, Exec): the servers check it for a client
// whose ids they map.
func (v *Volume) getInodeFor(ctx context.Context, op string, ino uint64, access uint32) (*metapb.Inode, error) {
	var resp *metapb.GetInodeResponse
	err := v.do(ctx, op, byIno(ino), func(ctx context.Context, p *pb.Partition) (err error) {
		resp, err = v.meta.GetInodeFor(ctx, p, ino, access)
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

// Access returns inode ino's attributes for the caller of ctx (WithCred)
// about to access it (perm.Read, Write, Exec: an opendir, an open): for a
// client whose ids the servers map, they refuse it with EACCES unless the
// mapped caller may.
func (v *Volume) Access(ctx context.Context, ino uint64, access uint32) (*Attr, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	in, err := v.getInodeFor(ctx, "access", ino, access)
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
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
	for attempt := 1; ; attempt++ {
		resp, err := v.nameReq(ctx, op, parent, name, &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP})
		if err != nil {
			return nil, err
		}
		if e := syscall.Errno(resp.GetErrno()); e != 0 {
			return nil, errnoErr(op, e, "%d/%q", parent, name)
		}
		in, err := v.inodeOf(ctx, op, resp)
		if err == nil {
			return toAttr(in), nil
		}
		if !vanished(resp, err, attempt) {
			return nil, err
		}
	}
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
