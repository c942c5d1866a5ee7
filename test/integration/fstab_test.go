package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/localcluster"
)

// TestFstabMount: a line of /etc/fstab's form mounts a volume through
// mount(8) and the helper /sbin/mount.fuse.cairn (the cairn binary under
// that name), the mount outlives mount(8), 'umount' ends it and its
// process; a line naming a missing volume makes mount(8) fail with the
// mount's own message.
func TestFstabMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("no mount(8)")
	}
	const helper = "/sbin/mount.fuse.cairn"
	if _, err := os.Lstat(helper); err == nil {
		t.Skipf("%s exists already; not replacing it", helper)
	}
	if err := os.Symlink(cairnBin, helper); err != nil {
		t.Skipf("cannot install %s: %v", helper, err)
	}
	t.Cleanup(func() { os.Remove(helper) })

	dir := filepath.Join(t.TempDir(), "fstab")
	startUp(t, dir, "--mount", "")
	waitLeaders(t, dir)
	mp := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(mp, 0o755))
	logFile := filepath.Join(t.TempDir(), "mount.log")
	fstab := filepath.Join(t.TempDir(), "fstab")
	line := "cairn#default " + mp + " fuse.cairn data_dir=" + dir + ",_netdev,nofail,log=" + logFile + " 0 0\n"
	must(t, os.WriteFile(fstab, []byte(line), 0o644))
	t.Cleanup(func() {
		if ok, _ := localcluster.IsMounted(mp); ok {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	})

	if out, err := exec.Command("mount", "-T", fstab, mp).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("mount -T %s %s: %v\n%s\nmount log:\n%s", fstab, mp, err, out, log)
	}
	if ok, _ := localcluster.IsMounted(mp); !ok {
		t.Fatal("mount(8) returned but nothing is mounted")
	}
	must(t, os.WriteFile(filepath.Join(mp, "via-fstab"), []byte("hello"), 0o644))
	if b, err := os.ReadFile(filepath.Join(mp, "via-fstab")); err != nil || string(b) != "hello" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if out := mustCairn(t, "fs", "ls", "/", "--data-dir", dir); !strings.Contains(out, "via-fstab") {
		t.Errorf("the file written through the fstab mount is not in the volume:\n%s", out)
	}
	if out, err := exec.Command("umount", mp).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _ := exec.Command("pgrep", "-f", "cairn mount .* "+mp).Output()
		if len(strings.TrimSpace(string(out))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount's process is still running 10s after umount: %s", out)
		}
	}

	// A missing volume: mount(8) fails and says why.
	bad := filepath.Join(t.TempDir(), "fstab-bad")
	must(t, os.WriteFile(bad, []byte(strings.Replace(line, "cairn#default", "cairn#nosuchvolume", 1)), 0o644))
	out, err := exec.Command("mount", "-T", bad, mp).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not exist") {
		t.Fatalf("mount of a missing volume: %v\n%s", err, out)
	}
}
