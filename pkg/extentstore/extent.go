package extentstore

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// handle is an open extent file shared by the extent and the zero-copy
// sections handed out on it; the file is closed when the last holder lets
// go, so deleting an extent never pulls a file from under a transfer.
type handle struct {
	f    diskfs.File
	refs atomic.Int32
}

func newHandle(f diskfs.File) *handle {
	h := &handle{f: f}
	h.refs.Store(1)
	return h
}

// acquire takes a reference unless the file is already closed.
func (h *handle) acquire() bool {
	for {
		n := h.refs.Load()
		if n <= 0 {
			return false
		}
		if h.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (h *handle) release() error {
	if h.refs.Add(-1) == 0 {
		return h.f.Close()
	}
	return nil
}

// extent is the in-memory state of one extent. mu guards every field below
// it; appends, overwrites and punches take it exclusively, reads share it.
type extent struct {
	id   uint64
	kind Kind

	mu sync.RWMutex
	h  *handle
	// size is the number of bytes written (acknowledged or not).
	size int64
	// crcs[b] is the CRC32C of block b's bytes [b*B, min((b+1)*B, size)),
	// punched ranges read as zeros. len(crcs) == ceil(size/B).
	crcs []uint32
	// punched is sorted, disjoint and coalesced; punchedBytes is its total.
	punched      []span
	punchedBytes int64
	deleted      bool

	// Commit tracking. committed is the size recorded by the last durable
	// metadata record: what survives a crash. capSize is the size at the
	// last capture by a commit round (committed once that round is durable).
	committed int64
	capSize   int64
	// Changes since the last capture: a pending create record, blocks below
	// capSize/B whose CRC changed (punches, overwrites), ranges punched,
	// and whether the file has writes not yet fsynced.
	pendingCreate bool
	dirtyBlocks   map[int64]struct{}
	newPunches    []span
	needsSync     bool
	// appended is a copy of the bytes appended since the last capture while
	// they are the only writes the file has not fsynced and fit
	// Options.JournalAppendBytes (appendedOK); the capture then journals
	// them instead of fsyncing the file.
	appended   []byte
	appendedOK bool
	// journaled: bytes committed since the last snapshot of the log are
	// durable only in the log's records (the file was not fsynced after
	// them); the round that writes the next snapshot fsyncs the file first.
	journaled bool
}

// noteAppend records p, just appended to the file, for the next capture:
// kept for the journal while the appends since the last capture stay within
// limit bytes and are all the file has unsynced. The caller holds e.mu.
func (e *extent) noteAppend(p []byte, limit int) {
	if !e.needsSync {
		// Clean since the last capture, which left appended nil.
		e.appendedOK = true
	}
	e.needsSync = true
	if !e.appendedOK {
		return
	}
	if len(e.appended)+len(p) > limit {
		e.appended, e.appendedOK = nil, false
		return
	}
	e.appended = append(e.appended, p...)
}

// noteOtherWrite records a write to the file that is not an append (an
// overwrite in place, a punched hole): the next round must fsync the file.
// The caller holds e.mu.
func (e *extent) noteOtherWrite() {
	e.needsSync = true
	e.appended, e.appendedOK = nil, false
}

// blockSpan returns block b's byte range in an extent of size bytes.
func blockSpan(b int64, bs int64, size int64) (start, end int64) {
	start = b * bs
	return start, min(start+bs, size)
}

func numBlocks(size, bs int64) int64 { return (size + bs - 1) / bs }

// overlapsPunched reports whether [off, end) touches a punched range.
func overlapsPunched(punched []span, off, end int64) bool {
	i := sort.Search(len(punched), func(i int) bool { return punched[i].end > off })
	return i < len(punched) && punched[i].off < end
}

// unpunched returns the parts of [off, end) that no range of punched
// (sorted, disjoint) covers, in order.
func unpunched(punched []span, off, end int64) []Range {
	var out []Range
	i := sort.Search(len(punched), func(i int) bool { return punched[i].end > off })
	for ; off < end && i < len(punched) && punched[i].off < end; i++ {
		if punched[i].off > off {
			out = append(out, Range{Off: off, Len: punched[i].off - off})
		}
		off = max(off, punched[i].end)
	}
	if off < end {
		out = append(out, Range{Off: off, Len: end - off})
	}
	return out
}

// maskPunched zeroes, in buf holding the extent's bytes from bufOff, every
// byte of a punched range: a punched range reads as zeros whether or not the
// hole has reached the disk yet.
func maskPunched(buf []byte, bufOff int64, punched []span) {
	end := bufOff + int64(len(buf))
	i := sort.Search(len(punched), func(i int) bool { return punched[i].end > bufOff })
	for ; i < len(punched) && punched[i].off < end; i++ {
		s, e := max(punched[i].off, bufOff), min(punched[i].end, end)
		clear(buf[s-bufOff : e-bufOff])
	}
}

// addSpan inserts sp into the sorted, coalesced list and returns the new list
// and how many bytes it newly covers.
func addSpan(list []span, sp span) ([]span, int64) {
	// First range that ends at or after sp.off (touching ranges merge).
	i := sort.Search(len(list), func(i int) bool { return list[i].end >= sp.off })
	j := i
	merged := sp
	covered := int64(0)
	for ; j < len(list) && list[j].off <= sp.end; j++ {
		s, e := max(list[j].off, sp.off), min(list[j].end, sp.end)
		if e > s {
			covered += e - s
		}
		merged.off = min(merged.off, list[j].off)
		merged.end = max(merged.end, list[j].end)
	}
	added := sp.end - sp.off - covered
	out := make([]span, 0, len(list)-(j-i)+1)
	out = append(out, list[:i]...)
	out = append(out, merged)
	out = append(out, list[j:]...)
	return out, added
}

// zeroCRC returns the CRC32C of n zero bytes using zeros (len >= n).
func zeroCRC(zeros []byte, n int64) uint32 {
	return crc32.Checksum(zeros[:n], castagnoli)
}

// readBlock reads block b of e into buf (len(buf) >= block size), masks the
// punched ranges and checks the block's CRC. It returns the block's bytes (a
// prefix of buf). The caller holds e.mu. A short file is a CorruptionError
// with Missing; an I/O error is classified (ErrIO, ...).
func (s *Store) readBlock(e *extent, b int64, buf []byte) ([]byte, error) {
	start, end := blockSpan(b, s.bs, e.size)
	data := buf[:end-start]
	if err := s.readFull(e, data, start); err != nil {
		return nil, fmt.Errorf("extent %d: read block %d: %w", e.id, b, err)
	}
	if err := s.verify(e, b, data); err != nil {
		return nil, err
	}
	return data, nil
}

// readFull reads len(p) bytes at off; a short read is a CorruptionError.
func (s *Store) readFull(e *extent, p []byte, off int64) error {
	n, err := e.h.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		b := (off + int64(n)) / s.bs
		start, end := blockSpan(b, s.bs, e.size)
		return &CorruptionError{Extent: e.id, Block: b, Offset: start, Length: end - start, Want: e.crcs[b], Missing: true}
	}
	return classify(err)
}

// verify masks punched ranges in data, block b's bytes, and checks its CRC.
func (s *Store) verify(e *extent, b int64, data []byte) error {
	start := b * s.bs
	maskPunched(data, start, e.punched)
	if got := crc32.Checksum(data, castagnoli); got != e.crcs[b] {
		return &CorruptionError{Extent: e.id, Block: b, Offset: start, Length: int64(len(data)), Want: e.crcs[b], Got: got}
	}
	return nil
}
