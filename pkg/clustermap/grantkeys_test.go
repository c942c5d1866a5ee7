package clustermap

import (
	"bytes"
	"errors"
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/grant"
)

func TestRotateGrantKey(t *testing.T) {
	s := New()
	rotate := func(id uint32, fill byte) error {
		_, err := s.Apply(&pb.Command{NowUnixMs: int64(id), Op: &pb.Command_RotateGrantKey{RotateGrantKey: &pb.RotateGrantKey{
			Key: &pb.GrantKey{Id: id, Secret: bytes.Repeat([]byte{fill}, grant.SecretLen), CreatedUnixMs: int64(id) * 1000},
		}}})
		return err
	}
	for id := uint32(1); id <= MaxGrantKeys+2; id++ {
		if err := rotate(id, byte(id)); err != nil {
			t.Fatalf("key %d: %v", id, err)
		}
	}
	ks := s.GrantKeys()
	if len(ks) != MaxGrantKeys || ks[0].ID != 3 || ks[len(ks)-1].ID != MaxGrantKeys+2 {
		t.Fatalf("keys %v, want the last %d, oldest first", ks, MaxGrantKeys)
	}
	epoch := s.Map().Epoch
	if err := rotate(MaxGrantKeys+2, byte(MaxGrantKeys+2)); err != nil || s.Map().Epoch != epoch {
		t.Errorf("the same key again: %v, epoch %d -> %d; want no change", err, epoch, s.Map().Epoch)
	}
	for _, tc := range []struct {
		name string
		key  *pb.GrantKey
		want error
	}{
		{"an older id", &pb.GrantKey{Id: 2, Secret: bytes.Repeat([]byte{9}, grant.SecretLen)}, ErrConflict},
		{"the newest id, another secret", &pb.GrantKey{Id: MaxGrantKeys + 2, Secret: bytes.Repeat([]byte{9}, grant.SecretLen)}, ErrConflict},
		{"id 0", &pb.GrantKey{Secret: bytes.Repeat([]byte{9}, grant.SecretLen)}, ErrInvalid},
		{"a short secret", &pb.GrantKey{Id: 99, Secret: []byte{1}}, ErrInvalid},
		{"no key", nil, ErrInvalid},
	} {
		_, err := s.Apply(&pb.Command{Op: &pb.Command_RotateGrantKey{RotateGrantKey: &pb.RotateGrantKey{Key: tc.key}}})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if got := s.GrantKeys(); len(got) != MaxGrantKeys || got[0].ID != 3 {
		t.Errorf("refused keys changed the set: %v", got)
	}
}
