package fsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/mountinfo"
)

// The posix backend works on any mounted file system: a local disk, a FUSE
// mount of Cairn, CephFS, JuiceFS or SeaweedFS. Each FS call is exactly one
// system call (mkdir, rmdir, unlink, rename, stat, open...) on the joined
// path, and File is a raw descriptor, so what is measured is the file system,
// not Go's os package (which adds an fstat to every open and an lstat to every
// rename).

func init() {
	register("posix", backend{open: openPosix, check: checkPosix, usage: "PATH"})
}

func checkPosix(rest string) error {
	if rest == "" {
		return errors.New("posix: needs a directory, e.g. posix:/mnt/cairn")
	}
	return nil
}

func openPosix(_ context.Context, rest string, o Options) (FS, error) {
	dir, err := filepath.Abs(rest)
	if err != nil {
		return nil, fmt.Errorf("target posix:%s: %w", rest, err)
	}
	name := "posix:" + dir
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("target %s: %s does not exist", name, dir)
	case err != nil:
		return nil, fmt.Errorf("target %s: %w", name, err)
	case !st.IsDir():
		return nil, fmt.Errorf("target %s: %s is not a directory", name, dir)
	}
	// Writable for real (permissions, read-only mounts, full quotas): create
	// and remove a probe file.
	probe := filepath.Join(dir, fmt.Sprintf(".cairn-bench-probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
	fd, err := unix.Open(probe, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("target %s: %s is not writable: %w", name, dir, err)
	}
	unix.Close(fd)
	if err := unix.Unlink(probe); err != nil {
		return nil, fmt.Errorf("target %s: remove probe file %s: %w", name, probe, err)
	}
	p := &posixFS{name: name, dir: dir}
	if o.Confined {
		r, err := os.OpenRoot(dir)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
		return &confinedFS{posixFS: p, root: r}, nil
	}
	return p, nil
}

type posixFS struct {
	name  string
	dir   string
	opens atomic.Int64
}

// Counters returns the files this session opened (successfully), from
// which the engine derives the servers' requests per open when the meta
// nodes' metrics are read (--meta-metrics). The atomic add costs a few
// nanoseconds against the open system call.
func (p *posixFS) Counters() map[string]int64 {
	return map[string]int64{"opens": p.opens.Load()}
}

func (p *posixFS) String() string { return p.name }
func (p *posixFS) Close() error   { return nil }

// abs joins a checked relative path to the root.
func (p *posixFS) abs(op, name string) (string, error) {
	if err := CheckPath(op, name); err != nil {
		return "", err
	}
	if name == "." {
		return p.dir, nil
	}
	return p.dir + "/" + name, nil
}

func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

func retry(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}

func (p *posixFS) Mkdir(name string, perm fs.FileMode) error {
	a, err := p.abs("mkdir", name)
	if err != nil {
		return err
	}
	return pathErr("mkdir", name, retry(func() error { return unix.Mkdir(a, uint32(perm.Perm())) }))
}

func (p *posixFS) Rmdir(name string) error {
	a, err := p.abs("rmdir", name)
	if err != nil {
		return err
	}
	return pathErr("rmdir", name, retry(func() error { return unix.Rmdir(a) }))
}

func (p *posixFS) Unlink(name string) error {
	a, err := p.abs("unlink", name)
	if err != nil {
		return err
	}
	return pathErr("unlink", name, retry(func() error { return unix.Unlink(a) }))
}

func (p *posixFS) Rename(oldname, newname string) error {
	a, err := p.abs("rename", oldname)
	if err != nil {
		return err
	}
	b, err := p.abs("rename", newname)
	if err != nil {
		return err
	}
	if err := retry(func() error { return unix.Rename(a, b) }); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (p *posixFS) Link(oldname, newname string) error {
	a, err := p.abs("link", oldname)
	if err != nil {
		return err
	}
	b, err := p.abs("link", newname)
	if err != nil {
		return err
	}
	if err := retry(func() error { return unix.Link(a, b) }); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (p *posixFS) Symlink(target, linkname string) error {
	b, err := p.abs("symlink", linkname)
	if err != nil {
		return err
	}
	if err := retry(func() error { return unix.Symlink(target, b) }); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: linkname, Err: err}
	}
	return nil
}

func (p *posixFS) Readlink(name string) (string, error) {
	a, err := p.abs("readlink", name)
	if err != nil {
		return "", err
	}
	s, err := os.Readlink(a)
	if err != nil {
		return "", pathErr("readlink", name, errors.Unwrap(err))
	}
	return s, nil
}

func (p *posixFS) ReadDir(name string) ([]fs.DirEntry, error) {
	a, err := p.abs("readdir", name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(a)
	if err != nil {
		return nil, pathErr("readdir", name, errors.Unwrap(err))
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, pathErr("readdir", name, errors.Unwrap(err))
	}
	return ents, nil
}

func (p *posixFS) Stat(name string) (fs.FileInfo, error) {
	a, err := p.abs("stat", name)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := retry(func() error { return unix.Stat(a, &st) }); err != nil {
		return nil, pathErr("stat", name, err)
	}
	return newStatInfo(name, &st), nil
}

func (p *posixFS) Lstat(name string) (fs.FileInfo, error) {
	a, err := p.abs("lstat", name)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := retry(func() error { return unix.Lstat(a, &st) }); err != nil {
		return nil, pathErr("lstat", name, err)
	}
	return newStatInfo(name, &st), nil
}

func (p *posixFS) Chmod(name string, mode fs.FileMode) error {
	a, err := p.abs("chmod", name)
	if err != nil {
		return err
	}
	return pathErr("chmod", name, retry(func() error { return unix.Chmod(a, uint32(mode.Perm())) }))
}

func (p *posixFS) Truncate(name string, size int64) error {
	a, err := p.abs("truncate", name)
	if err != nil {
		return err
	}
	return pathErr("truncate", name, retry(func() error { return unix.Truncate(a, size) }))
}

// OpenFile is one open(2) with flag as given (O_DIRECT included) plus
// O_CLOEXEC; the File is the raw descriptor, so O_DIRECT reads and writes
// reach the file system with the caller's buffers untouched.
func (p *posixFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	a, err := p.abs("open", name)
	if err != nil {
		return nil, err
	}
	var fd int
	err = retry(func() error {
		var e error
		fd, e = unix.Open(a, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		return e
	})
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	p.opens.Add(1)
	return &rawFile{fd: fd, name: name, appendMode: flag&unix.O_APPEND != 0}, nil
}

// RemoveAll uses os.RemoveAll, which removes with unlinkat relative to open
// directories instead of one path walk per entry.
func (p *posixFS) RemoveAll(name string) error {
	a, err := p.abs("removeall", name)
	if err != nil {
		return err
	}
	return os.RemoveAll(a)
}

// DropCache writes a file's dirty pages back and evicts its cached pages, so
// the next read comes from the file system (for FUSE, through the daemon).
func (p *posixFS) DropCache(name string) error {
	a, err := p.abs("dropcache", name)
	if err != nil {
		return err
	}
	fd, err := unix.Open(a, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return pathErr("dropcache", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Fdatasync(fd); err != nil {
		return pathErr("fdatasync", name, err)
	}
	return pathErr("fadvise", name, unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED))
}

// Describe reports the mount that holds the target: file-system type, source
// and options from /proc/self/mountinfo, and the statfs type.
func (p *posixFS) Describe() map[string]string {
	out := map[string]string{"path": p.dir}
	var sfs unix.Statfs_t
	if unix.Statfs(p.dir, &sfs) == nil {
		out["statfs_type"] = fsTypeName(int64(sfs.Type))
		out["block_size"] = strconv.FormatInt(sfs.Bsize, 10)
		out["free_bytes"] = strconv.FormatUint(sfs.Bavail*uint64(sfs.Bsize), 10)
	}
	if m, ok, _ := mountinfo.Containing(p.dir); ok {
		out["mount_point"], out["fs_type"], out["mount_source"], out["mount_options"] = m.MountPoint, m.FSType, m.Source, m.Options
	}
	return out
}

var fsMagic = map[int64]string{
	0xEF53: "ext4", 0x58465342: "xfs", 0x01021994: "tmpfs", 0x9123683E: "btrfs", 0x65735546: "fuse",
	0x6969: "nfs", 0x00c36400: "ceph", 0x794c7630: "overlayfs", 0x2fc12fc1: "zfs", 0xFF534D42: "cifs",
}

func fsTypeName(t int64) string {
	if n, ok := fsMagic[t]; ok {
		return n
	}
	return fmt.Sprintf("0x%x", t)
}

// rawFile is an open descriptor with no Go runtime poller in between.
type rawFile struct {
	fd         int
	name       string
	appendMode bool
	closed     bool
}

func (f *rawFile) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	err := retry(func() error {
		var e error
		n, e = unix.Read(f.fd, b)
		return e
	})
	if err != nil {
		return 0, pathErr("read", f.name, err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (f *rawFile) ReadAt(b []byte, off int64) (int, error) {
	total := 0
	for total < len(b) {
		var n int
		err := retry(func() error {
			var e error
			n, e = unix.Pread(f.fd, b[total:], off+int64(total))
			return e
		})
		if err != nil {
			return total, pathErr("read", f.name, err)
		}
		if n == 0 {
			return total, io.EOF
		}
		total += n
	}
	return total, nil
}

func (f *rawFile) Write(b []byte) (int, error) {
	total := 0
	for total < len(b) {
		var n int
		err := retry(func() error {
			var e error
			n, e = unix.Write(f.fd, b[total:])
			return e
		})
		if err != nil {
			return total, pathErr("write", f.name, err)
		}
		if n == 0 {
			return total, pathErr("write", f.name, io.ErrShortWrite)
		}
		total += n
	}
	return total, nil
}

func (f *rawFile) WriteAt(b []byte, off int64) (int, error) {
	if f.appendMode {
		return 0, pathErr("write", f.name, errors.New("WriteAt on a file opened with O_APPEND"))
	}
	total := 0
	for total < len(b) {
		var n int
		err := retry(func() error {
			var e error
			n, e = unix.Pwrite(f.fd, b[total:], off+int64(total))
			return e
		})
		if err != nil {
			return total, pathErr("write", f.name, err)
		}
		if n == 0 {
			return total, pathErr("write", f.name, io.ErrShortWrite)
		}
		total += n
	}
	return total, nil
}

func (f *rawFile) Seek(off int64, whence int) (int64, error) {
	n, err := unix.Seek(f.fd, off, whence)
	return n, pathErr("seek", f.name, err)
}

func (f *rawFile) Close() error {
	if f.closed {
		return pathErr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	// close(2) is not retried on EINTR: the descriptor is gone either way.
	return pathErr("close", f.name, unix.Close(f.fd))
}

func (f *rawFile) Sync() error {
	return pathErr("fsync", f.name, retry(func() error { return unix.Fsync(f.fd) }))
}

func (f *rawFile) Truncate(size int64) error {
	return pathErr("truncate", f.name, retry(func() error { return unix.Ftruncate(f.fd, size) }))
}

func (f *rawFile) Stat() (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := retry(func() error { return unix.Fstat(f.fd, &st) }); err != nil {
		return nil, pathErr("stat", f.name, err)
	}
	return newStatInfo(f.name, &st), nil
}

// statInfo is an fs.FileInfo from a stat buffer.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func newStatInfo(name string, st *unix.Stat_t) *statInfo {
	return &statInfo{name: filepath.Base(name), st: *st}
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (s *statInfo) Sys() any           { return &s.st }
func (s *statInfo) Mode() fs.FileMode  { return modeOf(s.st.Mode) }

// confinedFS resolves every path inside the root with os.Root, so that a
// replayed trace's symlinks cannot lead a write outside the target.
type confinedFS struct {
	*posixFS
	root *os.Root
}

func (c *confinedFS) Close() error { return c.root.Close() }

func (c *confinedFS) Mkdir(name string, perm fs.FileMode) error { return c.root.Mkdir(name, perm) }

func (c *confinedFS) Rmdir(name string) error {
	st, err := c.root.Lstat(name)
	if err != nil {
		return pathErr("rmdir", name, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return pathErr("rmdir", name, syscall.ENOTDIR)
	}
	return c.root.Remove(name)
}

func (c *confinedFS) Unlink(name string) error {
	st, err := c.root.Lstat(name)
	if err != nil {
		return pathErr("unlink", name, errors.Unwrap(err))
	}
	if st.IsDir() {
		return pathErr("unlink", name, syscall.EISDIR)
	}
	return c.root.Remove(name)
}

func (c *confinedFS) Rename(o, n string) error             { return c.root.Rename(o, n) }
func (c *confinedFS) Link(o, n string) error               { return c.root.Link(o, n) }
func (c *confinedFS) Symlink(t, l string) error            { return c.root.Symlink(t, l) }
func (c *confinedFS) Readlink(name string) (string, error) { return c.root.Readlink(name) }
func (c *confinedFS) Stat(name string) (fs.FileInfo, error) {
	return c.root.Stat(name)
}
func (c *confinedFS) Lstat(name string) (fs.FileInfo, error) { return c.root.Lstat(name) }
func (c *confinedFS) Chmod(name string, m fs.FileMode) error { return c.root.Chmod(name, m) }

func (c *confinedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := c.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

func (c *confinedFS) Truncate(name string, size int64) error {
	f, err := c.root.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	terr := f.Truncate(size)
	if cerr := f.Close(); terr == nil {
		terr = cerr
	}
	return terr
}

func (c *confinedFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := c.root.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	c.opens.Add(1)
	return f, nil
}

func (c *confinedFS) RemoveAll(name string) error { return c.root.RemoveAll(name) }

func (c *confinedFS) DropCache(name string) error {
	f, err := c.root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return pathErr("fadvise", name, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
}
