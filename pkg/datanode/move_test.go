package datanode_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/datanode/datanodetest"
	"github.com/cairnfs/cairn/pkg/dataproto"
)

// moveCluster is a cluster of four data nodes with partition 1 on [1 2 3],
// node 4 free to receive a moved replica.
type moveCluster struct {
	t *testing.T
	*datanodetest.Cluster
}

func startMoveCluster(t *testing.T) *moveCluster {
	c := &moveCluster{t, datanodetest.Start(t, datanodetest.Config{Nodes: 4, Partitions: [][]uint64{{1, 2, 3}}, Options: testOptions()})}
	c.waitFor(20*time.Second, "a leader of three voters", func(r *pb.PartitionReport) bool { return len(r.Voters) == 3 })
	return c
}

// report is node's report of partition 1 (nil: none).
func (c *moveCluster) report(node uint64) *pb.PartitionReport {
	h := c.Node(node).Host
	if h == nil {
		return nil
	}
	for _, r := range h.Report() {
		if r.Id == 1 {
			return r
		}
	}
	return nil
}

// leaderReport is the report of partition 1's Raft leader (nil: none).
func (c *moveCluster) leaderReport() *pb.PartitionReport {
	for id := uint64(1); id <= 4; id++ {
		if r := c.report(id); r != nil && r.Leader {
			return r
		}
	}
	return nil
}

// waitFor waits until partition 1 has a leader whose report satisfies ok.
func (c *moveCluster) waitFor(d time.Duration, what string, ok func(*pb.PartitionReport) bool) {
	c.t.Helper()
	eventually(c.t, d, func() error {
		if r := c.leaderReport(); r != nil && ok(r) {
			return nil
		}
		return fmt.Errorf("waiting for %s; leader's report %v", what, c.leaderReport())
	})
}

// setMap sets partition 1 in the map at epoch and assigns it.
func (c *moveCluster) setMap(epoch uint64, p *pb.Partition) {
	c.t.Helper()
	p.Id, p.VolumeId, p.Kind, p.Epoch = 1, 1, pb.PartitionKind_PARTITION_KIND_DATA, epoch
	c.SetEpoch(epoch)
	c.SetPartitions([]*pb.Partition{p})
	if err := c.Assign(); err != nil {
		c.t.Fatal(err)
	}
}

// startMove has the map move partition 1's replica from node 3 to node 4
// and waits until node 4 votes beside node 3.
func (c *moveCluster) startMove() {
	c.t.Helper()
	c.setMap(2, &pb.Partition{Replicas: []uint64{1, 2, 3}, Joining: 4, Leaving: 3})
	c.waitFor(20*time.Second, "node 4 a voter beside node 3", func(r *pb.PartitionReport) bool {
		return slices.Equal(r.Voters, []uint64{1, 2, 3, 4})
	})
}

// A replica the map has moved away stays a voter of its partition's Raft
// group until the group's leader removes it: after a move from node 3 to
// node 4 completes in the map, the group counts node 3 until the leader
// leaves the move's joint configuration, and node 2 fails in that window.
// Had node 3 left the group when the map dropped it, node 1 alone would be
// one of the old configuration's three voters, no quorum, and nobody could
// take node 3 or node 2 out any more.
func TestMovedReplicaVotesUntilRemoved(t *testing.T) {
	c := startMoveCluster(t)
	c.startMove()
	c.Stop(2)
	c.setMap(3, &pb.Partition{Replicas: []uint64{1, 4, 2}, Stale: []uint64{4}})
	c.waitFor(30*time.Second, "the leader removing node 3 with node 2 down", func(r *pb.PartitionReport) bool {
		return slices.Equal(r.Voters, []uint64{1, 2, 4})
	})
	eventually(t, 10*time.Second, func() error {
		if c.report(3) != nil {
			return errors.New("node 3 still has the partition open")
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(c.Node(3).Dir, "dp-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("node 3 kept the removed replica's directory: %v", err)
	}
}

// TestMoveSurvivesLosingBothEnds: a move from node 3 to node 4 (two nodes
// of one zone, as a rebalance within a zone makes them) is under way when
// both are lost at once (the zone goes down). Nodes 1 and 2 must go on: a
// leader, writes and reads. With the move made of a promotion and a
// removal the group had four voters in that window, and two of four are no
// quorum: a lab run of a zone loss found such a partition leaderless and
// unreadable for as long as the zone stayed down. In the move's joint
// configuration the old voters {1 2 3} and the new {1 2 4} each keep a
// majority.
func TestMoveSurvivesLosingBothEnds(t *testing.T) {
	c := startMoveCluster(t)
	cl := newClient(t, c.Cluster)
	ext := cl.create(1)
	before := randBytes(4096, 1)
	cl.must(1, dataproto.Header{Op: dataproto.OpAppend, Partition: 1, Extent: ext}, before)
	c.startMove()
	c.Stop(3)
	c.Stop(4)
	after := randBytes(4096, 2)
	eventually(t, 20*time.Second, func() error {
		_, _, err := cl.do(1, dataproto.Header{Op: dataproto.OpOverwrite, Partition: 1, Extent: ext}, after)
		return err
	})
	for _, node := range []uint64{1, 2} {
		eventually(t, 10*time.Second, func() error {
			got, err := cl.read(node, ext, 0, 4096, 4096)
			if err != nil {
				return err
			}
			if string(got) != string(after) {
				return fmt.Errorf("node %d: %s", node, describe(got, after))
			}
			return nil
		})
	}
}
