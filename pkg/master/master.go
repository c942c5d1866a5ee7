// Package master is the resource manager: a Raft-replicated process that keeps
// the cluster map (nodes, volumes, partitions, epoch), registers nodes and
// follows their heartbeats, marks silent nodes down and then out, and places new
// partitions on the least-utilized nodes.
//
// Every change to the map is a command through the master's Raft group (one group
// on the multi-raft host), so it survives the loss of a minority of masters and
// the restart of all of them. Heartbeat contents (utilization, reported
// partitions) are soft state kept only by the leader: they change every second,
// are re-sent within a second to a new leader, and would only bloat the log.
package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/console"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/network"
	"github.com/cairnfs/cairn/pkg/pki"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// groupID is the master's only Raft group.
const groupID multiraft.GroupID = 1

// Config configures one master replica.
type Config struct {
	// ID is this master's Raft id, a key of Peers.
	ID uint64
	// Peers maps every master's Raft id to its gRPC address. All masters of a
	// cluster are started with the same map.
	Peers map[uint64]string
	// Listen is the address to listen on; empty means Peers[ID].
	Listen      string
	DataDir     string
	MetricsAddr string
	// Profiles serves Go's profiles on the metrics address too
	// (daemon.StartTelemetry), without authentication (--pprof).
	Profiles bool
	// DownAfter is how long a node may miss heartbeats before it is marked down;
	// OutAfter how long it may stay down before it is marked out.
	DownAfter time.Duration
	OutAfter  time.Duration
	// MaxMoves bounds the replica moves (re-replication) in progress at once;
	// default DefaultMaxMoves.
	MaxMoves int
	// MinWritable is how many data partitions of a volume must take writes
	// (or all of them, for a volume created with fewer); below that the
	// leader adds partitions on nodes with room. Default DefaultMinWritable.
	MinWritable int
	// ReportGrace is how long a node that another node or a client reported
	// unresponsive (ReportFailure) may miss heartbeats before it is marked
	// down; default 3s, at most DownAfter.
	ReportGrace time.Duration
	// TickInterval is the Raft tick; elections take 10 ticks.
	TickInterval time.Duration
	Logger       *slog.Logger
	// TLS is the master's identity: its RPC port takes only mutual TLS
	// connections from the cluster's CA, and it connects to the other
	// masters and the meta nodes with it. Nil serves and connects in plain
	// text.
	TLS *pki.Identity
	// BalanceInterval is how often the leader polls meta partition statistics
	// to grow and balance volumes (docs/routing.md); 0 means
	// DefaultBalanceInterval.
	BalanceInterval time.Duration
	// MPMaxInodes is the inode and dentry count of a meta partition above which
	// its volume grows, unless the volume sets its own; 0 means
	// DefaultMPMaxInodes.
	MPMaxInodes uint64
	// BalanceMinDentries is the dentry count below which a volume is not
	// balanced; 0 means DefaultBalanceMinDentries.
	BalanceMinDentries uint64
	// SweepInterval is how often the leader sweeps every volume for orphan
	// inodes (package fsck); 0 means DefaultSweepInterval, negative never.
	SweepInterval time.Duration
	// SweepGrace is how old an orphan's newest record must be before the
	// sweeper reclaims it (0: fsck.DefaultGrace): an operation may still be
	// between its steps until then.
	SweepGrace time.Duration
	// GrantKeyPeriod is how often the leader adds a key for extent grants;
	// 0 means DefaultGrantKeyPeriod.
	GrantKeyPeriod time.Duration
	// Network is where the master listens and dials (nil: the host's TCP
	// stack); FS holds its store under DataDir (nil: the host's file
	// system). A simulation gives each master its own of both.
	Network network.Network
	FS      vfs.FS
}

// ParsePeers parses "1=host:port,2=host:port".
func ParsePeers(specs []string) (map[uint64]string, error) {
	peers := map[uint64]string{}
	for _, spec := range specs {
		for _, p := range strings.Split(spec, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			idStr, addr, ok := strings.Cut(p, "=")
			id, err := strconv.ParseUint(idStr, 10, 64)
			if !ok || err != nil || id == 0 || addr == "" {
				return nil, fmt.Errorf("peer %q: want ID=HOST:PORT with ID >= 1", p)
			}
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("peer %q: %w", p, err)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("peer %q: port %q is not a number from 1 to 65535", p, port)
			}
			if _, dup := peers[id]; dup {
				return nil, fmt.Errorf("peer id %d given twice", id)
			}
			peers[id] = addr
		}
	}
	return peers, nil
}

// Server is a running master.
type Server struct {
	cfg       Config
	log       *slog.Logger
	lock      *daemon.DirLock
	db        *pebble.DB
	host      *multiraft.Host
	transport *multiraft.GRPCTransport
	rpc       *daemon.RPCServer
	telemetry *daemon.Telemetry
	console   *console.Console // the web console at / of the telemetry port
	fsm       *fsm
	metrics   *metrics
	hostname  string
	// peerClient pings the other masters for status; it never follows leaders.
	peerClient *masterclient.Client
	// metaPool and meta reach meta partition leaders for routing changes.
	metaPool *redirect.Pool
	meta     *metaclient.Client

	mu       sync.Mutex
	soft     map[uint64]*nodeSoft // by node id; leader only
	reported map[uint64]time.Time // node -> last failure report; leader only
	// noTargetLogged: when a partition with nowhere to move a replica was
	// last logged (recovery.go).
	noTargetLogged map[uint64]time.Time
	// refused: nodes whose disk filled up during a replica move, and until
	// when they are no move target (capacity.go).
	refused map[uint64]time.Time
	// grownAt: when data partitions were last added to a volume, by name.
	grownAt map[string]time.Time
	// rate tracks recovery progress (progress.go); leader only.
	rate        recoveryRate
	leaderSince time.Time  // zero when not leader
	createMu    sync.Mutex // serializes volume placement
	// fullVolumes: the volumes at their capacity (grantkeys.go), for the
	// data nodes' heartbeats.
	fullVolumes atomic.Pointer[[]uint64]

	stop chan struct{}
	wg   sync.WaitGroup
}

// nodeSoft is what the leader knows from a node's latest heartbeat.
type nodeSoft struct {
	last        time.Time
	usage       *pb.Usage
	pid         int32
	hostname    string
	metricsAddr string
	partitions  []*pb.PartitionReport
}

// Start opens the data dir, joins the master Raft group and serves. It returns
// once the server listens; leadership comes later.
func Start(cfg Config) (_ *Server, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = 10 * time.Second
	}
	if cfg.OutAfter <= 0 {
		cfg.OutAfter = 10 * time.Minute
	}
	if cfg.MaxMoves <= 0 {
		cfg.MaxMoves = DefaultMaxMoves
	}
	if cfg.MinWritable <= 0 {
		cfg.MinWritable = DefaultMinWritable
	}
	if cfg.ReportGrace <= 0 {
		cfg.ReportGrace = DefaultReportGrace
	}
	cfg.ReportGrace = min(cfg.ReportGrace, cfg.DownAfter)
	if cfg.BalanceInterval <= 0 {
		cfg.BalanceInterval = DefaultBalanceInterval
	}
	if cfg.MPMaxInodes == 0 {
		cfg.MPMaxInodes = DefaultMPMaxInodes
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.BalanceMinDentries == 0 {
		cfg.BalanceMinDentries = DefaultBalanceMinDentries
	}
	if _, ok := cfg.Peers[cfg.ID]; !ok {
		return nil, fmt.Errorf("master id %d is not among the peers %v", cfg.ID, cfg.Peers)
	}
	if cfg.Listen == "" {
		cfg.Listen = cfg.Peers[cfg.ID]
	}
	s := &Server{cfg: cfg, log: cfg.Logger, fsm: newFSM(), soft: map[uint64]*nodeSoft{}, reported: map[uint64]time.Time{}, noTargetLogged: map[uint64]time.Time{},
		refused: map[uint64]time.Time{}, grownAt: map[string]time.Time{}, stop: make(chan struct{})}
	s.hostname, _ = os.Hostname()
	addrs := make([]string, 0, len(cfg.Peers))
	for _, a := range cfg.Peers {
		addrs = append(addrs, a)
	}
	if s.peerClient, err = masterclient.New(addrs, daemon.ClientTLS(cfg.TLS), cfg.Network); err != nil {
		return nil, err
	}
	s.metaPool = redirect.NewPool(daemon.ClientTLS(cfg.TLS), cfg.Network)
	s.meta = metaclient.New(s.metaPool, s.nodeAddr)
	var ln net.Listener
	defer func() {
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			s.closeAll()
		}
	}()

	if s.lock, err = daemon.LockDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if err = s.checkIdentity(); err != nil {
		return nil, err
	}
	if ln, err = daemon.ListenRPC(cfg.Network, cfg.Listen, cfg.TLS); err != nil {
		return nil, err
	}
	if s.db, err = pebble.Open(filepath.Join(cfg.DataDir, "db"), &pebble.Options{FS: cfg.FS, Logger: daemon.PebbleLogger(s.log)}); err != nil {
		return nil, fmt.Errorf("open master store: %w", err)
	}
	s.transport = multiraft.NewGRPCTransport(multiraft.NodeID(cfg.ID), s.resolve, s.log, multiraft.WithTLS(daemon.ClientTLS(cfg.TLS)), multiraft.WithNetwork(cfg.Network))
	s.host, err = multiraft.NewHost(multiraft.Config{
		NodeID:       multiraft.NodeID(cfg.ID),
		DB:           s.db,
		Transport:    s.transport,
		TickInterval: cfg.TickInterval,
		Logger:       s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("raft host: %w", err)
	}
	s.transport.SetHost(s.host)
	peers := make([]multiraft.NodeID, 0, len(cfg.Peers))
	for id := range cfg.Peers {
		peers = append(peers, multiraft.NodeID(id))
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i] < peers[j] })
	if err = s.host.AddGroup(groupID, peers, s.fsm, multiraft.GroupOptions{}); err != nil {
		return nil, fmt.Errorf("master raft group: %w", err)
	}

	if s.telemetry, err = daemon.StartTelemetry(cfg.Network, cfg.MetricsAddr, cfg.Profiles, s.health); err != nil {
		return nil, err
	}
	s.metrics = newMetrics(s.telemetry.Registry, s)
	s.telemetry.Registry.MustRegister(multiraft.NewCollector(s.host), multiraft.NewTransportCollector(s.transport))
	s.fsm.onApply = func(epoch uint64) { s.metrics.epoch.Set(float64(epoch)) }

	if cfg.TLS != nil {
		cfg.TLS.SetRevoked(s.revoked)
	}
	s.rpc = daemon.NewRPCServer(s.telemetry.Registry, cfg.TLS)
	s.console = console.New(consoleSource{s}, s.log)
	s.telemetry.Handle("/", s.console.Handler())
	s.console.Start()
	pb.RegisterMasterServer(s.rpc, &service{s: s})
	s.transport.Register(s.rpc)
	s.host.Start()
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.rpc.Serve(ln); err != nil {
			s.log.Error("rpc server stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.leaderLoop()
	}()
	s.log.Info("master started", "id", cfg.ID, "addr", cfg.Listen, "metrics", s.telemetry.Addr(), "peers", cfg.Peers)
	return s, nil
}

func (s *Server) checkIdentity() error {
	id, ok, err := daemon.LoadIdentity(s.cfg.DataDir)
	if err != nil {
		return err
	}
	if !ok {
		return daemon.SaveIdentity(s.cfg.DataDir, daemon.Identity{Role: "master", NodeID: s.cfg.ID, UUID: daemon.NewUUID()})
	}
	if err := id.CheckRole(s.cfg.DataDir, "master"); err != nil {
		return err
	}
	if id.NodeID != s.cfg.ID {
		return fmt.Errorf("data dir %s belongs to master %d, not %d", s.cfg.DataDir, id.NodeID, s.cfg.ID)
	}
	return nil
}

// MetricsAddr is where /metrics and /healthz are served.
func (s *Server) MetricsAddr() string { return s.telemetry.Addr() }

// Stop stops serving, leaves the Raft group and closes the store. Idempotent.
func (s *Server) Stop() {
	select {
	case <-s.stop:
		return
	default:
		close(s.stop)
	}
	if s.rpc != nil {
		done := make(chan struct{})
		go func() { s.rpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			s.rpc.Stop()
		}
	}
	s.wg.Wait()
	if s.console != nil {
		s.console.Stop()
	}
	s.closeAll()
	s.log.Info("master stopped", "id", s.cfg.ID)
}

func (s *Server) closeAll() {
	if s.peerClient != nil {
		s.peerClient.Close()
	}
	if s.metaPool != nil {
		s.metaPool.Close()
	}
	if s.transport != nil {
		s.transport.Close()
	}
	if s.host != nil {
		s.host.Stop()
	}
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			s.log.Error("close master store", "err", err)
		}
	}
	if s.telemetry != nil {
		s.telemetry.Close()
	}
	s.lock.Unlock()
}

// nodeAddr returns the gRPC address of a meta or data node from the map.
func (s *Server) nodeAddr(id uint64) (addr string, ok bool) {
	s.fsm.read(func(st *clustermap.State) {
		if n := st.Map().Nodes[id]; n != nil {
			addr, ok = n.Addr, true
		}
	})
	return addr, ok
}

func (s *Server) resolve(id multiraft.NodeID) (string, bool) {
	a, ok := s.cfg.Peers[uint64(id)]
	return a, ok
}

func (s *Server) health() error {
	st, err := s.host.Status(groupID)
	if err != nil {
		return err
	}
	if st.Leader == 0 {
		return errors.New("no master leader")
	}
	return nil
}

// leader reports whether this master leads, and the leader's address if known.
func (s *Server) leader() (bool, string, multiraft.GroupStatus) {
	st, err := s.host.Status(groupID)
	if err != nil {
		return false, "", st
	}
	return st.IsLeader, s.cfg.Peers[uint64(st.Leader)], st
}

// propose replicates cmd and returns its Apply result.
func (s *Server) propose(ctx context.Context, cmd *pb.Command) (any, error) {
	cmd.NowUnixMs = time.Now().UnixMilli()
	data, err := marshalCommand(cmd)
	if err != nil {
		return nil, err
	}
	return s.host.Propose(ctx, groupID, data)
}

// leaderLoop does the leader's periodic duties: initialise a new cluster,
// follow node liveness, and run routing changes (routingLoop, stopped as soon
// as leadership is lost).
func (s *Server) leaderLoop() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	var stopRouting func()
	endRouting := func() {
		if stopRouting != nil {
			stopRouting()
			stopRouting = nil
		}
	}
	defer endRouting()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		isLeader, _, st := s.leader()
		s.metrics.isLeader.Set(b2f(isLeader))
		s.metrics.term.Set(float64(st.Term))
		s.mu.Lock()
		if !isLeader {
			s.leaderSince = time.Time{}
			clear(s.soft)
			clear(s.reported)
			s.mu.Unlock()
			s.rate.reset()
			endRouting()
			continue
		}
		if stopRouting == nil {
			stopRouting = s.startRouting()
		}
		if s.leaderSince.IsZero() {
			// A new leader has no heartbeat history: every node gets a full
			// DownAfter from now before it can be marked down.
			s.leaderSince = time.Now()
			s.log.Info("became master leader", "term", st.Term)
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.leaderDuties(ctx)
		cancel()
	}
}

// startRouting runs routingLoop (and the orphan sweeper, unless disabled)
// until the returned function is called; that function returns once they and
// the drivers have stopped.
func (s *Server) startRouting() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.routingLoop(ctx, metaOps{s.meta})
	}()
	if iv := s.cfg.SweepInterval; iv > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.sweepLoop(ctx, iv)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

func (s *Server) leaderDuties(ctx context.Context) {
	var clusterID string
	s.fsm.read(func(st *clustermap.State) { clusterID = st.Map().ClusterId })
	if clusterID == "" {
		id := daemon.NewUUID()
		if _, err := s.propose(ctx, &pb.Command{Op: &pb.Command_Init{Init: &pb.InitCluster{ClusterId: id}}}); err != nil {
			s.log.Warn("initialise cluster", "err", err)
			return
		}
		s.log.Info("cluster initialised", "cluster_id", id)
	}
	for _, ch := range s.livenessChanges(time.Now()) {
		_, err := s.propose(ctx, &pb.Command{Op: &pb.Command_SetNodeState{SetNodeState: ch}})
		if err != nil {
			s.log.Warn("mark node", "node", ch.NodeId, "state", ch.State, "err", err)
			continue
		}
		s.log.Info("node state changed", "node", ch.NodeId, "state", stateName(ch.State))
	}
	s.rotateGrantKeys(ctx, time.Now())
	s.noteFullVolumes()
	s.recoverReplicas(ctx)
	s.growData(ctx)
	s.sampleProgress()
}

// DefaultReportGrace is Config.ReportGrace's default: three heartbeats.
const DefaultReportGrace = 3 * time.Second

// livenessChanges decides which nodes to mark down or out at now (Ceph §5.4):
// alive nodes silent for DownAfter go down, or for ReportGrace once a peer or
// client reported them unresponsive within the last DownAfter (Ceph §5.3);
// down nodes silent for OutAfter more go out. Time starts at the later of the
// last heartbeat and this master's election, so a fresh leader never
// condemns nodes it has not heard from yet.
func (s *Server) livenessChanges(now time.Time) []*pb.SetNodeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.SetNodeState
	s.fsm.read(func(st *clustermap.State) {
		for id, n := range st.Map().Nodes {
			last := s.leaderSince
			if soft := s.soft[id]; soft != nil && soft.last.After(last) {
				last = soft.last
			}
			silent := now.Sub(last)
			switch n.State {
			case pb.NodeState_NODE_STATE_ALIVE:
				rep, ok := s.reported[id]
				reported := ok && now.Sub(rep) < s.cfg.DownAfter
				if silent > s.cfg.DownAfter || (reported && silent > s.cfg.ReportGrace) {
					out = append(out, &pb.SetNodeState{NodeId: id, State: pb.NodeState_NODE_STATE_DOWN})
				}
			case pb.NodeState_NODE_STATE_DOWN:
				since := time.UnixMilli(n.StateChangedUnixMs)
				if since.Before(s.leaderSince) {
					since = s.leaderSince
				}
				if silent > s.cfg.DownAfter && now.Sub(since) > s.cfg.OutAfter {
					out = append(out, &pb.SetNodeState{NodeId: id, State: pb.NodeState_NODE_STATE_OUT})
				}
			}
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].NodeId < out[j].NodeId })
	return out
}

func stateName(s pb.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATE_"))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

type metrics struct {
	epoch    prometheus.Gauge
	isLeader prometheus.Gauge
	term     prometheus.Gauge
	routing  *routingMetrics
	// orphansReclaimed counts inodes the sweeper reclaimed (sweep.go).
	orphansReclaimed prometheus.Counter
	// dataGrowths counts data partitions added because a volume's writable
	// ones ran low (capacity.go).
	dataGrowths prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		epoch:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_master_map_epoch", Help: "Epoch of the cluster map applied on this master."}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_master_is_leader", Help: "1 if this master is the Raft leader."}),
		term:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_master_raft_term", Help: "Current Raft term of the master group."}),
	}
	nodes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_master_nodes", Help: "Registered meta and data nodes."}, func() float64 {
		var n int
		s.fsm.read(func(st *clustermap.State) { n = len(st.Map().Nodes) })
		return float64(n)
	})
	moves := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_master_replica_moves", Help: "Replica moves (re-replication) in progress."}, func() float64 {
		var n int
		s.fsm.read(func(st *clustermap.State) {
			for _, p := range st.Map().Partitions {
				if p.Joining != 0 {
					n++
				}
			}
		})
		return float64(n)
	})
	health := prometheus.NewDesc("cairn_master_partitions", "Partitions by health: healthy, recovering (a replica catching up or moving), degraded (a replica down), read-only (a data partition below its write quorum), unavailable (a meta partition without a majority, a data partition without a replica).", []string{"health"}, nil)
	m.orphansReclaimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_orphans_reclaimed_total", Help: "Orphan inodes the leader's sweeper reclaimed (left by crashed unlink, rmdir or link steps)."})
	m.dataGrowths = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_master_data_partitions_added_total", Help: "Data partitions the leader added because a volume's writable ones ran low."})
	left := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_master_recovery_bytes_left", Help: "Bytes the data replicas catching up (stale or joining) still lack, from the heartbeat reports."}, func() float64 {
		rec, _ := s.rate.latest()
		var n uint64
		for _, r := range rec {
			n += r.BytesLeft
		}
		return float64(n)
	})
	rate := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cairn_master_recovery_bytes_per_second", Help: "Rate at which the data replicas catching up gained bytes over the last 10 s."}, func() float64 {
		_, r := s.rate.latest()
		return r
	})
	reg.MustRegister(m.epoch, m.isLeader, m.term, nodes, m.orphansReclaimed, m.dataGrowths, moves, left, rate, &healthCollector{s: s, desc: health})
	m.routing = newRoutingMetrics(reg, s)
	return m
}

// healthCollector exports the partitions' health as the map says it.
type healthCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	for _, h := range clustermap.Healths {
		counts[h] = 0
	}
	c.s.fsm.read(func(st *clustermap.State) {
		for _, p := range st.Map().Partitions {
			counts[clustermap.Health(st.Map(), p)]++
		}
	})
	for h, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), h)
	}
}
