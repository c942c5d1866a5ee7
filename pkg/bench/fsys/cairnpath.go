package fsys

import (
	"context"
	"io/fs"
	"os"
	"syscall"

	"github.com/cairnfs/cairn/pkg/client"
)

// The cairn backend is the stateless client (FalconFS §4): it keeps no
// metadata at all and calls the SDK's path API, where every call carries
// the whole path inside the volume ("/a/b/c") to the meta partition that
// owns the last name, which resolves the directories in its namespace
// replica and checks permissions against the caller's credentials. An
// open of an existing file is one metadata request whatever the depth of
// its path. Symlinks are resolved by the servers and the SDK inside the
// volume ("/" in a target is the volume's root, ".." never leaves it), so
// the backend is always confined.
//
// Only these cases cost a second request, to give the FS interface's
// semantics the path API has no flag for: O_NOFOLLOW (an lstat first),
// O_DIRECTORY and a read-only open of a directory (a stat; the File's
// data calls then fail with EISDIR).

func init() {
	register("cairn", backend{open: openCairnPath, check: checkCairnPath, usage: "MASTER[,MASTER...]/VOLUME"})
}

func checkCairnPath(rest string) error {
	_, err := parseCairnTarget("cairn", rest)
	return err
}

func openCairnPath(ctx context.Context, rest string, _ Options) (FS, error) {
	s, _, err := openSDK(ctx, "cairn", rest, "cairn (native SDK, stateless path API)")
	if err != nil {
		return nil, err
	}
	return newCairnPathFS(s, s.v), nil
}

// pathAPI is the part of the SDK the stateless backend calls;
// *client.Volume implements it.
type pathAPI interface {
	StatPath(ctx context.Context, path string, cred client.Cred) (*client.Attr, error)
	LstatPath(ctx context.Context, path string, cred client.Cred) (*client.Attr, error)
	OpenPath(ctx context.Context, path string, flags int, mode uint32, cred client.Cred) (*client.File, error)
	MkdirPath(ctx context.Context, path string, mode uint32, cred client.Cred) (*client.Attr, error)
	SymlinkPath(ctx context.Context, target, path string, cred client.Cred) (*client.Attr, error)
	UnlinkPath(ctx context.Context, path string, cred client.Cred) error
	RmdirPath(ctx context.Context, path string, cred client.Cred) error
	RenamePath(ctx context.Context, oldPath, newPath string, cred client.Cred) error
	LinkPath(ctx context.Context, oldPath, newPath string, cred client.Cred) (*client.Attr, error)
	ReadlinkPath(ctx context.Context, path string, cred client.Cred) (string, error)
	ReadDirPath(ctx context.Context, path string, cred client.Cred) ([]client.DirEntry, error)
	SetattrPath(ctx context.Context, path string, in client.SetattrIn, cred client.Cred) (*client.Attr, error)
}

type cairnPathFS struct {
	*sdkSession
	statter // Stat and Lstat through attr
	api     pathAPI
	cred    client.Cred
}

func newCairnPathFS(s *sdkSession, api pathAPI) *cairnPathFS {
	cred := client.Cred{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			cred.Groups = append(cred.Groups, uint32(g))
		}
	}
	c := &cairnPathFS{sdkSession: s, api: api, cred: cred}
	c.statter = c.attr
	return c
}

// vpath checks a relative path and turns it into the volume's absolute
// path ("." is "/").
func vpath(op, name string) (string, error) {
	if err := CheckPath(op, name); err != nil {
		return "", err
	}
	if name == "." {
		return "/", nil
	}
	return "/" + name, nil
}

// call runs f on name's volume path and wraps its error.
func (c *cairnPathFS) call(op, name string, f func(ctx context.Context, p string) error) error {
	p, err := vpath(op, name)
	if err != nil {
		return err
	}
	return cerr(op, name, f(context.Background(), p))
}

// call2 runs f on two volume paths and wraps its error as *os.LinkError.
func (c *cairnPathFS) call2(op, o, n string, f func(ctx context.Context, op, np string) error) error {
	po, err := vpath(op, o)
	if err != nil {
		return err
	}
	pn, err := vpath(op, n)
	if err != nil {
		return err
	}
	return linkErr(op, o, n, f(context.Background(), po, pn))
}

func (c *cairnPathFS) Mkdir(name string, perm fs.FileMode) error {
	return c.call("mkdir", name, func(ctx context.Context, p string) error {
		_, err := c.api.MkdirPath(ctx, p, uint32(perm.Perm()), c.cred)
		return err
	})
}

func (c *cairnPathFS) Rmdir(name string) error {
	return c.call("rmdir", name, func(ctx context.Context, p string) error { return c.api.RmdirPath(ctx, p, c.cred) })
}

func (c *cairnPathFS) Unlink(name string) error {
	return c.call("unlink", name, func(ctx context.Context, p string) error { return c.api.UnlinkPath(ctx, p, c.cred) })
}

func (c *cairnPathFS) Rename(o, n string) error {
	return c.call2("rename", o, n, func(ctx context.Context, po, pn string) error { return c.api.RenamePath(ctx, po, pn, c.cred) })
}

func (c *cairnPathFS) Link(o, n string) error {
	return c.call2("link", o, n, func(ctx context.Context, po, pn string) error {
		_, err := c.api.LinkPath(ctx, po, pn, c.cred)
		return err
	})
}

// Symlink stores target verbatim; it is resolved inside the volume.
func (c *cairnPathFS) Symlink(target, link string) error {
	p, err := vpath("symlink", link)
	if err != nil {
		return err
	}
	_, err = c.api.SymlinkPath(context.Background(), target, p, c.cred)
	return linkErr("symlink", target, link, err)
}

func (c *cairnPathFS) Readlink(name string) (string, error) {
	var s string
	err := c.call("readlink", name, func(ctx context.Context, p string) (err error) {
		s, err = c.api.ReadlinkPath(ctx, p, c.cred)
		return err
	})
	return s, err
}

// ReadDir lists the directory in one call; an entry's Info is an lstat of
// its path.
func (c *cairnPathFS) ReadDir(name string) ([]fs.DirEntry, error) {
	var ents []client.DirEntry
	var dir string
	err := c.call("readdir", name, func(ctx context.Context, p string) (err error) {
		dir = p
		ents, err = c.api.ReadDirPath(ctx, p, c.cred)
		return err
	})
	if err != nil {
		return nil, err
	}
	if dir != "/" {
		dir += "/"
	}
	info := func(e client.DirEntry) (*client.Attr, error) {
		return c.api.LstatPath(context.Background(), dir+e.Name, c.cred)
	}
	out := make([]fs.DirEntry, 0, len(ents))
	for _, e := range ents {
		out = append(out, &cairnDirEntry{e: e, info: info})
	}
	return out, nil
}

// attr stats name, following a final symlink or not.
func (c *cairnPathFS) attr(op, name string, follow bool) (*client.Attr, error) {
	var a *client.Attr
	err := c.call(op, name, func(ctx context.Context, p string) (err error) {
		if follow {
			a, err = c.api.StatPath(ctx, p, c.cred)
		} else {
			a, err = c.api.LstatPath(ctx, p, c.cred)
		}
		return err
	})
	return a, err
}

func (c *cairnPathFS) setattr(op, name string, in client.SetattrIn) error {
	return c.call(op, name, func(ctx context.Context, p string) error {
		_, err := c.api.SetattrPath(ctx, p, in, c.cred)
		return err
	})
}

func (c *cairnPathFS) Chmod(name string, mode fs.FileMode) error {
	return c.setattr("chmod", name, client.SetattrIn{Valid: client.SetMode, Mode: uint32(mode.Perm())})
}

func (c *cairnPathFS) Truncate(name string, size int64) error {
	if size < 0 {
		return cerr("truncate", name, syscall.EINVAL)
	}
	return c.setattr("truncate", name, client.SetattrIn{Valid: client.SetSize, Size: uint64(size)})
}

// OpenFile opens through the path API in one request (O_CREAT, O_EXCL,
// O_TRUNC and O_APPEND are the SDK's); O_NOFOLLOW, O_DIRECTORY and
// directories are handled here with one stat more.
func (c *cairnPathFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	const op = "open"
	p, err := vpath(op, name)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if flag&syscall.O_NOFOLLOW != 0 {
		a, err := c.api.LstatPath(ctx, p, c.cred)
		switch {
		case err == nil && a.Type() == syscall.S_IFLNK:
			return nil, cerr(op, name, syscall.ELOOP)
		case err != nil && (flag&syscall.O_CREAT == 0 || client.ErrnoOf(err) != syscall.ENOENT):
			return nil, cerr(op, name, err)
		}
	}
	if flag&syscall.O_DIRECTORY != 0 {
		return c.openDir(ctx, p, name, flag)
	}
	f, err := c.api.OpenPath(ctx, p, flag&^(syscall.O_NOFOLLOW|sdkIgnoredFlags), uint32(perm.Perm()), c.cred)
	if client.ErrnoOf(err) == syscall.EISDIR && flag&syscall.O_ACCMODE == syscall.O_RDONLY && flag&syscall.O_CREAT == 0 {
		return c.openDir(ctx, p, name, flag)
	}
	if err != nil {
		return nil, cerr(op, name, err)
	}
	c.opens.Add(1)
	return &cairnFile{v: c.v, name: name, ino: f.Ino(), f: f, appendMode: flag&syscall.O_APPEND != 0}, nil
}

// openDir opens a directory read-only: a File whose data calls fail with
// EISDIR (ENOTDIR if name is not a directory).
func (c *cairnPathFS) openDir(ctx context.Context, p, name string, flag int) (File, error) {
	const op = "open"
	a, err := c.api.StatPath(ctx, p, c.cred)
	switch {
	case err != nil:
		return nil, cerr(op, name, err)
	case !a.IsDir():
		return nil, cerr(op, name, syscall.ENOTDIR)
	case flag&syscall.O_ACCMODE != syscall.O_RDONLY:
		return nil, cerr(op, name, syscall.EISDIR)
	}
	c.opens.Add(1)
	return &cairnFile{v: c.v, name: name, ino: a.Ino, dir: true}, nil
}
