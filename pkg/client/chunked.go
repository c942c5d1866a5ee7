package client

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
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

// cdcFile is the chunked half of a File: the layout as last committed (or
// read at open) and the writes not yet committed. Guarded by File.mu.
type cdcFile struct {
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

func newCDCFile(v *Volume, in *metapb.Inode) (*cdcFile, error) {
	cfg := clustermap.ChunkConfig(v.current().vol.GetChunking())
	cut, err := chunker.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("volume %q chunking %v: %w", v.name, cfg, err)
	}
	c := &cdcFile{cut: cut}
	c.setLayout(in.GetChunks(), in.GetLayoutGen(), in.GetSize())
	return c, nil
}

func (c *cdcFile) setLayout(chunks []*metapb.Chunk, gen, size uint64) {
	c.chunks, c.gen, c.metaSize = chunks, gen, size
	c.offs = make([]uint64, len(chunks)+1)
	for i, ch := range chunks {
		c.offs[i+1] = c.offs[i] + uint64(ch.GetSize())
	}
}

// valid is where the committed content ends: chunks past the recorded size
// are invisible, and a size past the chunks reads as zeros.
func (c *cdcFile) valid() uint64 { return min(c.metaSize, c.offs[len(c.chunks)]) }

// chunkIndex returns the index of the committed chunk holding offset off
// (off < total).
func (c *cdcFile) chunkIndex(off uint64) int {
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
func (f *File) chunkData(ctx context.Context, op string, ch *metapb.Chunk) ([]byte, error) {
	fp, err := fingerprintOf(ch)
	if err != nil {
		return nil, errnoErr(op, syscall.EIO, "inode %d: %v", f.ino, err)
	}
	data, err := f.v.chunks.Get(ctx, fp, func(ctx context.Context) ([]byte, error) {
		b, err := f.dc.ReadChunk(ctx, chunkLocation(ch), fp)
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
func (f *File) readCommitted(op string, p []byte, off uint64) error {
	c := f.cdc
	valid := c.valid()
	for len(p) > 0 {
		if off >= valid {
			clear(p)
			return nil
		}
		i := c.chunkIndex(off)
		data, err := f.chunkData(f.ctx, op, c.chunks[i])
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
func (f *File) prefetch(off uint64) {
	c := f.cdc
	if off >= c.valid() {
		return
	}
	i := c.chunkIndex(off)
	for _, ch := range c.chunks[i+1 : min(i+1+chunkReadAhead, len(c.chunks))] {
		go func() { _, _ = f.chunkData(f.ctx, "read-ahead", ch) }()
	}
}

func (f *File) readChunked(p []byte, off uint64) (int, error) {
	const op = "read"
	c := f.cdc
	if s := c.stream; s != nil && off+uint64(len(p)) > c.offs[s.baseIdx] {
		if err := f.finishStream(op, true); err != nil {
			return 0, err
		}
	}
	n := int(min(uint64(len(p)), f.size-off))
	if off == c.nextRead && n > 0 {
		f.prefetch(off + uint64(n))
	}
	if err := f.readCommitted(op, p[:n], off); err != nil {
		return 0, err
	}
	c.dirty.overlay(p[:n], off)
	c.nextRead = off + uint64(n)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *File) writeChunked(op string, p []byte, off uint64) (int, error) {
	c := f.cdc
	if c.stream != nil && off != f.size {
		// Not an append: the streamed part commits before the buffer
		// takes the write.
		if err := f.finishStream(op, true); err != nil {
			return 0, err
		}
	}
	if c.stream == nil && off == f.size && c.dirty.len() == 0 && !c.stale &&
		f.size == c.metaSize && c.metaSize == c.offs[len(c.chunks)] && 2*c.cut.Config().MaxSize <= streamBlockSize {
		if err := f.startStream(op); err != nil {
			return 0, err
		}
	}
	if c.stream != nil {
		if err := f.appendStream(op, p); err != nil {
			return 0, err
		}
		f.grow(off + uint64(len(p)))
		return len(p), nil
	}
	f.cdc.dirty.insert(off, p)
	f.grow(off + uint64(len(p)))
	if f.cdc.dirty.len() > f.v.chunkBufferBytes() {
		if err := f.commitChunks(op, false); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

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
	f    *File
	op   string
	ps   []piece
	offs []int64
}

func newPieceReader(f *File, op string, ps []piece) *pieceReader {
	r := &pieceReader{f: f, op: op, ps: ps, offs: make([]int64, len(ps)+1)}
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
			if data, err = r.f.chunkData(r.f.ctx, r.op, r.ps[i].ch); err != nil {
				return done, err
			}
		}
		done += copy(p[done:], data[pos-r.offs[i]:])
	}
	return done, nil
}

// edit applies e to the layout ps and returns the new one.
func (f *File) edit(op string, ps []piece, e chunker.Edit) ([]piece, error) {
	r := newPieceReader(f, op, ps)
	res, err := f.cdc.cut.Rechunk(r.spans(), e, r)
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
func (f *File) newLayout(op string) ([]piece, error) {
	c := f.cdc
	ps := make([]piece, len(c.chunks))
	for i, ch := range c.chunks {
		ps[i] = piece{ch: ch, old: i}
	}
	var err error
	cur := c.offs[len(c.chunks)]
	if v := c.valid(); v < cur {
		// Chunks past the recorded size (a truncate kept the one it cut
		// through): cut them away.
		if ps, err = f.edit(op, ps, chunker.Edit{Offset: int64(v), Deleted: int64(cur - v)}); err != nil {
			return nil, err
		}
		cur = v
	}
	fill := func(to uint64) error {
		for cur < to {
			n := min(to-cur, maxZeroFill)
			if ps, err = f.edit(op, ps, chunker.Edit{Offset: int64(cur), Inserted: make([]byte, n)}); err != nil {
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
			if _, err := newPieceReader(f, op, ps).ReadAt(data[:old-start], int64(start)); err != nil {
				return nil, err
			}
		}
		for _, r := range rs[k:q] {
			copy(data[r.off-start:], r.data)
		}
		del := min(end, cur) - start
		if ps, err = f.edit(op, ps, chunker.Edit{Offset: int64(start), Deleted: int64(del), Inserted: data}); err != nil {
			return nil, err
		}
		cur = max(cur, end)
		k = q
	}
	if err := fill(f.size); err != nil {
		return nil, err
	}
	if cur > f.size {
		if ps, err = f.edit(op, ps, chunker.Edit{Offset: int64(f.size), Deleted: int64(cur - f.size)}); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// commitChunks makes the buffered writes part of the file's layout. With
// final false (the buffer is full, not a flush point) the last chunk, if it
// is new, stays buffered: it was cut by the end of the data written so far
// and would be cut again by the next write.
func (f *File) commitChunks(op string, final bool) error {
	c := f.cdc
	if c.stream != nil {
		return f.finishStream(op, final)
	}
	if c.dirty.len() == 0 && !c.stale && f.size == c.metaSize && c.metaSize == c.offs[len(c.chunks)] {
		return nil
	}
	ctx, cancel := f.v.opCtx(f.ctx)
	defer cancel()
	if c.stale {
		if err := f.reloadLayout(ctx, op); err != nil {
			return err
		}
	}
	ps, err := f.newLayout(op)
	if err != nil {
		return errnoErr(op, syscall.EIO, "inode %d: %v", f.ino, err)
	}
	var tail *piece
	if !final && len(ps) > 0 && ps[len(ps)-1].data != nil {
		tail = &ps[len(ps)-1]
		ps = ps[:len(ps)-1]
	}
	return f.commitLayout(ctx, op, ps, tail, &chunkRefs{f: f, op: op}, c.dirty.len() > 0)
}

// commitLayout commits ps as the file's new layout: references for the
// changed middle (except pieces refs already holds), then the splice. tail,
// if set, stays buffered after the commit; wrote says the handle had
// writes, so that the mtime moves even when no chunk changed.
func (f *File) commitLayout(ctx context.Context, op string, ps []piece, tail *piece, refs *chunkRefs, wrote bool) error {
	c := f.cdc
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
	gen, partial, err := f.splice(ctx, op, c.gen, i, n-j, chunks[i:len(chunks)-j])
	for try := 0; isErrno(err, syscall.ESTALE) && try < staleRetries; try++ {
		// Another writer committed first. Close-to-open: this handle's
		// whole view replaces theirs, never a mix. The chunks it keeps
		// from its old view need references of their own now, and so do
		// all of them if part of this commit went in already (the whole
		// replace drops that part again).
		if err = f.reloadLayout(ctx, op); err != nil {
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
		gen, partial, err = f.splice(ctx, op, c.gen, 0, len(c.chunks), chunks)
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
		if _, err := f.v.Setattr(ctx, f.ino, SetattrIn{Valid: SetMtimeNow | SetCtime, Ctime: time.Now()}); err != nil {
			return err
		}
	}
	return nil
}

// splice replaces chunks [start, end) of the committed layout generation
// gen with chunks, in SpliceChunks of at most maxChunksPerSplice chunks,
// and returns the new generation. partial reports that a failure came
// after some splices had committed.
func (f *File) splice(ctx context.Context, op string, gen uint64, start, end int, chunks []*metapb.Chunk) (_ uint64, partial bool, _ error) {
	for first := true; first || len(chunks) > 0; first = false {
		k := min(len(chunks), maxChunksPerSplice)
		m := &metapb.SpliceChunks{Ino: f.ino, BaseGen: gen, Start: uint32(start), End: uint32(end), Chunks: chunks[:k]}
		res, err := f.v.txn(ctx, op, byIno(f.ino), &metapb.Op{Op: &metapb.Op_SpliceChunks{SpliceChunks: m}})
		if err != nil {
			return 0, !first, err
		}
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
func (f *File) reloadLayout(ctx context.Context, op string) error {
	in, err := f.v.getInode(ctx, op, f.ino)
	if err != nil {
		return err
	}
	if in.GetLayout() != metapb.FileLayout_FILE_LAYOUT_CDC {
		return errnoErr(op, syscall.EIO, "inode %d is no longer a chunked file", f.ino)
	}
	f.cdc.setLayout(in.GetChunks(), in.GetLayoutGen(), in.GetSize())
	f.cdc.stale = false
	return nil
}

// chunkRefs holds the chunk index references one commit took, so that a
// commit that fails gives them back (a crash instead leaves them leaked,
// which cairn gc recounts).
type chunkRefs struct {
	f  *File
	op string

	mu        sync.Mutex // acquire runs in several streamed batches at once
	taken     map[chunker.Fingerprint]*refTaken
	committed bool
	// prefer is the data partition of this commit's uploads, once one
	// succeeded (dataclient.WriteChunkPrefer).
	prefer atomic.Uint64
}

type refTaken struct {
	ch *metapb.Chunk
	n  int64
}

// acquire takes one reference per occurrence of each piece's chunk and
// fills in the location of every new piece: a chunk the index knows is
// shared (dedup), any other is uploaded, then registered. A kept chunk the
// index no longer has is EIO.
func (r *chunkRefs) acquire(ctx context.Context, ps []piece) error {
	_, err := r.take(ctx, ps, false)
	return err
}

// take is acquire. With speculate it skips the lookup: new pieces are
// uploaded at once and registered, and a registration that finds the chunk
// stored already frees the upload. That costs the bandwidth of duplicates
// but one index commit instead of two, which is what fresh data wants.
// shared counts the distinct chunks the index had already.
func (r *chunkRefs) take(ctx context.Context, ps []piece, speculate bool) (shared int, err error) {
	type want struct {
		idx  []int // indexes into ps
		data []byte
	}
	byFP := map[chunker.Fingerprint]*want{}
	var order []chunker.Fingerprint
	for k := range ps {
		p := &ps[k]
		if p.held {
			continue
		}
		if p.data == nil {
			fp, err := fingerprintOf(p.ch)
			if err != nil {
				return 0, errnoErr(r.op, syscall.EIO, "inode %d: %v", r.f.ino, err)
			}
			p.fp = fp
		}
		w := byFP[p.fp]
		if w == nil {
			w = &want{}
			byFP[p.fp] = w
			order = append(order, p.fp)
		}
		w.idx = append(w.idx, k)
		if p.data != nil {
			w.data = p.data
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	var missing []chunker.Fingerprint
	if speculate {
		for _, fp := range order {
			if byFP[fp].data == nil {
				speculate = false // a kept chunk must be looked up
				break
			}
		}
	}
	if speculate {
		missing = order
	} else {
		lookups := make([]*metapb.ChunkRef, len(order))
		for k, fp := range order {
			w := byFP[fp]
			lookups[k] = &metapb.ChunkRef{Chunk: &metapb.Chunk{Fingerprint: fp[:], Size: ps[w.idx[0]].ch.GetSize()}, Delta: int64(len(w.idx))}
		}
		recs, err := r.f.v.chunkRefs(ctx, r.op, lookups)
		if err != nil {
			return 0, err
		}
		for k, fp := range order {
			w := byFP[fp]
			if loc := recs[k].GetChunk(); loc.GetPartitionId() != 0 {
				r.took(loc, int64(len(w.idx)))
				for _, idx := range w.idx {
					ps[idx].ch = loc
				}
				if w.data != nil {
					r.f.v.dedupBytes.Add(int64(len(w.data)))
				}
				shared++
				continue
			}
			if w.data == nil {
				return shared, errnoErr(r.op, syscall.EIO, "inode %d: chunk %v of the layout is no longer in the chunk index", r.f.ino, fp)
			}
			missing = append(missing, fp)
		}
	}
	if len(missing) == 0 {
		return shared, nil
	}
	// Upload what the index lacks, then register it.
	locs := make([]dataclient.ChunkLocation, len(missing))
	errs := make([]error, len(missing))
	var wg sync.WaitGroup
	sem := make(chan struct{}, chunkUploadFanOut)
	for k, fp := range missing {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			data := byFP[fp].data
			locs[k], errs[k] = r.f.dc.WriteChunkPrefer(ctx, r.prefer.Load(), fp, data)
			if errs[k] == nil {
				r.prefer.CompareAndSwap(0, locs[k].PartitionID)
				r.f.v.bytesWritten.Add(int64(len(data)))
			}
		}()
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			return shared, dataErr(r.op, r.f.ino, fmt.Errorf("upload chunk %v: %w", missing[k], err))
		}
	}
	regs := make([]*metapb.ChunkRef, len(missing))
	for k, fp := range missing {
		l := locs[k]
		regs[k] = &metapb.ChunkRef{Delta: int64(len(byFP[fp].idx)), Chunk: &metapb.Chunk{
			Fingerprint: fp[:], Size: uint32(l.Size), PartitionId: l.PartitionID, ExtentId: l.ExtentID, ExtentOffset: l.Offset,
		}}
	}
	recs, err := r.f.v.chunkRefs(ctx, r.op, regs)
	if err != nil {
		// The uploads are stored but unregistered: leaked bytes, the
		// price of a failed index update (docs/design.md).
		return shared, err
	}
	var dup []*metapb.ExtentKey
	for k, fp := range missing {
		w := byFP[fp]
		loc := recs[k].GetChunk()
		r.took(loc, int64(len(w.idx)))
		for _, idx := range w.idx {
			ps[idx].ch = loc
		}
		if l := locs[k]; loc.GetPartitionId() != l.PartitionID || loc.GetExtentId() != l.ExtentID || loc.GetExtentOffset() != l.Offset {
			// The index had the bytes already (another writer's, or a
			// speculative upload's): ours are a second copy nobody
			// refers to.
			dup = append(dup, l.ExtentKey(0))
			shared++
		}
	}
	if len(dup) > 0 {
		_, _ = r.f.dc.Free(ctx, dup)
	}
	return shared, nil
}

func (r *chunkRefs) took(ch *metapb.Chunk, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taken == nil {
		r.taken = map[chunker.Fingerprint]*refTaken{}
	}
	fp, _ := fingerprintOf(ch)
	if t := r.taken[fp]; t != nil {
		t.n += n
		return
	}
	r.taken[fp] = &refTaken{ch: ch, n: n}
}

// refundUnless gives back the references of a commit that did not happen
// (best effort: a failure leaves them leaked, as a crash would).
func (r *chunkRefs) refundUnless(ctx context.Context) {
	r.mu.Lock()
	if r.committed || len(r.taken) == 0 {
		r.mu.Unlock()
		return
	}
	items := make([]*metapb.ChunkRef, 0, len(r.taken))
	for _, t := range r.taken {
		items = append(items, &metapb.ChunkRef{Chunk: t.ch, Delta: -t.n})
	}
	r.taken = nil
	r.mu.Unlock()
	_, _ = r.f.v.chunkRefs(ctx, r.op, items)
}

// setCommitted records that a layout now uses the references (they are no
// longer the commit's to give back).
func (r *chunkRefs) setCommitted(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.committed = v
}

// chunkRefs applies items on the partitions holding their shards of the
// chunk index (one exactly-once Txn per shard, in parallel) and returns the
// records in the order of items.
func (v *Volume) chunkRefs(ctx context.Context, op string, items []*metapb.ChunkRef) ([]*metapb.ChunkRecord, error) {
	w := v.current()
	byShard := map[uint64][]int{}
	var shards []*pb.Partition
	for k, it := range items {
		s, err := clustermap.ChunkShard(w.vol, it.GetChunk().GetFingerprint())
		if err != nil {
			return nil, errnoErr(op, syscall.EIO, "chunk index: %v", err)
		}
		if byShard[s] == nil {
			p, ok := w.parts[s]
			if !ok {
				return nil, errnoErr(op, syscall.EIO, "chunk index partition %d is not in the volume's view", s)
			}
			shards = append(shards, p)
		}
		byShard[s] = append(byShard[s], k)
	}
	out := make([]*metapb.ChunkRecord, len(items))
	err := v.each(shards, func(p *pb.Partition) error {
		idx := byShard[p.GetId()]
		var ops []*metapb.Op
		for k := 0; k < len(idx); k += maxRefItemsPerOp {
			part := idx[k:min(k+maxRefItemsPerOp, len(idx))]
			m := &metapb.ChunkRefs{Items: make([]*metapb.ChunkRef, len(part))}
			for q, x := range part {
				m.Items[q] = items[x]
			}
			ops = append(ops, &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: m}})
		}
		res, err := v.txn(ctx, op, byID(p.GetId()), ops...)
		if err != nil {
			return err
		}
		// Each shard writes only its own items' slots of out.
		for oi, r := range res.GetResults() {
			for q, rec := range r.GetChunks() {
				if x := oi*maxRefItemsPerOp + q; x < len(idx) {
					out[idx[x]] = rec
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k, rec := range out {
		if rec == nil {
			return nil, errnoErr(op, syscall.EIO, "chunk index answered no record for item %d", k)
		}
	}
	return out, nil
}

// chunkBufferBytes is the bound of a chunked File's unflushed writes.
func (v *Volume) chunkBufferBytes() int {
	if n := v.opts.ChunkBufferBytes; n > 0 {
		return n
	}
	return defaultChunkBufferBytes
}
