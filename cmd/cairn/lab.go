package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/lab"
)

// defaultLabDir is where cairn lab keeps a lab unless --dir says otherwise.
const defaultLabDir = "./cairn-lab"

func newLabCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run a cluster across emulated hosts on this machine, and break it on purpose",
		Long: `A lab is a Cairn cluster across hosts emulated on this machine: every host is a
network namespace with its own address on a bridge the lab makes, and runs its
processes inside it (a master on the first three server hosts, a meta and a
data node on each, a mount of the volume on each client host). Server hosts
are spread round-robin over zones (--zone of the nodes). Traffic never leaves
the bridge: no default route, no NAT, no address on this machine's side.

Faults are injected by hand (cairn lab fault) and healed (cairn lab heal):
killed or paused processes, a host or a whole zone down, partitions with
nftables inside the namespaces, a slow link, a full disk. What the lab made
and which faults are in force are recorded in <dir>/lab.json, so that
'cairn lab down' removes everything, also after a crash. Needs root.
See docs/lab.md.`,
		Args: noArgs,
	}
	cmd.AddCommand(newLabUpCmd(), newLabDownCmd(), newLabStatusCmd(), newLabExecCmd(), newLabFaultCmd(), newLabHealCmd(), newLabJepsenCmd(), newLabCheckCmd(), newLabLauncherCmd(), newLabBenchCmd())
	return cmd
}

func addLabDir(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", defaultLabDir, "the lab's dir: its state file, certificates, data and logs")
}

func newLabUpCmd() *cobra.Command {
	var (
		cfg                 lab.Config
		smallMiB            int64
		downAfter, ready    time.Duration
		masterFlags, mountO []string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Make a lab and start its cluster; returns once it is ready",
		Long: `Make a lab of --hosts server hosts in --zones zones and --clients client hosts,
start the cluster in it, create the volume and mount it on every client host
(at <dir>/hosts/cN/mnt), and return once the masters have a leader, every node
is alive, every partition has a leader and every mount answers. The processes
keep running after it returns; 'cairn lab down' stops them.`,
		Example: `  cairn lab up --hosts 6 --zones 3 --clients 2
  cairn lab up --dir /tmp/lab2 --subnet 10.213.7.0/24 --hosts 4 --zones 2 --clients 1 --small-disk s4`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.SmallDiskBytes = smallMiB << 20
			if smallMiB <= 0 {
				return usagef(cmd, "--small-disk-mib must be positive")
			}
			if downAfter > 0 {
				cfg.MasterFlags = append(cfg.MasterFlags, "--down-after", downAfter.String())
			}
			cfg.MasterFlags = append(cfg.MasterFlags, masterFlags...)
			cfg.MountOptions, cfg.Ready, cfg.Out = mountO, ready, cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			l, err := lab.Up(ctx, cfg)
			if err != nil {
				return err
			}
			st, err := l.Status()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\nThe lab is up after %.1fs.\n\n", time.Since(start).Seconds())
			printLabHosts(cmd, st)
			d, prog := st.Dir, os.Args[0]
			fmt.Fprintf(out, `
Use it (docs/lab.md):
  # %[3]s is c1's mount of volume %[4]s
  ls %[3]s
  # run a command inside a host, here the cluster's status as c1 sees it
  %[2]s lab exec --dir %[1]s c1 -- %[2]s status
  # inject a fault (kill, pause, host-down, zone-down, isolate, split,
  # oneway, bridge-split, slow, disk-full), then heal it
  %[2]s lab fault --dir %[1]s isolate s1
  %[2]s lab heal --dir %[1]s --all
  # hosts, processes, mounts and faults in force
  %[2]s lab status --dir %[1]s
Take it down (also after a crash; logs stay in %[1]s/hosts):
  %[2]s lab down --dir %[1]s
`, d, prog, firstMount(st), st.Volume)
			return nil
		},
	}
	f := cmd.Flags()
	addLabDir(cmd, &cfg.Dir)
	f.IntVar(&cfg.Hosts, "hosts", 3, "server hosts (s1..sN): a meta and a data node each, a master on the first three")
	f.IntVar(&cfg.Zones, "zones", 3, "zones (z1..zZ) the server hosts are spread over round-robin")
	f.IntVar(&cfg.Clients, "clients", 1, "client hosts (c1..cC), each mounting the volume")
	f.StringVar(&cfg.Subnet, "subnet", lab.DefaultSubnet, "the lab's private IPv4 subnet (refused if this machine routes any of it)")
	f.StringVar(&cfg.Volume, "volume", "default", "the volume to create and mount")
	f.StringSliceVar(&cfg.SmallDisk, "small-disk", nil, "server hosts whose data node's dir is a small tmpfs, for the disk-full fault (e.g. s3)")
	f.Int64Var(&smallMiB, "small-disk-mib", 256, "size of each small disk in MiB")
	f.DurationVar(&downAfter, "down-after", 0, "passed to the masters: mark a node down after this long without heartbeats (default: the master's)")
	f.StringSliceVar(&masterFlags, "master-flag", nil, "more flags for the masters, e.g. --master-flag=--out-after=1m")
	f.StringSliceVar(&mountO, "mount-option", nil, "-o options of the mounts, e.g. op_timeout=10")
	f.StringVar(&cfg.LogLevel, "log-level", "info", "log level of the lab's processes")
	f.BoolVar(&cfg.Pprof, "pprof", false, "every process serves Go's profiles at /debug/pprof/ on its metrics port (reachable inside the lab only)")
	f.DurationVar(&ready, "ready-timeout", 2*time.Minute, "how long to wait for the cluster and the mounts")
	return cmd
}

func firstMount(st *lab.Status) string {
	for _, h := range st.Hosts {
		if h.Mount != "" {
			return h.Mount
		}
	}
	return st.Dir + "/hosts/c1/mnt"
}

func printLabHosts(cmd *cobra.Command, st *lab.Status) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tZONE\tADDRESS\tPROCESSES\tMOUNT")
	for _, h := range st.Hosts {
		var procs []string
		for _, p := range h.Procs {
			s := fmt.Sprintf("%s %d", p.Role, p.Pid)
			if p.State != lab.ProcRunning {
				s += " (" + p.State + ")"
			}
			procs = append(procs, s)
		}
		zone, mount := h.Zone, "-"
		if zone == "" {
			zone = "-"
		}
		if h.Mount != "" {
			mount = h.Mount
			if !h.Mounted {
				mount += " (not mounted)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, zone, h.Addr, strings.Join(procs, ", "), mount)
	}
	tw.Flush()
}

func newLabDownCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop a lab's processes and remove its mounts, namespaces, links and bridge",
		Long: `Stop every process of the lab (SIGTERM, then SIGKILL), unmount its mounts and
delete its namespaces, veth links and bridge, with the faults' nftables tables
and qdiscs, from what <dir>/lab.json records: it also cleans a lab whose
'cairn lab up' crashed half way. A second down does nothing. Logs and data
stay in the dir; the next 'cairn lab up' there starts afresh.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("cairn lab down needs root: run it as root, e.g. with sudo")
			}
			return lab.Down(context.Background(), dir, cmd.OutOrStdout())
		},
	}
	addLabDir(cmd, &dir)
	return cmd
}

func newLabStatusCmd() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a lab's hosts, processes, mounts and faults in force",
		Long: `Show the lab's hosts (name, zone, address, processes with their pids and
whether they run, mount points) and the faults in force with their ids.
'cairn lab exec HOST -- cairn status' shows the cluster as a host sees it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := lab.Open(dir)
			if err != nil {
				return err
			}
			st, err := l.Status()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, st)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "lab %s in %s: %s, subnet %s on bridge %s, volume %s\n\n", st.ID, st.Dir, st.Phase, st.Subnet, st.Bridge, st.Volume)
			printLabHosts(cmd, st)
			if len(st.Faults) == 0 {
				fmt.Fprintln(out, "\nno faults in force")
				return nil
			}
			fmt.Fprintln(out)
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "FAULT\tKIND\tSINCE\tWHAT")
			for _, f := range st.Faults {
				fmt.Fprintf(tw, "%d\t%s\t%s ago\t%s\n", f.ID, f.Kind, time.Since(f.Since).Round(time.Second), f.Detail)
			}
			return tw.Flush()
		},
	}
	addLabDir(cmd, &dir)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func newLabExecCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "exec HOST -- CMD [ARG...]",
		Short: "Run a command inside a host of a lab; its exit code is passed through",
		Long: `Run CMD inside HOST's network namespace (with this machine's files and mounts)
and exit with its exit code. CAIRN_MASTER and CAIRN_TLS_DIR are set to the
lab's masters and admin identity unless already set, so 'cairn status' and the
other admin commands reach the lab's cluster as that host does.`,
		Example: `  cairn lab exec c1 -- cairn status
  cairn lab exec s2 -- ss -tn`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usagef(cmd, "want HOST -- CMD [ARG...]")
			}
			if d := cmd.ArgsLenAtDash(); d >= 0 && d != 1 {
				return usagef(cmd, "want one HOST before --, got %d arguments", d)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := lab.Open(dir)
			if err != nil {
				return err
			}
			return passExitCode(func() (int, error) {
				return l.Exec(context.Background(), args[0], args[1:], os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}, syscall.SIGINT, syscall.SIGQUIT)
		},
	}
	addLabDir(cmd, &dir)
	return cmd
}

// passExitCode runs a command inside the lab (run returns its exit code)
// and exits with that code when it is not 0. The command gets the
// terminal's signals sigs itself and the lab waits for it to end: they are
// caught here, not ignored, since an ignored signal would stay ignored in
// the command.
func passExitCode(run func() (int, error), sigs ...os.Signal) error {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	defer signal.Stop(ch)
	code, err := run()
	if err != nil {
		return err
	}
	if code != 0 {
		os.Exit(code)
	}
	return nil
}

func newLabFaultCmd() *cobra.Command {
	var (
		dir    string
		dryRun bool
	)
	var kinds strings.Builder
	for _, k := range lab.FaultKinds {
		fmt.Fprintf(&kinds, "  %-13s %-14s %s\n", k.Kind, k.Args, k.What)
	}
	cmd := &cobra.Command{
		Use:   "fault KIND ARGS...",
		Short: "Inject a fault into a lab; it stays until healed",
		Long: `Inject a fault and print its id, which 'cairn lab heal ID' undoes exactly.
Hosts are s1..sN (servers) and c1..cC (clients); ROLE is master, meta, data or
mount; zones are z1..zZ. Faults that would hold the same process, link, link
rate or disk as one in force are refused; partitions stack.

` + kinds.String() + `
Partitions are nftables tables inside the receiving hosts' namespaces (never
this machine's own) that drop the packets of the cut hosts at input; slow is a
tc token bucket on both ends of the host's link. --dry-run prints what would
be done and how it would be healed. See docs/lab.md.`,
		Example: `  cairn lab fault isolate s1
  cairn lab fault split s1,s2
  cairn lab fault oneway s1 s2
  cairn lab fault kill s3/data
  cairn lab fault slow c1 10mbit`,
		Args: func(cmd *cobra.Command, args []string) error {
			if _, err := lab.ParseSpec(args); err != nil {
				return usageError{err, cmd}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, _ := lab.ParseSpec(args)
			l, err := lab.Open(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun {
				f, inject, heal, err := l.Plan(spec)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "fault %d (%s) would do:\n  %s\nand its heal:\n  %s\n", f.ID, spec, strings.Join(inject, "\n  "), strings.Join(heal, "\n  "))
				return nil
			}
			if os.Geteuid() != 0 {
				return errors.New("cairn lab fault needs root: run it as root, e.g. with sudo")
			}
			l.SetOutput(out)
			f, err := l.Fault(context.Background(), spec)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "fault %d: %s: %s (heal with: %s lab heal --dir %s %d)\n", f.ID, spec, f.Detail, os.Args[0], dir, f.ID)
			return nil
		},
	}
	addLabDir(cmd, &dir)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what the fault would do, and its heal, without doing it")
	return cmd
}

func newLabHealCmd() *cobra.Command {
	var (
		dir string
		all bool
	)
	cmd := &cobra.Command{
		Use:   "heal [FAULT-ID | --all]",
		Short: "Undo a fault of a lab (or every fault)",
		Long: `Undo fault FAULT-ID exactly (restart what it killed, resume what it paused,
bring links up, delete its nftables tables and qdiscs, empty the disk it
filled), or with --all every fault in force, the newest first. A restarted
mount is waited for.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) || len(args) > 1 {
				return usagef(cmd, "want a FAULT-ID or --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if os.Geteuid() != 0 {
				return errors.New("cairn lab heal needs root: run it as root, e.g. with sudo")
			}
			l, err := lab.Open(dir)
			if err != nil {
				return err
			}
			l.SetOutput(cmd.OutOrStdout())
			ctx := context.Background()
			if all {
				ids, err := l.HealAll(ctx)
				fmt.Fprintf(cmd.OutOrStdout(), "healed %d faults %v\n", len(ids), ids)
				return err
			}
			id, err := strconv.Atoi(args[0])
			if err != nil || id <= 0 {
				return usagef(cmd, "fault id %q: want a positive number (cairn lab status lists them)", args[0])
			}
			if err := l.Heal(ctx, id); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "healed fault %d\n", id)
			return nil
		},
	}
	addLabDir(cmd, &dir)
	cmd.Flags().BoolVar(&all, "all", false, "heal every fault in force")
	return cmd
}
