package lab

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// testConfig is a lab of 4 server hosts in 2 zones and 1 client host.
func testConfig() Config {
	return Config{Hosts: 4, Zones: 2, Clients: 1, Subnet: DefaultSubnet, Binary: "/bin/cairn", Volume: "default",
		LogLevel: "info", SmallDisk: []string{"s4"}, SmallDiskBytes: 64 << 20}
}

// testState is the state Up would record for testConfig in /lab.
func testState(t *testing.T) *State {
	t.Helper()
	return stateOf(t, testConfig())
}

// stateOf is the state Up would record for cfg in /lab.
func stateOf(t *testing.T, cfg Config) *State {
	t.Helper()
	p, err := newPlan(cfg, "/lab")
	if err != nil {
		t.Fatal(err)
	}
	return &State{Version: stateVersion, ID: p.ID, Dir: p.Dir, Phase: PhaseUp, Binary: "/bin/cairn", Volume: "default",
		Subnet: p.Subnet.String(), Zones: 2, Bridge: p.Bridge, Hosts: p.Hosts, Procs: p.Procs, NextFault: 1}
}

func TestPlanHosts(t *testing.T) {
	p, err := newPlan(testConfig(), "/lab")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, zone, addr string
		roles            []string
		small            bool
	}{
		{"s1", "z1", "10.213.0.1", []string{"master", "meta", "data"}, false},
		{"s2", "z2", "10.213.0.2", []string{"master", "meta", "data"}, false},
		{"s3", "z1", "10.213.0.3", []string{"master", "meta", "data"}, false},
		{"s4", "z2", "10.213.0.4", []string{"meta", "data"}, true},
		{"c1", "", "10.213.0.5", []string{"mount"}, false},
	}
	if len(p.Hosts) != len(want) {
		t.Fatalf("%d hosts, want %d", len(p.Hosts), len(want))
	}
	for i, w := range want {
		h := p.Hosts[i]
		if h.Name != w.name || h.Zone != w.zone || h.Addr != w.addr || !slices.Equal(h.Roles, w.roles) || h.SmallDisk != w.small || h.Client != (w.name[0] == 'c') {
			t.Errorf("host %d = %+v, want %+v", i, h, w)
		}
		if h.Netns != "cairnlab-"+p.ID+"-"+w.name || len(h.Veth) > 15 || !strings.HasPrefix(h.Veth, "cl"+p.ID) {
			t.Errorf("host %s: netns %q veth %q", h.Name, h.Netns, h.Veth)
		}
	}
	if len(p.Procs) != 3*3+2+1 {
		t.Errorf("%d processes, want 12", len(p.Procs))
	}
	if p.ID != LabID("/lab") || len(p.ID) != 6 || LabID("/lab2") == p.ID {
		t.Errorf("lab id %q", p.ID)
	}
}

// TestPlanArgs checks the command lines that matter to a cluster: Raft
// peers, node ids, zones, addresses, certificates and the small disk.
func TestPlanArgs(t *testing.T) {
	p, err := newPlan(testConfig(), "/lab")
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	for _, pr := range p.Procs {
		args[pr.Key()] = strings.Join(pr.Args, " ")
		if want := "/lab/hosts/" + pr.Host + "/" + pr.Role + ".log"; pr.Log != want {
			t.Errorf("%s log %s, want %s", pr.Key(), pr.Log, want)
		}
	}
	masters := "10.213.0.1:17000,10.213.0.2:17000,10.213.0.3:17000"
	for key, want := range map[string][]string{
		"s2/master": {"master --id 2 --peers 1=10.213.0.1:17000,2=10.213.0.2:17000,3=10.213.0.3:17000", "--listen 10.213.0.2:17000",
			"--metrics-addr 10.213.0.2:17001", "--data-dir /lab/hosts/s2/master", "--tls-dir /lab/tls/s2-master"},
		"s3/meta":  {"meta --listen 10.213.0.3:17100", "--node-id 3 --zone z1 --master " + masters, "--data-dir /lab/hosts/s3/meta", "--tls-dir /lab/tls/s3-meta"},
		"s4/data":  {"data --listen 10.213.0.4:17200 --data-listen 10.213.0.4:17202", "--node-id 8 --zone z2", "--data-dir /lab/hosts/s4/disk/data"},
		"s1/data":  {"--node-id 5 --zone z1", "--data-dir /lab/hosts/s1/data"},
		"c1/mount": {"mount --master " + masters + " --metrics 10.213.0.5:17301 --tls-dir /lab/tls/c1-mount -o allow_other -o cache_dir=/lab/hosts/c1/cache default /lab/hosts/c1/mnt"},
	} {
		for _, w := range want {
			if !strings.Contains(args[key], w) {
				t.Errorf("%s: %q lacks %q", key, args[key], w)
			}
		}
	}
}

func TestZonesAndMasters(t *testing.T) {
	for _, tc := range []struct {
		i, zones int
		want     string
	}{{0, 3, "z1"}, {1, 3, "z2"}, {2, 3, "z3"}, {3, 3, "z1"}, {5, 2, "z2"}, {7, 1, "z1"}} {
		if got := ZoneOf(tc.i, tc.zones); got != tc.want {
			t.Errorf("ZoneOf(%d, %d) = %s, want %s", tc.i, tc.zones, got, tc.want)
		}
	}
	for n, want := range map[int][2]int{1: {1, 1}, 2: {1, 2}, 3: {3, 3}, 6: {3, 3}} {
		if MasterCount(n) != want[0] || Replicas(n) != want[1] {
			t.Errorf("%d hosts: %d masters, %d replicas; want %v", n, MasterCount(n), Replicas(n), want)
		}
	}
}

func TestPlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no hosts", func(c *Config) { c.Hosts = 0 }, "--hosts 0"},
		{"too many hosts", func(c *Config) { c.Hosts = MaxHosts + 1 }, "--hosts"},
		{"more zones than hosts", func(c *Config) { c.Zones = 5 }, "--zones 5"},
		{"no zone", func(c *Config) { c.Zones = 0 }, "--zones 0"},
		{"negative clients", func(c *Config) { c.Clients = -1 }, "--clients -1"},
		{"small disk on a client", func(c *Config) { c.SmallDisk = []string{"c1"} }, `--small-disk "c1"`},
		{"small disk on no host", func(c *Config) { c.SmallDisk = []string{"s9"} }, `--small-disk "s9"`},
		{"IPv6 subnet", func(c *Config) { c.Subnet = "fd00::/64" }, "IPv4 prefix"},
		{"bad subnet", func(c *Config) { c.Subnet = "10.213.0.0" }, "IPv4 prefix"},
		{"subnet too small", func(c *Config) { c.Subnet, c.Clients = "10.213.0.0/29", 3 }, "has 6 host addresses, the lab needs 7"},
	} {
		cfg := testConfig()
		tc.edit(&cfg)
		_, err := newPlan(cfg, "/lab")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestHostAddrs(t *testing.T) {
	for _, tc := range []struct {
		subnet string
		n      int
		first  string
		last   string
		ok     bool
	}{
		{"10.213.0.0/24", 254, "10.213.0.1", "10.213.0.254", true},
		{"10.213.0.0/24", 255, "", "", false},
		{"10.213.4.0/30", 2, "10.213.4.1", "10.213.4.2", true},
		{"10.213.4.0/31", 1, "", "", false},
	} {
		got, err := hostAddrs(netip.MustParsePrefix(tc.subnet), tc.n)
		if (err == nil) != tc.ok {
			t.Errorf("%s, %d: err %v", tc.subnet, tc.n, err)
			continue
		}
		if tc.ok && (got[0].String() != tc.first || got[len(got)-1].String() != tc.last) {
			t.Errorf("%s, %d: %v..%v", tc.subnet, tc.n, got[0], got[len(got)-1])
		}
	}
}

// TestNetworkStepsStayOnTheBridge checks what the lab's network is made
// of: addresses only inside namespaces, none on the bridge or the outer
// ends, no route, no NAT, and every resource recorded before its commands.
func TestNetworkStepsStayOnTheBridge(t *testing.T) {
	p, err := newPlan(testConfig(), "/lab")
	if err != nil {
		t.Fatal(err)
	}
	steps := p.networkSteps()
	if len(steps) != 1+2*len(p.Hosts) || steps[0].Made != (Resource{Kind: ResBridge, Name: p.Bridge}) {
		t.Fatalf("%d steps, first %+v", len(steps), steps[0].Made)
	}
	for _, st := range steps {
		for _, c := range st.Cmds {
			line := strings.Join(c.Argv, " ")
			for _, banned := range []string{"route", "iptables", "nat", "masquerade", "forward"} {
				if strings.Contains(line, banned) {
					t.Errorf("%s: %q", banned, c)
				}
			}
			if strings.Contains(line, " addr add ") && c.Netns == "" {
				t.Errorf("an address in the root namespace: %s", c)
			}
			if c.Netns != "" && c.Netns != st.Made.Name && st.Made.Kind == ResNetns {
				t.Errorf("step %s runs in another namespace: %s", st.Made.Name, c)
			}
		}
	}
	// Every host: its namespace, then its veth with the address inside.
	for i, h := range p.Hosts {
		ns, veth := steps[1+2*i], steps[2+2*i]
		if ns.Made != (Resource{Kind: ResNetns, Name: h.Netns, Host: h.Name}) || veth.Made != (Resource{Kind: ResVeth, Name: h.Veth, Host: h.Name}) {
			t.Errorf("host %s: steps %+v, %+v", h.Name, ns.Made, veth.Made)
		}
		want := command{Netns: h.Netns, Argv: []string{"ip", "addr", "add", h.Addr + "/24", "dev", "eth0"}}
		if !slices.ContainsFunc(veth.Cmds, func(c command) bool { return c.String() == want.String() }) {
			t.Errorf("host %s: no %s", h.Name, want)
		}
	}
}

func TestSubnetClashes(t *testing.T) {
	routes, err := parseRoutes([]byte(`[{"dst":"default","gateway":"192.0.2.1","dev":"eth0"},
		{"dst":"192.0.2.0/24","dev":"eth0"},{"type":"local","dst":"127.0.0.1","table":"local"},
		{"dst":"10.213.0.128/25","dev":"wg0"},{"dst":"10.0.0.0/8","dev":"vpn0"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 4 {
		t.Fatalf("routes %v: want 4, without the default", routes)
	}
	for _, tc := range []struct {
		subnet string
		want   int
	}{{"10.213.0.0/24", 2}, {"172.31.213.0/24", 0}, {"192.0.2.128/25", 1}, {"127.0.0.0/24", 1}} {
		if got := clashes(netip.MustParsePrefix(tc.subnet), routes); len(got) != tc.want {
			t.Errorf("%s clashes with %v, want %d", tc.subnet, got, tc.want)
		}
	}
	if _, err := parseRoutes([]byte("not json")); err == nil {
		t.Error("bad route list accepted")
	}
}
