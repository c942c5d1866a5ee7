package master

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/loadbalance"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/placement"
)

// Defaults of the routing triggers (docs/routing.md).
const (
	DefaultBalanceInterval    = 30 * time.Second
	DefaultMPMaxInodes        = 4_000_000
	DefaultBalanceMinDentries = 10_000
	// balanceEpsilon is loadbalance's ε: an MP above (1 + ε) × the mean is
	// overloaded.
	balanceEpsilon = 0.1
	// growthMargin is how far above its highest allocated inode the open meta
	// partition is cut, so inodes it allocates while the master decides still
	// fit (CFS Algorithm 1).
	growthMargin = 1 << 16
)

// Reasons of routing changes, as recorded in Migration.reason.
const (
	reasonGrow    = "grow"
	reasonBalance = "balance"
	reasonShrink  = "shrink"
)

// action is what the balancer decided for a volume.
type action int

const (
	actNone action = iota
	// actGrow: cut the open meta partition at cutEnd, add one above it, then
	// give it slots.
	actGrow
	// actSlots: start a migration to slots (a meta partition owns none, e.g.
	// after a growth whose migration never started).
	actSlots
	// actExceptions: start a migration to exceptions (load balancer).
	actExceptions
)

// volumePlan is the balancer's decision for one volume.
type volumePlan struct {
	act    action
	reason string
	why    string // for logs
	// actGrow
	cutMP, cutEnd uint64
	// actSlots
	slots []uint64
	// actExceptions
	exceptions []*pb.ExceptionEntry
	changes    []loadbalance.Change
}

// planInput is what planVolume decides from: the map's volume and meta
// partitions, and the statistics of every meta partition, asked with
// count_names = the names of the volume's live exception table.
type planInput struct {
	vol         *pb.Volume
	parts       map[uint64]*pb.Partition
	stats       map[uint64]*metapb.PartitionStatsResponse
	maxInodes   uint64 // the master's limit; the volume's mp_max_inodes wins
	minDentries uint64
}

// errStale says that some partition's statistics were not taken under the
// volume's live routing; the balancer waits for fresh ones.
var errStale = errors.New("statistics not taken under the live routing")

// planVolume decides one volume's routing change, in this order:
//
//  1. a meta partition that owns no slot gets its share (hybridindex.Rebalance):
//     the end of a growth whose migration never started;
//  2. growth (CFS Algorithm 1): the open meta partition was already cut (a
//     growth interrupted after the cut), or holds more inodes than the limit,
//     or some partition holds more dentries than the limit while the mean is
//     above limit / (1 + ε), so that balancing alone could not bring every
//     partition under it. Inodes never move, so only the open partition's
//     inodes count: growing for a closed one would not relieve it;
//  3. balance: with at least minDentries dentries and some partition above
//     (1 + ε) × the mean, loadbalance.Plan;
//  4. otherwise, with exception entries, loadbalance.Shrink.
//
// It is pure; the volume must have no migration in progress.
func planVolume(in planInput) (volumePlan, error) {
	v := in.vol
	if v.Migration != nil {
		return volumePlan{}, fmt.Errorf("volume %q has a routing change in progress", v.Name)
	}
	for _, id := range v.MetaPartitions {
		if in.stats[id] == nil {
			return volumePlan{}, fmt.Errorf("no statistics of meta partition %d", id)
		}
	}
	share := map[uint64]int{}
	for _, o := range v.SlotOwners {
		share[o]++
	}
	for _, id := range v.MetaPartitions {
		if share[id] == 0 {
			slots, _, err := hybridindex.Rebalance(v.SlotOwners, v.MetaPartitions)
			if err != nil {
				return volumePlan{}, fmt.Errorf("give meta partition %d slots: %w", id, err)
			}
			return volumePlan{act: actSlots, reason: reasonGrow, slots: slots, why: fmt.Sprintf("meta partition %d owns no slot", id)}, nil
		}
	}

	limit := in.maxInodes
	if v.MpMaxInodes != 0 {
		limit = v.MpMaxInodes
	}
	var total, most uint64
	var mostMP uint64
	for _, id := range v.MetaPartitions {
		d := in.stats[id].Dentries
		total += d
		if d > most {
			most, mostMP = d, id
		}
	}
	n := uint64(len(v.MetaPartitions))
	mean := float64(total) / float64(n)
	if open := openPartition(v, in.parts); open != nil && n+1 <= uint64(len(v.SlotOwners)) {
		st := in.stats[open.Id]
		grow := func(why string) volumePlan {
			end := st.InodeEnd
			if end == 0 {
				base := st.MaxIno
				if open.InodeStart > 0 {
					base = max(base, open.InodeStart-1)
				}
				end = base + growthMargin
			}
			return volumePlan{act: actGrow, reason: reasonGrow, cutMP: open.Id, cutEnd: end, why: why}
		}
		switch {
		case st.InodeEnd != 0:
			return grow(fmt.Sprintf("meta partition %d is cut at %d but open in the map", open.Id, st.InodeEnd)), nil
		case st.Inodes > limit:
			return grow(fmt.Sprintf("open meta partition %d holds %d inodes, limit %d", open.Id, st.Inodes, limit)), nil
		case most > limit && mean*(1+balanceEpsilon) > float64(limit):
			return grow(fmt.Sprintf("meta partition %d holds %d dentries, limit %d, mean %.0f", mostMP, most, limit, mean)), nil
		}
	}

	for _, id := range v.MetaPartitions {
		if st := in.stats[id]; st.RoutingVersion != v.RoutingVersion || st.RoutingMoving {
			return volumePlan{}, fmt.Errorf("%w: meta partition %d at routing version %d (moving %v), live version %d",
				errStale, id, st.RoutingVersion, st.RoutingMoving, v.RoutingVersion)
		}
	}
	table, err := clustermap.RoutingTable(v.SlotOwners, v.Exceptions)
	if err != nil {
		return volumePlan{}, err
	}
	stats := mpStats(v, in.stats, table.Exceptions)
	opts := loadbalance.Options{Epsilon: balanceEpsilon, Seed: v.RoutingVersion}
	if total >= in.minDentries && float64(most) > (1+balanceEpsilon)*mean {
		res, err := loadbalance.Plan(stats, table, opts)
		if err != nil {
			return volumePlan{}, err
		}
		if len(res.Changes) > 0 {
			return exceptionPlan(table, res, reasonBalance, fmt.Sprintf("meta partition %d holds %d of %d dentries", mostMP, most, total))
		}
	}
	if table.Exceptions.Len() == 0 {
		return volumePlan{}, nil
	}
	res, err := loadbalance.Shrink(stats, table, opts)
	if err != nil {
		return volumePlan{}, err
	}
	if len(res.Changes) == 0 {
		return volumePlan{}, nil
	}
	return exceptionPlan(table, res, reasonShrink, fmt.Sprintf("%d of %d exception entries no longer needed", len(res.Changes), table.Exceptions.Len()))
}

func exceptionPlan(table *hybridindex.Table, res loadbalance.Result, reason, why string) (volumePlan, error) {
	et := table.Exceptions.Clone()
	if err := loadbalance.Apply(et, res.Changes); err != nil {
		return volumePlan{}, err
	}
	return volumePlan{act: actExceptions, reason: reason, why: why, exceptions: clustermap.ExceptionEntries(et), changes: res.Changes}, nil
}

// mpStats converts partition statistics to loadbalance's: records are
// dentries, Top the names without an exception entry, Exceptions the counts of
// the entries' names. The version is the table's own: planVolume has checked
// that every partition counted under the live routing.
func mpStats(v *pb.Volume, stats map[uint64]*metapb.PartitionStatsResponse, et *hybridindex.ExceptionTable) []loadbalance.MPStats {
	out := make([]loadbalance.MPStats, 0, len(v.MetaPartitions))
	for _, id := range v.MetaPartitions {
		st := stats[id]
		s := loadbalance.MPStats{MP: id, TableVersion: et.Version(), Inodes: st.Dentries}
		for _, nc := range st.TopNames {
			name := string(nc.Name)
			if _, ok := et.Get(name); ok || hybridindex.ValidateName(name) != nil || nc.Count == 0 {
				continue
			}
			s.Top = append(s.Top, loadbalance.NameCount{Name: name, Count: nc.Count})
		}
		seen := map[string]bool{}
		for _, nc := range st.NamedCounts {
			name := string(nc.Name)
			if _, ok := et.Get(name); !ok || seen[name] || nc.Count == 0 {
				continue
			}
			seen[name] = true
			s.Exceptions = append(s.Exceptions, loadbalance.NameCount{Name: name, Count: nc.Count})
		}
		out = append(out, s)
	}
	return out
}

// openPartition returns v's meta partition with an open inode range, or nil.
func openPartition(v *pb.Volume, parts map[uint64]*pb.Partition) *pb.Partition {
	for _, id := range v.MetaPartitions {
		if p := parts[id]; p != nil && p.InodeEnd == 0 {
			return p
		}
	}
	return nil
}

// balancer is the leader's periodic poll of meta partition statistics that
// grows and balances volumes.
type balancer struct {
	s   *Server
	ops partitionOps
}

// round polls and plans every volume without a routing change in progress.
func (b *balancer) round(ctx context.Context) {
	var names []string
	b.s.fsm.read(func(st *clustermap.State) {
		for _, v := range st.Map().Volumes {
			if v.Migration == nil {
				names = append(names, v.Name)
			}
		}
	})
	sort.Strings(names)
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		if err := b.volume(ctx, name); err != nil {
			b.s.log.Warn("balance volume", "volume", name, "err", err)
		}
	}
}

// volume polls one volume's meta partitions and acts on planVolume.
func (b *balancer) volume(ctx context.Context, name string) error {
	v, parts, err := serverCluster{b.s}.volume(ctx, name)
	if err != nil || v == nil || v.Migration != nil {
		return err
	}
	countNames := make([][]byte, len(v.Exceptions))
	for i, e := range v.Exceptions {
		countNames[i] = e.Name
	}
	stats, err := b.collect(ctx, v, parts, countNames)
	if err != nil {
		return err
	}
	pushed, err := syncRouting(ctx, b.ops, v, parts, stats)
	if pushed > 0 {
		b.s.metrics.routing.pushes.Add(float64(pushed))
		b.s.log.Info("pushed live routing to meta partitions", "volume", name, "version", v.RoutingVersion, "partitions", pushed)
	}
	if err != nil || pushed > 0 {
		return err // the statistics predate the push; plan next round
	}
	plan, err := planVolume(planInput{vol: v, parts: parts, stats: stats, maxInodes: b.s.cfg.MPMaxInodes, minDentries: b.s.cfg.BalanceMinDentries})
	if errors.Is(err, errStale) {
		b.s.log.Debug("balance volume: waiting for fresh statistics", "volume", name, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	switch plan.act {
	case actNone:
		return nil
	case actGrow:
		return b.grow(ctx, v, parts, plan)
	case actSlots:
		return b.start(ctx, v, plan.slots, v.Exceptions, plan.reason, plan.why)
	case actExceptions:
		for _, c := range plan.changes {
			b.s.log.Info("exception table change planned", "volume", name, "change", c.String())
		}
		return b.start(ctx, v, v.SlotOwners, plan.exceptions, plan.reason, plan.why)
	}
	return nil
}

// collect asks every meta partition of v for its statistics, in parallel.
func (b *balancer) collect(ctx context.Context, v *pb.Volume, parts map[uint64]*pb.Partition, countNames [][]byte) (map[uint64]*metapb.PartitionStatsResponse, error) {
	top := uint32(2 * len(v.MetaPartitions))
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	out := make(map[uint64]*metapb.PartitionStatsResponse, len(v.MetaPartitions))
	for _, id := range v.MetaPartitions {
		p := parts[id]
		if p == nil {
			return nil, fmt.Errorf("meta partition %d is not in the map", id)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := b.ops.Stats(cctx, p, top, countNames)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("statistics of meta partition %d: %w", id, err))
				return
			}
			out[id] = st
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// grow cuts the open meta partition, adds one above it and starts the
// migration that gives it slots. The cut comes first: once it is replicated
// the partition allocates no inode the new one could also allocate. A leader
// that stops after the cut finds it in the statistics (planVolume), and one
// that stops after adding the partition finds a partition without slots.
func (b *balancer) grow(ctx context.Context, v *pb.Volume, parts map[uint64]*pb.Partition, plan volumePlan) error {
	open := parts[plan.cutMP]
	if err := b.ops.SetRange(ctx, open, plan.cutEnd); err != nil {
		return fmt.Errorf("grow: cut meta partition %d at %d: %w", open.Id, plan.cutEnd, err)
	}
	b.s.createMu.Lock()
	np, err := b.s.placeMetaPartition(ctx, v.Name, len(v.MetaPartitions), int(v.Replicas))
	if err == nil {
		_, err = b.s.propose(ctx, &pb.Command{Op: &pb.Command_AddMetaPartition{AddMetaPartition: &pb.AddMetaPartition{
			Volume: v.Name, Partition: np, CutEnd: plan.cutEnd,
		}}})
	}
	b.s.createMu.Unlock()
	if err != nil {
		return fmt.Errorf("grow: add meta partition: %w", err)
	}
	b.s.metrics.routing.growths.Inc()
	b.s.log.Info("volume grew by a meta partition", "volume", v.Name, "cut_partition", open.Id, "cut_end", plan.cutEnd, "replicas", np.Replicas, "why", plan.why)
	v, _, err = serverCluster{b.s}.volume(ctx, v.Name)
	if err != nil || v == nil {
		return err
	}
	slots, _, err := hybridindex.Rebalance(v.SlotOwners, v.MetaPartitions)
	if err != nil {
		return fmt.Errorf("grow: %w", err)
	}
	return b.start(ctx, v, slots, v.Exceptions, reasonGrow, plan.why)
}

// start records a routing change of v; the driver takes it from there.
func (b *balancer) start(ctx context.Context, v *pb.Volume, slots []uint64, exceptions []*pb.ExceptionEntry, reason, why string) error {
	_, err := b.s.propose(ctx, &pb.Command{Op: &pb.Command_StartMigration{StartMigration: &pb.StartMigration{
		Volume: v.Name, FromVersion: v.RoutingVersion, SlotOwners: slots, Exceptions: exceptions, Reason: reason,
	}}})
	if err != nil {
		return fmt.Errorf("start routing change (%s): %w", reason, err)
	}
	b.s.metrics.routing.started.WithLabelValues(reason).Inc()
	b.s.log.Info("routing change started", "volume", v.Name, "version", v.RoutingVersion+1, "reason", reason, "why", why,
		"exceptions", len(exceptions))
	return nil
}

// placeMetaPartition chooses the replicas of a volume's index-th meta
// partition as volume creation does (placePartitions).
func (s *Server) placeMetaPartition(ctx context.Context, volume string, index, replicas int) (*pb.NewPartition, error) {
	cands := s.awaitCandidates(ctx, pb.Role_ROLE_META, replicas)
	if len(cands) < replicas {
		return nil, errors.New(s.shortage(pb.Role_ROLE_META, "meta", replicas, len(cands)))
	}
	ids, err := placement.Choose(placementKey(volume, "meta", index), cands, replicas)
	if err != nil {
		return nil, fmt.Errorf("place meta partition %d of volume %q: %w", index, volume, err)
	}
	return &pb.NewPartition{Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: ids}, nil
}

// routingLoop runs while this master leads: it keeps a driver running for
// every volume with a routing change in progress and polls statistics every
// BalanceInterval. It returns when ctx ends, after its drivers stopped.
func (s *Server) routingLoop(ctx context.Context, ops partitionOps) {
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[string]bool{}
	var mu sync.Mutex
	b := &balancer{s: s, ops: ops}
	var lastBalance time.Time
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		var migrating []string
		s.fsm.read(func(st *clustermap.State) {
			for _, v := range st.Map().Volumes {
				if v.Migration != nil {
					migrating = append(migrating, v.Name)
				}
			}
		})
		for _, name := range migrating {
			mu.Lock()
			busy := running[name]
			running[name] = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := newDriver(serverCluster{s}, ops, s.log, s.metrics.routing)
				if err := d.run(ctx, name); err != nil && ctx.Err() == nil {
					s.log.Warn("routing change driver stopped", "volume", name, "err", err)
				}
				mu.Lock()
				delete(running, name)
				mu.Unlock()
			}()
		}
		if time.Since(lastBalance) >= s.cfg.BalanceInterval {
			b.round(ctx)
			lastBalance = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// routingMetrics count routing changes.
type routingMetrics struct {
	started  *prometheus.CounterVec
	finished *prometheus.CounterVec
	moved    prometheus.Counter
	purged   prometheus.Counter
	growths  prometheus.Counter
	pushes   prometheus.Counter
}

func newRoutingMetrics(reg prometheus.Registerer, s *Server) *routingMetrics {
	m := &routingMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_master_migrations_started_total",
			Help: "Routing changes started by this master, by reason (grow, balance, shrink)."}, []string{"reason"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_master_migrations_finished_total",
			Help: "Routing changes finished by this master, by reason."}, []string{"reason"}),
		moved: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_migration_dentries_moved_total",
			Help: "Dentries copied to their new meta partition by routing changes."}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_migration_dentries_purged_total",
			Help: "Dentries deleted from their old meta partition by routing changes."}),
		growths: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_volume_growths_total",
			Help: "Meta partitions added to volumes that passed the inode limit."}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_routing_pushes_total",
			Help: "Live routings pushed to meta partitions that reported an older one."}),
	}
	reg.MustRegister(m.started, m.finished, m.moved, m.purged, m.growths, m.pushes, volumeCollector{s})
	return m
}

// volumeCollector reports per-volume routing state from the map at scrape
// time, so deleted volumes leave no series behind.
type volumeCollector struct{ s *Server }

var (
	phaseDesc = prometheus.NewDesc("cairn_master_volume_migration_phase",
		"Phase of the volume's routing change: 0 none, 1 freeze, 2 copy, 3 switch, 4 purge.", []string{"volume"}, nil)
	exceptionsDesc = prometheus.NewDesc("cairn_master_volume_exception_entries",
		"Entries of the volume's live exception table.", []string{"volume"}, nil)
	routingVersionDesc = prometheus.NewDesc("cairn_master_volume_routing_version",
		"Version of the volume's live routing.", []string{"volume"}, nil)
	metaPartitionsDesc = prometheus.NewDesc("cairn_master_volume_meta_partitions",
		"Meta partitions of the volume.", []string{"volume"}, nil)
)

func (c volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- phaseDesc
	ch <- exceptionsDesc
	ch <- routingVersionDesc
	ch <- metaPartitionsDesc
}

func (c volumeCollector) Collect(ch chan<- prometheus.Metric) {
	type row struct {
		name                       string
		phase, exceptions, version float64
		metas                      float64
	}
	var rows []row
	c.s.fsm.read(func(st *clustermap.State) {
		for _, v := range st.Map().Volumes {
			rows = append(rows, row{v.Name, float64(v.GetMigration().GetPhase()), float64(len(v.Exceptions)), float64(v.RoutingVersion), float64(len(v.MetaPartitions))})
		}
	})
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, r.phase, r.name)
		ch <- prometheus.MustNewConstMetric(exceptionsDesc, prometheus.GaugeValue, r.exceptions, r.name)
		ch <- prometheus.MustNewConstMetric(routingVersionDesc, prometheus.GaugeValue, r.version, r.name)
		ch <- prometheus.MustNewConstMetric(metaPartitionsDesc, prometheus.GaugeValue, r.metas, r.name)
	}
}
