package master

import (
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/placement"
)

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
