package clustermap

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// fuzzCluster is a map with something of every kind: meta nodes 1-3 and
// data nodes 4-6, a volume with a meta and a data partition, a quota, a
// client, and a replica move in progress.
func fuzzCluster(t testing.TB) *State {
	t.Helper()
	s := cluster(t)
	cmds := []*pb.Command{
		reg("d4", pb.Role_ROLE_DATA, "a:7", 0),
		vol("v", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6)),
		setQuota("v", 9, 1<<20, 100),
		regClient(1000, "c", "s1", 1<<40),
		{Op: &pb.Command_MoveReplica{MoveReplica: &pb.MoveReplica{PartitionId: 2, From: 4, To: 7, Phase: pb.MovePhase_MOVE_PHASE_START}}},
	}
	for _, c := range cmds {
		if _, err := s.Apply(c); err != nil {
			t.Fatalf("apply %v: %v", c, err)
		}
	}
	return s
}

// FuzzApply applies commands decoded from arbitrary bytes (each one a
// length byte and that many bytes of an encoded pb.Command) to two
// replicas of a cluster map holding something of every kind, as the
// masters' state machines would apply a Raft log written by a leader that
// lost its mind. No command may panic; both replicas must answer each
// command the same and end with the same bytes (the masters would diverge
// otherwise); and the map must survive a snapshot's encoding.
func FuzzApply(f *testing.F) {
	fuzzCluster(f) // the seeds below assume it applies
	seeds := [][]*pb.Command{
		{vol("w", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6))},
		{vol("w", 1), reg("d5", pb.Role_ROLE_DATA, "a:4", 0)},
		{{Op: &pb.Command_DeleteVolume{DeleteVolume: &pb.DeleteVolume{Name: "v"}}}, setQuota("v", 9, 1, 1)},
		{{Op: &pb.Command_MoveReplica{MoveReplica: &pb.MoveReplica{PartitionId: 2, From: 4, To: 7, Phase: pb.MovePhase_MOVE_PHASE_DONE}}}},
		{{Op: &pb.Command_MoveReplica{MoveReplica: &pb.MoveReplica{PartitionId: 2, From: 4, To: 7, Phase: pb.MovePhase_MOVE_PHASE_ABORT}}}},
		{{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: 5, State: pb.NodeState_NODE_STATE_DOWN}}},
			{Op: &pb.Command_MarkInSync{MarkInSync: &pb.MarkInSync{PartitionId: 2, NodeId: 5, Epoch: 1 << 62}}}},
		{{Op: &pb.Command_DrainNode{DrainNode: &pb.DrainNode{NodeId: 1, Drain: true}}}},
		{{Op: &pb.Command_AddDataPartitions{AddDataPartitions: &pb.AddDataPartitions{Volume: "v", Partitions: []*pb.NewPartition{part(data, 4, 4, 4)}}}}},
		{{Op: &pb.Command_AddMetaPartition{AddMetaPartition: &pb.AddMetaPartition{Volume: "v", Partition: part(meta, 1, 2, 3), CutEnd: 1}}}},
		{{Op: &pb.Command_StartMigration{StartMigration: &pb.StartMigration{Volume: "v", SlotOwners: []uint64{1 << 60}}}}},
		{{Op: &pb.Command_AdvanceMigration{AdvanceMigration: &pb.AdvanceMigration{Volume: "v"}}}},
		{rebase("v", 9, 1, -1<<62, -1<<62), removeQuota("v", 9)},
		{revoke(2000, "c", "", 0), regClient(2000, "c", "s1", -1)},
		{{}},
	}
	for _, cmds := range seeds {
		var in []byte
		for _, c := range cmds {
			b, err := proto.Marshal(c)
			if err != nil || len(b) > 255 {
				f.Fatalf("seed %v: %d bytes, %v", c, len(b), err)
			}
			in = append(append(in, byte(len(b))), b...)
		}
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := fuzzCluster(t), fuzzCluster(t)
		for i := 0; len(data) > 0 && i < 16; i++ {
			n := min(int(data[0]), len(data)-1)
			body := data[1 : 1+n]
			data = data[1+n:]
			cmd := &pb.Command{}
			if proto.Unmarshal(body, cmd) != nil {
				continue
			}
			ra, ea := a.Apply(cmd)
			rb, eb := b.Apply(proto.Clone(cmd).(*pb.Command))
			if fmt.Sprint(ea) != fmt.Sprint(eb) || !sameResult(ra, rb) {
				t.Fatalf("replicas answered command %d (%v) differently: %v, %v / %v, %v", i, cmd, ra, ea, rb, eb)
			}
		}
		ma, err := a.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		mb, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ma, mb) {
			t.Fatal("replicas that applied the same commands hold different maps")
		}
		var c State
		if err := c.Unmarshal(ma); err != nil {
			t.Fatalf("the map does not decode: %v", err)
		}
		if mc, err := c.Marshal(); err != nil || !bytes.Equal(mc, ma) {
			t.Fatalf("the map changes through a snapshot: %v", err)
		}
	})
}

// sameResult compares two results of Apply: ids, or messages.
func sameResult(a, b any) bool {
	ma, okA := a.(proto.Message)
	mb, okB := b.(proto.Message)
	if okA && okB {
		return proto.Equal(ma, mb)
	}
	return reflect.DeepEqual(a, b)
}
