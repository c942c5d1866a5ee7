package metapartition

import (
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// testFP is a fingerprint of algorithm 1 whose bytes sort by n.
func testFP(n byte) chunker.Fingerprint {
	var fp chunker.Fingerprint
	fp[0] = byte(chunker.FastCDC1)
	fp[1] = n
	fp[32] = 0x5a
	return fp
}

// chunkAt is chunk n: size bytes at extOff of extent 1 in data partition 7.
func chunkAt(n byte, size uint32, extOff uint64) *metapb.Chunk {
	fp := testFP(n)
	return &metapb.Chunk{Fingerprint: fp[:], Size: size, PartitionId: 7, ExtentId: 1, ExtentOffset: extOff}
}

// bare is ch without its location (what a lookup sends).
func bare(ch *metapb.Chunk) *metapb.Chunk {
	return &metapb.Chunk{Fingerprint: ch.Fingerprint, Size: ch.Size}
}

func createCDC(mode uint32) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: reg, Mode: mode, Layout: metapb.FileLayout_FILE_LAYOUT_CDC}}}
}

func splice(ino, gen uint64, start, end uint32, mtime int64, chunks ...*metapb.Chunk) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_SpliceChunks{SpliceChunks: &metapb.SpliceChunks{Ino: ino, BaseGen: gen, Start: start, End: end, Chunks: chunks, MtimeNs: mtime}}}
}

func ref(ch *metapb.Chunk, delta int64, dropSeq uint64) *metapb.ChunkRef {
	return &metapb.ChunkRef{Chunk: ch, Delta: delta, DropSeq: dropSeq}
}

func chunkRefs(source uint64, items ...*metapb.ChunkRef) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{Items: items, SourcePartition: source}}}
}

func chunkCollect(older int64, chunks ...*metapb.Chunk) *metapb.Op {
	m := &metapb.ChunkCollect{OlderThanNs: older}
	for _, c := range chunks {
		m.Fingerprints = append(m.Fingerprints, c.Fingerprint)
	}
	return &metapb.Op{Op: &metapb.Op_ChunkCollect{ChunkCollect: m}}
}

func chunkForget(chunks ...*metapb.Chunk) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_ChunkForget{ChunkForget: &metapb.ChunkForget{Chunks: chunks}}}
}

func chunkFix(entries ...*metapb.ChunkRecord) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_ChunkFix{ChunkFix: &metapb.ChunkFix{Entries: entries}}}
}

// zz is the zigzag encoding of v, as the snapshot writes times.
func zz(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

// entry returns fp's index entry, nil if there is none.
func entry(t testing.TB, p *Partition, ch *metapb.Chunk) *metapb.ChunkRecord {
	t.Helper()
	fp, ok := parseFingerprint(ch.Fingerprint)
	if !ok {
		t.Fatalf("bad test fingerprint %x", ch.Fingerprint)
	}
	r, e := p.ChunkEntry(fp)
	if e != metapb.OK {
		return nil
	}
	return r
}

// wantEntry checks fp's entry: its refs, dead flag and mtime.
func wantEntry(t testing.TB, p *Partition, ch *metapb.Chunk, refs uint64, dead bool, mtime int64) {
	t.Helper()
	r := entry(t, p, ch)
	if r == nil || r.Refs != refs || r.Dead != dead || r.MtimeNs != mtime {
		t.Fatalf("entry %x: %v, want refs %d dead %v mtime %d", ch.Fingerprint[1], r, refs, dead, mtime)
	}
}

func chunkDrops(p *Partition) []FreedExtent {
	var out []FreedExtent
	for _, f := range p.FreeList() {
		if f.IsChunkDrop() {
			out = append(out, f)
		}
	}
	return out
}

// TestInodeSize: the common inode stays at its size (chunk layouts live
// behind inodeExtra): 120 bytes, the 128-byte size class since every inode
// keeps its parent pointer, and memory.go's estimates agree.
func TestInodeSize(t *testing.T) {
	if n := unsafe.Sizeof(inode{}); n != inodeRecordBytes-8 {
		t.Fatalf("inode is %d bytes, memory.go says %d", n, inodeRecordBytes-8)
	}
	if n := unsafe.Sizeof(inodeExtra{}); n != inodeExtraBytes {
		t.Fatalf("inodeExtra is %d bytes, memory.go says %d", n, inodeExtraBytes)
	}
	if n := unsafe.Sizeof(chunkRef{}); n != chunkRefBytes {
		t.Fatalf("chunkRef is %d bytes, memory.go says %d", n, chunkRefBytes)
	}
	if n := unsafe.Sizeof(chunkEntry{}); n != chunkEntryBytes {
		t.Fatalf("chunkEntry is %d bytes, memory.go says %d", n, chunkEntryBytes)
	}
	if n := unsafe.Sizeof(inodeExtra{}); n != inodeExtraBytes {
		t.Fatalf("inodeExtra is %d bytes, memory.go says %d", n, inodeExtraBytes)
	}
	if n := unsafe.Sizeof(FreedExtent{}); n != freedBytes {
		t.Fatalf("FreedExtent is %d bytes, memory.go says %d", n, freedBytes)
	}
}

func TestChunkedFile(t *testing.T) {
	p := newRoot(t)
	r := mustRun(t, p, 10, createCDC(0o644), createDentry(1, "c", 0, reg))
	if in := r.Results[0].Inode; in.Layout != metapb.FileLayout_FILE_LAYOUT_CDC || in.LayoutGen != 0 || in.Size != 0 {
		t.Fatalf("created %v", in)
	}
	a, b, c, d := chunkAt(1, 10, 0), chunkAt(2, 20, 10), chunkAt(3, 30, 30), chunkAt(4, 5, 60)
	r = mustRun(t, p, 11, splice(2, 0, 0, 0, 0, a, b, c))
	in := r.Results[0].Inode
	if in.Size != 60 || in.LayoutGen != 1 || in.MtimeNs != 11 || in.CtimeNs != 11 || len(in.Chunks) != 0 {
		t.Fatalf("after the first splice the result is %v (no chunks in a mutating op's result)", in)
	}
	got := mustInode(t, p, 2)
	if len(got.Chunks) != 3 || !proto.Equal(got.Chunks[1], b) || got.Layout != metapb.FileLayout_FILE_LAYOUT_CDC || got.LayoutGen != 1 {
		t.Fatalf("GetInode %v", got)
	}
	if len(p.FreeList()) != 0 {
		t.Fatalf("a splice into an empty file dropped %v", p.FreeList())
	}
	// Replace the middle chunk, with an explicit mtime.
	r = mustRun(t, p, 12, splice(2, 1, 1, 2, 7, d))
	if in := r.Results[0].Inode; in.Size != 45 || in.LayoutGen != 2 || in.MtimeNs != 7 || in.CtimeNs != 12 {
		t.Fatalf("after the second splice %v", in)
	}
	drops := chunkDrops(p)
	want := FreedExtent{Seq: 1, Ino: 2, PartitionID: 7, ExtentID: 1, ExtentOffset: 10, Size: 20, Fingerprint: testFP(2)}
	if len(drops) != 1 || drops[0] != want || !proto.Equal(drops[0].Chunk(), b) {
		t.Fatalf("chunk drops %v, want %v", drops, want)
	}
	// A writer that read generation 1 lost the race.
	if r := run(t, p, 13, splice(2, 1, 0, 0, 0, d)); metapb.Errno(r.Errno) != metapb.ESTALE {
		t.Fatalf("splice against an old generation: %v", metapb.Errno(r.Errno))
	}
	// Appends are for extent files only.
	if r := run(t, p, 13, appendExtents(2, 0, ek(0, 1, 0, 10))); metapb.Errno(r.Errno) != metapb.EINVAL {
		t.Fatalf("append_extents on a chunked file: %v", metapb.Errno(r.Errno))
	}
	// Delete everything: an empty splice of the whole list.
	mustRun(t, p, 14, splice(2, 2, 0, 3, 0))
	if in := mustInode(t, p, 2); in.Size != 0 || in.LayoutGen != 3 || len(in.Chunks) != 0 {
		t.Fatalf("emptied %v", in)
	}
	if n := len(chunkDrops(p)); n != 4 {
		t.Fatalf("%d chunk drops, want 4", n)
	}
	// An empty splice still moves the generation (the writer's commit).
	mustRun(t, p, 15, splice(2, 3, 0, 0, 0))
	if in := mustInode(t, p, 2); in.LayoutGen != 4 {
		t.Fatalf("empty splice: generation %d", in.LayoutGen)
	}
	// Scans with extents carry the chunks too; without, neither.
	mustRun(t, p, 16, splice(2, 4, 0, 0, 0, a))
	all, _ := p.ScanInodes(0, 10, true)
	none, _ := p.ScanInodes(0, 10, false)
	if len(all[1].Chunks) != 1 || len(none[1].Chunks) != 0 || none[1].LayoutGen != 5 {
		t.Fatalf("scans: %v / %v", all[1], none[1])
	}
}

func TestChunkedTruncate(t *testing.T) {
	p := newRoot(t)
	a, b, c := chunkAt(1, 10, 0), chunkAt(2, 10, 10), chunkAt(3, 10, 20)
	mustRun(t, p, 10, createCDC(0o644), createDentry(1, "c", 0, reg), splice(0, 0, 0, 0, 0, a, b, c))
	steps := []struct {
		size   uint64
		chunks int
		gen    uint64
		drops  int
	}{
		{15, 2, 2, 1},  // the third chunk starts past 15; the second straddles it and stays
		{20, 2, 3, 1},  // truncate up: only the size
		{20, 2, 3, 1},  // the same size: nothing changes
		{100, 2, 4, 1}, // past the chunks: zeros
		{10, 1, 5, 2},  // the second chunk starts at 10: dropped
		{0, 0, 6, 3},
		{0, 0, 6, 3},
	}
	for i, s := range steps {
		mustRun(t, p, int64(20+i), truncate(2, s.size))
		in := mustInode(t, p, 2)
		if in.Size != s.size || len(in.Chunks) != s.chunks || in.LayoutGen != s.gen || len(chunkDrops(p)) != s.drops {
			t.Fatalf("step %d truncate %d: %v, %d drops; want %d chunks gen %d, %d drops", i, s.size, in, len(chunkDrops(p)), s.chunks, s.gen, s.drops)
		}
	}
	// The generation moves on from a truncate: a writer with the old one
	// must re-read.
	if r := run(t, p, 40, splice(2, 5, 0, 0, 0, a)); metapb.Errno(r.Errno) != metapb.ESTALE {
		t.Fatalf("splice after a truncate: %v", metapb.Errno(r.Errno))
	}
}

func TestChunkedEvict(t *testing.T) {
	p := newRoot(t)
	a, b := chunkAt(1, 10, 0), chunkAt(2, 10, 10)
	mustRun(t, p, 10, createCDC(0o644), createDentry(1, "c", 0, reg), splice(0, 0, 0, 0, 0, a, b, a))
	mustRun(t, p, 11, deleteDentry(1, "c", 2, reg), link(2, -1), evict(2))
	drops := chunkDrops(p)
	if len(drops) != 3 || drops[0].Fingerprint != testFP(1) || drops[1].Fingerprint != testFP(2) || drops[2].Fingerprint != testFP(1) {
		t.Fatalf("evict dropped %v, want one drop per layout entry", drops)
	}
	if s := p.ChunkStats(); s.PendingDrops != 3 {
		t.Fatalf("stats %+v", s)
	}
	// Acknowledged drops leave the list and the count. Seqs start at 1
	// (drop_seq 0 is no drop).
	if drops[0].Seq != 1 {
		t.Fatalf("first free-list seq %d, want 1", drops[0].Seq)
	}
	mustRun(t, p, 12, &metapb.Op{Op: &metapb.Op_AckFreed{AckFreed: &metapb.AckFreed{UptoSeq: 2}}})
	if s := p.ChunkStats(); s.PendingDrops != 1 || len(p.FreeList()) != 1 {
		t.Fatalf("after ack: stats %+v, free %v", s, p.FreeList())
	}
}

// TestChunkRefs follows one fingerprint through the reference rules of
// ChunkRef.
func TestChunkRefs(t *testing.T) {
	p := newRoot(t)
	a := chunkAt(1, 10, 100)
	other := chunkAt(1, 10, 500) // the same bytes stored elsewhere

	// A lookup of a missing entry changes nothing and answers partition 0.
	r := mustRun(t, p, 10, chunkRefs(0, ref(bare(a), 3, 0)))
	if rec := r.Results[0].Chunks[0]; rec.Chunk.PartitionId != 0 || string(rec.Chunk.Fingerprint) != string(a.Fingerprint) || entry(t, p, a) != nil {
		t.Fatalf("lookup of a missing entry: %v", rec)
	}
	// A registration creates it live.
	r = mustRun(t, p, 11, chunkRefs(0, ref(a, 2, 0)))
	if rec := r.Results[0].Chunks[0]; !proto.Equal(rec, &metapb.ChunkRecord{Chunk: a, Refs: 2, MtimeNs: 11}) {
		t.Fatalf("registration: %v", rec)
	}
	// A lookup takes references and gives the location.
	r = mustRun(t, p, 12, chunkRefs(0, ref(bare(a), 1, 0)))
	if rec := r.Results[0].Chunks[0]; !proto.Equal(rec.Chunk, a) || rec.Refs != 3 {
		t.Fatalf("lookup: %v", rec)
	}
	// A second registration keeps the first location (the caller frees its copy).
	r = mustRun(t, p, 13, chunkRefs(0, ref(other, 1, 0)))
	if rec := r.Results[0].Chunks[0]; !proto.Equal(rec.Chunk, a) || rec.Refs != 4 {
		t.Fatalf("second registration: %v", rec)
	}
	// Lowering stops at 0; missing entries are ignored.
	r = mustRun(t, p, 14, chunkRefs(0, ref(a, -3, 0), ref(a, -5, 0), ref(a, -1, 0), ref(chunkAt(9, 1, 0), -1, 0)))
	if rs := r.Results[0].Chunks; rs[0].Refs != 1 || rs[1].Refs != 0 || rs[2].Refs != 0 || rs[3].Chunk.PartitionId != 0 {
		t.Fatalf("lowering: %v", rs)
	}
	wantEntry(t, p, a, 0, false, 14) // the -1 at 0 changed nothing, but the -5 did at 14
	mustRun(t, p, 15, chunkRefs(0, ref(a, math.MinInt64, 0)))
	wantEntry(t, p, a, 0, false, 14)
	if entry(t, p, chunkAt(9, 1, 0)) != nil {
		t.Fatal("a decrement created an entry")
	}
	// Dead: collected after its grace. A lookup treats it as missing.
	if c := p.CollectCandidates(13, 10); len(c) != 0 {
		t.Fatalf("candidates changed after 13: %v", c)
	}
	if c := p.CollectCandidates(14, 10); len(c) != 1 || !proto.Equal(c[0].Chunk, a) {
		t.Fatalf("candidates: %v", c)
	}
	r = mustRun(t, p, 20, chunkCollect(14, a))
	if rs := r.Results[0].Chunks; len(rs) != 1 || !rs[0].Dead || rs[0].MtimeNs != 20 {
		t.Fatalf("collect: %v", rs)
	}
	r = mustRun(t, p, 21, chunkRefs(0, ref(bare(a), 1, 0), ref(a, -1, 0)))
	if rs := r.Results[0].Chunks; rs[0].Chunk.PartitionId != 0 || rs[1].Chunk.PartitionId != 0 {
		t.Fatalf("lookup and drop of a dead entry: %v", rs)
	}
	wantEntry(t, p, a, 0, true, 20)
	// Re-registered at a new location: live there; forgetting the old
	// location (the collector finishing its free) leaves it alone.
	r = mustRun(t, p, 22, chunkRefs(0, ref(other, 1, 0)))
	if rec := r.Results[0].Chunks[0]; !proto.Equal(rec, &metapb.ChunkRecord{Chunk: other, Refs: 1, MtimeNs: 22}) {
		t.Fatalf("re-registration: %v", rec)
	}
	r = mustRun(t, p, 23, chunkForget(a))
	if len(r.Results[0].Chunks) != 0 {
		t.Fatalf("forget of a live entry: %v", r.Results[0].Chunks)
	}
	wantEntry(t, p, other, 1, false, 22)
	if rec := entry(t, p, a); !proto.Equal(rec.Chunk, other) {
		t.Fatalf("entry moved: %v", rec)
	}
	// Several items on one fingerprint in one op apply in order.
	r = mustRun(t, p, 24, chunkRefs(0, ref(bare(a), 2, 0), ref(a, -1, 0), ref(bare(a), 1, 0)))
	if rs := r.Results[0].Chunks; rs[0].Refs != 3 || rs[1].Refs != 2 || rs[2].Refs != 3 {
		t.Fatalf("items in order: %v", rs)
	}
}

// TestChunkDropWatermark: drops carry their free-list seq and source; a
// retried drop is skipped, so a collector's retry never drops twice.
func TestChunkDropWatermark(t *testing.T) {
	p := newRoot(t)
	a, b := chunkAt(1, 10, 0), chunkAt(2, 10, 10)
	mustRun(t, p, 10, chunkRefs(0, ref(a, 5, 0), ref(b, 5, 0)))
	mustRun(t, p, 11, chunkRefs(40, ref(a, -1, 3), ref(b, -1, 4), ref(a, -1, 7)))
	wantEntry(t, p, a, 3, false, 11)
	wantEntry(t, p, b, 4, false, 11)
	if w := p.ChunkWatermark(40); w != 7 {
		t.Fatalf("watermark %d, want 7", w)
	}
	// The collector retries the same batch (its AckFreed was lost): nothing
	// happens, and the answers are the entries as they are.
	r := mustRun(t, p, 12, chunkRefs(40, ref(a, -1, 3), ref(b, -1, 4), ref(a, -1, 7)))
	wantEntry(t, p, a, 3, false, 11)
	wantEntry(t, p, b, 4, false, 11)
	if rs := r.Results[0].Chunks; rs[0].Refs != 3 || rs[1].Refs != 4 {
		t.Fatalf("retried drops answered %v", rs)
	}
	// The retry plus a new drop: only the new one applies.
	mustRun(t, p, 13, chunkRefs(40, ref(a, -1, 7), ref(b, -1, 9)))
	wantEntry(t, p, b, 3, false, 13)
	// Another source has its own watermark.
	mustRun(t, p, 14, chunkRefs(41, ref(a, -1, 1)))
	wantEntry(t, p, a, 2, false, 14)
	if p.ChunkWatermark(40) != 9 || p.ChunkWatermark(41) != 1 || p.ChunkStats().Sources != 2 {
		t.Fatalf("watermarks %d %d", p.ChunkWatermark(40), p.ChunkWatermark(41))
	}
	// A drop of a missing entry still counts as applied.
	mustRun(t, p, 15, chunkRefs(41, ref(chunkAt(9, 1, 0), -1, 2)))
	if p.ChunkWatermark(41) != 2 {
		t.Fatalf("watermark after a drop of a missing entry: %d", p.ChunkWatermark(41))
	}
	// The watermarks survive a snapshot.
	q := restored(t, p)
	mustRun(t, q, 16, chunkRefs(40, ref(b, -1, 9)))
	wantEntry(t, q, b, 3, false, 13)
	// Drops without a source, or raising the count, are refused.
	if r := run(t, p, 17, chunkRefs(0, ref(a, -1, 20))); metapb.Errno(r.Errno) != metapb.EINVAL {
		t.Fatalf("drop without a source: %v", metapb.Errno(r.Errno))
	}
	if r := run(t, p, 17, chunkRefs(40, ref(a, 1, 20))); metapb.Errno(r.Errno) != metapb.EINVAL {
		t.Fatalf("drop_seq with delta > 0: %v", metapb.Errno(r.Errno))
	}
}

func TestChunkCollectAndForget(t *testing.T) {
	p := newRoot(t)
	a, b, c := chunkAt(1, 10, 0), chunkAt(2, 20, 10), chunkAt(3, 30, 30)
	mustRun(t, p, 10, chunkRefs(0, ref(a, 1, 0), ref(b, 1, 0), ref(c, 1, 0)))
	mustRun(t, p, 11, chunkRefs(0, ref(b, -1, 0)))
	mustRun(t, p, 12, chunkRefs(0, ref(a, -1, 0)))
	// Candidates: oldest change first, only those at or before the bound.
	cands := p.CollectCandidates(100, 10)
	if len(cands) != 2 || !proto.Equal(cands[0].Chunk, b) || !proto.Equal(cands[1].Chunk, a) {
		t.Fatalf("candidates %v", cands)
	}
	if cands := p.CollectCandidates(100, 1); len(cands) != 1 {
		t.Fatalf("limit: %v", cands)
	}
	// ChunkCollect checks again at apply: c has a reference, a changed
	// after the bound, the missing one is ignored.
	r := mustRun(t, p, 20, chunkCollect(11, a, b, c, chunkAt(9, 1, 0), b))
	if rs := r.Results[0].Chunks; len(rs) != 1 || !proto.Equal(rs[0].Chunk, b) || !rs[0].Dead {
		t.Fatalf("collected %v, want only b", rs)
	}
	wantEntry(t, p, a, 0, false, 12)
	wantEntry(t, p, b, 0, true, 20)
	wantEntry(t, p, c, 1, false, 10)
	if d := p.DeadChunks(10); len(d) != 1 || !proto.Equal(d[0].Chunk, b) {
		t.Fatalf("dead %v", d)
	}
	if s := p.ChunkStats(); s != (ChunkStats{Entries: 3, Bytes: 60, RefBytes: 30, ZeroRef: 1, Dead: 1}) {
		t.Fatalf("stats %+v", s)
	}
	// Forget: only a dead entry at exactly the location.
	moved := proto.Clone(b).(*metapb.Chunk)
	moved.ExtentOffset++
	shorter := proto.Clone(b).(*metapb.Chunk)
	shorter.Size--
	r = mustRun(t, p, 21, chunkForget(moved, shorter, a, c))
	if len(r.Results[0].Chunks) != 0 || entry(t, p, b) == nil || entry(t, p, a) == nil {
		t.Fatalf("forget of the wrong locations removed something: %v", r.Results[0].Chunks)
	}
	r = mustRun(t, p, 22, chunkForget(b, b))
	if rs := r.Results[0].Chunks; len(rs) != 1 || !proto.Equal(rs[0].Chunk, b) || entry(t, p, b) != nil {
		t.Fatalf("forget: %v", rs)
	}
	if s := p.ChunkStats(); s != (ChunkStats{Entries: 2, Bytes: 40, RefBytes: 30, ZeroRef: 1}) {
		t.Fatalf("stats %+v", s)
	}
	if d := p.DeadChunks(10); len(d) != 0 {
		t.Fatalf("dead %v", d)
	}
}

func TestChunkFix(t *testing.T) {
	p := newRoot(t)
	a, b, c := chunkAt(1, 10, 0), chunkAt(2, 20, 10), chunkAt(3, 30, 30)
	mustRun(t, p, 10, chunkRefs(0, ref(a, 5, 0), ref(b, 1, 0), ref(c, 1, 0)))
	mustRun(t, p, 11, chunkRefs(0, ref(c, -1, 0)))
	mustRun(t, p, 12, chunkCollect(11, c))
	// The recount read a and b at mtime 10; b changes before the fix.
	mustRun(t, p, 13, chunkRefs(0, ref(b, 1, 0)))
	r := mustRun(t, p, 20, chunkFix(
		&metapb.ChunkRecord{Chunk: bare(a), Refs: 2, MtimeNs: 10},
		&metapb.ChunkRecord{Chunk: bare(b), Refs: 7, MtimeNs: 10},
		&metapb.ChunkRecord{Chunk: bare(c), Refs: 3, MtimeNs: 12},
		&metapb.ChunkRecord{Chunk: bare(chunkAt(9, 1, 0)), Refs: 3},
	))
	if rs := r.Results[0].Chunks; len(rs) != 1 || !proto.Equal(rs[0].Chunk, a) || rs[0].Refs != 2 || rs[0].MtimeNs != 20 {
		t.Fatalf("fixed %v, want only a", rs)
	}
	wantEntry(t, p, a, 2, false, 20)
	wantEntry(t, p, b, 2, false, 13)
	wantEntry(t, p, c, 0, true, 12)
	// The same fix again: the mtime moved, so nothing.
	r = mustRun(t, p, 21, chunkFix(&metapb.ChunkRecord{Chunk: bare(a), Refs: 9, MtimeNs: 10}))
	if len(r.Results[0].Chunks) != 0 {
		t.Fatalf("stale fix applied: %v", r.Results[0].Chunks)
	}
	// A fix to 0 makes a candidate only after a grace from the fix.
	mustRun(t, p, 22, chunkFix(&metapb.ChunkRecord{Chunk: bare(a), Refs: 0, MtimeNs: 20}))
	if cands := p.CollectCandidates(21, 10); len(cands) != 0 {
		t.Fatalf("candidates %v", cands)
	}
}

// TestChunkTxnAtomicity: a failing op leaves the chunk index, the
// watermarks and the free list as they were, whatever the ops before it did.
func TestChunkTxnAtomicity(t *testing.T) {
	p := newRoot(t)
	a, b := chunkAt(1, 10, 0), chunkAt(2, 10, 10)
	mustRun(t, p, 10, createCDC(0o644), createDentry(1, "c", 0, reg), chunkRefs(0, ref(a, 1, 0)), splice(0, 0, 0, 0, 0, a))
	before, q := snap(t, p), queries(p)
	r := run(t, p, 11,
		chunkRefs(3, ref(a, -1, 1), ref(b, 4, 0)), // a drop (watermark), a registration
		chunkCollect(20, a),                       // a is at 0 now: dead
		splice(2, 1, 0, 1, 0, b),                  // a chunk drop on the free list
		truncate(2, 0),
		chunkFix(&metapb.ChunkRecord{Chunk: bare(b), Refs: 1, MtimeNs: 11}),
		link(99, 1), // fails
	)
	if metapb.Errno(r.Errno) != metapb.ENOENT || r.FailedOp != 5 {
		t.Fatalf("got %v at op %d", metapb.Errno(r.Errno), r.FailedOp)
	}
	if !sameBytes(before, snap(t, p)) || queries(p) != q {
		t.Fatal("a failed txn changed the partition")
	}
	// And the same without the failing op commits all of it.
	mustRun(t, p, 12, chunkRefs(3, ref(a, -1, 1), ref(b, 4, 0)), chunkCollect(20, a), splice(2, 1, 0, 1, 0, b))
	if p.ChunkWatermark(3) != 1 || len(chunkDrops(p)) != 1 || p.ChunkStats().Dead != 1 {
		t.Fatalf("committed txn: watermark %d drops %v stats %+v", p.ChunkWatermark(3), chunkDrops(p), p.ChunkStats())
	}
}

// TestChunkSourcesBounded: watermarks are bounded; drops from a new source
// beyond the bound are refused, known sources still work.
func TestChunkSourcesBounded(t *testing.T) {
	p := newRoot(t)
	a := chunkAt(1, 10, 0)
	mustRun(t, p, 1, chunkRefs(0, ref(a, 1<<40, 0)))
	for src := uint64(1); src <= MaxChunkSources; src += MaxOpsPerTxn {
		ops := make([]*metapb.Op, 0, MaxOpsPerTxn)
		for s := src; s < src+MaxOpsPerTxn && s <= MaxChunkSources; s++ {
			ops = append(ops, chunkRefs(s, ref(a, -1, 1)))
		}
		mustRun(t, p, 2, ops...)
	}
	if r := run(t, p, 3, chunkRefs(MaxChunkSources+1, ref(a, -1, 1))); metapb.Errno(r.Errno) != metapb.ENOSPC {
		t.Fatalf("a source beyond the bound: %v", metapb.Errno(r.Errno))
	}
	mustRun(t, p, 4, chunkRefs(5, ref(a, -1, 2)))
	// Two new sources in one Txn count both.
	q := newRoot(t)
	mustRun(t, q, 1, chunkRefs(0, ref(a, 100, 0)))
	for src := uint64(1); src < MaxChunkSources; src += MaxOpsPerTxn {
		ops := make([]*metapb.Op, 0, MaxOpsPerTxn)
		for s := src; s < src+MaxOpsPerTxn && s < MaxChunkSources; s++ {
			ops = append(ops, chunkRefs(s, ref(a, -1, 1)))
		}
		mustRun(t, q, 2, ops...)
	}
	if r := run(t, q, 3, chunkRefs(1<<40, ref(a, -1, 1)), chunkRefs(1<<41, ref(a, -1, 1))); metapb.Errno(r.Errno) != metapb.ENOSPC || r.FailedOp != 1 {
		t.Fatalf("two new sources at the bound: %v at op %d", metapb.Errno(r.Errno), r.FailedOp)
	}
}

// TestChunkSnapshotDeterministic: equal chunk indexes give equal bytes
// however they were reached, and survive a round trip with their derived
// indexes.
func TestChunkSnapshotDeterministic(t *testing.T) {
	build := func(order []int, batched bool) *Partition {
		p := newRoot(t)
		var txns []*metapb.Txn
		for i, n := range order {
			c := chunkAt(byte(n), uint32(n+1), uint64(n)*1000)
			txns = append(txns, tx(chunkRefs(0, ref(c, int64(n%3+1), 0)), chunkRefs(7, ref(c, -1, uint64(n+1)))))
			if !batched || len(txns) == 16 || i == len(order)-1 {
				for _, r := range applyBatch(t, p, 1, &metapb.Batch{NowNs: 5, Txns: txns}) {
					if r.Errno != 0 {
						t.Fatalf("%s", r.Message)
					}
				}
				txns = nil
			}
		}
		return p
	}
	var order []int
	for i := range 200 {
		order = append(order, (i*73)%200)
	}
	// Drops carry increasing seqs per source, so the watermark depends on
	// the order: fix it by applying the highest last in both.
	slices.Sort(order)
	a := build(order, false)
	shuffled := slices.Clone(order)
	for i := range shuffled[:len(shuffled)-1] {
		j := (i * 37) % (len(shuffled) - 1)
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	b := newRoot(t)
	// b registers in another order, then applies the drops in seq order.
	for _, n := range shuffled {
		c := chunkAt(byte(n), uint32(n+1), uint64(n)*1000)
		mustRun(t, b, 5, chunkRefs(0, ref(c, int64(n%3+1), 0)))
	}
	for _, n := range order {
		c := chunkAt(byte(n), uint32(n+1), uint64(n)*1000)
		mustRun(t, b, 5, chunkRefs(7, ref(c, -1, uint64(n+1))))
	}
	if !sameBytes(snap(t, a), snap(t, b)) {
		t.Fatal("equal chunk indexes, different snapshots")
	}
	if !sameBytes(snap(t, a), snap(t, build(order, true))) {
		t.Fatal("batching changed the snapshot")
	}
	q := restored(t, a)
	if queries(q) != queries(a) || q.ChunkStats() != a.ChunkStats() || q.memoryBytes() != a.memoryBytes() {
		t.Fatalf("restored chunk index differs: %+v vs %+v", q.ChunkStats(), a.ChunkStats())
	}
	// The scan pages through everything in order.
	var seen []byte
	var after chunker.Fingerprint
	for {
		page, more := a.ScanChunks(after, 7)
		for _, r := range page {
			seen = append(seen, r.Chunk.Fingerprint[1])
			copy(after[:], r.Chunk.Fingerprint)
		}
		if !more {
			break
		}
	}
	if len(seen) != 200 || !slices.IsSorted(seen) {
		t.Fatalf("scan saw %d entries: %v", len(seen), seen)
	}
}

// TestChunkMemoryEstimate: the estimate follows chunk records in and out.
func TestChunkMemoryEstimate(t *testing.T) {
	p := newRoot(t)
	base := p.memoryBytes()
	var chunks []*metapb.Chunk
	for i := range 100 {
		chunks = append(chunks, chunkAt(byte(i), 10, uint64(i)*10))
	}
	refs := make([]*metapb.ChunkRef, len(chunks))
	for i, c := range chunks {
		refs[i] = ref(c, 1, 0)
	}
	mustRun(t, p, 2, createCDC(0o644), chunkRefs(0, refs...), splice(0, 0, 0, 0, 0, chunks...))
	grown := p.memoryBytes() - base
	want := uint64(inodeRecordBytes + inodeExtraBytes + cdcLayoutBytes + 100*chunkRefBytes + 100*chunkEntryBytes)
	if grown != want {
		t.Fatalf("estimate grew by %d, want %d", grown, want)
	}
	mustRun(t, p, 3, link(2, -1), evict(2))
	if got := p.memoryBytes() - base; got != 100*chunkEntryBytes+100*freedBytes {
		t.Fatalf("after evict the estimate is %d above the base, want the index and the drops", got)
	}
}

// TestChunkErrnoMessages: messages name what was wrong (fingerprints in hex).
func TestChunkErrnoMessages(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 1, chunkRefs(0, ref(chunkAt(1, 10, 0), 1, 0)))
	r := run(t, p, 2, chunkRefs(0, ref(chunkAt(1, 11, 0), 1, 0)))
	if metapb.Errno(r.Errno) != metapb.EINVAL || !strings.Contains(r.Message, testFP(1).String()) {
		t.Fatalf("size mismatch: %v %q", metapb.Errno(r.Errno), r.Message)
	}
}

// TestChunkCandidateSameKey: an entry that goes back to 0 references at the
// same apply time as before (two Txns of one batch) stays a candidate.
func TestChunkCandidateSameKey(t *testing.T) {
	p := newRoot(t)
	a := chunkAt(1, 10, 0)
	applyBatch(t, p, 1, &metapb.Batch{NowNs: 5, Txns: []*metapb.Txn{
		tx(chunkRefs(0, ref(a, 1, 0))),
		tx(chunkRefs(0, ref(a, -1, 0))),
		tx(chunkRefs(0, ref(a, 1, 0), ref(a, -1, 0))),
	}})
	if c := p.CollectCandidates(5, 10); len(c) != 1 {
		t.Fatalf("candidates %v", c)
	}
	checkDerived(t, p)
}
