package master

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// TestRecoveryOf: a stale or joining data replica lacks what the chain's
// head stores beyond it; a down replica is not catching up; a replica
// whose head did not report is left out (nothing to compare with).
func TestRecoveryOf(t *testing.T) {
	m := &pb.ClusterMap{Partitions: map[uint64]*pb.Partition{
		1: {Id: 1, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{4, 5, 6}, Stale: []uint64{6}},
		2: {Id: 2, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{4, 5, 6}, Joining: 7, Leaving: 6},
		3: {Id: 3, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{5, 4, 6}, Stale: []uint64{6}, Down: []uint64{6}},
		4: {Id: 4, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{4, 5, 6}, Stale: []uint64{6}},
		5: {Id: 5, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, Joining: 8},
		6: {Id: 6, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{4, 5, 6}},
	}}
	used := map[[2]uint64]uint64{
		{4, 1}: 1000, {5, 1}: 1000, {6, 1}: 400,
		{4, 2}: 500, {5, 2}: 500, // 7 has not created its replica yet
		{5, 3}: 300, {4, 3}: 300,
		{5, 4}: 900, {6, 4}: 100, // the head (4) did not report
		{4, 6}: 10, {5, 6}: 10, {6, 6}: 10,
	}
	want := []*pb.ReplicaRecovery{
		{PartitionId: 1, NodeId: 6, BytesLeft: 600},
		{PartitionId: 2, NodeId: 7, BytesLeft: 500},
	}
	got := recoveryOf(m, used)
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestRecoveryRate: the rate is what the catching-up replicas gained over
// the window; unknown (0) until a second has passed; a replica that
// finished leaves the sum.
func TestRecoveryRate(t *testing.T) {
	var r recoveryRate
	t0 := time.Unix(1000, 0)
	rec := []*pb.ReplicaRecovery{{PartitionId: 1, NodeId: 6}, {PartitionId: 2, NodeId: 7}}
	step := func(sec float64, have6, have7 uint64, rec []*pb.ReplicaRecovery) float64 {
		used := map[[2]uint64]uint64{{6, 1}: have6, {7, 2}: have7}
		return r.observe(t0.Add(time.Duration(sec*float64(time.Second))), rec, used)
	}
	if got := step(0, 0, 0, rec); got != 0 {
		t.Fatalf("first sample: %v, want 0", got)
	}
	if got := step(0.5, 100, 0, rec); got != 0 {
		t.Fatalf("after half a second: %v, want 0 (unknown)", got)
	}
	if got := step(2, 200, 200, rec); got != 200 {
		t.Fatalf("after 2 s: %v B/s, want 200", got)
	}
	// Beyond the window, the oldest samples drop: 12 s in, the window
	// starts at the 2 s sample.
	if got := step(12, 1200, 1200, rec); got != 200 {
		t.Fatalf("after 12 s: %v B/s, want 200", got)
	}
	// Partition 2 finished: only partition 1's gain since the oldest
	// sample at least a window old (2 s) counts: 1200 B in 12 s.
	if got := step(14, 1400, 0, rec[:1]); got != 100 {
		t.Fatalf("after 14 s: %v B/s, want 100", got)
	}
	if last, rate := r.latest(); len(last) != 1 || rate != 100 {
		t.Fatalf("latest: %v %v", last, rate)
	}
	// A replica that starts catching up inside the window counts from its
	// first sample, not from the window's start (where it is absent).
	rec3 := []*pb.ReplicaRecovery{{PartitionId: 1, NodeId: 6}, {PartitionId: 3, NodeId: 8}}
	obs := func(sec float64, have6, have8 uint64) float64 {
		return r.observe(t0.Add(time.Duration(sec*float64(time.Second))), rec3, map[[2]uint64]uint64{{6, 1}: have6, {8, 3}: have8})
	}
	obs(15, 1500, 0)
	if got := obs(17, 1700, 400); got != 1500/15.0+200 {
		t.Fatalf("after 17 s with a new replica: %v B/s, want %v", got, 1500/15.0+200)
	}
}
