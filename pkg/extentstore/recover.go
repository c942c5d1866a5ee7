package extentstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// Open opens (creating if needed) the extent store in dir and recovers it
// to its last committed state:
//
//  1. the metadata log is replayed up to its first torn or corrupt record
//     (a crash during a log write leaves one; everything before it was
//     fsynced whole);
//  2. every extent file is cut to its committed size, dropping bytes that
//     were written but never committed (recreated if lost, extended with
//     zeros, and so failing its CRCs, if the disk lost committed bytes);
//  3. overwrites journaled since the last snapshot are written again and
//     holes punched since then punched again (both idempotent);
//  4. the tail block of every extent changed since the last snapshot, and
//     every overwritten block, is read and checked against its CRC
//     (mismatches are logged; reads of them return ErrCorrupt);
//  5. files of extents that are not in the log (created but never
//     committed, or deleted) are removed;
//  6. the log is rewritten as a fresh snapshot.
//
// Every step is idempotent, so a crash during Open is recovered by the next
// Open. Open fails with ErrCorruptMeta if the log is damaged in a way a crash
// cannot explain, and with diskfs.ErrLocked if another process has the
// store open. Cost: reading the log, one stat per extent, one block read per
// recently changed extent, and writing the snapshot.
func Open(dir string, opt Options) (*Store, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	fs := opt.FS
	if err := fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, classify(err))
	}
	if err := fs.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("open %s: sync parent: %w", dir, classify(err))
	}
	lock, err := fs.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	s := &Store{
		dir:        dir,
		fs:         fs,
		opt:        opt,
		log:        opt.Logger.With("dir", dir),
		lock:       lock,
		extents:    map[uint64]*extent{},
		tombstones: map[uint64]*extent{},
		dirty:      map[*extent]struct{}{},
	}
	s.gcCond = sync.NewCond(&s.gcMu)
	if err := s.recover(); err != nil {
		for _, e := range s.extents {
			e.h.release()
		}
		if s.meta != nil {
			s.meta.Close()
		}
		lock.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	s.small.init(s)
	return s, nil
}

// replayed is the state the metadata log describes.
type replayed struct {
	bs       int64
	reserved uint64
	exts     map[uint64]*replayedExtent
}

type replayedExtent struct {
	kind         Kind
	size         int64
	crcs         []uint32
	punched      []span
	punchedBytes int64
	// Changes after the snapshot, to redo on the file.
	touched    bool            // its tail block changed: verify it
	overwrites []journaledData // in log order
	punches    []span
}

// journaledData locates an overwrite's bytes in the log, so replay keeps
// offsets, not data, in memory.
type journaledData struct {
	off    int64 // in the extent
	logOff int64 // of the data in META
	n      int64
}

// journalCovers reports whether the bytes journaled since the snapshot
// cover [from, to): a file that lost its unsynced tail is then made whole by
// the redo, as expected after a crash, not damaged.
func (re *replayedExtent) journalCovers(from, to int64) bool {
	spans := make([]span, 0, len(re.overwrites))
	for _, w := range re.overwrites {
		spans = append(spans, span{w.off, w.off + w.n})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	for _, sp := range spans {
		if sp.off > from {
			break
		}
		from = max(from, sp.end)
	}
	return from >= to
}

func (s *Store) initMem(bs int64) {
	s.bs = bs
	s.zeros = make([]byte, bs)
	s.bufs.New = func() any { b := make([]byte, bs); return &b }
}

func (s *Store) recover() error {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("read dir: %w", classify(err))
	}
	hasMeta := false
	var files []uint64
	for _, name := range names {
		switch {
		case name == metaName:
			hasMeta = true
		case name == metaTmpName:
			// An unfinished snapshot: the rename did not happen, META is
			// complete without it.
			if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil {
				return fmt.Errorf("remove %s: %w", name, classify(err))
			}
		default:
			if id, ok := parseExtName(name); ok {
				files = append(files, id)
			}
		}
	}
	if !hasMeta {
		if len(files) > 0 {
			return fmt.Errorf("%w: %d extent files but no %s", ErrCorruptMeta, len(files), metaName)
		}
		s.initMem(int64(s.opt.BlockSize))
		s.nextID, s.reserved = 1, 1
		return s.writeSnapshot(nil, 1)
	}

	metaPath := filepath.Join(s.dir, metaName)
	mf, err := s.fs.Open(metaPath)
	if err != nil {
		return fmt.Errorf("open %s: %w", metaName, classify(err))
	}
	defer mf.Close()
	rp, err := s.replay(mf)
	if err != nil {
		return err
	}
	s.initMem(rp.bs)

	ids := make([]uint64, 0, len(rp.exts))
	for id := range rp.exts {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	created := false
	var maxID uint64
	records := make([][]byte, 0, len(ids))
	for _, id := range ids {
		re := rp.exts[id]
		e, wasCreated, err := s.recoverExtent(id, re, mf)
		if err != nil {
			return err
		}
		created = created || wasCreated
		s.extents[id] = e
		maxID = max(maxID, id)
		records = append(records, encodeExtentRecord(nil, &extentRecord{
			id: id, create: true, kind: e.kind, hasState: true, size: e.size,
			runs: []crcRun{{first: 0, crcs: e.crcs}}, punches: e.punched,
		}))
	}
	removed := false
	for _, id := range files {
		if _, ok := rp.exts[id]; ok {
			continue
		}
		if err := s.fs.Remove(s.extPath(id)); err != nil {
			return fmt.Errorf("extent %d: remove uncommitted or deleted file: %w", id, classify(err))
		}
		removed = true
	}
	if created || removed {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return fmt.Errorf("sync dir: %w", classify(err))
		}
	}
	s.nextID = max(rp.reserved, maxID+1, 1)
	s.reserved = s.nextID
	return s.writeSnapshot(records, s.reserved)
}

// recoverExtent aligns extent id's file with the replayed state re and
// returns its in-memory extent, and whether the file had to be created.
func (s *Store) recoverExtent(id uint64, re *replayedExtent, mf diskfs.File) (*extent, bool, error) {
	path := s.extPath(id)
	created := false
	f, err := s.fs.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if re.size > 0 {
			s.log.Error("extent file missing; its blocks will fail their checksums", "extent", id, "size", re.size)
		}
		f, err = s.fs.Create(path)
		created = true
	}
	if err != nil {
		return nil, false, fmt.Errorf("extent %d: open: %w", id, classify(err))
	}
	e := &extent{
		id: id, kind: re.kind, h: newHandle(f),
		size: re.size, crcs: re.crcs, punched: re.punched, punchedBytes: re.punchedBytes,
		committed: re.size, capSize: re.size,
	}
	fail := func(what string, err error) (*extent, bool, error) {
		e.h.release()
		return nil, false, fmt.Errorf("extent %d: %s: %w", id, what, classify(err))
	}
	fi, err := f.Stat()
	if err != nil {
		return fail("stat", err)
	}
	changed := created
	if fi.Size != re.size {
		if fi.Size < re.size && !re.journalCovers(fi.Size, re.size) {
			s.log.Error("extent file shorter than committed; missing blocks will fail their checksums",
				"extent", id, "file", fi.Size, "committed", re.size)
		}
		if err := f.Truncate(re.size); err != nil {
			return fail("truncate to committed size", err)
		}
		changed = true
	}
	verify := map[int64]bool{}
	if re.touched && re.size > 0 {
		verify[(re.size-1)/s.bs] = true
	}
	for _, w := range re.overwrites {
		data := make([]byte, w.n)
		if _, err := mf.ReadAt(data, w.logOff); err != nil {
			return fail("read journaled overwrite", err)
		}
		if _, err := f.WriteAt(data, w.off); err != nil {
			return fail("redo overwrite", err)
		}
		for b := w.off / s.bs; b <= (w.off+w.n-1)/s.bs; b++ {
			verify[b] = true
		}
		changed = true
	}
	for _, sp := range re.punches {
		if err := f.PunchHole(sp.off, sp.end-sp.off); err != nil {
			s.log.Warn("punch hole again", "extent", id, "off", sp.off, "err", err)
			continue
		}
		changed = true
	}
	if changed {
		if err := f.Sync(); err != nil {
			return fail("sync", err)
		}
	}
	blocks := make([]int64, 0, len(verify))
	for b := range verify {
		blocks = append(blocks, b)
	}
	sort.Slice(blocks, func(i, j int) bool { return blocks[i] < blocks[j] })
	buf := make([]byte, s.bs)
	for _, b := range blocks {
		if _, err := s.readBlock(e, b, buf); err != nil {
			s.log.Error("block fails its checksum after recovery", "extent", id, "block", b, "err", err)
		}
	}
	return e, created, nil
}

// replay reads the metadata log. It stops at the first torn record after
// the snapshot; a torn snapshot, a record that contradicts the state, or a
// missing header is ErrCorruptMeta.
func (s *Store) replay(f diskfs.File) (*replayed, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", metaName, classify(err))
	}
	r := &logReader{f: f, size: fi.Size}
	body, err := r.next()
	if err != nil {
		if errors.Is(err, errTorn) || err == io.EOF {
			return nil, fmt.Errorf("%w: no header", ErrCorruptMeta)
		}
		return nil, err
	}
	h, err := decodeHeader(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptMeta, err)
	}
	rp := &replayed{bs: h.blockSize, reserved: h.reserved, exts: map[uint64]*replayedExtent{}}
	inSnapshot := true
	for {
		recOff := r.off
		body, err := r.next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errTorn) {
			if inSnapshot {
				return nil, fmt.Errorf("%w: snapshot damaged at offset %d", ErrCorruptMeta, recOff)
			}
			s.log.Warn("metadata log has a torn tail; ignoring it", "offset", recOff, "bytes", fi.Size-recOff)
			break
		}
		if err != nil {
			return nil, err
		}
		if len(body) == 0 {
			return nil, fmt.Errorf("%w: empty record at %d", ErrCorruptMeta, recOff)
		}
		var aerr error
		switch body[0] {
		case recExtent:
			rec, err := decodeExtentRecord(body)
			if err != nil {
				aerr = err
				break
			}
			aerr = rp.apply(rec, !inSnapshot, recOff+frameHeader)
		case recReserve:
			v, err := decodeUvarints(body, recReserve, 1)
			switch {
			case err != nil:
				aerr = err
			case inSnapshot:
				aerr = errors.New("reservation inside the snapshot")
			default:
				rp.reserved = max(rp.reserved, v[0])
			}
		case recSnapshotEnd:
			v, err := decodeUvarints(body, recSnapshotEnd, 2)
			switch {
			case err != nil:
				aerr = err
			case !inSnapshot:
				aerr = errors.New("second snapshot end")
			case v[0] != uint64(len(rp.exts)):
				aerr = fmt.Errorf("snapshot of %d extents holds %d", v[0], len(rp.exts))
			default:
				rp.reserved = max(rp.reserved, v[1])
				inSnapshot = false
			}
		default:
			aerr = fmt.Errorf("unknown record type %d", body[0])
		}
		if aerr != nil {
			return nil, fmt.Errorf("%w: record at %d: %w", ErrCorruptMeta, recOff, aerr)
		}
	}
	if inSnapshot {
		return nil, fmt.Errorf("%w: snapshot has no end", ErrCorruptMeta)
	}
	return rp, nil
}

// apply applies one extent record to the replayed state; bodyOff is the
// record body's offset in the log (to locate journaled data). tail is true
// after the snapshot.
func (rp *replayed) apply(rec *extentRecord, tail bool, bodyOff int64) error {
	if rec.create {
		if rp.exts[rec.id] != nil {
			return fmt.Errorf("extent %d created twice", rec.id)
		}
		rp.exts[rec.id] = &replayedExtent{kind: rec.kind}
	}
	re := rp.exts[rec.id]
	if re == nil {
		return fmt.Errorf("record for unknown extent %d", rec.id)
	}
	if rec.hasState {
		if rec.size < re.size {
			return fmt.Errorf("extent %d shrinks from %d to %d", rec.id, re.size, rec.size)
		}
		nb := numBlocks(rec.size, rp.bs)
		if rec.size > re.size {
			// The record must carry the CRCs of every block from the old
			// tail block on; the encoder puts them in the last run.
			from := re.size / rp.bs
			if len(rec.runs) == 0 {
				return fmt.Errorf("extent %d grows without checksums", rec.id)
			}
			lastRun := rec.runs[len(rec.runs)-1]
			if lastRun.first > from || lastRun.first+int64(len(lastRun.crcs)) != nb {
				return fmt.Errorf("extent %d grows to %d blocks but checksums cover [%d,%d)",
					rec.id, nb, lastRun.first, lastRun.first+int64(len(lastRun.crcs)))
			}
			// Checksums are needed for the whole size at once: a
			// bounded allocation, since the run itself is in the record.
			if int64(cap(re.crcs)) < nb {
				grown := make([]uint32, len(re.crcs), nb)
				copy(grown, re.crcs)
				re.crcs = grown
			}
			re.crcs = re.crcs[:nb]
		}
		for _, run := range rec.runs {
			if run.first < 0 || run.first+int64(len(run.crcs)) > nb {
				return fmt.Errorf("extent %d: checksums for blocks [%d,%d) of %d", rec.id, run.first, run.first+int64(len(run.crcs)), nb)
			}
			copy(re.crcs[run.first:], run.crcs)
		}
		re.size = rec.size
		if tail {
			re.touched = true
		}
	}
	for _, sp := range rec.punches {
		if sp.end > re.size || sp.off >= sp.end {
			return fmt.Errorf("extent %d: hole [%d,%d) beyond size %d", rec.id, sp.off, sp.end, re.size)
		}
		if re.kind != KindSmall {
			return fmt.Errorf("extent %d: hole in a %v extent", rec.id, re.kind)
		}
		var added int64
		re.punched, added = addSpan(re.punched, sp)
		re.punchedBytes += added
		if tail {
			re.punches = append(re.punches, sp)
		}
	}
	for _, w := range rec.overwrites {
		end := w.off + int64(len(w.data))
		if end > re.size || len(w.data) == 0 {
			return fmt.Errorf("extent %d: overwrite [%d,%d) beyond size %d", rec.id, w.off, end, re.size)
		}
		if !tail {
			return fmt.Errorf("extent %d: overwrite inside the snapshot", rec.id)
		}
		re.overwrites = append(re.overwrites, journaledData{off: w.off, logOff: bodyOff + int64(w.bodyOff), n: int64(len(w.data))})
	}
	if rec.delete {
		delete(rp.exts, rec.id)
	}
	return nil
}
