package extentstore

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync/atomic"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// Section is a checked byte range of an extent file handed to the network
// layer for zero-copy transfer (sendfile/splice from File). It keeps the
// file open, even if the extent is deleted meanwhile, until Close.
//
// CRC is the CRC32C the range's bytes must have, made from the stored block
// CRCs: the receiver checks the bytes against it, end to end (disk, page
// cache and network), so the blocks the range covers whole are not read
// here at all. The blocks it covers in part were read and checked when the
// section was made. The replication layer must not overwrite a range while
// a section of it is being sent (it does not: the Raft overwrite path and
// reads are ordered by the partition); if it did, the receiver would find
// the CRC wrong and ask again.
type Section struct {
	h      *handle
	off, n int64
	crc    uint32
	closed atomic.Bool
}

// Section returns extent id's bytes [off, off+n) as a Section whose CRC is
// known: the stored CRCs of the blocks the range covers whole, combined
// with the CRCs of the parts of the edge blocks, which are read and
// verified here. With verifyAll every block is read and verified here
// (ErrCorrupt names the first bad one), for a reader that found a
// response's bytes wrong. The range must lie within the extent's size and
// not touch a punched hole (ErrPunched: use ReadAt, which returns zeros
// there). Cost: at most two blocks read (all of them with verifyAll); the
// bytes are sent by the caller without a user-space copy and checked by
// the receiver.
func (s *Store) Section(id uint64, off, n int64, verifyAll bool) (*Section, error) {
	if off < 0 || n <= 0 || n > s.opt.ExtentMaxBytes {
		return nil, fmt.Errorf("extent %d: section [%d,+%d): %w", id, off, n, ErrInvalid)
	}
	e, err := s.get(id)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	end := off + n
	switch {
	case e.deleted:
		return nil, fmt.Errorf("extent %d: section: %w", id, ErrNotFound)
	case off > e.size-n: // end > size, without overflow
		return nil, fmt.Errorf("extent %d: section [%d,%d) past size %d: %w", id, off, end, e.size, io.ErrUnexpectedEOF)
	case overlapsPunched(e.punched, off, end):
		return nil, fmt.Errorf("extent %d: section [%d,%d): %w", id, off, end, ErrPunched)
	}
	var crc uint32
	buf := s.getBuf()
	defer s.putBuf(buf)
	for b := off / s.bs; b <= (end-1)/s.bs; b++ {
		start, bend := blockSpan(b, s.bs, e.size)
		if start >= off && bend <= end && !verifyAll {
			crc = crcCombine(crc, e.crcs[b], bend-start)
			continue
		}
		data, err := s.readBlock(e, b, *buf)
		if err != nil {
			return nil, err
		}
		s0, e0 := max(start, off), min(bend, end)
		crc = crcCombine(crc, crc32.Checksum(data[s0-start:e0-start], castagnoli), e0-s0)
	}
	if !e.h.acquire() {
		return nil, ErrClosed
	}
	return &Section{h: e.h, off: off, n: n, crc: crc}, nil
}

// CRC returns the CRC32C the section's bytes have (see Section).
func (sec *Section) CRC() uint32 { return sec.crc }

// Len returns the section's length.
func (sec *Section) Len() int64 { return sec.n }

// ReadAt reads the section's bytes at off (relative to the section), like
// io.ReaderAt. It does not verify CRCs: the caller checks CRC().
func (sec *Section) ReadAt(p []byte, off int64) (int, error) {
	if sec.closed.Load() {
		return 0, os.ErrClosed
	}
	if off < 0 {
		return 0, ErrInvalid
	}
	if off >= sec.n {
		return 0, io.EOF
	}
	short := false
	if int64(len(p)) > sec.n-off {
		p, short = p[:sec.n-off], true
	}
	n, err := sec.h.f.ReadAt(p, sec.off+off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

// File returns the *os.File under the section and the range in it, for
// sendfile/splice; ok is false when the store is not on the OS file system
// (tests), and the caller then copies through ReadAt.
func (sec *Section) File() (f *os.File, off, n int64, ok bool) {
	f, ok = diskfs.OSFile(sec.h.f)
	return f, sec.off, sec.n, ok
}

// Close releases the section; further calls do nothing.
func (sec *Section) Close() error {
	if !sec.closed.CompareAndSwap(false, true) {
		return nil
	}
	return sec.h.release()
}
