package clustermap

import (
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/replicaset"
)

// The health of a partition, worst first, as operators see it (cairn status,
// cairn_master_partitions).
const (
	// Unavailable: a meta partition without a majority of its replicas
	// alive (its Raft group cannot commit), or a data partition with none.
	Unavailable = "unavailable"
	// ReadOnly: a data partition whose write chain takes no writes (fewer
	// than its write quorum, or none that holds every acknowledged write).
	ReadOnly = "read-only"
	// Degraded: a replica's node is not alive; the partition serves.
	Degraded = "degraded"
	// Recovering: a replica catching up (stale) or a replica move in
	// progress.
	Recovering = "recovering"
	// Healthy: every replica alive and in sync.
	Healthy = "healthy"
)

// Healths lists the health values from best to worst.
var Healths = []string{Healthy, Recovering, Degraded, ReadOnly, Unavailable}

// Health classifies partition p of map m.
func Health(m *pb.ClusterMap, p *pb.Partition) string {
	alive := 0
	for _, r := range p.Replicas {
		if n := m.GetNodes()[r]; n != nil && n.State == pb.NodeState_NODE_STATE_ALIVE {
			alive++
		}
	}
	data := p.Kind == pb.PartitionKind_PARTITION_KIND_DATA
	switch {
	case !data && alive <= len(p.Replicas)/2, data && alive == 0:
		return Unavailable
	case data && !replicaset.Writable(p):
		return ReadOnly
	case alive < len(p.Replicas):
		return Degraded
	case len(p.Stale) > 0 || p.Joining != 0:
		return Recovering
	}
	return Healthy
}

// Worse returns the worse of two health values ("" counts as best).
func Worse(a, b string) string {
	rank := func(h string) int {
		for i, x := range Healths {
			if x == h {
				return i + 1
			}
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}
