package diskfs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

func write(t *testing.T, f File, s string, off int64) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, fs FS, name string) (string, bool) {
	t.Helper()
	f, err := fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	b := make([]byte, fi.Size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return string(b), true
}

// TestMemDurability checks MemFS against the durability model: data needs
// File.Sync, names need SyncDir.
func TestMemDurability(t *testing.T) {
	for _, tc := range []struct {
		name     string
		syncFile bool
		syncDir  bool
		want     string
		exists   bool
	}{
		{"nothing synced", false, false, "", false},
		{"file synced, name not", true, false, "", false},
		{"name synced, data not", false, true, "", true},
		{"both", true, true, "hello", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMem()
			m.MkdirAll("/d")
			f, _ := m.Create("/d/f")
			write(t, f, "hello", 0)
			if tc.syncFile {
				f.Sync()
			}
			if tc.syncDir {
				m.SyncDir("/d")
			}
			got, ok := content(t, m.Crash(CrashLoseUnsynced, nil), "/d/f")
			if ok != tc.exists || got != tc.want {
				t.Fatalf("after crash: %q exists=%v, want %q exists=%v", got, ok, tc.want, tc.exists)
			}
			// The running FS sees everything regardless.
			if got, _ := content(t, m, "/d/f"); got != "hello" {
				t.Fatalf("live content %q", got)
			}
		})
	}
}

func TestMemRenameAtomic(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/meta")
	write(t, f, "old", 0)
	f.Sync()
	m.SyncDir("/d")
	g, _ := m.Create("/d/tmp")
	write(t, g, "new", 0)
	g.Sync()
	if err := m.Rename("/d/tmp", "/d/meta"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	seen := map[string]bool{}
	for range 50 {
		c := m.Crash(CrashKeepPrefix, rng)
		got, _ := content(t, c, "/d/meta")
		if got != "old" && got != "new" {
			t.Fatalf("meta after crash mid-rename: %q", got)
		}
		seen[got] = true
	}
	if !seen["old"] || !seen["new"] {
		t.Fatalf("crashes gave %v, want both outcomes", seen)
	}
	m.SyncDir("/d")
	if got, _ := content(t, m.Crash(CrashLoseUnsynced, nil), "/d/meta"); got != "new" {
		t.Fatalf("after SyncDir: %q", got)
	}
	names, _ := m.ReadDir("/d")
	if !reflect.DeepEqual(names, []string{"meta"}) {
		t.Fatalf("ReadDir %v", names)
	}
}

// TestMemCrashModes checks that each mode yields only allowed states and,
// over many crashes, all the interesting ones.
func TestMemCrashModes(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/f")
	write(t, f, "base", 0)
	f.Sync()
	m.SyncDir("/d")
	write(t, f, "AAAA", 4)
	write(t, f, "BBBB", 8)
	rng := rand.New(rand.NewPCG(2, 2))
	// Allowed under KeepPrefix: "base", then "base"+prefix of AAAA (as data
	// or zeros), then "baseAAAA"+prefix of BBBB (data or zeros).
	allowedPrefix := func(s string) bool {
		for _, ok := range []string{"base", "baseA", "baseAA", "baseAAA", "baseAAAA",
			"base\x00", "base\x00\x00", "base\x00\x00\x00", "base\x00\x00\x00\x00",
			"baseAAAAB", "baseAAAABB", "baseAAAABBB", "baseAAAABBBB",
			"baseAAAA\x00", "baseAAAA\x00\x00", "baseAAAA\x00\x00\x00", "baseAAAA\x00\x00\x00\x00"} {
			if s == ok {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	for range 400 {
		got, _ := content(t, m.Crash(CrashKeepPrefix, rng), "/d/f")
		if !allowedPrefix(got) {
			t.Fatalf("KeepPrefix gave %q", got)
		}
		seen[got] = true
	}
	if len(seen) < 10 {
		t.Fatalf("KeepPrefix gave only %d distinct states: %v", len(seen), seen)
	}
	// KeepSubset may keep the second write without the first: out of order.
	outOfOrder := false
	for range 400 {
		got, _ := content(t, m.Crash(CrashKeepSubset, rng), "/d/f")
		if len(got) == 12 && got[4:8] == "\x00\x00\x00\x00" && got[8:] == "BBBB" {
			outOfOrder = true
		}
		if got[:4] != "base" {
			t.Fatalf("synced bytes lost: %q", got)
		}
	}
	if !outOfOrder {
		t.Fatal("KeepSubset never reordered writes")
	}
	if got, _ := content(t, m.Crash(CrashLoseUnsynced, rng), "/d/f"); got != "base" {
		t.Fatalf("LoseUnsynced gave %q", got)
	}
	// The crashed copy is independent of the original.
	c := m.Crash(CrashLoseUnsynced, nil)
	cf, _ := c.Open("/d/f")
	write(t, cf, "XXXX", 0)
	if got, _ := content(t, m, "/d/f"); got != "baseAAAABBBB" {
		t.Fatalf("crash copy wrote through: %q", got)
	}
}

func TestMemErrors(t *testing.T) {
	m := NewMem()
	if _, err := m.Open("/nope"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open missing: %v", err)
	}
	if _, err := m.Create("/no/dir/f"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("create in missing dir: %v", err)
	}
	m.MkdirAll("/a/b")
	if err := m.Remove("/a"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("remove non-empty dir: %v", err)
	}
	f, _ := m.Create("/a/b/f")
	f.Close()
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	l, err := m.Lock("/a/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock("/a/LOCK"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v", err)
	}
	l.Close()
	if l, err = m.Lock("/a/LOCK"); err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// TestPunchHole checks that punching frees space and reads zeros, on the
// real file system and on MemFS.
func TestPunchHole(t *testing.T) {
	for _, name := range []string{"os", "mem"} {
		t.Run(name, func(t *testing.T) {
			var fs FS = NewMem()
			dir := "/d"
			if name == "os" {
				fs, dir = OS, t.TempDir()
			}
			fs.MkdirAll(dir)
			f, err := fs.Create(filepath.Join(dir, "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			data := bytes.Repeat([]byte{7}, 1<<20)
			f.WriteAt(data, 0)
			f.Sync()
			before, _ := f.Stat()
			if err := f.PunchHole(64<<10, 512<<10); err != nil {
				t.Fatal(err)
			}
			f.Sync()
			after, _ := f.Stat()
			if after.Size != 1<<20 {
				t.Fatalf("size %d after punch, want kept", after.Size)
			}
			if freed := before.AllocatedBytes - after.AllocatedBytes; freed < 500<<10 {
				t.Fatalf("punch of 512 KiB freed %d bytes (%d -> %d)", freed, before.AllocatedBytes, after.AllocatedBytes)
			}
			b := make([]byte, 1<<20)
			f.ReadAt(b, 0)
			want := append([]byte(nil), data...)
			clear(want[64<<10 : 576<<10])
			if !bytes.Equal(b, want) {
				t.Fatal("punched range does not read as zeros, or the rest changed")
			}
			if _, ok := OSFile(f); ok != (name == "os") {
				t.Fatalf("OSFile ok=%v", ok)
			}
		})
	}
}

func TestOSLock(t *testing.T) {
	dir := t.TempDir()
	l, err := OS.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OS.Lock(filepath.Join(dir, "LOCK")); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v", err)
	}
	l.Close()
	names, _ := OS.ReadDir(dir)
	if !reflect.DeepEqual(names, []string{"LOCK"}) {
		t.Fatalf("ReadDir %v", names)
	}
}

func TestInject(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	rule := &Rule{Ops: OpWrite | OpSync, PathContains: "data", Skip: 1, Times: 2, Err: syscall.EIO}
	fs := Inject(m, rule)
	f, _ := fs.Create("/d/data")
	g, _ := fs.Create("/d/other")
	var errs []bool
	for range 4 {
		_, err := f.WriteAt([]byte("x"), 0)
		errs = append(errs, err != nil)
		if err != nil && !errors.Is(err, syscall.EIO) {
			t.Fatalf("injected error %v does not wrap EIO", err)
		}
	}
	if !reflect.DeepEqual(errs, []bool{false, true, true, false}) {
		t.Fatalf("Skip 1 Times 2 failed writes %v", errs)
	}
	if _, err := g.WriteAt([]byte("x"), 0); err != nil {
		t.Fatalf("other path: %v", err)
	}
	if rule.Failed() != 2 {
		t.Fatalf("Failed() = %d", rule.Failed())
	}
	// A short write stores its prefix.
	sw := &Rule{Ops: OpWrite, Err: &ShortWrite{N: 3, Err: syscall.ENOSPC}}
	h, _ := Inject(m, sw).Create("/d/short")
	n, err := h.WriteAt([]byte("abcdef"), 0)
	if n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("short write: n=%d err=%v", n, err)
	}
	if got, _ := content(t, m, "/d/short"); got != "abc" {
		t.Fatalf("short write stored %q", got)
	}
	sw.Disable()
	if _, err := h.WriteAt([]byte("abcdef"), 0); err != nil {
		t.Fatal(err)
	}
	sw.Enable()
	if _, err := h.WriteAt([]byte("z"), 0); err == nil {
		t.Fatal("re-enabled rule did not fire")
	}
	// Injected files never expose an *os.File.
	of, _ := Inject(OS, InjectorFunc(func(Op) error { return nil })).Create(filepath.Join(t.TempDir(), "f"))
	defer of.Close()
	if _, ok := OSFile(of); ok {
		t.Fatal("injected OS file exposes *os.File")
	}
	if OpWrite.String() != "write" || (OpWrite|OpSync).String() != "write|sync" {
		t.Fatalf("OpKind.String: %q %q", OpWrite.String(), (OpWrite | OpSync).String())
	}
}

func TestRemoveAll(t *testing.T) {
	m := NewMem()
	for _, d := range []string{"/a/b/c", "/a/d"} {
		if err := m.MkdirAll(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"/a/f", "/a/b/g", "/a/b/c/h"} {
		f, err := m.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := RemoveAll(m, "/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stat("/a"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of a removed tree: %v", err)
	}
	if err := RemoveAll(m, "/a"); err != nil {
		t.Fatalf("removing a missing tree: %v", err)
	}
}
