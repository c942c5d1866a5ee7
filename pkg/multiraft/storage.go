package multiraft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Key layout. Every key the host writes starts with KeyPrefix, so other code
// can share the Pebble DB as long as it stays out of that prefix:
//
//	KeyPrefix | group (8 bytes, big endian) | kind (1 byte) [| index (8 bytes, big endian)]
//
// kinds, in key order:
//
//	'd'  data of the latest snapshot (the state machine's Snapshot bytes)
//	'e'  log entry; the index follows; value is encodeEntry's format
//	'h'  raft HardState (protobuf)
//	'm'  metadata of the latest snapshot (raftpb.SnapshotMetadata: index, term,
//	     ConfState). It is also the log's truncation state: the log always
//	     starts right after it, entries at or below its index are deleted.
//
// Big-endian indexes make a group's entries sort by index, so a range delete
// truncates a prefix or a suffix of the log and a reverse seek finds the last
// entry.
const KeyPrefix = "\x01raft/"

const (
	kindSnapData byte = 'd'
	kindEntry    byte = 'e'
	kindHard     byte = 'h'
	kindSnapMeta byte = 'm'
)

// groupPrefixLen is the length of KeyPrefix plus the group id.
const groupPrefixLen = len(KeyPrefix) + 8

func groupPrefix(g GroupID) []byte {
	k := make([]byte, groupPrefixLen, groupPrefixLen+9)
	copy(k, KeyPrefix)
	binary.BigEndian.PutUint64(k[len(KeyPrefix):], uint64(g))
	return k
}

func kindKey(g GroupID, kind byte) []byte {
	return append(groupPrefix(g), kind)
}

func entryKey(g GroupID, index uint64) []byte {
	k := append(groupPrefix(g), kindEntry)
	return binary.BigEndian.AppendUint64(k, index)
}

// entryIndexOf returns the index in an entry key.
func entryIndexOf(key []byte) uint64 { return binary.BigEndian.Uint64(key[groupPrefixLen+1:]) }

// groupSpan returns [start, end) covering every key of group g: kinds are
// ASCII letters, all below 0xff.
func groupSpan(g GroupID) (start, end []byte) {
	return groupPrefix(g), append(groupPrefix(g), 0xff)
}

// entryFormatV1 is the first byte of every stored entry. Entries are stored in
// this small format rather than as protobuf so Term() reads 9 bytes and needs
// no decoding of the payload; the index is the key's.
//
//	format (1) | term (8, big endian) | entry type (1) | data
const entryFormatV1 byte = 1

const entryHeaderLen = 10

func encodeEntry(e *raftpb.Entry) []byte {
	data := e.GetData()
	v := make([]byte, entryHeaderLen+len(data))
	v[0] = entryFormatV1
	binary.BigEndian.PutUint64(v[1:9], e.GetTerm())
	v[9] = byte(e.GetType())
	copy(v[entryHeaderLen:], data)
	return v
}

func decodeEntryTerm(index uint64, v []byte) (uint64, error) {
	if len(v) < entryHeaderLen || v[0] != entryFormatV1 {
		return 0, fmt.Errorf("entry %d: malformed stored entry (%d bytes)", index, len(v))
	}
	return binary.BigEndian.Uint64(v[1:9]), nil
}

// decodeEntry copies v (Pebble's value buffers are only valid until the
// iterator moves).
func decodeEntry(index uint64, v []byte) (*raftpb.Entry, error) {
	term, err := decodeEntryTerm(index, v)
	if err != nil {
		return nil, err
	}
	typ := raftpb.EntryType(v[9])
	if _, ok := raftpb.EntryType_name[int32(typ)]; !ok {
		return nil, fmt.Errorf("entry %d: unknown entry type %d", index, v[9])
	}
	e := &raftpb.Entry{Term: proto.Uint64(term), Index: proto.Uint64(index), Type: typ.Enum()}
	if len(v) > entryHeaderLen {
		e.Data = append([]byte(nil), v[entryHeaderLen:]...)
	}
	return e, nil
}

// logState is what a group's storage knows about its persisted log without
// reading the DB. The host keeps one committed copy and, while a round's batch
// is being written, one staged copy.
type logState struct {
	hard      *raftpb.HardState
	snap      *raftpb.SnapshotMetadata // never nil; Index 0 means no snapshot
	lastIndex uint64                   // last persisted entry, or snap.Index when the log is empty
	lastTerm  uint64
}

// storage is one group's raft.Storage backed by the host's Pebble DB.
//
// Reads (the raft.Storage methods) see only what is committed to the DB; the
// host stages a round's writes with the stage* methods into the shared batch
// and calls commitStaged once that batch is durable, before it calls
// RawNode.Advance. All methods run with the host's state lock held.
type storage struct {
	db     *pebble.DB
	group  GroupID
	cur    logState
	staged *logState // nil when nothing is staged

	// cache holds the newest durable entries; cacheOps are the staged
	// changes to it, applied by commitStaged.
	cache    *entryCache
	cacheOps []func(*entryCache)

	// latestConf returns the group's latest applied configuration (nil:
	// unknown). freshWanted asks the host to take a new snapshot: raft wanted
	// one and the stored one predates a membership change.
	latestConf  func() *raftpb.ConfState
	freshWanted bool
}

var _ raft.Storage = (*storage)(nil)

// loadStorage reads group g's persisted state. exists reports whether anything
// of the group is in the DB.
func loadStorage(db *pebble.DB, g GroupID) (st *storage, exists bool, err error) {
	st = &storage{db: db, group: g, cache: newEntryCache(entryCacheBytes)}
	st.cur.hard = &raftpb.HardState{}
	st.cur.snap = raftpb.EnsureSnapshotMetadata(nil)

	hv, found, err := getValue(db, kindKey(g, kindHard))
	if err != nil {
		return nil, false, fmt.Errorf("group %d: read hard state: %w", g, err)
	}
	if found {
		exists = true
		if err := proto.Unmarshal(hv, st.cur.hard); err != nil {
			return nil, false, fmt.Errorf("group %d: decode hard state: %w", g, err)
		}
	}
	mv, found, err := getValue(db, kindKey(g, kindSnapMeta))
	if err != nil {
		return nil, false, fmt.Errorf("group %d: read snapshot metadata: %w", g, err)
	}
	if found {
		exists = true
		meta := &raftpb.SnapshotMetadata{}
		if err := proto.Unmarshal(mv, meta); err != nil {
			return nil, false, fmt.Errorf("group %d: decode snapshot metadata: %w", g, err)
		}
		st.cur.snap = raftpb.EnsureSnapshotMetadata(meta)
	}
	st.cur.lastIndex, st.cur.lastTerm = st.cur.snap.GetIndex(), st.cur.snap.GetTerm()

	// The log must be contiguous and start right after the snapshot.
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: entryKey(g, 0), UpperBound: kindKey(g, kindEntry+1)})
	if err != nil {
		return nil, false, fmt.Errorf("group %d: scan log: %w", g, err)
	}
	defer it.Close()
	if it.First() {
		exists = true
		first := entryIndexOf(it.Key())
		if first != st.cur.snap.GetIndex()+1 {
			return nil, false, fmt.Errorf("group %d: log starts at %d but snapshot is at %d", g, first, st.cur.snap.GetIndex())
		}
		if !it.Last() {
			return nil, false, fmt.Errorf("group %d: scan log: %w", g, errors.Join(it.Error(), errors.New("last entry vanished")))
		}
		last := entryIndexOf(it.Key())
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, false, fmt.Errorf("group %d: read entry %d: %w", g, last, err)
		}
		term, err := decodeEntryTerm(last, v)
		if err != nil {
			return nil, false, fmt.Errorf("group %d: %w", g, err)
		}
		st.cur.lastIndex, st.cur.lastTerm = last, term
	}
	if err := it.Error(); err != nil {
		return nil, false, fmt.Errorf("group %d: scan log: %w", g, err)
	}
	if c := st.cur.hard.GetCommit(); c > st.cur.lastIndex || c < st.cur.snap.GetIndex() {
		return nil, false, fmt.Errorf("group %d: commit %d outside persisted log [%d, %d]", g, c, st.cur.snap.GetIndex(), st.cur.lastIndex)
	}
	return st, exists, nil
}

func getValue(db *pebble.DB, key []byte) ([]byte, bool, error) {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	return out, true, closer.Close()
}

// InitialState implements raft.Storage. The ConfState is the snapshot's: the
// host restarts a group at the snapshot's index (Config.Applied) and raft
// re-applies every later entry, conf changes included.
func (s *storage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	hs := proto.Clone(s.cur.hard).(*raftpb.HardState)
	cs := proto.Clone(s.cur.snap.GetConfState()).(*raftpb.ConfState)
	return hs, raftpb.EnsureConfState(cs), nil
}

// Entries implements raft.Storage.
func (s *storage) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	if lo <= s.cur.snap.GetIndex() {
		return nil, raft.ErrCompacted
	}
	if hi > s.cur.lastIndex+1 || lo > hi {
		return nil, fmt.Errorf("group %d: entries [%d, %d) outside log (last %d): %w", s.group, lo, hi, s.cur.lastIndex, raft.ErrUnavailable)
	}
	if lo == hi {
		return nil, nil
	}
	if ents, ok := s.cache.get(lo, hi, maxSize); ok {
		return ents, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(s.group, lo), UpperBound: entryKey(s.group, hi)})
	if err != nil {
		return nil, fmt.Errorf("group %d: read entries: %w", s.group, err)
	}
	defer it.Close()
	ents := make([]*raftpb.Entry, 0, min(hi-lo, 64))
	var size uint64
	next := lo
	for ok := it.First(); ok; ok = it.Next() {
		idx := entryIndexOf(it.Key())
		if idx != next {
			return nil, fmt.Errorf("group %d: log hole: want entry %d, found %d", s.group, next, idx)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("group %d: read entry %d: %w", s.group, idx, err)
		}
		e, err := decodeEntry(idx, v)
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", s.group, err)
		}
		size += uint64(proto.Size(e))
		if len(ents) > 0 && size > maxSize {
			return ents, nil
		}
		ents = append(ents, e)
		next++
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("group %d: read entries: %w", s.group, err)
	}
	if next != hi {
		return nil, fmt.Errorf("group %d: log hole: entries [%d, %d) end at %d: %w", s.group, lo, hi, next, raft.ErrUnavailable)
	}
	return ents, nil
}

// Term implements raft.Storage.
func (s *storage) Term(i uint64) (uint64, error) {
	switch snap := s.cur.snap.GetIndex(); {
	case i == snap:
		return s.cur.snap.GetTerm(), nil
	case i < snap:
		return 0, raft.ErrCompacted
	case i > s.cur.lastIndex:
		return 0, raft.ErrUnavailable
	case i == s.cur.lastIndex:
		return s.cur.lastTerm, nil
	}
	if t, ok := s.cache.term(i); ok {
		return t, nil
	}
	v, found, err := getValue(s.db, entryKey(s.group, i))
	if err != nil {
		return 0, fmt.Errorf("group %d: read entry %d: %w", s.group, i, err)
	}
	if !found {
		return 0, fmt.Errorf("group %d: log hole at %d: %w", s.group, i, raft.ErrUnavailable)
	}
	return decodeEntryTerm(i, v)
}

// LastIndex implements raft.Storage.
func (s *storage) LastIndex() (uint64, error) { return s.cur.lastIndex, nil }

// FirstIndex implements raft.Storage.
func (s *storage) FirstIndex() (uint64, error) { return s.cur.snap.GetIndex() + 1, nil }

// Snapshot implements raft.Storage: it returns the stored snapshot, the one the
// log starts after. Raft calls it to catch up a follower whose next entry was
// truncated. The stored one suffices because every entry after it is still in
// the log, and returning it costs a DB read instead of serializing the state
// machine on each attempt (and keeps state-machine calls on the processing
// loop: raft may call Snapshot from inside Propose).
//
// The exception is a stored snapshot older than the latest membership change:
// a replica added since is not in its ConfState, and raft on the receiving
// side rightly refuses a snapshot that does not include it. Then Snapshot
// reports ErrSnapshotTemporarilyUnavailable and asks the host for a fresh
// snapshot, which the loop takes at the end of the round; raft asks again on
// the follower's next heartbeat response.
func (s *storage) Snapshot() (*raftpb.Snapshot, error) {
	meta := proto.Clone(s.cur.snap).(*raftpb.SnapshotMetadata)
	if meta.GetIndex() == 0 {
		return raftpb.EnsureSnapshot(&raftpb.Snapshot{Metadata: meta}), nil
	}
	if s.latestConf != nil {
		if cs := s.latestConf(); cs != nil && !confEqual(cs, meta.GetConfState()) {
			s.freshWanted = true
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
	}
	data, err := s.snapshotData()
	if err != nil {
		return nil, err
	}
	return &raftpb.Snapshot{Data: data, Metadata: meta}, nil
}

// confEqual compares configurations, ignoring member order.
func confEqual(a, b *raftpb.ConfState) bool {
	return a.Equivalent(b) == nil
}

// snapshotData reads the stored snapshot's data.
func (s *storage) snapshotData() ([]byte, error) {
	data, found, err := getValue(s.db, kindKey(s.group, kindSnapData))
	if err != nil {
		return nil, fmt.Errorf("group %d: read snapshot data: %w", s.group, err)
	}
	if !found {
		return nil, fmt.Errorf("group %d: snapshot %d has no data in the DB", s.group, s.cur.snap.GetIndex())
	}
	return data, nil
}

func (s *storage) snapIndex() uint64 { return s.cur.snap.GetIndex() }

// next returns the staged state, creating it from the committed one.
func (s *storage) next() *logState {
	if s.staged == nil {
		c := s.cur
		s.staged = &c
	}
	return s.staged
}

// checkReady verifies that rd's snapshot and entries fit the stored log,
// before anything of rd is staged.
func (s *storage) checkReady(rd *raft.Ready) error {
	snap, last := s.cur.snap.GetIndex(), s.cur.lastIndex
	if !raft.IsEmptySnap(rd.Snapshot) {
		idx := rd.Snapshot.GetMetadata().GetIndex()
		if idx <= snap {
			return fmt.Errorf("received snapshot %d is not newer than stored snapshot %d", idx, snap)
		}
		snap, last = idx, idx
	}
	if n := len(rd.Entries); n > 0 {
		first := rd.Entries[0].GetIndex()
		if first <= snap || first > last+1 {
			return fmt.Errorf("append [%d, %d] does not fit log (snapshot %d, last %d)", first, rd.Entries[n-1].GetIndex(), snap, last)
		}
		for i, e := range rd.Entries {
			if e.GetIndex() != first+uint64(i) {
				return fmt.Errorf("append: entry %d out of sequence at %d", e.GetIndex(), first+uint64(i))
			}
		}
	}
	return nil
}

// stageReady adds the persistent parts of rd to b, in the order raft requires:
// snapshot, then entries, then hard state.
func (s *storage) stageReady(b *pebble.Batch, rd *raft.Ready) error {
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := s.stageSnapshot(b, rd.Snapshot.GetMetadata(), rd.Snapshot.GetData(), true); err != nil {
			return err
		}
	}
	if len(rd.Entries) > 0 {
		if err := s.stageEntries(b, rd.Entries); err != nil {
			return err
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := s.stageHardState(b, rd.HardState); err != nil {
			return err
		}
	}
	return nil
}

func (s *storage) stageHardState(b *pebble.Batch, hs *raftpb.HardState) error {
	v, err := proto.Marshal(hs)
	if err != nil {
		return fmt.Errorf("group %d: encode hard state: %w", s.group, err)
	}
	if err := b.Set(kindKey(s.group, kindHard), v, nil); err != nil {
		return fmt.Errorf("group %d: stage hard state: %w", s.group, err)
	}
	s.next().hard = proto.Clone(hs).(*raftpb.HardState)
	return nil
}

// stageEntries appends ents, replacing any persisted suffix from ents[0] on
// (raft overwrites a conflicting tail of a follower's log).
func (s *storage) stageEntries(b *pebble.Batch, ents []*raftpb.Entry) error {
	n := s.next()
	first, last := ents[0].GetIndex(), ents[len(ents)-1].GetIndex()
	if first <= n.snap.GetIndex() || first > n.lastIndex+1 {
		return fmt.Errorf("group %d: append [%d, %d] does not fit log (snapshot %d, last %d)", s.group, first, last, n.snap.GetIndex(), n.lastIndex)
	}
	for i, e := range ents {
		if e.GetIndex() != first+uint64(i) {
			return fmt.Errorf("group %d: append: entry %d out of sequence at %d", s.group, e.GetIndex(), first+uint64(i))
		}
		if err := b.Set(entryKey(s.group, e.GetIndex()), encodeEntry(e), nil); err != nil {
			return fmt.Errorf("group %d: append entries: %w", s.group, err)
		}
	}
	if n.lastIndex > last {
		if err := b.DeleteRange(entryKey(s.group, last+1), kindKey(s.group, kindEntry+1), nil); err != nil {
			return fmt.Errorf("group %d: truncate conflicting entries: %w", s.group, err)
		}
	}
	n.lastIndex, n.lastTerm = last, ents[len(ents)-1].GetTerm()
	s.cacheOps = append(s.cacheOps, func(c *entryCache) { c.append(ents) })
	return nil
}

// stageSnapshot stores a snapshot and drops the log entries it covers; with
// dropAll (a snapshot received from the leader replaces the whole log) it
// drops every entry.
func (s *storage) stageSnapshot(b *pebble.Batch, meta *raftpb.SnapshotMetadata, data []byte, dropAll bool) error {
	n := s.next()
	if meta.GetIndex() <= n.snap.GetIndex() {
		return fmt.Errorf("group %d: snapshot %d is not newer than stored snapshot %d", s.group, meta.GetIndex(), n.snap.GetIndex())
	}
	mv, err := proto.Marshal(meta)
	if err != nil {
		return fmt.Errorf("group %d: encode snapshot metadata: %w", s.group, err)
	}
	if err := b.Set(kindKey(s.group, kindSnapMeta), mv, nil); err != nil {
		return fmt.Errorf("group %d: stage snapshot metadata: %w", s.group, err)
	}
	if err := b.Set(kindKey(s.group, kindSnapData), data, nil); err != nil {
		return fmt.Errorf("group %d: stage snapshot data: %w", s.group, err)
	}
	end := entryKey(s.group, meta.GetIndex()+1)
	if dropAll || meta.GetIndex() >= n.lastIndex {
		end = kindKey(s.group, kindEntry+1)
	}
	if err := b.DeleteRange(entryKey(s.group, 0), end, nil); err != nil {
		return fmt.Errorf("group %d: truncate log to %d: %w", s.group, meta.GetIndex(), err)
	}
	n.snap = raftpb.EnsureSnapshotMetadata(proto.Clone(meta).(*raftpb.SnapshotMetadata))
	if dropAll || meta.GetIndex() >= n.lastIndex {
		n.lastIndex, n.lastTerm = meta.GetIndex(), meta.GetTerm()
		s.cacheOps = append(s.cacheOps, (*entryCache).clear)
	} else {
		idx := meta.GetIndex()
		s.cacheOps = append(s.cacheOps, func(c *entryCache) { c.compactTo(idx) })
	}
	return nil
}

// commitStaged makes the staged state current; call it only after the batch
// holding the staged writes is committed.
func (s *storage) commitStaged() {
	if s.staged != nil {
		s.cur = *s.staged
		s.staged = nil
	}
	for _, op := range s.cacheOps {
		op(s.cache)
	}
	s.cacheOps = s.cacheOps[:0]
}

// dropStaged forgets staged state whose batch was not committed.
func (s *storage) dropStaged() { s.staged, s.cacheOps = nil, s.cacheOps[:0] }

// destroyGroup deletes everything group g persisted, durably.
func destroyGroup(db *pebble.DB, g GroupID) error {
	start, end := groupSpan(g)
	if err := db.DeleteRange(start, end, pebble.Sync); err != nil {
		return fmt.Errorf("group %d: destroy persisted state: %w", g, err)
	}
	return nil
}
