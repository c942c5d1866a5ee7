package client

import (
	"context"
	"slices"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Directory quotas as the SDK sees them: the quotas come with the
// volume's usage from the master (capacity.go's poll), and serve two
// things here. statfs of a directory with a quota (the root of a mount
// made at it) shows the quota's limits and usage, as CephFS and JuiceFS
// do. And a directory rename between directories under different quotas
// is refused with EXDEV before it starts (CephFS's rule; mv then copies):
// the meta nodes move a renamed file's charge with it, but a directory's
// whole subtree would have to be recounted. Hard links follow the same
// rule (link(2), and the rename of a file with several links, EXDEV
// across quotas): a file counts toward the quotas above the directory of
// its parent pointer, so all its names must lie under the same quotas for
// a walk of any quota directory to count it where it is charged.

// quotaMaxAge is how old the quota list may be for a rename's check: a
// quota set since is seen within that time.
const quotaMaxAge = 2 * time.Second

// Quotas returns the volume's quotas with their usage, fresh from the
// master.
func (v *Volume) Quotas(ctx context.Context) ([]*pb.QuotaState, error) {
	if err := v.fetchUsage(ctx); err != nil {
		return nil, transportErr("quotas", err)
	}
	v.space.mu.Lock()
	defer v.space.mu.Unlock()
	return v.space.resp.GetQuotas(), nil
}

// quotaDirs returns the directories with quotas, from an answer at most
// quotaMaxAge old.
func (v *Volume) quotaDirs(ctx context.Context, op string) (map[uint64]bool, error) {
	u := &v.space
	u.mu.Lock()
	stale := u.resp == nil || time.Since(u.at) > quotaMaxAge
	u.mu.Unlock()
	if stale {
		if err := v.fetchUsage(ctx); err != nil {
			return nil, transportErr(op, err)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	qs := u.resp.GetQuotas()
	if len(qs) == 0 {
		return nil, nil
	}
	dirs := make(map[uint64]bool, len(qs))
	for _, q := range qs {
		dirs[q.GetQuota().GetIno()] = true
	}
	return dirs, nil
}

// quotasAbove returns the quota directories at or above dir, nearest
// first, by walking parent pointers.
func (v *Volume) quotasAbove(ctx context.Context, op string, dirs map[uint64]bool, dir uint64) ([]uint64, error) {
	var out []uint64
	for range maxWalkDepth {
		if dirs[dir] {
			out = append(out, dir)
		}
		if dir == RootIno || dir == 0 {
			return out, nil
		}
		in, err := v.getInode(ctx, op, dir)
		if err != nil {
			return nil, err
		}
		dir = in.GetParent()
	}
	return nil, errnoErr(op, syscall.ELOOP, "directory chain above %d is deeper than %d", dir, maxWalkDepth)
}

// quotaMove refuses with EXDEV the move of a directory, or of a file with
// several links, named by d from oldParent to newParent when the two lie
// under different quotas.
func (v *Volume) quotaMove(ctx context.Context, d *metapb.Dentry, oldParent, newParent uint64) error {
	if d == nil {
		return nil
	}
	dirs, err := v.quotaDirs(ctx, "rename")
	if err != nil || len(dirs) == 0 {
		return err
	}
	if !isDirType(d.GetType()) {
		in, err := v.getInode(ctx, "rename", d.GetIno())
		if err != nil || in.GetNlink() <= 1 {
			return err
		}
	}
	return v.sameQuotas(ctx, "rename", d.GetIno(), oldParent, newParent)
}

// sameQuotas refuses op with EXDEV when the directories oldParent and
// newParent lie under different quotas (ino is what would move).
func (v *Volume) sameQuotas(ctx context.Context, op string, ino, oldParent, newParent uint64) error {
	dirs, err := v.quotaDirs(ctx, op)
	if err != nil || len(dirs) == 0 {
		return err
	}
	from, err := v.quotasAbove(ctx, op, dirs, oldParent)
	if err != nil {
		return err
	}
	to, err := v.quotasAbove(ctx, op, dirs, newParent)
	if err != nil {
		return err
	}
	if !slices.Equal(from, to) {
		return errnoErr(op, syscall.EXDEV, "inode %d would move or be linked between directory quotas (%v to %v)", ino, from, to)
	}
	return nil
}

// QuotaOf returns the quota on directory ino with its usage, fresh from
// the master; nil if the directory has none.
func (v *Volume) QuotaOf(ctx context.Context, ino uint64) (*pb.QuotaState, error) {
	qs, err := v.Quotas(ctx)
	if err != nil {
		return nil, err
	}
	return quotaIn(qs, ino), nil
}

// quotaIn returns the quota of qs on directory ino, nil if none.
func quotaIn(qs []*pb.QuotaState, ino uint64) *pb.QuotaState {
	for _, q := range qs {
		if q.GetQuota().GetIno() == ino {
			return q
		}
	}
	return nil
}

// cachedQuotaOf is QuotaOf from the latest answer the volume holds (statfs
// has just refreshed it).
func (v *Volume) cachedQuotaOf(ino uint64) *pb.QuotaState {
	v.space.mu.Lock()
	defer v.space.mu.Unlock()
	return quotaIn(v.space.resp.GetQuotas(), ino)
}

// quotaFigures narrows statfs figures to the quota q: its limits (where
// set) as the totals, its usage as what is used.
func quotaFigures(s *StatFS, q *pb.QuotaState) {
	if limit := q.GetQuota().GetMaxBytes(); limit > 0 {
		used := uint64(max(q.GetUsedBytes(), 0))
		free := (limit - min(used, limit)) / statfsBlock
		s.Blocks = (limit + statfsBlock - 1) / statfsBlock
		s.BlocksFree, s.BlocksAvail = min(free, s.BlocksFree), min(free, s.BlocksAvail)
	}
	if limit := q.GetQuota().GetMaxInodes(); limit > 0 {
		used := uint64(max(q.GetUsedInodes(), 0))
		s.Files, s.FilesFree = min(used, limit), limit-min(used, limit)
	}
}

// Usage is what lies below a directory, as its quota counts it: every
// inode below it (not the directory itself) once, however many names it
// has there, and the apparent sizes of the regular files and symbolic
// links among them.
type Usage struct {
	Bytes  int64
	Inodes int64
}

// DirUsage walks the tree below directory dir and returns its Usage, the
// recount that 'cairn quota check' compares with a quota's counts.
// progress, if not nil, is called with the inodes counted so far every
// 10,000 inodes. The walk is not a snapshot: changes made meanwhile may be
// counted or not.
func (v *Volume) DirUsage(ctx context.Context, dir uint64, progress func(inodes int64)) (Usage, error) {
	var (
		u     Usage
		seen  = map[uint64]bool{} // inodes with several links, counted once
		queue = []uint64{dir}
	)
	for len(queue) > 0 {
		d := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		cursor := ""
		for {
			entries, more, err := v.ReadDirPlus(ctx, d, cursor, 1000)
			if err != nil {
				if isErrno(err, syscall.ENOENT) && d != dir {
					break // removed while walking
				}
				return u, err
			}
			for _, e := range entries {
				cursor = e.Name
				if e.Name == "." || e.Name == ".." || e.Attr == nil {
					continue
				}
				a := e.Attr
				if a.Nlink > 1 && !a.IsDir() {
					if seen[a.Ino] {
						continue
					}
					seen[a.Ino] = true
				}
				u.Inodes++
				switch a.Type() {
				case syscall.S_IFREG, syscall.S_IFLNK:
					u.Bytes += int64(a.Size)
				case syscall.S_IFDIR:
					queue = append(queue, a.Ino)
				}
				if progress != nil && u.Inodes%10_000 == 0 {
					progress(u.Inodes)
				}
			}
			if !more || len(entries) == 0 {
				break
			}
		}
	}
	return u, nil
}

// SetQuota sets the limits of the quota on directory ino (path is shown
// by 'cairn quota list'), creating it if the directory has none; 0 is no
// limit. It needs an admin identity. A new quota counts what is below the
// directory from then on: for a directory with content, recount it
// ('cairn quota check --repair') once every meta node has heard of the
// quota.
func (v *Volume) SetQuota(ctx context.Context, ino uint64, path string, maxBytes, maxInodes uint64) (*pb.Quota, error) {
	var resp *pb.QuotaResponse
	err := v.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.SetQuota(ctx, &pb.SetQuotaRequest{Set: &pb.SetQuota{Volume: v.name,
			Quota: &pb.Quota{Ino: ino, Path: path, MaxBytes: maxBytes, MaxInodes: maxInodes}}}, o...)
		return err
	})
	if err != nil {
		return nil, transportErr("set quota", err)
	}
	v.dropUsage()
	return resp.GetQuota(), nil
}

// RemoveQuota removes the quota on directory ino; ENOENT if it has none.
func (v *Volume) RemoveQuota(ctx context.Context, ino uint64) error {
	err := v.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.RemoveQuota(ctx, &pb.RemoveQuotaRequest{Remove: &pb.RemoveQuota{Volume: v.name, Ino: ino}}, o...)
		return err
	})
	if status.Code(err) == codes.NotFound {
		return errnoErr("remove quota", syscall.ENOENT, "directory %d has no quota", ino)
	}
	if err != nil {
		return transportErr("remove quota", err)
	}
	v.dropUsage()
	return nil
}

// RebaseQuota corrects the usage of quota q (as read from Quotas) so that
// it reads found: the repair of a recount. It fails if the quota was
// removed or set again since q was read.
func (v *Volume) RebaseQuota(ctx context.Context, q *pb.QuotaState, found Usage) error {
	// The partitions' sum is used - base; the new base makes it found.
	base := Usage{Bytes: found.Bytes - (q.GetUsedBytes() - q.GetQuota().GetBaseBytes()), Inodes: found.Inodes - (q.GetUsedInodes() - q.GetQuota().GetBaseInodes())}
	err := v.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.SetQuota(ctx, &pb.SetQuotaRequest{Set: &pb.SetQuota{
			Volume: v.name, Rebase: true, ExpectId: q.GetQuota().GetId(), LimitsOnly: true,
			Quota: &pb.Quota{Ino: q.GetQuota().GetIno(), BaseBytes: base.Bytes, BaseInodes: base.Inodes},
		}}, o...)
		return err
	})
	if err != nil {
		return transportErr("rebase quota", err)
	}
	v.dropUsage()
	return nil
}

// dropUsage makes the next look at the volume's usage and quotas ask the
// master.
func (v *Volume) dropUsage() {
	v.space.mu.Lock()
	v.space.at = time.Time{}
	v.space.mu.Unlock()
}
