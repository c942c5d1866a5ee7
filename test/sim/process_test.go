package sim

import (
	"os"
	"os/exec"
	"testing"
)

// childEnv names the test a child process runs in earnest.
const childEnv = "CAIRN_SIM_CHILD"

// ownProcess runs the calling test in a child process of its own and
// reports whether this process is that child, which then runs the test's
// body. A synctest bubble's channels must not meet another bubble's, and
// the store (Pebble) keeps objects holding channels in process-wide pools:
// two clusters one after the other in one process can trip over each
// other's leftovers. So every test here that starts a cluster gets a
// process of its own.
func ownProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in its own process: %v\n%s", t.Name(), err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
	return false
}
