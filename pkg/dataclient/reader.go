package dataclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// ReadExtent reads len(dst) bytes of extent ext of partition pid at extOff.
// committed is the extent's size acknowledged by every replica, as the
// metadata knows it (the end of the key being read is always a safe
// value): a replica refuses to serve past it, and one that does not hold
// the range yet sends the client to the next. Replicas are tried in order,
// the primary first, those the master holds dead last.
func (c *Client) ReadExtent(ctx context.Context, pid, ext uint64, extOff, committed int64, dst []byte) error {
	p, err := c.partition(pid)
	if err != nil {
		return err
	}
	for len(dst) > 0 {
		n := min(len(dst), dataproto.MaxPayload)
		spread := -1
		if n >= spreadMinBytes {
			spread = int(extOff / spreadMinBytes)
		}
		if err := c.readPiece(ctx, p, ext, extOff, committed, dst[:n], spread); err != nil {
			return err
		}
		dst, extOff = dst[n:], extOff+int64(n)
	}
	return nil
}

// spreadMinBytes is the least read that is spread over a partition's
// replicas (readOrder): a sequential reader's read-ahead chunks then come
// from every replica that holds them at once, not all from the chain's
// head, so its rate is the sum of their disks and links. Smaller reads
// keep to the head: a follower confirms each read with a round trip to
// the Raft leader (ReadIndex), which a 4 KiB read would feel and a 1 MiB
// one does not.
const spreadMinBytes = 256 << 10

// readOrder lists p's replicas: the Raft leader this client last
// overwrote through first (it has applied every overwrite it acknowledged),
// then alive ones, then stale ones (catching up), then the rest (down, or
// silent to this client: silence.go), each group in replica order. With
// spread >= 0 and no such leader, the alive ones start at the one spread
// picks (spreadMinBytes). A stale topology is read again behind the read.
func (c *Client) readOrder(p *pb.Partition, spread int) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(p.Replicas)
	leader := c.leaders[p.Id]
	now := time.Now()
	if c.staleLocked(now) {
		c.refreshBehind()
	}
	rank := func(id uint64) int {
		switch {
		case c.silent.is(id, now) || !c.topo.Nodes[id].Alive:
			return 3
		case id == leader:
			return 0
		case slices.Contains(p.Stale, id):
			return 2 // may not hold the range yet
		}
		return 1
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	if spread >= 0 && len(out) > 0 && rank(out[0]) == 1 {
		alive := 1
		for alive < len(out) && rank(out[alive]) == 1 {
			alive++
		}
		if !c.apartLocked(out[:alive]) {
			return out
		}
		k := spread % alive
		slices.Reverse(out[:k])
		slices.Reverse(out[k:alive])
		slices.Reverse(out[:alive]) // rotated left by k
	}
	return out
}

// apartLocked reports whether nodes live on at least two hosts (their
// data addresses' hosts differ). Replicas on one host share its disk and
// CPU, so spreading reads over them gains nothing and costs each
// follower's read its ReadIndex round: on one 2-core host (`cairn up`) a
// cold sequential read ran at 481-530 MiB/s spread against 472-848 not.
func (c *Client) apartLocked(nodes []uint64) bool {
	first := ""
	for i, id := range nodes {
		host, _, err := net.SplitHostPort(c.topo.Nodes[id].Addr)
		if err != nil {
			host = c.topo.Nodes[id].Addr
		}
		if i == 0 {
			first = host
		} else if host != first {
			return true
		}
	}
	return false
}

func (c *Client) readPiece(ctx context.Context, p *pb.Partition, ext uint64, off, committed int64, dst []byte, spread int) error {
	var errs []error
	refreshed, rechecked := false, false
	order := c.readOrder(p, spread)
	for i := 0; i < len(order); i++ {
		r := order[i]
		addr, ok := c.addr(r)
		if !ok {
			errs = append(errs, fmt.Errorf("node %d: no data address", r))
			continue
		}
		err := c.readAttempt(ctx, addr, p.Id, ext, off, committed, dst, rechecked, i < len(order)-1)
		if err == nil {
			return nil
		}
		if dataproto.CodeOf(err) == dataproto.CodeStaleEpoch && !refreshed {
			refreshed = true
			if c.Refresh(ctx) == nil {
				i-- // same replica, newer epoch
				continue
			}
		}
		if c.recheck(err, &rechecked) {
			errs = append(errs, fmt.Errorf("node %d: %w", r, err))
			i-- // same replica, FlagVerify
			continue
		}
		errs = append(errs, fmt.Errorf("node %d: %w", r, err))
		if errors.Is(err, dataproto.ErrPayloadCRC) {
			// Twice: the next replica. This one is alive, so it is not
			// reported.
			c.opts.Logger.Warn("data read failed its checksum twice; trying another replica", "partition", p.Id, "node", r, "extent", ext, "offset", off, "err", err)
			continue
		}
		if !retryable(err) {
			break
		}
		c.unreachable(r, err)
		c.readFailovers.Add(1)
		c.opts.Logger.Info("data read failed; trying another replica", "partition", p.Id, "node", r, "err", err)
	}
	return fmt.Errorf("dataclient: read partition %d extent %d [%d,%d): %w", p.Id, ext, off, off+int64(len(dst)), errors.Join(errs...))
}

// errNoAnswer is a read attempt that Options.ReadAttemptTimeout ended:
// the replica is silent, and the read tries the next.
var errNoAnswer = errors.New("no answer")

// readAttempt reads from the replica at addr; while another is left
// (more), it waits at most Options.ReadAttemptTimeout for it.
func (c *Client) readAttempt(ctx context.Context, addr string, pid, ext uint64, off, committed int64, dst []byte, verify, more bool) error {
	actx := ctx
	if more {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.opts.ReadAttemptTimeout)
		defer cancel()
	}
	conn, err := c.pool.get(actx, addr)
	if err == nil {
		err = c.readFrom(actx, conn, pid, ext, off, committed, dst, verify)
	}
	if err != nil && ctx.Err() == nil && actx.Err() != nil && noAnswer(err) {
		return fmt.Errorf("%w within %s: %v", errNoAnswer, c.opts.ReadAttemptTimeout, err)
	}
	return err
}

// recheck is the policy for a read whose bytes do not match the CRC the
// replica sent from its block CRCs (a block rotted on its disk or in
// transit, or an overwrite landed between the CRC and the send): it counts
// the mismatch and reports whether to ask the same replica once more, with
// FlagVerify (set in *verify), so that the replica checks every block
// itself, answers CodeCorrupt and repairs a bad one, or sends the bytes
// again. Any other outcome, and a second mismatch, clear *verify for the
// next replica.
func (c *Client) recheck(err error, verify *bool) (again bool) {
	if !errors.Is(err, dataproto.ErrPayloadCRC) {
		*verify = false
		return false
	}
	c.readCRCErrors.Add(1)
	*verify = !*verify
	return *verify
}

// readFrom reads len(dst) bytes of extent ext of partition pid at off from
// one replica into dst; verify asks the replica to check every block
// itself (dataproto.FlagVerify). A payload that fails the CRC the replica
// sent is an error wrapping dataproto.ErrPayloadCRC.
func (c *Client) readFrom(ctx context.Context, conn *dataproto.Conn, pid, ext uint64, off, committed int64, dst []byte, verify bool) error {
	var flags dataproto.Flags
	if verify {
		flags = dataproto.FlagVerify
	}
	var got []byte
	err := c.withGrant(ctx, conn, pid, ext, off, len(dst), grant.Read, true, func(tok []byte) (err error) {
		f := flags
		if tok != nil {
			f |= dataproto.FlagGrant
		}
		_, got, err = conn.Do(ctx, &dataproto.Request{
			Header:  dataproto.Header{Op: dataproto.OpRead, Flags: f, Partition: pid, Extent: ext, Offset: off, Arg: uint64(len(dst)), Size: committed, Epoch: c.epoch()},
			Payload: tok,
			Dst:     dst,
		})
		return err
	})
	switch {
	case err != nil:
		return err
	case len(got) != len(dst):
		return fmt.Errorf("got %d bytes, want %d", len(got), len(dst))
	case &got[0] != &dst[0]:
		copy(dst, got)
	}
	return nil
}

// Reader reads a file's bytes given its extent keys: io.Reader, io.ReaderAt
// and io.Seeker. Ranges no key covers (holes) read as zeros. A run of
// sequential reads switches to whole chunks (ReadChunkBytes) fetched ahead
// (ReadAheadBytes) by the reader's goroutines; random reads fetch exactly
// what they ask for (or whole blocks, SetBlocks). At most
// ReadAheadBytes/ReadChunkBytes + chunksBehind + 2 chunks are kept; their
// buffers go back to the Client for the next chunk once no ReadAt copies
// from them. ReadAt may be called concurrently; Read and Seek
// may not. Close stops the read-ahead.
type Reader struct {
	c    *Client
	ctx  context.Context
	stop context.CancelFunc
	keys []*metapb.ExtentKey
	size int64
	pos  int64

	chunk int64
	ahead int

	mu      sync.Mutex
	lastEnd int64 // the furthest end of the sequential run, or the last read's end
	run     bool  // the last reads were a sequential run (sequentialLocked)
	chunks  map[int64]*chunk
	wg      sync.WaitGroup
	closed  bool

	blocks    Blocks // nil: random reads fetch exactly their range
	blockSize int64
	blockHits atomic.Int64 // bytes served from blocks no fetch of this call brought
}

// Blocks keeps whole blocks of one file's bytes for a Reader's random
// reads (SetBlocks), typically in a cache shared by every reader of the
// file's version. Read copies bytes [off, off+len(p)) of block i (the
// file's bytes [i*size, (i+1)*size), shorter at the end of the file) into
// p, calling fetch for the whole block on a miss; fetched reports that
// this call's fetch brought them.
type Blocks interface {
	Read(ctx context.Context, block int64, p []byte, off int64, fetch func(ctx context.Context) ([]byte, error)) (fetched bool, err error)
}

// SetBlocks makes the reader's random reads go through b in blocks of
// size bytes: a miss fetches the whole block, and later reads of any part
// of it, by this reader or another that shares b, cost no request. Call
// it before the first read.
func (r *Reader) SetBlocks(b Blocks, size int) {
	if size > 0 {
		r.blocks, r.blockSize = b, int64(size)
	}
}

// chunk is one read-ahead unit. data and err are set before done closes;
// the other fields are guarded by Reader.mu.
type chunk struct {
	done chan struct{}
	data []byte
	err  error

	refs    int  // ReadAt calls that will copy from data
	dropped bool // no longer in Reader.chunks
	fetched bool // the fetch has finished
}

// NewReader returns a reader of a file of size bytes made of keys (in any
// order; they must not overlap).
func (c *Client) NewReader(ctx context.Context, keys []*metapb.ExtentKey, size int64) *Reader {
	ks := slices.Clone(keys)
	sort.Slice(ks, func(i, j int) bool { return ks[i].FileOffset < ks[j].FileOffset })
	ctx, stop := context.WithCancel(ctx)
	r := &Reader{c: c, ctx: ctx, stop: stop, keys: ks, size: size, chunk: int64(c.opts.ReadChunkBytes), chunks: map[int64]*chunk{}, lastEnd: -1}
	if c.opts.ReadAheadBytes > 0 {
		r.ahead = max(1, c.opts.ReadAheadBytes/c.opts.ReadChunkBytes)
	}
	return r
}

// Close stops the read-ahead and waits for it.
func (r *Reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
	// Every fetch is over: the kept chunks' buffers go back to the pool
	// (a ReadAt still copying from one recycles it when it is done), so
	// that reading many small files does not allocate, and zero, a chunk
	// per file.
	r.mu.Lock()
	for ci, ch := range r.chunks {
		r.dropLocked(ci, ch)
	}
	r.mu.Unlock()
	return nil
}

// Read reads at the current position.
func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.ReadAt(p, r.pos)
	r.pos += int64(n)
	return n, err
}

// Seek sets the position of Read.
func (r *Reader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.size
	default:
		return r.pos, fmt.Errorf("dataclient: seek whence %d", whence)
	}
	if offset < 0 {
		return r.pos, fmt.Errorf("dataclient: seek to %d", offset)
	}
	r.pos = offset
	return offset, nil
}

// ReadAt reads len(p) bytes at off (io.ReaderAt: fewer and io.EOF at the
// end of the file).
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("dataclient: read at %d", off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := len(p)
	end := min(off+int64(want), r.size)
	p = p[:end-off]
	r.mu.Lock()
	sequential := r.sequentialLocked(off, end)
	r.mu.Unlock()
	var err error
	switch {
	case sequential && r.ahead > 0:
		err = r.readChunks(p, off)
	case r.blocks != nil:
		err = r.readBlocks(p, off)
	default:
		err = r.fetch(p, off)
	}
	if err != nil {
		return 0, err
	}
	if len(p) < want {
		return len(p), io.EOF
	}
	return len(p), nil
}

// chunksBehind is how many chunks before a sequential read's first stay
// kept, for reads of the same run that reach the reader later
// (sequentialLocked).
const chunksBehind = 2

// minStreamRead is the least length of a read taken into a sequential run
// out of order (sequentialLocked): the kernel's read-ahead sends reads of
// 128 KiB and more, and a database's random pages are smaller.
const minStreamRead = 64 << 10

// sequentialLocked reports whether a read of [off, end) continues a
// sequential run, and notes it. A read that starts where the last ended
// (or at 0) does, and starts a run; within a run, so does a read of at
// least minStreamRead near the run's furthest end (within the read-ahead
// window): the kernel's read-ahead sends several reads of one stream at
// once, and they reach the reader in any order (measured: 231 of the 512
// reads of a 512 MiB file read with 1 MiB blocks came out of order, and
// each was fetched alone, without read-ahead).
func (r *Reader) sequentialLocked(off, end int64) bool {
	window := int64(r.ahead+1) * r.chunk
	switch {
	case off == r.lastEnd || off == 0:
		r.run, r.lastEnd = true, end
	case r.run && end-off >= minStreamRead && off >= r.lastEnd-window && off <= r.lastEnd+window:
		r.lastEnd = max(end, r.lastEnd)
	default:
		r.run = false
		r.lastEnd = end
		return false
	}
	return true
}

// readChunks serves p from whole chunks, fetching the next ones ahead.
func (r *Reader) readChunks(p []byte, off int64) error {
	end := off + int64(len(p))
	for pos := off; pos < end; {
		ci := pos / r.chunk
		r.mu.Lock()
		ch := r.chunkLocked(ci)
		ch.refs++
		r.mu.Unlock()
		n, err := r.copyChunk(p[pos-off:], ch, pos-ci*r.chunk)
		r.mu.Lock()
		ch.refs--
		if err != nil && r.chunks[ci] == ch {
			r.dropLocked(ci, ch) // retry on the next read
		}
		r.releaseLocked(ch)
		r.mu.Unlock()
		if err != nil {
			return err
		}
		pos += int64(n)
	}
	first := off / r.chunk
	last := (end - 1) / r.chunk
	r.mu.Lock()
	for ci, ch := range r.chunks {
		// A few chunks behind stay for reads of the run that arrive late.
		if ci < first-chunksBehind || ci > last+int64(r.ahead) {
			r.dropLocked(ci, ch)
		}
	}
	r.mu.Unlock()
	for ci := last + 1; ci <= last+int64(r.ahead) && ci*r.chunk < r.size; ci++ {
		r.chunkAt(ci)
	}
	return nil
}

// readBlocks serves p from whole blocks of r.blocks, the blocks of one
// read fetched at once.
func (r *Reader) readBlocks(p []byte, off int64) error {
	end := off + int64(len(p))
	first, last := off/r.blockSize, (end-1)/r.blockSize
	if first == last {
		return r.readBlock(p, off, first)
	}
	errs := make([]error, last-first+1)
	var wg sync.WaitGroup
	for bi := first; bi <= last; bi++ {
		s, e := max(off, bi*r.blockSize), min(end, (bi+1)*r.blockSize)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[bi-first] = r.readBlock(p[s-off:e-off], s, bi)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readBlock serves p, at off inside block bi, from r.blocks.
func (r *Reader) readBlock(p []byte, off, bi int64) error {
	start := bi * r.blockSize
	n := min(r.blockSize, r.size-start)
	fetched, err := r.blocks.Read(r.ctx, bi, p, off-start, func(context.Context) ([]byte, error) {
		buf := make([]byte, n)
		if err := r.fetch(buf, start); err != nil {
			return nil, err
		}
		return buf, nil
	})
	switch {
	case err != nil && errors.Is(err, context.Canceled) && r.ctx.Err() == nil:
		// Another reader's fetch, given up when that reader closed:
		// read this piece alone.
		return r.fetch(p, off)
	case err != nil:
		return err
	}
	if !fetched {
		r.blockHits.Add(int64(len(p)))
	}
	return nil
}

// BlockHitBytes returns how many of the bytes the reader returned came
// from its Blocks without a fetch of its own (SetBlocks).
func (r *Reader) BlockHitBytes() int64 { return r.blockHits.Load() }

// copyChunk waits for ch and copies its bytes from at into p.
func (r *Reader) copyChunk(p []byte, ch *chunk, at int64) (int, error) {
	select {
	case <-ch.done:
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	}
	if ch.err != nil {
		return 0, ch.err
	}
	return copy(p, ch.data[at:]), nil
}

// chunkAt returns chunk ci, starting its fetch if needed.
func (r *Reader) chunkAt(ci int64) *chunk {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.chunkLocked(ci)
}

func (r *Reader) chunkLocked(ci int64) *chunk {
	if ch := r.chunks[ci]; ch != nil {
		return ch
	}
	ch := &chunk{done: make(chan struct{})}
	if r.closed {
		ch.err, ch.fetched, ch.dropped = ErrClosed, true, true
		close(ch.done)
		return ch
	}
	r.chunks[ci] = ch
	start := ci * r.chunk
	n := min(r.chunk, r.size-start)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := r.c.chunkBuf(int(r.chunk))[:n]
		if err := r.fetch(buf, start); err != nil {
			ch.err = err
			r.c.chunks.Put(&buf)
		} else {
			ch.data = buf
		}
		r.mu.Lock()
		ch.fetched = true
		r.releaseLocked(ch)
		r.mu.Unlock()
		close(ch.done)
	}()
	return ch
}

// dropLocked removes chunk ci from the kept ones; its buffer is recycled
// once its fetch is over and no ReadAt copies from it.
func (r *Reader) dropLocked(ci int64, ch *chunk) {
	delete(r.chunks, ci)
	ch.dropped = true
	r.releaseLocked(ch)
}

// releaseLocked recycles ch's buffer if nothing can read it any more.
func (r *Reader) releaseLocked(ch *chunk) {
	if ch.dropped && ch.fetched && ch.refs == 0 && ch.data != nil {
		buf := ch.data[:0]
		ch.data = nil
		r.c.chunks.Put(&buf)
	}
}

// chunkBuf returns a buffer of length n for a chunk, recycled
// if one is free. Its contents are arbitrary: fetch writes every byte.
func (c *Client) chunkBuf(n int) []byte {
	return pooledBuf(&c.chunks, n, &c.chunkBuffers)
}

// pooledBuf returns a buffer of length n from pool, or a new one (counted
// in allocs) when the pool has none large enough. Its contents are
// arbitrary.
func pooledBuf(pool *sync.Pool, n int, allocs *atomic.Int64) []byte {
	if b, ok := pool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	allocs.Add(1)
	return make([]byte, n)
}

// fetch reads [off, off+len(p)) of the file from the extents covering it,
// and zeros what no key covers (holes): every byte of p is written.
func (r *Reader) fetch(p []byte, off int64) error {
	end := off + int64(len(p))
	filled := off // p is written up to here
	i := sort.Search(len(r.keys), func(i int) bool {
		k := r.keys[i]
		return int64(k.FileOffset+k.Size) > off
	})
	for ; i < len(r.keys) && int64(r.keys[i].FileOffset) < end; i++ {
		k := r.keys[i]
		s := max(off, int64(k.FileOffset))
		e := min(end, int64(k.FileOffset+k.Size))
		if s >= e {
			continue
		}
		extOff := int64(k.ExtentOffset) + s - int64(k.FileOffset)
		committed := int64(k.ExtentOffset + k.Size)
		if s > filled {
			clear(p[filled-off : s-off])
		}
		if err := r.c.ReadExtent(r.ctx, k.PartitionId, k.ExtentId, extOff, committed, p[s-off:e-off]); err != nil {
			return err
		}
		filled = max(filled, e)
	}
	clear(p[filled-off:])
	return nil
}
