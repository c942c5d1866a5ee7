package nsreplica

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cairnfs/cairn/pkg/perm"
)

// DefaultMaxEntries is the capacity New uses when given maxEntries <= 0:
// 4 million directories, about 325 MB with names of up to 16 bytes (81 bytes
// per directory measured by BenchmarkMemoryPerDirectory).
const DefaultMaxEntries = 4_000_000

// RootParent and RootName are the key under which the root directory's own
// entry is held: no directory has inode 0, so the key cannot clash with a
// real entry.
const (
	RootParent uint64 = 0
	RootName          = ""
)

// maxCapacity keeps record indexes, plus one for the empty slot marker, within
// the low bits of a uint32 table slot with at least one tag bit to spare.
const maxCapacity = 1 << 30

// Entry is what the replica keeps of one directory: enough for path
// resolution and permission checks, and no other attributes, so that entries
// stay small and need invalidating only when these fields change.
type Entry struct {
	Ino      uint64
	Mode     uint32 // includes the S_IFDIR type bits
	Uid, Gid uint32
}

// Stats is a snapshot of a replica's counters. Counters only grow (Clear does
// not reset them); Entries and Bytes describe the current content.
type Stats struct {
	Entries int   // directories held
	Bytes   int64 // estimated heap bytes held by the entries and their indexes

	Hits          uint64 // Get calls and Walk components answered from the replica
	Misses        uint64 // Get calls and Walk calls that stopped at a missing entry
	Puts          uint64 // Put calls that stored their entry
	Refused       uint64 // Put calls refused because their generation was stale
	Invalidations uint64 // Invalidate calls, whether or not the inode was held
	Evictions     uint64 // entries dropped to make room for a Put
}

// Layout. The obvious design, a map[string]value keyed by parent+name plus a
// map[uint64]string reverse index, measured 120-180 bytes per directory with
// Go 1.26 maps, swinging with the maps' load factor, which also made its
// memory impossible to estimate from counts. Instead records live densely in
// fixed-size chunks (48 bytes each, no over-allocation beyond one chunk and no
// large copy on growth), and two open-addressing tables of uint32 slots
// index them by (parent, name) and by inode. A slot holds the record index
// plus one (zero marks an empty slot) in its low idxBits bits and the top bits
// of the key's hash above them, so probing skips foreign keys without touching
// their records. Deletion shifts entries back (no tombstones), and records are
// kept dense by moving the last record into the hole.
const (
	chunkShift   = 10
	chunkLen     = 1 << chunkShift
	recordSize   = 48 // unsafe.Sizeof(record{}), checked by a test
	minTableLen  = 16
	sliceHdrSize = 24
	replicaSize  = 256 // the Replica struct itself, rounded up generously
)

type record struct {
	parent uint64
	ino    uint64
	name   string // a private copy, so that a caller's path buffer is not retained
	mode   uint32
	uid    uint32
	gid    uint32
	khash  uint32 // keyHash(parent, name), kept to rehash and unslot without rehashing names
}

// Replica is a size-bounded cache of directory entries keyed by (parent inode,
// name). It is safe for concurrent use: lookups share a read lock, and changes
// take the write lock.
type Replica struct {
	seed maphash.Seed
	max  int

	mu        sync.RWMutex
	chunks    []*[chunkLen]record
	n         int      // records in use: chunks hold records [0, n)
	byKey     []uint32 // power-of-two length
	byIno     []uint32 // same length as byKey
	idxBits   uint
	idxMask   uint32
	nameBytes int64 // allocation size of every record's name
	// byDir holds directories learned without their name (from the
	// directory's inode): ParentOf and Dir answer from the entries first,
	// then from here. At most max; cleared when full.
	byDir map[uint64]dirRec

	gen          atomic.Uint64
	hits, misses atomic.Uint64

	// Written under mu held for writing.
	puts, refused, invalidations, evictions uint64
}

// New returns an empty replica that holds at most maxEntries directories;
// maxEntries <= 0 means DefaultMaxEntries, and values above 1<<30 are lowered
// to 1<<30.
func New(maxEntries int) *Replica {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	maxEntries = min(maxEntries, maxCapacity)
	r := &Replica{seed: maphash.MakeSeed(), max: maxEntries}
	// Indexes go up to max-1, stored plus one, so max itself must fit.
	r.idxBits = uint(bits.Len(uint(maxEntries)))
	r.idxMask = 1<<r.idxBits - 1
	r.resetTables()
	return r
}

func (r *Replica) resetTables() {
	r.byKey = make([]uint32, minTableLen)
	r.byIno = make([]uint32, minTableLen)
}

// Gen returns the replica's generation. Every Invalidate and Clear increases
// it; Put stores an entry only if the generation has not changed since the
// caller read it, before starting the lookup that produced the entry.
func (r *Replica) Gen() uint64 { return r.gen.Load() }

// Get returns the entry of directory name in directory parent, if the replica
// holds it. The root directory's own entry is held under RootParent and
// RootName.
func (r *Replica) Get(parent uint64, name string) (Entry, bool) {
	h := r.keyHash(parent, name)
	r.mu.RLock()
	idx, ok := r.findKey(parent, name, h)
	var e Entry
	if ok {
		e = r.rec(idx).entry()
	}
	r.mu.RUnlock()
	if ok {
		r.hits.Add(1)
	} else {
		r.misses.Add(1)
	}
	return e, ok
}

// Put stores e as the entry of directory name in directory parent and reports
// whether it did. It refuses, storing nothing, when gen is not the current
// generation: an Invalidate or Clear since the caller read Gen may have been
// about this very entry, and the caller's lookup may predate it.
//
// A stored entry replaces whatever the replica held under the same name, and
// any entry with the same inode under another name, since a directory has
// exactly one name. When the replica is full, Put first evicts an arbitrary
// entry. Only directories should be put: Walk treats every entry as one.
func (r *Replica) Put(parent uint64, name string, e Entry, gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen.Load() {
		r.refused++
		return false
	}
	h := r.keyHash(parent, name)
	if idx, ok := r.findKey(parent, name, h); ok {
		rec := r.rec(idx)
		if rec.ino == e.Ino {
			rec.mode, rec.uid, rec.gid = e.Mode, e.Uid, e.Gid
			r.puts++
			return true
		}
		r.remove(idx)
	}
	if idx, ok := r.findIno(e.Ino); ok {
		r.remove(idx)
	}
	if r.n >= r.max {
		r.remove(uint32(rand.IntN(r.n)))
		r.evictions++
	}
	r.insert(parent, strings.Clone(name), e, h)
	r.puts++
	return true
}

// dirRec is a directory known by its inode alone.
type dirRec struct {
	parent uint64
	e      Entry
}

// ParentOf returns the parent of directory ino, if the replica knows it:
// from ino's entry, or from PutDir.
func (r *Replica) ParentOf(ino uint64) (uint64, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if idx, ok := r.findIno(ino); ok {
		return r.rec(idx).parent, true
	}
	d, ok := r.byDir[ino]
	return d.parent, ok
}

// Dir returns the entry of directory ino (its mode and owner), if the
// replica knows it: from ino's entry, or from PutDir.
func (r *Replica) Dir(ino uint64) (Entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if idx, ok := r.findIno(ino); ok {
		rec := r.rec(idx)
		return Entry{Ino: rec.ino, Mode: rec.mode, Uid: rec.uid, Gid: rec.gid}, true
	}
	d, ok := r.byDir[ino]
	return d.e, ok
}

// PutDir records directory e, whose parent is parent, as read from its
// inode, under the same rule as Put: refused (false) when gen is not the
// current generation.
func (r *Replica) PutDir(e Entry, parent uint64, gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen.Load() {
		r.refused++
		return false
	}
	if r.byDir == nil || len(r.byDir) >= r.max {
		r.byDir = map[uint64]dirRec{}
	}
	r.byDir[e.Ino] = dirRec{parent: parent, e: e}
	return true
}

// Invalidate drops the entry of directory ino, if held, and increases the
// generation so that lookups started before it cannot be Put. It is called
// when a fence on ino is applied (rmdir, directory rename, chmod or chown of
// a directory), whether or not the replica holds ino.
func (r *Replica) Invalidate(ino uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if idx, ok := r.findIno(ino); ok {
		r.remove(idx)
	}
	delete(r.byDir, ino)
	r.invalidations++
	r.gen.Add(1)
}

// Clear drops every entry and increases the generation, as Invalidate does for
// one. It is meant for a snapshot restore, after which any entry may be stale.
// It releases the entries' memory.
func (r *Replica) Clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chunks = nil
	r.n = 0
	r.nameBytes = 0
	r.byDir = nil
	r.resetTables()
	r.gen.Add(1)
}

// Stats returns the replica's current size and counters.
func (r *Replica) Stats() Stats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return Stats{
		Entries:       r.n,
		Bytes:         r.bytes(),
		Hits:          r.hits.Load(),
		Misses:        r.misses.Load(),
		Puts:          r.puts,
		Refused:       r.refused,
		Invalidations: r.invalidations,
		Evictions:     r.evictions,
	}
}

// bytes estimates the heap the replica holds from its allocation sizes; every
// term is exact except the names, which are rounded to Go's size classes.
func (r *Replica) bytes() int64 {
	return replicaSize +
		int64(cap(r.chunks))*8 +
		int64(len(r.chunks))*chunkLen*recordSize +
		int64(len(r.byKey)+len(r.byIno))*4 +
		r.nameBytes
}

// allocSize is the heap size of a name of n bytes: Go's size classes, which
// are 8-byte steps up to 32 bytes and 16-byte steps up to 256, cover every
// name up to MaxName. Names under 16 bytes go to the tiny allocator, which
// packs two 8-byte names into one 16-byte block but gives a 9- to 15-byte
// name a block of its own, so the classes are right for them too.
func allocSize(n int) int64 {
	switch {
	case n == 0:
		return 0
	case n <= 32:
		return int64(n+7) &^ 7
	case n <= 256:
		return int64(n+15) &^ 15
	default:
		return int64(n+31) &^ 31
	}
}

// Walk resolves dirs, a path's directory components with "." removed and ".."
// kept, starting at root. It returns the directories passed, stack[0] being
// root, and next, the index of the first component the replica does not hold
// (len(dirs) when every component resolved).
//
// Before looking up any component in a directory, ".." included, Walk checks
// that cred may search (Exec) that directory and fails with EACCES otherwise,
// with stack ending at that directory and next at the component, which is
// where Linux fails. ".." pops the stack, and stays at root when the stack
// holds only root: root is the top of the volume.
//
// Walk does no I/O. On a miss the caller fetches the entry of dirs[next] in
// stack[len(stack)-1].Ino from its owner, Puts it if it is a directory and
// calls Walk again. Walk counts a hit per component found in the replica and
// a miss when it stops at a missing one; ".." consults no entry and counts
// neither.
func (r *Replica) Walk(root Entry, dirs []string, cred perm.Cred) (stack []Entry, next int, err syscall.Errno) {
	stack = make([]Entry, 1, len(dirs)+1)
	stack[0] = root
	hits := uint64(0)
	defer func() { r.hits.Add(hits) }()

	r.mu.RLock()
	defer r.mu.RUnlock()
	for i, name := range dirs {
		cur := stack[len(stack)-1]
		if !perm.Allowed(cred, cur.Mode, cur.Uid, cur.Gid, perm.Exec) {
			return stack, i, syscall.EACCES
		}
		switch name {
		case ".":
			continue
		case "..":
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		idx, ok := r.findKey(cur.Ino, name, r.keyHash(cur.Ino, name))
		if !ok {
			r.misses.Add(1)
			return stack, i, 0
		}
		hits++
		stack = append(stack, r.rec(idx).entry())
	}
	return stack, len(dirs), 0
}

func (rec *record) entry() Entry {
	return Entry{Ino: rec.ino, Mode: rec.mode, Uid: rec.uid, Gid: rec.gid}
}

func (r *Replica) rec(idx uint32) *record {
	return &r.chunks[idx>>chunkShift][idx&(chunkLen-1)]
}

// mix64 is a strong 64-bit finalizer (the one of SplitMix64): inode numbers
// are often sequential, and linear probing needs them spread.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// keyHash is seeded per replica because names are chosen by users, who could
// otherwise build colliding names to make probing slow.
func (r *Replica) keyHash(parent uint64, name string) uint32 {
	return fold(mix64(maphash.String(r.seed, name) ^ parent))
}

func inoHash(ino uint64) uint32 { return fold(mix64(ino)) }

func fold(h uint64) uint32 { return uint32(h) ^ uint32(h>>32) }

// The home slot of a hash comes from its low bits and its tag from its high
// bits, so the two are independent as long as the table has at most
// 2^idxBits slots; a larger table only weakens the tag.
func (r *Replica) tag(h uint32) uint32 { return h &^ r.idxMask }

func (r *Replica) findKey(parent uint64, name string, h uint32) (uint32, bool) {
	mask := len(r.byKey) - 1
	tag := r.tag(h)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := r.byKey[i]
		if s == 0 {
			return 0, false
		}
		if s&^r.idxMask != tag {
			continue
		}
		idx := s&r.idxMask - 1
		if rec := r.rec(idx); rec.parent == parent && rec.name == name {
			return idx, true
		}
	}
}

func (r *Replica) findIno(ino uint64) (uint32, bool) {
	h := inoHash(ino)
	mask := len(r.byIno) - 1
	tag := r.tag(h)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := r.byIno[i]
		if s == 0 {
			return 0, false
		}
		if s&^r.idxMask != tag {
			continue
		}
		idx := s&r.idxMask - 1
		if r.rec(idx).ino == ino {
			return idx, true
		}
	}
}

// slotOf returns where table t holds record idx, whose hash in t is h.
func (r *Replica) slotOf(t []uint32, h, idx uint32) int {
	mask := len(t) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		if t[i]&r.idxMask == idx+1 {
			return i
		}
	}
}

func (r *Replica) keyHome(s uint32) uint32 { return r.rec(s&r.idxMask - 1).khash }
func (r *Replica) inoHome(s uint32) uint32 { return inoHash(r.rec(s&r.idxMask - 1).ino) }

// place puts slot value s into the first free slot of its probe sequence.
func place(t []uint32, h, s uint32) {
	mask := len(t) - 1
	i := int(h) & mask
	for t[i] != 0 {
		i = (i + 1) & mask
	}
	t[i] = s
}

// unslot empties slot i of t and moves later entries of the same cluster back
// into the hole when their probe sequence passes it, so that every entry stays
// reachable from its home slot without tombstones.
func unslot(t []uint32, i int, home func(uint32) uint32) {
	mask := len(t) - 1
	for j := (i + 1) & mask; t[j] != 0; j = (j + 1) & mask {
		k := int(home(t[j])) & mask
		// The entry at j may fill the hole at i only if i lies on its probe
		// sequence from k to j, that is if k is not cyclically in (i, j].
		var stays bool
		if i < j {
			stays = i < k && k <= j
		} else {
			stays = i < k || k <= j
		}
		if !stays {
			t[i] = t[j]
			i = j
		}
	}
	t[i] = 0
}

func (r *Replica) insert(parent uint64, name string, e Entry, h uint32) {
	if (r.n+1)*4 > len(r.byKey)*3 {
		r.grow()
	}
	idx := uint32(r.n)
	if int(idx>>chunkShift) == len(r.chunks) {
		r.chunks = append(r.chunks, new([chunkLen]record))
	}
	*r.rec(idx) = record{parent: parent, ino: e.Ino, name: name, mode: e.Mode, uid: e.Uid, gid: e.Gid, khash: h}
	r.n++
	r.nameBytes += allocSize(len(name))
	place(r.byKey, h, r.tag(h)|(idx+1))
	ih := inoHash(e.Ino)
	place(r.byIno, ih, r.tag(ih)|(idx+1))
}

// grow doubles both tables, keeping the load at most 3/4 so that a miss
// probes a few slots on average.
func (r *Replica) grow() {
	oldKey, oldIno := r.byKey, r.byIno
	r.byKey = make([]uint32, 2*len(oldKey))
	r.byIno = make([]uint32, 2*len(oldIno))
	for _, s := range oldKey {
		if s != 0 {
			place(r.byKey, r.keyHome(s), s)
		}
	}
	for _, s := range oldIno {
		if s != 0 {
			place(r.byIno, r.inoHome(s), s)
		}
	}
}

// remove drops record idx and moves the last record into its place, so that
// records stay dense and eviction can pick any index below n.
func (r *Replica) remove(idx uint32) {
	rec := r.rec(idx)
	unslot(r.byKey, r.slotOf(r.byKey, rec.khash, idx), r.keyHome)
	unslot(r.byIno, r.slotOf(r.byIno, inoHash(rec.ino), idx), r.inoHome)
	r.nameBytes -= allocSize(len(rec.name))

	last := uint32(r.n - 1)
	if idx != last {
		moved := r.rec(last)
		ks := r.slotOf(r.byKey, moved.khash, last)
		r.byKey[ks] = r.byKey[ks]&^r.idxMask | (idx + 1)
		is := r.slotOf(r.byIno, inoHash(moved.ino), last)
		r.byIno[is] = r.byIno[is]&^r.idxMask | (idx + 1)
		*rec = *moved
	}
	// Zeroing releases the name for the garbage collector.
	*r.rec(last) = record{}
	r.n--

	// Free trailing chunks, keeping one spare so that a replica hovering at a
	// chunk boundary does not allocate and free a chunk on every Put.
	for len(r.chunks) > 1 && (len(r.chunks)-2)*chunkLen >= r.n {
		r.chunks[len(r.chunks)-1] = nil
		r.chunks = r.chunks[:len(r.chunks)-1]
	}
}
