package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/lab"
)

// labFailoverMax bounds how long, after a host holding meta partition
// leaders is cut off, the first write and read through a client on
// another host may take.
const labFailoverMax = 60 * time.Second

// TestLabIsolate brings up a lab of 4 server hosts in 2 zones and a client
// host, writes a file through the client's mount, cuts off the server host
// that leads the most meta partitions, and checks that the mount keeps
// working through the failover, that the cut is real (the client cannot
// reach that host), that heal removes every rule and the file is intact,
// and that down leaves no namespace, link, mount or process behind.
//
// The host that hurts most is cut: the master leader's, then the one
// leading the most meta partitions, then data partitions.
func TestLabIsolate(t *testing.T) {
	dir := labDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	l, err := lab.Up(ctx, lab.Config{Dir: dir, Hosts: 4, Zones: 2, Clients: 1, Binary: cairnBin, Out: testLog{t},
		MountOptions: []string{"op_timeout=10"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab up in %.1fs", time.Since(start).Seconds())
	st, err := l.Status()
	if err != nil {
		t.Fatal(err)
	}
	mnt := st.Hosts[len(st.Hosts)-1].Mount
	before := make([]byte, 1<<20)
	_, _ = rand.Read(before)
	writeSynced(t, filepath.Join(mnt, "before"), before)

	target := labTarget(ctx, t, l)
	s, _ := l.State()
	th, _ := s.Host(target)
	f, err := l.Fault(ctx, lab.Spec{Kind: lab.KindIsolate, Args: []string{target}})
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	if reach(ctx, t, l, "c1", th.Addr+":17100") {
		t.Errorf("c1 reaches %s's meta node through the isolation", target)
	}
	during := make([]byte, 64<<10)
	_, _ = rand.Read(during)
	var took time.Duration
	for attempt := 1; ; attempt++ {
		werr := os.WriteFile(filepath.Join(mnt, "during"), during, 0o644)
		got, rerr := os.ReadFile(filepath.Join(mnt, "before"))
		if werr == nil && rerr == nil && bytes.Equal(got, before) {
			took = time.Since(cut)
			break
		}
		if time.Since(cut) > labFailoverMax {
			labDiagnose(ctx, t, l, dir)
			t.Fatalf("%s cut off: no write and read through the mount within %s (attempt %d: write %v, read %v)", target, labFailoverMax, attempt, werr, rerr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s cut off: the first write and read through c1's mount succeeded after %.1fs", target, took.Seconds())

	if err := l.Heal(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	for _, h := range s.Hosts {
		var out bytes.Buffer
		if code, err := l.Exec(ctx, h.Name, []string{"nft", "list", "tables"}, nil, &out, &out); err != nil || code != 0 || strings.TrimSpace(out.String()) != "" {
			t.Errorf("%s after heal: nft list tables: %d %v %q", h.Name, code, err, out.String())
		}
	}
	if !reach(ctx, t, l, "c1", th.Addr+":17100") {
		t.Errorf("c1 does not reach %s's meta node after the heal", target)
	}
	for name, want := range map[string][]byte{"before": before, "during": during} {
		if got, err := os.ReadFile(filepath.Join(mnt, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after heal: %v, %d bytes, equal %v", name, err, len(got), bytes.Equal(got, want))
		}
	}
	if st, err := l.Status(); err != nil || len(st.Faults) != 0 {
		t.Errorf("faults after heal: %v %+v", err, st)
	}

	var pids []int
	for _, p := range s.Procs {
		pids = append(pids, p.Pid)
	}
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	checkLabGone(t, s, pids)
	if err := lab.Down(ctx, dir, nil); err != nil {
		t.Errorf("a second down: %v", err)
	}
}

// labDir skips the test unless it runs as root (the lab needs network
// namespaces, a bridge and nftables) and returns a dir for a lab, which is
// taken down when the test ends.
func labDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root (network namespaces, a bridge, nftables)")
	}
	dir := t.TempDir()
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), dir, nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

// labTarget is the server host whose loss hurts most: the master leader's
// counts most, then each meta partition it leads, then each data one.
func labTarget(ctx context.Context, t *testing.T, l *lab.Lab) string {
	t.Helper()
	cs, err := l.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := l.State()
	masterHost, _ := s.HostOf(cs.Leader)
	score := map[string]int{masterHost: 10000}
	for _, p := range cs.Partitions {
		h, ok := s.HostOf(cs.NodeAddr(p.Leader))
		if !ok {
			continue
		}
		score[h]++
		if p.Kind == "meta" {
			score[h] += 100
		}
	}
	best := ""
	for _, h := range s.Hosts {
		if !h.Client && (best == "" || score[h.Name] > score[best]) {
			best = h.Name
		}
	}
	t.Logf("master leader on %s; score (master 10000, meta partition leaders x100, data partition leaders) %v; isolating %s", masterHost, score, best)
	return best
}

// labDiagnose logs what explains a failed check: the partitions and their
// leaders as the masters see them, and the end of every process's log.
func labDiagnose(ctx context.Context, t *testing.T, l *lab.Lab, dir string) {
	t.Helper()
	if cs, err := l.Cluster(ctx); err != nil {
		t.Logf("cluster: %v", err)
	} else {
		for _, p := range cs.Partitions {
			t.Logf("partition %d (%s): replicas %v, leader %d", p.ID, p.Kind, p.Replicas, p.Leader)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "hosts", "*", "*.log"))
	if keep := os.Getenv("CAIRN_LAB_LOGS"); keep != "" {
		// The lab's directory goes with the test; a copy of its logs
		// outlives it for reading at leisure.
		to := filepath.Join(keep, fmt.Sprintf("%s-%d", t.Name(), time.Now().Unix()))
		for _, name := range logs {
			rel, _ := filepath.Rel(dir, name)
			b, _ := os.ReadFile(name)
			_ = os.MkdirAll(filepath.Dir(filepath.Join(to, rel)), 0o755)
			_ = os.WriteFile(filepath.Join(to, rel), b, 0o644)
		}
		t.Logf("lab logs copied to %s", to)
	}
	for _, name := range logs {
		b, _ := os.ReadFile(name)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("--- %s (last %d of %d lines)\n%s", name, min(30, len(lines)), len(lines), strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

// reach reports whether host opens a TCP connection to addr within 2 s.
func reach(ctx context.Context, t *testing.T, l *lab.Lab, host, addr string) bool {
	t.Helper()
	a, port, _ := net.SplitHostPort(addr)
	code, err := l.Exec(ctx, host, []string{"timeout", "2", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", a, port)}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return code == 0
}

// checkLabGone checks that nothing of the lab s is left on this machine.
func checkLabGone(t *testing.T, s *lab.State, pids []int) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil || strings.Contains(string(out), "cairnlab-"+s.ID) {
		t.Errorf("namespaces left: %v %s", err, out)
	}
	for _, name := range append([]string{s.Bridge}, hostVeths(s)...) {
		if _, err := net.InterfaceByName(name); err == nil {
			t.Errorf("link %s left", name)
		}
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	if strings.Contains(string(mounts), s.Dir) {
		t.Errorf("mounts left under %s:\n%s", s.Dir, mounts)
	}
	for _, pid := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), s.Dir) {
			t.Errorf("process %d left: %q", pid, b)
		}
	}
	if after, err := lab.Open(s.Dir); err != nil {
		t.Error(err)
	} else if st, _ := after.Status(); st.Phase != lab.PhaseDown {
		t.Errorf("phase %s after down", st.Phase)
	}
}

func hostVeths(s *lab.State) []string {
	var out []string
	for _, h := range s.Hosts {
		out = append(out, h.Veth)
	}
	return out
}

// writeSynced writes data to path and fsyncs it.
func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// testLog writes progress lines into the test's log.
type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
