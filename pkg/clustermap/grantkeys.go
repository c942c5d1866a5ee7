package clustermap

import (
	"fmt"
	"slices"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/grant"
)

// MaxGrantKeys is how many grant keys the map keeps: the newest signs, the
// older ones still verify the tokens they signed. With a key every
// GrantKeyPeriod, a key verifies for two periods after it stopped signing,
// far longer than a token lives.
const MaxGrantKeys = 3

// rotateGrantKey adds a grant key and drops the oldest beyond MaxGrantKeys.
// Applying the same command twice changes nothing the second time.
func (s *State) rotateGrantKey(r *pb.RotateGrantKey) (bool, error) {
	k := r.GetKey()
	if k == nil || k.Id == 0 || len(k.Secret) != grant.SecretLen {
		return false, fmt.Errorf("%w grant key: need an id above 0 and a secret of %d bytes", ErrInvalid, grant.SecretLen)
	}
	if n := len(s.m.GrantKeys); n > 0 {
		last := s.m.GrantKeys[n-1]
		if last.Id == k.Id && slices.Equal(last.Secret, k.Secret) {
			return false, nil
		}
		if k.Id <= last.Id {
			return false, fmt.Errorf("%w: grant key %d is not newer than key %d", ErrConflict, k.Id, last.Id)
		}
	}
	// A new slice, never the old one changed in place: readers hold the old
	// one (a heartbeat's answer being sent) without the state's lock.
	keys := append(slices.Clone(s.m.GrantKeys), &pb.GrantKey{Id: k.Id, Secret: slices.Clone(k.Secret), CreatedUnixMs: k.CreatedUnixMs})
	if over := len(keys) - MaxGrantKeys; over > 0 {
		keys = keys[over:]
	}
	s.m.GrantKeys = keys
	return true, nil
}

// GrantKeys returns the map's grant keys, oldest first, as pkg/grant
// takes them.
func (s *State) GrantKeys() []grant.Key {
	return GrantKeysOf(s.m.GrantKeys)
}

// GrantKeysOf converts the keys of a map or a heartbeat.
func GrantKeysOf(keys []*pb.GrantKey) []grant.Key {
	out := make([]grant.Key, 0, len(keys))
	for _, k := range keys {
		out = append(out, grant.Key{ID: k.Id, Secret: slices.Clone(k.Secret), CreatedMs: k.CreatedUnixMs})
	}
	return out
}
