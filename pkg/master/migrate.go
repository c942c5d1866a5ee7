package master

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// partitionOps is what the routing driver and the balancer ask of meta
// partition leaders. Every call is idempotent, so a step may be redone from its
// beginning after any failure or a change of master leader.
type partitionOps interface {
	// SetRouting replicates r through p's Raft group.
	SetRouting(ctx context.Context, p *pb.Partition, r *metapb.SetRouting) error
	// ScanNotOwned returns up to limit dentries of p after (afterParent,
	// afterName) in key order that p does not own under its current routing,
	// and whether more may follow.
	ScanNotOwned(ctx context.Context, p *pb.Partition, afterParent uint64, afterName []byte, limit uint32) ([]*metapb.Dentry, bool, error)
	// Import puts dentries on p (ImportDentries).
	Import(ctx context.Context, p *pb.Partition, dentries []*metapb.Dentry) error
	// Purge deletes the named dentries from p if p does not own them
	// (PurgeDentries).
	Purge(ctx context.Context, p *pb.Partition, keys []*metapb.DentryKey) error
	// SetRange cuts p's inode range at end (CFS Algorithm 1).
	SetRange(ctx context.Context, p *pb.Partition, end uint64) error
	// Stats returns p's statistics with its topNames most frequent names and
	// the exact counts of countNames.
	Stats(ctx context.Context, p *pb.Partition, topNames uint32, countNames [][]byte) (*metapb.PartitionStatsResponse, error)
}

// clusterOps is the driver's view of the replicated map.
type clusterOps interface {
	// volume returns copies of the volume called name and of its meta
	// partitions by id, or nil if there is no such volume, as of a map that
	// includes every command committed before the call (a read barrier): a
	// leader acting on an older map could redo a finished step.
	volume(ctx context.Context, name string) (*pb.Volume, map[uint64]*pb.Partition, error)
	// propose replicates cmd and returns its result; it fails on a master
	// that does not lead.
	propose(ctx context.Context, cmd *pb.Command) (any, error)
}

// scanPage is how many dentries one Scan of a migration returns.
const scanPage = 1000

// driver runs the routing changes of docs/routing.md for the master leader. It
// keeps no state of its own between steps: every step starts from the map, so a
// driver on a new leader resumes where the old one stopped.
type driver struct {
	cluster clusterOps
	ops     partitionOps
	log     *slog.Logger
	metrics *routingMetrics // nil: no metrics
	// backoff is the first pause after a failure; it doubles up to maxBackoff.
	backoff, maxBackoff time.Duration
	// attempts bounds the tries of one partition call before its step fails
	// and is redone from the map.
	attempts int
	page     uint32
}

func newDriver(c clusterOps, ops partitionOps, log *slog.Logger, m *routingMetrics) *driver {
	return &driver{cluster: c, ops: ops, log: log, metrics: m, backoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second, attempts: 5, page: scanPage}
}

// run drives the migration of volume until the map records none (nil) or ctx
// ends (its error). A failed step is redone from the map after a pause.
func (d *driver) run(ctx context.Context, volume string) error {
	pause := d.backoff
	for {
		v, parts, err := d.cluster.volume(ctx, volume)
		if err == nil {
			if v == nil || v.Migration == nil {
				return nil
			}
			err = d.step(ctx, v, parts)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			pause = d.backoff
			continue
		}
		d.log.Warn("routing change step failed; redoing it", "volume", volume, "version", v.GetMigration().GetRoutingVersion(),
			"phase", phaseName(v.GetMigration().GetPhase()), "err", err)
		if err := sleep(ctx, pause); err != nil {
			return err
		}
		pause = min(2*pause, d.maxBackoff)
	}
}

// step does the work of the migration's recorded phase and advances it.
func (d *driver) step(ctx context.Context, v *pb.Volume, parts map[uint64]*pb.Partition) error {
	m := v.Migration
	live := liveRouting(v)
	target := &metapb.Routing{Version: m.RoutingVersion, SlotOwners: m.SlotOwners, Exceptions: routeExceptions(m.Exceptions)}
	mps, err := metaPartitions(v, parts)
	if err != nil {
		return err
	}
	switch m.Phase {
	case pb.MigrationPhase_MIGRATION_PHASE_FREEZE:
		if err := d.setRoutingAll(ctx, mps, target, live, false); err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		return d.advance(ctx, v, pb.MigrationPhase_MIGRATION_PHASE_COPY, 0)
	case pb.MigrationPhase_MIGRATION_PHASE_COPY:
		table, err := clustermap.RoutingTable(m.SlotOwners, m.Exceptions)
		if err != nil {
			return fmt.Errorf("copy: target routing: %w", err)
		}
		moved, err := d.copyAll(ctx, mps, parts, table)
		if err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		// Seal every source before the map switches: once the map's live
		// routing is the target, a destination may start serving a name (round
		// 2 of SWITCH), and no source may serve its frozen copy by then. Doing
		// it here rather than after SWITCH keeps the live routing, which a
		// sealed SetRouting names as previous, in the map for a new leader.
		if err := d.setRoutingAll(ctx, mps, target, live, true); err != nil {
			return fmt.Errorf("seal: %w", err)
		}
		return d.advance(ctx, v, pb.MigrationPhase_MIGRATION_PHASE_SWITCH, moved)
	case pb.MigrationPhase_MIGRATION_PHASE_SWITCH:
		// The map's live routing is the target now.
		if err := d.setRoutingAll(ctx, mps, live, nil, false); err != nil {
			return fmt.Errorf("switch: %w", err)
		}
		return d.advance(ctx, v, pb.MigrationPhase_MIGRATION_PHASE_PURGE, 0)
	case pb.MigrationPhase_MIGRATION_PHASE_PURGE:
		if err := d.purgeAll(ctx, mps); err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		if err := d.advance(ctx, v, pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED, 0); err != nil {
			return err
		}
		d.log.Info("routing change finished", "volume", v.Name, "version", m.RoutingVersion, "reason", m.Reason,
			"moved_dentries", m.MovedDentries, "took", time.Since(time.UnixMilli(m.StartedUnixMs)).Round(time.Millisecond))
		if d.metrics != nil {
			d.metrics.finished.WithLabelValues(m.Reason).Inc()
		}
		return nil
	}
	return fmt.Errorf("unknown migration phase %v", m.Phase)
}

// advance records the next phase. moved, when not 0, is the number of
// dentries the COPY step sent.
func (d *driver) advance(ctx context.Context, v *pb.Volume, phase pb.MigrationPhase, moved uint64) error {
	_, err := d.cluster.propose(ctx, &pb.Command{Op: &pb.Command_AdvanceMigration{AdvanceMigration: &pb.AdvanceMigration{
		Volume: v.Name, RoutingVersion: v.Migration.RoutingVersion, Phase: phase, MovedDentries: moved,
	}}})
	if err != nil {
		return fmt.Errorf("advance routing change of %q to %s: %w", v.Name, phaseName(phase), err)
	}
	d.log.Info("routing change advanced", "volume", v.Name, "version", v.Migration.RoutingVersion, "phase", phaseName(phase))
	return nil
}

// setRoutingAll gives every partition the routing; it fails if one does not
// acknowledge within its attempts.
func (d *driver) setRoutingAll(ctx context.Context, mps []*pb.Partition, current, previous *metapb.Routing, sealed bool) error {
	for _, p := range mps {
		r := &metapb.SetRouting{Self: p.Id, Current: current, Previous: previous, Sealed: sealed}
		if err := d.retry(ctx, func() error { return d.ops.SetRouting(ctx, p, r) }); err != nil {
			return fmt.Errorf("set routing version %d on meta partition %d: %w", current.Version, p.Id, err)
		}
	}
	return nil
}

// copyAll sends every dentry a partition holds but does not own under table to
// its owner, and returns how many it sent.
func (d *driver) copyAll(ctx context.Context, mps []*pb.Partition, parts map[uint64]*pb.Partition, table *hybridindex.Table) (uint64, error) {
	var moved uint64
	for _, src := range mps {
		err := d.scan(ctx, src, func(page []*metapb.Dentry) error {
			byOwner := map[uint64][]*metapb.Dentry{}
			for _, de := range page {
				owner, _ := table.Route(de.Parent, string(de.Name))
				if owner == src.Id {
					// The partition's routing is not the target: not FROZEN
					// by this migration. Redo the step.
					return fmt.Errorf("meta partition %d lists (%d, %q) as not owned, but the target routes it there", src.Id, de.Parent, de.Name)
				}
				byOwner[owner] = append(byOwner[owner], de)
			}
			for _, owner := range sortedKeys(byOwner) {
				dst := parts[owner]
				if dst == nil {
					return fmt.Errorf("target routing sends (%d, %q) to %d, not a meta partition of the volume", byOwner[owner][0].Parent, byOwner[owner][0].Name, owner)
				}
				batch := byOwner[owner]
				if err := d.retry(ctx, func() error { return d.ops.Import(ctx, dst, batch) }); err != nil {
					return fmt.Errorf("import %d dentries from %d into meta partition %d: %w", len(batch), src.Id, dst.Id, err)
				}
				moved += uint64(len(batch))
				if d.metrics != nil {
					d.metrics.moved.Add(float64(len(batch)))
				}
			}
			return nil
		})
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// purgeAll deletes from every partition the dentries it does not own.
func (d *driver) purgeAll(ctx context.Context, mps []*pb.Partition) error {
	for _, p := range mps {
		err := d.scan(ctx, p, func(page []*metapb.Dentry) error {
			keys := make([]*metapb.DentryKey, len(page))
			for i, de := range page {
				keys[i] = &metapb.DentryKey{Parent: de.Parent, Name: de.Name}
			}
			if err := d.retry(ctx, func() error { return d.ops.Purge(ctx, p, keys) }); err != nil {
				return fmt.Errorf("purge %d dentries from meta partition %d: %w", len(keys), p.Id, err)
			}
			if d.metrics != nil {
				d.metrics.purged.Add(float64(len(keys)))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// scan pages through the dentries p does not own and hands each page to fn.
func (d *driver) scan(ctx context.Context, p *pb.Partition, fn func([]*metapb.Dentry) error) error {
	var (
		afterParent uint64
		afterName   []byte
	)
	for {
		var (
			page []*metapb.Dentry
			more bool
		)
		err := d.retry(ctx, func() (err error) {
			page, more, err = d.ops.ScanNotOwned(ctx, p, afterParent, afterName, d.page)
			return err
		})
		if err != nil {
			return fmt.Errorf("scan meta partition %d: %w", p.Id, err)
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
			last := page[len(page)-1]
			afterParent, afterName = last.Parent, last.Name
		}
		if !more || len(page) == 0 {
			return nil
		}
	}
}

// retry calls fn until it succeeds, ctx ends or d.attempts tries failed.
func (d *driver) retry(ctx context.Context, fn func() error) error {
	pause := d.backoff
	var err error
	for i := 0; i < max(d.attempts, 1); i++ {
		if i > 0 {
			if serr := sleep(ctx, pause); serr != nil {
				return errors.Join(err, serr)
			}
			pause = min(2*pause, d.maxBackoff)
		}
		if err = fn(); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return err
}

// syncRouting pushes the live routing to the partitions of a volume without a
// routing change in progress whose statistics report an older routing (a new
// partition, a volume made before routing existed). It returns how many it
// pushed.
func syncRouting(ctx context.Context, ops partitionOps, v *pb.Volume, parts map[uint64]*pb.Partition, stats map[uint64]*metapb.PartitionStatsResponse) (int, error) {
	if v.Migration != nil || v.RoutingVersion == 0 {
		return 0, nil
	}
	live := liveRouting(v)
	var (
		n    int
		errs []error
	)
	for _, id := range v.MetaPartitions {
		st, p := stats[id], parts[id]
		if st == nil || p == nil || st.RoutingVersion >= v.RoutingVersion {
			continue
		}
		if err := ops.SetRouting(ctx, p, &metapb.SetRouting{Self: id, Current: live}); err != nil {
			errs = append(errs, fmt.Errorf("push routing version %d to meta partition %d: %w", live.Version, id, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// liveRouting is the map's live routing of v as meta partitions take it.
func liveRouting(v *pb.Volume) *metapb.Routing {
	return &metapb.Routing{Version: v.RoutingVersion, SlotOwners: slices.Clone(v.SlotOwners), Exceptions: routeExceptions(v.Exceptions)}
}

func routeExceptions(in []*pb.ExceptionEntry) []*metapb.RouteException {
	out := make([]*metapb.RouteException, len(in))
	for i, e := range in {
		out[i] = &metapb.RouteException{Name: e.Name, Kind: e.Kind, Mp: e.Mp}
	}
	return out
}

// metaPartitions returns v's meta partitions in the map's order.
func metaPartitions(v *pb.Volume, parts map[uint64]*pb.Partition) ([]*pb.Partition, error) {
	out := make([]*pb.Partition, 0, len(v.MetaPartitions))
	for _, id := range v.MetaPartitions {
		p := parts[id]
		if p == nil {
			return nil, fmt.Errorf("volume %q lists meta partition %d, which the map does not have", v.Name, id)
		}
		out = append(out, p)
	}
	return out, nil
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}

func phaseName(p pb.MigrationPhase) string {
	if p == pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED {
		return "done"
	}
	return strings.ToLower(strings.TrimPrefix(p.String(), "MIGRATION_PHASE_"))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// serverCluster is the Server's clusterOps.
type serverCluster struct{ s *Server }

func (c serverCluster) volume(ctx context.Context, name string) (*pb.Volume, map[uint64]*pb.Partition, error) {
	if err := c.s.host.ReadIndex(ctx, groupID); err != nil {
		return nil, nil, fmt.Errorf("read barrier: %w", err)
	}
	var (
		v     *pb.Volume
		parts map[uint64]*pb.Partition
	)
	c.s.fsm.read(func(st *clustermap.State) {
		vol := st.VolumeByName(name)
		if vol == nil {
			return
		}
		v = proto.Clone(vol).(*pb.Volume)
		parts = make(map[uint64]*pb.Partition, len(vol.MetaPartitions))
		for _, id := range vol.MetaPartitions {
			if p := st.Map().Partitions[id]; p != nil {
				parts[id] = proto.Clone(p).(*pb.Partition)
			}
		}
	})
	return v, parts, nil
}

func (c serverCluster) propose(ctx context.Context, cmd *pb.Command) (any, error) {
	return c.s.propose(ctx, cmd)
}
