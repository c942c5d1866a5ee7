package master

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// Directory quotas. The limits live in the map (Volume.quotas, through
// Raft); the usage is soft state: each meta partition reports what its
// inodes add to each quota (PartitionReport.quota_use) and the leader sums
// the latest reports, one per partition (its leader's when there is one).
// Meta nodes get the quotas with their usage in every heartbeat answer and
// enforce them; GetVolume shows them to clients and the CLI.

func (v *service) SetQuota(ctx context.Context, req *pb.SetQuotaRequest) (*pb.QuotaResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	if req.GetSet().GetQuota() == nil {
		return nil, status.Error(codes.InvalidArgument, "set quota: no quota given")
	}
	res, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_SetQuota{SetQuota: req.Set}})
	if err != nil {
		return nil, toStatus(err)
	}
	q, _ := res.(*pb.Quota)
	v.s.log.Info("quota set", "volume", req.Set.Volume, "path", q.GetPath(), "ino", q.GetIno(), "id", q.GetId(),
		"max_bytes", q.GetMaxBytes(), "max_inodes", q.GetMaxInodes(), "rebase", req.Set.Rebase)
	return &pb.QuotaResponse{Epoch: v.epoch(), Quota: q}, nil
}

func (v *service) RemoveQuota(ctx context.Context, req *pb.RemoveQuotaRequest) (*pb.QuotaResponse, error) {
	if err := v.requireLeader(ctx); err != nil {
		return nil, err
	}
	res, err := v.s.propose(ctx, &pb.Command{Op: &pb.Command_RemoveQuota{RemoveQuota: req.GetRemove()}})
	if err != nil {
		return nil, toStatus(err)
	}
	q, _ := res.(*pb.Quota)
	v.s.log.Info("quota removed", "volume", req.GetRemove().GetVolume(), "path", q.GetPath(), "ino", q.GetIno(), "id", q.GetId())
	return &pb.QuotaResponse{Epoch: v.epoch(), Quota: q}, nil
}

// quotaStates returns the quotas of vols with their usage: base plus the
// counts of the latest report of each of the volume's meta partitions.
func (s *Server) quotaStates(vols []*pb.Volume) []*pb.QuotaState {
	want := map[uint64]bool{}
	for _, vol := range vols {
		if len(vol.Quotas) > 0 {
			for _, id := range vol.MetaPartitions {
				want[id] = true
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	// Per partition the report of its leader, the latest one when two
	// nodes claim to lead (a dead node's last report says it led);
	// without a leader's, any replica's (its counts lag a little).
	type pick struct {
		r  *pb.PartitionReport
		at time.Time
	}
	best := make(map[uint64]pick, len(want))
	s.mu.Lock()
	for _, soft := range s.soft {
		if time.Since(soft.last) > reportFresh {
			continue
		}
		for _, r := range soft.partitions {
			if !want[r.Id] {
				continue
			}
			cur, ok := best[r.Id]
			if !ok || (r.Leader && !cur.r.Leader) || (r.Leader == cur.r.Leader && soft.last.After(cur.at)) {
				best[r.Id] = pick{r, soft.last}
			}
		}
	}
	s.mu.Unlock()
	var out []*pb.QuotaState
	for _, vol := range vols {
		if len(vol.Quotas) == 0 {
			continue
		}
		used := map[uint64]*pb.QuotaUse{}
		known := true
		for _, id := range vol.MetaPartitions {
			b, ok := best[id]
			if !ok {
				known = false
				continue
			}
			r := b.r
			for _, u := range r.QuotaUse {
				sum := used[u.Id]
				if sum == nil {
					sum = &pb.QuotaUse{Id: u.Id}
					used[u.Id] = sum
				}
				sum.Bytes += u.Bytes
				sum.Inodes += u.Inodes
			}
		}
		for _, q := range vol.Quotas {
			st := &pb.QuotaState{Quota: q, VolumeId: vol.Id, UsedBytes: q.BaseBytes, UsedInodes: q.BaseInodes, UsedKnown: known}
			if u := used[q.Id]; u != nil {
				st.UsedBytes += u.Bytes
				st.UsedInodes += u.Inodes
			}
			out = append(out, st)
		}
	}
	return out
}

// allQuotas returns every volume's quotas with their usage (cloned).
func (s *Server) allQuotas() []*pb.QuotaState {
	var vols []*pb.Volume
	s.fsm.read(func(st *clustermap.State) {
		for _, vol := range st.Map().Volumes {
			if len(vol.Quotas) > 0 {
				vols = append(vols, proto.Clone(vol).(*pb.Volume))
			}
		}
	})
	return s.quotaStates(vols)
}

// scopeQuotas keeps, for a path-restricted client, the quotas of its
// subtree: the others name directories it may not see.
func scopeQuotas(ctx context.Context, qs []*pb.QuotaState) []*pb.QuotaState {
	c := capability.FromContext(ctx)
	if !c.Subtree() {
		return qs
	}
	out := qs[:0]
	for _, q := range qs {
		if q.Quota.Ino == c.RootIno || strings.HasPrefix(q.Quota.Path, c.Path+"/") {
			out = append(out, q)
		}
	}
	return out
}
