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

// TestFSConfinedIdentity: `cairn fs` with an identity made by 'cairn
// client create --path /sub' works below /sub, which it shows as "/", as
// the identity's mount does: listing, put, get, mkdir, mv, stat and rm,
// all landing below /sub; ".." of its root is the root, so nothing
// outside /sub is reached. An identity bound to another volume works in
// that volume without --volume.
func TestFSConfinedIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fc")
	up := startUp(t, dir, "--mount", "")
	fs := func(tlsDir string, args ...string) result {
		args = append(append([]string{"fs"}, args...), "--data-dir", dir)
		if tlsDir != "" {
			args = append(args, "--tls-dir", tlsDir)
		}
		return cairn(t, args...)
	}
	ok := func(tlsDir string, args ...string) string {
		t.Helper()
		r := fs(tlsDir, args...)
		if r.code != 0 {
			t.Fatalf("cairn fs %v (identity %q): exit %d: %s", args, tlsDir, r.code, r.stderr)
		}
		return r.stdout
	}
	local := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(local, []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	// As the admin: /sub/d/f inside, /outside/secret and /f outside.
	ok("", "mkdir", "-p", "/sub/d")
	ok("", "put", local, "/sub/d/f")
	ok("", "mkdir", "/outside")
	ok("", "put", secret, "/outside/secret")
	ok("", "put", secret, "/f")
	sub := filepath.Join(t.TempDir(), "sub")
	mustCairn(t, "client", "create", "confined", "--data-dir", dir, "--volume", "default", "--path", "/sub", "--out", sub)

	if ls := ok(sub, "ls", "/"); !strings.HasSuffix(strings.TrimSpace(ls), " d") || strings.Contains(ls, "outside") || strings.Contains(ls, "sub") {
		t.Fatalf("ls / as the confined identity lists:\n%s", ls)
	}
	got := filepath.Join(t.TempDir(), "got")
	ok(sub, "get", "/d/f", got)
	if b, err := os.ReadFile(got); err != nil || string(b) != "inside" {
		t.Fatalf("get /d/f as the confined identity: %q, %v", b, err)
	}
	ok(sub, "put", local, "/new")
	ok(sub, "mkdir", "-p", "/x/y")
	ok(sub, "mv", "/new", "/x/y")
	if st := ok("", "stat", "/sub/x/y/new"); !strings.Contains(st, "size:  6") {
		t.Fatalf("the confined identity's file is not at /sub/x/y/new:\n%s", st)
	}
	if st := ok(sub, "stat", "/x/y/new"); !strings.Contains(st, "path:  /x/y/new") {
		t.Fatalf("stat as the confined identity:\n%s", st)
	}
	ok(sub, "rm", "-r", "/x")
	if r := fs("", "stat", "/sub/x"); r.code == 0 {
		t.Fatalf("/sub/x is still there after the confined identity's rm -r")
	}
	// ".." of the root is the root: /../f is /sub/f, which does not
	// exist, not the volume's /f; /../outside is nowhere.
	for _, p := range []string{"/../f", "/../outside/secret", "/d/../../f"} {
		if r := fs(sub, "get", p, got); r.code == 0 || !strings.Contains(r.stderr, "no such file") {
			t.Errorf("get %s as the confined identity: exit %d, %q; want no such file", p, r.code, r.stderr)
		}
	}
	if ls := ok(sub, "ls", "/.."); strings.Contains(ls, "outside") {
		t.Errorf("ls /.. as the confined identity lists the volume's root:\n%s", ls)
	}

	// Bound to the volume other and confined to /p there: no --volume.
	mustCairn(t, "volume", "create", "other", "--data-dir", dir)
	ok("", "mkdir", "-p", "/p/q", "--volume", "other")
	otherDir := filepath.Join(t.TempDir(), "other")
	mustCairn(t, "client", "create", "tenant", "--data-dir", dir, "--volume", "other", "--path", "/p", "--out", otherDir)
	if ls := ok(otherDir, "ls", "/"); !strings.HasSuffix(strings.TrimSpace(ls), " q") {
		t.Fatalf("ls / as the identity of volume other, confined to /p:\n%s", ls)
	}
	if r := fs(otherDir, "ls", "/", "--volume", "default"); r.code == 0 || !strings.Contains(r.stderr, `volume "other" only`) {
		t.Errorf("ls of volume default as the identity of volume other: exit %d, %q", r.code, r.stderr)
	}
	up.stop()
}
