package extentstore

import (
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
)

// Overwrites in place: journaled in the metadata log, then written over
// the extent's bytes, alone or in batches sharing one fsync.

// Overwrite replaces len(p) existing bytes of extent id at off (the Raft
// overwrite path, CFS §2.7.2). The range must lie within the extent's
// committed bytes and must not touch a punched hole. Overwrite is durable
// when it returns: the new bytes are first journaled in the metadata log
// (with the extent's pending appends committed first) and fsynced, then
// written in place, so a crash at any point leaves the old bytes or, after
// recovery replays the journal, the new ones, never a torn mix. Cost: one
// extent fsync if appends are pending, one metadata fsync, the partial
// blocks at the edges read and checked, p written twice.
func (s *Store) Overwrite(id uint64, off int64, p []byte) error {
	return s.OverwriteBatch([]OverwriteOp{{ID: id, Off: off, P: p}})[0]
}

// OverwriteOp is one overwrite of an OverwriteBatch: P at Off of extent ID.
type OverwriteOp struct {
	ID  uint64
	Off int64
	P   []byte
}

// OverwriteBatch applies ops in order with the guarantees of Overwrite,
// as if Overwrite were called on each in turn, but with one journal write
// and one metadata fsync for every MaxWriteBytes of them (and one fsync per
// extent with pending appends): the Raft group commit of a data partition
// applies a round of overwrites at the cost of one. The overwrites of one
// extent in one such group are one journal record, so after a crash all of
// them are there or none. errs[i] is op i's outcome: an op refused for its
// range (ErrOutOfRange, ErrPunched, ErrInvalid, ErrTooLarge, ErrNotFound)
// changes nothing and the others go on; a failure of the store fails every
// op not yet durable.
func (s *Store) OverwriteBatch(ops []OverwriteOp) []error {
	errs := make([]error, len(ops))
	for start := 0; start < len(ops); {
		end, bytes := start, 0
		for end < len(ops) && (end == start || bytes+len(ops[end].P) <= s.opt.MaxWriteBytes) {
			bytes += len(ops[end].P)
			end++
		}
		s.overwriteGroup(ops[start:end], errs[start:end])
		start = end
	}
	return errs
}

// blockKey names block b of extent e.
type blockKey struct {
	e *extent
	b int64
}

// overwriteGroup is OverwriteBatch for ops whose bytes fit one journal
// record budget; it fills errs.
func (s *Store) overwriteGroup(ops []OverwriteOp, errs []error) {
	exts := map[uint64]*extent{}
	for i, op := range ops {
		switch {
		case len(op.P) == 0 || op.Off < 0:
			errs[i] = fmt.Errorf("extent %d: overwrite %d bytes at %d: %w", op.ID, len(op.P), op.Off, ErrInvalid)
		case len(op.P) > s.opt.MaxWriteBytes:
			errs[i] = fmt.Errorf("extent %d: overwrite of %d bytes: %w (max %d)", op.ID, len(op.P), ErrTooLarge, s.opt.MaxWriteBytes)
		default:
			if err := s.stateError(stateOK); err != nil {
				errs[i] = fmt.Errorf("extent %d: overwrite: %w", op.ID, err)
				continue
			}
			e, err := s.get(op.ID)
			if err != nil {
				errs[i] = err
				continue
			}
			exts[op.ID] = e
		}
	}
	if len(exts) == 0 {
		return
	}
	// Every extent of the group stays locked until its bytes are in place
	// (readers wait, as for one Overwrite), in id order against deadlock.
	ids := make([]uint64, 0, len(exts))
	for id := range exts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	for _, id := range ids {
		exts[id].mu.Lock()
		defer exts[id].mu.Unlock()
	}
	// The blocks this group changed, by content, for a later op of the
	// group on the same block: it must start from them, not from the file
	// (written only after the journal), whose bytes no longer match the
	// block's new CRC. Only blocks more than one op touches are kept
	// (copying a 128 KiB block per 4 KiB overwrite cost more than the
	// write).
	touches := map[blockKey]int{}
	for i, op := range ops {
		if errs[i] == nil && len(op.P) > 0 {
			e := exts[op.ID]
			for b := op.Off / s.bs; b <= (op.Off+int64(len(op.P))-1)/s.bs; b++ {
				touches[blockKey{e, b}]++
			}
		}
	}
	blocks := map[blockKey][]byte{}
	buf := s.getBuf()
	defer s.putBuf(buf)
	type undo struct {
		e     *extent
		first int64
		crcs  []uint32
	}
	var undos []undo
	var done []int      // ops that passed their checks, in order
	var order []*extent // extents of done, in order of first op
	for i, op := range ops {
		if errs[i] != nil {
			continue
		}
		e := exts[op.ID]
		off, p := op.Off, op.P
		end := off + int64(len(p))
		switch {
		case e.deleted:
			errs[i] = fmt.Errorf("extent %d: overwrite: %w", op.ID, ErrNotFound)
			continue
		case off > e.committed-int64(len(p)): // end > committed, without overflow
			errs[i] = fmt.Errorf("extent %d: overwrite [%d,%d) beyond committed size %d: %w", op.ID, off, end, e.committed, ErrOutOfRange)
			continue
		case overlapsPunched(e.punched, off, end):
			errs[i] = fmt.Errorf("extent %d: overwrite [%d,%d): %w", op.ID, off, end, ErrPunched)
			continue
		}
		if err := s.stateError(stateOK); err != nil { // re-check under commitMu
			errs[i] = fmt.Errorf("extent %d: overwrite: %w", op.ID, err)
			continue
		}
		// New CRCs of the blocks touched; the partial ones at the edges are
		// read and verified first, so corruption is never blessed with a
		// fresh CRC.
		first, last := off/s.bs, (end-1)/s.bs
		newCRCs := make([]uint32, 0, last-first+1)
		changed := make(map[blockKey][]byte, last-first+1)
		var err error
		for b := first; b <= last && err == nil; b++ {
			start, bend := blockSpan(b, s.bs, e.size)
			key := blockKey{e, b}
			keep := touches[key] > 1
			var data []byte
			aliased := false // data is p's own bytes: nothing to copy
			switch prev, ok := blocks[key]; {
			case ok && first == last:
				// One block: nothing can fail after the copy below, so the
				// kept block is changed in place (a batch of 4 KiB writes
				// touches each 128 KiB block many times).
				data = prev
			case ok:
				// Several blocks: a later one may fail to read, and then
				// the kept ones must be as they were.
				data = slices.Clone(prev)
			case start >= off && bend <= end:
				if data = p[start-off : bend-off]; keep {
					data = slices.Clone(data)
				} else {
					// Copying p onto itself would write to the entry's
					// bytes, which the Raft transport may be sending.
					aliased = true
				}
			default:
				if data, err = s.readBlock(e, b, *buf); err != nil {
					err = fmt.Errorf("extent %d: overwrite: %w", op.ID, err)
					continue
				}
				if keep {
					data = slices.Clone(data)
				}
			}
			if s0, e0 := max(start, off), min(bend, end); !aliased {
				copy(data[s0-start:e0-start], p[s0-off:e0-off])
			}
			if keep {
				changed[key] = data
			}
			newCRCs = append(newCRCs, crc32.Checksum(data, castagnoli))
		}
		if err != nil {
			errs[i] = err
			continue
		}
		maps.Copy(blocks, changed)
		undos = append(undos, undo{e: e, first: first, crcs: append([]uint32(nil), e.crcs[first:last+1]...)})
		copy(e.crcs[first:], newCRCs)
		if e.dirtyBlocks == nil {
			e.dirtyBlocks = map[int64]struct{}{}
		}
		for b := first; b <= last; b++ {
			e.dirtyBlocks[b] = struct{}{}
		}
		if !slices.Contains(order, e) {
			order = append(order, e)
		}
		done = append(done, i)
	}
	if len(done) == 0 {
		return
	}
	fail := func(from int, err error) {
		for _, i := range done[from:] {
			errs[i] = fmt.Errorf("extent %d: overwrite: %w", ops[i].ID, err)
		}
	}
	// One record per extent: its pending changes (appends included, so its
	// size is committed too) and the journaled bytes of its overwrites.
	caps := make([]*capture, len(order))
	for k, e := range order {
		c := s.capture(e, false)
		if c.rec == nil {
			c.rec = &extentRecord{id: e.id}
		}
		for _, i := range done {
			if exts[ops[i].ID] == e {
				c.rec.overwrites = append(c.rec.overwrites, &overwriteOp{off: ops[i].Off, data: ops[i].P})
			}
		}
		caps[k] = c
	}
	if err := s.persist(caps); err != nil {
		for k := len(undos) - 1; k >= 0; k-- {
			copy(undos[k].e.crcs[undos[k].first:], undos[k].crcs)
		}
		s.setState(stateFailed, err)
		fail(0, err)
		return
	}
	for k, i := range done {
		op := ops[i]
		if _, err := exts[op.ID].h.f.WriteAt(op.P, op.Off); err != nil {
			// The journal holds the bytes: recovery will write them.
			err = classify(err)
			s.setState(stateFailed, err)
			fail(k, fmt.Errorf("in place at %d: %w", op.Off, err))
			return
		}
	}
	for _, c := range caps {
		s.postCommitLocked(c)
		c.e.noteOtherWrite()
		s.markDirty(c.e)
	}
}
