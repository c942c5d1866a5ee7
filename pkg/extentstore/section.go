package extentstore

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// Section is a verified byte range of an extent file handed to the network
// layer for zero-copy transfer (sendfile/splice from File). It keeps the
// file open, even if the extent is deleted meanwhile, until Close.
//
// The bytes were checked against their CRCs when the section was made. The
// replication layer must not overwrite a range while a section of it is
// being sent (it does not: the Raft overwrite path and reads are ordered by
// the partition), or the transfer may carry the new bytes.
type Section struct {
	h      *handle
	off, n int64
	closed atomic.Bool
}

// Section returns extent id's bytes [off, off+n) as a Section, after reading
// and verifying every block they touch (which also warms the page cache the
// transfer then reads from). The range must lie within the extent's size and
// not touch a punched hole (ErrPunched: use ReadAt, which returns zeros
// there). Cost: the blocks touched are read once here, and sent without a
// user-space copy by the caller.
func (s *Store) Section(id uint64, off, n int64) (*Section, error) {
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
	buf := s.getBuf()
	defer s.putBuf(buf)
	for b := off / s.bs; b <= (end-1)/s.bs; b++ {
		if _, err := s.readBlock(e, b, *buf); err != nil {
			return nil, err
		}
	}
	if !e.h.acquire() {
		return nil, ErrClosed
	}
	return &Section{h: e.h, off: off, n: n}, nil
}

// Len returns the section's length.
func (sec *Section) Len() int64 { return sec.n }

// ReadAt reads the section's bytes at off (relative to the section), like
// io.ReaderAt. It does not verify CRCs again.
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
