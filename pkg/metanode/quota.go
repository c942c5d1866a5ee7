package metanode

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Directory quotas (docs/design.md "Directory quotas"). A quota's
// directory D is an inode number; an inode counts toward every quota whose
// directory lies above it: walking up from its parent pointer
// (metapb.Inode.parent) meets D. Before a Txn is proposed, the leader of
// the partition names on each op that may change an inode's footprint the
// quotas the inode counts toward (Op.quotas, and Op.quotas_to for a file
// renamed into another directory), and the partition charges the change
// at apply (pkg/metapartition/quota.go). The walk reads directories'
// pointers from this partition, the namespace replica or their homes, as
// a path-restricted client's check does (subtree.go); a volume without
// quotas walks nothing.
//
// Enforcement is soft, as in CephFS and JuiceFS: an op that would add an
// inode, or grow a file, below a quota whose usage is at its limit is
// refused with EDQUOT. The usage is the master's sum of the partitions'
// reports from the last heartbeat, plus what this partition charged since
// it reported; other partitions' charges of the last second or so are not
// seen, so concurrent writers can pass a limit by about what they write in
// a heartbeat interval.
//
// Which inode an op charges stays consistent between the charges of its
// life (create, growth, eviction) because an inode's quotas change only by
// a rename, which moves the charge with the pointer (files) or is refused
// across quota boundaries before it starts (directories: EXDEV, by the
// client, as CephFS does). Quotas set on a directory with content start
// from a recount ('cairn quota set' and 'cairn quota check').

// The usage the leaders enforce against is at most a heartbeat old, and
// a node whose partitions charge quotas sends its heartbeats early (every
// 100 ms), so the other partitions' charges of the last fraction of a
// second are what a limit can be passed by.

// quotaTable is the node's copy of the cluster's quotas, replaced whole at
// every heartbeat. Safe for concurrent use.
type quotaTable struct {
	mu    sync.RWMutex
	byVol map[uint64]map[uint64]*pb.QuotaState // volume id -> directory ino -> quota
	byID  map[uint64]*pb.QuotaState
}

// SetQuotas implements node.QuotaEnforcer.
func (h *Host) SetQuotas(qs []*pb.QuotaState) {
	byVol := map[uint64]map[uint64]*pb.QuotaState{}
	byID := make(map[uint64]*pb.QuotaState, len(qs))
	for _, q := range qs {
		if q.GetQuota().GetId() == 0 {
			continue
		}
		m := byVol[q.VolumeId]
		if m == nil {
			m = map[uint64]*pb.QuotaState{}
			byVol[q.VolumeId] = m
		}
		m[q.Quota.Ino] = q
		byID[q.Quota.Id] = q
	}
	h.quotas.mu.Lock()
	h.quotas.byVol, h.quotas.byID = byVol, byID
	h.quotas.mu.Unlock()
	// What the master's sums include of this node's partitions: the
	// counts of the report just before this answer.
	h.mu.RLock()
	for _, p := range h.parts {
		p.quotaSummed.Store(p.quotaReported.Load())
	}
	h.mu.RUnlock()
}

// byID returns quota id's state, nil if the node does not know it.
func (t *quotaTable) byIDOf(id uint64) *pb.QuotaState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byID[id]
}

// volume returns the quotas of a volume by directory; nil when it has none.
func (t *quotaTable) volume(id uint64) map[uint64]*pb.QuotaState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byVol[id]
}

// quotaCounts is a partition's counts by quota id, as reported.
type quotaCounts = map[uint64]metapartition.QuotaUse

// reportQuota fills r with the partition's counts and remembers them.
func (p *partition) reportQuota(mp *metapartition.Partition, r *pb.PartitionReport) {
	use := mp.QuotaUse()
	for id, u := range use {
		r.QuotaUse = append(r.QuotaUse, &pb.QuotaUse{Id: id, Bytes: u.Bytes, Inodes: u.Inodes})
	}
	slices.SortFunc(r.QuotaUse, func(a, b *pb.QuotaUse) int { return cmp.Compare(a.Id, b.Id) })
	p.quotaReported.Store(&use)
}

// quotaPointers are a partition's last reported counts and those the
// master's sums include.
type quotaPointers struct {
	quotaReported atomic.Pointer[quotaCounts]
	quotaSummed   atomic.Pointer[quotaCounts]
}

// estimate is quota q's usage as this partition's leader sees it: the
// master's sum plus what the partition charged since the report it
// includes.
func (p *partition) estimate(mp *metapartition.Partition, q *pb.QuotaState) metapartition.QuotaUse {
	u := metapartition.QuotaUse{Bytes: q.UsedBytes, Inodes: q.UsedInodes}
	now := mp.QuotaUseOf(q.Quota.Id)
	var then metapartition.QuotaUse
	if s := p.quotaSummed.Load(); s != nil {
		then = (*s)[q.Quota.Id]
	}
	return metapartition.QuotaUse{Bytes: u.Bytes + now.Bytes - then.Bytes, Inodes: u.Inodes + now.Inodes - then.Inodes}
}

// quotasAbove returns the ids of the quotas whose directory is dir or lies
// above it, nearest first. An error is a failed read of a pointer; a
// pointer to an inode that no longer exists ends the walk.
func (s *service) quotasAbove(ctx context.Context, p *partition, tab map[uint64]*pb.QuotaState, dir uint64) ([]uint64, error) {
	var ids []uint64
	cur := dir
	for range maxDepth {
		if q := tab[cur]; q != nil {
			ids = append(ids, q.Quota.Id)
		}
		if cur == RootIno || cur == 0 || len(ids) == metapartition.MaxQuotasPerOp {
			return ids, nil
		}
		up, ok := s.knownParent(p, cur)
		if !ok {
			var err error
			if up, ok, err = s.fetchParent(ctx, p, cur); err != nil {
				return ids, fmt.Errorf("quotas above %d: parent of %d: %w", dir, cur, err)
			}
			if !ok {
				return ids, nil
			}
		}
		cur = up
	}
	return ids, fmt.Errorf("quotas above %d: deeper than %d directories", dir, maxDepth)
}

// chargeQuotas names on every op of txn that may change an inode's
// footprint the quotas it counts toward, replacing what the sender put
// there, and refuses (a result with EDQUOT) a Txn that would add an inode
// or bytes below a quota at its limit. It runs on the leader before the
// Txn is proposed.
func (s *service) chargeQuotas(ctx context.Context, p *partition, txn *metapb.Txn) (*metapb.TxnResult, error) {
	for _, op := range txn.GetOps() {
		op.Quotas, op.QuotasTo, op.QuotasMove = nil, nil, false
	}
	tab := s.h.quotas.volume(p.volume)
	if len(tab) == 0 {
		return nil, nil
	}
	var createdParent uint64 // the parent of the Txn's first CreateInode
	for i, op := range txn.GetOps() {
		ino, creates, ok := metapartition.ChargedIno(op)
		if !ok {
			continue
		}
		var (
			parent uint64
			cur    *metapb.Inode
		)
		switch {
		case creates:
			parent = op.GetCreateInode().GetParent()
			if createdParent == 0 {
				createdParent = parent
			}
		case ino == 0:
			parent = createdParent
		default:
			p.sm.read(func(mp *metapartition.Partition) {
				if in, e := mp.GetInode(ino); e == metapb.OK {
					cur = in
				}
			})
			if cur == nil {
				continue // the op fails on it, or the inode is not here
			}
			parent = cur.GetParent()
		}
		if parent == 0 {
			continue // a volume's root
		}
		qs, err := s.quotasAbove(ctx, p, tab, parent)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Charged to the quotas found; a recount repairs the rest.
			s.h.log.Warn("quota walk incomplete", "partition", p.id, "op", i, "err", err)
		}
		op.Quotas = qs
		if len(qs) > 0 && s.h.env.Refresh != nil {
			// Report the new counts soon (at most one early heartbeat per
			// 100 ms): the other leaders see them sooner, and so do we
			// theirs.
			s.h.env.Refresh()
		}
		if sa := op.GetSetattr(); sa != nil && sa.GetValid()&uint32(metapb.SetattrValid_SETATTR_PARENT) != 0 && cur != nil {
			to, err := s.quotasAbove(ctx, p, tab, sa.GetParent())
			if err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !slices.Equal(qs, to) {
				op.QuotasTo, op.QuotasMove = to, true
			}
		}
		if r := s.overQuota(p, op, cur); r != nil {
			return r, nil
		}
	}
	return nil, nil
}

// overQuota refuses op when it adds an inode, or grows a file, below a
// quota whose usage would pass its limit.
func (s *service) overQuota(p *partition, op *metapb.Op, cur *metapb.Inode) *metapb.TxnResult {
	var addInodes, addBytes int64
	switch o := op.GetOp().(type) {
	case *metapb.Op_CreateInode:
		addInodes = 1
	case *metapb.Op_AppendExtents:
		if cur != nil && o.AppendExtents.GetSize() > cur.GetSize() {
			addBytes = int64(o.AppendExtents.GetSize() - cur.GetSize())
		}
	case *metapb.Op_Setattr:
		if cur != nil && o.Setattr.GetValid()&uint32(metapb.SetattrValid_SETATTR_SIZE) != 0 && o.Setattr.GetSize() > cur.GetSize() {
			addBytes = int64(o.Setattr.GetSize() - cur.GetSize())
		}
	case *metapb.Op_SpliceChunks:
		// The growth of a splice is known only at apply: refused when
		// the quota is full already.
		if len(o.SpliceChunks.GetChunks()) > 0 {
			addBytes = 1
		}
	}
	if addInodes == 0 && addBytes == 0 {
		return nil
	}
	for _, id := range op.Quotas {
		q := s.h.quotas.byIDOf(id)
		if q == nil {
			continue
		}
		var u metapartition.QuotaUse
		p.sm.read(func(mp *metapartition.Partition) { u = p.estimate(mp, q) })
		switch {
		case addInodes > 0 && q.Quota.MaxInodes > 0 && u.Inodes+addInodes > int64(q.Quota.MaxInodes):
			return quotaRefusal(q, "inodes", u.Inodes, q.Quota.MaxInodes)
		case addBytes > 0 && q.Quota.MaxBytes > 0 && u.Bytes+addBytes > int64(q.Quota.MaxBytes):
			return quotaRefusal(q, "bytes", u.Bytes, q.Quota.MaxBytes)
		}
	}
	return nil
}

func quotaRefusal(q *pb.QuotaState, what string, used int64, limit uint64) *metapb.TxnResult {
	return &metapb.TxnResult{Errno: int32(metapb.EDQUOT), Message: fmt.Sprintf(
		"the quota of %s (directory %d) is full: %d of %d %s used", q.Quota.Path, q.Quota.Ino, used, limit, what)}
}
