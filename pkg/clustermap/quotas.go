package clustermap

import (
	"fmt"
	"slices"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"google.golang.org/protobuf/proto"
)

// MaxQuotasPerVolume bounds a volume's directory quotas, so that the map
// (which every meta node receives with its heartbeats) stays small.
const MaxQuotasPerVolume = 10000

// setQuota sets the limits of the quota on a directory, creating it with a
// fresh id (and base 0) if the directory has none; with rebase it sets the
// base of an existing one instead (the correction of a recount). It returns
// the quota as set, and whether anything changed.
func (s *State) setQuota(now int64, c *pb.SetQuota) (*pb.Quota, bool, error) {
	q := c.GetQuota()
	vol := s.VolumeByName(c.GetVolume())
	switch {
	case vol == nil:
		return nil, false, fmt.Errorf("volume %q: %w", c.GetVolume(), ErrNotFound)
	case q.GetIno() == 0:
		return nil, false, fmt.Errorf("%w quota: no directory inode", ErrInvalid)
	case len(q.GetPath()) > 4096:
		return nil, false, fmt.Errorf("%w quota: a path of %d bytes", ErrInvalid, len(q.GetPath()))
	}
	i := slices.IndexFunc(vol.Quotas, func(o *pb.Quota) bool { return o.Ino == q.Ino })
	if c.GetRebase() {
		if i < 0 || vol.Quotas[i].Id != c.GetExpectId() {
			return nil, false, fmt.Errorf("quota %d on inode %d of volume %q: %w (removed or set again since the recount)", c.GetExpectId(), q.Ino, vol.Name, ErrNotFound)
		}
		old := vol.Quotas[i]
		next := proto.Clone(old).(*pb.Quota)
		next.BaseBytes, next.BaseInodes = q.BaseBytes, q.BaseInodes
		if !c.GetLimitsOnly() {
			next.MaxBytes, next.MaxInodes = q.MaxBytes, q.MaxInodes
		}
		if proto.Equal(old, next) {
			return old, false, nil
		}
		vol.Quotas[i] = next
		return next, true, nil
	}
	if i >= 0 {
		old := vol.Quotas[i]
		if old.MaxBytes == q.MaxBytes && old.MaxInodes == q.MaxInodes && (q.Path == "" || q.Path == old.Path) {
			return old, false, nil
		}
		next := proto.Clone(old).(*pb.Quota)
		next.MaxBytes, next.MaxInodes = q.MaxBytes, q.MaxInodes
		if q.Path != "" {
			next.Path = q.Path
		}
		vol.Quotas[i] = next
		return next, true, nil
	}
	if len(vol.Quotas) >= MaxQuotasPerVolume {
		return nil, false, fmt.Errorf("%w: volume %q has %d quotas already", ErrConflict, vol.Name, MaxQuotasPerVolume)
	}
	s.m.NextQuotaId = max(s.m.NextQuotaId, 1)
	next := &pb.Quota{
		Id: s.m.NextQuotaId, Ino: q.Ino, Path: q.Path, MaxBytes: q.MaxBytes, MaxInodes: q.MaxInodes,
		SetUnixMs: now,
	}
	s.m.NextQuotaId++
	vol.Quotas = append(vol.Quotas, next)
	return next, true, nil
}

// removeQuota removes the quota on a directory and returns it.
func (s *State) removeQuota(c *pb.RemoveQuota) (*pb.Quota, error) {
	vol := s.VolumeByName(c.GetVolume())
	if vol == nil {
		return nil, fmt.Errorf("volume %q: %w", c.GetVolume(), ErrNotFound)
	}
	i := slices.IndexFunc(vol.Quotas, func(o *pb.Quota) bool { return o.Ino == c.GetIno() })
	if i < 0 {
		return nil, fmt.Errorf("quota on inode %d of volume %q: %w", c.GetIno(), vol.Name, ErrNotFound)
	}
	old := vol.Quotas[i]
	vol.Quotas = slices.Delete(vol.Quotas, i, i+1)
	return old, nil
}
