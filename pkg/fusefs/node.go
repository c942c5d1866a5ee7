// Requests on nodes and names: lookup and attributes (getattr, setattr),
// creating and removing names (mknod, mkdir, unlink, rmdir, rename, link,
// symlink), readlink, access and extended attributes.

package fusefs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// Lookup resolves name in directory header.NodeId ("." and ".." too).
func (fs *FS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	ctx := ctxOf(cancel)
	tok := fs.begin()
	var a *client.Attr
	var err error
	switch name {
	case ".":
		a, err = fs.v.GetAttr(ctx, fs.ino(header.NodeId))
	case "..":
		// The mount's root is its own parent, as on any mount (and a
		// path-restricted client may not see above it).
		if a, err = fs.v.GetAttr(ctx, fs.ino(header.NodeId)); err == nil && a.Parent != 0 && a.Ino != fs.root {
			a, err = fs.v.GetAttr(ctx, a.Parent)
		}
	default:
		if hybridindex.ValidateName(name) == nil && fs.longCache().absent(fs.ino(header.NodeId), name) &&
			fs.fillEntryFor(tok, header.NodeId, name, nil, out) {
			// A directory this mount made and knows every name of
			// (listings.go): the name is missing, no request needed.
			// Only with the grant: the listing is as fresh as the
			// feed's coverage, and only a granted entry is taken back
			// when another client's name arrives.
			fs.names.absent(header.NodeId, name)
			fs.opts.Metrics.answeredLocally()
			if fs.tr != nil {
				fs.tr.stat(start, header, fs.tr.child(header.NodeId, name), fuse.ENOENT, nil)
			}
			return fs.observe("lookup", start, fuse.ENOENT)
		}
		// The kernel looks up only in directories it holds (and answers
		// ENOENT itself in a removed one): a missing name is one request.
		a, err = fs.v.LookupChild(fs.caller(ctx, header), fs.ino(header.NodeId), name)
	}
	if err != nil {
		if client.ErrnoOf(err) == syscall.ENOENT {
			// A negative entry the kernel may cache: NodeId 0.
			if name == "." || name == ".." {
				out.NodeId = 0
				out.SetEntryTimeout(fs.opts.EntryTimeout)
			} else {
				fs.fillEntryFor(tok, header.NodeId, name, nil, out)
				fs.names.absent(header.NodeId, name)
				dir := fs.ino(header.NodeId)
				if fs.opts.ListingReads { // off by default: see Options.ListingReads
					if r := fs.longCache().missed(dir); r != nil {
						go fs.readListing(dir, r)
					}
				}
			}
		}
		if fs.tr != nil && name != "." && name != ".." {
			fs.tr.stat(start, header, fs.tr.child(header.NodeId, name), status(err), nil)
		}
		return fs.observe("lookup", start, status(err))
	}
	if name != "." && name != ".." {
		if old, bumped := fs.stale.found(header.NodeId, name, a, func() bool { return fs.hasOpen(a.Ino) }); bumped {
			// The kernel's entry of old is stale: it is dropped
			// once the kernel lets go of the directory (a rename
			// that asked holds it now).
			fs.opts.Metrics.staleName()
			go fs.dropEntry(old)
		}
		fs.fillEntryFor(tok, header.NodeId, name, a, out)
		fs.names.found(header.NodeId, name, a)
	} else {
		fs.fillEntry(a, out)
	}
	if fs.tr != nil && name != "." && name != ".." {
		fs.tr.learn(header.NodeId, name, a.Ino)
		fs.tr.stat(start, header, fs.tr.child(header.NodeId, name), fuse.OK, &out.Attr)
	}
	return fs.observe("lookup", start, fuse.OK)
}

// Forget drops the kernel's references to a node. Node ids are inode
// numbers, so little is kept per node: the change feed's grant of its
// attributes and its listing (longCache.kernelForgot), and its path when
// the mount is traced.
func (fs *FS) Forget(nodeid, nlookup uint64) {
	fs.longCache().kernelForgot(fs.ino(nodeid), nlookup)
	if fs.tr != nil {
		fs.tr.forget(nodeid, nlookup)
	}
}

// GetAttr returns the inode's attributes.
func (fs *FS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	start := time.Now()
	if a := fs.hints.take(in.NodeId); a != nil {
		fs.fillAttr(a, &out.Attr)
		out.SetTimeout(fs.opts.AttrTimeout)
		if fs.tr != nil {
			fs.tr.stat(start, &in.InHeader, fs.tr.path(in.NodeId), fuse.OK, &out.Attr)
		}
		return fs.observe("getattr", start, fuse.OK)
	}
	tok := fs.begin()
	a, err := fs.v.GetAttr(ctxOf(cancel), fs.ino(in.NodeId))
	if err != nil {
		if fs.tr != nil {
			fs.tr.stat(start, &in.InHeader, fs.tr.path(in.NodeId), status(err), nil)
		}
		return fs.observe("getattr", start, status(err))
	}
	fs.fillAttr(a, &out.Attr)
	out.SetTimeout(fs.attrTimeout(tok, a.Ino))
	if fs.tr != nil {
		fs.tr.stat(start, &in.InHeader, fs.tr.path(in.NodeId), fuse.OK, &out.Attr)
	}
	return fs.observe("getattr", start, fuse.OK)
}

// SetAttr changes mode, owner, size (after flushing this mount's open
// handles of the file, which then see the new size) and times (incl. NOW).
func (fs *FS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	start := time.Now()
	defer fs.changing(in.NodeId)()
	if fs.tr != nil {
		st := fs.setAttr(cancel, in, out, start)
		fs.traceSetAttr(start, in, st)
		return st
	}
	return fs.setAttr(cancel, in, out, start)
}

// traceSetAttr records the parts of a setattr the trace format has: a
// truncate (by handle when the kernel names one) and a chmod.
func (fs *FS) traceSetAttr(start time.Time, in *fuse.SetAttrIn, st fuse.Status) {
	p := fs.tr.path(in.NodeId)
	if in.Valid&fuse.FATTR_SIZE != 0 {
		e := optrace.Event{Op: optrace.OpTruncate, Path: p, Size: int64(in.Size)}
		if fh, ok := in.GetFh(); ok {
			if o := fs.tr.handle(fh); o.id != 0 {
				e.Handle, e.Path = o.id, o.path
			}
		}
		fs.tr.record(start, &in.InHeader, e, st, 0)
	}
	if in.Valid&fuse.FATTR_MODE != 0 {
		fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpChmod, Path: p, Mode: in.Mode & 0o7777}, st, 0)
	}
}

func (fs *FS) setAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut, start time.Time) fuse.Status {
	ctx := fs.caller(ctxOf(cancel), &in.InHeader)
	var s client.SetattrIn
	if in.Valid&fuse.FATTR_MODE != 0 {
		s.Valid |= client.SetMode
		s.Mode = in.Mode
	}
	if in.Valid&fuse.FATTR_UID != 0 {
		s.Valid |= client.SetUID
		s.Uid = in.Uid
	}
	if in.Valid&fuse.FATTR_GID != 0 {
		s.Valid |= client.SetGID
		s.Gid = in.Gid
	}
	if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
		s.Valid |= client.SetAtimeNow
	} else if in.Valid&fuse.FATTR_ATIME != 0 {
		s.Valid |= client.SetAtime
		s.Atime = time.Unix(int64(in.Atime), int64(in.Atimensec))
	}
	if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		s.Valid |= client.SetMtimeNow
	} else if in.Valid&fuse.FATTR_MTIME != 0 {
		s.Valid |= client.SetMtime
		s.Mtime = time.Unix(int64(in.Mtime), int64(in.Mtimensec))
	}
	if in.Valid&fuse.FATTR_CTIME != 0 {
		s.Valid |= client.SetCtime
		s.Ctime = time.Unix(int64(in.Ctime), int64(in.Ctimensec))
	}
	var files []*client.File
	if in.Valid&(fuse.FATTR_SIZE|fuse.FATTR_MTIME|fuse.FATTR_MTIME_NOW) != 0 {
		// Also before setting the mtime: a later flush of earlier writes
		// would move it again (tar and cp -p set it before close).
		var err error
		if files, err = fs.flushOpen(ctx, in.NodeId); err != nil {
			return fs.observe("setattr", start, status(err))
		}
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		s.Valid |= client.SetSize
		s.Size = in.Size
	} else {
		files = nil // no size change to apply to the handles
	}
	var a *client.Attr
	var err error
	if s.Valid == 0 {
		a, err = fs.v.GetAttr(ctx, fs.ino(in.NodeId))
	} else {
		a, err = fs.v.Setattr(ctx, fs.ino(in.NodeId), s)
	}
	if err != nil {
		return fs.observe("setattr", start, status(err))
	}
	for _, f := range files {
		f.Truncated(a.Size)
	}
	fs.fillAttr(a, &out.Attr)
	out.SetTimeout(fs.opts.AttrTimeout)
	return fs.observe("setattr", start, fuse.OK)
}

// Mknod makes a regular file, fifo, socket or device owned by the caller.
func (fs *FS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	tok := fs.begin()
	ctx, done := fs.learn(cancel, in.NodeId)
	edit := fs.editName(in.NodeId, name, true)
	a, err := fs.v.Mknod(fs.caller(ctx, &in.InHeader), fs.ino(in.NodeId), name, in.Mode&^(in.Umask&0o777), uint64(in.Rdev), in.Uid, in.Gid)
	edit.done(err == nil)
	done()
	if fs.tr != nil && (in.Mode&syscall.S_IFMT == 0 || in.Mode&syscall.S_IFMT == syscall.S_IFREG) {
		// A regular file made without opening it: an open that creates
		// and is not kept (handle 0).
		fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpOpen, Path: fs.tr.child(in.NodeId, name),
			Flags: syscall.O_CREAT | syscall.O_EXCL | syscall.O_WRONLY, Mode: in.Mode & 0o7777}, status(err), 0)
	}
	if err != nil {
		return fs.observe("mknod", start, status(err))
	}
	fs.fillEntryFor(tok, in.NodeId, name, a, out)
	fs.names.found(in.NodeId, name, a)
	if fs.tr != nil {
		fs.tr.learn(in.NodeId, name, a.Ino)
	}
	return fs.observe("mknod", start, fuse.OK)
}

// Mkdir makes a directory owned by the caller.
func (fs *FS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	tok := fs.begin()
	ctx, done := fs.learn(cancel, in.NodeId)
	edit := fs.editName(in.NodeId, name, true)
	a, err := fs.v.Mkdir(fs.caller(ctx, &in.InHeader), fs.ino(in.NodeId), name, in.Mode&^(in.Umask&0o777)&0o7777, in.Uid, in.Gid)
	edit.done(err == nil)
	if err == nil {
		fs.longCache().madeDir(tok, a.Ino)
	}
	done()
	if fs.tr != nil {
		fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpMkdir, Path: fs.tr.child(in.NodeId, name), Mode: in.Mode & 0o7777}, status(err), 0)
	}
	if err != nil {
		return fs.observe("mkdir", start, status(err))
	}
	fs.fillEntryFor(tok, in.NodeId, name, a, out)
	fs.names.found(in.NodeId, name, a)
	if fs.tr != nil {
		fs.tr.learn(in.NodeId, name, a.Ino)
	}
	return fs.observe("mkdir", start, fuse.OK)
}

// Unlink removes a non-directory name.
func (fs *FS) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	start := time.Now()
	ctx, done := fs.learn(cancel, header.NodeId)
	edit := fs.editName(header.NodeId, name, false)
	st := status(fs.v.Unlink(fs.caller(ctx, header), fs.ino(header.NodeId), name))
	edit.done(st == fuse.OK)
	done()
	fs.names.forget(header.NodeId, name)
	fs.stale.forget(header.NodeId, name)
	if fs.tr != nil {
		fs.tr.record(start, header, optrace.Event{Op: optrace.OpUnlink, Path: fs.tr.child(header.NodeId, name)}, st, 0)
		if st == fuse.OK {
			fs.tr.removed(header.NodeId, name)
		}
	}
	return fs.observe("unlink", start, st)
}

// Rmdir removes an empty directory, with what this mount last answered
// for the name as a hint (namehints.go).
func (fs *FS) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	start := time.Now()
	ctx, done := fs.learnDirs(cancel, header.NodeId, header.NodeId)
	ctx = client.WithRmdirHint(ctx, fs.names.take(header.NodeId, name))
	edit := fs.editName(header.NodeId, name, false)
	st := status(fs.v.Rmdir(fs.caller(ctx, header), fs.ino(header.NodeId), name))
	edit.done(st == fuse.OK)
	done(st == fuse.OK)
	fs.names.forget(header.NodeId, name)
	if fs.tr != nil {
		fs.tr.record(start, header, optrace.Event{Op: optrace.OpRmdir, Path: fs.tr.child(header.NodeId, name)}, st, 0)
		if st == fuse.OK {
			fs.tr.removed(header.NodeId, name)
		}
	}
	return fs.observe("rmdir", start, st)
}

// Rename moves a name; flags RENAME_NOREPLACE and RENAME_EXCHANGE are
// passed to the SDK (others: EINVAL). What this mount last answered for
// both names goes along as hints (namehints.go).
func (fs *FS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName string, newName string) fuse.Status {
	start := time.Now()
	ctx, done := fs.learnDirs(cancel, in.NodeId, in.Newdir)
	src, dst := fs.names.take(in.NodeId, oldName), fs.names.take(in.Newdir, newName)
	ctx = client.WithRenameHints(ctx, src, dst)
	op := fs.longCache().enterDirs(fs.ino(in.NodeId), fs.ino(in.Newdir))
	st := status(fs.v.Rename(fs.caller(ctx, &in.InHeader), fs.ino(in.NodeId), oldName, fs.ino(in.Newdir), newName, in.Flags))
	if in.Flags&client.RenameExchange != 0 {
		fs.longCache().leaveDirs(op, st == fuse.OK) // both names stay
	} else {
		fs.longCache().leaveDirs(op, st == fuse.OK, nameChange{op.a, oldName, false}, nameChange{op.b, newName, true})
	}
	done(st == fuse.OK)
	fs.names.forget(in.NodeId, oldName)
	fs.names.forget(in.Newdir, newName)
	if moved := in.Flags&client.RenameExchange == 0; st == fuse.OK && moved {
		// RENAME_NOREPLACE moves a name as a plain rename does.
		fs.stale.moved(in.NodeId, oldName, in.Newdir, newName)
		if src != nil {
			fs.names.put(in.Newdir, newName, *src)
		}
	}
	if fs.tr != nil {
		fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpRename, Path: fs.tr.child(in.NodeId, oldName),
			Path2: fs.tr.child(in.Newdir, newName)}, st, 0)
		if st == fuse.OK {
			fs.tr.renamed(in.NodeId, oldName, in.Newdir, newName, in.Flags)
		}
	}
	return fs.observe("rename", start, st)
}

// Link gives an inode another name.
func (fs *FS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	tok := fs.begin()
	// The file's link count and ctime, the directory's mtime.
	defer fs.changing(in.Oldnodeid)()
	defer fs.changing(in.NodeId)()
	edit := fs.editName(in.NodeId, name, true)
	a, err := fs.v.Link(fs.caller(ctxOf(cancel), &in.InHeader), fs.ino(in.Oldnodeid), fs.ino(in.NodeId), name)
	edit.done(err == nil)
	if fs.tr != nil {
		fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpLink, Path: fs.tr.path(in.Oldnodeid),
			Path2: fs.tr.child(in.NodeId, name)}, status(err), 0)
	}
	if err != nil {
		return fs.observe("link", start, status(err))
	}
	fs.fillEntryFor(tok, in.NodeId, name, a, out)
	fs.names.found(in.NodeId, name, a)
	if fs.tr != nil {
		fs.tr.learn(in.NodeId, name, a.Ino)
	}
	return fs.observe("link", start, fuse.OK)
}

// Symlink makes a symbolic link owned by the caller.
func (fs *FS) Symlink(cancel <-chan struct{}, header *fuse.InHeader, target string, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	tok := fs.begin()
	ctx, done := fs.learn(cancel, header.NodeId)
	edit := fs.editName(header.NodeId, name, true)
	a, err := fs.v.Symlink(fs.caller(ctx, header), fs.ino(header.NodeId), name, target, header.Uid, header.Gid)
	edit.done(err == nil)
	done()
	if fs.tr != nil {
		fs.tr.record(start, header, optrace.Event{Op: optrace.OpSymlink, Path: fs.tr.child(header.NodeId, name), Path2: target}, status(err), 0)
	}
	if err != nil {
		return fs.observe("symlink", start, status(err))
	}
	fs.fillEntryFor(tok, header.NodeId, name, a, out)
	fs.names.found(header.NodeId, name, a)
	if fs.tr != nil {
		fs.tr.learn(header.NodeId, name, a.Ino)
	}
	return fs.observe("symlink", start, fuse.OK)
}

// Readlink returns a symlink's target.
func (fs *FS) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	start := time.Now()
	t, err := fs.v.Readlink(ctxOf(cancel), fs.ino(header.NodeId))
	if fs.tr != nil {
		fs.tr.record(start, header, optrace.Event{Op: optrace.OpReadlink, Path: fs.tr.path(header.NodeId)}, status(err), 0)
	}
	if err != nil {
		return nil, fs.observe("readlink", start, status(err))
	}
	return []byte(t), fs.observe("readlink", start, fuse.OK)
}

// Access is answered OK: with default_permissions the kernel checks
// permissions itself and does not send ACCESS.
func (fs *FS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status { return fuse.OK }

// GetXAttr returns an xattr's value (ERANGE with the size if dest is too
// small).
func (fs *FS) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	start := time.Now()
	caps := attr == capabilityAttr
	var gen uint64
	if caps {
		var known bool
		if known, gen = fs.noCaps.known(header.NodeId); known {
			return 0, fs.observe("getxattr", start, fuse.ENODATA)
		}
	}
	val, err := fs.v.GetXattr(ctxOf(cancel), fs.ino(header.NodeId), attr)
	if err != nil {
		st := status(err)
		if caps && st == fuse.ENODATA {
			fs.noCaps.absent(header.NodeId, gen)
		}
		return 0, fs.observe("getxattr", start, st)
	}
	if len(dest) < len(val) {
		return uint32(len(val)), fs.observe("getxattr", start, fuse.ERANGE)
	}
	return uint32(copy(dest, val)), fs.observe("getxattr", start, fuse.OK)
}

// ListXAttr returns the xattr names, NUL-terminated (ERANGE with the size
// if dest is too small).
func (fs *FS) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	start := time.Now()
	names, err := fs.v.ListXattr(ctxOf(cancel), fs.ino(header.NodeId))
	if err != nil {
		return 0, fs.observe("listxattr", start, status(err))
	}
	var b []byte
	for _, n := range names {
		b = append(append(b, n...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), fs.observe("listxattr", start, fuse.ERANGE)
	}
	return uint32(copy(dest, b)), fs.observe("listxattr", start, fuse.OK)
}

// SetXAttr sets an xattr (flags XATTR_CREATE / XATTR_REPLACE).
func (fs *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	start := time.Now()
	defer fs.changing(in.NodeId)()
	fs.noCaps.changed(in.NodeId)
	defer fs.noCaps.changed(in.NodeId)
	return fs.observe("setxattr", start, status(fs.v.SetXattr(fs.caller(ctxOf(cancel), &in.InHeader), fs.ino(in.NodeId), attr, data, in.Flags)))
}

// RemoveXAttr removes an xattr.
func (fs *FS) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	start := time.Now()
	defer fs.changing(header.NodeId)()
	fs.noCaps.changed(header.NodeId)
	defer fs.noCaps.changed(header.NodeId)
	return fs.observe("removexattr", start, status(fs.v.RemoveXattr(fs.caller(ctxOf(cancel), header), fs.ino(header.NodeId), attr)))
}
