package metanode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/pki"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Limits on what one call may ask for.
const (
	maxOpsPerTxn  = 64
	maxReadDir    = 4096
	defaultLimit  = 1024
	maxStatsNames = 1024
	// The load balancer counts every exception-table name.
	maxCountNames    = hybridindex.MaxEntries
	defaultScanLimit = 1000
	maxScanLimit     = 10000
)

type service struct {
	metapb.UnimplementedMetaNodeServer
	h *Host
}

// leaderOf returns the partition if this node leads it, else the error that
// sends the caller to the leader.
func (s *service) leaderOf(ctx context.Context, id uint64) (*partition, error) {
	p, err := s.hosted(id)
	if err != nil {
		return nil, err
	}
	leader, isLeader, err := s.h.env.Raft.Leader(multiraft.GroupID(id))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "meta partition %d: %v", id, err)
	}
	if !isLeader {
		return nil, s.toLeader(ctx, id, leader)
	}
	return p, nil
}

// hosted returns partition id, or NOT_FOUND when this node does not host it.
func (s *service) hosted(id uint64) (*partition, error) {
	p := s.h.partition(id)
	if p == nil {
		return nil, status.Errorf(codes.NotFound, "meta partition %d is not on this node", id)
	}
	return p, nil
}

// toLeader is the answer of a replica that does not lead partition id: a
// redirect to leader, or UNAVAILABLE when no leader (0) is known.
func (s *service) toLeader(ctx context.Context, id uint64, leader multiraft.NodeID) error {
	addr := ""
	if leader != 0 {
		addr, _ = s.h.env.Resolve(uint64(leader))
	}
	return redirect.NotLeader(ctx, fmt.Sprintf("meta partition %d", id), addr)
}

// readable is leaderOf plus a read barrier: the partition has applied every
// write acknowledged before this call.
func (s *service) readable(ctx context.Context, id uint64) (*partition, error) {
	p, err := s.hosted(id)
	if err != nil {
		return nil, err
	}
	err = s.h.env.Raft.LeaderReadIndex(ctx, multiraft.GroupID(id))
	var nl *multiraft.NotLeaderError
	switch {
	case err == nil:
		return p, nil
	case errors.As(err, &nl):
		return nil, s.toLeader(ctx, id, nl.Leader)
	}
	return nil, raftStatus(id, err)
}

// raftStatus maps replication errors to codes clients retry on.
func raftStatus(id uint64, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "meta partition %d: %v", id, err)
	case errors.Is(err, errQueueFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return status.Errorf(codes.Unavailable, "meta partition %d: %v", id, err)
}

// Txn replicates one Txn. Its outcome, including a refusal by the
// partition's routing (EWRONGMP, EMOVING), is TxnResult.errno; gRPC errors
// are only for requests that did not reach the state machine.
func (s *service) Txn(ctx context.Context, req *metapb.TxnRequest) (*metapb.TxnResponse, error) {
	ctx = withOrigin(ctx, req.GetTxn().GetOrigin())
	if req.FollowUp {
		s.h.metrics.followUpsIn.Inc()
	} else {
		s.h.metrics.requests.WithLabelValues("txn").Inc()
	}
	if n := len(req.GetTxn().GetOps()); n == 0 || n > maxOpsPerTxn {
		return nil, status.Errorf(codes.InvalidArgument, "a transaction has 1 to %d operations, not %d", maxOpsPerTxn, n)
	}
	if err := checkThen(req); err != nil {
		return nil, err
	}
	p, err := s.leaderOf(ctx, req.PartitionId)
	if err != nil {
		return nil, err
	}
	if r := s.mayChange(ctx, p, req); r != nil {
		return &metapb.TxnResponse{Result: &metapb.TxnResult{Errno: int32(r.errno), Message: r.msg}}, nil
	}
	// The data partitions a client's keys name are checked against this
	// node's cluster map here, before the proposal, never in the apply:
	// replicas holding different maps would apply the entry differently
	// and diverge (datakeys.go).
	if r, err := s.checkDataRefs(ctx, p, req.Txn); r != nil || err != nil {
		if r == nil {
			return nil, err
		}
		s.h.metrics.dataRefsRefused.Inc()
		return &metapb.TxnResponse{Result: &metapb.TxnResult{Errno: int32(r.errno), Message: r.msg}}, nil
	}
	// And only what the client wrote, or may write, itself (grants.go).
	if r, err := s.checkWritten(ctx, p, req); r != nil || err != nil {
		if r == nil {
			return nil, err
		}
		s.h.metrics.dataRefsRefused.Inc()
		return &metapb.TxnResponse{Result: &metapb.TxnResult{Errno: int32(r.errno), Message: r.msg}}, nil
	}
	res, err := p.merger.submit(ctx, req.Txn)
	if err != nil {
		if errors.Is(err, multiraft.ErrNotLeader) {
			// Leadership moved while the request waited: send the caller on.
			return nil, s.redirectAfter(ctx, req.PartitionId, err)
		}
		return nil, raftStatus(req.PartitionId, err)
	}
	resp := &metapb.TxnResponse{Result: res}
	if res.GetErrno() == 0 && len(req.Then) > 0 {
		resp.Then = s.runThen(ctx, p, req.Txn.GetRequestId(), req.Then)
	}
	return resp, nil
}

func (s *service) redirectAfter(ctx context.Context, id uint64, err error) error {
	var nl *multiraft.NotLeaderError
	if errors.As(err, &nl) {
		addr, _ := s.h.env.Resolve(uint64(nl.Leader))
		return redirect.NotLeader(ctx, fmt.Sprintf("meta partition %d", id), addr)
	}
	return raftStatus(id, err)
}

func (s *service) Lookup(ctx context.Context, req *metapb.LookupRequest) (*metapb.LookupResponse, error) {
	if !req.NsFetch {
		s.h.metrics.requests.WithLabelValues("lookup").Inc()
	}
	p, err := s.readable(ctx, req.PartitionId)
	if err != nil {
		return nil, err
	}
	resp := &metapb.LookupResponse{}
	if r := s.mayRead(ctx, p, req.Parent); r != nil {
		resp.Errno = int32(r.errno)
		return resp, nil
	}
	p.sm.read(func(mp *metapartition.Partition) {
		lookup := mp.Lookup
		if req.Pending {
			lookup = mp.LookupPending
		}
		d, ino, e := lookup(req.Parent, string(req.Name))
		if e == metapb.OK && req.NsFetch && mp.Fenced(d.GetIno(), time.Now().UnixNano()) {
			// A coordinator holds the directory: the replica must not
			// learn it until the change is done (FalconFS §4.3).
			d, ino, e = nil, nil, metapb.EBUSY
		}
		resp.Errno, resp.Dentry, resp.Inode = int32(e), d, sameParent(ctx, req.Parent, ino)
		resp.RoutingVersion, _ = mp.RoutingState()
	})
	return resp, nil
}

func (s *service) GetInode(ctx context.Context, req *metapb.GetInodeRequest) (*metapb.GetInodeResponse, error) {
	if !req.NsFetch {
		s.h.metrics.requests.WithLabelValues("get_inode").Inc()
	}
	p, err := s.readable(ctx, req.PartitionId)
	if err != nil {
		return nil, err
	}
	resp := &metapb.GetInodeResponse{}
	if r := s.mayRead(ctx, p, req.Ino); r != nil {
		resp.Errno = int32(r.errno)
		return resp, nil
	}
	p.sm.read(func(mp *metapartition.Partition) {
		ino, e := mp.GetInode(req.Ino)
		if e == metapb.OK && req.NsFetch && mp.Fenced(req.Ino, time.Now().UnixNano()) {
			ino, e = nil, metapb.EBUSY
		}
		if e == metapb.OK && req.Access != 0 && !mayAccess(ctx, req.Cred, ino, req.Access) {
			ino, e = nil, metapb.EACCES
		}
		resp.Errno, resp.Inode = int32(e), ino
	})
	return resp, nil
}

func (s *service) ReadDir(ctx context.Context, req *metapb.ReadDirRequest) (*metapb.ReadDirResponse, error) {
	s.h.metrics.requests.WithLabelValues("read_dir").Inc()
	limit := int(req.Limit)
	if limit <= 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxReadDir)
	p, err := s.readable(ctx, req.PartitionId)
	if err != nil {
		return nil, err
	}
	resp := &metapb.ReadDirResponse{}
	if r := s.mayRead(ctx, p, req.Parent); r != nil {
		resp.Errno = int32(r.errno)
		return resp, nil
	}
	p.sm.read(func(mp *metapartition.Partition) {
		resp.RoutingVersion, resp.RoutingMoving = mp.RoutingState()
		// One more than asked tells whether the listing goes on.
		ds := mp.ReadDir(req.Parent, string(req.After), limit+1)
		if len(ds) > limit {
			ds, resp.More = ds[:limit], true
		}
		for _, d := range ds {
			if d.GetPending() != nil {
				// A rename's new name, not settled: before the rename's
				// commit the listing must not show it (the old name is
				// still there), after it must (the old name is gone), and
				// this partition cannot tell which. The client waits, as
				// lookups of the name do (EMOVING).
				resp.Errno, resp.More = int32(metapb.EMOVING), false
				return
			}
		}
		resp.Dentries = ds
		if req.Plus {
			for _, d := range ds {
				if ino, e := mp.GetInode(d.Ino); e == 0 && sameParent(ctx, req.Parent, ino) != nil {
					resp.Inodes = append(resp.Inodes, ino)
				}
			}
		}
	})
	return resp, nil
}

func (s *service) PartitionStats(ctx context.Context, req *metapb.PartitionStatsRequest) (*metapb.PartitionStatsResponse, error) {
	s.h.metrics.requests.WithLabelValues("partition_stats").Inc()
	if n := len(req.CountNames); n > maxCountNames {
		return nil, status.Errorf(codes.InvalidArgument, "%d names to count, more than %d", n, maxCountNames)
	}
	names := make([]string, len(req.CountNames))
	for i, n := range req.CountNames {
		names[i] = string(n)
	}
	p, err := s.readable(ctx, req.PartitionId)
	if err != nil {
		return nil, err
	}
	k := min(int(req.TopNames), maxStatsNames)
	if daemon.PeerKind(ctx) == pki.KindClient {
		// A client's statfs: counts of its own volume, and no names (the
		// most frequent names of a partition are other tenants' too).
		if !capability.FromContext(ctx).AllowsVolume(p.volume) {
			return nil, status.Errorf(codes.PermissionDenied, "meta partition %d is not in this client's volume", req.PartitionId)
		}
		k, names = 0, nil
	}
	resp := &metapb.PartitionStatsResponse{}
	p.sm.read(func(mp *metapartition.Partition) {
		st := mp.Stats(k, names...)
		resp.Inodes, resp.Dentries, resp.Orphans = uint64(st.Inodes), uint64(st.Dentries), uint64(st.Orphans)
		resp.MaxIno, resp.InodeStart, resp.InodeEnd = st.MaxIno, st.InodeStart, st.InodeEnd
		resp.RoutingVersion, resp.RoutingMoving = st.RoutingVersion, st.RoutingMoving
		resp.MemoryBytes = st.MemoryBytes
		cs := mp.ChunkStats()
		resp.Chunks, resp.ChunkBytes, resp.ChunkRefBytes = uint64(cs.Entries), cs.Bytes, cs.RefBytes
		resp.ZeroRefChunks, resp.DeadChunks, resp.PendingChunkDrops = uint64(cs.ZeroRef), uint64(cs.Dead), uint64(cs.PendingDrops)
		for _, nc := range st.TopNames {
			resp.TopNames = append(resp.TopNames, &metapb.NameCount{Name: []byte(nc.Name), Count: uint64(nc.Count)})
		}
		for _, nc := range st.NamedCounts {
			resp.NamedCounts = append(resp.NamedCounts, &metapb.NameCount{Name: []byte(nc.Name), Count: uint64(nc.Count)})
		}
	})
	if st, err := s.h.env.Raft.Status(multiraft.GroupID(req.PartitionId)); err == nil {
		resp.AppliedIndex = st.Applied
	}
	return resp, nil
}

// Scan pages through a partition's inodes, dentries or chunk index
// entries (dead ones included) in key order, on the leader after a read
// barrier (as Lookup and ReadDir). An unknown kind, or an after_fingerprint
// that is neither empty (from the start) nor chunker.FingerprintSize bytes,
// is errno EINVAL.
func (s *service) Scan(ctx context.Context, req *metapb.ScanRequest) (*metapb.ScanResponse, error) {
	s.h.metrics.requests.WithLabelValues("scan").Inc()
	var afterFP chunker.Fingerprint
	switch req.Kind {
	case metapb.ScanKind_SCAN_KIND_INODES, metapb.ScanKind_SCAN_KIND_DENTRIES:
	case metapb.ScanKind_SCAN_KIND_CHUNKS:
		switch len(req.AfterFingerprint) {
		case 0:
		case len(afterFP):
			copy(afterFP[:], req.AfterFingerprint)
		default:
			return &metapb.ScanResponse{Errno: int32(metapb.EINVAL)}, nil
		}
	default:
		return &metapb.ScanResponse{Errno: int32(metapb.EINVAL)}, nil
	}
	limit := int(req.Limit)
	if limit <= 0 {
		limit = defaultScanLimit
	}
	limit = min(limit, maxScanLimit)
	p, err := s.readable(ctx, req.PartitionId)
	if err != nil {
		return nil, err
	}
	resp := &metapb.ScanResponse{}
	p.sm.read(func(mp *metapartition.Partition) {
		resp.RoutingVersion, _ = mp.RoutingState()
		switch req.Kind {
		case metapb.ScanKind_SCAN_KIND_INODES:
			resp.Inodes, resp.More = mp.ScanInodes(req.AfterIno, limit, req.WithExtents)
		case metapb.ScanKind_SCAN_KIND_DENTRIES:
			resp.Dentries, resp.More = mp.ScanDentries(req.AfterParent, string(req.AfterName), limit, req.NotOwned)
		default:
			resp.Chunks, resp.More = mp.ScanChunks(afterFP, limit)
		}
	})
	if st, err := s.h.env.Raft.Status(multiraft.GroupID(req.PartitionId)); err == nil {
		resp.AppliedIndex = st.Applied
	}
	return resp, nil
}
