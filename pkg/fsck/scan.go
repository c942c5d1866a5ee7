package fsck

import (
	"context"
	"fmt"
	"sort"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Scanner reads one page of a partition's records in key order. more says
// whether records follow the page. The Scan RPC on the partition's leader
// implements it (Remote); tests use an in-memory one.
type Scanner interface {
	ScanInodes(ctx context.Context, part, afterIno uint64, limit uint32) (inodes []*metapb.Inode, more bool, err error)
	ScanDentries(ctx context.Context, part, afterParent uint64, afterName []byte, limit uint32) (dentries []*metapb.Dentry, more bool, err error)
}

// Layout is a volume's partitions and routing, from the cluster map.
type Layout struct {
	Volume     string
	Partitions []PartitionSnapshot // records empty; ids and ranges only
	Routing    *hybridindex.Table
	Migrating  bool
}

// LayoutFromMap extracts volume's layout from the cluster map. It fails if
// the volume does not exist, a partition is missing from the map, or the
// routing does not validate.
func LayoutFromMap(m *pb.ClusterMap, volume string) (*Layout, error) {
	var vol *pb.Volume
	for _, v := range m.GetVolumes() {
		if v.GetName() == volume {
			vol = v
		}
	}
	if vol == nil {
		return nil, fmt.Errorf("volume %q does not exist", volume)
	}
	l := &Layout{Volume: volume, Routing: &hybridindex.Table{Slots: vol.GetSlotOwners()}}
	if mg := vol.GetMigration(); mg != nil && mg.GetPhase() != pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED {
		l.Migrating = true
	}
	if ex := vol.GetExceptions(); len(ex) > 0 {
		t := hybridindex.NewExceptionTable()
		for _, e := range ex {
			if err := t.Set(string(e.GetName()), hybridindex.Redirect{Kind: hybridindex.Kind(e.GetKind()), MP: e.GetMp()}); err != nil {
				return nil, fmt.Errorf("volume %q: %w", volume, err)
			}
		}
		l.Routing.Exceptions = t
	}
	if err := l.Routing.Validate(); err != nil {
		return nil, fmt.Errorf("volume %q: %w", volume, err)
	}
	for _, id := range vol.GetMetaPartitions() {
		p, ok := m.GetPartitions()[id]
		if !ok {
			return nil, fmt.Errorf("volume %q: meta partition %d is not in the map", volume, id)
		}
		l.Partitions = append(l.Partitions, PartitionSnapshot{ID: id, InodeStart: p.GetInodeStart(), InodeEnd: p.GetInodeEnd()})
	}
	sort.Slice(l.Partitions, func(i, j int) bool { return l.Partitions[i].ID < l.Partitions[j].ID })
	return l, nil
}

// Progress reports how far Collect got: records of one kind read so far
// from one partition.
type Progress struct {
	Partition uint64
	Kind      string // "dentries" or "inodes"
	Records   int
	Done      bool // the partition's records of this kind are all read
}

// PageSize is the number of records Collect asks for per page.
const PageSize = 1000

// Collect reads every dentry and then every inode of the layout's partitions
// into a Snapshot, calling progress (if not nil) after every page. Dentries
// come first so that a create racing with the scan shows up as a fresh
// orphan (left alone by the grace period) rather than as a dangling name.
func Collect(ctx context.Context, sc Scanner, l *Layout, progress func(Progress)) (*Snapshot, error) {
	s := &Snapshot{Volume: l.Volume, Routing: l.Routing, Migrating: l.Migrating}
	s.Partitions = append([]PartitionSnapshot(nil), l.Partitions...)
	report := func(p Progress) {
		if progress != nil {
			progress(p)
		}
	}
	for i := range s.Partitions {
		p := &s.Partitions[i]
		p.Dentries = nil
		var afterParent uint64
		var afterName []byte
		for {
			ds, more, err := sc.ScanDentries(ctx, p.ID, afterParent, afterName, PageSize)
			if err != nil {
				return nil, fmt.Errorf("scan dentries of partition %d: %w", p.ID, err)
			}
			p.Dentries = append(p.Dentries, ds...)
			report(Progress{Partition: p.ID, Kind: "dentries", Records: len(p.Dentries), Done: !more})
			if !more {
				break
			}
			if len(ds) == 0 {
				return nil, fmt.Errorf("scan dentries of partition %d: empty page that says more follow", p.ID)
			}
			last := ds[len(ds)-1]
			if !dentryAfter(last, afterParent, afterName) {
				return nil, fmt.Errorf("scan dentries of partition %d: page does not advance past %d/%q", p.ID, afterParent, afterName)
			}
			afterParent, afterName = last.GetParent(), last.GetName()
		}
	}
	for i := range s.Partitions {
		p := &s.Partitions[i]
		p.Inodes = nil
		var after uint64
		for {
			ins, more, err := sc.ScanInodes(ctx, p.ID, after, PageSize)
			if err != nil {
				return nil, fmt.Errorf("scan inodes of partition %d: %w", p.ID, err)
			}
			p.Inodes = append(p.Inodes, ins...)
			report(Progress{Partition: p.ID, Kind: "inodes", Records: len(p.Inodes), Done: !more})
			if !more {
				break
			}
			if len(ins) == 0 || ins[len(ins)-1].GetIno() <= after {
				return nil, fmt.Errorf("scan inodes of partition %d: page does not advance past inode %d", p.ID, after)
			}
			after = ins[len(ins)-1].GetIno()
		}
	}
	return s, nil
}

// dentryAfter reports whether d sorts after (parent, name).
func dentryAfter(d *metapb.Dentry, parent uint64, name []byte) bool {
	if d.GetParent() != parent {
		return d.GetParent() > parent
	}
	return string(d.GetName()) > string(name)
}
