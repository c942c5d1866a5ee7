// Package fsys is the file-system interface layer of cairn bench (DFS-Perf
// §4.3.1): the one interface every workload talks to, and the backends that
// implement it. A backend covers the four groups DFS-Perf names — session
// (Close), metadata (Mkdir, Rmdir, Unlink, Rename, Link, Symlink, Readlink,
// ReadDir), attributes (Stat, Lstat, Chmod, Truncate) and data streams with
// random access (OpenFile and File) — and registers a scheme, so that a target
// "scheme:rest" on the command line selects it. Adding a backend is one file
// with a type implementing FS and an init calling register.
//
// Paths given to an FS are relative to the target's root, slash-separated and
// clean ("a/b", never "/a", "../a" or "a//b"), as io/fs requires; "." is the
// root itself. Errors are *fs.PathError (or *os.LinkError) wrapping the
// backend's errno, so errors.Is(err, fs.ErrNotExist) and optrace.Errno work on
// every backend.
package fsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"syscall"

	"github.com/cairnfs/cairn/pkg/bench/servermetrics"
)

// FS is one session with a file system under test. Implementations must be
// safe for concurrent use by many goroutines: every workload thread shares it.
type FS interface {
	// String names the target ("posix:/mnt/a").
	String() string
	// Close ends the session; the FS is unusable afterwards.
	Close() error

	Mkdir(name string, perm fs.FileMode) error
	// Rmdir removes an empty directory, failing on anything else.
	Rmdir(name string) error
	// Unlink removes a file or symlink, failing on a directory.
	Unlink(name string) error
	Rename(oldname, newname string) error
	Link(oldname, newname string) error
	// Symlink creates linkname pointing to target (stored verbatim).
	Symlink(target, linkname string) error
	Readlink(name string) (string, error)
	// ReadDir lists a directory in the file system's order (unsorted).
	ReadDir(name string) ([]fs.DirEntry, error)

	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	Chmod(name string, mode fs.FileMode) error
	Truncate(name string, size int64) error

	// OpenFile opens with os.O_* flags (Linux values), creating with perm.
	// O_DIRECT goes to open(2) on posix: targets (a file system without
	// direct I/O, like tmpfs, refuses it with EINVAL; one that takes it
	// wants buffers, offsets and lengths aligned to its logical block
	// size); the SDK backends accept and ignore it (see cairnsdk.go).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
}

// File is an open file: a data stream (Read, Write, Seek) with random access
// (ReadAt, WriteAt). Like *os.File, one File may be used by one goroutine at a
// time for stream calls; ReadAt and WriteAt may run concurrently.
type File interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.WriterAt
	io.Seeker
	io.Closer
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
}

// CacheDropper is implemented by backends that can evict a file's cached data
// (posix: fdatasync, then fadvise DONTNEED), so read workloads can measure the
// file system rather than the page cache without dropping every cache on the
// machine.
type CacheDropper interface {
	DropCache(name string) error
}

// RemoveAller is implemented by backends with a faster recursive removal than
// the generic walk of RemoveAll.
type RemoveAller interface {
	RemoveAll(name string) error
}

// Describer is implemented by backends that can say what they are mounted on
// (file-system type, device, mount options), for the report's machine facts.
type Describer interface {
	Describe() map[string]string
}

// Counter is implemented by backends whose client counts its own traffic
// (cairn: metadata requests, opens, bytes to and from data nodes; posix:
// opens only). The values
// are cumulative over the session; the engine reports their increase over
// each phase.
type Counter interface {
	Counters() map[string]int64
}

// ServerSampler is implemented by backends that can read the servers' own
// metrics (cairn: and cairn-cached: read the meta nodes' /metrics of their
// volume; OpenMetaMetrics gives one for a Cairn mount). The engine samples
// before and after every phase, outside its measured window, and reports
// the difference (servermetrics.Figures). A sample records what could not
// be read instead of failing.
type ServerSampler interface {
	SampleServers(ctx context.Context) servermetrics.Sample
}

// Options change how a target is opened.
type Options struct {
	// Confined makes every path resolve strictly inside the target's root,
	// symlinks included (posix: os.Root). Replay of an untrusted trace needs
	// it; it costs extra system calls per path component, so measured
	// built-in workloads leave it off.
	Confined bool
}

type backend struct {
	open func(ctx context.Context, rest string, o Options) (FS, error)
	// check validates the part after "scheme:" without touching anything, so
	// the command line can reject a malformed target before a run starts.
	check func(rest string) error
	usage string
}

var backends = map[string]backend{}

// register adds a backend; each backend file calls it from init.
func register(scheme string, b backend) {
	if _, dup := backends[scheme]; dup {
		panic("fsys: backend " + scheme + " registered twice") // programming error at init
	}
	backends[scheme] = b
}

// Schemes lists the registered backends with their target syntax, sorted.
func Schemes() []string {
	var out []string
	for s, b := range backends {
		out = append(out, s+":"+b.usage)
	}
	sort.Strings(out)
	return out
}

// ErrBadTarget marks a target string that is malformed (as opposed to one
// that is well-formed but unusable at run time).
var ErrBadTarget = errors.New("bad target")

// CheckTarget validates a target's syntax without touching the file system.
// Its errors wrap ErrBadTarget.
func CheckTarget(target string) error {
	scheme, rest, ok := strings.Cut(target, ":")
	if !ok || scheme == "" {
		return fmt.Errorf("%w %q: want SCHEME:ARG, one of %s", ErrBadTarget, target, strings.Join(Schemes(), ", "))
	}
	b, known := backends[scheme]
	if !known {
		return fmt.Errorf("%w %q: unknown scheme %q, want one of %s", ErrBadTarget, target, scheme, strings.Join(Schemes(), ", "))
	}
	if err := b.check(rest); err != nil {
		return fmt.Errorf("%w %q: %v", ErrBadTarget, target, err)
	}
	return nil
}

// Open opens a session with target ("posix:/mnt/a", "cairn:master:17000/vol").
// It checks that the target is usable (exists, is a directory, is writable)
// and says precisely what is wrong when it is not.
func Open(ctx context.Context, target string, o Options) (FS, error) {
	if err := CheckTarget(target); err != nil {
		return nil, err
	}
	scheme, rest, _ := strings.Cut(target, ":")
	return backends[scheme].open(ctx, rest, o)
}

// CheckPath validates a relative path as every backend expects it.
func CheckPath(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return nil
}

// MkdirAll creates name and any missing parents; existing directories are fine.
func MkdirAll(f FS, name string, perm fs.FileMode) error {
	if name == "." || name == "" {
		return nil
	}
	if st, err := f.Stat(name); err == nil {
		if st.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: name, Err: syscall.ENOTDIR}
	}
	if err := MkdirAll(f, path.Dir(name), perm); err != nil {
		return err
	}
	if err := f.Mkdir(name, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// maxRemoveDepth bounds RemoveAll's recursion; deeper trees are refused
// rather than exhausting the stack.
const maxRemoveDepth = 512

// RemoveAll removes name and everything below it; a missing name is not an
// error. It uses the backend's own RemoveAll when it has one.
func RemoveAll(f FS, name string) error {
	if ra, ok := f.(RemoveAller); ok {
		return ra.RemoveAll(name)
	}
	return removeAll(f, name, 0)
}

func removeAll(f FS, name string, depth int) error {
	if depth > maxRemoveDepth {
		return &fs.PathError{Op: "removeall", Path: name, Err: errors.New("tree deeper than 512 levels")}
	}
	st, err := f.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		if err := f.Unlink(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	ents, err := f.ReadDir(name)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := removeAll(f, path.Join(name, e.Name()), depth+1); err != nil {
			return err
		}
	}
	if err := f.Rmdir(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// WriteFile creates (or truncates) name and writes data in blocks of at most
// block bytes, so a large file costs block-sized system calls as a workload's
// would.
func WriteFile(f FS, name string, data []byte, block int) error {
	fh, err := f.OpenFile(name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if block <= 0 {
		block = len(data)
	}
	for off := 0; off < len(data); off += block {
		end := min(off+block, len(data))
		if _, err := fh.Write(data[off:end]); err != nil {
			fh.Close()
			return err
		}
	}
	return fh.Close()
}
