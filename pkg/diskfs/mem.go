package diskfs

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"sync"
	"syscall"
)

// MemFS is an in-memory FS that tracks, for every file and directory, what
// is durable (synced) and what is not, so that Crash can produce the state a
// disk could be in after power loss at this instant. It is meant for tests:
// it keeps every byte in memory and every unsynced operation in a list.
//
// Simplifications, all on the side of the durability model in the package
// comment: directories are durable as soon as MkdirAll creates them (files
// in them are not); directory operations survive a crash as a prefix, in
// order, as a journaling file system guarantees; AllocatedBytes counts the
// 4 KiB pages holding a nonzero byte (a sparse file model: punched or never
// written pages take no space).
type MemFS struct {
	mu    sync.Mutex
	dirs  map[string]*memDir // cleaned path -> directory
	locks map[string]bool
}

type memDir struct {
	cur     map[string]*memNode // what ReadDir and Open see
	dur     map[string]*memNode // what survives a crash
	pending []dirOp             // unsynced operations, in order: cur = dur + pending
}

type dirOpKind uint8

const (
	dirAdd dirOpKind = iota
	dirRemove
	dirRename
)

type dirOp struct {
	kind    dirOpKind
	name    string
	newName string // dirRename
	node    *memNode
}

// memNode is a file (inode) or, with isDir, a directory's entry in its
// parent.
type memNode struct {
	isDir   bool
	cur     []byte   // what reads see
	dur     []byte   // what survives a crash
	pending []fileOp // unsynced operations, in order: cur = dur + pending
}

type fileOpKind uint8

const (
	opWrite fileOpKind = iota
	opTruncate
	opPunch
)

type fileOp struct {
	kind fileOpKind
	off  int64  // write, punch
	n    int64  // punch length, truncate size
	data []byte // write (a private copy)
}

// NewMem returns an empty in-memory file system holding only the root "/".
func NewMem() *MemFS {
	m := &MemFS{dirs: map[string]*memDir{}, locks: map[string]bool{}}
	m.dirs["/"] = newMemDir()
	return m
}

func newMemDir() *memDir {
	return &memDir{cur: map[string]*memNode{}, dur: map[string]*memNode{}}
}

func clean(name string) string {
	p := path.Clean("/" + name)
	return p
}

// parent returns the directory holding name and name's base; the caller
// holds m.mu.
func (m *MemFS) parent(op, name string) (*memDir, string, error) {
	p := clean(name)
	d, ok := m.dirs[path.Dir(p)]
	if !ok || p == "/" {
		return nil, "", &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
	}
	return d, path.Base(p), nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("create", name)
	if err != nil {
		return nil, err
	}
	if n, ok := d.cur[base]; ok {
		if n.isDir {
			return nil, &os.PathError{Op: "create", Path: name, Err: syscall.EISDIR}
		}
		n.apply(fileOp{kind: opTruncate, n: 0})
		return &memFile{fs: m, node: n, name: name}, nil
	}
	n := &memNode{}
	d.cur[base] = n
	d.pending = append(d.pending, dirOp{kind: dirAdd, name: base, node: n})
	return &memFile{fs: m, node: n, name: name}, nil
}

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("open", name)
	if err != nil {
		return nil, err
	}
	n, ok := d.cur[base]
	if !ok {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	if n.isDir {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	return &memFile{fs: m, node: n, name: name}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("remove", name)
	if err != nil {
		return err
	}
	n, ok := d.cur[base]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	if n.isDir {
		p := clean(name)
		if len(m.dirs[p].cur) > 0 {
			return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
		}
		// Directories are durable at once, both ways.
		delete(m.dirs, p)
		delete(d.cur, base)
		delete(d.dur, base)
		return nil
	}
	delete(d.cur, base)
	d.pending = append(d.pending, dirOp{kind: dirRemove, name: base})
	return nil
}

// Rename implements FS. Renaming directories is not supported.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, obase, err := m.parent("rename", oldname)
	if err != nil {
		return err
	}
	nd, nbase, err := m.parent("rename", newname)
	if err != nil {
		return err
	}
	n, ok := od.cur[obase]
	if !ok {
		return &os.PathError{Op: "rename", Path: oldname, Err: os.ErrNotExist}
	}
	if n.isDir {
		return &os.PathError{Op: "rename", Path: oldname, Err: syscall.EISDIR}
	}
	if t, ok := nd.cur[nbase]; ok && t.isDir {
		return &os.PathError{Op: "rename", Path: newname, Err: syscall.EISDIR}
	}
	if od == nd {
		if obase == nbase {
			return nil
		}
		delete(od.cur, obase)
		od.cur[nbase] = n
		od.pending = append(od.pending, dirOp{kind: dirRename, name: obase, newName: nbase, node: n})
		return nil
	}
	delete(od.cur, obase)
	od.pending = append(od.pending, dirOp{kind: dirRemove, name: obase})
	nd.cur[nbase] = n
	nd.pending = append(nd.pending, dirOp{kind: dirAdd, name: nbase, node: n})
	return nil
}

// MkdirAll implements FS. New directories are durable at once.
func (m *MemFS) MkdirAll(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(dir)
	var missing []string
	for q := p; ; q = path.Dir(q) {
		if _, ok := m.dirs[q]; ok {
			break
		}
		missing = append(missing, q)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		q := missing[i]
		par := m.dirs[path.Dir(q)]
		base := path.Base(q)
		if n, ok := par.cur[base]; ok && !n.isDir {
			return &os.PathError{Op: "mkdir", Path: q, Err: syscall.ENOTDIR}
		}
		n := &memNode{isDir: true}
		par.cur[base] = n
		par.dur[base] = n
		m.dirs[q] = newMemDir()
	}
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dirs[clean(dir)]
	if !ok {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: os.ErrNotExist}
	}
	names := make([]string, 0, len(d.cur))
	for name := range d.cur {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	if _, ok := m.dirs[p]; ok {
		return FileInfo{Name: path.Base(p), IsDir: true}, nil
	}
	d, base, err := m.parent("stat", name)
	if err != nil {
		return FileInfo{}, err
	}
	n, ok := d.cur[base]
	if !ok {
		return FileInfo{}, &os.PathError{Op: "stat", Path: name, Err: os.ErrNotExist}
	}
	return n.info(base), nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dirs[clean(dir)]
	if !ok {
		return &os.PathError{Op: "syncdir", Path: dir, Err: os.ErrNotExist}
	}
	d.dur = make(map[string]*memNode, len(d.cur))
	for k, v := range d.cur {
		d.dur[k] = v
	}
	d.pending = nil
	return nil
}

// Lock implements FS. Locks do not survive Crash.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	if m.locks[p] {
		return nil, fmt.Errorf("lock %s: %w", p, ErrLocked)
	}
	m.locks[p] = true
	return memLock{m, p}, nil
}

type memLock struct {
	m *MemFS
	p string
}

func (l memLock) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	delete(l.m.locks, l.p)
	return nil
}

func (n *memNode) info(name string) FileInfo {
	return FileInfo{Name: name, Size: int64(len(n.cur)), AllocatedBytes: allocated(n.cur), IsDir: n.isDir}
}

const memPage = 4096

func allocated(b []byte) int64 {
	var pages int64
	for off := 0; off < len(b); off += memPage {
		end := min(off+memPage, len(b))
		for _, c := range b[off:end] {
			if c != 0 {
				pages++
				break
			}
		}
	}
	return pages * memPage
}

// apply performs op on the current contents and remembers it as unsynced.
func (n *memNode) apply(op fileOp) {
	n.cur = applyOp(n.cur, op)
	n.pending = append(n.pending, op)
}

func applyOp(b []byte, op fileOp) []byte {
	switch op.kind {
	case opWrite:
		end := op.off + int64(len(op.data))
		if end > int64(len(b)) {
			b = grow(b, end)
		}
		copy(b[op.off:], op.data)
	case opTruncate:
		if op.n <= int64(len(b)) {
			clear(b[op.n:])
			b = b[:op.n]
		} else {
			b = grow(b, op.n)
		}
	case opPunch:
		start := min(op.off, int64(len(b)))
		end := min(op.off+op.n, int64(len(b)))
		clear(b[start:end])
	}
	return b
}

func grow(b []byte, size int64) []byte {
	if size <= int64(cap(b)) {
		old := len(b)
		b = b[:size]
		clear(b[old:])
		return b
	}
	nb := make([]byte, size, size+size/4)
	copy(nb, b)
	return nb
}

type memFile struct {
	fs     *MemFS
	node   *memNode
	name   string
	closed bool
}

func (f *memFile) check(op string) error {
	if f.closed {
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: os.ErrInvalid}
	}
	if off >= int64(len(f.node.cur)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.cur[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: os.ErrInvalid}
	}
	f.node.apply(fileOp{kind: opWrite, off: off, data: append([]byte(nil), p...)})
	return len(p), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate"); err != nil {
		return err
	}
	if size < 0 {
		return &os.PathError{Op: "truncate", Path: f.name, Err: os.ErrInvalid}
	}
	f.node.apply(fileOp{kind: opTruncate, n: size})
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync"); err != nil {
		return err
	}
	n := f.node
	for _, op := range n.pending {
		n.dur = applyOp(n.dur, op)
	}
	n.pending = nil
	return nil
}

func (f *memFile) PunchHole(off, length int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("punch hole"); err != nil {
		return err
	}
	if off < 0 || length < 0 {
		return &os.PathError{Op: "punch hole", Path: f.name, Err: os.ErrInvalid}
	}
	f.node.apply(fileOp{kind: opPunch, off: off, n: length})
	return nil
}

func (f *memFile) Stat() (FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat"); err != nil {
		return FileInfo{}, err
	}
	return f.node.info(path.Base(clean(f.name))), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("close"); err != nil {
		return err
	}
	f.closed = true
	return nil
}

// CrashMode says which unsynced state survives Crash.
type CrashMode int

const (
	// CrashLoseUnsynced keeps exactly what was synced: every unsynced write,
	// truncation, hole and directory change is lost.
	CrashLoseUnsynced CrashMode = iota
	// CrashKeepPrefix keeps, for each file independently, a random prefix of
	// its unsynced operations, the last kept one torn: a write keeps a
	// random number of its first bytes (sometimes as zeros, as when the size
	// reached the disk before the data), a truncation or hole is kept or
	// not. Each directory keeps a random prefix of its unsynced operations.
	CrashKeepPrefix
	// CrashKeepSubset is CrashKeepPrefix with every unsynced file operation
	// independently kept, dropped or torn: writes reach the disk out of
	// order. Directories still keep a prefix.
	CrashKeepSubset
)

// Crash returns a new MemFS holding what could be on disk after power loss
// at this instant, chosen by mode and rng (deterministic for a given rng
// state). m itself is untouched and stays usable; files open on m keep
// working on m, never on the result.
func (m *MemFS) Crash(mode CrashMode, rng *rand.Rand) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &MemFS{dirs: make(map[string]*memDir, len(m.dirs)), locks: map[string]bool{}}
	nodes := map[*memNode]*memNode{}
	crashNode := func(n *memNode) *memNode {
		if c, ok := nodes[n]; ok {
			return c
		}
		c := &memNode{isDir: n.isDir}
		if !n.isDir {
			c.cur = crashData(n, mode, rng)
			c.dur = append([]byte(nil), c.cur...)
		}
		nodes[n] = c
		return c
	}
	// Directories in sorted order so that rng use is deterministic.
	paths := make([]string, 0, len(m.dirs))
	for p := range m.dirs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		d := m.dirs[p]
		entries := make(map[string]*memNode, len(d.dur))
		for k, v := range d.dur {
			entries[k] = v
		}
		keep := 0
		if mode != CrashLoseUnsynced && len(d.pending) > 0 {
			keep = rng.IntN(len(d.pending) + 1)
		}
		for _, op := range d.pending[:keep] {
			switch op.kind {
			case dirAdd:
				entries[op.name] = op.node
			case dirRemove:
				delete(entries, op.name)
			case dirRename:
				if entries[op.name] == op.node {
					delete(entries, op.name)
				}
				entries[op.newName] = op.node
			}
		}
		nd := newMemDir()
		names := make([]string, 0, len(entries))
		for k := range entries {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			c := crashNode(entries[k])
			nd.cur[k] = c
			nd.dur[k] = c
		}
		out.dirs[p] = nd
	}
	// A directory whose entry in its parent was lost cannot be, since
	// directories are durable at once; keep the map consistent anyway.
	return out
}

func crashData(n *memNode, mode CrashMode, rng *rand.Rand) []byte {
	b := append([]byte(nil), n.dur...)
	if mode == CrashLoseUnsynced || len(n.pending) == 0 {
		return b
	}
	switch mode {
	case CrashKeepPrefix:
		k := rng.IntN(len(n.pending) + 1)
		for _, op := range n.pending[:k] {
			b = applyOp(b, op)
		}
		if k < len(n.pending) {
			b = tear(b, n.pending[k], rng)
		}
	case CrashKeepSubset:
		for _, op := range n.pending {
			switch rng.IntN(3) {
			case 0: // dropped
			case 1:
				b = applyOp(b, op)
			default:
				b = tear(b, op, rng)
			}
		}
	}
	return b
}

// tear applies a random part of op: a prefix of a write's bytes (or only the
// size it reached, the extension reading as zeros), or a truncation or hole
// wholly or not at all.
func tear(b []byte, op fileOp, rng *rand.Rand) []byte {
	switch op.kind {
	case opWrite:
		if len(op.data) == 0 {
			return b
		}
		keep := rng.IntN(len(op.data) + 1)
		if rng.IntN(2) == 0 {
			// The new size reached the disk, the data did not: the
			// extension reads as zeros, bytes already there are unchanged.
			if end := op.off + int64(keep); end > int64(len(b)) {
				b = grow(b, end)
			}
			return b
		}
		return applyOp(b, fileOp{kind: opWrite, off: op.off, data: op.data[:keep]})
	default:
		if rng.IntN(2) == 0 {
			return applyOp(b, op)
		}
		return b
	}
}
