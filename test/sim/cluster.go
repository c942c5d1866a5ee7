// Package sim runs a whole Cairn cluster in one process: masters, meta
// nodes and data nodes, each a simulated host on a simnet network, with
// its store on a memory file system that loses what was not synced when
// the host crashes. Run inside a testing/synctest bubble, every timeout,
// lease, heartbeat and election of the cluster runs on the bubble's clock,
// which moves on whenever every goroutine waits: minutes of cluster time
// take milliseconds.
//
// The package is for tests only (docs/design.md, "The simulation").
package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/datanode"
	"github.com/cairnfs/cairn/pkg/diskfs"
	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/master"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metanode"
	"github.com/cairnfs/cairn/pkg/network"
	"github.com/cairnfs/cairn/pkg/node"
	"github.com/cairnfs/cairn/pkg/simnet"
)

// Ports every simulated server uses on its own address.
const (
	masterPort = 17000
	nodePort   = 17100
	dataPort   = 17102
)

// Topology is the shape of a simulated cluster.
type Topology struct {
	Masters, Metas, Datas int
	// Zones spreads the nodes round-robin over this many zones (0 or 1:
	// one zone).
	Zones int
}

// DefaultTopology is the layout of `cairn up`: three of each.
var DefaultTopology = Topology{Masters: 3, Metas: 3, Datas: 3, Zones: 3}

// Role is what a server runs.
type Role string

// Roles of servers.
const (
	Master Role = "master"
	Meta   Role = "meta"
	Data   Role = "data"
)

// Server is one simulated host running one server process.
type Server struct {
	Role Role
	Name string // master-1, meta-2, ...
	IP   string
	Zone string

	c    *Cluster
	id   uint64        // master Raft id; 0 for nodes
	dir  string        // a real directory: the data dir's small files
	fs   *vfs.MemFS    // the store (Raft logs, state machines)
	disk *diskfs.MemFS // a data node's extents
	// full makes the extents' disk refuse to grow (ENOSPC), as a full
	// disk does.
	full atomic.Bool

	mu      procLock
	running interface{ Stop() }
}

// procLock is the lock of a server's process: a mutex whose waiters
// block durably in the synctest bubble (on a channel made in it), which
// sync.Mutex's do not. Two faults on one server (a crash while another
// crash's stop or a restart is under way) would otherwise stop the
// simulated clock: the waiter is not durably blocked, so time does not
// move, and the holder, waiting for the node's goroutines, some of them in
// a backoff, never ends (seed 5127 with -faults crash hung so).
type procLock chan struct{}

func (l procLock) Lock()   { l <- struct{}{} }
func (l procLock) Unlock() { <-l }

// Addr is the server's RPC address.
func (s *Server) Addr() string { return fmt.Sprintf("%s:%d", s.IP, rpcPort(s.Role)) }

func rpcPort(r Role) int {
	if r == Master {
		return masterPort
	}
	return nodePort
}

// Running reports whether the server's process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running != nil
}

// Cluster is a simulated cluster. Create it inside a synctest bubble, and
// Stop it before the bubble's function returns: the bubble waits for every
// goroutine the cluster started.
type Cluster struct {
	Net     *simnet.Net
	Servers []*Server
	log     *slog.Logger
	base    string

	mu   sync.Mutex
	next int // client hosts made so far
}

// Options configure New.
type Options struct {
	// Dir holds the servers' real directories (a test's TempDir).
	Dir string
	// Log receives every server's log (nil: discarded).
	Log io.Writer
}

// New starts a cluster of topology t and waits until every node has
// registered with a master leader.
func New(ctx context.Context, t Topology, o Options) (*Cluster, error) {
	if t.Masters < 1 || t.Metas < 1 || t.Datas < 1 {
		return nil, fmt.Errorf("topology %+v: want at least one master, meta node and data node", t)
	}
	w := o.Log
	if w == nil {
		w = io.Discard
	}
	c := &Cluster{Net: simnet.New(), log: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})), base: o.Dir}
	zone := func(i int) string {
		if t.Zones <= 1 {
			return ""
		}
		return fmt.Sprintf("zone-%d", i%t.Zones+1)
	}
	add := func(r Role, n, subnet int) {
		for i := range n {
			s := &Server{Role: r, Name: fmt.Sprintf("%s-%d", r, i+1), IP: fmt.Sprintf("10.0.%d.%d", subnet, i+1), c: c,
				fs: vfs.NewCrashableMem(), disk: diskfs.NewMem(), mu: make(procLock, 1)}
			if r == Master {
				s.id = uint64(i + 1)
			} else {
				s.Zone = zone(i)
			}
			s.dir = filepath.Join(o.Dir, s.Name)
			c.Servers = append(c.Servers, s)
		}
	}
	add(Master, t.Masters, 1)
	add(Meta, t.Metas, 2)
	add(Data, t.Datas, 3)
	for _, s := range c.Servers {
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, err
		}
	}
	// Masters first: nodes register with them. Starting a node waits for
	// its registration, so the nodes start side by side.
	for _, s := range c.ServersOf(Master) {
		if err := s.start(ctx); err != nil {
			c.Stop()
			return nil, err
		}
	}
	errs := make(chan error, len(c.Servers))
	var wg sync.WaitGroup
	for _, s := range c.Servers {
		if s.Role == Master {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.start(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// ServersOf lists the servers of role r.
func (c *Cluster) ServersOf(r Role) []*Server {
	var out []*Server
	for _, s := range c.Servers {
		if s.Role == r {
			out = append(out, s)
		}
	}
	return out
}

// MasterAddrs lists the masters' RPC addresses.
func (c *Cluster) MasterAddrs() []string {
	var out []string
	for _, s := range c.ServersOf(Master) {
		out = append(out, s.Addr())
	}
	return out
}

func (c *Cluster) masterPeers() map[uint64]string {
	peers := map[uint64]string{}
	for _, s := range c.ServersOf(Master) {
		peers[s.id] = s.Addr()
	}
	return peers
}

// start runs the server's process.
func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		return fmt.Errorf("%s is running", s.Name)
	}
	c := s.c
	c.Net.Restart(s.IP)
	h := c.Net.MustHost(s.IP)
	log := c.log.With("server", s.Name)
	metrics := s.IP + ":0"
	if s.Role == Master {
		m, err := master.Start(master.Config{
			ID: s.id, Peers: c.masterPeers(), DataDir: s.dir, MetricsAddr: metrics, Logger: log,
			Network: h, FS: s.fs, SweepInterval: -1,
		})
		if err != nil {
			return fmt.Errorf("start %s: %w", s.Name, err)
		}
		s.running = m
		return nil
	}
	cfg := node.Config{
		Role: pb.Role_ROLE_META, DataDir: s.dir, Listen: s.Addr(), Zone: s.Zone,
		Masters: c.MasterAddrs(), MetricsAddr: metrics, Logger: log,
		// The real disk under the extents is not the simulated hosts' disk.
		CapacityBytes: 1 << 50, Network: h, StoreFS: s.fs,
		NewPartitions: metanode.NewFactory(metanode.Options{}),
	}
	if s.Role == Data {
		cfg.Role = pb.Role_ROLE_DATA
		cfg.DataListen = fmt.Sprintf("%s:%d", s.IP, dataPort)
		disk := diskfs.Inject(s.disk, diskfs.InjectorFunc(s.refuseWhenFull))
		cfg.NewPartitions = datanode.NewFactory(datanode.Options{ReserveBytes: -1, Store: extentstore.Options{FS: disk}, FreeSpace: s.freeSpace})
	}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.Name, err)
	}
	s.running = n
	return nil
}

// refuseWhenFull fails what would take more of a full disk: writes,
// creations and new directories (a full ext4 or xfs refuses these; an
// overwrite in place may pass there, not here).
func (s *Server) refuseWhenFull(op diskfs.Op) error {
	if s.full.Load() && op.Kind&(diskfs.OpWrite|diskfs.OpCreate|diskfs.OpMkdirAll|diskfs.OpTruncate) != 0 {
		return syscall.ENOSPC
	}
	return nil
}

// simDiskBytes is the size of a data node's simulated disk.
const simDiskBytes = 64 << 30

// freeSpace is the simulated disk's free and total bytes, as the data
// node's statfs would report them: nothing free while it is full.
func (s *Server) freeSpace(string) (free, total uint64, err error) {
	if s.full.Load() {
		return 0, simDiskBytes, nil
	}
	return simDiskBytes, simDiskBytes, nil
}

// Crash kills the server's process and the power of its host at once:
// its connections end, and its store and extents keep what they had
// synced and, chosen by rng, some of what they had not (torn, and for
// the extents out of order too).
func (s *Server) Crash(rng *rand.Rand) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return
	}
	s.c.Net.Crash(s.IP)
	// The disks as the crash leaves them. What the dead process's
	// leftovers write while they stop goes to the old copies.
	fs := s.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
	disk := s.disk.Crash(diskfs.CrashMode(rng.IntN(3)), rng)
	s.running.Stop()
	s.running = nil
	s.fs, s.disk = fs, disk
}

// Restart starts a crashed or stopped server again on what its store kept.
func (s *Server) Restart(ctx context.Context) error { return s.start(ctx) }

// Stop stops every server, gracefully.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, s := range c.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.running != nil {
				s.running.Stop()
				s.running = nil
			}
		}()
	}
	wg.Wait()
}

// Admin returns a client of the master group, on a host of its own.
func (c *Cluster) Admin() (*masterclient.Client, error) {
	h, _ := c.clientHost()
	return masterclient.New(c.MasterAddrs(), nil, h)
}

// clientHost returns the network as a new client host sees it, and the
// host's address: each call is another host (10.0.9.1, 10.0.9.2, ...).
func (c *Cluster) clientHost() (network.Network, string) {
	c.mu.Lock()
	c.next++
	ip := fmt.Sprintf("10.0.9.%d", c.next)
	c.mu.Unlock()
	return c.Net.MustHost(ip), ip
}

// CreateVolume creates a volume of the given replicas (0: the default)
// and waits until it takes requests; an existing volume is left as it is.
func (c *Cluster) CreateVolume(ctx context.Context, name string, replicas int32) error {
	mc, err := c.Admin()
	if err != nil {
		return err
	}
	defer mc.Close()
	err = mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: name, Replicas: replicas}, o...)
		return err
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create volume %q: %w", name, err)
	}
	// The master answers before a meta node has made the volume's root:
	// wait for it, as `cairn up` waits for its mount.
	v, err := c.Open(ctx, name)
	if err != nil {
		return err
	}
	defer v.Close()
	for {
		_, err := v.StatPath(ctx, "/", client.Cred{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume %q: no root: %w", name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Drain waits, in simulated time, for what the cluster's and clients'
// goroutines still do after Stop and Close (calls bounded by their own
// timeouts): a bubble's function must not return before every goroutine
// it started has ended. A goroutine that never ends is a leak, and the
// bubble reports it.
func Drain() { time.Sleep(2 * time.Minute) }

// Open opens volume name as an SDK client on a host of its own.
func (c *Cluster) Open(ctx context.Context, name string) (*client.Volume, error) {
	h, _ := c.clientHost()
	return client.Open(ctx, c.MasterAddrs(), name, &client.Options{Network: h})
}
