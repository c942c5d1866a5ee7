package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/localcluster"
)

// namesAway returns n names that the volume routes, under parent, to
// another partition than parent's home: their creates and unlinks need the
// parent's TouchDir on another partition.
func namesAway(t *testing.T, v *client.Volume, parent uint64, prefix string, n int) []string {
	t.Helper()
	home := v.HomeOf(parent)
	var out []string
	for i := 0; len(out) < n; i++ {
		if name := fmt.Sprintf("%s%d", prefix, i); v.RouteName(parent, name) != home {
			out = append(out, name)
		}
	}
	return out
}

// requestCounter measures metadata requests: the meta nodes' count of
// client requests (every client of the cluster) and one client's own.
type requestCounter struct {
	t   *testing.T
	dir string
	v   *client.Volume
}

func (c requestCounter) read() (server, own float64) {
	l, err := localcluster.LoadLayout(c.dir)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, p := range l.Procs {
		if p.Role != "meta" {
			continue
		}
		for _, line := range scrapeLines(c.t, p.MetricsAddr, "cairn_meta_client_requests_total") {
			// The master's own reads (balancer, orphan sweeper) are not
			// this test's.
			if !strings.Contains(line.labels, `rpc="partition_stats"`) && !strings.Contains(line.labels, `rpc="scan"`) {
				server += line.value
			}
		}
	}
	return server, float64(c.v.Stats().MetaRequests)
}

// per runs fn (n operations) and returns the requests per operation the
// meta nodes counted and the client sent.
func (c requestCounter) per(n int, fn func()) (server, own float64) {
	s0, o0 := c.read()
	fn()
	s1, o1 := c.read()
	return (s1 - s0) / float64(n), (o1 - o0) / float64(n)
}

// TestRequestsPerNameOp counts, from the meta nodes' metrics and the
// client's own, the metadata requests of create, mkdir, mknod, symlink,
// lookup/stat, open and unlink through the SDK's inode API and through
// the stateless path API, for names that route to another partition than
// their parent's home (the partition sends the parent's TouchDir, and an
// unlink's link drop, itself): one request each.
func TestRequestsPerNameOp(t *testing.T) {
	dir := t.TempDir()
	startUp(t, dir, "--mount", "")
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if n := len(v.Partitions()); n < 2 {
		t.Fatalf("volume has %d meta partitions, need 2", n)
	}
	c := requestCounter{t, dir, v}
	// The client learns every partition's leader first: a request sent
	// to a follower is counted there too before it is redirected.
	_, err := v.StatFS(ctx)
	must("statfs", err)
	const n = 30
	want := func(what string, fn func()) {
		t.Helper()
		server, own := c.per(n, fn)
		t.Logf("%-28s %.3f requests per operation (meta nodes), %.3f (client)", what, server, own)
		// The meta nodes also count a request a follower redirected to
		// the leader (after a leader change): a little slack there.
		if own != 1 || server > 1.05 {
			t.Errorf("%s: %.3f requests per operation sent by the client, %.3f counted by the meta nodes; want 1", what, own, server)
		}
	}
	follow0 := metaCounter(t, dir, "cairn_meta_follow_ups_total")

	// The inode API (as a FUSE mount uses it).
	d, err := v.Mkdir(ctx, client.RootIno, "inode", 0o755, 0, 0)
	must("mkdir", err)
	names := namesAway(t, v, d.Ino, "f", n)
	dirs := namesAway(t, v, d.Ino, "d", n)
	fifos := namesAway(t, v, d.Ino, "p", n)
	links := namesAway(t, v, d.Ino, "l", n)
	inos := make([]uint64, n)
	want("create", func() {
		for i, name := range names {
			a, err := v.Create(ctx, d.Ino, name, 0o644, 0, 0)
			must("create", err)
			inos[i] = a.Ino
		}
	})
	want("mkdir", func() {
		for _, name := range dirs {
			_, err := v.Mkdir(ctx, d.Ino, name, 0o755, 0, 0)
			must("mkdir", err)
		}
	})
	want("mknod", func() {
		for _, name := range fifos {
			_, err := v.Mknod(ctx, d.Ino, name, syscall.S_IFIFO|0o644, 0, 0, 0)
			must("mknod", err)
		}
	})
	want("symlink", func() {
		for _, name := range links {
			_, err := v.Symlink(ctx, d.Ino, name, "target", 0, 0)
			must("symlink", err)
		}
	})
	want("lookup", func() {
		for _, name := range names {
			_, err := v.LookupChild(ctx, d.Ino, name)
			must("lookup", err)
		}
	})
	want("lookup of a missing name", func() {
		for _, name := range names {
			_, err := v.LookupChild(ctx, d.Ino, name+"-missing")
			wantErrno(t, "lookup of a missing name", err, syscall.ENOENT)
		}
	})
	want("open+close", func() {
		for _, ino := range inos {
			f, err := v.OpenFile(ctx, ino, syscall.O_RDWR)
			must("open", err)
			must("close", f.Close(ctx))
		}
	})
	want("create+open+close", func() {
		for _, name := range names {
			_, f, err := v.CreateFile(ctx, d.Ino, name+"-o", 0o644, 0, 0, syscall.O_WRONLY)
			must("create and open", err)
			must("close", f.Close(ctx))
		}
	})
	// Renames within the directory, with the names' hints as a mount
	// sends them and without: one request, which the old name's partition
	// runs, placing the new name on its partition first when it is
	// another (issue: at most 2).
	eachAtMost := func(what string, limit int64, names []string, fn func(i int, name string)) {
		t.Helper()
		server, own := c.per(len(names), func() {
			for i, name := range names {
				before := v.Stats().MetaRequests
				fn(i, name)
				if got := v.Stats().MetaRequests - before; got > limit {
					t.Errorf("%s of %q: %d requests sent by the client, want at most %d", what, name, got, limit)
				}
			}
		})
		t.Logf("%-28s %.3f requests per operation (meta nodes), %.3f (client)", what, server, own)
	}
	moved := make([]*client.Attr, n)
	for i, name := range names {
		moved[i], err = v.LookupChild(ctx, d.Ino, name+"-o")
		must("lookup", err)
	}
	eachAtMost("rename in a directory", 1, names, func(i int, name string) {
		hctx := client.WithRenameHints(ctx, &client.NameHint{Ino: moved[i].Ino, Mode: moved[i].Mode}, &client.NameHint{Absent: true})
		must("rename", v.Rename(hctx, d.Ino, name+"-o", d.Ino, name+"-m", 0))
	})
	eachAtMost("rename without hints", 1, names, func(i int, name string) {
		must("rename", v.Rename(ctx, d.Ino, name+"-m", d.Ino, name+"-p", 0))
	})
	// RENAME_NOREPLACE (mv's first try) is one request as well, and so is
	// its EEXIST over a name that exists.
	eachAtMost("rename, noreplace", 1, names, func(i int, name string) {
		must("rename", v.Rename(ctx, d.Ino, name+"-p", d.Ino, name+"-n", client.RenameNoreplace))
	})
	eachAtMost("rename, noreplace, refused", 1, names, func(i int, name string) {
		wantErrno(t, "rename, noreplace, over a file", v.Rename(ctx, d.Ino, name+"-n", d.Ino, name, client.RenameNoreplace), syscall.EEXIST)
	})
	// Over an existing file: the replaced inode's link is dropped (and it
	// is evicted) by its home, server to server.
	eachAtMost("rename over a file", 1, names, func(i int, name string) {
		must("rename", v.Rename(ctx, d.Ino, name+"-n", d.Ino, name, 0))
	})
	// A directory, there and back (two renames): the partition locks it
	// on every partition first (as follow-ups) and lifts the locks in a
	// batch afterwards.
	eachAtMost("directory renamed and back", 2, dirs, func(i int, name string) {
		must("rename", v.Rename(ctx, d.Ino, name, d.Ino, name+"-r", 0))
		must("rename", v.Rename(ctx, d.Ino, name+"-r", d.Ino, name, 0))
	})
	// rmdir of a directory homed on its name's partition (as mkdir makes
	// it): one request; that partition fences the directory on the
	// others, deletes it, sends the parent's TouchDir and lifts the
	// fences in batches, all server to server.
	rdirs := namesAway(t, v, d.Ino, "x", n)
	rinos := make([]client.Attr, n)
	for i, name := range rdirs {
		a, err := v.Mkdir(ctx, d.Ino, name, 0o755, 0, 0)
		must("mkdir", err)
		rinos[i] = *a
	}
	for i, name := range rdirs {
		if v.HomeOf(rinos[i].Ino) != v.RouteName(d.Ino, name) {
			t.Fatalf("directory %q is homed on partition %d, its name on %d: mkdir keeps them together", name, v.HomeOf(rinos[i].Ino), v.RouteName(d.Ino, name))
		}
	}
	eachAtMost("rmdir", 1, rdirs, func(i int, name string) {
		must("rmdir", v.Rmdir(client.WithRmdirHint(ctx, &client.NameHint{Ino: rinos[i].Ino, Mode: rinos[i].Mode}), d.Ino, name))
	})
	for _, group := range []struct {
		what  string
		names []string
	}{{"unlink", names}, {"unlink of a fifo", fifos}, {"unlink of a symlink", links}} {
		want(group.what, func() {
			for _, name := range group.names {
				must(group.what, v.Unlink(ctx, d.Ino, name))
			}
		})
	}
	a, err := v.GetAttr(ctx, d.Ino)
	must("getattr", err)
	if a.Nlink != 2+n {
		t.Errorf("parent nlink %d after %d mkdirs, want %d", a.Nlink, n, 2+n)
	}
	for _, ino := range inos {
		if _, err := v.GetAttr(ctx, ino); client.ErrnoOf(err) != syscall.ENOENT {
			t.Errorf("inode %d after its unlink: %v, want ENOENT", ino, err)
		}
	}

	// The path API. A first pass through /path warms the replicas.
	_, err = v.MkdirPath(ctx, "/path", 0o755, rootCred)
	must("mkdir /path", err)
	pa, err := v.StatPath(ctx, "/path", rootCred)
	must("stat /path", err)
	pnames := namesAway(t, v, pa.Ino, "f", n)
	pdirs := namesAway(t, v, pa.Ino, "d", n)
	plinks := namesAway(t, v, pa.Ino, "l", n)
	_, err = v.StatPath(ctx, "/path/"+pnames[0], rootCred)
	wantErrno(t, "warm-up stat", err, syscall.ENOENT)
	want("path create", func() {
		for _, name := range pnames {
			_, err := v.CreatePath(ctx, "/path/"+name, 0o644, rootCred)
			must("create", err)
		}
	})
	want("path mkdir", func() {
		for _, name := range pdirs {
			_, err := v.MkdirPath(ctx, "/path/"+name, 0o755, rootCred)
			must("mkdir", err)
		}
	})
	want("path symlink", func() {
		for _, name := range plinks {
			_, err := v.SymlinkPath(ctx, "target", "/path/"+name, rootCred)
			must("symlink", err)
		}
	})
	want("path stat", func() {
		for _, name := range pnames {
			_, err := v.StatPath(ctx, "/path/"+name, rootCred)
			must("stat", err)
		}
	})
	want("path open+close", func() {
		for _, name := range pnames {
			f, err := v.OpenPath(ctx, "/path/"+name, syscall.O_RDONLY, 0, rootCred)
			must("open", err)
			must("close", f.Close(ctx))
		}
	})
	want("path open(O_CREAT)+close", func() {
		for _, name := range pnames {
			f, err := v.OpenPath(ctx, "/path/"+name+"-o", syscall.O_CREAT|syscall.O_WRONLY, 0o644, rootCred)
			must("open", err)
			must("close", f.Close(ctx))
		}
	})
	want("path unlink", func() {
		for _, name := range pnames {
			must("unlink", v.UnlinkPath(ctx, "/path/"+name, rootCred))
		}
	})
	want("path unlink of a symlink", func() {
		for _, name := range plinks {
			must("unlink", v.UnlinkPath(ctx, "/path/"+name, rootCred))
		}
	})
	// The path API sends the rename to the old name's partition, which
	// resolves the directory and runs it.
	eachAtMost("path rename in a directory", 1, pnames, func(i int, name string) {
		must("rename", v.RenamePath(ctx, "/path/"+name+"-o", "/path/"+name+"-m", rootCred))
	})
	prdirs := namesAway(t, v, pa.Ino, "x", n)
	for _, name := range prdirs {
		_, err := v.MkdirPath(ctx, "/path/"+name, 0o755, rootCred)
		must("mkdir", err)
	}
	eachAtMost("path rmdir", 1, prdirs, func(i int, name string) {
		must("rmdir", v.RmdirPath(ctx, "/path/"+name, rootCred))
	})
	pa, err = v.StatPath(ctx, "/path", rootCred)
	must("stat /path", err)
	if pa.Nlink != 2+n {
		t.Errorf("/path nlink %d after %d mkdirs, want %d", pa.Nlink, n, 2+n)
	}
	if f := metaCounter(t, dir, "cairn_meta_follow_ups_total") - follow0; f < 4*n {
		t.Errorf("the meta nodes sent %.0f follow-ups, want at least %d: the names did not test a parent homed elsewhere", f, 4*n)
	}

	// Concurrent rmdirs, one parent per thread, as the metadata benchmark
	// runs them: every fence bumps its partition's namespace epoch under
	// the other rmdirs, yet each rmdir still costs one request and fences
	// each other partition about once.
	const threads, per = 8, 8
	rmdirFences := func() float64 {
		l, err := localcluster.LoadLayout(dir)
		must("layout", err)
		var sum float64
		for _, p := range l.Procs {
			if p.Role != "meta" {
				continue
			}
			for _, line := range scrapeLines(t, p.MetricsAddr, "cairn_meta_follow_ups_total") {
				if strings.Contains(line.labels, `step="rmdir_fence"`) {
					sum += line.value
				}
			}
		}
		return sum
	}
	subs := make([][]string, threads)
	parents := make([]uint64, threads)
	for g := range threads {
		par, err := v.Mkdir(ctx, client.RootIno, fmt.Sprint("conc", g), 0o755, 0, 0)
		must("mkdir", err)
		parents[g], subs[g] = par.Ino, namesAway(t, v, par.Ino, "s", per)
		for _, name := range subs[g] {
			_, err := v.Mkdir(ctx, par.Ino, name, 0o755, 0, 0)
			must("mkdir", err)
		}
	}
	fences0 := rmdirFences()
	server, own := c.per(threads*per, func() {
		var wg sync.WaitGroup
		for g := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, name := range subs[g] {
					if err := v.Rmdir(ctx, parents[g], name); err != nil {
						t.Errorf("concurrent rmdir %d/%s: %v", parents[g], name, err)
					}
				}
			}()
		}
		wg.Wait()
	})
	fences := (rmdirFences() - fences0) / (threads * per)
	others := float64(len(v.Partitions()) - 1)
	t.Logf("concurrent rmdir: %.3f requests per operation (meta nodes), %.3f (client), %.2f fences sent (%.0f other partitions)", server, own, fences, others)
	if own > 1 || fences > 1.25*others {
		t.Errorf("concurrent rmdir: %.3f requests, %.2f fences per rmdir; want 1 and about %.0f", own, fences, others)
	}
	runFsck(t, dir, 0, "--grace", "0s")
}

// TestCreateRacingRmdir creates files (named to route away from the
// directory's home: the TouchDir runs alongside the create) in directories
// that another client removes at the same time, unlinking what it lists
// until its rmdir succeeds; the creators go on after it. A create that
// succeeds has its name in place until the remover unlinks it; one that
// loses the race (fenced, or its parent's TouchDir finds the parent gone
// and the create is taken back) fails with ENOENT; no create that starts
// after the rmdir returned succeeds; in the end fsck finds no name under a
// removed directory, no orphan and no wrong link count.
func TestCreateRacingRmdir(t *testing.T) {
	dir := t.TempDir()
	startUp(t, dir, "--mount", "")
	v, remover := openClient(t, dir), openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const rounds, creators, perCreator, afterRemoval = 6, 6, 30, 2
	var created, refused, lateOK int
	for r := range rounds {
		name := fmt.Sprintf("race%d", r)
		d, err := v.Mkdir(ctx, client.RootIno, name, 0o755, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var removedAt time.Time
		removed := make(chan struct{})
		var wg sync.WaitGroup
		for g := range creators {
			names := namesAway(t, v, d.Ino, fmt.Sprintf("g%d-", g), perCreator+afterRemoval)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i, n := range names {
					if i == perCreator {
						// The rest after the rmdir, once the remover
						// has lifted its fences (it lifts those of a
						// removed directory in batches, within
						// milliseconds): the name's partition lets the
						// create through, the TouchDir finds the
						// directory gone.
						<-removed
						time.Sleep(200 * time.Millisecond)
					}
					start := time.Now()
					var err error
					if i%2 == 1 {
						_, err = v.Mkdir(ctx, d.Ino, n, 0o755, 0, 0)
					} else {
						_, err = v.Create(ctx, d.Ino, n, 0o644, 0, 0)
					}
					mu.Lock()
					switch errno := client.ErrnoOf(err); {
					case errno == 0:
						created++
						if !removedAt.IsZero() && start.After(removedAt) {
							lateOK++
						}
					case errno == syscall.ENOENT:
						refused++
					default:
						t.Errorf("create %d/%s: %v", d.Ino, n, err)
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(r%4) * 5 * time.Millisecond)
		for {
			ents, _, err := remover.ReadDir(ctx, d.Ino, "", 4096)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Type == syscall.S_IFDIR {
					err = remover.Rmdir(ctx, d.Ino, e.Name)
				} else {
					err = remover.Unlink(ctx, d.Ino, e.Name)
				}
				if err != nil && client.ErrnoOf(err) != syscall.ENOENT {
					t.Fatalf("remove %s: %v", e.Name, err)
				}
			}
			err = remover.Rmdir(ctx, client.RootIno, name)
			if err == nil {
				mu.Lock()
				removedAt = time.Now()
				mu.Unlock()
				close(removed)
				break
			}
			if e := client.ErrnoOf(err); e != syscall.ENOTEMPTY && e != syscall.EBUSY {
				t.Fatalf("rmdir %s: %v", name, err)
			}
		}
		wg.Wait()
	}
	l, err := localcluster.LoadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	var undone float64
	for _, p := range l.Procs {
		if p.Role == "meta" {
			for _, line := range scrapeLines(t, p.MetricsAddr, "cairn_meta_follow_ups_total") {
				if strings.Contains(line.labels, `step="undo_create"`) {
					undone += line.value
				}
			}
		}
	}
	t.Logf("%d creates succeeded, %d refused (parent removed), %.0f of them taken back after the parent's TouchDir", created, refused, undone)
	if refused == 0 || created == 0 || undone == 0 {
		t.Errorf("the race did not happen: %d created, %d refused, %.0f taken back", created, refused, undone)
	}
	if lateOK > 0 {
		t.Errorf("%d creates that started after their directory was removed succeeded", lateOK)
	}
	runFsck(t, dir, 0, "--grace", "0s")
}

// fuseCost is what one FUSE request of a kind may cost in metadata
// requests: one for every request that reads or changes metadata, none
// for closing a file without writes.
var fuseCost = map[string]float64{
	"lookup": 1, "getattr": 1, "create": 1, "mkdir": 1, "mknod": 1, "symlink": 1,
	"unlink": 1, "open": 1, "readlink": 1, "flush": 0, "release": 0,
	// A rename within one directory: one request, which the old name's
	// partition runs.
	"rename": 1,
}

// fuseOps reads the mount's FUSE request counts by op (every errno).
func fuseOps(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for op := range fuseCost {
		for _, line := range scrapeLines(t, addr, "cairn_fuse_requests_total") {
			if strings.Contains(line.labels, `op="`+op+`"`) {
				out[op] += line.value
			}
		}
	}
	return out
}

// TestMountRequestsPerOp drives a `cairn up` mount with creat, mkdir,
// mknod, symlink, stat, open, rename and unlink on names that route to another
// partition than their directory's home, and checks from the mount's
// metrics that every FUSE request costs one metadata request at most
// (LOOKUP, GETATTR, CREATE, MKDIR, MKNOD, SYMLINK, UNLINK, OPEN) and a
// FLUSH or RELEASE of an unwritten file none. It logs the requests per
// system call (the kernel adds a LOOKUP before a create and a GETATTR of
// the directory after each change in it).
func TestMountRequestsPerOp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rq")
	_, mp := startMounted(t, dir)
	maddr := mountMetricsAddr(t, mp)
	v := openClient(t, dir)
	d := filepath.Join(mp, "d")
	must(t, os.Mkdir(d, 0o755))
	st, err := os.Stat(d)
	must(t, err)
	ino := st.Sys().(*syscall.Stat_t).Ino
	const n = 30
	files := namesAway(t, v, ino, "f", n)
	dirs := namesAway(t, v, ino, "d", n)
	fifos := namesAway(t, v, ino, "p", n)
	links := namesAway(t, v, ino, "l", n)
	phase := func(what string, fn func(name string) error, names []string) (fuseDelta map[string]float64) {
		t.Helper()
		time.Sleep(100 * time.Millisecond) // asynchronous RELEASEs land
		ops0, m0 := fuseOps(t, maddr), metricValue(t, maddr, "cairn_client_meta_requests_total")
		for _, name := range names {
			if err := fn(filepath.Join(d, name)); err != nil {
				t.Fatalf("%s %s: %v", what, name, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		ops1, m1 := fuseOps(t, maddr), metricValue(t, maddr, "cairn_client_meta_requests_total")
		var bound float64
		var kinds []string
		fuseDelta = map[string]float64{}
		for op, c := range ops1 {
			if delta := c - ops0[op]; delta > 0 {
				fuseDelta[op] = delta
				bound += delta * fuseCost[op]
				kinds = append(kinds, fmt.Sprintf("%s %.0f", op, delta))
			}
		}
		sort.Strings(kinds)
		t.Logf("%-10s %.2f metadata requests per call; FUSE requests: %s", what, (m1-m0)/float64(len(names)), strings.Join(kinds, ", "))
		// One more is a retried attempt (the client counts every one).
		if m1-m0 > bound+1 {
			t.Errorf("%s: %.0f metadata requests for FUSE requests that may cost %.0f", what, m1-m0, bound)
		}
		return fuseDelta
	}
	phase("creat", func(p string) error {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}, files)
	phase("stat", func(p string) error { _, err := os.Stat(p); return err }, files)
	time.Sleep(1100 * time.Millisecond) // the kernel's entries and attributes expire
	phase("stat cold", func(p string) error { _, err := os.Stat(p); return err }, files)
	opened := phase("open", func(p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		return f.Close()
	}, files)
	// A read-only handle is opened with FOPEN_NOFLUSH: its close(2) does
	// not wait for a FLUSH round trip.
	if opened["flush"] != 0 {
		t.Errorf("%.0f FLUSH requests for %d read-only opens and closes, want none", opened["flush"], len(files))
	}
	phase("mkdir", func(p string) error { return os.Mkdir(p, 0o755) }, dirs)
	phase("mknod", func(p string) error { return syscall.Mkfifo(p, 0o644) }, fifos)
	phase("symlink", func(p string) error { return os.Symlink("target", p) }, links)
	renamed := make([]string, len(files))
	for i, f := range files {
		renamed[i] = "r" + f
	}
	phase("rename", func(p string) error { return os.Rename(p, filepath.Join(d, "r"+filepath.Base(p))) }, files)
	phase("unlink", func(p string) error { return os.Remove(p) }, append(append(renamed, fifos...), links...))
}

// scrapeLine is one sample of a metric: its labels ("{...}") and value.
type scrapeLine struct {
	labels string
	value  float64
}

// scrapeLines returns the samples of metric name at a Prometheus endpoint.
func scrapeLines(t *testing.T, addr, name string) []scrapeLine {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	var out []scrapeLine
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !strings.HasPrefix(f[0], name+"{") {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("metric %s: %v", f[0], err)
		}
		out = append(out, scrapeLine{labels: strings.TrimPrefix(f[0], name), value: v})
	}
	return out
}

// mountMetricsAddr finds the metrics address of the `cairn mount` serving
// mp (cairn up passes it --metrics) in its command line.
func mountMetricsAddr(t *testing.T, mp string) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "mount" || args[len(args)-1] != mp {
			continue
		}
		for i, a := range args[:len(args)-1] {
			if a == "--metrics" {
				return args[i+1]
			}
		}
	}
	t.Fatalf("no cairn mount of %s with --metrics found", mp)
	return ""
}
