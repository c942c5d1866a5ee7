package metapartition

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// charged returns op with quota charges: to nil charges the footprint
// change to qs; a non-nil to moves it from qs to to.
func charged(op *metapb.Op, qs []uint64, to []uint64) *metapb.Op {
	op.Quotas = qs
	if to != nil {
		op.QuotasTo, op.QuotasMove = to, true
	}
	return op
}

// TestQuotaCharges follows one partition's counts through the ops that
// change footprints, including failed Txns (which charge nothing), a
// rename's move, retries, and a snapshot round trip.
func TestQuotaCharges(t *testing.T) {
	p := newRoot(t)
	q1, q2 := []uint64{10}, []uint64{10, 20} // 20 nested in 10
	want := func(step string, id uint64, bytes, inodes int64) {
		t.Helper()
		if got := p.QuotaUseOf(id); got != (QuotaUse{Bytes: bytes, Inodes: inodes}) {
			t.Fatalf("%s: quota %d = %+v, want %d bytes %d inodes", step, id, got, bytes, inodes)
		}
	}
	// A directory (no bytes) and a file in it.
	d := mustRun(t, p, 2, charged(createInode(dir, 0o755), q1, nil), createDentry(1, "d", 0, dir)).Results[0].Inode.Ino
	f := mustRun(t, p, 3, charged(createInode(reg, 0o644), q2, nil), createDentry(d, "f", 0, reg)).Results[0].Inode.Ino
	want("create", 10, 0, 2)
	want("create", 20, 0, 1)

	// Growth by append, by truncate; shrink by truncate.
	mustRun(t, p, 4, charged(appendExtents(f, 5000, ek(0, 1, 0, 5000)), q2, nil))
	want("append", 10, 5000, 2)
	want("append", 20, 5000, 1)
	mustRun(t, p, 5, charged(truncate(f, 8192), q2, nil))
	want("truncate up", 20, 8192, 1)
	mustRun(t, p, 6, charged(truncate(f, 100), q2, nil))
	want("truncate down", 20, 100, 1)

	// A failed Txn charges nothing.
	if r := run(t, p, 7, charged(appendExtents(f, 9000, ek(100, 2, 0, 8900)), q2, nil), createDentry(1, "d", 5, dir)); r.Errno == 0 {
		t.Fatal("a Txn that creates an existing name succeeded")
	}
	want("failed txn", 20, 100, 1)

	// A retried Txn (same request id) charges once.
	retry := &metapb.Txn{RequestId: 77, Ops: []*metapb.Op{charged(appendExtents(f, 300, ek(100, 3, 0, 200)), q2, nil)}}
	for i := range 2 {
		applyBatch(t, p, uint64(8+i), &metapb.Batch{NowNs: 8, Txns: []*metapb.Txn{retry}})
	}
	want("retry", 20, 300, 1)

	// A rename out of quota 20 (still below 10) moves the charge.
	mustRun(t, p, 10, charged(setattr(&metapb.Setattr{Ino: f, Valid: uint32(metapb.SetattrValid_SETATTR_PARENT), Parent: 1}), q2, q1))
	want("move", 20, 0, 0)
	want("move", 10, 300, 2)

	// Snapshot round trip keeps the counts.
	q, err := New(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Restore(snap(t, p)); err != nil {
		t.Fatal(err)
	}
	if got := q.QuotaUse(); len(got) != 1 || got[10] != (QuotaUse{300, 2}) {
		t.Fatalf("restored counts %v", got)
	}

	// Unlink and eviction of the file, then of the directory.
	mustRun(t, p, 11, charged(&metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: f, Delta: -1, EvictAtZero: true}}}, q1, nil))
	want("evict file", 10, 0, 1)
	mustRun(t, p, 12, deleteDentry(1, "d", d, dir), charged(link(d, -2), q1, nil), charged(evict(d), q1, nil))
	if got := p.QuotaUse(); len(got) != 0 {
		t.Fatalf("counts after every inode left: %v", got)
	}
}

// TestQuotaBadInput checks that quota lists are refused on ops that change
// no footprint, with id 0, or longer than MaxQuotasPerOp.
func TestQuotaBadInput(t *testing.T) {
	p := newRoot(t)
	long := make([]uint64, MaxQuotasPerOp+1)
	for i := range long {
		long[i] = uint64(i + 1)
	}
	for name, op := range map[string]*metapb.Op{
		"dentry op": charged(createDentry(1, "x", 1, dir), []uint64{1}, nil),
		"id 0":      charged(createInode(reg, 0o644), []uint64{0}, nil),
		"too many":  charged(createInode(reg, 0o644), long, nil),
	} {
		if r := run(t, p, 2, op); metapb.Errno(r.Errno) != metapb.EINVAL {
			t.Errorf("%s: errno %v, want EINVAL", name, metapb.Errno(r.Errno))
		}
	}
	if got := p.QuotaUse(); len(got) != 0 {
		t.Fatalf("refused ops charged %v", got)
	}
}
