package clustermap

import (
	"errors"
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func setQuota(volume string, ino, maxBytes, maxInodes uint64) *pb.Command {
	return &pb.Command{NowUnixMs: 3000, Op: &pb.Command_SetQuota{SetQuota: &pb.SetQuota{
		Volume: volume, Quota: &pb.Quota{Ino: ino, Path: "/q", MaxBytes: maxBytes, MaxInodes: maxInodes}}}}
}

func rebase(volume string, ino, id uint64, bytes, inodes int64) *pb.Command {
	return &pb.Command{NowUnixMs: 3000, Op: &pb.Command_SetQuota{SetQuota: &pb.SetQuota{
		Volume: volume, Rebase: true, ExpectId: id, LimitsOnly: true,
		Quota: &pb.Quota{Ino: ino, BaseBytes: bytes, BaseInodes: inodes}}}}
}

func removeQuota(volume string, ino uint64) *pb.Command {
	return &pb.Command{Op: &pb.Command_RemoveQuota{RemoveQuota: &pb.RemoveQuota{Volume: volume, Ino: ino}}}
}

// TestQuotas walks a quota's life: set, changed, rebased, removed, set
// again under a fresh id (so that the old id's counts never mix in), and
// a rebase made for the old id refused.
func TestQuotas(t *testing.T) {
	s := cluster(t)
	if _, err := s.Apply(vol("v", 3, part(meta, 1, 2, 3), part(data, 4, 5, 6))); err != nil {
		t.Fatal(err)
	}
	epoch := s.Map().Epoch
	steps := []struct {
		name    string
		cmd     *pb.Command
		wantErr error
		wantID  uint64
		changed bool
	}{
		{"no volume", setQuota("w", 5, 1, 1), ErrNotFound, 0, false},
		{"no inode", setQuota("v", 0, 1, 1), ErrInvalid, 0, false},
		{"set", setQuota("v", 5, 100, 10), nil, 1, true},
		{"same again", setQuota("v", 5, 100, 10), nil, 1, false},
		{"new limits", setQuota("v", 5, 200, 0), nil, 1, true},
		{"another directory", setQuota("v", 6, 0, 3), nil, 2, true},
		{"rebase", rebase("v", 5, 1, 7, 2), nil, 1, true},
		{"rebase of another id", rebase("v", 5, 9, 7, 2), ErrNotFound, 0, false},
		{"remove", removeQuota("v", 5), nil, 1, true},
		{"remove again", removeQuota("v", 5), ErrNotFound, 0, false},
		{"set again: fresh id", setQuota("v", 5, 100, 10), nil, 3, true},
		{"rebase made for the removed one", rebase("v", 5, 1, 0, 0), ErrNotFound, 0, false},
	}
	for _, st := range steps {
		res, err := s.Apply(st.cmd)
		if !errors.Is(err, st.wantErr) || (st.wantErr == nil) != (err == nil) {
			t.Fatalf("%s: err %v, want %v", st.name, err, st.wantErr)
		}
		if err == nil {
			if q := res.(*pb.Quota); q.Id != st.wantID {
				t.Fatalf("%s: quota id %d, want %d", st.name, q.Id, st.wantID)
			}
		}
		if st.changed {
			epoch++
		}
		if s.Map().Epoch != epoch {
			t.Fatalf("%s: epoch %d, want %d", st.name, s.Map().Epoch, epoch)
		}
	}
	qs := s.VolumeByName("v").Quotas
	if len(qs) != 2 || qs[0].Ino != 6 || qs[1].Ino != 5 || qs[1].BaseBytes != 0 || qs[1].MaxBytes != 100 {
		t.Fatalf("quotas %v", qs)
	}
}
