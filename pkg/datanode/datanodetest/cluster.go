// Package datanodetest runs data nodes in process for tests and
// benchmarks: each node has its own Pebble store, multi-raft host with a
// gRPC transport, and data-path listener on loopback, and a datanode.Host,
// as a `cairn data` process has. Nodes can be stopped (closing their
// listeners, connections and stores, as a crash looks to their peers) and
// restarted on the same addresses and directories.
package datanodetest

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/datanode"
	"github.com/cairnfs/cairn/pkg/loopback"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/node"
)

// Cluster is a set of in-process data nodes hosting the same partitions.
type Cluster struct {
	t     testing.TB
	dir   string
	opts  func(id uint64) datanode.Options
	epoch atomic.Uint64
	log   *slog.Logger

	mu         sync.Mutex
	nodes      map[uint64]*Node
	partitions []*pb.Partition
}

// Node is one data node.
type Node struct {
	ID       uint64
	Dir      string
	DataAddr string
	RaftAddr string
	// Host is the running data role (nil while stopped).
	Host     *datanode.Host
	Registry *prometheus.Registry

	db   *pebble.DB
	raft *multiraft.Host
	tr   *multiraft.GRPCTransport
	gs   *grpc.Server
	gsWG sync.WaitGroup
}

// Config describes a cluster.
type Config struct {
	// Nodes is the number of data nodes, ids 1..Nodes.
	Nodes int
	// Partitions lists each data partition's replicas in chain order;
	// partition ids are 1..len(Partitions).
	Partitions [][]uint64
	// Options configure every node's data role.
	Options datanode.Options
	// NodeOptions, if set, configures node id's data role instead.
	NodeOptions func(id uint64) datanode.Options
	// Logger receives the nodes' logs (default: discarded).
	Logger *slog.Logger
}

// Start starts the nodes and assigns them the partitions. The cluster is
// stopped by t's cleanup.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	opts := cfg.NodeOptions
	if opts == nil {
		opts = func(uint64) datanode.Options { return cfg.Options }
	}
	c := &Cluster{t: t, dir: t.TempDir(), opts: opts, log: cfg.Logger, nodes: map[uint64]*Node{}}
	c.epoch.Store(1)
	for i, reps := range cfg.Partitions {
		c.partitions = append(c.partitions, &pb.Partition{Id: uint64(i + 1), VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: reps})
	}
	// Reserve every address first: peers resolve each other by id.
	for id := uint64(1); id <= uint64(cfg.Nodes); id++ {
		c.nodes[id] = &Node{ID: id, Dir: filepath.Join(c.dir, fmt.Sprintf("data%d", id)), DataAddr: freeAddr(t), RaftAddr: freeAddr(t)}
	}
	for id := uint64(1); id <= uint64(cfg.Nodes); id++ {
		if err := c.startNode(c.nodes[id]); err != nil {
			t.Fatalf("start data node %d: %v", id, err)
		}
	}
	t.Cleanup(c.Close)
	return c
}

// freeAddr returns a free loopback address below the kernel's ephemeral
// range, so that no outgoing connection takes it before (or between) the
// node's binds.
func freeAddr(t testing.TB) string {
	ports, err := loopback.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// Partitions returns the partitions (shared: do not modify).
func (c *Cluster) Partitions() []*pb.Partition { return c.partitions }

// DataAddrs maps node ids to data-path addresses.
func (c *Cluster) DataAddrs() map[uint64]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint64]string{}
	for id, n := range c.nodes {
		out[id] = n.DataAddr
	}
	return out
}

// Node returns node id.
func (c *Cluster) Node(id uint64) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Epoch is the map epoch the nodes believe in.
func (c *Cluster) Epoch() uint64 { return c.epoch.Load() }

// SetEpoch changes the epoch the nodes see at their next Assign.
func (c *Cluster) SetEpoch(e uint64) { c.epoch.Store(e) }

// Assign re-sends the assignment to every running node (as a heartbeat
// reply that changed would).
func (c *Cluster) Assign() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.Host != nil {
			if err := n.Host.Assign(c.partitions); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetPartitions replaces the partitions (with their replica sets) that
// Assign, Restart and AssignNode send from now on; nothing is sent now.
func (c *Cluster) SetPartitions(parts []*pb.Partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partitions = parts
}

// AssignNode sends the current partitions to node id only, as its heartbeat
// reply would when it learns a change before its peers do.
func (c *Cluster) AssignNode(id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	if n == nil || n.Host == nil {
		return fmt.Errorf("node %d is not running", id)
	}
	return n.Host.Assign(c.partitions)
}

func (c *Cluster) resolve(id uint64, data bool) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	if n == nil {
		return "", false
	}
	if data {
		return n.DataAddr, true
	}
	return n.RaftAddr, true
}

func (c *Cluster) startNode(n *Node) error {
	var err error
	if n.db, err = pebble.Open(filepath.Join(n.Dir, "db"), &pebble.Options{Logger: quietPebble{}}); err != nil {
		return err
	}
	log := c.log.With("node", n.ID)
	n.tr = multiraft.NewGRPCTransport(multiraft.NodeID(n.ID), func(id multiraft.NodeID) (string, bool) { return c.resolve(uint64(id), false) }, log)
	n.raft, err = multiraft.NewHost(multiraft.Config{NodeID: multiraft.NodeID(n.ID), DB: n.db, Transport: n.tr, TickInterval: 50 * time.Millisecond, Logger: log})
	if err != nil {
		n.db.Close()
		return err
	}
	n.tr.SetHost(n.raft)
	n.gs = grpc.NewServer()
	n.tr.Register(n.gs)
	rln, err := listen(n.RaftAddr)
	if err != nil {
		n.raft.Stop()
		n.db.Close()
		return err
	}
	dln, err := listen(n.DataAddr)
	if err != nil {
		rln.Close()
		n.raft.Stop()
		n.db.Close()
		return err
	}
	n.gsWG.Add(1)
	go func(gs *grpc.Server) {
		defer n.gsWG.Done()
		_ = gs.Serve(rln)
	}(n.gs)
	n.raft.Start()
	n.Registry = prometheus.NewRegistry()
	env := node.Env{
		NodeID: n.ID, DataDir: n.Dir, DB: n.db, Raft: n.raft, RPC: n.gs, Registry: n.Registry, Logger: log,
		Resolve:      func(id uint64) (string, bool) { return c.resolve(id, false) },
		ResolveData:  func(id uint64) (string, bool) { return c.resolve(id, true) },
		DataListener: dln, Epoch: c.epoch.Load,
	}
	h, err := datanode.New(env, c.opts(n.ID))
	if err != nil {
		dln.Close()
		c.stopParts(n)
		return err
	}
	n.Host = h
	return h.Assign(c.partitions)
}

// listen binds addr, retrying briefly (a port just released may linger).
func listen(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// Stop stops node id: its data path (listener and connections), its
// partitions, Raft host and store. Peers see its connections drop.
func (c *Cluster) Stop(id uint64) {
	c.mu.Lock()
	n := c.nodes[id]
	c.mu.Unlock()
	if n == nil || n.Host == nil {
		return
	}
	if err := n.Host.Close(); err != nil {
		c.t.Logf("close data node %d: %v", id, err)
	}
	c.mu.Lock()
	n.Host = nil
	c.mu.Unlock()
	c.stopParts(n)
}

func (c *Cluster) stopParts(n *Node) {
	n.gs.Stop()
	n.gsWG.Wait()
	n.tr.Close()
	n.raft.Stop()
	if err := n.db.Close(); err != nil {
		c.t.Logf("close store of node %d: %v", n.ID, err)
	}
}

// Restart starts a stopped node again on its directory and addresses.
func (c *Cluster) Restart(id uint64) {
	c.t.Helper()
	n := c.Node(id)
	if n.Host != nil {
		c.t.Fatalf("node %d is running", id)
	}
	if err := c.startNode(n); err != nil {
		c.t.Fatalf("restart node %d: %v", id, err)
	}
}

// Close stops every node.
func (c *Cluster) Close() {
	c.mu.Lock()
	ids := make([]uint64, 0, len(c.nodes))
	for id := range c.nodes {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.Stop(id)
	}
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
