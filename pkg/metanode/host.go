// Package metanode is the meta node role: it hosts the meta partitions the
// cluster map assigns to its node, each a metapartition state machine replicated
// by a Raft group on the node's multi-raft host, and serves the MetaNode gRPC
// service on their leaders.
//
// Writes arrive as metapb.Txns. Concurrent Txns for one partition are merged
// into one Raft proposal (one log write, one fsync for all of them: FalconFS
// §4.4's request merging); reads are served by the leader after a Raft read
// barrier, so they see every write acknowledged before them.
package metanode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnfs/cairn/pkg/changefeed"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/membership"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/node"
	"github.com/cairnfs/cairn/pkg/nsreplica"
)

// Options tune the meta role.
type Options struct {
	// DisableMerging proposes every Txn on its own (for comparison benchmarks).
	DisableMerging bool
	// MaxBatchTxns caps how many Txns one proposal carries (default 256).
	MaxBatchTxns int
	// CollectInterval is how often the leader frees deleted files' extents on
	// the data nodes, hands chunk drops to the chunk index and reclaims
	// unreferenced chunks (default 5s); negative disables the collector.
	CollectInterval time.Duration
	// ChunkGrace is how long a chunk index entry must have had no
	// references before the collector frees its chunk (default
	// DefaultChunkGrace). It must exceed the time a writer takes from a
	// reference it gave back to one it takes again for the same content,
	// and a recount's window (docs/design.md "The chunk index").
	ChunkGrace time.Duration
	// ClusterMap, if set, is where the collector reads the cluster map (the
	// volumes' chunk index partitions, partitions' replicas, node
	// addresses); default: the masters (node.Env.Masters).
	ClusterMap func(ctx context.Context) (*pb.ClusterMap, error)
}

// Host is the meta role's partition host.
type Host struct {
	env     node.Env
	opts    Options
	log     *slog.Logger
	metrics *metrics
	peers   *peers
	layouts layoutCache              // parents' layout attributes for creates (layout.go)
	quotas  quotaTable               // the cluster's directory quotas (quota.go)
	lifts   *metaclient.UnfenceBatch // fence lifts done rmdirs owe (rmdir.go)
	// attempts are the rmdirs and renames running here, one attempt of
	// a request at a time (rmdir.go).
	attempts attempts

	mu      sync.RWMutex
	parts   map[uint64]*partition
	volumes map[uint64]uint64 // partition -> volume id

	stop      chan struct{}
	rangeKick chan struct{}  // cap 1: wakes the range cutter (ranges.go)
	wg        sync.WaitGroup // background work such as creating a volume's root
}

// RootIno is the inode number of every volume's root directory. It is the
// first number of the volume's first meta partition.
const RootIno = 1

// rootMode is the root directory's mode: open to all, as JuiceFS does, so that
// a fresh volume is usable by whoever mounts it, and sticky (S_ISVTX), as
// /tmp is, so that on a mount shared by several users (allow_other) only
// a file's owner (or the directory's, or root) removes or renames it;
// chmod restricts it.
const rootMode = 0o1777

// partition is one hosted meta partition.
type partition struct {
	id     uint64
	volume uint64
	sm     *lockedSM
	merger *merger
	// ns is the partition's namespace replica (path.go): a cache of
	// directory entries that the partition's fences invalidate at apply.
	ns *nsreplica.Replica
	// feed records what the partition's applied Txns changed, for the
	// change feeds of mounts (changes.go).
	feed *changefeed.Log
	// wantEnd is the cluster map's inode_end (0: open), which the leader
	// makes the partition's range end (ranges.go).
	wantEnd atomic.Uint64
	// joining and leaving are the cluster map's replica move in progress
	// (0: none), which the leader carries out (pkg/membership).
	joining, leaving atomic.Uint64
	replicas         atomic.Pointer[[]uint64] // the map's replica set
	quotaPointers                             // counts reported to the master (quota.go)
}

// setMove records the map's replica set and replica move of the partition.
func (p *partition) setMove(mp *pb.Partition) {
	r := slices.Clone(mp.Replicas)
	p.replicas.Store(&r)
	p.joining.Store(mp.Joining)
	p.leaving.Store(mp.Leaving)
}

// lockedSM lets RPC handlers read a partition while the Raft loop applies to it.
type lockedSM struct {
	mu sync.RWMutex
	p  *metapartition.Partition
	// restored runs after a Restore, under the lock: the fences of the
	// log the snapshot skipped were never applied here.
	restored func()
}

func (l *lockedSM) Apply(index uint64, data []byte) (any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p.Apply(index, data)
}

func (l *lockedSM) Snapshot() ([]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.p.Snapshot()
}

func (l *lockedSM) Restore(data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.p.Restore(data); err != nil {
		return err
	}
	if l.restored != nil {
		l.restored()
	}
	return nil
}

// read runs fn under the read lock.
func (l *lockedSM) read(fn func(p *metapartition.Partition)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	fn(l.p)
}

// New returns the meta role's partition host; node.Config.NewPartitions takes
// it as func(env) via NewFactory.
func New(env node.Env, opts Options) (*Host, error) {
	if opts.MaxBatchTxns <= 0 {
		opts.MaxBatchTxns = 256
	}
	h := &Host{
		env: env, opts: opts, log: env.Logger.With("component", "metanode"),
		parts: map[uint64]*partition{}, volumes: map[uint64]uint64{},
		stop: make(chan struct{}), rangeKick: make(chan struct{}, 1),
	}
	h.peers = newPeers(h)
	h.metrics = newMetrics(env.Registry, h)
	h.lifts = newLiftBatch(h)
	metapb.RegisterMetaNodeServer(env.RPC, granting{&service{h: h}})
	if opts.CollectInterval >= 0 {
		h.wg.Add(1)
		go h.runCollector()
	}
	h.wg.Add(1)
	go h.runRanges()
	h.wg.Add(1)
	go h.runMoves()
	h.wg.Add(1)
	go h.runResolver()
	return h, nil
}

// moveInterval is how often the leaders check for replica moves to drive.
const moveInterval = 500 * time.Millisecond

// runMoves makes, for every partition this node leads, the next Raft
// configuration change of the replica move its map records, or removes a
// member an abandoned move left.
func (h *Host) runMoves() {
	defer h.wg.Done()
	t := time.NewTicker(moveInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.mu.RLock()
		// Every partition: one with no move may still have a member an
		// abandoned move left (membership.Next removes it).
		moving := make([]*partition, 0, len(h.parts))
		for _, p := range h.parts {
			moving = append(moving, p)
		}
		h.mu.RUnlock()
		for _, p := range moving {
			joining, leaving := p.joining.Load(), p.leaving.Load()
			replicas := p.replicas.Load()
			if replicas == nil {
				continue // the map's view not recorded yet
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			step, err := membership.Drive(ctx, h.env.Raft, multiraft.GroupID(p.id), h.env.NodeID, *replicas, joining, leaving, false)
			cancel()
			if err != nil {
				h.log.Warn("replica move", "partition", p.id, "joining", joining, "leaving", leaving, "step", step.Kind.String(), "err", err)
			} else if step.Kind != membership.None {
				h.log.Info("replica move", "partition", p.id, "joining", joining, "leaving", leaving, "step", step.Kind.String(), "node", step.Node)
			}
		}
	}
}

// Remove deletes the Raft state of partitions the map moved off this node
// (node.Remover). They are closed already (Assign runs first).
func (h *Host) Remove(ids []uint64) error {
	var errs []error
	for _, id := range ids {
		h.mu.RLock()
		_, open := h.parts[id]
		h.mu.RUnlock()
		if open {
			continue
		}
		if err := h.env.Raft.DestroyGroup(multiraft.GroupID(id)); err != nil {
			errs = append(errs, fmt.Errorf("delete meta partition %d: %w", id, err))
			continue
		}
		h.log.Info("meta partition deleted: its replica moved to another node", "partition", id)
	}
	return errors.Join(errs...)
}

// NewFactory adapts New to node.Config.NewPartitions.
func NewFactory(opts Options) func(node.Env) (node.PartitionHost, error) {
	return func(env node.Env) (node.PartitionHost, error) { return New(env, opts) }
}

// Assign opens the meta partitions newly assigned to this node, closes the
// ones no longer assigned (their state stays on disk), and has the leaders
// cut the inode ranges the map has cut (ranges.go).
func (h *Host) Assign(assigned []*pb.Partition) error {
	want := map[uint64]*pb.Partition{}
	for _, p := range assigned {
		if p.Kind == pb.PartitionKind_PARTITION_KIND_META && (slices.Contains(p.Replicas, h.env.NodeID) || p.Joining == h.env.NodeID) {
			want[p.Id] = p
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for id, p := range want {
		if part, ok := h.parts[id]; ok {
			h.noteRange(part, p)
			part.setMove(p)
			continue
		}
		if err := h.open(p); err != nil {
			errs = append(errs, fmt.Errorf("meta partition %d: %w", id, err))
		}
	}
	for id, p := range h.parts {
		if _, ok := want[id]; ok {
			continue
		}
		p.merger.close()
		if err := h.env.Raft.RemoveGroup(multiraft.GroupID(id), false); err != nil && !errors.Is(err, multiraft.ErrGroupNotFound) {
			errs = append(errs, fmt.Errorf("close meta partition %d: %w", id, err))
		}
		delete(h.parts, id)
		delete(h.volumes, id)
		h.log.Info("meta partition closed", "partition", id)
	}
	return errors.Join(errs...)
}

func (h *Host) open(p *pb.Partition) error {
	mp, err := metapartition.New(p.InodeStart, p.InodeEnd)
	if err != nil {
		return err
	}
	ns := nsreplica.New(0)
	mp.OnFence(ns.Invalidate)
	feed := changefeed.NewLog(0)
	mp.OnApplied(recordChanges(feed))
	sm := &lockedSM{p: mp, restored: func() { ns.Clear(); feed.Restored() }}
	var peers []multiraft.NodeID // none for a joining replica: the leader adds it
	if slices.Contains(p.Replicas, h.env.NodeID) {
		for _, r := range p.Replicas {
			peers = append(peers, multiraft.NodeID(r))
		}
	}
	part := &partition{id: p.Id, volume: p.VolumeId, sm: sm, merger: newMerger(h, p.Id), ns: ns, feed: feed}
	part.merger.prepare = func(ctx context.Context, txn *metapb.Txn) (*metapb.TxnResult, error) {
		return (&service{h: h}).chargeQuotas(ctx, part, txn)
	}
	part.setMove(p)
	opts := multiraft.GroupOptions{OnLeaderChange: func(li multiraft.LeaderInfo) {
		if !li.IsLeader {
			return
		}
		if p.InodeStart == RootIno {
			h.goEnsureRoot(part)
		}
		if part.wantEnd.Load() != 0 {
			h.kickRanges()
		}
	}}
	if err := h.env.Raft.AddGroup(multiraft.GroupID(p.Id), peers, sm, opts); err != nil && !errors.Is(err, multiraft.ErrGroupExists) {
		part.merger.close()
		return err
	}
	h.parts[p.Id] = part
	h.volumes[p.Id] = p.VolumeId
	h.noteRange(part, p)
	h.log.Info("meta partition opened", "partition", p.Id, "replicas", p.Replicas, "inodes", fmt.Sprintf("%d-%d", p.InodeStart, p.InodeEnd))
	return nil
}

// Report tells the master, per hosted partition, whether this replica leads and
// how many records it holds.
func (h *Host) Report() []*pb.PartitionReport {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]*pb.PartitionReport, 0, len(h.parts))
	for id, p := range h.parts {
		r := &pb.PartitionReport{Id: id}
		if st, err := h.env.Raft.Status(multiraft.GroupID(id)); err == nil {
			r.Leader = st.IsLeader
			if st.IsLeader {
				r.Voters, r.Learners = st.Members()
			}
		}
		p.sm.read(func(mp *metapartition.Partition) {
			s := mp.Stats(0)
			r.Items = uint64(s.Inodes + s.Dentries)
			p.reportQuota(mp, r)
		})
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *pb.PartitionReport) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// goEnsureRoot creates the volume's root directory, in the background, if the
// partition that owns inode 1 has none yet. Only a leader calls it; want_ino
// makes a second attempt (a later leader, a retry) fail harmlessly with EEXIST.
func (h *Host) goEnsureRoot(p *partition) {
	var exists bool
	p.sm.read(func(mp *metapartition.Partition) { exists = mp.MaxIno() >= RootIno })
	if exists {
		return
	}
	select {
	case <-h.stop:
		return
	default:
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		go func() {
			select {
			case <-h.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		res, err := p.merger.submit(ctx, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{
			Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: rootMode, WantIno: RootIno,
		}}}}})
		switch {
		case err != nil:
			h.log.Warn("create the volume root", "partition", p.id, "err", err)
		case res.Errno == 0:
			h.log.Info("created the volume root", "partition", p.id)
		case metapb.Errno(res.Errno) != metapb.EEXIST:
			h.log.Warn("create the volume root", "partition", p.id, "errno", res.Errno, "msg", res.Message)
		}
	}()
}

// Close stops the mergers and background work; the node stops the Raft host
// afterwards.
func (h *Host) Close() error {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.parts {
		p.merger.close()
	}
	h.peers.close()
	return nil
}

func (h *Host) partition(id uint64) *partition {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.parts[id]
}

type metrics struct {
	requests        *prometheus.CounterVec // by rpc: requests from clients
	nsFetches       prometheus.Counter
	pathHops        prometheus.Counter     // path requests forwarded, inodes completed
	followUps       *prometheus.CounterVec // by step and outcome: steps run to finish creates and unlinks
	followUpsIn     prometheus.Counter     // follow-up Txns received from other meta nodes
	freed           prometheus.Counter
	dropsApplied    prometheus.Counter
	chunksReclaimed prometheus.Counter
	txns            prometheus.Counter
	proposals       prometheus.Counter
	batchTxns       prometheus.Histogram
	// grants counts the extent grants signed for clients; grantsUnsigned
	// the inodes answered without one (no key from the masters yet).
	grants, grantsUnsigned prometheus.Counter
	// dataRefsRefused counts client Txns refused for their extent keys or
	// chunks (datakeys.go); skipped the entries the collector dropped
	// without freeing them, by kind (collector.go).
	dataRefsRefused prometheus.Counter
	skipped         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, h *Host) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_meta_client_requests_total",
			Help: "Requests from clients this node's meta partitions received, by RPC (namespace fetches between meta nodes are not counted)."}, []string{"rpc"}),
		nsFetches: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_ns_fetches_total",
			Help: "Namespace replica entries this node fetched from other meta partitions to resolve paths."}),
		pathHops: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_path_hops_total",
			Help: "Path requests this node passed on to the owner of the last name, and inodes it read from their home to complete a lookup (server-side hops a client did not make)."}),
		followUps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_meta_follow_ups_total",
			Help: "Steps this node ran besides a client's create or unlink Txn to finish it: a parent's touch_dir, an unlinked inode's link and evict on other partitions, undo_create (a create under a removed parent taken back), by step and outcome (ok, refused, unreached)."}, []string{"step", "outcome"}),
		followUpsIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_follow_ups_received_total",
			Help: "Follow-up transactions this node's partitions received from other meta nodes (not counted as client requests)."}),
		freed: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_extents_freed_total", Help: "Deleted files' extents the collector freed on data nodes."}),
		dropsApplied: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_chunk_drops_applied_total",
			Help: "Chunk references given up by chunked files' layouts that the collector handed to their chunk index shard and acknowledged."}),
		chunksReclaimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_chunks_reclaimed_total",
			Help: "Unreferenced chunks the collector freed on data nodes and deleted from the chunk index."}),
		txns:      prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_txns_total", Help: "Meta transactions committed or refused by this node's partitions."}),
		proposals: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_proposals_total", Help: "Raft proposals made for meta transactions (merged batches)."}),
		batchTxns: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cairn_meta_batch_txns", Help: "Transactions merged into one Raft proposal.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
	}
	m.grants = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_grants_signed_total",
		Help: "Extent grants (tokens) signed for clients' answers."})
	m.grantsUnsigned = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_grants_unsigned_total",
		Help: "Inodes answered to a client without an extent grant because this node has no grant key yet."})
	reg.MustRegister(m.grants, m.grantsUnsigned)
	m.dataRefsRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_meta_data_refs_refused_total",
		Help: "Client transactions refused before replication because an extent key or chunk was impossible or named a data partition not of the volume."})
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_meta_collector_skipped_total",
		Help: "Free-list extent ranges (kind extent) and dead chunk index entries (kind chunk) the collector dropped without freeing: impossible, naming no data partition of the volume, or refused by a data node as invalid; each is logged."}, []string{"kind"})
	reg.MustRegister(m.dataRefsRefused, m.skipped)
	reg.MustRegister(m.requests, m.nsFetches, m.pathHops, m.followUps, m.followUpsIn, m.freed, m.dropsApplied, m.chunksReclaimed, m.txns, m.proposals, m.batchTxns)
	nsStat := func(f func(nsreplica.Stats) float64) func() float64 {
		return func() float64 {
			h.mu.RLock()
			defer h.mu.RUnlock()
			var sum float64
			for _, p := range h.parts {
				sum += f(p.ns.Stats())
			}
			return sum
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_meta_ns_replica_entries",
			Help: "Directory entries in the namespace replicas of this node's meta partitions."}, nsStat(func(s nsreplica.Stats) float64 { return float64(s.Entries) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_meta_ns_replica_bytes",
			Help: "Estimated memory of the namespace replicas of this node's meta partitions."}, nsStat(func(s nsreplica.Stats) float64 { return float64(s.Bytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_meta_ns_replica_hits_total",
			Help: "Path components resolved from a namespace replica."}, nsStat(func(s nsreplica.Stats) float64 { return float64(s.Hits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_meta_ns_replica_misses_total",
			Help: "Path components a namespace replica did not have."}, nsStat(func(s nsreplica.Stats) float64 { return float64(s.Misses) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cairn_meta_ns_replica_invalidations_total",
			Help: "Directories invalidated in namespace replicas by fences and locks."}, nsStat(func(s nsreplica.Stats) float64 { return float64(s.Invalidations) })),
	)
	return m
}
