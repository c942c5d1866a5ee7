package master

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/membership"
	"github.com/cairnfs/cairn/pkg/placement"
)

// DefaultMaxMoves is Config.MaxMoves's default.
const DefaultMaxMoves = 4

// reportFresh is how recent a node's heartbeat must be for its partition
// reports to count in move decisions (three heartbeats).
const reportFresh = 3 * time.Second

// recoverReplicas is the leader's re-replication duty (Ceph §5, CFS §2.4),
// run with the other leader duties every second. For every partition with
// a replica on a node that is out (down for longer than OutAfter) or being
// decommissioned (draining), it records a move of that replica to another
// alive node of the same role chosen by placement (straw2 over the candidates that hold no replica of
// the partition, in a failure domain the partition does not use yet when
// there is one); the partition's Raft leader carries the move out
// (pkg/membership), and a data partition's new replica copies the extents
// by alignment. The move completes in the map (DONE) once the leader
// reports the target configuration and, for a data partition, the new
// replica reports a full alignment pass at the partition's epoch (it
// joins the chain stale all the same: writes acknowledged since its last
// pass are not on it yet). It is abandoned (ABORT) if the joining node
// stops being alive, or if the new data replica refuses data because its
// disk filled up (the node is then no move target for refusedFor, and it
// deletes the partial copy once the map no longer places it there). At
// most MaxMoves run at once, which paces recovery traffic together with
// the data nodes' copy rate.
func (s *Server) recoverReplicas(ctx context.Context) {
	type pending struct {
		p      *pb.Partition
		leader *pb.PartitionReport
		synced bool // the joining replica reported a full alignment at p's epoch
		full   bool // the joining replica refuses new data: its disk filled up
	}
	var (
		moving   []pending
		sources  []*pb.Partition // partitions with a replica on an out or draining node, not moving
		states   = map[uint64]pb.NodeState{}
		draining = map[uint64]bool{}
	)
	reports := s.freshReports()
	leaders := map[uint64]*pb.PartitionReport{}
	for k, r := range reports {
		if r.Leader {
			leaders[k[1]] = r
		}
	}
	s.fsm.read(func(st *clustermap.State) {
		for id, n := range st.Map().Nodes {
			states[id] = n.State
			draining[id] = n.Draining
		}
		for _, p := range st.Map().Partitions {
			if p.Joining != 0 {
				joining := reports[[2]uint64{p.Joining, p.Id}]
				moving = append(moving, pending{p: clonePartition(p), leader: leaders[p.Id],
					synced: joining.GetInSyncEpoch() == p.Epoch, full: joining.GetReadOnly()})
				continue
			}
			for _, r := range p.Replicas {
				if states[r] == pb.NodeState_NODE_STATE_OUT || draining[r] {
					sources = append(sources, clonePartition(p))
					break
				}
			}
		}
	})
	inFlight := 0
	for _, m := range moving {
		p := m.p
		phase := moveDecision(p, states[p.Joining] == pb.NodeState_NODE_STATE_ALIVE, m.leader, m.synced, m.full)
		switch phase {
		case pb.MovePhase_MOVE_PHASE_UNSPECIFIED:
			inFlight++
			continue
		case pb.MovePhase_MOVE_PHASE_ABORT:
			if m.full {
				s.refuse(p.Joining)
				s.log.Warn("replica move abandoned: the new replica's disk filled up", "partition", p.Id, "node", p.Joining)
			}
		}
		cmd := &pb.MoveReplica{PartitionId: p.Id, From: p.Leaving, To: p.Joining, Phase: phase}
		if _, err := s.propose(ctx, &pb.Command{Op: &pb.Command_MoveReplica{MoveReplica: cmd}}); err != nil {
			s.log.Warn("replica move", "partition", p.Id, "from", p.Leaving, "to", p.Joining, "phase", phase.String(), "err", err)
			continue
		}
		s.log.Info("replica move", "partition", p.Id, "from", p.Leaving, "to", p.Joining, "phase", phase.String())
	}
	sort.Slice(sources, func(i, j int) bool { return sources[i].Id < sources[j].Id })
	if len(sources) == 0 && inFlight == 0 && len(moving) == 0 {
		s.balanceReplicas(ctx)
		return
	}
	for _, p := range sources {
		if inFlight >= s.cfg.MaxMoves {
			return
		}
		// An out replica first (the partition is short of one), then a
		// draining one.
		var from uint64
		for _, r := range p.Replicas {
			if states[r] == pb.NodeState_NODE_STATE_OUT {
				from = r
				break
			}
			if draining[r] && from == 0 {
				from = r
			}
		}
		to, ok := s.moveTarget(p, from)
		if !ok {
			s.noTarget(p.Id)
			continue
		}
		cmd := &pb.MoveReplica{PartitionId: p.Id, From: from, To: to, Phase: pb.MovePhase_MOVE_PHASE_START}
		if _, err := s.propose(ctx, &pb.Command{Op: &pb.Command_MoveReplica{MoveReplica: cmd}}); err != nil {
			s.log.Warn("start a replica move", "partition", p.Id, "from", from, "to", to, "err", err)
			continue
		}
		inFlight++
		why := "node out"
		if states[from] != pb.NodeState_NODE_STATE_OUT {
			why = "node decommissioned"
		}
		s.log.Info("replica move", "partition", p.Id, "from", from, "to", to, "phase", "start", "why", why)
	}
}

// freshReports returns the partition reports of the nodes heard from
// within reportFresh, by (node, partition): a dead node's last word on
// leadership, sync or space is out of date.
func (s *Server) freshReports() map[[2]uint64]*pb.PartitionReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[[2]uint64]*pb.PartitionReport{}
	for node, soft := range s.soft {
		if time.Since(soft.last) > reportFresh {
			continue
		}
		for _, r := range soft.partitions {
			out[[2]uint64{node, r.Id}] = r
		}
	}
	return out
}

// moveDecision is what the leader does with p's move in flight, given
// whether the joining node is alive, the freshest report of p's Raft
// leader (nil: none is fresh), whether the joining replica aligned at p's
// epoch (synced) and whether its disk refuses new data (full): abort, done,
// or wait (MOVE_PHASE_UNSPECIFIED). Pure.
func moveDecision(p *pb.Partition, joiningAlive bool, leader *pb.PartitionReport, synced, full bool) pb.MovePhase {
	switch {
	case !joiningAlive && leader != nil && !slices.Contains(leader.Voters, p.Joining):
		// The new node died before it voted: start over elsewhere (the
		// next move removes the learner it left). Once it votes, the
		// move goes on: removing the old replica needs no new node.
		// Without a fresh report of the group's leader nothing says it
		// did not vote: the new replica may lead the group already, and
		// have removed the old one from it (a partition that cut the
		// master off from it right then), so the move waits. Aborting
		// then left the map naming the removed replica as the primary,
		// which had none of the overwrites the group went on to commit.
		return pb.MovePhase_MOVE_PHASE_ABORT
	case full:
		// The new replica cannot hold the data. Removing it from the
		// Raft group is safe even once it votes: the group had a
		// quorum without it, and pkg/membership removes strays first.
		return pb.MovePhase_MOVE_PHASE_ABORT
	case p.Kind == pb.PartitionKind_PARTITION_KIND_DATA:
		// A data partition's old replica goes only once the new one votes
		// and holds the extents too (a full alignment pass at this
		// epoch). Its group keeps the old replica as a voter until then
		// (membership.Group.KeepLeaving): the new one copies the extents
		// from the chain's head, which may be the old replica, and only
		// a voter can confirm its reads. The group's leader removes it
		// once the map no longer names it.
		if leader != nil && slices.Contains(leader.Voters, p.Joining) && synced {
			return pb.MovePhase_MOVE_PHASE_DONE
		}
	case leader != nil && membership.Done(p.Replicas, p.Joining, p.Leaving, leader.Voters, leader.Learners):
		return pb.MovePhase_MOVE_PHASE_DONE
	}
	return pb.MovePhase_MOVE_PHASE_UNSPECIFIED
}

// moveTarget chooses the node that receives p's replica on from: an alive
// node of p's role that holds no replica of p, in a failure domain p's
// other replicas do not use when one is available, by straw2 on p's id.
func (s *Server) moveTarget(p *pb.Partition, from uint64) (uint64, bool) {
	role := pb.Role_ROLE_META
	if p.Kind == pb.PartitionKind_PARTITION_KIND_DATA {
		role = pb.Role_ROLE_DATA
	}
	cands, _ := s.candidates(role)
	used := map[string]bool{}
	s.fsm.read(func(st *clustermap.State) {
		for _, r := range p.Replicas {
			if n := st.Map().Nodes[r]; n != nil && r != from && n.Zone != "" {
				used[n.Zone] = true
			}
		}
	})
	var free, fresh []placement.Candidate
	for _, c := range cands {
		if slices.Contains(p.Replicas, c.ID) {
			continue
		}
		free = append(free, c)
		if c.Zone == "" || !used[c.Zone] {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) > 0 {
		free = fresh
	}
	if len(free) == 0 {
		return 0, false
	}
	ids, err := placement.Choose(p.Id, free, 1)
	if err != nil || len(ids) == 0 {
		return 0, false
	}
	return ids[0], true
}

// noTarget logs, at most once a minute per partition, that a replica on an
// out node has nowhere to go (every node of the role holds one already).
func (s *Server) noTarget(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.noTargetLogged[id]) < time.Minute {
		return
	}
	s.noTargetLogged[id] = time.Now()
	s.log.Warn("partition has a replica on an out node and no other node to move it to; add a node", "partition", id)
}

// movedAway sorts a node's partition reports: those of partitions the map
// no longer places on node (neither a replica nor a joining one: a move
// replaced the node's replica, and the node deletes its copy) come apart
// from the others (kept). Data partitions among them are named in voting:
// the map completes a data partition's move before its Raft group removes
// the old replica, which must go on voting until then (the data node's
// retire.go), so it is deleted only once the group's leader no longer
// counts it (groupDropped); the others in removed. A node also reports the
// partitions it closed and has not deleted yet, so that it learns when it
// may. Pure.
func movedAway(st *clustermap.State, node uint64, reports []*pb.PartitionReport) (kept []*pb.PartitionReport, removed, voting []uint64) {
	for _, r := range reports {
		p := st.Map().Partitions[r.Id]
		if p == nil || slices.Contains(p.Replicas, node) || p.Joining == node {
			kept = append(kept, r)
			continue
		}
		if p.Kind == pb.PartitionKind_PARTITION_KIND_DATA {
			voting = append(voting, r.Id)
		} else {
			removed = append(removed, r.Id)
		}
	}
	return kept, removed, voting
}

// groupDropped reports whether the Raft leader's report of a partition
// (nil: no fresh one) shows that the group no longer counts node as a
// voter (a learner's vote counts for nothing). Without a report it does
// not: a group without a leader may need the node's vote to elect one.
// Pure.
func groupDropped(leader *pb.PartitionReport, node uint64) bool {
	return leader != nil && !slices.Contains(leader.Voters, node)
}

// leaderReports returns the fresh reports (freshReports) of partitions'
// Raft leaders, by partition.
func (s *Server) leaderReports() map[uint64]*pb.PartitionReport {
	out := map[uint64]*pb.PartitionReport{}
	for _, r := range s.freshReports() {
		if r.Leader {
			out[r.Id] = r
		}
	}
	return out
}

func clonePartition(p *pb.Partition) *pb.Partition { return proto.Clone(p).(*pb.Partition) }

// balanceReplicas gives nodes that hold fewer replicas than others (a node
// that joined) their share of the existing ones, one move at a time and
// only while nothing needs recovering: for each role, while the alive,
// non-draining node with the most replicas holds at least two more than
// the one with the fewest, one of its replicas, of a partition that is
// fully healthy and has none on the other node, moves there (keeping the
// partition's failure domains apart when zones are set). Each move lowers
// the spread, so it ends; the bound on moves in flight paces it.
func (s *Server) balanceReplicas(ctx context.Context) {
	for _, role := range []pb.Role{pb.Role_ROLE_META, pb.Role_ROLE_DATA} {
		cands, _ := s.candidates(role)
		if len(cands) < 2 {
			continue
		}
		var move *pb.MoveReplica
		s.fsm.read(func(st *clustermap.State) {
			if move = spreadMove(st.Map(), role, cands); move == nil {
				move = balanceMove(st.Map(), role, cands)
			}
		})
		if move == nil {
			continue
		}
		if _, err := s.propose(ctx, &pb.Command{Op: &pb.Command_MoveReplica{MoveReplica: move}}); err != nil {
			s.log.Warn("start a balancing move", "partition", move.PartitionId, "from", move.From, "to", move.To, "err", err)
			continue
		}
		s.log.Info("replica move", "partition", move.PartitionId, "from", move.From, "to", move.To, "phase", "start", "why", "balance")
		return // one at a time
	}
}

// kindOf is the kind of partition whose replicas nodes of role hold.
func kindOf(role pb.Role) pb.PartitionKind {
	if role == pb.Role_ROLE_DATA {
		return pb.PartitionKind_PARTITION_KIND_DATA
	}
	return pb.PartitionKind_PARTITION_KIND_META
}

// zoneOf is node id's zone in m ("" for none or an unknown node).
func zoneOf(m *pb.ClusterMap, id uint64) string {
	if n := m.Nodes[id]; n != nil {
		return n.Zone
	}
	return ""
}

// spreadMove picks a move that puts a replica of a partition whose
// replicas share a zone into a zone the partition does not use, or nil
// when there is none to make. Recovery from a lost zone places replicas in
// the zones left, two in one zone if it must (docs/design.md, "Zones");
// once the zone is back, these moves take each partition back to one
// replica per zone. Of the replicas sharing a zone, the one on the node
// with the most replicas moves, to the candidate with the fewest in a zone
// the partition does not use; only fully healthy partitions move, one at
// a time. Each move lowers the number of replicas sharing a zone, so it
// ends.
func spreadMove(m *pb.ClusterMap, role pb.Role, cands []placement.Candidate) *pb.MoveReplica {
	kind := kindOf(role)
	zone := func(id uint64) string { return zoneOf(m, id) }
	count := map[uint64]int{}
	for _, p := range m.Partitions {
		for _, r := range p.Replicas {
			count[r]++
		}
	}
	ids := slices.Sorted(maps.Keys(m.Partitions))
	for _, id := range ids {
		p := m.Partitions[id]
		if p.Kind != kind || p.Joining != 0 || len(p.Down) > 0 || len(p.Stale) > 0 {
			continue
		}
		used := map[string]int{}
		healthy := true
		for _, r := range p.Replicas {
			n := m.Nodes[r]
			healthy = healthy && n != nil && n.State == pb.NodeState_NODE_STATE_ALIVE
			used[zone(r)]++
		}
		if !healthy {
			continue
		}
		var from uint64
		for _, r := range p.Replicas {
			if z := zone(r); z != "" && used[z] > 1 && (from == 0 || count[r] > count[from] || count[r] == count[from] && r < from) {
				from = r
			}
		}
		if from == 0 {
			continue
		}
		var to *placement.Candidate
		for i, c := range cands {
			if c.Zone == "" || used[c.Zone] > 0 || slices.Contains(p.Replicas, c.ID) {
				continue
			}
			if to == nil || count[c.ID] < count[to.ID] {
				to = &cands[i]
			}
		}
		if to != nil {
			return &pb.MoveReplica{PartitionId: p.Id, From: from, To: to.ID, Phase: pb.MovePhase_MOVE_PHASE_START}
		}
	}
	return nil
}

// balanceMove picks the balancing move for role over the candidates (alive,
// non-draining nodes), or nil when the replica counts differ by at most one
// or no partition qualifies.
func balanceMove(m *pb.ClusterMap, role pb.Role, cands []placement.Candidate) *pb.MoveReplica {
	kind := kindOf(role)
	count := map[uint64]int{}
	for _, c := range cands {
		count[c.ID] = 0
	}
	var parts []*pb.Partition
	for _, p := range m.Partitions {
		if p.Kind != kind {
			continue
		}
		parts = append(parts, p)
		for _, r := range p.Replicas {
			if _, ok := count[r]; ok {
				count[r]++
			}
		}
	}
	ids := make([]uint64, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	// Sources by decreasing count (then id); the target is the node with
	// the fewest.
	slices.SortFunc(ids, func(a, b uint64) int {
		if count[a] != count[b] {
			return cmp.Compare(count[b], count[a])
		}
		return cmp.Compare(a, b)
	})
	least := ids[len(ids)-1]
	for _, id := range ids {
		if count[id] == count[least] && id < least {
			least = id
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Id < parts[j].Id })
	zone := func(id uint64) string { return zoneOf(m, id) }
	for _, from := range ids {
		if count[from]-count[least] < 2 {
			break
		}
		for _, p := range parts {
			if p.Joining != 0 || len(p.Down) > 0 || len(p.Stale) > 0 || !slices.Contains(p.Replicas, from) || slices.Contains(p.Replicas, least) {
				continue
			}
			healthy, clash := true, false
			for _, r := range p.Replicas {
				n := m.Nodes[r]
				healthy = healthy && n != nil && n.State == pb.NodeState_NODE_STATE_ALIVE
				if r != from && zone(least) != "" && zone(r) == zone(least) {
					clash = true
				}
			}
			if healthy && !clash {
				return &pb.MoveReplica{PartitionId: p.Id, From: from, To: least, Phase: pb.MovePhase_MOVE_PHASE_START}
			}
		}
	}
	return nil
}
