package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/bench"
	"github.com/cairnfs/cairn/pkg/bench/fsys"
	"github.com/cairnfs/cairn/pkg/bench/progress"
	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/bench/trace"
	"github.com/cairnfs/cairn/pkg/bench/workload"
	"github.com/cairnfs/cairn/pkg/optrace"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark file systems side by side (DFS-Perf)",
		Long: `cairn bench is the DFS-Perf benchmark framework: a master hands a workload to
workers (threads, processes and remote hosts), starts them together, collects
their statistics and writes a report. It benchmarks any mounted file system
(posix:PATH) — Cairn, CephFS, JuiceFS, SeaweedFS, a FUSE passthrough, a local
disk — several of them in one run, and replays traces of real applications.

See docs/bench.md for the workloads, the report and the trace format.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newBenchRunCmd(), newBenchReplayCmd(), newBenchWorkerCmd(), newBenchTraceStatsCmd(),
		newBenchRecordCmd(), newBenchWorkloadsCmd(), newBenchOverheadCmd(), newBenchSummaryCmd())
	return cmd
}

// benchRunFlags are the flags run and replay share.
type benchRunFlags struct {
	targets       []string
	set           []string
	threads       int
	processes     int
	repetitions   int
	sweep         string
	workers       []string
	local         bool
	out           string
	setupTimeout  time.Duration
	workerTimeout time.Duration
	progress      string
	interval      time.Duration
	metaMetrics   []string
}

func (f *benchRunFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.targets, "target", nil, "file system to benchmark: posix:PATH, cairn:MASTER/VOLUME (stateless SDK client) or cairn-cached:MASTER/VOLUME (SDK client with a directory cache) (repeat to compare; ratios are to the first)")
	fl.StringArrayVar(&f.set, "set", nil, "workload key=value, applied to every workload that has the key (repeatable)")
	fl.IntVar(&f.threads, "threads", 0, "threads per worker process (shorthand for --set threads=N)")
	fl.IntVar(&f.processes, "processes", 0, "worker processes per node (shorthand for --set processes=N)")
	fl.IntVar(&f.repetitions, "repetitions", 0, "runs of each workload on each target, targets interleaved (default 1, or the file's)")
	fl.StringVar(&f.sweep, "sweep", "", "repeat every workload at several concurrencies for the scaling chart: threads=1,2,4 or processes=1,2")
	fl.StringArrayVar(&f.workers, "worker", nil, "HOST:PORT of a 'cairn bench worker --listen' on another host (repeatable; one node each)")
	fl.BoolVar(&f.local, "local", true, "also run workers on this host (--local=false: only on the --worker hosts)")
	fl.StringVar(&f.out, "out", "", "directory for report.json and report.html (default: a new ./cairn-bench-TIMESTAMP)")
	fl.DurationVar(&f.setupTimeout, "setup-timeout", 10*time.Minute, "how long a worker may take to set up")
	fl.DurationVar(&f.workerTimeout, "worker-timeout", 0, "how long to wait for a worker's result after the start (default: phases x the duration bound + 10% + 1m)")
	fl.StringVar(&f.progress, "progress", "auto", "live progress: auto (bars on a terminal, lines otherwise), bars, lines or off")
	fl.DurationVar(&f.interval, "progress-interval", 5*time.Second, "period of the plain progress lines")
	fl.StringArrayVar(&f.metaMetrics, "meta-metrics", nil, "TARGET=MASTER[,MASTER...]/VOLUME: for a posix target on a Cairn mount, read that volume's meta nodes' metrics around every phase (cairn: targets read theirs anyway; repeatable)")
}

// metaMetricsMap parses the --meta-metrics values against the run's targets.
func (f *benchRunFlags) metaMetricsMap(cmd *cobra.Command, targets []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range f.metaMetrics {
		i := strings.LastIndex(v, "=")
		if i <= 0 {
			return nil, usagef(cmd, "--meta-metrics %q: want TARGET=MASTER[,MASTER...]/VOLUME", v)
		}
		t, mm := v[:i], v[i+1:]
		if p, ok := strings.CutPrefix(t, "posix:"); ok && !filepath.IsAbs(p) {
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, usagef(cmd, "--meta-metrics %q: %v", v, err)
			}
			t = "posix:" + abs
		}
		if !slices.Contains(targets, t) {
			return nil, usagef(cmd, "--meta-metrics %q: %s is not one of the targets (%s)", v, t, strings.Join(targets, ", "))
		}
		if err := fsys.CheckMetaMetrics(mm); err != nil {
			return nil, usagef(cmd, "--meta-metrics %q: %v", v, err)
		}
		out[t] = mm
	}
	return out, nil
}

// overrides turns --set and the shorthands into workload keys.
func (f *benchRunFlags) overrides(cmd *cobra.Command) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range f.set {
		k, v, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef(cmd, "--set %q: want KEY=VALUE", s)
		}
		out[strings.TrimSpace(k)] = v
	}
	if cmd.Flags().Changed("threads") {
		out["threads"] = strconv.Itoa(f.threads)
	}
	if cmd.Flags().Changed("processes") {
		out["processes"] = strconv.Itoa(f.processes)
	}
	return out, nil
}

// execute runs a plan and writes its report; it is the body of run and replay.
func (f *benchRunFlags) execute(cmd *cobra.Command, plan *workload.Plan) error {
	targets := append(append([]string{}, plan.Targets...), f.targets...)
	if cmd.Flags().Changed("target") {
		targets = f.targets // the command line replaces the file's targets
	}
	if len(targets) == 0 {
		return usagef(cmd, "no target: give --target posix:DIR (repeat it to compare file systems)")
	}
	for i, t := range targets {
		if err := fsys.CheckTarget(t); err != nil {
			return usagef(cmd, "%v", err)
		}
		// A relative posix path means this host's current directory; workers
		// elsewhere need it absolute.
		if p, ok := strings.CutPrefix(t, "posix:"); ok && !filepath.IsAbs(p) {
			abs, err := filepath.Abs(p)
			if err != nil {
				return usagef(cmd, "target %s: %v", t, err)
			}
			targets[i] = "posix:" + abs
		}
	}
	metaMetrics, err := f.metaMetricsMap(cmd, targets)
	if err != nil {
		return err
	}
	remote := append(append([]string{}, plan.Workers...), f.workers...)
	if f.local {
		// Check every target here before anything starts, so a typo costs
		// one line rather than a run of failures.
		for _, t := range targets {
			fs, err := fsys.Open(cmd.Context(), t, fsys.Options{})
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			fs.Close()
		}
	} else if len(remote) == 0 {
		return usagef(cmd, "--local=false needs at least one --worker")
	}
	reps := plan.Repetitions
	if f.repetitions != 0 || reps == 0 {
		reps = f.repetitions
	}
	if reps == 0 {
		reps = 1
	}
	if reps < 0 || reps > 1000 {
		return usagef(cmd, "--repetitions must be between 1 and 1000, got %d", reps)
	}
	sweep := plan.Sweep
	if f.sweep != "" {
		sw, err := workload.ParseSweep(f.sweep)
		if err != nil {
			return usagef(cmd, "--sweep: %v", err)
		}
		sweep = sw
	}
	mode, err := progress.ParseMode(f.progress)
	if err != nil {
		return usagef(cmd, "--progress: %v", err)
	}
	if f.setupTimeout <= 0 || f.workerTimeout < 0 {
		return usagef(cmd, "timeouts must be positive")
	}
	out := f.out
	if out == "" {
		out = "cairn-bench-" + time.Now().Format("20060102-150405")
		for i := 2; ; i++ {
			if _, err := os.Stat(out); errors.Is(err, os.ErrNotExist) {
				break
			}
			out = fmt.Sprintf("cairn-bench-%s-%d", time.Now().Format("20060102-150405"), i)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the cairn binary for worker processes: %w", err)
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	stdout := cmd.OutOrStdout()
	display := progress.New(stdout, mode, f.interval)
	rep, runErr := bench.Run(ctx, bench.Options{
		Targets: targets, Workloads: plan.Workloads, Repetitions: reps, Sweep: sweep, Local: f.local, Remote: remote,
		WorkerCommand: []string{self, "bench", "worker", "--stdio"}, SetupTimeout: f.setupTimeout, WorkerTimeout: f.workerTimeout,
		MetaMetrics: metaMetrics, Observer: display, Command: os.Args, Log: cmd.ErrOrStderr(),
	})
	display.Close()
	if rep == nil {
		return runErr
	}
	fmt.Fprint(stdout, report.Table(rep))
	paths, werr := report.Write(out, rep)
	if werr != nil {
		return fmt.Errorf("write the report: %w", werr)
	}
	fmt.Fprintf(stdout, "\nreport: %s\n", strings.Join(paths, ", "))
	if runErr != nil {
		return fmt.Errorf("run stopped early (%v); the report holds what was measured", runErr)
	}
	if n := len(rep.Failures); n > 0 {
		return fmt.Errorf("%d worker failure(s), listed above and in the report; the other workers' results are kept", n)
	}
	return nil
}

func newBenchRunCmd() *cobra.Command {
	var (
		f         benchRunFlags
		workloads []string
		file      string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run workloads on one or more targets and write a report",
		Long: `Run built-in workloads (or a workload file) on every target in turn,
interleaved over repetitions, with workers as threads of this process (default),
as worker processes (processes > 1) and on other hosts (--worker). While it runs,
a progress bar per worker (plain lines when stdout is not a terminal); at the end
a table with median [min–max] over repetitions and the ratio to the first target,
and report.json and report.html in --out.

Workloads: ` + strings.Join(kindNames(), ", ") + `.
'cairn bench workloads' lists their keys; docs/bench.md explains them.`,
		Example: `  cairn bench run --workload metadata --target posix:/mnt/cairn --target posix:/mnt/peers/ceph --out cmp
  cairn bench run --workload seq-write --workload seq-read --set file_size=1GiB --threads 4 --target posix:/mnt/cairn
  cairn bench run -f workloads.yaml --repetitions 5 --sweep threads=1,2,4,8
  cairn bench run --workload dl-traversal --set burst=64 --target posix:/mnt/cairn --worker 10.0.0.2:7070 --worker 10.0.0.3:7070`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			over, err := f.overrides(cmd)
			if err != nil {
				return err
			}
			var plan *workload.Plan
			switch {
			case file != "" && len(workloads) > 0:
				return usagef(cmd, "give either --workload or --file, not both")
			case file != "":
				data, err := os.ReadFile(file)
				if err != nil {
					return usagef(cmd, "workload file: %v", err)
				}
				if plan, err = workload.ParsePlan(data, file, over); err != nil {
					return usagef(cmd, "%v", err)
				}
			case len(workloads) > 0:
				specs, err := workload.ResolveAll(workloads, over)
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				plan = &workload.Plan{Workloads: specs}
			default:
				return usagef(cmd, "no workload: give --workload KIND (one of %s) or --file FILE", strings.Join(kindNames(), ", "))
			}
			return f.execute(cmd, plan)
		},
	}
	f.add(cmd)
	cmd.Flags().StringArrayVar(&workloads, "workload", nil, "built-in workload to run (repeatable): "+strings.Join(kindNames(), ", "))
	cmd.Flags().StringVarP(&file, "file", "f", "", "YAML workload file (see docs/bench.md)")
	return cmd
}

func newBenchReplayCmd() *cobra.Command {
	var (
		f     benchRunFlags
		pace  string
		speed float64
	)
	cmd := &cobra.Command{
		Use:   "replay TRACE",
		Short: "Replay a recorded trace on one or more targets",
		Long: `Replay a trace (from 'cairn mount --trace' or 'cairn bench record') on every
target: each thread replays the whole trace in its own directory, after creating
the files and directories the trace expects to exist. Recorded threads replay
concurrently, each in its recorded order, and an operation waits for every
operation that had finished before it started in the recording. --pace max runs
as fast as that order allows; --pace recorded keeps the recorded timing (scaled
by --speed). An operation whose outcome differs from the recording (it failed
where it had succeeded, or the reverse) counts as an error of that operation.`,
		Example: `  cairn bench replay build.trace --target posix:/tmp/replay
  cairn bench replay build.trace --target posix:/mnt/cairn --target posix:/mnt/peers/juicefs --pace recorded --threads 4`,
		Args: exactArgs(1, "the trace file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := filepath.Abs(args[0])
			if err != nil {
				return usagef(cmd, "trace: %v", err)
			}
			fh, err := os.Open(path)
			if err != nil {
				return usagef(cmd, "trace: %v", err)
			}
			_, err = optrace.NewScanner(fh)
			fh.Close()
			if err != nil {
				return usagef(cmd, "%s: %v", args[0], err)
			}
			over, err := f.overrides(cmd)
			if err != nil {
				return err
			}
			over["trace"], over["pace"] = path, pace
			over["speed"] = strconv.FormatFloat(speed, 'g', -1, 64)
			specs, err := workload.ResolveAll([]string{"replay"}, over)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			return f.execute(cmd, &workload.Plan{Workloads: specs})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&pace, "pace", "max", "max (as fast as the recorded order allows) or recorded (the recorded timing)")
	cmd.Flags().Float64Var(&speed, "speed", 1, "with --pace recorded, how many times faster than recorded")
	return cmd
}

func newBenchWorkerCmd() *cobra.Command {
	var (
		listen string
		stdio  bool
		allow  []string
		once   bool
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Serve as a worker for cairn bench masters",
		Long: `Run a worker. With --listen it is a daemon on this host that masters reach over
TCP (one node of a multi-host run); it serves one run at a time and refuses
others while busy, and starts worker processes of itself when a workload asks
for processes > 1. A session is two round trips — setup, then start and the
result — so the worker sends nothing while it measures.

The protocol has no authentication: a master can make the worker create and
remove files in any target it names. Listen on a trusted network only, and
restrict targets with --allow.

--stdio serves one session on standard input and output; masters and daemons
start their worker processes that way.`,
		Example: `  cairn bench worker --listen 10.0.0.2:7070 --allow /mnt`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if stdio == (listen != "") {
				return usagef(cmd, "give exactly one of --listen ADDR and --stdio")
			}
			for i, a := range allow {
				abs, err := filepath.Abs(a)
				if err != nil {
					return usagef(cmd, "--allow %s: %v", a, err)
				}
				allow[i] = abs
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the cairn binary for worker processes: %w", err)
			}
			opts := bench.ServeOptions{WorkerCommand: []string{self, "bench", "worker", "--stdio"}, Allow: allow, Log: cmd.ErrOrStderr()}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if stdio {
				opts.Log = nil // stderr reaches the master only when this process fails
				return bench.ServeStdio(ctx, opts)
			}
			d, err := bench.Listen(listen, opts)
			if err != nil {
				return err
			}
			if len(allow) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: no --allow: masters may use any directory of this host as a target")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cairn bench worker listening on %s\n", d.Addr())
			return d.Serve(ctx, once)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "TCP address to serve masters on (HOST:PORT; port 0 picks one)")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "serve one session on stdin/stdout (how masters start worker processes)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "directory posix targets must lie below (repeatable)")
	cmd.Flags().BoolVar(&once, "once", false, "exit after serving one session")
	_ = cmd.Flags().MarkHidden("stdio")
	return cmd
}

func newBenchTraceStatsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "trace-stats TRACE",
		Short: "Print the statistics of a trace",
		Long: `Summarize a trace as DFS-Perf's workload generator does: operations with their
counts, errors, bytes and recorded latencies; reads and writes, sequential and
random, with their sizes; and the built-in workload that resembles it.`,
		Args: exactArgs(1, "the trace file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			fh, err := os.Open(args[0])
			if err != nil {
				return usagef(cmd, "trace: %v", err)
			}
			defer fh.Close()
			sc, err := optrace.NewScanner(fh)
			if err != nil {
				return usagef(cmd, "%s: %v", args[0], err)
			}
			// Stream the records: statistics need no more memory than the
			// per-handle and per-path tables.
			var events []optrace.Event
			for sc.Scan() {
				if len(events) >= 100_000_000 {
					return fmt.Errorf("%s: more than 100 million records", args[0])
				}
				events = append(events, sc.Event())
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			st := trace.Compute(events)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Header optrace.Header `json:"header"`
					*trace.Stats
				}{sc.Header(), st})
			}
			printTraceStats(out, sc.Header(), st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the statistics as JSON")
	return cmd
}

func printTraceStats(out io.Writer, h optrace.Header, s *trace.Stats) {
	if h.Command != "" {
		fmt.Fprintf(out, "command:   %s\n", h.Command)
	}
	if h.Root != "" {
		fmt.Fprintf(out, "root:      %s (%s)\n", h.Root, h.Source)
	}
	fmt.Fprintf(out, "records:   %d over %s, %d threads, %d open files, %d paths, %d failed operations\n",
		s.Records, s.Duration.Round(time.Microsecond), s.Threads, s.Handles, s.Paths, s.Errors)
	fmt.Fprintf(out, "data:      %d reads (%s, %d sequential, %d random), %d writes (%s, %d sequential, %d random)\n",
		s.Reads, benchBytes(s.ReadBytes), s.SeqReads, s.RandomReads, s.Writes, benchBytes(s.WriteBytes), s.SeqWrites, s.RandomWrites)
	if s.ReadBytes+s.WriteBytes > 0 {
		fmt.Fprintf(out, "           read share %.0f%% of bytes; median read request %s, median write request %s; %d files read, %d written\n",
			100*float64(s.ReadBytes)/float64(s.ReadBytes+s.WriteBytes), benchBytes(s.ReadSizes.Median()), benchBytes(s.WriteSizes.Median()),
			s.FilesRead, s.FilesWritten)
	}
	fmt.Fprintf(out, "metadata:  %d operations\n\n", s.MetadataOps)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OP\tCOUNT\tERRORS\tBYTES\tP50\tP99\tMAX\t")
	for _, o := range s.Ops {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", o.Op, o.Count, o.Errors, benchBytes(o.Bytes),
			report.Latency(float64(o.Latency.Quantile(0.5))/1e3), report.Latency(float64(o.Latency.Quantile(0.99))/1e3),
			report.Latency(float64(o.Latency.Max())/1e3))
	}
	tw.Flush()
	sug := s.Suggest()
	args := []string{"--workload", sug.Kind}
	for _, kv := range sug.Values {
		args = append(args, "--set", kv[0]+"="+kv[1])
	}
	fmt.Fprintf(out, "\nclosest built-in workload (%s):\n  cairn bench run %s --target ...\n", sug.Why, strings.Join(args, " "))
}

func benchBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func newBenchRecordCmd() *cobra.Command {
	var (
		out, root, fromStrace, cwd, keepLog string
	)
	cmd := &cobra.Command{
		Use:   "record --out TRACE [--root DIR] -- COMMAND [ARGS...]",
		Short: "Record a trace of a real program with strace",
		Long: `Run COMMAND under strace and convert what it did below --root (default: the
current directory) into a cairn trace, ready for 'cairn bench replay' and
'cairn bench trace-stats'. It follows child processes and threads, and pairs
opens, reads, writes and closes across dup, fork and exec. Operations outside
--root (libraries, /etc, the home directory) are left out.

This records any program without a Cairn mount; 'cairn mount --trace' will
record the same format from inside the FUSE client. It needs strace (Debian
package "strace"). --from-strace converts an existing log of
'strace ` + strings.Join(trace.StraceArgs, " ") + ` -o LOG -- COMMAND'.`,
		Example: `  cairn bench record --out build.trace --root /tmp/w -- sh -c 'cd /tmp/w && git clone /src/repo r && make -C r'
  cairn bench record --from-strace strace.log --root /tmp/w --out build.trace`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usagef(cmd, "--out TRACE is required")
			}
			if fromStrace != "" && len(args) > 0 {
				return usagef(cmd, "give either a command or --from-strace, not both")
			}
			if fromStrace == "" && len(args) == 0 {
				return usagef(cmd, "give the command to record after --, or --from-strace LOG")
			}
			if root == "" {
				root = "."
			}
			absRoot, err := filepath.Abs(root)
			if err == nil {
				absRoot, err = filepath.EvalSymlinks(absRoot)
			}
			if err != nil {
				return usagef(cmd, "--root: %v", err)
			}
			if cwd == "" {
				if cwd, err = os.Getwd(); err != nil {
					return fmt.Errorf("working directory: %w", err)
				}
			}
			logPath := fromStrace
			command := strings.Join(args, " ")
			if fromStrace == "" {
				bin, err := exec.LookPath("strace")
				if err != nil {
					return fmt.Errorf("strace is not installed (Debian: apt-get install strace): %w", err)
				}
				tmp, err := os.CreateTemp("", "cairn-strace-*.log")
				if err != nil {
					return fmt.Errorf("strace log: %w", err)
				}
				tmp.Close()
				logPath = tmp.Name()
				if keepLog == "" {
					defer os.Remove(logPath)
				}
				ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				sargs := append(append(append([]string{}, trace.StraceArgs...), "-o", logPath, "--"), args...)
				c := exec.CommandContext(ctx, bin, sargs...)
				c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
				runErr := c.Run()
				if keepLog != "" {
					if err := os.Rename(logPath, keepLog); err != nil {
						return fmt.Errorf("keep strace log: %w", err)
					}
					logPath = keepLog
				}
				if runErr != nil {
					// The trace of a failing program is still a trace.
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: %v (recording it anyway)\n", args[0], runErr)
				}
			}
			lf, err := os.Open(logPath)
			if err != nil {
				return fmt.Errorf("strace log: %w", err)
			}
			defer lf.Close()
			events, rep, err := trace.ImportStrace(lf, trace.StraceOptions{Root: absRoot, Cwd: cwd})
			if err != nil {
				return err
			}
			host, _ := os.Hostname()
			if err := writeTrace(out, optrace.Header{Root: absRoot, Source: "strace", Host: host, Command: command, Started: time.Now()}, events); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "recorded %d operations below %s into %s (%d system calls read, %d outside the root, %d lines not understood)\n",
				rep.Kept, absRoot, out, rep.Calls, rep.Outside, rep.Unparsed)
			for _, ex := range rep.UnparsedEx {
				fmt.Fprintf(cmd.ErrOrStderr(), "  not understood: %s\n", ex)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "trace file to write")
	cmd.Flags().StringVar(&root, "root", "", "directory whose operations are recorded (default: the current directory)")
	cmd.Flags().StringVar(&fromStrace, "from-strace", "", "convert this strace log instead of running a command")
	cmd.Flags().StringVar(&cwd, "cwd", "", "with --from-strace: the working directory the traced command started in (default: the current one)")
	cmd.Flags().StringVar(&keepLog, "keep-strace-log", "", "also keep strace's raw log at this path")
	return cmd
}

func writeTrace(path string, h optrace.Header, events []optrace.Event) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create trace: %w", err)
	}
	w, err := optrace.NewWriter(f, h)
	if err != nil {
		f.Close()
		return err
	}
	for i := range events {
		if err := w.Write(&events[i]); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close trace: %w", err)
	}
	return nil
}

func kindNames() []string {
	var out []string
	for _, k := range workload.Kinds() {
		out = append(out, k.Name)
	}
	return out
}

func newBenchWorkloadsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "workloads [KIND]",
		Short: "List the built-in workloads and their keys",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			kinds := workload.Kinds()
			if len(args) == 1 {
				k, ok := workload.Lookup(args[0])
				if !ok {
					return usagef(cmd, "unknown workload %q; known: %s", args[0], strings.Join(kindNames(), ", "))
				}
				kinds = []*workload.Kind{k}
			}
			for i, k := range kinds {
				if i > 0 {
					fmt.Fprintln(out)
				}
				fmt.Fprintf(out, "%s — %s\n", k.Name, k.Doc)
				tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
				keys := k.Keys
				if len(args) == 1 {
					keys = k.AllKeys()
				}
				for _, key := range keys {
					def := key.Default
					if key.Required {
						def = "(required)"
					}
					fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", key.Name, key.TypeName(), def, key.Doc)
				}
				tw.Flush()
			}
			if len(args) == 0 {
				fmt.Fprintln(out, "\nevery workload also has:")
				tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
				for _, key := range workload.CommonKeys {
					fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", key.Name, key.TypeName(), key.Default, key.Doc)
				}
				tw.Flush()
			}
			return nil
		},
	}
}

func newBenchOverheadCmd() *cobra.Command {
	var (
		target          string
		threads, files  int
		fileSize, block string
		rounds          int
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "overhead --target posix:DIR",
		Short: "Measure the framework's own overhead against a direct loop",
		Long: `Run the same sequential write and read workloads by a minimal direct loop of
system calls and by the whole framework (master, worker, engine, per-operation
timing), alternately, and print how much throughput the framework loses
(DFS-Perf §6.4 found 5.7% for its Java implementation).`,
		Example: `  cairn bench overhead --target posix:/tmp/overhead --rounds 9`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if target == "" {
				return usagef(cmd, "--target posix:DIR is required")
			}
			fs, err := workload.ParseSize(fileSize)
			if err != nil {
				return usagef(cmd, "--file-size: %v", err)
			}
			bs, err := workload.ParseSize(block)
			if err != nil {
				return usagef(cmd, "--block-size: %v", err)
			}
			if threads < 1 || files < 1 || rounds < 1 || fs < 1 || bs < 1 {
				return usagef(cmd, "threads, files, rounds and sizes must be positive")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			res, err := bench.Overhead(ctx, bench.OverheadOptions{Target: target, Threads: threads, Files: files,
				FileSize: fs, BlockSize: bs, Rounds: rounds, Log: cmd.ErrOrStderr()})
			if err != nil {
				if strings.Contains(err.Error(), "target") {
					return usagef(cmd, "%v", err)
				}
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "WORKLOAD\tDIRECT MiB/s (median)\tFRAMEWORK MiB/s (median)\tDIFFERENCE (median of paired rounds)\t\n")
			for _, r := range res {
				fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%+.1f%%\t\n", r.Workload, r.DirectMedian, r.FrameworkMedian, -r.DifferencePct)
			}
			tw.Flush()
			fmt.Fprintf(out, "%d thread(s) x %d file(s) x %s in %s blocks, %d alternating rounds; negative: the framework measured less\n",
				threads, files, workload.FormatSize(fs), workload.FormatSize(bs), rounds)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&target, "target", "", "posix:DIR to measure on")
	fl.IntVar(&threads, "threads", 2, "threads")
	fl.IntVar(&files, "files", 4, "files per thread")
	fl.StringVar(&fileSize, "file-size", "64MiB", "size of each file")
	fl.StringVar(&block, "block-size", "1MiB", "bytes per read or write call")
	fl.IntVar(&rounds, "rounds", 7, "alternating rounds of each (the medians are compared)")
	fl.BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}
