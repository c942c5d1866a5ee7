package master

import (
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// TestMoveDecision: a move is aborted only when a fresh report of the
// group's leader shows the new replica never voted, or its disk is full;
// a meta partition's is done once the group's membership is the new one, a
// data partition's once the new replica votes and aligned (the old one
// leaves the group after the map); otherwise it waits.
func TestMoveDecision(t *testing.T) {
	data := &pb.Partition{Id: 4, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{6, 10, 8}, Joining: 9, Leaving: 6}
	meta := &pb.Partition{Id: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, Joining: 4, Leaving: 1}
	learner := &pb.PartitionReport{Leader: true, Voters: []uint64{6, 10, 8}, Learners: []uint64{9}}
	voter := &pb.PartitionReport{Leader: true, Voters: []uint64{6, 10, 8, 9}}
	done := &pb.PartitionReport{Leader: true, Voters: []uint64{10, 8, 9}}
	metaDone := &pb.PartitionReport{Leader: true, Voters: []uint64{2, 3, 4}}
	const (
		wait  = pb.MovePhase_MOVE_PHASE_UNSPECIFIED
		abort = pb.MovePhase_MOVE_PHASE_ABORT
		fin   = pb.MovePhase_MOVE_PHASE_DONE
	)
	for _, tc := range []struct {
		name         string
		p            *pb.Partition
		alive        bool
		leader       *pb.PartitionReport
		synced, full bool
		want         pb.MovePhase
	}{
		{"joining dead while a learner: start over", data, false, learner, false, false, abort},
		{"joining dead after it voted: go on", data, false, voter, false, false, wait},
		{"joining silent, no fresh leader report: it may lead already", data, false, nil, false, false, wait},
		{"joining silent, the group's membership already new", data, false, done, true, false, fin},
		{"joining full: abort even as a voter", data, true, voter, false, true, abort},
		{"alive, still a learner", data, true, learner, false, false, wait},
		{"membership new but the data not aligned", data, true, done, false, false, wait},
		{"membership new and aligned", data, true, done, true, false, fin},
		{"a voter and aligned, the old replica still a voter: the map goes first", data, true, voter, true, false, fin},
		{"a learner, aligned: wait until it votes", data, true, learner, true, false, wait},
		{"meta: a voter, the old replica too", meta, true, &pb.PartitionReport{Leader: true, Voters: []uint64{1, 2, 3, 4}}, true, false, wait},
		{"meta needs no alignment", meta, true, metaDone, false, false, fin},
		{"no leader report, alive", data, true, nil, true, false, wait},
	} {
		if got := moveDecision(tc.p, tc.alive, tc.leader, tc.synced, tc.full); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGroupDropped: a data partition's replica the map moved away is
// deleted only once a fresh report of the group's leader leaves it out of
// the voters; without one (no leader) it may be needed to elect one.
func TestGroupDropped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leader *pb.PartitionReport
		want   bool
	}{
		{"no fresh leader report", nil, false},
		{"still a voter (the map completed the move first)", &pb.PartitionReport{Leader: true, Voters: []uint64{6, 10, 8, 9}}, false},
		{"a learner (its vote counts for nothing)", &pb.PartitionReport{Leader: true, Voters: []uint64{10, 8, 9}, Learners: []uint64{6}}, true},
		{"removed", &pb.PartitionReport{Leader: true, Voters: []uint64{10, 8, 9}}, true},
	} {
		if got := groupDropped(tc.leader, 6); got != tc.want {
			t.Errorf("%s: groupDropped = %v, want %v", tc.name, got, tc.want)
		}
	}
}
