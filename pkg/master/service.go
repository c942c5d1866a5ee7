package master

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/placement"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Defaults for a new volume; CFS starts a volume with 3 meta and 10 data
// partitions and grows it when they fill.
const (
	DefaultMetaPartitions = 3
	DefaultDataPartitions = 10
	DefaultReplicas       = 3
	maxReplicas           = 7
)

type service struct {
	pb.UnimplementedMasterServer
	s *Server
}

func marshalCommand(cmd *pb.Command) ([]byte, error) {
	b, err := proto.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	return b, nil
}

// requireLeader answers followers' callers with the leader's address, and makes
// sure the leader's map includes everything committed before the call (a read
// barrier), so reads from the leader are linearizable.
func (v *service) requireLeader(ctx context.Context) error {
	isLeader, addr, _ := v.s.leader()
	if !isLeader {
		return redirect.NotLeader(ctx, "the master group", addr)
	}
	if err := v.s.host.ReadIndex(ctx, groupID); err != nil {
		return toStatus(err)
	}
	return nil
}

// toStatus maps map and Raft errors to gRPC codes a client can act on.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, clustermap.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, clustermap.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, clustermap.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, clustermap.ErrConflict):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, multiraft.ErrNotLeader), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.Unavailable, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// epoch is the map epoch this master has applied.
func (v *service) epoch() uint64 {
	var epoch uint64
	v.s.fsm.read(func(st *clustermap.State) { epoch = st.Map().Epoch })
	return epoch
}

func (v *service) Ping(ctx context.Context, _ *pb.PingRequest) (*pb.PingResponse, error) {
	isLeader, addr, st := v.s.leader()
	return &pb.PingResponse{
		Id: v.s.cfg.ID, Leader: isLeader, LeaderId: uint64(st.Leader), LeaderAddr: addr, Term: st.Term,
		Pid: int32(os.Getpid()), Hostname: v.s.hostname, Addr: v.s.cfg.Peers[v.s.cfg.ID], MetricsAddr: v.s.telemetry.Addr(),
	}, nil
}

func (v *service) Register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	var clusterID string
	v.s.fsm.read(func(st *clustermap.State) { clusterID = st.Map().ClusterId })
	switch {
	case clusterID == "":
		return nil, status.Error(codes.Unavailable, "the cluster is still initialising")
	case req.ClusterId != "" && req.ClusterId != clusterID:
		return nil, status.Errorf(codes.FailedPrecondition, "node data dir belongs to cluster %s, but this is cluster %s", req.ClusterId, clusterID)
	}
	// The name nodes check when they dial this one (Node.cert_name) is the
	// one of the certificate this call came with, never one the node
	// claims; "" in plain text.
	var certName string
	if c := daemon.PeerCert(ctx); c != nil {
		certName = c.Subject.CommonName
	}
	var before string
	v.s.fsm.read(func(st *clustermap.State) {
		if n := st.NodeByUUID(req.Uuid); n != nil {
			before = n.CertName
		}
	})
	res, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_Register{Register: &pb.RegisterNode{
		Uuid: req.Uuid, Role: req.Role, Addr: req.Addr, Zone: req.Zone, RequestedId: req.NodeId, DataAddr: req.DataAddr,
		CertName: certName,
	}}})
	if err != nil {
		return nil, toStatus(err)
	}
	id := res.(uint64)
	v.s.mu.Lock()
	v.s.soft[id] = &nodeSoft{last: time.Now()}
	v.s.mu.Unlock()
	if before != "" && before != certName {
		v.s.log.Warn("node registered with a certificate of another name; its peers now accept only the new one", "node", id, "was", before, "now", certName)
	}
	v.s.log.Info("node registered", "node", id, "role", req.Role, "addr", req.Addr, "cert_name", certName)
	return &pb.RegisterResponse{ClusterId: clusterID, NodeId: id, Epoch: v.epoch()}, nil
}

func (v *service) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	if isLeader, addr, _ := v.s.leader(); !isLeader {
		return nil, redirect.NotLeader(ctx, "the master group", addr)
	}
	var (
		node     *pb.Node
		assigned []*pb.Partition
		epoch    uint64
		inSync   []*pb.MarkInSync
		removed  []uint64
		voting   []uint64              // moved away, deleted once the group drops the node
		reports  []*pb.PartitionReport // of partitions the map places on the node
		revoked  []string
	)
	addrs, dataAddrs, certNames := map[uint64]string{}, map[uint64]string{}, map[uint64]string{}
	v.s.fsm.read(func(st *clustermap.State) {
		if n, ok := st.Map().Nodes[req.NodeId]; ok && n.Uuid == req.Uuid {
			node = proto.Clone(n).(*pb.Node)
			inSync = caughtUp(st, req.NodeId, req.Partitions)
			reports, removed, voting = movedAway(st, req.NodeId, req.Partitions)
			for _, p := range st.PartitionsOf(req.NodeId) {
				assigned = append(assigned, proto.Clone(p).(*pb.Partition))
				// A node joining by a move must be reachable by the others
				// (its Raft messages, alignment) before it is a replica.
				for _, r := range append(slices.Clone(p.Replicas), p.Joining) {
					if peer, ok := st.Map().Nodes[r]; ok {
						addrs[r] = peer.Addr
						if peer.DataAddr != "" {
							dataAddrs[r] = peer.DataAddr
						}
						if peer.CertName != "" {
							certNames[r] = peer.CertName
						}
					}
				}
			}
		}
		epoch = st.Map().Epoch
		revoked = st.RevokedSerials()
	})
	if node == nil {
		return nil, status.Errorf(codes.NotFound, "node %d (%s) is not registered; register again", req.NodeId, req.Uuid)
	}
	if len(voting) > 0 {
		leaders := v.s.leaderReports()
		for _, id := range voting {
			if groupDropped(leaders[id], req.NodeId) {
				removed = append(removed, id)
			}
		}
	}
	v.s.mu.Lock()
	v.s.soft[req.NodeId] = &nodeSoft{
		last: time.Now(), usage: req.Usage, pid: req.Pid, hostname: req.Hostname,
		metricsAddr: req.MetricsAddr, partitions: reports,
	}
	v.s.mu.Unlock()
	if node.State != pb.NodeState_NODE_STATE_ALIVE {
		_, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_SetNodeState{SetNodeState: &pb.SetNodeState{NodeId: node.Id, State: pb.NodeState_NODE_STATE_ALIVE}}})
		if err != nil {
			return nil, toStatus(err)
		}
		v.s.log.Info("node state changed", "node", node.Id, "state", "alive")
	}
	for _, c := range inSync {
		if _, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_MarkInSync{MarkInSync: c}}); err != nil {
			return nil, toStatus(err)
		}
		v.s.log.Info("stale replica caught up", "partition", c.PartitionId, "node", c.NodeId, "partition_epoch", c.Epoch)
	}
	resp := &pb.HeartbeatResponse{Epoch: epoch, Assigned: assigned, NodeAddrs: addrs, NodeDataAddrs: dataAddrs, Removed: removed, Revoked: revoked,
		GrantKeys: v.s.grantKeys(), NodeCertNames: certNames}
	if node.Role == pb.Role_ROLE_DATA {
		resp.FullVolumes = v.s.full()
	}
	if node.Role == pb.Role_ROLE_META {
		resp.Quotas = v.s.allQuotas()
	}
	return resp, nil
}

func (v *service) GetMap(ctx context.Context, _ *pb.GetMapRequest) (*pb.GetMapResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	var m *pb.ClusterMap
	v.s.fsm.read(func(st *clustermap.State) { m = st.Clone() })
	scopeMap(ctx, m)
	return &pb.GetMapResponse{Map: m}, nil
}

func (v *service) volumeResponse(ctx context.Context, name string) (*pb.VolumeResponse, error) {
	var (
		resp   *pb.VolumeResponse
		denied error
	)
	v.s.fsm.read(func(st *clustermap.State) {
		if denied = allowVolume(ctx, st, name); denied != nil {
			return
		}
		vol := st.VolumeByName(name)
		if vol == nil {
			return
		}
		resp = &pb.VolumeResponse{Volume: proto.Clone(vol).(*pb.Volume), Epoch: st.Map().Epoch}
		for _, ids := range [][]uint64{vol.MetaPartitions, vol.DataPartitions} {
			for _, id := range ids {
				resp.Partitions = append(resp.Partitions, proto.Clone(st.Map().Partitions[id]).(*pb.Partition))
			}
		}
	})
	if denied != nil {
		return nil, denied
	}
	if resp == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist", name)
	}
	resp.UsedBytes, resp.UsedKnown = v.s.volumeUsage(resp.Volume.DataPartitions)
	resp.Quotas = scopeQuotas(ctx, v.s.quotaStates([]*pb.Volume{resp.Volume}))
	resp.DataCapacityBytes, resp.DataFreeBytes = v.s.dataSpace()
	return resp, nil
}

func (v *service) GetVolume(ctx context.Context, req *pb.VolumeRequest) (*pb.VolumeResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	return v.volumeResponse(ctx, req.Name)
}

func (v *service) ListVolumes(ctx context.Context, _ *pb.ListVolumesRequest) (*pb.ListVolumesResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	resp := &pb.ListVolumesResponse{}
	only := capability.FromContext(ctx).VolumeID
	v.s.fsm.read(func(st *clustermap.State) {
		for _, vol := range st.Map().Volumes {
			if only != 0 && vol.Id != only {
				continue
			}
			resp.Volumes = append(resp.Volumes, proto.Clone(vol).(*pb.Volume))
		}
		resp.Epoch = st.Map().Epoch
	})
	sort.Slice(resp.Volumes, func(i, j int) bool { return resp.Volumes[i].Name < resp.Volumes[j].Name })
	return resp, nil
}

func (v *service) DeleteVolume(ctx context.Context, req *pb.VolumeRequest) (*pb.DeleteVolumeResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	if _, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_DeleteVolume{DeleteVolume: &pb.DeleteVolume{Name: req.Name}}}); err != nil {
		return nil, toStatus(err)
	}
	v.s.log.Info("volume deleted", "volume", req.Name)
	return &pb.DeleteVolumeResponse{Epoch: v.epoch()}, nil
}

func (v *service) CreateVolume(ctx context.Context, req *pb.CreateVolumeRequest) (*pb.VolumeResponse, error) {
	if err := clustermap.ValidateVolumeName(req.Name); err != nil {
		return nil, toStatus(err)
	}
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	metas, datas, replicas := int(req.MetaPartitions), int(req.DataPartitions), int(req.Replicas)
	if metas == 0 {
		metas = DefaultMetaPartitions
	}
	if datas == 0 {
		datas = DefaultDataPartitions
	}
	if replicas == 0 {
		replicas = DefaultReplicas
	}
	if replicas > maxReplicas || metas+datas > clustermap.MaxPartitionsPerOp {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d replicas and %d partitions per volume", maxReplicas, clustermap.MaxPartitionsPerOp)
	}
	if err := clustermap.ValidateChunkLayout(req.DefaultLayout, req.Chunking); err != nil {
		return nil, toStatus(err)
	}
	// One placement at a time: each sees the partitions the previous one added.
	v.s.createMu.Lock()
	defer v.s.createMu.Unlock()
	parts, err := v.s.placePartitions(ctx, req.Name, metas, datas, replicas)
	if err != nil {
		return nil, err
	}
	_, err = v.s.propose(ctx, &pb.Command{Op: &pb.Command_CreateVolume{CreateVolume: &pb.CreateVolume{
		Name: req.Name, CapacityBytes: req.CapacityBytes, Replicas: int32(replicas), Partitions: parts,
		DefaultLayout: req.DefaultLayout, Chunking: req.Chunking,
	}}})
	if err != nil {
		return nil, toStatus(err)
	}
	v.s.log.Info("volume created", "volume", req.Name, "meta_partitions", metas, "data_partitions", datas, "replicas", replicas)
	return v.volumeResponse(ctx, req.Name)
}

// placePartitions chooses replica sets for a new volume's partitions among the
// alive nodes of each role that have reported usage, weighting by free capacity
// and utilization (CFS §2.3.1). Each partition has its own straw2 key, so one
// volume's partitions spread over the nodes in proportion to their weights.
func (s *Server) placePartitions(ctx context.Context, volume string, metas, datas, replicas int) ([]*pb.NewPartition, error) {
	var out []*pb.NewPartition
	for _, kind := range []struct {
		kind  pb.PartitionKind
		role  pb.Role
		count int
		name  string
	}{
		{pb.PartitionKind_PARTITION_KIND_META, pb.Role_ROLE_META, metas, "meta"},
		{pb.PartitionKind_PARTITION_KIND_DATA, pb.Role_ROLE_DATA, datas, "data"},
	} {
		cands := s.awaitCandidates(ctx, kind.role, replicas)
		if len(cands) < replicas {
			return nil, status.Errorf(codes.FailedPrecondition, "%s", s.shortage(kind.role, kind.name, replicas, len(cands)))
		}
		for i := 0; i < kind.count; i++ {
			ids, err := placement.Choose(placementKey(volume, kind.name, i), cands, replicas)
			if err != nil {
				return nil, status.Errorf(codes.FailedPrecondition, "place %s partition %d of volume %q: %v", kind.name, i, volume, err)
			}
			out = append(out, &pb.NewPartition{Kind: kind.kind, Replicas: ids})
		}
	}
	return out, nil
}

// awaitCandidates returns the placement candidates of role. Right after an
// election the new leader has heard no heartbeats yet, so nodes the map says are
// alive have no usage; it waits for them (they report within a heartbeat
// interval) rather than refuse the request.
func (s *Server) awaitCandidates(ctx context.Context, role pb.Role, want int) []placement.Candidate {
	deadline := time.After(2 * time.Second)
	for {
		cands, unheard := s.candidates(role)
		if len(cands) >= want || unheard == 0 {
			return cands
		}
		select {
		case <-ctx.Done():
			return cands
		case <-deadline:
			return cands
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// candidates returns the alive, non-draining nodes of role that have
// reported usage and have room for a new replica (not full, not refused
// after a move filled their disk: capacity.go), and how many alive nodes
// have not reported yet.
// shortage says why only have nodes of role (named name) can take one of
// replicas new replicas: how many are alive, and of those how many have no
// room (a disk 95% full or a read-only replica), refused a replica lately,
// or have not reported their usage yet.
func (s *Server) shortage(role pb.Role, name string, replicas, have int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	alive, full, refused, unheard := 0, 0, 0, 0
	s.fsm.read(func(st *clustermap.State) {
		for id, n := range st.Map().Nodes {
			if n.Role != role || n.State != pb.NodeState_NODE_STATE_ALIVE || n.Draining {
				continue
			}
			alive++
			switch soft := s.soft[id]; {
			case soft == nil || soft.usage == nil:
				unheard++
			case nodeFull(soft):
				full++
			case time.Now().Before(s.refused[id]):
				refused++
			}
		}
	})
	msg := fmt.Sprintf("need %d %s nodes with room for %d replicas, have %d: %d alive", replicas, name, replicas, have, alive)
	if full > 0 {
		msg += fmt.Sprintf(", %d of them full (disk %.0f%% used or a read-only replica)", full, fullRatio*100)
	}
	if refused > 0 {
		msg += fmt.Sprintf(", %d refused a replica lately", refused)
	}
	if unheard > 0 {
		msg += fmt.Sprintf(", %d not heard from yet", unheard)
	}
	return msg
}

func (s *Server) candidates(role pb.Role) (out []placement.Candidate, unheard int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fsm.read(func(st *clustermap.State) {
		counts := map[uint64]int{}
		for _, p := range st.Map().Partitions {
			for _, r := range p.Replicas {
				counts[r]++
			}
		}
		for id, n := range st.Map().Nodes {
			if n.Role != role || n.State != pb.NodeState_NODE_STATE_ALIVE || n.Draining {
				continue
			}
			soft := s.soft[id]
			if soft == nil || soft.usage == nil {
				unheard++
				continue
			}
			if nodeFull(soft) || time.Now().Before(s.refused[id]) {
				continue // no room for a new replica (capacity.go)
			}
			out = append(out, placement.Candidate{
				ID: id, Zone: n.Zone, CapacityBytes: soft.usage.CapacityBytes, UsedBytes: soft.usage.UsedBytes,
				MemUtil: soft.usage.MemUtil, Partitions: counts[id],
			})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, unheard
}

func placementKey(volume, kind string, i int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", volume, kind, i)
	return h.Sum64()
}

func (v *service) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	resp := &pb.StatusResponse{}
	v.s.mu.Lock()
	v.s.fsm.read(func(st *clustermap.State) {
		resp.Map = st.Clone()
		for id := range st.Map().Nodes {
			ns := &pb.NodeStatus{Node: resp.Map.Nodes[id]}
			if soft := v.s.soft[id]; soft != nil {
				ns.Usage, ns.Pid, ns.Hostname, ns.MetricsAddr = soft.usage, soft.pid, soft.hostname, soft.metricsAddr
				ns.LastHeartbeatUnixMs = soft.last.UnixMilli()
				ns.Partitions = soft.partitions
				ns.Full = nodeFull(soft) || time.Now().Before(v.s.refused[id])
			}
			resp.Nodes = append(resp.Nodes, ns)
		}
	})
	v.s.mu.Unlock()
	sort.Slice(resp.Nodes, func(i, j int) bool { return resp.Nodes[i].Node.Id < resp.Nodes[j].Node.Id })
	scopeMap(ctx, resp.Map)
	resp.LeaderId = v.s.cfg.ID
	resp.Recovering, resp.RecoveryBytesPerSecond = v.s.rate.latest()
	resp.OutAfterSeconds = int64(v.s.cfg.OutAfter / time.Second)
	resp.Masters = v.s.pingMasters(ctx)
	return resp, nil
}

// pingMasters asks every master who it is, in parallel; a master that does not
// answer within a second is listed with only its id and address.
func (s *Server) pingMasters(ctx context.Context) []*pb.PingResponse {
	ids := make([]uint64, 0, len(s.cfg.Peers))
	for id := range s.cfg.Peers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]*pb.PingResponse, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		if id == s.cfg.ID {
			out[i], _ = (&service{s: s}).Ping(ctx, nil)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = &pb.PingResponse{Id: id, Addr: s.cfg.Peers[id]}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if r, err := s.peerClient.Ping(pctx, s.cfg.Peers[id]); err == nil {
				out[i] = r
			}
		}()
	}
	wg.Wait()
	return out
}

// caughtUp returns the MarkInSync commands that node's partition reports
// call for: a stale replica that completed a full alignment at its
// partition's current epoch.
func caughtUp(st *clustermap.State, node uint64, reports []*pb.PartitionReport) []*pb.MarkInSync {
	var out []*pb.MarkInSync
	for _, r := range reports {
		p := st.Map().Partitions[r.Id]
		if r.InSyncEpoch == 0 || p == nil || r.InSyncEpoch != p.Epoch || !slices.Contains(p.Stale, node) {
			continue
		}
		out = append(out, &pb.MarkInSync{PartitionId: r.Id, NodeId: node, Epoch: r.InSyncEpoch})
	}
	return out
}

// ReportFailure records that a node did not answer a peer or a client and
// marks it down at once when it has also missed heartbeats for the report
// grace: a live node that merely refused one request keeps heartbeating and
// is not condemned by a report alone.
func (v *service) ReportFailure(ctx context.Context, req *pb.ReportFailureRequest) (*pb.ReportFailureResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	var known bool
	v.s.fsm.read(func(st *clustermap.State) { _, known = st.Map().Nodes[req.NodeId] })
	if !known {
		return nil, status.Errorf(codes.NotFound, "node %d is not registered", req.NodeId)
	}
	now := time.Now()
	v.s.mu.Lock()
	v.s.reported[req.NodeId] = now
	v.s.mu.Unlock()
	resp := &pb.ReportFailureResponse{}
	for _, ch := range v.s.livenessChanges(now) {
		if ch.NodeId != req.NodeId || ch.State != pb.NodeState_NODE_STATE_DOWN {
			continue
		}
		if _, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_SetNodeState{SetNodeState: ch}}); err != nil {
			return nil, toStatus(err)
		}
		v.s.log.Info("node state changed", "node", ch.NodeId, "state", "down", "reported_by", req.Reporter, "reason", req.Reason)
		resp.MarkedDown = true
	}
	return resp, nil
}

// DecommissionNode starts (or cancels) draining a meta or data node: the
// leader's recovery duty then moves its replicas off it, a few at a time
// (recovery.go), and placement gives it nothing new.
func (v *service) DecommissionNode(ctx context.Context, req *pb.DecommissionNodeRequest) (*pb.DecommissionNodeResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	var role pb.Role
	v.s.fsm.read(func(st *clustermap.State) {
		if n := st.Map().Nodes[req.NodeId]; n != nil {
			role = n.Role
		}
	})
	if role == pb.Role_ROLE_UNSPECIFIED {
		return nil, status.Errorf(codes.NotFound, "node %d is not registered", req.NodeId)
	}
	cmd := &pb.DrainNode{NodeId: req.NodeId, Drain: !req.Cancel}
	if _, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_DrainNode{DrainNode: cmd}}); err != nil {
		return nil, toStatus(err)
	}
	v.s.log.Info("node decommission", "node", req.NodeId, "drain", cmd.Drain)
	resp := &pb.DecommissionNodeResponse{}
	v.s.fsm.read(func(st *clustermap.State) {
		resp.Node = proto.Clone(st.Map().Nodes[req.NodeId]).(*pb.Node)
		resp.Replicas = uint32(len(st.PartitionsOf(req.NodeId)))
	})
	return resp, nil
}
