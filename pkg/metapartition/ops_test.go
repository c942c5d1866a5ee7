package metapartition

import (
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

func TestCreateFile(t *testing.T) {
	p := newRoot(t)
	r := mustRun(t, p, 50, createInode(reg, 0o100644), createDentry(1, "hello.txt", 0, reg))
	want := &metapb.Inode{Ino: 2, Type: reg, Mode: 0o644, Uid: 1000, Gid: 100, Nlink: 1,
		AtimeNs: 50, MtimeNs: 50, CtimeNs: 50, BtimeNs: 50}
	if got := r.Results[0].Inode; !proto.Equal(got, want) {
		t.Errorf("create_inode result %v, want %v (type bits of mode dropped)", got, want)
	}
	wantD := &metapb.Dentry{Parent: 1, Name: []byte("hello.txt"), Ino: 2, Type: reg}
	if got := r.Results[1].Dentry; !proto.Equal(got, wantD) {
		t.Errorf("create_dentry result %v, want %v", got, wantD)
	}
	d, in, e := p.Lookup(1, "hello.txt")
	if e != metapb.OK || !proto.Equal(d, wantD) || !proto.Equal(in, want) {
		t.Errorf("Lookup = %v, %v, %v", d, in, e)
	}
	if _, _, e := p.Lookup(1, "nope"); e != metapb.ENOENT {
		t.Errorf("Lookup of a missing name: %v, want ENOENT", e)
	}
	if _, _, e := p.Lookup(1, strings.Repeat("n", 256)); e != metapb.ENAMETOOLONG {
		t.Errorf("Lookup of a long name: %v, want ENAMETOOLONG", e)
	}
	if p.MaxIno() != 2 {
		t.Errorf("MaxIno %d, want 2", p.MaxIno())
	}
	// The root's times are the service's business (TouchDir), not create's.
	if root := mustInode(t, p, 1); root.MtimeNs != 1 || root.Nlink != 2 {
		t.Errorf("root changed by a create: %v", root)
	}
	// A 255-byte name is fine.
	mustRun(t, p, 51, createInode(reg, 0o644), createDentry(1, strings.Repeat("n", 255), 0, reg))
}

func TestSpecialFiles(t *testing.T) {
	p := newRoot(t)
	r := mustRun(t, p, 5,
		createSymlink("../target"), createDentry(1, "s", 0, lnk),
		&metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: chr, Mode: 0o600, Rdev: 0x0501}}},
		createInode(fifo, 0o644), createInode(metapb.FileType_FILE_TYPE_SOCKET, 0o755))
	s := r.Results[0].Inode
	if string(s.Target) != "../target" || s.Size != 9 || s.Nlink != 1 {
		t.Errorf("symlink %v: want target ../target, size 9", s)
	}
	if c := r.Results[2].Inode; c.Rdev != 0x0501 || c.Type != chr || c.Ino != 3 {
		t.Errorf("char device %v", c)
	}
	// Only the first create_inode is what ino 0 refers to: the dentry points at 2.
	if d, _, _ := p.Lookup(1, "s"); d.Ino != 2 {
		t.Errorf("dentry points at %d, want 2", d.Ino)
	}
}

func TestMkdirAndTouchDir(t *testing.T) {
	p := newRoot(t)
	r := mustRun(t, p, 10, createInode(dir, 0o755), createDentry(1, "sub", 0, dir), touchDir(1, 1, 42))
	if in := r.Results[0].Inode; in.Nlink != 2 || in.Type != dir {
		t.Errorf("new directory %v: want nlink 2", in)
	}
	root := r.Results[2].Inode
	if root.Nlink != 3 || root.MtimeNs != 10 || root.CtimeNs != 10 || root.AtimeNs != 1 {
		t.Errorf("touched root %v: want nlink 3, mtime=ctime=10, atime 1", root)
	}
	// A retry of the same (ino, op_id), alone or inside a bigger Txn, in a
	// later batch, changes nothing.
	r = mustRun(t, p, 20, touchDir(1, 1, 42))
	if got := r.Results[0].Inode; got.Nlink != 3 || got.MtimeNs != 10 {
		t.Errorf("retried touch_dir changed the directory: %v", got)
	}
	// Twice in one Txn: once.
	mustRun(t, p, 30, touchDir(1, 1, 43), touchDir(1, 1, 43))
	if got := mustInode(t, p, 1); got.Nlink != 4 || got.MtimeNs != 30 {
		t.Errorf("touch_dir twice in a txn: %v, want nlink 4", got)
	}
	// The same op id on another directory is another operation.
	mustRun(t, p, 31, touchDir(2, 1, 43))
	if got := mustInode(t, p, 2); got.Nlink != 3 {
		t.Errorf("op id on another inode: nlink %d, want 3", got.Nlink)
	}
	// op id 0 never deduplicates.
	mustRun(t, p, 32, touchDir(1, -1, 0))
	mustRun(t, p, 33, touchDir(1, -1, 0))
	if got := mustInode(t, p, 1); got.Nlink != 2 {
		t.Errorf("op id 0: nlink %d, want 2", got.Nlink)
	}
	// The history survives a snapshot.
	q := restored(t, p)
	mustRun(t, q, 40, touchDir(1, 1, 42))
	if got := mustInode(t, q, 1); got.Nlink != 2 {
		t.Errorf("retry after restore applied: nlink %d", got.Nlink)
	}
}

// restored returns a new partition restored from p's snapshot.
func restored(t testing.TB, p *Partition) *Partition {
	t.Helper()
	q, err := New(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Restore(snap(t, p)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return q
}

func TestTouchHistoryIsBounded(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, touchDir(1, 1, 1)) // nlink 3
	ops := make([]*metapb.Op, 0, MaxOpsPerTxn)
	for id := uint64(2); id <= TouchHistory+1; id++ {
		ops = append(ops, touchDir(1, 0, id))
		if len(ops) == MaxOpsPerTxn {
			mustRun(t, p, 3, ops...)
			ops = ops[:0]
		}
	}
	mustRun(t, p, 3, ops...)
	if p.touched.Len() != TouchHistory || len(p.touched.Oldest()) != TouchHistory {
		t.Fatalf("history holds %d/%d entries, want %d", p.touched.Len(), len(p.touched.Oldest()), TouchHistory)
	}
	// Op 1 was pushed out by the TouchHistory later ones: it applies again.
	mustRun(t, p, 4, touchDir(1, 1, 1))
	mustRun(t, p, 5, touchDir(1, 1, TouchHistory+1)) // still remembered
	if got := mustInode(t, p, 1); got.Nlink != 4 {
		t.Fatalf("nlink %d, want 4 (op 1 forgotten, op %d remembered)", got.Nlink, TouchHistory+1)
	}
	// Restore keeps the FIFO order: the next op to forget is op 3 (op 2
	// went when op 1 came back in).
	q := restored(t, p)
	mustRun(t, q, 6, touchDir(1, 0, 999_999))
	if q.touched.Has(opKey{1, 3}) || !q.touched.Has(opKey{1, 4}) {
		t.Errorf("after restore the FIFO forgot the wrong entry")
	}
	if !sameBytes(snap(t, q), func() []byte { mustRun(t, p, 6, touchDir(1, 0, 999_999)); return snap(t, p) }()) {
		t.Errorf("restored history diverged from the original")
	}
}

func TestLinkUnlinkOrphanEvict(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "a", 0, reg),
		appendExtents(0, 300, ek(0, 5, 0, 100), ek(100, 6, 0, 200)))
	// Hard link: nlink first, then the name (CFS §2.6.2).
	r := mustRun(t, p, 3, link(2, 1), createDentry(1, "b", 2, reg))
	if in := r.Results[0].Inode; in.Nlink != 2 || in.CtimeNs != 3 || in.MtimeNs != 2 {
		t.Errorf("after link: %v, want nlink 2, ctime 3, mtime 2", in)
	}
	mustRun(t, p, 4, deleteDentry(1, "a", 2, reg), link(2, -1))
	if o := p.Orphans(); len(o) != 0 {
		t.Fatalf("orphans with one name left: %v", o)
	}
	mustRun(t, p, 5, deleteDentry(1, "b", 2, reg), link(2, -1))
	if o := p.Orphans(); !slices.Equal(o, []uint64{2}) {
		t.Fatalf("orphans %v, want [2]", o)
	}
	// Still readable by open handles.
	in := mustInode(t, p, 2)
	if in.Nlink != 0 || len(in.Extents) != 2 || in.CtimeNs != 5 {
		t.Errorf("orphan %v: want nlink 0, 2 extents", in)
	}
	if s := p.Stats(0); s.Orphans != 1 || s.Inodes != 2 || s.Dentries != 0 {
		t.Errorf("stats %+v", s)
	}
	// linkat of an O_TMPFILE-like orphan brings it back.
	mustRun(t, p, 6, link(2, 1), createDentry(1, "c", 2, reg))
	if o := p.Orphans(); len(o) != 0 {
		t.Fatalf("relinked inode still an orphan: %v", o)
	}
	mustRun(t, p, 7, deleteDentry(1, "c", 2, 0), link(2, -1))
	r = mustRun(t, p, 8, evict(2))
	if r.Results[0].Inode.Ino != 2 {
		t.Errorf("evict result %v", r.Results[0].Inode)
	}
	if _, e := p.GetInode(2); e != metapb.ENOENT {
		t.Errorf("evicted inode: %v, want ENOENT", e)
	}
	if o := p.Orphans(); len(o) != 0 {
		t.Errorf("orphans after evict: %v", o)
	}
	want := []FreedExtent{ // seqs start at 1
		{Seq: 1, Ino: 2, PartitionID: 7, ExtentID: 5, ExtentOffset: 0, Size: 100},
		{Seq: 2, Ino: 2, PartitionID: 7, ExtentID: 6, ExtentOffset: 0, Size: 200},
	}
	if got := p.FreeList(); !slices.Equal(got, want) {
		t.Errorf("free list %+v, want %+v", got, want)
	}
	// Unlink and evict of a non-regular file in one Txn.
	mustRun(t, p, 9, createInode(fifo, 0o644), createDentry(1, "p", 0, fifo))
	mustRun(t, p, 10, deleteDentry(1, "p", 0, fifo), link(3, -1), evict(3))
	if s := p.Stats(0); s.Inodes != 1 || s.Orphans != 0 || s.Dentries != 0 || s.FreeExtents != 2 {
		t.Errorf("stats %+v", s)
	}
	// rmdir on the directory's home: drop both links and evict.
	mustRun(t, p, 11, createInode(dir, 0o755), createDentry(1, "d", 0, dir), touchDir(1, 1, 0))
	mustRun(t, p, 12, deleteDentry(1, "d", 4, dir), link(4, -2), evict(4), touchDir(1, -1, 0))
	if got := mustInode(t, p, 1); got.Nlink != 2 {
		t.Errorf("root nlink %d after mkdir+rmdir", got.Nlink)
	}
}

func TestInoZeroRefersToCreatedInode(t *testing.T) {
	p := newRoot(t)
	r := mustRun(t, p, 2,
		createInode(dir, 0o700),
		createInode(reg, 0o644), // not what ino 0 means
		createDentry(1, "d", 0, dir),
		setXattr(0, "user.x", "y", XattrCreate),
		setattr(&metapb.Setattr{Ino: 0, Valid: uint32(metapb.SetattrValid_SETATTR_MODE), Mode: 0o750}),
		createDentry(0, "inner", 3, reg), // parent 0: the new directory
	)
	if r.Results[1].Inode.Ino != 3 {
		t.Fatalf("second inode %d, want 3", r.Results[1].Inode.Ino)
	}
	if d, in, _ := p.Lookup(1, "d"); d.Ino != 2 || in.Mode != 0o750 || string(in.Xattrs["user.x"]) != "y" {
		t.Errorf("lookup d: %v %v", d, in)
	}
	if d, _, e := p.Lookup(2, "inner"); e != metapb.OK || d.Ino != 3 {
		t.Errorf("lookup 2/inner: %v %v", d, e)
	}
}

func TestSetattr(t *testing.T) {
	const (
		mode     = uint32(metapb.SetattrValid_SETATTR_MODE)
		uid      = uint32(metapb.SetattrValid_SETATTR_UID)
		gid      = uint32(metapb.SetattrValid_SETATTR_GID)
		atime    = uint32(metapb.SetattrValid_SETATTR_ATIME)
		mtime    = uint32(metapb.SetattrValid_SETATTR_MTIME)
		atimeNow = uint32(metapb.SetattrValid_SETATTR_ATIME_NOW)
		mtimeNow = uint32(metapb.SetattrValid_SETATTR_MTIME_NOW)
		ctime    = uint32(metapb.SetattrValid_SETATTR_CTIME)
	)
	// The file is created at time 2; each row applies at time 100.
	cases := []struct {
		name string
		m    *metapb.Setattr
		want *metapb.Inode // fields compared: mode, uid, gid, times
	}{
		{"nothing", &metapb.Setattr{}, &metapb.Inode{Mode: 0o644, Uid: 1000, Gid: 100, AtimeNs: 2, MtimeNs: 2, CtimeNs: 2}},
		{"chmod keeps type", &metapb.Setattr{Valid: mode, Mode: 0o104755}, &metapb.Inode{Mode: 0o4755, Uid: 1000, Gid: 100, AtimeNs: 2, MtimeNs: 2, CtimeNs: 100}},
		{"chown", &metapb.Setattr{Valid: uid | gid, Uid: 0, Gid: 0}, &metapb.Inode{Mode: 0o644, AtimeNs: 2, MtimeNs: 2, CtimeNs: 100}},
		{"explicit times", &metapb.Setattr{Valid: atime | mtime, AtimeNs: 7, MtimeNs: 8}, &metapb.Inode{Mode: 0o644, Uid: 1000, Gid: 100, AtimeNs: 7, MtimeNs: 8, CtimeNs: 100}},
		{"now wins over explicit", &metapb.Setattr{Valid: atime | atimeNow | mtime | mtimeNow, AtimeNs: 7, MtimeNs: 8}, &metapb.Inode{Mode: 0o644, Uid: 1000, Gid: 100, AtimeNs: 100, MtimeNs: 100, CtimeNs: 100}},
		{"atime only", &metapb.Setattr{Valid: atimeNow}, &metapb.Inode{Mode: 0o644, Uid: 1000, Gid: 100, AtimeNs: 100, MtimeNs: 2, CtimeNs: 100}},
		{"explicit ctime", &metapb.Setattr{Valid: mode | ctime, Mode: 0o600, CtimeNs: 5}, &metapb.Inode{Mode: 0o600, Uid: 1000, Gid: 100, AtimeNs: 2, MtimeNs: 2, CtimeNs: 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newRoot(t)
			mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "f", 0, reg))
			tc.m.Ino = 2
			r := mustRun(t, p, 100, setattr(tc.m))
			got := r.Results[0].Inode
			if got.Mode != tc.want.Mode || got.Uid != tc.want.Uid || got.Gid != tc.want.Gid ||
				got.AtimeNs != tc.want.AtimeNs || got.MtimeNs != tc.want.MtimeNs || got.CtimeNs != tc.want.CtimeNs {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
			if !proto.Equal(got, mustInode(t, p, 2)) {
				t.Errorf("result and stored inode differ")
			}
		})
	}
}

func extentsOf(t testing.TB, p *Partition, ino uint64) []*metapb.ExtentKey {
	t.Helper()
	return mustInode(t, p, ino).Extents
}

func keysEqual(a, b []*metapb.ExtentKey) bool {
	return slices.EqualFunc(a, b, func(x, y *metapb.ExtentKey) bool { return proto.Equal(x, y) })
}

// fx is a freed extent of extent eid in partition 7 (Seq and Ino not compared).
func fx(eid, extOff, size uint64) FreedExtent {
	return FreedExtent{PartitionID: 7, ExtentID: eid, ExtentOffset: extOff, Size: size}
}

func freedPhys(p *Partition) []FreedExtent {
	var out []FreedExtent
	for _, f := range p.FreeList() {
		f.Seq, f.Ino = 0, 0
		out = append(out, f)
	}
	return out
}

func TestTruncate(t *testing.T) {
	// Extents [0,100) e1, [100,300) e2, [300,400) e3 in a 400-byte file.
	base := []*metapb.ExtentKey{ek(0, 1, 0, 100), ek(100, 2, 50, 200), ek(300, 3, 0, 100)}
	cases := []struct {
		name  string
		size  uint64
		keys  []*metapb.ExtentKey
		freed []FreedExtent
	}{
		{"cut straddling", 150, []*metapb.ExtentKey{ek(0, 1, 0, 100), ek(100, 2, 50, 50)}, []FreedExtent{fx(2, 100, 150), fx(3, 0, 100)}},
		{"at a boundary", 300, base[:2], []FreedExtent{fx(3, 0, 100)}},
		{"to zero", 0, nil, []FreedExtent{fx(1, 0, 100), fx(2, 50, 200), fx(3, 0, 100)}},
		{"same size", 400, base, nil},
		{"grow", 1000, base, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newRoot(t)
			mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "f", 0, reg), appendExtents(0, 400, base...))
			r := mustRun(t, p, 9, truncate(2, tc.size))
			if in := r.Results[0].Inode; in.Size != tc.size || in.MtimeNs != 9 || in.CtimeNs != 9 {
				t.Errorf("truncated inode %v: want size %d, mtime=ctime=9", in, tc.size)
			}
			if got := extentsOf(t, p, 2); !keysEqual(got, tc.keys) {
				t.Errorf("extents %v, want %v", got, tc.keys)
			}
			if got := freedPhys(p); !slices.Equal(got, tc.freed) {
				t.Errorf("freed %+v, want %+v", got, tc.freed)
			}
		})
	}
}

func TestAppendExtents(t *testing.T) {
	cases := []struct {
		name     string
		existing []*metapb.ExtentKey // written first, with size = their end
		write    []*metapb.ExtentKey
		size     uint64
		keys     []*metapb.ExtentKey
		freed    []FreedExtent
		wantSize uint64
	}{
		{name: "first write", write: []*metapb.ExtentKey{ek(0, 1, 0, 10)}, size: 10,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 10)}, wantSize: 10},
		{name: "sequential appends coalesce", existing: []*metapb.ExtentKey{ek(0, 1, 0, 10)},
			write: []*metapb.ExtentKey{ek(10, 1, 10, 10), ek(20, 1, 20, 5)}, size: 25,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 25)}, wantSize: 25},
		{name: "append in another extent", existing: []*metapb.ExtentKey{ek(0, 1, 0, 10)},
			write: []*metapb.ExtentKey{ek(10, 2, 0, 10)}, size: 20,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 10), ek(10, 2, 0, 10)}, wantSize: 20},
		{name: "overwrite the middle", existing: []*metapb.ExtentKey{ek(0, 1, 0, 100)},
			write: []*metapb.ExtentKey{ek(40, 2, 0, 20)}, size: 60,
			keys:  []*metapb.ExtentKey{ek(0, 1, 0, 40), ek(40, 2, 0, 20), ek(60, 1, 60, 40)},
			freed: []FreedExtent{fx(1, 40, 20)}, wantSize: 100},
		{name: "overwrite across keys", existing: []*metapb.ExtentKey{ek(0, 1, 0, 10), ek(10, 2, 0, 10), ek(20, 3, 0, 10)},
			write: []*metapb.ExtentKey{ek(5, 4, 0, 20)}, size: 25,
			keys:  []*metapb.ExtentKey{ek(0, 1, 0, 5), ek(5, 4, 0, 20), ek(25, 3, 5, 5)},
			freed: []FreedExtent{fx(1, 5, 5), fx(2, 0, 10), fx(3, 0, 5)}, wantSize: 30},
		{name: "rewrite in place frees nothing", existing: []*metapb.ExtentKey{ek(0, 1, 0, 100)},
			write: []*metapb.ExtentKey{ek(20, 1, 20, 30)}, size: 50,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 100)}, wantSize: 100},
		{name: "merged key over its parts frees nothing", existing: []*metapb.ExtentKey{ek(0, 1, 0, 10), ek(10, 2, 0, 10)},
			write: []*metapb.ExtentKey{ek(10, 2, 0, 30)}, size: 40,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 10), ek(10, 2, 0, 30)}, wantSize: 40},
		{name: "later key in one write wins", write: []*metapb.ExtentKey{ek(0, 1, 0, 100), ek(50, 2, 0, 10)}, size: 100,
			keys:  []*metapb.ExtentKey{ek(0, 1, 0, 50), ek(50, 2, 0, 10), ek(60, 1, 60, 40)},
			freed: []FreedExtent{fx(1, 50, 10)}, wantSize: 100},
		{name: "unsorted keys", write: []*metapb.ExtentKey{ek(50, 2, 0, 10), ek(0, 1, 0, 10)}, size: 60,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 10), ek(50, 2, 0, 10)}, wantSize: 60},
		{name: "size smaller than data grows to the data", write: []*metapb.ExtentKey{ek(0, 1, 0, 10)}, size: 4,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 10)}, wantSize: 10},
		{name: "size only", write: nil, size: 4096, wantSize: 4096},
		{name: "physical range reused elsewhere", existing: []*metapb.ExtentKey{ek(0, 1, 0, 100)},
			write: []*metapb.ExtentKey{ek(0, 2, 0, 100), ek(200, 1, 40, 20)}, size: 220,
			keys:  []*metapb.ExtentKey{ek(0, 2, 0, 100), ek(200, 1, 40, 20)},
			freed: []FreedExtent{fx(1, 0, 40), fx(1, 60, 40)}, wantSize: 220},
		{name: "overwrite the last byte", existing: []*metapb.ExtentKey{ek(0, 1, 0, 10)},
			write: []*metapb.ExtentKey{ek(9, 2, 0, 10)}, size: 19,
			keys:  []*metapb.ExtentKey{ek(0, 1, 0, 9), ek(9, 2, 0, 10)},
			freed: []FreedExtent{fx(1, 9, 1)}, wantSize: 19},
		{name: "same extent, not contiguous, no merge", existing: []*metapb.ExtentKey{ek(0, 1, 0, 10)},
			write: []*metapb.ExtentKey{ek(10, 1, 50, 10)}, size: 20,
			keys: []*metapb.ExtentKey{ek(0, 1, 0, 10), ek(10, 1, 50, 10)}, wantSize: 20},
		{name: "write before existing", existing: []*metapb.ExtentKey{ek(100, 1, 0, 10)},
			write: []*metapb.ExtentKey{ek(0, 2, 0, 10)}, size: 10,
			keys: []*metapb.ExtentKey{ek(0, 2, 0, 10), ek(100, 1, 0, 10)}, wantSize: 110},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newRoot(t)
			mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "f", 0, reg))
			for _, k := range tc.existing {
				mustRun(t, p, 3, appendExtents(2, k.FileOffset+k.Size, k))
			}
			r := mustRun(t, p, 9, appendExtents(2, tc.size, tc.write...))
			if in := r.Results[0].Inode; in.Size != tc.wantSize || in.MtimeNs != 9 || in.CtimeNs != 9 || len(in.Extents) != 0 {
				t.Errorf("inode %v: want size %d, mtime=ctime=9, no extents in the result", in, tc.wantSize)
			}
			if got := extentsOf(t, p, 2); !keysEqual(got, tc.keys) {
				t.Errorf("extents\n got %v\nwant %v", got, tc.keys)
			}
			if got := freedPhys(p); !slices.Equal(got, tc.freed) {
				t.Errorf("freed %+v, want %+v", got, tc.freed)
			}
			if got := mustInode(t, restored(t, p), 2); !proto.Equal(got, mustInode(t, p, 2)) {
				t.Errorf("inode differs after restore")
			}
		})
	}
}

func TestXattrs(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "f", 0, reg))
	r := mustRun(t, p, 3, setXattr(2, "user.b", "2", XattrCreate), setXattr(2, "user.a", "", 0))
	if r.Results[1].Inode.CtimeNs != 3 || r.Results[1].Inode.MtimeNs != 2 {
		t.Errorf("set_xattr: ctime must change, mtime not: %v", r.Results[1].Inode)
	}
	if names, _ := p.ListXattr(2); !slices.Equal(names, []string{"user.a", "user.b"}) {
		t.Errorf("ListXattr %v", names)
	}
	if v, e := p.GetXattr(2, "user.a"); e != metapb.OK || len(v) != 0 {
		t.Errorf("empty value: %q %v", v, e)
	}
	mustRun(t, p, 4, setXattr(2, "user.b", "22", XattrReplace))
	if v, _ := p.GetXattr(2, "user.b"); string(v) != "22" {
		t.Errorf("replaced value %q", v)
	}
	mustRun(t, p, 5, removeXattr(2, "user.a"), removeXattr(2, "user.b"))
	if names, e := p.ListXattr(2); e != metapb.OK || len(names) != 0 {
		t.Errorf("after remove: %v %v", names, e)
	}
	if _, e := p.GetXattr(2, "user.a"); e != metapb.ENODATA {
		t.Errorf("GetXattr of a removed xattr: %v", e)
	}
	if _, e := p.GetXattr(9, "user.a"); e != metapb.ENOENT {
		t.Errorf("GetXattr of a missing inode: %v", e)
	}
	if p.lookupInode(2).x != nil {
		t.Errorf("an inode without xattrs keeps its extra record")
	}
	// A value up to the limit is fine, and the result is a copy.
	big := strings.Repeat("v", MaxXattrValueLen)
	mustRun(t, p, 6, setXattr(2, strings.Repeat("n", MaxXattrNameLen), big, 0))
	v, _ := p.GetXattr(2, strings.Repeat("n", MaxXattrNameLen))
	v[0] = 'X'
	if v2, _ := p.GetXattr(2, strings.Repeat("n", MaxXattrNameLen)); v2[0] != 'v' {
		t.Errorf("GetXattr returned the stored slice")
	}
}

func TestReplaceDentry(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "old", 0, reg))
	mustRun(t, p, 3, createInode(reg, 0o644), createDentry(1, "new", 0, reg))
	// rename new -> old: the service replaces old on its MP, deletes new,
	// and unlinks the replaced inode on its home.
	r := mustRun(t, p, 4, replaceDentry(1, "old", 3, reg, 2), deleteDentry(1, "new", 3, 0), link(2, -1))
	if got, want := r.Results[0].Dentry, (&metapb.Dentry{Parent: 1, Name: []byte("old"), Ino: 2, Type: reg}); !proto.Equal(got, want) {
		t.Errorf("replaced dentry %v, want %v", got, want)
	}
	if d, _, _ := p.Lookup(1, "old"); d.Ino != 3 {
		t.Errorf("old now points at %d, want 3", d.Ino)
	}
	if o := p.Orphans(); !slices.Equal(o, []uint64{2}) {
		t.Errorf("orphans %v", o)
	}
	// Directory over directory.
	mustRun(t, p, 5, createInode(dir, 0o755), createDentry(1, "d1", 0, dir))
	mustRun(t, p, 6, createInode(dir, 0o755), createDentry(1, "d2", 0, dir))
	mustRun(t, p, 7, replaceDentry(1, "d1", 5, dir, 0))
	if s := p.Stats(10); s.Dentries != 3 {
		t.Errorf("dentries %d, want 3", s.Dentries)
	}
}

func TestRemoteInodes(t *testing.T) {
	p, err := New(1, 100)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, p, 1, createInode(dir, 0o755))
	// The dentry of an inode homed on another partition: nothing to check here.
	mustRun(t, p, 2, createDentry(1, "far", 5000, reg), createDentry(7000, "child", 5000, reg))
	d, in, e := p.Lookup(1, "far")
	if e != metapb.OK || d.Ino != 5000 || in != nil {
		t.Errorf("Lookup of a remote inode's dentry: %v %v %v", d, in, e)
	}
	if r := run(t, p, 3, link(5000, 1)); metapb.Errno(r.Errno) != metapb.ENOENT {
		t.Errorf("link of a remote inode: %v, want ENOENT", metapb.Errno(r.Errno))
	}
	// A local inode number that was never allocated is known not to exist.
	if r := run(t, p, 3, createDentry(1, "x", 50, reg)); metapb.Errno(r.Errno) != metapb.ENOENT {
		t.Errorf("dentry to unallocated local inode: %v, want ENOENT", metapb.Errno(r.Errno))
	}
}

func TestFence(t *testing.T) {
	p := world(t)
	mustRun(t, p, 5, fence(3, 77), fence(3, 77)) // a retry is fine
	if r := run(t, p, 6, createInode(reg, 0o644), createDentry(3, "x", 0, reg)); metapb.Errno(r.Errno) != metapb.ENOENT || r.FailedOp != 1 {
		t.Errorf("create under a fenced parent: %v at %d", metapb.Errno(r.Errno), r.FailedOp)
	}
	// Other parents are not affected; existing names can still go.
	mustRun(t, p, 7, createInode(reg, 0o644), createDentry(1, "x", 0, reg))
	if got := p.Fences(); !slices.Equal(got, []Fence{{Parent: 3, Token: 77, SetNs: 5}}) {
		t.Errorf("Fences %v", got)
	}
	if s := p.Stats(0); s.Fences != 1 {
		t.Errorf("stats fences %d", s.Fences)
	}
	mustRun(t, p, 8, unfence(3, 77), unfence(3, 77)) // a retry is fine
	mustRun(t, p, 9, createInode(reg, 0o644), createDentry(3, "x", 0, reg))
	if len(p.Fences()) != 0 {
		t.Errorf("fences left: %v", p.Fences())
	}
	// Fence and unfence within one Txn.
	mustRun(t, p, 10, fence(1, 5), unfence(1, 5), createDentry(1, "y", 2, reg), link(2, 1))
}

// The last fence of an rmdir sits in the Txn that deletes the name: with
// require_empty it fails the whole Txn while a name is under the directory
// here, and a name the same Txn removes first does not count.
func TestFenceRequireEmpty(t *testing.T) {
	p := world(t)
	mustRun(t, p, 5, createInode(reg, 0o644), createDentry(3, "x", 0, reg))
	emptyFence := &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: 3, Token: 8, RequireEmpty: true}}}
	if r := run(t, p, 6, emptyFence, createDentry(1, "after", 2, reg)); metapb.Errno(r.Errno) != metapb.ENOTEMPTY || r.FailedOp != 0 {
		t.Fatalf("require_empty over a name: %v at %d, want ENOTEMPTY at 0", metapb.Errno(r.Errno), r.FailedOp)
	}
	if len(p.Fences()) != 0 {
		t.Fatalf("a failed require_empty left fences: %v", p.Fences())
	}
	if _, _, e := p.Lookup(1, "after"); e != metapb.ENOENT {
		t.Errorf("the failed Txn's later op applied: %v", e)
	}
	r := mustRun(t, p, 7, deleteDentry(3, "x", 0, reg), emptyFence)
	if h := r.GetResults()[1].HasChildren; h == nil || *h {
		t.Errorf("has_children %v, want false", h)
	}
	if got := p.Fences(); !slices.Equal(got, []Fence{{Parent: 3, Token: 8, SetNs: 7}}) {
		t.Errorf("Fences %v", got)
	}
}

func TestSetRangeCutsAllocation(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, setRange(3), setRange(3)) // cut, and an idempotent retry
	if s, e := p.Range(); s != 1 || e != 3 {
		t.Errorf("Range = [%d, %d], want [1, 3]", s, e)
	}
	mustRun(t, p, 3, createInode(reg, 0), createInode(reg, 0))
	if r := run(t, p, 4, createInode(reg, 0)); metapb.Errno(r.Errno) != metapb.ENOSPC {
		t.Errorf("create beyond the cut: %v, want ENOSPC", metapb.Errno(r.Errno))
	}
	if p.MaxIno() != 3 {
		t.Errorf("MaxIno %d", p.MaxIno())
	}
	// Cutting to exactly the highest allocated inode is allowed.
	mustRun(t, p, 5, setRange(3))
}

func TestReadDir(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(dir, 0o755), createDentry(1, "d", 0, dir))
	names := []string{"b", "a", "c", "aa", "Z", "é", "b0"}
	for _, n := range names {
		mustRun(t, p, 3, createInode(reg, 0o644), createDentry(2, n, 0, reg))
	}
	mustRun(t, p, 4, createInode(dir, 0o755), createDentry(1, "d2", 0, dir), createDentry(0, "other-parent", 4, reg), link(4, 1))
	var got []string
	cursor := ""
	for {
		page := p.ReadDir(2, cursor, 3)
		if len(page) > 3 {
			t.Fatalf("page of %d > limit", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, d := range page {
			if d.Parent != 2 {
				t.Fatalf("entry of parent %d", d.Parent)
			}
			got = append(got, string(d.Name))
		}
		cursor = string(page[len(page)-1].Name)
	}
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(got, want) {
		t.Errorf("ReadDir pages %v, want %v", got, want)
	}
	// The cursor need not exist any more.
	mustRun(t, p, 5, deleteDentry(2, "b", 0, 0))
	if page := p.ReadDir(2, "b", 10); len(page) != 3 || string(page[0].Name) != "b0" {
		t.Errorf("resume after a deleted cursor: %v", page)
	}
	if p.ReadDir(2, "", 0) != nil {
		t.Errorf("limit 0 returned entries")
	}
	if n := p.CountChildren(2); n != len(names)-1 {
		t.Errorf("CountChildren %d, want %d", n, len(names)-1)
	}
	if !p.HasChildren(2) || !p.HasChildren(10) || !p.HasChildren(1) || p.HasChildren(4) {
		t.Errorf("HasChildren wrong")
	}
	if p.CountChildren(99) != 0 || p.HasChildren(99) {
		t.Errorf("children of a parent with none")
	}
}

func TestStatsTopNames(t *testing.T) {
	p := newRoot(t)
	dirs := []uint64{}
	for range 5 {
		r := mustRun(t, p, 2, createInode(dir, 0o755), createDentry(1, "dir"+string(rune('0'+len(dirs))), 0, dir))
		dirs = append(dirs, r.Results[0].Inode.Ino)
	}
	add := func(name string, n int) {
		for i := range n {
			mustRun(t, p, 3, createInode(reg, 0o644), createDentry(dirs[i], name, 0, reg))
		}
	}
	add("Makefile", 5)
	add("Kconfig", 3)
	add("README", 3)
	add("unique", 1)
	s := p.Stats(3)
	want := []NameCount{{"Makefile", 5}, {"Kconfig", 3}, {"README", 3}}
	if !slices.Equal(s.TopNames, want) {
		t.Errorf("top 3 %v, want %v", s.TopNames, want)
	}
	// k beyond the repeated names fills with single names in name order.
	s = p.Stats(6)
	want = append(want, NameCount{"dir0", 1}, NameCount{"dir1", 1}, NameCount{"dir2", 1})
	if !slices.Equal(s.TopNames, want) {
		t.Errorf("top 6 %v, want %v", s.TopNames, want)
	}
	// Counts follow deletions, and are rebuilt by Restore.
	mustRun(t, p, 4, deleteDentry(dirs[0], "Makefile", 0, 0), deleteDentry(dirs[1], "Makefile", 0, 0),
		deleteDentry(dirs[2], "Makefile", 0, 0), deleteDentry(dirs[0], "README", 0, 0))
	want = []NameCount{{"Kconfig", 3}, {"Makefile", 2}, {"README", 2}}
	for _, q := range []*Partition{p, restored(t, p)} {
		if s := q.Stats(3); !slices.Equal(s.TopNames, want) {
			t.Errorf("top 3 after deletes %v, want %v", s.TopNames, want)
		}
	}
	mustRun(t, p, 5, deleteDentry(dirs[3], "Makefile", 0, 0))
	if _, ok := p.names[nameHash("unique")]; !ok || p.hot.Len() != 2 {
		t.Errorf("hot names %d, want 2 (Kconfig, README)", p.hot.Len())
	}
	if s := p.Stats(0); s.TopNames != nil || s.Dentries != 5+1+3+2+1 {
		t.Errorf("stats %+v", s)
	}
}

// TestMergedBatch: the Txns of one batch are independent; each sees the
// ones before it.
func TestMergedBatch(t *testing.T) {
	p := newRoot(t)
	rs := applyBatch(t, p, 2, &metapb.Batch{NowNs: 2, Txns: []*metapb.Txn{
		tx(createInode(reg, 0o644), createDentry(1, "a", 0, reg)),                          // ok, ino 2
		tx(createInode(reg, 0o644), createDentry(1, "a", 0, reg)),                          // EEXIST: sees txn 0
		tx(createInode(reg, 0o644), createDentry(1, "b", 0, reg)),                          // ok, ino 3: txn 1 allocated nothing
		tx(link(2, 1), createDentry(1, "a2", 2, reg), createDentry(1, "bad/name", 2, reg)), // EINVAL
		tx(),                           // an empty txn succeeds
		tx(deleteDentry(1, "a", 2, 0)), // ok
	}})
	want := []metapb.Errno{metapb.OK, metapb.EEXIST, metapb.OK, metapb.EINVAL, metapb.OK, metapb.OK}
	for i, r := range rs {
		if metapb.Errno(r.Errno) != want[i] {
			t.Errorf("txn %d: %v (%s), want %v", i, metapb.Errno(r.Errno), r.Message, want[i])
		}
	}
	if rs[2].Results[0].Inode.Ino != 3 {
		t.Errorf("third txn got inode %d, want 3", rs[2].Results[0].Inode.Ino)
	}
	if in := mustInode(t, p, 2); in.Nlink != 1 {
		t.Errorf("failed txn's link survived: nlink %d", in.Nlink)
	}
	if names := p.ReadDir(1, "", 10); len(names) != 1 || string(names[0].Name) != "b" {
		t.Errorf("dir holds %v, want only b", names)
	}
}

// TestAtomicity is the brief's case: the third op fails, and nothing of the
// first two remains: no inode, no dentry, the same next inode number, the
// same times.
func TestAtomicity(t *testing.T) {
	p := world(t)
	before := snap(t, p)
	r := run(t, p, 500, createInode(reg, 0o644), createDentry(1, "new", 0, reg), createDentry(1, "f", 0, reg))
	if metapb.Errno(r.Errno) != metapb.EEXIST || r.FailedOp != 2 {
		t.Fatalf("got %v at %d", metapb.Errno(r.Errno), r.FailedOp)
	}
	if !sameBytes(before, snap(t, p)) {
		t.Fatal("failed txn left a trace")
	}
	if p.MaxIno() != 4 {
		t.Errorf("MaxIno %d, want 4", p.MaxIno())
	}
	if _, _, e := p.Lookup(1, "new"); e != metapb.ENOENT {
		t.Errorf("dentry of the failed txn: %v", e)
	}
	if r := mustRun(t, p, 501, createInode(reg, 0o644)); r.Results[0].Inode.Ino != 5 {
		t.Errorf("next inode %d, want 5", r.Results[0].Inode.Ino)
	}
}

func TestApplyRejectsUndecodableBatch(t *testing.T) {
	p := world(t)
	before := snap(t, p)
	for _, data := range [][]byte{{0xff}, {0x12, 0x05, 0x0a}, []byte("not a protobuf at all")} {
		if res, err := p.Apply(9, data); err == nil {
			t.Errorf("Apply(%x) = %v, nil; want an error", data, res)
		}
	}
	if !sameBytes(before, snap(t, p)) {
		t.Error("undecodable batch changed the state")
	}
	// An empty payload is an empty batch.
	if res, err := p.Apply(10, nil); err != nil || len(res.([]*metapb.TxnResult)) != 0 {
		t.Errorf("empty batch: %v, %v", res, err)
	}
}

func TestCreateInodeWantIno(t *testing.T) {
	p, err := New(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	root := func() *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: dir, Mode: 0o755, WantIno: 1}}}
	}
	if r := run(t, p, 1, root()); r.Errno != 0 || r.Results[0].Inode.Ino != 1 {
		t.Fatalf("root: %v", r)
	}
	if r := run(t, p, 2, root()); metapb.Errno(r.Errno) != metapb.EEXIST {
		t.Fatalf("second root: errno %d, want EEXIST", r.Errno)
	}
	if got := p.MaxIno(); got != 1 {
		t.Fatalf("failed want_ino allocated: max ino %d", got)
	}
}

func TestNamespaceLock(t *testing.T) {
	p := world(t)
	var told []uint64
	p.OnFence(func(ino uint64) { told = append(told, ino) })
	e0 := p.NsEpoch()
	lock := &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: 3, Token: 9 | lockBit, Lock: true}}}
	mustRun(t, p, 5, lock, lock) // the top bit of a token is ignored; a retry is fine
	if !p.Fenced(3, 5) || p.NsEpoch() != e0+1 || !slices.Equal(told, []uint64{3}) {
		t.Fatalf("after lock: fenced %v, epoch %d (was %d), told %v", p.Fenced(3, 5), p.NsEpoch(), e0, told)
	}
	if got := p.Fences(); !slices.Equal(got, []Fence{{Parent: 3, Token: 9, Lock: true, SetNs: 5}}) {
		t.Errorf("Fences %v", got)
	}
	// A lock refuses no names, but a fence of another token is EBUSY.
	mustRun(t, p, 6, createInode(reg, 0o644), createDentry(3, "x", 0, reg))
	if r := run(t, p, 7, fence(3, 10)); metapb.Errno(r.Errno) != metapb.EBUSY {
		t.Errorf("fence over a lock: %v", metapb.Errno(r.Errno))
	}
	// A Txn resolved under the old epoch is refused whole; the current one passes.
	stale := &metapb.Txn{Ops: []*metapb.Op{createInode(reg, 0o644), createDentry(3, "y", 0, reg)}, NsEpoch: e0, NsGuard: true}
	if r := applyBatch(t, p, 8, &metapb.Batch{NowNs: 8, Txns: []*metapb.Txn{stale}})[0]; metapb.Errno(r.Errno) != metapb.ENSCHANGED {
		t.Errorf("stale ns_epoch: %v", metapb.Errno(r.Errno))
	}
	stale.NsEpoch = p.NsEpoch()
	if r := applyBatch(t, p, 9, &metapb.Batch{NowNs: 9, Txns: []*metapb.Txn{stale}})[0]; r.Errno != 0 {
		t.Errorf("current ns_epoch: %s", r.Message)
	}
	mustRun(t, p, 10, unfence(3, 9))
	if p.Fenced(3, 10) || p.NsEpoch() != e0+1 {
		t.Errorf("after unlock: fenced %v, epoch %d", p.Fenced(3, 10), p.NsEpoch())
	}
	// The epoch is replicated state: it survives a snapshot, the hook stays.
	q := newRoot(t)
	q.OnFence(func(ino uint64) { told = append(told, ino) })
	if err := q.Restore(snap(t, p)); err != nil {
		t.Fatal(err)
	}
	if q.NsEpoch() != p.NsEpoch() {
		t.Errorf("restored epoch %d, want %d", q.NsEpoch(), p.NsEpoch())
	}
	mustRun(t, q, 11, fence(1, 4))
	if told[len(told)-1] != 1 {
		t.Errorf("hook lost by Restore: %v", told)
	}
}

// A fence left by a coordinator that crashed lapses FenceTTL after it was
// set: names can be made again, another coordinator can fence, and the
// lapsed fences are pruned.
func TestFenceLapses(t *testing.T) {
	p := world(t)
	mustRun(t, p, 5, fence(3, 77))
	if !p.Fenced(3, 5+FenceTTL-1) || p.Fenced(3, 5+FenceTTL) {
		t.Errorf("Fenced before/at the TTL: %v/%v", p.Fenced(3, 5+FenceTTL-1), p.Fenced(3, 5+FenceTTL))
	}
	if r := run(t, p, 5+FenceTTL-1, createInode(reg, 0o644), createDentry(3, "x", 0, reg)); metapb.Errno(r.Errno) != metapb.ENOENT {
		t.Errorf("create under a live fence: %v", metapb.Errno(r.Errno))
	}
	later := 5 + FenceTTL
	mustRun(t, p, later, createInode(reg, 0o644), createDentry(3, "x", 0, reg))
	mustRun(t, p, later+1, fence(3, 78)) // replaces the lapsed one
	if got := p.Fences(); !slices.Equal(got, []Fence{{Parent: 3, Token: 78, SetNs: later + 1}}) {
		t.Errorf("Fences %v", got)
	}
	mustRun(t, p, later+2, unfence(3, 78))
	// Lapsed fences are pruned once there are many.
	for i := range fencePruneAt + 1 {
		mustRun(t, p, 10, fence(uint64(1000+i), 1))
	}
	mustRun(t, p, 10+FenceTTL, fence(1, 2))
	if n := len(p.Fences()); n != 1 {
		t.Errorf("%d fences after pruning, want 1", n)
	}
}

// A fence answers whether the partition lists a name under the directory
// (rmdir's emptiness check in the fence's own request); a namespace lock
// does not say.
func TestFenceReportsChildren(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(dir, 0o755), createDentry(1, "a", 0, dir)) // ino 2
	mustRun(t, p, 3, createInode(reg, 0o644), createDentry(2, "x", 0, reg)) // ino 3
	mustRun(t, p, 4, createInode(dir, 0o755), createDentry(1, "b", 0, dir)) // ino 4
	lock := &metapb.Op{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: 4, Token: 30, Lock: true}}}
	for _, tc := range []struct {
		name string
		ops  []*metapb.Op
		want *bool // of the last op's result
	}{
		{"a directory with a name", []*metapb.Op{fence(2, 10)}, ptr(true)},
		{"a retry answers again", []*metapb.Op{fence(2, 10)}, ptr(true)},
		{"an empty directory", []*metapb.Op{fence(4, 11)}, ptr(false)},
		{"a name made in the same Txn", []*metapb.Op{unfence(4, 11), createInode(reg, 0o644), createDentry(4, "y", 0, reg), fence(4, 12)}, ptr(true)},
		{"the last name removed in the same Txn", []*metapb.Op{unfence(2, 10), deleteDentry(2, "x", 3, reg), fence(2, 13)}, ptr(false)},
		{"a namespace lock does not say", []*metapb.Op{unfence(4, 12), lock}, nil},
	} {
		r := mustRun(t, p, 5, tc.ops...)
		got := r.Results[len(r.Results)-1].HasChildren
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("%s: has_children = %v, want absent", tc.name, *got)
		case tc.want != nil && (got == nil || *got != *tc.want):
			t.Errorf("%s: has_children = %v, want %v", tc.name, got, *tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Link with evict_at_zero evicts an inode whose count reaches 0 in the same
// op, freeing its extents as Evict does, and leaves one with links left.
func TestLinkEvictAtZero(t *testing.T) {
	p := newRoot(t)
	mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "a", 0, reg),
		appendExtents(0, 100, ek(0, 5, 0, 100)), link(0, 1)) // ino 2, two links
	linkEvict := func(ino uint64) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: -1, EvictAtZero: true}}}
	}
	r := mustRun(t, p, 3, linkEvict(2))
	if res := r.Results[0]; res.Evicted || res.Inode.GetNlink() != 1 {
		t.Fatalf("one link left: %v", res)
	}
	if _, e := p.GetInode(2); e != metapb.OK {
		t.Fatalf("inode with a link left: %v", e)
	}
	r = mustRun(t, p, 4, linkEvict(2))
	if res := r.Results[0]; !res.Evicted || res.Inode.GetNlink() != 0 {
		t.Fatalf("last link: %v, want evicted at 0", res)
	}
	if _, e := p.GetInode(2); e != metapb.ENOENT {
		t.Errorf("evicted inode: %v, want ENOENT", e)
	}
	if o := p.Orphans(); len(o) != 0 {
		t.Errorf("orphans after the eviction: %v", o)
	}
	want := []FreedExtent{{Seq: 1, Ino: 2, PartitionID: 7, ExtentID: 5, ExtentOffset: 0, Size: 100}}
	if got := p.FreeList(); !slices.Equal(got, want) {
		t.Errorf("free list %+v, want %+v", got, want)
	}
}

// TestCtimeGrows: every change of an inode moves its ctime past the one
// before, also when the Txn's time is behind it (a new leader whose clock
// is behind the old one's, or a ctime a client set): clients order a
// file's Versions by it.
func TestCtimeGrows(t *testing.T) {
	p := newRoot(t)
	ino := mustRun(t, p, 100, createInode(metapb.FileType_FILE_TYPE_REGULAR, 0o644)).Results[0].GetInode().GetIno()
	ctime := func() int64 {
		in, e := p.GetInode(ino)
		if e != metapb.OK {
			t.Fatalf("get inode %d: %v", ino, e)
		}
		return in.GetCtimeNs()
	}
	steps := []struct {
		name string
		now  int64
		op   *metapb.Op
	}{
		{"mtime now, clock ahead", 200, setattr(&metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_MTIME_NOW)})},
		{"mtime now, clock behind", 150, setattr(&metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_MTIME_NOW)})},
		{"explicit older ctime", 300, setattr(&metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_CTIME), CtimeNs: 10})},
		{"link, clock behind", 50, link(ino, 1)},
		{"xattr, clock behind", 60, setXattr(ino, "user.a", "b", 0)},
		{"truncate, clock behind", 70, truncate(ino, 10)},
	}
	last := ctime()
	for _, s := range steps {
		mustRun(t, p, s.now, s.op)
		if c := ctime(); c <= last {
			t.Fatalf("%s: ctime %d after %d", s.name, c, last)
		} else {
			last = c
		}
	}
}
