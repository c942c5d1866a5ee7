package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// FaultKind names a kind of fault.
type FaultKind string

// The faults a run draws from.
const (
	// Crash kills one server (kill -9: its store keeps what it synced) and
	// restarts it at the heal.
	Crash FaultKind = "crash"
	// Isolate cuts one server host off from every other host, both ways.
	Isolate FaultKind = "isolate"
	// OneWay cuts the link from one server host to another, one way.
	OneWay FaultKind = "one-way"
	// Split parts the hosts (servers and clients) into a majority and a
	// minority that do not reach each other.
	Split FaultKind = "split"
	// Bridge parts the hosts into two sides that both reach one server
	// host, the bridge, and not each other.
	Bridge FaultKind = "bridge"
	// Slow delays every byte to and from one server host.
	Slow FaultKind = "slow"
	// DiskFull fills one data node's disk: what would take more space
	// fails with ENOSPC.
	DiskFull FaultKind = "disk-full"
)

var faultKinds = []FaultKind{Crash, Isolate, OneWay, Split, Bridge, Slow, DiskFull}

// Fault is one planned fault: what, on which hosts, from when and for how
// long (times from the workload's start).
type Fault struct {
	Kind  FaultKind
	At    time.Duration
	For   time.Duration
	Hosts []string      // the server or the hosts it concerns
	Sides [2][]string   // Split and Bridge: the sides (the bridge in neither)
	Delay time.Duration // Slow
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s at %v for %v", f.Kind, f.At, f.For)
	switch f.Kind {
	case Split, Bridge:
		s += fmt.Sprintf(": %s | %s", strings.Join(f.Sides[0], ","), strings.Join(f.Sides[1], ","))
		if f.Kind == Bridge {
			s += " bridged by " + f.Hosts[0]
		}
	case Slow:
		s += fmt.Sprintf(": %s, %v", f.Hosts[0], f.Delay)
	default:
		s += ": " + strings.Join(f.Hosts, " -> ")
	}
	return s
}

// nemesis plans faults from the run's seed and injects and heals them.
type nemesis struct {
	c       *Cluster
	clients []string // client host addresses
	rng     *rand.Rand
	seed    uint64

	mu      sync.Mutex
	cuts    map[[2]string]int // directed link -> faults cutting it
	crashed map[*Server]int   // server -> crash faults in force
	full    map[*Server]int   // data node -> disk-full faults in force
}

func newNemesis(c *Cluster, clients []string, seed uint64) *nemesis {
	return &nemesis{c: c, clients: clients, rng: rand.New(rand.NewPCG(seed, 0x5eed)), seed: seed, cuts: map[[2]string]int{}, crashed: map[*Server]int{}, full: map[*Server]int{}}
}

func (n *nemesis) serverIPs() []string {
	var out []string
	for _, s := range n.c.Servers {
		out = append(out, s.IP)
	}
	return out
}

func (n *nemesis) allIPs() []string { return append(n.serverIPs(), n.clients...) }

// plan draws the faults of a run of length d, at most max in force at
// once. The plan is a function of the seed alone: the same seed injects
// the same faults at the same simulated times.
func (n *nemesis) plan(d time.Duration, max int, kinds []FaultKind) []Fault {
	if len(kinds) == 0 {
		kinds = faultKinds
	}
	var out []Fault
	var ends []time.Duration // ends of the planned faults
	for at := time.Duration(n.rng.Int64N(int64(5 * time.Second))); at < d; at += time.Second + time.Duration(n.rng.Int64N(int64(8*time.Second))) {
		inForce := 0
		for _, e := range ends {
			if e > at {
				inForce++
			}
		}
		if inForce >= max {
			continue
		}
		f := n.draw(kinds)
		f.At = at
		f.For = time.Second + time.Duration(n.rng.Int64N(int64(20*time.Second)))
		if at+f.For > d {
			f.For = d - at
		}
		out = append(out, f)
		ends = append(ends, at+f.For)
	}
	return out
}

func (n *nemesis) draw(kinds []FaultKind) Fault {
	servers := n.c.Servers
	pick := func() *Server { return servers[n.rng.IntN(len(servers))] }
	f := Fault{Kind: kinds[n.rng.IntN(len(kinds))]}
	switch f.Kind {
	case Crash, Isolate:
		f.Hosts = []string{pick().IP}
	case DiskFull:
		datas := n.c.ServersOf(Data)
		f.Hosts = []string{datas[n.rng.IntN(len(datas))].IP}
	case OneWay:
		a := pick()
		b := pick()
		for b == a {
			b = pick()
		}
		f.Hosts = []string{a.IP, b.IP}
	case Slow:
		f.Hosts = []string{pick().IP}
		f.Delay = time.Duration(1+n.rng.IntN(500)) * time.Millisecond
	case Split, Bridge:
		ips := n.allIPs()
		n.rng.Shuffle(len(ips), func(i, j int) { ips[i], ips[j] = ips[j], ips[i] })
		if f.Kind == Bridge {
			// The bridge is a server: a client in the middle bridges nothing.
			for i, ip := range ips {
				if !slices.Contains(n.clients, ip) {
					f.Hosts = []string{ip}
					ips = slices.Delete(ips, i, i+1)
					break
				}
			}
		}
		k := 1 + n.rng.IntN(len(ips)/2)
		f.Sides = [2][]string{slices.Sorted(slices.Values(ips[:k])), slices.Sorted(slices.Values(ips[k:]))}
	}
	return f
}

// run injects the planned faults at their times and heals each after its
// span; it returns when the last is healed or ctx ends.
func (n *nemesis) run(ctx context.Context, start time.Time, plan []Fault) {
	var wg sync.WaitGroup
	for _, f := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepUntil(ctx, start.Add(f.At)) {
				return
			}
			heal := n.inject(f)
			sleepUntil(ctx, start.Add(f.At+f.For))
			heal(ctx)
		}()
	}
	wg.Wait()
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-time.After(time.Until(t)):
		return true
	case <-ctx.Done():
		return false
	}
}

// inject puts f in force and returns its heal.
func (n *nemesis) inject(f Fault) (heal func(context.Context)) {
	switch f.Kind {
	case Crash:
		s := n.server(f.Hosts[0])
		n.mu.Lock()
		n.crashed[s]++
		n.mu.Unlock()
		s.Crash(n.crashRNG(f))
		return func(ctx context.Context) {
			n.mu.Lock()
			n.crashed[s]--
			last := n.crashed[s] == 0
			n.mu.Unlock()
			if last {
				n.restart(ctx, s)
			}
		}
	case DiskFull:
		// Overlapping faults on one disk: it has room again when the
		// last of them heals.
		s := n.server(f.Hosts[0])
		n.mu.Lock()
		n.full[s]++
		n.mu.Unlock()
		s.full.Store(true)
		return func(context.Context) {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.full[s]--; n.full[s] == 0 {
				s.full.Store(false)
			}
		}
	case Slow:
		ip := f.Hosts[0]
		for _, o := range n.allIPs() {
			if o != ip {
				n.c.Net.SetDelay(ip, o, f.Delay)
				n.c.Net.SetDelay(o, ip, f.Delay)
			}
		}
		return func(context.Context) {
			for _, o := range n.allIPs() {
				n.c.Net.SetDelay(ip, o, 0)
				n.c.Net.SetDelay(o, ip, 0)
			}
		}
	}
	var links [][2]string
	switch f.Kind {
	case Isolate:
		for _, o := range n.allIPs() {
			if o != f.Hosts[0] {
				links = append(links, [2]string{f.Hosts[0], o}, [2]string{o, f.Hosts[0]})
			}
		}
	case OneWay:
		links = [][2]string{{f.Hosts[0], f.Hosts[1]}}
	case Split, Bridge:
		for _, a := range f.Sides[0] {
			for _, b := range f.Sides[1] {
				links = append(links, [2]string{a, b}, [2]string{b, a})
			}
		}
	}
	n.cut(links)
	return func(context.Context) { n.heal(links) }
}

func (n *nemesis) cut(links [][2]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range links {
		if n.cuts[l]++; n.cuts[l] == 1 {
			n.c.Net.Cut(l[0], l[1])
		}
	}
}

// heal undoes a fault's cuts; a link another fault still cuts stays cut.
func (n *nemesis) heal(links [][2]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range links {
		if n.cuts[l]--; n.cuts[l] == 0 {
			delete(n.cuts, l)
			n.c.Net.Heal(l[0], l[1])
		}
	}
}

// crashRNG is the randomness of one crash's lost and torn writes, a
// function of the seed and the fault alone (not of when the goroutines
// ran).
func (n *nemesis) crashRNG(f Fault) *rand.Rand {
	return rand.New(rand.NewPCG(n.seed, uint64(f.At)))
}

func (n *nemesis) server(ip string) *Server {
	for _, s := range n.c.Servers {
		if s.IP == ip {
			return s
		}
	}
	panic("no server at " + ip)
}

// restart starts a crashed server again, retrying while it fails (a
// master it must register with may be cut off).
func (n *nemesis) restart(ctx context.Context, s *Server) {
	for ctx.Err() == nil {
		if err := s.Restart(ctx); err == nil || s.Running() {
			return
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// healAll ends every fault: links heal, delays go, crashed servers start.
func (n *nemesis) healAll(ctx context.Context) error {
	n.c.Net.HealAll()
	for _, s := range n.c.ServersOf(Data) {
		s.full.Store(false)
	}
	n.mu.Lock()
	clear(n.cuts)
	var down []*Server
	for _, s := range n.c.Servers {
		if !s.Running() {
			down = append(down, s)
		}
	}
	clear(n.crashed)
	clear(n.full)
	n.mu.Unlock()
	for _, s := range down {
		n.restart(ctx, s)
		if !s.Running() {
			return fmt.Errorf("restart %s: %w", s.Name, ctx.Err())
		}
	}
	return nil
}
