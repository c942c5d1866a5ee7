package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/checker"
	"github.com/cairnfs/cairn/pkg/history"
	"github.com/cairnfs/cairn/pkg/lab"
)

// errAnomalies makes the command exit 1 after printing its report.
var errAnomalies = errors.New("the nemesis run found problems")

func newLabJepsenCmd() *cobra.Command {
	var (
		dir, out  string
		cfg       lab.JepsenConfig
		kinds     []string
		maxFaults int
	)
	cmd := &cobra.Command{
		Use:   "jepsen",
		Short: "Run random faults against the lab while its clients work, then check every operation",
		Long: `Run a nemesis run on a lab that is up: for --duration, faults drawn at random
(every kind in turn, at most --max-faults at once) are injected and healed,
while workers on every client host overwrite and read shared files, append to
files of their own and create, rename, unlink and list names in shared
directories, through their mounts. Every operation is recorded with its
times and result. Then everything is healed, the cluster is given time to
recover, every file and directory is read from every client host, and a
checker looks for anomalies: lost or phantom writes and appends, stale or
corrupt reads, name operations that are not linearizable. cairn fsck must
find the volume clean.

Writes <out>/history.jsonl, nemesis.jsonl, report.md, timeline.svg and the
hosts' logs (<out>/logs/HOST/) and exits 1 when anything was found. See
docs/lab.md.`,
		Example: `  cairn lab jepsen --duration 10m
  cairn lab jepsen --duration 90s --faults kill,isolate,pause --seed 7`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Duration <= 0 {
				return usagef(cmd, "--duration must be positive")
			}
			for _, k := range kinds {
				cfg.Nemesis.Kinds = append(cfg.Nemesis.Kinds, lab.FaultKind(k))
			}
			cfg.Nemesis.MaxConcurrent = maxFaults
			if cfg.Seed == 0 {
				cfg.Seed = uint64(time.Now().UnixNano())
			}
			l, err := lab.Open(dir)
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Join(l.Dir(), "jepsen", fmt.Sprintf("%s-seed%d", time.Now().UTC().Format("20060102T150405"), cfg.Seed))
			}
			cfg.Out, cfg.Progress = out, cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			res, err := l.Jepsen(ctx, cfg)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "\n%s\n", res.Report.String())
			injected := 0
			for _, e := range res.Events {
				if !e.Heal && e.Err == "" {
					injected++
				}
			}
			fmt.Fprintf(w, "faults injected: %d; recovered after the heal: %v", injected, res.Recovered)
			if !res.Recovered {
				fmt.Fprintf(w, " (%s)", res.Unrecovered)
			}
			fmt.Fprintf(w, "; fsck clean: %v\nreport: %s\n", res.FsckClean, filepath.Join(out, "report.md"))
			if res.Failed() {
				fmt.Fprintf(os.Stderr, "replay this schedule with: cairn lab jepsen --dir %s --duration %v --seed %d\n", dir, cfg.Duration, cfg.Seed)
				return errAnomalies
			}
			return nil
		},
	}
	f := cmd.Flags()
	addLabDir(cmd, &dir)
	f.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long faults are injected while the clients work")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the faults and operations (0: from the clock); printed, to replay a run")
	f.StringSliceVar(&kinds, "faults", nil, "fault kinds to draw from (default: every kind the lab can inject)")
	f.IntVar(&maxFaults, "max-faults", 1, "faults in force at once")
	f.IntVar(&cfg.Workload.WorkersPerHost, "workers", 3, "workers per client host")
	f.DurationVar(&cfg.Settle, "settle", 3*time.Minute, "how long the cluster may take to recover after the heal")
	f.StringVar(&out, "out", "", "directory of the run's files (default: <dir>/jepsen/<time>-seed<seed>)")
	return cmd
}

// newLabLauncherCmd is the process a nemesis run forks through
// (lab.ServeLauncher); not for people.
func newLabLauncherCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "launcher",
		Short:  "Start commands for a nemesis run (internal)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.ServeLauncher(os.Stdin, os.Stdout)
		},
	}
}

func newLabCheckCmd() *cobra.Command {
	var opts checker.Options
	cmd := &cobra.Command{
		Use:   "check RUN-DIR|HISTORY.jsonl",
		Short: "Check a nemesis run's recorded history again",
		Long: `Run the checker of cairn lab jepsen again on a recorded history: the
history.jsonl a run wrote, or its directory. Use it to decide keys a run left
undecided (give --timeout more time) or to check a history kept from an
older Cairn. Exits 1 when an anomaly is found. Needs no lab and no root.`,
		Example: `  cairn lab check ./cairn-lab/jepsen/20261128T152644-seed41 --timeout 5m`,
		Args:    exactArgs(1, "RUN-DIR|HISTORY.jsonl"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if st, err := os.Stat(path); err == nil && st.IsDir() {
				path = filepath.Join(path, "history.jsonl")
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			ops, err := history.ReadOps(f)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			rep := checker.Check(ops, opts)
			fmt.Fprintln(cmd.OutOrStdout(), rep.String())
			if len(rep.Anomalies) > 0 {
				return errAnomalies
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Timeout, "timeout", checker.DefaultTimeout, "bound of the search per register or directory")
	f.DurationVar(&opts.NameStaleness, "name-staleness", lab.MountNameBound, "how old a mount's view of another mount's name changes may be")
	return cmd
}
