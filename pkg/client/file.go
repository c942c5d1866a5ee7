package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/chunkcache"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// maxKeysPerAppend bounds the extent keys of one AppendExtents (the meta
// partition's MaxExtentsPerOp).
const maxKeysPerAppend = 4096

// Write-back of in-place overwrites.
const (
	// defaultWriteBackBytes bounds a File's buffered overwrites unless
	// Options.WriteBackBytes says otherwise.
	defaultWriteBackBytes = 8 << 20
	// overwriteFanOut bounds the Overwrite calls one flush has in flight:
	// enough for the data partitions' Raft group commit to batch them.
	overwriteFanOut = 16
	// maxOverwriteBytes is the largest Overwrite call a flush sends (the
	// data protocol's largest payload), so that a large dirty range also
	// goes out in parallel.
	maxOverwriteBytes = 1 << 20
)

// writeBackBytes is the bound of a File's write-back buffer; negative: no
// write-back.
func (v *Volume) writeBackBytes() int {
	switch n := v.opts.WriteBackBytes; {
	case n == 0:
		return defaultWriteBackBytes
	case n < 0:
		return -1
	default:
		return n
	}
}

// dataClient returns the volume's data client, creating it on first use
// from the same cluster map the metadata half routes by (the volume's data
// partitions and the data nodes' data-path addresses).
func (v *Volume) dataClient(ctx context.Context) (*dataclient.Client, error) {
	v.dataMu.Lock()
	defer v.dataMu.Unlock()
	if v.data != nil {
		return v.data, nil
	}
	src := func(ctx context.Context) (*dataclient.Topology, error) {
		m, err := v.getMap(ctx)
		if err != nil {
			return nil, fmt.Errorf("get cluster map: %w", err)
		}
		return dataclient.FromMap(m, v.name)
	}
	opts := v.opts.Data
	if opts.ReportFailure == nil {
		opts.ReportFailure = v.mc.NewFailureReporter(reporterName()).Report
	}
	dc, err := dataclient.New(ctx, src, opts)
	if err != nil {
		return nil, &Error{Op: "open", Errno: ErrnoOf(err), Msg: "data client of volume " + v.name, Err: err}
	}
	v.data = dc
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
	// Data are the data client's counters (zero before the first OpenFile).
	Data dataclient.Stats
}

// Stats returns the volume's counters.
func (v *Volume) Stats() Stats {
	v.dataMu.Lock()
	dc := v.data
	v.dataMu.Unlock()
	st := Stats{
		MetaRequests: v.metaRequests.Load(), BytesToData: v.bytesWritten.Load(), BytesFromData: v.bytesRead.Load(),
		DedupBytes: v.dedupBytes.Load(), ChunkCache: v.chunks.Stats(),
		MetadataBytes: v.current().bytes + v.layouts.bytes(),
	}
	if dc != nil {
		st.Data = dc.Stats()
	}
	return st
}

// File is an open regular file. Its data view is the inode's extent map as
// read at OpenFile (close-to-open consistency: another client's writes are
// seen by an OpenFile after that client's Close or Flush) plus this
// handle's own writes. Writes are buffered: they reach the metadata (and so
// other clients) at Flush, Fsync, Truncate and Close. A File is safe for
// concurrent use; its calls are serialized.
type File struct {
	v    *Volume
	dc   *dataclient.Client
	ino  uint64
	ctx  context.Context // bounds the data path; ended by Close
	stop context.CancelFunc

	mu       sync.Mutex
	append   bool
	writable bool
	keys     []*metapb.ExtentKey // the extent map, sorted by file offset, non-overlapping
	size     uint64              // the file size including unflushed writes
	recorded uint64              // the size the metadata holds (open, last flush, truncate)
	pending  []*metapb.ExtentKey // keys written since the last flush, in write order
	touched  bool                // an overwrite happened since the last flush
	sizeDirt bool                // size grew since the last flush
	w        *dataclient.Writer  // the current sequential writer, if any
	wEnd     uint64              // file offset of the writer's next byte
	modified time.Time           // last write not yet flushed (zero: none)
	r        *dataclient.Reader  // reader over keys; nil after a change
	dirty    dirtyBuf            // in-place overwrites not yet sent (write-back)
	err      error               // a failed write-back: reported by the next flush point
	closed   bool
	cdc      *cdcFile // a chunked file's layout and buffer (chunked.go); nil for extents
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
	in, err := v.getInode(octx, op, ino)
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
	var cdc *cdcFile
	if in.GetLayout() == metapb.FileLayout_FILE_LAYOUT_CDC {
		if cdc, err = newCDCFile(v, in); err != nil {
			return nil, errnoErr(op, syscall.EIO, "inode %d: %v", ino, err)
		}
	}
	v.opened(ino)
	fctx, stop := context.WithCancel(context.Background())
	f := &File{
		v: v, dc: dc, ino: ino, ctx: fctx, stop: stop,
		append: flags&syscall.O_APPEND != 0, writable: writable,
		keys: sortedKeys(in.GetExtents()), size: in.GetSize(), recorded: in.GetSize(), cdc: cdc,
	}
	return f, nil
}

// Ino returns the file's inode number.
func (f *File) Ino() uint64 { return f.ino }

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

func sortedKeys(in []*metapb.ExtentKey) []*metapb.ExtentKey {
	out := make([]*metapb.ExtentKey, 0, len(in))
	for _, k := range in {
		if k.GetSize() > 0 {
			out = append(out, cloneKey(k))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FileOffset < out[j].FileOffset })
	return out
}

func cloneKey(k *metapb.ExtentKey) *metapb.ExtentKey {
	return &metapb.ExtentKey{FileOffset: k.GetFileOffset(), PartitionId: k.GetPartitionId(), ExtentId: k.GetExtentId(), ExtentOffset: k.GetExtentOffset(), Size: k.GetSize()}
}

// overlay lays key k over the sorted, non-overlapping map keys, cutting
// what it covers (later writes win, as AppendExtents does), and returns the
// new map.
func overlay(keys []*metapb.ExtentKey, k *metapb.ExtentKey) []*metapb.ExtentKey {
	s, e := k.FileOffset, k.FileOffset+k.Size
	out := make([]*metapb.ExtentKey, 0, len(keys)+2)
	inserted := false
	for _, o := range keys {
		os, oe := o.FileOffset, o.FileOffset+o.Size
		if oe <= s || os >= e {
			if os >= e && !inserted {
				out = append(out, cloneKey(k))
				inserted = true
			}
			out = append(out, o)
			continue
		}
		if os < s { // the head of o survives
			h := cloneKey(o)
			h.Size = s - os
			out = append(out, h)
		}
		if !inserted {
			out = append(out, cloneKey(k))
			inserted = true
		}
		if oe > e { // the tail of o survives
			t := cloneKey(o)
			t.FileOffset = e
			t.ExtentOffset += e - os
			t.Size = oe - e
			out = append(out, t)
		}
	}
	if !inserted {
		out = append(out, cloneKey(k))
	}
	return out
}

// cutKeys drops what lies at or beyond size from the map.
func cutKeys(keys []*metapb.ExtentKey, size uint64) []*metapb.ExtentKey {
	out := keys[:0:0]
	for _, k := range keys {
		if k.FileOffset >= size {
			continue
		}
		if k.FileOffset+k.Size > size {
			k = cloneKey(k)
			k.Size = size - k.FileOffset
		}
		out = append(out, k)
	}
	return out
}

func (f *File) check(op string, write bool) error {
	if f.closed {
		return errnoErr(op, syscall.EBADF, "inode %d: file is closed", f.ino)
	}
	if write && !f.writable {
		return errnoErr(op, syscall.EBADF, "inode %d: not open for writing", f.ino)
	}
	return nil
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
// of the file it returns fewer bytes and io.EOF.
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
	if f.cdc != nil {
		return f.readChunked(p, uint64(off))
	}
	if f.w != nil && off+int64(len(p)) > int64(f.wEnd)-int64(f.w.Size()) {
		// The range may hold bytes still in the writer's buffer.
		if err := f.endWriter(op); err != nil {
			return 0, err
		}
	}
	if f.r == nil {
		f.r = f.dc.NewReader(f.ctx, f.keys, int64(f.size))
	}
	n, err := f.r.ReadAt(p, off)
	f.v.bytesRead.Add(int64(n))
	// The handle reads its own overwrites still in the write-back buffer.
	f.dirty.overlay(p[:n], uint64(off))
	if err != nil && err != io.EOF {
		return n, dataErr(op, f.ino, err)
	}
	return n, err
}

// WriteAt writes p at off (at the end of the file if it was opened with
// O_APPEND). Sequential writes are buffered into packets; a write over
// existing data is buffered in the handle's write-back buffer and
// overwritten in place at the next flush point (or when the buffer passes
// Options.WriteBackBytes); a write into a hole or past the end writes a
// new extent at that offset (the gap reads as zeros). The bytes reach
// other clients at the next flush point; an error of the write-back is
// returned by that flush point.
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
	if f.r != nil {
		f.r.Close()
		f.r = nil
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
	if f.cdc != nil {
		return f.writeChunked(op, p, start)
	}
	// Fast path: continue the sequential writer.
	if f.w != nil && start == f.wEnd {
		// The writer may run on over existing keys, which its new keys
		// will replace: buffered overwrites there are older than these
		// bytes and must not be sent over them later. (Other paths write
		// new extents only where no key, and so no dirty byte, lies.)
		f.dirty.remove(start, end)
		return f.writeSeq(op, p, start)
	}
	if f.w != nil {
		if err := f.endWriter(op); err != nil {
			return 0, err
		}
	}
	pos := start
	for _, k := range f.keys {
		ks, ke := k.FileOffset, k.FileOffset+k.Size
		if ke <= pos || ks >= end {
			continue
		}
		if ks > pos { // a hole before k: a new extent
			if err := f.writeNew(op, p[pos-start:ks-start], pos); err != nil {
				return int(pos - start), err
			}
			pos = ks
		}
		e := min(ke, end)
		if err := f.overwrite(op, k, pos, p[pos-start:e-start]); err != nil {
			return int(pos - start), err
		}
		pos = e
	}
	if f.dirty.len() > f.v.writeBackBytes() {
		if err := f.flushDirty(op); err != nil {
			// The bytes buffered before this write are lost too; the next
			// flush point reports that once more.
			f.err = err
			return 0, err
		}
	}
	if pos < end {
		// The rest (a hole or past the last key) goes to a writer that
		// stays open for the sequential writes likely to follow.
		n, err := f.writeSeq(op, p[pos-start:], pos)
		return int(pos-start) + n, err
	}
	f.grow(end)
	return len(p), nil
}

// overwrite writes p over key k at file offset off (inside k): into the
// write-back buffer, or at once when write-back is off.
func (f *File) overwrite(op string, k *metapb.ExtentKey, off uint64, p []byte) error {
	f.touched = true
	if f.v.writeBackBytes() < 0 {
		if err := f.dc.Overwrite(f.ctx, k.PartitionId, k.ExtentId, int64(k.ExtentOffset+off-k.FileOffset), p); err != nil {
			return dataErr(op, f.ino, err)
		}
		f.v.bytesWritten.Add(int64(len(p)))
		return nil
	}
	f.dirty.insert(off, p)
	return nil
}

// flushDirty sends the write-back buffer as in-place overwrites, split
// along the extent keys, with up to overwriteFanOut calls in flight so that
// the data partitions' Raft groups commit them in batches. The buffer is
// emptied whether or not the sends succeed: on failure the first error is
// returned and the unsent bytes are dropped (as a local file system's
// writeback error, reported by the fsync or close that follows).
func (f *File) flushDirty(op string) error {
	if f.dirty.len() == 0 {
		return nil
	}
	ops, uncovered := splitDirty(f.dirty.rs, f.keys, maxOverwriteBytes)
	defer f.dirty.reset()
	if f.r != nil {
		// Its read-ahead may hold the bytes from before the overwrites,
		// which the buffer no longer covers once it is emptied.
		f.r.Close()
		f.r = nil
	}
	if uncovered > 0 {
		return errnoErr(op, syscall.EIO, "inode %d: %d buffered bytes lie over no extent key", f.ino, uncovered)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	// Bounded by the op timeout, but not by the caller's context: an
	// interrupted close must not drop the bytes half-sent.
	ctx, cancel := f.v.opCtx(f.ctx)
	defer cancel()
	sem := make(chan struct{}, overwriteFanOut)
	for _, o := range ops {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(o overwriteOp) {
			defer wg.Done()
			defer func() { <-sem }()
			err := f.dc.Overwrite(ctx, o.pid, o.ext, int64(o.extOff), o.data)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return
			}
			f.v.bytesWritten.Add(int64(len(o.data)))
		}(o)
	}
	wg.Wait()
	if first != nil {
		return dataErr(op, f.ino, first)
	}
	return nil
}

func (f *File) grow(end uint64) {
	if end > f.size {
		f.size = end
		f.sizeDirt = true
	}
}

// writeSeq writes p at off through the sequential writer, starting one
// there if there is none.
func (f *File) writeSeq(op string, p []byte, off uint64) (int, error) {
	if f.w == nil {
		f.w = f.dc.NewWriter(f.ctx, off)
		f.wEnd = off
	}
	n, err := f.w.Write(p)
	if err != nil {
		// The writer failed for good: nothing of p is written.
		_ = f.endWriter(op)
		return 0, dataErr(op, f.ino, err)
	}
	f.wEnd += uint64(n)
	f.grow(f.wEnd)
	f.v.bytesWritten.Add(int64(n))
	return n, nil
}

// writeNew writes p at off as a new extent (a hole inside the file).
func (f *File) writeNew(op string, p []byte, off uint64) error {
	w := f.dc.NewWriter(f.ctx, off)
	_, err := w.Write(p)
	keys, cerr := w.Close()
	// What the data nodes acknowledged is kept either way (it is real
	// data, and a key never names bytes a replica lacks).
	f.addKeys(keys)
	if err = errors.Join(err, cerr); err != nil {
		f.fallBack()
		return dataErr(op, f.ino, err)
	}
	f.v.bytesWritten.Add(int64(len(p)))
	f.grow(off + uint64(len(p)))
	return nil
}

// fallBack brings the size back to what exists after a sequential write
// failed: the size the metadata records or the end of the last extent key,
// whichever is larger. Without it the size would cover bytes that no data
// node holds, which would read as zeros.
func (f *File) fallBack() {
	end := f.recorded
	for _, k := range f.keys {
		end = max(end, k.FileOffset+k.Size)
	}
	if end < f.size {
		f.size = end
	}
	if f.size == f.recorded && len(f.pending) == 0 {
		f.sizeDirt = false
	}
}

func (f *File) addKeys(keys []*metapb.ExtentKey) {
	for _, k := range keys {
		f.keys = overlay(f.keys, k)
		f.pending = append(f.pending, cloneKey(k))
	}
	if f.r != nil {
		f.r.Close()
		f.r = nil
	}
}

// endWriter pushes the sequential writer's bytes to the data nodes and adds
// its keys to the map (not yet to the metadata).
func (f *File) endWriter(op string) error {
	w := f.w
	f.w = nil
	keys, err := w.Close()
	f.addKeys(keys) // the acknowledged bytes, even when the rest failed
	if err != nil {
		f.fallBack()
		return dataErr(op, f.ino, err)
	}
	return nil
}

// Flush pushes buffered data to the data nodes and records every key
// written since the last flush, with the new size, on the inode's home
// partition (one exactly-once AppendExtents per 4096 keys). After it
// returns nil, an OpenFile anywhere sees the writes.
func (f *File) Flush(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errnoErr("flush", syscall.EBADF, "inode %d: file is closed", f.ino)
	}
	return f.flushLocked(ctx, "flush")
}

// Fsync is Flush: a flushed byte is on every replica's disk and its key in
// the metadata's Raft log.
func (f *File) Fsync(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errnoErr("fsync", syscall.EBADF, "inode %d: file is closed", f.ino)
	}
	return f.flushLocked(ctx, "fsync")
}

func (f *File) flushLocked(ctx context.Context, op string) error {
	if f.err != nil {
		// A write-back failed after its writes had returned: the flush
		// point that follows reports it, as fsync(2) reports a writeback
		// error. The keys written since are still recorded below.
		err := f.err
		f.err = nil
		_ = f.flushLocked(ctx, op)
		return err
	}
	if f.cdc != nil {
		if err := f.commitChunks(op, true); err != nil {
			return err
		}
		f.modified = time.Time{}
		return nil
	}
	if f.w != nil {
		if err := f.endWriter(op); err != nil {
			return err
		}
	}
	// The overwrites go before the metadata step: once the flush returns,
	// an OpenFile anywhere reads them.
	if err := f.flushDirty(op); err != nil {
		return err
	}
	ctx, cancel := f.v.opCtx(ctx)
	defer cancel()
	if len(f.pending) == 0 && f.sizeDirt {
		// Only the size grew (cannot happen without keys today); record it.
		if _, err := f.v.Setattr(ctx, f.ino, SetattrIn{Valid: SetSize, Size: f.size}); err != nil {
			return err
		}
	}
	for len(f.pending) > 0 {
		n := min(len(f.pending), maxKeysPerAppend)
		m := &metapb.AppendExtents{Ino: f.ino, Extents: f.pending[:n], Size: f.size}
		if _, err := f.v.txn(ctx, op, byIno(f.ino), &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: m}}); err != nil {
			return err
		}
		f.pending = f.pending[n:]
		f.touched = false
	}
	f.pending, f.sizeDirt, f.modified = nil, false, time.Time{}
	f.recorded = f.size
	if f.touched {
		// Overwrites in place change no key; the mtime still moves.
		if _, err := f.v.Setattr(ctx, f.ino, SetattrIn{Valid: SetMtimeNow | SetCtime, Ctime: time.Now()}); err != nil {
			return err
		}
		f.touched = false
	}
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
	ctx, cancel := f.v.opCtx(ctx)
	defer cancel()
	a, err := f.v.Setattr(ctx, f.ino, SetattrIn{Valid: SetSize, Size: size})
	if err != nil {
		return err
	}
	f.truncatedLocked(a.Size)
	if f.cdc != nil {
		return f.reloadLayout(ctx, op)
	}
	return nil
}

// Truncated tells the handle that the file was truncated to size by
// someone else (e.g. a Setattr through the Volume while it is open); the
// handle drops what lies beyond from its view. Unflushed writes beyond
// size are kept.
func (f *File) Truncated(size uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.truncatedLocked(size)
}

func (f *File) truncatedLocked(size uint64) {
	if c := f.cdc; c != nil {
		if c.stream != nil {
			// Commit the append first; if that fails, the next flush
			// point reports it.
			if err := f.finishStream("truncate", true); err != nil {
				f.err = err
			}
		}
		// The meta partition dropped the chunks past size and moved the
		// layout generation: read it again before the next commit.
		c.dirty.cut(size)
		c.metaSize = min(c.metaSize, size)
		c.stale = true
		f.size = size
		return
	}
	f.keys = cutKeys(f.keys, size)
	// Buffered overwrites beyond size lay over keys just cut; a later
	// growth must read zeros there.
	f.dirty.cut(size)
	f.size, f.recorded = size, size
	if f.r != nil {
		f.r.Close()
		f.r = nil
	}
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
	if f.r != nil {
		f.r.Close()
		f.r = nil
	}
	f.stop()
	if f.v.closed(f.ino) {
		// Unlinked while open: the last close evicts it.
		ctx, cancel := f.v.opCtx(ctx)
		defer cancel()
		_, _ = f.v.txn(ctx, "close", byIno(f.ino), opEvict(f.ino))
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
