package client

import (
	"context"
	"fmt"
	"io"
	"sort"
	"syscall"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/clustermap"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Chunked files (FILE_LAYOUT_CDC, VarFS): a file is the concatenation of
// content-defined chunks, each named by its fingerprint and stored once per
// volume (the chunk index on the meta partitions counts its references).
// Writes are buffered; at a flush point the handle re-cuts only the chunks
// around what changed (chunker.Rechunk), asks the index which of the new
// chunks exist already, uploads the others, and commits the new layout with
// one SpliceChunks against the layout generation it started from.
const (
	// defaultChunkBufferBytes bounds a chunked File's unflushed writes
	// unless Options.ChunkBufferBytes says otherwise; past it the handle
	// commits what it has (keeping the bytes after the last content-defined
	// cut buffered, so a long sequential write uploads each chunk once).
	defaultChunkBufferBytes = 64 << 20
	// defaultChunkCacheBytes bounds the volume's chunk cache unless
	// Options.ChunkCacheBytes says otherwise.
	defaultChunkCacheBytes = 256 << 20
	// chunkReadAhead is how many chunks a sequential reader fetches ahead.
	chunkReadAhead = 4
	// chunkUploadFanOut bounds the chunk uploads one commit has in flight.
	chunkUploadFanOut = 8
	// maxChunksPerSplice is the meta partition's MaxChunksPerOp: a longer
	// change is committed as several splices.
	maxChunksPerSplice = 4096
	// maxRefItemsPerOp bounds the items of one ChunkRefs op.
	maxRefItemsPerOp = 4096
	// maxZeroFill bounds the zeros one edit inserts when a chunked file
	// grows by a hole (truncate up, a write past the end).
	maxZeroFill = 16 << 20
	// staleRetries bounds how often a commit re-reads a layout another
	// writer changed before it gives up (ESTALE).
	staleRetries = 3
)

// LayoutAttr is the directory attribute naming the layout of new regular
// files created in it ("extent" or "cdc"); new subdirectories inherit it.
const LayoutAttr = clustermap.LayoutAttr

// chunkLayout is the layout of a chunked file: the chunks as last
// committed (or read at open) and the writes not yet committed. Guarded by
// File.mu.
type chunkLayout struct {
	f        *File
	cut      *chunker.Cutter
	chunks   []*metapb.Chunk // the committed layout
	offs     []uint64        // offs[i]: file offset of chunks[i]; offs[len(chunks)]: their total
	gen      uint64          // the layout generation chunks belong to
	metaSize uint64          // the size the metadata records (bytes past it are invisible)
	dirty    dirtyBuf        // writes not yet committed, over the committed content
	stale    bool            // the layout was changed under the handle (truncate): reload before committing
	nextRead uint64          // where a sequential reader would read next (read-ahead)
	stream   *cdcStream      // an append being cut and uploaded as it arrives (stream.go)
}

func newChunkLayout(f *File, in *metapb.Inode) (layout, error) {
	v := f.v
	cfg := clustermap.ChunkConfig(v.current().vol.GetChunking())
	cut, err := chunker.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("volume %q chunking %v: %w", v.name, cfg, err)
	}
	c := &chunkLayout{f: f, cut: cut}
	c.setLayout(in.GetChunks(), in.GetLayoutGen(), in.GetSize())
	return c, nil
}

func (c *chunkLayout) setLayout(chunks []*metapb.Chunk, gen, size uint64) {
	c.chunks, c.gen, c.metaSize = chunks, gen, size
	c.offs = make([]uint64, len(chunks)+1)
	for i, ch := range chunks {
		c.offs[i+1] = c.offs[i] + uint64(ch.GetSize())
	}
}

// valid is where the committed content ends: chunks past the recorded size
// are invisible, and a size past the chunks reads as zeros.
func (c *chunkLayout) valid() uint64 { return min(c.metaSize, c.offs[len(c.chunks)]) }

// chunkIndex returns the index of the committed chunk holding offset off
// (off < total).
func (c *chunkLayout) chunkIndex(off uint64) int {
	return sort.Search(len(c.chunks), func(i int) bool { return c.offs[i+1] > off })
}

func fingerprintOf(ch *metapb.Chunk) (chunker.Fingerprint, error) {
	var fp chunker.Fingerprint
	if len(ch.GetFingerprint()) != len(fp) {
		return fp, fmt.Errorf("chunk with a fingerprint of %d bytes", len(ch.GetFingerprint()))
	}
	copy(fp[:], ch.GetFingerprint())
	return fp, nil
}

func chunkLocation(ch *metapb.Chunk) dataclient.ChunkLocation {
	return dataclient.ChunkLocation{PartitionID: ch.GetPartitionId(), ExtentID: ch.GetExtentId(), Offset: ch.GetExtentOffset(), Size: uint64(ch.GetSize())}
}

// chunkData returns a stored chunk's bytes through the volume's cache. A
// chunk no replica serves intact is EIO naming its fingerprint, never zeros.
func (c *chunkLayout) chunkData(ctx context.Context, op string, ch *metapb.Chunk) ([]byte, error) {
	f := c.f
	fp, err := fingerprintOf(ch)
	if err != nil {
		return nil, errnoErr(op, syscall.EIO, "inode %d: %v", f.ino, err)
	}
	data, err := f.v.chunks.Get(ctx, fp, func(ctx context.Context) ([]byte, error) {
		b, err := f.dc.ReadChunk(dataclient.WithInode(ctx, f.ino), chunkLocation(ch), fp)
		if err == nil {
			f.v.bytesRead.Add(int64(len(b)))
		}
		return b, err
	})
	if err != nil {
		return nil, &Error{Op: op, Errno: syscall.EIO, Msg: fmt.Sprintf("inode %d: chunk %v", f.ino, fp), Err: err}
	}
	return data, nil
}

// readCommitted fills p with the committed content at off: chunk bytes up
// to valid(), zeros after.
func (c *chunkLayout) readCommitted(op string, p []byte, off uint64) error {
	f := c.f
	valid := c.valid()
	for len(p) > 0 {
		if off >= valid {
			clear(p)
			return nil
		}
		i := c.chunkIndex(off)
		data, err := c.chunkData(f.ctx, op, c.chunks[i])
		if err != nil {
			return err
		}
		in := off - c.offs[i]
		n := copy(p[:min(uint64(len(p)), valid-off)], data[in:])
		p, off = p[n:], off+uint64(n)
	}
	return nil
}

// prefetch starts fetching the chunks after the one holding off into the
// cache, for a reader that reads on.
func (c *chunkLayout) prefetch(off uint64) {
	f := c.f
	if off >= c.valid() {
		return
	}
	i := c.chunkIndex(off)
	for _, ch := range c.chunks[i+1 : min(i+1+chunkReadAhead, len(c.chunks))] {
		go func() { _, _ = c.chunkData(f.ctx, "read-ahead", ch) }()
	}
}

func (c *chunkLayout) readAt(op string, p []byte, off uint64) (int, error) {
	f := c.f
	if s := c.stream; s != nil && off+uint64(len(p)) > c.offs[s.baseIdx] {
		if err := c.finishStream(op, true); err != nil {
			return 0, err
		}
	}
	n := int(min(uint64(len(p)), f.size-off))
	if off == c.nextRead && n > 0 {
		c.prefetch(off + uint64(n))
	}
	if err := c.readCommitted(op, p[:n], off); err != nil {
		return 0, err
	}
	c.dirty.overlay(p[:n], off)
	c.nextRead = off + uint64(n)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (c *chunkLayout) writeAt(op string, p []byte, off uint64) (int, error) {
	f := c.f
	if c.stream != nil && off != f.size {
		// Not an append: the streamed part commits before the buffer
		// takes the write.
		if err := c.finishStream(op, true); err != nil {
			return 0, err
		}
	}
	if c.stream == nil && off == f.size && c.dirty.len() == 0 && !c.stale &&
		f.size == c.metaSize && c.metaSize == c.offs[len(c.chunks)] && 2*c.cut.Config().MaxSize <= streamBlockSize {
		if err := c.startStream(op); err != nil {
			return 0, err
		}
	}
	if c.stream != nil {
		if err := c.appendStream(op, p); err != nil {
			return 0, err
		}
		f.grow(off + uint64(len(p)))
		return len(p), nil
	}
	c.dirty.insert(off, p)
	f.grow(off + uint64(len(p)))
	if c.dirty.len() > f.v.chunkBufferBytes() {
		if err := c.commitChunks(op, false); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *chunkLayout) flush(_ context.Context, op string) error {
	return c.commitChunks(op, true)
}

func (c *chunkLayout) truncated(size uint64) {
	if c.stream != nil {
		// Commit the append first; if that fails, the next flush point
		// reports it.
		if err := c.finishStream("truncate", true); err != nil {
			c.f.err = err
		}
	}
	// The meta partition dropped the chunks past size and moved the layout
	// generation: read it again before the next commit.
	c.dirty.cut(size)
	c.metaSize = min(c.metaSize, size)
	c.stale = true
}

func (c *chunkLayout) truncate(ctx context.Context, op string, size uint64) error {
	c.truncated(size)
	return c.reloadLayout(ctx, op)
}

// close has nothing to release: the last flush ended any stream.
func (c *chunkLayout) close() {}

// piece is one chunk of a layout being built: a committed chunk kept (old
// >= 0: its index in the committed layout) or a new one cut from the edited
// content (data set, location unknown until the index or an upload gives
// it).
type piece struct {
	ch   *metapb.Chunk
	fp   chunker.Fingerprint
	data []byte
	old  int
	held bool         // the commit holds its reference already (a streamed chunk)
	blk  *streamBlock // the stream block data is a slice of, if any
}

// pieceReader serves the content of a layout being built to Rechunk.
type pieceReader struct {
	c    *chunkLayout
	op   string
	ps   []piece
	offs []int64
}

func newPieceReader(c *chunkLayout, op string, ps []piece) *pieceReader {
	r := &pieceReader{c: c, op: op, ps: ps, offs: make([]int64, len(ps)+1)}
	for i, p := range ps {
		r.offs[i+1] = r.offs[i] + int64(p.ch.GetSize())
	}
	return r
}

func (r *pieceReader) spans() []chunker.Span {
	out := make([]chunker.Span, len(r.ps))
	for i := range r.ps {
		out[i] = chunker.Span{Offset: r.offs[i], Length: r.offs[i+1] - r.offs[i]}
	}
	return out
}

func (r *pieceReader) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		i := sort.Search(len(r.ps), func(i int) bool { return r.offs[i+1] > pos })
		if i == len(r.ps) {
			return done, io.EOF
		}
		data := r.ps[i].data
		if data == nil {
			var err error
			if data, err = r.c.chunkData(r.c.f.ctx, r.op, r.ps[i].ch); err != nil {
				return done, err
			}
		}
		done += copy(p[done:], data[pos-r.offs[i]:])
	}
	return done, nil
}

// edit applies e to the layout ps and returns the new one.
func (c *chunkLayout) edit(op string, ps []piece, e chunker.Edit) ([]piece, error) {
	r := newPieceReader(c, op, ps)
	res, err := c.cut.Rechunk(r.spans(), e, r)
	if err != nil {
		return nil, fmt.Errorf("re-cut at %d: %w", e.Offset, err)
	}
	out := make([]piece, 0, res.Prefix+len(res.New)+len(ps)-res.Suffix)
	out = append(out, ps[:res.Prefix]...)
	for _, n := range res.New {
		out = append(out, piece{
			ch:   &metapb.Chunk{Fingerprint: n.Fingerprint[:], Size: uint32(n.Length)},
			fp:   n.Fingerprint,
			data: n.Data,
			old:  -1,
		})
	}
	return append(out, ps[res.Suffix:]...), nil
}

// newLayout is the committed layout with every buffered write (and the
// size the handle sees) applied.
func (c *chunkLayout) newLayout(op string) ([]piece, error) {
	f := c.f
	ps := make([]piece, len(c.chunks))
	for i, ch := range c.chunks {
		ps[i] = piece{ch: ch, old: i}
	}
	var err error
	cur := c.offs[len(c.chunks)]
	if v := c.valid(); v < cur {
		// Chunks past the recorded size (a truncate kept the one it cut
		// through): cut them away.
		if ps, err = c.edit(op, ps, chunker.Edit{Offset: int64(v), Deleted: int64(cur - v)}); err != nil {
			return nil, err
		}
		cur = v
	}
	fill := func(to uint64) error {
		for cur < to {
			n := min(to-cur, maxZeroFill)
			if ps, err = c.edit(op, ps, chunker.Edit{Offset: int64(cur), Inserted: make([]byte, n)}); err != nil {
				return err
			}
			cur += n
		}
		return nil
	}
	// Dirty ranges closer than a chunk apart go in one edit (the bytes
	// between them read from the layout): each edit re-cuts the chunks
	// around it, so scattered small writes would otherwise re-cut and
	// re-hash the same chunks again and again.
	gap := uint64(c.cut.Config().MaxSize)
	rs := c.dirty.rs
	for k := 0; k < len(rs) && rs[k].off < f.size; {
		start := rs[k].off
		if err := fill(start); err != nil {
			return nil, err
		}
		end := rs[k].end()
		q := k + 1
		for q < len(rs) && rs[q].off < f.size && rs[q].off <= end+gap && rs[q].off < cur {
			end = max(end, rs[q].end())
			q++
		}
		end = min(end, f.size)
		data := make([]byte, end-start)
		if old := min(end, cur); old > start && q > k+1 {
			if _, err := newPieceReader(c, op, ps).ReadAt(data[:old-start], int64(start)); err != nil {
				return nil, err
			}
		}
		for _, r := range rs[k:q] {
			copy(data[r.off-start:], r.data)
		}
		del := min(end, cur) - start
		if ps, err = c.edit(op, ps, chunker.Edit{Offset: int64(start), Deleted: int64(del), Inserted: data}); err != nil {
			return nil, err
		}
		cur = max(cur, end)
		k = q
	}
	if err := fill(f.size); err != nil {
		return nil, err
	}
	if cur > f.size {
		if ps, err = c.edit(op, ps, chunker.Edit{Offset: int64(f.size), Deleted: int64(cur - f.size)}); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// commitChunks makes the buffered writes part of the file's layout. With
// final false (the buffer is full, not a flush point) the last chunk, if it
// is new, stays buffered: it was cut by the end of the data written so far
// and would be cut again by the next write.
func (c *chunkLayout) commitChunks(op string, final bool) error {
	f := c.f
	if c.stream != nil {
		return c.finishStream(op, final)
	}
	if c.dirty.len() == 0 && !c.stale && f.size == c.metaSize && c.metaSize == c.offs[len(c.chunks)] {
		return nil
	}
	ctx, cancel := f.v.opCtx(f.ctx)
	defer cancel()
	if c.stale {
		if err := c.reloadLayout(ctx, op); err != nil {
			return err
		}
	}
	ps, err := c.newLayout(op)
	if err != nil {
		return errnoErr(op, syscall.EIO, "inode %d: %v", f.ino, err)
	}
	var tail *piece
	if !final && len(ps) > 0 && ps[len(ps)-1].data != nil {
		tail = &ps[len(ps)-1]
		ps = ps[:len(ps)-1]
	}
	return c.commitLayout(ctx, op, ps, tail, &chunkRefs{f: f, op: op}, c.dirty.len() > 0)
}

// commitLayout commits ps as the file's new layout: references for the
// changed middle (except pieces refs already holds), then the splice. tail,
// if set, stays buffered after the commit; wrote says the handle had
// writes, so that the mtime moves even when no chunk changed.
func (c *chunkLayout) commitLayout(ctx context.Context, op string, ps []piece, tail *piece, refs *chunkRefs, wrote bool) error {
	f := c.f
	// The changed middle: what lies between the kept prefix and suffix.
	n := len(c.chunks)
	i := 0
	for i < len(ps) && ps[i].old == i {
		i++
	}
	j := 0
	for j < len(ps)-i && j < n-i && ps[len(ps)-1-j].old == n-1-j {
		j++
	}
	defer refs.refundUnless(ctx)
	if err := refs.acquire(ctx, ps[i:len(ps)-j]); err != nil {
		return err
	}
	var size uint64
	for _, p := range ps {
		size += uint64(p.ch.GetSize())
	}
	chunks := make([]*metapb.Chunk, len(ps))
	for k, p := range ps {
		chunks[k] = p.ch
	}
	gen, partial, err := c.splice(ctx, op, c.gen, i, n-j, chunks[i:len(chunks)-j])
	for try := 0; isErrno(err, syscall.ESTALE) && try < staleRetries; try++ {
		// Another writer committed first. Close-to-open: this handle's
		// whole view replaces theirs, never a mix. The chunks it keeps
		// from its old view need references of their own now, and so do
		// all of them if part of this commit went in already (the whole
		// replace drops that part again).
		if err = c.reloadLayout(ctx, op); err != nil {
			return err
		}
		again := append(append([]piece(nil), ps[:i]...), ps[len(ps)-j:]...)
		if partial {
			again = append([]piece(nil), ps...)
			for k := range again {
				again[k].held = false
			}
		}
		if err = refs.acquire(ctx, again); err != nil {
			return err
		}
		i, j = 0, 0
		gen, partial, err = c.splice(ctx, op, c.gen, 0, len(c.chunks), chunks)
	}
	if err != nil {
		// A layout that went in partly uses some of the references: they
		// stay (at worst leaked, never too few).
		refs.setCommitted(partial)
		c.stale = true
		return err
	}
	refs.setCommitted(true)
	for _, p := range ps {
		if p.data != nil {
			f.v.chunks.Put(p.fp, p.data)
		}
	}
	c.setLayout(chunks, gen, size)
	c.dirty.reset()
	if tail != nil {
		c.dirty.insert(size, tail.data)
	}
	f.sizeDirt = false
	if i == len(ps)-j && n-j == i && wrote {
		// The writes changed no chunk (the same bytes again); the mtime
		// still moves, as for any write.
		res, err := f.v.setattr(ctx, f.ino, SetattrIn{Valid: SetMtimeNow})
		if err != nil {
			return err
		}
		f.changed(res)
	}
	return nil
}

// splice replaces chunks [start, end) of the committed layout generation
// gen with chunks, in SpliceChunks of at most maxChunksPerSplice chunks,
// and returns the new generation. partial reports that a failure came
// after some splices had committed.
func (c *chunkLayout) splice(ctx context.Context, op string, gen uint64, start, end int, chunks []*metapb.Chunk) (_ uint64, partial bool, _ error) {
	f := c.f
	for first := true; first || len(chunks) > 0; first = false {
		k := min(len(chunks), maxChunksPerSplice)
		m := &metapb.SpliceChunks{Ino: f.ino, BaseGen: gen, Start: uint32(start), End: uint32(end), Chunks: chunks[:k]}
		res, err := f.v.txn(f.withCred(ctx), op, byIno(f.ino), &metapb.Op{Op: &metapb.Op_SpliceChunks{SpliceChunks: m}})
		if err != nil {
			return 0, !first, err
		}
		f.changed(res.GetResults()[0])
		gen++
		if g := res.GetResults()[0].GetInode().GetLayoutGen(); g != 0 {
			gen = g
		}
		start += k
		end = start
		chunks = chunks[k:]
	}
	return gen, false, nil
}

// reloadLayout reads the committed layout again (another writer, or a
// truncate, changed it).
func (c *chunkLayout) reloadLayout(ctx context.Context, op string) error {
	f := c.f
	in, err := f.v.getInode(ctx, op, f.ino)
	if err != nil {
		return err
	}
	if in.GetLayout() != metapb.FileLayout_FILE_LAYOUT_CDC {
		return errnoErr(op, syscall.EIO, "inode %d is no longer a chunked file", f.ino)
	}
	c.setLayout(in.GetChunks(), in.GetLayoutGen(), in.GetSize())
	c.stale = false
	return nil
}

// chunkBufferBytes is the bound of a chunked File's unflushed writes.
func (v *Volume) chunkBufferBytes() int {
	if n := v.opts.ChunkBufferBytes; n > 0 {
		return n
	}
	return defaultChunkBufferBytes
}
