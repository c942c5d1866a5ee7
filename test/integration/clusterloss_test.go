package integration

import (
	"bufio"
	"bytes"
	"errors"
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
)

// mountProc is a `cairn mount` child process.
type mountProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (m *mountProc) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

// startMount runs `cairn mount args...` and waits until it reports the mount.
func startMount(t *testing.T, mp string, args ...string) *mountProc {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	cmd := exec.Command(cairnBin, append([]string{"mount"}, args...)...)
	cmd.Env = cleanEnv()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	m := &mountProc{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			m.mu.Lock()
			m.out.WriteString(sc.Text() + "\n")
			m.mu.Unlock()
			if strings.Contains(sc.Text(), "mounted volume") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("cairn mount did not stop within 30s:\n%s", m.output())
		}
		for i := 0; i < 5; i++ {
			if ok, _ := localcluster.IsMounted(mp); !ok {
				return
			}
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	})
	select {
	case <-ready:
	case <-m.done:
		t.Fatalf("cairn mount exited before mounting:\n%s", m.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("cairn mount not ready after 60s:\n%s", m.output())
	}
	return m
}

// TestMountSurvivesClusterLoss kills every server process of a cluster
// (kill -9) under a mount: operations on the mount must fail with
// ETIMEDOUT or EIO within the mount's op_timeout, never hang and never
// answer a wrong ENOENT, and must work again, with the data written before,
// once the cluster is restarted on the same data directory.
func TestMountSurvivesClusterLoss(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "loss")
	up := startUp(t, dir, "--mount", "")
	mp := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(mp, 0o755))
	const opTimeout = 4 * time.Second
	mnt := startMount(t, mp, "--data-dir", dir, "default", mp, "-o", "op_timeout=4")

	before := bytes.Repeat([]byte("cairn-before-loss\n"), 5000)
	must(t, os.MkdirAll(filepath.Join(mp, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(mp, "d", "before"), before, 0o644))
	// Small files too: their bytes are journaled in the data nodes'
	// extent-store logs, and each node's restart writes them again.
	small := make([][]byte, 8)
	for i := range small {
		small[i] = bytes.Repeat([]byte{byte('a' + i)}, 4096-i)
		must(t, os.WriteFile(filepath.Join(mp, "d", fmt.Sprintf("small-%d", i)), small[i], 0o644))
	}

	// Lose the whole cluster: cairn up and every master, meta and data node.
	st := getStatus(t, dir)
	_ = up.cmd.Process.Kill()
	for _, n := range st.Nodes {
		if n.Pid > 0 {
			_ = syscall.Kill(n.Pid, syscall.SIGKILL)
		}
	}
	<-up.done
	for _, n := range st.Nodes {
		for i := 0; n.Pid > 0 && i < 100 && syscall.Kill(n.Pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Every kind of operation fails within a bounded time with a transport
	// error. The bound allows the op timeout plus one attempt and the
	// kernel's own retries of a lookup.
	bound := 3*opTimeout + 5*time.Second
	checks := []struct {
		name string
		op   func() error
	}{
		{"stat of a new name", func() error { _, err := os.Stat(filepath.Join(mp, "d", "never-seen")); return err }},
		{"create", func() error { return os.WriteFile(filepath.Join(mp, "d", "during"), []byte("x"), 0o644) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(mp, "newdir"), 0o755) }},
		{"readdir", func() error { _, err := os.ReadDir(filepath.Join(mp, "d")); return err }},
	}
	for _, c := range checks {
		start := time.Now()
		errc := make(chan error, 1)
		go func() { errc <- c.op() }()
		select {
		case err := <-errc:
			took := time.Since(start)
			if c.name == "readdir" && err == nil {
				// The kernel may answer a listing it has cached; that is
				// not a wrong answer.
				t.Logf("%s: served from the kernel cache after %v", c.name, took)
				continue
			}
			if !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, syscall.EIO) {
				t.Errorf("%s with the cluster down: %v after %v, want ETIMEDOUT or EIO", c.name, err, took)
			}
			t.Logf("%s with the cluster down: %v after %v", c.name, err, took.Round(time.Millisecond))
		case <-time.After(bound):
			t.Fatalf("%s with the cluster down: no answer after %v (the mount hangs)\n%s", c.name, bound, mnt.output())
		}
	}

	// The cluster comes back on the same data directory and ports; the
	// mount recovers without a remount.
	startUp(t, dir, "--mount", "")
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := os.WriteFile(filepath.Join(mp, "d", "after"), []byte("after"), 0o644)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount did not recover within 60s of the cluster's return: %v\n%s", err, mnt.output())
		}
		time.Sleep(500 * time.Millisecond)
	}
	got, err := os.ReadFile(filepath.Join(mp, "d", "before"))
	must(t, err)
	if !bytes.Equal(got, before) {
		t.Fatalf("file written before the loss: %d bytes, want %d", len(got), len(before))
	}
	for i, want := range small {
		got, err := os.ReadFile(filepath.Join(mp, "d", fmt.Sprintf("small-%d", i)))
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Fatalf("small file %d written before the loss: %d bytes, want %d", i, len(got), len(want))
		}
	}
	// A listing asks every meta partition, so it recovers when the last
	// of them has a leader again, which may be after the write above.
	for {
		es, err := os.ReadDir(filepath.Join(mp, "d"))
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if err == nil && slices.Contains(names, "after") && slices.Contains(names, "before") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listing 60s after the cluster's return: %v, %v\n%s", names, err, mnt.output())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
