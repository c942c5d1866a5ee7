package metapartition

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// checkDerived recomputes the derived indexes (orphans, name counts, hot
// names) from the trees and compares them with the maintained ones.
func checkDerived(t testing.TB, p *Partition) {
	t.Helper()
	var orphans []uint64
	p.inodes.Scan(func(in *inode) bool {
		if in.nlink == 0 {
			orphans = append(orphans, in.ino)
		}
		return true
	})
	if got := p.Orphans(); len(got) != len(orphans) {
		t.Fatalf("orphan set %v, inodes with nlink 0 %v", got, orphans)
	}
	names := map[string]int{}
	p.dentries.Scan(func(d dentry) bool {
		names[d.name]++
		return true
	})
	if len(names) != len(p.names) {
		t.Fatalf("%d distinct names counted, %d in the index", len(names), len(p.names))
	}
	hot := 0
	for name, n := range names {
		if got := int(p.names[nameHash(name)]); got != n {
			t.Fatalf("name %q: %d dentries, index says %d", name, n, got)
		}
		if n >= 2 {
			hot++
			if _, ok := p.hot.Get(nameN{n, name}); !ok {
				t.Fatalf("name %q with %d dentries missing from the hot index", name, n)
			}
		}
	}
	if p.hot.Len() != hot {
		t.Fatalf("hot index holds %d names, want %d", p.hot.Len(), hot)
	}
	want := newChunkDerived()
	p.chunks.Scan(func(e chunkEntry) bool {
		want.add(e)
		return true
	})
	p.free.Scan(func(f FreedExtent) bool {
		if f.IsChunkDrop() {
			want.drops++
		}
		return true
	})
	got := p.cidx
	if got.bytes != want.bytes || got.refBytes != want.refBytes || got.drops != want.drops ||
		!slices.Equal(got.zero.Items(), want.zero.Items()) || !slices.Equal(got.dead.Items(), want.dead.Items()) {
		t.Fatalf("chunk derived indexes: bytes %d/%d ref bytes %d/%d drops %d/%d zero %d/%d dead %d/%d",
			got.bytes, want.bytes, got.refBytes, want.refBytes, got.drops, want.drops,
			got.zero.Len(), want.zero.Len(), got.dead.Len(), want.dead.Len())
	}
}

// chunkWorld is world plus a chunked file (inode 5, /c, chunks c1 c2 c1 at
// generation 1), index entries for them (c1 with 2 references, c2 with 1),
// a dead entry c3, a live one without references c4, a chunk drop on the
// free list and a watermark for source 9.
func chunkWorld(t testing.TB) *Partition {
	t.Helper()
	p := world(t)
	c1, c2, c3, c4 := chunkAt(1, 10, 0), chunkAt(2, 20, 10), chunkAt(3, 5, 30), chunkAt(4, 6, 40)
	mustRun(t, p, 5, createCDC(0o644), createDentry(1, "c", 0, reg),
		chunkRefs(0, ref(c1, 2, 0), ref(c2, 1, 0), ref(c3, 1, 0), ref(c4, 1, 0)), splice(0, 0, 0, 0, 0, c1, c2, c1))
	mustRun(t, p, 6, chunkRefs(9, ref(c3, -1, 1), ref(c4, -1, 2)), splice(5, 1, 2, 3, 0))
	mustRun(t, p, 7, chunkCollect(6, c3))
	return p
}

func fuzzSeeds(f *testing.F) {
	for _, ops := range [][]*metapb.Op{
		{createInode(reg, 0o644), createDentry(1, "g", 0, reg), appendExtents(0, 10, ek(0, 1, 0, 10))},
		{deleteDentry(1, "f", 2, reg), link(2, -1), evict(2)},
		{replaceDentry(1, "f", 4, lnk, 2), setXattr(2, "user.q", "v", XattrCreate)},
		{truncate(2, 5), touchDir(1, 1, 9), fence(3, 1), unfence(3, 1), setRange(100)},
		{appendExtents(2, 0, ek(50, 2, 0, 10), ek(0, 3, 0, 60)), removeXattr(2, "user.a")},
		{splice(5, 2, 1, 2, 0, chunkAt(4, 6, 40), chunkAt(1, 10, 0)), truncate(5, 3), chunkRefs(9, ref(chunkAt(1, 10, 0), -1, 3))},
		{chunkRefs(0, ref(bare(chunkAt(1, 10, 0)), 1, 0), ref(chunkAt(5, 8, 50), 2, 0), ref(chunkAt(2, 20, 10), -4, 0)), chunkCollect(100, chunkAt(4, 6, 40))},
		{chunkForget(chunkAt(3, 5, 30)), chunkFix(&metapb.ChunkRecord{Chunk: chunkAt(1, 10, 0), Refs: 9, MtimeNs: 5})},
		{createCDC(0o600), createDentry(1, "d2", 0, reg), splice(0, 0, 0, 0, 3, chunkAt(2, 20, 10)), link(5, -1), deleteDentry(1, "c", 5, reg), evict(5)},
		{&metapb.Op{Op: &metapb.Op_AckFreed{AckFreed: &metapb.AckFreed{UptoSeq: 0}}}, chunkRefs(9, ref(chunkAt(2, 20, 10), -1, 2))},
	} {
		data, err := proto.Marshal(&metapb.Batch{NowNs: 77, Txns: []*metapb.Txn{tx(ops...), tx(ops[0])}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
}

// FuzzApply: Apply of any bytes either fails without changing anything or
// returns one result per Txn, and whatever it did, the state still passes
// the snapshot decoder's invariant checks and the derived indexes match.
func FuzzApply(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		p := chunkWorld(t)
		before := snap(t, p)
		res, err := p.Apply(1, data)
		if err != nil {
			if !sameBytes(before, snap(t, p)) {
				t.Fatal("Apply failed but changed the state")
			}
			return
		}
		var b metapb.Batch
		if proto.Unmarshal(data, &b) != nil {
			t.Fatal("Apply accepted what does not decode")
		}
		if rs, ok := res.([]*metapb.TxnResult); !ok || len(rs) != len(b.Txns) {
			t.Fatalf("Apply returned %T for %d txns", res, len(b.Txns))
		}
		after := snap(t, p)
		q, _ := New(1, 0)
		if err := q.Restore(after); err != nil {
			t.Fatalf("state after Apply does not restore: %v", err)
		}
		if !sameBytes(after, snap(t, q)) {
			t.Fatal("restored state snapshots differently")
		}
		checkDerived(t, p)
	})
}

// FuzzRestore: Restore of any bytes either fails without changing anything
// or yields a state whose snapshot restores to itself. The input is tried
// as is and with a correct checksum appended, so that the fuzzer gets past
// the CRC into the decoder.
func FuzzRestore(f *testing.F) {
	for _, data := range [][]byte{snap(f, richState(f)), snap(f, world(f)), snap(f, chunkWorld(f)), header(1, 1, 0, 0, 0).u(0, 0, 0, 0, 0).bytes()} {
		f.Add(data)
		f.Add(data[:len(data)-4]) // the body: the target appends the CRC
	}
	f.Add([]byte(snapMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		restoreOne(t, data)
		restoreOne(t, binary.LittleEndian.AppendUint32(slices.Clone(data), crc32.Checksum(data, castagnoli)))
	})
}

func restoreOne(t *testing.T, data []byte) {
	{
		p := world(t)
		before := snap(t, p)
		if err := p.Restore(data); err != nil {
			if !sameBytes(before, snap(t, p)) {
				t.Fatal("Restore failed but changed the state")
			}
			return
		}
		again := snap(t, p)
		q, _ := New(1, 0)
		if err := q.Restore(again); err != nil {
			t.Fatalf("snapshot of a restored state does not restore: %v", err)
		}
		if !sameBytes(again, snap(t, q)) {
			t.Fatal("restore is not idempotent")
		}
		checkDerived(t, p)
		// The restored state must keep working.
		run(t, p, 1, createInode(reg, 0), createDentry(1, "fz", 0, reg))
		checkDerived(t, p)
	}
}
