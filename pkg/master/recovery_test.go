package master

import (
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/placement"
)

// TestSpreadMove: replicas that share a zone (recovery from a lost zone
// put them there) go back to a zone of their own once one has a node.
func TestSpreadMove(t *testing.T) {
	data := pb.PartitionKind_PARTITION_KIND_DATA
	alive := pb.NodeState_NODE_STATE_ALIVE
	zones := map[uint64]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
	mk := func(present []uint64, parts ...[]uint64) (*pb.ClusterMap, []placement.Candidate) {
		m := &pb.ClusterMap{Nodes: map[uint64]*pb.Node{}, Partitions: map[uint64]*pb.Partition{}}
		var cands []placement.Candidate
		for _, id := range present {
			m.Nodes[id] = &pb.Node{Id: id, Role: pb.Role_ROLE_DATA, State: alive, Zone: zones[id]}
			cands = append(cands, placement.Candidate{ID: id, Zone: zones[id]})
		}
		for i, r := range parts {
			m.Partitions[uint64(i+1)] = &pb.Partition{Id: uint64(i + 1), Kind: data, Replicas: r}
		}
		return m, cands
	}
	all := []uint64{1, 2, 3, 4, 5, 6}
	for _, tc := range []struct {
		name    string
		present []uint64
		parts   [][]uint64
		want    *pb.MoveReplica
	}{
		{"one replica per zone: nothing", all, [][]uint64{{1, 3, 5}, {2, 4, 6}}, nil},
		// Node 1 holds more replicas than node 2: its replica moves, to
		// the emptier node of zone c.
		{"two in one zone: one moves to the zone back", all, [][]uint64{{1, 2, 3}, {1, 4, 5}}, &pb.MoveReplica{PartitionId: 1, From: 1, To: 6}},
		{"no node in a zone the partition lacks: nothing", []uint64{1, 2, 3, 4}, [][]uint64{{1, 2, 3}}, nil},
		{"a partition with a replica down waits", []uint64{1, 2, 3, 5, 6}, [][]uint64{{1, 2, 4}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, cands := mk(tc.present, tc.parts...)
			got := spreadMove(m, pb.Role_ROLE_DATA, cands)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("move %v, want none", got)
			case tc.want != nil && (got == nil || got.PartitionId != tc.want.PartitionId || got.From != tc.want.From || got.To != tc.want.To):
				t.Fatalf("move %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBalanceMove(t *testing.T) {
	data := pb.PartitionKind_PARTITION_KIND_DATA
	alive := pb.NodeState_NODE_STATE_ALIVE
	mk := func(zones map[uint64]string, parts ...[]uint64) (*pb.ClusterMap, []placement.Candidate) {
		m := &pb.ClusterMap{Nodes: map[uint64]*pb.Node{}, Partitions: map[uint64]*pb.Partition{}}
		var cands []placement.Candidate
		for id := uint64(1); id <= 4; id++ {
			m.Nodes[id] = &pb.Node{Id: id, Role: pb.Role_ROLE_DATA, State: alive, Zone: zones[id]}
			cands = append(cands, placement.Candidate{ID: id, Zone: zones[id]})
		}
		for i, r := range parts {
			m.Partitions[uint64(i+1)] = &pb.Partition{Id: uint64(i + 1), Kind: data, Replicas: r}
		}
		return m, cands
	}
	for _, tc := range []struct {
		name  string
		zones map[uint64]string
		parts [][]uint64
		want  *pb.MoveReplica
	}{
		{"a new node takes a replica", nil, [][]uint64{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}, &pb.MoveReplica{PartitionId: 1, From: 1, To: 4}},
		{"balanced within one", nil, [][]uint64{{1, 2, 3}, {2, 3, 4}, {3, 4, 1}, {4, 1, 2}}, nil},
		{"not a partition already on the target", nil, [][]uint64{{1, 2, 4}, {1, 2, 3}, {1, 3, 2}}, &pb.MoveReplica{PartitionId: 2, From: 1, To: 4}},
		{"zones kept apart", map[uint64]string{1: "a", 2: "b", 3: "c", 4: "b"}, [][]uint64{{1, 2, 3}, {1, 3, 2}}, &pb.MoveReplica{PartitionId: 1, From: 2, To: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, cands := mk(tc.zones, tc.parts...)
			got := balanceMove(m, pb.Role_ROLE_DATA, cands)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("move %v, want none", got)
			case tc.want != nil && (got == nil || got.PartitionId != tc.want.PartitionId || got.From != tc.want.From || got.To != tc.want.To):
				t.Fatalf("move %v, want %v", got, tc.want)
			}
		})
	}
}
