// Package dataclient is the SDK side of the data path: it writes file
// contents to data partitions and reads them back, speaking dataproto to
// the data nodes. The metadata side (which extents hold which bytes of a
// file) is the caller's: writers return metapb.ExtentKeys for it to record,
// readers take them.
//
//   - Writer packs one file's sequential writes into packets and streams
//     them to the primary of a partition chosen at random among the
//     volume's writable ones (CFS §2.7.1), pipelined; a write that fails
//     moves to a new extent on another partition, resending what was not
//     acknowledged. A file that ends up no larger than the small-file
//     threshold goes to a shared small extent instead (WriteSmall).
//   - Overwrite replaces existing bytes through the partition's Raft group.
//   - Reader reads extent keys, with read-ahead on sequential reads, from
//     the partition's primary first and any other replica on failure.
//   - Free hands deleted files' extents back (the deletion collector).
//   - WriteChunk and ReadChunk store and fetch content-addressed chunks
//     (pkg/chunker), packed like small files; every replica checks a chunk
//     against its fingerprint before storing it, and ReadChunk returns only
//     bytes that match it, trying every replica.
//
// A partition is writable when every replica's node is alive in the last
// topology and no write to it failed within Options.ExcludeFor.
package dataclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/gate"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/replicaset"
)

// Node is a data node as the client sees it.
type Node struct {
	// Addr is the node's data-path address.
	Addr string
	// Alive is the master's liveness verdict.
	Alive bool
}

// Topology is what the client routes by: a volume's data partitions (with
// their replica order: the first is the primary) and the data nodes.
type Topology struct {
	Epoch      uint64
	Partitions []*pb.Partition
	Nodes      map[uint64]Node
}

// Source fetches the current topology.
type Source func(ctx context.Context) (*Topology, error)

// FromMap builds the topology of volume from a cluster map.
func FromMap(m *pb.ClusterMap, volume string) (*Topology, error) {
	var vol *pb.Volume
	for _, v := range m.GetVolumes() {
		if v.Name == volume {
			vol = v
		}
	}
	if vol == nil {
		return nil, fmt.Errorf("no volume %q in the cluster map", volume)
	}
	t := &Topology{Epoch: m.Epoch, Nodes: map[uint64]Node{}}
	for _, id := range vol.DataPartitions {
		if p := m.Partitions[id]; p != nil {
			t.Partitions = append(t.Partitions, p)
		}
	}
	for id, n := range m.Nodes {
		if n.Role == pb.Role_ROLE_DATA {
			t.Nodes[id] = Node{Addr: n.DataAddr, Alive: n.State == pb.NodeState_NODE_STATE_ALIVE}
		}
	}
	return t, nil
}

// MasterSource reads volume's topology from the masters' map.
func MasterSource(mc *masterclient.Client, volume string) Source {
	return func(ctx context.Context) (*Topology, error) {
		var resp *pb.GetMapResponse
		err := mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
			resp, err = m.GetMap(ctx, &pb.GetMapRequest{}, o...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("get cluster map: %w", err)
		}
		return FromMap(resp.Map, volume)
	}
}

// Options tune a client. Zero fields take the defaults.
type Options struct {
	// PacketBytes is the size of one append packet; default 512 KiB. CFS
	// uses 128 KiB; on this path a larger packet halves the per-packet
	// work (a chain round, a group-commit wake-up on each replica) and took
	// one writer from 336 to 478 MB/s over three replicas
	// (BenchmarkSequentialVsLocal).
	PacketBytes int
	// ExtentBytes is where a writer moves on to a new extent; default
	// 128 MiB. At most the data nodes' extent limit (1 GiB by default).
	ExtentBytes int64
	// SmallFileBytes is the small-file threshold; default 128 KiB. It must
	// not exceed the data nodes' threshold.
	SmallFileBytes int
	// MaxInflightPackets bounds one writer's unacknowledged packets (and
	// so the memory it holds: this many packets); default 16 (8 MiB).
	MaxInflightPackets int
	// ExcludeFor is how long a partition a write failed on is avoided;
	// default 5s.
	ExcludeFor time.Duration
	// WaitWritable is how long a write keeps retrying without progress
	// (partitions failing, all excluded or degraded) before it fails;
	// default 30s.
	WaitWritable time.Duration
	// RefreshEvery is how old the topology may get before a write
	// refreshes it, or a read starts a refresh beside it; default 10s.
	RefreshEvery time.Duration
	// ReadAttemptTimeout bounds a read's wait for one replica while
	// another is left to try; default 3s. A replica that does not answer
	// within it is silent (silence.go) and the read moves on: a node cut
	// off without a word (a zone down, a partition) costs a read this long
	// once, not the whole operation's time on every read.
	ReadAttemptTimeout time.Duration
	// RefreshTimeout bounds one Refresh: the map is a hint a reader or
	// writer asks for after a failure, and a master leader it cannot reach
	// must cost it this long, not the whole call (a writer's context
	// outlives its syscalls); default 5s.
	RefreshTimeout time.Duration
	// ReadChunkBytes is the unit of sequential reads and read-ahead;
	// default 1 MiB (the protocol's largest payload).
	ReadChunkBytes int
	// ReadAheadBytes is how far ahead of a sequential reader chunks are
	// fetched; default 8 MiB; negative disables read-ahead.
	ReadAheadBytes int
	// ConnsPerNode is the connections kept per data node; default 2.
	ConnsPerNode int
	// SmallStickiness is how long small files keep to the partition
	// chosen at random for them (WriteSmall); default 1s, negative: a
	// partition per file. Long enough for a burst of concurrent writers
	// to share its group commits, short enough that a client's small
	// files spread over every partition within seconds.
	SmallStickiness time.Duration
	// Conn bounds each connection (deadlines, calls in flight).
	Conn dataproto.ConnOptions
	// ReportFailure, if set, is told of every data node that did not answer
	// (a refused or broken connection, a timeout), so that the master marks
	// a dead node down without waiting for its down timer
	// (masterclient.FailureReporter). It must not block.
	ReportFailure func(node uint64, cause error)
	// Logger receives a line for every write moved off a partition and
	// every read moved to another replica; default: discarded.
	Logger *slog.Logger
	// Grants, if set, are the extent grants the client holds (filled from
	// the meta nodes' answers): reads and overwrites present the one that
	// names their range to the data node first (grants.go). Nil presents
	// none: a node's, an admin's or a plain-text client.
	Grants *grant.Book
	// Receipts, if set, keeps the data nodes' receipts for what this
	// client wrote (a token per new extent, small file or chunk), apart
	// from Grants so that a flood of grants never pushes out the receipt
	// of a key not yet recorded; nil keeps them in Grants.
	Receipts *grant.Book
	// Regrant fetches inode ino again (checked for writing when write) so that its answer's grants land in
	// Grants; called when a data node refuses I/O of a context marked with
	// WithInode for want of a grant.
	Regrant func(ctx context.Context, ino uint64, write bool) error
}

func (o Options) withDefaults() Options {
	if o.PacketBytes <= 0 {
		o.PacketBytes = 512 << 10
	}
	o.PacketBytes = min(o.PacketBytes, dataproto.MaxPayload)
	if o.ExtentBytes <= 0 {
		o.ExtentBytes = 128 << 20
	}
	o.ExtentBytes = max(o.ExtentBytes, int64(o.PacketBytes))
	if o.SmallFileBytes <= 0 {
		o.SmallFileBytes = 128 << 10
	}
	if o.MaxInflightPackets <= 0 {
		o.MaxInflightPackets = 16
	}
	if o.ExcludeFor <= 0 {
		o.ExcludeFor = 5 * time.Second
	}
	if o.WaitWritable <= 0 {
		o.WaitWritable = 30 * time.Second
	}
	if o.RefreshEvery <= 0 {
		o.RefreshEvery = 10 * time.Second
	}
	if o.RefreshTimeout <= 0 {
		o.RefreshTimeout = 5 * time.Second
	}
	if o.ReadAttemptTimeout <= 0 {
		o.ReadAttemptTimeout = 3 * time.Second
	}
	if o.ReadChunkBytes <= 0 {
		o.ReadChunkBytes = 1 << 20
	}
	o.ReadChunkBytes = min(o.ReadChunkBytes, dataproto.MaxPayload)
	if o.ReadAheadBytes == 0 {
		o.ReadAheadBytes = 8 << 20
	}
	if o.ConnsPerNode <= 0 {
		o.ConnsPerNode = 2
	}
	if o.SmallStickiness == 0 {
		o.SmallStickiness = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Conn.MaxInflight <= 0 {
		o.Conn.MaxInflight = max(64, o.MaxInflightPackets)
	}
	return o
}

// Errors.
var (
	// ErrNoWritablePartition: no partition of the volume took the write
	// within Options.WaitWritable (all degraded, excluded after failures,
	// or read-only).
	ErrNoWritablePartition = errors.New("dataclient: no writable data partition")
	// ErrNoSpace: no partition of the volume took the write because every
	// one refused new data for lack of space (CodeReadOnly). It wraps
	// ErrNoWritablePartition.
	ErrNoSpace = fmt.Errorf("%w: the data nodes are out of space", ErrNoWritablePartition)
	// ErrClosed: the client or writer is closed.
	ErrClosed = errors.New("dataclient: closed")
)

// Client reaches the data nodes of one volume. It is safe for concurrent
// use; Writers and Readers are not (one goroutine each).
type Client struct {
	src  Source
	opts Options
	pool *connPool
	// chunks recycles the read-ahead buffers of Readers (ReadChunkBytes
	// each): a sequential read would otherwise allocate and zero its whole
	// size again.
	chunks sync.Pool
	// packets recycles writers' full packet buffers (PacketBytes each)
	// once every replica acknowledged them: a sequential writer would
	// otherwise allocate, and the garbage collector free, its whole
	// stream again.
	packets sync.Pool

	// refreshGate lets one refresh run at a time: a caller waits for
	// another's refresh (a call to the masters) only as long as its own
	// context allows.
	refreshGate gate.Gate
	refreshing  atomic.Bool // refreshBehind's refresh is running

	mu       sync.Mutex
	topo     *Topology
	topoAt   time.Time
	parts    map[uint64]*pb.Partition
	excluded map[uint64]time.Time      // partition -> avoided until
	lastFail map[uint64]dataproto.Code // partition -> code of its last write failure
	leaders  map[uint64]uint64         // partition -> Raft leader last seen (overwrites)
	silent   silence                   // data nodes that did not answer (silence.go)
	// small is the partition small files go to until smallUntil
	// (WriteSmall): writers of one client then share its group commits.
	small      uint64
	smallUntil time.Time
	closed     bool

	// presented: the grant tokens each data node was sent (grants.go).
	presented presented

	writeFailures, readFailovers, readCRCErrors, refreshes, chunkBuffers, packetBuffers atomic.Int64
	grantsPresented, regrants                                                           atomic.Int64
}

// Stats are a client's counters.
type Stats struct {
	// WriteFailures counts writes (packets, extent creations, small files)
	// that failed on a partition and were retried on another.
	WriteFailures int64
	// ReadFailovers counts reads a replica refused or failed, retried on
	// another replica.
	ReadFailovers int64
	// Refreshes counts topology fetches.
	Refreshes int64
	// ReadCRCErrors counts reads whose bytes did not match the CRC the
	// replica sent (each retried on the same replica once, then another).
	ReadCRCErrors int64
	// ChunkBuffers counts read-ahead chunk buffers allocated because none
	// was free to reuse.
	ChunkBuffers int64
	// PacketBuffers counts writers' packet buffers allocated because none
	// was free to reuse.
	PacketBuffers int64
	// GrantsPresented counts extent grants sent to data nodes (OpGrant);
	// Regrants the inodes fetched again because a data node wanted a
	// fresh grant.
	GrantsPresented, Regrants int64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{WriteFailures: c.writeFailures.Load(), ReadFailovers: c.readFailovers.Load(), Refreshes: c.refreshes.Load(), ReadCRCErrors: c.readCRCErrors.Load(), ChunkBuffers: c.chunkBuffers.Load(), PacketBuffers: c.packetBuffers.Load(),
		GrantsPresented: c.grantsPresented.Load(), Regrants: c.regrants.Load()}
}

// New fetches the topology from src and returns a client.
func New(ctx context.Context, src Source, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	c := &Client{
		src: src, opts: opts, pool: newConnPool(opts.Conn, opts.ConnsPerNode),
		excluded: map[uint64]time.Time{}, lastFail: map[uint64]dataproto.Code{}, leaders: map[uint64]uint64{},
		refreshGate: gate.New(),
	}
	if err := c.refresh(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes the client's connections. Writers and readers in use fail.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.pool.close()
	return nil
}

// Refresh fetches the topology again, waiting at most
// Options.RefreshTimeout; on an error the client keeps its view.
func (c *Client) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RefreshTimeout)
	defer cancel()
	return c.refresh(ctx)
}

// refresh is Refresh bounded by ctx alone (New waits as long as its
// caller lets it for the first view).
func (c *Client) refresh(ctx context.Context) error {
	if err := c.refreshGate.Lock(ctx); err != nil {
		return err
	}
	defer c.refreshGate.Unlock()
	c.refreshes.Add(1)
	t, err := c.src(ctx)
	if err != nil {
		return err
	}
	parts := make(map[uint64]*pb.Partition, len(t.Partitions))
	for _, p := range t.Partitions {
		parts[p.Id] = p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.topo == nil || t.Epoch >= c.topo.Epoch {
		for id := range c.excluded {
			if old, p := c.parts[id], parts[id]; old != nil && p != nil && old.Epoch != p.Epoch {
				// Its chain changed (a replica left or came back): the
				// failure that excluded it may be over.
				delete(c.excluded, id)
			}
		}
		c.topo, c.topoAt, c.parts = t, time.Now(), parts
	}
	return nil
}

// staleLocked reports whether the topology should be read again: it is
// older than Options.RefreshEvery, or older than a second while a node is
// silent (the master, told of it, may mark it down any moment). c.mu is
// held.
func (c *Client) staleLocked(now time.Time) bool {
	age := now.Sub(c.topoAt)
	return age > c.opts.RefreshEvery || age > time.Second && c.silent.any(now)
}

// refreshBehind starts a Refresh in the background unless one it started
// is still running: a reader's map goes stale too (a node it reads from
// goes down, a partition moves), but a read must not wait for the master.
func (c *Client) refreshBehind() {
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.refreshing.Store(false)
		_ = c.Refresh(context.Background())
	}()
}

// Topology returns the topology in use.
func (c *Client) Topology() *Topology {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topo
}

func (c *Client) epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topo.Epoch
}

// partition returns partition id from the topology.
func (c *Client) partition(id uint64) (*pb.Partition, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.parts[id]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("dataclient: partition %d is not a data partition of the volume (epoch %d)", id, c.topo.Epoch)
}

// addr returns node id's data-path address.
func (c *Client) addr(id uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.topo.Nodes[id]
	return n.Addr, ok && n.Addr != ""
}

// exclude avoids partition id for d.
func (c *Client) exclude(id uint64, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.excluded[id] = time.Now().Add(d)
}

// pick chooses a writable partition at random (CFS §2.7.1), waiting up to
// WaitWritable for one, and refreshing a topology older than RefreshEvery.
func (c *Client) pick(ctx context.Context) (*pb.Partition, error) {
	return c.pickPrefer(ctx, 0)
}

// pickPrefer is pick, but returns partition prefer while it is writable
// (known, healthy and not avoided).
func (c *Client) pickPrefer(ctx context.Context, prefer uint64) (*pb.Partition, error) {
	if prefer != 0 {
		if p := c.preferred(prefer); p != nil {
			return p, nil
		}
	}
	deadline := time.Now().Add(c.opts.WaitWritable)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		stale := c.staleLocked(time.Now())
		c.mu.Unlock()
		if stale {
			_ = c.Refresh(ctx) // keep the old view if the master is away
		}
		if p, wait := c.choose(); p != nil {
			return p, nil
		} else if time.Now().Add(wait).After(deadline) {
			return nil, c.noneWritable()
		} else {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
			_ = c.Refresh(ctx)
		}
	}
}

// choose returns a random writable partition, or how long to wait for one.
// Partitions with a silent node in their chain are taken only when there
// is no other, and never one headed by a silent node (silence.go).
func (c *Client) choose() (*pb.Partition, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var clear, followerSilent []*pb.Partition
	wait := 500 * time.Millisecond
	for _, p := range c.topo.Partitions {
		if until, ex := c.excluded[p.Id]; ex {
			if now.Before(until) {
				wait = min(wait, until.Sub(now))
				continue
			}
			delete(c.excluded, p.Id)
		}
		if len(p.Replicas) == 0 || !c.healthyLocked(p) {
			continue
		}
		switch c.silentInLocked(p, now) {
		case 0:
			clear = append(clear, p)
		case replicaset.Head(p):
			if until := c.silent[replicaset.Head(p)]; until.Sub(now) < wait {
				wait = until.Sub(now)
			}
		default:
			followerSilent = append(followerSilent, p)
		}
	}
	switch {
	case len(clear) > 0:
		return clear[rand.N(len(clear))], 0
	case len(followerSilent) > 0:
		return followerSilent[rand.N(len(followerSilent))], 0
	}
	return nil, max(wait, 10*time.Millisecond)
}

// silentInLocked returns the head of p's write chain if it is silent, else
// another silent member of the chain, else 0.
func (c *Client) silentInLocked(p *pb.Partition, now time.Time) uint64 {
	chain := replicaset.Chain(p)
	if len(chain) > 0 && c.silent.is(chain[0], now) {
		return chain[0]
	}
	for _, r := range chain[min(1, len(chain)):] {
		if c.silent.is(r, now) {
			return r
		}
	}
	return 0
}

// noneWritable explains why no partition takes writes: ErrNoSpace when
// every one's last failure was a lack of space, else ErrNoWritablePartition
// with the count of partitions that lost replicas and of those that failed.
func (c *Client) noneWritable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var degraded, full, failed int
	for _, p := range c.topo.Partitions {
		switch {
		case c.lastFail[p.Id] == dataproto.CodeReadOnly:
			full++
		case !c.healthyLocked(p):
			degraded++
		default:
			failed++
		}
	}
	n := len(c.topo.Partitions)
	if n > 0 && full == n {
		return fmt.Errorf("%w (all %d partitions)", ErrNoSpace, n)
	}
	return fmt.Errorf("%w among %d partitions: %d with too few live replicas (map epoch %d), %d whose last write failed, %d out of space",
		ErrNoWritablePartition, n, degraded, c.topo.Epoch, failed, full)
}

// preferred returns partition id if it is writable now, else nil.
func (c *Client) preferred(id uint64) *pb.Partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if until, ex := c.excluded[id]; ex && now.Before(until) {
		return nil
	}
	for _, p := range c.topo.Partitions {
		if p.Id == id && len(p.Replicas) > 0 && c.healthyLocked(p) && c.silentInLocked(p, now) == 0 {
			return p
		}
	}
	return nil
}

// healthyLocked: the partition's write chain takes writes
// (pkg/replicaset) and every node in it is alive and reachable.
func (c *Client) healthyLocked(p *pb.Partition) bool {
	if !replicaset.Writable(p) {
		return false
	}
	for _, r := range replicaset.Chain(p) {
		if n, ok := c.topo.Nodes[r]; !ok || !n.Alive || n.Addr == "" {
			return false
		}
	}
	return true
}

// failed reacts to a write's failure on partition p: it avoids the
// partition for a while, or refreshes the topology when the partition says
// the client's view is stale.
func (c *Client) failed(ctx context.Context, p *pb.Partition, err error) {
	c.writeFailures.Add(1)
	c.opts.Logger.Warn("data write failed; moving to another partition", "partition", p.Id, "err", err)
	c.mu.Lock()
	c.lastFail[p.Id] = dataproto.CodeOf(err)
	c.mu.Unlock()
	c.unreachable(replicaset.Head(p), err)
	switch dataproto.CodeOf(err) {
	case dataproto.CodeStaleEpoch:
		_ = c.Refresh(ctx)
	case dataproto.CodeNotPrimary, dataproto.CodeDegraded:
		// The chain changed and this client's view is behind, or the
		// partition lost replicas: read the map again, and avoid it
		// until its chain changes.
		c.exclude(p.Id, c.opts.ExcludeFor)
		_ = c.Refresh(ctx)
	case dataproto.CodeUnknownPartition, dataproto.CodeBusy:
		// A node that has not heard of its assignment yet, or a busy one:
		// soon better.
		c.exclude(p.Id, min(c.opts.ExcludeFor, time.Second))
	case dataproto.CodeReplicaFailed:
		// A replica down the chain did not answer the primary, which
		// told the master: the map may leave it out already. The
		// primary names it: it is silent to this client as if it had
		// not answered it (silence.go), so that the next write does
		// not choose another partition it is in and wait the chain's
		// timeout for it again.
		c.exclude(p.Id, c.opts.ExcludeFor)
		c.silenceFailedReplica(p, err)
		_ = c.Refresh(ctx)
	default:
		c.exclude(p.Id, c.opts.ExcludeFor)
	}
}

// primaryConn returns a connection to the head of p's write chain.
func (c *Client) primaryConn(ctx context.Context, p *pb.Partition) (*dataproto.Conn, error) {
	head := replicaset.Head(p)
	if head == 0 {
		return nil, &dataproto.Error{Code: dataproto.CodeDegraded, Msg: fmt.Sprintf(
			"partition %d has no replica that may head its write chain (down %v, stale %v)", p.Id, p.Down, p.Stale)}
	}
	addr, ok := c.addr(head)
	if !ok {
		return nil, fmt.Errorf("dataclient: no data address for node %d", head)
	}
	return c.pool.get(ctx, addr)
}

// retryable reports whether a failed read or overwrite may succeed on
// another replica or later.
func retryable(err error) bool {
	switch code := dataproto.CodeOf(err); code {
	case dataproto.CodeBadRequest, dataproto.CodeOutOfRange, dataproto.CodeTooLarge, dataproto.CodeWrongKind:
		return false
	default:
		if code.Denied() {
			return false
		}
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
