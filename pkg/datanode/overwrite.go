package datanode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync/atomic"

	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/multiraft"
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
	overwriteVersion   = 1
	overwriteHeaderLen = 1 + 8 + 8 + 4
	snapshotVersion    = 1
	maxStaleInSnapshot = 1 << 20
)

// encodeOverwrite builds the Raft command for an overwrite.
func encodeOverwrite(ext uint64, off int64, data []byte) []byte {
	b := make([]byte, overwriteHeaderLen, overwriteHeaderLen+len(data))
	b[0] = overwriteVersion
	binary.LittleEndian.PutUint64(b[1:], ext)
	binary.LittleEndian.PutUint64(b[9:], uint64(off))
	binary.LittleEndian.PutUint32(b[17:], crc32.Checksum(data, castagnoli))
	return append(b, data...)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeOverwrite parses a command; the data's CRC guards the log.
func decodeOverwrite(b []byte) (ext uint64, off int64, data []byte, err error) {
	if len(b) < overwriteHeaderLen || b[0] != overwriteVersion {
		return 0, 0, nil, fmt.Errorf("overwrite command: bad header (%d bytes)", len(b))
	}
	ext = binary.LittleEndian.Uint64(b[1:])
	o := binary.LittleEndian.Uint64(b[9:])
	data = b[overwriteHeaderLen:]
	if o > 1<<62 || len(data) == 0 {
		return 0, 0, nil, fmt.Errorf("overwrite command: offset %d, %d bytes", o, len(data))
	}
	if crc32.Checksum(data, castagnoli) != binary.LittleEndian.Uint32(b[17:]) {
		return 0, 0, nil, errors.New("overwrite command: data checksum mismatch")
	}
	return ext, int64(o), data, nil
}

// The partition's overwrites of one Raft round share a journal fsync.
var _ multiraft.BatchApplier = (*overwriteSM)(nil)

// overwriteSM is the partition's Raft state machine.
type overwriteSM struct {
	p *partition
	// running is set once AddGroup returned: a Restore before it reopens
	// this replica's own snapshot, one after it installs the leader's.
	running atomic.Bool
}

// Apply overwrites the bytes in place. An overwrite this replica cannot
// apply because it lacks the extent's bytes (never created here, or
// shorter than the range) marks the extent stale; one refused because the
// store failed marks it too. An overwrite of a punched range (a deleted
// small file) is refused on every replica alike and marks nothing.
func (sm *overwriteSM) Apply(index uint64, data []byte) (any, error) {
	ext, off, b, err := decodeOverwrite(data)
	if err != nil {
		return nil, err
	}
	err = sm.p.st().Overwrite(ext, off, b)
	sm.settle(ext, err)
	return nil, err
}

// ApplyBatch applies the overwrites of one Raft round with one journal
// write and fsync (extentstore.OverwriteBatch): the entries' effects, and
// each one's outcome, are those of Apply called on each in turn.
func (sm *overwriteSM) ApplyBatch(ents []multiraft.Entry) ([]any, []error) {
	errs := make([]error, len(ents))
	ops := make([]extentstore.OverwriteOp, 0, len(ents))
	idx := make([]int, 0, len(ents)) // entry of each op
	for i, e := range ents {
		ext, off, b, err := decodeOverwrite(e.Data)
		if err != nil {
			errs[i] = err
			continue
		}
		ops = append(ops, extentstore.OverwriteOp{ID: ext, Off: off, P: b})
		idx = append(idx, i)
	}
	for k, err := range sm.p.st().OverwriteBatch(ops) {
		sm.settle(ops[k].ID, err)
		errs[idx[k]] = err
	}
	return make([]any, len(ents)), errs
}

// settle marks the extent of an overwrite stale if the overwrite failed
// for a reason other replicas need not share (see Apply).
func (sm *overwriteSM) settle(ext uint64, err error) {
	switch {
	case err == nil:
		sm.p.noteOverwrite(ext)
	case errors.Is(err, extentstore.ErrPunched), errors.Is(err, extentstore.ErrInvalid), errors.Is(err, extentstore.ErrTooLarge):
	default:
		sm.p.markStale(ext)
	}
}

// Snapshot encodes the extents awaiting full alignment.
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
	b := []byte{snapshotVersion, 0}
	if all != 0 {
		b[1] = 1
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	return b, nil
}

// Restore reloads this replica's own marks when it reopens; a snapshot
// installed from the leader marks every extent stale instead (see above).
func (sm *overwriteSM) Restore(data []byte) error {
	if sm.running.Load() {
		sm.p.log.Warn("installed a Raft snapshot from the leader: every extent awaits full alignment")
		sm.p.markAllStale()
		return nil
	}
	if len(data) < 6 || data[0] != snapshotVersion {
		return fmt.Errorf("data partition snapshot: bad header (%d bytes)", len(data))
	}
	n := binary.LittleEndian.Uint32(data[2:])
	if n > maxStaleInSnapshot || len(data) != 6+8*int(n) {
		return fmt.Errorf("data partition snapshot: %d marks in %d bytes", n, len(data))
	}
	if data[1] == 1 {
		sm.p.markAllStale()
	}
	for i := range int(n) {
		sm.p.markStale(binary.LittleEndian.Uint64(data[6+8*i:]))
	}
	return nil
}
