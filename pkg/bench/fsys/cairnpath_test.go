package fsys

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// fakePaths is the SDK's path API answering from a table: attrs by volume
// path (absent: ENOENT), and an error every mutating call returns. It
// records the calls.
type fakePaths struct {
	attrs map[string]*client.Attr
	err   error // returned by every call that does not look at attrs
	calls []string
}

func (f *fakePaths) rec(format string, a ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

func (f *fakePaths) lookup(op, p string) (*client.Attr, error) {
	if f.err != nil {
		return nil, f.err
	}
	if a, ok := f.attrs[p]; ok {
		return a, nil
	}
	return nil, &client.Error{Op: op, Errno: syscall.ENOENT, Msg: fmt.Sprintf("%q", p)}
}

func (f *fakePaths) StatPath(_ context.Context, p string, _ client.Cred) (*client.Attr, error) {
	f.rec("stat %s", p)
	a, err := f.lookup("stat", p)
	if err == nil && a.Type() == syscall.S_IFLNK {
		return nil, &client.Error{Op: "stat", Errno: syscall.ENOENT, Msg: "dangling"}
	}
	return a, err
}

func (f *fakePaths) LstatPath(_ context.Context, p string, _ client.Cred) (*client.Attr, error) {
	f.rec("lstat %s", p)
	return f.lookup("lstat", p)
}

func (f *fakePaths) OpenPath(_ context.Context, p string, flags int, _ uint32, _ client.Cred) (*client.File, error) {
	f.rec("open %s %#x", p, flags)
	a, err := f.lookup("open", p)
	switch {
	case err != nil:
		return nil, err
	case a.IsDir():
		return nil, &client.Error{Op: "open", Errno: syscall.EISDIR, Msg: "a directory"}
	case a.Type() == syscall.S_IFLNK:
		return nil, &client.Error{Op: "open", Errno: syscall.ENOENT, Msg: "dangling"}
	}
	return nil, &client.Error{Op: "open", Errno: syscall.EIO, Msg: "the fake opens no files"}
}

func (f *fakePaths) MkdirPath(_ context.Context, p string, mode uint32, _ client.Cred) (*client.Attr, error) {
	f.rec("mkdir %s %o", p, mode)
	return nil, f.err
}

func (f *fakePaths) SymlinkPath(_ context.Context, target, p string, _ client.Cred) (*client.Attr, error) {
	f.rec("symlink %s %s", target, p)
	return nil, f.err
}

func (f *fakePaths) UnlinkPath(_ context.Context, p string, _ client.Cred) error {
	f.rec("unlink %s", p)
	return f.err
}

func (f *fakePaths) RmdirPath(_ context.Context, p string, _ client.Cred) error {
	f.rec("rmdir %s", p)
	return f.err
}

func (f *fakePaths) RenamePath(_ context.Context, o, n string, _ client.Cred) error {
	f.rec("rename %s %s", o, n)
	return f.err
}

func (f *fakePaths) LinkPath(_ context.Context, o, n string, _ client.Cred) (*client.Attr, error) {
	f.rec("link %s %s", o, n)
	return nil, f.err
}

func (f *fakePaths) ReadlinkPath(_ context.Context, p string, _ client.Cred) (string, error) {
	f.rec("readlink %s", p)
	return "", f.err
}

func (f *fakePaths) ReadDirPath(_ context.Context, p string, _ client.Cred) ([]client.DirEntry, error) {
	f.rec("readdir %s", p)
	if f.err != nil {
		return nil, f.err
	}
	return []client.DirEntry{{Name: "x", Ino: 7, Type: syscall.S_IFREG}, {Name: "gone", Ino: 8, Type: syscall.S_IFREG}}, nil
}

func (f *fakePaths) SetattrPath(_ context.Context, p string, in client.SetattrIn, _ client.Cred) (*client.Attr, error) {
	f.rec("setattr %s %d", p, in.Valid)
	return nil, f.err
}

func newFakePathFS(api *fakePaths) *cairnPathFS {
	return newCairnPathFS(&sdkSession{name: "cairn:fake:1/v"}, api)
}

// Every call maps the SDK's *client.Error to the *fs.PathError (or, for
// two names, *os.LinkError) every backend returns, with the errno intact
// and the relative name the caller used.
func TestCairnPathErrorMapping(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOENT, syscall.EEXIST, syscall.EACCES, syscall.ENOTEMPTY, syscall.ENOTDIR, syscall.ELOOP} {
		api := &fakePaths{err: &client.Error{Op: "x", Errno: errno, Msg: "from the server"}}
		c := newFakePathFS(api)
		calls := map[string]func() error{
			"mkdir":    func() error { return c.Mkdir("a/b", 0o750) },
			"rmdir":    func() error { return c.Rmdir("a/b") },
			"unlink":   func() error { return c.Unlink("a/b") },
			"readlink": func() error { _, err := c.Readlink("a/b"); return err },
			"readdir":  func() error { _, err := c.ReadDir("a/b"); return err },
			"stat":     func() error { _, err := c.Stat("a/b"); return err },
			"lstat":    func() error { _, err := c.Lstat("a/b"); return err },
			"chmod":    func() error { return c.Chmod("a/b", 0o600) },
			"truncate": func() error { return c.Truncate("a/b", 3) },
			"open":     func() error { _, err := c.OpenFile("a/b", syscall.O_RDONLY, 0); return err },
		}
		for op, call := range calls {
			err := call()
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Op != op || pe.Path != "a/b" {
				t.Errorf("%s with %v: %#v, want an *fs.PathError of %s on a/b", op, errno, err, op)
				continue
			}
			if !errors.Is(err, errno) || optrace.Errno(err) != errno {
				t.Errorf("%s: %v does not carry %v", op, err, errno)
			}
			if !strings.Contains(err.Error(), "from the server") {
				t.Errorf("%s: %v lost the server's message", op, err)
			}
		}
		for op, call := range map[string]func() error{
			"rename":  func() error { return c.Rename("a/b", "c") },
			"link":    func() error { return c.Link("a/b", "c") },
			"symlink": func() error { return c.Symlink("../t", "c") },
		} {
			err := call()
			var le *os.LinkError
			if !errors.As(err, &le) || le.Op != op || !errors.Is(err, errno) || optrace.Errno(err) != errno {
				t.Errorf("%s with %v: %#v", op, errno, err)
			}
		}
	}
	// io/fs's sentinel errors hold for the usual errnos.
	c := newFakePathFS(&fakePaths{})
	if _, err := c.Stat("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of a missing name: %v", err)
	}
	c = newFakePathFS(&fakePaths{err: &client.Error{Op: "mkdir", Errno: syscall.EEXIST}})
	if err := c.Mkdir("d", 0o755); !errors.Is(err, fs.ErrExist) {
		t.Errorf("mkdir of an existing name: %v", err)
	}
	// An error that is not the SDK's (a deadline) still carries an errno.
	c = newFakePathFS(&fakePaths{err: fmt.Errorf("step: %w", context.DeadlineExceeded)})
	if err := c.Unlink("f"); optrace.Errno(err) != syscall.ETIMEDOUT {
		t.Errorf("deadline: %v (errno %v)", err, optrace.Errno(err))
	}
}

// Names become volume paths ("a/b" is "/a/b", "." is "/"), invalid names
// never reach the servers, and each call is one request.
func TestCairnPathCalls(t *testing.T) {
	api := &fakePaths{}
	c := newFakePathFS(api)
	if err := c.Mkdir("a/b", 0o1750|fs.ModeDir); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename("a/b", "c"); err != nil {
		t.Fatal(err)
	}
	if err := c.Symlink("../t", "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat("."); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of the root of an empty fake: %v", err)
	}
	if err := c.Truncate("f", -1); optrace.Errno(err) != syscall.EINVAL {
		t.Errorf("negative truncate: %v", err)
	}
	for _, bad := range []string{"../x", "/etc/passwd", "a//b", "a/../b", ""} {
		if _, err := c.Stat(bad); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("stat %q: %v", bad, err)
		}
		if err := c.Rename(bad, "x"); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("rename %q: %v", bad, err)
		}
	}
	want := []string{"mkdir /a/b 750", "rename /a/b /c", "symlink ../t /l", "stat /"}
	if strings.Join(api.calls, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q, want %q", api.calls, want)
	}
}

// The open flags the path API has no word for: O_NOFOLLOW, O_DIRECTORY
// and directories, with one stat more and only then.
func TestCairnPathOpenFlags(t *testing.T) {
	api := &fakePaths{attrs: map[string]*client.Attr{
		"/d":   {Ino: 2, Mode: syscall.S_IFDIR | 0o755},
		"/f":   {Ino: 3, Mode: syscall.S_IFREG | 0o644, Size: 5},
		"/lnk": {Ino: 4, Mode: syscall.S_IFLNK | 0o777},
	}}
	c := newFakePathFS(api)
	// A read-only open of a directory is a File whose data calls fail.
	fh, err := c.OpenFile("d", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Read(make([]byte, 1)); optrace.Errno(err) != syscall.EISDIR {
		t.Errorf("read of a directory: %v", err)
	}
	if err := fh.Close(); err != nil {
		t.Error(err)
	}
	if err := fh.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("second close: %v", err)
	}
	if got := strings.Join(api.calls, "|"); got != "open /d 0x0|stat /d" {
		t.Errorf("calls %q", got)
	}
	tests := []struct {
		name  string
		flag  int
		errno syscall.Errno
		calls string
	}{
		{"d", syscall.O_RDWR, syscall.EISDIR, "open /d 0x2"},
		{"d", syscall.O_WRONLY | syscall.O_CREAT, syscall.EISDIR, "open /d 0x41"},
		{"f", syscall.O_RDONLY | syscall.O_DIRECTORY, syscall.ENOTDIR, "stat /f"},
		{"lnk", syscall.O_RDONLY | syscall.O_NOFOLLOW, syscall.ELOOP, "lstat /lnk"},
		{"lnk", syscall.O_RDONLY, syscall.ENOENT, "open /lnk 0x0"},
		{"nope", syscall.O_RDONLY | syscall.O_NOFOLLOW, syscall.ENOENT, "lstat /nope"},
		{"nope", syscall.O_RDONLY | syscall.O_CLOEXEC, syscall.ENOENT, "open /nope 0x0"},
	}
	for _, tc := range tests {
		api.calls = nil
		before := c.opens.Load()
		_, err := c.OpenFile(tc.name, tc.flag, 0o644)
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Op != "open" || pe.Path != tc.name || optrace.Errno(err) != tc.errno {
			t.Errorf("open %s %#x: %v, want %v", tc.name, tc.flag, err, tc.errno)
		}
		if got := strings.Join(api.calls, "|"); got != tc.calls {
			t.Errorf("open %s %#x: calls %q, want %q", tc.name, tc.flag, got, tc.calls)
		}
		if c.opens.Load() != before {
			t.Errorf("open %s %#x: a failed open was counted", tc.name, tc.flag)
		}
	}
	if c.opens.Load() != 1 {
		t.Errorf("%d opens counted, want 1 (the directory)", c.opens.Load())
	}
	// A listing's entries are stat'ed by path when asked.
	api.attrs["/d/x"] = &client.Attr{Ino: 7, Mode: syscall.S_IFREG | 0o600, Size: 9}
	ents, err := c.ReadDir("d")
	if err != nil || len(ents) != 2 {
		t.Fatalf("readdir: %v %v", ents, err)
	}
	info, err := ents[0].Info()
	if err != nil || info.Name() != "x" || info.Size() != 9 || info.Mode() != 0o600 {
		t.Errorf("info of x: %v %v", info, err)
	}
	if _, err := ents[1].Info(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("info of a name removed since the listing: %v", err)
	}
	if api.calls[len(api.calls)-1] != "lstat /d/gone" {
		t.Errorf("calls %q", api.calls)
	}
}
