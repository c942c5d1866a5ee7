package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/localcluster"
)

var clientSeed = flag.Uint64("client.seed", 1, "seed of TestClientRandomVsLocal (0: time-based)")

// openClient opens volume "default" of the `cairn up` cluster in dir.
func openClient(t *testing.T, dir string) *client.Volume {
	t.Helper()
	l, err := localcluster.LoadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := client.Open(ctx, l.MasterAddrs(), "default", &client.Options{TLS: adminTLS(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func errnoName(n syscall.Errno) string {
	if n == 0 {
		return "OK"
	}
	return unix.ErrnoName(n)
}

// wantErrno fails unless err carries errno want (0: no error).
func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if got := client.ErrnoOf(err); got != want {
		t.Fatalf("%s: got %s (%v), want %s", what, errnoName(got), err, errnoName(want))
	}
	if want != 0 && !errors.Is(err, want) {
		t.Fatalf("%s: errors.Is(%v, %s) is false", what, err, errnoName(want))
	}
}

// nameOn returns a name with prefix that the volume routes, under parent, to
// partition part (or, with not set, to any other partition).
func nameOn(t *testing.T, v *client.Volume, parent uint64, prefix string, part uint64, not bool) string {
	t.Helper()
	for i := range 10000 {
		n := fmt.Sprintf("%s%d", prefix, i)
		if (v.RouteName(parent, n) == part) != not {
			return n
		}
	}
	t.Fatalf("no name routes as asked")
	return ""
}

// TestClientCrossPartition checks rename, link, rmdir and the subtree check
// when the records involved sit on different meta partitions.
func TestClientCrossPartition(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cx")
	up := startUp(t, dir)
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if n := len(v.Partitions()); n < 2 {
		t.Fatalf("volume has %d meta partitions, need 2", n)
	}
	must := func(a *client.Attr, err error) *client.Attr {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	root := must(v.GetAttr(ctx, client.RootIno))
	d1 := must(v.Mkdir(ctx, client.RootIno, "d1", 0o755, 0, 0))
	d2 := must(v.Mkdir(ctx, client.RootIno, "d2", 0o755, 0, 0))
	if got := must(v.GetAttr(ctx, client.RootIno)); got.Nlink != root.Nlink+2 {
		t.Fatalf("root nlink %d after two mkdirs, want %d", got.Nlink, root.Nlink+2)
	}
	if d1.Parent != client.RootIno || !d1.IsDir() || d1.Nlink != 2 {
		t.Fatalf("d1 = %+v", d1)
	}

	// A file whose name sits on a partition other than d2's new name.
	x := nameOn(t, v, d1.Ino, "x", 0, true)
	f := must(v.Create(ctx, d1.Ino, x, 0o640, 7, 8))
	y := nameOn(t, v, d2.Ino, "y", v.RouteName(d1.Ino, x), true)
	if err := v.Rename(ctx, d1.Ino, x, d2.Ino, y, 0); err != nil {
		t.Fatal(err)
	}
	_, err := v.Lookup(ctx, d1.Ino, x)
	wantErrno(t, "old name after rename", err, syscall.ENOENT)
	got := must(v.Lookup(ctx, d2.Ino, y))
	if got.Ino != f.Ino || got.Mode != syscall.S_IFREG|0o640 || got.Uid != 7 || got.Gid != 8 || got.Nlink != 1 {
		t.Fatalf("renamed file %+v, created %+v", got, f)
	}

	// Hard link onto a third name on another partition than the inode.
	z := nameOn(t, v, d1.Ino, "z", v.HomeOf(f.Ino), true)
	if a := must(v.Link(ctx, f.Ino, d1.Ino, z)); a.Nlink != 2 {
		t.Fatalf("nlink after link %d", a.Nlink)
	}
	_, err = v.Link(ctx, f.Ino, d1.Ino, z)
	wantErrno(t, "link onto existing name", err, syscall.EEXIST)
	_, err = v.Link(ctx, d1.Ino, d2.Ino, "dirlink")
	wantErrno(t, "link of a directory", err, syscall.EPERM)
	if a := must(v.GetAttr(ctx, f.Ino)); a.Nlink != 2 {
		t.Fatalf("failed link changed nlink to %d", a.Nlink)
	}
	if err := v.Unlink(ctx, d2.Ino, y); err != nil {
		t.Fatal(err)
	}
	if a := must(v.Lookup(ctx, d1.Ino, z)); a.Nlink != 1 {
		t.Fatalf("nlink after unlink %d", a.Nlink)
	}

	// Rename over an existing file on another partition: the target is evicted.
	g := must(v.Create(ctx, d2.Ino, y, 0o600, 0, 0))
	if err := v.Rename(ctx, d1.Ino, z, d2.Ino, y, 0); err != nil {
		t.Fatal(err)
	}
	_, err = v.GetAttr(ctx, g.Ino)
	wantErrno(t, "replaced target", err, syscall.ENOENT)
	if err := v.Unlink(ctx, d2.Ino, y); err != nil {
		t.Fatal(err)
	}
	_, err = v.GetAttr(ctx, f.Ino)
	wantErrno(t, "inode after last unlink", err, syscall.ENOENT)

	// rmdir sees a child held by another partition than the name of the
	// directory and than the directory's home.
	sub := must(v.Mkdir(ctx, d1.Ino, "sub", 0o755, 0, 0))
	c := nameOn(t, v, sub.Ino, "c", v.RouteName(d1.Ino, "sub"), true)
	must(v.Create(ctx, sub.Ino, c, 0o644, 0, 0))
	wantErrno(t, "rmdir non-empty", v.Rmdir(ctx, d1.Ino, "sub"), syscall.ENOTEMPTY)
	// The failed rmdir lifted its fences: creating works.
	must(v.Create(ctx, sub.Ino, c+"b", 0o644, 0, 0))
	wantErrno(t, "rmdir a file", v.Rmdir(ctx, sub.Ino, c), syscall.ENOTDIR)
	wantErrno(t, "unlink a dir", v.Unlink(ctx, d1.Ino, "sub"), syscall.EISDIR)
	for _, n := range []string{c, c + "b"} {
		if err := v.Unlink(ctx, sub.Ino, n); err != nil {
			t.Fatal(err)
		}
	}
	d1n := must(v.GetAttr(ctx, d1.Ino)).Nlink
	if err := v.Rmdir(ctx, d1.Ino, "sub"); err != nil {
		t.Fatal(err)
	}
	if a := must(v.GetAttr(ctx, d1.Ino)); a.Nlink != d1n-1 {
		t.Fatalf("d1 nlink %d after rmdir, want %d", a.Nlink, d1n-1)
	}
	_, err = v.GetAttr(ctx, sub.Ino)
	wantErrno(t, "removed dir", err, syscall.ENOENT)
	_, err = v.Create(ctx, sub.Ino, "late", 0o644, 0, 0)
	wantErrno(t, "create in removed dir", err, syscall.ENOENT)

	// Subtree check across partitions, and parent pointers on moves.
	a := must(v.Mkdir(ctx, d1.Ino, "a", 0o755, 0, 0))
	b := must(v.Mkdir(ctx, a.Ino, "b", 0o755, 0, 0))
	cc := must(v.Mkdir(ctx, b.Ino, "c", 0o755, 0, 0))
	wantErrno(t, "dir into own subtree", v.Rename(ctx, d1.Ino, "a", cc.Ino, "a2", 0), syscall.EINVAL)
	wantErrno(t, "dir into itself", v.Rename(ctx, d1.Ino, "a", a.Ino, "a2", 0), syscall.EINVAL)
	wantErrno(t, "onto an ancestor", v.Rename(ctx, b.Ino, "c", d1.Ino, "a", 0), syscall.ENOTEMPTY)
	if err := v.Rename(ctx, a.Ino, "b", d2.Ino, "b", 0); err != nil {
		t.Fatal(err)
	}
	if got := must(v.GetAttr(ctx, b.Ino)); got.Parent != d2.Ino {
		t.Fatalf("parent pointer after move: %d, want %d", got.Parent, d2.Ino)
	}
	if got := must(v.GetAttr(ctx, a.Ino)); got.Nlink != 2 {
		t.Fatalf("source parent nlink %d after moving its subdir out", got.Nlink)
	}
	// Now a is no longer above c: moving a under c is fine.
	if err := v.Rename(ctx, d1.Ino, "a", cc.Ino, "a", 0); err != nil {
		t.Fatal(err)
	}

	// Exchange a directory and a file across parents and partitions.
	fx := must(v.Create(ctx, d1.Ino, "fx", 0o644, 0, 0))
	d1n = must(v.GetAttr(ctx, d1.Ino)).Nlink
	d2n := must(v.GetAttr(ctx, d2.Ino)).Nlink
	if err := v.Rename(ctx, d1.Ino, "fx", d2.Ino, "b", client.RenameExchange); err != nil {
		t.Fatal(err)
	}
	if got := must(v.Lookup(ctx, d1.Ino, "fx")); got.Ino != b.Ino || got.Parent != d1.Ino {
		t.Fatalf("after exchange d1/fx = %+v", got)
	}
	if got := must(v.Lookup(ctx, d2.Ino, "b")); got.Ino != fx.Ino {
		t.Fatalf("after exchange d2/b = %+v", got)
	}
	if n1, n2 := must(v.GetAttr(ctx, d1.Ino)).Nlink, must(v.GetAttr(ctx, d2.Ino)).Nlink; n1 != d1n+1 || n2 != d2n-1 {
		t.Fatalf("nlinks after exchange %d %d, want %d %d", n1, n2, d1n+1, d2n-1)
	}
	wantErrno(t, "noreplace", v.Rename(ctx, d1.Ino, "fx", d2.Ino, "b", client.RenameNoreplace), syscall.EEXIST)
	wantErrno(t, "exchange with missing", v.Rename(ctx, d1.Ino, "fx", d2.Ino, "nope", client.RenameExchange), syscall.ENOENT)
	wantErrno(t, "both flags", v.Rename(ctx, d1.Ino, "fx", d2.Ino, "b", client.RenameExchange|client.RenameNoreplace), syscall.EINVAL)

	// Bad names and inode numbers.
	_, err = v.Create(ctx, d1.Ino, strings.Repeat("n", 256), 0o644, 0, 0)
	wantErrno(t, "long name", err, syscall.ENAMETOOLONG)
	_, err = v.Mkdir(ctx, d1.Ino, "a/b", 0o755, 0, 0)
	wantErrno(t, "slash", err, syscall.EINVAL)
	_, err = v.GetAttr(ctx, 1<<62)
	wantErrno(t, "unknown inode", err, syscall.ENOENT)
	_, err = v.Lookup(ctx, fx.Ino, "x")
	wantErrno(t, "lookup under a file", err, syscall.ENOTDIR)

	// Devices, symlinks, setattr with explicit and current times, truncate.
	dev := must(v.Mknod(ctx, d1.Ino, "dev", syscall.S_IFCHR|0o600, 0x0103, 0, 0))
	if dev.Type() != syscall.S_IFCHR || dev.Rdev != 0x0103 {
		t.Fatalf("char device %+v", dev)
	}
	_, err = v.Mknod(ctx, d1.Ino, "dir", syscall.S_IFDIR|0o755, 0, 0, 0)
	wantErrno(t, "mknod of a directory", err, syscall.EINVAL)
	ln := must(v.Symlink(ctx, d2.Ino, "ln", "../some/where", 0, 0))
	if target, err := v.Readlink(ctx, ln.Ino); err != nil || target != "../some/where" || ln.Size != 13 {
		t.Fatalf("readlink %q %v, size %d", target, err, ln.Size)
	}
	_, err = v.Readlink(ctx, fx.Ino)
	wantErrno(t, "readlink of a file", err, syscall.EINVAL)
	at := time.Unix(1_600_000_000, 123)
	before := time.Now().Add(-time.Minute)
	sa := must(v.Setattr(ctx, fx.Ino, client.SetattrIn{Valid: client.SetAtime | client.SetMtimeNow | client.SetSize | client.SetMode, Atime: at, Size: 12345, Mode: 0o4755}))
	if !sa.Atime.Equal(at) || sa.Mtime.Before(before) || sa.Size != 12345 || sa.Mode != syscall.S_IFREG|0o4755 {
		t.Fatalf("setattr: %+v", sa)
	}
	if sa = must(v.Setattr(ctx, fx.Ino, client.SetattrIn{Valid: client.SetUID, Uid: 42})); sa.Uid != 42 || sa.Mode != syscall.S_IFREG|0o755 {
		t.Fatalf("chown did not clear setuid: %+v", sa)
	}
	_, err = v.Setattr(ctx, d1.Ino, client.SetattrIn{Valid: client.SetSize})
	wantErrno(t, "truncate a directory", err, syscall.EISDIR)
	_, err = v.Setattr(ctx, ln.Ino, client.SetattrIn{Valid: client.SetSize})
	wantErrno(t, "truncate a symlink", err, syscall.EINVAL)

	// Xattrs and statfs.
	if err := v.SetXattr(ctx, fx.Ino, "user.k", []byte("v"), client.XattrCreate); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "xattr create twice", v.SetXattr(ctx, fx.Ino, "user.k", []byte("w"), client.XattrCreate), syscall.EEXIST)
	wantErrno(t, "xattr namespace", v.SetXattr(ctx, fx.Ino, "bogus.k", nil, 0), syscall.EOPNOTSUPP)
	if val, err := v.GetXattr(ctx, fx.Ino, "user.k"); err != nil || string(val) != "v" {
		t.Fatalf("getxattr %q %v", val, err)
	}
	if names, err := v.ListXattr(ctx, fx.Ino); err != nil || !slices.Equal(names, []string{"user.k"}) {
		t.Fatalf("listxattr %v %v", names, err)
	}
	if err := v.RemoveXattr(ctx, fx.Ino, "user.k"); err != nil {
		t.Fatal(err)
	}
	_, err = v.GetXattr(ctx, fx.Ino, "user.k")
	wantErrno(t, "removed xattr", err, syscall.ENODATA)
	st, err := v.StatFS(ctx)
	if err != nil || st.Files < 5 || st.Blocks == 0 {
		t.Fatalf("statfs %+v %v", st, err)
	}
	up.stop()
}

// ---- Randomized comparison with a local directory. ----

// fsys is one side of the comparison: operations by path relative to the
// root, answering an errno and, for stat, comparable attributes.
type fsys interface {
	create(p string, mode uint32) error
	mkdir(p string, mode uint32) error
	mkfifo(p string, mode uint32) error
	symlink(target, p string) error
	unlink(p string) error
	rmdir(p string) error
	rename(from, to string, flags uint32) error
	link(from, to string) error
	chmod(p string, mode uint32) error
	truncate(p string, size uint64) error
	stat(p string) (attrs, error)
	readlink(p string) (string, error)
	readdir(p string) ([]string, error)
}

var _, _ fsys = localFS{}, cairnFS{}

// attrs is what both sides can compare: type and permission bits, nlink,
// and size for regular files and symlinks.
type attrs struct {
	mode  uint32
	nlink uint32
	size  uint64
}

func (a attrs) String() string {
	return fmt.Sprintf("mode %#o nlink %d size %d", a.mode, a.nlink, a.size)
}

type localFS struct{ root string }

func (l localFS) p(p string) string { return filepath.Join(l.root, p) }

func (l localFS) create(p string, mode uint32) error {
	return unix.Mknodat(unix.AT_FDCWD, l.p(p), unix.S_IFREG|mode, 0)
}
func (l localFS) mkdir(p string, mode uint32) error { return unix.Mkdirat(unix.AT_FDCWD, l.p(p), mode) }
func (l localFS) mkfifo(p string, mode uint32) error {
	return unix.Mknodat(unix.AT_FDCWD, l.p(p), unix.S_IFIFO|mode, 0)
}
func (l localFS) symlink(target, p string) error {
	return unix.Symlinkat(target, unix.AT_FDCWD, l.p(p))
}
func (l localFS) unlink(p string) error { return unix.Unlinkat(unix.AT_FDCWD, l.p(p), 0) }
func (l localFS) rmdir(p string) error {
	return unix.Unlinkat(unix.AT_FDCWD, l.p(p), unix.AT_REMOVEDIR)
}
func (l localFS) rename(from, to string, flags uint32) error {
	return unix.Renameat2(unix.AT_FDCWD, l.p(from), unix.AT_FDCWD, l.p(to), uint(flags))
}
func (l localFS) link(from, to string) error {
	return unix.Linkat(unix.AT_FDCWD, l.p(from), unix.AT_FDCWD, l.p(to), 0)
}
func (l localFS) chmod(p string, mode uint32) error {
	return unix.Fchmodat(unix.AT_FDCWD, l.p(p), mode, 0)
}
func (l localFS) truncate(p string, size uint64) error {
	return unix.Truncate(l.p(p), int64(size))
}
func (l localFS) stat(p string) (attrs, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, l.p(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return attrs{}, err
	}
	a := attrs{mode: st.Mode, nlink: uint32(st.Nlink)}
	if t := st.Mode & unix.S_IFMT; t == unix.S_IFREG || t == unix.S_IFLNK {
		a.size = uint64(st.Size)
	}
	return a, nil
}
func (l localFS) readlink(p string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(unix.AT_FDCWD, l.p(p), buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
func (l localFS) readdir(p string) ([]string, error) {
	fd, err := unix.Open(l.p(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, fmt.Sprintf("%s:%o", e.Name(), uint32(e.Type()&fs.ModeType)))
	}
	sort.Strings(out)
	return out, nil
}

// cairnFS runs the same operations through the client, resolving paths
// component by component as the kernel does (every component before the
// last must be a directory: ENOTDIR; a symlink there would be followed,
// and every symlink target here is a path that does not exist: ENOENT).
type cairnFS struct {
	ctx context.Context
	v   *client.Volume
}

func (c cairnFS) walk(p string) (*client.Attr, error) {
	a, err := c.v.GetAttr(c.ctx, client.RootIno)
	if err != nil {
		return nil, err
	}
	for _, comp := range strings.Split(p, "/") {
		if comp == "" {
			continue
		}
		switch a.Type() {
		case syscall.S_IFDIR:
		case syscall.S_IFLNK:
			return nil, syscall.ENOENT
		default:
			return nil, syscall.ENOTDIR
		}
		if a, err = c.v.Lookup(c.ctx, a.Ino, comp); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// parent resolves the directory of p and returns it with p's last name.
func (c cairnFS) parent(p string) (uint64, string, error) {
	dir, name := filepath.Split(p)
	a, err := c.walk(dir)
	if err != nil {
		return 0, "", err
	}
	switch a.Type() {
	case syscall.S_IFDIR:
		return a.Ino, name, nil
	case syscall.S_IFLNK:
		return 0, "", syscall.ENOENT
	}
	return 0, "", syscall.ENOTDIR
}

func (c cairnFS) create(p string, mode uint32) error {
	d, n, err := c.parent(p)
	if err == nil {
		_, err = c.v.Create(c.ctx, d, n, mode, 0, 0)
	}
	return err
}
func (c cairnFS) mkdir(p string, mode uint32) error {
	d, n, err := c.parent(p)
	if err == nil {
		_, err = c.v.Mkdir(c.ctx, d, n, mode, 0, 0)
	}
	return err
}
func (c cairnFS) mkfifo(p string, mode uint32) error {
	d, n, err := c.parent(p)
	if err == nil {
		_, err = c.v.Mknod(c.ctx, d, n, syscall.S_IFIFO|mode, 0, 0, 0)
	}
	return err
}
func (c cairnFS) symlink(target, p string) error {
	d, n, err := c.parent(p)
	if err == nil {
		_, err = c.v.Symlink(c.ctx, d, n, target, 0, 0)
	}
	return err
}
func (c cairnFS) unlink(p string) error {
	d, n, err := c.parent(p)
	if err == nil {
		err = c.v.Unlink(c.ctx, d, n)
	}
	return err
}
func (c cairnFS) rmdir(p string) error {
	d, n, err := c.parent(p)
	if err == nil {
		err = c.v.Rmdir(c.ctx, d, n)
	}
	return err
}
func (c cairnFS) rename(from, to string, flags uint32) error {
	d1, n1, err := c.parent(from)
	if err != nil {
		return err
	}
	d2, n2, err := c.parent(to)
	if err != nil {
		return err
	}
	return c.v.Rename(c.ctx, d1, n1, d2, n2, flags)
}
func (c cairnFS) link(from, to string) error {
	a, err := c.walk(from)
	if err != nil {
		return err
	}
	d, n, err := c.parent(to)
	if err == nil {
		_, err = c.v.Link(c.ctx, a.Ino, d, n)
	}
	return err
}
func (c cairnFS) chmod(p string, mode uint32) error {
	a, err := c.walk(p)
	if err == nil {
		_, err = c.v.Setattr(c.ctx, a.Ino, client.SetattrIn{Valid: client.SetMode, Mode: mode})
	}
	return err
}
func (c cairnFS) truncate(p string, size uint64) error {
	a, err := c.walk(p)
	if err == nil {
		_, err = c.v.Setattr(c.ctx, a.Ino, client.SetattrIn{Valid: client.SetSize, Size: size})
	}
	return err
}
func (c cairnFS) stat(p string) (attrs, error) {
	a, err := c.walk(p)
	if err != nil {
		return attrs{}, err
	}
	out := attrs{mode: a.Mode, nlink: a.Nlink}
	if t := a.Type(); t == syscall.S_IFREG || t == syscall.S_IFLNK {
		out.size = a.Size
	}
	return out, nil
}
func (c cairnFS) readlink(p string) (string, error) {
	a, err := c.walk(p)
	if err != nil {
		return "", err
	}
	return c.v.Readlink(c.ctx, a.Ino)
}
func (c cairnFS) readdir(p string) ([]string, error) {
	a, err := c.walk(p)
	if err != nil {
		return nil, err
	}
	if a.Type() == syscall.S_IFLNK {
		return nil, syscall.ENOTDIR // open(O_DIRECTORY|O_NOFOLLOW) of a symlink
	}
	var out []string
	cursor := ""
	plus := len(p)%2 == 0 // half the directories through ReadDirPlus
	for range 1000 {
		read := c.v.ReadDir
		if plus {
			read = c.v.ReadDirPlus
		}
		ents, more, err := read(c.ctx, a.Ino, cursor, 3) // small pages: exercise the cursor
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if plus && (e.Attr == nil || e.Attr.Ino != e.Ino || e.Attr.Type() != e.Type) {
				return nil, fmt.Errorf("readdirplus %q: entry %+v has attributes %+v", p, e, e.Attr)
			}
			out = append(out, fmt.Sprintf("%s:%o", e.Name, uint32(fileMode(e.Type))))
		}
		if !more || len(ents) == 0 {
			break
		}
		cursor = ents[len(ents)-1].Name
	}
	sort.Strings(out)
	return out, nil
}

// fileMode maps st_mode type bits to the fs.FileMode type bits os.ReadDir
// reports.
func fileMode(t uint32) fs.FileMode {
	switch t {
	case syscall.S_IFDIR:
		return fs.ModeDir
	case syscall.S_IFLNK:
		return fs.ModeSymlink
	case syscall.S_IFIFO:
		return fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		return fs.ModeSocket
	case syscall.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}

// TestClientRandomVsLocal drives random operation sequences through the
// client and through system calls on a local directory and requires equal
// results: errno of every operation, stat (type, mode, nlink, size of
// files and symlinks), symlink targets and full directory listings, plus a
// whole-tree comparison every 100 operations and at the end. Names come
// from a small pool so that they collide; paths are up to 4 deep. Seed:
// -client.seed (printed).
func TestClientRandomVsLocal(t *testing.T) {
	seed := *clientSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -client.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	dir := filepath.Join(t.TempDir(), "rv")
	up := startUp(t, dir)
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	old := unix.Umask(0)
	defer unix.Umask(old)
	local := localFS{root: filepath.Join(t.TempDir(), "local")}
	if err := os.Mkdir(local.root, 0o755); err != nil {
		t.Fatal(err)
	}
	remote := cairnFS{ctx: ctx, v: v}
	// Make the local root's permissions match Cairn's root.
	ra, err := v.GetAttr(ctx, client.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(local.root, ra.Mode&0o7777); err != nil {
		t.Fatal(err)
	}

	names := []string{"a", "b", "c", "d", "e", "f"}
	var known []string // paths that exist locally, refreshed periodically
	rescan := func() {
		known = known[:0]
		_ = filepath.WalkDir(local.root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && p != local.root {
				rel, _ := filepath.Rel(local.root, p)
				known = append(known, rel)
			}
			return nil
		})
	}
	randPath := func() string {
		switch r := rng.IntN(10); {
		case r < 5 && len(known) > 0:
			return known[rng.IntN(len(known))]
		case r < 9 && len(known) > 0:
			base := known[rng.IntN(len(known))]
			if strings.Count(base, "/") >= 3 {
				return names[rng.IntN(len(names))]
			}
			return base + "/" + names[rng.IntN(len(names))]
		}
		n := 1 + rng.IntN(3)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = names[rng.IntN(len(names))]
		}
		return strings.Join(parts, "/")
	}
	isSymlink := func(p string) bool {
		var st unix.Stat_t
		return unix.Fstatat(unix.AT_FDCWD, local.p(p), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
	}
	compareTree := func(when string) {
		t.Helper()
		rescan()
		paths := append([]string{""}, known...)
		for _, p := range paths {
			la, lerr := local.stat(p)
			ra, rerr := remote.stat(p)
			if client.ErrnoOf(lerr) != client.ErrnoOf(rerr) || (lerr == nil && la != ra) {
				t.Fatalf("%s: stat %q: local %v %v, cairn %v %v", when, p, la, lerr, ra, rerr)
			}
			if la.mode&unix.S_IFMT == unix.S_IFDIR {
				ll, _ := local.readdir(p)
				rl, err := remote.readdir(p)
				if err != nil || !slices.Equal(ll, rl) {
					t.Fatalf("%s: readdir %q: local %v, cairn %v %v", when, p, ll, rl, err)
				}
			}
		}
	}

	const maxOps = 3000
	deadline := time.Now().Add(25 * time.Second)
	counts := map[string]int{}
	rescan()
	ops := 0
	for ; ops < maxOps && time.Now().Before(deadline); ops++ {
		if ops%20 == 0 {
			rescan()
		}
		var desc string
		var lerr, rerr error
		extra := ""
		switch k := rng.IntN(100); {
		case k < 14:
			p, mode := randPath(), []uint32{0o644, 0o600, 0o755}[rng.IntN(3)]
			if rng.IntN(40) == 0 {
				p = strings.Repeat("L", 256)
			}
			desc = fmt.Sprintf("create %q %#o", p, mode)
			lerr, rerr = local.create(p, mode), remote.create(p, mode)
		case k < 26:
			p := randPath()
			desc = fmt.Sprintf("mkdir %q", p)
			lerr, rerr = local.mkdir(p, 0o755), remote.mkdir(p, 0o755)
		case k < 29:
			p := randPath()
			desc = fmt.Sprintf("mkfifo %q", p)
			lerr, rerr = local.mkfifo(p, 0o640), remote.mkfifo(p, 0o640)
		case k < 33:
			p, target := randPath(), fmt.Sprintf("/nonexistent-cairn-test/%d", rng.IntN(1000))
			desc = fmt.Sprintf("symlink %q -> %q", p, target)
			lerr, rerr = local.symlink(target, p), remote.symlink(target, p)
		case k < 43:
			p := randPath()
			desc = fmt.Sprintf("unlink %q", p)
			lerr, rerr = local.unlink(p), remote.unlink(p)
		case k < 51:
			p := randPath()
			desc = fmt.Sprintf("rmdir %q", p)
			lerr, rerr = local.rmdir(p), remote.rmdir(p)
		case k < 66:
			from, to := randPath(), randPath()
			flags := []uint32{0, 0, 0, client.RenameNoreplace, client.RenameExchange}[rng.IntN(5)]
			desc = fmt.Sprintf("rename %q %q flags %d", from, to, flags)
			lerr, rerr = local.rename(from, to, flags), remote.rename(from, to, flags)
		case k < 72:
			from, to := randPath(), randPath()
			desc = fmt.Sprintf("link %q %q", from, to)
			lerr, rerr = local.link(from, to), remote.link(from, to)
		case k < 76:
			p, mode := randPath(), uint32(rng.IntN(0o1000))
			if isSymlink(p) {
				continue // chmod follows symlinks; Cairn's targets do not exist
			}
			desc = fmt.Sprintf("chmod %q %#o", p, mode)
			lerr, rerr = local.chmod(p, mode), remote.chmod(p, mode)
		case k < 80:
			p, size := randPath(), uint64(rng.IntN(1<<20))
			if isSymlink(p) {
				continue
			}
			desc = fmt.Sprintf("truncate %q %d", p, size)
			lerr, rerr = local.truncate(p, size), remote.truncate(p, size)
		case k < 90:
			p := randPath()
			desc = fmt.Sprintf("stat %q", p)
			var la, ra attrs
			la, lerr = local.stat(p)
			ra, rerr = remote.stat(p)
			if lerr == nil && rerr == nil && la != ra {
				t.Fatalf("op %d %s: local %v, cairn %v", ops, desc, la, ra)
			}
		case k < 93:
			p := randPath()
			desc = fmt.Sprintf("readlink %q", p)
			var lt, rt string
			lt, lerr = local.readlink(p)
			rt, rerr = remote.readlink(p)
			if lt != rt {
				t.Fatalf("op %d %s: local %q, cairn %q", ops, desc, lt, rt)
			}
		default:
			p := randPath()
			if rng.IntN(3) == 0 {
				p = ""
			}
			desc = fmt.Sprintf("readdir %q", p)
			var ll, rl []string
			ll, lerr = local.readdir(p)
			rl, rerr = remote.readdir(p)
			if lerr == nil && rerr == nil && !slices.Equal(ll, rl) {
				t.Fatalf("op %d %s: local %v, cairn %v", ops, desc, ll, rl)
			}
		}
		le, re := client.ErrnoOf(lerr), client.ErrnoOf(rerr)
		if le != re {
			t.Fatalf("op %d (seed %d) %s: local %s, cairn %s (%v)%s", ops, seed, desc, errnoName(le), errnoName(re), rerr, extra)
		}
		key := strings.Fields(desc)[0]
		if key == "rename" {
			key += "/flags=" + desc[strings.LastIndexByte(desc, ' ')+1:]
		}
		counts[key+" "+errnoName(le)]++
		if ops%100 == 99 {
			compareTree(fmt.Sprintf("after op %d", ops))
		}
	}
	compareTree("at the end")
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s×%d", k, counts[k])
	}
	t.Logf("%d operations, %d paths at the end; outcomes:%s", ops, len(known), b.String())
	up.stop()
}

// ---- Linearizability. ----

type nameOp struct {
	kind     string // create, unlink, lookup, rename
	name, to int    // indexes of names; name/4 is the directory
}

type nameRes struct {
	errno   syscall.Errno
	unknown bool // the call failed without an errno: it may or may not have happened
}

// linNames is the number of names TestClientLinearizable uses, linDirs
// directories of linNames/linDirs names each.
const linNames, linDirs = 8, 2

// TestClientLinearizable runs creates, unlinks, lookups and renames (within
// a directory and between two) from several SDK clients on eight names in
// two directories, and checks the history with porcupine against a
// set-of-names model. SDK clients cache no names, so every operation must
// take effect at one instant between its call and its return: two renames
// of one name can never both succeed.
func TestClientLinearizable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lin")
	up := startUp(t, dir)
	const clients = 5
	vols := make([]*client.Volume, clients)
	for i := range vols {
		vols[i] = openClient(t, dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var dirs [linDirs]uint64
	for i := range dirs {
		d, err := vols[0].Mkdir(ctx, client.RootIno, fmt.Sprintf("lin%d", i), 0o755, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = d.Ino
	}
	at := func(i int) (uint64, string) { return dirs[i/(linNames/linDirs)], fmt.Sprintf("n%d", i) }
	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
	)
	stopAt := time.Now().Add(8 * time.Second)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			v := vols[c]
			for i := 0; i < 300 && time.Now().Before(stopAt); i++ {
				in := nameOp{kind: []string{"create", "unlink", "lookup", "rename", "rename"}[rng.IntN(5)], name: rng.IntN(linNames), to: rng.IntN(linNames)}
				if in.kind == "rename" && rng.IntN(2) == 0 {
					in.to = in.name ^ 1 // the same directory, another name
				}
				p, n := at(in.name)
				call := time.Since(start).Nanoseconds()
				var err error
				switch in.kind {
				case "create":
					_, err = v.Create(ctx, p, n, 0o644, 0, 0)
				case "unlink":
					err = v.Unlink(ctx, p, n)
				case "rename":
					tp, tn := at(in.to)
					err = v.Rename(ctx, p, n, tp, tn, 0)
				default:
					_, err = v.Lookup(ctx, p, n)
				}
				ret := time.Since(start).Nanoseconds()
				out := nameRes{errno: client.ErrnoOf(err)}
				switch out.errno {
				case 0, syscall.EEXIST, syscall.ENOENT:
				default:
					out.unknown = true
					ret = 1 << 62 // may take effect any time after the call
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	model := porcupine.Model{
		Init: func() interface{} { return uint32(0) },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			s, in, out := state.(uint32), input.(nameOp), output.(nameRes)
			bit := uint32(1) << in.name
			present := s&bit != 0
			switch in.kind {
			case "create":
				if out.unknown {
					return true, s | bit
				}
				if present {
					return out.errno == syscall.EEXIST, s
				}
				return out.errno == 0, s | bit
			case "unlink":
				if out.unknown {
					return true, s &^ bit
				}
				if present {
					return out.errno == 0, s &^ bit
				}
				return out.errno == syscall.ENOENT, s
			case "rename":
				moved := s
				if present && in.to != in.name {
					moved = s&^bit | uint32(1)<<in.to
				}
				if out.unknown {
					return true, moved
				}
				if present {
					return out.errno == 0, moved
				}
				return out.errno == syscall.ENOENT, s
			}
			if out.unknown {
				return true, s
			}
			return (out.errno == 0) == present, s
		},
		Equal: func(a, b interface{}) bool { return a.(uint32) == b.(uint32) },
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(nameOp), output.(nameRes)
			if in.kind == "rename" {
				return fmt.Sprintf("rename(n%d, n%d) -> %s", in.name, in.to, errnoName(out.errno))
			}
			return fmt.Sprintf("%s(n%d) -> %s", in.kind, in.name, errnoName(out.errno))
		},
	}
	res, info := porcupine.CheckOperationsVerbose(model, history, 20*time.Second)
	counts := map[string]int{}
	for _, o := range history {
		counts[o.Input.(nameOp).kind+" "+errnoName(o.Output.(nameRes).errno)]++
	}
	t.Logf("%d operations from %d clients, check: %v; outcomes %v", len(history), clients, res, counts)
	if res == porcupine.Illegal {
		if f, err := os.CreateTemp("", "cairn-linearizable-*.html"); err == nil {
			_ = porcupine.Visualize(model, info, f)
			f.Close()
			t.Logf("the history, drawn: %s", f.Name())
		}
		t.Fatalf("history is not linearizable")
	}
	up.stop()
}
