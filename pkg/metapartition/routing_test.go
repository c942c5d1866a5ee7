package metapartition

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// rt builds a Routing: version, slot owners, and exceptions given as
// (name, kind, mp) triples.
func rt(version uint64, slots []uint64, exc ...any) *metapb.Routing {
	m := &metapb.Routing{Version: version, SlotOwners: slots}
	for i := 0; i+2 < len(exc); i += 3 {
		m.Exceptions = append(m.Exceptions, &metapb.RouteException{
			Name: []byte(exc[i].(string)), Kind: uint32(exc[i+1].(hybridindex.Kind)), Mp: exc[i+2].(uint64),
		})
	}
	return m
}

func setRouting(self uint64, cur, prev *metapb.Routing, sealed bool) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_SetRouting{SetRouting: &metapb.SetRouting{Self: self, Current: cur, Previous: prev, Sealed: sealed}}}
}

func importOp(ds ...*metapb.Dentry) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_ImportDentries{ImportDentries: &metapb.ImportDentries{Dentries: ds}}}
}

func purgeOp(keys ...*metapb.DentryKey) *metapb.Op {
	return &metapb.Op{Op: &metapb.Op_PurgeDentries{PurgeDentries: &metapb.PurgeDentries{Keys: keys}}}
}

func dent(parent uint64, name string, ino uint64) *metapb.Dentry {
	return &metapb.Dentry{Parent: parent, Name: []byte(name), Ino: ino, Type: reg}
}

func key(parent uint64, name string) *metapb.DentryKey {
	return &metapb.DentryKey{Parent: parent, Name: []byte(name)}
}

// mine routes both test names ("n", held before the routing is set, and
// "m", created by the test) to mp by override.
func mine(version, mp uint64) *metapb.Routing {
	return rt(version, []uint64{1, 2}, "n", hybridindex.Override, mp, "m", hybridindex.Override, mp)
}

func names(ds []*metapb.Dentry) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Name)
	}
	return out
}

// TestDecisionTable checks every row of docs/routing.md's table for every
// kind of dentry access, on partition 1. Before the routing is set the
// partition holds root (ino 1), file 2 and dentry 1/n -> 2; each mutation
// runs on a fresh copy and must apply entirely or not at all.
func TestDecisionTable(t *testing.T) {
	const W, M = metapb.EWRONGMP, metapb.EMOVING
	type want struct {
		read   metapb.Errno
		write  metapb.Errno
		listed bool
	}
	cases := []struct {
		name string
		op   *metapb.Op // nil: never set
		want want
	}{
		{"never set", nil, want{metapb.OK, metapb.OK, true}},
		{"owned", setRouting(1, mine(1, 1), nil, false), want{metapb.OK, metapb.OK, true}},
		{"not owned", setRouting(1, mine(1, 2), nil, false), want{W, W, false}},
		{"staying", setRouting(1, mine(2, 1), mine(1, 1), false), want{metapb.OK, metapb.OK, true}},
		{"staying sealed", setRouting(1, mine(2, 1), mine(1, 1), true), want{metapb.OK, metapb.OK, true}},
		{"leaving", setRouting(1, mine(2, 2), mine(1, 1), false), want{metapb.OK, M, true}},
		{"leaving sealed", setRouting(1, mine(2, 2), mine(1, 1), true), want{W, W, true}},
		{"arriving", setRouting(1, mine(2, 1), mine(1, 2), false), want{M, M, false}},
		{"arriving sealed", setRouting(1, mine(2, 1), mine(1, 2), true), want{M, M, false}},
		{"elsewhere", setRouting(1, mine(2, 2), mine(1, 2), false), want{W, W, false}},
		{"elsewhere sealed", setRouting(1, mine(2, 2), mine(1, 2), true), want{W, W, false}},
	}
	build := func(t *testing.T, op *metapb.Op) *Partition {
		p := newRoot(t)
		mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "n", 0, reg))
		if op != nil {
			mustRun(t, p, 3, op)
		}
		return p
	}
	mutations := []struct {
		name string
		ops  []*metapb.Op
	}{
		{"create", []*metapb.Op{createInode(reg, 0o644), createDentry(1, "m", 0, reg)}},
		{"delete", []*metapb.Op{deleteDentry(1, "n", 2, reg)}},
		{"replace", []*metapb.Op{createInode(reg, 0o644), replaceDentry(1, "n", 0, reg, 2)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t, tc.op)
			if _, _, e := p.Lookup(1, "n"); e != tc.want.read {
				t.Errorf("Lookup = %v, want %v", e, tc.want.read)
			}
			if _, _, e := p.Lookup(1, "m"); e != tc.want.read && !(tc.want.read == metapb.OK && e == metapb.ENOENT) {
				t.Errorf("Lookup of a missing name = %v, want %v", e, tc.want.read)
			}
			listed := len(p.ReadDir(1, "", 10)) == 1
			if listed != tc.want.listed || p.CountChildren(1) != map[bool]int{true: 1}[listed] || p.HasChildren(1) != listed {
				t.Errorf("ReadDir lists n: %v, CountChildren %d, HasChildren %v; want listed %v",
					listed, p.CountChildren(1), p.HasChildren(1), tc.want.listed)
			}
			v, moving := p.RoutingState()
			wantV := uint64(0)
			if tc.op != nil {
				wantV = tc.op.GetSetRouting().Current.Version
			}
			if v != wantV || moving != (tc.op.GetSetRouting().GetPrevious() != nil) {
				t.Errorf("RoutingState = %d, %v", v, moving)
			}
			for _, mu := range mutations {
				q := build(t, tc.op)
				before := snap(t, q)
				r := run(t, q, 10, mu.ops...)
				if metapb.Errno(r.Errno) != tc.want.write {
					t.Errorf("%s: errno %v (%s), want %v", mu.name, metapb.Errno(r.Errno), r.Message, tc.want.write)
				}
				if r.Errno != 0 && !sameBytes(before, snap(t, q)) {
					t.Errorf("%s: refused txn changed the partition", mu.name)
				}
			}
		})
	}
}

func TestSetRoutingMonotonic(t *testing.T) {
	p := newRoot(t)
	v1 := rt(1, []uint64{1, 2})
	v2 := rt(2, []uint64{2, 2}, "a", hybridindex.PathWalk, uint64(0))
	v3 := rt(3, []uint64{1, 1})
	type state struct {
		version uint64
		prev    bool
		sealed  bool
	}
	steps := []struct {
		name  string
		op    *metapb.Op
		errno metapb.Errno
		after state
	}{
		{"first", setRouting(1, v1, nil, false), metapb.OK, state{1, false, false}},
		{"same again", setRouting(1, v1, nil, false), metapb.OK, state{1, false, false}},
		{"freeze v2", setRouting(1, v2, v1, false), metapb.OK, state{2, true, false}},
		{"older", setRouting(1, v1, nil, false), metapb.OK, state{2, true, false}},
		{"freeze again", setRouting(1, v2, v1, false), metapb.OK, state{2, true, false}},
		{"seal", setRouting(1, v2, v1, true), metapb.OK, state{2, true, true}},
		{"unseal is backwards", setRouting(1, v2, v1, false), metapb.OK, state{2, true, true}},
		{"done", setRouting(1, v2, nil, false), metapb.OK, state{2, false, false}},
		{"seal is backwards", setRouting(1, v2, v1, true), metapb.OK, state{2, false, false}},
		{"freeze is backwards", setRouting(1, v2, v1, false), metapb.OK, state{2, false, false}},
		{"same version other table", setRouting(1, rt(2, []uint64{1, 2}), nil, false), metapb.EINVAL, state{2, false, false}},
		{"other self", setRouting(2, v3, nil, false), metapb.EINVAL, state{2, false, false}},
		{"self 0", setRouting(0, v3, nil, false), metapb.EINVAL, state{2, false, false}},
		{"no current", setRouting(1, nil, nil, false), metapb.EINVAL, state{2, false, false}},
		{"version 0", setRouting(1, rt(0, []uint64{1}), nil, false), metapb.EINVAL, state{2, false, false}},
		{"sealed without previous", setRouting(1, v3, nil, true), metapb.EINVAL, state{2, false, false}},
		{"previous not older", setRouting(1, v3, rt(3, []uint64{1}), false), metapb.EINVAL, state{2, false, false}},
		{"no slots", setRouting(1, rt(3, nil), nil, false), metapb.EINVAL, state{2, false, false}},
		{"slot owner 0", setRouting(1, rt(3, []uint64{1, 0}), nil, false), metapb.EINVAL, state{2, false, false}},
		{"bad kind", setRouting(1, rt(3, []uint64{1}, "a", hybridindex.Kind(3), uint64(1)), nil, false), metapb.EINVAL, state{2, false, false}},
		{"hashed kind", setRouting(1, rt(3, []uint64{1}, "a", hybridindex.Hashed, uint64(0)), nil, false), metapb.EINVAL, state{2, false, false}},
		{"override to no owner", setRouting(1, rt(3, []uint64{1}, "a", hybridindex.Override, uint64(9)), nil, false), metapb.EINVAL, state{2, false, false}},
		{"path-walk with mp", setRouting(1, rt(3, []uint64{1}, "a", hybridindex.PathWalk, uint64(1)), nil, false), metapb.EINVAL, state{2, false, false}},
		{"bad name", setRouting(1, rt(3, []uint64{1}, "a/b", hybridindex.PathWalk, uint64(0)), nil, false), metapb.EINVAL, state{2, false, false}},
		{"repeated name", setRouting(1, rt(3, []uint64{1}, "a", hybridindex.PathWalk, uint64(0), "a", hybridindex.PathWalk, uint64(0)), nil, false), metapb.EINVAL, state{2, false, false}},
		{"bad previous", setRouting(1, v3, rt(2, nil), false), metapb.EINVAL, state{2, false, false}},
		{"newer replaces", setRouting(1, v3, nil, false), metapb.OK, state{3, false, false}},
	}
	for i, s := range steps {
		maxBefore := p.MaxIno()
		// A CreateInode in the same Txn shows that a refused SetRouting
		// fails the whole Txn.
		r := run(t, p, int64(10+i), createInode(reg, 0o644), s.op)
		if metapb.Errno(r.Errno) != s.errno {
			t.Fatalf("%s: errno %v (%s), want %v", s.name, metapb.Errno(r.Errno), r.Message, s.errno)
		}
		if s.errno != metapb.OK && p.MaxIno() != maxBefore {
			t.Fatalf("%s: refused txn allocated an inode", s.name)
		}
		m := p.Routing()
		got := state{m.GetCurrent().GetVersion(), m.GetPrevious() != nil, m.GetSealed()}
		if got != s.after {
			t.Fatalf("%s: state %+v, want %+v", s.name, got, s.after)
		}
	}
}

// TestSetRoutingInTxn: ops after a SetRouting in the same Txn see the new
// routing, and a failing op later in the Txn drops the SetRouting too.
func TestSetRoutingInTxn(t *testing.T) {
	p := newRoot(t)
	r := run(t, p, 2, setRouting(1, mine(1, 2), nil, false), createInode(reg, 0), createDentry(1, "n", 0, reg))
	if metapb.Errno(r.Errno) != metapb.EWRONGMP {
		t.Fatalf("create after SetRouting in one txn: %v, want EWRONGMP", metapb.Errno(r.Errno))
	}
	if v, _ := p.RoutingState(); v != 0 {
		t.Fatalf("failed txn set routing v%d", v)
	}
	mustRun(t, p, 3, setRouting(1, mine(1, 1), nil, false), createInode(reg, 0), createDentry(1, "n", 0, reg))
	if _, _, e := p.Lookup(1, "n"); e != metapb.OK {
		t.Fatalf("Lookup = %v", e)
	}
}

// rebuilt returns a copy of p through a snapshot: its derived indexes are
// computed from scratch, so comparing Stats checks the incremental ones.
func rebuilt(t *testing.T, p *Partition) *Partition {
	t.Helper()
	q, err := New(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Restore(snap(t, p)); err != nil {
		t.Fatal(err)
	}
	return q
}

// checkRebuilt checks the derived indexes against the trees and against a
// partition rebuilt through a snapshot (Stats, including the memory
// estimate, and the orphans).
func checkRebuilt(t *testing.T, p *Partition, count ...string) {
	t.Helper()
	checkDerived(t, p)
	q := rebuilt(t, p)
	a, b := p.Stats(50, count...), q.Stats(50, count...)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("stats differ from a rebuilt partition's:\n got %+v\nwant %+v", a, b)
	}
	if !slices.Equal(p.Orphans(), q.Orphans()) {
		t.Fatalf("orphans %v, rebuilt %v", p.Orphans(), q.Orphans())
	}
}

func TestImportDentries(t *testing.T) {
	p := newRoot(t)
	// A change in progress that moves every name to this partition.
	mustRun(t, p, 2, setRouting(1, rt(2, []uint64{1}), rt(1, []uint64{2}), false))
	before := p.Stats(10)
	var batch []*metapb.Dentry
	for i := range 40 {
		// "same" under 20 parents: a repeated name for the hot index.
		batch = append(batch, dent(uint64(100+i%20), "same", uint64(5000+i)), dent(7, fmt.Sprintf("f%02d", i), uint64(6000+i)))
	}
	// Twice the same key in one op: the later one wins.
	batch = append(batch, dent(7, "f00", 9999))
	mustRun(t, p, 3, importOp(batch...))
	s1 := snap(t, p)
	checkRebuilt(t, p, "f01")
	st := p.Stats(2, "f01")
	if st.Dentries != 60 || st.Inodes != before.Inodes || st.TopNames[0] != (NameCount{"same", 20}) || st.NamedCounts[0] != (NameCount{"f01", 1}) {
		t.Fatalf("stats after import: %+v", st)
	}
	if root := mustInode(t, p, 1); root.Nlink != 2 {
		t.Fatalf("import changed the root's nlink to %d", root.Nlink)
	}
	ds, _ := p.ScanDentries(7, "", 1, false)
	if len(ds) != 1 || string(ds[0].Name) != "f00" || ds[0].Ino != 9999 {
		t.Fatalf("first dentry of 7: %v", ds)
	}
	// Idempotent: the same import again changes nothing.
	mustRun(t, p, 4, importOp(batch...))
	if !sameBytes(s1, snap(t, p)) {
		t.Fatal("repeated import changed the partition")
	}
	// Other contents overwrite.
	mustRun(t, p, 5, importOp(&metapb.Dentry{Parent: 7, Name: []byte("f01"), Ino: 42, Type: dir}))
	ds, _ = p.ScanDentries(7, "f00", 1, false)
	if len(ds) != 1 || ds[0].Ino != 42 || ds[0].Type != dir {
		t.Fatalf("overwritten dentry: %v", ds)
	}
	checkRebuilt(t, p, "same")
	// Invalid dentries fail the whole op.
	s2 := snap(t, p)
	for _, d := range []*metapb.Dentry{
		{Parent: 0, Name: []byte("x"), Ino: 5, Type: reg},
		{Parent: 7, Name: []byte("x"), Ino: 0, Type: reg},
		{Parent: 7, Name: []byte("x"), Ino: 7, Type: reg},
		{Parent: 7, Name: []byte(".."), Ino: 5, Type: reg},
		{Parent: 7, Name: []byte("x"), Ino: 5, Type: 0},
	} {
		if r := run(t, p, 6, importOp(dent(7, "ok", 5), d)); metapb.Errno(r.Errno) != metapb.EINVAL {
			t.Fatalf("import of %v: %v", d, metapb.Errno(r.Errno))
		}
	}
	big := make([]*metapb.Dentry, MaxDentriesPerOp+1)
	for i := range big {
		big[i] = dent(8, fmt.Sprint(i), 5)
	}
	if r := run(t, p, 7, importOp(big...)); metapb.Errno(r.Errno) != metapb.E2BIG {
		t.Fatalf("oversized import: %v", metapb.Errno(r.Errno))
	}
	if !sameBytes(s2, snap(t, p)) {
		t.Fatal("failed import changed the partition")
	}
	// A name this partition already served before the change is not the
	// migration's to set; after the switch no import is taken (a deposed
	// master's late copy must not overwrite names the partition serves).
	q := newRoot(t)
	mustRun(t, q, 2, setRouting(1, rt(2, []uint64{1}), rt(1, []uint64{2, 1}, "f00", hybridindex.Override, uint64(1), "f01", hybridindex.Override, uint64(2)), false))
	mustRun(t, q, 3, importOp(dent(7, "f01", 6)))
	if r := run(t, q, 4, importOp(dent(7, "f00", 5))); metapb.Errno(r.Errno) != metapb.ESTALE {
		t.Fatalf("import of names owned before the change: %v", metapb.Errno(r.Errno))
	}
	mustRun(t, p, 8, setRouting(1, rt(2, []uint64{1}), nil, false))
	if r := run(t, p, 9, importOp(dent(7, "late", 5))); metapb.Errno(r.Errno) != metapb.ESTALE {
		t.Fatalf("import after the switch: %v", metapb.Errno(r.Errno))
	}
}

func TestPurgeDentries(t *testing.T) {
	// Under v2, 1/n is routed to mp 1 (owned) and m, whatever the parent,
	// to mp 2.
	v2 := rt(2, []uint64{1, 2}, "n", hybridindex.Override, uint64(1), "m", hybridindex.Override, uint64(2))
	p := newRoot(t)
	mustRun(t, p, 2, importOp(dent(1, "n", 50), dent(1, "m", 51), dent(9, "m", 52)))
	keys := []*metapb.DentryKey{key(1, "n"), key(1, "m"), key(1, "missing")}
	mustRun(t, p, 3, purgeOp(keys...)) // no routing: nothing goes
	if n := p.Stats(0).Dentries; n != 3 {
		t.Fatalf("purge without routing left %d dentries, want 3", n)
	}
	mustRun(t, p, 4, setRouting(1, v2, rt(1, []uint64{2}), false))
	mustRun(t, p, 5, purgeOp(keys...)) // a change is in progress: nothing goes
	mustRun(t, p, 6, setRouting(1, v2, rt(1, []uint64{2}), true))
	mustRun(t, p, 7, purgeOp(keys...)) // sealed is still in progress
	if n := p.Stats(0).Dentries; n != 3 {
		t.Fatalf("purge during a change left %d dentries, want 3", n)
	}
	mustRun(t, p, 8, setRouting(1, v2, nil, false))
	mustRun(t, p, 9, purgeOp(keys...))
	ds, _ := p.ScanDentries(0, "", 10, false)
	if got := fmt.Sprint(names(ds)); got != "[n m]" || ds[1].Parent != 9 {
		t.Fatalf("after purge: %v", ds)
	}
	s := snap(t, p)
	mustRun(t, p, 10, purgeOp(keys...))
	if !sameBytes(s, snap(t, p)) {
		t.Fatal("repeated purge changed the partition")
	}
	checkRebuilt(t, p, "m")
	if r := run(t, p, 11, purgeOp(key(0, "x"))); metapb.Errno(r.Errno) != metapb.EINVAL {
		t.Fatalf("purge of parent 0: %v", metapb.Errno(r.Errno))
	}
	if r := run(t, p, 11, purgeOp(key(1, ""))); metapb.Errno(r.Errno) != metapb.EINVAL {
		t.Fatalf("purge of an empty name: %v", metapb.Errno(r.Errno))
	}
}

func TestScan(t *testing.T) {
	p := newRoot(t)
	for i := range 9 {
		mustRun(t, p, int64(2+i), createInode(reg, 0o644), appendExtents(0, 0, ek(0, uint64(i+1), 0, 10)))
	}
	var inos []uint64
	var after uint64
	for pages := 0; ; pages++ {
		got, more := p.ScanInodes(after, 4, pages%2 == 0)
		for _, in := range got {
			inos = append(inos, in.Ino)
			if hasExt := len(in.Extents) > 0; in.Ino > 1 && hasExt != (pages%2 == 0) {
				t.Fatalf("inode %d on page %d: extents %v", in.Ino, pages, in.Extents)
			}
		}
		if !more {
			break
		}
		after = got[len(got)-1].Ino
	}
	if fmt.Sprint(inos) != "[1 2 3 4 5 6 7 8 9 10]" {
		t.Fatalf("scanned inodes %v", inos)
	}
	if got, more := p.ScanInodes(10, 4, false); len(got) != 0 || more {
		t.Fatalf("scan after the last inode: %v %v", got, more)
	}
	if got, _ := p.ScanInodes(0, 0, false); got != nil {
		t.Fatalf("limit 0 returned %v", got)
	}

	// Dentries under three parents; "x*" names are routed away by override.
	var all []*metapb.Dentry
	for _, parent := range []uint64{3, 1, 2} {
		for _, n := range []string{"b", "xa", "a", "xb"} {
			all = append(all, dent(parent, n, 100))
		}
	}
	mustRun(t, p, 20, importOp(all...))
	scan := func(notOwned bool, limit int) []string {
		var out []string
		var ap uint64
		var an string
		for {
			got, more := p.ScanDentries(ap, an, limit, notOwned)
			if len(got) > limit {
				t.Fatalf("page of %d, limit %d", len(got), limit)
			}
			for _, d := range got {
				out = append(out, fmt.Sprintf("%d/%s", d.Parent, d.Name))
			}
			if !more {
				return out
			}
			ap, an = got[len(got)-1].Parent, string(got[len(got)-1].Name)
		}
	}
	want := "[1/a 1/b 1/xa 1/xb 2/a 2/b 2/xa 2/xb 3/a 3/b 3/xa 3/xb]"
	for _, limit := range []int{1, 5, 12, 100} {
		if got := fmt.Sprint(scan(false, limit)); got != want {
			t.Fatalf("scan, limit %d: %s", limit, got)
		}
		if got := scan(true, limit); len(got) != 0 {
			t.Fatalf("not-owned scan without routing: %v", got)
		}
	}
	mustRun(t, p, 21, setRouting(1, rt(1, []uint64{1, 2}, "xa", hybridindex.Override, uint64(2), "xb", hybridindex.Override, uint64(2), "a", hybridindex.Override, uint64(1), "b", hybridindex.Override, uint64(1)), nil, false))
	for _, limit := range []int{1, 2, 5} {
		if got := fmt.Sprint(scan(true, limit)); got != "[1/xa 1/xb 2/xa 2/xb 3/xa 3/xb]" {
			t.Fatalf("not-owned scan, limit %d: %s", limit, got)
		}
	}
	// During a change, not owned means not owned under the target.
	mustRun(t, p, 22, setRouting(1, rt(2, []uint64{1, 2}, "a", hybridindex.Override, uint64(2), "b", hybridindex.Override, uint64(1), "xa", hybridindex.Override, uint64(1), "xb", hybridindex.Override, uint64(1)), p.Routing().Current, false))
	if got := fmt.Sprint(scan(true, 2)); got != "[1/a 2/a 3/a]" {
		t.Fatalf("not-owned scan during a change: %s", got)
	}
}

func TestSnapshotWithRouting(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "n", 0, reg))
	prev := rt(4, []uint64{1, 2, 1}, "n", hybridindex.PathWalk, uint64(0))
	cur := rt(5, []uint64{2, 2, 1}, "z", hybridindex.Override, uint64(1), "n", hybridindex.Override, uint64(2), "k", hybridindex.PathWalk, uint64(0))
	mustRun(t, p, 3, setRouting(1, cur, prev, true))
	data := snap(t, p)
	q := rebuilt(t, p)
	if !proto.Equal(p.Routing(), q.Routing()) {
		t.Fatalf("routing after restore %v, want %v", q.Routing(), p.Routing())
	}
	if names := q.Routing().Current.Exceptions; string(names[0].Name) != "k" || string(names[2].Name) != "z" {
		t.Fatalf("exceptions not sorted: %v", names)
	}
	if !sameBytes(data, snap(t, q)) {
		t.Fatal("re-snapshot differs")
	}
	_, _, e1 := p.Lookup(1, "n")
	_, _, e2 := q.Lookup(1, "n")
	if e1 != metapb.EWRONGMP || e2 != e1 {
		t.Fatalf("Lookup: %v before, %v after restore", e1, e2)
	}
	// Equal states, reached differently (exceptions given in another order),
	// give equal bytes.
	r := newRoot(t)
	mustRun(t, r, 2, createInode(reg, 0o644), createDentry(1, "n", 0, reg))
	slices.Reverse(cur.Exceptions)
	mustRun(t, r, 3, setRouting(1, cur, prev, true))
	if !sameBytes(data, snap(t, r)) {
		t.Fatal("equal states, different snapshots")
	}
}

// TestRestoreVersion2 reads a snapshot of the format before routing: the
// partition has no routing and accepts every name.
func TestRestoreVersion2(t *testing.T) {
	data := header(2, 1, 0, 0, 0).u(0, 1, 1).str("a").u(5, uint64(reg)).u(0, 0, 0, 0).bytes()
	p := newRoot(t)
	if err := p.Restore(data); err != nil {
		t.Fatal(err)
	}
	if v, moving := p.RoutingState(); v != 0 || moving || p.Routing() != nil {
		t.Fatalf("routing after restoring version 2: %d %v %v", v, moving, p.Routing())
	}
	if _, _, e := p.Lookup(1, "a"); e != metapb.OK {
		t.Fatalf("Lookup = %v", e)
	}
}

func TestStatsNamesAndMemory(t *testing.T) {
	p := newRoot(t)
	for i := range 6 {
		mustRun(t, p, int64(2+i), importOp(dent(uint64(10+i), "common", 5), dent(uint64(10+i%3), "trio", 5), dent(1, fmt.Sprint("u", i), 5)))
	}
	st := p.Stats(3, "common", "nope", "u1")
	if fmt.Sprint(st.NamedCounts) != "[{common 6} {nope 0} {u1 1}]" {
		t.Fatalf("named counts %v", st.NamedCounts)
	}
	// "common" and "u1" are counted, so not in the top names.
	if fmt.Sprint(st.TopNames) != "[{trio 3} {u0 1} {u2 1}]" {
		t.Fatalf("top names %v", st.TopNames)
	}
	if st.InodeStart != 1 || st.InodeEnd != 0 || st.MaxIno != 1 || st.MemoryBytes == 0 {
		t.Fatalf("stats %+v", st)
	}
	m0 := st.MemoryBytes
	mustRun(t, p, 20, createInode(reg, 0), setXattr(0, "user.a", "12345", 0), appendExtents(0, 0, ek(0, 1, 0, 5), ek(100, 2, 0, 5)))
	if m1 := p.Stats(0).MemoryBytes; m1 <= m0 {
		t.Fatalf("memory %d after adding an inode, was %d", m1, m0)
	}
	checkRebuilt(t, p, "common")
	mustRun(t, p, 21, link(2, -1), evict(2), deleteDentry(1, "u0", 0, 0))
	checkRebuilt(t, p, "common")
}

// TestMigrationRandomized runs a whole routing change (growth from two MPs
// to three plus exception-table changes) the way the master drives it, on
// three in-memory partitions, after random creates: every name must end up
// exactly once, on its owner under the new routing, and every listing
// along the way must show every name exactly once.
func TestMigrationRandomized(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { migrate(t, seed) })
	}
}

func migrate(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	mps := map[uint64]*Partition{}
	for id := uint64(1); id <= 3; id++ {
		// Inode ranges away from the dentries' targets and parents, which are
		// therefore remote and not checked.
		p, err := New(id*1000, id*1000+999)
		if err != nil {
			t.Fatal(err)
		}
		mps[id] = p
	}
	slots := make([]uint64, 64)
	for i := range slots {
		slots[i] = uint64(1 + i*2/len(slots))
	}
	r1 := rt(1, slots, "common", hybridindex.PathWalk, uint64(0), "hot", hybridindex.Override, uint64(2))
	slots2, _, err := hybridindex.Rebalance(slots, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	r2 := rt(2, slots2, "hot", hybridindex.Override, uint64(3), "index", hybridindex.PathWalk, uint64(0))
	tab := func(m *metapb.Routing) *routeTable {
		x, err := newRouteTable("test", m)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	t1, t2 := tab(r1), tab(r2)
	now := int64(1)
	do := func(id uint64, ops ...*metapb.Op) *metapb.TxnResult {
		now++
		return run(t, mps[id], now, ops...)
	}
	setAll := func(cur, prev *metapb.Routing, sealed bool) {
		for id := range mps {
			if r := do(id, setRouting(id, cur, prev, sealed)); r.Errno != 0 {
				t.Fatalf("SetRouting on %d: %s", id, r.Message)
			}
		}
	}
	setAll(r1, nil, false)

	type k struct {
		parent uint64
		name   string
	}
	created := map[k]uint64{}
	vocab := []string{"common", "hot", "index", "Makefile", "a.txt"}
	for i := range 600 {
		name := fmt.Sprintf("f%d", rng.IntN(300))
		if rng.IntN(4) == 0 {
			name = vocab[rng.IntN(len(vocab))]
		}
		parent := uint64(1 + rng.IntN(8))
		owner, _ := t1.table.Route(parent, name)
		ino := uint64(100000 + i)
		r := do(owner, createDentry(parent, name, ino, reg))
		switch {
		case r.Errno == 0:
			created[k{parent, name}] = ino
		case metapb.Errno(r.Errno) != metapb.EEXIST:
			t.Fatalf("create %d/%s on %d: %s", parent, name, owner, r.Message)
		}
		// The other partitions refuse the name.
		for id := range mps {
			if id != owner {
				if r := do(id, createDentry(parent, name, ino, reg)); metapb.Errno(r.Errno) != metapb.EWRONGMP {
					t.Fatalf("create %d/%s on non-owner %d: %v", parent, name, id, metapb.Errno(r.Errno))
				}
			}
		}
	}
	// Every listing shows every name exactly once.
	checkListing := func(phase string) {
		t.Helper()
		seen := map[k]int{}
		for _, p := range mps {
			for parent := uint64(1); parent <= 8; parent++ {
				for _, d := range p.ReadDir(parent, "", 1<<20) {
					seen[k{d.Parent, string(d.Name)}]++
				}
			}
		}
		if len(seen) != len(created) {
			t.Fatalf("%s: listings hold %d names, want %d", phase, len(seen), len(created))
		}
		for key, n := range seen {
			if n != 1 || created[key] == 0 {
				t.Fatalf("%s: %d/%s listed %d times (created: %v)", phase, key.parent, key.name, n, created[key] != 0)
			}
		}
	}
	checkListing("before")
	scanAll := func(id uint64) []*metapb.Dentry {
		var out []*metapb.Dentry
		var ap uint64
		var an string
		for {
			got, more := mps[id].ScanDentries(ap, an, 1+rng.IntN(50), true)
			out = append(out, got...)
			if !more {
				return out
			}
			ap, an = got[len(got)-1].Parent, string(got[len(got)-1].Name)
		}
	}

	// FREEZE.
	setAll(r2, r1, false)
	checkListing("freeze")
	for key := range created {
		from, _ := t1.table.Route(key.parent, key.name)
		to, _ := t2.table.Route(key.parent, key.name)
		want := metapb.EMOVING
		if from == to {
			want = metapb.OK
		}
		if r := do(from, deleteDentry(key.parent, key.name, 0, 0), createDentry(key.parent, key.name, created[key], reg)); metapb.Errno(r.Errno) != want {
			t.Fatalf("rewrite of %d/%s on %d during freeze: %v, want %v", key.parent, key.name, from, metapb.Errno(r.Errno), want)
		}
		if _, _, e := mps[from].Lookup(key.parent, key.name); e != metapb.OK {
			t.Fatalf("lookup of %d/%s on source %d during freeze: %v", key.parent, key.name, from, e)
		}
		if from != to {
			if _, _, e := mps[to].Lookup(key.parent, key.name); e != metapb.EMOVING {
				t.Fatalf("lookup of %d/%s on destination %d during freeze: %v", key.parent, key.name, to, e)
			}
		}
	}
	// COPY, twice: a restarted step must be harmless.
	for range 2 {
		for id := uint64(1); id <= 3; id++ {
			byOwner := map[uint64][]*metapb.Dentry{}
			for _, d := range scanAll(id) {
				to, _ := t2.table.Route(d.Parent, string(d.Name))
				byOwner[to] = append(byOwner[to], d)
			}
			for to, ds := range byOwner {
				if r := do(to, importOp(ds...)); r.Errno != 0 {
					t.Fatalf("import into %d: %s", to, r.Message)
				}
			}
		}
		checkListing("copy")
	}
	// SWITCH: all sealed, then all done.
	setAll(r2, r1, true)
	checkListing("sealed")
	setAll(r2, nil, false)
	checkListing("switched")
	// PURGE.
	for id := uint64(1); id <= 3; id++ {
		var keys []*metapb.DentryKey
		for _, d := range scanAll(id) {
			keys = append(keys, key(d.Parent, string(d.Name)))
		}
		if r := do(id, purgeOp(keys...)); r.Errno != 0 {
			t.Fatalf("purge on %d: %s", id, r.Message)
		}
		if left := scanAll(id); len(left) != 0 {
			t.Fatalf("partition %d still holds %d names it does not own", id, len(left))
		}
		checkRebuilt(t, mps[id], "hot", "common")
	}
	checkListing("purged")
	total := 0
	for id, p := range mps {
		all, _ := p.ScanDentries(0, "", 1<<20, false)
		total += len(all)
		for _, d := range all {
			if to, _ := t2.table.Route(d.Parent, string(d.Name)); to != id {
				t.Fatalf("%d/%s on %d, owner %d", d.Parent, d.Name, id, to)
			}
		}
	}
	if total != len(created) {
		t.Fatalf("%d dentries after the migration, want %d", total, len(created))
	}
	for key, ino := range created {
		to, _ := t2.table.Route(key.parent, key.name)
		for id, p := range mps {
			d, _, e := p.Lookup(key.parent, key.name)
			if id == to && (e != metapb.OK || d.Ino != ino) {
				t.Fatalf("lookup of %d/%s on its owner %d: %v %v", key.parent, key.name, id, e, d)
			}
			if id != to && e != metapb.EWRONGMP {
				t.Fatalf("lookup of %d/%s on %d (owner %d): %v", key.parent, key.name, id, to, e)
			}
		}
	}
}
