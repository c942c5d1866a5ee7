package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits of a lab: the address plan hands out one address per host, and
// every host runs a handful of processes on a 2-core machine.
const (
	MaxHosts   = 64
	MaxClients = 16
	MaxZones   = MaxHosts
)

// DefaultSubnet is the lab's private IPv4 subnet unless Config.Subnet says
// otherwise. It lives only inside the lab's namespaces, so two labs may
// share it; Up refuses it when the host routes any part of it.
const DefaultSubnet = "10.213.0.0/24"

// The masters' orphan sweeper in a lab: a lab exists to watch recovery,
// so operations cut short by faults are cleaned up within a run, not
// after the 10-minute default. The grace stays above a mount's 30 s
// operation timeout, so no operation still between its steps loses its
// inode.
const (
	LabSweepInterval = 10 * time.Second
	LabSweepGrace    = time.Minute
)

// Ports every host's processes listen on, at the host's own address.
const (
	PortMaster        = 17000
	PortMasterMetrics = 17001
	PortMeta          = 17100
	PortMetaMetrics   = 17101
	PortData          = 17200
	PortDataMetrics   = 17201
	PortDataPath      = 17202
	PortMountMetrics  = 17301
)

// Roles of the processes a lab starts.
const (
	RoleMaster = "master"
	RoleMeta   = "meta"
	RoleData   = "data"
	RoleMount  = "mount"
)

// innerLink is the name of every host's interface inside its namespace.
const innerLink = "eth0"

// Host is one network namespace of the lab with its address on the bridge.
type Host struct {
	Name   string   `json:"name"`           // s1..sN for servers, c1..cC for clients
	Client bool     `json:"client"`         // a client host (mounts) rather than a server host
	Zone   string   `json:"zone,omitempty"` // z1..zZ for server hosts, "" for clients
	Addr   string   `json:"addr"`           // its IPv4 address on the lab's subnet
	Netns  string   `json:"netns"`          // the namespace's name (ip netns)
	Veth   string   `json:"veth"`           // the bridge-side end of its veth pair, in the root namespace
	Roles  []string `json:"roles"`          // the processes it runs, in start order
	// SmallDisk: the data node's dir is on a tmpfs of SmallDiskBytes (the
	// disk-full fault fills it).
	SmallDisk bool `json:"small_disk,omitempty"`
}

// Proc is one process of the lab, with the command line it is (re)started
// with; Pid and Start (the kernel's start time of the process, in clock
// ticks after boot) identify the running instance, so that a recycled pid
// is never signalled.
type Proc struct {
	Host  string   `json:"host"`
	Role  string   `json:"role"`
	Args  []string `json:"args"` // after the binary
	Log   string   `json:"log"`
	Pid   int      `json:"pid,omitempty"`
	Start uint64   `json:"start,omitempty"`
}

// Key names a process as the faults do: HOST/ROLE.
func (p Proc) Key() string { return p.Host + "/" + p.Role }

// LabID is the short name a lab's dir gives its bridge, namespaces, links
// and nftables tables: 6 hex digits of the dir's absolute path's SHA-256,
// so that labs in different dirs can coexist.
func LabID(absDir string) string {
	sum := sha256.Sum256([]byte(absDir))
	return hex.EncodeToString(sum[:3])
}

// Names of the lab's kernel objects. Interface names stay within the
// kernel's 15 characters for up to 99 hosts of each kind.
func bridgeName(id string) string            { return "clab" + id }
func netnsName(id, host string) string       { return "cairnlab-" + id + "-" + host }
func vethName(id, host string) string        { return "cl" + id + "-" + host }
func tablePrefix(id string) string           { return "cairnlab_" + id }
func faultTable(id string, fault int) string { return tablePrefix(id) + "_f" + strconv.Itoa(fault) }

// netnsPath is where ip netns keeps a named namespace.
func netnsPath(name string) string { return "/run/netns/" + name }

// Paths inside a lab's dir.
func hostDir(dir, host string) string      { return filepath.Join(dir, "hosts", host) }
func tlsDir(dir, who string) string        { return filepath.Join(dir, "tls", who) }
func mountDir(dir, host string) string     { return filepath.Join(hostDir(dir, host), "mnt") }
func smallDiskDir(dir, host string) string { return filepath.Join(hostDir(dir, host), "disk") }
func ballastPath(dir, host string) string  { return filepath.Join(smallDiskDir(dir, host), "ballast") }

// adminIdentity is the TLS identity the lab itself uses (status, volume
// creation) and lends to `cairn lab exec`.
const adminIdentity = "admin"

// caIdentity is the lab's CA.
const caIdentity = "ca"

// certName is a process's TLS identity and certificate name: HOST-ROLE.
func certName(host, role string) string { return host + "-" + role }

// MasterCount is how many masters a lab of n server hosts runs: 3, or 1
// below 3 hosts (a Raft group wants an odd size).
func MasterCount(n int) int {
	if n >= 3 {
		return 3
	}
	return 1
}

// Replicas is the replica count of the lab's volume: 3, or fewer when
// there are fewer server hosts.
func Replicas(n int) int { return min(n, 3) }

// ZoneOf is the zone of the i-th server host (0-based): round-robin over
// zones z1..zZ.
func ZoneOf(i, zones int) string { return "z" + strconv.Itoa(i%zones+1) }

// plan is what a lab is made of, decided from its config before anything
// is made: pure, so that tests check it without root.
type plan struct {
	ID     string
	Dir    string
	Subnet netip.Prefix
	Bridge string
	Hosts  []Host
	Procs  []Proc
}

// validate checks the sizes and names of cfg (with defaults applied).
func (cfg *Config) validate() error {
	switch {
	case cfg.Hosts < 1 || cfg.Hosts > MaxHosts:
		return fmt.Errorf("lab: --hosts %d: want 1 to %d server hosts", cfg.Hosts, MaxHosts)
	case cfg.Zones < 1 || cfg.Zones > cfg.Hosts:
		return fmt.Errorf("lab: --zones %d: want 1 to %d (at most one zone per server host)", cfg.Zones, cfg.Hosts)
	case cfg.Clients < 0 || cfg.Clients > MaxClients:
		return fmt.Errorf("lab: --clients %d: want 0 to %d client hosts", cfg.Clients, MaxClients)
	case cfg.SmallDiskBytes < 0:
		return fmt.Errorf("lab: small disk size %d: must not be negative", cfg.SmallDiskBytes)
	}
	for _, h := range cfg.SmallDisk {
		i, err := strconv.Atoi(strings.TrimPrefix(h, "s"))
		if !strings.HasPrefix(h, "s") || err != nil || i < 1 || i > cfg.Hosts {
			return fmt.Errorf("lab: --small-disk %q: not a server host (s1..s%d)", h, cfg.Hosts)
		}
	}
	return nil
}

// newPlan lays out the lab of cfg in absDir: hosts with their zones,
// addresses and kernel names, and every process with its command line.
func newPlan(cfg Config, absDir string) (*plan, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	subnet, err := netip.ParsePrefix(cfg.Subnet)
	if err != nil || !subnet.Addr().Is4() {
		return nil, fmt.Errorf("lab: subnet %q: want an IPv4 prefix such as %s", cfg.Subnet, DefaultSubnet)
	}
	subnet = subnet.Masked()
	addrs, err := hostAddrs(subnet, cfg.Hosts+cfg.Clients)
	if err != nil {
		return nil, err
	}
	id := LabID(absDir)
	p := &plan{ID: id, Dir: absDir, Subnet: subnet, Bridge: bridgeName(id)}
	masters := MasterCount(cfg.Hosts)
	for i := 0; i < cfg.Hosts+cfg.Clients; i++ {
		h := Host{Addr: addrs[i].String()}
		if i < cfg.Hosts {
			h.Name, h.Zone = "s"+strconv.Itoa(i+1), ZoneOf(i, cfg.Zones)
			if i < masters {
				h.Roles = append(h.Roles, RoleMaster)
			}
			h.Roles = append(h.Roles, RoleMeta, RoleData)
			h.SmallDisk = slices.Contains(cfg.SmallDisk, h.Name)
		} else {
			h.Name, h.Client, h.Roles = "c"+strconv.Itoa(i-cfg.Hosts+1), true, []string{RoleMount}
		}
		h.Netns, h.Veth = netnsName(id, h.Name), vethName(id, h.Name)
		p.Hosts = append(p.Hosts, h)
	}
	for i, h := range p.Hosts {
		for _, role := range h.Roles {
			p.Procs = append(p.Procs, Proc{Host: h.Name, Role: role, Args: p.args(cfg, i, role),
				Log: filepath.Join(hostDir(absDir, h.Name), role+".log")})
		}
	}
	return p, nil
}

// hostAddrs are the first n host addresses of subnet, after the network
// address and before the broadcast address.
func hostAddrs(subnet netip.Prefix, n int) ([]netip.Addr, error) {
	size := 1 << (32 - subnet.Bits())
	if n > size-2 {
		return nil, fmt.Errorf("lab: subnet %s has %d host addresses, the lab needs %d", subnet, max(size-2, 0), n)
	}
	out := make([]netip.Addr, 0, n)
	a := subnet.Addr()
	for range n {
		a = a.Next()
		out = append(out, a)
	}
	return out, nil
}

func hostPort(addr string, port int) string { return addr + ":" + strconv.Itoa(port) }

// masterAddrs are the masters' addresses, comma-separated.
func (p *plan) masterAddrs() string {
	var out []string
	for _, h := range p.Hosts {
		if slices.Contains(h.Roles, RoleMaster) {
			out = append(out, hostPort(h.Addr, PortMaster))
		}
	}
	return strings.Join(out, ",")
}

// args is the command line (after the binary) of role on the i-th host.
// Meta nodes get node ids 1..N by host and data nodes N+1..2N, as `cairn
// up` numbers them; masters are Raft ids 1..3.
func (p *plan) args(cfg Config, i int, role string) []string {
	h := p.Hosts[i]
	dir := hostDir(p.Dir, h.Name)
	tls := []string{"--tls-dir", tlsDir(p.Dir, certName(h.Name, role))}
	common := append([]string{"--log-level", cfg.LogLevel}, tls...)
	var pprof []string
	if cfg.Pprof {
		pprof = []string{"--pprof"}
		common = append(common, pprof...)
	}
	switch role {
	case RoleMaster:
		var peers []string
		for j, m := range p.Hosts {
			if slices.Contains(m.Roles, RoleMaster) {
				peers = append(peers, strconv.Itoa(j+1)+"="+hostPort(m.Addr, PortMaster))
			}
		}
		args := []string{"master", "--id", strconv.Itoa(i + 1), "--peers", strings.Join(peers, ","),
			"--listen", hostPort(h.Addr, PortMaster), "--metrics-addr", hostPort(h.Addr, PortMasterMetrics),
			"--data-dir", filepath.Join(dir, RoleMaster),
			"--sweep-interval", LabSweepInterval.String(), "--sweep-grace", LabSweepGrace.String()}
		return append(append(args, common...), cfg.MasterFlags...)
	case RoleMeta:
		args := []string{"meta", "--listen", hostPort(h.Addr, PortMeta), "--metrics-addr", hostPort(h.Addr, PortMetaMetrics),
			"--node-id", strconv.Itoa(i + 1), "--zone", h.Zone, "--master", p.masterAddrs(),
			"--data-dir", filepath.Join(dir, RoleMeta)}
		return append(append(args, common...), cfg.MetaFlags...)
	case RoleData:
		dataDir := filepath.Join(dir, RoleData)
		if h.SmallDisk {
			dataDir = filepath.Join(smallDiskDir(p.Dir, h.Name), RoleData)
		}
		args := []string{"data", "--listen", hostPort(h.Addr, PortData), "--data-listen", hostPort(h.Addr, PortDataPath),
			"--metrics-addr", hostPort(h.Addr, PortDataMetrics), "--node-id", strconv.Itoa(cfg.Hosts + i + 1),
			"--zone", h.Zone, "--master", p.masterAddrs(), "--data-dir", dataDir}
		return append(append(args, common...), cfg.DataFlags...)
	default: // RoleMount
		args := []string{"mount", "--master", p.masterAddrs(), "--metrics", hostPort(h.Addr, PortMountMetrics)}
		args = append(append(args, tls...), pprof...)
		// The mount's disk cache stays in the lab's directory, which
		// Down removes, also when the lab's processes were killed.
		cache := "cache_dir=" + filepath.Join(hostDir(p.Dir, h.Name), "cache")
		for _, o := range append([]string{"allow_other", cache}, cfg.MountOptions...) {
			args = append(args, "-o", o)
		}
		return append(args, cfg.Volume, mountDir(p.Dir, h.Name))
	}
}

// step is one thing Up makes: the resource is recorded in the state file
// before its commands run, so that Down removes it even when Up dies
// between the two.
type step struct {
	Made Resource
	Cmds []command
}

// command is one program run by the lab: in the root namespace when Netns
// is "", else inside that namespace (with the root's mounts).
type command struct {
	Netns string
	Argv  []string
	Stdin string
	// Timeout bounds the command; 0: commandTimeout.
	Timeout time.Duration `json:",omitempty"`
	// StdoutOnly: what the command printed to stderr goes only into the
	// error, not into the output returned (a JSON answer on stdout).
	StdoutOnly bool `json:",omitempty"`
}

// timeout is c.Timeout, commandTimeout if unset.
func (c command) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return commandTimeout
}

func (c command) String() string {
	s := strings.Join(c.Argv, " ")
	if c.Netns != "" {
		s = "[" + c.Netns + "] " + s
	}
	return s
}

// networkSteps are the commands that make the lab's network: the bridge,
// then per host a namespace with loopback up and a veth pair whose outer
// end joins the bridge and whose inner end has the host's address. No
// address is given to the bridge or the outer ends (IPv6 link-local ones
// included, addrgenmode none), no route is added beyond the subnet's own,
// so nothing in a namespace can reach anything off the bridge, and the
// host routes nothing into it.
func (p *plan) networkSteps() []step {
	steps := []step{{Made: Resource{Kind: ResBridge, Name: p.Bridge}, Cmds: []command{
		{Argv: []string{"ip", "link", "add", p.Bridge, "type", "bridge"}},
		{Argv: []string{"ip", "link", "set", p.Bridge, "addrgenmode", "none"}},
		{Argv: []string{"ip", "link", "set", p.Bridge, "up"}},
	}}}
	bits := strconv.Itoa(p.Subnet.Bits())
	for _, h := range p.Hosts {
		steps = append(steps,
			step{Made: Resource{Kind: ResNetns, Name: h.Netns, Host: h.Name}, Cmds: []command{
				{Argv: []string{"ip", "netns", "add", h.Netns}},
				{Netns: h.Netns, Argv: []string{"ip", "link", "set", "lo", "up"}},
			}},
			step{Made: Resource{Kind: ResVeth, Name: h.Veth, Host: h.Name}, Cmds: []command{
				{Argv: []string{"ip", "link", "add", h.Veth, "type", "veth", "peer", "name", innerLink, "netns", h.Netns}},
				{Argv: []string{"ip", "link", "set", h.Veth, "addrgenmode", "none"}},
				{Argv: []string{"ip", "link", "set", h.Veth, "master", p.Bridge}},
				{Argv: []string{"ip", "link", "set", h.Veth, "up"}},
				{Netns: h.Netns, Argv: []string{"ip", "link", "set", innerLink, "addrgenmode", "none"}},
				{Netns: h.Netns, Argv: []string{"ip", "addr", "add", h.Addr + "/" + bits, "dev", innerLink}},
				{Netns: h.Netns, Argv: []string{"ip", "link", "set", innerLink, "up"}},
			}})
	}
	return steps
}

// parseRoutes reads the destinations of `ip -j route` output as prefixes
// (a bare address is a /32), without default routes.
func parseRoutes(b []byte) ([]netip.Prefix, error) {
	var routes []struct {
		Dst string `json:"dst"`
	}
	if err := json.Unmarshal(b, &routes); err != nil {
		return nil, fmt.Errorf("lab: read the host's routes: %w", err)
	}
	var out []netip.Prefix
	for _, r := range routes {
		if r.Dst == "default" || r.Dst == "" {
			continue
		}
		s := r.Dst
		if !strings.Contains(s, "/") {
			s += "/32"
		}
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() || p.Bits() == 0 {
			continue
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// clashes are the prefixes of routes that overlap subnet: a lab there
// would shadow (or be shadowed by) addresses the host uses.
func clashes(subnet netip.Prefix, routes []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range routes {
		if r.Overlaps(subnet) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}
