// Package changefeed records which names and inodes a meta partition's
// applied Txns changed, by Raft index and by the client session whose
// request made them, and answers "what changed after index c that session
// o did not change itself". A mount asks the partition's leader that
// question in a loop (metapb.ChangesRequest) and tells its kernel to drop
// what is listed, so that the kernel may cache names and attributes for
// long while every other client's change still reaches it within a bound
// (docs/design.md, "Kernel caches kept coherent by a change feed").
//
// Every replica keeps a Log of the entries it applies, so a new leader
// answers for the same indexes its predecessor did. What a Log cannot
// vouch for (before its first entry, after a snapshot was restored,
// evicted for room, or a change of routing that moved names) is answered
// Reset: the caller drops everything it cached.
//
// The package is pure logic: no I/O, no clock.
package changefeed

import (
	"sync"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Name is a directory entry's key.
type Name struct {
	Parent uint64
	Name   string
}

// Of returns what applying txn changed that a kernel may cache: the names
// it created, replaced or removed (a kernel may hold a name, or its
// absence) and the inodes whose attributes it changed. reset says the Txn
// moved names in ways not listed (routing and migrations): a caller must
// forget everything. Unknown ops reset too, so that an op added later is
// never silently left out.
func Of(txn *metapb.Txn) (names []Name, inodes []uint64, reset bool) {
	for _, op := range txn.GetOps() {
		switch o := op.GetOp().(type) {
		case *metapb.Op_CreateDentry:
			names = append(names, Name{o.CreateDentry.GetParent(), string(o.CreateDentry.GetName())})
		case *metapb.Op_DeleteDentry:
			names = append(names, Name{o.DeleteDentry.GetParent(), string(o.DeleteDentry.GetName())})
		case *metapb.Op_ReplaceDentry:
			names = append(names, Name{o.ReplaceDentry.GetParent(), string(o.ReplaceDentry.GetName())})
		case *metapb.Op_SettleDentry:
			// A rename's new name, settled: kernels held it only through
			// a listing, if at all (lookups of a pending name wait).
			names = append(names, Name{o.SettleDentry.GetParent(), string(o.SettleDentry.GetName())})
		case *metapb.Op_Setattr:
			inodes = append(inodes, o.Setattr.GetIno())
		case *metapb.Op_Link:
			inodes = append(inodes, o.Link.GetIno())
		case *metapb.Op_TouchDir:
			inodes = append(inodes, o.TouchDir.GetIno())
		case *metapb.Op_Evict:
			inodes = append(inodes, o.Evict.GetIno())
		case *metapb.Op_SetXattr:
			inodes = append(inodes, o.SetXattr.GetIno())
		case *metapb.Op_RemoveXattr:
			inodes = append(inodes, o.RemoveXattr.GetIno())
		case *metapb.Op_AppendExtents:
			inodes = append(inodes, o.AppendExtents.GetIno())
		case *metapb.Op_SpliceChunks:
			inodes = append(inodes, o.SpliceChunks.GetIno())
		case *metapb.Op_CreateInode:
			// A new number: no kernel holds it.
		case *metapb.Op_Fence, *metapb.Op_Unfence, *metapb.Op_SetRange, *metapb.Op_AckFreed,
			*metapb.Op_ChunkRefs, *metapb.Op_ChunkCollect, *metapb.Op_ChunkForget, *metapb.Op_ChunkFix:
			// Nothing a kernel caches: namespace locks, the inode range,
			// the free list, the dedup index.
		default:
			// SetRouting, ImportDentries, PurgeDentries (names moving
			// between partitions) and any op this package does not know.
			reset = true
		}
	}
	return names, inodes, reset
}

// record is what one applied Txn changed.
type record struct {
	index  uint64
	origin uint64
	names  []Name
	inodes []uint64
	reset  bool
}

func (r *record) size() int { return 1 + len(r.names) + len(r.inodes) }

// Batch answers Since.
type Batch struct {
	// Cursor is the index the batch covers up to.
	Cursor uint64
	// Reset: the changes after the asked cursor are not all known here;
	// the caller forgets everything.
	Reset  bool
	Names  []Name
	Inodes []uint64
}

// Log is one replica's record of its partition's recent changes. Safe for
// concurrent use.
type Log struct {
	mu    sync.Mutex
	max   int // the most items (records, names, inodes) kept
	size  int
	recs  []record // oldest first
	first uint64   // changes at or below this index may be missing
	last  uint64   // the highest index seen
	// broken: restored from a snapshot; first is set at the next entry.
	broken  bool
	waiters map[chan struct{}]uint64 // channel -> the waiter's origin
}

// DefaultMax bounds a Log (about 1.5 MB of names and numbers): at two
// thousand changes a second it holds eight seconds, far more than a
// watcher's polling interval, and a replica hosting a hundred partitions
// keeps well under 200 MB for all of them.
const DefaultMax = 1 << 14

// NewLog returns an empty log of at most max items (DefaultMax if max <=
// 0) that vouches for every index from 1: a replica that applies its
// partition's whole log from the start.
func NewLog(max int) *Log {
	if max <= 0 {
		max = DefaultMax
	}
	return &Log{max: max, waiters: map[chan struct{}]uint64{}}
}

// Add records what the Txn applied at index by session origin (0: none)
// changed. Indexes come in order; several Txns may share one.
func (l *Log) Add(index, origin uint64, names []Name, inodes []uint64, reset bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advance(index)
	if len(names) == 0 && len(inodes) == 0 && !reset {
		return
	}
	r := record{index: index, origin: origin, names: names, inodes: inodes, reset: reset}
	l.recs = append(l.recs, r)
	l.size += r.size()
	for l.size > l.max && len(l.recs) > 0 {
		old := l.recs[0]
		l.recs[0] = record{}
		l.recs = l.recs[1:]
		l.size -= old.size()
		l.first = max(l.first, old.index)
	}
	for ch, o := range l.waiters {
		if origin == 0 || o == 0 || o != origin || reset {
			close(ch)
			delete(l.waiters, ch)
		}
	}
}

// Advance notes that the entry at index was applied and changed nothing
// a kernel caches.
func (l *Log) Advance(index uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advance(index)
}

func (l *Log) advance(index uint64) {
	if l.broken {
		// The snapshot covered everything before this entry.
		l.broken, l.first = false, index-1
	}
	l.last = max(l.last, index)
}

// Restored forgets everything: the partition's state was replaced by a
// snapshot, whose changes are not known one by one.
func (l *Log) Restored() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.recs)
	l.recs, l.size, l.broken = l.recs[:0], 0, true
	for ch := range l.waiters {
		close(ch)
		delete(l.waiters, ch)
	}
}

// Since returns the changes after cursor made by sessions other than
// origin (all of them when origin is 0), up to the last index seen, at
// most limit names and inodes (more is answered Reset). A cursor is an
// index like any other, 0 too: a new caller, or one answered before
// anything was applied, gets every change since the partition began if
// this Log vouches for them all (the caller has granted nothing yet, or
// its grants were made against index 0), and Reset otherwise. (A new
// caller used to be reset always; then one answered at 0 by an empty Log
// was reset at its next request, after it had granted names, and dropped
// them all for nothing.)
func (l *Log) Since(cursor, origin uint64, limit int) Batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := Batch{Cursor: l.last}
	if l.broken || cursor < l.first || cursor > l.last {
		b.Reset = true
		return b
	}
	seenN := map[Name]struct{}{}
	seenI := map[uint64]struct{}{}
	for i := len(l.recs) - 1; i >= 0 && l.recs[i].index > cursor; i-- {
		r := &l.recs[i]
		if r.reset {
			return Batch{Cursor: l.last, Reset: true}
		}
		if origin != 0 && r.origin == origin {
			continue
		}
		for _, n := range r.names {
			if _, ok := seenN[n]; !ok {
				seenN[n] = struct{}{}
				b.Names = append(b.Names, n)
			}
		}
		for _, ino := range r.inodes {
			if _, ok := seenI[ino]; !ok {
				seenI[ino] = struct{}{}
				b.Inodes = append(b.Inodes, ino)
			}
		}
		if len(b.Names)+len(b.Inodes) > limit {
			return Batch{Cursor: l.last, Reset: true}
		}
	}
	return b
}

// Wait returns a channel closed at the next change a caller of session
// origin would be told of (or a reset), and a function that stops waiting.
func (l *Log) Wait(origin uint64) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	l.mu.Lock()
	l.waiters[ch] = origin
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.waiters, ch)
		l.mu.Unlock()
	}
}
