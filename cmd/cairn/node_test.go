package main

import (
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// TestNodeRows checks what `cairn node list` reads from a status: replicas
// and moves from the map, disk use and fullness from the nodes' reports,
// and -1 for a node that has not reported its disk.
func TestNodeRows(t *testing.T) {
	resp := &pb.StatusResponse{
		Map: &pb.ClusterMap{
			Nodes: map[uint64]*pb.Node{
				4: {Id: 4, Role: pb.Role_ROLE_DATA, State: pb.NodeState_NODE_STATE_ALIVE},
				5: {Id: 5, Role: pb.Role_ROLE_DATA, State: pb.NodeState_NODE_STATE_ALIVE},
				6: {Id: 6, Role: pb.Role_ROLE_DATA, State: pb.NodeState_NODE_STATE_DOWN},
			},
			Partitions: map[uint64]*pb.Partition{
				1: {Id: 1, Replicas: []uint64{4, 5, 6}},
				2: {Id: 2, Replicas: []uint64{4, 5}, Joining: 6, Leaving: 5},
			},
		},
		Nodes: []*pb.NodeStatus{
			{Node: &pb.Node{Id: 4}, Usage: &pb.Usage{CapacityBytes: 100, UsedBytes: 96}, Full: true},
			{Node: &pb.Node{Id: 5}, Usage: &pb.Usage{CapacityBytes: 200, UsedBytes: 50}},
			{Node: &pb.Node{Id: 9}, Usage: &pb.Usage{CapacityBytes: 1, UsedBytes: 1}}, // not in the map
		},
		Recovering: []*pb.ReplicaRecovery{{NodeId: 6, BytesLeft: 300}},
	}
	rows := nodeRows(resp)
	want := []nodeRow{
		{ID: 4, Role: "data", State: "alive", Replicas: 2, DiskUsed: 0.96, Full: true},
		{ID: 5, Role: "data", State: "alive", Replicas: 2, Leaving: 1, DiskUsed: 0.25},
		{ID: 6, Role: "data", State: "down", Replicas: 1, Joining: 1, CopyLeft: 300, DiskUsed: -1},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: got %+v, want %+v", i, rows[i], want[i])
		}
	}
}
