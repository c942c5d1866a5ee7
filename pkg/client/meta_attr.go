package client

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Attributes, extended attributes and file system statistics.

// ---- Attributes. ----

// Setattr changes the attributes in.Valid selects on ino's home and returns
// the new attributes. SetSize truncates (EISDIR for a directory, EINVAL for
// other non-regular files) and cuts the extent map; *Now bits win over the
// explicit times. A change of owner clears setuid, and setgid if group
// execute is set, on regular files, unless the mode is set in the same call
// (as chown(2)).
func (v *Volume) Setattr(ctx context.Context, ino uint64, in SetattrIn) (*Attr, error) {
	res, err := v.setattr(ctx, ino, in)
	if err != nil {
		return nil, err
	}
	return toAttr(res.GetInode()), nil
}

// setattr is Setattr, answering the op's result (the inode after, and
// before: OpResult.pre).
func (v *Volume) setattr(ctx context.Context, ino uint64, in SetattrIn) (*metapb.OpResult, error) {
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
	return res.GetResults()[0], nil
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
	return v.StatFSAt(ctx, RootIno)
}

// StatFSAt is StatFS for a mount whose root is directory ino: when ino has
// a directory quota, the figures are the quota's limits and usage (a
// limit not set keeps the volume's figure).
func (v *Volume) StatFSAt(ctx context.Context, ino uint64) (*StatFS, error) {
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
	s := &StatFS{
		BlockSize: statfsBlock, Blocks: blocks, BlocksFree: freeBlocks, BlocksAvail: freeBlocks,
		Files: inodes, FilesFree: filesMax - min(inodes, filesMax), NameLen: 255,
	}
	if ino != RootIno {
		if q := v.cachedQuotaOf(ino); q != nil {
			quotaFigures(s, q)
		}
	}
	return s, nil
}
