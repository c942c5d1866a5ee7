package lab

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPlanFault is a table of faults on the test lab (s1-s3 masters, z1:
// s1 s3, z2: s2 s4, client c1; s4 has a small disk): what each one does
// and how it is healed, as the lines `cairn lab fault --dry-run` prints,
// with the lab's id written ID.
func TestPlanFault(t *testing.T) {
	for _, tc := range []struct {
		words  string
		inject []string
		heal   []string
	}{
		{"kill s2/meta", []string{"signal killed s2/meta"}, []string{"start s2/meta"}},
		{"pause s1/master", []string{"signal stopped (signal) s1/master"}, []string{"signal continued s1/master"}},
		{"kill c1/mount", []string{"signal killed c1/mount"}, []string{"start c1/mount"}},
		{"host-down s4", []string{"signal killed s4/meta", "signal killed s4/data", "[cairnlab-ID-s4] ip link set eth0 down"},
			[]string{"[cairnlab-ID-s4] ip link set eth0 up", "start s4/meta", "start s4/data"}},
		{"zone-down z1",
			[]string{"signal killed s1/master", "signal killed s1/meta", "signal killed s1/data", "signal killed s3/master", "signal killed s3/meta", "signal killed s3/data",
				"[cairnlab-ID-s1] ip link set eth0 down", "[cairnlab-ID-s3] ip link set eth0 down"},
			[]string{"[cairnlab-ID-s1] ip link set eth0 up", "[cairnlab-ID-s3] ip link set eth0 up",
				"start s1/master", "start s1/meta", "start s1/data", "start s3/master", "start s3/meta", "start s3/data"}},
		{"isolate s2",
			[]string{"[cairnlab-ID-s1] nft -f -  # table cairnlab_ID_f1: s1 drops packets from s2",
				"[cairnlab-ID-s2] nft -f -  # table cairnlab_ID_f1: s2 drops packets from s1 s3 s4 c1",
				"[cairnlab-ID-s3] nft -f -  # table cairnlab_ID_f1: s3 drops packets from s2",
				"[cairnlab-ID-s4] nft -f -  # table cairnlab_ID_f1: s4 drops packets from s2",
				"[cairnlab-ID-c1] nft -f -  # table cairnlab_ID_f1: c1 drops packets from s2"},
			[]string{"[cairnlab-ID-s1] nft delete table inet cairnlab_ID_f1", "[cairnlab-ID-s2] nft delete table inet cairnlab_ID_f1",
				"[cairnlab-ID-s3] nft delete table inet cairnlab_ID_f1", "[cairnlab-ID-s4] nft delete table inet cairnlab_ID_f1",
				"[cairnlab-ID-c1] nft delete table inet cairnlab_ID_f1"}},
		{"oneway s1 s3", []string{"[cairnlab-ID-s3] nft -f -  # table cairnlab_ID_f1: s3 drops packets from s1"},
			[]string{"[cairnlab-ID-s3] nft delete table inet cairnlab_ID_f1"}},
		{"slow c1 10mbit",
			[]string{"[cairnlab-ID-c1] tc qdisc replace dev eth0 root tbf rate 10mbit burst 25000 latency 100ms",
				"tc qdisc replace dev clID-c1 root tbf rate 10mbit burst 25000 latency 100ms"},
			[]string{"tc qdisc del dev clID-c1 root", "[cairnlab-ID-c1] tc qdisc del dev eth0 root"}},
		{"disk-full s4", []string{"fill /lab/hosts/s4/disk/ballast"}, []string{"remove /lab/hosts/s4/disk/ballast"}},
	} {
		s := testState(t)
		spec, err := ParseSpec(strings.Fields(tc.words))
		if err != nil {
			t.Fatalf("%s: %v", tc.words, err)
		}
		f, err := planFault(s, spec, 1, time.Unix(0, 0))
		if err != nil {
			t.Errorf("%s: %v", tc.words, err)
			continue
		}
		show := func(as []action) []string {
			var out []string
			for _, a := range as {
				out = append(out, strings.ReplaceAll(a.String(), s.ID, "ID"))
			}
			return out
		}
		if got := show(injectActions(s, f)); !slices.Equal(got, tc.inject) {
			t.Errorf("%s injects\n  %s\nwant\n  %s", tc.words, strings.Join(got, "\n  "), strings.Join(tc.inject, "\n  "))
		}
		if got := show(healActions(s, f)); !slices.Equal(got, tc.heal) {
			t.Errorf("%s heals with\n  %s\nwant\n  %s", tc.words, strings.Join(got, "\n  "), strings.Join(tc.heal, "\n  "))
		}
	}
}

// TestPartitionCuts checks which packets each partition drops: for every
// ordered pair of hosts, whether packets from the first reach the second.
func TestPartitionCuts(t *testing.T) {
	all := []string{"s1", "s2", "s3", "s4", "c1"}
	for _, tc := range []struct {
		words string
		// cut lists the pairs "a>b" whose packets from a to b are dropped.
		cut []string
	}{
		{"isolate s2", []string{"s2>s1", "s1>s2", "s2>s3", "s3>s2", "s2>s4", "s4>s2", "s2>c1", "c1>s2"}},
		{"split s1,s2", []string{"s1>s3", "s3>s1", "s1>s4", "s4>s1", "s1>c1", "c1>s1", "s2>s3", "s3>s2", "s2>s4", "s4>s2", "s2>c1", "c1>s2"}},
		{"split s1,s2,s1", []string{"s1>s3", "s3>s1", "s1>s4", "s4>s1", "s1>c1", "c1>s1", "s2>s3", "s3>s2", "s2>s4", "s4>s2", "s2>c1", "c1>s2"}},
		{"oneway s4 s1", []string{"s4>s1"}},
		// Servers s1 s2 s3 s4: the bridge is s3, the halves {s1} and {s2, s4}.
		{"bridge-split", []string{"s1>s2", "s2>s1", "s1>s4", "s4>s1"}},
		{"bridge-split s2", []string{"s1>s3", "s3>s1", "s1>s4", "s4>s1"}},
	} {
		s := testState(t)
		spec, err := ParseSpec(strings.Fields(tc.words))
		if err != nil {
			t.Fatal(err)
		}
		f, err := planFault(s, spec, 3, time.Unix(0, 0))
		if err != nil {
			t.Fatalf("%s: %v", tc.words, err)
		}
		for _, a := range all {
			for _, b := range all {
				if a == b {
					continue
				}
				want := slices.Contains(tc.cut, a+">"+b)
				if got := drops(s, f, a, b); got != want {
					t.Errorf("%s: packets %s -> %s dropped %v, want %v", tc.words, a, b, got, want)
				}
			}
		}
	}
}

// drops reports whether the nftables tables of f make b drop a's packets:
// b's table for f names a's address.
func drops(s *State, f Fault, a, b string) bool {
	if !slices.Contains(receivers(f.Cuts), b) {
		return false
	}
	ha, _ := s.Host(a)
	script := nftScript(s, f, b)
	_, set, _ := strings.Cut(script, "ip saddr {")
	set, _, _ = strings.Cut(set, "}")
	for _, addr := range strings.Split(set, ",") {
		if strings.TrimSpace(addr) == ha.Addr {
			return true
		}
	}
	return false
}

func TestNftScript(t *testing.T) {
	s := testState(t)
	f, err := planFault(s, Spec{Kind: KindSplit, Args: []string{"s1,s2"}}, 7, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := "table inet cairnlab_" + s.ID + "_f7 {\n\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n" +
		"\t\tip saddr { 10.213.0.3, 10.213.0.4, 10.213.0.5 } drop\n\t}\n}\n"
	if got := nftScript(s, f, "s1"); got != want {
		t.Errorf("table of s1:\n%s\nwant\n%s", got, want)
	}
	if got := nftScript(s, f, "c1"); !strings.Contains(got, "ip saddr { 10.213.0.1, 10.213.0.2 } drop") {
		t.Errorf("table of c1:\n%s", got)
	}
}

func TestPlanFaultRefuses(t *testing.T) {
	for _, tc := range []struct {
		words string
		want  string
	}{
		{"kill s9/meta", `no process "s9/meta"`},
		{"kill s4/master", `no process "s4/master"`},
		{"pause s1", `no process "s1"`},
		{"host-down s9", `no host "s9"`},
		{"zone-down z3", `no server host in zone "z3"`},
		{"zone-down ", "want ZONE"},
		{"isolate c2", `no host "c2"`},
		{"split s1,s2,s3,s4,c1", "names every host"},
		{"split s1,x", `no host "x"`},
		{"oneway s1 s1", "FROM and TO are both s1"},
		{"bridge-split c1", `"c1" is not a server host`},
		{"slow s1 fast", `rate "fast"`},
		{"slow s1 1bit", "between 8kbit"},
		{"disk-full s1", "host s1 has no small disk; start the lab with --small-disk s1"},
		{"oneway s1", "want FROM TO, got 1 arguments"},
		{"bridge-split s1 s2", "want [HOST], got 2"},
		{"reboot s1", `unknown kind "reboot"`},
	} {
		s := testState(t)
		spec, err := ParseSpec(strings.Fields(tc.words))
		if err == nil {
			_, err = planFault(s, spec, 1, time.Unix(0, 0))
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.words, err, tc.want)
		}
	}
	if _, err := ParseSpec(nil); err == nil {
		t.Error("an empty fault accepted")
	}
}

// TestFaultConflicts checks that no two faults in force hold the same
// process, link, link rate or disk, while partitions stack.
func TestFaultConflicts(t *testing.T) {
	for _, tc := range []struct {
		first, second string
		want          string // "" for accepted
	}{
		{"kill s1/meta", "kill s1/meta", "the process s1/meta is already taken by fault 1 (kill s1/meta)"},
		{"kill s1/meta", "pause s1/meta", "process s1/meta"},
		{"kill s1/meta", "kill s1/data", ""},
		{"pause s3/data", "zone-down z1", "process s3/data"},
		{"host-down s2", "zone-down z2", "process s2/master"},
		{"zone-down z1", "zone-down z2", ""},
		{"slow s1 1mbit", "slow s1 2mbit", "link rate of s1"},
		{"slow s1 1mbit", "host-down s1", ""},
		{"disk-full s4", "disk-full s4", "small disk of s4"},
		{"isolate s1", "isolate s1", ""},
		{"isolate s1", "split s1,s2", ""},
		{"host-down s1", "isolate s1", ""},
	} {
		s := testState(t)
		first, _ := ParseSpec(strings.Fields(tc.first))
		f, err := planFault(s, first, 1, time.Unix(0, 0))
		if err != nil {
			t.Fatalf("%s: %v", tc.first, err)
		}
		s.Faults, s.NextFault = []Fault{f}, 2
		second, _ := ParseSpec(strings.Fields(tc.second))
		_, err = planFault(s, second, 2, time.Unix(0, 0))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s after %s: %v", tc.second, tc.first, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s after %s: err %v, want one containing %q", tc.second, tc.first, err, tc.want)
		}
	}
}

func TestRates(t *testing.T) {
	for _, tc := range []struct {
		rate  string
		bytes float64
		burst string
	}{
		{"10mbit", 1.25e6, "25000"},
		{"1mbit", 125e3, "16384"},
		{"1gbit", 1.25e8, "2500000"},
		{"2.5MBPS", 2.5e6, "50000"},
		{"8kbit", 1000, "16384"},
	} {
		b, err := RateBytes(tc.rate)
		if err != nil || b != tc.bytes {
			t.Errorf("RateBytes(%s) = %v, %v; want %v", tc.rate, b, err, tc.bytes)
		}
		if args := tbfArgs(strings.ToLower(tc.rate)); args[4] != tc.burst {
			t.Errorf("%s: tbf %v, want burst %s", tc.rate, args, tc.burst)
		}
	}
	for _, bad := range []string{"", "10", "mbit", "10 mbit", "-1mbit", "1000gbit"} {
		if _, err := RateBytes(bad); err == nil {
			t.Errorf("RateBytes(%q) accepted", bad)
		}
	}
}

// TestHealUndoesInject checks, for every kind, that heal touches exactly
// what inject did: the same processes, namespaces' tables and links.
func TestHealUndoesInject(t *testing.T) {
	for _, words := range []string{"kill s1/data", "pause s2/meta", "host-down s3", "zone-down z2", "isolate c1",
		"split s4,c1", "oneway c1 s2", "bridge-split", "slow s2 5mbit", "disk-full s4"} {
		s := testState(t)
		spec, _ := ParseSpec(strings.Fields(words))
		f, err := planFault(s, spec, 2, time.Unix(0, 0))
		if err != nil {
			t.Fatalf("%s: %v", words, err)
		}
		touched := func(as []action) (procs, places []string) {
			for _, a := range as {
				switch {
				case a.Signal != 0 || a.Restart:
					procs = append(procs, a.Proc)
				case a.Cmd != nil:
					places = append(places, a.Cmd.Netns+" "+a.Cmd.Argv[0])
				default:
					places = append(places, a.Fill+a.Empty)
				}
			}
			slices.Sort(procs)
			slices.Sort(places)
			return procs, places
		}
		ip, il := touched(injectActions(s, f))
		hp, hl := touched(healActions(s, f))
		if !slices.Equal(ip, hp) || !slices.Equal(il, hl) {
			t.Errorf("%s: inject touches %v %v, heal %v %v", words, ip, il, hp, hl)
		}
	}
}

func TestFaultDetail(t *testing.T) {
	for words, want := range map[string]string{
		"bridge-split":  "s1 | s2 s4, both reach s3",
		"split s4,c1":   "s4 c1 | s1 s2 s3",
		"isolate s1":    "s1 | s2 s3 s4 c1",
		"oneway c1 s2":  "c1 -> s2 dropped, s2 -> c1 passes",
		"host-down s4":  "SIGKILL to s4/meta s4/data; link of s4 down",
		"zone-down z2":  "SIGKILL to every process of s2 s4; their links down",
		"pause s1/meta": "SIGSTOP to s1/meta",
		"slow s2 1MBPS": "link of s2 at 1mbps each way",
		"disk-full s4":  "small disk of s4 filled",
		"kill c1/mount": "SIGKILL to c1/mount",
	} {
		spec, _ := ParseSpec(strings.Fields(words))
		f, err := planFault(testState(t), spec, 1, time.Unix(0, 0))
		if err != nil || f.Detail != want {
			t.Errorf("%s: %q, %v; want %q", words, f.Detail, err, want)
		}
	}
}
