package fusefs

import (
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// tracer records the operations applications perform on the mount into an
// operation trace (pkg/optrace; `cairn mount --trace`). The kernel names
// nodes by id (the inode number) and a name in a parent, so the tracer keeps
// a map from node id to (parent, name), learned from every reply that hands
// the kernel a node (lookup, create, mkdir, mknod, symlink, link,
// readdirplus) and dropped when the kernel forgets the node; a path is
// rebuilt by walking parents up to the root. The map is bounded
// (maxTraceNodes); a node it could not keep is traced under
// "/.cairn-unknown/ino-N".
type tracer struct {
	rec *optrace.Recorder

	mu       sync.Mutex
	nodes    map[uint64]*traceNode // node id -> where it was last seen
	children map[childKey]uint64   // (parent, name) -> node id
	handles  map[uint64]traceOpen  // fuse fh -> trace handle
}

type traceNode struct {
	parent  uint64
	name    string
	lookups uint64 // the kernel's reference count (nlookup)
}

type childKey struct {
	parent uint64
	name   string
}

type traceOpen struct {
	id   uint64
	path string
}

// maxTraceNodes bounds the node map (about 100 bytes per node).
const maxTraceNodes = 1 << 20

// maxTraceDepth bounds the parent walk of one path.
const maxTraceDepth = 4096

func newTracer(rec *optrace.Recorder) *tracer {
	return &tracer{rec: rec, nodes: map[uint64]*traceNode{}, children: map[childKey]uint64{}, handles: map[uint64]traceOpen{}}
}

// learn notes that the kernel got node ino as name in parent (one more
// reference).
func (t *tracer) learn(parent uint64, name string, ino uint64) {
	if ino == 0 || ino == client.RootIno {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodes[ino]
	if n == nil {
		if len(t.nodes) >= maxTraceNodes {
			return
		}
		n = &traceNode{}
		t.nodes[ino] = n
	} else if k := (childKey{n.parent, n.name}); t.children[k] == ino {
		delete(t.children, k)
	}
	n.parent, n.name = parent, name
	n.lookups++
	t.children[childKey{parent, name}] = ino
}

// forget drops n references of ino; at zero the node is gone.
func (t *tracer) forget(ino, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	nd := t.nodes[ino]
	if nd == nil {
		return
	}
	if nd.lookups > n {
		nd.lookups -= n
		return
	}
	delete(t.nodes, ino)
	if k := (childKey{nd.parent, nd.name}); t.children[k] == ino {
		delete(t.children, k)
	}
}

// removed notes that name left parent (unlink, rmdir).
func (t *tracer) removed(parent uint64, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.children, childKey{parent, name})
}

// renamed moves the node at (op, on) to (np, nn).
func (t *tracer) renamed(op uint64, on string, np uint64, nn string, flags uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	src, ok := t.children[childKey{op, on}]
	dst, dok := t.children[childKey{np, nn}]
	delete(t.children, childKey{op, on})
	if flags&client.RenameExchange != 0 && dok {
		if n := t.nodes[dst]; n != nil {
			n.parent, n.name = op, on
			t.children[childKey{op, on}] = dst
		}
	}
	if ok {
		if n := t.nodes[src]; n != nil {
			n.parent, n.name = np, nn
			t.children[childKey{np, nn}] = src
			return
		}
	}
	if flags&client.RenameExchange == 0 {
		delete(t.children, childKey{np, nn})
	}
}

// path rebuilds ino's path within the mount ("/" is its root).
func (t *tracer) path(ino uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pathLocked(ino)
}

func (t *tracer) pathLocked(ino uint64) string {
	var names []string
	for i := 0; ino != client.RootIno; i++ {
		n := t.nodes[ino]
		if n == nil || i >= maxTraceDepth {
			names = append(names, "ino-"+strconv.FormatUint(ino, 10), ".cairn-unknown")
			break
		}
		names = append(names, n.name)
		ino = n.parent
	}
	if len(names) == 0 {
		return "/"
	}
	b := make([]byte, 0, 64)
	for i := len(names) - 1; i >= 0; i-- {
		b = append(b, '/')
		b = append(b, names[i]...)
	}
	return string(b)
}

// child is the path of name in directory parent.
func (t *tracer) child(parent uint64, name string) string {
	p := t.path(parent)
	if p == "/" {
		return "/" + name
	}
	return p + "/" + name
}

// opened remembers the trace handle of fuse handle fh.
func (t *tracer) opened(fh uint64, path string) uint64 {
	id := t.rec.NewHandle()
	t.mu.Lock()
	t.handles[fh] = traceOpen{id: id, path: path}
	t.mu.Unlock()
	return id
}

// handle returns the trace handle of fh (id 0 when unknown).
func (t *tracer) handle(fh uint64) traceOpen {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handles[fh]
}

func (t *tracer) closed(fh uint64) traceOpen {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.handles[fh]
	delete(t.handles, fh)
	return h
}

// result is a record's result field for a FUSE status and n bytes.
func result(st fuse.Status, n int64) int64 {
	if st != fuse.OK {
		return -int64(st)
	}
	return max(n, 0)
}

// record writes one event issued by the caller of header.
func (t *tracer) record(start time.Time, h *fuse.InHeader, e optrace.Event, st fuse.Status, n int64) {
	e.TID = int64(h.Pid)
	e.Result = result(st, n)
	t.rec.Record(start, e)
}

// stat records a lookup or getattr as a stat that does not follow a final
// symlink (the kernel resolves symlinks itself, with readlink).
func (t *tracer) stat(start time.Time, h *fuse.InHeader, path string, st fuse.Status, a *fuse.Attr) {
	e := optrace.Event{Op: optrace.OpStat, Path: path, Flags: optrace.StatNoFollow, Size: -1}
	if st == fuse.OK && a != nil {
		e.Size, e.Mode = int64(a.Size), a.Mode
	}
	t.record(start, h, e, st, 0)
}

// open records an open or create of path with flags, returning the trace
// handle it gets (0 on failure).
func (t *tracer) open(start time.Time, h *fuse.InHeader, fh uint64, path string, flags uint32, mode uint32, st fuse.Status) {
	e := optrace.Event{Op: optrace.OpOpen, Path: path, Flags: int64(flags)}
	if flags&syscall.O_CREAT != 0 {
		e.Mode = mode & 0o7777
	}
	if st == fuse.OK {
		e.Handle = t.opened(fh, path)
	}
	t.record(start, h, e, st, 0)
}

// io records a read or write by handle.
func (t *tracer) io(start time.Time, h *fuse.InHeader, op optrace.Op, fh, off uint64, size uint32, st fuse.Status, n int64) {
	o := t.handle(fh)
	p := o.path
	if p == "" {
		p = t.path(h.NodeId)
	}
	t.record(start, h, optrace.Event{Op: op, Handle: o.id, Path: p, Offset: int64(off), Size: int64(size)}, st, n)
}
