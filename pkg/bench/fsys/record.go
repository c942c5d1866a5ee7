package fsys

import (
	"io"
	"io/fs"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/optrace"
)

// Record wraps f so that every call is also written to rec as a trace record
// issued by thread tid — the same calls the FUSE client's recorder makes for
// `cairn mount --trace`. Give each workload thread its own wrapper (with its
// own tid) over the shared f; the recorder itself is shared.
func Record(f FS, rec *optrace.Recorder, tid int64) FS {
	return &recordingFS{FS: f, rec: rec, tid: tid}
}

type recordingFS struct {
	FS
	rec *optrace.Recorder
	tid int64
}

func tracePath(name string) string {
	if name == "." || name == "" {
		return "/"
	}
	return "/" + name
}

func (r *recordingFS) note(start time.Time, e optrace.Event, n int64, err error) {
	e.TID = r.tid
	e.Result = optrace.ResultOf(n, err)
	r.rec.Record(start, e)
}

func (r *recordingFS) Mkdir(name string, perm fs.FileMode) error {
	t := time.Now()
	err := r.FS.Mkdir(name, perm)
	r.note(t, optrace.Event{Op: optrace.OpMkdir, Path: tracePath(name), Mode: uint32(perm.Perm())}, 0, err)
	return err
}

func (r *recordingFS) Rmdir(name string) error {
	t := time.Now()
	err := r.FS.Rmdir(name)
	r.note(t, optrace.Event{Op: optrace.OpRmdir, Path: tracePath(name)}, 0, err)
	return err
}

func (r *recordingFS) Unlink(name string) error {
	t := time.Now()
	err := r.FS.Unlink(name)
	r.note(t, optrace.Event{Op: optrace.OpUnlink, Path: tracePath(name)}, 0, err)
	return err
}

func (r *recordingFS) Rename(o, n string) error {
	t := time.Now()
	err := r.FS.Rename(o, n)
	r.note(t, optrace.Event{Op: optrace.OpRename, Path: tracePath(o), Path2: tracePath(n)}, 0, err)
	return err
}

func (r *recordingFS) Link(o, n string) error {
	t := time.Now()
	err := r.FS.Link(o, n)
	r.note(t, optrace.Event{Op: optrace.OpLink, Path: tracePath(o), Path2: tracePath(n)}, 0, err)
	return err
}

func (r *recordingFS) Symlink(target, link string) error {
	t := time.Now()
	err := r.FS.Symlink(target, link)
	r.note(t, optrace.Event{Op: optrace.OpSymlink, Path: tracePath(link), Path2: target}, 0, err)
	return err
}

func (r *recordingFS) Readlink(name string) (string, error) {
	t := time.Now()
	s, err := r.FS.Readlink(name)
	r.note(t, optrace.Event{Op: optrace.OpReadlink, Path: tracePath(name)}, 0, err)
	return s, err
}

func (r *recordingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	t := time.Now()
	ents, err := r.FS.ReadDir(name)
	r.note(t, optrace.Event{Op: optrace.OpReaddir, Path: tracePath(name)}, 0, err)
	return ents, err
}

func (r *recordingFS) stat(name string, flags int64, f func(string) (fs.FileInfo, error)) (fs.FileInfo, error) {
	t := time.Now()
	st, err := f(name)
	e := optrace.Event{Op: optrace.OpStat, Path: tracePath(name), Size: -1, Flags: flags}
	if err == nil {
		e.Size, e.Mode = st.Size(), unixMode(st.Mode())
	}
	r.note(t, e, 0, err)
	return st, err
}

func (r *recordingFS) Stat(name string) (fs.FileInfo, error) {
	return r.stat(name, 0, r.FS.Stat)
}

func (r *recordingFS) Lstat(name string) (fs.FileInfo, error) {
	return r.stat(name, optrace.StatNoFollow, r.FS.Lstat)
}

func (r *recordingFS) Chmod(name string, mode fs.FileMode) error {
	t := time.Now()
	err := r.FS.Chmod(name, mode)
	r.note(t, optrace.Event{Op: optrace.OpChmod, Path: tracePath(name), Mode: uint32(mode.Perm())}, 0, err)
	return err
}

func (r *recordingFS) Truncate(name string, size int64) error {
	t := time.Now()
	err := r.FS.Truncate(name, size)
	r.note(t, optrace.Event{Op: optrace.OpTruncate, Path: tracePath(name), Size: size}, 0, err)
	return err
}

func (r *recordingFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	t := time.Now()
	f, err := r.FS.OpenFile(name, flag, perm)
	e := optrace.Event{Op: optrace.OpOpen, Path: tracePath(name), Flags: int64(flag)}
	if flag&syscall.O_CREAT != 0 {
		e.Mode = uint32(perm.Perm())
	}
	if err != nil {
		r.note(t, e, 0, err)
		return nil, err
	}
	e.Handle = r.rec.NewHandle()
	r.note(t, e, 0, nil)
	return &recordingFile{File: f, fs: r, handle: e.Handle, path: e.Path}, nil
}

// RemoveAll and DropCache are bookkeeping of the benchmark, not operations of
// the application, so they pass through unrecorded.
func (r *recordingFS) RemoveAll(name string) error { return RemoveAll(r.FS, name) }

func (r *recordingFS) DropCache(name string) error {
	if d, ok := r.FS.(CacheDropper); ok {
		return d.DropCache(name)
	}
	return nil
}

// unixMode turns an fs.FileMode back into st_mode bits.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	switch {
	case m.IsDir():
		u |= syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		u |= syscall.S_IFLNK
	case m.IsRegular():
		u |= syscall.S_IFREG
	}
	return u
}

type recordingFile struct {
	File
	fs     *recordingFS
	handle uint64
	path   string
	pos    int64 // stream position, mirrored to record offsets of Read and Write
}

func (f *recordingFile) ev(op optrace.Op) optrace.Event {
	return optrace.Event{Op: op, Handle: f.handle, Path: f.path}
}

func (f *recordingFile) Read(b []byte) (int, error) {
	t := time.Now()
	n, err := f.File.Read(b)
	e := f.ev(optrace.OpRead)
	e.Offset, e.Size = f.pos, int64(len(b))
	f.pos += int64(n)
	rerr := err
	if err == io.EOF {
		rerr = nil // EOF is a zero-byte read, not a failure
	}
	f.fs.note(t, e, int64(n), rerr)
	return n, err
}

func (f *recordingFile) ReadAt(b []byte, off int64) (int, error) {
	t := time.Now()
	n, err := f.File.ReadAt(b, off)
	e := f.ev(optrace.OpRead)
	e.Offset, e.Size = off, int64(len(b))
	rerr := err
	if err == io.EOF {
		rerr = nil
	}
	f.fs.note(t, e, int64(n), rerr)
	return n, err
}

func (f *recordingFile) Write(b []byte) (int, error) {
	t := time.Now()
	n, err := f.File.Write(b)
	e := f.ev(optrace.OpWrite)
	e.Offset, e.Size = f.pos, int64(len(b))
	f.pos += int64(n)
	f.fs.note(t, e, int64(n), err)
	return n, err
}

func (f *recordingFile) WriteAt(b []byte, off int64) (int, error) {
	t := time.Now()
	n, err := f.File.WriteAt(b, off)
	e := f.ev(optrace.OpWrite)
	e.Offset, e.Size = off, int64(len(b))
	f.fs.note(t, e, int64(n), err)
	return n, err
}

func (f *recordingFile) Seek(off int64, whence int) (int64, error) {
	n, err := f.File.Seek(off, whence)
	if err == nil {
		f.pos = n
	}
	return n, err
}

func (f *recordingFile) Sync() error {
	t := time.Now()
	err := f.File.Sync()
	f.fs.note(t, f.ev(optrace.OpFsync), 0, err)
	return err
}

func (f *recordingFile) Truncate(size int64) error {
	t := time.Now()
	err := f.File.Truncate(size)
	e := f.ev(optrace.OpTruncate)
	e.Size = size
	f.fs.note(t, e, 0, err)
	return err
}

func (f *recordingFile) Stat() (fs.FileInfo, error) {
	t := time.Now()
	st, err := f.File.Stat()
	e := f.ev(optrace.OpStat)
	e.Handle, e.Size = 0, -1
	if err == nil {
		e.Size, e.Mode = st.Size(), unixMode(st.Mode())
	}
	f.fs.note(t, e, 0, err)
	return st, err
}

func (f *recordingFile) Close() error {
	t := time.Now()
	err := f.File.Close()
	f.fs.note(t, f.ev(optrace.OpClose), 0, err)
	return err
}
