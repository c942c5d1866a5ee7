package clustermap

import (
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func TestHealth(t *testing.T) {
	nodes := map[uint64]*pb.Node{}
	for id := uint64(1); id <= 6; id++ {
		nodes[id] = &pb.Node{Id: id, State: pb.NodeState_NODE_STATE_ALIVE}
	}
	nodes[3].State = pb.NodeState_NODE_STATE_DOWN
	nodes[2].State = pb.NodeState_NODE_STATE_OUT
	m := &pb.ClusterMap{Nodes: nodes}
	r := []uint64{4, 5, 6}
	for _, tc := range []struct {
		name string
		p    *pb.Partition
		want string
	}{
		{"meta, all alive", &pb.Partition{Kind: meta, Replicas: []uint64{1, 4, 5}}, Healthy},
		{"meta, one down", &pb.Partition{Kind: meta, Replicas: []uint64{1, 3, 5}}, Degraded},
		{"meta, two down", &pb.Partition{Kind: meta, Replicas: []uint64{1, 2, 3}}, Unavailable},
		{"meta, moving", &pb.Partition{Kind: meta, Replicas: []uint64{1, 4, 5}, Joining: 6, Leaving: 5}, Recovering},
		{"data, all alive", &pb.Partition{Kind: data, Replicas: r}, Healthy},
		{"data, a stale replica", &pb.Partition{Kind: data, Replicas: r, Stale: []uint64{6}}, Recovering},
		{"data, one down", &pb.Partition{Kind: data, Replicas: []uint64{4, 5, 3}, Down: []uint64{3}}, Degraded},
		{"data, two down", &pb.Partition{Kind: data, Replicas: []uint64{4, 2, 3}, Down: []uint64{2, 3}}, ReadOnly},
		{"data, none alive", &pb.Partition{Kind: data, Replicas: []uint64{2, 3}, Down: []uint64{2, 3}}, Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Health(m, tc.p); got != tc.want {
				t.Fatalf("Health = %s, want %s", got, tc.want)
			}
		})
	}
	if Worse(Recovering, Degraded) != Degraded || Worse(ReadOnly, Healthy) != ReadOnly || Worse("", Healthy) != Healthy {
		t.Fatal("Worse does not rank health from best to worst")
	}
}
