package clustermap

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

const (
	freeze  = pb.MigrationPhase_MIGRATION_PHASE_FREEZE
	copyP   = pb.MigrationPhase_MIGRATION_PHASE_COPY
	switchP = pb.MigrationPhase_MIGRATION_PHASE_SWITCH
	purge   = pb.MigrationPhase_MIGRATION_PHASE_PURGE
	done    = pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED
)

func addMP(volume string, cut uint64, replicas ...uint64) *pb.Command {
	return &pb.Command{Op: &pb.Command_AddMetaPartition{AddMetaPartition: &pb.AddMetaPartition{
		Volume: volume, CutEnd: cut, Partition: part(meta, replicas...),
	}}}
}

func startMig(volume string, from uint64, slots []uint64, exc ...*pb.ExceptionEntry) *pb.Command {
	return &pb.Command{NowUnixMs: 5000, Op: &pb.Command_StartMigration{StartMigration: &pb.StartMigration{
		Volume: volume, FromVersion: from, SlotOwners: slots, Exceptions: exc, Reason: "test",
	}}}
}

func advance(volume string, version uint64, phase pb.MigrationPhase) *pb.Command {
	return &pb.Command{Op: &pb.Command_AdvanceMigration{AdvanceMigration: &pb.AdvanceMigration{
		Volume: volume, RoutingVersion: version, Phase: phase, MovedDentries: 7,
	}}}
}

func override(name string, mp uint64) *pb.ExceptionEntry {
	return &pb.ExceptionEntry{Name: []byte(name), Kind: 2, Mp: mp}
}

// routingCluster returns the base cluster with volume "v": meta partitions 1
// and 2 (inodes 1-2^24 and 2^24+1-open), data partition 3, 8 slots.
func routingCluster(t *testing.T) *State {
	t.Helper()
	s := cluster(t)
	if _, err := s.Apply(vol("v", 3, part(meta, 1, 2, 3), part(meta, 2, 3, 1), part(data, 4, 5, 6))); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoutingCommands(t *testing.T) {
	slots2 := []uint64{1, 1, 1, 2, 2, 2, 2, 2}
	slots4 := []uint64{1, 1, 4, 2, 2, 2, 4, 4}
	tests := []struct {
		name    string
		setup   []*pb.Command // applied first, must succeed
		cmd     *pb.Command
		wantErr error
		changed bool
		check   func(t *testing.T, s *State)
	}{
		{
			name: "add meta partition cuts the open one", cmd: addMP("v", InodeRangeStep+100, 3, 1, 2), changed: true,
			check: func(t *testing.T, s *State) {
				v := s.VolumeByName("v")
				if !slices.Equal(v.MetaPartitions, []uint64{1, 2, 4}) {
					t.Fatalf("meta partitions %v", v.MetaPartitions)
				}
				if p := s.Map().Partitions[2]; p.InodeEnd != InodeRangeStep+100 {
					t.Fatalf("open partition end %d", p.InodeEnd)
				}
				p := s.Map().Partitions[4]
				if p.InodeStart != InodeRangeStep+101 || p.InodeEnd != 0 || p.VolumeId != v.Id || p.Kind != meta {
					t.Fatalf("new partition %v", p)
				}
				if s.OpenMetaPartition(v).Id != 4 {
					t.Fatal("the new partition is not the open one")
				}
				if !slices.Equal(v.SlotOwners, []uint64{1, 1, 1, 1, 2, 2, 2, 2}) {
					t.Fatalf("slots changed: %v", v.SlotOwners)
				}
			},
		},
		{name: "add to missing volume", cmd: addMP("nope", InodeRangeStep+100, 3, 1, 2), wantErr: ErrNotFound},
		{name: "cut below the open range", cmd: addMP("v", InodeRangeStep, 3, 1, 2), wantErr: ErrInvalid},
		{name: "cut at the open range start", cmd: addMP("v", InodeRangeStep+1, 3, 1, 2), changed: true},
		{name: "cut 0", cmd: addMP("v", 0, 3, 1, 2), wantErr: ErrInvalid},
		{name: "new partition on a data node", cmd: addMP("v", InodeRangeStep+100, 3, 1, 4), wantErr: ErrInvalid},
		{name: "new partition with too few replicas", cmd: addMP("v", InodeRangeStep+100, 3, 1), wantErr: ErrInvalid},
		{name: "new partition on unknown node", cmd: addMP("v", InodeRangeStep+100, 3, 1, 99), wantErr: ErrNotFound},
		{
			name: "new data partition", wantErr: ErrInvalid,
			cmd: &pb.Command{Op: &pb.Command_AddMetaPartition{AddMetaPartition: &pb.AddMetaPartition{Volume: "v", CutEnd: InodeRangeStep + 100, Partition: part(data, 4, 5, 6)}}},
		},
		{name: "add during a migration", setup: []*pb.Command{startMig("v", 1, slots2)}, cmd: addMP("v", InodeRangeStep+100, 3, 1, 2), wantErr: ErrConflict},
		{
			name: "more partitions than slots", wantErr: ErrInvalid,
			setup: []*pb.Command{
				addMP("v", 1<<25, 3, 1, 2), addMP("v", 1<<26, 3, 1, 2), addMP("v", 1<<27, 3, 1, 2),
				addMP("v", 1<<28, 3, 1, 2), addMP("v", 1<<29, 3, 1, 2), addMP("v", 1<<30, 3, 1, 2),
			},
			cmd: addMP("v", 1<<31, 3, 1, 2),
		},
		{
			name: "start migration", cmd: startMig("v", 1, slots2, override("hot", 2)), changed: true,
			check: func(t *testing.T, s *State) {
				v := s.VolumeByName("v")
				m := v.Migration
				if m.Phase != freeze || m.RoutingVersion != 2 || !slices.Equal(m.SlotOwners, slots2) || len(m.Exceptions) != 1 || m.Reason != "test" || m.StartedUnixMs != 5000 {
					t.Fatalf("migration %v", m)
				}
				if v.RoutingVersion != 1 || v.SlotOwners[3] != 1 || len(v.Exceptions) != 0 {
					t.Fatalf("live routing changed before SWITCH: %v", v)
				}
			},
		},
		{name: "start migration from an old version", cmd: startMig("v", 0, slots2), wantErr: ErrConflict},
		{name: "start migration twice", setup: []*pb.Command{startMig("v", 1, slots2)}, cmd: startMig("v", 1, slots2), wantErr: ErrConflict},
		{name: "start migration of missing volume", cmd: startMig("nope", 1, slots2), wantErr: ErrNotFound},
		{name: "start migration with wrong slot count", cmd: startMig("v", 1, slots2[:4]), wantErr: ErrInvalid},
		{name: "start migration to a foreign partition", cmd: startMig("v", 1, []uint64{1, 1, 1, 2, 2, 2, 2, 3}), wantErr: ErrInvalid},
		{name: "start migration with slot owner 0", cmd: startMig("v", 1, []uint64{1, 1, 1, 2, 2, 2, 2, 0}), wantErr: ErrInvalid},
		{name: "override to a partition without slots", cmd: startMig("v", 1, []uint64{1, 1, 1, 1, 1, 1, 1, 1}, override("x", 2)), wantErr: ErrInvalid},
		{name: "exception with bad kind", cmd: startMig("v", 1, slots2, &pb.ExceptionEntry{Name: []byte("x"), Kind: 9}), wantErr: ErrInvalid},
		{name: "exception with bad name", cmd: startMig("v", 1, slots2, &pb.ExceptionEntry{Name: []byte("a/b"), Kind: 1}), wantErr: ErrInvalid},
		{name: "exception twice", cmd: startMig("v", 1, slots2, override("x", 1), override("x", 2)), wantErr: ErrInvalid},
		{
			name: "migration to a new partition", setup: []*pb.Command{addMP("v", InodeRangeStep+100, 3, 1, 2)},
			cmd: startMig("v", 1, slots4), changed: true,
		},
		{name: "advance to COPY", setup: []*pb.Command{startMig("v", 1, slots2)}, cmd: advance("v", 2, copyP), changed: true},
		{name: "advance to the same phase", setup: []*pb.Command{startMig("v", 1, slots2), advance("v", 2, copyP)}, cmd: advance("v", 2, copyP)},
		{name: "advance skipping COPY", setup: []*pb.Command{startMig("v", 1, slots2)}, cmd: advance("v", 2, switchP), wantErr: ErrConflict},
		{name: "advance backwards", setup: []*pb.Command{startMig("v", 1, slots2), advance("v", 2, copyP)}, cmd: advance("v", 2, freeze), wantErr: ErrConflict},
		{name: "advance other version", setup: []*pb.Command{startMig("v", 1, slots2)}, cmd: advance("v", 3, copyP), wantErr: ErrConflict},
		{name: "advance without migration", cmd: advance("v", 2, copyP), wantErr: ErrConflict},
		{name: "end before PURGE", setup: []*pb.Command{startMig("v", 1, slots2), advance("v", 2, copyP)}, cmd: advance("v", 2, done), wantErr: ErrConflict},
		{
			name: "SWITCH makes the target live", changed: true,
			setup: []*pb.Command{startMig("v", 1, slots2, override("hot", 2)), advance("v", 2, copyP)},
			cmd:   advance("v", 2, switchP),
			check: func(t *testing.T, s *State) {
				v := s.VolumeByName("v")
				if v.RoutingVersion != 2 || !slices.Equal(v.SlotOwners, slots2) || len(v.Exceptions) != 1 || string(v.Exceptions[0].Name) != "hot" {
					t.Fatalf("live routing after SWITCH: %v", v)
				}
				if v.Migration.Phase != switchP || v.Migration.MovedDentries != 7 {
					t.Fatalf("migration %v", v.Migration)
				}
			},
		},
		{
			name: "end clears the migration", changed: true,
			setup: []*pb.Command{startMig("v", 1, slots2), advance("v", 2, copyP), advance("v", 2, switchP), advance("v", 2, purge)},
			cmd:   advance("v", 2, done),
			check: func(t *testing.T, s *State) {
				v := s.VolumeByName("v")
				if v.Migration != nil || v.RoutingVersion != 2 || !slices.Equal(v.SlotOwners, slots2) {
					t.Fatalf("after end: %v", v)
				}
			},
		},
		{
			name:  "end again is a no-op",
			setup: []*pb.Command{startMig("v", 1, slots2), advance("v", 2, copyP), advance("v", 2, switchP), advance("v", 2, purge), advance("v", 2, done)},
			cmd:   advance("v", 2, done),
		},
		{
			name:    "next migration starts from the new version",
			setup:   []*pb.Command{startMig("v", 1, slots2), advance("v", 2, copyP), advance("v", 2, switchP), advance("v", 2, purge), advance("v", 2, done)},
			cmd:     startMig("v", 2, []uint64{1, 1, 1, 1, 2, 2, 2, 2}),
			changed: true,
			check: func(t *testing.T, s *State) {
				if m := s.VolumeByName("v").Migration; m.RoutingVersion != 3 {
					t.Fatalf("migration %v", m)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := routingCluster(t)
			if v := s.VolumeByName("v"); v.RoutingVersion != 1 {
				t.Fatalf("new volume at routing version %d, want 1", v.RoutingVersion)
			}
			for _, c := range tt.setup {
				if _, err := s.Apply(c); err != nil {
					t.Fatalf("setup %v: %v", c, err)
				}
			}
			before, _ := s.Marshal()
			epoch := s.Map().Epoch
			_, err := s.Apply(tt.cmd)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			after, _ := s.Marshal()
			if changed := !bytes.Equal(before, after); changed != tt.changed {
				t.Fatalf("map changed = %v, want %v", changed, tt.changed)
			}
			wantEpoch := epoch
			if tt.changed {
				wantEpoch++
			}
			if s.Map().Epoch != wantEpoch {
				t.Fatalf("epoch %d, want %d", s.Map().Epoch, wantEpoch)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func TestRoutingTable(t *testing.T) {
	tab, err := RoutingTable([]uint64{1, 2}, []*pb.ExceptionEntry{override("b", 2), {Name: []byte("a"), Kind: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if mp, _ := tab.Route(5, "b"); mp != 2 {
		t.Fatalf("override routed to %d", mp)
	}
	got := ExceptionEntries(tab.Exceptions)
	if len(got) != 2 || string(got[0].Name) != "a" || got[0].Kind != 1 || got[1].Mp != 2 {
		t.Fatalf("entries %v", got)
	}
	if _, err := RoutingTable(nil, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty slot table: %v", err)
	}
}
