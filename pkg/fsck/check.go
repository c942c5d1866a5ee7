// Package fsck checks a volume's metadata for the leftovers of interrupted
// cross-partition operations and other inconsistencies, and repairs the ones
// that are safe to repair (CFS §2.6: a crash between the steps of an
// operation leaves orphans, never dangling names).
//
// The package has a pure part (Check and PlanRepair: a Snapshot in,
// findings and primitive metapb operations out) and an I/O part (Collect
// pages through every meta partition with the Scan RPC, Apply sends a plan,
// Sweeper reclaims orphans periodically). See docs/design.md, "Checking and
// repairing metadata".
package fsck

import (
	"fmt"
	"slices"
	"sort"

	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// RootIno is the inode number of every volume's root directory.
const RootIno = 1

// Kind names a class of finding. The values are stable strings (they appear
// in `cairn fsck --json`).
type Kind string

// The kinds of finding Check reports.
const (
	// DanglingName: a dentry whose inode does not exist at its home.
	DanglingName Kind = "dangling-name"
	// Orphan: an inode with links that no name refers to (root excepted).
	Orphan Kind = "orphan"
	// Unlinked: an inode with no links and no name that was never evicted.
	Unlinked Kind = "unlinked"
	// NlinkMismatch: a link count that disagrees with the names (files) or
	// with 2 + the subdirectories (directories).
	NlinkMismatch Kind = "nlink-mismatch"
	// DirMultipleNames: a directory with more than one name.
	DirMultipleNames Kind = "dir-multiple-names"
	// DirParentMismatch: a directory whose parent pointer is not the
	// directory its name is in.
	DirParentMismatch Kind = "dir-parent-mismatch"
	// FileParentMismatch: a file (any non-directory) whose parent pointer
	// names no directory holding one of its names: a rename's follow-up
	// was lost, or the file predates parent pointers of files. A
	// path-restricted client would be refused it in its directory, or let
	// reach it where it no longer is.
	FileParentMismatch Kind = "file-parent-mismatch"
	// DirCycle: directories whose names form a cycle, cut off from the root.
	DirCycle Kind = "dir-cycle"
	// UnreachableDir: a named directory that the root does not reach (its
	// name is under a missing or unreachable directory).
	UnreachableDir Kind = "unreachable-dir"
	// LostName: a dentry whose parent is missing or not a directory.
	LostName Kind = "lost-name"
	// MisplacedDentry: a dentry on a partition the routing does not send it
	// to (not checked while a routing change is in progress).
	MisplacedDentry Kind = "misplaced-dentry"
	// InodeOutOfRange: an inode on a partition whose range does not hold it.
	InodeOutOfRange Kind = "inode-out-of-range"
	// TypeMismatch: a dentry whose type differs from its inode's.
	TypeMismatch Kind = "type-mismatch"
	// MissingRoot: the volume has no root directory (ino 1).
	MissingRoot Kind = "missing-root"
)

// Kinds lists every kind in report order.
var Kinds = []Kind{MissingRoot, DanglingName, Orphan, Unlinked, NlinkMismatch, DirMultipleNames,
	DirParentMismatch, FileParentMismatch, DirCycle, UnreachableDir, LostName, MisplacedDentry, InodeOutOfRange, TypeMismatch}

// PartitionSnapshot is everything one meta partition holds.
type PartitionSnapshot struct {
	ID uint64
	// InodeStart and InodeEnd are the partition's inode range [start, end];
	// InodeEnd 0 means open-ended.
	InodeStart, InodeEnd uint64
	Inodes               []*metapb.Inode
	Dentries             []*metapb.Dentry
}

// Holds reports whether ino is in the partition's range.
func (p *PartitionSnapshot) Holds(ino uint64) bool {
	return ino >= p.InodeStart && (p.InodeEnd == 0 || ino <= p.InodeEnd)
}

// Snapshot is a volume's metadata as Check needs it.
type Snapshot struct {
	Volume     string
	Partitions []PartitionSnapshot
	// Routing is the live dentry routing; nil skips the misplaced check.
	Routing *hybridindex.Table
	// Migrating says a routing change is in progress: dentries may then
	// legitimately sit on their old and new partitions.
	Migrating bool
}

// DentryRef is a dentry and the partition it was found on.
type DentryRef struct {
	Partition uint64 `json:"partition"`
	Parent    uint64 `json:"parent"`
	Name      string `json:"name"`
	Ino       uint64 `json:"ino"`
	Type      string `json:"type"`
}

func refOf(part uint64, d *metapb.Dentry) DentryRef {
	return DentryRef{Partition: part, Parent: d.GetParent(), Name: string(d.GetName()), Ino: d.GetIno(), Type: typeName(d.GetType())}
}

// Finding is one inconsistency. Partition and Ino name the record a repair
// would change (Ino 0 for a finding about a dentry alone).
type Finding struct {
	Kind      Kind   `json:"kind"`
	Partition uint64 `json:"partition"`
	Ino       uint64 `json:"ino,omitempty"`
	// Type is the inode's type (empty when there is no inode).
	Type string `json:"type,omitempty"`
	// Nlink is the inode's link count as scanned; WantNlink is the count
	// its names call for (NlinkMismatch only).
	Nlink     uint32 `json:"nlink,omitempty"`
	WantNlink uint32 `json:"want_nlink,omitempty"`
	// CtimeNs is the inode's ctime as scanned; NewestNs is the newest ctime
	// among all inodes the finding depends on (the grace period is applied
	// to it).
	CtimeNs  int64 `json:"ctime_ns,omitempty"`
	NewestNs int64 `json:"newest_ns,omitempty"`
	// Parent is the parent pointer a DirParentMismatch or
	// FileParentMismatch should get.
	Parent uint64 `json:"parent,omitempty"`
	// Home is the partition whose range holds a dangling name's inode (0:
	// none does).
	Home        uint64      `json:"home,omitempty"`
	Dentries    []DentryRef `json:"dentries,omitempty"`
	Related     []uint64    `json:"related,omitempty"`
	Explanation string      `json:"explanation"`
	// HasChildren marks a nameless directory that still has names under it
	// (not safe to evict).
	HasChildren bool `json:"has_children,omitempty"`
}

// Key identifies a finding together with the state of its records, so that
// the same defect seen twice in a row (and unchanged) has the same key.
func (f *Finding) Key() string {
	k := fmt.Sprintf("%s/%d/%d/%d/%d/%d", f.Kind, f.Partition, f.Ino, f.Nlink, f.CtimeNs, f.NewestNs)
	for _, d := range f.Dentries {
		k += fmt.Sprintf("/%d:%d:%q:%d", d.Partition, d.Parent, d.Name, d.Ino)
	}
	return k
}

func typeName(t metapb.FileType) string {
	switch t {
	case metapb.FileType_FILE_TYPE_REGULAR:
		return "file"
	case metapb.FileType_FILE_TYPE_DIRECTORY:
		return "dir"
	case metapb.FileType_FILE_TYPE_SYMLINK:
		return "symlink"
	case metapb.FileType_FILE_TYPE_FIFO:
		return "fifo"
	case metapb.FileType_FILE_TYPE_SOCKET:
		return "socket"
	case metapb.FileType_FILE_TYPE_CHAR_DEVICE:
		return "chardev"
	case metapb.FileType_FILE_TYPE_BLOCK_DEVICE:
		return "blockdev"
	}
	return fmt.Sprintf("type(%d)", int32(t))
}

func isDir(in *metapb.Inode) bool {
	return in != nil && in.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY
}

// located is a record with the partition it was found on.
type located[T any] struct {
	part uint64
	rec  T
}

// index is the volume's records cross-referenced.
type index struct {
	parts    []*PartitionSnapshot // by InodeStart
	home     map[uint64]located[*metapb.Inode]
	names    map[uint64][]located[*metapb.Dentry] // ino -> names pointing at it
	children map[uint64][]located[*metapb.Dentry] // parent -> names under it
}

// homeOf returns the partition whose range holds ino, or nil.
func (x *index) homeOf(ino uint64) *PartitionSnapshot {
	i := sort.Search(len(x.parts), func(i int) bool { return x.parts[i].InodeStart > ino }) - 1
	if ino == 0 || i < 0 || !x.parts[i].Holds(ino) {
		return nil
	}
	return x.parts[i]
}

// Check reports every inconsistency of s, sorted by kind, then partition,
// inode and first dentry. It never fails: a record it cannot place is itself
// a finding. A clean namespace yields no findings.
func Check(s *Snapshot) []Finding {
	x := &index{
		home:     map[uint64]located[*metapb.Inode]{},
		names:    map[uint64][]located[*metapb.Dentry]{},
		children: map[uint64][]located[*metapb.Dentry]{},
	}
	for i := range s.Partitions {
		x.parts = append(x.parts, &s.Partitions[i])
	}
	sort.SliceStable(x.parts, func(i, j int) bool { return x.parts[i].InodeStart < x.parts[j].InodeStart })

	var out []Finding
	for _, p := range x.parts {
		for _, in := range p.Inodes {
			if in == nil {
				continue
			}
			if !p.Holds(in.GetIno()) {
				rng := fmt.Sprintf("[%d, %d]", p.InodeStart, p.InodeEnd)
				if p.InodeEnd == 0 {
					rng = fmt.Sprintf("[%d, ∞)", p.InodeStart)
				}
				out = append(out, Finding{Kind: InodeOutOfRange, Partition: p.ID, Ino: in.GetIno(), Type: typeName(in.GetType()),
					Nlink: in.GetNlink(), CtimeNs: in.GetCtimeNs(),
					Explanation: fmt.Sprintf("inode %d is on partition %d, whose range %s does not hold it", in.GetIno(), p.ID, rng)})
				continue
			}
			x.home[in.GetIno()] = located[*metapb.Inode]{p.ID, in}
		}
	}
	for _, p := range x.parts {
		for _, d := range p.Dentries {
			if d == nil {
				continue
			}
			l := located[*metapb.Dentry]{p.ID, d}
			x.children[d.GetParent()] = append(x.children[d.GetParent()], l)
			if s.Routing != nil && !s.Migrating {
				if want, _ := s.Routing.Route(d.GetParent(), string(d.GetName())); want != p.ID {
					out = append(out, Finding{Kind: MisplacedDentry, Partition: p.ID, Dentries: []DentryRef{refOf(p.ID, d)},
						Explanation: fmt.Sprintf("name %d/%q is on partition %d but routes to partition %d", d.GetParent(), d.GetName(), p.ID, want)})
				}
			}
			in, ok := x.home[d.GetIno()]
			if !ok {
				var home uint64
				if h := x.homeOf(d.GetIno()); h != nil {
					home = h.ID
				}
				out = append(out, Finding{Kind: DanglingName, Partition: p.ID, Home: home, Dentries: []DentryRef{refOf(p.ID, d)},
					Explanation: fmt.Sprintf("name %d/%q points at inode %d, which does not exist at its home", d.GetParent(), d.GetName(), d.GetIno())})
				continue
			}
			x.names[d.GetIno()] = append(x.names[d.GetIno()], l)
			if d.GetType() != in.rec.GetType() {
				out = append(out, Finding{Kind: TypeMismatch, Partition: p.ID, Ino: d.GetIno(), Type: typeName(in.rec.GetType()),
					Dentries:    []DentryRef{refOf(p.ID, d)},
					Explanation: fmt.Sprintf("name %d/%q says %s, inode %d is a %s", d.GetParent(), d.GetName(), typeName(d.GetType()), d.GetIno(), typeName(in.rec.GetType()))})
			}
		}
	}
	// Names under a parent that is missing or not a directory.
	for parent, ds := range x.children {
		if p, ok := x.home[parent]; ok && isDir(p.rec) {
			continue
		}
		for _, d := range ds {
			out = append(out, Finding{Kind: LostName, Partition: d.part, Dentries: []DentryRef{refOf(d.part, d.rec)},
				Explanation: fmt.Sprintf("name %d/%q is under inode %d, which is not an existing directory", parent, d.rec.GetName(), parent)})
		}
	}
	out = append(out, checkInodes(x)...)
	out = append(out, checkTree(x)...)
	sortFindings(out)
	return out
}

// newest returns the newest ctime of in and of the inodes of names.
func newest(x *index, in *metapb.Inode, names []located[*metapb.Dentry]) int64 {
	t := in.GetCtimeNs()
	for _, d := range names {
		if c, ok := x.home[d.rec.GetIno()]; ok {
			t = max(t, c.rec.GetCtimeNs())
		}
	}
	return t
}

func refs(ds []located[*metapb.Dentry]) []DentryRef {
	out := make([]DentryRef, 0, len(ds))
	for _, d := range ds {
		out = append(out, refOf(d.part, d.rec))
	}
	return out
}

// checkInodes compares each home inode's link count with its names.
func checkInodes(x *index) []Finding {
	var out []Finding
	if r, ok := x.home[RootIno]; !ok || !isDir(r.rec) {
		part := uint64(0)
		if h := x.homeOf(RootIno); h != nil {
			part = h.ID
		}
		out = append(out, Finding{Kind: MissingRoot, Partition: part, Ino: RootIno,
			Explanation: "the volume has no root directory (inode 1)"})
	}
	for ino, l := range x.home {
		in := l.rec
		names := x.names[ino]
		base := Finding{Partition: l.part, Ino: ino, Type: typeName(in.GetType()), Nlink: in.GetNlink(),
			CtimeNs: in.GetCtimeNs(), NewestNs: in.GetCtimeNs(), Dentries: refs(names)}
		if len(names) == 0 && ino != RootIno {
			f := base
			if in.GetNlink() == 0 {
				f.Kind = Unlinked
				f.Explanation = fmt.Sprintf("inode %d has no links and no name but was not evicted", ino)
			} else {
				f.Kind = Orphan
				f.Explanation = fmt.Sprintf("%s inode %d has %d links but no name refers to it", typeName(in.GetType()), ino, in.GetNlink())
			}
			if isDir(in) && len(x.children[ino]) > 0 {
				f.HasChildren = true
				f.Explanation += fmt.Sprintf(" (it still holds %d names)", len(x.children[ino]))
			}
			out = append(out, f)
			continue
		}
		if !isDir(in) {
			if want := uint32(len(names)); in.GetNlink() != want {
				f := base
				f.Kind, f.WantNlink = NlinkMismatch, want
				f.Explanation = fmt.Sprintf("%s inode %d has nlink %d but %d names", typeName(in.GetType()), ino, in.GetNlink(), want)
				out = append(out, f)
			}
			if !slices.ContainsFunc(names, func(d located[*metapb.Dentry]) bool { return d.rec.GetParent() == in.GetParent() }) {
				f := base
				f.Kind, f.Parent = FileParentMismatch, names[0].rec.GetParent()
				f.Explanation = fmt.Sprintf("%s inode %d is named in %d but its parent pointer says %d", typeName(in.GetType()), ino, f.Parent, in.GetParent())
				out = append(out, f)
			}
			continue
		}
		var subdirs []located[*metapb.Dentry]
		for _, c := range x.children[ino] {
			if ci, ok := x.home[c.rec.GetIno()]; ok && isDir(ci.rec) {
				subdirs = append(subdirs, c)
			}
		}
		if want := 2 + uint32(len(subdirs)); in.GetNlink() != want {
			f := base
			f.Kind, f.WantNlink = NlinkMismatch, want
			// A mkdir or rmdir in flight changes a child first: its ctime
			// counts for the grace period.
			f.NewestNs = newest(x, in, subdirs)
			f.Explanation = fmt.Sprintf("directory %d has nlink %d but %d subdirectories (want %d)", ino, in.GetNlink(), len(subdirs), want)
			out = append(out, f)
		}
		if ino == RootIno {
			if len(names) > 0 {
				f := base
				f.Kind = DirMultipleNames
				f.Explanation = fmt.Sprintf("the root directory has %d names", len(names))
				out = append(out, f)
			}
			continue
		}
		if len(names) > 1 {
			f := base
			f.Kind = DirMultipleNames
			f.Explanation = fmt.Sprintf("directory %d has %d names", ino, len(names))
			out = append(out, f)
			continue
		}
		if p := names[0].rec.GetParent(); in.GetParent() != p {
			f := base
			f.Kind, f.Parent = DirParentMismatch, p
			f.Explanation = fmt.Sprintf("directory %d is named in %d but its parent pointer says %d", ino, p, in.GetParent())
			out = append(out, f)
		}
	}
	return out
}

// checkTree walks the names from the root and reports the named directories
// it does not reach: those whose chain of names loops as a cycle, the rest
// as unreachable. Nameless directories are orphans, reported already.
func checkTree(x *index) []Finding {
	reached := map[uint64]bool{RootIno: true}
	queue := []uint64{RootIno}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		for _, c := range x.children[dir] {
			ino := c.rec.GetIno()
			if ci, ok := x.home[ino]; ok && isDir(ci.rec) && !reached[ino] {
				reached[ino] = true
				queue = append(queue, ino)
			}
		}
	}
	var dirs []uint64
	for ino, l := range x.home {
		if isDir(l.rec) && !reached[ino] && len(x.names[ino]) > 0 {
			dirs = append(dirs, ino)
		}
	}
	slices.Sort(dirs)
	var out []Finding
	inCycle := map[uint64]bool{}
	for _, start := range dirs {
		if inCycle[start] {
			continue
		}
		// Follow the (first) name's parent upwards; a revisit is a cycle.
		pos := map[uint64]int{}
		var path []uint64
		cur := start
		for {
			if _, seen := pos[cur]; seen {
				break
			}
			ns := x.names[cur]
			if ci, ok := x.home[cur]; !ok || !isDir(ci.rec) || reached[cur] || len(ns) == 0 {
				cur = 0
				break
			}
			pos[cur] = len(path)
			path = append(path, cur)
			cur = ns[0].rec.GetParent()
		}
		if cur == 0 {
			continue
		}
		cycle := slices.Clone(path[pos[cur]:])
		if !slices.Contains(cycle, start) {
			continue
		}
		for _, c := range cycle {
			inCycle[c] = true
		}
		slices.Sort(cycle)
		l := x.home[cycle[0]]
		out = append(out, Finding{Kind: DirCycle, Partition: l.part, Ino: cycle[0], Type: "dir", Related: cycle,
			CtimeNs: l.rec.GetCtimeNs(), Dentries: refs(x.names[cycle[0]]),
			Explanation: fmt.Sprintf("directories %v are named inside each other, cut off from the root", cycle)})
	}
	for _, ino := range dirs {
		if inCycle[ino] {
			continue
		}
		l := x.home[ino]
		out = append(out, Finding{Kind: UnreachableDir, Partition: l.part, Ino: ino, Type: "dir",
			CtimeNs: l.rec.GetCtimeNs(), Dentries: refs(x.names[ino]),
			Explanation: fmt.Sprintf("directory %d is named but not reachable from the root", ino)})
	}
	return out
}

func sortFindings(fs []Finding) {
	rank := map[Kind]int{}
	for i, k := range Kinds {
		rank[k] = i
	}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := &fs[i], &fs[j]
		if a.Kind != b.Kind {
			return rank[a.Kind] < rank[b.Kind]
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		if a.Ino != b.Ino {
			return a.Ino < b.Ino
		}
		if len(a.Dentries) > 0 && len(b.Dentries) > 0 {
			da, db := a.Dentries[0], b.Dentries[0]
			if da.Parent != db.Parent {
				return da.Parent < db.Parent
			}
			return da.Name < db.Name
		}
		return len(a.Dentries) < len(b.Dentries)
	})
}

// Count returns the number of findings per kind.
func Count(fs []Finding) map[Kind]int {
	out := map[Kind]int{}
	for _, f := range fs {
		out[f.Kind]++
	}
	return out
}
