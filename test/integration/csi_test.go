package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// TestCSISanity runs the CSI conformance suite (csi-test's sanity
// package, as csi-sanity does) against 'cairn csi' serving a default
// 'cairn up' cluster: volumes of the default kind (a directory with a
// quota), published by real FUSE mounts at the suite's target paths.
func TestCSISanity(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "csi")
	startUp(t, dir, "--mount", "")
	work := t.TempDir()
	sock := filepath.Join(work, "csi.sock")
	cmd := exec.Command(cairnBin, "csi", "--endpoint", "unix://"+sock, "--data-dir", dir, "--node-id", "node-a",
		"--mount-log-dir", work)
	cmd.Env = cleanEnv()
	logf, err := os.Create(filepath.Join(work, "csi.log"))
	must(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(work, "csi.log"))
			t.Logf("cairn csi log:\n%s", b)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cairn csi did not create its socket in 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(work, "target")
	cfg.StagingPath = filepath.Join(work, "staging")
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
	if os.Getenv("CSI_LOG") != "" {
		b, _ := os.ReadFile(filepath.Join(work, "csi.log"))
		t.Logf("%s", b)
	}
}
