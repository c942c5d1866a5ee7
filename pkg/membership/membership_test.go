package membership

import "testing"

func TestNext(t *testing.T) {
	r123 := []uint64{1, 2, 3}
	all := map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true}
	for _, tc := range []struct {
		name             string
		g                Group
		joining, leaving uint64
		want             Step
	}{
		{"no move", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3}}, 0, 0, Step{}},
		{"add the learner", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3}, Active: all}, 4, 3, Step{Kind: AddLearner, Node: 4}},
		{"a dead leaving voter goes first", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3}, Active: map[uint64]bool{1: true, 2: true}}, 4, 3, Step{Kind: Remove, Node: 3}},
		{"then the learner", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2}, Active: map[uint64]bool{1: true, 2: true}}, 4, 3, Step{Kind: AddLearner, Node: 4}},
		{"learner behind", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, Match: map[uint64]uint64{4: 7}, Commit: 9}, 4, 3, Step{}},
		{"learner caught up: it replaces the leaving voter in one joint change", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, Match: map[uint64]uint64{4: 9}, Commit: 9}, 4, 3, Step{Replace, 4, 3}},
		{"learner caught up, the dead leaving voter gone already: promoted", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2}, Learners: []uint64{4}, Match: map[uint64]uint64{4: 9}, Commit: 9}, 4, 3, Step{Kind: Promote, Node: 4}},
		{"joint: left", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: all}, 4, 3, Step{Kind: LeaveJoint}},
		{"joint, the leader leaving: hands over to the joining node", Group{Self: 3, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: all}, 4, 3, Step{Kind: TransferLeader, Node: 4}},
		{"joint, the leader leaving, the joining node silent: another voter", Group{Self: 3, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: map[uint64]bool{2: true, 3: true}}, 4, 3, Step{Kind: TransferLeader, Node: 2}},
		{"joint, the leader leaving, nobody to take over", Group{Self: 3, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: map[uint64]bool{3: true}}, 4, 3, Step{}},
		{"joint before anything else: a stray is removed after", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3, 5}, Outgoing: []uint64{1, 2, 3}, Active: all}, 0, 0, Step{Kind: LeaveJoint}},
		{"data, joint: the live leaving voter stays until the map completes the move", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: all, KeepLeaving: true}, 4, 3, Step{}},
		{"data, joint: a leaving leader stays leader", Group{Self: 3, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: all, KeepLeaving: true}, 4, 3, Step{}},
		{"data, joint: a dead leaving voter goes", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: map[uint64]bool{1: true, 2: true, 4: true}, KeepLeaving: true}, 4, 3, Step{Kind: LeaveJoint}},
		{"data, joint: once the map completed the move, left", Group{Self: 1, Replicas: []uint64{1, 2, 4}, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: all, KeepLeaving: true}, 0, 0, Step{Kind: LeaveJoint}},
		{"data, joint: a leader the map no longer has hands over", Group{Self: 3, Replicas: []uint64{1, 2, 4}, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: all, KeepLeaving: true}, 0, 0, Step{Kind: TransferLeader, Node: 1}},
		{"data, joint: an aborted move is left too (the stray goes next)", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}, Outgoing: []uint64{1, 2, 3}, Active: all, KeepLeaving: true}, 0, 0, Step{Kind: LeaveJoint}},
		{"after an aborted move's joint change: the stray waits for the replica added back", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}, Active: all, KeepLeaving: true}, 0, 0, Step{Kind: AddLearner, Node: 3}},
		{"remove the leaving voter", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3, 4}}, 4, 3, Step{Kind: Remove, Node: 3}},
		{"the leader leaves: hand over first", Group{Self: 3, Replicas: r123, Voters: []uint64{1, 2, 3, 4}}, 4, 3, Step{Kind: TransferLeader, Node: 4}},
		{"leaving as a learner", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}, Learners: []uint64{3}}, 4, 3, Step{Kind: Remove, Node: 3}},
		{"a learner of an abandoned move goes first", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3}, Learners: []uint64{5}, Active: all}, 4, 3, Step{Kind: Remove, Node: 5}},
		{"a voter of an abandoned move goes first", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3, 5}, Active: all}, 4, 3, Step{Kind: Remove, Node: 5}},
		{"a stray voter goes with no move in progress", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3, 5}, Active: all}, 0, 0, Step{Kind: Remove, Node: 5}},
		{"a stray learner goes with no move in progress", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}, 0, 0, Step{Kind: Remove, Node: 4}},
		{"no replica set known: nothing", Group{Self: 1, Voters: []uint64{1, 2, 3}}, 0, 0, Step{}},
		{"an abandoned move removed a map replica: added back", Group{Self: 2, Replicas: r123, Voters: []uint64{2, 3}, Active: all}, 0, 0, Step{Kind: AddLearner, Node: 1}},
		{"an added-back replica catching up", Group{Self: 2, Replicas: r123, Voters: []uint64{2, 3}, Learners: []uint64{1}, Match: map[uint64]uint64{1: 3}, Commit: 9}, 0, 0, Step{}},
		{"an added-back replica caught up", Group{Self: 2, Replicas: r123, Voters: []uint64{2, 3}, Learners: []uint64{1}, Match: map[uint64]uint64{1: 9}, Commit: 9}, 0, 0, Step{Kind: Promote, Node: 1}},
		{"a live stray voter waits for the replica added back", Group{Self: 2, Replicas: r123, Voters: []uint64{2, 3, 4}, Active: all}, 0, 0, Step{Kind: AddLearner, Node: 1}},
		{"a dead stray voter goes before", Group{Self: 2, Replicas: r123, Voters: []uint64{2, 3, 4}, Active: map[uint64]bool{2: true, 3: true}}, 0, 0, Step{Kind: Remove, Node: 4}},
		{"the leaving node removed mid-move is not added back", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}}, 4, 3, Step{}},
		{"a map replica removed mid-move is added back before the move goes on", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 3}, Active: all}, 4, 3, Step{Kind: AddLearner, Node: 2}},
		{"done", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 4}}, 4, 3, Step{}},
		{"data: the live leaving voter stays until the map completes the move", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3, 4}, Active: all, KeepLeaving: true}, 4, 3, Step{}},
		{"data: a leaving leader stays leader", Group{Self: 3, Replicas: r123, Voters: []uint64{1, 2, 3, 4}, Active: all, KeepLeaving: true}, 4, 3, Step{}},
		{"data: a dead leaving voter still goes", Group{Self: 1, Replicas: r123, Voters: []uint64{1, 2, 3, 4}, Active: map[uint64]bool{1: true, 2: true, 4: true}, KeepLeaving: true}, 4, 3, Step{Kind: Remove, Node: 3}},
		{"data: once the map completed the move, the old replica goes", Group{Self: 1, Replicas: []uint64{1, 2, 4}, Voters: []uint64{1, 2, 3, 4}, Active: all, KeepLeaving: true}, 0, 0, Step{Kind: Remove, Node: 3}},
		{"a leader the map does not know hands over", Group{Self: 3, Replicas: []uint64{1, 2, 4}, Voters: []uint64{1, 2, 3, 4}, Active: map[uint64]bool{2: true, 3: true, 4: true}, KeepLeaving: true}, 0, 0, Step{Kind: TransferLeader, Node: 2}},
		{"a leader the map does not know, no live replica to take over", Group{Self: 3, Replicas: []uint64{1, 2, 4}, Voters: []uint64{1, 2, 3, 4}}, 0, 0, Step{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(tc.g, tc.joining, tc.leaving); got != tc.want {
				t.Fatalf("Next = %v %d, want %v %d", got.Kind, got.Node, tc.want.Kind, tc.want.Node)
			}
		})
	}
}

func TestDone(t *testing.T) {
	replicas := []uint64{1, 2, 3}
	for _, tc := range []struct {
		voters, learners []uint64
		want             bool
	}{
		{[]uint64{1, 2, 4}, nil, true},
		{[]uint64{4, 2, 1}, nil, true},
		{[]uint64{1, 2, 3, 4}, nil, false},
		{[]uint64{1, 2, 3}, []uint64{4}, false},
		{[]uint64{1, 2, 4}, []uint64{3}, false},
		{[]uint64{1, 2}, nil, false},
	} {
		if got := Done(replicas, 4, 3, tc.voters, tc.learners); got != tc.want {
			t.Errorf("Done(voters %v, learners %v) = %v, want %v", tc.voters, tc.learners, got, tc.want)
		}
	}
	if Done(replicas, 0, 0, []uint64{1, 2, 3}, nil) {
		t.Error("Done without a move")
	}
}
