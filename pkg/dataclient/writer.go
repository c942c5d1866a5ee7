package dataclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Writer writes one file's bytes sequentially from a file offset. It
// buffers a packet (Options.PacketBytes), streams full packets to the
// primary of its current extent with up to MaxInflightPackets
// unacknowledged, and records an ExtentKey for every acknowledged byte:
// the primary acknowledges a packet only once every replica holds it
// durably (CFS §2.2.5), so a key never names bytes a replica may lack.
//
// When a packet fails (a replica down, a full disk, a stale map) the writer
// abandons the extent: the bytes not acknowledged go to a new extent on
// another partition, in order, and the failed partition is avoided for
// Options.ExcludeFor. Bytes the old extent holds past the acknowledged
// offset are never referenced (CFS: no rollback is needed). After
// Options.WaitWritable of failures without an acknowledgement the writer
// fails for good.
//
// Seek moves the writer to another file offset without a round trip: the
// bytes written after it follow the earlier ones in the same extent (and
// the same packet), under keys of their own. Scattered writes into holes
// (a random write into a sparse file) thus travel as full packets.
//
// A file that is no larger than SmallFileBytes when Flush or Close is first
// called, and whose writes started at offset 0 and never moved, is stored
// with WriteSmall instead (packed into a shared small extent). A Writer is
// not safe for concurrent use.
type Writer struct {
	c        *Client
	ctx      context.Context
	startOff uint64
	fileOff  uint64 // file offset of the next byte written
	written  uint64 // bytes written (buffered or sent)
	buf      []byte
	segs     []segment // the file ranges buf holds, in order
	sentAny  bool
	ext      *stream
	inflight []*packet
	keys     []*metapb.ExtentKey
	failing  time.Time // first failure since the last acknowledgement
	err      error
	closed   bool
}

// stream is an extent being appended to.
type stream struct {
	part *pb.Partition
	conn *dataproto.Conn
	id   uint64
	next int64 // extent offset of the next packet
}

type packet struct {
	s      *stream
	call   *dataproto.Call
	data   []byte
	segs   []segment // the file ranges data holds, in order
	extOff int64
}

// segment is a run of a packet's bytes that lies at fileOff of the file.
type segment struct {
	fileOff uint64
	n       int
}

// NewWriter starts a writer whose first byte goes at fileOffset of the
// file. ctx bounds every network call the writer makes.
func (c *Client) NewWriter(ctx context.Context, fileOffset uint64) *Writer {
	return &Writer{c: c, ctx: ctx, startOff: fileOffset, fileOff: fileOffset}
}

// minPacketAlloc is the first buffer a writer allocates. A writer's first
// packet grows from it by doubling, so that a small file costs a buffer of
// its size rather than a whole packet (allocated and zeroed per file, that
// was a tenth of the mount's CPU under small-file writes); later packets
// take a whole one from the client's pool.
const minPacketAlloc = 8 << 10

// room makes space in buf for up to want more bytes, within a packet.
func (w *Writer) room(want int) {
	if cap(w.buf) >= w.c.opts.PacketBytes {
		return
	}
	if w.sentAny && len(w.buf) == 0 {
		// Taken only now, when a byte is to go in it: a buffer taken when
		// the last packet left would outlive a writer that was closing
		// (one per file of a few hundred KiB), outside the pool.
		w.buf = w.c.packetBuf()
		return
	}
	n := min(w.c.opts.PacketBytes, max(2*cap(w.buf), len(w.buf)+want, minPacketAlloc))
	nb := make([]byte, len(w.buf), n)
	copy(nb, w.buf)
	w.buf = nb
}

// Seek makes the next byte written go at fileOffset of the file.
func (w *Writer) Seek(fileOffset uint64) { w.fileOff = fileOffset }

// Write buffers p, sending every full packet. It returns an error only if
// the writer failed (then nothing more is written); bytes are durable only
// once Flush or Close returned nil.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		if len(w.buf) >= w.c.opts.PacketBytes {
			if err := w.sendBuf(); err != nil {
				return n - len(p), err
			}
		}
		if len(w.buf) == cap(w.buf) {
			w.room(len(p))
		}
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		if last := len(w.segs) - 1; last >= 0 && w.segs[last].fileOff+uint64(w.segs[last].n) == w.fileOff {
			w.segs[last].n += k
		} else {
			w.segs = append(w.segs, segment{fileOff: w.fileOff, n: k})
		}
		w.fileOff += uint64(k)
		w.written += uint64(k)
		p = p[k:]
	}
	return n, nil
}

// Flush sends what is buffered and waits until every byte written so far
// is acknowledged by all replicas; Keys then covers all of them.
func (w *Writer) Flush() error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if !w.sentAny && len(w.buf) > 0 && len(w.buf) <= w.c.opts.SmallFileBytes && w.startOff == 0 &&
		len(w.segs) == 1 && w.segs[0].fileOff == 0 {
		key, err := w.c.WriteSmall(w.ctx, 0, w.buf)
		if err != nil {
			w.err = err
			return err
		}
		w.keys = append(w.keys, key)
		w.buf, w.segs = w.buf[:0], nil
		w.sentAny = true
		return nil
	}
	if len(w.buf) > 0 {
		if err := w.sendBuf(); err != nil {
			return err
		}
	}
	return w.drain()
}

// Close flushes and returns the keys of the whole write, in the order the
// bytes were written (file order unless the writer moved back with Seek).
func (w *Writer) Close() ([]*metapb.ExtentKey, error) {
	if w.closed {
		return w.Keys(), nil
	}
	err := w.Flush()
	w.closed = true
	w.ext = nil
	return w.Keys(), err
}

// Keys returns the extent keys of the bytes acknowledged so far, in the
// order written, adjacent keys of one extent merged.
func (w *Writer) Keys() []*metapb.ExtentKey {
	out := make([]*metapb.ExtentKey, len(w.keys))
	for i, k := range w.keys {
		out[i] = &metapb.ExtentKey{FileOffset: k.FileOffset, PartitionId: k.PartitionId, ExtentId: k.ExtentId, ExtentOffset: k.ExtentOffset, Size: k.Size}
	}
	return out
}

// Size is the number of bytes written (buffered or sent).
func (w *Writer) Size() uint64 { return w.written }

func (w *Writer) sendBuf() error {
	data, segs := w.buf, w.segs
	w.buf, w.segs = nil, nil // room takes the next packet's buffer
	w.sentAny = true
	return w.send(data, segs)
}

// packetBuf returns an empty buffer with room for a full packet, recycled
// if one is free.
func (c *Client) packetBuf() []byte {
	return pooledBuf(&c.packets, c.opts.PacketBytes, &c.packetBuffers)[:0]
}

// recycle returns an acknowledged packet's buffer for another packet.
// Only full-size buffers are kept (a writer's first packet grows from a
// small one). Nothing refers to the bytes any more: the send that wrote
// them returned before the acknowledgement came, and keys name extents.
func (c *Client) recycle(pk *packet) {
	if cap(pk.data) >= c.opts.PacketBytes {
		buf := pk.data[:0]
		c.packets.Put(&buf)
	}
	pk.data = nil
}

// send streams one packet, opening an extent if needed and waiting for the
// oldest packet while the window is full.
func (w *Writer) send(data []byte, segs []segment) error {
	for {
		if w.err != nil {
			return w.err
		}
		if len(w.inflight) >= w.c.opts.MaxInflightPackets {
			if err := w.waitOldest(); err != nil {
				return err
			}
			continue
		}
		if err := w.ensureExtent(len(data)); err != nil {
			return err
		}
		s := w.ext
		call, err := s.conn.Start(w.ctx, &dataproto.Request{
			Header:  dataproto.Header{Op: dataproto.OpAppend, Partition: s.part.Id, Extent: s.id, Offset: s.next, Epoch: w.c.epoch()},
			Payload: data,
		})
		if err != nil {
			if err := w.failStream(err); err != nil {
				return err
			}
			continue // resent what was in flight; now this packet
		}
		w.inflight = append(w.inflight, &packet{s: s, call: call, data: data, segs: segs, extOff: s.next})
		s.next += int64(len(data))
		return nil
	}
}

// ensureExtent makes sure the current extent can take n more bytes,
// draining and replacing a full one.
func (w *Writer) ensureExtent(n int) error {
	for w.ext == nil || w.ext.next+int64(n) > w.c.opts.ExtentBytes {
		if w.ext != nil {
			if err := w.drain(); err != nil {
				return err
			}
			if w.ext != nil && w.ext.next+int64(n) > w.c.opts.ExtentBytes {
				w.ext = nil
			}
			continue
		}
		p, err := w.c.pick(w.ctx)
		if err != nil {
			w.err = fmt.Errorf("dataclient: write at file offset %d: %w", w.fileOff, err)
			return w.err
		}
		s, err := w.c.createExtent(w.ctx, p)
		if err != nil {
			if w.ctx.Err() != nil || dataproto.CodeOf(err).Denied() {
				w.err = err
				return err
			}
			w.c.failed(w.ctx, p, err)
			if w.giveUp() {
				w.err = fmt.Errorf("dataclient: no extent could be created for %s: %w", w.c.opts.WaitWritable, err)
				return w.err
			}
			continue
		}
		w.ext = s
	}
	return nil
}

// createExtent makes a new large extent on p, replicated along its chain.
func (c *Client) createExtent(ctx context.Context, p *pb.Partition) (*stream, error) {
	conn, err := c.primaryConn(ctx, p)
	if err != nil {
		return nil, err
	}
	h, receipt, err := conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpCreateExtent, Partition: p.Id, Epoch: c.epoch()}})
	if err != nil {
		return nil, fmt.Errorf("create extent on partition %d: %w", p.Id, err)
	}
	c.keepReceipt(receipt)
	return &stream{part: p, conn: conn, id: h.Extent}, nil
}

// drain waits for every packet in flight.
func (w *Writer) drain() error {
	for len(w.inflight) > 0 {
		if err := w.waitOldest(); err != nil {
			return err
		}
	}
	return w.err
}

// waitOldest waits for the oldest packet: an acknowledgement extends the
// keys; a failure moves the stream (failStream).
func (w *Writer) waitOldest() error {
	pk := w.inflight[0]
	h, _, err := pk.call.Wait(w.ctx)
	if err == nil && h.Arg != uint64(pk.extOff)+uint64(len(pk.data)) {
		err = fmt.Errorf("dataclient: append at %d of %d bytes acknowledged up to %d", pk.extOff, len(pk.data), h.Arg)
	}
	if err != nil {
		return w.failStream(err)
	}
	w.inflight = w.inflight[1:]
	w.ack(pk)
	w.c.recycle(pk)
	w.failing = time.Time{}
	return nil
}

// giveUp records a failure and reports whether the writer has failed
// without progress for longer than WaitWritable.
func (w *Writer) giveUp() bool {
	if w.failing.IsZero() {
		w.failing = time.Now()
	}
	return time.Since(w.failing) > w.c.opts.WaitWritable
}

// ack records an acknowledged packet in the keys: one per segment, merged
// with the key before when both extent and file bytes follow on.
func (w *Writer) ack(pk *packet) {
	extOff := uint64(pk.extOff)
	for _, sg := range pk.segs {
		n := uint64(sg.n)
		if k := lastKey(w.keys); k != nil && k.PartitionId == pk.s.part.Id && k.ExtentId == pk.s.id &&
			k.ExtentOffset+k.Size == extOff && k.FileOffset+k.Size == sg.fileOff {
			k.Size += n
		} else {
			w.keys = append(w.keys, &metapb.ExtentKey{FileOffset: sg.fileOff, PartitionId: pk.s.part.Id, ExtentId: pk.s.id, ExtentOffset: extOff, Size: n})
		}
		extOff += n
	}
}

func lastKey(keys []*metapb.ExtentKey) *metapb.ExtentKey {
	if len(keys) == 0 {
		return nil
	}
	return keys[len(keys)-1]
}

// failStream abandons the current extent after cause: packets already
// acknowledged (in order) are kept, the rest are resent, in order, to a new
// extent on another partition.
func (w *Writer) failStream(cause error) error {
	if w.ctx.Err() != nil || errors.Is(cause, ErrClosed) {
		w.err = fmt.Errorf("dataclient: write at file offset %d: %w", w.fileOff, cause)
		return w.err
	}
	failed := w.ext
	pending := w.inflight
	w.inflight, w.ext = nil, nil
	// Keep the acknowledged prefix.
	for len(pending) > 0 {
		pk := pending[0]
		if !isDone(pk.call) {
			break
		}
		h, _, err := pk.call.Wait(w.ctx)
		if err != nil || h.Arg != uint64(pk.extOff)+uint64(len(pk.data)) {
			break
		}
		w.ack(pk)
		w.c.recycle(pk)
		pending = pending[1:]
	}
	if failed == nil && len(pending) > 0 {
		failed = pending[0].s
	}
	if dataproto.CodeOf(cause).Denied() {
		w.err = fmt.Errorf("dataclient: write at file offset %d: %w", w.fileOff, cause)
		return w.err
	}
	if failed != nil {
		w.c.failed(w.ctx, failed.part, cause)
	}
	if w.giveUp() {
		w.err = fmt.Errorf("dataclient: write at file offset %d failing for %s; last: %w", w.fileOff, w.c.opts.WaitWritable, cause)
		return w.err
	}
	for _, pk := range pending {
		if err := w.send(pk.data, pk.segs); err != nil {
			return err
		}
	}
	return nil
}

// smallPartition is the partition small files keep to now, 0 for none.
func (c *Client) smallPartition() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Now().After(c.smallUntil) {
		return 0
	}
	return c.small
}

// keepSmall makes id the partition small files keep to, for
// Options.SmallStickiness from its choice, unless another writer changed
// the choice after this one took read from smallPartition: then that
// choice stands, so that writers moving off a failed partition, or picking
// once the last choice lapsed, all land on the first one's pick.
func (c *Client) keepSmall(read, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if lapsed := now.After(c.smallUntil); lapsed || c.small == read && c.small != id {
		c.small, c.smallUntil = id, now.Add(c.opts.SmallStickiness)
	}
}

func isDone(call *dataproto.Call) bool {
	select {
	case <-call.Done():
		return true
	default:
		return false
	}
}

// WriteSmall stores data, a whole small file (at most SmallFileBytes),
// packed into a shared small extent of a writable partition, and returns
// its key (at fileOffset). It retries on other partitions as Writer does.
//
// The partition is random, but kept for Options.SmallStickiness while it
// takes writes: the small files a client writes side by side then land in one
// partition, whose group commit makes them durable with one fsync per
// replica, where files spread over every partition cost one fsync each.
func (c *Client) WriteSmall(ctx context.Context, fileOffset uint64, data []byte) (*metapb.ExtentKey, error) {
	if len(data) == 0 || len(data) > c.opts.SmallFileBytes {
		return nil, fmt.Errorf("dataclient: small write of %d bytes (1..%d)", len(data), c.opts.SmallFileBytes)
	}
	var last error
	deadline := time.Now().Add(c.opts.WaitWritable)
	for time.Now().Before(deadline) {
		kept := c.smallPartition()
		p, err := c.pickPrefer(ctx, kept)
		if err != nil {
			return nil, errors.Join(err, last)
		}
		c.keepSmall(kept, p.Id)
		conn, err := c.primaryConn(ctx, p)
		var (
			h       dataproto.Header
			receipt []byte
		)
		if err == nil {
			h, receipt, err = conn.Do(ctx, &dataproto.Request{
				Header:  dataproto.Header{Op: dataproto.OpWriteSmall, Partition: p.Id, Epoch: c.epoch()},
				Payload: data,
			})
		}
		if err == nil {
			c.keepReceipt(receipt)
			return &metapb.ExtentKey{FileOffset: fileOffset, PartitionId: p.Id, ExtentId: h.Extent, ExtentOffset: uint64(h.Offset), Size: uint64(len(data))}, nil
		}
		if ctx.Err() != nil || dataproto.CodeOf(err).Denied() {
			return nil, err
		}
		last = fmt.Errorf("partition %d: %w", p.Id, err)
		c.failed(ctx, p, err)
	}
	return nil, fmt.Errorf("dataclient: small write failing for %s; last: %w", c.opts.WaitWritable, last)
}
