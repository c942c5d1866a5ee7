package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/chunkcache"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/diskcache"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/perm"
)

// dataClient returns the volume's data client, creating it on first use
// from the same cluster map the metadata half routes by (the volume's data
// partitions and the data nodes' data-path addresses).
func (v *Volume) dataClient(ctx context.Context) (*dataclient.Client, error) {
	if dc := v.data.Load(); dc != nil {
		return dc, nil
	}
	// One caller creates it (which reads the map from the masters); the
	// others wait for it as long as their contexts allow.
	if err := v.dataGate.Lock(ctx); err != nil {
		return nil, &Error{Op: "open", Errno: ErrnoOf(err), Msg: "data client of volume " + v.name, Err: err}
	}
	defer v.dataGate.Unlock()
	if dc := v.data.Load(); dc != nil {
		return dc, nil
	}
	src := func(ctx context.Context) (*dataclient.Topology, error) {
		m, err := v.getMap(ctx)
		if err != nil {
			return nil, fmt.Errorf("get cluster map: %w", err)
		}
		return dataclient.FromMap(m, v.name)
	}
	opts := v.opts.Data
	if opts.Conn.TLS == nil {
		opts.Conn.TLS = v.opts.TLS
	}
	if opts.Conn.Network == nil {
		opts.Conn.Network = v.opts.Network
	}
	opts.Grants, opts.Receipts, opts.Regrant = v.grants, v.receipts, v.regrant
	if opts.ReportFailure == nil {
		opts.ReportFailure = v.mc.NewFailureReporter(reporterName()).Report
	}
	dc, err := dataclient.New(ctx, src, opts)
	if err != nil {
		return nil, &Error{Op: "open", Errno: ErrnoOf(err), Msg: "data client of volume " + v.name, Err: err}
	}
	v.data.Store(dc)
	return dc, nil
}

// Stats are a volume's traffic counters.
type Stats struct {
	// MetaRequests counts requests sent to meta partitions (every attempt).
	MetaRequests int64
	// BytesToData and BytesFromData count file bytes written to and read
	// from data nodes through Files.
	BytesToData, BytesFromData int64
	// MetadataBytes estimates the memory the SDK holds for metadata: the
	// volume's routing view (partitions, slot and exception tables, node
	// addresses) and the directory layout cache. The SDK caches no
	// dentries or inodes; a FUSE mount's kernel caches and go-fuse's node
	// table are not counted.
	MetadataBytes int64
	// DedupBytes counts bytes of chunked files' new chunks that were not
	// sent because the volume stored them already.
	DedupBytes int64
	// ChunkCache is the chunk cache's state.
	ChunkCache chunkcache.Stats
	// FileCache is the small-file cache's state (filecache.go; zero when
	// it is off).
	FileCache chunkcache.Stats
	// DiskCache is the disk cache's state (zero without one).
	DiskCache diskcache.Stats
	// Data are the data client's counters (zero before the first OpenFile).
	Data dataclient.Stats
}

// Stats returns the volume's counters.
func (v *Volume) Stats() Stats {
	dc := v.data.Load()
	st := Stats{
		MetaRequests: v.metaRequests.Load(), BytesToData: v.bytesWritten.Load(), BytesFromData: v.bytesRead.Load(),
		DedupBytes: v.dedupBytes.Load(), ChunkCache: v.chunks.Stats(),
		MetadataBytes: v.current().bytes + v.layouts.bytes(),
	}
	if dc != nil {
		st.Data = dc.Stats()
	}
	if v.files != nil {
		st.FileCache = v.files.Stats()
	}
	if v.disk != nil {
		st.DiskCache = v.disk.Stats()
	}
	return st
}

// File is an open regular file. Its data view is the inode's content as
// read at OpenFile (close-to-open consistency: another client's writes are
// seen by an OpenFile after that client's Close or Flush) plus this
// handle's own writes. Writes are buffered: they reach the metadata (and so
// other clients) at Flush, Fsync, Truncate and Close. A File is safe for
// concurrent use; its calls are serialized.
//
// File keeps what POSIX asks of a handle (its size, access mode, flush
// points, write-back errors); where the bytes go is its layout's business
// (layout.go): extents (extent.go) or content-defined chunks (chunked.go).
type File struct {
	v    *Volume
	dc   *dataclient.Client
	ino  uint64
	ctx  context.Context // bounds the data path; ended by Close
	stop context.CancelFunc
	cred *metapb.Cred // the opener's identity (WithCred), carried by the file's metadata changes
	lay  layout       // places the bytes; called with mu held

	mu       sync.Mutex
	append   bool
	writable bool
	size     uint64    // the file size including unflushed writes
	sizeDirt bool      // size grew since the last flush
	modified time.Time // last write not yet flushed (zero: none)
	err      error     // a failed write-back: reported by the next flush point
	closed   bool
	ver      Version // the content's Version as this handle knows it (version.go)
	verOK    bool    // ver is known: no change this handle did not make came in between
}

// OpenFile opens regular file ino. flags are open(2) flags: O_WRONLY or
// O_RDWR allow writes (EBADF otherwise), O_APPEND makes every write go to
// the end of the file, O_TRUNC (with a write mode) truncates it to 0.
// EISDIR for a directory, EINVAL for other non-regular files, ENOENT for a
// missing inode.
func (v *Volume) OpenFile(ctx context.Context, ino uint64, flags int) (*File, error) {
	const op = "open"
	octx, cancel := v.opCtx(ctx)
	defer cancel()
	writable := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if writable && flags&syscall.O_TRUNC != 0 {
		if _, err := v.Setattr(octx, ino, SetattrIn{Valid: SetSize}); err != nil {
			return nil, err
		}
	}
	access := uint32(perm.Read)
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		access = perm.Write
	case syscall.O_RDWR:
		access = perm.Read | perm.Write
	}
	in, err := v.getInodeFor(octx, op, ino, access)
	if err != nil {
		return nil, err
	}
	f, err := v.openInode(octx, op, in, flags)
	if err == nil {
		noteAttrs(ctx, in)
	}
	return f, err
}

// openInode opens the file whose inode the caller just read.
func (v *Volume) openInode(ctx context.Context, op string, in *metapb.Inode, flags int) (*File, error) {
	ino := in.GetIno()
	writable := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	switch in.GetType() {
	case metapb.FileType_FILE_TYPE_REGULAR:
	case metapb.FileType_FILE_TYPE_DIRECTORY:
		return nil, errnoErr(op, syscall.EISDIR, "inode %d is a directory", ino)
	default:
		return nil, errnoErr(op, syscall.EINVAL, "inode %d is a %v, which has no data", ino, in.GetType())
	}
	dc, err := v.dataClient(ctx)
	if err != nil {
		return nil, err
	}
	f := &File{
		v: v, dc: dc, ino: ino, cred: metaclient.CredOf(ctx),
		append: flags&syscall.O_APPEND != 0, writable: writable,
		size: in.GetSize(), ver: versionOf(in), verOK: true,
	}
	if f.lay, err = openLayout(op, f, in); err != nil {
		return nil, err
	}
	v.opened(ino)
	// The file's I/O names its inode, so that a data node wanting a
	// fresh extent grant gets one (dataclient.WithInode).
	f.ctx, f.stop = context.WithCancel(f.withCred(dataclient.WithInode(context.Background(), ino)))
	return f, nil
}

// withCred is ctx acting for the file's opener, unless it names its own.
func (f *File) withCred(ctx context.Context) context.Context {
	if f.cred != nil && metaclient.CredOf(ctx) == nil {
		return metaclient.WithCred(ctx, f.cred)
	}
	return ctx
}

// Ino returns the file's inode number.
func (f *File) Ino() uint64 { return f.ino }

// Writable reports whether the handle was opened for writing.
func (f *File) Writable() bool { return f.writable }

// Size returns the file's size as this handle sees it (including writes
// not yet flushed).
func (f *File) Size() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// Modified returns the time of the last write not yet flushed (zero if
// there is none): until the flush records it, the file's mtime and ctime in
// the metadata are older.
func (f *File) Modified() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.modified
}

func (f *File) check(op string, write bool) error {
	if f.closed {
		return f.closedErr(op)
	}
	if write && !f.writable {
		return errnoErr(op, syscall.EBADF, "inode %d: not open for writing", f.ino)
	}
	return nil
}

// grow extends the size the handle sees to end (a layout accepted bytes up
// to there).
func (f *File) grow(end uint64) {
	if end > f.size {
		f.size = end
		f.sizeDirt = true
	}
}

// dataErr turns a data-path failure into an *Error (EIO unless it carries
// a better errno).
func dataErr(op string, ino uint64, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	n := ErrnoOf(err)
	switch {
	case errors.Is(err, dataclient.ErrNoSpace):
		n = syscall.ENOSPC
	case errors.Is(err, dataclient.ErrNoWritablePartition):
		// Replicas are down or failing: not a lack of space.
		n = syscall.EIO
	case n == syscall.ECONNREFUSED || n == syscall.ECONNRESET || n == syscall.EPIPE || n == syscall.EHOSTUNREACH || n == syscall.ENETUNREACH:
		// No replica could be reached: to the application the bytes are
		// unreadable (or unwritable) here, an I/O error, whatever the
		// socket said.
		n = syscall.EIO
	}
	return &Error{Op: op, Errno: n, Msg: fmt.Sprintf("inode %d", ino), Err: err}
}

// ReadAt reads up to len(p) bytes at off: holes read as zeros; at the end
// of the file it returns fewer bytes and io.EOF. The handle reads its own
// unflushed writes.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	const op = "read"
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(op, false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, errnoErr(op, syscall.EINVAL, "negative offset %d", off)
	}
	if uint64(off) >= f.size {
		return 0, io.EOF
	}
	return f.lay.readAt(op, p, uint64(off))
}

// WriteAt writes p at off (at the end of the file if it was opened with
// O_APPEND); a gap before off reads as zeros. The bytes are buffered by
// the layout and reach other clients at the next flush point; an error of
// a write-back after WriteAt returned is returned by that flush point.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	const op = "write"
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(op, true); err != nil {
		return 0, err
	}
	if f.append {
		off = int64(f.size)
	}
	if off < 0 {
		return 0, errnoErr(op, syscall.EINVAL, "negative offset %d", off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	start := uint64(off)
	end := start + uint64(len(p))
	if end > f.size {
		// Only growth is counted: an overwrite in place takes no new space.
		if err := f.v.reserve(op, end-max(start, f.size)); err != nil {
			return 0, err
		}
	}
	f.modified = time.Now()
	return f.lay.writeAt(op, p, start)
}

// Flush pushes buffered data to the data nodes and records it, with the
// new size, in the metadata (exactly once). After it returns nil, an
// OpenFile anywhere sees the writes.
func (f *File) Flush(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.closedErr("flush")
	}
	return f.flushLocked(ctx, "flush")
}

// Fsync is Flush: a flushed byte is on every replica's disk and its key in
// the metadata's Raft log.
func (f *File) Fsync(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.closedErr("fsync")
	}
	return f.flushLocked(ctx, "fsync")
}

func (f *File) flushLocked(ctx context.Context, op string) error {
	if f.err != nil {
		// A write-back failed after its writes had returned: the flush
		// point that follows reports it, as fsync(2) reports a writeback
		// error. What was written since is still flushed below.
		err := f.err
		f.err = nil
		_ = f.flushLocked(ctx, op)
		return err
	}
	if f.writable && f.verOK {
		// Once the flush ended, whatever it sent: readers of this client
		// that opened at the Version this handle knew must read its bytes
		// again (filecache.go).
		defer f.v.dropCached(f.ino, f.ver)
	}
	if err := f.lay.flush(ctx, op); err != nil {
		return err
	}
	f.modified = time.Time{}
	return nil
}

// Truncate flushes, then sets the file's size (Setattr SIZE): bytes beyond
// are dropped; growing the file leaves a hole that reads as zeros.
func (f *File) Truncate(ctx context.Context, size uint64) error {
	const op = "truncate"
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(op, true); err != nil {
		return err
	}
	if err := f.flushLocked(ctx, op); err != nil {
		return err
	}
	if f.verOK {
		f.v.dropCached(f.ino, f.ver)
	}
	ctx, cancel := f.v.opCtx(ctx)
	defer cancel()
	res, err := f.v.setattr(ctx, f.ino, SetattrIn{Valid: SetSize, Size: size})
	if err != nil {
		return err
	}
	f.changed(res)
	size = res.GetInode().GetSize()
	err = f.lay.truncate(ctx, op, size)
	f.size = size
	return err
}

// Truncated tells the handle that the file was truncated to size by
// someone else (e.g. a Setattr through the Volume while it is open); the
// handle drops what lies beyond from its view. Unflushed writes beyond
// size are kept.
func (f *File) Truncated(size uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lay.truncated(size)
	f.size = size
}

// ErrFileClosed is the cause (errors.Is) of the EBADF a File's operations
// return once it is closed. A closed File flushed its writes as it closed.
var ErrFileClosed = errors.New("file is closed")

func (f *File) closedErr(op string) error {
	return &Error{Op: op, Errno: syscall.EBADF, Msg: fmt.Sprintf("inode %d", f.ino), Err: ErrFileClosed}
}

// Close flushes and releases the handle. It returns the error of the flush
// (or of an earlier failed one); the handle is closed in any case.
func (f *File) Close(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	err := f.flushLocked(ctx, "close")
	f.closed = true
	f.lay.close()
	f.stop()
	if f.v.closed(f.ino) {
		// Unlinked while open: the last close evicts it.
		ctx, cancel := f.v.opCtx(ctx)
		defer cancel()
		_, _ = f.v.txn(f.withCred(ctx), "close", byIno(f.ino), opEvict(f.ino))
	}
	return err
}

// opened counts an open File of ino.
func (v *Volume) opened(ino uint64) {
	v.openMu.Lock()
	defer v.openMu.Unlock()
	if v.opens == nil {
		v.opens = map[uint64]int{}
	}
	v.opens[ino]++
}

// closed uncounts an open File of ino and reports whether ino must now be
// evicted (it lost its last link while open).
func (v *Volume) closed(ino uint64) bool {
	v.openMu.Lock()
	defer v.openMu.Unlock()
	v.opens[ino]--
	if v.opens[ino] > 0 {
		return false
	}
	delete(v.opens, ino)
	ev := v.evictOff[ino]
	delete(v.evictOff, ino)
	return ev
}

// deferEvict reports whether ino is open here; if so its eviction waits
// for the last close.
func (v *Volume) deferEvict(ino uint64) bool {
	v.openMu.Lock()
	defer v.openMu.Unlock()
	if v.opens[ino] == 0 {
		return false
	}
	if v.evictOff == nil {
		v.evictOff = map[uint64]bool{}
	}
	v.evictOff[ino] = true
	return true
}

// reporterName names this client in failure reports: host and process.
func reporterName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("client %s:%d", host, os.Getpid())
}
