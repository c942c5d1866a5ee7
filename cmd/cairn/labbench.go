package main

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/lab"
)

func newLabBenchCmd() *cobra.Command {
	var (
		dir     string
		clients []string
	)
	cmd := &cobra.Command{
		Use:   "bench [--clients c1,c2] -- BENCH-RUN-ARGS...",
		Short: "Run cairn bench with its workers on the lab's client hosts",
		Long: `Run a distributed 'cairn bench run' on a lab (DFS-Perf's master and workers):
a worker daemon on every client host (or those of --clients), the master in the
first of them with --local=false and a --worker per daemon. Every worker's file
system calls go through its own host's mount and cross the lab's network to
the servers, as on separate machines.

Each worker sees its host's mount at DIR/mnt (bound there in a mount namespace
of its own), so a run through the mounts needs no --target: without one it
gets --target posix:DIR/mnt. For the SDK, give --target cairn:MASTERS/default
(the lab's masters, as 'cairn lab status' lists them; the workers use the lab's
admin identity). The arguments after -- are cairn bench run's: workloads,
--set, --threads, --processes, --out and so on. The exit code is the master's.
See docs/lab.md and docs/bench.md.`,
		Example: `  cairn lab bench -- --workload metadata --set files=2000 --threads 4
  cairn lab bench --clients c1,c2 -- --workload seq-write --set file_size=64MiB`,
		Args: func(cmd *cobra.Command, args []string) error {
			if d := cmd.ArgsLenAtDash(); d > 0 {
				return usagef(cmd, "want the bench arguments after --, got %d before it", d)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if os.Geteuid() != 0 {
				return errors.New("cairn lab bench needs root: run it as root, e.g. with sudo")
			}
			l, err := lab.Open(dir)
			if err != nil {
				return err
			}
			// The master gets the terminal's signals itself: it writes a
			// partial report on Ctrl-C.
			return passExitCode(func() (int, error) {
				return l.Bench(context.Background(), lab.BenchConfig{Clients: clients, Args: args, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()})
			}, syscall.SIGINT, syscall.SIGTERM)
		},
	}
	addLabDir(cmd, &dir)
	cmd.Flags().StringSliceVar(&clients, "clients", nil, "client hosts that run a worker (default: every client host; the master runs in the first)")
	return cmd
}
