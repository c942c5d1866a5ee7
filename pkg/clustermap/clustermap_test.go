package clustermap

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/pkg/chunker"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func reg(uuid string, role pb.Role, addr string, id uint64) *pb.Command {
	return &pb.Command{NowUnixMs: 1000, Op: &pb.Command_Register{Register: &pb.RegisterNode{Uuid: uuid, Role: role, Addr: addr, RequestedId: id}}}
}

func vol(name string, replicas int32, parts ...*pb.NewPartition) *pb.Command {
	return &pb.Command{NowUnixMs: 2000, Op: &pb.Command_CreateVolume{CreateVolume: &pb.CreateVolume{Name: name, Replicas: replicas, SlotCount: 8, Partitions: parts}}}
}

func volLayout(name string, layout uint32, chunking *pb.ChunkLayout) *pb.Command {
	c := vol(name, 3, part(meta, 1, 2, 3), part(data, 4, 5, 6))
	c.GetCreateVolume().DefaultLayout, c.GetCreateVolume().Chunking = layout, chunking
	return c
}

func part(kind pb.PartitionKind, replicas ...uint64) *pb.NewPartition {
	return &pb.NewPartition{Kind: kind, Replicas: replicas}
}

const (
	meta = pb.PartitionKind_PARTITION_KIND_META
	data = pb.PartitionKind_PARTITION_KIND_DATA
)

// cluster returns a map with meta nodes 1-3 and data nodes 4-6.
func cluster(t testing.TB) *State {
	t.Helper()
	s := New()
	cmds := []*pb.Command{
		{Op: &pb.Command_Init{Init: &pb.InitCluster{ClusterId: "c1"}}},
		reg("m1", pb.Role_ROLE_META, "a:1", 0), reg("m2", pb.Role_ROLE_META, "a:2", 0), reg("m3", pb.Role_ROLE_META, "a:3", 0),
		reg("d1", pb.Role_ROLE_DATA, "a:4", 0), reg("d2", pb.Role_ROLE_DATA, "a:5", 0), reg("d3", pb.Role_ROLE_DATA, "a:6", 0),
	}
	for _, c := range cmds {
		if _, err := s.Apply(c); err != nil {
			t.Fatalf("apply %v: %v", c, err)
		}
	}
	return s
}

func TestApply(t *testing.T) {
	tests := []struct {
		name      string
		cmd       *pb.Command
		wantErr   error
		wantRes   any
		wantEpoch uint64 // epoch after the command; the base cluster is at 7
	}{
		{"re-init same id is a no-op", &pb.Command{Op: &pb.Command_Init{Init: &pb.InitCluster{ClusterId: "c1"}}}, nil, nil, 7},
		{"re-init other id", &pb.Command{Op: &pb.Command_Init{Init: &pb.InitCluster{ClusterId: "c2"}}}, ErrConflict, nil, 7},
		{"new node gets next id", reg("m4", pb.Role_ROLE_META, "a:7", 0), nil, uint64(7), 8},
		{"re-register unchanged keeps id and epoch", reg("m1", pb.Role_ROLE_META, "a:1", 0), nil, uint64(1), 7},
		{"re-register new address bumps epoch", reg("m1", pb.Role_ROLE_META, "a:9", 1), nil, uint64(1), 8},
		{"duplicate requested id", reg("zz", pb.Role_ROLE_META, "a:8", 2), ErrExists, nil, 7},
		{"uuid claims another id", reg("m1", pb.Role_ROLE_META, "a:1", 3), ErrConflict, nil, 7},
		{"role changes", reg("m1", pb.Role_ROLE_DATA, "a:1", 0), ErrConflict, nil, 7},
		{"address of a live node", reg("zz", pb.Role_ROLE_DATA, "a:4", 0), ErrConflict, nil, 7},
		{"master cannot register", reg("zz", pb.Role_ROLE_MASTER, "a:8", 0), ErrInvalid, nil, 7},
		{"missing uuid", reg("", pb.Role_ROLE_META, "a:8", 0), ErrInvalid, nil, 7},
		{"volume", vol("v1", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6)), nil, uint64(1), 8},
		{"bad volume name", vol("-v", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6)), ErrInvalid, nil, 7},
		{"volume name with slash", vol("a/b", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6)), ErrInvalid, nil, 7},
		{"meta partition on data node", vol("v1", 3, part(meta, 1, 2, 4), part(data, 4, 5, 6)), ErrInvalid, nil, 7},
		{"replica twice", vol("v1", 3, part(meta, 1, 1, 2), part(data, 4, 5, 6)), ErrInvalid, nil, 7},
		{"unknown replica", vol("v1", 3, part(meta, 1, 2, 99), part(data, 4, 5, 6)), ErrNotFound, nil, 7},
		{"wrong replica count", vol("v1", 3, part(meta, 1, 2), part(data, 4, 5, 6)), ErrInvalid, nil, 7},
		{"no data partition", vol("v1", 3, part(meta, 1, 2, 3)), ErrInvalid, nil, 7},
		{"chunked volume", volLayout("v1", 1, nil), nil, uint64(1), 8},
		{"unknown layout", volLayout("v1", 7, nil), ErrInvalid, nil, 7},
		{"chunking min above avg", volLayout("v1", 1, &pb.ChunkLayout{Algorithm: 1, MinSize: 1 << 20, AvgSize: 1 << 16, MaxSize: 1 << 20}), ErrInvalid, nil, 7},
		{"chunks above a data node's write", volLayout("v1", 1, &pb.ChunkLayout{Algorithm: 1, MinSize: 1 << 12, AvgSize: 1 << 20, MaxSize: 8 << 20}), ErrInvalid, nil, 7},
		{"unknown chunk algorithm", volLayout("v1", 1, &pb.ChunkLayout{Algorithm: 9, MinSize: 1 << 12, AvgSize: 1 << 16, MaxSize: 1 << 18}), ErrInvalid, nil, 7},
		{"delete missing volume", &pb.Command{Op: &pb.Command_DeleteVolume{DeleteVolume: &pb.DeleteVolume{Name: "nope"}}}, ErrNotFound, nil, 7},
		{"node down", &pb.Command{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: 2, State: pb.NodeState_NODE_STATE_DOWN}}}, nil, nil, 8},
		{"node state unchanged", &pb.Command{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: 2, State: pb.NodeState_NODE_STATE_ALIVE}}}, nil, nil, 7},
		{"unknown node state", &pb.Command{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: 2}}}, ErrInvalid, nil, 7},
		{"empty command", &pb.Command{}, ErrInvalid, nil, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cluster(t)
			before, _ := s.Marshal()
			res, err := s.Apply(tt.cmd)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				after, _ := s.Marshal()
				if !bytes.Equal(before, after) {
					t.Fatalf("failed command changed the map")
				}
			}
			if tt.wantRes != nil && res != tt.wantRes {
				t.Fatalf("result = %v, want %v", res, tt.wantRes)
			}
			if got := s.Map().Epoch; got != tt.wantEpoch {
				t.Fatalf("epoch = %d, want %d", got, tt.wantEpoch)
			}
		})
	}
}

func addData(volume string, parts ...*pb.NewPartition) *pb.Command {
	return &pb.Command{Op: &pb.Command_AddDataPartitions{AddDataPartitions: &pb.AddDataPartitions{Volume: volume, Partitions: parts}}}
}

// TestAddDataPartitions: a volume gains data partitions, all or none, each
// checked as volume creation checks them.
func TestAddDataPartitions(t *testing.T) {
	tests := []struct {
		name    string
		cmd     *pb.Command
		wantErr error
		want    []uint64 // the volume's data partitions after
	}{
		{"two more", addData("v1", part(data, 4, 5, 6), part(data, 6, 5, 4)), nil, []uint64{2, 3, 4}},
		{"unknown volume", addData("v9", part(data, 4, 5, 6)), ErrNotFound, []uint64{2}},
		{"none", addData("v1"), ErrInvalid, []uint64{2}},
		{"a meta partition", addData("v1", part(meta, 1, 2, 3)), ErrInvalid, []uint64{2}},
		{"too few replicas", addData("v1", part(data, 4, 5)), ErrInvalid, []uint64{2}},
		{"one bad of two adds nothing", addData("v1", part(data, 4, 5, 6), part(data, 4, 4, 5)), ErrInvalid, []uint64{2}},
		{"an out node", addData("v1", part(data, 4, 5, 7)), ErrInvalid, []uint64{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cluster(t)
			for _, c := range []*pb.Command{
				vol("v1", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6)),
				reg("d4", pb.Role_ROLE_DATA, "a:7", 0),
				{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: 7, State: pb.NodeState_NODE_STATE_OUT}}},
			} {
				if _, err := s.Apply(c); err != nil {
					t.Fatal(err)
				}
			}
			epoch := s.Map().Epoch
			_, err := s.Apply(tt.cmd)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			v := s.VolumeByName("v1")
			if !slices.Equal(v.DataPartitions, tt.want) {
				t.Fatalf("data partitions %v, want %v", v.DataPartitions, tt.want)
			}
			if wantEpoch := epoch + map[bool]uint64{true: 1}[err == nil]; s.Map().Epoch != wantEpoch {
				t.Fatalf("epoch %d, want %d", s.Map().Epoch, wantEpoch)
			}
			for _, id := range v.DataPartitions {
				if p := s.Map().Partitions[id]; p == nil || p.VolumeId != v.Id || p.Kind != data {
					t.Fatalf("partition %d: %v", id, p)
				}
			}
		})
	}
}

func TestCreateVolumeLayout(t *testing.T) {
	s := cluster(t)
	_, err := s.Apply(vol("v", 3, part(meta, 1, 2, 3), part(meta, 2, 3, 1), part(meta, 3, 1, 2), part(data, 4, 5, 6)))
	if err != nil {
		t.Fatal(err)
	}
	v := s.VolumeByName("v")
	if len(v.MetaPartitions) != 3 || len(v.DataPartitions) != 1 {
		t.Fatalf("partitions: %v %v", v.MetaPartitions, v.DataPartitions)
	}
	wantSlots := []uint64{1, 1, 1, 2, 2, 2, 3, 3}
	for i, o := range v.SlotOwners {
		if o != wantSlots[i] {
			t.Fatalf("slot owners %v, want %v", v.SlotOwners, wantSlots)
		}
	}
	ranges := [][2]uint64{{1, InodeRangeStep}, {InodeRangeStep + 1, 2 * InodeRangeStep}, {2*InodeRangeStep + 1, 0}}
	for i, id := range v.MetaPartitions {
		p := s.Map().Partitions[id]
		if p.InodeStart != ranges[i][0] || p.InodeEnd != ranges[i][1] {
			t.Fatalf("mp %d range [%d,%d], want %v", id, p.InodeStart, p.InodeEnd, ranges[i])
		}
	}
	if !slices.Equal(v.ChunkIndexPartitions, v.MetaPartitions) {
		t.Fatalf("chunk index partitions %v, want the meta partitions %v", v.ChunkIndexPartitions, v.MetaPartitions)
	}
	if got := ChunkConfig(v.Chunking); got != chunker.Default() {
		t.Fatalf("chunking %v, want the default %v stored", got, chunker.Default())
	}
	if got := len(s.PartitionsOf(4)); got != 1 {
		t.Fatalf("node 4 hosts %d partitions, want 1", got)
	}
	if _, err := s.Apply(vol("v", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6))); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := s.Apply(&pb.Command{Op: &pb.Command_DeleteVolume{DeleteVolume: &pb.DeleteVolume{Name: "v"}}}); err != nil {
		t.Fatal(err)
	}
	if len(s.Map().Partitions) != 0 || len(s.Map().Volumes) != 0 {
		t.Fatalf("delete left %d partitions, %d volumes", len(s.Map().Partitions), len(s.Map().Volumes))
	}
}

func TestDeterministicSnapshot(t *testing.T) {
	a, b := cluster(t), cluster(t)
	for _, s := range []*State{a, b} {
		if _, err := s.Apply(vol("v", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6), part(data, 5, 6, 4))); err != nil {
			t.Fatal(err)
		}
	}
	ba, _ := a.Marshal()
	bb, _ := b.Marshal()
	if !bytes.Equal(ba, bb) {
		t.Fatal("equal command sequences produced different snapshots")
	}
	c := New()
	if err := c.Unmarshal(ba); err != nil {
		t.Fatal(err)
	}
	bc, _ := c.Marshal()
	if !bytes.Equal(ba, bc) {
		t.Fatal("snapshot round trip changed the map")
	}
	if _, err := c.Apply(reg("m9", pb.Role_ROLE_META, "a:99", 0)); err != nil {
		t.Fatalf("apply after restore: %v", err)
	}
	if err := c.Unmarshal([]byte{0xff, 0xff}); err == nil {
		t.Fatal("garbage snapshot accepted")
	}
}

func TestValidateVolumeName(t *testing.T) {
	for name, ok := range map[string]bool{
		"default": true, "a": true, "A-1_b.c": true, "": false, ".x": false, "x y": false,
		"x/y": false, string(make([]byte, 64)): false, "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123": true,
	} {
		if err := ValidateVolumeName(name); (err == nil) != ok {
			t.Errorf("ValidateVolumeName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// TestDataNodeStateMovesChains: a data node going down leaves the write
// chains of its data partitions (and a meta node's state leaves meta
// partitions alone); coming back, it follows as a stale replica until it
// reports a full alignment at the partition's current epoch.
func TestDataNodeStateMovesChains(t *testing.T) {
	s := cluster(t)
	apply := func(c *pb.Command) {
		t.Helper()
		if _, err := s.Apply(c); err != nil {
			t.Fatalf("apply %v: %v", c, err)
		}
	}
	state := func(node uint64, st pb.NodeState) *pb.Command {
		return &pb.Command{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: node, State: st}}}
	}
	insync := func(p, node, epoch uint64) *pb.Command {
		return &pb.Command{Op: &pb.Command_MarkInSync{MarkInSync: &pb.MarkInSync{PartitionId: p, NodeId: node, Epoch: epoch}}}
	}
	apply(vol("v1", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6)))
	var mp, dp *pb.Partition
	for _, p := range s.Map().Partitions {
		if p.Kind == data {
			dp = p
		} else {
			mp = p
		}
	}
	apply(state(1, pb.NodeState_NODE_STATE_DOWN))
	if len(mp.Down) != 0 || mp.Epoch != 0 {
		t.Fatalf("a meta node's state changed its meta partition: %v", mp)
	}
	apply(state(4, pb.NodeState_NODE_STATE_DOWN))
	if !slices.Equal(dp.Replicas, []uint64{5, 6, 4}) || !slices.Equal(dp.Down, []uint64{4}) || !slices.Equal(dp.Stale, []uint64{4}) || dp.Epoch != s.Map().Epoch {
		t.Fatalf("after data node 4 went down: %v (map epoch %d)", dp, s.Map().Epoch)
	}
	apply(state(4, pb.NodeState_NODE_STATE_OUT))
	apply(state(4, pb.NodeState_NODE_STATE_ALIVE))
	if len(dp.Down) != 0 || !slices.Equal(dp.Stale, []uint64{4}) || dp.Epoch != s.Map().Epoch {
		t.Fatalf("after data node 4 came back: %v", dp)
	}
	epoch := s.Map().Epoch
	apply(insync(dp.Id, 4, dp.Epoch-1)) // an alignment from before the change
	if len(dp.Stale) != 1 || s.Map().Epoch != epoch {
		t.Fatalf("an old alignment cleared the stale mark: %v", dp)
	}
	apply(insync(dp.Id, 4, dp.Epoch))
	if len(dp.Stale) != 0 || s.Map().Epoch != epoch+1 || dp.Epoch != epoch+1 {
		t.Fatalf("after the alignment report: %v (map epoch %d)", dp, s.Map().Epoch)
	}
	if _, err := s.Apply(insync(mp.Id, 1, 0)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("mark in sync of a meta partition: %v", err)
	}
}

// TestMoveReplica: a move starts only from a replica to an alive node of
// the right role without one, completes only as started (a data partition's
// new replica joins its chain stale, at the end), and can be abandoned.
func TestMoveReplica(t *testing.T) {
	move := func(p, from, to uint64, phase pb.MovePhase) *pb.Command {
		return &pb.Command{Op: &pb.Command_MoveReplica{MoveReplica: &pb.MoveReplica{PartitionId: p, From: from, To: to, Phase: phase}}}
	}
	const (
		start = pb.MovePhase_MOVE_PHASE_START
		done  = pb.MovePhase_MOVE_PHASE_DONE
		abort = pb.MovePhase_MOVE_PHASE_ABORT
	)
	setup := func(t *testing.T) (*State, *pb.Partition, *pb.Partition) {
		s := cluster(t)
		for _, c := range []*pb.Command{
			reg("m4", pb.Role_ROLE_META, "a:7", 0), reg("d4", pb.Role_ROLE_DATA, "a:8", 0),
			vol("v1", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6)),
			{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: 4, State: pb.NodeState_NODE_STATE_DOWN}}},
		} {
			if _, err := s.Apply(c); err != nil {
				t.Fatal(err)
			}
		}
		var mp, dp *pb.Partition
		for _, p := range s.Map().Partitions {
			if p.Kind == data {
				dp = p
			} else {
				mp = p
			}
		}
		return s, mp, dp
	}
	for _, tc := range []struct {
		name    string
		cmds    []*pb.Command
		wantErr error
		check   func(t *testing.T, mp, dp *pb.Partition)
	}{
		{"data move", []*pb.Command{move(2, 4, 8, start), move(2, 4, 8, done)}, nil, func(t *testing.T, _, dp *pb.Partition) {
			if !slices.Equal(dp.Replicas, []uint64{5, 6, 8}) || len(dp.Down) != 0 || !slices.Equal(dp.Stale, []uint64{8}) || dp.Joining != 0 {
				t.Fatalf("after the move: %v", dp)
			}
		}},
		{"meta move keeps the place", []*pb.Command{move(1, 2, 7, start), move(1, 2, 7, done)}, nil, func(t *testing.T, mp, _ *pb.Partition) {
			if !slices.Equal(mp.Replicas, []uint64{1, 7, 3}) || mp.Joining != 0 || mp.Leaving != 0 {
				t.Fatalf("after the move: %v", mp)
			}
		}},
		{"repeated start and done", []*pb.Command{move(2, 4, 8, start), move(2, 4, 8, start), move(2, 4, 8, done), move(2, 4, 8, done)}, nil, nil},
		{"abort", []*pb.Command{move(2, 4, 8, start), move(2, 4, 8, abort)}, nil, func(t *testing.T, _, dp *pb.Partition) {
			if dp.Joining != 0 || dp.Leaving != 0 || !slices.Contains(dp.Replicas, 4) {
				t.Fatalf("after the abort: %v", dp)
			}
		}},
		{"second move while one runs", []*pb.Command{move(2, 4, 8, start), move(2, 5, 8, start)}, ErrConflict, nil},
		{"done without start", []*pb.Command{move(2, 4, 8, done)}, ErrConflict, nil},
		// Zero ids match "no move in progress": a done of them is no
		// move to complete (the fuzzer's input crashed the master).
		{"done of zero ids, meta", []*pb.Command{move(1, 0, 0, done)}, ErrConflict, nil},
		{"done of zero ids, data", []*pb.Command{move(2, 0, 0, done)}, ErrConflict, nil},
		{"abort of zero ids", []*pb.Command{move(1, 0, 0, abort)}, nil, func(t *testing.T, mp, _ *pb.Partition) {
			if !slices.Equal(mp.Replicas, []uint64{1, 2, 3}) || mp.Joining != 0 {
				t.Fatalf("after an abort of nothing: %v", mp)
			}
		}},
		{"from a non-replica", []*pb.Command{move(2, 1, 8, start)}, ErrInvalid, nil},
		{"to a replica", []*pb.Command{move(2, 4, 5, start)}, ErrInvalid, nil},
		{"to a meta node", []*pb.Command{move(2, 4, 7, start)}, ErrInvalid, nil},
		{"to a down node", []*pb.Command{move(1, 2, 4, start)}, ErrInvalid, nil},
		{"unknown partition", []*pb.Command{move(99, 4, 8, start)}, ErrNotFound, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, mp, dp := setup(t)
			var err error
			for _, c := range tc.cmds {
				before := s.Map().Epoch
				if _, err = s.Apply(c); err != nil {
					if s.Map().Epoch != before {
						t.Fatal("a refused move changed the epoch")
					}
					break
				}
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, mp, dp)
			}
		})
	}
}

// A node's certificate name is the one of its last registration, and a
// change of it alone is a change of the map (nodes that dial it must learn
// it).
func TestRegisterCertName(t *testing.T) {
	s := cluster(t)
	withName := func(name string) *pb.Command {
		c := reg("d1", pb.Role_ROLE_DATA, "a:4", 0)
		c.GetRegister().CertName = name
		return c
	}
	epoch := s.Map().Epoch
	if _, err := s.Apply(withName("data-4")); err != nil {
		t.Fatal(err)
	}
	if n := s.NodeByUUID("d1"); n.CertName != "data-4" || s.Map().Epoch != epoch+1 {
		t.Fatalf("after registering as data-4: name %q, epoch %d (was %d)", n.CertName, s.Map().Epoch, epoch)
	}
	if _, err := s.Apply(withName("data-4")); err != nil || s.Map().Epoch != epoch+1 {
		t.Fatalf("the same registration again: %v, epoch %d", err, s.Map().Epoch)
	}
	if _, err := s.Apply(withName("data-4b")); err != nil || s.NodeByUUID("d1").CertName != "data-4b" {
		t.Fatalf("registering with a renamed certificate: %v, name %q", err, s.NodeByUUID("d1").CertName)
	}
	if _, err := s.Apply(withName("")); err != nil || s.NodeByUUID("d1").CertName != "" {
		t.Fatalf("registering in plain text: %v, name %q", err, s.NodeByUUID("d1").CertName)
	}
	c := reg("d9", pb.Role_ROLE_DATA, "a:9", 0)
	c.GetRegister().CertName = "data-9"
	if _, err := s.Apply(c); err != nil || s.NodeByUUID("d9").CertName != "data-9" {
		t.Fatalf("a new node: %v, %v", err, s.NodeByUUID("d9"))
	}
}
