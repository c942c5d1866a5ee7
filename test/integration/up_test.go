package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/localcluster"
)

// TestUpStatusRestart starts a dev cluster, checks what status reports, exercises
// the admin commands and their refusals, then restarts the cluster and checks the
// map came back unchanged.
func TestUpStatusRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	up := startUp(t, dir)
	t.Logf("cairn up: all nodes alive after %s", up.ready)

	st := getStatus(t, dir)
	if ids, pid := st.leaders(); len(ids) != 1 || !pidAlive(pid) {
		t.Fatalf("want one live master leader, got ids %v pid %d", ids, pid)
	}
	for role, want := range map[string]int{"master": 1, "meta": 3, "data": 3} {
		if got := st.count(role, "alive"); got != want {
			t.Fatalf("%d alive %s nodes, want %d: %+v", got, role, want, st.Nodes)
		}
	}
	for _, n := range st.Nodes {
		if !pidAlive(n.Pid) {
			t.Fatalf("node %s %d reports pid %d, which is not running", n.Role, n.ID, n.Pid)
		}
	}
	if len(st.Volumes) != 1 || st.Volumes[0].Name != "default" {
		t.Fatalf("volumes %+v, want default", st.Volumes)
	}
	for _, p := range st.Partitions {
		if len(p.Replicas) != 3 || p.Health != "healthy" {
			t.Fatalf("partition %+v: want 3 healthy replicas", p)
		}
	}
	if human := mustCairn(t, "status", "--data-dir", dir); !strings.Contains(human, "default") || !strings.Contains(human, "master*") {
		t.Fatalf("human status lacks volume or leader:\n%s", human)
	}

	// A second cairn up on the same dir is refused and changes nothing.
	if r := cairn(t, "up", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "another cairn up") {
		t.Fatalf("second up: exit %d, stderr %q", r.code, r.stderr)
	}

	// Volume commands and their errors.
	mustCairn(t, "volume", "create", "photos", "--data-dir", dir, "--data-partitions", "4")
	if r := cairn(t, "volume", "create", "photos", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("duplicate volume: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cairn(t, "volume", "create", "bad/name", "--data-dir", dir); r.code != 2 || !strings.Contains(r.stderr, "volume name") {
		t.Fatalf("invalid name: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cairn(t, "volume", "create", "huge", "--replicas", "5", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "need 5 meta nodes with room for 5 replicas, have 3: 3 alive") {
		t.Fatalf("too many replicas: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cairn(t, "volume", "info", "nope", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("info of missing volume: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cairn(t, "volume", "delete", "photos", "--data-dir", dir); r.code != 2 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("delete without --yes: exit %d, stderr %q", r.code, r.stderr)
	}
	mustCairn(t, "volume", "create", "scratch", "--data-dir", dir, "--replicas", "1")
	mustCairn(t, "volume", "delete", "scratch", "--yes", "--data-dir", dir)
	if out := mustCairn(t, "volume", "list", "--data-dir", dir); !strings.Contains(out, "photos") || strings.Contains(out, "scratch") {
		t.Fatalf("volume list:\n%s", out)
	}
	if out := mustCairn(t, "volume", "info", "photos", "--data-dir", dir); !strings.Contains(out, "meta") {
		t.Fatalf("volume info:\n%s", out)
	}

	// A node asking for an id that another node holds is refused.
	masterAddr := ""
	for _, n := range st.Nodes {
		if n.Role == "master" {
			masterAddr = n.Address
		}
	}
	nodeTLS := localcluster.TLSDir(dir, localcluster.NodeIdentity)
	r := cairn(t, "meta", "--master", masterAddr, "--node-id", "1", "--data-dir", filepath.Join(t.TempDir(), "dup"),
		"--listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--tls-dir", nodeTLS)
	if r.code != 1 || !strings.Contains(r.stderr, "registered to another node") {
		t.Fatalf("duplicate node id: exit %d, stderr %q", r.code, r.stderr)
	}

	// The nodes learnt their partitions from heartbeats.
	time.Sleep(1500 * time.Millisecond)
	before := getStatus(t, dir)
	for _, p := range before.Partitions {
		if p.Volume == "photos" && p.Health != "healthy" {
			t.Fatalf("partition %+v not healthy", p)
		}
	}
	pids := map[int]bool{}
	for _, n := range before.Nodes {
		pids[n.Pid] = true
	}
	if code := up.stop(); code != 0 {
		t.Fatalf("cairn up exit %d after SIGTERM:\n%s", code, up.output())
	}
	for pid := range pids {
		if pidAlive(pid) {
			t.Fatalf("pid %d still running after cairn up stopped", pid)
		}
	}

	// Foreign use of the stopped cluster's dirs is refused.
	if r := cairn(t, "meta", "--data-dir", filepath.Join(dir, "master-1"), "--master", masterAddr, "--tls-dir", nodeTLS); r.code != 1 || !strings.Contains(r.stderr, "belongs to a master") {
		t.Fatalf("meta on a master dir: exit %d, stderr %q", r.code, r.stderr)
	}
	ln, err := net.Listen("tcp", masterAddr)
	if err != nil {
		t.Fatalf("master port not released: %v", err)
	}
	if r := cairn(t, "up", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("up with a taken port: exit %d, stderr %q", r.code, r.stderr)
	}
	ln.Close()

	up2 := startUp(t, dir)
	after := getStatus(t, dir)
	if after.mapDigest() != before.mapDigest() || after.Epoch != before.Epoch || after.ClusterID != before.ClusterID {
		t.Fatalf("map changed across restart:\nbefore epoch %d\n%s\nafter epoch %d\n%s", before.Epoch, before.mapDigest(), after.Epoch, after.mapDigest())
	}
	if got := after.count("meta", "alive") + after.count("data", "alive"); got != 6 {
		t.Fatalf("%d nodes alive after restart, want 6", got)
	}
	if code := up2.stop(); code != 0 {
		t.Fatalf("second cairn up exit %d", code)
	}
}

// TestThreeMastersFailover kills the master leader with SIGKILL and checks that
// another master leads within 5 s and that nothing created before is lost.
func TestThreeMastersFailover(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c3")
	up := startUp(t, dir, "--masters", "3")
	mustCairn(t, "volume", "create", "before-kill", "--data-dir", dir)
	before := getStatus(t, dir)
	ids, pid := before.leaders()
	if len(ids) != 1 || before.count("master", "alive") != 3 {
		t.Fatalf("want 3 alive masters and one leader: %+v", before.Nodes)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var after status
	for {
		r := cairn(t, "status", "--data-dir", dir, "--json", "--timeout", "2s")
		if r.code == 0 {
			after = status{}
			if err := jsonUnmarshal(r.stdout, &after); err != nil {
				t.Fatal(err)
			}
			if nids, _ := after.leaders(); len(nids) == 1 && nids[0] != ids[0] {
				break
			}
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("no new master leader 20s after killing master %d: %s %s", ids[0], r.stdout, r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(killed)
	t.Logf("new master leader %v after %s", func() []uint64 { l, _ := after.leaders(); return l }(), elapsed)
	if elapsed > 5*time.Second {
		t.Errorf("new leader after %s, want within 5s", elapsed)
	}
	if after.mapDigest() != before.mapDigest() {
		t.Fatalf("map changed across failover:\n%s\nvs\n%s", before.mapDigest(), after.mapDigest())
	}
	if after.count("master", "down") != 1 {
		t.Fatalf("killed master not reported down: %+v", after.Nodes)
	}
	mustCairn(t, "volume", "create", "after-kill", "--data-dir", dir)
	up.stop()
}

func TestUsageErrors(t *testing.T) {
	empty := t.TempDir()
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "precious.txt"), []byte("mine"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"up", "--no-such-flag"}, 2, "unknown flag"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"volume", "create"}, 2, "expected a volume name"},
		{[]string{"status", "--data-dir", empty}, 2, "no cluster found"},
		{[]string{"up", "--masters", "2", "--data-dir", empty}, 2, "odd"},
		{[]string{"master", "--id", "4", "--peers", "1=127.0.0.1:1"}, 2, "not in --peers"},
		{[]string{"master", "--peers", "x"}, 2, "ID=HOST:PORT"},
		{[]string{"meta", "--log-level", "loud"}, 2, "log level"},
		{[]string{"up", "--data-dir", foreign}, 1, "not empty"},
	} {
		r := cairn(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("cairn %v: exit %d stderr %q; want exit %d mentioning %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
		if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines > 2 {
			t.Errorf("cairn %v: %d lines of error, want one (plus a usage hint):\n%s", tc.args, lines, r.stderr)
		}
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "precious.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("foreign data dir was touched: %q %v", b, err)
	}
	if out := mustCairn(t, "up", "--help"); !strings.Contains(out, "--data-dir") || !strings.Contains(out, "Ctrl-C") {
		t.Fatalf("up --help:\n%s", out)
	}
}

// TestConfigPrecedence checks that flags beat the environment, which beats the
// config file.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cairn.yaml")
	os.WriteFile(cfg, []byte("data-dir: "+filepath.Join(dir, "from-file")+"\n"), 0o644)
	r := cairn(t, "status", "--config", cfg)
	if r.code != 2 || !strings.Contains(r.stderr, "from-file") {
		t.Fatalf("config file not used: %d %q", r.code, r.stderr)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("data-dri: x\n"), 0o644)
	if r := cairn(t, "status", "--config", bad); r.code != 2 || !strings.Contains(r.stderr, "unknown keys data-dri") {
		t.Fatalf("unknown key: %d %q", r.code, r.stderr)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// TestNodeMarkedDown kills a data node and checks that the master marks it down
// and reports its partitions degraded, while the cluster keeps serving.
func TestNodeMarkedDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cd")
	up := startUp(t, dir, "--down-after", "2s")
	st := getStatus(t, dir)
	victim := st.Nodes[len(st.Nodes)-1]
	if victim.Role != "data" || !pidAlive(victim.Pid) {
		t.Fatalf("expected a live data node last: %+v", victim)
	}
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st = getStatus(t, dir)
		state := ""
		for _, n := range st.Nodes {
			if n.Role == "data" && n.ID == victim.ID {
				state = n.State
			}
		}
		if state == "down" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d still %q 20s after kill -9", victim.ID, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
	degraded := 0
	for _, p := range st.Partitions {
		for _, r := range p.Replicas {
			if r == victim.ID {
				if p.Health != "degraded" {
					t.Fatalf("partition %d on the dead node is %s", p.ID, p.Health)
				}
				degraded++
			}
		}
	}
	if degraded == 0 {
		t.Fatal("the dead node held no partitions")
	}
	if !strings.Contains(up.output(), "data-") || !strings.Contains(up.output(), "stopped") {
		t.Fatalf("cairn up did not report the dead child:\n%s", up.output())
	}
	mustCairn(t, "volume", "create", "after-loss", "--data-dir", dir, "--replicas", "2")
	up.stop()
}
