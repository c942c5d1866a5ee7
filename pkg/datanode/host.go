package datanode

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/diskfs"
	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/node"
)

// Options tune the data role. Zero fields take the defaults.
type Options struct {
	// Store configures every partition's extent store (FS, block size,
	// small-file threshold, ...).
	Store extentstore.Options
	// Server bounds the data-path connections clients and upstream
	// replicas open to this node.
	Server dataproto.ServerOptions
	// Chain bounds this node's connections to the next replica of a chain
	// and to peers (alignment, repair). Its ReadTimeout is how long a
	// replica waits for the next one before the write fails with
	// CodeReplicaFailed; default 5s. Connecting to it takes at most its
	// DialTimeout (dataproto's default, 1.5s) before the write fails.
	Chain dataproto.ConnOptions
	// AlignDelay is how long after opening a partition a follower first
	// aligns its extents with the primary; default 1s.
	AlignDelay time.Duration
	// AlignInterval is how often a follower re-checks alignment with the
	// primary; default 1m. A failed forwarded append or a lagging overwrite
	// triggers it sooner.
	AlignInterval time.Duration
	// AlignQuietPeriod: a follower leaves alone an extent it received a
	// forwarded append for within this period (a stream is writing it, and
	// copying its tail would race the chain), and copies a missing tail
	// only once the primary's committed size stayed the same this long;
	// default 10s.
	AlignQuietPeriod time.Duration
	// ScrubInterval is how often every partition is scrubbed; default 24h.
	ScrubInterval time.Duration
	// ScrubBytesPerSecond paces the scrubber; default 32 MiB/s.
	ScrubBytesPerSecond int64
	// RecoveryBytesPerSecond paces what the node copies from peers
	// (alignment: catching up, filling a moved replica), over all its
	// partitions; default DefaultRecoveryBytesPerSecond.
	RecoveryBytesPerSecond int64
	// LeaseTimeout bounds the wait for a small-extent lease; default 5s.
	LeaseTimeout time.Duration
	// ProposeTimeout bounds an overwrite's trip through Raft; default 10s.
	ProposeTimeout time.Duration
	// UsageTTL is how long a partition's measured disk usage is reused in
	// reports; default 5s.
	UsageTTL time.Duration
	// FreeSpace reports the free and total bytes of the file system holding
	// dir; default statfs(2). A partition whose store turned read-only on
	// ENOSPC resumes once ResumeFreeRatio of it is free again.
	FreeSpace func(dir string) (free, total uint64, err error)
	// JournalIdleBytes and JournalIdleAfter: a partition whose metadata
	// log has grown by at least JournalIdleBytes since it was last
	// rewritten, and not at all for JournalIdleAfter, is rewritten
	// (extentstore.Store.Compact), so that the bytes of deleted small
	// files, which the log carries until then, come back soon after
	// writing stops. Busy partitions rewrite theirs every
	// Store.CompactBytes of growth. Defaults 1 MiB and 10 s.
	JournalIdleBytes int64
	JournalIdleAfter time.Duration
	// ReserveBytes is the reserve file the node frees for its logs when
	// its disk fills (reserve.go); 0: 2% of the disk, between 16 MiB and
	// 1 GiB; negative: none.
	ReserveBytes int64
}

// ResumeFreeRatio is the share of its file system that must be free again
// before a partition whose disk filled up takes new data: 90% used, well
// below the 95% at which the master stops placing replicas on the node, so
// that a node does not flap between full and not.
const ResumeFreeRatio = 0.10

// statfsFree is Options.FreeSpace's default.
func statfsFree(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// DefaultRecoveryBytesPerSecond is Options.RecoveryBytesPerSecond's default.
const DefaultRecoveryBytesPerSecond = 128 << 20

func (o Options) withDefaults(log *slog.Logger) Options {
	if o.Chain.ReadTimeout <= 0 {
		o.Chain.ReadTimeout = 5 * time.Second
	}
	if o.AlignDelay <= 0 {
		o.AlignDelay = time.Second
	}
	if o.AlignInterval <= 0 {
		o.AlignInterval = time.Minute
	}
	if o.AlignQuietPeriod <= 0 {
		o.AlignQuietPeriod = 10 * time.Second
	}
	if o.ScrubInterval <= 0 {
		o.ScrubInterval = 24 * time.Hour
	}
	if o.ScrubBytesPerSecond <= 0 {
		o.ScrubBytesPerSecond = 32 << 20
	}
	if o.RecoveryBytesPerSecond <= 0 {
		o.RecoveryBytesPerSecond = DefaultRecoveryBytesPerSecond
	}
	if o.LeaseTimeout <= 0 {
		o.LeaseTimeout = 5 * time.Second
	}
	if o.ProposeTimeout <= 0 {
		o.ProposeTimeout = 10 * time.Second
	}
	if o.UsageTTL <= 0 {
		o.UsageTTL = 5 * time.Second
	}
	if o.JournalIdleBytes <= 0 {
		o.JournalIdleBytes = 1 << 20
	}
	if o.JournalIdleAfter <= 0 {
		o.JournalIdleAfter = 10 * time.Second
	}
	if o.FreeSpace == nil {
		o.FreeSpace = statfsFree
	}
	if o.Server.Logger == nil {
		o.Server.Logger = log
	}
	if o.Store.Logger == nil {
		o.Store.Logger = log
	}
	return o
}

// maxWrite is the store's largest append (and the protocol's payload).
func (o Options) maxWrite() int {
	if o.Store.MaxWriteBytes > 0 {
		return min(o.Store.MaxWriteBytes, dataproto.MaxPayload)
	}
	return min(1<<20, dataproto.MaxPayload)
}

// smallMax is the store's small-file threshold.
func (o Options) smallMax() int {
	if o.Store.SmallFileMax > 0 {
		return o.Store.SmallFileMax
	}
	return 128 << 10
}

// Host is the data role's partition host: one extent store per assigned
// data partition, served over the node's data-path listener. See the
// package documentation.
type Host struct {
	env   node.Env
	opts  Options
	log   *slog.Logger
	m     *metrics
	srv   *dataproto.Server
	peers *peerPool
	// reporter tells the master of replicas that did not answer a forwarded
	// write (nil without masters, as in unit tests).
	reporter *masterclient.FailureReporter
	// recovery paces copies from peers (RecoveryBytesPerSecond).
	recovery *pacer

	serveDone chan struct{}

	mu    sync.RWMutex
	parts map[uint64]*partition
	// gone holds the partitions closed here whose state is still on disk
	// (dp-N directories not open): they are reported until the master names
	// them removed (Remove), since it names only partitions a node reports.
	gone   map[uint64]bool
	closed bool

	// clientConns counts the data-path connections of each client
	// identity (by certificate serial): at most MaxClientConns, so that
	// one client cannot take the node's MaxConns alone.
	connMu      sync.Mutex
	clientConns map[string]int
	// grants: what each client certificate may use here (grants.go).
	grants grantStore
	// space is the disk's reserve; while it is given up, new data is
	// refused (reserve.go).
	space *reserve
}

// MaxClientConns bounds the data-path connections one client identity
// keeps open to a data node (past it a new one is closed at once); each
// carries at most
// dataproto.ServerOptions.MaxInflight requests. A mount opens one per
// data node it writes or reads through.
const MaxClientConns = 64

// New starts the data role on env: it serves env.DataListener at once
// (requests for partitions not yet open are refused with
// CodeUnknownPartition) and opens partitions as Assign names them.
func New(env node.Env, opts Options) (*Host, error) {
	if env.DataListener == nil {
		return nil, errors.New("data node: no data-path listener (start the node with --data-listen)")
	}
	if env.Raft == nil || env.ResolveData == nil {
		return nil, errors.New("data node: Raft host and address resolver are required")
	}
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	if env.Epoch == nil {
		env.Epoch = func() uint64 { return 0 }
	}
	if env.Refresh == nil {
		env.Refresh = func() {}
	}
	if env.AppliedEpoch == nil {
		env.AppliedEpoch = env.Epoch
	}
	log := env.Logger.With("component", "datanode")
	opts = opts.withDefaults(log)
	if opts.Chain.TLS == nil {
		opts.Chain.TLS = env.TLS // peers: the chain and alignment
	}
	if opts.Chain.Network == nil {
		opts.Chain.Network = env.Network // peers, as the node dials them
	}
	if opts.Chain.TLSFor == nil {
		opts.Chain.TLSFor = env.PeerTLS // and the node the map names at the address
	}
	if opts.Server.TLS == nil {
		opts.Server.TLS = env.ServerTLS
	}
	h := &Host{env: env, opts: opts, log: log, parts: map[uint64]*partition{}, gone: onDisk(env.DataDir), serveDone: make(chan struct{}), clientConns: map[string]int{}}
	h.peers = newPeerPool(opts.Chain)
	h.recovery = &pacer{rate: float64(opts.RecoveryBytesPerSecond)}
	if env.Masters != nil {
		h.reporter = env.Masters.NewFailureReporter(fmt.Sprintf("node %d", env.NodeID))
	}
	if env.DataDir != "" {
		h.space = newReserve(env.DataDir, opts.ReserveBytes, opts.FreeSpace, log)
		go h.space.run()
	}
	h.srv = dataproto.NewServer(h.newSession, opts.Server)
	m, err := newMetrics(env.Registry, h)
	if err != nil {
		return nil, err
	}
	h.m = m
	go func() {
		defer close(h.serveDone)
		if err := h.srv.Serve(env.DataListener); err != nil {
			h.log.Error("data path stopped serving", "err", err)
		}
	}()
	h.log.Info("data path serving", "addr", env.DataListener.Addr())
	return h, nil
}

// storeFS is the file system the partitions' stores live on.
func (h *Host) storeFS() diskfs.FS {
	if h.opts.Store.FS != nil {
		return h.opts.Store.FS
	}
	return diskfs.OS
}

// NewFactory adapts New to node.Config.NewPartitions.
func NewFactory(opts Options) func(node.Env) (node.PartitionHost, error) {
	return func(env node.Env) (node.PartitionHost, error) { return New(env, opts) }
}

// Assign opens the data partitions newly assigned to this node, updates
// the replica sets of open ones (a changed set takes the current map
// epoch, so writers with an older view are refused), and closes the ones no
// longer assigned (their data stays on disk), once their Raft group no
// longer counts this node as a voter (retire.go).
func (h *Host) Assign(assigned []*pb.Partition) error {
	want := map[uint64]*pb.Partition{}
	for _, p := range assigned {
		if p.Kind == pb.PartitionKind_PARTITION_KIND_DATA && (slices.Contains(p.Replicas, h.env.NodeID) || p.Joining == h.env.NodeID) {
			want[p.Id] = p
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errors.New("data node closed")
	}
	var errs []error
	for id, p := range want {
		if cur, ok := h.parts[id]; ok {
			if cur.retiring.Swap(false) {
				cur.log.Info("data partition assigned here again while retiring")
			}
			cur.setView(p, h.env.Epoch())
			continue
		}
		part, err := openPartition(h, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("data partition %d: %w", id, err))
			continue
		}
		h.parts[id] = part
		delete(h.gone, id)
	}
	for id, p := range h.parts {
		if _, ok := want[id]; ok {
			continue
		}
		if p.raftVoter() {
			p.retire()
			continue
		}
		delete(h.parts, id)
		h.gone[id] = true
		if err := p.close(); err != nil {
			errs = append(errs, fmt.Errorf("close data partition %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Remove deletes the state of partitions the map moved off this node
// (node.Remover): the Raft group's and the extent store with every byte.
// They are closed already (Assign runs first), or retiring (retire.go),
// which the master names once their group's leader no longer counts this
// node: those are closed first. Any other open one is left alone.
func (h *Host) Remove(ids []uint64) error {
	var errs []error
	for _, id := range ids {
		if p := h.partition(id); p != nil && !h.closeRetiring(p) {
			continue // open, and not retiring
		}
		if err := h.env.Raft.DestroyGroup(multiraft.GroupID(id)); err != nil {
			errs = append(errs, fmt.Errorf("delete data partition %d: %w", id, err))
			continue
		}
		dir := filepath.Join(h.env.DataDir, fmt.Sprintf("dp-%d", id))
		if err := diskfs.RemoveAll(h.storeFS(), dir); err != nil {
			errs = append(errs, fmt.Errorf("delete data partition %d: %w", id, err))
			continue
		}
		h.mu.Lock()
		delete(h.gone, id)
		h.mu.Unlock()
		h.log.Info("data partition deleted: its replica moved to another node", "partition", id, "dir", dir)
	}
	return errors.Join(errs...)
}

// onDisk returns the data partitions whose state is in dir (dp-N
// directories), none of them open yet.
func onDisk(dir string) map[uint64]bool {
	out := map[uint64]bool{}
	if dir == "" {
		return out
	}
	names, _ := filepath.Glob(filepath.Join(dir, "dp-*"))
	for _, name := range names {
		if id, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(name), "dp-"), 10, 64); err == nil {
			out[id] = true
		}
	}
	return out
}

// Report tells the master, per hosted partition, whether this replica leads
// its Raft group, the disk space its extent store occupies (what du counts,
// so deletions show up as freed space) and its number of extents.
func (h *Host) Report() []*pb.PartitionReport {
	h.mu.RLock()
	parts := make([]*partition, 0, len(h.parts))
	for _, p := range h.parts {
		parts = append(parts, p)
	}
	out := make([]*pb.PartitionReport, 0, len(parts)+len(h.gone))
	for id := range h.gone {
		out = append(out, &pb.PartitionReport{Id: id}) // closed, on disk
	}
	h.mu.RUnlock()
	for _, p := range parts {
		out = append(out, p.report())
	}
	slices.SortFunc(out, func(a, b *pb.PartitionReport) int {
		switch {
		case a.Id < b.Id:
			return -1
		case a.Id > b.Id:
			return 1
		}
		return 0
	})
	return out
}

// Close stops serving (closing every connection and waiting for the
// requests in progress), then closes every partition: its background work,
// its Raft group on this host, and its extent store after a final commit.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.srv.Close()
	<-h.serveDone
	if h.space != nil {
		h.space.close()
	}
	h.mu.Lock()
	parts := h.parts
	h.parts = map[uint64]*partition{}
	h.mu.Unlock()
	var errs []error
	for id, p := range parts {
		if err := p.close(); err != nil {
			errs = append(errs, fmt.Errorf("close data partition %d: %w", id, err))
		}
	}
	h.peers.close()
	return errors.Join(errs...)
}

// partition returns hosted partition id, or nil.
func (h *Host) partition(id uint64) *partition {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.parts[id]
}

// ServerStats returns the data-path server's counters (sendfile bytes,
// connections).
func (h *Host) ServerStats() dataproto.ServerStats { return h.srv.Stats() }

// Addr is the data-path address this host serves.
func (h *Host) Addr() string { return h.env.DataListener.Addr().String() }

// journal sums the metadata log sizes of the node's partitions.
func (h *Host) journal() extentstore.JournalStats {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var sum extentstore.JournalStats
	for _, p := range h.parts {
		j := p.st().Journal()
		sum.Bytes += j.Bytes
		sum.SnapshotBytes += j.SnapshotBytes
	}
	return sum
}
