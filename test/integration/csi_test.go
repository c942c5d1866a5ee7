package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startCSI runs 'cairn csi' for the 'cairn up' cluster in dir, serving on
// a socket in work, and returns the socket's path.
func startCSI(t *testing.T, dir, work string) string {
	t.Helper()
	sock := filepath.Join(work, "csi.sock")
	cmd := exec.Command(cairnBin, "csi", "--endpoint", "unix://"+sock, "--data-dir", dir, "--node-id", "node-a",
		"--mount-log-dir", work)
	cmd.Env = cleanEnv()
	logf, err := os.Create(filepath.Join(work, "csi.log"))
	must(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(work, "csi.log"))
			t.Logf("cairn csi log:\n%s", b)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatal("cairn csi did not create its socket in 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCSISanity runs the CSI conformance suite (csi-test's sanity
// package, as csi-sanity does) against 'cairn csi' serving a default
// 'cairn up' cluster: volumes of the default kind (a directory with a
// quota), published by real FUSE mounts at the suite's target paths.
// Skipped specs are those of capabilities the driver does not offer
// (snapshots, clones, listing, attach, staging), docs/ecosystem.md.
func TestCSISanity(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "csi")
	startUp(t, dir, "--mount", "")
	work := t.TempDir()
	sock := startCSI(t, dir, work)

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(work, "target")
	cfg.StagingPath = filepath.Join(work, "staging")
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
}

// TestCSIVolumes follows volumes of both kinds through the driver as
// Kubernetes would use them: a subdir volume of 8 MiB shows 8 MiB in df
// inside the pod's mount, refuses writes past it with EDQUOT, grows by
// expansion while mounted, is shared by two mounts (ReadWriteMany) and is
// gone after deletion; a whole-volume one is a Cairn volume of its own.
func TestCSIVolumes(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "csi")
	startUp(t, dir, "--mount", "")
	work := t.TempDir()
	sock := startCSI(t, dir, work)
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer cc.Close()
	ctrl, node := csipb.NewControllerClient(cc), csipb.NewNodeClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rwx := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
	publish := func(id, target string) {
		t.Helper()
		_, err := node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: rwx})
		must(t, err)
		t.Cleanup(func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) })
	}
	unpublish := func(id, target string) {
		t.Helper()
		_, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		must(t, err)
	}
	totalBytes := func(p string) uint64 {
		var st syscall.Statfs_t
		must(t, syscall.Statfs(p, &st))
		return st.Blocks * uint64(st.Bsize)
	}

	// A subdir volume of 8 MiB.
	vol, err := ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-one", VolumeCapabilities: []*csipb.VolumeCapability{rwx},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 << 20}})
	must(t, err)
	id := vol.Volume.VolumeId
	a, b := filepath.Join(work, "pod-a"), filepath.Join(work, "pod-b")
	publish(id, a)
	publish(id, b)
	if got := totalBytes(a); got != 8<<20 {
		t.Fatalf("df in the pod: %d bytes, want the 8 MiB asked for", got)
	}
	must(t, os.WriteFile(filepath.Join(a, "shared"), []byte("from pod a"), 0o644))
	if got, err := os.ReadFile(filepath.Join(b, "shared")); err != nil || string(got) != "from pod a" {
		t.Fatalf("pod b reads %q, %v; want what pod a wrote", got, err)
	}
	big := make([]byte, 12<<20)
	if err := os.WriteFile(filepath.Join(a, "big"), big, 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("writing 12 MiB into an 8 MiB volume: %v, want EDQUOT", err)
	}
	exp, err := ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 << 20}})
	must(t, err)
	if exp.CapacityBytes != 32<<20 || exp.NodeExpansionRequired {
		t.Fatalf("expand: %v", exp)
	}
	deadline := time.Now().Add(10 * time.Second)
	for totalBytes(a) != 32<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("df in the pod after expanding to 32 MiB: %d bytes", totalBytes(a))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // every meta node hears of the new limit
	must(t, os.WriteFile(filepath.Join(a, "big"), big, 0o644))
	unpublish(id, a)
	unpublish(id, b)
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the target path is left after unpublish: %v", err)
	}
	_, err = ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	must(t, err)
	if out := mustCairn(t, "quota", "list", "default", "--data-dir", dir); strings.Contains(out, "pvc-one") {
		t.Fatalf("the volume's quota is left after deletion:\n%s", out)
	}
	if r := cairn(t, "fs", "stat", "/csi/pvc-one", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Fatalf("stat of the volume's directory after deletion: exit %d, want 1 and ENOENT:\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A whole Cairn volume.
	vol, err = ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-two", VolumeCapabilities: []*csipb.VolumeCapability{rwx},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}, Parameters: map[string]string{"kind": "volume", "replicas": "3"}})
	must(t, err)
	id = vol.Volume.VolumeId
	name := strings.TrimPrefix(id, "volume:")
	if out := mustCairn(t, "volume", "list", "--data-dir", dir); !strings.Contains(out, name) {
		t.Fatalf("volume %s not listed:\n%s", name, out)
	}
	c := filepath.Join(work, "pod-c")
	publish(id, c)
	if got := totalBytes(c); got != 64<<20 {
		t.Fatalf("df of a whole-volume mount: %d bytes, want its 64 MiB capacity", got)
	}
	must(t, os.WriteFile(filepath.Join(c, "f"), []byte("whole"), 0o644))
	unpublish(id, c)
	_, err = ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	must(t, err)
	if out := mustCairn(t, "volume", "list", "--data-dir", dir); strings.Contains(out, name) {
		t.Fatalf("volume %s is left after deletion:\n%s", name, out)
	}
}
