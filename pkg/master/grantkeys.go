package master

import (
	"context"
	"crypto/rand"
	"slices"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/grant"
)

// DefaultGrantKeyPeriod is how often the leader adds a grant key (Config.
// GrantKeyPeriod's default). A key signs for a period and verifies for
// clustermap.MaxGrantKeys periods; tokens live far less (metanode's grant
// lifetime), so a rotation never invalidates a token in use.
const DefaultGrantKeyPeriod = 6 * time.Hour

// rotateGrantKeys adds a grant key when the cluster has none or its newest
// is a period old. The secret is made here, on the leader, and travels in
// the command, so that every master applies the same key.
func (s *Server) rotateGrantKeys(ctx context.Context, now time.Time) {
	period := s.cfg.GrantKeyPeriod
	if period <= 0 {
		period = DefaultGrantKeyPeriod
	}
	var newest *pb.GrantKey
	s.fsm.read(func(st *clustermap.State) {
		if ks := st.Map().GrantKeys; len(ks) > 0 {
			newest = ks[len(ks)-1]
		}
	})
	if newest != nil && now.Sub(time.UnixMilli(newest.CreatedUnixMs)) < period {
		return
	}
	k := &pb.GrantKey{Id: 1, Secret: make([]byte, grant.SecretLen), CreatedUnixMs: now.UnixMilli()}
	if newest != nil {
		k.Id = newest.Id + 1
	}
	if _, err := rand.Read(k.Secret); err != nil {
		s.log.Error("grant key: no random bytes", "err", err)
		return
	}
	if _, err := s.propose(ctx, &pb.Command{Op: &pb.Command_RotateGrantKey{RotateGrantKey: &pb.RotateGrantKey{Key: k}}}); err != nil {
		s.log.Warn("add a grant key", "err", err)
		return
	}
	s.log.Info("grant key added", "key", k.Id)
}

// grantKeys are the map's grant keys, for a heartbeat's answer.
func (s *Server) grantKeys() []*pb.GrantKey {
	var out []*pb.GrantKey
	s.fsm.read(func(st *clustermap.State) { out = st.Map().GrantKeys })
	return out
}

// noteFullVolumes records the volumes whose data reached their capacity,
// for data nodes to refuse new data of clients (HeartbeatResponse.
// full_volumes). A volume whose usage is not known yet (a new leader) is
// not full: refusing writes on a guess would fail users for nothing, and
// the SDK checks the capacity itself as well.
func (s *Server) noteFullVolumes() {
	var vols []*pb.Volume
	s.fsm.read(func(st *clustermap.State) {
		for _, v := range st.Map().Volumes {
			if v.CapacityBytes > 0 {
				vols = append(vols, v)
			}
		}
	})
	var full []uint64
	for _, v := range vols {
		if used, known := s.volumeUsage(v.DataPartitions); known && used >= v.CapacityBytes {
			full = append(full, v.Id)
		}
	}
	slices.Sort(full)
	s.fullVolumes.Store(&full)
}

// full returns the volumes noteFullVolumes found full.
func (s *Server) full() []uint64 {
	if f := s.fullVolumes.Load(); f != nil {
		return *f
	}
	return nil
}
