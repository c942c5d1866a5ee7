package fsys

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/pkg/optrace"
)

func TestCheckTarget(t *testing.T) {
	tests := []struct{ target, want string }{
		{"posix:/tmp", ""},
		{"posix:relative/dir", ""},
		{"cairn:127.0.0.1:17000/default", ""},
		{"cairn:a:1,b:2/vol", ""},
		{"/tmp", "want SCHEME:ARG"},
		{"nfs:/x", `unknown scheme "nfs"`},
		{"posix:", "needs a directory"},
		{"cairn:127.0.0.1:17000", "MASTER[,MASTER...]/VOLUME"},
		{"cairn:host/vol", `master "host"`},
		{"cairn:h:1/a/b", "MASTER[,MASTER...]/VOLUME"},
		{"cairn-cached:127.0.0.1:17000/default", ""},
		{"cairn-cached:a:1,b:2/vol?dircache=65536", ""},
		{"cairn-cached:a:1/vol?dircache=-1", "want a number of directories"},
		{"cairn-cached:a:1/vol?cache=1", `unknown option "cache" (known: dircache, tls)`},
		{"cairn:a:1/vol?dircache=1", `unknown option "dircache" (known: tls)`},
		{"cairn-cached:host/vol", `master "host"`},
	}
	for _, tc := range tests {
		err := CheckTarget(tc.target)
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckTarget(%q) = %v", tc.target, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrBadTarget) {
			t.Errorf("CheckTarget(%q) = %v, want ErrBadTarget containing %q", tc.target, err, tc.want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ target, want string }{
		{"posix:" + filepath.Join(dir, "nope"), "does not exist"},
		{"posix:" + file, "is not a directory"},
		{"posix:/proc", "is not writable"},
		{"cairn:127.0.0.1:1/default", "no master at 127.0.0.1:1 answered"},
		{"cairn-cached:127.0.0.1:1/default", "no master at 127.0.0.1:1 answered"},
	}
	for _, tc := range tests {
		_, err := Open(context.Background(), tc.target, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error containing %q", tc.target, err, tc.want)
		}
	}
}

// Both posix flavours must behave the same on every call of the interface.
func TestPosixSemantics(t *testing.T) {
	for _, confined := range []bool{false, true} {
		name := "plain"
		if confined {
			name = "confined"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := Open(context.Background(), "posix:"+dir, Options{Confined: confined})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(f.Mkdir("d", 0o755))
			if err := f.Mkdir("d", 0o755); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("second mkdir: %v", err)
			}
			fh, err := f.OpenFile("d/a", syscall.O_CREAT|syscall.O_RDWR|syscall.O_EXCL, 0o640)
			must(err)
			if n, err := fh.Write([]byte("hello world")); n != 11 || err != nil {
				t.Fatalf("write %d %v", n, err)
			}
			if _, err := fh.WriteAt([]byte("W"), 6); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 5)
			if n, err := fh.ReadAt(buf, 6); n != 5 || err != nil || string(buf) != "World" {
				t.Fatalf("readat %d %v %q", n, err, buf)
			}
			if n, err := fh.ReadAt(buf, 9); n != 2 || err != io.EOF {
				t.Fatalf("readat past end %d %v", n, err)
			}
			if _, err := fh.Seek(0, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			all, err := io.ReadAll(fh)
			if err != nil || string(all) != "hello World" {
				t.Fatalf("read all %q %v", all, err)
			}
			must(fh.Sync())
			must(fh.Truncate(5))
			st, err := fh.Stat()
			if err != nil || st.Size() != 5 || st.Mode().Perm() != 0o640 || !st.Mode().IsRegular() {
				t.Fatalf("fstat %v %v", st, err)
			}
			must(fh.Close())
			must(f.Rename("d/a", "d/b"))
			if _, err := f.Stat("d/a"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("stat of renamed file: %v", err)
			}
			must(f.Link("d/b", "d/c"))
			must(f.Symlink("b", "d/l"))
			if s, err := f.Readlink("d/l"); err != nil || s != "b" {
				t.Fatalf("readlink %q %v", s, err)
			}
			if st, err := f.Lstat("d/l"); err != nil || st.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("lstat %v %v", st, err)
			}
			if st, err := f.Stat("d/l"); err != nil || st.Size() != 5 {
				t.Fatalf("stat through link %v %v", st, err)
			}
			must(f.Chmod("d/b", 0o600))
			must(f.Truncate("d/b", 2))
			if st, _ := f.Stat("d/c"); st.Size() != 2 || st.Mode().Perm() != 0o600 {
				t.Fatalf("hard link sees size %d mode %v", st.Size(), st.Mode())
			}
			ents, err := f.ReadDir("d")
			if err != nil || len(ents) != 3 {
				t.Fatalf("readdir %v %v", ents, err)
			}
			if err := f.Unlink("d"); err == nil {
				t.Fatal("unlink of a directory succeeded")
			}
			if err := f.Rmdir("d/b"); err == nil {
				t.Fatal("rmdir of a file succeeded")
			}
			if err := f.Rmdir("d"); err == nil {
				t.Fatal("rmdir of a non-empty directory succeeded")
			}
			for _, n := range []string{"d/b", "d/c", "d/l"} {
				must(f.Unlink(n))
			}
			must(f.Rmdir("d"))
			for _, bad := range []string{"../x", "/etc/passwd", "a//b", "a/../b"} {
				if _, err := f.Stat(bad); err == nil {
					t.Errorf("stat of invalid path %q succeeded", bad)
				}
			}
			st, err = f.Stat(".")
			if err != nil || !st.IsDir() {
				t.Fatalf("stat of root: %v %v", st, err)
			}
			if d, ok := f.(CacheDropper); ok {
				must(WriteFile(f, "cached", bytes.Repeat([]byte("x"), 10000), 4096))
				must(d.DropCache("cached"))
			} else {
				t.Error("posix backend cannot drop caches")
			}
		})
	}
}

func TestConfinedStopsSymlinkEscape(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	f, err := Open(context.Background(), "posix:"+dir, Options{Confined: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Symlink(outside, "esc"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.OpenFile("esc/pwned", syscall.O_CREAT|syscall.O_WRONLY, 0o644); err == nil {
		t.Fatal("a write through a symlink left the root")
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file appeared outside the root: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	f, err := Open(context.Background(), "posix:"+t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := f.(Describer).Describe()
	if d["fs_type"] == "" || d["mount_point"] == "" || d["statfs_type"] == "" {
		t.Fatalf("describe %v", d)
	}
}

func TestMkdirAllRemoveAll(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(context.Background(), "posix:"+dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The generic walk (through a wrapper that hides the native RemoveAll).
	var rec bytes.Buffer
	r, _ := optrace.NewRecorder(&rec, optrace.Header{})
	g := struct{ FS }{Record(p, r, 1)}
	if err := MkdirAll(g, "a/b/c", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(g, "a/b/c", 0o755); err != nil {
		t.Fatalf("MkdirAll on existing dirs: %v", err)
	}
	if err := WriteFile(g, "a/b/c/f", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(g, "a/b/c/f/g", 0o755); err == nil {
		t.Fatal("MkdirAll through a file succeeded")
	}
	if err := removeAll(g, "a", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a still exists: %v", err)
	}
	if err := RemoveAll(g, "missing"); err != nil {
		t.Fatalf("RemoveAll of a missing path: %v", err)
	}
}

func TestRecordingWrapper(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(context.Background(), "posix:"+dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	rec, err := optrace.NewRecorder(&buf, optrace.Header{Source: "fsys-recorder"})
	if err != nil {
		t.Fatal(err)
	}
	f := Record(p, rec, 42)
	_ = f.Mkdir("d", 0o755)
	fh, err := f.OpenFile("d/x", syscall.O_CREAT|syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fh.Write(make([]byte, 100))
	fh.Seek(10, io.SeekStart)
	fh.Read(make([]byte, 20))
	fh.ReadAt(make([]byte, 50), 80)
	fh.Close()
	f.Stat("d/x")
	f.Stat("d/nope")
	f.Rename("d/x", "d/y")
	f.Unlink("d/y")
	f.Rmdir("d")
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	tr, err := optrace.Read(&buf, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range tr.Events {
		if e.TID != 42 {
			t.Errorf("tid %d", e.TID)
		}
		ops = append(ops, string(e.Op))
	}
	want := "mkdir open write read read close stat stat rename unlink rmdir"
	if strings.Join(ops, " ") != want {
		t.Fatalf("ops %q, want %q", strings.Join(ops, " "), want)
	}
	ev := tr.Events
	if ev[3].Offset != 10 || ev[3].Result != 20 || ev[4].Offset != 80 || ev[4].Result != 20 {
		t.Errorf("read records %+v %+v", ev[3], ev[4])
	}
	if ev[6].Size != 100 || ev[6].Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Errorf("stat record %+v", ev[6])
	}
	if ev[7].Result != -int64(syscall.ENOENT) {
		t.Errorf("failed stat result %d", ev[7].Result)
	}
	if ev[1].Handle == 0 || ev[5].Handle != ev[1].Handle {
		t.Errorf("handles open %d close %d", ev[1].Handle, ev[5].Handle)
	}
}
