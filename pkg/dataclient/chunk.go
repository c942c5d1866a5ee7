package dataclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Chunk errors.
var (
	// ErrChunkCorrupt: no replica returned bytes matching the chunk's
	// fingerprint, and at least one returned wrong bytes or reported its
	// copy corrupt. The error's message names the fingerprint.
	ErrChunkCorrupt = errors.New("dataclient: chunk corrupt on every replica")
	// ErrFingerprintMismatch: the data node found that the bytes given to
	// WriteChunk do not hash to the fingerprint given with them. Nothing
	// was stored, and the write was not retried: it is the caller's error.
	ErrFingerprintMismatch = errors.New("dataclient: chunk bytes do not match their fingerprint")
	// ErrChunkTooLarge: a chunk is empty or larger than dataproto.MaxChunk,
	// the largest chunk one frame carries.
	ErrChunkTooLarge = errors.New("dataclient: chunk size outside 1..dataproto.MaxChunk")
)

// ChunkLocation is where a chunk is stored: Size bytes at Offset of a
// shared small extent of a data partition. Every replica of the partition
// holds it durably once WriteChunk returned it.
type ChunkLocation struct {
	PartitionID uint64
	ExtentID    uint64
	Offset      uint64
	Size        uint64
}

// ExtentKey returns the location as an extent key at fileOffset, the form
// Free takes: freeing it punches exactly the chunk's range out of its
// extent, and neighbouring chunks stay readable.
func (l ChunkLocation) ExtentKey(fileOffset uint64) *metapb.ExtentKey {
	return &metapb.ExtentKey{FileOffset: fileOffset, PartitionId: l.PartitionID, ExtentId: l.ExtentID, ExtentOffset: l.Offset, Size: l.Size}
}

// String prints the location as partition/extent@offset+size.
func (l ChunkLocation) String() string {
	return fmt.Sprintf("%d/%d@%d+%d", l.PartitionID, l.ExtentID, l.Offset, l.Size)
}

// WriteChunk stores data, a content-addressed chunk whose fingerprint is
// fp, packed into a shared small extent of a random writable partition,
// and returns where it is once every replica holds it durably. Every
// replica checks the bytes against fp before storing them. A failure of the
// partition (a replica down, a full disk, a stale map) moves the write to
// another partition, which is avoided for a while, as WriteSmall does; a
// fingerprint mismatch is not retried (ErrFingerprintMismatch), nor is a
// request the node calls malformed. It stores the chunk even if an
// identical one is stored elsewhere: deduplication is the chunk index's.
func (c *Client) WriteChunk(ctx context.Context, fp chunker.Fingerprint, data []byte) (ChunkLocation, error) {
	return c.WriteChunkPrefer(ctx, 0, fp, data)
}

// WriteChunkPrefer is WriteChunk that first tries partition prefer (0: none)
// while it is writable. Writers of many chunks keep to one partition, as a
// sequential writer keeps to one extent: its group commit then syncs one
// store's files for all of them instead of every partition's.
func (c *Client) WriteChunkPrefer(ctx context.Context, prefer uint64, fp chunker.Fingerprint, data []byte) (ChunkLocation, error) {
	if len(data) == 0 || len(data) > dataproto.MaxChunk {
		return ChunkLocation{}, fmt.Errorf("%w: chunk %v of %d bytes", ErrChunkTooLarge, fp, len(data))
	}
	if !fp.Algorithm().Valid() {
		return ChunkLocation{}, fmt.Errorf("dataclient: write chunk: fingerprint %v names no known algorithm", fp)
	}
	var last error
	deadline := time.Now().Add(c.opts.WaitWritable)
	for time.Now().Before(deadline) {
		p, err := c.pickPrefer(ctx, prefer)
		if err != nil {
			return ChunkLocation{}, errors.Join(err, last)
		}
		conn, err := c.primaryConn(ctx, p)
		var (
			h       dataproto.Header
			receipt []byte
		)
		if err == nil {
			h, receipt, err = conn.Do(ctx, &dataproto.Request{
				Header:  dataproto.Header{Op: dataproto.OpWriteChunk, Partition: p.Id, Epoch: c.epoch()},
				Prefix:  fp[:],
				Payload: data,
			})
		}
		if err == nil && h.Arg != uint64(h.Offset)+uint64(len(data)) {
			err = fmt.Errorf("chunk of %d bytes at offset %d acknowledged up to %d", len(data), h.Offset, h.Arg)
		}
		if err == nil {
			c.keepReceipt(receipt)
			return ChunkLocation{PartitionID: p.Id, ExtentID: h.Extent, Offset: uint64(h.Offset), Size: uint64(len(data))}, nil
		}
		switch dataproto.CodeOf(err) {
		case dataproto.CodeFingerprintMismatch:
			return ChunkLocation{}, fmt.Errorf("%w: chunk %v of %d bytes (partition %d): %w", ErrFingerprintMismatch, fp, len(data), p.Id, err)
		case dataproto.CodeBadRequest:
			return ChunkLocation{}, fmt.Errorf("dataclient: write chunk %v to partition %d: %w", fp, p.Id, err)
		}
		if ctx.Err() != nil || dataproto.CodeOf(err).Denied() {
			return ChunkLocation{}, fmt.Errorf("dataclient: write chunk %v: %w", fp, err)
		}
		last = fmt.Errorf("partition %d: %w", p.Id, err)
		c.failed(ctx, p, err)
	}
	return ChunkLocation{}, fmt.Errorf("dataclient: chunk write failing for %s; last: %w", c.opts.WaitWritable, last)
}

// ReadChunk reads the chunk at loc and checks it against fp. Replicas are
// tried in read order (as ReadExtent does); one whose bytes do not hash to
// fp, or that finds its copy corrupt, is passed over for the next. It
// returns the chunk's bytes only when they match fp: if no replica has
// them the error wraps ErrChunkCorrupt when any replica answered wrong or
// corrupt bytes (a freed chunk reads as zeros and so lands here), else the
// replicas' errors.
func (c *Client) ReadChunk(ctx context.Context, loc ChunkLocation, fp chunker.Fingerprint) ([]byte, error) {
	if loc.Size == 0 || loc.Size > dataproto.MaxChunk {
		return nil, fmt.Errorf("%w: read chunk %v at %v", ErrChunkTooLarge, fp, loc)
	}
	if loc.Offset > 1<<62 {
		return nil, fmt.Errorf("dataclient: read chunk %v: bad location %v", fp, loc)
	}
	if !fp.Algorithm().Valid() {
		return nil, fmt.Errorf("dataclient: read chunk at %v: fingerprint %v names no known algorithm", loc, fp)
	}
	p, err := c.partition(loc.PartitionID)
	if err != nil {
		return nil, err
	}
	off := int64(loc.Offset)
	committed := off + int64(loc.Size)
	buf := make([]byte, loc.Size)
	var errs []error
	bad := 0
	refreshed, rechecked := false, false
	order := c.readOrder(p, -1)
	for i := 0; i < len(order); i++ {
		r := order[i]
		addr, ok := c.addr(r)
		if !ok {
			errs = append(errs, fmt.Errorf("node %d: no data address", r))
			continue
		}
		conn, err := c.pool.get(ctx, addr)
		if err == nil {
			err = c.readFrom(ctx, conn, p.Id, loc.ExtentID, off, committed, buf, rechecked)
			if err == nil {
				sum := chunker.Sum(fp.Algorithm(), buf)
				if sum == fp {
					return buf, nil
				}
				bad++
				err = fmt.Errorf("bytes hash to %v", sum)
			}
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
		if dataproto.CodeOf(err) == dataproto.CodeCorrupt || errors.Is(err, dataproto.ErrPayloadCRC) {
			bad++
		}
		errs = append(errs, fmt.Errorf("node %d: %w", r, err))
		if !retryable(err) {
			break
		}
		c.readFailovers.Add(1)
		c.opts.Logger.Warn("chunk read failed or did not match its fingerprint; trying another replica", "partition", p.Id, "node", r, "chunk", fp.String(), "err", err)
	}
	if bad > 0 {
		return nil, fmt.Errorf("%w: chunk %v at %v: %w", ErrChunkCorrupt, fp, loc, errors.Join(errs...))
	}
	return nil, fmt.Errorf("dataclient: read chunk %v at %v: %w", fp, loc, errors.Join(errs...))
}
