package lab

import (
	"slices"
	"strings"
	"testing"
)

func TestPlanBench(t *testing.T) {
	cfg := testConfig()
	cfg.Clients = 2
	s := stateOf(t, cfg)
	workers, master, err := planBench(s, BenchConfig{Args: []string{"--workload", "metadata"}})
	if err != nil {
		t.Fatal(err)
	}
	var hosts, listens []string
	for _, w := range workers {
		hosts, listens = append(hosts, w.host.Name), append(listens, w.listen)
		// The host's own mount, bound at the common path, which the
		// daemon alone may use.
		if !slices.Equal(w.argv[4:], []string{"/lab/hosts/" + w.host.Name + "/mnt", "/lab/mnt", "/bin/cairn", w.listen}) {
			t.Errorf("%s: worker argv %q", w.host.Name, w.argv)
		}
		if !strings.Contains(w.argv[2], `--allow "$2"`) || !strings.Contains(w.argv[2], "--once") {
			t.Errorf("%s: worker script %q", w.host.Name, w.argv[2])
		}
	}
	if !slices.Equal(hosts, []string{"c1", "c2"}) || !slices.Equal(listens, []string{"10.213.0.5:17400", "10.213.0.6:17400"}) {
		t.Fatalf("workers on %v at %v", hosts, listens)
	}
	want := []string{"/bin/cairn", "bench", "run", "--local=false", "--worker", "10.213.0.5:17400", "--worker", "10.213.0.6:17400",
		"--target", "posix:/lab/mnt", "--workload", "metadata"}
	if !slices.Equal(master, want) {
		t.Fatalf("master %q\nwant   %q", master, want)
	}

	// A target given replaces the mounts; --clients picks and orders.
	_, master, err = planBench(s, BenchConfig{Clients: []string{"c2"}, Args: []string{"--target=cairn:10.213.0.1:17000/default"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/bin/cairn", "bench", "run", "--local=false", "--worker", "10.213.0.6:17400", "--target=cairn:10.213.0.1:17000/default"}; !slices.Equal(master, want) {
		t.Fatalf("master %q\nwant   %q", master, want)
	}

	for _, tc := range []struct {
		clients []string
		want    string
	}{
		{[]string{"c9"}, `no host "c9"`},
		{[]string{"s1"}, "s1 is a server host"},
		{[]string{"c1", "c1"}, "c1 given twice"},
	} {
		if _, _, err := planBench(s, BenchConfig{Clients: tc.clients}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("clients %v: %v, want %q", tc.clients, err, tc.want)
		}
	}
	s.Hosts = slices.DeleteFunc(s.Hosts, func(h Host) bool { return h.Client })
	if _, _, err := planBench(s, BenchConfig{}); err == nil || !strings.Contains(err.Error(), "no client host") {
		t.Errorf("no clients: %v", err)
	}
}

func TestProcTCPAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.213.0.5:17400", "0500D50A:43F8"},
		{"127.0.0.1:80", "0100007F:0050"},
	} {
		if got, err := procTCPAddr(tc.in); err != nil || got != tc.want {
			t.Errorf("procTCPAddr(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"10.213.0.5", "10.213.0:1", "10.213.0.256:1", "x:1", "[::1]:80"} {
		if _, err := procTCPAddr(bad); err == nil {
			t.Errorf("procTCPAddr(%s): no error", bad)
		}
	}
}
