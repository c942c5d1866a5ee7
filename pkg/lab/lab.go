// Package lab runs a Cairn cluster across emulated hosts on one machine,
// and breaks it on purpose: every host is a Linux network namespace with
// its own address on a bridge the lab makes, its processes (`cairn
// master|meta|data`, or a client's `cairn mount`) run inside it, and
// faults (kill, pause, a host or a zone down, partitions with nftables
// inside the namespaces, a slow link with tc, a full disk) are injected and
// healed one by one. `cairn lab` and the tests use the same code.
//
// What the lab made and which faults are in force are recorded in
// <dir>/lab.json before they are made (State), so that Down and Heal
// work from that file alone, also after the process that made them died.
//
// The pure parts (the plan of hosts, zones, addresses and command lines in
// plan.go; which processes, links, nftables rules and qdiscs a fault
// touches in fault.go; the state file in state.go) are data in, data out;
// sys.go is the only code that runs ip, nft and tc or enters a namespace.
// Needs root.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config is the shape of a lab for Up.
type Config struct {
	// Dir holds the lab's state file, certificates, data and logs.
	Dir string
	// Hosts server hosts (s1..sN) run a meta and a data node each, the
	// first three (one below three hosts) a master too; Zones zones
	// (z1..zZ) are assigned to them round-robin; Clients client hosts
	// (c1..cC) mount Volume each.
	Hosts, Zones, Clients int
	// Subnet is the lab's IPv4 subnet ("": DefaultSubnet).
	Subnet string
	// Binary is the cairn executable to run ("": this one).
	Binary string
	// Volume is created with min(3, Hosts) replicas and mounted on the
	// client hosts ("": "default").
	Volume string
	// SmallDisk names server hosts whose data node's dir is on a tmpfs of
	// SmallDiskBytes (0: 256 MiB), which the disk-full fault fills.
	SmallDisk      []string
	SmallDiskBytes int64
	// MasterFlags, MetaFlags and DataFlags are appended to those
	// processes' command lines; MountOptions are -o options of the mounts.
	MasterFlags, MetaFlags, DataFlags, MountOptions []string
	// LogLevel of the processes ("": info).
	LogLevel string
	// Pprof makes every process serve Go's profiles on its metrics
	// endpoint (--pprof), inside the lab's network only.
	Pprof bool
	// Ready bounds how long Up waits for the cluster and the mounts (0: 2
	// minutes).
	Ready time.Duration
	// Out receives progress lines (nil: none).
	Out io.Writer
}

func (cfg *Config) defaults() error {
	if cfg.Subnet == "" {
		cfg.Subnet = DefaultSubnet
	}
	if cfg.Volume == "" {
		cfg.Volume = "default"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.Ready <= 0 {
		cfg.Ready = 2 * time.Minute
	}
	if cfg.SmallDiskBytes == 0 {
		cfg.SmallDiskBytes = 256 << 20
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("lab: find the cairn binary: %w", err)
		}
		cfg.Binary = self
	}
	// The state file keeps an absolute path, good from any dir.
	bin, err := exec.LookPath(cfg.Binary)
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return fmt.Errorf("lab: the cairn binary %s: %w", cfg.Binary, err)
	}
	cfg.Binary = bin
	return nil
}

// Lab is a lab on this machine, made by Up or found by Open. Its methods
// read and write the state file under the lab's lock, so several
// processes (a test and `cairn lab` commands) may drive one lab.
type Lab struct {
	dir string
	out io.Writer
	// children are the processes this Lab started, reaped by their
	// waiters so that a killed one does not linger as a zombie; Down
	// waits for them.
	children sync.WaitGroup
	// launch, while set (a nemesis run), does this Lab's forking: see
	// launcher.go for why.
	launch *launcher
}

// run runs c as run does, through the launcher while there is one.
func (l *Lab) run(ctx context.Context, c command) (string, error) {
	if l.launch != nil {
		return l.launch.run(ctx, c)
	}
	return run(ctx, c)
}

// Open finds the lab in dir; ErrNoLab if it holds none.
func Open(dir string) (*Lab, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("lab dir %s: %w", dir, err)
	}
	if _, err := loadState(abs); err != nil {
		return nil, err
	}
	return &Lab{dir: abs, out: io.Discard}, nil
}

// Dir is the lab's absolute dir.
func (l *Lab) Dir() string { return l.dir }

// SetOutput sets where progress lines go (default: nowhere).
func (l *Lab) SetOutput(w io.Writer) { l.out = w }

// State reads the lab's state file.
func (l *Lab) State() (*State, error) { return loadState(l.dir) }

// update runs fn on the state under the lab's lock and saves what it
// changed, also when fn fails part way (what it recorded stays recorded).
func (l *Lab) update(fn func(s *State) error) error {
	unlock, err := lockDir(l.dir, time.Minute)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := loadState(l.dir)
	if err != nil {
		return err
	}
	ferr := fn(s)
	if err := saveState(s); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// spawn starts p (a lab process) inside its host's namespace, detached
// from the caller (its own session, stdin /dev/null, output appended to
// its log), and records its pid and start time in p.
func (l *Lab) spawn(s *State, p *Proc) error {
	h, ok := s.Host(p.Host)
	if !ok {
		return fmt.Errorf("start %s: no host %s", p.Key(), p.Host)
	}
	if err := os.MkdirAll(filepath.Dir(p.Log), 0o755); err != nil {
		return fmt.Errorf("start %s: %w", p.Key(), err)
	}
	logf, err := os.OpenFile(p.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: log: %w", p.Key(), err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s cairn lab: starting %s in %s: cairn %s\n", time.Now().UTC().Format(time.RFC3339), p.Key(), h.Netns, strings.Join(p.Args, " "))
	if l.launch != nil {
		pid, err := l.launch.spawn(context.Background(), h.Netns, append([]string{s.Binary}, p.Args...), cleanEnv(), p.Log)
		if err != nil {
			return fmt.Errorf("start %s: %w", p.Key(), err)
		}
		return l.started(p, pid, nil)
	}
	cmd, err := startDetached(launchRequest{Cmd: command{Netns: h.Netns, Argv: append([]string{s.Binary}, p.Args...)}, Env: cleanEnv(), Log: p.Log})
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Key(), err)
	}
	return l.started(p, cmd.Process.Pid, cmd)
}

// started records pid as p's and, if this process is its parent (cmd),
// reaps it when it ends.
func (l *Lab) started(p *Proc, pid int, cmd *exec.Cmd) error {
	_, start, err := procStat(pid)
	p.Pid, p.Start = pid, start
	if cmd != nil {
		l.children.Add(1)
		go func() {
			defer l.children.Done()
			_ = cmd.Wait()
		}()
	}
	if err != nil {
		return fmt.Errorf("start %s: pid %d gone at once: %w (log %s)", p.Key(), p.Pid, err, p.Log)
	}
	return nil
}

// Status is the lab as `cairn lab status` shows it.
type Status struct {
	ID     string       `json:"id"`
	Dir    string       `json:"dir"`
	Phase  string       `json:"phase"`
	Subnet string       `json:"subnet"`
	Bridge string       `json:"bridge"`
	Volume string       `json:"volume"`
	Hosts  []HostStatus `json:"hosts"`
	Faults []Fault      `json:"faults"`
}

// HostStatus is one host with its processes and mount.
type HostStatus struct {
	Name   string       `json:"name"`
	Client bool         `json:"client"`
	Zone   string       `json:"zone,omitempty"`
	Addr   string       `json:"addr"`
	Netns  string       `json:"netns"`
	Roles  []string     `json:"roles"`
	Procs  []ProcStatus `json:"procs"`
	// Mount is a client host's mount point; Mounted whether the kernel
	// lists it.
	Mount   string `json:"mount,omitempty"`
	Mounted bool   `json:"mounted,omitempty"`
}

// ProcStatus is one process: its pid and whether it runs (ProcRunning,
// ProcPaused, ProcDead).
type ProcStatus struct {
	Role  string `json:"role"`
	Pid   int    `json:"pid"`
	State string `json:"state"`
	Log   string `json:"log"`
}

// Status reads the lab's state and looks at its processes and mounts.
func (l *Lab) Status() (*Status, error) {
	s, err := loadState(l.dir)
	if err != nil {
		return nil, err
	}
	st := &Status{ID: s.ID, Dir: s.Dir, Phase: s.Phase, Subnet: s.Subnet, Bridge: s.Bridge, Volume: s.Volume, Faults: s.Faults}
	for _, h := range s.Hosts {
		hs := HostStatus{Name: h.Name, Client: h.Client, Zone: h.Zone, Addr: h.Addr, Netns: h.Netns, Roles: h.Roles}
		for _, p := range s.Procs {
			if p.Host == h.Name {
				hs.Procs = append(hs.Procs, ProcStatus{Role: p.Role, Pid: p.Pid, State: procState(p), Log: p.Log})
			}
		}
		if h.Client {
			hs.Mount = mountDir(s.Dir, h.Name)
			hs.Mounted, _ = mounted(hs.Mount)
		}
		st.Hosts = append(st.Hosts, hs)
	}
	return st, nil
}

// Env is what `cairn lab exec` adds to a command's environment (unless
// the caller set it): the masters' addresses and the lab's admin identity,
// so that `cairn status` and the other admin commands inside a host find
// the lab's cluster.
func (l *Lab) Env() ([]string, error) {
	s, err := loadState(l.dir)
	if err != nil {
		return nil, err
	}
	return []string{"CAIRN_MASTER=" + masterAddrsOf(s), "CAIRN_TLS_DIR=" + tlsDir(s.Dir, adminIdentity)}, nil
}

func masterAddrsOf(s *State) string {
	var out []string
	for _, h := range s.Hosts {
		if slices.Contains(h.Roles, RoleMaster) {
			out = append(out, hostPort(h.Addr, PortMaster))
		}
	}
	return strings.Join(out, ",")
}

// Exec runs argv inside host's namespace (with this machine's mounts, so
// the lab's mount points are there) to completion or until ctx ends, with
// the lab's Env, and returns its exit code.
func (l *Lab) Exec(ctx context.Context, host string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(argv) == 0 {
		return -1, errors.New("lab exec: no command")
	}
	s, err := loadState(l.dir)
	if err != nil {
		return -1, err
	}
	h, ok := s.Host(host)
	if !ok {
		return -1, fmt.Errorf("lab exec: no host %q (hosts: %s)", host, strings.Join(hostNames(s.Hosts, nil), ", "))
	}
	env, _ := l.Env()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = os.Environ()
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); os.Getenv(k) == "" {
			cmd.Env = append(cmd.Env, e)
		}
	}
	if err := startIn(h.Netns, cmd); err != nil {
		return -1, fmt.Errorf("lab exec on %s: %w", host, err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, fmt.Errorf("lab exec on %s: %w", host, err)
	}
	return 0, nil
}

// ClusterStatus is the part of `cairn status --json` the lab reads.
type ClusterStatus struct {
	Leader string `json:"leader"`
	Nodes  []struct {
		ID      uint64 `json:"id"`
		Role    string `json:"role"`
		Address string `json:"address"`
		State   string `json:"state"`
		Leader  bool   `json:"leader"`
		Zone    string `json:"zone"`
	} `json:"nodes"`
	Volumes []struct {
		Name   string `json:"name"`
		Health string `json:"health"`
	} `json:"volumes"`
	Partitions []struct {
		ID       uint64   `json:"id"`
		Volume   string   `json:"volume"`
		Kind     string   `json:"kind"`
		Replicas []uint64 `json:"replicas"`
		Leader   uint64   `json:"leader"`
		Health   string   `json:"health"`
		Down     []uint64 `json:"down"`
	} `json:"partitions"`
}

// Count is how many nodes of role are in state.
func (c *ClusterStatus) Count(role, state string) int {
	n := 0
	for _, nd := range c.Nodes {
		if nd.Role == role && nd.State == state {
			n++
		}
	}
	return n
}

// NodeAddr is the address of node id ("" if the status lists none).
func (c *ClusterStatus) NodeAddr(id uint64) string {
	for _, nd := range c.Nodes {
		if nd.ID == id && nd.Role != RoleMaster {
			return nd.Address
		}
	}
	return ""
}

// Cluster asks the cluster for its status (`cairn status --json`) from
// inside the lab: the bridge has no address on this machine, so the
// command runs in a host's namespace, trying first the hosts no fault
// touches, each for a few seconds.
func (l *Lab) Cluster(ctx context.Context) (*ClusterStatus, error) {
	s, err := loadState(l.dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, h := range hostsByReach(s) {
		cs, err := l.clusterFrom(ctx, s, h)
		if err == nil {
			return cs, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("cluster status: %w", errors.Join(errs...))
}

// hostsByReach orders the hosts for asking the cluster: client hosts,
// then server hosts, those touched by no fault first.
func hostsByReach(s *State) []Host {
	touched := map[string]bool{}
	for _, f := range s.Faults {
		for _, c := range f.Cuts {
			touched[c.From], touched[c.To] = true, true
		}
		for _, h := range f.Links {
			touched[h] = true
		}
	}
	hosts := slices.Clone(s.Hosts)
	slices.SortStableFunc(hosts, func(a, b Host) int {
		rank := func(h Host) int {
			r := 0
			if touched[h.Name] {
				r += 2
			}
			if !h.Client {
				r++
			}
			return r
		}
		return rank(a) - rank(b)
	})
	return hosts
}

func (l *Lab) clusterFrom(ctx context.Context, s *State, h Host) (*ClusterStatus, error) {
	out, err := l.run(ctx, command{Netns: h.Netns, Argv: []string{s.Binary, "status", "--json", "--timeout", "5s",
		"--master", masterAddrsOf(s), "--tls-dir", tlsDir(s.Dir, adminIdentity)}})
	if err != nil {
		return nil, fmt.Errorf("from %s: %w", h.Name, err)
	}
	var cs ClusterStatus
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		return nil, fmt.Errorf("from %s: cairn status --json: %w", h.Name, err)
	}
	return &cs, nil
}

// HostOf is the host whose address addr (HOST:PORT or an address) is.
func (s *State) HostOf(addr string) (string, bool) {
	a, _, found := strings.Cut(addr, ":")
	if !found {
		a = addr
	}
	for _, h := range s.Hosts {
		if h.Addr == a {
			return h.Name, true
		}
	}
	return "", false
}
