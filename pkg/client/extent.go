package client

import (
	"context"
	"io"
	"sort"
	"sync"
	"syscall"

	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// The extent layout (CFS): a file is a map of extent keys, each naming a
// run of bytes in an extent of a data partition. Appends stream through a
// sequential writer into new extents; writes over existing bytes are
// buffered (write-back) and overwritten in place; a flush point records
// the keys written since the last one with one AppendExtents.

// maxKeysPerAppend bounds the extent keys of one AppendExtents (the meta
// partition's MaxExtentsPerOp).
const maxKeysPerAppend = 4096

// Write-back of in-place overwrites.
const (
	// defaultWriteBackBytes bounds a File's buffered overwrites unless
	// Options.WriteBackBytes says otherwise.
	defaultWriteBackBytes = 8 << 20
	// overwriteFanOut bounds the Overwrite calls one flush has in flight:
	// a data partition applies the overwrites of one Raft round with one
	// journal fsync, so the more arrive together the cheaper each (16:
	// 3.4k, 64: 4.1k random 4 KiB writes/s with fsync, 4 threads).
	overwriteFanOut = 64
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

// extentLayout is the layout of an extent file: its key map as read at
// open plus this handle's writes. Guarded by File.mu.
type extentLayout struct {
	f        *File
	keys     []*metapb.ExtentKey // the extent map, sorted by file offset, non-overlapping
	recorded uint64              // the size the metadata holds (open, last flush, truncate)
	pending  []*metapb.ExtentKey // keys written since the last flush, in write order
	touched  bool                // an overwrite happened since the last flush
	w        *dataclient.Writer  // the current writer, if any
	wEnd     uint64              // file offset of the writer's next byte
	wr       spans               // the file ranges the writer holds (not yet in keys)
	r        *dataclient.Reader  // reader over keys; nil after a change
	dirty    dirtyBuf            // in-place overwrites not yet sent (write-back)
}

func newExtentLayout(f *File, in *metapb.Inode) (layout, error) {
	return &extentLayout{f: f, keys: sortedKeys(in.GetExtents()), recorded: in.GetSize()}, nil
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

// dropReader closes the reader over the keys: its view (or read-ahead) no
// longer matches the file.
func (l *extentLayout) dropReader() {
	if l.r != nil {
		l.r.Close()
		l.r = nil
	}
}

func (l *extentLayout) readAt(op string, p []byte, off uint64) (int, error) {
	f := l.f
	if l.w != nil && l.wr.overlaps(off, off+uint64(len(p))) {
		// The range holds bytes still in the writer.
		if err := l.endWriter(op); err != nil {
			return 0, err
		}
	}
	if data, ok, err := l.cachedFile(); err != nil {
		return 0, dataErr(op, f.ino, err)
	} else if ok {
		n := copy(p, data[off:])
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	if l.r == nil {
		l.r = f.dc.NewReader(f.ctx, l.keys, int64(f.size))
		if b := l.blocksFor(); b != nil {
			l.r.SetBlocks(b, readBlockBytes)
		}
	}
	hits := l.r.BlockHitBytes()
	n, err := l.r.ReadAt(p, int64(off))
	f.v.bytesRead.Add(int64(n) - (l.r.BlockHitBytes() - hits)) // what came from the data nodes
	// The handle reads its own overwrites still in the write-back buffer.
	l.dirty.overlay(p[:n], off)
	if err != nil && err != io.EOF {
		return n, dataErr(op, f.ino, err)
	}
	return n, err
}

// maxWriterRanges bounds the scattered ranges one writer holds before it
// is ended (their keys join the map): the set is searched on every read
// and write, and its keys go out in one AppendExtents.
const maxWriterRanges = maxKeysPerAppend

// writeAt: sequential writes are buffered into packets; a write over
// existing data goes to the write-back buffer and is overwritten in place
// at the next flush point (or when the buffer passes
// Options.WriteBackBytes); a write into a hole or past the end goes to the
// writer, which packs scattered pieces into full packets of new extents
// (the gaps read as zeros).
func (l *extentLayout) writeAt(op string, p []byte, start uint64) (int, error) {
	f := l.f
	l.dropReader()
	end := start + uint64(len(p))
	if l.w != nil {
		// Fast path: continue the sequential writer.
		if start == l.wEnd {
			// The writer may run on over existing keys, which its new
			// keys will replace: buffered overwrites there are older
			// than these bytes and must not be sent over them later.
			// (Other paths give the writer only holes, where no key, and
			// so no dirty byte, lies.)
			l.dirty.remove(start, end)
			return l.writeSeq(op, p, start)
		}
		// A write over bytes still in the writer needs nothing special:
		// the writer's keys come out in the order written and join the
		// map in that order, so the later bytes win. Only the number of
		// scattered ranges is bounded.
		if len(l.wr.rs) >= maxWriterRanges {
			if err := l.endWriter(op); err != nil {
				return 0, err
			}
		}
	}
	pos := start
	for _, k := range l.keys {
		ks, ke := k.FileOffset, k.FileOffset+k.Size
		if ke <= pos || ks >= end {
			continue
		}
		if ks > pos { // a hole before k: the writer takes it
			if _, err := l.writeSeq(op, p[pos-start:ks-start], pos); err != nil {
				return int(pos - start), err
			}
			pos = ks
		}
		e := min(ke, end)
		if err := l.overwrite(op, k, pos, p[pos-start:e-start]); err != nil {
			return int(pos - start), err
		}
		pos = e
	}
	if l.dirty.len() > f.v.writeBackBytes() {
		if err := l.flushDirty(op); err != nil {
			// The bytes buffered before this write are lost too; the next
			// flush point reports that once more.
			f.err = err
			return 0, err
		}
	}
	if pos < end {
		// The rest (a hole or past the last key) goes to the writer,
		// which stays open for the writes likely to follow.
		n, err := l.writeSeq(op, p[pos-start:], pos)
		return int(pos-start) + n, err
	}
	f.grow(end)
	return len(p), nil
}

// overwrite writes p over key k at file offset off (inside k): into the
// write-back buffer, or at once when write-back is off.
func (l *extentLayout) overwrite(op string, k *metapb.ExtentKey, off uint64, p []byte) error {
	f := l.f
	l.touched = true
	if f.v.writeBackBytes() < 0 {
		if err := f.dc.Overwrite(f.ctx, k.PartitionId, k.ExtentId, int64(k.ExtentOffset+off-k.FileOffset), p); err != nil {
			return dataErr(op, f.ino, err)
		}
		f.v.bytesWritten.Add(int64(len(p)))
		return nil
	}
	l.dirty.insert(off, p)
	return nil
}

// flushDirty sends the write-back buffer as in-place overwrites, split
// along the extent keys, with up to overwriteFanOut calls in flight so that
// the data partitions' Raft groups commit them in batches. The buffer is
// emptied whether or not the sends succeed: on failure the first error is
// returned and the unsent bytes are dropped (as a local file system's
// writeback error, reported by the fsync or close that follows).
func (l *extentLayout) flushDirty(op string) error {
	f := l.f
	if l.dirty.len() == 0 {
		return nil
	}
	ops, uncovered := splitDirty(l.dirty.rs, l.keys, maxOverwriteBytes)
	defer l.dirty.reset()
	// The reader's read-ahead may hold the bytes from before the
	// overwrites, which the buffer no longer covers once it is emptied.
	l.dropReader()
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

// writeSeq writes p at off through the writer, starting one there if
// there is none and moving it there (dataclient.Writer.Seek) if it is
// elsewhere: off lies in a hole, past the keys, or at the writer's end.
func (l *extentLayout) writeSeq(op string, p []byte, off uint64) (int, error) {
	f := l.f
	if l.w == nil {
		l.w = f.dc.NewWriter(f.ctx, off)
	} else if off != l.wEnd {
		l.w.Seek(off)
	}
	l.wEnd = off
	n, err := l.w.Write(p)
	if err != nil {
		// The writer failed for good: nothing of p is written.
		_ = l.endWriter(op)
		return 0, dataErr(op, f.ino, err)
	}
	l.wr.add(off, off+uint64(n))
	l.wEnd += uint64(n)
	f.grow(l.wEnd)
	f.v.bytesWritten.Add(int64(n))
	return n, nil
}

// fallBack brings the size back to what exists after a sequential write
// failed: the size the metadata records or the end of the last extent key,
// whichever is larger. Without it the size would cover bytes that no data
// node holds, which would read as zeros.
func (l *extentLayout) fallBack() {
	f := l.f
	end := l.recorded
	for _, k := range l.keys {
		end = max(end, k.FileOffset+k.Size)
	}
	if end < f.size {
		f.size = end
	}
	if f.size == l.recorded && len(l.pending) == 0 {
		f.sizeDirt = false
	}
}

func (l *extentLayout) addKeys(keys []*metapb.ExtentKey) {
	for _, k := range keys {
		l.keys = overlay(l.keys, k)
		l.pending = append(l.pending, cloneKey(k))
	}
	l.dropReader()
}

// endWriter pushes the sequential writer's bytes to the data nodes and adds
// its keys to the map (not yet to the metadata).
func (l *extentLayout) endWriter(op string) error {
	w := l.w
	l.w = nil
	l.wr.reset()
	keys, err := w.Close()
	l.addKeys(keys) // the acknowledged bytes, even when the rest failed
	if err != nil {
		l.fallBack()
		return dataErr(op, l.f.ino, err)
	}
	return nil
}

// flush records every key written since the last flush, with the new
// size, on the inode's home partition (one exactly-once AppendExtents per
// 4096 keys), after the writer's and the write-back buffer's bytes.
func (l *extentLayout) flush(ctx context.Context, op string) error {
	f := l.f
	if l.w != nil {
		if err := l.endWriter(op); err != nil {
			return err
		}
	}
	// The overwrites go before the metadata step: once the flush returns,
	// an OpenFile anywhere reads them.
	if err := l.flushDirty(op); err != nil {
		return err
	}
	ctx, cancel := f.v.opCtx(ctx)
	defer cancel()
	if len(l.pending) == 0 && f.sizeDirt {
		// Only the size grew (cannot happen without keys today); record it.
		res, err := f.v.setattr(ctx, f.ino, SetattrIn{Valid: SetSize, Size: f.size})
		if err != nil {
			return err
		}
		f.changed(res)
	}
	for len(l.pending) > 0 {
		n := min(len(l.pending), maxKeysPerAppend)
		m := &metapb.AppendExtents{Ino: f.ino, Extents: l.pending[:n], Size: f.size}
		res, err := f.v.txn(f.withCred(ctx), op, byIno(f.ino), &metapb.Op{Op: &metapb.Op_AppendExtents{AppendExtents: m}})
		if isErrno(err, syscall.EDQUOT) {
			l.refused(ctx, op)
			return err
		}
		if err != nil {
			return err
		}
		f.changed(res.GetResults()[0])
		// A small file's receipt has done its work once its key is in
		// the file; a new extent's stays for the keys still to come.
		for _, k := range l.pending[:n] {
			f.v.receipts.Forget(k.PartitionId, k.ExtentId, k.ExtentOffset, k.ExtentOffset+k.Size)
		}
		l.pending = l.pending[n:]
		l.touched = false
	}
	l.pending, f.sizeDirt = nil, false
	l.recorded = f.size
	if l.touched {
		// Overwrites in place change no key; the mtime still moves.
		res, err := f.v.setattr(ctx, f.ino, SetattrIn{Valid: SetMtimeNow})
		if err != nil {
			return err
		}
		f.changed(res)
		l.touched = false
	}
	return nil
}

// refused drops the writes a directory quota refused to record (EDQUOT):
// the data written for keys not yet recorded is freed on the data nodes
// (a new extent whole; the tail of an extent the file already had stays
// until the file's own extents go), and the file's view goes back to what
// its inode records, so later reads and writes start from there. Best
// effort: what cannot be freed or read now is left as it is.
func (l *extentLayout) refused(ctx context.Context, op string) {
	f := l.f
	if f.dc != nil && len(l.pending) > 0 {
		_, _ = f.dc.Free(ctx, l.pending)
	}
	in, err := f.v.getInode(ctx, op, f.ino)
	if err != nil {
		return
	}
	l.keys, l.pending, l.recorded = sortedKeys(in.GetExtents()), nil, in.GetSize()
	f.size, f.sizeDirt = in.GetSize(), false
	l.touched = false
	l.dropReader()
}

func (l *extentLayout) truncated(size uint64) {
	l.keys = cutKeys(l.keys, size)
	// Buffered overwrites beyond size lay over keys just cut; a later
	// growth must read zeros there.
	l.dirty.cut(size)
	l.recorded = size
	l.dropReader()
}

func (l *extentLayout) truncate(_ context.Context, _ string, size uint64) error {
	l.truncated(size)
	return nil
}

func (l *extentLayout) close() { l.dropReader() }
