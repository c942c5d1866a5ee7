package fsys

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/cairnfs/cairn/pkg/client"
)

// The cairn-cached backend talks to a volume through the native client SDK
// (pkg/client), without FUSE and without the kernel's caches, by inode: a
// path is resolved component by component with Lookup from the root, and
// every directory resolved is kept in a path→inode cache (as the kernel's
// dentry cache would), unbounded by default, so that once the cache is warm
// an open costs the lookup of the last name and the inode read. It is the
// reference "client that has everything cached" against which the stateless
// cairn: backend (cairnpath.go) is measured. The cache is dropped by this
// session's own renames and rmdirs, and bypassed once when an operation
// through a cached directory fails with ENOENT, ENOTDIR or ESTALE (another
// client changed the tree). Symlinks are followed inside the volume ("/" in
// a target is the volume's root, ".." never leaves it), so the backend is
// always confined.
//
// The session counts its opens, and the SDK counts its metadata requests;
// both are exposed through Counters, from which the engine derives
// "meta_requests_per_open" and "meta_requests_per_op" for every phase.

func init() {
	register("cairn-cached", backend{open: openCairnCached, check: checkCairnCached, usage: "MASTER[,MASTER...]/VOLUME[?dircache=N]"})
}

func checkCairnCached(rest string) error {
	t, err := parseCairnTarget("cairn-cached", rest, "dircache")
	if err != nil {
		return err
	}
	_, err = dirCacheBound(t)
	return err
}

// dirCacheBound reads the optional bound of the directory cache (0: none).
func dirCacheBound(t cairnTarget) (int, error) {
	s := t.params.Get("dircache")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cairn-cached: dircache=%q: want a number of directories, 0 for no bound", s)
	}
	return n, nil
}

func openCairnCached(ctx context.Context, rest string, _ Options) (FS, error) {
	s, t, err := openSDK(ctx, "cairn-cached", rest, "cairn (native SDK, inode walk with a directory cache)", "dircache")
	if err != nil {
		return nil, err
	}
	bound, err := dirCacheBound(t)
	if err != nil {
		s.Close()
		return nil, err
	}
	c := &cairnFS{sdkSession: s, maxDirs: bound, dirs: map[string]uint64{}}
	c.statter = c.attr
	return c, nil
}

// maxSymlinks bounds symlinks followed while resolving one path (ELOOP).
const maxSymlinks = 40

type cairnFS struct {
	*sdkSession
	statter     // Stat and Lstat through attr
	maxDirs int // bound of dirs (0: none); when full it is emptied and refilled by the next lookups

	mu   sync.Mutex
	dirs map[string]uint64 // "a/b" -> directory inode
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
	if c.maxDirs > 0 && len(c.dirs) >= c.maxDirs {
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
			out = append(out, &cairnDirEntry{e: e, info: c.entryInfo})
		}
		if !more || len(page) == 0 {
			return out, nil
		}
		cursor = page[len(page)-1].Name
	}
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
		return &cairnFile{v: c.v, name: name, ino: a.Ino, dir: true}, nil
	}
	if flag&syscall.O_DIRECTORY != 0 {
		return nil, cerr(op, name, syscall.ENOTDIR)
	}
	f, err := c.v.OpenFile(ctx, a.Ino, flag&^sdkIgnoredFlags)
	if err != nil {
		return nil, cerr(op, name, err)
	}
	return &cairnFile{v: c.v, name: name, ino: a.Ino, f: f, appendMode: flag&syscall.O_APPEND != 0}, nil
}

// entryInfo reads a listed entry's attributes by its inode.
func (c *cairnFS) entryInfo(e client.DirEntry) (*client.Attr, error) {
	return c.v.GetAttr(context.Background(), e.Ino)
}
