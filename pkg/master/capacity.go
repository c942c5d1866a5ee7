package master

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/placement"
	"github.com/cairnfs/cairn/pkg/replicaset"
)

// Disk-full handling (Ceph's full and backfill-full ratios, CubeFS's
// read-only data partitions): a node that is nearly full, or one of whose
// data replicas refused new data, receives no new replica; a replica move
// whose new replica ran out of space is abandoned and the node is not
// chosen again for a while; and a volume whose writable data partitions
// ran low gets new ones on nodes with room.

// fullRatio: a node whose disk is this full receives no new replica (new
// partitions, moves). A partition that filled its disk takes data again
// only once 10% is free (datanode.ResumeFreeRatio), so its node becomes a
// target again only with room to spare.
const fullRatio = 0.95

// refusedFor is how long a node whose disk filled up during a replica
// move is not chosen as a move target again.
const refusedFor = 10 * time.Minute

// DefaultMinWritable is Config.MinWritable's default.
const DefaultMinWritable = 10

// growEvery spaces the data partitions added to one volume: new ones need
// a few heartbeats to be created on their nodes and reported.
const growEvery = 10 * time.Second

// maxGrowth bounds the data partitions added to a volume at once.
const maxGrowth = 8

// nodeFull reports whether a node with this soft state must receive no
// new replica: its disk is above fullRatio, or one of its data replicas
// refuses new data.
func nodeFull(soft *nodeSoft) bool {
	if u := soft.usage; u != nil && u.CapacityBytes > 0 && float64(u.UsedBytes) >= fullRatio*float64(u.CapacityBytes) {
		return true
	}
	for _, r := range soft.partitions {
		if r.ReadOnly {
			return true
		}
	}
	return false
}

// readOnlyReplicas returns the (node, partition) pairs whose replica
// reported, within reportFresh, that it refuses new data.
func (s *Server) readOnlyReplicas() map[[2]uint64]bool {
	out := map[[2]uint64]bool{}
	for k, r := range s.freshReports() {
		if r.ReadOnly {
			out[k] = true
		}
	}
	return out
}

// refuse keeps node from being chosen as a move target for refusedFor.
func (s *Server) refuse(node uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused[node] = time.Now().Add(refusedFor)
}

// writableData counts v's data partitions that take writes: the write
// chain holds its quorum (replicaset.Writable) and no replica of the chain
// refuses new data.
func writableData(m *pb.ClusterMap, v *pb.Volume, readOnly map[[2]uint64]bool) int {
	n := 0
	for _, id := range v.DataPartitions {
		p := m.Partitions[id]
		if p == nil || !replicaset.Writable(p) {
			continue
		}
		ok := true
		for _, r := range p.Replicas {
			if readOnly[[2]uint64{r, id}] && !slices.Contains(p.Down, r) {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// dataShortfall returns how many data partitions v needs so that as many
// take writes as it was created with, up to minWritable (at most
// maxGrowth at once).
func dataShortfall(m *pb.ClusterMap, v *pb.Volume, readOnly map[[2]uint64]bool, minWritable int) int {
	want := min(minWritable, len(v.DataPartitions))
	return min(max(want-writableData(m, v, readOnly), 0), maxGrowth)
}

// growData is the leader's duty of keeping every volume writable: a
// volume short of writable data partitions (dataShortfall) gets new ones
// on nodes with room, placed as volume creation places them.
func (s *Server) growData(ctx context.Context) {
	readOnly := s.readOnlyReplicas()
	type need struct {
		name     string
		index    int // the first new partition's index in the volume
		replicas int
		count    int
	}
	var needs []need
	s.fsm.read(func(st *clustermap.State) {
		for _, v := range st.Map().Volumes {
			if n := dataShortfall(st.Map(), v, readOnly, s.cfg.MinWritable); n > 0 {
				needs = append(needs, need{v.Name, len(v.DataPartitions), int(v.Replicas), n})
			}
		}
	})
	for _, nd := range needs {
		s.mu.Lock()
		recent := time.Since(s.grownAt[nd.name]) < growEvery
		if !recent {
			s.grownAt[nd.name] = time.Now()
		}
		s.mu.Unlock()
		if recent {
			continue
		}
		s.createMu.Lock()
		parts, err := s.placeData(nd.name, nd.index, nd.count, nd.replicas)
		if err == nil {
			_, err = s.propose(ctx, &pb.Command{Op: &pb.Command_AddDataPartitions{AddDataPartitions: &pb.AddDataPartitions{Volume: nd.name, Partitions: parts}}})
		}
		s.createMu.Unlock()
		if err != nil {
			s.log.Warn("volume is short of writable data partitions and none can be added", "volume", nd.name, "short", nd.count, "err", err)
			continue
		}
		s.metrics.dataGrowths.Add(float64(len(parts)))
		s.log.Info("added data partitions: the writable ones ran low", "volume", nd.name, "added", len(parts))
	}
}

// placeData chooses the replicas of count new data partitions of volume,
// numbered from index, among the data nodes that can take new replicas.
func (s *Server) placeData(volume string, index, count, replicas int) ([]*pb.NewPartition, error) {
	cands, _ := s.candidates(pb.Role_ROLE_DATA)
	if len(cands) < replicas {
		return nil, errors.New(s.shortage(pb.Role_ROLE_DATA, "data", replicas, len(cands)))
	}
	out := make([]*pb.NewPartition, 0, count)
	for i := range count {
		ids, err := placement.Choose(placementKey(volume, "data", index+i), cands, replicas)
		if err != nil {
			return nil, err
		}
		out = append(out, &pb.NewPartition{Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: ids})
	}
	return out, nil
}
