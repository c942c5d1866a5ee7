package metapartition

import (
	"bytes"
	"math"
	"strconv"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/tidwall/btree"
)

// Chunked files and the chunk index (VarFS content-defined chunks).
//
// A FILE_LAYOUT_CDC inode's data is the concatenation of its chunk list;
// SpliceChunks replaces a range of it against the layout generation the
// writer read, Setattr SIZE cuts it, Evict drops it. Every chunk a layout
// gives up becomes a chunk drop on the free list (FreedExtent with a
// fingerprint), numbered with the extent frees.
//
// The chunk index is a second, independent part of the state: entries
// keyed by fingerprint holding the chunk's location, reference count, a
// dead flag and the apply time of their last change, plus a watermark per
// source partition of the highest drop_seq applied. A partition holds the
// entries the volume's shard function sends it (clustermap.ChunkShard) and
// checks nothing about which ones those are. Reference rules, collection
// and what a crash can leave are in docs/design.md ("The chunk index").

// Chunk limits.
const (
	// MaxChunksPerInode bounds a chunked file's chunk list (EFBIG beyond).
	// The list is a slice copied on every splice, so this also bounds the
	// cost of one SpliceChunks; at the chunker's default 1 MiB maximum it
	// allows files of 64 GiB and more.
	MaxChunksPerInode = 1 << 16
	// MaxChunksPerOp bounds the chunks of one SpliceChunks and the items of
	// one ChunkRefs, ChunkCollect, ChunkForget or ChunkFix (E2BIG beyond).
	MaxChunksPerOp = 1 << 12
	// MaxChunkRefs is the largest reference count an entry can have: a
	// ChunkRefs or ChunkFix that would go beyond it is EINVAL.
	MaxChunkRefs = math.MaxInt64
	// MaxChunkSources bounds the drop watermarks, one per partition that
	// ever sent drops here; a drop from a new source beyond it is ENOSPC.
	MaxChunkSources = 1 << 16
)

// chunkRef is the compact form of metapb.Chunk: 64 bytes (the fingerprint,
// its size, the location). Stored chunks have a valid fingerprint, size > 0,
// pid != 0 and extOff+size without overflow.
type chunkRef struct {
	fp     chunker.Fingerprint
	size   uint32
	pid    uint64
	eid    uint64
	extOff uint64
}

func (c chunkRef) toProto() *metapb.Chunk {
	return &metapb.Chunk{
		Fingerprint: append([]byte(nil), c.fp[:]...), Size: c.size,
		PartitionId: c.pid, ExtentId: c.eid, ExtentOffset: c.extOff,
	}
}

// sameLocation: the same stored bytes (ChunkForget's "exactly the given
// location").
func (c chunkRef) sameLocation(o chunkRef) bool {
	return c.pid == o.pid && c.eid == o.eid && c.extOff == o.extOff && c.size == o.size
}

// parseFingerprint accepts exactly chunker.FingerprintSize bytes with a
// non-zero algorithm byte. The algorithm is not checked further: a
// partition must keep accepting fingerprints of algorithms added after its
// code was written, and algorithm 0 (chunker.AlgorithmInvalid) is what
// keeps the zero fingerprint free to mean "not a chunk drop".
func parseFingerprint(b []byte) (chunker.Fingerprint, bool) {
	var fp chunker.Fingerprint
	if len(b) != len(fp) || b[0] == byte(chunker.AlgorithmInvalid) {
		return fp, false
	}
	copy(fp[:], b)
	return fp, true
}

// checkChunk validates a chunk given with its location (a layout entry, a
// registration) and returns its compact form, or a message saying what is
// wrong.
func checkChunk(m *metapb.Chunk) (chunkRef, string) {
	fp, ok := parseFingerprint(m.GetFingerprint())
	c := chunkRef{fp: fp, size: m.GetSize(), pid: m.GetPartitionId(), eid: m.GetExtentId(), extOff: m.GetExtentOffset()}
	switch {
	case !ok:
		return c, badFingerprint(m.GetFingerprint())
	case c.size == 0:
		return c, "size 0"
	case c.pid == 0:
		return c, "no location (partition 0)"
	case c.extOff > math.MaxUint64-uint64(c.size):
		return c, "overflows its extent"
	}
	return c, ""
}

func badFingerprint(b []byte) string {
	if len(b) != chunker.FingerprintSize {
		return "fingerprint of " + strconv.Itoa(len(b)) + " bytes, want " + strconv.Itoa(chunker.FingerprintSize)
	}
	return "fingerprint with algorithm 0"
}

// chunkEntry is a chunk index record, stored by value (88 bytes) in the
// index tree, so that it is immutable there like every record.
type chunkEntry struct {
	c     chunkRef // fingerprint (the key), size and location
	refs  uint64
	mtime int64 // apply time of the last change of refs or state
	dead  bool
}

func chunkEntryLess(a, b chunkEntry) bool { return bytes.Compare(a.c.fp[:], b.c.fp[:]) < 0 }

func chunkKey(fp chunker.Fingerprint) chunkEntry { return chunkEntry{c: chunkRef{fp: fp}} }

func (e chunkEntry) record() *metapb.ChunkRecord {
	return &metapb.ChunkRecord{Chunk: e.c.toProto(), Refs: e.refs, Dead: e.dead, MtimeNs: e.mtime}
}

// missingRecord answers for a fingerprint without a live entry:
// partition_id 0, nothing else but the fingerprint.
func missingRecord(fp chunker.Fingerprint) *metapb.ChunkRecord {
	return &metapb.ChunkRecord{Chunk: &metapb.Chunk{Fingerprint: append([]byte(nil), fp[:]...)}}
}

// zeroKey orders the live entries without references by their last change,
// oldest first: the collector's candidates.
type zeroKey struct {
	mtime int64
	fp    chunker.Fingerprint
}

func zeroKeyLess(a, b zeroKey) bool {
	if a.mtime != b.mtime {
		return a.mtime < b.mtime
	}
	return bytes.Compare(a.fp[:], b.fp[:]) < 0
}

func fpLess(a, b chunker.Fingerprint) bool { return bytes.Compare(a[:], b[:]) < 0 }

// chunkDerived is what the queries need beyond the index itself, kept up to
// date by commit and rebuilt by Restore, never serialized.
type chunkDerived struct {
	zero     *btree.BTreeG[zeroKey]             // live entries with refs 0
	dead     *btree.BTreeG[chunker.Fingerprint] // dead entries
	bytes    uint64                             // sum of entry sizes
	refBytes uint64                             // sum of size*refs, modulo 2^64
	drops    int                                // chunk drops on the free list
}

func newChunkDerived() chunkDerived {
	return chunkDerived{
		zero: btree.NewBTreeGOptions(zeroKeyLess, treeOpts),
		dead: btree.NewBTreeGOptions(fpLess, treeOpts),
	}
}

// add and remove account for one entry entering or leaving the index. The
// sums wrap modulo 2^64, so adding and removing stay exact inverses even in
// the (theoretical) case that size*refs overflows.
func (d *chunkDerived) add(e chunkEntry) {
	d.bytes += uint64(e.c.size)
	d.refBytes += uint64(e.c.size) * e.refs
	switch {
	case e.dead:
		d.dead.Set(e.c.fp)
	case e.refs == 0:
		d.zero.Set(zeroKey{e.mtime, e.c.fp})
	}
}

func (d *chunkDerived) remove(e chunkEntry) {
	d.bytes -= uint64(e.c.size)
	d.refBytes -= uint64(e.c.size) * e.refs
	switch {
	case e.dead:
		d.dead.Delete(e.c.fp)
	case e.refs == 0:
		d.zero.Delete(zeroKey{e.mtime, e.c.fp})
	}
}

// ---- Overlay access. ----

type chunkChange struct {
	e       chunkEntry
	present bool // false: deleted
}

type markChange struct{ source, seq uint64 }

func (t *txn) chunk(fp chunker.Fingerprint) (chunkEntry, bool) {
	if i, ok := t.chunkIdx[fp]; ok {
		c := t.chunkChanges[i]
		return c.e, c.present
	}
	return t.p.chunks.Get(chunkKey(fp))
}

func (t *txn) putChunk(e chunkEntry, present bool) {
	if i, ok := t.chunkIdx[e.c.fp]; ok {
		t.chunkChanges[i] = chunkChange{e: e, present: present}
		return
	}
	if t.chunkIdx == nil {
		t.chunkIdx = make(map[chunker.Fingerprint]int)
	}
	t.chunkIdx[e.c.fp] = len(t.chunkChanges)
	t.chunkChanges = append(t.chunkChanges, chunkChange{e: e, present: present})
}

func (t *txn) mark(source uint64) (uint64, bool) {
	for _, m := range t.marks {
		if m.source == source {
			return m.seq, true
		}
	}
	return t.p.marks.Get(source)
}

func (t *txn) setMark(source, seq uint64) {
	for i := range t.marks {
		if t.marks[i].source == source {
			t.marks[i].seq = seq
			return
		}
	}
	t.marks = append(t.marks, markChange{source, seq})
}

// newSources counts the overlay's watermarks for sources the partition has
// none for yet.
func (t *txn) newSources() int {
	n := 0
	for _, m := range t.marks {
		if _, ok := t.p.marks.Get(m.source); !ok {
			n++
		}
	}
	return n
}

// dropChunks queues chunk drops for the free list, numbered after
// everything the Txn queued before.
func (t *txn) dropChunks(ino uint64, chunks []chunkRef) {
	for _, c := range chunks {
		t.freed = append(t.freed, FreedExtent{
			Seq: t.nextSeq(), Ino: ino,
			PartitionID: c.pid, ExtentID: c.eid, ExtentOffset: c.extOff, Size: uint64(c.size),
			Fingerprint: c.fp,
		})
	}
}

// commitChunks writes the overlay's index changes and watermarks.
func (t *txn) commitChunks() {
	p := t.p
	for _, c := range t.chunkChanges {
		var old chunkEntry
		var had bool
		if c.present {
			old, had = p.chunks.Set(c.e)
		} else {
			old, had = p.chunks.Delete(c.e)
		}
		// Old out before new in: both can have the same candidate key (an
		// entry back at 0 references within one batch time).
		if had {
			p.cidx.remove(old)
		}
		if c.present {
			p.cidx.add(c.e)
		}
	}
	for _, m := range t.marks {
		p.marks.Set(m.source, m.seq)
	}
}

// ---- Layout operations. ----

// truncateChunks keeps the chunks that start below size (one straddling
// size stays whole; its bytes past size are invisible) and returns the
// others, which the truncate drops. Both results share list's array, which
// is immutable.
func truncateChunks(list []chunkRef, size uint64) (keep, dropped []chunkRef) {
	var off uint64
	for i, c := range list {
		if off >= size {
			return list[:i:i], list[i:]
		}
		off += uint64(c.size)
	}
	return list, nil
}

func (t *txn) spliceChunks(m *metapb.SpliceChunks) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	add := m.GetChunks()
	if len(add) > MaxChunksPerOp {
		return nil, fail(metapb.E2BIG, "%d chunks in one splice, more than %d", len(add), MaxChunksPerOp)
	}
	l := in.cdc()
	if l == nil {
		return nil, fail(metapb.EINVAL, "inode %d is a %v without the chunked layout", ino, in.typ())
	}
	if m.GetBaseGen() != l.gen {
		return nil, fail(metapb.ESTALE, "inode %d is at layout generation %d, not %d", ino, l.gen, m.GetBaseGen())
	}
	start, end := m.GetStart(), m.GetEnd()
	if start > end || uint64(end) > uint64(len(l.chunks)) {
		return nil, fail(metapb.EINVAL, "splice range [%d, %d) outside the %d chunks of inode %d", start, end, len(l.chunks), ino)
	}
	if n := len(l.chunks) - int(end-start) + len(add); n > MaxChunksPerInode {
		return nil, fail(metapb.EFBIG, "inode %d would have %d chunks, more than %d", ino, n, MaxChunksPerInode)
	}
	chunks := make([]chunkRef, 0, len(l.chunks)-int(end-start)+len(add))
	chunks = append(chunks, l.chunks[:start]...)
	for i, c := range add {
		ref, msg := checkChunk(c)
		if msg != "" {
			return nil, fail(metapb.EINVAL, "chunk %d: %s", i, msg)
		}
		chunks = append(chunks, ref)
	}
	chunks = append(chunks, l.chunks[end:]...)
	// At most MaxChunksPerInode chunks of at most 2^32-1 bytes: below
	// MaxFileSize, no overflow.
	var size uint64
	for _, c := range chunks {
		size += uint64(c.size)
	}
	t.dropChunks(ino, l.chunks[start:end])
	n := in.clone()
	n.setCDC(&cdcLayout{gen: l.gen + 1, chunks: chunks})
	n.size = size
	n.mtime, n.ctime = t.now, t.ctimeOf(ino)
	if mt := m.GetMtimeNs(); mt != 0 {
		n.mtime = mt
	}
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false), Pre: in.stamp()}, nil
}

// ---- Chunk index operations. ----

// refItem is a validated ChunkRef.
type refItem struct {
	c       chunkRef // c.pid 0: no location given
	delta   int64
	dropSeq uint64
}

func checkRefItem(i int, m *metapb.ChunkRef, source uint64) (refItem, *opError) {
	it := refItem{delta: m.GetDelta(), dropSeq: m.GetDropSeq()}
	ch := m.GetChunk()
	fp, ok := parseFingerprint(ch.GetFingerprint())
	if !ok {
		return it, fail(metapb.EINVAL, "item %d: %s", i, badFingerprint(ch.GetFingerprint()))
	}
	it.c = chunkRef{fp: fp, size: ch.GetSize()}
	switch {
	case it.delta == 0:
		return it, fail(metapb.EINVAL, "item %d: delta 0", i)
	case it.dropSeq != 0 && it.delta > 0:
		return it, fail(metapb.EINVAL, "item %d: drop_seq %d with delta %+d; drops lower the count", i, it.dropSeq, it.delta)
	case it.dropSeq != 0 && source == 0:
		return it, fail(metapb.EINVAL, "item %d: drop_seq %d without a source partition", i, it.dropSeq)
	}
	if it.delta > 0 && ch.GetPartitionId() != 0 {
		c, msg := checkChunk(ch)
		if msg != "" {
			return it, fail(metapb.EINVAL, "item %d: %s", i, msg)
		}
		it.c = c
	}
	return it, nil
}

// addRefs is refs + delta for delta > 0, EINVAL beyond MaxChunkRefs.
func addRefs(e chunkEntry, delta int64) (uint64, *opError) {
	if e.refs > MaxChunkRefs-uint64(delta) {
		return 0, fail(metapb.EINVAL, "chunk %v: %d references %+d exceed %d", e.c.fp, e.refs, delta, uint64(MaxChunkRefs))
	}
	return e.refs + uint64(delta), nil
}

func (t *txn) chunkRefs(m *metapb.ChunkRefs) (*metapb.OpResult, *opError) {
	items := m.GetItems()
	if len(items) > MaxChunksPerOp {
		return nil, fail(metapb.E2BIG, "%d chunk refs in one op, more than %d", len(items), MaxChunksPerOp)
	}
	source := m.GetSourcePartition()
	refs := make([]refItem, len(items))
	drops := false
	for i, it := range items {
		r, err := checkRefItem(i, it, source)
		if err != nil {
			return nil, err
		}
		refs[i] = r
		drops = drops || r.dropSeq != 0
	}
	if drops {
		if _, ok := t.mark(source); !ok && t.p.marks.Len()+t.newSources() >= MaxChunkSources {
			return nil, fail(metapb.ENOSPC, "drop watermarks for %d source partitions are in place", MaxChunkSources)
		}
	}
	out := make([]*metapb.ChunkRecord, len(refs))
	for i, r := range refs {
		e, ok := t.chunk(r.c.fp)
		live := ok && !e.dead
		if live && r.delta > 0 && r.c.size != 0 && r.c.size != e.c.size {
			return nil, fail(metapb.EINVAL, "item %d: chunk %v has %d bytes in the index, not %d", i, r.c.fp, e.c.size, r.c.size)
		}
		switch {
		case r.dropSeq != 0:
			if wm, _ := t.mark(source); r.dropSeq <= wm {
				break // applied before: a collector's retry
			}
			t.setMark(source, r.dropSeq)
			t.lowerRefs(e, live, r.delta)
		case r.delta < 0:
			t.lowerRefs(e, live, r.delta)
		case live:
			n, err := addRefs(e, r.delta)
			if err != nil {
				return nil, err
			}
			e.refs, e.mtime = n, t.now
			t.putChunk(e, true)
		case r.c.pid != 0:
			// A missing or dead entry becomes live at the caller's copy.
			t.putChunk(chunkEntry{c: r.c, refs: uint64(r.delta), mtime: t.now}, true)
		}
		if e, ok := t.chunk(r.c.fp); ok && !e.dead {
			out[i] = e.record()
		} else {
			out[i] = missingRecord(r.c.fp)
		}
	}
	return &metapb.OpResult{Chunks: out}, nil
}

// lowerRefs applies delta < 0 to a live entry, stopping at 0; missing and
// dead entries (which have no references) are left alone.
func (t *txn) lowerRefs(e chunkEntry, live bool, delta int64) {
	if !live || e.refs == 0 {
		return
	}
	down := uint64(-(delta + 1)) + 1 // |delta|, also for math.MinInt64
	e.refs -= min(e.refs, down)
	e.mtime = t.now
	t.putChunk(e, true)
}

func (t *txn) chunkCollect(m *metapb.ChunkCollect) (*metapb.OpResult, *opError) {
	fps := m.GetFingerprints()
	if len(fps) > MaxChunksPerOp {
		return nil, fail(metapb.E2BIG, "%d fingerprints in one op, more than %d", len(fps), MaxChunksPerOp)
	}
	parsed := make([]chunker.Fingerprint, len(fps))
	for i, b := range fps {
		fp, ok := parseFingerprint(b)
		if !ok {
			return nil, fail(metapb.EINVAL, "fingerprint %d: %s", i, badFingerprint(b))
		}
		parsed[i] = fp
	}
	older := m.GetOlderThanNs()
	var out []*metapb.ChunkRecord
	for _, fp := range parsed {
		e, ok := t.chunk(fp)
		if !ok || e.dead || e.refs != 0 || e.mtime > older {
			continue
		}
		e.dead, e.mtime = true, t.now
		t.putChunk(e, true)
		out = append(out, e.record())
	}
	return &metapb.OpResult{Chunks: out}, nil
}

func (t *txn) chunkForget(m *metapb.ChunkForget) (*metapb.OpResult, *opError) {
	chunks := m.GetChunks()
	if len(chunks) > MaxChunksPerOp {
		return nil, fail(metapb.E2BIG, "%d chunks in one op, more than %d", len(chunks), MaxChunksPerOp)
	}
	given := make([]chunkRef, len(chunks))
	for i, c := range chunks {
		fp, ok := parseFingerprint(c.GetFingerprint())
		if !ok {
			return nil, fail(metapb.EINVAL, "chunk %d: %s", i, badFingerprint(c.GetFingerprint()))
		}
		given[i] = chunkRef{fp: fp, size: c.GetSize(), pid: c.GetPartitionId(), eid: c.GetExtentId(), extOff: c.GetExtentOffset()}
	}
	var out []*metapb.ChunkRecord
	for _, c := range given {
		e, ok := t.chunk(c.fp)
		if !ok || !e.dead || !e.c.sameLocation(c) {
			continue
		}
		t.putChunk(e, false)
		out = append(out, e.record())
	}
	return &metapb.OpResult{Chunks: out}, nil
}

func (t *txn) chunkFix(m *metapb.ChunkFix) (*metapb.OpResult, *opError) {
	entries := m.GetEntries()
	if len(entries) > MaxChunksPerOp {
		return nil, fail(metapb.E2BIG, "%d entries in one op, more than %d", len(entries), MaxChunksPerOp)
	}
	fps := make([]chunker.Fingerprint, len(entries))
	for i, r := range entries {
		fp, ok := parseFingerprint(r.GetChunk().GetFingerprint())
		if !ok {
			return nil, fail(metapb.EINVAL, "entry %d: %s", i, badFingerprint(r.GetChunk().GetFingerprint()))
		}
		if r.GetRefs() > MaxChunkRefs {
			return nil, fail(metapb.EINVAL, "entry %d: %d references exceed %d", i, r.GetRefs(), uint64(MaxChunkRefs))
		}
		fps[i] = fp
	}
	var out []*metapb.ChunkRecord
	for i, r := range entries {
		e, ok := t.chunk(fps[i])
		if !ok || e.dead || e.mtime != r.GetMtimeNs() || e.refs == r.GetRefs() {
			continue
		}
		e.refs, e.mtime = r.GetRefs(), t.now
		t.putChunk(e, true)
		out = append(out, e.record())
	}
	return &metapb.OpResult{Chunks: out}, nil
}

// ---- Queries. Read-only; see the concurrency note on Partition. ----

// ChunkStats describes the partition's shard of the chunk index.
type ChunkStats struct {
	// Entries is the number of index entries, dead ones included.
	Entries int
	// Bytes is what the entries store, each chunk once (dead ones too:
	// their bytes are on the data nodes until forgotten).
	Bytes uint64
	// RefBytes is what the references would take without deduplication:
	// size × refs summed over the entries (modulo 2^64).
	RefBytes uint64
	// ZeroRef counts the live entries without references (collection
	// candidates once their grace has passed); Dead the dead ones.
	ZeroRef, Dead int
	// PendingDrops counts the chunk drops on this partition's free list:
	// references its layouts gave up that no shard has applied yet.
	PendingDrops int
	// Sources is the number of drop watermarks (source partitions).
	Sources int
}

// ChunkStats returns the partition's chunk index figures, in O(1).
func (p *Partition) ChunkStats() ChunkStats {
	return ChunkStats{
		Entries: p.chunks.Len(), Bytes: p.cidx.bytes, RefBytes: p.cidx.refBytes,
		ZeroRef: p.cidx.zero.Len(), Dead: p.cidx.dead.Len(),
		PendingDrops: p.cidx.drops, Sources: p.marks.Len(),
	}
}

// ChunkEntry returns the index entry of fp as it is, dead or not (for
// checking tools and tests; lookups that use the entry go through
// ChunkRefs), or ENOENT.
func (p *Partition) ChunkEntry(fp chunker.Fingerprint) (*metapb.ChunkRecord, metapb.Errno) {
	e, ok := p.chunks.Get(chunkKey(fp))
	if !ok {
		return nil, metapb.ENOENT
	}
	return e.record(), metapb.OK
}

// ChunkWatermark returns the highest drop_seq applied from source (0 if
// none).
func (p *Partition) ChunkWatermark(source uint64) uint64 {
	seq, _ := p.marks.Get(source)
	return seq
}

// ScanChunks returns up to limit index entries (dead ones included) with
// fingerprints above after in byte order, and whether more follow. Pass the
// zero fingerprint to start (no entry has it) and the last fingerprint
// returned to resume. limit <= 0 returns nothing.
func (p *Partition) ScanChunks(after chunker.Fingerprint, limit int) ([]*metapb.ChunkRecord, bool) {
	if limit <= 0 {
		return nil, false
	}
	var out []*metapb.ChunkRecord
	more := false
	p.chunks.Ascend(chunkKey(after), func(e chunkEntry) bool {
		if e.c.fp == after {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, e.record())
		return true
	})
	return out, more
}

// CollectCandidates returns up to limit live entries without references
// whose last change was at or before olderThanNs, oldest change first, in
// O(limit log n). ChunkCollect with the same older_than_ns marks them dead
// if they are still so when it applies.
func (p *Partition) CollectCandidates(olderThanNs int64, limit int) []*metapb.ChunkRecord {
	if limit <= 0 {
		return nil
	}
	var out []*metapb.ChunkRecord
	p.cidx.zero.Scan(func(k zeroKey) bool {
		if k.mtime > olderThanNs {
			return false
		}
		if e, ok := p.chunks.Get(chunkKey(k.fp)); ok {
			out = append(out, e.record())
		}
		return len(out) < limit
	})
	return out
}

// DeadChunks returns up to limit dead entries, by fingerprint, with the
// locations whose bytes must be freed before ChunkForget deletes them.
func (p *Partition) DeadChunks(limit int) []*metapb.ChunkRecord {
	if limit <= 0 {
		return nil
	}
	var out []*metapb.ChunkRecord
	p.cidx.dead.Scan(func(fp chunker.Fingerprint) bool {
		if e, ok := p.chunks.Get(chunkKey(fp)); ok {
			out = append(out, e.record())
		}
		return len(out) < limit
	})
	return out
}
