package client

import (
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Streaming appends. A chunked file written sequentially at its end (the
// common large write: cp, a download, a checkpoint) does not go through the
// write buffer: its bytes are cut into chunks as they arrive, and batches
// of chunks are fingerprinted, looked up and uploaded in the background
// while the writer goes on, so that the network and the data nodes work
// during the writes as for the extent layout, and memory stays bounded.
// The layout still commits only at a flush point (or every
// maxChunksPerSplice chunks).
const (
	// streamBatchBytes is how many bytes of chunks one background batch
	// handles: a lookup and a registration (or a registration alone, see
	// cdcStream.speculate) per shard, each a Raft commit on the shard, so
	// batches must be large for the index not to dominate.
	streamBatchBytes = 8 << 20
	// streamBatchesInFlight bounds the batches being uploaded (32 MiB); a
	// writer that gets further ahead waits.
	streamBatchesInFlight = 4
	// streamBlockSize is the size of the buffers a stream cuts chunks in:
	// a chunk is a slice of a block, so a byte is copied once (from the
	// writer into a block), and blocks are reused once their chunks are
	// uploaded. It must hold two chunks of the largest size.
	streamBlockSize = 8 << 20
)

// streamBlocks recycles stream blocks: allocating fresh memory for every
// chunk cost more CPU than cutting it.
var streamBlocks = sync.Pool{New: func() any {
	b := make([]byte, streamBlockSize)
	return &b
}}

// streamBlock is a block and the count of its users: the stream while it
// writes into it, and every chunk cut from it until its batch is done.
type streamBlock struct {
	buf  *[]byte
	refs atomic.Int32
}

func newStreamBlock() *streamBlock {
	b := &streamBlock{buf: streamBlocks.Get().(*[]byte)}
	b.refs.Store(1)
	return b
}

func (b *streamBlock) release() {
	if b.refs.Add(-1) == 0 {
		streamBlocks.Put(b.buf)
	}
}

// cdcStream is an append in progress. The committed chunks from baseIdx on
// are replaced by pieces followed by the bytes in buf. A cut is final once
// MaxSize bytes follow the chunk's start (it then depends on no later
// byte), so only the last MaxSize bytes at most wait in buf.
type cdcStream struct {
	baseIdx int
	blk     *streamBlock // the block being written
	start   int          // bytes (*blk.buf)[start:end] are not cut yet;
	end     int          // the first is at file offset bufOff
	bufOff  uint64
	refs    *chunkRefs
	sem     chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex // pieces, sent, err, speculate: batches write back
	pieces []piece
	sent   int // pieces[:sent] went out in batches
	ready  int // bytes of pieces[sent:]
	err    error
	// speculate makes batches upload before asking the index (one commit
	// per shard instead of two). A stream starts by asking, so that data
	// the volume has already costs no bandwidth; a batch that finds under
	// a quarter of its chunks stored switches speculation on, one that
	// finds half or more (uploaded for nothing) switches it off.
	speculate bool
}

// startStream begins an append at the end of a committed layout. The last
// committed chunk may have been cut by the end of the file, so cutting
// starts again at its start.
func (c *chunkLayout) startStream(op string) error {
	f := c.f
	n := len(c.chunks)
	s := &cdcStream{baseIdx: n, bufOff: c.offs[n], refs: &chunkRefs{f: f, op: op}, sem: make(chan struct{}, streamBatchesInFlight)}
	var last []byte
	if n > 0 {
		data, err := c.chunkData(f.ctx, op, c.chunks[n-1])
		if err != nil {
			return err
		}
		s.baseIdx, s.bufOff, last = n-1, c.offs[n-1], data
	}
	s.blk = newStreamBlock()
	c.stream = s
	s.pieces = s.write(c.cut, last)
	for _, pc := range s.pieces {
		s.ready += len(pc.data)
	}
	return nil
}

// write copies p into the stream's blocks and returns the chunks whose
// cut is final, as slices of the blocks (each holding a reference).
func (s *cdcStream) write(cut *chunker.Cutter, p []byte) []piece {
	maxSize := cut.Config().MaxSize
	var out []piece
	for len(p) > 0 {
		buf := *s.blk.buf
		if s.end == len(buf) {
			// Full: the bytes not cut yet move to a fresh block.
			nb := newStreamBlock()
			s.end = copy(*nb.buf, buf[s.start:s.end])
			s.start = 0
			s.blk.release()
			s.blk, buf = nb, *nb.buf
		}
		n := copy(buf[s.end:], p)
		s.end += n
		p = p[n:]
		for s.end-s.start >= maxSize {
			l := cut.Next(buf[s.start : s.start+maxSize])
			s.blk.refs.Add(1)
			out = append(out, piece{data: buf[s.start : s.start+l : s.start+l], blk: s.blk, old: -1})
			s.start += l
			s.bufOff += uint64(l)
		}
	}
	return out
}

// close gives back the stream's block.
func (s *cdcStream) close() {
	if s.blk != nil {
		s.blk.release()
		s.blk = nil
	}
}

// appendStream adds p at the end of the stream, cuts every chunk whose cut
// is final and sends full batches.
func (c *chunkLayout) appendStream(op string, p []byte) error {
	s := c.stream
	cut := s.write(c.cut, p)
	if len(cut) == 0 {
		return nil
	}
	n := 0
	for _, pc := range cut {
		n += len(pc.data)
	}
	s.mu.Lock()
	s.pieces = append(s.pieces, cut...)
	s.ready += n
	ready := s.ready
	total := len(s.pieces)
	s.mu.Unlock()
	if ready >= streamBatchBytes {
		c.sendBatch(op)
	}
	if total >= maxChunksPerSplice {
		// One splice commits at most this many chunks: commit what is
		// cut and go on streaming after it.
		return c.finishStream(op, false)
	}
	return nil
}

// sendBatch hands the pieces not yet sent to a background batch, waiting
// while streamBatchesInFlight batches are running.
func (c *chunkLayout) sendBatch(op string) {
	f := c.f
	s := c.stream
	s.mu.Lock()
	start := s.sent
	batch := append([]piece(nil), s.pieces[start:]...)
	s.sent, s.ready = len(s.pieces), 0
	speculate := s.speculate
	s.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	alg := c.cut.Config().Algorithm
	s.sem <- struct{}{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.sem }()
		for k := range batch {
			b := &batch[k]
			b.fp = chunker.Sum(alg, b.data)
			b.ch = &metapb.Chunk{Fingerprint: b.fp[:], Size: uint32(len(b.data))}
		}
		ctx, cancel := f.v.opCtx(f.ctx)
		defer cancel()
		shared, err := s.refs.take(ctx, batch, speculate)
		for _, b := range batch {
			// The bytes are on the data nodes (or the batch failed):
			// the block may be reused.
			b.blk.release()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			if s.err == nil {
				s.err = err
			}
			return
		}
		switch n := len(batch); {
		case shared*4 < n:
			s.speculate = true
		case shared*2 >= n:
			s.speculate = false
		}
		for k := range batch {
			b := &batch[k]
			b.data, b.blk, b.held = nil, nil, true
			s.pieces[start+k] = *b
		}
	}()
}

// finishStream waits for the stream's batches and commits the streamed
// chunks. With final, the bytes still in the buffer are cut too (the last
// chunk by the end of the data) and the stream ends; without, they stay
// buffered and the stream goes on after the committed chunks.
func (c *chunkLayout) finishStream(op string, final bool) error {
	f := c.f
	s := c.stream
	if final {
		// The rest goes out with the last batch, not after it.
		var rest []piece
		buf := (*s.blk.buf)[s.start:s.end]
		prev := 0
		for _, end := range c.cut.Cut(buf) {
			s.blk.refs.Add(1)
			rest = append(rest, piece{data: buf[prev:end:end], blk: s.blk, old: -1})
			prev = end
		}
		s.bufOff += uint64(prev)
		s.start = s.end
		s.mu.Lock()
		s.pieces = append(s.pieces, rest...)
		s.ready += prev
		s.mu.Unlock()
	}
	c.sendBatch(op)
	s.wg.Wait()
	ctx, cancel := f.v.opCtx(f.ctx)
	defer cancel()
	if s.err != nil {
		// The streamed bytes are lost: the handle's view goes back to
		// what is committed, and the error reaches the writer here, as a
		// write-back error would.
		s.refs.refundUnless(ctx)
		s.close()
		c.stream = nil
		c.stale = true
		f.size = c.metaSize
		return dataErr(op, f.ino, s.err)
	}
	ps := make([]piece, 0, s.baseIdx+len(s.pieces)+4)
	for i, ch := range c.chunks[:s.baseIdx] {
		ps = append(ps, piece{ch: ch, old: i})
	}
	ps = append(ps, s.pieces...)
	err := c.commitLayout(ctx, op, ps, nil, s.refs, true)
	if err != nil || final {
		s.close()
		c.stream = nil
		if err != nil {
			f.size = c.metaSize
			c.stale = true
		}
		return err
	}
	if c.offs[len(c.chunks)] != s.bufOff {
		s.close()
		c.stream = nil
		return errnoErr(op, syscall.EIO, "inode %d: streamed layout ends at %d, its buffer starts at %d", f.ino, c.offs[len(c.chunks)], s.bufOff)
	}
	s.baseIdx, s.pieces, s.sent, s.ready = len(c.chunks), nil, 0, 0
	s.refs = &chunkRefs{f: f, op: op}
	return nil
}
