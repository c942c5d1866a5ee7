package master

import (
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func dataPart(id uint64, replicas []uint64, down ...uint64) *pb.Partition {
	return &pb.Partition{Id: id, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: replicas, Down: down}
}

// TestDataShortfall: a volume keeps as many writable data partitions as it
// was created with, up to the minimum; a partition is not writable below
// its write quorum or with a chain replica that refuses data (a down
// replica's report does not count: it is not in the chain).
func TestDataShortfall(t *testing.T) {
	r := []uint64{4, 5, 6}
	m := &pb.ClusterMap{Partitions: map[uint64]*pb.Partition{
		1: dataPart(1, r), 2: dataPart(2, r), 3: dataPart(3, r, 6), 4: dataPart(4, r, 5, 6),
		5: dataPart(5, []uint64{5, 6, 7}),
	}}
	ro := func(pairs ...[2]uint64) map[[2]uint64]bool {
		out := map[[2]uint64]bool{}
		for _, p := range pairs {
			out[p] = true
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		parts    []uint64
		readOnly map[[2]uint64]bool
		min      int
		writable int
		short    int
	}{
		{"all writable", []uint64{1, 2}, nil, 10, 2, 0},
		{"one replica down keeps writing", []uint64{1, 3}, nil, 10, 2, 0},
		{"two of three down is read-only", []uint64{1, 4}, nil, 10, 1, 1},
		{"a full replica in the chain", []uint64{1, 2}, ro([2]uint64{5, 2}), 10, 1, 1},
		{"a full replica that is down does not count", []uint64{1, 3}, ro([2]uint64{6, 3}), 10, 2, 0},
		{"full elsewhere does not count", []uint64{1, 2}, ro([2]uint64{7, 1}), 10, 2, 0},
		{"the minimum caps the want", []uint64{1, 2, 5}, ro([2]uint64{5, 5}), 2, 2, 0},
		{"everything full", []uint64{1, 2, 5}, ro([2]uint64{4, 1}, [2]uint64{4, 2}, [2]uint64{7, 5}), 10, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &pb.Volume{Name: "v", DataPartitions: tc.parts}
			if got := writableData(m, v, tc.readOnly); got != tc.writable {
				t.Errorf("writable %d, want %d", got, tc.writable)
			}
			if got := dataShortfall(m, v, tc.readOnly, tc.min); got != tc.short {
				t.Errorf("shortfall %d, want %d", got, tc.short)
			}
		})
	}
}

// TestDataShortfallBounded: one round adds at most maxGrowth partitions.
func TestDataShortfallBounded(t *testing.T) {
	m := &pb.ClusterMap{Partitions: map[uint64]*pb.Partition{}}
	v := &pb.Volume{Name: "v"}
	for id := uint64(1); id <= 40; id++ {
		m.Partitions[id] = dataPart(id, []uint64{4, 5, 6}, 5, 6)
		v.DataPartitions = append(v.DataPartitions, id)
	}
	if got := dataShortfall(m, v, nil, 30); got != maxGrowth {
		t.Fatalf("shortfall %d, want the bound %d", got, maxGrowth)
	}
}

func TestNodeFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		soft nodeSoft
		want bool
	}{
		{"room", nodeSoft{usage: &pb.Usage{CapacityBytes: 100, UsedBytes: 50}}, false},
		{"above the full ratio", nodeSoft{usage: &pb.Usage{CapacityBytes: 100, UsedBytes: 95}}, true},
		{"a replica refuses data", nodeSoft{usage: &pb.Usage{CapacityBytes: 100, UsedBytes: 10}, partitions: []*pb.PartitionReport{{Id: 1}, {Id: 2, ReadOnly: true}}}, true},
		{"no capacity known", nodeSoft{usage: &pb.Usage{}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.soft.last = time.Now()
			if got := nodeFull(&tc.soft); got != tc.want {
				t.Fatalf("nodeFull = %v, want %v", got, tc.want)
			}
		})
	}
}
