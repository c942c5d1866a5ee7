// Package clustermap is the master's replicated state machine: the cluster map of
// nodes, volumes and partitions, changed only by applying commands that came out of
// the master's Raft log.
//
// Apply is pure and deterministic: the same command sequence applied to the same
// starting map yields byte-identical maps on every replica. Time comes from the
// command (the proposer's clock), never from the local clock. A command that is
// invalid against the current map returns an error and changes nothing, not even
// the epoch; every command that changes the map increments the epoch by one.
package clustermap

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/replicaset"
)

// Errors returned by Apply; callers map them to user-facing codes with errors.Is.
var (
	ErrExists   = errors.New("already exists")
	ErrNotFound = errors.New("not found")
	ErrInvalid  = errors.New("invalid")
	ErrConflict = errors.New("conflict")
)

// Limits on what a volume may ask for; they keep a typo from allocating a cluster's
// worth of partitions.
const (
	MaxSlotCount       = 1 << 16
	DefaultSlotCount   = 4096
	MaxPartitionsPerOp = 1024
	// InodeRangeStep is the width of the inode range given to each initial meta
	// partition; the last one is open-ended (CFS Algorithm 1 cuts it later).
	InodeRangeStep = 1 << 24
)

var volumeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidateVolumeName reports whether name may name a volume: 1 to 63 letters,
// digits, '.', '_' or '-', starting with a letter or digit.
func ValidateVolumeName(name string) error {
	if !volumeNameRE.MatchString(name) {
		return fmt.Errorf("%w volume name %q: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}

// State holds a cluster map. It is not safe for concurrent use; the master guards
// it with a lock.
type State struct {
	m *pb.ClusterMap
}

// New returns the empty map of a cluster that has not been initialised.
func New() *State {
	return &State{m: emptyMap()}
}

func emptyMap() *pb.ClusterMap {
	return &pb.ClusterMap{
		Nodes:           map[uint64]*pb.Node{},
		Volumes:         map[uint64]*pb.Volume{},
		Partitions:      map[uint64]*pb.Partition{},
		NextNodeId:      1,
		NextVolumeId:    1,
		NextPartitionId: 1,
	}
}

// Map returns the live map. Callers must not modify it and must not keep it past
// the lock that guards s; use Clone for that.
func (s *State) Map() *pb.ClusterMap { return s.m }

// Clone returns a deep copy of the map that the caller owns.
func (s *State) Clone() *pb.ClusterMap { return proto.Clone(s.m).(*pb.ClusterMap) }

// Marshal encodes the map deterministically (sorted map keys), so that snapshots
// of equal maps are equal bytes.
func (s *State) Marshal() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(s.m)
}

// Unmarshal replaces the map with one produced by Marshal.
func (s *State) Unmarshal(data []byte) error {
	m := &pb.ClusterMap{}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("decode cluster map: %w", err)
	}
	// Empty maps decode as nil; the rest of the package writes into them.
	if m.Nodes == nil {
		m.Nodes = map[uint64]*pb.Node{}
	}
	if m.Volumes == nil {
		m.Volumes = map[uint64]*pb.Volume{}
	}
	if m.Partitions == nil {
		m.Partitions = map[uint64]*pb.Partition{}
	}
	s.m = m
	return nil
}

// VolumeByName returns the volume called name, or nil.
func (s *State) VolumeByName(name string) *pb.Volume {
	for _, v := range s.m.Volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// NodeByUUID returns the node with the given identity, or nil.
func (s *State) NodeByUUID(uuid string) *pb.Node {
	for _, n := range s.m.Nodes {
		if n.Uuid == uuid {
			return n
		}
	}
	return nil
}

// PartitionsOf returns the partitions whose replica set includes node, or
// that node is joining (a replica move), sorted by id.
func (s *State) PartitionsOf(node uint64) []*pb.Partition {
	var out []*pb.Partition
	for _, p := range s.m.Partitions {
		if slices.Contains(p.Replicas, node) || (p.Joining == node && node != 0) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *pb.Partition) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// Apply applies one command. The result is the id of what the command created or
// touched (node id, volume id), or nil.
func (s *State) Apply(cmd *pb.Command) (any, error) {
	var (
		res     any
		changed bool
		err     error
	)
	switch op := cmd.GetOp().(type) {
	case *pb.Command_Init:
		changed, err = s.initCluster(cmd.NowUnixMs, op.Init)
	case *pb.Command_Register:
		res, changed, err = s.register(cmd.NowUnixMs, op.Register)
	case *pb.Command_SetNodeState:
		changed, err = s.setNodeState(cmd.NowUnixMs, op.SetNodeState)
	case *pb.Command_CreateVolume:
		res, err = s.createVolume(cmd.NowUnixMs, op.CreateVolume)
		changed = err == nil
	case *pb.Command_DeleteVolume:
		err = s.deleteVolume(op.DeleteVolume)
		changed = err == nil
	case *pb.Command_AddMetaPartition:
		res, err = s.addMetaPartition(op.AddMetaPartition)
		changed = err == nil
	case *pb.Command_StartMigration:
		err = s.startMigration(cmd.NowUnixMs, op.StartMigration)
		changed = err == nil
	case *pb.Command_AdvanceMigration:
		changed, err = s.advanceMigration(op.AdvanceMigration)
	case *pb.Command_MarkInSync:
		changed, err = s.markInSync(op.MarkInSync)
	case *pb.Command_MoveReplica:
		changed, err = s.moveReplica(op.MoveReplica)
	case *pb.Command_DrainNode:
		changed, err = s.drainNode(op.DrainNode)
	case *pb.Command_AddDataPartitions:
		res, err = s.addDataPartitions(op.AddDataPartitions)
		changed = err == nil
	case *pb.Command_RegisterClient:
		err = s.registerClient(cmd.NowUnixMs, op.RegisterClient)
		changed = err == nil
	case *pb.Command_Revoke:
		res, changed, err = s.revoke(cmd.NowUnixMs, op.Revoke)
	case *pb.Command_SetQuota:
		res, changed, err = s.setQuota(cmd.NowUnixMs, op.SetQuota)
	case *pb.Command_RemoveQuota:
		res, err = s.removeQuota(op.RemoveQuota)
		changed = err == nil
	case *pb.Command_RotateGrantKey:
		changed, err = s.rotateGrantKey(op.RotateGrantKey)
	default:
		return nil, fmt.Errorf("%w command: unknown operation %T", ErrInvalid, op)
	}
	if err != nil {
		return nil, err
	}
	if changed {
		s.m.Epoch++
	}
	return res, nil
}

func (s *State) initCluster(now int64, c *pb.InitCluster) (bool, error) {
	switch {
	case c.ClusterId == "":
		return false, fmt.Errorf("%w init: empty cluster id", ErrInvalid)
	case s.m.ClusterId == c.ClusterId:
		return false, nil
	case s.m.ClusterId != "":
		return false, fmt.Errorf("%w: cluster already initialised as %s", ErrConflict, s.m.ClusterId)
	}
	s.m.ClusterId = c.ClusterId
	s.m.CreatedUnixMs = now
	return true, nil
}

func (s *State) register(now int64, r *pb.RegisterNode) (uint64, bool, error) {
	if r.Uuid == "" || r.Addr == "" {
		return 0, false, fmt.Errorf("%w registration: uuid and address are required", ErrInvalid)
	}
	if r.Role != pb.Role_ROLE_META && r.Role != pb.Role_ROLE_DATA {
		return 0, false, fmt.Errorf("%w registration: role %v cannot register as a node", ErrInvalid, r.Role)
	}
	if n := s.NodeByUUID(r.Uuid); n != nil {
		if r.RequestedId != 0 && r.RequestedId != n.Id {
			return 0, false, fmt.Errorf("%w: node %s is registered as id %d, not %d", ErrConflict, r.Uuid, n.Id, r.RequestedId)
		}
		if n.Role != r.Role {
			return 0, false, fmt.Errorf("%w: node %d is a %v node, not %v", ErrConflict, n.Id, n.Role, r.Role)
		}
		if err := s.checkAddrFree(r.Addr, n.Id); err != nil {
			return 0, false, err
		}
		changed := n.Addr != r.Addr || n.Zone != r.Zone || n.DataAddr != r.DataAddr || n.CertName != r.CertName
		n.Addr, n.Zone, n.DataAddr, n.CertName = r.Addr, r.Zone, r.DataAddr, r.CertName
		return n.Id, changed, nil
	}
	id := s.m.NextNodeId
	if r.RequestedId != 0 {
		if other, ok := s.m.Nodes[r.RequestedId]; ok {
			return 0, false, fmt.Errorf("%w: node id %d is registered to another node (%s at %s)", ErrExists, r.RequestedId, other.Uuid, other.Addr)
		}
		id = r.RequestedId
	}
	if err := s.checkAddrFree(r.Addr, id); err != nil {
		return 0, false, err
	}
	s.m.Nodes[id] = &pb.Node{
		Id: id, Uuid: r.Uuid, Role: r.Role, Addr: r.Addr, Zone: r.Zone, DataAddr: r.DataAddr, CertName: r.CertName,
		State: pb.NodeState_NODE_STATE_ALIVE, RegisteredUnixMs: now, StateChangedUnixMs: now,
	}
	if id >= s.m.NextNodeId {
		s.m.NextNodeId = id + 1
	}
	return id, true, nil
}

// checkAddrFree refuses an address held by another node that is not out: two live
// nodes cannot listen on one address, so the newcomer is a misconfiguration.
func (s *State) checkAddrFree(addr string, self uint64) error {
	for _, n := range s.m.Nodes {
		if n.Id != self && n.Addr == addr && n.State != pb.NodeState_NODE_STATE_OUT {
			return fmt.Errorf("%w: address %s is registered to node %d", ErrConflict, addr, n.Id)
		}
	}
	return nil
}

func (s *State) setNodeState(now int64, c *pb.SetNodeState) (bool, error) {
	n, ok := s.m.Nodes[c.NodeId]
	if !ok {
		return false, fmt.Errorf("node %d: %w", c.NodeId, ErrNotFound)
	}
	switch c.State {
	case pb.NodeState_NODE_STATE_ALIVE, pb.NodeState_NODE_STATE_DOWN, pb.NodeState_NODE_STATE_OUT:
	default:
		return false, fmt.Errorf("%w node state %v", ErrInvalid, c.State)
	}
	if n.State == c.State {
		return false, nil
	}
	n.State = c.State
	n.StateChangedUnixMs = now
	if n.Role == pb.Role_ROLE_DATA {
		s.chainsFollow(n.Id, c.State == pb.NodeState_NODE_STATE_ALIVE)
	}
	return true, nil
}

// chainsFollow takes a data node out of the write chains of its partitions
// when it stops being alive, and puts it back when it is alive again
// (pkg/replicaset). A changed partition takes the epoch this command gives
// the map, so writers with an older view of its chain are refused.
func (s *State) chainsFollow(node uint64, alive bool) {
	for _, p := range s.PartitionsOf(node) {
		if p.Kind != pb.PartitionKind_PARTITION_KIND_DATA {
			continue
		}
		var changed bool
		if alive {
			changed = replicaset.NodeUp(p, node)
		} else {
			changed = replicaset.NodeDown(p, node)
		}
		if changed {
			p.Epoch = s.m.Epoch + 1
		}
	}
}

// moveReplica records, completes or abandons a replica move.
//
// START needs from to be a replica, to an alive node of the partition's role
// that holds no replica of it, and no move in progress (repeating the same
// START is a no-op). DONE replaces from by to in replicas, at the same place
// for a meta partition (its order is only a leader preference) and at the
// end, stale, for a data partition (its extents may still be catching up;
// pkg/replicaset). ABORT forgets the move in progress.
func (s *State) moveReplica(c *pb.MoveReplica) (bool, error) {
	p, ok := s.m.Partitions[c.PartitionId]
	if !ok {
		return false, fmt.Errorf("partition %d: %w", c.PartitionId, ErrNotFound)
	}
	inProgress := p.Joining != 0
	same := p.Joining == c.To && p.Leaving == c.From
	switch c.Phase {
	case pb.MovePhase_MOVE_PHASE_START:
		if same {
			return false, nil
		}
		if inProgress {
			return false, fmt.Errorf("%w partition %d: moving %d to %d already", ErrConflict, p.Id, p.Leaving, p.Joining)
		}
		if !slices.Contains(p.Replicas, c.From) {
			return false, fmt.Errorf("%w partition %d: node %d holds no replica of it", ErrInvalid, p.Id, c.From)
		}
		if slices.Contains(p.Replicas, c.To) {
			return false, fmt.Errorf("%w partition %d: node %d holds a replica already", ErrInvalid, p.Id, c.To)
		}
		n, ok := s.m.Nodes[c.To]
		role := pb.Role_ROLE_META
		if p.Kind == pb.PartitionKind_PARTITION_KIND_DATA {
			role = pb.Role_ROLE_DATA
		}
		if !ok || n.Role != role || n.State != pb.NodeState_NODE_STATE_ALIVE {
			return false, fmt.Errorf("%w partition %d: node %d is not an alive %s node", ErrInvalid, p.Id, c.To, strings.ToLower(strings.TrimPrefix(role.String(), "ROLE_")))
		}
		p.Joining, p.Leaving = c.To, c.From
	case pb.MovePhase_MOVE_PHASE_DONE:
		if !inProgress && slices.Contains(p.Replicas, c.To) && !slices.Contains(p.Replicas, c.From) {
			return false, nil // done already
		}
		if !inProgress || !same {
			return false, fmt.Errorf("%w partition %d: no move of %d to %d in progress", ErrConflict, p.Id, c.From, c.To)
		}
		i := slices.Index(p.Replicas, c.From)
		if i < 0 {
			// START checked it; a state that says otherwise was not made
			// by these rules, and is refused rather than trusted.
			return false, fmt.Errorf("%w partition %d: node %d holds no replica of it", ErrInvalid, p.Id, c.From)
		}
		if p.Kind == pb.PartitionKind_PARTITION_KIND_DATA {
			p.Replicas = append(slices.Delete(p.Replicas, i, i+1), c.To)
			p.Down = slices.DeleteFunc(p.Down, func(r uint64) bool { return r == c.From })
			p.Stale = append(slices.DeleteFunc(p.Stale, func(r uint64) bool { return r == c.From }), c.To)
			replicaset.Normalize(p)
		} else {
			p.Replicas[i] = c.To
		}
		p.Joining, p.Leaving = 0, 0
	case pb.MovePhase_MOVE_PHASE_ABORT:
		if !inProgress || !same {
			return false, nil
		}
		p.Joining, p.Leaving = 0, 0
	default:
		return false, fmt.Errorf("%w move phase %v", ErrInvalid, c.Phase)
	}
	p.Epoch = s.m.Epoch + 1
	return true, nil
}

// drainNode starts or cancels decommissioning a node.
func (s *State) drainNode(c *pb.DrainNode) (bool, error) {
	n, ok := s.m.Nodes[c.NodeId]
	if !ok {
		return false, fmt.Errorf("node %d: %w", c.NodeId, ErrNotFound)
	}
	if n.Draining == c.Drain {
		return false, nil
	}
	n.Draining = c.Drain
	return true, nil
}

// markInSync clears a replica's stale mark (replicaset.InSync).
func (s *State) markInSync(c *pb.MarkInSync) (bool, error) {
	p, ok := s.m.Partitions[c.PartitionId]
	if !ok || p.Kind != pb.PartitionKind_PARTITION_KIND_DATA {
		return false, fmt.Errorf("data partition %d: %w", c.PartitionId, ErrNotFound)
	}
	if !replicaset.InSync(p, c.NodeId, c.Epoch) {
		return false, nil
	}
	p.Epoch = s.m.Epoch + 1
	return true, nil
}

// addDataPartitions appends c's data partitions to the volume and returns
// the id of the first. All or none are added.
func (s *State) addDataPartitions(c *pb.AddDataPartitions) (uint64, error) {
	v := s.VolumeByName(c.Volume)
	if v == nil {
		return 0, fmt.Errorf("volume %q: %w", c.Volume, ErrNotFound)
	}
	if len(c.Partitions) == 0 || len(c.Partitions) > MaxPartitionsPerOp {
		return 0, fmt.Errorf("%w add data partitions to %q: %d partitions, want 1..%d", ErrInvalid, c.Volume, len(c.Partitions), MaxPartitionsPerOp)
	}
	for i, np := range c.Partitions {
		if np.GetKind() != pb.PartitionKind_PARTITION_KIND_DATA {
			return 0, fmt.Errorf("%w add data partitions to %q: partition %d is not a data partition", ErrInvalid, c.Volume, i)
		}
		if err := s.checkReplicas(np, int(v.Replicas)); err != nil {
			return 0, fmt.Errorf("add data partitions to %q: partition %d: %w", c.Volume, i, err)
		}
	}
	first := s.m.NextPartitionId
	for _, np := range c.Partitions {
		p := &pb.Partition{Id: s.m.NextPartitionId, VolumeId: v.Id, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: slices.Clone(np.Replicas)}
		s.m.NextPartitionId++
		s.m.Partitions[p.Id] = p
		v.DataPartitions = append(v.DataPartitions, p.Id)
	}
	return first, nil
}

func (s *State) createVolume(now int64, c *pb.CreateVolume) (uint64, error) {
	if err := ValidateVolumeName(c.Name); err != nil {
		return 0, err
	}
	if s.VolumeByName(c.Name) != nil {
		return 0, fmt.Errorf("volume %q: %w", c.Name, ErrExists)
	}
	if c.Replicas < 1 {
		return 0, fmt.Errorf("%w volume %q: replicas must be at least 1", ErrInvalid, c.Name)
	}
	if len(c.Partitions) > MaxPartitionsPerOp {
		return 0, fmt.Errorf("%w volume %q: %d partitions exceed the limit of %d", ErrInvalid, c.Name, len(c.Partitions), MaxPartitionsPerOp)
	}
	var metas, datas int
	for i, p := range c.Partitions {
		if err := s.checkReplicas(p, int(c.Replicas)); err != nil {
			return 0, fmt.Errorf("volume %q partition %d: %w", c.Name, i, err)
		}
		if p.Kind == pb.PartitionKind_PARTITION_KIND_META {
			metas++
		} else {
			datas++
		}
	}
	if metas == 0 || datas == 0 {
		return 0, fmt.Errorf("%w volume %q: needs at least one meta and one data partition", ErrInvalid, c.Name)
	}
	slots := c.SlotCount
	if slots == 0 {
		slots = DefaultSlotCount
	}
	if slots < uint32(metas) || slots > MaxSlotCount {
		return 0, fmt.Errorf("%w volume %q: slot count %d must be between the meta partition count %d and %d", ErrInvalid, c.Name, slots, metas, MaxSlotCount)
	}
	if err := ValidateChunkLayout(c.DefaultLayout, c.Chunking); err != nil {
		return 0, fmt.Errorf("volume %q: %w", c.Name, err)
	}

	v := &pb.Volume{
		Id: s.m.NextVolumeId, Name: c.Name, CreatedUnixMs: now,
		CapacityBytes: c.CapacityBytes, Replicas: c.Replicas,
		RoutingVersion: 1,
		DefaultLayout:  c.DefaultLayout,
		// Stored explicitly, never as nil: the cut points of the volume's
		// chunks must not change if the default does.
		Chunking: ChunkLayoutOf(ChunkConfig(c.Chunking)),
	}
	s.m.NextVolumeId++
	metaIndex := uint64(0)
	for _, np := range c.Partitions {
		p := &pb.Partition{
			Id: s.m.NextPartitionId, VolumeId: v.Id, Kind: np.Kind,
			Replicas: slices.Clone(np.Replicas),
		}
		s.m.NextPartitionId++
		if np.Kind == pb.PartitionKind_PARTITION_KIND_META {
			p.InodeStart = metaIndex*InodeRangeStep + 1
			if int(metaIndex) < metas-1 {
				p.InodeEnd = (metaIndex + 1) * InodeRangeStep
			}
			metaIndex++
			v.MetaPartitions = append(v.MetaPartitions, p.Id)
		} else {
			v.DataPartitions = append(v.DataPartitions, p.Id)
		}
		s.m.Partitions[p.Id] = p
	}
	// The chunk index lives on the first meta partitions for the volume's
	// life: a fingerprint's shard must never move, and growth only adds
	// partitions for names.
	v.ChunkIndexPartitions = slices.Clone(v.MetaPartitions)
	v.SlotOwners = make([]uint64, slots)
	for i := range v.SlotOwners {
		// Contiguous slot ranges per meta partition: growing the volume later moves
		// whole slots, and neighbouring slots stay together.
		v.SlotOwners[i] = v.MetaPartitions[uint64(i)*uint64(metas)/uint64(slots)]
	}
	s.m.Volumes[v.Id] = v
	return v.Id, nil
}

func (s *State) checkReplicas(p *pb.NewPartition, want int) error {
	var role pb.Role
	switch p.Kind {
	case pb.PartitionKind_PARTITION_KIND_META:
		role = pb.Role_ROLE_META
	case pb.PartitionKind_PARTITION_KIND_DATA:
		role = pb.Role_ROLE_DATA
	default:
		return fmt.Errorf("%w partition kind %v", ErrInvalid, p.Kind)
	}
	if len(p.Replicas) != want {
		return fmt.Errorf("%w: %d replicas, want %d", ErrInvalid, len(p.Replicas), want)
	}
	for i, id := range p.Replicas {
		n, ok := s.m.Nodes[id]
		if !ok {
			return fmt.Errorf("replica node %d: %w", id, ErrNotFound)
		}
		if n.Role != role {
			return fmt.Errorf("%w: replica node %d is a %v node", ErrInvalid, id, n.Role)
		}
		if n.State == pb.NodeState_NODE_STATE_OUT {
			return fmt.Errorf("%w: replica node %d is out", ErrInvalid, id)
		}
		if slices.Contains(p.Replicas[:i], id) {
			return fmt.Errorf("%w: node %d appears twice in one replica set", ErrInvalid, id)
		}
	}
	return nil
}

func (s *State) deleteVolume(c *pb.DeleteVolume) error {
	v := s.VolumeByName(c.Name)
	if v == nil {
		return fmt.Errorf("volume %q: %w", c.Name, ErrNotFound)
	}
	for _, id := range v.MetaPartitions {
		delete(s.m.Partitions, id)
	}
	for _, id := range v.DataPartitions {
		delete(s.m.Partitions, id)
	}
	delete(s.m.Volumes, v.Id)
	return nil
}
