package metapartition

import (
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

func pendingCreate(parent uint64, name string, ino uint64, id uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: parent, Name: []byte(name), Ino: ino, Type: reg,
		Pending: &metapb.PendingRename{Id: id, FromParent: parent, FromName: []byte("old")}}}}
}

func undoDelete(parent uint64, name string, ino, id uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: parent, Name: []byte(name), ExpectIno: ino, Undo: id}}}
}

func settle(parent uint64, name string, ino, id uint64) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_SettleDentry{SettleDentry: &metapb.SettleDentry{Parent: parent, Name: []byte(name), Ino: ino, Id: id}}}
}

// TestPendingName: a rename's new name placed pending refuses every other
// change (EMOVING: wait) until its rename settles it or takes it back; an
// undo or a settle names its rename, and a settle that finds nothing of its
// rename changes nothing. The mark survives a snapshot.
func TestPendingName(t *testing.T) {
	const remote = 1 << 40 // an inode homed elsewhere
	cases := []struct {
		name  string
		op    *metapb.Op
		errno metapb.Errno
	}{
		{"unlink waits", deleteDentry(1, "new", 0, 0), metapb.EMOVING},
		{"a commit holding its own does not wait", &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
			Parent: 1, Name: []byte("new"), Held: true}}}, metapb.EBUSY},
		{"create over it waits", createDentry(1, "new", remote+1, reg), metapb.EMOVING},
		{"replace waits", replaceDentry(1, "new", remote+1, reg, 0), metapb.EMOVING},
		{"another rename's placement waits", pendingCreate(1, "new", remote+1, 8), metapb.EMOVING},
		{"another rename's undo is refused", undoDelete(1, "new", remote, 8), metapb.ESTALE},
		{"another rename's settle changes nothing", settle(1, "new", remote, 8), metapb.OK},
		{"a settle of another inode changes nothing", settle(1, "new", remote+1, 7), metapb.OK},
	}
	bounded := func() *Partition {
		p, err := New(1, 100)
		if err != nil {
			t.Fatal(err)
		}
		mustRun(t, p, 1, createInode(dir, 0o755))
		return p
	}
	p := bounded()
	mustRun(t, p, 2, pendingCreate(1, "new", remote, 7))
	d, _, e := p.LookupPending(1, "new")
	if e != metapb.OK || d.GetPending().GetId() != 7 || d.GetPending().GetSince() != 2 || string(d.GetPending().GetFromName()) != "old" {
		t.Fatalf("placed pending: %v %v", d, e)
	}
	if got := p.PendingNames(3, 10); len(got) != 1 || string(got[0].GetName()) != "new" {
		t.Errorf("pending names placed before 3: %v", got)
	}
	if got := p.PendingNames(2, 10); len(got) != 0 {
		t.Errorf("pending names placed before 2: %v", got)
	}
	if _, _, e := p.Lookup(1, "new"); e != metapb.EMOVING {
		t.Errorf("lookup of a pending name: %v, want EMOVING", e)
	}
	for _, c := range cases {
		if r := run(t, p, 3, c.op); metapb.Errno(r.Errno) != c.errno {
			t.Errorf("%s: %v (%s), want %v", c.name, metapb.Errno(r.Errno), r.Message, c.errno)
		}
	}
	if d, _, _ := p.LookupPending(1, "new"); d.GetPending().GetId() != 7 || d.GetIno() != remote {
		t.Fatalf("after the refused ops: %v", d)
	}

	// The mark survives a snapshot.
	q := bounded()
	if err := q.Restore(snap(t, p)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if d, _, _ := q.LookupPending(1, "new"); d.GetPending().GetId() != 7 || d.GetPending().GetSince() != 2 {
		t.Fatalf("restored: %v", d)
	}

	if got := q.PendingNames(3, 10); len(got) != 1 {
		t.Errorf("restored pending names: %v", got)
	}
	// Taken over (a resolver): the rename's undo is refused, the new
	// owner settles it.
	r := bounded()
	if err := r.Restore(snap(t, q)); err != nil {
		t.Fatal(err)
	}
	mustRun(t, r, 4, &metapb.Op{Op: &metapb.Op_SettleDentry{SettleDentry: &metapb.SettleDentry{
		Parent: 1, Name: []byte("new"), Ino: remote, Id: 7, TakeOver: 9}}})
	if d, _, _ := r.LookupPending(1, "new"); d.GetPending().GetId() != 9 || d.GetPending().GetSince() != 2 {
		t.Fatalf("taken over: %v", d)
	}
	if res := run(t, r, 5, undoDelete(1, "new", remote, 7)); metapb.Errno(res.Errno) != metapb.ESTALE {
		t.Errorf("the rename's undo after a take-over: %v", metapb.Errno(res.Errno))
	}
	mustRun(t, r, 6, settle(1, "new", remote, 9))
	if d, _, e := r.Lookup(1, "new"); e != metapb.OK || d.GetIno() != remote {
		t.Errorf("settled by its new owner: %v %v", d, e)
	}

	// Taken back by its own rename.
	mustRun(t, q, 4, undoDelete(1, "new", remote, 7))
	if _, _, e := q.LookupPending(1, "new"); e != metapb.ENOENT {
		t.Errorf("after the undo: %v", e)
	}

	// Settled by its own rename: an ordinary name again.
	mustRun(t, p, 4, settle(1, "new", remote, 7))
	if d, _, _ := p.LookupPending(1, "new"); d.GetPending() != nil {
		t.Fatalf("settled: %v", d)
	}
	mustRun(t, p, 5, settle(1, "new", remote, 7)) // a retry
	if got := p.PendingNames(10, 10); len(got) != 0 {
		t.Errorf("pending names after the settle: %v", got)
	}
	if r := run(t, p, 6, undoDelete(1, "new", remote, 7)); metapb.Errno(r.Errno) != metapb.ESTALE {
		t.Errorf("undo after the settle: %v", metapb.Errno(r.Errno))
	}
	mustRun(t, p, 7, deleteDentry(1, "new", remote, 0))
}

// TestPendingReplacement: a placement over a name records what it
// replaced in its mark, which survives a snapshot, so that any attempt of
// the rename can put that name back; a placement of a free name records
// nothing.
func TestPendingReplacement(t *testing.T) {
	const remote = 1 << 40
	p, err := New(1, 100)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, p, 1, createInode(dir, 0o755))
	mustRun(t, p, 2, createDentry(1, "over", remote+5, reg))
	op := replaceDentry(1, "over", remote, reg, remote+5)
	op.GetReplaceDentry().Pending = &metapb.PendingRename{Id: 7, FromParent: 1, FromName: []byte("old")}
	mustRun(t, p, 3, op)
	mustRun(t, p, 4, pendingCreate(1, "free", remote+1, 8))
	q, err := New(1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Restore(snap(t, p)); err != nil {
		t.Fatal(err)
	}
	for _, part := range []*Partition{p, q} {
		d, _, _ := part.LookupPending(1, "over")
		if pd := d.GetPending(); pd.GetId() != 7 || pd.GetReplacedIno() != remote+5 || pd.GetReplacedType() != reg || d.GetIno() != remote {
			t.Errorf("placement over a name: %v", d)
		}
		d, _, _ = part.LookupPending(1, "free")
		if pd := d.GetPending(); pd.GetId() != 8 || pd.GetReplacedIno() != 0 || pd.GetReplacedType() != 0 {
			t.Errorf("placement of a free name: %v", d)
		}
	}
}
