package master

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/fsck"
)

// DefaultSweepInterval is how often the leader sweeps every volume for
// orphan inodes when Config.SweepInterval is 0.
const DefaultSweepInterval = 10 * time.Minute

// sweepLoop runs the orphan sweeper (CFS §2.6, package fsck) over every
// volume each interval until ctx ends: crashes between the steps of unlink,
// rmdir and link leave inodes no name refers to, and only a whole-volume
// view can tell them from live ones. Each volume keeps its own Sweeper, whose
// memory of the previous round is what protects operations still under way.
// A volume with a routing change in progress is skipped for that round.
func (s *Server) sweepLoop(ctx context.Context, interval time.Duration) {
	sweepers := map[string]*fsck.Sweeper{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var m *pb.ClusterMap
		s.fsm.read(func(st *clustermap.State) { m = st.Clone() })
		var names []string
		exists := map[string]bool{}
		for _, v := range m.GetVolumes() {
			exists[v.GetName()] = true
			if v.GetMigration() == nil {
				names = append(names, v.GetName())
			}
		}
		sort.Strings(names)
		for name := range sweepers {
			if !exists[name] {
				delete(sweepers, name) // a deleted volume: forget its rounds
			}
		}
		for _, name := range names {
			if ctx.Err() != nil {
				return
			}
			sw := sweepers[name]
			if sw == nil {
				sw = &fsck.Sweeper{Grace: s.cfg.SweepGrace, Logf: func(format string, args ...any) {
					s.log.Info(fmt.Sprintf(format, args...), "volume", name)
				}}
				sweepers[name] = sw
			}
			s.sweepVolume(ctx, sw, m, name)
		}
	}
}

// sweepVolume runs one round of sw over volume with connections for map m.
func (s *Server) sweepVolume(ctx context.Context, sw *fsck.Sweeper, m *pb.ClusterMap, volume string) {
	remote := fsck.NewRemote(m, 10*time.Second, daemon.ClientTLS(s.cfg.TLS), s.cfg.Network)
	defer remote.Close()
	sw.Scanner, sw.Applier = remote, remote
	sw.Layout = func(context.Context) (*fsck.Layout, error) { return fsck.LayoutFromMap(m, volume) }
	res, err := sw.Sweep(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("orphan sweep failed", "volume", volume, "err", err)
		}
		return
	}
	s.metrics.orphansReclaimed.Add(float64(res.Reclaimed))
	if res.Found > 0 {
		s.log.Info("orphan sweep", "volume", volume, "found", res.Found, "reclaimed", res.Reclaimed, "waiting", res.Waiting, "failed", res.Failed)
	}
}
