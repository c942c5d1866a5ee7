package extentstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
)

// capture is what a commit round took from one extent, atomically under its
// lock: the delta record to log, whether the file must be fsynced first,
// and the work to do once the record is durable.
type capture struct {
	e       *extent
	rec     *extentRecord // delta to log; nil if none
	size    int64         // the size rec commits
	sync    bool          // fsync the file before logging rec
	created bool          // rec creates the extent: sync the directory first
	deleted bool          // rec deletes it: remove the file afterwards
	punches []span        // holes to punch once rec is durable
	full    []byte        // the extent's whole state as a record body, for a snapshot
}

// capture takes e's changes since its last capture and, if full, its whole
// state. The caller holds e.mu exclusively and commitMu.
func (s *Store) capture(e *extent, full bool) *capture {
	c := &capture{e: e, size: e.size}
	r := &extentRecord{id: e.id}
	if e.pendingCreate {
		r.create, r.kind = true, e.kind
		c.created = true
		e.pendingCreate = false
	}
	if e.deleted {
		r.delete = true
		c.deleted = true
		c.rec = r
		return c
	}
	if c.created || e.size != e.capSize || len(e.dirtyBlocks) > 0 {
		r.hasState = true
		r.size = e.size
		r.runs = s.deltaRuns(e)
	}
	if len(e.newPunches) > 0 {
		r.punches = e.newPunches
		c.punches = e.newPunches
		e.newPunches = nil
	}
	switch {
	case e.needsSync && e.appendedOK && !full && len(e.appended) > 0 && int64(len(e.appended)) == e.size-e.capSize:
		// The appends go into the log with the record (the same frame:
		// size, CRCs and bytes commit together); the file is fsynced when
		// the log is next rewritten.
		r.overwrites = append(r.overwrites, &overwriteOp{off: e.capSize, data: e.appended})
		e.appended = nil
		e.journaled = true
	case full:
		// A snapshot replaces the records that hold journaled bytes.
		c.sync = e.needsSync || e.journaled
		e.journaled = false
	default:
		// An fsync also covers what earlier rounds journaled.
		c.sync = e.needsSync
		e.journaled = e.journaled && !c.sync
	}
	// The copy is not kept for the next appends: an extent appended to
	// once would hold it for ever.
	e.needsSync, e.appendedOK, e.appended = false, false, nil
	e.capSize = e.size
	e.dirtyBlocks = nil
	if r.create || r.hasState || len(r.punches) > 0 {
		c.rec = r
	}
	if full {
		c.full = encodeExtentRecord(nil, &extentRecord{
			id: e.id, create: true, kind: e.kind,
			hasState: true, size: e.size, runs: []crcRun{{first: 0, crcs: e.crcs}},
			punches: e.punched,
		})
	}
	return c
}

// deltaRuns returns copies of the CRCs that changed since the last capture:
// the blocks from the old tail block on if the extent grew, and the blocks
// punched or overwritten below it.
func (s *Store) deltaRuns(e *extent) []crcRun {
	nb := numBlocks(e.size, s.bs)
	from := nb
	if e.size != e.capSize {
		from = e.capSize / s.bs
	}
	var idx []int64
	for b := range e.dirtyBlocks {
		if b < from && b < nb {
			idx = append(idx, b)
		}
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
	var runs []crcRun
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && idx[j] == idx[j-1]+1 {
			j++
		}
		runs = append(runs, crcRun{first: idx[i], crcs: append([]uint32(nil), e.crcs[idx[i]:idx[j-1]+1]...)})
		i = j
	}
	if from < nb {
		runs = append(runs, crcRun{first: from, crcs: append([]uint32(nil), e.crcs[from:nb]...)})
	}
	return runs
}

// Sync makes durable everything done before it was called: appends
// (their sizes become committed), creations, deletions, punches. It is a
// group commit: concurrent callers share one round, which fsyncs every
// changed extent file (and the directory if extents were created), then
// appends one CRC'd record per changed extent to the metadata log and
// fsyncs it; an extent's small appends (Options.JournalAppendBytes) go into
// its record instead of an fsync of its file. Only then are holes punched
// and deleted files removed. Cost per round: one fsync per changed extent
// whose appends were not journaled (Options.SyncParallelism at a time), one
// for the log, occasionally a log rewrite (compaction), which first fsyncs
// the files whose bytes were journaled.
//
// A nil return means: every Append that returned before Sync was called is
// durable, and its bytes may be acknowledged. An error means nothing about
// them; the store is then failed (ErrFailed) and must be reopened. Sync
// works in read-only mode.
func (s *Store) Sync() error {
	if err := s.stateError(stateReadOnly); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	s.gcMu.Lock()
	target := s.gcStarted + 1 // the first round to start after this call
	for s.gcDone < target {
		if s.gcRunning {
			s.gcCond.Wait()
			continue
		}
		s.gcRunning = true
		s.gcStarted++
		s.gcMu.Unlock()
		s.round()
		s.gcMu.Lock()
		s.gcRunning = false
		s.gcDone = s.gcStarted
		s.gcCond.Broadcast()
	}
	s.gcMu.Unlock()
	if err := s.stateError(stateReadOnly); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// Compact commits what is pending, as Sync does, in a round that also
// rewrites the metadata log as a snapshot: the log then holds no record
// of deleted extents, of holes already punched, or of journaled bytes,
// whose files the round fsyncs first. It is a compaction like the one a
// round makes when the log has grown by Options.CompactBytes, and as safe
// to interrupt: the old log stays whole until the new one is durable and
// renamed over it. A failed rewrite keeps the old log and is logged; the
// error is Sync's.
func (s *Store) Compact() error {
	s.compactNext.Store(true)
	return s.Sync()
}

// JournalStats are the sizes of a store's metadata log.
type JournalStats struct {
	// Bytes is the log's length: its snapshot and the records after it.
	Bytes int64
	// SnapshotBytes is the length of the snapshot it starts with. What
	// follows it (Bytes-SnapshotBytes) is what a compaction gives back,
	// less the records of what is still live.
	SnapshotBytes int64
}

// Journal returns the metadata log's sizes without waiting for a commit
// round.
func (s *Store) Journal() JournalStats {
	return JournalStats{Bytes: s.logBytes.Load(), SnapshotBytes: s.logSnapBytes.Load()}
}

// round is one group commit. Errors put the store in the failed state,
// which Sync reports.
func (s *Store) round() {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.stateError(stateReadOnly) != nil {
		return
	}
	full := s.compactNext.Swap(false) || s.metaSize-s.snapBytes > max(s.opt.CompactBytes, s.snapBytes)
	caps, reserved := s.captureAll(full)
	if err := s.persist(caps); err != nil {
		return
	}
	s.postCommit(caps)
	if full {
		s.compact(caps, reserved)
	}
}

// captureAll captures every dirty extent and, if full, every live one. The
// extent map is read under s.mu together with the dirty set, so an extent
// created meanwhile is either in both or in neither (its creation then goes
// to the next round).
func (s *Store) captureAll(full bool) ([]*capture, uint64) {
	s.mu.RLock()
	s.dirtyMu.Lock()
	set := s.dirty
	s.dirty = make(map[*extent]struct{}, len(set))
	s.dirtyMu.Unlock()
	if full {
		for _, e := range s.extents {
			set[e] = struct{}{}
		}
	}
	s.mu.RUnlock()
	list := make([]*extent, 0, len(set))
	for e := range set {
		list = append(list, e)
	}
	// By id, so that the log's contents do not depend on map order.
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	s.idMu.Lock()
	reserved := max(s.reserved, s.nextID)
	s.idMu.Unlock()
	caps := make([]*capture, 0, len(list))
	for _, e := range list {
		e.mu.Lock()
		c := s.capture(e, full)
		e.mu.Unlock()
		if c.rec != nil || c.sync || c.full != nil {
			caps = append(caps, c)
		}
	}
	return caps, reserved
}

// persist makes the captures durable: directory sync for creations, fsync
// of the extent files, then the records appended to the log and the log
// fsynced: the commit point. The caller holds commitMu (so no handle is
// released meanwhile). Any error fails the store.
func (s *Store) persist(caps []*capture) error {
	created := false
	var toSync []*capture
	for _, c := range caps {
		created = created || c.created
		if c.sync && !c.deleted {
			toSync = append(toSync, c)
		}
	}
	if created {
		if err := s.fs.SyncDir(s.dir); err != nil {
			err = fmt.Errorf("sync dir %s: %w", s.dir, classify(err))
			s.setState(stateFailed, err)
			return err
		}
	}
	if err := s.syncFiles(toSync); err != nil {
		s.setState(stateFailed, err)
		return err
	}
	var buf []byte
	for _, c := range caps {
		if c.rec != nil {
			buf = appendFrame(buf, encodeExtentRecord(nil, c.rec))
		}
	}
	if len(buf) == 0 {
		return nil
	}
	return s.appendMeta(buf)
}

// syncFiles fsyncs the captured extents' files, at most
// Options.SyncParallelism at a time, and returns the first error.
func (s *Store) syncFiles(caps []*capture) error {
	if len(caps) <= 1 || s.opt.SyncParallelism == 1 {
		for _, c := range caps {
			if err := c.e.h.f.Sync(); err != nil {
				return fmt.Errorf("extent %d: sync: %w", c.e.id, classify(err))
			}
		}
		return nil
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, s.opt.SyncParallelism)
	)
	for _, c := range caps {
		sem <- struct{}{}
		wg.Add(1)
		go func(c *capture) {
			defer func() { <-sem; wg.Done() }()
			if err := c.e.h.f.Sync(); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("extent %d: sync: %w", c.e.id, classify(err))
				}
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	return first
}

// appendMeta appends framed records to the metadata log and fsyncs it. The
// caller holds commitMu. On error the log is cut back to its last good
// length (best effort: recovery ignores a torn tail anyway) and the store
// fails.
func (s *Store) appendMeta(buf []byte) error {
	if _, err := s.meta.WriteAt(buf, s.metaSize); err != nil {
		_ = s.meta.Truncate(s.metaSize)
		err = fmt.Errorf("metadata log: write %d bytes at %d: %w", len(buf), s.metaSize, classify(err))
		s.setState(stateFailed, err)
		return err
	}
	if err := s.meta.Sync(); err != nil {
		err = fmt.Errorf("metadata log: sync: %w", classify(err))
		s.setState(stateFailed, err)
		return err
	}
	s.metaSize += int64(len(buf))
	s.logBytes.Store(s.metaSize)
	return nil
}

// postCommit does what waits for a durable commit: extents' committed sizes
// advance, holes are punched, deleted files removed.
func (s *Store) postCommit(caps []*capture) {
	for _, c := range caps {
		e := c.e
		if c.deleted {
			e.h.release()
			if err := s.fs.Remove(s.extPath(e.id)); err != nil {
				// Recovery removes files of deleted extents.
				s.log.Warn("remove deleted extent file", "extent", e.id, "err", err)
			}
			// Only now may the id be created again: its file is gone.
			s.mu.Lock()
			if s.tombstones[e.id] == e {
				delete(s.tombstones, e.id)
			}
			s.mu.Unlock()
			continue
		}
		e.mu.Lock()
		s.postCommitLocked(c)
		e.mu.Unlock()
	}
}

// postCommitLocked is postCommit for a live extent whose lock the caller
// holds.
func (s *Store) postCommitLocked(c *capture) {
	e := c.e
	e.committed = max(e.committed, c.size)
	punched := false
	for _, sp := range c.punches {
		if err := e.h.f.PunchHole(sp.off, sp.end-sp.off); err != nil {
			// Reads mask punched ranges, so a failed punch costs only
			// space; recovery punches the log's recent holes again.
			s.log.Warn("punch hole", "extent", e.id, "off", sp.off, "len", sp.end-sp.off, "err", err)
			continue
		}
		punched = true
	}
	if punched {
		e.noteOtherWrite()
		s.markDirty(e)
	}
}

// compact rewrites the log as a snapshot of the state just committed. A
// failure before the rename leaves the old log, complete, in place; the
// store goes on with it (read-only if the disk is full).
func (s *Store) compact(caps []*capture, reserved uint64) {
	// Holes punched by this round must be on disk before the snapshot
	// drops them from the log's tail (recovery re-punches only the tail's).
	var punched []*capture
	var records [][]byte
	for _, c := range caps {
		if len(c.punches) > 0 && !c.deleted {
			punched = append(punched, c)
		}
		if c.full != nil {
			records = append(records, c.full)
		}
	}
	if err := s.syncFiles(punched); err != nil {
		s.log.Warn("compaction skipped", "err", err)
		return
	}
	if err := s.writeSnapshot(records, reserved); err != nil {
		var ren *renamedError
		if errors.As(err, &ren) {
			s.setState(stateFailed, err)
			return
		}
		if errors.Is(err, ErrNoSpace) {
			s.setState(stateReadOnly, err)
		}
		s.log.Warn("compaction failed; keeping the old metadata log", "err", err)
	}
}

// renamedError is a snapshot failure after the rename: the new log may or
// may not be the durable one, so the store cannot go on.
type renamedError struct{ err error }

func (e *renamedError) Error() string { return e.err.Error() }
func (e *renamedError) Unwrap() error { return e.err }

const snapshotChunk = 1 << 20

// writeSnapshot writes a new log holding a snapshot of the given extent
// records to META.tmp, fsyncs it, renames it over META, fsyncs the
// directory, and makes it the log. The caller holds commitMu (or is Open).
func (s *Store) writeSnapshot(records [][]byte, reserved uint64) error {
	tmp := filepath.Join(s.dir, metaTmpName)
	f, err := s.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("snapshot: create %s: %w", tmp, classify(err))
	}
	fail := func(err error) error {
		f.Close()
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("snapshot: %w", classify(err))
	}
	var off int64
	buf := appendFrame(nil, encodeHeader(header{version: formatVersion, blockSize: s.bs, reserved: reserved}))
	flush := func() error {
		if _, err := f.WriteAt(buf, off); err != nil {
			return err
		}
		off += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	for _, r := range records {
		buf = appendFrame(buf, r)
		if len(buf) >= snapshotChunk {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	buf = appendFrame(buf, encodeSnapshotEnd(len(records), reserved))
	if err := flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := s.fs.Rename(tmp, filepath.Join(s.dir, metaName)); err != nil {
		return fail(err)
	}
	old := s.meta
	s.meta, s.metaSize, s.snapBytes = f, off, off
	s.logBytes.Store(off)
	s.logSnapBytes.Store(off)
	if old != nil {
		old.Close()
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return &renamedError{fmt.Errorf("snapshot: sync dir: %w", classify(err))}
	}
	return nil
}
