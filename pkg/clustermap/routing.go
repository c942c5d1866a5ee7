package clustermap

import (
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
)

// RoutingTable builds the hybridindex table of a slot table and an exception
// table as the map stores them. It fails, wrapping ErrInvalid, on an entry
// hybridindex refuses (bad name or redirect, a name twice) or a table that
// cannot route every name (hybridindex.Table.Validate). The result does not
// share memory with the arguments.
func RoutingTable(slots []uint64, exceptions []*pb.ExceptionEntry) (*hybridindex.Table, error) {
	et := hybridindex.NewExceptionTable()
	for i, e := range exceptions {
		name := string(e.GetName())
		if _, dup := et.Get(name); dup {
			return nil, fmt.Errorf("%w exception entry %d: name %q listed twice", ErrInvalid, i, name)
		}
		if e.GetKind() > math.MaxUint8 {
			return nil, fmt.Errorf("%w exception entry %d (%q): kind %d", ErrInvalid, i, name, e.GetKind())
		}
		if err := et.Set(name, hybridindex.Redirect{Kind: hybridindex.Kind(e.GetKind()), MP: e.GetMp()}); err != nil {
			return nil, fmt.Errorf("%w exception entry %d: %w", ErrInvalid, i, err)
		}
	}
	t := &hybridindex.Table{Slots: slices.Clone(slots), Exceptions: et}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%w routing: %w", ErrInvalid, err)
	}
	return t, nil
}

// ExceptionEntries returns the entries of et in the map's form, in increasing
// name order, so equal tables give equal maps.
func ExceptionEntries(et *hybridindex.ExceptionTable) []*pb.ExceptionEntry {
	names := et.Names()
	out := make([]*pb.ExceptionEntry, 0, len(names))
	for _, n := range names {
		r, _ := et.Get(n)
		out = append(out, &pb.ExceptionEntry{Name: []byte(n), Kind: uint32(r.Kind), Mp: r.MP})
	}
	return out
}

// OpenMetaPartition returns the volume's meta partition with an open-ended
// inode range (the one CFS Algorithm 1 cuts when the volume grows), or nil.
func (s *State) OpenMetaPartition(v *pb.Volume) *pb.Partition {
	for _, id := range v.GetMetaPartitions() {
		if p := s.m.Partitions[id]; p != nil && p.InodeEnd == 0 {
			return p
		}
	}
	return nil
}

// addMetaPartition cuts the volume's open-ended meta partition at cut_end and
// adds a partition holding the open range above it. The new partition owns no
// slot; a migration gives it some.
func (s *State) addMetaPartition(c *pb.AddMetaPartition) (uint64, error) {
	v := s.VolumeByName(c.Volume)
	if v == nil {
		return 0, fmt.Errorf("volume %q: %w", c.Volume, ErrNotFound)
	}
	if v.Migration != nil {
		return 0, fmt.Errorf("%w: volume %q has a routing change in progress (version %d, phase %v)", ErrConflict, c.Volume, v.Migration.RoutingVersion, v.Migration.Phase)
	}
	if c.Partition == nil || c.Partition.Kind != pb.PartitionKind_PARTITION_KIND_META {
		return 0, fmt.Errorf("%w add meta partition to %q: the new partition must be a meta partition", ErrInvalid, c.Volume)
	}
	if err := s.checkReplicas(c.Partition, int(v.Replicas)); err != nil {
		return 0, fmt.Errorf("add meta partition to %q: %w", c.Volume, err)
	}
	// Every meta partition must be able to own a slot, or no migration could
	// ever give the new one its share.
	if len(v.MetaPartitions)+1 > len(v.SlotOwners) {
		return 0, fmt.Errorf("%w add meta partition to %q: %d slots cannot serve %d meta partitions", ErrInvalid, c.Volume, len(v.SlotOwners), len(v.MetaPartitions)+1)
	}
	open := s.OpenMetaPartition(v)
	if open == nil {
		return 0, fmt.Errorf("%w add meta partition to %q: no meta partition has an open inode range", ErrConflict, c.Volume)
	}
	if c.CutEnd == 0 || c.CutEnd < open.InodeStart || c.CutEnd == math.MaxUint64 {
		return 0, fmt.Errorf("%w add meta partition to %q: cut at %d, want %d..%d (partition %d starts at %d)",
			ErrInvalid, c.Volume, c.CutEnd, max(open.InodeStart, 1), uint64(math.MaxUint64-1), open.Id, open.InodeStart)
	}
	open.InodeEnd = c.CutEnd
	p := &pb.Partition{
		Id: s.m.NextPartitionId, VolumeId: v.Id, Kind: pb.PartitionKind_PARTITION_KIND_META,
		Replicas: slices.Clone(c.Partition.Replicas), InodeStart: c.CutEnd + 1,
	}
	s.m.NextPartitionId++
	s.m.Partitions[p.Id] = p
	v.MetaPartitions = append(v.MetaPartitions, p.Id)
	return p.Id, nil
}

// startMigration records a routing change of a volume in phase FREEZE.
func (s *State) startMigration(now int64, c *pb.StartMigration) error {
	v := s.VolumeByName(c.Volume)
	if v == nil {
		return fmt.Errorf("volume %q: %w", c.Volume, ErrNotFound)
	}
	if m := v.Migration; m != nil {
		return fmt.Errorf("%w: volume %q already has a routing change in progress (version %d, phase %v, reason %q)",
			ErrConflict, c.Volume, m.RoutingVersion, m.Phase, m.Reason)
	}
	if c.FromVersion != v.RoutingVersion {
		return fmt.Errorf("%w: routing change of volume %q from version %d, but the live routing is at version %d",
			ErrConflict, c.Volume, c.FromVersion, v.RoutingVersion)
	}
	if len(c.SlotOwners) != len(v.SlotOwners) {
		return fmt.Errorf("%w routing change of volume %q: %d slots, the volume has %d", ErrInvalid, c.Volume, len(c.SlotOwners), len(v.SlotOwners))
	}
	if _, err := RoutingTable(c.SlotOwners, c.Exceptions); err != nil {
		return fmt.Errorf("routing change of volume %q: %w", c.Volume, err)
	}
	for i, mp := range c.SlotOwners {
		if !slices.Contains(v.MetaPartitions, mp) {
			return fmt.Errorf("%w routing change of volume %q: slot %d goes to %d, not a meta partition of the volume", ErrInvalid, c.Volume, i, mp)
		}
	}
	exceptions := make([]*pb.ExceptionEntry, len(c.Exceptions))
	for i, e := range c.Exceptions {
		exceptions[i] = proto.Clone(e).(*pb.ExceptionEntry)
	}
	v.Migration = &pb.Migration{
		RoutingVersion: v.RoutingVersion + 1,
		SlotOwners:     slices.Clone(c.SlotOwners),
		Exceptions:     exceptions,
		Phase:          pb.MigrationPhase_MIGRATION_PHASE_FREEZE,
		Reason:         c.Reason,
		StartedUnixMs:  now,
	}
	return nil
}

// advanceMigration moves a volume's migration one phase forward. Repeating
// the current phase, or ending a migration that has already ended, changes
// nothing, so a proposer may retry after an ambiguous failure.
func (s *State) advanceMigration(c *pb.AdvanceMigration) (bool, error) {
	v := s.VolumeByName(c.Volume)
	if v == nil {
		return false, fmt.Errorf("volume %q: %w", c.Volume, ErrNotFound)
	}
	m := v.Migration
	if m == nil {
		if c.Phase == pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED && c.RoutingVersion != 0 && c.RoutingVersion == v.RoutingVersion {
			return false, nil
		}
		return false, fmt.Errorf("%w: volume %q has no routing change in progress (live version %d)", ErrConflict, c.Volume, v.RoutingVersion)
	}
	if c.RoutingVersion != m.RoutingVersion {
		return false, fmt.Errorf("%w: volume %q is changing its routing to version %d, not %d", ErrConflict, c.Volume, m.RoutingVersion, c.RoutingVersion)
	}
	if c.Phase == m.Phase {
		return false, nil
	}
	// Phases go one at a time, so no step (above all COPY) can be skipped.
	next := m.Phase + 1
	if m.Phase == pb.MigrationPhase_MIGRATION_PHASE_PURGE {
		next = pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED
	}
	if c.Phase != next {
		return false, fmt.Errorf("%w: routing change of volume %q is in phase %v; the next phase is %v, not %v", ErrConflict, c.Volume, m.Phase, next, c.Phase)
	}
	switch c.Phase {
	case pb.MigrationPhase_MIGRATION_PHASE_SWITCH:
		v.SlotOwners = slices.Clone(m.SlotOwners)
		v.Exceptions = make([]*pb.ExceptionEntry, len(m.Exceptions))
		for i, e := range m.Exceptions {
			v.Exceptions[i] = proto.Clone(e).(*pb.ExceptionEntry)
		}
		v.RoutingVersion = m.RoutingVersion
	case pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED:
		v.Migration = nil
		return true, nil
	}
	if c.MovedDentries != 0 {
		m.MovedDentries = c.MovedDentries
	}
	m.Phase = c.Phase
	return true, nil
}
