package extentstore

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// File names in the partition directory.
const (
	metaName    = "META"
	metaTmpName = "META.tmp"
	lockName    = "LOCK"
	extPrefix   = "ext-"
)

// idReserveBatch is how many extent ids one durable reservation covers: one
// metadata fsync per this many NewExtent calls.
const idReserveBatch = 1024

// Store is the extent store of one data partition replica. All methods are
// safe for concurrent use. See the package documentation for the commit
// rule: nothing a method does survives a crash until a later Sync returns
// (Overwrite excepted, which is durable when it returns).
type Store struct {
	dir   string
	fs    diskfs.FS
	opt   Options
	log   *slog.Logger
	bs    int64  // block size
	zeros []byte // one block of zeros
	bufs  sync.Pool
	lock  io.Closer

	mu         sync.RWMutex
	extents    map[uint64]*extent
	tombstones map[uint64]*extent // deleted, deletion not yet committed

	dirtyMu sync.Mutex
	dirty   map[*extent]struct{} // changed since their last capture

	idMu     sync.Mutex
	nextID   uint64
	reserved uint64 // every id below this may have been handed out

	// commitMu serializes commit rounds, overwrites and id reservations,
	// the only writers of the metadata log, and guards the fields below.
	commitMu  sync.Mutex
	meta      diskfs.File
	metaSize  int64
	snapBytes int64 // length of the snapshot at the start of META
	// logBytes and logSnapBytes mirror metaSize and snapBytes for
	// readers that must not wait for a commit round (Journal).
	logBytes, logSnapBytes atomic.Int64
	// compactNext makes the next commit round rewrite the log (Compact).
	compactNext atomic.Bool

	// Group commit: callers of Sync wait for a round that started after
	// they called.
	gcMu      sync.Mutex
	gcCond    *sync.Cond
	gcStarted uint64
	gcDone    uint64
	gcRunning bool

	state    atomic.Int32
	stateMu  sync.Mutex
	stateErr [stateClosed + 1]error

	small smallPool
}

// Store states, in the order they can be entered; a store never goes back.
const (
	stateOK       int32 = iota
	stateReadOnly       // a data write hit ENOSPC
	stateFailed         // a sync or metadata write failed
	stateClosed
)

func (s *Store) setState(st int32, cause error) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.stateErr[st] == nil {
		s.stateErr[st] = cause
	}
	for {
		cur := s.state.Load()
		if cur >= st || s.state.CompareAndSwap(cur, st) {
			break
		}
	}
	if st == stateReadOnly || st == stateFailed {
		s.log.Error("extent store degraded", "state", stateName(st), "err", cause)
	}
}

func stateName(st int32) string {
	return [...]string{"ok", "read-only", "failed", "closed"}[st]
}

// stateError returns why the store refuses operations needing state at most
// allowed, or nil.
func (s *Store) stateError(allowed int32) error {
	st := s.state.Load()
	if st <= allowed {
		return nil
	}
	s.stateMu.Lock()
	cause := s.stateErr[st]
	s.stateMu.Unlock()
	switch st {
	case stateReadOnly:
		return fmt.Errorf("%w: %w", ErrReadOnly, cause)
	case stateFailed:
		return fmt.Errorf("%w: %w", ErrFailed, cause)
	default:
		return ErrClosed
	}
}

// Err reports the store's health: nil while it accepts writes, else an
// error wrapping ErrReadOnly (and the ErrNoSpace that caused it), ErrFailed
// (and its cause) or ErrClosed. The data node reports a replica with a
// non-nil Err as read-only or bad.
func (s *Store) Err() error { return s.stateError(stateOK) }

// writeFailed classifies err from a data write and degrades the store:
// ENOSPC makes it read-only, anything else failed (the disk is not doing
// what it is told).
func (s *Store) writeFailed(err error) error {
	err = classify(err)
	if errors.Is(err, ErrNoSpace) {
		s.setState(stateReadOnly, err)
	} else {
		s.setState(stateFailed, err)
	}
	return err
}

func (s *Store) extPath(id uint64) string {
	return filepath.Join(s.dir, extPrefix+strconv.FormatUint(id, 10))
}

// parseExtName returns the id of an extent file name.
func parseExtName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, extPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || id == 0 || strconv.FormatUint(id, 10) != rest {
		return 0, false
	}
	return id, true
}

func (s *Store) getBuf() *[]byte  { return s.bufs.Get().(*[]byte) }
func (s *Store) putBuf(b *[]byte) { s.bufs.Put(b) }

// get returns the live extent id.
func (s *Store) get(id uint64) (*extent, error) {
	s.mu.RLock()
	e := s.extents[id]
	s.mu.RUnlock()
	if e == nil {
		if s.state.Load() == stateClosed {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("extent %d: %w", id, ErrNotFound)
	}
	return e, nil
}

func (s *Store) markDirty(e *extent) {
	s.dirtyMu.Lock()
	s.dirty[e] = struct{}{}
	s.dirtyMu.Unlock()
}

// BlockSize returns the checksum block size in bytes.
func (s *Store) BlockSize() int { return int(s.bs) }

// Dir returns the partition directory.
func (s *Store) Dir() string { return s.dir }

// NewExtent creates an extent of the given kind under a fresh id, never
// used before in this partition (ids are reserved durably in batches, so
// even a crash does not make one reappear). The primary calls it; replicas
// then call CreateExtent with the same id. The creation is durable after
// the next Sync.
func (s *Store) NewExtent(kind Kind) (uint64, error) {
	if err := s.stateError(stateOK); err != nil {
		return 0, fmt.Errorf("new extent: %w", err)
	}
	id, err := s.allocID()
	if err != nil {
		return 0, err
	}
	if err := s.CreateExtent(id, kind); err != nil {
		return 0, err
	}
	return id, nil
}

// RaiseIDs makes every id NewExtent hands out from now on at least floor
// (ids below it are skipped, never reused). The data node raises the floor
// of a partition with the epoch of the replica set under which it is
// primary, so that two primaries of different epochs never pick the same id
// for different extents: a creation that reached no replica before its
// primary was replaced leaves an extent on that replica only, under an id
// the next primary's own counter has not passed.
func (s *Store) RaiseIDs(floor uint64) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	s.nextID = max(s.nextID, floor)
}

func (s *Store) allocID() (uint64, error) {
	s.idMu.Lock()
	if s.nextID < s.reserved {
		id := s.nextID
		s.nextID++
		s.idMu.Unlock()
		return id, nil
	}
	s.idMu.Unlock()

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.idMu.Lock()
	defer s.idMu.Unlock()
	if s.nextID >= s.reserved {
		if err := s.stateError(stateOK); err != nil {
			return 0, fmt.Errorf("new extent: %w", err)
		}
		reserved := s.nextID + idReserveBatch
		if err := s.appendMeta(appendFrame(nil, encodeReserve(reserved))); err != nil {
			return 0, fmt.Errorf("new extent: reserve ids: %w", err)
		}
		s.reserved = reserved
	}
	id := s.nextID
	s.nextID++
	return id, nil
}

// CreateExtent creates extent id of the given kind, empty, as a replica
// does on the primary's instruction. It fails with ErrExists if the id is
// live or its deletion is not yet committed. Durable after the next Sync.
func (s *Store) CreateExtent(id uint64, kind Kind) error {
	if err := s.stateError(stateOK); err != nil {
		return fmt.Errorf("extent %d: create: %w", id, err)
	}
	if id == 0 || (kind != KindLarge && kind != KindSmall) {
		return fmt.Errorf("extent %d: create %v: %w", id, kind, ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.extents[id] != nil || s.tombstones[id] != nil {
		return fmt.Errorf("extent %d: create: %w", id, ErrExists)
	}
	if len(s.extents)+len(s.tombstones) >= s.opt.MaxExtents {
		return fmt.Errorf("extent %d: create: %w (%d)", id, ErrTooManyExtents, s.opt.MaxExtents)
	}
	f, err := s.fs.Create(s.extPath(id))
	if err != nil {
		return fmt.Errorf("extent %d: create file: %w", id, s.writeFailed(err))
	}
	e := &extent{id: id, kind: kind, h: newHandle(f), pendingCreate: true}
	s.extents[id] = e
	s.markDirty(e) // under s.mu: see captureAll
	s.idMu.Lock()
	s.nextID = max(s.nextID, id+1)
	s.idMu.Unlock()
	return nil
}

// Append writes p at off, which must be the extent's current size (else an
// *OffsetError with the size), and returns the new size. The bytes are
// readable at once but not durable: the caller acknowledges them to its
// client only after a Sync that started after Append returned has returned
// nil. A small extent takes at most Options.SmallFileMax bytes per append.
// Cost: one write into the page cache plus CRC32C of p.
//
// If the write fails the size is unchanged, whatever part of p reached the
// file is ignored (and removed by recovery), and the store turns read-only
// (ENOSPC) or failed (other errors).
func (s *Store) Append(id uint64, off int64, p []byte) (int64, error) {
	if err := s.stateError(stateOK); err != nil {
		return 0, fmt.Errorf("extent %d: append: %w", id, err)
	}
	if len(p) == 0 {
		return 0, fmt.Errorf("extent %d: append of 0 bytes: %w", id, ErrInvalid)
	}
	if len(p) > s.opt.MaxWriteBytes {
		return 0, fmt.Errorf("extent %d: append of %d bytes: %w (max %d)", id, len(p), ErrTooLarge, s.opt.MaxWriteBytes)
	}
	e, err := s.get(id)
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.deleted:
		return 0, fmt.Errorf("extent %d: append: %w", id, ErrNotFound)
	case e.kind == KindSmall && len(p) > s.opt.SmallFileMax:
		return e.size, fmt.Errorf("extent %d: small-file append of %d bytes: %w (max %d)", id, len(p), ErrTooLarge, s.opt.SmallFileMax)
	case off != e.size:
		return e.size, &OffsetError{Extent: id, Off: off, Size: e.size}
	case e.size+int64(len(p)) > s.opt.ExtentMaxBytes:
		return e.size, fmt.Errorf("extent %d: append of %d bytes at %d: %w (max %d)", id, len(p), off, ErrExtentFull, s.opt.ExtentMaxBytes)
	}
	if _, err := e.h.f.WriteAt(p, off); err != nil {
		return e.size, fmt.Errorf("extent %d: append %d bytes at %d: %w", id, len(p), off, s.writeFailed(err))
	}
	s.extendCRCs(e, p)
	e.size += int64(len(p))
	e.noteAppend(p, s.opt.JournalAppendBytes)
	s.markDirty(e)
	return e.size, nil
}

// extendCRCs folds p, about to be appended at e.size, into the block CRCs.
// CRC32C extends over concatenation, so the tail block's CRC is updated, not
// recomputed.
func (s *Store) extendCRCs(e *extent, p []byte) {
	pos := e.size
	for len(p) > 0 {
		in := pos % s.bs
		k := min(s.bs-in, int64(len(p)))
		if in == 0 {
			e.crcs = append(e.crcs, crc32.Checksum(p[:k], castagnoli))
		} else {
			b := pos / s.bs
			e.crcs[b] = crc32.Update(e.crcs[b], castagnoli, p[:k])
		}
		pos += k
		p = p[k:]
	}
}

// ReadAt reads len(p) bytes of extent id at off, like io.ReaderAt: fewer
// bytes and io.EOF past the extent's size. Every block the range touches is
// read whole and checked against its CRC; a mismatch returns a
// *CorruptionError (ErrCorrupt) after the bytes before the bad block, and
// the rest of p is zeroed, never filled with bad bytes. Punched ranges read
// as zeros. An EIO from the disk returns an error wrapping ErrIO.
//
// ReadAt serves every written byte, durable or not: the caller must not
// serve a client bytes beyond what it knows to be committed by all replicas
// (CFS §2.2.5). Cost: the blocks touched are read; the whole-block part of
// the range is read straight into p.
func (s *Store) ReadAt(id uint64, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("extent %d: read at %d: %w", id, off, ErrInvalid)
	}
	e, err := s.get(id)
	if err != nil {
		return 0, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.deleted {
		return 0, fmt.Errorf("extent %d: read: %w", id, ErrNotFound)
	}
	if off >= e.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), e.size)
	pos := off
	for pos < end {
		b := pos / s.bs
		start, bend := blockSpan(b, s.bs, e.size)
		if pos == start && bend <= end {
			// A run of whole blocks: read it into p in one call, then
			// check each block in place.
			runEnd := bend
			for runEnd < end && min(runEnd+s.bs, e.size) <= end {
				runEnd = min(runEnd+s.bs, e.size)
			}
			dst := p[pos-off : runEnd-off]
			if err := s.readFull(e, dst, pos); err != nil {
				clear(p[pos-off:])
				return int(pos - off), fmt.Errorf("extent %d: read [%d,%d): %w", id, pos, runEnd, err)
			}
			for q := pos; q < runEnd; q += s.bs {
				qb := q / s.bs
				_, qend := blockSpan(qb, s.bs, e.size)
				if err := s.verify(e, qb, dst[q-pos:qend-pos]); err != nil {
					clear(p[q-off:])
					return int(q - off), err
				}
			}
			pos = runEnd
			continue
		}
		buf := s.getBuf()
		data, err := s.readBlock(e, b, *buf)
		if err != nil {
			s.putBuf(buf)
			clear(p[pos-off:])
			return int(pos - off), err
		}
		k := copy(p[pos-off:end-off], data[pos-start:])
		s.putBuf(buf)
		pos += int64(k)
	}
	if n := int(end - off); n < len(p) {
		return n, io.EOF
	}
	return len(p), nil
}

// PunchSmall frees the small file at [off, off+n) of small extent id: the
// range reads as zeros at once, and after the next Sync the hole is
// committed and punched (fallocate PUNCH_HOLE|KEEP_SIZE), so du drops. The
// range must lie within the committed bytes; punching a punched range again
// is a no-op, so the deletion collector may retry. Works in read-only mode
// (it frees space). Cost: the partial blocks at the edges are read and
// checked (their CRCs change); a corrupt edge block fails the punch with a
// *CorruptionError until it is repaired.
func (s *Store) PunchSmall(id uint64, off, n int64) error {
	if err := s.stateError(stateReadOnly); err != nil {
		return fmt.Errorf("extent %d: punch: %w", id, err)
	}
	if off < 0 || n <= 0 {
		return fmt.Errorf("extent %d: punch [%d,+%d): %w", id, off, n, ErrInvalid)
	}
	e, err := s.get(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	end := off + n
	switch {
	case e.deleted:
		return fmt.Errorf("extent %d: punch: %w", id, ErrNotFound)
	case e.kind != KindSmall:
		return fmt.Errorf("extent %d: punch of a %v extent: %w", id, e.kind, ErrWrongKind)
	case n > e.committed || off > e.committed-n: // end > committed, without overflow
		return fmt.Errorf("extent %d: punch [%d,%d) beyond committed size %d: %w", id, off, end, e.committed, ErrOutOfRange)
	}
	newList, added := addSpan(e.punched, span{off, end})
	if added == 0 {
		return nil
	}
	if len(newList) > maxHolesPerExtent {
		return fmt.Errorf("extent %d: punch [%d,%d): %w (%d)", id, off, end, ErrTooManyHoles, maxHolesPerExtent)
	}
	first, last := off/s.bs, (end-1)/s.bs
	newCRCs := make([]uint32, 0, last-first+1)
	buf := s.getBuf()
	defer s.putBuf(buf)
	for b := first; b <= last; b++ {
		start, bend := blockSpan(b, s.bs, e.size)
		if start >= off && bend <= end {
			newCRCs = append(newCRCs, zeroCRC(s.zeros, bend-start))
			continue
		}
		data, err := s.readBlock(e, b, *buf) // masks the old holes and verifies
		if err != nil {
			return fmt.Errorf("extent %d: punch [%d,%d): %w", id, off, end, err)
		}
		maskPunched(data, start, []span{{off, end}})
		newCRCs = append(newCRCs, crc32.Checksum(data, castagnoli))
	}
	copy(e.crcs[first:], newCRCs)
	if e.dirtyBlocks == nil {
		e.dirtyBlocks = map[int64]struct{}{}
	}
	for b := first; b <= last; b++ {
		e.dirtyBlocks[b] = struct{}{}
	}
	e.punched = newList
	e.punchedBytes += added
	e.newPunches = append(e.newPunches, span{off, end})
	s.markDirty(e)
	return nil
}

// DeleteExtent deletes extent id (of either kind; a large extent's file is
// deleted whole, CFS §2.7.3). The extent is gone at once for every other
// call; the deletion is committed, and the file removed, by the next Sync.
// Works in read-only mode. Zero-copy sections already handed out stay
// readable until closed.
func (s *Store) DeleteExtent(id uint64) error {
	if err := s.stateError(stateReadOnly); err != nil {
		return fmt.Errorf("extent %d: delete: %w", id, err)
	}
	s.mu.Lock()
	e := s.extents[id]
	if e == nil {
		s.mu.Unlock()
		return fmt.Errorf("extent %d: delete: %w", id, ErrNotFound)
	}
	delete(s.extents, id)
	s.tombstones[id] = e
	e.mu.Lock()
	e.deleted = true
	e.mu.Unlock()
	s.markDirty(e)
	s.mu.Unlock()
	s.small.forget(id)
	return nil
}

// ExtentInfo describes an extent.
type ExtentInfo struct {
	ID   uint64
	Kind Kind // fixed at creation
	// Size is the number of bytes written; Committed the number that
	// survive a crash (the last committed size).
	Size      int64
	Committed int64
	// PunchedBytes is how much of Size is punched holes.
	PunchedBytes int64
}

// Stat describes extent id.
func (s *Store) Stat(id uint64) (ExtentInfo, error) {
	e, err := s.get(id)
	if err != nil {
		return ExtentInfo{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.deleted {
		return ExtentInfo{}, fmt.Errorf("extent %d: %w", id, ErrNotFound)
	}
	return e.info(), nil
}

func (e *extent) info() ExtentInfo {
	return ExtentInfo{ID: e.id, Kind: e.kind, Size: e.size, Committed: e.committed, PunchedBytes: e.punchedBytes}
}

// Extents lists the live extents by id: what replica alignment compares.
// Cost: O(extents).
func (s *Store) Extents() []ExtentInfo {
	s.mu.RLock()
	list := make([]*extent, 0, len(s.extents))
	for _, e := range s.extents {
		list = append(list, e)
	}
	s.mu.RUnlock()
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	out := make([]ExtentInfo, 0, len(list))
	for _, e := range list {
		e.mu.RLock()
		if !e.deleted {
			out = append(out, e.info())
		}
		e.mu.RUnlock()
	}
	return out
}

// Checksums returns extent id's size and the CRC32C of each of its blocks
// (see BlockSize; the last block may be partial, punched bytes count as
// zeros), so replicas can compare extents block by block without moving
// data. Cost: 4 bytes per block copied.
func (s *Store) Checksums(id uint64) (size int64, crcs []uint32, err error) {
	e, err := s.get(id)
	if err != nil {
		return 0, nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.deleted {
		return 0, nil, fmt.Errorf("extent %d: %w", id, ErrNotFound)
	}
	return e.size, append([]uint32(nil), e.crcs...), nil
}

// Range is the byte range [Off, Off+Len) of an extent.
type Range struct{ Off, Len int64 }

// Unpunched returns the parts of bytes [off, off+n) of extent id that no
// punched hole covers, in order: the bytes of that range that live files
// still own. A repair that copies a peer's bytes over a range writes these
// parts only (Overwrite refuses a range touching a hole, ErrPunched), so
// that a deleted small file beside a live one does not keep the live one
// from being repaired.
func (s *Store) Unpunched(id uint64, off, n int64) ([]Range, error) {
	e, err := s.get(id)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.deleted {
		return nil, fmt.Errorf("extent %d: %w", id, ErrNotFound)
	}
	return unpunched(e.punched, off, off+n), nil
}

// Usage is the space a partition uses.
type Usage struct {
	Extents int
	// LogicalBytes is live data: the extents' sizes minus punched holes.
	LogicalBytes int64
	// PunchedBytes is the total size of the punched holes.
	PunchedBytes int64
	// PhysicalBytes is what the extent files (including those whose
	// deletion is not yet committed) and the metadata log occupy on disk,
	// as du counts it (allocated blocks).
	PhysicalBytes int64
}

// LogicalBytes returns the live data the store holds (Usage.LogicalBytes)
// from memory alone, without Usage's fstat per extent: cheap enough for
// every heartbeat.
func (s *Store) LogicalBytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	for _, e := range s.extents {
		e.mu.RLock()
		if !e.deleted {
			n += e.size - e.punchedBytes
		}
		e.mu.RUnlock()
	}
	return n
}

// Usage reports the partition's space use. Cost: one fstat per extent.
func (s *Store) Usage() (Usage, error) {
	s.mu.RLock()
	list := make([]*extent, 0, len(s.extents)+len(s.tombstones))
	for _, e := range s.extents {
		list = append(list, e)
	}
	for _, e := range s.tombstones {
		list = append(list, e)
	}
	s.mu.RUnlock()
	var u Usage
	for _, e := range list {
		e.mu.RLock()
		h, live := e.h, !e.deleted
		if live {
			u.Extents++
			u.LogicalBytes += e.size - e.punchedBytes
			u.PunchedBytes += e.punchedBytes
		}
		ok := h.acquire()
		e.mu.RUnlock()
		if !ok {
			continue // deleted and removed meanwhile
		}
		fi, err := h.f.Stat()
		h.release()
		if err != nil {
			return u, fmt.Errorf("extent %d: stat: %w", e.id, classify(err))
		}
		u.PhysicalBytes += fi.AllocatedBytes
	}
	if fi, err := s.fs.Stat(filepath.Join(s.dir, metaName)); err == nil {
		u.PhysicalBytes += fi.AllocatedBytes
	}
	return u, nil
}

// Close commits what is pending (a final Sync, unless the store failed) and
// releases the files and the directory lock. Calls after Close return
// ErrClosed; Close must not race with other calls.
func (s *Store) Close() error {
	if s.state.Load() == stateClosed {
		return ErrClosed
	}
	var err error
	if s.state.Load() < stateFailed {
		err = s.Sync()
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.setState(stateClosed, ErrClosed)
	s.mu.Lock()
	for id, e := range s.extents {
		e.h.release()
		delete(s.extents, id)
	}
	for id, e := range s.tombstones {
		e.h.release()
		delete(s.tombstones, id)
	}
	s.mu.Unlock()
	if s.meta != nil {
		err = errors.Join(err, s.meta.Close())
		s.meta = nil
	}
	return errors.Join(err, s.lock.Close())
}
