package datanode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/recent"
)

// Overwrites go through the partition's Raft group (CFS §2.2.4): the Raft
// leader proposes an overwrite command; every replica applies it, in log
// order, with extentstore.Overwrite, which is durable when it returns and
// idempotent, so re-applying entries after a restart is harmless.
//
// The state machine holds no extent data: the extents are the state, kept
// by the extent store. Its snapshot is only the set of extents this replica
// could not apply an overwrite to (they await a full alignment). A replica
// that receives a snapshot from the leader has missed the entries the
// snapshot covers, so it marks every extent stale: reads of them are refused
// here until full alignment has compared every block's CRC with a peer and
// copied the differing blocks; the entries after the snapshot come from the
// log as usual.

const (
	// Version 2 carries the overwrite's id; version 1 (before it) is still
	// read from the logs of earlier releases.
	overwriteVersion     = 2
	overwriteV1          = 1
	overwriteHeaderLen   = 1 + 8 + 8 + 8 + 4
	overwriteV1HeaderLen = 1 + 8 + 8 + 4
	snapshotVersion      = 2
	snapshotV1           = 1
	maxStaleInSnapshot   = 1 << 20
	// doneOverwrites is how many overwrite ids a replica remembers (see
	// doneRing): a retry later than this many overwrites of its partition
	// may apply twice.
	doneOverwrites = 16384
)

// encodeOverwrite builds the Raft command for overwrite id (0: none) of
// data at off of extent ext.
func encodeOverwrite(id, ext uint64, off int64, data []byte) []byte {
	b := make([]byte, overwriteHeaderLen, overwriteHeaderLen+len(data))
	b[0] = overwriteVersion
	binary.LittleEndian.PutUint64(b[1:], ext)
	binary.LittleEndian.PutUint64(b[9:], uint64(off))
	binary.LittleEndian.PutUint64(b[17:], id)
	binary.LittleEndian.PutUint32(b[25:], crc32.Checksum(data, castagnoli))
	return append(b, data...)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeOverwrite parses a command; the data's CRC guards the log. A
// version-1 command has id 0.
func decodeOverwrite(b []byte) (id, ext uint64, off int64, data []byte, err error) {
	hl := overwriteHeaderLen
	if len(b) > 0 && b[0] == overwriteV1 {
		hl = overwriteV1HeaderLen
	}
	if len(b) < hl || (b[0] != overwriteVersion && b[0] != overwriteV1) {
		return 0, 0, 0, nil, fmt.Errorf("overwrite command: bad header (%d bytes)", len(b))
	}
	ext = binary.LittleEndian.Uint64(b[1:])
	o := binary.LittleEndian.Uint64(b[9:])
	if hl == overwriteHeaderLen {
		id = binary.LittleEndian.Uint64(b[17:])
	}
	data = b[hl:]
	if o > 1<<62 || len(data) == 0 {
		return 0, 0, 0, nil, fmt.Errorf("overwrite command: offset %d, %d bytes", o, len(data))
	}
	if crc32.Checksum(data, castagnoli) != binary.LittleEndian.Uint32(b[hl-4:]) {
		return 0, 0, 0, nil, errors.New("overwrite command: data checksum mismatch")
	}
	return id, ext, int64(o), data, nil
}

// doneRing remembers the ids of the last doneOverwrites overwrites this
// replica applied or failed to apply, so that a retry of one is not
// applied out of its turn: a client retries an overwrite whose answer it
// did not get (a leader whose own apply failed on a full disk, a
// timeout), and applied after another client's overwrite of the same
// bytes, the retry would bring back the bytes that overwrite replaced,
// which a reader may already have seen replaced (the simulation found
// it: a register read a value, then a later acknowledged one, then the
// first again).
//
// Where the overwrite applied, its retry changes nothing. Where it failed
// (the extent is marked for repair), the retry is applied while the mark
// stands, since the repair copies the bytes from a peer that applied the
// overwrite in its turn, and changes nothing once the repair is done.
type doneRing struct {
	m recent.Map[uint64, bool] // id -> failed here; Limit doneOverwrites
}

// get reports whether id is remembered and whether it failed here.
func (r *doneRing) get(id uint64) (seen, failedHere bool) {
	failedHere, seen = r.m.Get(id)
	return seen, failedHere
}

// add remembers id (not 0) as applied or failed here, forgetting the
// oldest beyond doneOverwrites; an id remembered already only changes
// its outcome.
func (r *doneRing) add(id uint64, failedHere bool) {
	if id == 0 {
		return
	}
	r.m.Limit = doneOverwrites
	r.m.Put(id, failedHere)
}

// list returns the remembered ids, oldest first.
func (r *doneRing) list() []uint64 { return r.m.Oldest() }

// The partition's overwrites of one Raft round share a journal fsync.
var _ multiraft.BatchApplier = (*overwriteSM)(nil)

// overwriteSM is the partition's Raft state machine.
type overwriteSM struct {
	p *partition
	// running is set once AddGroup returned: a Restore before it reopens
	// this replica's own snapshot, one after it installs the leader's.
	running atomic.Bool
	mu      sync.Mutex // guards done (Apply and Snapshot run apart)
	done    doneRing
}

// Apply overwrites the bytes in place. An overwrite this replica cannot
// apply because it lacks the extent's bytes (never created here, or
// shorter than the range) marks the extent stale; one refused because the
// store failed marks it too. An overwrite of a punched range (a deleted
// small file) is refused on every replica alike and marks nothing. A
// retry of an overwrite applied here changes nothing and succeeds
// (doneRing).
func (sm *overwriteSM) Apply(index uint64, data []byte) (any, error) {
	id, ext, off, b, err := decodeOverwrite(data)
	if err != nil {
		return nil, err
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.retried(id, ext) {
		return nil, nil
	}
	err = sm.p.st().Overwrite(ext, off, b)
	sm.settle(id, ext, err)
	return nil, err
}

// ApplyBatch applies the overwrites of one Raft round with one journal
// write and fsync (extentstore.OverwriteBatch): the entries' effects, and
// each one's outcome, are those of Apply called on each in turn.
func (sm *overwriteSM) ApplyBatch(ents []multiraft.Entry) ([]any, []error) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	errs := make([]error, len(ents))
	ops := make([]extentstore.OverwriteOp, 0, len(ents))
	idx := make([]int, 0, len(ents)) // entry of each op
	ids := make([]uint64, 0, len(ents))
	batch := map[uint64]bool{} // ids earlier in the batch
	for i, e := range ents {
		id, ext, off, b, err := decodeOverwrite(e.Data)
		switch {
		case err != nil:
			errs[i] = err
			continue
		case id != 0 && batch[id], sm.retried(id, ext):
			continue // a retry (of one earlier in the batch: see Apply)
		}
		if id != 0 {
			batch[id] = true
		}
		ops = append(ops, extentstore.OverwriteOp{ID: ext, Off: off, P: b})
		idx = append(idx, i)
		ids = append(ids, id)
	}
	for k, err := range sm.p.st().OverwriteBatch(ops) {
		sm.settle(ids[k], ops[k].ID, err)
		errs[idx[k]] = err
	}
	return make([]any, len(ents)), errs
}

// retried reports whether overwrite id of extent ext is a retry to leave
// out (see doneRing). sm.mu is held.
func (sm *overwriteSM) retried(id, ext uint64) bool {
	seen, failedHere := sm.done.get(id)
	return seen && (!failedHere || !sm.p.marked(ext))
}

// settle remembers overwrite id as applied, or, if it failed for a reason
// other replicas need not share (see Apply), as failed here, and marks its
// extent stale. One refused on every replica alike is not remembered: a
// retry is refused again. sm.mu is held.
func (sm *overwriteSM) settle(id, ext uint64, err error) {
	switch {
	case err == nil:
		sm.done.add(id, false)
		sm.p.noteOverwrite(ext)
	case errors.Is(err, extentstore.ErrPunched), errors.Is(err, extentstore.ErrInvalid), errors.Is(err, extentstore.ErrTooLarge):
	default:
		sm.p.markStale(ext)
		if seen, _ := sm.done.get(id); !seen {
			sm.done.add(id, true)
		}
	}
}

// Snapshot encodes the extents awaiting full alignment and the overwrites
// remembered (doneRing): version, whole-partition mark, the count and ids
// of the marked extents, the count of the remembered overwrites and each
// one's id and whether it failed here (1 byte), oldest first.
func (sm *overwriteSM) Snapshot() ([]byte, error) {
	marks, all, _ := sm.p.staleState()
	ids := make([]uint64, 0, len(marks))
	for id := range marks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) > maxStaleInSnapshot {
		ids, all = nil, 1
	}
	sm.mu.Lock()
	done := sm.done.list()
	failed := make([]bool, len(done))
	for i, id := range done {
		_, failed[i] = sm.done.get(id)
	}
	sm.mu.Unlock()
	b := []byte{snapshotVersion, 0}
	if all != 0 {
		b[1] = 1
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(done)))
	for i, id := range done {
		b = binary.LittleEndian.AppendUint64(b, id)
		if failed[i] {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b, nil
}

// Restore reloads this replica's own marks when it reopens; a snapshot
// installed from the leader marks every extent stale instead (see above).
// Either way the remembered overwrites are the snapshot's: a replica that
// installs the leader's is marked whole, and aligned with a peer before
// it serves.
func (sm *overwriteSM) Restore(data []byte) error {
	if len(data) < 6 || (data[0] != snapshotVersion && data[0] != snapshotV1) {
		return fmt.Errorf("data partition snapshot: bad header (%d bytes)", len(data))
	}
	n := binary.LittleEndian.Uint32(data[2:])
	end := 6 + 8*int(n)
	if n > maxStaleInSnapshot || len(data) < end {
		return fmt.Errorf("data partition snapshot: %d marks in %d bytes", n, len(data))
	}
	type entry struct {
		id     uint64
		failed bool
	}
	var done []entry
	switch {
	case data[0] == snapshotV1 && len(data) != end:
		return fmt.Errorf("data partition snapshot: %d marks in %d bytes", n, len(data))
	case data[0] == snapshotVersion:
		if len(data) < end+4 {
			return fmt.Errorf("data partition snapshot: no done overwrites after %d marks (%d bytes)", n, len(data))
		}
		m := binary.LittleEndian.Uint32(data[end:])
		if m > doneOverwrites || len(data) != end+4+9*int(m) {
			return fmt.Errorf("data partition snapshot: %d remembered overwrites in %d bytes", m, len(data)-end-4)
		}
		for i := range int(m) {
			at := end + 4 + 9*i
			if data[at+8] > 1 {
				return fmt.Errorf("data partition snapshot: remembered overwrite %d: flag %d", i, data[at+8])
			}
			done = append(done, entry{binary.LittleEndian.Uint64(data[at:]), data[at+8] == 1})
		}
	}
	sm.mu.Lock()
	sm.done = doneRing{}
	for _, e := range done {
		sm.done.add(e.id, e.failed)
	}
	sm.mu.Unlock()
	if sm.running.Load() {
		sm.p.log.Warn("installed a Raft snapshot from the leader: every extent awaits full alignment")
		sm.p.markAllStale()
		return nil
	}
	if data[1] == 1 {
		sm.p.markAllStale()
	}
	for i := range int(n) {
		sm.p.markStale(binary.LittleEndian.Uint64(data[6+8*i:]))
	}
	return nil
}
