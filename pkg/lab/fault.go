package lab

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FaultKind is what a fault does.
type FaultKind string

// The faults a lab injects, each with its heal (docs/lab.md).
const (
	// KindKill kills HOST/ROLE with SIGKILL; heal starts it again with
	// the same command line.
	KindKill FaultKind = "kill"
	// KindPause stops HOST/ROLE with SIGSTOP; heal sends SIGCONT.
	KindPause FaultKind = "pause"
	// KindHostDown kills every process of HOST and takes its link down;
	// heal brings the link up and starts them again.
	KindHostDown FaultKind = "host-down"
	// KindZoneDown is KindHostDown for every server host of ZONE.
	KindZoneDown FaultKind = "zone-down"
	// KindIsolate cuts HOST off from every other host.
	KindIsolate FaultKind = "isolate"
	// KindSplit cuts the named hosts off from the rest: they still reach
	// each other, as the rest do.
	KindSplit FaultKind = "split"
	// KindOneway drops the packets from FROM to TO; those from TO to FROM
	// pass.
	KindOneway FaultKind = "oneway"
	// KindBridgeSplit cuts the server hosts into two halves that share one
	// host, which reaches both (Jepsen's bridge).
	KindBridgeSplit FaultKind = "bridge-split"
	// KindSlow limits HOST's link to RATE each way (tc tbf).
	KindSlow FaultKind = "slow"
	// KindDiskFull fills HOST's small disk (the tmpfs its data node's dir
	// is on); heal empties it.
	KindDiskFull FaultKind = "disk-full"
)

// FaultKinds lists every kind with its arguments, for help texts.
var FaultKinds = []struct {
	Kind FaultKind
	Args string
	What string
}{
	{KindKill, "HOST/ROLE", "kill -9 a process (ROLE: master, meta, data, mount); heal starts it again"},
	{KindPause, "HOST/ROLE", "SIGSTOP a process; heal sends SIGCONT"},
	{KindHostDown, "HOST", "kill -9 every process of a host and take its link down; heal brings both back"},
	{KindZoneDown, "ZONE", "host-down for every server host of a zone"},
	{KindIsolate, "HOST", "drop every packet between a host and all other hosts"},
	{KindSplit, "HOST,HOST,...", "the named hosts reach each other but no other host, and the rest reach each other"},
	{KindOneway, "FROM TO", "drop the packets from FROM to TO; the other way passes"},
	{KindBridgeSplit, "[HOST]", "two halves of the server hosts that both reach HOST (default: the middle one), and not each other"},
	{KindSlow, "HOST RATE", "limit a host's link to RATE each way (tc tbf), e.g. 10mbit"},
	{KindDiskFull, "HOST", "fill the small disk of a host started with --small-disk"},
}

// Spec is a fault as asked for: a kind and its arguments, as on the
// command line (`cairn lab fault KIND ARGS...`).
type Spec struct {
	Kind FaultKind
	Args []string
}

func (s Spec) String() string {
	return strings.TrimSpace(string(s.Kind) + " " + strings.Join(s.Args, " "))
}

// ParseSpec reads a fault from words: its kind, then its arguments.
func ParseSpec(words []string) (Spec, error) {
	if len(words) == 0 {
		return Spec{}, fmt.Errorf("lab fault: want a kind (%s)", kindNames())
	}
	s := Spec{Kind: FaultKind(words[0]), Args: words[1:]}
	lo, hi := 1, 1
	switch s.Kind {
	case KindKill, KindPause, KindHostDown, KindZoneDown, KindIsolate, KindSplit, KindDiskFull:
	case KindOneway, KindSlow:
		lo, hi = 2, 2
	case KindBridgeSplit:
		lo, hi = 0, 1
	default:
		return Spec{}, fmt.Errorf("lab fault: unknown kind %q (want one of %s)", words[0], kindNames())
	}
	if len(s.Args) < lo || len(s.Args) > hi {
		for _, k := range FaultKinds {
			if k.Kind == s.Kind {
				return Spec{}, fmt.Errorf("lab fault %s: want %s, got %d arguments", s.Kind, k.Args, len(s.Args))
			}
		}
	}
	return s, nil
}

func kindNames() string {
	var names []string
	for _, k := range FaultKinds {
		names = append(names, string(k.Kind))
	}
	return strings.Join(names, ", ")
}

// Cut is one direction of a partition: packets from From to To are
// dropped at To's input.
type Cut struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Fault is a fault in force as the state file records it: what was asked
// and what it does, so that heal undoes exactly that.
type Fault struct {
	ID    int       `json:"id"`
	Kind  FaultKind `json:"kind"`
	Args  []string  `json:"args,omitempty"`
	Since time.Time `json:"since"`
	// Procs are the processes (HOST/ROLE) killed or paused.
	Procs []string `json:"procs,omitempty"`
	// Links are the hosts whose link is down.
	Links []string `json:"links,omitempty"`
	// Cuts are the directions of the partition; each receiving host gets
	// one nftables table for the fault, named for the lab and the fault.
	Cuts []Cut `json:"cuts,omitempty"`
	// Slow is the host whose link is limited to Rate.
	Slow string `json:"slow,omitempty"`
	Rate string `json:"rate,omitempty"`
	// Disk is the host whose small disk is filled.
	Disk string `json:"disk,omitempty"`
	// Detail says in words what the fault does, for people.
	Detail string `json:"detail"`
}

// Spec is what was asked for.
func (f Fault) Spec() Spec { return Spec{Kind: f.Kind, Args: f.Args} }

// claims are what a fault holds exclusively: a process, a link, a host's
// qdisc, a small disk. Two faults may not hold the same thing, so that
// healing one never undoes part of another; partitions claim nothing, as
// their tables stack.
func (f Fault) claims() []string {
	var out []string
	for _, p := range f.Procs {
		out = append(out, "process "+p)
	}
	for _, h := range f.Links {
		out = append(out, "link of "+h)
	}
	if f.Slow != "" {
		out = append(out, "link rate of "+f.Slow)
	}
	if f.Disk != "" {
		out = append(out, "small disk of "+f.Disk)
	}
	return out
}

// rateRE is what tc accepts as a rate that the lab also understands.
var rateRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$`)

// RateBytes is a tc rate ("10mbit", "1.5mbps") in bytes per second.
func RateBytes(rate string) (float64, error) {
	m := rateRE.FindStringSubmatch(strings.ToLower(rate))
	if m == nil {
		return 0, fmt.Errorf("rate %q: want a number and a unit of bit, kbit, mbit, gbit (bits/s) or bps, kbps, mbps, gbps (bytes/s), e.g. 10mbit", rate)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	mult := map[string]float64{"bit": 1.0 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
		"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}[m[2]]
	if b := v * mult; b >= 1000 && b <= 1e11 {
		return b, nil
	}
	return 0, fmt.Errorf("rate %q: want between 8kbit and 800gbit", rate)
}

// planFault decides what spec does to the lab of s, as fault id: which
// processes, links, cuts, rates and disks. It checks the targets and
// refuses a fault that would hold something another fault in force holds.
func planFault(s *State, spec Spec, id int, now time.Time) (Fault, error) {
	f := Fault{ID: id, Kind: spec.Kind, Args: slices.Clone(spec.Args), Since: now.UTC()}
	host := func(name string) (*Host, error) {
		if h, ok := s.Host(name); ok {
			return h, nil
		}
		return nil, fmt.Errorf("lab fault %s: no host %q (hosts: %s)", spec.Kind, name, strings.Join(hostNames(s.Hosts, nil), ", "))
	}
	var err error
	switch spec.Kind {
	case KindKill, KindPause:
		if _, ok := s.Proc(spec.Args[0]); !ok {
			return Fault{}, fmt.Errorf("lab fault %s: no process %q (want HOST/ROLE, one of %s)", spec.Kind, spec.Args[0], strings.Join(procKeys(s), ", "))
		}
		f.Procs = []string{spec.Args[0]}
		f.Detail = map[FaultKind]string{KindKill: "SIGKILL to ", KindPause: "SIGSTOP to "}[spec.Kind] + spec.Args[0]
	case KindHostDown:
		h, err := host(spec.Args[0])
		if err != nil {
			return Fault{}, err
		}
		f.Procs, f.Links = procsOf(s, h.Name), []string{h.Name}
		f.Detail = "SIGKILL to " + strings.Join(f.Procs, " ") + "; link of " + h.Name + " down"
	case KindZoneDown:
		for _, h := range s.Hosts {
			if !h.Client && h.Zone == spec.Args[0] {
				f.Procs, f.Links = append(f.Procs, procsOf(s, h.Name)...), append(f.Links, h.Name)
			}
		}
		if len(f.Links) == 0 {
			return Fault{}, fmt.Errorf("lab fault zone-down: no server host in zone %q (zones z1..z%d)", spec.Args[0], s.Zones)
		}
		f.Detail = "SIGKILL to every process of " + strings.Join(f.Links, " ") + "; their links down"
	case KindIsolate:
		h, err := host(spec.Args[0])
		if err != nil {
			return Fault{}, err
		}
		others := hostNames(s.Hosts, func(o Host) bool { return o.Name != h.Name })
		f.Cuts = cutBetween([]string{h.Name}, others)
		f.Detail = h.Name + " | " + strings.Join(others, " ")
	case KindSplit:
		var side []string
		for _, name := range strings.Split(spec.Args[0], ",") {
			if _, err := host(name); err != nil {
				return Fault{}, err
			}
			if !slices.Contains(side, name) {
				side = append(side, name)
			}
		}
		rest := hostNames(s.Hosts, func(o Host) bool { return !slices.Contains(side, o.Name) })
		if len(rest) == 0 {
			return Fault{}, fmt.Errorf("lab fault split: %s names every host; name one side of the split", spec.Args[0])
		}
		f.Cuts = cutBetween(side, rest)
		f.Detail = strings.Join(side, " ") + " | " + strings.Join(rest, " ")
	case KindOneway:
		if _, err := host(spec.Args[0]); err != nil {
			return Fault{}, err
		}
		if _, err := host(spec.Args[1]); err != nil {
			return Fault{}, err
		}
		if spec.Args[0] == spec.Args[1] {
			return Fault{}, fmt.Errorf("lab fault oneway: FROM and TO are both %s", spec.Args[0])
		}
		f.Cuts = []Cut{{From: spec.Args[0], To: spec.Args[1]}}
		f.Detail = spec.Args[0] + " -> " + spec.Args[1] + " dropped, " + spec.Args[1] + " -> " + spec.Args[0] + " passes"
	case KindBridgeSplit:
		if f.Cuts, f.Detail, err = bridgeCuts(s, spec.Args); err != nil {
			return Fault{}, err
		}
	case KindSlow:
		h, err := host(spec.Args[0])
		if err != nil {
			return Fault{}, err
		}
		if _, err := RateBytes(spec.Args[1]); err != nil {
			return Fault{}, fmt.Errorf("lab fault slow: %w", err)
		}
		f.Slow, f.Rate = h.Name, strings.ToLower(spec.Args[1])
		f.Detail = "link of " + h.Name + " at " + f.Rate + " each way"
	case KindDiskFull:
		h, err := host(spec.Args[0])
		if err != nil {
			return Fault{}, err
		}
		if !h.SmallDisk {
			return Fault{}, fmt.Errorf("lab fault disk-full: host %s has no small disk; start the lab with --small-disk %s", h.Name, h.Name)
		}
		f.Disk = h.Name
		f.Detail = "small disk of " + h.Name + " filled"
	default:
		return Fault{}, fmt.Errorf("lab fault: unknown kind %q", spec.Kind)
	}
	for _, old := range s.Faults {
		for _, c := range f.claims() {
			if slices.Contains(old.claims(), c) {
				return Fault{}, fmt.Errorf("lab fault %s: the %s is already taken by fault %d (%s); heal it first", spec, c, old.ID, old.Spec())
			}
		}
	}
	return f, nil
}

// bridgeCuts splits the server hosts but the bridge (args[0], or the
// middle one) into a first and a second half in their order and cuts the
// halves apart; the bridge reaches both. Client hosts are in neither half
// and reach everyone. It also returns the split in words.
func bridgeCuts(s *State, args []string) ([]Cut, string, error) {
	servers := hostNames(s.Hosts, func(h Host) bool { return !h.Client })
	if len(servers) < 3 {
		return nil, "", fmt.Errorf("lab fault bridge-split: needs 3 server hosts, the lab has %d", len(servers))
	}
	bridge := servers[len(servers)/2]
	if len(args) == 1 {
		bridge = args[0]
		if !slices.Contains(servers, bridge) {
			return nil, "", fmt.Errorf("lab fault bridge-split: %q is not a server host (%s)", bridge, strings.Join(servers, ", "))
		}
	}
	rest := slices.DeleteFunc(slices.Clone(servers), func(n string) bool { return n == bridge })
	a, b := rest[:len(rest)/2], rest[len(rest)/2:]
	return cutBetween(a, b), strings.Join(a, " ") + " | " + strings.Join(b, " ") + ", both reach " + bridge, nil
}

// cutBetween cuts a from b both ways.
func cutBetween(a, b []string) []Cut {
	var out []Cut
	for _, x := range a {
		for _, y := range b {
			out = append(out, Cut{From: x, To: y}, Cut{From: y, To: x})
		}
	}
	return out
}

func hostNames(hosts []Host, keep func(Host) bool) []string {
	var out []string
	for _, h := range hosts {
		if keep == nil || keep(h) {
			out = append(out, h.Name)
		}
	}
	return out
}

func procsOf(s *State, host string) []string {
	var out []string
	for _, p := range s.Procs {
		if p.Host == host {
			out = append(out, p.Key())
		}
	}
	return out
}

func procKeys(s *State) []string {
	var out []string
	for _, p := range s.Procs {
		out = append(out, p.Key())
	}
	return out
}

// action is one step of injecting or healing a fault: a program to run,
// a signal to a process, a process to start again, or a small disk to
// fill or empty. Missing says that the step undoes something which may
// already be gone, so that "no such" errors count as done.
type action struct {
	Cmd     *command
	Signal  syscall.Signal
	Proc    string // HOST/ROLE for Signal and Restart
	Restart bool
	Fill    string // ballast path to fill its file system with
	Empty   string // ballast path to remove
	Missing bool
	Note    string // what a command does, for people
}

func (a action) String() string {
	switch {
	case a.Cmd != nil && a.Note != "":
		return a.Cmd.String() + "  # " + a.Note
	case a.Cmd != nil:
		return a.Cmd.String()
	case a.Restart:
		return "start " + a.Proc
	case a.Signal != 0:
		return fmt.Sprintf("signal %s %s", a.Signal, a.Proc)
	case a.Fill != "":
		return "fill " + a.Fill
	default:
		return "remove " + a.Empty
	}
}

// injectActions are the steps that put f in force on the lab of s.
func injectActions(s *State, f Fault) []action {
	var out []action
	sig := syscall.SIGKILL
	if f.Kind == KindPause {
		sig = syscall.SIGSTOP
	}
	for _, p := range f.Procs {
		out = append(out, action{Signal: sig, Proc: p})
	}
	for _, h := range f.Links {
		out = append(out, action{Cmd: &command{Netns: netnsOf(s, h), Argv: []string{"ip", "link", "set", innerLink, "down"}}})
	}
	for _, to := range receivers(f.Cuts) {
		out = append(out, action{Cmd: &command{Netns: netnsOf(s, to), Argv: []string{"nft", "-f", "-"}, Stdin: nftScript(s, f, to)},
			Note: "table " + faultTable(s.ID, f.ID) + ": " + to + " drops packets from " + strings.Join(senders(f.Cuts, to), " ")})
	}
	if f.Slow != "" {
		h, _ := s.Host(f.Slow)
		tbf := tbfArgs(f.Rate)
		out = append(out,
			action{Cmd: &command{Netns: h.Netns, Argv: append([]string{"tc", "qdisc", "replace", "dev", innerLink, "root"}, tbf...)}},
			action{Cmd: &command{Argv: append([]string{"tc", "qdisc", "replace", "dev", h.Veth, "root"}, tbf...)}})
	}
	if f.Disk != "" {
		out = append(out, action{Fill: ballastPath(s.Dir, f.Disk)})
	}
	return out
}

// healActions are the steps that undo f, in the reverse order of
// injectActions; each is harmless when what it undoes is already gone.
func healActions(s *State, f Fault) []action {
	var out []action
	if f.Disk != "" {
		out = append(out, action{Empty: ballastPath(s.Dir, f.Disk), Missing: true})
	}
	if f.Slow != "" {
		h, _ := s.Host(f.Slow)
		out = append(out,
			action{Cmd: &command{Argv: []string{"tc", "qdisc", "del", "dev", h.Veth, "root"}}, Missing: true},
			action{Cmd: &command{Netns: h.Netns, Argv: []string{"tc", "qdisc", "del", "dev", innerLink, "root"}}, Missing: true})
	}
	for _, to := range receivers(f.Cuts) {
		out = append(out, action{Cmd: &command{Netns: netnsOf(s, to), Argv: []string{"nft", "delete", "table", "inet", faultTable(s.ID, f.ID)}}, Missing: true})
	}
	for _, h := range f.Links {
		out = append(out, action{Cmd: &command{Netns: netnsOf(s, h), Argv: []string{"ip", "link", "set", innerLink, "up"}}})
	}
	if f.Kind == KindPause {
		for _, p := range f.Procs {
			out = append(out, action{Signal: syscall.SIGCONT, Proc: p, Missing: true})
		}
		return out
	}
	for _, p := range f.Procs {
		out = append(out, action{Restart: true, Proc: p})
	}
	return out
}

func netnsOf(s *State, host string) string {
	h, _ := s.Host(host)
	return h.Netns
}

// senders are the hosts whose packets to are dropped.
func senders(cuts []Cut, to string) []string {
	var out []string
	for _, c := range cuts {
		if c.To == to && !slices.Contains(out, c.From) {
			out = append(out, c.From)
		}
	}
	return out
}

// receivers are the hosts that drop packets for cuts, in order of first
// appearance.
func receivers(cuts []Cut) []string {
	var out []string
	for _, c := range cuts {
		if !slices.Contains(out, c.To) {
			out = append(out, c.To)
		}
	}
	return out
}

// nftScript is the nftables table that host to gets for f: its input drops
// every IPv4 packet from the hosts f cuts from it. A table per fault and
// host, named for the lab and the fault, so that heal deletes exactly it;
// a drop in any table is final, so tables of several faults stack.
// Dropping at the receiver's input only (never at a sender's output, which
// would fail its sends at once with EPERM) makes a cut look as a network
// partition does to both ends: packets vanish and senders time out.
func nftScript(s *State, f Fault, to string) string {
	var from []string
	for _, name := range senders(f.Cuts, to) {
		h, _ := s.Host(name)
		from = append(from, h.Addr)
	}
	return fmt.Sprintf("table inet %s {\n\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n\t\tip saddr { %s } drop\n\t}\n}\n",
		faultTable(s.ID, f.ID), strings.Join(from, ", "))
}

// tbfArgs are tc's arguments for a token bucket of rate: a burst of 20 ms
// at the rate (at least 16 KiB, so that it exceeds the timer's granularity
// and a full-size frame), and at most 100 ms of queue.
func tbfArgs(rate string) []string {
	b, _ := RateBytes(rate)
	burst := max(int64(b/50), 16<<10)
	return []string{"tbf", "rate", rate, "burst", strconv.FormatInt(burst, 10), "latency", "100ms"}
}
