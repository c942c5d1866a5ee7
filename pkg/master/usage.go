package master

import (
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// volumeUsage sums what the data partitions dataPartitions store, one
// replica each (the leader's report when a leader reported, else any
// replica's), from the latest heartbeats. known is false when some partition
// has no report yet: a fresh leader has heard from nobody, and callers that
// enforce capacity should then not trust a low sum.
func (s *Server) volumeUsage(dataPartitions []uint64) (used uint64, known bool) {
	want := make(map[uint64]bool, len(dataPartitions))
	for _, id := range dataPartitions {
		want[id] = true
	}
	best := make(map[uint64]*pb.PartitionReport, len(dataPartitions))
	s.mu.Lock()
	for _, soft := range s.soft {
		for _, r := range soft.partitions {
			if !want[r.Id] {
				continue
			}
			if cur := best[r.Id]; cur == nil || (r.Leader && !cur.Leader) {
				best[r.Id] = r
			}
		}
	}
	s.mu.Unlock()
	for _, r := range best {
		used += r.UsedBytes
	}
	return used, len(best) == len(want)
}

// dataSpace sums the disk capacity and free space the alive data nodes
// reported in their latest heartbeats.
func (s *Server) dataSpace() (capacity, free uint64) {
	alive := map[uint64]bool{}
	s.fsm.read(func(st *clustermap.State) {
		for id, n := range st.Map().Nodes {
			alive[id] = n.Role == pb.Role_ROLE_DATA && n.State == pb.NodeState_NODE_STATE_ALIVE
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, soft := range s.soft {
		if u := soft.usage; alive[id] && u != nil {
			capacity += u.CapacityBytes
			free += u.CapacityBytes - min(u.UsedBytes, u.CapacityBytes)
		}
	}
	return capacity, free
}
