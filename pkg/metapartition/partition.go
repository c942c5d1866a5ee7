package metapartition

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/recent"
	"github.com/tidwall/btree"
	"google.golang.org/protobuf/proto"
)

// Partition is the replicated state of one meta partition: its inodes,
// its dentries, its inode range, fences, the free list, the TouchDir and
// request histories, the dentry routing, and its shard of the volume's
// chunk index with the drop watermarks, plus indexes derived from them
// (orphans, name counts, chunk collection candidates, memory estimate).
//
// Concurrency: Partition has no locks. Apply, ApplyBatch, Restore and Clone
// change it and must not run concurrently with anything else on the same
// Partition. The query methods only read; they may run concurrently with
// each other, never with a change. The multi-raft host calls Apply, Snapshot
// and Restore one at a time; the meta node service must serialize its
// queries with them (e.g. an RWMutex: Apply under the write lock, queries
// under the read lock). A Frozen returned by Clone is independent: its
// WriteTo may run while the Partition keeps applying.
type Partition struct {
	start   uint64 // first inode number of the range
	end     uint64 // last inode number, 0 = open-ended
	maxIno  uint64 // highest allocated inode number, start-1 before the first
	freeSeq uint64 // sequence number of the next free-list entry (0: 1, see txn.nextSeq)

	inodes   *btree.BTreeG[*inode]
	dentries *btree.BTreeG[dentry]
	fences   *btree.Map[uint64, fenceRec] // parent -> token, time set
	free     *btree.BTreeG[FreedExtent]   // by Seq
	touched  recent.Map[opKey, struct{}]  // the last TouchHistory (ino, op_id) pairs
	requests reqRing
	routing  *routing                     // nil: never got SetRouting, accepts every name
	chunks   *btree.BTreeG[chunkEntry]    // chunk index entries by fingerprint (chunks.go)
	marks    *btree.Map[uint64, uint64]   // source partition -> highest drop_seq applied
	nsEpoch  uint64                       // fences applied so far (Txn.ns_epoch)
	quota    *btree.Map[uint64, QuotaUse] // quota id -> what this partition's inodes add (quota.go)

	// Derived from the above, rebuilt by Restore, never serialized.
	orphans *btree.Set[uint64]     // inodes with nlink 0
	names   map[uint64]uint32      // nameHash(name) -> number of dentries with that name
	hot     *btree.BTreeG[nameN]   // names with count >= 2, most frequent first
	mem     int64                  // estimated bytes of inodes and dentries (see memory.go)
	pending map[dentryKey]struct{} // dentries with a pending rename's mark
	cidx    chunkDerived           // collection candidates, dead entries, byte sums (chunks.go)

	// onFence is told every directory a new fence or lock covers, at
	// apply, so a namespace replica kept beside the partition forgets it.
	onFence func(ino uint64)
	// onApplied is told every Txn Apply applied, with its result.
	onApplied func(index uint64, txn *metapb.Txn, res *metapb.TxnResult)

	probe   inode // lookup key for Apply's inode lookups (Apply is serial)
	scratch txn   // reused by Apply, one Txn at a time
}

// FreedExtent is an entry of the free list, in one of two forms.
//
// An extent range (Fingerprint zero) is a physical range no file refers to
// any more (cut by a truncate, overwritten by a later write, or left by an
// evicted inode), waiting for the data node to punch it out.
//
// A chunk drop (Fingerprint non-zero) is one reference of a chunked file's
// layout to a chunk, given up by a SpliceChunks, a truncate or an Evict
// that committed here. Its bytes are not freed by this partition: the
// reference is given back to the chunk index (a ChunkRefs with delta -1 and
// drop_seq = Seq on the fingerprint's shard), which frees the chunk when no
// reference is left. Location and Size are the chunk's, as the layout
// named it.
//
// Both forms share one Seq numbering, which orders the list and is what
// AckFreed names: an entry leaves the list only when the collector has
// finished with it and every entry before it. Seqs start at 1 (a chunk
// drop's Seq is its ChunkRef.drop_seq, and drop_seq 0 means "not a drop").
type FreedExtent struct {
	Seq          uint64
	Ino          uint64 // the inode that referred to it
	PartitionID  uint64
	ExtentID     uint64
	ExtentOffset uint64
	Size         uint64
	// Fingerprint is the dropped chunk's fingerprint, zero for an extent
	// range (no valid fingerprint is zero: algorithm 0 is invalid).
	Fingerprint chunker.Fingerprint
}

// IsChunkDrop reports whether f is a chunk drop rather than an extent range.
func (f FreedExtent) IsChunkDrop() bool { return !f.Fingerprint.IsZero() }

// Chunk returns a chunk drop's chunk (fingerprint and location), as the
// ChunkRef that gives its reference back names it.
func (f FreedExtent) Chunk() *metapb.Chunk {
	return &metapb.Chunk{
		Fingerprint: append([]byte(nil), f.Fingerprint[:]...), Size: uint32(f.Size),
		PartitionId: f.PartitionID, ExtentId: f.ExtentID, ExtentOffset: f.ExtentOffset,
	}
}

// Fence is a parent directory closed for new dentries until Unfence.
type Fence struct {
	Parent uint64
	Token  uint64
	Lock   bool  // a namespace lock (Fence.lock): refuses no names
	SetNs  int64 // apply time it was set; it lapses FenceTTL later
}

// NameCount is a dentry name and how many dentries of this partition carry it.
type NameCount struct {
	Name  string
	Count int
}

// Stats summarizes a partition for the master (load balancer, growth).
type Stats struct {
	Inodes      int
	Dentries    int
	Orphans     int
	Fences      int
	FreeExtents int
	// TopNames are the most frequent dentry names, most frequent first, ties
	// by name; at most the k asked for, none of the counted names.
	TopNames []NameCount
	// NamedCounts are the counts of the names asked for, in the order asked
	// (0 for a name no dentry has).
	NamedCounts []NameCount
	// RoutingVersion and RoutingMoving are RoutingState's answer.
	RoutingVersion uint64
	RoutingMoving  bool
	// InodeStart and InodeEnd are the inode range (end 0: open); MaxIno the
	// highest number allocated.
	InodeStart, InodeEnd, MaxIno uint64
	// MemoryBytes estimates the memory the state takes (see memory.go for
	// what it counts).
	MemoryBytes uint64
}

type nameN struct {
	n    int
	name string
}

func nameNLess(a, b nameN) bool {
	if a.n != b.n {
		return a.n > b.n
	}
	return a.name < b.name
}

type opKey struct{ ino, op uint64 }

// reqRing remembers the results of the last successful Txns by request
// id, oldest first: at most RequestHistory of them, and at most
// RequestHistoryBytes of results, the oldest forgotten first. Results are
// kept marshalled (deterministic protobuf, a few hundred bytes each, up to
// a few hundred KiB for a ChunkRefs of many items), which is also their
// snapshot form. Remembered entries are buf[head:]; the slice is compacted
// when half of it is forgotten entries.
type reqRing struct {
	buf   []reqEntry
	head  int
	bytes int // sum of len(res) over the remembered entries
	set   map[uint64][]byte
}

type reqEntry struct {
	id  uint64
	res []byte // marshalled metapb.TxnResult, immutable
}

var resultMarshal = proto.MarshalOptions{Deterministic: true}

// get returns the remembered result of id, decoded afresh.
func (r *reqRing) get(id uint64) (*metapb.TxnResult, bool) {
	b, ok := r.set[id]
	if !ok {
		return nil, false
	}
	res := new(metapb.TxnResult)
	if err := proto.Unmarshal(b, res); err != nil {
		// Cannot happen: push marshalled it and Restore checked it.
		return &metapb.TxnResult{Errno: int32(metapb.EIO), Message: fmt.Sprintf("remembered result of request %d: %v", id, err)}, true
	}
	return res, true
}

func (r *reqRing) has(id uint64) bool { _, ok := r.set[id]; return ok }

// push remembers res under id; a result that does not marshal is not
// remembered (the retry then applies again, as without an id).
func (r *reqRing) push(id uint64, res *metapb.TxnResult) {
	b, err := resultMarshal.Marshal(res)
	if err != nil {
		return
	}
	r.pushBytes(id, b)
}

// pushBytes remembers the marshalled result b under id (not remembered
// yet), then forgets the oldest entries until both bounds hold. A result
// larger than RequestHistoryBytes alone is not remembered.
func (r *reqRing) pushBytes(id uint64, b []byte) {
	if len(b) > RequestHistoryBytes {
		return
	}
	if r.set == nil {
		r.set = make(map[uint64][]byte)
	}
	r.buf = append(r.buf, reqEntry{id: id, res: b})
	r.set[id] = b
	r.bytes += len(b)
	for len(r.buf)-r.head > RequestHistory || r.bytes > RequestHistoryBytes {
		old := r.buf[r.head]
		r.buf[r.head] = reqEntry{}
		r.head++
		delete(r.set, old.id)
		r.bytes -= len(old.res)
	}
	if r.head >= 1024 && 2*r.head >= len(r.buf) {
		n := copy(r.buf, r.buf[r.head:])
		clear(r.buf[n:])
		r.buf, r.head = r.buf[:n], 0
	}
}

// live returns the remembered entries oldest first (shared, not to be
// modified).
func (r *reqRing) live() []reqEntry { return r.buf[r.head:] }

// ordered returns the remembered entries oldest first, in a new slice.
func (r *reqRing) ordered() []reqEntry { return slices.Clone(r.live()) }

var treeOpts = btree.Options{NoLocks: true}

func inodeLess(a, b *inode) bool { return a.ino < b.ino }

func freedLess(a, b FreedExtent) bool { return a.Seq < b.Seq }

// New returns an empty partition owning inode numbers [start, end]; end 0
// means the range is open. start must be at least 1 (0 is "no inode" in
// every message) and end, if set, at least start.
func New(start, end uint64) (*Partition, error) {
	if start == 0 {
		return nil, fmt.Errorf("metapartition: inode range start must be >= 1")
	}
	if end != 0 && end < start {
		return nil, fmt.Errorf("metapartition: inode range [%d, %d] is empty", start, end)
	}
	p := newEmpty()
	p.start, p.end, p.maxIno = start, end, start-1
	return p, nil
}

func newEmpty() *Partition {
	return &Partition{
		inodes:   btree.NewBTreeGOptions(inodeLess, treeOpts),
		dentries: btree.NewBTreeGOptions(dentryLess, treeOpts),
		fences:   new(btree.Map[uint64, fenceRec]),
		free:     btree.NewBTreeGOptions(freedLess, treeOpts),
		orphans:  new(btree.Set[uint64]),
		names:    make(map[uint64]uint32),
		hot:      btree.NewBTreeGOptions(nameNLess, treeOpts),
		chunks:   btree.NewBTreeGOptions(chunkEntryLess, treeOpts),
		marks:    new(btree.Map[uint64, uint64]),
		quota:    new(btree.Map[uint64, QuotaUse]),
		cidx:     newChunkDerived(),
		pending:  make(map[dentryKey]struct{}),
		touched:  recent.Map[opKey, struct{}]{Limit: TouchHistory},
	}
}

// getInode is Apply's lookup; it reuses p.probe and so is not for queries.
func (p *Partition) getInode(ino uint64) *inode {
	p.probe.ino = ino
	in, _ := p.inodes.Get(&p.probe)
	return in
}

// lookupInode is the queries' lookup: it allocates its own key so that
// queries can run concurrently with each other.
func (p *Partition) lookupInode(ino uint64) *inode {
	in, _ := p.inodes.Get(&inode{ino: ino})
	return in
}

// nameHash is FNV-1a. Name counts are keyed by it rather than by the name:
// a map[uint64]uint32 slot is 16 bytes against 24 for a string key, which
// is about 20 bytes per file at a million distinct names. Two names with
// the same 64-bit hash would share a count (odds about n²/2^65, 3e-8 at a
// million names); counts only feed Stats, never the replicated state.
func nameHash(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

func (p *Partition) nameInc(name string) {
	h := nameHash(name)
	n := int(p.names[h]) + 1
	p.names[h] = uint32(n)
	if n >= 3 {
		p.hot.Delete(nameN{n - 1, name})
	}
	if n >= 2 {
		p.hot.Set(nameN{n, name})
	}
}

func (p *Partition) nameDec(name string) {
	h := nameHash(name)
	n := int(p.names[h])
	if n <= 1 {
		delete(p.names, h)
		return
	}
	p.names[h] = uint32(n - 1)
	p.hot.Delete(nameN{n, name})
	if n-1 >= 2 {
		p.hot.Set(nameN{n - 1, name})
	}
}

// ---- Queries. Read-only; see the concurrency note on Partition. ----

// Range returns the inode range [start, end]; end 0 means open.
func (p *Partition) Range() (start, end uint64) { return p.start, p.end }

// MaxIno returns the highest inode number allocated so far (start-1 if
// none). The master cuts the range above it (CFS Algorithm 1).
func (p *Partition) MaxIno() uint64 { return p.maxIno }

// Lookup returns the dentry (parent, name) and, if its inode lives on this
// partition, the inode with extents and xattrs. The inode is nil when its
// home is another partition (the service fetches it there). It fails with
// ENAMETOOLONG or EINVAL for a name no dentry can have, EWRONGMP or EMOVING
// when the routing does not let this partition answer for the name (see
// docs/routing.md) or while the name is a rename's pending new name, and
// ENOENT when the name does not exist. Fences do not affect lookups.
func (p *Partition) Lookup(parent uint64, name string) (*metapb.Dentry, *metapb.Inode, metapb.Errno) {
	d, in, e := p.LookupPending(parent, name)
	if d.GetPending() != nil {
		// A rename's new name, placed ahead of its commit: whether it
		// is there yet is its rename's to say. Asked again once settled
		// or taken back.
		return nil, nil, metapb.EMOVING
	}
	return d, in, e
}

// LookupPending is Lookup that answers a rename's pending new name as it is,
// with its mark (metapb.Dentry.pending), instead of EMOVING.
func (p *Partition) LookupPending(parent uint64, name string) (*metapb.Dentry, *metapb.Inode, metapb.Errno) {
	if e, _ := checkName(name); e != metapb.OK {
		return nil, nil, e
	}
	if e := p.routing.check(parent, name, false); e != metapb.OK {
		return nil, nil, e
	}
	d, ok := p.dentries.Get(dentry{parent: parent, name: name})
	if !ok {
		return nil, nil, metapb.ENOENT
	}
	var pin *metapb.Inode
	if in := p.lookupInode(d.ino); in != nil {
		pin = in.toProto(true)
	}
	return d.toProto(), pin, metapb.OK
}

// GetInode returns the inode ino with its extents and xattrs, or ENOENT if
// this partition does not hold it (evicted, never allocated, or homed on
// another partition).
func (p *Partition) GetInode(ino uint64) (*metapb.Inode, metapb.Errno) {
	in := p.lookupInode(ino)
	if in == nil {
		return nil, metapb.ENOENT
	}
	return in.toProto(true), metapb.OK
}

// ReadDir returns up to limit dentries of parent held by this partition
// whose names sort after afterName (byte order), sorted by name. Pass ""
// to start and the last name returned to resume: the cursor stays valid
// across concurrent changes (names created behind it are not returned,
// removed ones are skipped). limit <= 0 returns nothing. The service merges
// the partitions' answers by name.
//
// With a routing, it lists only the names the partition owns under the
// previous routing while a change is in progress, and under the current one
// otherwise, so that the partitions' listings never overlap or miss a name
// (with the version and moving flag of RoutingState to tell the client
// which routing it merged). Names it holds but does not list are skipped.
func (p *Partition) ReadDir(parent uint64, afterName string, limit int) []*metapb.Dentry {
	if limit <= 0 {
		return nil
	}
	var out []*metapb.Dentry
	p.dentries.Ascend(dentry{parent: parent, name: afterName}, func(d dentry) bool {
		if d.parent != parent {
			return false
		}
		if d.name == afterName || !p.routing.listed(d.parent, d.name) {
			return true
		}
		out = append(out, d.toProto())
		return len(out) < limit
	})
	return out
}

// CountChildren returns how many dentries under parent this partition
// lists (those ReadDir returns), in O(children). The rmdir coordinator sums
// it over all partitions after fencing parent; counting only listed names
// keeps a copy left for a migration to purge from counting twice.
func (p *Partition) CountChildren(parent uint64) int {
	n := 0
	p.dentries.Ascend(dentry{parent: parent}, func(d dentry) bool {
		if d.parent != parent {
			return false
		}
		if p.routing.listed(d.parent, d.name) {
			n++
		}
		return true
	})
	return n
}

// HasChildren reports whether this partition lists any dentry under parent
// (as CountChildren counts them): O(log n) unless it holds names of parent
// it does not list.
func (p *Partition) HasChildren(parent uint64) bool {
	has := false
	p.dentries.Ascend(dentry{parent: parent}, func(d dentry) bool {
		if d.parent != parent {
			return false
		}
		has = p.routing.listed(d.parent, d.name)
		return !has
	})
	return has
}

// ListXattr returns the names of ino's xattrs, sorted, or ENOENT.
func (p *Partition) ListXattr(ino uint64) ([]string, metapb.Errno) {
	in := p.lookupInode(ino)
	if in == nil {
		return nil, metapb.ENOENT
	}
	xs := in.xattrs()
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.name
	}
	return out, metapb.OK
}

// GetXattr returns a copy of the value of ino's xattr name: ENOENT if the
// inode is not here, ENODATA if it has no such xattr.
func (p *Partition) GetXattr(ino uint64, name string) ([]byte, metapb.Errno) {
	in := p.lookupInode(ino)
	if in == nil {
		return nil, metapb.ENOENT
	}
	xs := in.xattrs()
	i, ok := xattrIndex(xs, name)
	if !ok {
		return nil, metapb.ENODATA
	}
	return append([]byte{}, xs[i].value...), metapb.OK
}

// Orphans returns the inodes with no links, sorted: files unlinked while
// open, or left behind by an interrupted cross-partition operation. They
// stay readable until Evict; a sweeper evicts those that no client holds
// open (CFS §2.6).
func (p *Partition) Orphans() []uint64 {
	out := make([]uint64, 0, p.orphans.Len())
	p.orphans.Scan(func(ino uint64) bool {
		out = append(out, ino)
		return true
	})
	return out
}

// FreeList returns the free list (extent ranges and chunk drops) in Seq
// order. Entries stay until AckFreed takes them off.
func (p *Partition) FreeList() []FreedExtent {
	return p.FreeListHead(p.free.Len())
}

// FreeListHead returns the first limit entries of the free list in Seq
// order (fewer if the list is shorter; none for limit <= 0), in O(limit):
// what a collector round works on.
func (p *Partition) FreeListHead(limit int) []FreedExtent {
	if limit <= 0 {
		return nil
	}
	out := make([]FreedExtent, 0, min(limit, p.free.Len()))
	p.free.Scan(func(f FreedExtent) bool {
		out = append(out, f)
		return len(out) < limit
	})
	return out
}

// Fences returns the fences in place (expired ones included until they
// are pruned), sorted by parent.
func (p *Partition) Fences() []Fence {
	out := make([]Fence, 0, p.fences.Len())
	p.fences.Scan(func(parent uint64, f fenceRec) bool {
		out = append(out, Fence{Parent: parent, Token: f.token &^ lockBit, Lock: f.token&lockBit != 0, SetNs: f.at})
		return true
	})
	return out
}

// Stats returns counts, the routing state, the inode range, the memory
// estimate, the dentry counts of the names in count, and the k most
// frequent other dentry names (FalconFS's load balancer input: the
// exception-table names are counted, the top names are candidates for new
// entries). Names that occur at least twice are kept sorted by count as
// dentries change, so Stats costs O((k + len(count)) log n) when k names
// repeat; names that occur once fill the list (smallest names first) only
// when fewer than k names repeat, at the cost of a pass over all dentries.
// A count is exact unless two names share a 64-bit hash (see nameHash).
func (p *Partition) Stats(k int, count ...string) Stats {
	s := Stats{
		Inodes:      p.inodes.Len(),
		Dentries:    p.dentries.Len(),
		Orphans:     p.orphans.Len(),
		Fences:      p.fences.Len(),
		FreeExtents: p.free.Len(),
		InodeStart:  p.start,
		InodeEnd:    p.end,
		MaxIno:      p.maxIno,
		MemoryBytes: p.memoryBytes(),
	}
	s.RoutingVersion, s.RoutingMoving = p.RoutingState()
	var counted map[string]bool
	if len(count) > 0 {
		counted = make(map[string]bool, len(count))
		s.NamedCounts = make([]NameCount, len(count))
		for i, name := range count {
			counted[name] = true
			s.NamedCounts[i] = NameCount{Name: name, Count: int(p.names[nameHash(name)])}
		}
	}
	if k <= 0 {
		return s
	}
	p.hot.Scan(func(e nameN) bool {
		if !counted[e.name] {
			s.TopNames = append(s.TopNames, NameCount{Name: e.name, Count: e.n})
		}
		return len(s.TopNames) < k
	})
	if missing := k - len(s.TopNames); missing > 0 {
		// Keep the `missing` smallest names that occur once in a max-heap.
		h := &nameHeap{}
		p.dentries.Scan(func(d dentry) bool {
			if p.names[nameHash(d.name)] != 1 || counted[d.name] {
				return true
			}
			if h.Len() < missing {
				heap.Push(h, d.name)
			} else if d.name < (*h)[0] {
				(*h)[0] = d.name
				heap.Fix(h, 0)
			}
			return true
		})
		ones := []string(*h)
		slices.Sort(ones)
		for _, name := range ones {
			s.TopNames = append(s.TopNames, NameCount{Name: name, Count: 1})
		}
	}
	return s
}

// nameHeap is a max-heap of names.
type nameHeap []string

func (h nameHeap) Len() int           { return len(h) }
func (h nameHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h nameHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nameHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *nameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// lockBit marks a stored fence token as a namespace lock (Fence.lock): it
// invalidates and blocks namespace fetches like a fence but refuses no
// names. Client tokens have it cleared.
const lockBit = 1 << 63

// NsEpoch returns the number of fences and locks applied so far: a path
// resolved at epoch e is still valid while NsEpoch() == e (Txn.ns_epoch).
func (p *Partition) NsEpoch() uint64 { return p.nsEpoch }

// Fenced reports whether a fence or a namespace lock covers directory ino
// at time now (Unix ns): a namespace fetch of it must wait (answer EBUSY)
// until it is lifted or lapses.
func (p *Partition) Fenced(ino uint64, now int64) bool {
	f, ok := p.fences.Get(ino)
	return ok && !f.expired(now)
}

// FenceTTL is how long a fence or namespace lock holds without Unfence. A
// coordinator lifts its fences within one operation's deadline (seconds);
// one that crashed leaves them, and they lapse after FenceTTL instead of
// blocking the directory forever.
const FenceTTL = int64(2 * time.Minute)

// fencePruneAt is the number of fences above which a new fence's commit
// deletes the lapsed ones.
const fencePruneAt = 1024

// fenceRec is a fence in place: its token (lockBit for a namespace lock)
// and the apply time it was set at.
type fenceRec struct {
	token uint64
	at    int64
}

func (f fenceRec) expired(now int64) bool { return now-f.at >= FenceTTL }

// pruneFences deletes the fences lapsed at now.
func (p *Partition) pruneFences(now int64) {
	var lapsed []uint64
	p.fences.Scan(func(parent uint64, f fenceRec) bool {
		if f.expired(now) {
			lapsed = append(lapsed, parent)
		}
		return true
	})
	for _, parent := range lapsed {
		p.fences.Delete(parent)
	}
}

// OnFence sets fn to be called, during Apply, with every directory a newly
// applied fence or namespace lock covers. The hook survives Restore; a
// restored partition's caller must drop its namespace replica itself,
// because the fences applied in the skipped log are not replayed.
func (p *Partition) OnFence(fn func(ino uint64)) { p.onFence = fn }

// OnApplied sets fn to be called by Apply with every Txn of the entry at
// index, after the entry applied, and its result (a refused Txn changed
// nothing; a retry's remembered result changed nothing again). The hook
// survives Restore. ApplyBatch, which has no index, does not call it.
func (p *Partition) OnApplied(fn func(index uint64, txn *metapb.Txn, res *metapb.TxnResult)) {
	p.onApplied = fn
}

// Holds reports whether ino is in the partition's inode range (the
// partition is its home, whether or not it is allocated).
func (p *Partition) Holds(ino uint64) bool {
	return ino >= p.start && (p.end == 0 || ino <= p.end)
}
