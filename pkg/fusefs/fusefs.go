// Package fusefs is the kernel adapter of a Cairn mount: it serves the
// FUSE protocol (go-fuse's raw API) by mapping every request onto a
// pkg/client Volume. A FUSE node id is the Cairn inode number (the root is
// 1), so the adapter keeps no inode table: Forget is a no-op.
//
// Permissions are checked by the kernel (the mount must use
// default_permissions); the adapter records the caller's uid and gid on
// every create. File locks (flock, fcntl) are left to the kernel's local
// locking: they hold between processes of one mount, not across mounts.
// Data follows close-to-open consistency (see pkg/client.File).
package fusefs

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/changefeed"
	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/optrace"
)

// Options tune the adapter. Zero values take the defaults.
type Options struct {
	// ListingReads lets the mount read a directory it did not make after
	// two of its names were missing (listings.go), and then answer missing
	// names there itself. Off: until the change notice of another mount's
	// new name arrives, such a mount answers that name ENOENT, and an open
	// right after the other mount's close must find the file
	// (close-to-open; TestPosixTwoMounts failed 3 times in 10 with it on).
	ListingReads bool
	// EntryTimeout is how long the kernel caches a name lookup (and a
	// negative one); default 1 s; negative means 0 (no caching).
	EntryTimeout time.Duration
	// AttrTimeout is how long the kernel caches attributes; default 1 s;
	// negative means 0.
	AttrTimeout time.Duration
	// Metrics, if set, records every request.
	Metrics *Metrics
	// Trace, if set, records every operation an application performs on the
	// mount (cairn mount --trace) in the operation trace format
	// (pkg/optrace); paths are relative to the mount's root. The caller
	// closes it after unmounting.
	Trace *optrace.Recorder
	// Root is the inode of the directory the mount shows as its root
	// (default the volume's root): a path-restricted client's subtree.
	Root uint64
	// ShowIDs, if set, maps an owner and group as the cluster stores them
	// to those the mount shows (a client identity's id maps, inverted).
	ShowIDs func(uid, gid uint32) (uint32, uint32)
	// CallerGroups sends each change's caller with its supplementary
	// groups, read from /proc (a file read per change): for an identity
	// whose ids the servers map, which judge the caller by them.
	CallerGroups bool
	// CacheTimeout is how long the kernel may cache names and attributes
	// while the mount's change feed covers every meta partition
	// (coherence.go); default 60 s; negative disables the feed. It is
	// used only when both EntryTimeout and AttrTimeout are positive:
	// the smaller of them bounds how stale a cached name or attribute
	// may be, feed or not.
	CacheTimeout time.Duration
}

func (o Options) withDefaults() Options {
	fix := func(d *time.Duration) {
		switch {
		case *d == 0:
			*d = time.Second
		case *d < 0:
			*d = 0
		}
	}
	fix(&o.EntryTimeout)
	fix(&o.AttrTimeout)
	if o.CacheTimeout == 0 {
		o.CacheTimeout = defaultCacheTimeout
	}
	return o
}

// defaultCacheTimeout is Options.CacheTimeout's default.
const defaultCacheTimeout = time.Minute

// ServerOptions are the go-fuse options every mount of volume uses (cairn
// mount, the S3 gateway's private mounts); callers add their own (allow
// other, debug, extra -o options) on top.
func ServerOptions(volume string) *fuse.MountOptions {
	return &fuse.MountOptions{
		DirectMount: os.Geteuid() == 0,
		FsName:      "cairn:" + volume,
		Name:        "cairn",
		MaxWrite:    1 << 20,
		// The mount decides when cached pages go (at an open that finds
		// the file changed: pagecache.go), not the kernel on seeing new
		// attributes.
		ExplicitDataCacheControl: true,
	}
}

// FS serves one volume. Create it with New and pass it to NewServer.
// It is safe for the concurrent requests of a multi-threaded server.
type FS struct {
	fuse.RawFileSystem
	root   uint64 // the inode shown as the mount's root (Options.Root)
	v      *client.Volume
	opts   Options
	tr     *tracer                     // nil unless Options.Trace is set
	server atomic.Pointer[fuse.Server] // set by Init, for notifications
	epoch  atomic.Pointer[kernelEpoch] // set by NewServer where the kernel has one (epoch.go)

	mu     sync.Mutex
	nextFh uint64
	files  map[uint64]*client.File            // fh -> open file
	byIno  map[uint64]map[uint64]*client.File // ino -> fh -> open file
	dirs   map[uint64]*dirHandle              // fh -> open directory
	pages  map[uint64]client.Version          // ino -> Version of the kernel's cached pages (pagecache.go)
	// dropping counts the opens of each inode making the kernel drop its
	// pages right now (pagecache.go).
	dropping map[uint64]int
	// dropPagesHook, when set (tests), stands for the kernel notification
	// that drops a node's pages.
	dropPagesHook func(node uint64)

	hints  *attrHints  // attributes learnt by this mount's operations (attrhints.go)
	names  *nameHints  // what names held when this mount last answered for them (namehints.go)
	stale  *staleNames // names the kernel holds that another client renamed (stalenames.go)
	noCaps *noCaps     // files without capabilities (xattrcache.go)
	coh    *coherence  // nil without a change feed (Options.CacheTimeout)
}

// New returns the adapter of v. v must serve this adapter alone: the
// change feed (coherence.go) leaves out the changes of v's own session,
// which it takes for changes the kernel made through this mount, so a
// change made through v by other code would reach this kernel only when
// its cached entry expires (CacheTimeout).
func New(v *client.Volume, opts Options) *FS {
	root := opts.Root
	if root == 0 {
		root = client.RootIno
	}
	fs := &FS{
		root:          root,
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		v:             v, opts: opts.withDefaults(), nextFh: 1, hints: newAttrHints(opts.withDefaults().AttrTimeout),
		noCaps: newNoCaps(opts.withDefaults().AttrTimeout), names: newNameHints(opts.withDefaults().EntryTimeout),
		files: map[uint64]*client.File{}, byIno: map[uint64]map[uint64]*client.File{}, dirs: map[uint64]*dirHandle{},
		pages:    map[uint64]client.Version{},
		dropping: map[uint64]int{},
	}
	if opts.Trace != nil {
		fs.tr = newTracer(opts.Trace)
	}
	kept := fs.opts.EntryTimeout // how long the kernel may keep an entry
	if o := fs.opts; o.CacheTimeout > 0 && o.EntryTimeout > 0 && o.AttrTimeout > 0 {
		fs.coh = newCoherence(fs, o.CacheTimeout, min(o.EntryTimeout, o.AttrTimeout))
		kept = max(kept, o.CacheTimeout)
	}
	fs.stale = newStaleNames(kept)
	return fs
}

// ino is the inode number of the kernel's node id: the mount's root is
// node 1 (FUSE_ROOT_ID) whatever directory it shows.
func (fs *FS) ino(node uint64) uint64 {
	if node == fuse.FUSE_ROOT_ID {
		return fs.root
	}
	return node
}

// node is the kernel's node id of inode ino (ino inverted).
func (fs *FS) node(ino uint64) uint64 {
	if ino == fs.root {
		return fuse.FUSE_ROOT_ID
	}
	return ino
}

// String names the file system (shown by the kernel in debug output).
func (fs *FS) String() string { return "cairn:" + fs.v.Name() }

// ctxOf ignores the kernel's interrupts (FUSE_INTERRUPT, sent when the
// calling thread gets any signal, e.g. a Go runtime's preemption SIGURG):
// honouring them made lookups, renames or closes fail with EINTR, which no
// local file system returns (libfuse ignores interrupts too unless -o intr).
// SDK calls are bounded by their own deadlines.
func ctxOf(cancel <-chan struct{}) context.Context { return &fuse.Context{} }

// caller is ctx acting for the process that made the kernel's request h
// (client.WithCred): its changes carry its uid and gid, which servers
// check for a client whose ids they map (root squash), and with
// Options.CallerGroups its supplementary groups, which the kernel does not
// pass: they are read from /proc.
func (fs *FS) caller(ctx context.Context, h *fuse.InHeader) context.Context {
	c := client.Cred{Uid: h.Uid, Gid: h.Gid}
	if fs.opts.CallerGroups {
		if b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(h.Pid), 10) + "/status"); err == nil {
			c.Groups = parseGroups(b)
		}
	}
	return client.WithCred(ctx, c)
}

// parseGroups reads the "Groups:" line of a /proc/PID/status file.
func parseGroups(status []byte) []uint32 {
	for line := range strings.Lines(string(status)) {
		rest, ok := strings.CutPrefix(line, "Groups:")
		if !ok {
			continue
		}
		var out []uint32
		for _, f := range strings.Fields(rest) {
			if g, err := strconv.ParseUint(f, 10, 32); err == nil {
				out = append(out, uint32(g))
			}
		}
		return out
	}
	return nil
}

// learn starts an operation on inode ino that may learn its attributes
// from the servers (a create, mkdir, mknod, symlink or unlink in directory
// ino; an open of file ino): ctx collects them, and done keeps them as
// ino's hint or, when none came, invalidates ino's hint.
func (fs *FS) learn(cancel <-chan struct{}, ino uint64) (ctx context.Context, done func()) {
	st := fs.hints.begin(ino)
	var got *client.Attr
	ctx = client.WithAttrs(ctxOf(cancel), func(a *client.Attr) {
		if a.Ino == ino {
			got = a
		}
	})
	return ctx, func() {
		if got != nil {
			fs.hints.put(st, got)
		} else {
			fs.hints.invalidateIno(ino)
		}
	}
}

// learnDirs starts an operation that changes parent directories a and b
// and inodes the mount learns from the SDK as it goes (client.WithChanging:
// rmdir's removed directory, rename's moved and replaced inodes). The
// hints of a and b are dropped now, those of the others as they are
// named, and all of them again when done runs; done(ok) then keeps what
// the servers answered for a and b, when ok and no other invalidation of
// them overlapped. Hints of other inodes stay.
func (fs *FS) learnDirs(cancel <-chan struct{}, a, b uint64) (ctx context.Context, done func(ok bool)) {
	fs.hints.invalidateIno(a)
	if b != a {
		fs.hints.invalidateIno(b)
	}
	sa, sb := fs.hints.begin(a), fs.hints.begin(b)
	var (
		mu      sync.Mutex
		changed []uint64
		gotA    *client.Attr
		gotB    *client.Attr
	)
	ctx = client.WithAttrs(ctxOf(cancel), func(at *client.Attr) {
		switch at.Ino {
		case a:
			gotA = at
		case b:
			gotB = at
		}
	})
	ctx = client.WithChanging(ctx, func(ino uint64) {
		fs.hints.invalidateIno(ino)
		mu.Lock()
		changed = append(changed, ino)
		mu.Unlock()
	})
	return ctx, func(ok bool) {
		mu.Lock()
		for _, ino := range changed {
			fs.hints.invalidateIno(ino)
		}
		mu.Unlock()
		sa = fs.hints.invalidateInoKeeping(a, sa)
		if b != a {
			sb = fs.hints.invalidateInoKeeping(b, sb)
		}
		if !ok {
			return
		}
		if gotA != nil {
			fs.hints.put(sa, gotA)
		}
		if gotB != nil && b != a {
			fs.hints.put(sb, gotB)
		}
	}
}

// changing invalidates ino's hint now and when the returned func runs: an
// operation that changes ino without learning its new attributes.
func (fs *FS) changing(ino uint64) func() {
	fs.hints.invalidateIno(ino)
	return func() { fs.hints.invalidateIno(ino) }
}

// Init keeps the server for notifications (see Open).
func (fs *FS) Init(s *fuse.Server) {
	fs.server.Store(s)
	if fs.coh != nil {
		fs.coh.start()
	}
}

// OnUnmount stops the change feed.
func (fs *FS) OnUnmount() {
	if fs.coh != nil {
		fs.coh.close()
	}
	if e := fs.epoch.Load(); e != nil {
		e.close()
	}
}

// status maps an SDK error to the FUSE status carrying its errno.
func status(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	errno := client.ErrnoOf(err)
	if errno == syscall.EIO {
		// EIO hides the cause from the application: keep it in the log.
		slog.Warn("operation failed with EIO", "err", err)
	}
	return fuse.Status(errno)
}

func (fs *FS) observe(op string, start time.Time, st fuse.Status) fuse.Status {
	if m := fs.opts.Metrics; m != nil {
		m.observe(op, start, st)
	}
	return st
}

func toFuseTime(t time.Time) (uint64, uint32) {
	if t.IsZero() || t.Unix() < 0 {
		return 0, 0
	}
	return uint64(t.Unix()), uint32(t.Nanosecond())
}

// fillAttr converts a to the kernel's attributes; the size, mtime and ctime
// of a file this mount has open include its unflushed writes.
func (fs *FS) fillAttr(a *client.Attr, out *fuse.Attr) {
	size, mtime, ctime := a.Size, a.Mtime, a.Ctime
	for _, f := range fs.openFiles(a.Ino) {
		size = max(size, f.Size())
		if m := f.Modified(); m.After(mtime) {
			mtime = m
			if m.After(ctime) {
				ctime = m
			}
		}
	}
	*out = fuse.Attr{
		Ino: fs.node(a.Ino), Size: size, Blocks: (size + 511) / 512,
		Mode: a.Mode, Nlink: a.Nlink, Owner: fuse.Owner{Uid: a.Uid, Gid: a.Gid},
		Rdev: uint32(a.Rdev), Blksize: 128 << 10,
	}
	if fs.opts.ShowIDs != nil {
		out.Owner.Uid, out.Owner.Gid = fs.opts.ShowIDs(a.Uid, a.Gid)
	}
	out.Atime, out.Atimensec = toFuseTime(a.Atime)
	out.Mtime, out.Mtimensec = toFuseTime(mtime)
	out.Ctime, out.Ctimensec = toFuseTime(ctime)
}

func (fs *FS) fillEntry(a *client.Attr, out *fuse.EntryOut) {
	fs.longCache().referenced(a.Ino)
	out.NodeId = fs.node(a.Ino)
	out.Generation = a.Generation + fs.stale.generation(a.Ino)
	out.SetEntryTimeout(fs.opts.EntryTimeout)
	out.SetAttrTimeout(fs.opts.AttrTimeout)
	fs.fillAttr(a, &out.Attr)
}

// begin returns the token of a reply that may let the kernel cache a
// name or attributes for long (longcache.go); take it before the request
// whose answer the reply carries.
func (fs *FS) begin() grantToken {
	if fs.coh == nil {
		return grantToken{}
	}
	return fs.coh.cache.begin()
}

// longCache is the change feed's cache state, nil without a feed (its
// methods then grant and know nothing).
func (fs *FS) longCache() *longCache {
	if fs.coh == nil {
		return nil
	}
	return fs.coh.cache
}

// nameEdit is an operation of this mount under way that makes name present
// in directory dir, or absent (listings.go).
type nameEdit struct {
	c       *longCache
	op      dirOp
	name    string
	present bool
}

// editName starts an operation that makes name present in directory node
// parent, or absent; done ends it.
func (fs *FS) editName(parent uint64, name string, present bool) nameEdit {
	c := fs.longCache()
	return nameEdit{c: c, op: c.enterDirs(fs.ino(parent), fs.ino(parent)), name: name, present: present}
}

// done ends the operation: ok when it succeeded.
func (e nameEdit) done(ok bool) {
	e.c.leaveDirs(e.op, ok, nameChange{e.op.a, e.name, e.present})
}

// fillEntryFor is fillEntry for name in directory node parent, with the
// long timeout when the change feed grants it to a reply begun at tok
// (it reports whether it did). A nil a is a negative entry.
func (fs *FS) fillEntryFor(tok grantToken, parent uint64, name string, a *client.Attr, out *fuse.EntryOut) bool {
	var ino uint64
	if a != nil {
		fs.fillEntry(a, out)
		fs.stale.gave(parent, name, a)
		ino = a.Ino
	} else {
		out.NodeId = 0
		out.SetEntryTimeout(fs.opts.EntryTimeout)
	}
	if fs.coh == nil {
		return false
	}
	n := changefeed.Name{Parent: fs.ino(parent), Name: name}
	if !fs.coh.cache.grant(tok, time.Now(), &n, ino) {
		return false
	}
	out.SetEntryTimeout(fs.coh.ttl)
	if a != nil {
		out.SetAttrTimeout(fs.coh.ttl)
	}
	return true
}

// attrTimeout is the attribute timeout of a reply about ino begun at tok.
func (fs *FS) attrTimeout(tok grantToken, ino uint64) time.Duration {
	if fs.coh != nil && fs.coh.cache.grant(tok, time.Now(), nil, ino) {
		return fs.coh.ttl
	}
	return fs.opts.AttrTimeout
}

// StatFs reports the volume's capacity and inode counts, or the quota's
// of the mount's root directory when it has one.
func (fs *FS) StatFs(cancel <-chan struct{}, header *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	start := time.Now()
	s, err := fs.v.StatFSAt(ctxOf(cancel), fs.root)
	if err != nil {
		return fs.observe("statfs", start, status(err))
	}
	*out = fuse.StatfsOut{
		Blocks: s.Blocks, Bfree: s.BlocksFree, Bavail: s.BlocksAvail,
		Files: s.Files + s.FilesFree, Ffree: s.FilesFree,
		Bsize: s.BlockSize, Frsize: s.BlockSize, NameLen: s.NameLen,
	}
	return fs.observe("statfs", start, fuse.OK)
}
