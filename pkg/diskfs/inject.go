package diskfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// OpKind names the operations an Injector sees; kinds are bits so that a
// Rule can match several.
type OpKind uint32

// Operation kinds. File operations carry the file's name as Path.
const (
	OpCreate OpKind = 1 << iota
	OpOpen
	OpRemove
	OpRename
	OpMkdirAll
	OpReadDir
	OpStat
	OpSyncDir
	OpLock
	OpRead
	OpWrite
	OpTruncate
	OpSync
	OpPunch
	OpFileStat
	OpClose

	// OpMutating is every operation that can change what is on disk.
	OpMutating = OpCreate | OpRemove | OpRename | OpMkdirAll | OpSyncDir | OpWrite | OpTruncate | OpSync | OpPunch
	// OpAll is every operation.
	OpAll = OpClose<<1 - 1
)

var opNames = []string{"create", "open", "remove", "rename", "mkdirall", "readdir", "stat", "syncdir",
	"lock", "read", "write", "truncate", "sync", "punch", "fstat", "close"}

// String names the kinds in k, joined by "|".
func (k OpKind) String() string {
	var parts []string
	for i, name := range opNames {
		if k&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("op(%#x)", uint32(k))
	}
	return strings.Join(parts, "|")
}

// Op is one operation about to be performed.
type Op struct {
	Kind OpKind
	Path string // for Rename, the old name
	Off  int64  // read, write, punch: offset; truncate: size
	Len  int64  // read, write, punch: length
}

// Injector decides, before each operation, whether it fails. Returning nil
// lets the operation run; an error fails it (wrapped in an *os.PathError, so
// errors.Is(err, syscall.ENOSPC) works when the injector returns
// syscall.ENOSPC). For OpWrite, a *ShortWrite stores a prefix first.
// Injectors are called concurrently if the FS is used concurrently.
type Injector interface {
	Inject(op Op) error
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op Op) error

// Inject implements Injector.
func (f InjectorFunc) Inject(op Op) error { return f(op) }

// ShortWrite, returned by an Injector for an OpWrite, makes the write store
// its first N bytes and then fail with Err, as a write that runs out of space
// midway does.
type ShortWrite struct {
	N   int
	Err error
}

// Error describes the short write.
func (e *ShortWrite) Error() string { return fmt.Sprintf("short write of %d bytes: %v", e.N, e.Err) }

// Unwrap returns Err.
func (e *ShortWrite) Unwrap() error { return e.Err }

// Rule is an Injector that fails operations matching Ops (and, if set,
// whose path contains PathContains): it lets the first Skip matches through,
// then fails the next Times matches (all of them if Times is 0) with Err. A
// Rule is safe for concurrent use; Disable and Enable switch it at run time.
type Rule struct {
	Ops          OpKind // operations the rule applies to
	PathContains string // if set, only paths containing it
	Skip         int    // matching operations let through first
	Times        int    // matching operations failed after Skip; 0: all
	Err          error  // the error (or *ShortWrite) they fail with

	mu       sync.Mutex
	seen     int
	failed   int
	disabled bool
}

// Inject implements Injector.
func (r *Rule) Inject(op Op) error {
	if r.Ops&op.Kind == 0 || (r.PathContains != "" && !strings.Contains(op.Path, r.PathContains)) {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.disabled {
		return nil
	}
	r.seen++
	if r.seen <= r.Skip || (r.Times > 0 && r.failed >= r.Times) {
		return nil
	}
	r.failed++
	return r.Err
}

// Failed returns how many operations the rule has failed.
func (r *Rule) Failed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// Disable stops the rule from failing operations (and counting them).
func (r *Rule) Disable() { r.mu.Lock(); r.disabled = true; r.mu.Unlock() }

// Enable undoes Disable.
func (r *Rule) Enable() { r.mu.Lock(); r.disabled = false; r.mu.Unlock() }

// Inject returns fs with every operation first shown to inj. The files it
// opens do not expose their *os.File (see OSFile), so that every access goes
// through inj.
func Inject(fs FS, inj Injector) FS { return &injectFS{fs: fs, inj: inj} }

type injectFS struct {
	fs  FS
	inj Injector
}

func (f *injectFS) check(kind OpKind, name string, off, n int64) error {
	if err := f.inj.Inject(Op{Kind: kind, Path: name, Off: off, Len: n}); err != nil {
		return &os.PathError{Op: kind.String() + " (injected)", Path: name, Err: err}
	}
	return nil
}

func (f *injectFS) Create(name string) (File, error) {
	if err := f.check(OpCreate, name, 0, 0); err != nil {
		return nil, err
	}
	file, err := f.fs.Create(name)
	if err != nil {
		return nil, err
	}
	return &injectFile{fs: f, f: file, name: name}, nil
}

func (f *injectFS) Open(name string) (File, error) {
	if err := f.check(OpOpen, name, 0, 0); err != nil {
		return nil, err
	}
	file, err := f.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return &injectFile{fs: f, f: file, name: name}, nil
}

func (f *injectFS) Remove(name string) error {
	if err := f.check(OpRemove, name, 0, 0); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

func (f *injectFS) Rename(oldname, newname string) error {
	if err := f.check(OpRename, oldname, 0, 0); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

func (f *injectFS) MkdirAll(dir string) error {
	if err := f.check(OpMkdirAll, dir, 0, 0); err != nil {
		return err
	}
	return f.fs.MkdirAll(dir)
}

func (f *injectFS) ReadDir(dir string) ([]string, error) {
	if err := f.check(OpReadDir, dir, 0, 0); err != nil {
		return nil, err
	}
	return f.fs.ReadDir(dir)
}

func (f *injectFS) Stat(name string) (FileInfo, error) {
	if err := f.check(OpStat, name, 0, 0); err != nil {
		return FileInfo{}, err
	}
	return f.fs.Stat(name)
}

func (f *injectFS) SyncDir(dir string) error {
	if err := f.check(OpSyncDir, dir, 0, 0); err != nil {
		return err
	}
	return f.fs.SyncDir(dir)
}

func (f *injectFS) Lock(name string) (io.Closer, error) {
	if err := f.check(OpLock, name, 0, 0); err != nil {
		return nil, err
	}
	return f.fs.Lock(name)
}

type injectFile struct {
	fs   *injectFS
	f    File
	name string
}

func (f *injectFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.name, off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *injectFile) WriteAt(p []byte, off int64) (int, error) {
	err := f.fs.inj.Inject(Op{Kind: OpWrite, Path: f.name, Off: off, Len: int64(len(p))})
	if err == nil {
		return f.f.WriteAt(p, off)
	}
	var sw *ShortWrite
	if errors.As(err, &sw) {
		k := min(max(sw.N, 0), len(p))
		n, werr := f.f.WriteAt(p[:k], off)
		if werr != nil {
			return n, werr
		}
		return n, &os.PathError{Op: "write (injected)", Path: f.name, Err: sw.Err}
	}
	return 0, &os.PathError{Op: "write (injected)", Path: f.name, Err: err}
}

func (f *injectFile) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.name, size, 0); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *injectFile) Sync() error {
	if err := f.fs.check(OpSync, f.name, 0, 0); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *injectFile) PunchHole(off, n int64) error {
	if err := f.fs.check(OpPunch, f.name, off, n); err != nil {
		return err
	}
	return f.f.PunchHole(off, n)
}

func (f *injectFile) Stat() (FileInfo, error) {
	if err := f.fs.check(OpFileStat, f.name, 0, 0); err != nil {
		return FileInfo{}, err
	}
	return f.f.Stat()
}

func (f *injectFile) Close() error {
	if err := f.fs.check(OpClose, f.name, 0, 0); err != nil {
		// The descriptor is released anyway, as close(2) does.
		f.f.Close()
		return err
	}
	return f.f.Close()
}
