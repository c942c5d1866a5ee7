package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/datanode"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/extentstore"
	"github.com/cairnfs/cairn/pkg/fsck"
	"github.com/cairnfs/cairn/pkg/master"
	"github.com/cairnfs/cairn/pkg/metanode"
	"github.com/cairnfs/cairn/pkg/node"
)

func newLogger(cmd *cobra.Command, level string) (*slog.Logger, error) {
	l, err := daemon.NewLogger(os.Stderr, level)
	if err != nil {
		return nil, usageError{err, cmd}
	}
	return l, nil
}

// waitForSignal blocks until SIGINT or SIGTERM, or until fatal delivers.
func waitForSignal(fatal <-chan error) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case <-sig:
		return nil
	case err := <-fatal:
		return err
	}
}

func newMasterCmd() *cobra.Command {
	var (
		id                        uint64
		peers                     []string
		listen, dataDir, mAddr    string
		logLevel                  string
		downAfter, outAfter       time.Duration
		reportGrace               time.Duration
		maxMoves                  int
		minWritable               int
		balanceInterval           time.Duration
		mpMaxInodes, minDents     uint64
		sweepInterval, sweepGrace time.Duration
		profiles                  bool
		tf                        tlsFlags
	)
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run a master (resource manager) replica",
		Long: `Run one replica of the master, the Raft-replicated resource manager that keeps
the cluster map: nodes and their liveness, volumes, and partitions with their
replica sets. Run 1 master for a dev cluster or 3 for production; every replica
gets the same --peers list and its own --id.`,
		Example: `  # a single master
  cairn master --data-dir /var/lib/cairn/master

  # replica 2 of three
  cairn master --id 2 --peers 1=10.0.0.1:17000,2=10.0.0.2:17000,3=10.0.0.3:17000 --data-dir /var/lib/cairn/master`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd, logLevel)
			if err != nil {
				return err
			}
			peerMap, err := master.ParsePeers(peers)
			if err != nil {
				return usageError{err, cmd}
			}
			if _, ok := peerMap[id]; !ok {
				return usagef(cmd, "--id %d is not in --peers %v", id, peers)
			}
			if balanceInterval < 100*time.Millisecond {
				return usagef(cmd, "--balance-interval %v: at least 100ms", balanceInterval)
			}
			if mpMaxInodes < 1 {
				return usagef(cmd, "--mp-max-inodes must be at least 1")
			}
			if minDents < 1 {
				return usagef(cmd, "--balance-min-dentries must be at least 1")
			}
			if sweepGrace < 0 {
				return usagef(cmd, "--sweep-grace must not be negative")
			}
			ident, err := tf.identity(cmd, "")
			if err != nil {
				return err
			}
			s, err := master.Start(master.Config{
				ID: id, Peers: peerMap, Listen: listen, DataDir: dataDir, MetricsAddr: mAddr, Profiles: profiles,
				DownAfter: downAfter, OutAfter: outAfter, ReportGrace: reportGrace, MaxMoves: maxMoves, MinWritable: minWritable, Logger: log.With("role", "master"),
				BalanceInterval: balanceInterval, MPMaxInodes: mpMaxInodes, BalanceMinDentries: minDents,
				SweepInterval: sweepInterval, SweepGrace: sweepGrace, TLS: ident,
			})
			if err != nil {
				return err
			}
			defer s.Stop()
			return waitForSignal(nil)
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&id, "id", 1, "this master's Raft id (a key of --peers)")
	f.StringSliceVar(&peers, "peers", []string{"1=127.0.0.1:17000"}, "all masters as ID=HOST:PORT, comma-separated")
	f.StringVar(&listen, "listen", "", "address to listen on (default: this master's --peers address)")
	f.StringVar(&dataDir, "data-dir", "./cairn-data/master", "directory for the master's Raft log and map")
	f.StringVar(&mAddr, "metrics-addr", "127.0.0.1:17001", "address of the /metrics and /healthz endpoint")
	addPprofFlag(cmd, &profiles)
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.DurationVar(&downAfter, "down-after", 10*time.Second, "mark a node down after this long without heartbeats")
	f.DurationVar(&outAfter, "out-after", 10*time.Minute, "mark a down node out after this much longer")
	f.IntVar(&maxMoves, "max-moves", master.DefaultMaxMoves, "replica moves (re-replication of out nodes) in progress at once")
	f.IntVar(&minWritable, "min-writable-dps", master.DefaultMinWritable, "data partitions per volume that must take writes (or all, for a volume created with fewer); below that the leader adds partitions on data nodes with room")
	f.DurationVar(&reportGrace, "report-grace", master.DefaultReportGrace, "mark a node down after this long without heartbeats once a peer or client reported it unresponsive")
	f.DurationVar(&balanceInterval, "balance-interval", master.DefaultBalanceInterval,
		"how often the leader polls meta partition statistics to grow and balance volumes")
	f.Uint64Var(&mpMaxInodes, "mp-max-inodes", master.DefaultMPMaxInodes,
		"grow a volume by a meta partition when one holds more inodes or dentries than this (a volume's own limit wins)")
	f.Uint64Var(&minDents, "balance-min-dentries", master.DefaultBalanceMinDentries,
		"balance a volume's dentries over its meta partitions only when it holds at least this many")
	f.DurationVar(&sweepInterval, "sweep-interval", master.DefaultSweepInterval,
		"how often the leader sweeps every volume for orphan inodes left by crashed operations (negative: never)")
	f.DurationVar(&sweepGrace, "sweep-grace", fsck.DefaultGrace,
		"reclaim an orphan inode only when it is seen in two sweeps and unchanged for this long")
	tf.add(cmd)
	return cmd
}

func newNodeCmd(role string) *cobra.Command {
	var (
		listen, advertise, dataDir, mAddr, zone, logLevel string
		dataListen, dataAdvertise                         string
		masters                                           []string
		nodeID, capacity                                  uint64
		heartbeat, chunkGrace                             time.Duration
		merge                                             bool
		recoveryMBps, reserveMiB, journalMiB              float64
		tf                                                tlsFlags
		encrypt, profiles                                 bool
	)
	pbRole, what, port := pb.Role_ROLE_META, "meta node: hosts meta partitions (inodes and dentries)", 17100
	if role == "data" {
		pbRole, what, port = pb.Role_ROLE_DATA, "data node: hosts data partitions (file contents)", 17200
	}
	cmd := &cobra.Command{
		Use:   role,
		Short: "Run a " + what,
		Long: fmt.Sprintf(`Run a %s.

The node registers with the masters, keeps its identity in --data-dir (a restarted
node comes back as the same node), sends a heartbeat with its utilization every
--heartbeat, and hosts the partitions the cluster map assigns to it.`, what),
		Example: fmt.Sprintf("  cairn %s --master 10.0.0.1:17000,10.0.0.2:17000,10.0.0.3:17000 --listen 10.0.0.5:%d --data-dir /var/lib/cairn/%s", role, port, role),
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd, logLevel)
			if err != nil {
				return err
			}
			if len(masters) == 0 {
				return usagef(cmd, "--master is required")
			}
			if chunkGrace < 0 {
				return usagef(cmd, "--chunk-grace must not be negative")
			}
			if recoveryMBps < 0 {
				return usagef(cmd, "--recovery-mbps must not be negative")
			}
			journal := int64(journalMiB * (1 << 20))
			if role == "data" && journal < 1 {
				return usagef(cmd, "--journal-mb %v: want a positive size", journalMiB)
			}
			reserve := int64(reserveMiB * (1 << 20))
			if reserveMiB < 0 {
				reserve = -1 // none
			} else if reserveMiB > 0 && reserve == 0 {
				return usagef(cmd, "--reserve-mb %v is less than a byte", reserveMiB)
			}
			id, err := tf.identity(cmd, "")
			if err != nil {
				return err
			}
			// Ctrl-C while waiting for a master to register with ends the wait.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			n, err := node.Start(ctx, node.Config{
				Role: pbRole, DataDir: dataDir, Listen: listen, Advertise: advertise, Zone: zone,
				DataListen: dataListen, DataAdvertise: dataAdvertise,
				Masters: masters, MetricsAddr: mAddr, Profiles: profiles, NodeID: nodeID, HeartbeatInterval: heartbeat,
				CapacityBytes: capacity, Logger: log.With("role", role), NewPartitions: partitionsOf(role, metanode.Options{DisableMerging: !merge, ChunkGrace: chunkGrace},
					datanode.Options{RecoveryBytesPerSecond: int64(recoveryMBps * (1 << 20)), ReserveBytes: reserve, Server: dataproto.ServerOptions{Encrypt: encrypt},
						Store: extentstore.Options{CompactBytes: journal}}),
				TLS: id,
			})
			stop()
			if err != nil {
				return plainError(err)
			}
			defer n.Stop()
			return plainError(waitForSignal(n.Fatal()))
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&masters, "master", []string{"127.0.0.1:17000"}, "master addresses, comma-separated")
	f.StringVar(&listen, "listen", fmt.Sprintf("127.0.0.1:%d", port), "address to listen on")
	f.StringVar(&advertise, "advertise", "", "address to give the master (default: the listen address)")
	f.StringVar(&dataDir, "data-dir", "./cairn-data/"+role, "directory for the node's state")
	f.StringVar(&mAddr, "metrics-addr", fmt.Sprintf("127.0.0.1:%d", port+1), "address of the /metrics and /healthz endpoint")
	addPprofFlag(cmd, &profiles)
	f.StringVar(&zone, "zone", "", "failure-domain label; replicas of a partition go to different zones")
	f.Uint64Var(&nodeID, "node-id", 0, "ask for this node id on first registration (default: assigned)")
	if role == "data" {
		f.StringVar(&dataListen, "data-listen", fmt.Sprintf("127.0.0.1:%d", port+2), "address of the data-path protocol")
		f.StringVar(&dataAdvertise, "data-advertise", "", "data-path address to give the master (default: the --data-listen address)")
		f.Float64Var(&recoveryMBps, "recovery-mbps", float64(datanode.DefaultRecoveryBytesPerSecond>>20),
			"MiB/s this node copies from peers to catch up or to fill a moved replica, so that client I/O keeps most of the disk")
		f.Float64Var(&reserveMiB, "reserve-mb", 0,
			"MiB of the disk kept in <data-dir>/reserve and given to the node's logs when the disk fills, after which it takes no new data until 10% is free (0: 2% of the disk, 16 MiB to 1 GiB; negative: none)")
		f.Float64Var(&journalMiB, "journal-mb", float64(extentstore.DefaultCompactBytes>>20),
			"MiB by which a data partition's metadata log (extent records and the bytes of small appends) may grow before it is rewritten; a log idle for 10 s is rewritten once it has grown by 1 MiB")
		f.BoolVar(&encrypt, "data-encryption", false,
			"keep data-path frames inside TLS after the handshake (AES-GCM; about halves 3-replica write throughput on 2 cores); without it the handshake authenticates every connection and frames carry CRC32C only, as Ceph's crc mode")
	}
	if role == "meta" {
		f.BoolVar(&merge, "merge", true, "merge concurrent requests of a partition into one Raft proposal (FalconFS request merging); --merge=false only for comparisons")
		f.DurationVar(&chunkGrace, "chunk-grace", metanode.DefaultChunkGrace, "how long a chunk must have had no reference before its bytes are reclaimed (0: the default)")
	}
	f.Uint64Var(&capacity, "capacity", 0, "capacity in bytes to report (default: the data dir's file system)")
	f.DurationVar(&heartbeat, "heartbeat", time.Second, "heartbeat interval")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	tf.add(cmd)
	return cmd
}

// addPprofFlag adds --pprof, which serves Go's profiles on the process's
// metrics endpoint. Off by default: the endpoint is plain HTTP with no
// authentication, and a profile is not only data (the command line, a
// goroutine dump with what each goroutine works on) but costs CPU while
// it runs.
func addPprofFlag(cmd *cobra.Command, on *bool) {
	cmd.Flags().BoolVar(on, "pprof", false,
		"also serve Go's profiles at /debug/pprof/ on the metrics endpoint, with no authentication: use it on loopback or a trusted network only (CAIRN_PROFILE_CONTENTION=1 adds block and mutex profiles)")
}

// partitionsOf is the partition host of a node role; meta applies to meta
// nodes.
func partitionsOf(role string, meta metanode.Options, data datanode.Options) func(node.Env) (node.PartitionHost, error) {
	if role == "meta" {
		return metanode.NewFactory(meta)
	}
	return datanode.NewFactory(data)
}
