// Open regular files: the table of this mount's file handles, create and
// open, read, write, flush, fsync and release.

package fusefs

import (
	"context"
	"errors"
	"io"
	"sort"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/optrace"
)

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

// hasOpen reports whether this mount has a handle of ino open.
func (fs *FS) hasOpen(ino uint64) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.byIno[ino]) > 0
}

// flushOpen flushes every handle this mount has open on ino, so that what
// comes next (an open, a truncate, a new mtime) follows their writes, and
// returns them. A handle released meanwhile is skipped: the kernel sends
// RELEASE after close(2) has returned, so it races the requests that follow
// the close, and a closed File flushed its writes as it closed.
func (fs *FS) flushOpen(ctx context.Context, ino uint64) ([]*client.File, error) {
	files := fs.openFiles(ino)
	for _, f := range files {
		err := fs.flushFile(f, func() error { return f.Flush(ctx) })
		if err != nil && !errors.Is(err, client.ErrFileClosed) {
			return nil, err
		}
	}
	return files, nil
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
	tok := fs.begin()
	ctx, done := fs.learn(cancel, in.NodeId)
	gen := fs.noCaps.generation()
	edit := fs.editName(in.NodeId, name, true)
	a, f, err := fs.v.CreateFile(fs.caller(ctx, &in.InHeader), fs.ino(in.NodeId), name, in.Mode&^(in.Umask&0o777)&0o7777, in.Uid, in.Gid, int(in.Flags))
	edit.done(err == nil)
	done()
	if err != nil {
		return fs.observe("create", start, status(err))
	}
	out.Fh = fs.addFile(f)
	fs.recordPages(f)              // a new inode: nothing cached yet
	fs.noCaps.absent(f.Ino(), gen) // nor any xattr: the first write asks nothing
	fs.fillEntryFor(tok, in.NodeId, name, a, &out.EntryOut)
	fs.names.found(in.NodeId, name, a)
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
	if _, err := fs.flushOpen(ctx, in.NodeId); err != nil {
		return fs.observe("open", start, status(err))
	}
	lctx, done := fs.learn(cancel, in.NodeId)
	f, err := fs.v.OpenFile(fs.caller(lctx, &in.InHeader), fs.ino(in.NodeId), int(in.Flags))
	if err != nil {
		done()
		return fs.observe("open", start, status(err))
	}
	out.Fh = fs.addFile(f)
	if in.Flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// A read-only handle has nothing to flush, and file locks are the
		// kernel's (fusefs.go): its close(2) need not wait for a FLUSH
		// round trip. Release still comes, after the close.
		out.OpenFlags |= fuse.FOPEN_NOFLUSH
	}
	if fs.keepPages(f, in.NodeId) {
		// Unchanged since the kernel cached its pages (pagecache.go).
		// Otherwise keepPages made the kernel drop them, and the
		// attributes (the size) it may hold from before another mount's
		// close, so that fstat and reads see the file as of this open
		// (close-to-open across mounts).
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
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
	read := f.ReadAt
	if fs.pagesBehind(f) {
		// The kernel keeps what this returns for every handle: bytes
		// as new as the pages' record, not this handle's older view
		// (close-to-open allows a handle to see newer bytes).
		if cur, err := fs.v.OpenFile(fs.caller(ctxOf(cancel), &in.InHeader), f.Ino(), syscall.O_RDONLY); err == nil {
			defer func() { _ = cur.Close(context.Background()) }()
			read = cur.ReadAt
		}
	}
	n, err := read(buf[:min(len(buf), int(in.Size))], int64(in.Offset))
	if err != nil && err != io.EOF {
		if fs.tr != nil {
			fs.tr.io(start, &in.InHeader, optrace.OpRead, in.Fh, in.Offset, in.Size, status(err), 0)
		}
		return nil, fs.observe("read", start, status(err))
	}
	if fs.tr != nil {
		fs.tr.io(start, &in.InHeader, optrace.OpRead, in.Fh, in.Offset, in.Size, fuse.OK, int64(n))
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
			fs.tr.io(start, &in.InHeader, optrace.OpWrite, in.Fh, in.Offset, uint32(len(data)), status(err), 0)
		}
		fs.dropAttrs(in.NodeId)
		return 0, fs.observe("write", start, status(err))
	}
	if fs.tr != nil {
		fs.tr.io(start, &in.InHeader, optrace.OpWrite, in.Fh, in.Offset, uint32(len(data)), fuse.OK, int64(n))
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
	ctx := ctxOf(cancel)
	st := status(fs.flushFile(f, func() error { return f.Flush(ctx) }))
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
	fs.forgetPages(ino)
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
	ctx := ctxOf(cancel)
	st := status(fs.flushFile(f, func() error { return f.Fsync(ctx) }))
	if st != fuse.OK {
		fs.dropAttrs(in.NodeId)
	}
	if fs.tr != nil {
		o := fs.tr.handle(in.Fh)
		fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpFsync, Handle: o.id, Path: o.path}, st, 0)
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
	st := status(fs.flushFile(f, func() error { return f.Close(context.Background()) }))
	if fs.tr != nil {
		// The application's close(2) succeeded whatever this says (its
		// error went to flush), so the close is recorded as a success.
		if o := fs.tr.closed(in.Fh); o.id != 0 {
			fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpClose, Handle: o.id, Path: o.path}, fuse.OK, 0)
		}
	}
	fs.observe("release", start, st)
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
