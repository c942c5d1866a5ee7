// Package integration runs real cairn processes on loopback: `cairn up`
// clusters, admin commands, kills and restarts, as a user would.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/pki"
)

var cairnBin string

func TestMain(m *testing.M) {
	cairnBin = os.Getenv("CAIRN_BIN")
	if cairnBin == "" {
		dir, err := os.MkdirTemp("", "cairn-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cairnBin = filepath.Join(dir, "cairn")
		out, err := exec.Command("go", "build", "-o", cairnBin, "../../cmd/cairn").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build cairn: %v\n%s", err, out)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
	}
	os.Exit(m.Run())
}

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
}

// cairn runs the binary to completion (bounded by a minute).
func cairn(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cairnBin, args...)
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("cairn %v: %v", args, err)
	}
	return r
}

func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CAIRN_") {
			env = append(env, e)
		}
	}
	return env
}

// mustCairn runs the binary and fails the test unless it exits 0.
func mustCairn(t *testing.T, args ...string) string {
	t.Helper()
	r := cairn(t, args...)
	if r.code != 0 {
		t.Fatalf("cairn %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// upProc is a running `cairn up`.
type upProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	dir   string
	mu    sync.Mutex
	out   bytes.Buffer
	done  chan struct{}
	ready time.Duration
}

// startUp runs `cairn up --data-dir dir args...` and waits until it prints that
// the cluster is up. Without an --s3 argument the S3 gateway is off: only
// the tests of the gateway pay for its process and mount.
func startUp(t *testing.T, dir string, args ...string) *upProc {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--s3") }) {
		args = append(args, "--s3=false")
	}
	cmd := exec.Command(cairnBin, append([]string{"up", "--data-dir", dir}, args...)...)
	cmd.Env = cleanEnv()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	u := &upProc{t: t, cmd: cmd, dir: dir, done: make(chan struct{})}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readyc := make(chan struct{})
	go func() {
		// done closes only after the last line is read, so a failure report
		// shows everything cairn up printed.
		defer close(u.done)
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			u.mu.Lock()
			u.out.WriteString(sc.Text() + "\n")
			u.mu.Unlock()
			if strings.Contains(sc.Text(), "Cairn is up") {
				once.Do(func() { close(readyc) })
			}
		}
	}()
	go func() {
		cmd.Wait()
		pw.Close()
	}()
	t.Cleanup(func() { u.stop() })
	select {
	case <-readyc:
		u.ready = time.Since(start)
	case <-u.done:
		t.Fatalf("cairn up exited before the cluster was up:\n%s", u.output())
	case <-time.After(90 * time.Second):
		t.Fatalf("cairn up not ready after 90s:\n%s", u.output())
	}
	return u
}

func (u *upProc) output() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.out.String()
}

// stop sends SIGTERM and waits for a clean exit.
func (u *upProc) stop() int {
	select {
	case <-u.done:
		return u.cmd.ProcessState.ExitCode()
	default:
	}
	_ = u.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-u.done:
	case <-time.After(60 * time.Second):
		_ = u.cmd.Process.Kill()
		<-u.done
		u.t.Errorf("cairn up did not stop within 60s:\n%s", u.output())
	}
	return u.cmd.ProcessState.ExitCode()
}

// status is the part of `cairn status --json` the tests read.
type status struct {
	ClusterID string `json:"cluster_id"`
	Epoch     uint64 `json:"epoch"`
	Nodes     []struct {
		ID      uint64 `json:"id"`
		Role    string `json:"role"`
		Address string `json:"address"`
		State   string `json:"state"`
		Leader  bool   `json:"leader"`
		Pid     int    `json:"pid"`
	} `json:"nodes"`
	Volumes []struct {
		Name           string `json:"name"`
		MetaPartitions int    `json:"meta_partitions"`
		DataPartitions int    `json:"data_partitions"`
	} `json:"volumes"`
	Partitions []struct {
		ID        uint64   `json:"id"`
		Volume    string   `json:"volume"`
		Kind      string   `json:"kind"`
		Replicas  []uint64 `json:"replicas"`
		Down      []uint64 `json:"down"`
		Stale     []uint64 `json:"stale"`
		Leader    uint64   `json:"leader"`
		Health    string   `json:"health"`
		UsedBytes uint64   `json:"used_bytes"`
	} `json:"partitions"`
}

func getStatus(t *testing.T, dir string) status {
	t.Helper()
	var s status
	out := mustCairn(t, "status", "--data-dir", dir, "--json")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return s
}

// count returns how many nodes of role are in state, and the leader's pid.
func (s status) count(role, state string) int {
	n := 0
	for _, nd := range s.Nodes {
		if nd.Role == role && nd.State == state {
			n++
		}
	}
	return n
}

func (s status) leaders() (ids []uint64, pid int) {
	for _, nd := range s.Nodes {
		if nd.Role == "master" && nd.Leader {
			ids = append(ids, nd.ID)
			pid = nd.Pid
		}
	}
	return ids, pid
}

// dataUsed sums the used bytes the data partitions report.
func (s status) dataUsed() uint64 {
	var n uint64
	for _, p := range s.Partitions {
		if p.Kind == "data" {
			n += p.UsedBytes
		}
	}
	return n
}

// mapDigest is what must survive restarts and failovers: volumes and partitions.
func (s status) mapDigest() string {
	var b strings.Builder
	for _, v := range s.Volumes {
		fmt.Fprintf(&b, "vol %s %d %d\n", v.Name, v.MetaPartitions, v.DataPartitions)
	}
	for _, p := range s.Partitions {
		fmt.Fprintf(&b, "part %d %s %s %v\n", p.ID, p.Volume, p.Kind, p.Replicas)
	}
	return b.String()
}

// adminTLS is the client TLS configuration of the admin identity `cairn
// up` created for the cluster in dir.
func adminTLS(t *testing.T, dir string) *tls.Config {
	t.Helper()
	id, err := pki.Load(localcluster.TLSDir(dir, localcluster.AdminIdentity))
	if err != nil {
		t.Fatal(err)
	}
	return id.ClientConfig()
}

func pidAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}
