package fsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// The cairn backend talks to a volume through the native client SDK
// (pkg/client), without FUSE and without the kernel's caches. The SDK is
// path-less: every call names an inode, so a path is resolved component by
// component with Lookup from the root. Directories already resolved are kept
// in a small path→inode cache (as the kernel's dentry cache would), dropped
// by this session's own renames and rmdirs, and bypassed once when an
// operation through a cached directory fails with ENOENT, ENOTDIR or ESTALE
// (another client changed the tree). Symlinks are followed inside the volume
// ("/" in a target is the volume's root, ".." never leaves it), so the
// backend is always confined.
//
// The session counts its opens, and the SDK counts its metadata requests;
// both are exposed through Counters, from which the engine derives
// "meta_requests_per_open" and "meta_requests_per_op" for every phase.

func init() {
	register("cairn", backend{open: openCairn, check: checkCairn, usage: "MASTER[,MASTER...]/VOLUME"})
}

// splitCairn splits "MASTER[,MASTER...]/VOLUME".
func splitCairn(rest string) ([]string, string, error) {
	masters, volume, ok := strings.Cut(rest, "/")
	if !ok || masters == "" || volume == "" || strings.Contains(volume, "/") {
		return nil, "", errors.New("cairn: want MASTER[,MASTER...]/VOLUME, e.g. cairn:127.0.0.1:17000/default")
	}
	var out []string
	for _, m := range strings.Split(masters, ",") {
		if _, _, err := net.SplitHostPort(m); err != nil {
			return nil, "", fmt.Errorf("cairn: master %q: %v", m, err)
		}
		out = append(out, m)
	}
	return out, volume, nil
}

func checkCairn(rest string) error {
	_, _, err := splitCairn(rest)
	return err
}

// cairnOpenTimeout bounds connecting to the masters and reading the map.
const cairnOpenTimeout = 20 * time.Second

func openCairn(ctx context.Context, rest string, _ Options) (FS, error) {
	masters, volume, err := splitCairn(rest)
	if err != nil {
		return nil, err
	}
	name := "cairn:" + rest
	// Fail fast when no master even accepts a connection (the SDK would
	// retry until its deadline).
	var dialErr error
	reachable := false
	for _, m := range masters {
		conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", m)
		if err == nil {
			conn.Close()
			reachable = true
			break
		}
		dialErr = err
	}
	if !reachable {
		return nil, fmt.Errorf("target %s: no master at %s answered: %w", name, strings.Join(masters, ","), dialErr)
	}
	octx, cancel := context.WithTimeout(ctx, cairnOpenTimeout)
	defer cancel()
	v, err := client.Open(octx, masters, volume, nil)
	if err != nil {
		if client.ErrnoOf(err) == syscall.ENOENT {
			return nil, fmt.Errorf("target %s: volume %q does not exist (create it with: cairn volume create %s)", name, volume, volume)
		}
		return nil, fmt.Errorf("target %s: open volume %s through the masters at %s (waited up to %s): %w", name, volume, strings.Join(masters, ","), cairnOpenTimeout, err)
	}
	c := &cairnFS{name: name, v: v, masters: masters, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), dirs: map[string]uint64{}}
	// Writable for real: create and remove a probe file in the root.
	probe := fmt.Sprintf(".cairn-bench-probe-%d-%d", os.Getpid(), time.Now().UnixNano())
	if _, err := v.Create(octx, client.RootIno, probe, 0o600, c.uid, c.gid); err != nil {
		v.Close()
		return nil, fmt.Errorf("target %s: volume %s is not writable: %w", name, volume, err)
	}
	if err := v.Unlink(octx, client.RootIno, probe); err != nil {
		v.Close()
		return nil, fmt.Errorf("target %s: remove probe file %s: %w", name, probe, err)
	}
	return c, nil
}

// maxDirCache bounds the path→inode cache of directories; when full it is
// emptied and refilled by the next lookups.
const maxDirCache = 65536

// maxSymlinks bounds symlinks followed while resolving one path (ELOOP).
const maxSymlinks = 40

type cairnFS struct {
	name     string
	v        *client.Volume
	masters  []string
	uid, gid uint32
	opens    atomic.Int64

	mu   sync.Mutex
	dirs map[string]uint64 // "a/b" -> directory inode
}

func (c *cairnFS) String() string { return c.name }

// Close ends the session.
func (c *cairnFS) Close() error {
	if err := c.v.Close(); err != nil {
		return fmt.Errorf("close %s: %w", c.name, err)
	}
	return nil
}

// Counters returns the SDK's traffic counters and this session's opens.
func (c *cairnFS) Counters() map[string]int64 {
	st := c.v.Stats()
	return map[string]int64{
		"meta_requests":   st.MetaRequests,
		"opens":           c.opens.Load(),
		"data_sent_bytes": st.BytesToData,
		"data_recv_bytes": st.BytesFromData,
	}
}

// Describe names the volume, its masters and the map epoch, for the report.
func (c *cairnFS) Describe() map[string]string {
	return map[string]string{
		"fs_type": "cairn (native SDK)", "volume": c.v.Name(), "masters": strings.Join(c.masters, ","),
		"epoch": strconv.FormatUint(c.v.Epoch(), 10), "meta_partitions": strconv.Itoa(len(c.v.Partitions())),
	}
}

func (c *cairnFS) cached(dir string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ino, ok := c.dirs[dir]
	return ino, ok
}

func (c *cairnFS) remember(dir string, ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.dirs) >= maxDirCache {
		clear(c.dirs)
	}
	c.dirs[dir] = ino
}

func (c *cairnFS) forget(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dirs, dir)
}

func (c *cairnFS) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.dirs)
}

// stale reports whether err may come from a cached directory that another
// client removed or replaced.
func stale(err error) bool {
	switch client.ErrnoOf(err) {
	case syscall.ENOENT, syscall.ENOTDIR, syscall.ESTALE:
		return true
	}
	return false
}

// walk resolves a checked path. With follow, a final symlink is followed.
// It returns the inode's attributes and the inode of its parent directory
// (0 for the root).
func (c *cairnFS) walk(ctx context.Context, name string, follow, useCache bool) (*client.Attr, error) {
	if name == "." {
		return c.v.GetAttr(ctx, client.RootIno)
	}
	comps := strings.Split(name, "/")
	// stack holds the inodes of the directories walked so far (root first),
	// so that ".." in a symlink target goes back without leaving the root.
	stack := []uint64{client.RootIno}
	start := 0
	if useCache {
		// The cached directories along the parent's path, from the root
		// on, each one kept on the stack so that a symlink's ".." below
		// them goes back to the right one.
		for i := 1; i < len(comps); i++ {
			ino, ok := c.cached(strings.Join(comps[:i], "/"))
			if !ok {
				break
			}
			stack, start = append(stack, ino), i
		}
	}
	literal := true // the walk so far is the path's own prefix (no symlink)
	links := 0
	var a *client.Attr
	for i := start; i < len(comps); i++ {
		comp := comps[i]
		last := i == len(comps)-1
		switch comp {
		case "", ".":
			if last {
				return c.v.GetAttr(ctx, stack[len(stack)-1])
			}
			continue
		case "..":
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			if last {
				return c.v.GetAttr(ctx, stack[len(stack)-1])
			}
			continue
		}
		var err error
		a, err = c.v.Lookup(ctx, stack[len(stack)-1], comp)
		if err != nil {
			return nil, err
		}
		if a.Type() == syscall.S_IFLNK && (!last || follow) {
			links++
			if links > maxSymlinks {
				return nil, syscall.ELOOP
			}
			target, err := c.v.Readlink(ctx, a.Ino)
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(target, "/") {
				stack = stack[:1]
			}
			rest := append(strings.Split(strings.Trim(target, "/"), "/"), comps[i+1:]...)
			comps, i, literal = rest, -1, false
			if len(rest) == 1 && rest[0] == "" {
				return c.v.GetAttr(ctx, stack[len(stack)-1])
			}
			continue
		}
		if last {
			return a, nil
		}
		if !a.IsDir() {
			return nil, syscall.ENOTDIR
		}
		stack = append(stack, a.Ino)
		if literal {
			c.remember(strings.Join(comps[:i+1], "/"), a.Ino)
		}
	}
	return a, nil
}

// withRetry runs op through the cache, and once more without it when the
// first attempt failed in a way a stale cache entry could explain.
func (c *cairnFS) withRetry(f func(useCache bool) error) error {
	err := f(true)
	if err != nil && stale(err) {
		c.forgetAll()
		err = f(false)
	}
	return err
}

// parent resolves the directory holding name and returns it with the base.
func (c *cairnFS) parent(ctx context.Context, name string, useCache bool) (uint64, string, error) {
	dir, base := "", name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		dir, base = name[:i], name[i+1:]
	}
	if dir == "" {
		return client.RootIno, base, nil
	}
	a, err := c.walk(ctx, dir, true, useCache)
	if err != nil {
		return 0, "", err
	}
	if !a.IsDir() {
		return 0, "", syscall.ENOTDIR
	}
	return a.Ino, base, nil
}

// cerr wraps a client error as the *fs.PathError every backend returns.
func cerr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var en syscall.Errno
	if !errors.As(err, &en) {
		err = &client.Error{Op: op, Errno: client.ErrnoOf(err), Err: err}
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

func linkErr(op, o, n string, err error) error {
	if err == nil {
		return nil
	}
	var en syscall.Errno
	if !errors.As(err, &en) {
		err = &client.Error{Op: op, Errno: client.ErrnoOf(err), Err: err}
	}
	return &os.LinkError{Op: op, Old: o, New: n, Err: err}
}

// onParent runs f on name's parent directory and base name.
func (c *cairnFS) onParent(op, name string, f func(ctx context.Context, parent uint64, base string) error) error {
	if err := CheckPath(op, name); err != nil {
		return err
	}
	if name == "." {
		return &fs.PathError{Op: op, Path: name, Err: syscall.EBUSY}
	}
	ctx := context.Background()
	return cerr(op, name, c.withRetry(func(useCache bool) error {
		p, base, err := c.parent(ctx, name, useCache)
		if err != nil {
			return err
		}
		return f(ctx, p, base)
	}))
}

func (c *cairnFS) Mkdir(name string, perm fs.FileMode) error {
	return c.onParent("mkdir", name, func(ctx context.Context, p uint64, base string) error {
		_, err := c.v.Mkdir(ctx, p, base, uint32(perm.Perm()), c.uid, c.gid)
		return err
	})
}

func (c *cairnFS) Rmdir(name string) error {
	c.forget(name)
	return c.onParent("rmdir", name, func(ctx context.Context, p uint64, base string) error {
		return c.v.Rmdir(ctx, p, base)
	})
}

func (c *cairnFS) Unlink(name string) error {
	return c.onParent("unlink", name, func(ctx context.Context, p uint64, base string) error {
		return c.v.Unlink(ctx, p, base)
	})
}

// twoNames resolves the parents of two paths for rename and link.
func (c *cairnFS) twoNames(op, o, n string, f func(ctx context.Context, op uint64, ob string, np uint64, nb string) error) error {
	if err := CheckPath(op, o); err != nil {
		return err
	}
	if err := CheckPath(op, n); err != nil {
		return err
	}
	if o == "." || n == "." {
		return linkErr(op, o, n, syscall.EBUSY)
	}
	ctx := context.Background()
	return linkErr(op, o, n, c.withRetry(func(useCache bool) error {
		p1, b1, err := c.parent(ctx, o, useCache)
		if err != nil {
			return err
		}
		p2, b2, err := c.parent(ctx, n, useCache)
		if err != nil {
			return err
		}
		return f(ctx, p1, b1, p2, b2)
	}))
}

func (c *cairnFS) Rename(o, n string) error {
	err := c.twoNames("rename", o, n, func(ctx context.Context, p1 uint64, b1 string, p2 uint64, b2 string) error {
		return c.v.Rename(ctx, p1, b1, p2, b2, 0)
	})
	// A renamed directory moves every cached path below it.
	c.forgetAll()
	return err
}

func (c *cairnFS) Link(o, n string) error {
	return c.twoNames("link", o, n, func(ctx context.Context, p1 uint64, b1 string, p2 uint64, b2 string) error {
		a, err := c.v.Lookup(ctx, p1, b1)
		if err != nil {
			return err
		}
		_, err = c.v.Link(ctx, a.Ino, p2, b2)
		return err
	})
}

func (c *cairnFS) Symlink(target, link string) error {
	err := c.onParent("symlink", link, func(ctx context.Context, p uint64, base string) error {
		_, err := c.v.Symlink(ctx, p, base, target, c.uid, c.gid)
		return err
	})
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &os.LinkError{Op: "symlink", Old: target, New: link, Err: pe.Err}
	}
	return err
}

// attr resolves name to its attributes.
func (c *cairnFS) attr(op, name string, follow bool) (*client.Attr, error) {
	if err := CheckPath(op, name); err != nil {
		return nil, err
	}
	ctx := context.Background()
	var a *client.Attr
	err := c.withRetry(func(useCache bool) error {
		var err error
		a, err = c.walk(ctx, name, follow, useCache)
		return err
	})
	return a, cerr(op, name, err)
}

func (c *cairnFS) Readlink(name string) (string, error) {
	a, err := c.attr("readlink", name, false)
	if err != nil {
		return "", err
	}
	s, err := c.v.Readlink(context.Background(), a.Ino)
	return s, cerr("readlink", name, err)
}

// readDirPage is the names asked of the SDK per call.
const readDirPage = 1024

func (c *cairnFS) ReadDir(name string) ([]fs.DirEntry, error) {
	a, err := c.attr("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if !a.IsDir() {
		return nil, cerr("readdir", name, syscall.ENOTDIR)
	}
	ctx := context.Background()
	var out []fs.DirEntry
	cursor := ""
	for {
		page, more, err := c.v.ReadDir(ctx, a.Ino, cursor, readDirPage)
		if err != nil {
			return nil, cerr("readdir", name, err)
		}
		for _, e := range page {
			out = append(out, &cairnDirEntry{c: c, e: e})
		}
		if !more || len(page) == 0 {
			return out, nil
		}
		cursor = page[len(page)-1].Name
	}
}

func (c *cairnFS) Stat(name string) (fs.FileInfo, error) {
	a, err := c.attr("stat", name, true)
	if err != nil {
		return nil, err
	}
	return newCairnInfo(name, a), nil
}

func (c *cairnFS) Lstat(name string) (fs.FileInfo, error) {
	a, err := c.attr("lstat", name, false)
	if err != nil {
		return nil, err
	}
	return newCairnInfo(name, a), nil
}

func (c *cairnFS) Chmod(name string, mode fs.FileMode) error {
	a, err := c.attr("chmod", name, true)
	if err != nil {
		return err
	}
	_, err = c.v.Setattr(context.Background(), a.Ino, client.SetattrIn{Valid: client.SetMode, Mode: uint32(mode.Perm())})
	return cerr("chmod", name, err)
}

func (c *cairnFS) Truncate(name string, size int64) error {
	if size < 0 {
		return cerr("truncate", name, syscall.EINVAL)
	}
	a, err := c.attr("truncate", name, true)
	if err != nil {
		return err
	}
	_, err = c.v.Setattr(context.Background(), a.Ino, client.SetattrIn{Valid: client.SetSize, Size: uint64(size)})
	return cerr("truncate", name, err)
}

// OpenFile looks the name up (creating it with O_CREAT), then opens the
// inode: O_EXCL fails on an existing name, O_NOFOLLOW on a final symlink,
// O_TRUNC truncates; a directory opened read-only gives a File whose data
// calls fail with EISDIR.
func (c *cairnFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	const op = "open"
	if err := CheckPath(op, name); err != nil {
		return nil, err
	}
	ctx := context.Background()
	var a *client.Attr
	err := c.withRetry(func(useCache bool) error {
		var err error
		a, err = c.walk(ctx, name, flag&syscall.O_NOFOLLOW == 0 && flag&syscall.O_EXCL == 0, useCache)
		switch {
		case err == nil && flag&(syscall.O_CREAT|syscall.O_EXCL) == syscall.O_CREAT|syscall.O_EXCL:
			return syscall.EEXIST
		case err == nil && a.Type() == syscall.S_IFLNK:
			return syscall.ELOOP
		case err == nil || flag&syscall.O_CREAT == 0 || client.ErrnoOf(err) != syscall.ENOENT:
			return err
		}
		p, base, perr := c.parent(ctx, name, useCache)
		if perr != nil {
			return perr
		}
		a, err = c.v.Create(ctx, p, base, uint32(perm.Perm()), c.uid, c.gid)
		if client.ErrnoOf(err) == syscall.EEXIST && flag&syscall.O_EXCL == 0 {
			a, err = c.v.Lookup(ctx, p, base) // lost a race with another creator
		}
		return err
	})
	if err != nil {
		return nil, cerr(op, name, err)
	}
	c.opens.Add(1)
	if a.IsDir() {
		if flag&syscall.O_ACCMODE != syscall.O_RDONLY {
			return nil, cerr(op, name, syscall.EISDIR)
		}
		return &cairnFile{c: c, name: name, ino: a.Ino, dir: true}, nil
	}
	if flag&syscall.O_DIRECTORY != 0 {
		return nil, cerr(op, name, syscall.ENOTDIR)
	}
	f, err := c.v.OpenFile(ctx, a.Ino, flag)
	if err != nil {
		return nil, cerr(op, name, err)
	}
	return &cairnFile{c: c, name: name, ino: a.Ino, f: f, appendMode: flag&syscall.O_APPEND != 0}, nil
}

// cairnFile is an open file of the SDK with a stream position.
type cairnFile struct {
	c          *cairnFS
	name       string
	ino        uint64
	f          *client.File // nil for a directory
	dir        bool
	appendMode bool
	pos        int64
	closed     bool
}

func (f *cairnFile) data(op string) error {
	switch {
	case f.closed:
		return cerr(op, f.name, fs.ErrClosed)
	case f.dir:
		return cerr(op, f.name, syscall.EISDIR)
	}
	return nil
}

func (f *cairnFile) Read(b []byte) (int, error) {
	if err := f.data("read"); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	n, err := f.f.ReadAt(b, f.pos)
	f.pos += int64(n)
	if err == io.EOF {
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	}
	return n, cerr("read", f.name, err)
}

func (f *cairnFile) ReadAt(b []byte, off int64) (int, error) {
	if err := f.data("read"); err != nil {
		return 0, err
	}
	n, err := f.f.ReadAt(b, off)
	if err == io.EOF {
		return n, io.EOF
	}
	return n, cerr("read", f.name, err)
}

func (f *cairnFile) Write(b []byte) (int, error) {
	if err := f.data("write"); err != nil {
		return 0, err
	}
	n, err := f.f.WriteAt(b, f.pos)
	if f.appendMode {
		f.pos = int64(f.f.Size())
	} else {
		f.pos += int64(n)
	}
	return n, cerr("write", f.name, err)
}

func (f *cairnFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.data("write"); err != nil {
		return 0, err
	}
	if f.appendMode {
		return 0, cerr("write", f.name, errors.New("WriteAt on a file opened with O_APPEND"))
	}
	n, err := f.f.WriteAt(b, off)
	return n, cerr("write", f.name, err)
}

func (f *cairnFile) Seek(off int64, whence int) (int64, error) {
	if err := f.data("seek"); err != nil {
		return 0, err
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.pos
	case io.SeekEnd:
		base = int64(f.f.Size())
	default:
		return 0, cerr("seek", f.name, syscall.EINVAL)
	}
	if base+off < 0 {
		return 0, cerr("seek", f.name, syscall.EINVAL)
	}
	f.pos = base + off
	return f.pos, nil
}

func (f *cairnFile) Sync() error {
	if f.closed {
		return cerr("fsync", f.name, fs.ErrClosed)
	}
	if f.dir {
		return nil
	}
	return cerr("fsync", f.name, f.f.Fsync(context.Background()))
}

func (f *cairnFile) Truncate(size int64) error {
	if err := f.data("truncate"); err != nil {
		return err
	}
	if size < 0 {
		return cerr("truncate", f.name, syscall.EINVAL)
	}
	return cerr("truncate", f.name, f.f.Truncate(context.Background(), uint64(size)))
}

func (f *cairnFile) Stat() (fs.FileInfo, error) {
	if f.closed {
		return nil, cerr("stat", f.name, fs.ErrClosed)
	}
	a, err := f.c.v.GetAttr(context.Background(), f.ino)
	if err != nil {
		return nil, cerr("stat", f.name, err)
	}
	if f.f != nil {
		a.Size = max(a.Size, f.f.Size())
	}
	return newCairnInfo(f.name, a), nil
}

func (f *cairnFile) Close() error {
	if f.closed {
		return cerr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	if f.f == nil {
		return nil
	}
	return cerr("close", f.name, f.f.Close(context.Background()))
}

// cairnInfo is an fs.FileInfo from the SDK's attributes.
type cairnInfo struct {
	name string
	a    client.Attr
}

func newCairnInfo(name string, a *client.Attr) *cairnInfo {
	base := name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		base = name[i+1:]
	}
	return &cairnInfo{name: base, a: *a}
}

func (i *cairnInfo) Name() string       { return i.name }
func (i *cairnInfo) Size() int64        { return int64(i.a.Size) }
func (i *cairnInfo) ModTime() time.Time { return i.a.Mtime }
func (i *cairnInfo) IsDir() bool        { return i.a.IsDir() }
func (i *cairnInfo) Sys() any           { return &i.a }
func (i *cairnInfo) Mode() fs.FileMode  { return modeOf(i.a.Mode) }

// modeOf turns st_mode bits into an fs.FileMode.
func modeOf(mode uint32) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	}
	if mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// cairnDirEntry is one name of a listing; Info asks for the attributes.
type cairnDirEntry struct {
	c *cairnFS
	e client.DirEntry
}

func (d *cairnDirEntry) Name() string      { return d.e.Name }
func (d *cairnDirEntry) IsDir() bool       { return d.e.Type == syscall.S_IFDIR }
func (d *cairnDirEntry) Type() fs.FileMode { return modeOf(d.e.Type).Type() }
func (d *cairnDirEntry) Info() (fs.FileInfo, error) {
	a, err := d.c.v.GetAttr(context.Background(), d.e.Ino)
	if err != nil {
		return nil, cerr("stat", d.e.Name, err)
	}
	return newCairnInfo(d.e.Name, a), nil
}
