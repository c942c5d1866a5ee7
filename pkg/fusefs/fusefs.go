// Package fusefs is the kernel adapter of a Cairn mount: it serves the
// FUSE protocol (go-fuse's raw API) by mapping every request onto a
// pkg/client Volume. A FUSE node id is the Cairn inode number (the root is
// 1), so the adapter keeps no inode table: Forget is a no-op.
//
// Permissions are checked by the kernel (the mount must use
// default_permissions); the adapter records the caller's uid and gid on
// every create. File locks (flock, fcntl) are left to the kernel's local
// locking: they hold between processes of one mount, not across mounts.
// Data follows close-to-open consistency (see pkg/client.File).
package fusefs

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/bench/trace"
	"github.com/cairnfs/cairn/pkg/client"
)

// Options tune the adapter. Zero values take the defaults.
type Options struct {
	// EntryTimeout is how long the kernel caches a name lookup (and a
	// negative one); default 1 s; negative means 0 (no caching).
	EntryTimeout time.Duration
	// AttrTimeout is how long the kernel caches attributes; default 1 s;
	// negative means 0.
	AttrTimeout time.Duration
	// Metrics, if set, records every request.
	Metrics *Metrics
	// Trace, if set, records every operation an application performs on the
	// mount (cairn mount --trace) in the cairn bench trace format; paths are
	// relative to the mount's root. The caller closes it after unmounting.
	Trace *trace.Recorder
}

func (o Options) withDefaults() Options {
	fix := func(d *time.Duration) {
		switch {
		case *d == 0:
			*d = time.Second
		case *d < 0:
			*d = 0
		}
	}
	fix(&o.EntryTimeout)
	fix(&o.AttrTimeout)
	return o
}

// FS serves one volume. Create it with New and pass it to fuse.NewServer.
// It is safe for the concurrent requests of a multi-threaded server.
type FS struct {
	fuse.RawFileSystem
	v      *client.Volume
	opts   Options
	tr     *tracer                     // nil unless Options.Trace is set
	server atomic.Pointer[fuse.Server] // set by Init, for notifications

	mu     sync.Mutex
	nextFh uint64
	files  map[uint64]*client.File            // fh -> open file
	byIno  map[uint64]map[uint64]*client.File // ino -> fh -> open file
	dirs   map[uint64]*dirHandle              // fh -> open directory

	hints *attrHints // attributes learnt by this mount's operations (attrhints.go)
}

// dirHandle is an open directory: its listing, read at offset 0.
type dirHandle struct {
	mu      sync.Mutex
	ino     uint64
	entries []client.DirEntry // ".", "..", then the names
	loaded  bool
}

// New returns the adapter of v.
func New(v *client.Volume, opts Options) *FS {
	fs := &FS{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		v:             v, opts: opts.withDefaults(), nextFh: 1, hints: newAttrHints(opts.withDefaults().AttrTimeout),
		files: map[uint64]*client.File{}, byIno: map[uint64]map[uint64]*client.File{}, dirs: map[uint64]*dirHandle{},
	}
	if opts.Trace != nil {
		fs.tr = newTracer(opts.Trace)
	}
	return fs
}

// String names the file system (shown by the kernel in debug output).
func (fs *FS) String() string { return "cairn:" + fs.v.Name() }

// ctxOf ignores the kernel's interrupts (FUSE_INTERRUPT, sent when the
// calling thread gets any signal, e.g. a Go runtime's preemption SIGURG):
// honouring them made lookups, renames or closes fail with EINTR, which no
// local file system returns (libfuse ignores interrupts too unless -o intr).
// SDK calls are bounded by their own deadlines.
func ctxOf(cancel <-chan struct{}) context.Context { return &fuse.Context{} }

// learn starts an operation on inode ino that may learn its attributes
// from the servers (a create, mkdir, mknod, symlink or unlink in directory
// ino; an open of file ino): ctx collects them, and done keeps them as
// ino's hint or, when none came, invalidates ino's hint.
func (fs *FS) learn(cancel <-chan struct{}, ino uint64) (ctx context.Context, done func()) {
	st := fs.hints.begin(ino)
	var got *client.Attr
	ctx = client.WithAttrs(ctxOf(cancel), func(a *client.Attr) {
		if a.Ino == ino {
			got = a
		}
	})
	return ctx, func() {
		if got != nil {
			fs.hints.put(st, got)
		} else {
			fs.hints.invalidateIno(ino)
		}
	}
}

// changing invalidates ino's hint now and when the returned func runs: an
// operation that changes ino without learning its new attributes.
func (fs *FS) changing(ino uint64) func() {
	fs.hints.invalidateIno(ino)
	return func() { fs.hints.invalidateIno(ino) }
}

// Init keeps the server for notifications (see Open).
func (fs *FS) Init(s *fuse.Server) { fs.server.Store(s) }

// status maps an SDK error to the FUSE status carrying its errno.
func status(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	errno := client.ErrnoOf(err)
	if errno == syscall.EIO {
		// EIO hides the cause from the application: keep it in the log.
		slog.Warn("operation failed with EIO", "err", err)
	}
	return fuse.Status(errno)
}

func (fs *FS) observe(op string, start time.Time, st fuse.Status) fuse.Status {
	if m := fs.opts.Metrics; m != nil {
		m.observe(op, start, st)
	}
	return st
}

func toFuseTime(t time.Time) (uint64, uint32) {
	if t.IsZero() || t.Unix() < 0 {
		return 0, 0
	}
	return uint64(t.Unix()), uint32(t.Nanosecond())
}

// fillAttr converts a to the kernel's attributes; the size, mtime and ctime
// of a file this mount has open include its unflushed writes.
func (fs *FS) fillAttr(a *client.Attr, out *fuse.Attr) {
	size, mtime, ctime := a.Size, a.Mtime, a.Ctime
	for _, f := range fs.openFiles(a.Ino) {
		size = max(size, f.Size())
		if m := f.Modified(); m.After(mtime) {
			mtime = m
			if m.After(ctime) {
				ctime = m
			}
		}
	}
	*out = fuse.Attr{
		Ino: a.Ino, Size: size, Blocks: (size + 511) / 512,
		Mode: a.Mode, Nlink: a.Nlink, Owner: fuse.Owner{Uid: a.Uid, Gid: a.Gid},
		Rdev: uint32(a.Rdev), Blksize: 128 << 10,
	}
	out.Atime, out.Atimensec = toFuseTime(a.Atime)
	out.Mtime, out.Mtimensec = toFuseTime(mtime)
	out.Ctime, out.Ctimensec = toFuseTime(ctime)
}

func (fs *FS) fillEntry(a *client.Attr, out *fuse.EntryOut) {
	out.NodeId = a.Ino
	out.Generation = a.Generation
	out.SetEntryTimeout(fs.opts.EntryTimeout)
	out.SetAttrTimeout(fs.opts.AttrTimeout)
	fs.fillAttr(a, &out.Attr)
}

// Lookup resolves name in directory header.NodeId ("." and ".." too).
func (fs *FS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	ctx := ctxOf(cancel)
	var a *client.Attr
	var err error
	switch name {
	case ".":
		a, err = fs.v.GetAttr(ctx, header.NodeId)
	case "..":
		if a, err = fs.v.GetAttr(ctx, header.NodeId); err == nil && a.Parent != 0 {
			a, err = fs.v.GetAttr(ctx, a.Parent)
		}
	default:
		// The kernel looks up only in directories it holds (and answers
		// ENOENT itself in a removed one): a missing name is one request.
		a, err = fs.v.LookupChild(ctx, header.NodeId, name)
	}
	if err != nil {
		if client.ErrnoOf(err) == syscall.ENOENT {
			// A negative entry the kernel may cache: NodeId 0.
			out.NodeId = 0
			out.SetEntryTimeout(fs.opts.EntryTimeout)
		}
		if fs.tr != nil && name != "." && name != ".." {
			fs.tr.stat(start, header, fs.tr.child(header.NodeId, name), status(err), nil)
		}
		return fs.observe("lookup", start, status(err))
	}
	fs.fillEntry(a, out)
	if fs.tr != nil && name != "." && name != ".." {
		fs.tr.learn(header.NodeId, name, a.Ino)
		fs.tr.stat(start, header, fs.tr.child(header.NodeId, name), fuse.OK, &out.Attr)
	}
	return fs.observe("lookup", start, fuse.OK)
}

// Forget drops the kernel's references to a node. Node ids are inode
// numbers, so nothing is kept per node, except the path of the node when
// the mount is traced.
func (fs *FS) Forget(nodeid, nlookup uint64) {
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
	a, err := fs.v.GetAttr(ctxOf(cancel), in.NodeId)
	if err != nil {
		if fs.tr != nil {
			fs.tr.stat(start, &in.InHeader, fs.tr.path(in.NodeId), status(err), nil)
		}
		return fs.observe("getattr", start, status(err))
	}
	fs.fillAttr(a, &out.Attr)
	out.SetTimeout(fs.opts.AttrTimeout)
	if fs.tr != nil {
		fs.tr.stat(start, &in.InHeader, fs.tr.path(in.NodeId), fuse.OK, &out.Attr)
	}
	return fs.observe("getattr", start, fuse.OK)
}

// openFiles returns this mount's open handles of ino.
func (fs *FS) openFiles(ino uint64) []*client.File {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []*client.File
	for _, f := range fs.byIno[ino] {
		out = append(out, f)
	}
	return out
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
		e := trace.Event{Op: trace.OpTruncate, Path: p, Size: int64(in.Size)}
		if fh, ok := in.GetFh(); ok {
			if o := fs.tr.handle(fh); o.id != 0 {
				e.Handle, e.Path = o.id, o.path
			}
		}
		fs.tr.record(start, &in.InHeader, e, st, 0)
	}
	if in.Valid&fuse.FATTR_MODE != 0 {
		fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpChmod, Path: p, Mode: in.Mode & 0o7777}, st, 0)
	}
}

func (fs *FS) setAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut, start time.Time) fuse.Status {
	ctx := ctxOf(cancel)
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
		files = fs.openFiles(in.NodeId)
		for _, f := range files {
			if err := f.Flush(ctx); err != nil {
				return fs.observe("setattr", start, status(err))
			}
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
		a, err = fs.v.GetAttr(ctx, in.NodeId)
	} else {
		a, err = fs.v.Setattr(ctx, in.NodeId, s)
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
	ctx, done := fs.learn(cancel, in.NodeId)
	a, err := fs.v.Mknod(ctx, in.NodeId, name, in.Mode&^(in.Umask&0o777), uint64(in.Rdev), in.Uid, in.Gid)
	done()
	if fs.tr != nil && (in.Mode&syscall.S_IFMT == 0 || in.Mode&syscall.S_IFMT == syscall.S_IFREG) {
		// A regular file made without opening it: an open that creates
		// and is not kept (handle 0).
		fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpOpen, Path: fs.tr.child(in.NodeId, name),
			Flags: syscall.O_CREAT | syscall.O_EXCL | syscall.O_WRONLY, Mode: in.Mode & 0o7777}, status(err), 0)
	}
	if err != nil {
		return fs.observe("mknod", start, status(err))
	}
	fs.fillEntry(a, out)
	if fs.tr != nil {
		fs.tr.learn(in.NodeId, name, a.Ino)
	}
	return fs.observe("mknod", start, fuse.OK)
}

// Mkdir makes a directory owned by the caller.
func (fs *FS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	ctx, done := fs.learn(cancel, in.NodeId)
	a, err := fs.v.Mkdir(ctx, in.NodeId, name, in.Mode&^(in.Umask&0o777)&0o7777, in.Uid, in.Gid)
	done()
	if fs.tr != nil {
		fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpMkdir, Path: fs.tr.child(in.NodeId, name), Mode: in.Mode & 0o7777}, status(err), 0)
	}
	if err != nil {
		return fs.observe("mkdir", start, status(err))
	}
	fs.fillEntry(a, out)
	if fs.tr != nil {
		fs.tr.learn(in.NodeId, name, a.Ino)
	}
	return fs.observe("mkdir", start, fuse.OK)
}

// Unlink removes a non-directory name.
func (fs *FS) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	start := time.Now()
	ctx, done := fs.learn(cancel, header.NodeId)
	st := status(fs.v.Unlink(ctx, header.NodeId, name))
	done()
	if fs.tr != nil {
		fs.tr.record(start, header, trace.Event{Op: trace.OpUnlink, Path: fs.tr.child(header.NodeId, name)}, st, 0)
		if st == fuse.OK {
			fs.tr.removed(header.NodeId, name)
		}
	}
	return fs.observe("unlink", start, st)
}

// Rmdir removes an empty directory.
func (fs *FS) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	start := time.Now()
	fs.hints.invalidate()
	defer fs.hints.invalidate()
	st := status(fs.v.Rmdir(ctxOf(cancel), header.NodeId, name))
	if fs.tr != nil {
		fs.tr.record(start, header, trace.Event{Op: trace.OpRmdir, Path: fs.tr.child(header.NodeId, name)}, st, 0)
		if st == fuse.OK {
			fs.tr.removed(header.NodeId, name)
		}
	}
	return fs.observe("rmdir", start, st)
}

// Rename moves a name; flags RENAME_NOREPLACE and RENAME_EXCHANGE are
// passed to the SDK (others: EINVAL).
func (fs *FS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName string, newName string) fuse.Status {
	start := time.Now()
	fs.hints.invalidate()
	defer fs.hints.invalidate()
	st := status(fs.v.Rename(ctxOf(cancel), in.NodeId, oldName, in.Newdir, newName, in.Flags))
	if fs.tr != nil {
		fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpRename, Path: fs.tr.child(in.NodeId, oldName),
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
	fs.hints.invalidate()
	defer fs.hints.invalidate()
	a, err := fs.v.Link(ctxOf(cancel), in.Oldnodeid, in.NodeId, name)
	if fs.tr != nil {
		fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpLink, Path: fs.tr.path(in.Oldnodeid),
			Path2: fs.tr.child(in.NodeId, name)}, status(err), 0)
	}
	if err != nil {
		return fs.observe("link", start, status(err))
	}
	fs.fillEntry(a, out)
	if fs.tr != nil {
		fs.tr.learn(in.NodeId, name, a.Ino)
	}
	return fs.observe("link", start, fuse.OK)
}

// Symlink makes a symbolic link owned by the caller.
func (fs *FS) Symlink(cancel <-chan struct{}, header *fuse.InHeader, target string, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	ctx, done := fs.learn(cancel, header.NodeId)
	a, err := fs.v.Symlink(ctx, header.NodeId, name, target, header.Uid, header.Gid)
	done()
	if fs.tr != nil {
		fs.tr.record(start, header, trace.Event{Op: trace.OpSymlink, Path: fs.tr.child(header.NodeId, name), Path2: target}, status(err), 0)
	}
	if err != nil {
		return fs.observe("symlink", start, status(err))
	}
	fs.fillEntry(a, out)
	if fs.tr != nil {
		fs.tr.learn(header.NodeId, name, a.Ino)
	}
	return fs.observe("symlink", start, fuse.OK)
}

// Readlink returns a symlink's target.
func (fs *FS) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	start := time.Now()
	t, err := fs.v.Readlink(ctxOf(cancel), header.NodeId)
	if fs.tr != nil {
		fs.tr.record(start, header, trace.Event{Op: trace.OpReadlink, Path: fs.tr.path(header.NodeId)}, status(err), 0)
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
	val, err := fs.v.GetXattr(ctxOf(cancel), header.NodeId, attr)
	if err != nil {
		return 0, fs.observe("getxattr", start, status(err))
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
	names, err := fs.v.ListXattr(ctxOf(cancel), header.NodeId)
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
	return fs.observe("setxattr", start, status(fs.v.SetXattr(ctxOf(cancel), in.NodeId, attr, data, in.Flags)))
}

// RemoveXAttr removes an xattr.
func (fs *FS) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	start := time.Now()
	defer fs.changing(header.NodeId)()
	return fs.observe("removexattr", start, status(fs.v.RemoveXattr(ctxOf(cancel), header.NodeId, attr)))
}

// addFile registers an open file and returns its handle number.
func (fs *FS) addFile(f *client.File) uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fh := fs.nextFh
	fs.nextFh++
	fs.files[fh] = f
	if fs.byIno[f.Ino()] == nil {
		fs.byIno[f.Ino()] = map[uint64]*client.File{}
	}
	fs.byIno[f.Ino()][fh] = f
	return fh
}

func (fs *FS) file(fh uint64) *client.File {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.files[fh]
}

// Create makes a regular file owned by the caller and opens it. The reply
// carries the new file's attributes with the attribute timeout, so a stat
// right after is answered by the kernel.
func (fs *FS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	start := time.Now()
	if fs.tr != nil {
		st := fs.create(cancel, in, name, out, start)
		if st == fuse.OK {
			fs.tr.learn(in.NodeId, name, out.NodeId)
		}
		fs.tr.open(start, &in.InHeader, out.Fh, fs.tr.child(in.NodeId, name), in.Flags|syscall.O_CREAT, in.Mode, st)
		return st
	}
	return fs.create(cancel, in, name, out, start)
}

func (fs *FS) create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut, start time.Time) fuse.Status {
	// One request: the file is opened from the inode the create returned
	// (it is new, so there is nothing else to read).
	ctx, done := fs.learn(cancel, in.NodeId)
	a, f, err := fs.v.CreateFile(ctx, in.NodeId, name, in.Mode&^(in.Umask&0o777)&0o7777, in.Uid, in.Gid, int(in.Flags))
	done()
	if err != nil {
		return fs.observe("create", start, status(err))
	}
	out.Fh = fs.addFile(f)
	fs.fillEntry(a, &out.EntryOut)
	return fs.observe("create", start, fuse.OK)
}

// Open opens a regular file. Other handles of this mount on the file are
// flushed first, so the new handle sees their writes; then its extent map
// is read (close-to-open).
func (fs *FS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	start := time.Now()
	if fs.tr != nil {
		st := fs.open(cancel, in, out, start)
		fs.tr.open(start, &in.InHeader, out.Fh, fs.tr.path(in.NodeId), in.Flags, 0, st)
		return st
	}
	return fs.open(cancel, in, out, start)
}

func (fs *FS) open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut, start time.Time) fuse.Status {
	ctx := ctxOf(cancel)
	for _, f := range fs.openFiles(in.NodeId) {
		if err := f.Flush(ctx); err != nil {
			return fs.observe("open", start, status(err))
		}
	}
	lctx, done := fs.learn(cancel, in.NodeId)
	f, err := fs.v.OpenFile(lctx, in.NodeId, int(in.Flags))
	if err != nil {
		done()
		return fs.observe("open", start, status(err))
	}
	out.Fh = fs.addFile(f)
	// The kernel may hold attributes (the size) cached from before another
	// mount's close: drop them so that fstat and reads see the size as of
	// this open (close-to-open across mounts; the page cache is dropped
	// because the open does not ask FOPEN_KEEP_CACHE).
	if s := fs.server.Load(); s != nil {
		s.InodeNotify(in.NodeId, -1, 0)
	}
	// The GETATTR the kernel sends after the reply is answered from what
	// the open read (a hint).
	done()
	return fs.observe("open", start, fuse.OK)
}

// Read reads from an open file; holes read as zeros, short at EOF.
func (fs *FS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	start := time.Now()
	f := fs.file(in.Fh)
	if f == nil {
		return nil, fs.observe("read", start, fuse.EBADF)
	}
	n, err := f.ReadAt(buf[:min(len(buf), int(in.Size))], int64(in.Offset))
	if err != nil && err != io.EOF {
		if fs.tr != nil {
			fs.tr.io(start, &in.InHeader, trace.OpRead, in.Fh, in.Offset, in.Size, status(err), 0)
		}
		return nil, fs.observe("read", start, status(err))
	}
	if fs.tr != nil {
		fs.tr.io(start, &in.InHeader, trace.OpRead, in.Fh, in.Offset, in.Size, fuse.OK, int64(n))
	}
	if m := fs.opts.Metrics; m != nil {
		m.readBytes.Add(float64(n))
	}
	return fuse.ReadResultData(buf[:n]), fs.observe("read", start, fuse.OK)
}

// Write writes to an open file (buffered until Flush, Fsync or Release).
func (fs *FS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	start := time.Now()
	defer fs.changing(in.NodeId)()
	f := fs.file(in.Fh)
	if f == nil {
		return 0, fs.observe("write", start, fuse.EBADF)
	}
	n, err := f.WriteAt(data, int64(in.Offset))
	if m := fs.opts.Metrics; m != nil {
		m.writeBytes.Add(float64(n))
	}
	if err != nil && n == 0 {
		if fs.tr != nil {
			fs.tr.io(start, &in.InHeader, trace.OpWrite, in.Fh, in.Offset, uint32(len(data)), status(err), 0)
		}
		fs.dropAttrs(in.NodeId)
		return 0, fs.observe("write", start, status(err))
	}
	if fs.tr != nil {
		fs.tr.io(start, &in.InHeader, trace.OpWrite, in.Fh, in.Offset, uint32(len(data)), fuse.OK, int64(n))
	}
	return uint32(n), fs.observe("write", start, fuse.OK)
}

// Flush (every close(2) of a descriptor) makes the file's writes visible
// to every later open.
func (fs *FS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	start := time.Now()
	defer fs.changing(in.NodeId)()
	f := fs.file(in.Fh)
	if f == nil {
		return fs.observe("flush", start, fuse.EBADF)
	}
	st := status(f.Flush(ctxOf(cancel)))
	if st != fuse.OK {
		fs.dropAttrs(in.NodeId)
	}
	return fs.observe("flush", start, st)
}

// dropAttrs makes the kernel forget the attributes it caches for ino after
// a failed write, flush or fsync: the file's size fell back to the bytes
// that exist (client.File), and the kernel's copy still counts the lost
// ones.
func (fs *FS) dropAttrs(ino uint64) {
	if s := fs.server.Load(); s != nil {
		s.InodeNotify(ino, -1, 0)
	}
}

// Fsync makes the file's writes durable and visible.
func (fs *FS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	start := time.Now()
	defer fs.changing(in.NodeId)()
	f := fs.file(in.Fh)
	if f == nil {
		return fs.observe("fsync", start, fuse.EBADF)
	}
	st := status(f.Fsync(ctxOf(cancel)))
	if st != fuse.OK {
		fs.dropAttrs(in.NodeId)
	}
	if fs.tr != nil {
		o := fs.tr.handle(in.Fh)
		fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpFsync, Handle: o.id, Path: o.path}, st, 0)
	}
	return fs.observe("fsync", start, st)
}

// Release closes an open file (flushing what is left; an error here
// cannot reach the application, which saw Flush's).
func (fs *FS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	start := time.Now()
	defer fs.changing(in.NodeId)()
	fs.mu.Lock()
	f := fs.files[in.Fh]
	delete(fs.files, in.Fh)
	if f != nil {
		delete(fs.byIno[f.Ino()], in.Fh)
		if len(fs.byIno[f.Ino()]) == 0 {
			delete(fs.byIno, f.Ino())
		}
	}
	fs.mu.Unlock()
	if f == nil {
		return
	}
	st := status(f.Close(context.Background()))
	if fs.tr != nil {
		// The application's close(2) succeeded whatever this says (its
		// error went to flush), so the close is recorded as a success.
		if o := fs.tr.closed(in.Fh); o.id != 0 {
			fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpClose, Handle: o.id, Path: o.path}, fuse.OK, 0)
		}
	}
	fs.observe("release", start, st)
}

// OpenDir opens a directory (ENOTDIR for other types).
func (fs *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	start := time.Now()
	a, err := fs.v.GetAttr(ctxOf(cancel), in.NodeId)
	if err != nil {
		return fs.observe("opendir", start, status(err))
	}
	if !a.IsDir() {
		return fs.observe("opendir", start, fuse.ENOTDIR)
	}
	fs.mu.Lock()
	fh := fs.nextFh
	fs.nextFh++
	fs.dirs[fh] = &dirHandle{ino: in.NodeId}
	fs.mu.Unlock()
	out.Fh = fh
	return fs.observe("opendir", start, fuse.OK)
}

// load reads the whole listing (at offset 0: a rewinddir re-reads it).
func (fs *FS) load(ctx context.Context, d *dirHandle, plus bool) error {
	self, err := fs.v.GetAttr(ctx, d.ino)
	if err != nil {
		return err
	}
	parent := self.Parent
	if parent == 0 {
		parent = d.ino
	}
	entries := []client.DirEntry{
		{Name: ".", Ino: d.ino, Type: syscall.S_IFDIR},
		{Name: "..", Ino: parent, Type: syscall.S_IFDIR},
	}
	cursor := ""
	for {
		var page []client.DirEntry
		var more bool
		if plus {
			page, more, err = fs.v.ReadDirPlus(ctx, d.ino, cursor, 1024)
		} else {
			page, more, err = fs.v.ReadDir(ctx, d.ino, cursor, 1024)
		}
		if err != nil {
			return err
		}
		entries = append(entries, page...)
		if !more || len(page) == 0 {
			break
		}
		cursor = page[len(page)-1].Name
	}
	d.entries, d.loaded = entries, true
	return nil
}

func (fs *FS) readDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	fs.mu.Lock()
	d := fs.dirs[in.Fh]
	fs.mu.Unlock()
	if d == nil {
		return fuse.EBADF
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if in.Offset == 0 || !d.loaded {
		if err := fs.load(ctxOf(cancel), d, plus); err != nil {
			return status(err)
		}
	}
	for i := int(in.Offset); i < len(d.entries); i++ {
		e := d.entries[i]
		de := fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Type, Off: uint64(i + 1)}
		if !plus {
			if !out.AddDirEntry(de) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(de)
		if eo == nil {
			break
		}
		// "." and "..", and entries without attributes (the inode
		// vanished meanwhile), get no entry: the kernel looks them up.
		if e.Attr != nil && e.Name != "." && e.Name != ".." {
			fs.fillEntry(e.Attr, eo)
			if fs.tr != nil {
				fs.tr.learn(d.ino, e.Name, e.Ino)
			}
		}
	}
	return fuse.OK
}

// ReadDir lists a directory with "." and "..".
func (fs *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	start := time.Now()
	st := fs.readDir(cancel, in, out, false)
	fs.traceReadDir(start, in, st)
	return fs.observe("readdir", start, st)
}

// ReadDirPlus lists a directory with each entry's attributes.
func (fs *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	start := time.Now()
	st := fs.readDir(cancel, in, out, true)
	fs.traceReadDir(start, in, st)
	return fs.observe("readdirplus", start, st)
}

// traceReadDir records a listing once, at its first read (offset 0).
func (fs *FS) traceReadDir(start time.Time, in *fuse.ReadIn, st fuse.Status) {
	if fs.tr == nil || in.Offset != 0 {
		return
	}
	fs.tr.record(start, &in.InHeader, trace.Event{Op: trace.OpReaddir, Path: fs.tr.path(in.NodeId)}, st, 0)
}

// ReleaseDir closes an open directory.
func (fs *FS) ReleaseDir(in *fuse.ReleaseIn) {
	fs.mu.Lock()
	delete(fs.dirs, in.Fh)
	fs.mu.Unlock()
}

// FsyncDir is a no-op: directory changes are durable when they return.
func (fs *FS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status { return fuse.OK }

// StatFs reports the volume's capacity and inode counts.
func (fs *FS) StatFs(cancel <-chan struct{}, header *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	start := time.Now()
	s, err := fs.v.StatFS(ctxOf(cancel))
	if err != nil {
		return fs.observe("statfs", start, status(err))
	}
	*out = fuse.StatfsOut{
		Blocks: s.Blocks, Bfree: s.BlocksFree, Bavail: s.BlocksAvail,
		Files: s.Files + s.FilesFree, Ffree: s.FilesFree,
		Bsize: s.BlockSize, Frsize: s.BlockSize, NameLen: s.NameLen,
	}
	return fs.observe("statfs", start, fuse.OK)
}

// OpenHandles returns the inode numbers with open files, sorted (for
// tests and diagnostics).
func (fs *FS) OpenHandles() []uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []uint64
	for ino := range fs.byIno {
		out = append(out, ino)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
