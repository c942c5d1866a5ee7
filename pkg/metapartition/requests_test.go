package metapartition

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// runID applies one Txn with a request id at time now.
func runID(t testing.TB, p *Partition, now int64, id uint64, ops ...*metapb.Op) *metapb.TxnResult {
	t.Helper()
	txn := tx(ops...)
	txn.RequestId = id
	return applyBatch(t, p, uint64(now), &metapb.Batch{NowNs: now, Txns: []*metapb.Txn{txn}})[0]
}

// TestRequestIDExactlyOnce: a repeated request id is answered with the first
// result and changes nothing, also within one batch and after a snapshot
// round trip; a failed Txn is not remembered; ids are forgotten FIFO after
// RequestHistory newer ones.
func TestRequestIDExactlyOnce(t *testing.T) {
	p := newRoot(t)
	create := []*metapb.Op{createInode(reg, 0o644), createDentry(1, "f", 0, reg)}
	first := runID(t, p, 10, 77, create...)
	if first.Errno != 0 {
		t.Fatalf("create: %s", first.Message)
	}
	before := snap(t, p)
	again := runID(t, p, 11, 77, create...)
	if !proto.Equal(first, again) {
		t.Fatalf("retry answered %v, want the remembered %v", again, first)
	}
	if p.MaxIno() != 2 {
		t.Fatalf("retry allocated an inode: max %d", p.MaxIno())
	}
	// A different id applies (and fails: the name exists).
	if r := runID(t, p, 12, 78, create...); r.Errno != int32(metapb.EEXIST) {
		t.Fatalf("new id: errno %d, want EEXIST", r.Errno)
	}
	// The failure was not remembered: once the name is gone, id 78 applies.
	mustRun(t, p, 13, deleteDentry(1, "f", 2, reg), link(2, -1), evict(2))
	if r := runID(t, p, 14, 78, create...); r.Errno != 0 || r.Results[0].Inode.Ino != 3 {
		t.Fatalf("id 78 after its failure: %v", r)
	}

	// Duplicates inside one batch.
	mk := func(id uint64, name string) *metapb.Txn {
		x := tx(createInode(reg, 0), createDentry(1, name, 0, reg))
		x.RequestId = id
		return x
	}
	rs := applyBatch(t, p, 20, &metapb.Batch{NowNs: 20, Txns: []*metapb.Txn{mk(90, "g"), mk(90, "g"), mk(91, "h")}})
	if rs[0].Errno != 0 || !proto.Equal(rs[0], rs[1]) || rs[2].Errno != 0 || p.MaxIno() != 5 {
		t.Fatalf("batch with a duplicate: %v (max ino %d)", rs, p.MaxIno())
	}

	// Snapshot round trip keeps the history.
	data := snap(t, p)
	q, _ := New(1, 0)
	if err := q.Restore(data); err != nil {
		t.Fatal(err)
	}
	if !sameBytes(snap(t, q), data) {
		t.Fatal("re-snapshot differs")
	}
	if r := runID(t, q, 30, 77, create...); !proto.Equal(r, first) {
		t.Fatalf("after restore, retry of 77 answered %v", r)
	}
	if sameBytes(before, data) {
		t.Fatal("state did not change")
	}

	// FIFO bound: after RequestHistory newer ids, 77 is forgotten.
	for i := range uint64(RequestHistory) {
		if r := runID(t, q, 40, 1000+i, touchDir(1, 0, 0)); r.Errno != 0 {
			t.Fatal(r.Message)
		}
	}
	if len(q.requests.set) != RequestHistory || len(q.requests.live()) != RequestHistory {
		t.Fatalf("history holds %d/%d, want %d", len(q.requests.set), len(q.requests.live()), RequestHistory)
	}
	if r := runID(t, q, 50, 77, create...); r.Errno != int32(metapb.EEXIST) {
		t.Fatalf("forgotten id 77 should apply again (EEXIST), got %v", r)
	}
	data = snap(t, q)
	z, _ := New(1, 0)
	if err := z.Restore(data); err != nil || !sameBytes(snap(t, z), data) {
		t.Fatalf("full history round trip: %v", err)
	}
}

// TestParentPointer: CreateInode records an inode's parent, Setattr
// SETATTR_PARENT moves it, for directories and files alike, and it
// survives a snapshot round trip.
func TestParentPointer(t *testing.T) {
	p := newRoot(t)
	mkdir := func(parent uint64) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: dir, Mode: 0o755, Parent: parent}}}
	}
	r := mustRun(t, p, 2, mkdir(1), createDentry(1, "a", 0, dir))
	if got := r.Results[0].Inode.Parent; got != 1 {
		t.Fatalf("parent of new dir = %d, want 1", got)
	}
	mustRun(t, p, 3, mkdir(2), createDentry(2, "b", 0, dir))
	if in := mustInode(t, p, 3); in.Parent != 2 {
		t.Fatalf("GetInode parent = %d", in.Parent)
	}
	file := &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: reg, Parent: 3}}}
	r = mustRun(t, p, 5, file, createDentry(3, "f", 0, reg))
	if got := r.Results[0].Inode.Parent; got != 3 {
		t.Fatalf("parent of a new file = %d, want 3", got)
	}
	move := func(ino, parent uint64) *metapb.Op {
		return setattr(&metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_PARENT), Parent: parent})
	}
	if r := mustRun(t, p, 6, move(4, 1)); r.Results[0].Inode.Parent != 1 {
		t.Fatalf("a file moved to 1: parent %d", r.Results[0].Inode.Parent)
	}
	if r := run(t, p, 6, move(3, 0)); r.Errno != int32(metapb.EINVAL) {
		t.Fatalf("parent 0: errno %d, want EINVAL", r.Errno)
	}
	if r := run(t, p, 6, move(3, 3)); r.Errno != int32(metapb.EINVAL) {
		t.Fatalf("parent itself: errno %d, want EINVAL", r.Errno)
	}
	r = mustRun(t, p, 7, move(3, 1))
	if in := r.Results[0].Inode; in.Parent != 1 || in.CtimeNs != 7 {
		t.Fatalf("after move: parent %d ctime %d", in.Parent, in.CtimeNs)
	}
	data := snap(t, p)
	q, _ := New(1, 0)
	if err := q.Restore(data); err != nil {
		t.Fatal(err)
	}
	if in := mustInode(t, q, 3); in.Parent != 1 {
		t.Fatalf("restored parent = %d", in.Parent)
	}
	if in := mustInode(t, q, 1); in.Parent != 0 {
		t.Fatalf("root parent = %d", in.Parent)
	}
}

// TestRestoreVersion1: a version-1 snapshot (no parent pointers, no request
// history) still restores.
func TestRestoreVersion1(t *testing.T) {
	data := header(1, 1, 0, 1, 0).u(1).inodeRec(1, dir, 0o755, 2, 0).u(0, 0).u(0, 0, 0, 0).bytes()
	p, _ := New(1, 0)
	if err := p.Restore(data); err != nil {
		t.Fatalf("Restore v1: %v", err)
	}
	if in := mustInode(t, p, 1); in.Type != dir || in.Nlink != 2 {
		t.Fatalf("restored root %v", in)
	}
}

// TestAckFreed: AckFreed drops free-list entries up to a sequence number,
// refuses numbers not given out, is idempotent and survives snapshots.
func TestAckFreed(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "f", 0, reg),
		appendExtents(0, 0, ek(0, 1, 0, 10), ek(10, 2, 0, 10), ek(20, 3, 0, 10)))
	mustRun(t, p, 3, truncate(2, 0)) // frees the three extents
	free := p.FreeList()
	if len(free) != 3 {
		t.Fatalf("free list %v", free)
	}
	ack := func(upto uint64) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_AckFreed{AckFreed: &metapb.AckFreed{UptoSeq: upto}}}
	}
	if r := run(t, p, 4, ack(free[2].Seq+1)); r.Errno != int32(metapb.EINVAL) {
		t.Fatalf("ack beyond the list: errno %d", r.Errno)
	}
	mustRun(t, p, 5, ack(free[1].Seq))
	if got := p.FreeList(); len(got) != 1 || got[0] != free[2] {
		t.Fatalf("after ack: %v", got)
	}
	mustRun(t, p, 6, ack(free[0].Seq)) // again, lower: nothing changes
	data := snap(t, p)
	q, _ := New(1, 0)
	if err := q.Restore(data); err != nil || len(q.FreeList()) != 1 {
		t.Fatalf("restore: %v %v", err, q.FreeList())
	}
	mustRun(t, q, 7, ack(free[2].Seq))
	if len(q.FreeList()) != 0 || q.Stats(0).FreeExtents != 0 {
		t.Fatalf("free list not empty: %v", q.FreeList())
	}
}

// TestRequestHistoryBytes: the remembered results are bounded in bytes too,
// oldest forgotten first; a result above the bound alone is not
// remembered; the bound holds across compaction and snapshots.
func TestRequestHistoryBytes(t *testing.T) {
	var r reqRing
	quarter := make([]byte, RequestHistoryBytes/4)
	for id := uint64(1); id <= 10; id++ {
		r.pushBytes(id, quarter)
	}
	if len(r.live()) != 4 || r.live()[0].id != 7 || !r.has(10) || r.has(6) || r.bytes != RequestHistoryBytes {
		t.Fatalf("after 10 quarters: %d entries from %d, %d bytes", len(r.live()), r.live()[0].id, r.bytes)
	}
	r.pushBytes(11, make([]byte, RequestHistoryBytes+1))
	if r.has(11) || len(r.live()) != 4 {
		t.Fatalf("an oversized result was remembered or evicted others")
	}
	// Small entries push the quarters out one by one, and the buffer is
	// compacted on the way.
	for id := uint64(100); id < 100+3*RequestHistory; id++ {
		r.pushBytes(id, []byte{1})
	}
	if len(r.live()) != RequestHistory || r.bytes != RequestHistory || len(r.set) != RequestHistory || cap(r.buf) > 4*RequestHistory {
		t.Fatalf("after small entries: %d live, %d bytes, %d in set, cap %d", len(r.live()), r.bytes, len(r.set), cap(r.buf))
	}
	if r.live()[0].id != 100+2*RequestHistory || !r.has(99+3*RequestHistory) {
		t.Fatalf("oldest remembered is %d", r.live()[0].id)
	}
}

// TestChunkRefsExactlyOnce: a retried ChunkRefs (lookups take references)
// is answered from the history, not applied twice.
func TestChunkRefsExactlyOnce(t *testing.T) {
	p := newRoot(t)
	a := chunkAt(1, 10, 0)
	mustRun(t, p, 1, chunkRefs(0, ref(a, 1, 0)))
	first := runID(t, p, 2, 55, chunkRefs(0, ref(bare(a), 2, 0)))
	again := runID(t, p, 3, 55, chunkRefs(0, ref(bare(a), 2, 0)))
	if !proto.Equal(first, again) || first.Results[0].Chunks[0].Refs != 3 {
		t.Fatalf("retry answered %v, first %v", again, first)
	}
	wantEntry(t, p, a, 3, false, 2)
}
