package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/lab"
)

// TestLabBench runs `cairn lab bench` on a lab of 3 server hosts and 2
// client hosts: a metadata workload whose workers are the daemons on c1
// and c2, each going through its own host's mount. The report must show
// both nodes, every worker ok and every phase done, and each client
// host's mount must have served its worker's directories (its own FUSE
// metrics, read from inside the host); the mount bound for the workers
// must not show on this machine.
func TestLabBench(t *testing.T) {
	dir := labDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Config{Dir: dir, Hosts: 3, Zones: 3, Clients: 2, Binary: cairnBin, Out: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	const files = 60
	out := filepath.Join(t.TempDir(), "report")
	var stdout, stderr bytes.Buffer
	code, err := l.Bench(ctx, lab.BenchConfig{Args: []string{"--workload", "metadata", "--set", "files=" + strconv.Itoa(files),
		"--set", "trees=1", "--set", "duration=60s", "--threads", "2", "--progress", "off", "--out", out}, Stdout: &stdout, Stderr: &stderr})
	if err != nil || code != 0 {
		t.Fatalf("lab bench: exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	t.Logf("lab bench:\n%s", stdout.String())

	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	s, _ := l.State()
	var want []string
	for _, h := range s.Hosts {
		if h.Client {
			want = append(want, h.Addr+":"+strconv.Itoa(lab.PortBenchWorker))
		}
	}
	if len(rep.Workloads) != 1 || len(rep.Workloads[0].Targets) != 1 || len(rep.Workloads[0].Targets[0].Repetitions) != 1 {
		t.Fatalf("report: %d workloads", len(rep.Workloads))
	}
	w := rep.Workloads[0]
	if w.Concurrency.Nodes != 2 || w.Targets[0].Target != "posix:"+lab.BenchMount(dir) {
		t.Errorf("ran on %d nodes, target %s", w.Concurrency.Nodes, w.Targets[0].Target)
	}
	r := w.Targets[0].Repetitions[0]
	var nodes []string
	for _, ws := range r.Workers {
		if ws.Status != "ok" {
			t.Errorf("worker %s on %s: %s %s", ws.Name, ws.Node, ws.Status, ws.Error)
		}
		if !slices.Contains(nodes, ws.Node) {
			nodes = append(nodes, ws.Node)
		}
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, want) {
		t.Errorf("workers on %v, want the client hosts' daemons %v", nodes, want)
	}
	for _, ph := range w.Targets[0].Phases {
		if ph.Truncated {
			t.Errorf("phase %s truncated", ph.Phase)
		}
	}

	// Each host's own mount served its worker: 2 threads x files
	// directories made through it.
	for _, h := range s.Hosts {
		if !h.Client {
			continue
		}
		if n := fuseRequests(ctx, t, l, h.Name, h.Addr, "mkdir"); n < 2*files {
			t.Errorf("%s's mount served %d mkdirs, want at least %d", h.Name, n, 2*files)
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mi), " "+lab.BenchMount(dir)+" ") {
		t.Errorf("the workers' bind mount shows on this machine (%v)", err)
	}
}

// fuseRequests returns how many successful FUSE requests of kind op the
// mount of client host host (address addr) served, from its metrics, read
// from inside the host.
func fuseRequests(ctx context.Context, t *testing.T, l *lab.Lab, host, addr, op string) int {
	t.Helper()
	var out bytes.Buffer
	get := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%d && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3`, addr, lab.PortMountMetrics)
	if code, err := l.Exec(ctx, host, []string{"timeout", "10", "bash", "-c", get}, nil, &out, nil); err != nil || code != 0 {
		t.Fatalf("%s: read the mount's metrics: exit %d, %v", host, code, err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "cairn_fuse_requests_total{") && strings.Contains(line, `op="`+op+`"`) && strings.Contains(line, `errno="0"`) {
			f := strings.Fields(line)
			n, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return int(n)
		}
	}
	return 0
}
