package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/clustermap"
	"github.com/cairnfs/cairn/pkg/localcluster"
)

func newUpCmd() *cobra.Command {
	var (
		dataDir, volume, logLevel string
		mount                     string
		s3                        bool
		masters, metas, datas     int
		ready, downAfter          time.Duration
		outAfter                  time.Duration
		// Master tuning, forwarded as given ("" keeps the master's default).
		mpMaxInodes, balanceInterval, balanceMinDentries string
		layout, chunkGrace                               string
		metaMerge, insecure, profiles                    bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a whole local cluster in the foreground",
		Long: `Run a whole Cairn cluster on this machine: masters, 3 meta nodes and 3 data
nodes as child processes on loopback ports, with every byte of state under
--data-dir and each process's log in <data-dir>/<process>/cairn.log. Volume
'default' is created on first start and mounted with FUSE at <data-dir>/mnt
(--mount DIR elsewhere, --mount "" not at all), and served over S3 on a
loopback port it prints, with credentials in <data-dir>/s3.env as the AWS SDKs'
own variables (set -a; . <data-dir>/s3.env makes any S3 tool use it). The
gateway reaches the cluster with a client identity of its own, bound to that
volume (<data-dir>/tls/s3; 'cairn client list' shows it as cairn-up-s3).

Ctrl-C (or SIGTERM) stops every process cleanly. Running 'cairn up' again on the
same --data-dir restarts the same cluster with its state; 'cairn status' and the
other admin commands find it through --data-dir.`,
		Example: `  cairn up
  cairn up --data-dir /tmp/c1 --masters 3`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if masters < 0 || metas < 0 || datas < 0 {
				return usagef(cmd, "process counts cannot be negative")
			}
			if _, err := clustermap.ParseLayout(layout); err != nil {
				return usagef(cmd, "--layout: %v", err)
			}
			if masters > 0 && masters%2 == 0 {
				return usagef(cmd, "--masters must be odd (a Raft majority), not %d", masters)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the cairn binary: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if !cmd.Flags().Changed("mount") {
				mount = filepath.Join(dataDir, "mnt")
			}
			var masterFlags []string
			for _, fl := range []struct{ name, value string }{
				{"mp-max-inodes", mpMaxInodes}, {"balance-interval", balanceInterval}, {"balance-min-dentries", balanceMinDentries},
			} {
				if fl.value != "" {
					masterFlags = append(masterFlags, "--"+fl.name, fl.value)
				}
			}
			var metaFlags []string
			if !metaMerge {
				metaFlags = append(metaFlags, "--merge=false")
			}
			if chunkGrace != "" {
				metaFlags = append(metaFlags, "--chunk-grace", chunkGrace)
			}
			start := time.Now()
			c, err := localcluster.Start(ctx, localcluster.Options{
				DataDir: dataDir, Mount: mount, Masters: masters, Metas: metas, Datas: datas, Binary: self,
				Volume: volume, VolumeLayout: layout, Ready: ready, Out: cmd.OutOrStdout(), LogLevel: logLevel, DownAfter: downAfter, OutAfter: outAfter,
				MasterFlags: masterFlags, MetaFlags: metaFlags, Insecure: insecure, S3: s3, Profiles: profiles,
			})
			if err != nil {
				return err
			}
			defer func() {
				fmt.Fprintln(cmd.OutOrStdout(), "stopping the cluster...")
				c.Stop()
				fmt.Fprintln(cmd.OutOrStdout(), "stopped; state is kept in", c.Dir())
			}()
			printCluster(cmd, c, time.Since(start))
			for {
				select {
				case <-ctx.Done():
					return nil
				case name := <-c.Exited():
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s stopped: %s\nthe rest of the cluster keeps running; Ctrl-C stops it\n", name, c.ExitReason(name))
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "./cairn-data", "directory holding all of the cluster's state and logs")
	f.BoolVar(&insecure, "insecure", false, "run every process in plain text, without certificates (to measure what TLS costs; commands then need --insecure too)")
	f.IntVar(&masters, "masters", 0, "number of masters for a new cluster: 1 or 3 (default 1)")
	f.IntVar(&metas, "metas", 0, "number of meta nodes for a new cluster (default 3)")
	f.IntVar(&datas, "datas", 0, "number of data nodes for a new cluster (default 3)")
	f.StringVar(&volume, "volume", "default", "volume to create if missing (empty: none)")
	f.BoolVar(&s3, "s3", true, "serve the volume over S3 on a loopback port, with credentials in <data-dir>/s3.env (--s3=false: no gateway)")
	f.StringVar(&layout, "layout", "extent", "layout of new files in the volume created: extent, or cdc (content-defined chunks with dedup)")
	f.DurationVar(&ready, "ready-timeout", 60*time.Second, "how long to wait for the cluster to come up")
	f.StringVar(&logLevel, "log-level", "info", "log level of the cluster's processes")
	f.StringVar(&mount, "mount", "", "mount the volume here with FUSE (default <data-dir>/mnt; \"\" disables)")
	f.StringVar(&mpMaxInodes, "mp-max-inodes", "", "passed to the masters: grow a volume when a meta partition holds more inodes or dentries (default: the master's)")
	f.StringVar(&balanceInterval, "balance-interval", "", "passed to the masters: how often they check growth and balance (default: the master's)")
	f.StringVar(&balanceMinDentries, "balance-min-dentries", "", "passed to the masters: balance only volumes with at least this many dentries (default: the master's)")
	f.StringVar(&chunkGrace, "chunk-grace", "", "passed to the meta nodes: how long a chunk must have had no reference before its bytes are reclaimed (default: the meta nodes' 5m)")
	f.BoolVar(&metaMerge, "meta-merge", true, "request merging on the meta nodes (--meta-merge=false only to compare, see make bench-merging)")
	f.DurationVar(&downAfter, "down-after", 0, "mark a node down after this long without heartbeats (default: the master's 10s)")
	f.BoolVar(&profiles, "pprof", false, "every master, node and the mount serve Go's profiles at /debug/pprof/ on their metrics addresses (loopback, open to every user of this host; no authentication)")
	f.DurationVar(&outAfter, "out-after", 0, "mark a down node out, and move its replicas to other nodes, after this much longer (default: the master's 10m)")
	return cmd
}

func printCluster(cmd *cobra.Command, c *localcluster.Cluster, took time.Duration) {
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "\nCairn is up: all nodes alive after %.1fs\n\n", took.Seconds())
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tPID\tADDRESS\tMETRICS\tLOG")
	for _, p := range c.Layout().Procs {
		fmt.Fprintf(tw, "%s\t%d\t%s\thttp://%s/metrics\t%s\n", p.Name, c.Pid(p.Name), p.Addr, p.MetricsAddr, c.LogPath(p))
	}
	tw.Flush()
	if mp := c.MountDir(); mp != "" {
		fmt.Fprintf(out, "\nMount:    %s (unmounted on exit)", mp)
	}
	if ep := c.S3Endpoint(); ep != "" {
		fmt.Fprintf(out, "\nS3:       %s (buckets are the volume's top-level directories; set -a; . %s)", ep, filepath.Join(c.Dir(), localcluster.S3EnvFile))
	}
	for _, p := range c.Layout().Procs {
		if p.Role == "master" {
			fmt.Fprintf(out, "\nConsole:  http://%s/", p.MetricsAddr) // any master forwards to the leader
			break
		}
	}
	fmt.Fprintf(out, "\nData dir: %s\nStatus:   cairn status --data-dir %s\nStop:     Ctrl-C (state is kept; run 'cairn up' again to restart)\n", c.Dir(), c.Dir())
}
