package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/report"
)

// TestMultiHostNetns runs a master and two worker daemons as if on three
// hosts: two network namespaces joined by a veth pair with addresses in a
// private /24 that exists only inside them. Worker A and the master live in
// namespace A, worker B in namespace B; every message crosses TCP, B's over
// the veth link. The run must produce one report that merges both nodes.
// Traffic goes only to the namespaces' own addresses; the namespaces (and
// with them the veth pair) are deleted at the end.
func TestMultiHostNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating network namespaces needs root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("the ip command (Debian package iproute2) is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id := fmt.Sprintf("%05d", os.Getpid()%100000)
	nsA, nsB := "cbench-a-"+id, "cbench-b-"+id
	vethA, vethB := "cbva"+id, "cbvb"+id // at most 15 characters
	const addrA, addrB = "10.213.77.1", "10.213.77.2"
	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, ip, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Registered first, so it runs last: after the daemons are killed.
	t.Cleanup(func() {
		for _, ns := range []string{nsA, nsB} {
			out, err := exec.Command(ip, "netns", "del", ns).CombinedOutput()
			if err != nil && !strings.Contains(string(out), "No such file") {
				t.Errorf("delete namespace %s: %v %s", ns, err, out)
			}
		}
	})
	run("netns", "add", nsA)
	run("netns", "add", nsB)
	run("-n", nsA, "link", "add", vethA, "type", "veth", "peer", "name", vethB, "netns", nsB)
	run("-n", nsA, "addr", "add", addrA+"/24", "dev", vethA)
	run("-n", nsB, "addr", "add", addrB+"/24", "dev", vethB)
	for _, x := range [][2]string{{nsA, vethA}, {nsB, vethB}, {nsA, "lo"}, {nsB, "lo"}} {
		run("-n", x[0], "link", "set", x[1], "up")
	}

	workerA := startDaemon(t, ctx, []string{ip, "netns", "exec", nsA}, addrA+":0")
	workerB := startDaemon(t, ctx, []string{ip, "netns", "exec", nsB}, addrB+":0")
	if !strings.HasPrefix(workerA, addrA+":") || !strings.HasPrefix(workerB, addrB+":") {
		t.Fatalf("workers listen on %s and %s", workerA, workerB)
	}

	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "report")
	args, _ := json.Marshal(masterArgs{
		Targets: []string{"posix:" + dir}, Remote: []string{workerA, workerB}, Kind: "metadata", Out: out,
		Set: map[string]string{"processes": "2", "threads": "2", "files": "25", "trees": "1", "tree_fanout": "2", "tree_depth": "1", "tree_files": "2"},
	})
	master := exec.CommandContext(ctx, ip, append([]string{"netns", "exec", nsA}, selfCommand()...)...)
	master.Env = append(os.Environ(), roleEnv+"=master", "CAIRN_BENCH_TEST_ARGS="+string(args))
	if b, err := master.CombinedOutput(); err != nil {
		t.Fatalf("master in namespace %s: %v\n%s", nsA, err, b)
	}

	rep, err := report.Read(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 0 {
		t.Fatalf("failures: %+v", rep.Failures)
	}
	w := rep.Workloads[0]
	if w.Concurrency != (report.Concurrency{Nodes: 2, Processes: 4, Threads: 8}) {
		t.Fatalf("concurrency %+v, want 2 nodes x 2 processes x 2 threads", w.Concurrency)
	}
	nodes := map[string]int{}
	for _, ws := range w.Targets[0].Repetitions[0].Workers {
		nodes[ws.Node]++
		if ws.Status != "ok" {
			t.Errorf("worker %s: %s %s", ws.Name, ws.Status, ws.Error)
		}
	}
	if nodes[workerA] != 2 || nodes[workerB] != 2 {
		t.Fatalf("processes per node %v", nodes)
	}
	// One merged report: every phase counts the operations of all 8 threads.
	if n := mustFind(t, w.Targets[0], "FileCreation", "create", report.FigOps); n != 8*25 {
		t.Fatalf("FileCreation counted %v files, want %d", n, 8*25)
	}
	checkPlausible(t, rep)
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("target not cleaned up: %v", left)
	}
}
