package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/localcluster"
)

var (
	rootCred = client.Cred{}
	userCred = client.Cred{Uid: 1000, Gid: 1000}
)

// metaCounter sums a counter (all labels) over the cluster's meta nodes.
func metaCounter(t *testing.T, dir, name string) float64 {
	t.Helper()
	l, err := localcluster.LoadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, p := range l.Procs {
		if p.Role == "meta" {
			v, _ := scrapeSum(t, p.MetricsAddr, name, true)
			sum += v
		}
	}
	return sum
}

// TestPathAPI checks the stateless path operations against a real
// cluster: results, errnos of bad paths, symlinks in the middle of a path,
// permissions of an intermediate directory, changes made through the
// inode API becoming visible at once, and one request per open measured
// from the meta nodes' metrics.
func TestPathAPI(t *testing.T) {
	dir := t.TempDir()
	startUp(t, dir, "--mount", "")
	v := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := v.MkdirPath(ctx, "/a", 0o755, rootCred)
	must("mkdir /a", err)
	_, err = v.MkdirPath(ctx, "/a/b", 0o755, rootCred)
	must("mkdir /a/b", err)
	f, err := v.OpenPath(ctx, "/a/b/f", syscall.O_CREAT|syscall.O_WRONLY, 0o644, rootCred)
	must("create /a/b/f", err)
	_, err = f.WriteAt([]byte("hello"), 0)
	must("write", err)
	must("close", f.Close(ctx))
	_, err = v.SymlinkPath(ctx, "b", "/a/l", rootCred)
	must("symlink", err)
	_, err = v.SymlinkPath(ctx, "/a/loop/x", "/a/loop", rootCred)
	must("symlink loop", err)

	for _, c := range []struct {
		path string
		want syscall.Errno
		size uint64
	}{
		{"/a/b/f", 0, 5},
		{"//a//b/./f", 0, 5},
		{"/a/../a/b/f", 0, 5},
		{"/a/l/f", 0, 5}, // a symlink in the middle
		{"/a/b/f/", syscall.ENOTDIR, 0},
		{"/a/b/f/g", syscall.ENOTDIR, 0},
		{"/a/x/f", syscall.ENOENT, 0},
		{"/a/b/x", syscall.ENOENT, 0},
		{"a/b/f", syscall.EINVAL, 0},
		{"", syscall.EINVAL, 0},
		{"/a/loop/y", syscall.ELOOP, 0},
		{"/a/" + strings.Repeat("n", 256), syscall.ENAMETOOLONG, 0},
		{"/a" + strings.Repeat("/b/..", 820), syscall.ENAMETOOLONG, 0},
	} {
		a, err := v.StatPath(ctx, c.path, userCred)
		wantErrno(t, fmt.Sprintf("stat %.40q", c.path), err, c.want)
		if c.want == 0 && a.Size != c.size {
			t.Errorf("stat %q: size %d, want %d", c.path, a.Size, c.size)
		}
	}
	if a, err := v.LstatPath(ctx, "/a/l", userCred); err != nil || a.Type() != syscall.S_IFLNK {
		t.Errorf("lstat of a symlink: %v %v", a, err)
	}
	if tgt, err := v.ReadlinkPath(ctx, "/a/l", userCred); err != nil || tgt != "b" {
		t.Errorf("readlink: %q %v", tgt, err)
	}
	ents, err := v.ReadDirPath(ctx, "/a", userCred)
	must("readdir /a", err)
	if len(ents) != 3 {
		t.Errorf("readdir /a: %d entries, want 3 (b, l, loop)", len(ents))
	}
	_, err = v.MkdirPath(ctx, "/a/b", 0o755, rootCred)
	wantErrno(t, "mkdir of an existing name", err, syscall.EEXIST)
	wantErrno(t, "unlink of a directory", v.UnlinkPath(ctx, "/a/b", rootCred), syscall.EISDIR)
	wantErrno(t, "rmdir of a non-empty directory", v.RmdirPath(ctx, "/a/b", rootCred), syscall.ENOTEMPTY)

	// Permissions: an intermediate directory closed to others (through
	// the inode API, as a FUSE mount would) is closed at once; reopened,
	// it opens at once.
	a, err := v.StatPath(ctx, "/a", rootCred)
	must("stat /a", err)
	_, err = v.Setattr(ctx, a.Ino, client.SetattrIn{Valid: client.SetMode, Mode: 0o700})
	must("chmod /a 0700", err)
	_, err = v.OpenPath(ctx, "/a/b/f", syscall.O_RDONLY, 0, userCred)
	wantErrno(t, "open below a directory without search permission", err, syscall.EACCES)
	_, err = v.OpenPath(ctx, "/a/b/f", syscall.O_RDONLY, 0, rootCred)
	wantErrno(t, "root opens below it", err, 0)
	_, err = v.SetattrPath(ctx, "/a", client.SetattrIn{Valid: client.SetMode, Mode: 0o755}, userCred)
	wantErrno(t, "chmod by another user", err, syscall.EPERM)
	_, err = v.SetattrPath(ctx, "/a", client.SetattrIn{Valid: client.SetMode, Mode: 0o755}, rootCred)
	must("chmod /a 0755", err)
	_, err = v.OpenPath(ctx, "/a/b/f", syscall.O_RDONLY, 0, userCred)
	wantErrno(t, "open after search permission came back", err, 0)
	_, err = v.OpenPath(ctx, "/a/b/f", syscall.O_WRONLY, 0, userCred)
	wantErrno(t, "open for writing a file of another user", err, syscall.EACCES)
	_, err = v.CreatePath(ctx, "/a/b/g", 0o644, userCred)
	wantErrno(t, "create in a directory of another user", err, syscall.EACCES)

	// Renames and removals through the path API are seen by the next
	// resolution on every partition.
	must("rename /a/b /a/c", v.RenamePath(ctx, "/a/b", "/a/c", rootCred))
	_, err = v.StatPath(ctx, "/a/b/f", userCred)
	wantErrno(t, "stat through the old name", err, syscall.ENOENT)
	_, err = v.StatPath(ctx, "/a/c/f", userCred)
	wantErrno(t, "stat through the new name", err, 0)
	must("unlink", v.UnlinkPath(ctx, "/a/c/f", rootCred))
	must("rmdir", v.RmdirPath(ctx, "/a/c", rootCred))
	_, err = v.CreatePath(ctx, "/a/c/f", 0o644, rootCred)
	wantErrno(t, "create under a removed directory", err, syscall.ENOENT)

	// One request per open, counted by the servers, once the namespace
	// replicas know the directories.
	const dirs, files = 8, 25
	for d := range dirs {
		_, err := v.MkdirPath(ctx, fmt.Sprintf("/a/d%d", d), 0o755, rootCred)
		must("mkdir", err)
		for i := range files {
			_, err := v.CreatePath(ctx, fmt.Sprintf("/a/d%d/f%d", d, i), 0o644, rootCred)
			must("create", err)
		}
	}
	open := func() {
		for d := range dirs {
			for i := range files {
				f, err := v.OpenPath(ctx, fmt.Sprintf("/a/d%d/f%d", d, i), syscall.O_RDONLY, 0, userCred)
				must("open", err)
				must("close", f.Close(ctx))
			}
		}
	}
	open() // fills the replicas
	r0, f0 := metaCounter(t, dir, "cairn_meta_client_requests_total"), metaCounter(t, dir, "cairn_meta_ns_fetches_total")
	open()
	r1, f1 := metaCounter(t, dir, "cairn_meta_client_requests_total"), metaCounter(t, dir, "cairn_meta_ns_fetches_total")
	perOpen := (r1 - r0) / float64(dirs*files)
	t.Logf("metadata requests per open (meta nodes' metrics): %.3f; namespace fetches: %.0f", perOpen, f1-f0)
	if perOpen > 1.05 || f1 != f0 {
		t.Errorf("%.3f requests per open (want at most 1.05) and %.0f namespace fetches (want 0) with warm replicas", perOpen, f1-f0)
	}
	if e := metaCounter(t, dir, "cairn_meta_ns_replica_entries"); e < dirs {
		t.Errorf("namespace replicas hold %.0f entries, want at least %d", e, dirs)
	}
}

// pathWindow is an interval in which a path was certainly absent (or a
// directory certainly closed to userCred): from the end of the change that
// removed it to the start of the change that brought it back.
type pathWindow struct {
	path     string
	from, to time.Time
}

// TestPathConcurrency has threads rename directories away and back, remove
// and recreate directories, and close and reopen directories' search
// permission, while other threads (on other clients) open, create and stat
// paths below them. No operation may succeed entirely inside a window in
// which its path's directory was certainly gone or closed to it: that
// would be an operation through a removed or renamed directory, or a
// permission bypass. CAIRN_LONG=1 runs it for a minute instead of 8 s.
func TestPathConcurrency(t *testing.T) {
	dir := t.TempDir()
	startUp(t, dir, "--mount", "")
	admin := openClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 4
	for i := range n {
		for _, d := range []string{"/r%d", "/x%d", "/p%d", "/p%d/q"} {
			if _, err := admin.MkdirPath(ctx, fmt.Sprintf(d, i), 0o755, rootCred); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{"/r%d/f", "/p%d/q/f"} {
			if _, err := admin.CreatePath(ctx, fmt.Sprintf(f, i), 0o644, rootCred); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := 8 * time.Second
	if os.Getenv("CAIRN_LONG") != "" {
		run = time.Minute
	}
	deadline := time.Now().Add(run)

	var (
		mu      sync.Mutex
		windows []pathWindow // certainly absent / closed
		gone    = map[string]time.Time{}
	)
	// closed marks path absent from the end of a change; opened ends the
	// window at the start of the change that restores it.
	closed := func(path string, end time.Time) {
		mu.Lock()
		gone[path] = end
		mu.Unlock()
	}
	opened := func(path string, start time.Time) {
		mu.Lock()
		if from, ok := gone[path]; ok {
			windows = append(windows, pathWindow{path, from, start})
			delete(gone, path)
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for i := range n {
		wg.Add(1)
		go func() { // rename /r_i away and back
			defer wg.Done()
			from, to := fmt.Sprintf("/r%d", i), fmt.Sprintf("/r%d-moved", i)
			for time.Now().Before(deadline) {
				if err := admin.RenamePath(ctx, from, to, rootCred); err != nil {
					fail(fmt.Errorf("rename %s away: %w", from, err))
					return
				}
				closed(from+"/f", time.Now())
				time.Sleep(20 * time.Millisecond)
				opened(from+"/f", time.Now())
				if err := admin.RenamePath(ctx, to, from, rootCred); err != nil {
					fail(fmt.Errorf("rename %s back: %w", from, err))
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		wg.Add(1)
		go func() { // remove /x_i and make it again
			defer wg.Done()
			d := fmt.Sprintf("/x%d", i)
			for time.Now().Before(deadline) {
				err := admin.RmdirPath(ctx, d, rootCred)
				if client.ErrnoOf(err) == syscall.ENOTEMPTY {
					ents, _ := admin.ReadDirPath(ctx, d, rootCred)
					for _, e := range ents {
						_ = admin.UnlinkPath(ctx, d+"/"+e.Name, rootCred)
					}
					continue
				}
				if err != nil {
					fail(fmt.Errorf("rmdir %s: %w", d, err))
					return
				}
				closed(d+"/", time.Now())
				time.Sleep(20 * time.Millisecond)
				opened(d+"/", time.Now())
				if _, err := admin.MkdirPath(ctx, d, 0o755, rootCred); err != nil {
					fail(fmt.Errorf("mkdir %s: %w", d, err))
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		wg.Add(1)
		go func() { // close /p_i to others and open it again (inode API)
			defer wg.Done()
			d := fmt.Sprintf("/p%d", i)
			a, err := admin.StatPath(ctx, d, rootCred)
			if err != nil {
				fail(err)
				return
			}
			for time.Now().Before(deadline) {
				if _, err := admin.Setattr(ctx, a.Ino, client.SetattrIn{Valid: client.SetMode, Mode: 0o700}); err != nil {
					fail(fmt.Errorf("chmod %s 0700: %w", d, err))
					return
				}
				closed(d+"/q/f", time.Now())
				time.Sleep(20 * time.Millisecond)
				opened(d+"/q/f", time.Now())
				if _, err := admin.Setattr(ctx, a.Ino, client.SetattrIn{Valid: client.SetMode, Mode: 0o755}); err != nil {
					fail(fmt.Errorf("chmod %s 0755: %w", d, err))
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}

	type success struct {
		path     string
		from, to time.Time
	}
	var (
		smu       sync.Mutex
		successes []success
		ops       int
	)
	for w := range 2 * n {
		v := openClient(t, dir)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(deadline); k++ {
				i := (w + k) % n
				var path, key string
				var err error
				start := time.Now()
				switch k % 3 {
				case 0:
					path = fmt.Sprintf("/r%d/f", i)
					key = path
					var f *client.File
					if f, err = v.OpenPath(ctx, path, syscall.O_RDONLY, 0, userCred); err == nil {
						err = f.Close(ctx)
					}
				case 1:
					key = fmt.Sprintf("/x%d/", i)
					path = fmt.Sprintf("/x%d/c%d-%d", i, w, k)
					if _, err = v.CreatePath(ctx, path, 0o644, rootCred); err == nil {
						_ = v.UnlinkPath(ctx, path, rootCred)
					}
				default:
					path = fmt.Sprintf("/p%d/q/f", i)
					key = path
					_, err = v.StatPath(ctx, path, userCred)
				}
				end := time.Now()
				switch e := client.ErrnoOf(err); e {
				case 0:
					smu.Lock()
					successes = append(successes, success{key, start, end})
					smu.Unlock()
				case syscall.ENOENT, syscall.EACCES:
				default:
					fail(fmt.Errorf("%s: %w", path, err))
					return
				}
				smu.Lock()
				ops++
				smu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	bad := 0
	for _, s := range successes {
		for _, w := range windows {
			if s.path == w.path && s.from.After(w.from) && s.to.Before(w.to) {
				if bad++; bad <= 10 {
					t.Errorf("%s succeeded in [%v, %v] while its directory was gone or closed [%v, %v]",
						s.path, s.from.Format("15:04:05.000000"), s.to.Format("15:04:05.000000"), w.from.Format("15:04:05.000000"), w.to.Format("15:04:05.000000"))
				}
			}
		}
	}
	t.Logf("%d path operations, %d succeeded, %d windows in which a directory was gone or closed; %d violations", ops, len(successes), len(windows), bad)
	if len(windows) < 3*n || len(successes) == 0 {
		t.Errorf("the test did not exercise anything: %d windows, %d successes", len(windows), len(successes))
	}
}
