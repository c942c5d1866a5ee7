// Package node is the shell of a meta or data node process: it owns the data
// dir, keeps the node's identity, registers with the master, sends a heartbeat
// with utilization every interval, and learns which partitions the map assigns to
// it. The partition roles (meta partitions, extent store) run inside this shell.
//
// A node registers once and keeps its id and cluster id in its data dir; a node
// restarted on the same dir comes back as the same node. The master refuses a dir
// that belongs to another cluster, and a node id that another node holds.
package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/network"
	"github.com/cairnfs/cairn/pkg/pki"
)

// commitNoticeDelay is how long a partition's leader holds an append that
// only tells a follower a new commit index (multiraft.Config.
// CommitNoticeDelay): under load the next append carries the index and the
// notice, with the follower's answer, is saved; idle, followers apply the
// last entries this much later. Reads are served by leaders and do not wait.
const commitNoticeDelay = 2 * time.Millisecond

// Config configures a node.
type Config struct {
	Role    pb.Role
	DataDir string
	// Listen is the gRPC listen address; Advertise, if set, is the address given to
	// the master (for a listen address such as 0.0.0.0:7100).
	Listen, Advertise string
	// DataListen, if set, is a second listener for the role's own protocol (the
	// data path of data nodes); DataAdvertise is its address given to the master.
	DataListen, DataAdvertise string
	Zone                      string
	Masters                   []string
	MetricsAddr               string
	// Profiles serves Go's profiles on the metrics address too
	// (daemon.StartTelemetry), without authentication (--pprof).
	Profiles bool
	// NodeID, if not 0, asks the master for this id on first registration.
	NodeID            uint64
	HeartbeatInterval time.Duration
	// CapacityBytes overrides the capacity reported (0: the data dir's file system).
	CapacityBytes uint64
	// TickInterval is the Raft tick of the node's partitions (default 100ms).
	TickInterval time.Duration
	// NewPartitions builds the role's partition host; nil hosts nothing (the
	// node still registers and reports its assignment).
	NewPartitions func(env Env) (PartitionHost, error)
	Logger        *slog.Logger
	// TLS is the node's identity: its RPC port takes only mutual TLS
	// connections from the cluster's CA, and it connects to masters and
	// peers with it. Nil serves and connects in plain text.
	TLS *pki.Identity
	// Network is where the node listens and dials (nil: the host's TCP
	// stack); StoreFS holds its store under DataDir (nil: the host's file
	// system). A simulation gives each node its own of both.
	Network network.Network
	StoreFS vfs.FS
}

// Env is what a role's partition host gets from the node.
type Env struct {
	NodeID   uint64
	DataDir  string
	DB       *pebble.DB            // the node's store, shared with the Raft host
	Raft     *multiraft.Host       // hosts the partitions' Raft groups
	RPC      grpc.ServiceRegistrar // register the role's services here (before serving)
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Resolve maps a node id to its gRPC address, as last heard from the master;
	// ResolveData to its data-path address.
	Resolve, ResolveData func(id uint64) (string, bool)
	// DataListener is the listener of Config.DataListen (nil without one); the
	// role serves it and closes it in Close.
	DataListener net.Listener
	// Network is where the role dials peers, masters and clients' servers
	// (nil: the host's TCP stack).
	Network network.Network
	// Masters reaches the master leader (for the map of other volumes'
	// partitions, e.g. the data nodes a meta partition's deleted files live on).
	Masters *masterclient.Client
	// Epoch returns the cluster-map epoch of the latest heartbeat reply; after
	// a restart, until the first reply, the epoch of the last assignment change
	// (kept in the data dir). When Assign runs for a change, Epoch already
	// returns the epoch of that change.
	Epoch func() uint64
	// AppliedEpoch returns the cluster-map epoch whose assignment is in
	// effect: Assign has returned for it (Epoch may run ahead while Assign
	// runs). A role that must act on the replica sets of an epoch waits for
	// this one.
	AppliedEpoch func() uint64
	// Refresh asks for a heartbeat now rather than at the next interval (a
	// peer or client showed that the map moved on); it does not wait.
	Refresh func()
	// Revoked reports whether a certificate serial (pki.Serial) is on the
	// cluster's revocation list, as of the node's last heartbeat.
	Revoked func(serial string) bool
	// Grants holds the keys of extent grants as of the last heartbeat
	// (none before the first: meta nodes then sign no grant, data nodes
	// accept none).
	Grants *grant.Keyring
	// VolumeFull reports whether a volume's data reached its capacity, as
	// of the last heartbeat (data nodes refuse clients new data of it).
	VolumeFull func(volume uint64) bool
	// TLS is the client configuration for connections to peers, ServerTLS
	// the server configuration of the role's own listener (nil: plain
	// text). TLS accepts any node of the cluster (pki.Identity.ClientConfig).
	TLS, ServerTLS *tls.Config
	// PeerTLS returns the client configuration for a connection to the peer
	// node at addr, a gRPC or data-path address of the last heartbeat: TLS
	// that also requires the server's certificate to carry the name the
	// map records for the node at addr (Node.cert_name), looked up at every
	// handshake; it accepts any node while the map records no name there
	// (a node that has not registered since names were recorded). Nil in
	// plain text.
	PeerTLS func(addr string) *tls.Config
}

// Remover is a PartitionHost that deletes the state of partitions the map
// moved off the node.
type Remover interface {
	// Remove deletes the state of closed partitions ids; it must be
	// idempotent and leave open partitions alone.
	Remove(ids []uint64) error
}

// QuotaEnforcer is implemented by a PartitionHost that enforces directory
// quotas (meta nodes): it receives the quotas with their usage from every
// heartbeat answer.
type QuotaEnforcer interface {
	SetQuotas(quotas []*pb.QuotaState)
}

// PartitionHost is the part of a role that hosts partitions.
type PartitionHost interface {
	// Assign receives the node's whole assignment when it changes, and once at
	// start from the copy kept in the data dir. It must be idempotent.
	Assign(assigned []*pb.Partition) error
	// Report says what the node tells the master about its partitions.
	Report() []*pb.PartitionReport
	// Close stops the partitions; the node closes the Raft host and store after.
	Close() error
}

// Node is a running node.
type Node struct {
	cfg       Config
	log       *slog.Logger
	lock      *daemon.DirLock
	id        daemon.Identity
	masters   *masterclient.Client
	rpc       *daemon.RPCServer
	telemetry *daemon.Telemetry
	addr      string
	dataLn    net.Listener
	dataAddr  string

	db        *pebble.DB
	raft      *multiraft.Host
	transport *multiraft.GRPCTransport
	parts     PartitionHost

	mu         sync.Mutex
	registered bool
	// unsaved: the assignment in memory is newer than the saved copy.
	unsaved    bool
	assignment *pb.HeartbeatResponse // last assignment heard, kept in the data dir
	// applied is the map epoch whose assignment the partition host has
	// applied (Assign returned), or of a heartbeat that changed nothing
	// here; it trails assignment.Epoch while Assign runs.
	applied uint64
	// revoked is the cluster's revocation list as of the last heartbeat
	// (or the saved assignment): serials whose certificates this node
	// refuses.
	revoked atomic.Pointer[map[string]bool]
	// grants holds the keys of extent grants as of the last heartbeat;
	// full the volumes at their capacity (data nodes). Neither is kept in
	// the data dir: a restarted node learns them from its first heartbeat.
	grants grant.Keyring
	full   atomic.Pointer[map[uint64]bool]
	// lastGrantKeys: the keys grants was last set from (heartbeat goroutine
	// only).
	lastGrantKeys []*pb.GrantKey

	fatal chan error
	stop  chan struct{}
	kick  chan struct{} // an early heartbeat (Env.Refresh)
	wg    sync.WaitGroup

	heartbeats, heartbeatErrors prometheus.Counter
}

// RoleName is the lower-case name of a role, as used in identity files and CLI.
func RoleName(r pb.Role) string { return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_")) }

// Start takes the data dir, registers with the master if this is the node's
// first start (waiting until a master answers or ctx ends), opens the node's
// store and Raft host, and serves. A restarted node serves at once and
// re-registers in the background. Errors the node cannot recover from later (a
// foreign data dir, an id held by another node) arrive on Fatal.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Role != pb.Role_ROLE_META && cfg.Role != pb.Role_ROLE_DATA {
		return nil, fmt.Errorf("node role must be meta or data, not %v", cfg.Role)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	n := &Node{cfg: cfg, log: cfg.Logger, fatal: make(chan error, 1), stop: make(chan struct{}), kick: make(chan struct{}, 1), assignment: &pb.HeartbeatResponse{}}
	var ln net.Listener
	defer func() {
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			n.closeAll()
		}
	}()
	if n.masters, err = masterclient.New(cfg.Masters, daemon.ClientTLS(cfg.TLS), cfg.Network); err != nil {
		return nil, err
	}
	if n.lock, err = daemon.LockDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if err = n.loadIdentity(); err != nil {
		return nil, err
	}
	if err = n.loadAssignment(); err != nil {
		return nil, err
	}
	if ln, err = daemon.ListenRPC(cfg.Network, cfg.Listen, cfg.TLS); err != nil {
		return nil, err
	}
	n.addr = cfg.Advertise
	if n.addr == "" {
		n.addr = ln.Addr().String()
	}
	if cfg.DataListen != "" {
		if n.dataLn, err = network.Or(cfg.Network).Listen(cfg.DataListen); err != nil {
			return nil, fmt.Errorf("listen on %s (data path): %w", cfg.DataListen, err)
		}

		n.dataAddr = cfg.DataAdvertise
		if n.dataAddr == "" {
			n.dataAddr = n.dataLn.Addr().String()
		}
	}
	if n.telemetry, err = daemon.StartTelemetry(cfg.Network, cfg.MetricsAddr, cfg.Profiles, n.health); err != nil {
		return nil, err
	}
	n.registerMetrics()
	if n.id.NodeID == 0 {
		if err = n.registerUntilDone(ctx); err != nil {
			return nil, err
		}
	}
	if err = n.openPartitions(); err != nil {
		return nil, err
	}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		if err := n.rpc.Serve(ln); err != nil {
			n.log.Error("rpc server stopped", "err", err)
		}
	}()
	go func() {
		defer n.wg.Done()
		n.run()
	}()
	n.log.Info("node started", "node", n.id.NodeID, "role", RoleName(cfg.Role), "addr", n.addr, "metrics", n.telemetry.Addr(), "masters", cfg.Masters)
	return n, nil
}

// registerUntilDone registers, retrying while no master answers.
func (n *Node) registerUntilDone(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := n.register()
		if err == nil {
			return nil
		}
		if fatalError(err) {
			return err
		}
		n.log.Warn("waiting for a master to register with", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("register with the master: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// storeCacheBytes is the node store's block cache.
const storeCacheBytes = 128 << 20

// openPartitions opens the node's store and Raft host, lets the role build its
// partition host, and registers the gRPC services.
func (n *Node) openPartitions() (err error) {
	// The Raft host serves recent log entries from memory; older ones (a
	// follower catching up) and snapshots come from tables, whose blocks
	// are decompressed again on every read unless the block cache holds
	// them, and Pebble's default (8 MiB) is small beside the snapshots
	// stored in the same DB.
	cache := pebble.NewCache(storeCacheBytes)
	defer cache.Unref()
	if n.db, err = pebble.Open(filepath.Join(n.cfg.DataDir, "db"), &pebble.Options{Cache: cache, FS: n.cfg.StoreFS, Logger: daemon.PebbleLogger(n.log)}); err != nil {
		return fmt.Errorf("open node store: %w", err)
	}
	resolve := func(id uint64) (string, bool) {
		n.mu.Lock()
		defer n.mu.Unlock()
		a, ok := n.assignment.NodeAddrs[id]
		return a, ok
	}
	resolveData := func(id uint64) (string, bool) {
		n.mu.Lock()
		defer n.mu.Unlock()
		a, ok := n.assignment.NodeDataAddrs[id]
		return a, ok
	}
	epoch := func() uint64 {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.assignment.Epoch
	}
	applied := func() uint64 {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.applied
	}
	n.transport = multiraft.NewGRPCTransport(multiraft.NodeID(n.id.NodeID), func(id multiraft.NodeID) (string, bool) { return resolve(uint64(id)) }, n.log,
		multiraft.WithTLS(daemon.ClientTLS(n.cfg.TLS)), multiraft.WithPeerTLS(n.peerTLSByID()), multiraft.WithNetwork(n.cfg.Network))
	n.raft, err = multiraft.NewHost(multiraft.Config{
		NodeID: multiraft.NodeID(n.id.NodeID), DB: n.db, Transport: n.transport,
		TickInterval: n.cfg.TickInterval, Logger: n.log,
		CommitNoticeDelay: commitNoticeDelay,
	})
	if err != nil {
		return fmt.Errorf("raft host: %w", err)
	}
	n.transport.SetHost(n.raft)
	n.telemetry.Registry.MustRegister(multiraft.NewCollector(n.raft), multiraft.NewTransportCollector(n.transport))
	if n.cfg.TLS != nil {
		n.cfg.TLS.SetRevoked(n.isRevoked)
	}
	n.rpc = daemon.NewRPCServer(n.telemetry.Registry, n.cfg.TLS)
	healthpb.RegisterHealthServer(n.rpc, health.NewServer())
	n.transport.Register(n.rpc)
	if n.cfg.NewPartitions != nil {
		n.parts, err = n.cfg.NewPartitions(Env{
			NodeID: n.id.NodeID, DataDir: n.cfg.DataDir, DB: n.db, Raft: n.raft, RPC: n.rpc,
			Registry: n.telemetry.Registry, Logger: n.log, Resolve: resolve, ResolveData: resolveData, Network: n.cfg.Network,
			DataListener: n.dataLn, Masters: n.masters, Epoch: epoch, AppliedEpoch: applied, Refresh: n.refresh, Revoked: n.isRevoked,
			Grants: &n.grants, VolumeFull: n.volumeFull,
			TLS: daemon.ClientTLS(n.cfg.TLS), ServerTLS: daemon.ServerTLS(n.cfg.TLS), PeerTLS: n.peerTLSByAddr(),
		})
		if err != nil {
			return fmt.Errorf("%s partitions: %w", RoleName(n.cfg.Role), err)
		}
	}
	n.raft.Start()
	n.mu.Lock()
	at := n.assignment.Epoch
	n.mu.Unlock()
	if n.parts != nil {
		if err := n.parts.Assign(n.Assigned()); err != nil {
			return fmt.Errorf("open assigned partitions: %w", err)
		}
	}
	n.noteApplied(at)
	return nil
}

// noteApplied records that the assignment of map epoch e is in effect.
func (n *Node) noteApplied(e uint64) {
	n.mu.Lock()
	n.applied = max(n.applied, e)
	n.mu.Unlock()
}

// Fatal delivers an error after which the node cannot go on.
func (n *Node) Fatal() <-chan error { return n.fatal }

// ID is the node id the master gave, or 0 before the first registration.
func (n *Node) ID() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id.NodeID
}

// Assigned returns the partitions the map assigns to this node, as last heard.
func (n *Node) Assigned() []*pb.Partition {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.assignment.Assigned)
}

// Stop stops serving, closes the partitions, the Raft host and the store, and
// releases the data dir. The master notices the silence. Idempotent.
func (n *Node) Stop() {
	select {
	case <-n.stop:
		return
	default:
		close(n.stop)
	}
	if n.rpc != nil {
		// Raft streams from peers never end on their own: give unary calls a
		// moment to finish, then cut the rest.
		done := make(chan struct{})
		go func() { n.rpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			n.rpc.Stop()
		}
	}
	n.wg.Wait()
	n.closeAll()
	n.log.Info("node stopped", "id", n.ID())
}

func (n *Node) closeAll() {
	if n.parts != nil {
		if err := n.parts.Close(); err != nil {
			n.log.Error("close partitions", "err", err)
		}
	}
	if n.dataLn != nil {
		n.dataLn.Close() // the role may have closed it already; a second close is harmless
	}
	if n.transport != nil {
		n.transport.Close()
	}
	if n.raft != nil {
		n.raft.Stop()
	}
	if n.db != nil {
		if err := n.db.Close(); err != nil {
			n.log.Error("close node store", "err", err)
		}
	}
	if n.telemetry != nil {
		n.telemetry.Close()
	}
	if n.masters != nil {
		n.masters.Close()
	}
	n.lock.Unlock()
}

func (n *Node) health() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.registered {
		return errors.New("not registered with a master")
	}
	return nil
}

func (n *Node) loadIdentity() error {
	role := RoleName(n.cfg.Role)
	id, ok, err := daemon.LoadIdentity(n.cfg.DataDir)
	if err != nil {
		return err
	}
	if !ok {
		n.id = daemon.Identity{Role: role, UUID: daemon.NewUUID(), NodeID: n.cfg.NodeID}
		return daemon.SaveIdentity(n.cfg.DataDir, n.id)
	}
	if err := id.CheckRole(n.cfg.DataDir, role); err != nil {
		return err
	}
	if n.cfg.NodeID != 0 && id.NodeID != 0 && id.NodeID != n.cfg.NodeID {
		return fmt.Errorf("data dir %s belongs to node %d, not %d", n.cfg.DataDir, id.NodeID, n.cfg.NodeID)
	}
	n.id = id
	return nil
}

func (n *Node) run() {
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		n.mu.Lock()
		registered := n.registered
		n.mu.Unlock()
		var err error
		if !registered {
			err = n.register()
		} else {
			err = n.heartbeat()
		}
		if err != nil {
			if fatalError(err) {
				select {
				case n.fatal <- err:
				default:
				}
				return
			}
			n.heartbeatErrors.Inc()
			n.log.Warn("master unreachable", "err", err)
		}
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.kick:
			// Kicks come from requests, possibly many: at most one early
			// heartbeat per minKickGap.
			select {
			case <-n.stop:
				return
			case <-time.After(minKickGap):
			}
		}
	}
}

// minKickGap spaces heartbeats that Env.Refresh asked for.
const minKickGap = 100 * time.Millisecond

// refresh wakes the heartbeat loop (Env.Refresh).
func (n *Node) refresh() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// fatalError tells the master's refusals (which retrying cannot fix) from
// unavailability (which it can).
func fatalError(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.AlreadyExists, codes.InvalidArgument:
		return true
	}
	return false
}

func (n *Node) register() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &pb.RegisterRequest{
		ClusterId: n.id.ClusterID, Uuid: n.id.UUID, Role: n.cfg.Role, Addr: n.addr, Zone: n.cfg.Zone, NodeId: n.id.NodeID,
		DataAddr: n.dataAddr,
	}
	var resp *pb.RegisterResponse
	err := n.masters.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Register(ctx, req, o...)
		return err
	})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.id.NodeID != resp.NodeId || n.id.ClusterID != resp.ClusterId {
		n.id.NodeID, n.id.ClusterID = resp.NodeId, resp.ClusterId
		if err := daemon.SaveIdentity(n.cfg.DataDir, n.id); err != nil {
			return fmt.Errorf("save identity: %w", err)
		}
	}
	n.registered = true
	n.log.Info("registered", "node", resp.NodeId, "cluster", resp.ClusterId)
	return nil
}

func (n *Node) heartbeat() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := &pb.HeartbeatRequest{
		NodeId: n.id.NodeID, Uuid: n.id.UUID, Usage: n.usage(), Pid: int32(os.Getpid()),
		MetricsAddr: n.telemetry.Addr(),
	}
	req.Hostname, _ = os.Hostname()
	if n.parts != nil {
		req.Partitions = n.parts.Report()
	} else {
		for _, p := range n.Assigned() {
			req.Partitions = append(req.Partitions, &pb.PartitionReport{Id: p.Id})
		}
	}
	var resp *pb.HeartbeatResponse
	err := n.masters.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Heartbeat(ctx, req, o...)
		return err
	})
	if status.Code(err) == codes.NotFound {
		n.mu.Lock()
		n.registered = false
		n.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	n.heartbeats.Inc()
	n.setGrantState(resp)
	if q, ok := n.parts.(QuotaEnforcer); ok {
		q.SetQuotas(resp.Quotas)
	}
	n.mu.Lock()
	if !slices.Equal(n.assignment.Revoked, resp.Revoked) {
		n.setRevoked(resp.Revoked)
		n.assignment.Revoked = resp.Revoked
		n.unsaved = true // kept across a restart, like the assignment
	}
	if !maps.Equal(n.assignment.NodeCertNames, resp.NodeCertNames) {
		// Read at every handshake with a peer (peerNames): nothing to apply.
		n.assignment.NodeCertNames = resp.NodeCertNames
		n.unsaved = true
	}
	changed := !samePartitions(n.assignment.Assigned, resp.Assigned) || !maps.Equal(n.assignment.NodeAddrs, resp.NodeAddrs) ||
		!maps.Equal(n.assignment.NodeDataAddrs, resp.NodeDataAddrs)
	if changed {
		n.assignment = resp
	} else {
		n.assignment.Epoch = resp.Epoch
		n.applied = max(n.applied, resp.Epoch) // nothing to apply here
	}
	unsaved := n.unsaved
	n.mu.Unlock()
	if !changed {
		if err := n.remove(resp.Removed); err != nil {
			return err
		}
		if unsaved {
			return n.save(resp)
		}
		return nil
	}
	// The saved copy only lets a restarted node open its partitions before
	// it reaches a master. A node whose disk is full must apply the
	// assignment all the same: deleting the partitions moved away is what
	// frees the space. It saves again afterwards, and at every heartbeat
	// until that works.
	saveErr := n.saveAssignment(resp)
	if saveErr != nil {
		n.mu.Lock()
		n.unsaved = true
		n.mu.Unlock()
		n.log.Warn("save assignment; applying it all the same and saving again later", "err", saveErr)
	}
	n.log.Info("partition assignment changed", "epoch", resp.Epoch, "partitions", len(resp.Assigned))
	if n.parts != nil {
		if err := n.parts.Assign(resp.Assigned); err != nil {
			return fmt.Errorf("apply assignment: %w", err)
		}
	}
	n.noteApplied(resp.Epoch)
	if err := n.remove(resp.Removed); err != nil {
		return err
	}
	if saveErr != nil {
		return n.save(resp)
	}
	return nil
}

// remove deletes the partitions the master says were moved off this node,
// after the assignment that no longer has them closed them.
func (n *Node) remove(ids []uint64) error {
	r, ok := n.parts.(Remover)
	if !ok || len(ids) == 0 {
		return nil
	}
	n.mu.Lock()
	for _, p := range n.assignment.Assigned {
		if slices.Contains(ids, p.Id) {
			n.mu.Unlock()
			return fmt.Errorf("the master asks to delete partition %d, which it also assigns here", p.Id)
		}
	}
	n.mu.Unlock()
	if err := r.Remove(ids); err != nil {
		return fmt.Errorf("delete moved partitions: %w", err)
	}
	return nil
}

func samePartitions(a, b []*pb.Partition) bool {
	// Every field counts: the replica order, the inode range, and a data
	// partition's write chain (down, stale, epoch).
	return slices.EqualFunc(a, b, func(x, y *pb.Partition) bool { return proto.Equal(x, y) })
}

// usage reports the data dir's file system and the machine's memory.
func (n *Node) usage() *pb.Usage {
	u := &pb.Usage{MemUtil: memUtil()}
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.cfg.DataDir, &st); err == nil {
		u.CapacityBytes = st.Blocks * uint64(st.Bsize)
		u.UsedBytes = (st.Blocks - st.Bavail) * uint64(st.Bsize)
	}
	if n.cfg.CapacityBytes > 0 {
		u.CapacityBytes = n.cfg.CapacityBytes
		u.UsedBytes = min(u.UsedBytes, u.CapacityBytes)
	}
	return u
}

// memUtil is 1 - MemAvailable/MemTotal from /proc/meminfo, or 0 if unknown.
func memUtil() float64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	var total, avail float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	if total == 0 {
		return 0
	}
	return 1 - avail/total
}

func (n *Node) registerMetrics() {
	n.heartbeats = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_node_heartbeats_total", Help: "Heartbeats the master accepted."})
	n.heartbeatErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_node_heartbeat_errors_total", Help: "Registrations or heartbeats that failed."})
	assigned := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_node_assigned_partitions", Help: "Partitions the cluster map assigns to this node."}, func() float64 {
		return float64(len(n.Assigned()))
	})
	n.telemetry.Registry.MustRegister(n.heartbeats, n.heartbeatErrors, assigned)
}
