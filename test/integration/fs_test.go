package integration

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFSCommands scripts a volume with `cairn fs` (no mount): directories,
// a multi-megabyte round trip, listing, rename, stat, removal and the errors.
func TestFSCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cf")
	up := startUp(t, dir, "--mount", "")
	fs := func(args ...string) result {
		return cairn(t, append(append([]string{"fs"}, args...), "--data-dir", dir)...)
	}
	must := func(args ...string) string {
		t.Helper()
		r := fs(args...)
		if r.code != 0 {
			t.Fatalf("cairn fs %v: exit %d: %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	data := make([]byte, 3<<20+12345)
	rand.Read(data)
	local := filepath.Join(t.TempDir(), "in")
	os.WriteFile(local, data, 0o644)
	must("mkdir", "-p", "/a/b/c")
	must("mkdir", "-p", "/a/b") // exists: fine with -p
	if r := fs("mkdir", "/a"); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("mkdir of an existing dir: %d %q", r.code, r.stderr)
	}
	must("put", local, "/a/b/c/data")
	out := filepath.Join(t.TempDir(), "out")
	must("get", "/a/b/c/data", out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatalf("get returned %d bytes, different from the %d put", len(got), len(data))
	}
	if ls := must("ls", "/a/b/c"); !strings.Contains(ls, "data") || !strings.Contains(ls, "3158073") {
		t.Fatalf("ls:\n%s", ls)
	}
	must("mv", "/a/b/c/data", "/a")
	if st := must("stat", "/a/data"); !strings.Contains(st, "size:  3158073") {
		t.Fatalf("stat after mv:\n%s", st)
	}
	if r := fs("rm", "/a"); r.code != 1 || !strings.Contains(r.stderr, "use -r") {
		t.Fatalf("rm of a directory: %d %q", r.code, r.stderr)
	}
	// Data nodes measure their usage every few seconds and report it with
	// their heartbeats: wait until the file shows.
	var usedBefore uint64
	for deadline := time.Now().Add(30 * time.Second); ; {
		if usedBefore = getStatus(t, dir).dataUsed(); usedBefore >= uint64(len(data)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("data partitions report %d used bytes 30s after a %d-byte put", usedBefore, len(data))
		}
		time.Sleep(500 * time.Millisecond)
	}
	must("rm", "-r", "/a")
	if ls := must("ls", "/"); strings.TrimSpace(ls) != "" {
		t.Fatalf("root not empty after rm -r:\n%s", ls)
	}
	// The deletion collector frees the file's extents on the data nodes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		used := getStatus(t, dir).dataUsed()
		if used+uint64(len(data)) <= usedBefore+64<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("data partitions use %d bytes 30s after deleting a %d-byte file (%d before)", used, len(data), usedBefore)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if r := fs("get", "/nope", out); r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Fatalf("get of a missing file: %d %q", r.code, r.stderr)
	}
	if r := fs("ls", "/", "--volume", "missing"); r.code != 1 || !strings.Contains(r.stderr, "missing") {
		t.Fatalf("missing volume: %d %q", r.code, r.stderr)
	}
	up.stop()
}
