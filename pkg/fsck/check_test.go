package fsck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

const (
	dirT  = metapb.FileType_FILE_TYPE_DIRECTORY
	fileT = metapb.FileType_FILE_TYPE_REGULAR
)

var (
	testNow = time.Unix(1_000_000, 0)
	oldTime = testNow.Add(-time.Hour).UnixNano()
)

// ns builds a small namespace on two partitions: MP 1 holds inodes
// [1, 100], MP 2 holds [101, ∞); dentries go where the two-slot table
// routes them unless a test moves them.
type ns struct {
	inodes   map[uint64]*metapb.Inode
	dentries []*placed
	table    *hybridindex.Table
	away     map[uint64]uint64 // ino -> partition holding it against its range
}

type placed struct {
	part uint64
	d    *metapb.Dentry
}

func newNS() *ns {
	n := &ns{inodes: map[uint64]*metapb.Inode{}, table: &hybridindex.Table{Slots: []uint64{1, 2}}, away: map[uint64]uint64{}}
	n.inodes[RootIno] = &metapb.Inode{Ino: RootIno, Type: dirT, Nlink: 2, CtimeNs: oldTime}
	return n
}

func (n *ns) add(parent uint64, name string, ino uint64, typ metapb.FileType) {
	if _, ok := n.inodes[ino]; !ok {
		in := &metapb.Inode{Ino: ino, Type: typ, CtimeNs: oldTime, Parent: parent}
		if typ == dirT {
			in.Nlink = 2
		}
		n.inodes[ino] = in
	}
	if typ == dirT {
		n.inodes[parent].Nlink++
	} else {
		n.inodes[ino].Nlink++
	}
	mp, _ := n.table.Route(parent, name)
	n.dentries = append(n.dentries, &placed{mp, &metapb.Dentry{Parent: parent, Name: []byte(name), Ino: ino, Type: typ}})
}

func (n *ns) mkdir(parent uint64, name string, ino uint64) { n.add(parent, name, ino, dirT) }
func (n *ns) file(parent uint64, name string, ino uint64)  { n.add(parent, name, ino, fileT) }

// dentry returns the dentry (parent, name).
func (n *ns) dentry(parent uint64, name string) *placed {
	for _, p := range n.dentries {
		if p.d.Parent == parent && string(p.d.Name) == name {
			return p
		}
	}
	panic(fmt.Sprintf("test bug: no dentry %d/%s", parent, name))
}

// drop removes the dentry (parent, name) without touching link counts.
func (n *ns) drop(parent uint64, name string) {
	p := n.dentry(parent, name)
	n.dentries = slices.DeleteFunc(n.dentries, func(q *placed) bool { return q == p })
}

func (n *ns) snapshot() *Snapshot {
	s := &Snapshot{Volume: "v", Routing: n.table, Partitions: []PartitionSnapshot{
		{ID: 2, InodeStart: 101}, {ID: 1, InodeStart: 1, InodeEnd: 100}}}
	part := func(id uint64) *PartitionSnapshot {
		for i := range s.Partitions {
			if s.Partitions[i].ID == id {
				return &s.Partitions[i]
			}
		}
		panic("test bug")
	}
	var inos []uint64
	for ino := range n.inodes {
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	for _, ino := range inos {
		home := uint64(1)
		if ino > 100 {
			home = 2
		}
		if a, ok := n.away[ino]; ok {
			home = a
		}
		part(home).Inodes = append(part(home).Inodes, n.inodes[ino])
	}
	for _, p := range n.dentries {
		part(p.part).Dentries = append(part(p.part).Dentries, p.d)
	}
	return s
}

// base is a clean tree: /a (dir 2), /a/f (file 3, also named /a/g), /b
// (dir 101), /b/c (dir 102), /b/c/x (file 103), /s (symlink 104).
func base() *ns {
	n := newNS()
	n.mkdir(1, "a", 2)
	n.file(2, "f", 3)
	n.file(2, "g", 3)
	n.mkdir(1, "b", 101)
	n.mkdir(101, "c", 102)
	n.file(102, "x", 103)
	n.add(1, "s", 104, metapb.FileType_FILE_TYPE_SYMLINK)
	return n
}

func opsString(ops []*metapb.Op) string {
	var out []string
	for _, op := range ops {
		switch o := op.Op.(type) {
		case *metapb.Op_Link:
			out = append(out, fmt.Sprintf("link(%d,%+d)", o.Link.Ino, o.Link.Delta))
		case *metapb.Op_Evict:
			out = append(out, fmt.Sprintf("evict(%d)", o.Evict.Ino))
		case *metapb.Op_TouchDir:
			out = append(out, fmt.Sprintf("touchdir(%d,%+d)", o.TouchDir.Ino, o.TouchDir.NlinkDelta))
		case *metapb.Op_Setattr:
			out = append(out, fmt.Sprintf("setparent(%d,%d)", o.Setattr.Ino, o.Setattr.Parent))
		case *metapb.Op_DeleteDentry:
			out = append(out, fmt.Sprintf("delete(%d/%s,%d)", o.DeleteDentry.Parent, o.DeleteDentry.Name, o.DeleteDentry.ExpectIno))
		default:
			out = append(out, fmt.Sprintf("%T", o))
		}
	}
	return strings.Join(out, " ")
}

func TestCheckCleanNamespace(t *testing.T) {
	s := base().snapshot()
	if fs := Check(s); len(fs) != 0 {
		t.Fatalf("clean namespace: got findings %+v", fs)
	}
	// Also a volume with nothing but its root.
	if fs := Check(newNS().snapshot()); len(fs) != 0 {
		t.Fatalf("empty volume: got findings %+v", fs)
	}
}

func TestCheckAndPlan(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(n *ns)
		want   []string // "kind ino" per finding, in order
		plan   []string // "partition: ops" per action
		skips  int
	}{
		{
			name:   "orphan file (unlink crashed before Link -1)",
			mutate: func(n *ns) { n.drop(102, "x") },
			want:   []string{"orphan 103"},
			plan:   []string{"2: link(103,-1) evict(103)"},
		},
		{
			name:   "orphan created alone",
			mutate: func(n *ns) { n.inodes[50] = &metapb.Inode{Ino: 50, Type: fileT, Nlink: 1, CtimeNs: oldTime} },
			want:   []string{"orphan 50"},
			plan:   []string{"1: link(50,-1) evict(50)"},
		},
		{
			name:   "fresh orphan is left alone",
			mutate: func(n *ns) { n.inodes[50] = &metapb.Inode{Ino: 50, Type: fileT, Nlink: 1, CtimeNs: testNow.UnixNano()} },
			want:   []string{"orphan 50"},
			skips:  1,
		},
		{
			name:   "unlinked inode never evicted",
			mutate: func(n *ns) { n.inodes[51] = &metapb.Inode{Ino: 51, Type: fileT, CtimeNs: oldTime} },
			want:   []string{"unlinked 51"},
			plan:   []string{"1: evict(51)"},
		},
		{
			name: "orphan directory (rmdir crashed after the name)",
			mutate: func(n *ns) {
				n.drop(101, "c")
				n.drop(102, "x")
				delete(n.inodes, 103)
			},
			// /b still counts c in its nlink.
			want: []string{"orphan 102", "nlink-mismatch 101"},
			plan: []string{"2: link(102,-2) evict(102)", "2: touchdir(101,-1)"},
		},
		{
			name:   "nameless directory that still holds names is not evicted",
			mutate: func(n *ns) { n.drop(101, "c") },
			want:   []string{"orphan 102", "nlink-mismatch 101"},
			plan:   []string{"2: touchdir(101,-1)"},
			skips:  1,
		},
		{
			name:   "file link count one too high (link crashed before the name)",
			mutate: func(n *ns) { n.inodes[3].Nlink++ },
			want:   []string{"nlink-mismatch 3"},
			plan:   []string{"1: link(3,-1)"},
		},
		{
			name:   "file link count too low",
			mutate: func(n *ns) { n.inodes[3].Nlink = 1 },
			want:   []string{"nlink-mismatch 3"},
			plan:   []string{"1: link(3,+1)"},
		},
		{
			name:   "directory nlink stale (mkdir follow-up lost)",
			mutate: func(n *ns) { n.inodes[1].Nlink-- },
			want:   []string{"nlink-mismatch 1"},
			plan:   []string{"1: touchdir(1,+1)"},
		},
		{
			name: "directory nlink with a fresh subdirectory waits",
			mutate: func(n *ns) {
				n.inodes[101].Nlink--
				n.inodes[102].CtimeNs = testNow.UnixNano()
			},
			want:  []string{"nlink-mismatch 101"},
			skips: 1,
		},
		{
			name: "dangling name",
			mutate: func(n *ns) {
				n.file(1, "ghost", 150)
				delete(n.inodes, 150)
			},
			want: []string{"dangling-name 0"},
			plan: []string{"%ghost: delete(1/ghost,150)"},
		},
		{
			name: "directory with two names",
			mutate: func(n *ns) {
				mp, _ := n.table.Route(101, "again")
				n.dentries = append(n.dentries, &placed{mp, &metapb.Dentry{Parent: 101, Name: []byte("again"), Ino: 2, Type: dirT}})
				n.inodes[101].Nlink++
			},
			want:  []string{"dir-multiple-names 2"},
			skips: 1,
		},
		{
			name:   "directory parent pointer stale (rename follow-up lost)",
			mutate: func(n *ns) { n.inodes[102].Parent = 1 },
			want:   []string{"dir-parent-mismatch 102"},
			plan:   []string{"2: setparent(102,101)"},
		},
		{
			name:   "file parent pointer stale (rename follow-up lost)",
			mutate: func(n *ns) { n.inodes[103].Parent = 1 },
			want:   []string{"file-parent-mismatch 103"},
			plan:   []string{"2: setparent(103,102)"},
		},
		{
			name:   "file from before parent pointers of files",
			mutate: func(n *ns) { n.inodes[103].Parent = 0 },
			want:   []string{"file-parent-mismatch 103"},
			plan:   []string{"2: setparent(103,102)"},
		},
		{
			name: "directory cycle",
			mutate: func(n *ns) {
				// Move /b under /b/c: the name b now sits in c.
				n.drop(1, "b")
				n.inodes[1].Nlink--
				mp, _ := n.table.Route(102, "b")
				n.dentries = append(n.dentries, &placed{mp, &metapb.Dentry{Parent: 102, Name: []byte("b"), Ino: 101, Type: dirT}})
				n.inodes[102].Nlink++
				n.inodes[101].Parent = 102
			},
			want:  []string{"dir-cycle 101"},
			skips: 1,
		},
		{
			name: "unreachable directory under a missing parent",
			mutate: func(n *ns) {
				// A name whose parent is a file (a directory removed
				// while a create was between its steps, number reused).
				n.file(1, "three", 300)
				mp, _ := n.table.Route(300, "lost")
				n.dentries = append(n.dentries, &placed{mp, &metapb.Dentry{Parent: 300, Name: []byte("lost"), Ino: 105, Type: dirT}})
				n.inodes[105] = &metapb.Inode{Ino: 105, Type: dirT, Nlink: 2, Parent: 300, CtimeNs: oldTime}
			},
			want:  []string{"unreachable-dir 105", "lost-name 0"},
			skips: 2,
		},
		{
			name: "misplaced dentry",
			mutate: func(n *ns) {
				p := n.dentry(2, "f")
				p.part = 3 - p.part
			},
			want:  []string{"misplaced-dentry 0"},
			skips: 1,
		},
		{
			name:   "inode outside its partition's range",
			mutate: func(n *ns) { n.away[104] = 1 },
			// Its name now dangles: the home (MP 2) does not have it.
			want:  []string{"dangling-name 0", "inode-out-of-range 104"},
			plan:  []string{"%s: delete(1/s,104)"},
			skips: 1,
		},
		{
			name:   "dentry type differs from the inode",
			mutate: func(n *ns) { n.dentry(1, "s").d.Type = fileT },
			want:   []string{"type-mismatch 104"},
			skips:  1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := base()
			c.mutate(n)
			s := n.snapshot()
			fs := Check(s)
			var got []string
			for _, f := range fs {
				got = append(got, fmt.Sprintf("%s %d", f.Kind, f.Ino))
				if f.Explanation == "" || strings.Contains(f.Explanation, "\n") {
					t.Errorf("finding %s: explanation %q is not one line", f.Kind, f.Explanation)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("findings:\n got %q\nwant %q\n%+v", got, c.want, fs)
			}
			plan := PlanRepair(fs, PlanOptions{Now: testNow, Grace: DefaultGrace})
			var gotPlan []string
			for _, a := range plan.Actions {
				gotPlan = append(gotPlan, fmt.Sprintf("%d: %s", a.Partition, opsString(a.Ops)))
			}
			var wantPlan []string
			for _, p := range c.plan {
				// "%name: ops" means: the partition the name routes to.
				if strings.HasPrefix(p, "%") {
					name, ops, _ := strings.Cut(p[1:], ": ")
					mp, _ := n.table.Route(1, name)
					p = fmt.Sprintf("%d: %s", mp, ops)
				}
				wantPlan = append(wantPlan, p)
			}
			if !slices.Equal(gotPlan, wantPlan) {
				t.Errorf("plan:\n got %q\nwant %q", gotPlan, wantPlan)
			}
			if len(plan.Skipped) != c.skips {
				t.Errorf("skipped %d findings, want %d: %+v", len(plan.Skipped), c.skips, plan.Skipped)
			}
			if len(plan.Actions)+len(plan.Skipped) != len(fs) {
				t.Errorf("plan covers %d+%d findings of %d", len(plan.Actions), len(plan.Skipped), len(fs))
			}
		})
	}
}

func TestCheckMissingRoot(t *testing.T) {
	n := newNS()
	delete(n.inodes, RootIno)
	fs := Check(n.snapshot())
	if len(fs) != 1 || fs[0].Kind != MissingRoot || fs[0].Partition != 1 {
		t.Fatalf("got %+v, want one missing-root on partition 1", fs)
	}
}

func TestCheckMigrationIgnoresPlacement(t *testing.T) {
	n := base()
	p := n.dentry(2, "f")
	p.part = 3 - p.part
	s := n.snapshot()
	s.Migrating = true
	if fs := Check(s); len(fs) != 0 {
		t.Fatalf("during a migration: got %+v, want nothing", fs)
	}
}

func TestPlanKindsFilter(t *testing.T) {
	n := base()
	n.drop(102, "x")
	n.inodes[3].Nlink++
	fs := Check(n.snapshot())
	plan := PlanRepair(fs, PlanOptions{Now: testNow, Grace: DefaultGrace, Kinds: []Kind{Orphan}})
	if len(plan.Actions) != 1 || plan.Actions[0].Kind != Orphan || len(plan.Skipped) != 0 {
		t.Fatalf("got %+v, want only the orphan", plan)
	}
}

func TestCountAndKeyStable(t *testing.T) {
	n := base()
	n.drop(102, "x")
	n.inodes[3].Nlink++
	a, b := Check(n.snapshot()), Check(n.snapshot())
	if len(a) != len(b) {
		t.Fatal("Check is not deterministic")
	}
	for i := range a {
		if a[i].Key() != b[i].Key() {
			t.Fatalf("key %q != %q", a[i].Key(), b[i].Key())
		}
	}
	c := Count(a)
	keys := make([]string, 0, len(c))
	for k, v := range c {
		keys = append(keys, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(keys)
	if got := strings.Join(keys, ","); got != "nlink-mismatch=1,orphan=1" {
		t.Fatalf("Count = %s", got)
	}
}
