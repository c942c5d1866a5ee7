package extentstore

import (
	"context"
	"fmt"
	"hash/crc32"
	"time"
)

// ScrubOptions bound a scrub.
type ScrubOptions struct {
	// MaxBad stops the scrub once this many bad blocks are found (default
	// 1024): a disk that bad needs replacing, not a longer list.
	MaxBad int
	// BytesPerSecond paces the reads so that a background scrub leaves the
	// disk to the foreground; 0 means no pacing.
	BytesPerSecond int64
}

// BadBlock is a block that failed verification.
type BadBlock struct {
	Extent uint64
	Block  int64
	Offset int64 // of the block in the extent
	Length int64
	// Err is a *CorruptionError (ErrCorrupt) or an error wrapping ErrIO.
	Err error
}

// Scrub reads every block of every extent, in id order, and returns those
// failing their CRC or returning an I/O error (at most MaxBad), for the
// caller to repair from a healthy replica with RepairBlock. Punched holes
// are not reported (they are checked as zeros). Each block is checked under
// its extent's read lock, so writes to the extent wait at most one block
// read. Scrub stops when ctx is done, returning what it found and ctx's
// error. Cost: reads the whole partition.
func (s *Store) Scrub(ctx context.Context, opt ScrubOptions) ([]BadBlock, error) {
	if opt.MaxBad <= 0 {
		opt.MaxBad = 1024
	}
	var (
		bad   []BadBlock
		read  int64
		begin = time.Now()
	)
	buf := s.getBuf()
	defer s.putBuf(buf)
	for _, info := range s.Extents() {
		e, err := s.get(info.ID)
		if err != nil {
			continue // deleted meanwhile
		}
		for b := int64(0); ; b++ {
			if err := ctx.Err(); err != nil {
				return bad, err
			}
			e.mu.RLock()
			if e.deleted || b >= numBlocks(e.size, s.bs) {
				e.mu.RUnlock()
				break
			}
			start, end := blockSpan(b, s.bs, e.size)
			_, err := s.readBlock(e, b, *buf)
			e.mu.RUnlock()
			if err != nil {
				bad = append(bad, BadBlock{Extent: e.id, Block: b, Offset: start, Length: end - start, Err: err})
				if len(bad) >= opt.MaxBad {
					return bad, nil
				}
			}
			read += end - start
			if opt.BytesPerSecond > 0 {
				due := time.Duration(float64(read) / float64(opt.BytesPerSecond) * float64(time.Second))
				if wait := due - time.Since(begin); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return bad, ctx.Err()
					}
				}
			}
		}
	}
	return bad, nil
}

// RepairBlock replaces block b of extent id with data fetched from a
// healthy replica (its bytes [b*BlockSize, +len) read with ReadAt). data
// must be exactly the block's length here, and, with punched ranges taken
// as zeros, must match the CRC this replica recorded for the block when it
// was committed, else ErrRepairMismatch and nothing is written: a repair can
// only restore the bytes this replica acknowledged, never import different
// ones. The block is written, holes inside it punched again, fsynced, read
// back and verified. Works in read-only mode (it allocates no new space).
func (s *Store) RepairBlock(id uint64, b int64, data []byte) error {
	if err := s.stateError(stateReadOnly); err != nil {
		return fmt.Errorf("extent %d: repair block %d: %w", id, b, err)
	}
	e, err := s.get(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.deleted {
		return fmt.Errorf("extent %d: repair: %w", id, ErrNotFound)
	}
	if b < 0 || b >= numBlocks(e.size, s.bs) {
		return fmt.Errorf("extent %d: repair block %d of %d: %w", id, b, numBlocks(e.size, s.bs), ErrOutOfRange)
	}
	start, end := blockSpan(b, s.bs, e.size)
	if int64(len(data)) != end-start {
		return fmt.Errorf("extent %d: repair block %d with %d bytes, want %d: %w", id, b, len(data), end-start, ErrInvalid)
	}
	buf := s.getBuf()
	defer s.putBuf(buf)
	block := (*buf)[:end-start]
	copy(block, data)
	maskPunched(block, start, e.punched)
	if got := crc32.Checksum(block, castagnoli); got != e.crcs[b] {
		return fmt.Errorf("extent %d: repair block %d: crc32c %08x, recorded %08x: %w", id, b, got, e.crcs[b], ErrRepairMismatch)
	}
	if _, err := e.h.f.WriteAt(block, start); err != nil {
		return fmt.Errorf("extent %d: repair block %d: write: %w", id, b, s.writeFailed(err))
	}
	for _, sp := range e.punched {
		if s0, e0 := max(sp.off, start), min(sp.end, end); s0 < e0 {
			if err := e.h.f.PunchHole(s0, e0-s0); err != nil {
				s.log.Warn("punch hole after repair", "extent", id, "off", s0, "err", err)
			}
		}
	}
	if err := e.h.f.Sync(); err != nil {
		err = classify(err)
		s.setState(stateFailed, err)
		return fmt.Errorf("extent %d: repair block %d: sync: %w", id, b, err)
	}
	if _, err := s.readBlock(e, b, *buf); err != nil {
		return fmt.Errorf("extent %d: repair block %d: read back: %w", id, b, err)
	}
	return nil
}
