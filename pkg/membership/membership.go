// Package membership moves a partition's Raft configuration through a
// replica move that the cluster map records (Partition.joining replaces
// Partition.leaving; re-replication and decommission, Ceph §5, CFS §2.4).
// The map says what the replica set must become; the group's leader makes
// it so one configuration change at a time:
//
//  0. whether or not a move is in progress, bring the configuration back
//     to the map's replica set: leave a joint configuration first (raft
//     allows no other change in one), remove members the map does not know
//     (left by an abandoned move) and add back, as a learner and then a
//     voter, replicas it has that are not voters (an abandoned move that
//     had removed its leaving node already);
//  1. add the joining node as a learner (it receives a snapshot and the log
//     without counting toward any quorum); but when the leaving node has
//     not been heard from (it is dead), remove it first, so that one more
//     failure during the move never leaves two dead voters of four;
//  2. once the learner's log has caught up with the leader's commit index,
//     replace the leaving node with it in one joint change (raft's joint
//     consensus): the group then decides with a majority of the old
//     replicas and one of the new;
//  3. leave the joint configuration; a leader that is itself leaving first
//     hands leadership to a voter of the new configuration.
//
// Step 2 is one joint change, not a promotion and then a removal, because a
// group of four voters loses its quorum to any two failures: a rebalance
// may move a replica between two nodes of one zone, and a lab run lost
// that zone while both were voters, two of four, with the partition's
// quorum. In the joint configuration each of the two majorities (the old
// replicas, the new ones) loses one member to such a loss.
//
// A data partition (Group.KeepLeaving) stays in the joint configuration
// while the leaving node lives, until the map completes the move: its new
// replica must first copy the extents, from the chain's head, which may be
// the leaving node, and a replica that is no longer a voter cannot confirm
// a read. The master completes such a move in the map once the new replica
// votes and has copied them.
//
// Next is the pure decision; Drive applies it to a multiraft host. The
// master completes a meta partition's move in the map once the leader
// reports the target configuration (Done).
package membership

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/multiraft"
)

// Kind is what a step does.
type Kind int

// The steps of a move.
const (
	None Kind = iota
	AddLearner
	Promote
	Remove
	TransferLeader
	// Replace makes Node a voter and Leaving a voter of the outgoing
	// configuration only, in one joint change.
	Replace
	// LeaveJoint leaves a joint configuration for its incoming one.
	LeaveJoint
)

func (k Kind) String() string {
	return [...]string{"none", "add learner", "promote", "remove", "transfer leadership", "replace", "leave joint"}[k]
}

// Step is the next configuration change a group's leader should make.
type Step struct {
	Kind Kind
	Node uint64
	// Leaving is, for Replace, the node that leaves the configuration.
	Leaving uint64
}

// Group is what the leader knows of its group, and the map's replicas.
type Group struct {
	Self             uint64
	Replicas         []uint64 // the map's replica set (before the move)
	Voters, Learners []uint64
	// Outgoing is, in a joint configuration, the outgoing one's voters
	// (Voters are then the incoming one's); empty otherwise.
	Outgoing []uint64
	// Match is each member's replicated log index; Commit the leader's.
	Match  map[uint64]uint64
	Commit uint64
	// Active: members heard from within the last election timeout.
	Active map[uint64]bool
	// KeepLeaving: a live leaving node stays a voter until the map
	// completes the move (data partitions; see the package comment).
	KeepLeaving bool
}

// Next returns the step that moves g toward replacing leaving with joining
// (joining 0: no move). It returns None when the configuration is already
// the target. Before any step of a move, the configuration is brought back
// to the map's replica set: members the map does not know go, and replicas
// the map has that are not voters (an abandoned move that had removed its
// leaving node already) are added back, as learners first. Dead strays go
// before a replica is added back, live ones after: a group never counts a
// dead member toward its quorum for longer than it must, and never shrinks
// below the map's replicas while it can grow back to them.
func Next(g Group, joining, leaving uint64) Step {
	if len(g.Replicas) == 0 {
		return Step{} // no replica set known: nothing to compare with
	}
	if len(g.Outgoing) > 0 {
		return leaveJoint(g, joining, leaving)
	}
	stray := func(m uint64) bool { return m != joining && m != g.Self && !slices.Contains(g.Replicas, m) }
	for _, m := range g.Learners {
		if stray(m) {
			return Step{Kind: Remove, Node: m} // counts toward no quorum: harmless to drop
		}
	}
	for _, m := range g.Voters {
		if stray(m) && !g.Active[m] {
			return Step{Kind: Remove, Node: m}
		}
	}
	for _, r := range g.Replicas {
		if r == leaving || r == joining || slices.Contains(g.Voters, r) {
			continue
		}
		// A replica of the map that is no voter: the map routes reads and
		// writes to it, and its group must count it again.
		if !slices.Contains(g.Learners, r) {
			return Step{Kind: AddLearner, Node: r}
		}
		if g.Match[r] >= g.Commit {
			return Step{Kind: Promote, Node: r}
		}
		return Step{} // still catching up
	}
	for _, m := range g.Voters {
		if stray(m) {
			return Step{Kind: Remove, Node: m}
		}
	}
	if g.Self != joining && !slices.Contains(g.Replicas, g.Self) {
		// This leader is a member the map does not know (a data
		// partition's old replica after the map completed its move):
		// hand over to a replica the map has, which then removes it.
		for _, r := range g.Replicas {
			if slices.Contains(g.Voters, r) && g.Active[r] {
				return Step{Kind: TransferLeader, Node: r}
			}
		}
		return Step{}
	}
	if joining == 0 {
		return Step{}
	}
	switch {
	case !slices.Contains(g.Voters, joining) && !slices.Contains(g.Learners, joining):
		if leaving != 0 && leaving != g.Self && slices.Contains(g.Voters, leaving) && !g.Active[leaving] {
			return Step{Kind: Remove, Node: leaving}
		}
		return Step{Kind: AddLearner, Node: joining}
	case slices.Contains(g.Learners, joining):
		if g.Match[joining] < g.Commit {
			return Step{} // still catching up
		}
		if leaving != 0 && slices.Contains(g.Voters, leaving) {
			return Step{Replace, joining, leaving}
		}
		return Step{Kind: Promote, Node: joining}
	case leaving != 0 && slices.Contains(g.Voters, leaving):
		// Both voters, outside a joint configuration: a group a simple
		// promotion left with four voters.
		if g.KeepLeaving && (g.Active[leaving] || leaving == g.Self) {
			return Step{} // the map removes it, once the new replica holds the data
		}
		if leaving == g.Self {
			return Step{Kind: TransferLeader, Node: joining}
		}
		return Step{Kind: Remove, Node: leaving}
	case leaving != 0 && slices.Contains(g.Learners, leaving):
		return Step{Kind: Remove, Node: leaving}
	}
	return Step{}
}

// leaveJoint is Next in a joint configuration, where raft allows no change
// but leaving it. A data partition's live leaving node keeps its vote
// until the map completes the move; a leader that is not in the incoming
// configuration hands leadership to one that is, the joining node first,
// rather than step down at the change and leave the group to an election.
func leaveJoint(g Group, joining, leaving uint64) Step {
	if g.KeepLeaving && joining != 0 && slices.Contains(g.Outgoing, leaving) && !slices.Contains(g.Voters, leaving) &&
		(g.Active[leaving] || leaving == g.Self) {
		return Step{} // the map completes the move once the new replica holds the data
	}
	if !slices.Contains(g.Voters, g.Self) {
		for _, v := range append([]uint64{joining}, g.Voters...) {
			if v != 0 && slices.Contains(g.Voters, v) && g.Active[v] {
				return Step{Kind: TransferLeader, Node: v}
			}
		}
		return Step{}
	}
	return Step{Kind: LeaveJoint}
}

// Done reports whether a group whose leader reports voters and learners has
// completed the move of leaving to joining over replicas (the map's replica
// set before the move).
func Done(replicas []uint64, joining, leaving uint64, voters, learners []uint64) bool {
	want := slices.DeleteFunc(slices.Clone(replicas), func(r uint64) bool { return r == leaving })
	want = append(want, joining)
	slices.Sort(want)
	got := slices.Sorted(slices.Values(voters))
	return joining != 0 && len(learners) == 0 && slices.Equal(want, got)
}

// Drive makes the next step of the move on host h for group id, if this
// replica leads it. It returns the step taken (None if there was nothing
// to do here). keepLeaving is Group.KeepLeaving.
func Drive(ctx context.Context, h *multiraft.Host, id multiraft.GroupID, self uint64, replicas []uint64, joining, leaving uint64, keepLeaving bool) (Step, error) {
	st, err := h.Status(id)
	if err != nil || !st.IsLeader {
		return Step{}, err
	}
	g := Group{Self: self, Replicas: replicas, Commit: st.Commit, Match: map[uint64]uint64{}, Active: map[uint64]bool{}, KeepLeaving: keepLeaving}
	for n, a := range st.Active {
		g.Active[uint64(n)] = a
	}
	g.Voters, g.Outgoing, g.Learners = ids(st.Voters), ids(st.VotersOutgoing), ids(st.Learners)
	for n, m := range st.Match {
		g.Match[uint64(n)] = m
	}
	step := Next(g, joining, leaving)
	var cc raftpb.ConfChangeI
	single := func(t raftpb.ConfChangeType) raftpb.ConfChangeI {
		return &raftpb.ConfChange{Type: t.Enum(), NodeId: proto.Uint64(step.Node)}
	}
	switch step.Kind {
	case None:
		return step, nil
	case TransferLeader:
		return step, h.TransferLeader(id, multiraft.NodeID(step.Node))
	case AddLearner:
		cc = single(raftpb.ConfChangeAddLearnerNode)
	case Promote:
		cc = single(raftpb.ConfChangeAddNode)
	case Remove:
		cc = single(raftpb.ConfChangeRemoveNode)
	case Replace:
		// Explicit: the group stays joint until LeaveJoint, which a data
		// partition puts off until the map completes the move.
		cc = &raftpb.ConfChangeV2{
			Transition: raftpb.ConfChangeTransitionJointExplicit.Enum(),
			Changes: []*raftpb.ConfChangeSingle{
				{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(step.Node)},
				{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(step.Leaving)},
			},
		}
	case LeaveJoint:
		cc = &raftpb.ConfChangeV2{} // no changes: leave the joint configuration
	}
	if err := h.ProposeConfChange(ctx, id, cc); err != nil {
		return step, fmt.Errorf("group %d: %s node %d: %w", id, step.Kind, step.Node, err)
	}
	return step, nil
}

// ids converts node ids to the plain ids Group holds.
func ids(ns []multiraft.NodeID) []uint64 {
	out := make([]uint64, 0, len(ns))
	for _, n := range ns {
		out = append(out, uint64(n))
	}
	return out
}
