package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// quotaRow is one quota of 'cairn quota list --json'.
type quotaRow struct {
	Path       string `json:"path"`
	Ino        uint64 `json:"ino"`
	MaxBytes   uint64 `json:"max_bytes"`
	MaxInodes  uint64 `json:"max_inodes"`
	UsedBytes  int64  `json:"used_bytes"`
	UsedInodes int64  `json:"used_inodes"`
	UsedKnown  bool   `json:"used_known"`
}

func quotaList(t *testing.T, dir string) map[string]quotaRow {
	t.Helper()
	var rows []quotaRow
	must(t, json.Unmarshal([]byte(mustCairn(t, "quota", "list", "default", "--json", "--data-dir", dir)), &rows))
	out := map[string]quotaRow{}
	for _, r := range rows {
		out[r.Path] = r
	}
	return out
}

// walkUsage counts what lies below root as a quota does: every inode
// once (not root itself), and the apparent sizes of files and symbolic
// links.
func walkUsage(t *testing.T, root string) (bytes, inodes int64) {
	t.Helper()
	seen := map[uint64]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		inodes++
		if m := st.Mode & syscall.S_IFMT; m == syscall.S_IFREG || m == syscall.S_IFLNK {
			bytes += st.Size
		}
		return nil
	})
	must(t, err)
	return bytes, inodes
}

// duUsage is what du(1) says of root: apparent bytes, and inodes with root
// itself (Cairn's directories have size 0).
func duUsage(t *testing.T, root string) (bytes, inodes int64) {
	t.Helper()
	for _, args := range [][]string{{"-s", "-b", root}, {"-s", "--inodes", root}} {
		out, err := exec.Command("du", args...).Output()
		must(t, err)
		var n int64
		if _, err := fmt.Sscan(string(out), &n); err != nil {
			t.Fatalf("du %v: %q", args, out)
		}
		if args[1] == "-b" {
			bytes = n
		} else {
			inodes = n - 1
		}
	}
	return bytes, inodes
}

// waitUsage waits until the quota on path reports what a walk of the
// mount finds (usage reaches the master with the meta nodes' heartbeats).
func waitUsage(t *testing.T, dir, mp, path string) quotaRow {
	t.Helper()
	wantBytes, wantInodes := walkUsage(t, filepath.Join(mp, path))
	duBytes, duInodes := duUsage(t, filepath.Join(mp, path))
	if duBytes != wantBytes || duInodes != wantInodes {
		t.Fatalf("%s: du says %d bytes %d inodes, the walk %d and %d", path, duBytes, duInodes, wantBytes, wantInodes)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		q := quotaList(t, dir)[path]
		if q.UsedKnown && q.UsedBytes == wantBytes && q.UsedInodes == wantInodes {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota of %s: %d bytes %d inodes used (known %v); du and a walk find %d bytes %d inodes",
				path, q.UsedBytes, q.UsedInodes, q.UsedKnown, wantBytes, wantInodes)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestQuotas runs directory quotas on a default 'cairn up' through its
// mount:
//   - usage equals du after 400 random creates, writes, truncates, renames
//     (of files in and out of the quota directories, of directories
//     within one), hard links, symlinks and deletes, under two nested
//     quotas and with a meta node killed (kill -9; it is in every meta
//     partition) halfway;
//   - a directory renamed between quota directories fails with EXDEV;
//   - creating past an inode limit and writing past a byte limit fail
//     with EDQUOT, within the documented slack, and the files written
//     before stay intact;
//   - df of a mount made at a quota directory shows the quota;
//   - usage knocked off by hand is found by 'cairn quota check' (exit 1)
//     and repaired by --repair.
func TestQuotas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "quota")
	_, mp := startMounted(t, dir)
	for _, d := range []string{"a", "a/sub", "b", "out"} {
		must(t, os.Mkdir(filepath.Join(mp, d), 0o755))
	}
	// Content before the quota: the recount of 'quota set' takes it in.
	must(t, os.WriteFile(filepath.Join(mp, "a/before"), bytes.Repeat([]byte("x"), 12345), 0o644))
	mustCairn(t, "quota", "set", "default", "/a", "--bytes", "64MiB", "--inodes", "5000", "--data-dir", dir)
	mustCairn(t, "quota", "set", "default", "/a/sub", "--inodes", "5000", "--data-dir", dir)
	waitUsage(t, dir, mp, "/a")

	// Random operations. Directories stay within their quota's tree;
	// files move anywhere.
	rng := rand.New(rand.NewPCG(7, 11))
	dirs := []string{"a", "a/sub", "b", "out"}
	var files []string
	nfile := 0
	pick := func() (string, int) {
		i := rng.IntN(len(files))
		return files[i], i
	}
	killed := false
	for step := 0; step < 400; step++ {
		if step == 200 {
			killMetaNode(t, dir)
			killed = true
		}
		switch op := rng.IntN(10); {
		case op <= 2 || len(files) < 5: // create and write
			nfile++
			p := filepath.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("f%d", nfile))
			must(t, os.WriteFile(filepath.Join(mp, p), make([]byte, rng.IntN(200_000)), 0o644))
			files = append(files, p)
		case op == 3: // append
			p, _ := pick()
			f, err := os.OpenFile(filepath.Join(mp, p), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.Write(make([]byte, rng.IntN(100_000)))
			must(t, err)
			must(t, f.Close())
		case op == 4: // truncate up or down
			p, _ := pick()
			must(t, os.Truncate(filepath.Join(mp, p), int64(rng.IntN(300_000))))
		case op == 5: // rename a file anywhere
			p, i := pick()
			nfile++
			np := filepath.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("f%d", nfile))
			var st syscall.Stat_t
			must(t, syscall.Lstat(filepath.Join(mp, p), &st))
			err := os.Rename(filepath.Join(mp, p), filepath.Join(mp, np))
			switch {
			case errors.Is(err, syscall.EXDEV) && st.Nlink > 1 && quotasOf(filepath.Dir(p)) != quotasOf(filepath.Dir(np)):
				// A file with several names stays under its quotas.
			case err != nil:
				t.Fatalf("rename %s to %s: %v", p, np, err)
			default:
				files[i] = np
			}
		case op == 6: // delete
			p, i := pick()
			must(t, os.Remove(filepath.Join(mp, p)))
			files = append(files[:i], files[i+1:]...)
		case op == 7: // a hard link in the same directory, a symlink
			p, _ := pick()
			nfile++
			l := filepath.Join(filepath.Dir(p), fmt.Sprintf("f%d", nfile))
			must(t, os.Link(filepath.Join(mp, p), filepath.Join(mp, l)))
			files = append(files, l)
			nfile++
			s := filepath.Join(filepath.Dir(p), fmt.Sprintf("s%d", nfile))
			must(t, os.Symlink(strings.Repeat("t", 1+rng.IntN(300)), filepath.Join(mp, s)))
		case op == 8: // a directory with files, renamed within its quota's tree
			nfile++
			base := dirs[rng.IntN(len(dirs))]
			d := filepath.Join(base, fmt.Sprintf("d%d", nfile))
			must(t, os.Mkdir(filepath.Join(mp, d), 0o755))
			for k := range 3 {
				must(t, os.WriteFile(filepath.Join(mp, d, fmt.Sprint(k)), make([]byte, rng.IntN(50_000)), 0o644))
			}
			nd := d + "-moved"
			must(t, os.Rename(filepath.Join(mp, d), filepath.Join(mp, nd)))
		default: // overwrite in place
			p, _ := pick()
			f, err := os.OpenFile(filepath.Join(mp, p), os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt(make([]byte, 4096), int64(rng.IntN(100_000)))
			must(t, err)
			must(t, f.Close())
		}
	}
	if !killed {
		t.Fatal("no meta node was killed")
	}
	// A crash between the steps of an operation across partitions may
	// leave drift (check repairs it); none of these operations ran while
	// the node died, so the counts must match as they are.
	for _, q := range []string{"/a", "/a/sub"} {
		got := waitUsage(t, dir, mp, q)
		t.Logf("quota %s: %d bytes, %d inodes, as du says", q, got.UsedBytes, got.UsedInodes)
	}

	// Directories do not move between quotas; files do.
	must(t, os.Mkdir(filepath.Join(mp, "a/dir"), 0o755))
	for _, to := range []string{"b/dir", "a/sub/dir"} {
		if err := os.Rename(filepath.Join(mp, "a/dir"), filepath.Join(mp, to)); !errors.Is(err, syscall.EXDEV) {
			t.Fatalf("rename of a directory from /a to /%s: %v, want EXDEV", to, err)
		}
	}
	must(t, os.Rename(filepath.Join(mp, "a/dir"), filepath.Join(mp, "a/dir2")))

	// EDQUOT on inodes and bytes, and df of a mount at the directory.
	must(t, os.Mkdir(filepath.Join(mp, "c"), 0o755))
	mustCairn(t, "quota", "set", "default", "/c", "--inodes", "60", "--bytes", "8MiB", "--no-recount", "--data-dir", dir)
	time.Sleep(1500 * time.Millisecond) // every meta node hears of it
	created := 0
	var edquot error
	for i := 0; i < 100 && edquot == nil; i++ {
		err := os.WriteFile(filepath.Join(mp, "c", fmt.Sprintf("n%d", i)), nil, 0o644)
		if errors.Is(err, syscall.EDQUOT) {
			edquot = err
		} else {
			must(t, err)
			created++
		}
		// A limit is soft by what the other partitions create between
		// two heartbeats (about 0.1 s while quotas are charged): a
		// creator at 50 files/s passes it by a few.
		time.Sleep(20 * time.Millisecond)
	}
	if edquot == nil || created < 60 || created > 70 {
		t.Fatalf("created %d files under an inode limit of 60, then %v (want EDQUOT after 60 to 70)", created, edquot)
	}
	for i := 0; i < created; i++ {
		must(t, os.Remove(filepath.Join(mp, "c", fmt.Sprintf("n%d", i))))
	}
	chunk := bytes.Repeat([]byte("quota-bytes!"), (1<<20)/12)
	var kept []string
	edquot = nil
	for i := 0; i < 20 && edquot == nil; i++ {
		name := filepath.Join(mp, "c", fmt.Sprintf("m%d", i))
		if err := os.WriteFile(name, chunk, 0o644); errors.Is(err, syscall.EDQUOT) {
			edquot = err
		} else {
			must(t, err)
			kept = append(kept, name)
		}
		time.Sleep(300 * time.Millisecond) // a paced writer: the soft limit can act
	}
	if edquot == nil || len(kept) < 7 || len(kept) > 9 {
		t.Fatalf("wrote %d files of %d bytes under a limit of 8 MiB, then %v (want EDQUOT after 7 to 9)", len(kept), len(chunk), edquot)
	}
	for _, name := range kept {
		got, err := os.ReadFile(name)
		must(t, err)
		if !bytes.Equal(got, chunk) {
			t.Fatalf("%s changed after EDQUOT", name)
		}
	}
	sub := filepath.Join(t.TempDir(), "sub")
	must(t, os.Mkdir(sub, 0o755))
	startMount(t, sub, "--data-dir", dir, "-o", "subdir=/c", "default", sub)
	if _, err := os.Stat(filepath.Join(sub, "m0")); err != nil {
		t.Fatalf("the mount at /c does not show /c/m0: %v", err)
	}
	var st syscall.Statfs_t
	must(t, syscall.Statfs(sub, &st))
	if total := st.Blocks * uint64(st.Bsize); total != 8<<20 {
		t.Fatalf("df of a mount at /c: %d bytes in total, want the quota's 8 MiB", total)
	}
	// The file whose close failed exists, empty: it counts too.
	n := uint64(len(listDir(t, filepath.Join(mp, "c"))))
	if st.Files != 60 || st.Ffree != 60-n {
		t.Fatalf("df -i of a mount at /c: %d inodes, %d free; want 60 and %d", st.Files, st.Ffree, 60-n)
	}

	// Drift, made by hand, found and repaired.
	mustCairn(t, "quota", "set", "default", "/a/sub", "--bytes", "1GiB", "--data-dir", dir) // a change of limits keeps the counts
	waitUsage(t, dir, mp, "/a/sub")
	knockOff(t, dir, "/a/sub")
	if r := cairn(t, "quota", "check", "default", "/a/sub", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stdout, "drifted") {
		t.Fatalf("quota check after drift: exit %d, want 1 and a drifted line:\n%s%s", r.code, r.stdout, r.stderr)
	}
	out := mustCairn(t, "quota", "check", "default", "--repair", "--data-dir", dir)
	if !strings.Contains(out, "repaired") {
		t.Fatalf("quota check --repair repaired nothing:\n%s", out)
	}
	waitUsage(t, dir, mp, "/a/sub")
	waitUsage(t, dir, mp, "/a")
	mustCairn(t, "quota", "rm", "default", "/c", "--data-dir", dir)
	if _, ok := quotaList(t, dir)["/c"]; ok {
		t.Fatal("quota rm left the quota of /c")
	}
}

// quotasOf names the quotas of TestQuotas above directory d.
func quotasOf(d string) string {
	switch {
	case d == "a/sub" || strings.HasPrefix(d, "a/sub/"):
		return "a,a/sub"
	case d == "a" || strings.HasPrefix(d, "a/"):
		return "a"
	}
	return ""
}

// killMetaNode kills (kill -9) the meta node that leads the most meta
// partitions; with three meta nodes and three replicas it holds a replica
// of every one.
func killMetaNode(t *testing.T, dir string) {
	t.Helper()
	st := getStatus(t, dir)
	leads := map[uint64]int{}
	for _, p := range st.Partitions {
		if p.Kind == "meta" {
			leads[p.Leader]++
		}
	}
	var pid int
	var id uint64
	for _, n := range st.Nodes {
		if n.Role == "meta" && n.State == "alive" && (pid == 0 || leads[n.ID] > leads[id]) {
			pid, id = n.Pid, n.ID
		}
	}
	if pid == 0 {
		t.Fatal("no alive meta node")
	}
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	t.Logf("killed meta node %d (pid %d), leader of %d meta partitions", id, pid, leads[id])
}

// knockOff makes the usage of the quota on path drift, as a lost charge
// would: it rebases the quota 1000 bytes and 3 inodes off through the
// master, as an admin.
func knockOff(t *testing.T, dir, path string) {
	t.Helper()
	var q *pb.QuotaState
	cc, err := grpc.NewClient(masterAddr(getStatus(t, dir)), grpc.WithTransportCredentials(credentials.NewTLS(adminTLS(t, dir))))
	must(t, err)
	defer cc.Close()
	m := pb.NewMasterClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := m.GetVolume(ctx, &pb.VolumeRequest{Name: "default"})
	must(t, err)
	for _, s := range resp.Quotas {
		if s.Quota.Path == path {
			q = s
		}
	}
	if q == nil {
		t.Fatalf("no quota on %s", path)
	}
	_, err = m.SetQuota(ctx, &pb.SetQuotaRequest{Set: &pb.SetQuota{Volume: "default", Rebase: true, ExpectId: q.Quota.Id, LimitsOnly: true,
		Quota: &pb.Quota{Ino: q.Quota.Ino, BaseBytes: q.Quota.BaseBytes - 1000, BaseInodes: q.Quota.BaseInodes + 3}}})
	must(t, err)
}
