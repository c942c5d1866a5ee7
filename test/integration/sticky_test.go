package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/pkg/localcluster"
)

// TestStickyRoot: the root of the volume 'cairn up' makes is 1777, so that
// on its mount, which every user of the host may use (allow_other, when
// cairn up runs as root), one user can neither remove nor rename another's
// file in the root, while the file's owner and root can, and anyone may
// create files there. A restarted 'cairn up' makes a root still at the old
// 0777 sticky and leaves a root of any other mode as it is.
func TestStickyRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cairn up mounts with allow_other only as root")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skipf("no setpriv to run commands as another user: %v", err)
	}
	// A mount point other users can reach: the test's temporary
	// directories are root's alone.
	base := t.TempDir()
	must(t, os.Chmod(base, 0o755))
	must(t, os.Chmod(filepath.Dir(base), 0o755))
	dir := filepath.Join(base, "sticky")
	up, mp := startMounted(t, dir)

	rootMode := func(want os.FileMode) {
		t.Helper()
		if ok, err := localcluster.IsMounted(mp); !ok {
			t.Fatalf("%s is not mounted: %v", mp, err)
		}
		st, err := os.Stat(mp)
		must(t, err)
		if got := st.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid); got != want {
			t.Fatalf("the volume root's mode is %v, want %v", got, want)
		}
	}
	rootMode(os.ModeSticky | 0o777)

	as := func(uid int, script string) error {
		out, err := exec.Command("setpriv", "--reuid", fmt.Sprint(uid), "--regid", fmt.Sprint(uid), "--clear-groups", "sh", "-ec", script).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	a, b := filepath.Join(mp, "a"), filepath.Join(mp, "b")
	if err := as(1000, "echo a > "+a+"; echo b > "+b); err != nil {
		t.Fatalf("user 1000 creates files in the root: %v", err)
	}
	for what, script := range map[string]string{
		"removes":                        "rm -f " + a,
		"renames":                        "mv " + a + " " + filepath.Join(mp, "taken"),
		"renames a file of its own over": "echo x > " + filepath.Join(mp, "x") + "; mv " + filepath.Join(mp, "x") + " " + b,
	} {
		if err := as(1001, script); err == nil || !strings.Contains(err.Error(), "Operation not permitted") {
			t.Errorf("user 1001 %s user 1000's file in the root: %v, want EPERM", what, err)
		}
	}
	if _, err := os.Stat(a); err != nil {
		t.Fatalf("user 1000's file after user 1001's attempts: %v", err)
	}
	if err := as(1000, "mv "+a+" "+filepath.Join(mp, "a2")+"; rm "+filepath.Join(mp, "a2")); err != nil {
		t.Errorf("user 1000 renames and removes its own file: %v", err)
	}
	must(t, os.Remove(b)) // root may
	must(t, os.Remove(filepath.Join(mp, "x")))

	// An earlier Cairn made roots 0777: a restart makes such a root
	// sticky; a mode someone chose stays.
	must(t, os.Chmod(mp, 0o777))
	rootMode(0o777)
	if code := up.stop(); code != 0 {
		t.Fatalf("cairn up exited %d:\n%s", code, up.output())
	}
	up = startUp(t, dir)
	if !strings.Contains(up.output(), "root's mode is now 1777") {
		t.Errorf("cairn up did not say it made the root sticky:\n%s", up.output())
	}
	rootMode(os.ModeSticky | 0o777)
	must(t, os.Chmod(mp, 0o755))
	if code := up.stop(); code != 0 {
		t.Fatalf("cairn up exited %d:\n%s", code, up.output())
	}
	up = startUp(t, dir)
	rootMode(0o755)
	up.stop()
}
