package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// coherenceBound is how stale a name or attribute another mount holds may
// be: the smaller of entry_timeout and attr_timeout, 1 s by default, with
// or without the change feed (docs/design.md, "Kernel caches kept
// coherent by a change feed"), counted from when the kernel got the
// answer: one read just before the change may be kept that long after
// it, so the tests allow one request's time more.
const coherenceBound = time.Second + 100*time.Millisecond

// seenWithin polls cond until it holds and fails the test when that took
// longer than coherenceBound; it returns how long it took.
func seenWithin(t *testing.T, what string, since time.Time, cond func() bool) time.Duration {
	t.Helper()
	for {
		if cond() {
			d := time.Since(since)
			if d > coherenceBound {
				t.Errorf("%s: seen after %s, more than the bound of %s", what, d.Round(time.Millisecond), coherenceBound)
			}
			return d
		}
		if time.Since(since) > 10*coherenceBound {
			t.Fatalf("%s: not seen after %s", what, time.Since(since).Round(time.Millisecond))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func gone(p string) func() bool {
	return func() bool {
		_, err := os.Lstat(p)
		return errors.Is(err, fs.ErrNotExist)
	}
}

func exists(p string) func() bool {
	return func() bool {
		_, err := os.Lstat(p)
		return err == nil
	}
}

// twoMounts starts `cairn up` in a new data directory and a second mount
// of its volume: mount A is cairn up's, mount B the other.
func twoMounts(t *testing.T) (dir, a, b string) {
	t.Helper()
	dir = t.TempDir()
	_, a = startMounted(t, dir)
	b = filepath.Join(t.TempDir(), "b")
	must(t, os.Mkdir(b, 0o755))
	startMount(t, b, "--data-dir", dir, "default", b)
	return dir, a, b
}

// holdsLong makes the mount whose metrics are at metrics hold path's name
// and attributes for longer than the short timeouts: stats past them ask
// nothing. (A routing change of a new volume, early on, takes every grant
// back once; so up to three tries.)
func holdsLong(t *testing.T, metrics, path string) {
	t.Helper()
	lookups := func() float64 {
		n := 0.0
		for _, l := range scrapeLines(t, metrics, "cairn_fuse_requests_total") {
			if l.labels == `{errno="0",op="lookup"}` || l.labels == `{errno="0",op="getattr"}` {
				n += l.value
			}
		}
		return n
	}
	for range 3 {
		if _, err := os.Stat(path); err != nil {
			t.Fatal(err)
		}
		time.Sleep(coherenceBound + coherenceBound/2)
		before := lookups()
		for range 50 {
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
		}
		if lookups() == before {
			return
		}
	}
	t.Fatalf("the mount asked for %s's name or attributes past the short timeouts: nothing was cached for long", path)
}

// inodeHome is the meta partition that holds inode ino.
func inodeHome(t *testing.T, vv *volumeView, ino uint64) *pb.Partition {
	t.Helper()
	for _, id := range vv.vol.MetaPartitions {
		p := vv.m.Partitions[id]
		if ino >= p.GetInodeStart() && (p.GetInodeEnd() == 0 || ino < p.GetInodeEnd()) {
			return p
		}
	}
	t.Fatalf("no meta partition holds inode %d", ino)
	return nil
}

// routingSettled waits until every meta partition of vv's volume has
// taken the volume's routing, which the master pushes to a new volume's
// partitions at its first balance round: the push resets every mount's
// change feed, taking back what the kernels hold.
func routingSettled(t *testing.T, vv *volumeView) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range vv.vol.MetaPartitions {
		for {
			st, err := vv.meta.Stats(ctx, vv.m.Partitions[id], 0)
			if err == nil && st.GetRoutingVersion() >= vv.vol.GetRoutingVersion() {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("meta partition %d has not taken routing version %d within a minute (%v, %v)", id, vv.vol.GetRoutingVersion(), st, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// metaLeaderAddr is the address of the meta node leading partition p.
func metaLeaderAddr(t *testing.T, vv *volumeView, p *pb.Partition) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := vv.meta.Changes(ctx, p, 0, 0); err != nil { // answered by the leader only
		t.Fatal(err)
	}
	return vv.meta.Leader(p.Id)
}

// metaLeaderPid is the process id of the meta node leading partition p.
func metaLeaderPid(t *testing.T, dir string, vv *volumeView, p *pb.Partition) int {
	t.Helper()
	addr := metaLeaderAddr(t, vv, p)
	for _, n := range getStatus(t, dir).Nodes {
		if n.Role == "meta" && n.Address == addr {
			return n.Pid
		}
	}
	t.Fatalf("no meta node at the leader address %q of partition %d", addr, p.Id)
	return 0
}

// TestMountsSeeEachOthersChanges runs two mounts of one volume: mount A
// (cairn up's) caches names and attributes for long while its change feed
// covers every partition, and must still see every change mount B makes
// within the bound: modes, sizes, new names it had found missing, renames,
// unlinks, rmdirs. Then the meta node leading the partition of a file A
// holds is killed (kill -9) before B changes the file: A's feed loses that
// partition, A drops everything it cached, and sees B's change within the
// bound of B's chmod returning.
func TestMountsSeeEachOthersChanges(t *testing.T) {
	dir, a, b := twoMounts(t)
	aMetrics := mountMetricsAddr(t, a)
	inA := func(name string) string { return filepath.Join(a, name) }
	inB := func(name string) string { return filepath.Join(b, name) }
	must(t, os.WriteFile(inA("f"), []byte("one"), 0o644))
	if _, err := os.Stat(inB("f")); err != nil {
		t.Fatal(err)
	}
	holdsLong(t, aMetrics, inA("f"))

	check := func(what string, change func(), cond func() bool) {
		t.Helper()
		change()
		d := seenWithin(t, what, time.Now(), cond)
		t.Logf("%s: seen by mount A after %s", what, d.Round(time.Microsecond))
	}
	check("chmod", func() { must(t, os.Chmod(inB("f"), 0o600)) }, func() bool {
		st, err := os.Stat(inA("f"))
		return err == nil && st.Mode().Perm() == 0o600
	})
	check("append", func() {
		f, err := os.OpenFile(inB("f"), os.O_APPEND|os.O_WRONLY, 0)
		must(t, err)
		_, err = f.Write([]byte(" two"))
		must(t, err)
		must(t, f.Close())
	}, func() bool {
		st, err := os.Stat(inA("f"))
		return err == nil && st.Size() == int64(len("one two"))
	})
	if got, err := os.ReadFile(inA("f")); err != nil || string(got) != "one two" {
		t.Fatalf("mount A reads %q (%v) after mount B's close", got, err)
	}
	if !gone(inA("g"))() {
		t.Fatal("g exists before it was made")
	}
	check("create of a name A found missing", func() { must(t, os.WriteFile(inB("g"), nil, 0o644)) }, exists(inA("g")))
	check("rename (old name)", func() { must(t, os.Rename(inB("f"), inB("f2"))) }, gone(inA("f")))
	seenWithin(t, "rename (new name)", time.Now(), exists(inA("f2")))
	check("unlink", func() { must(t, os.Remove(inB("g"))) }, gone(inA("g")))
	must(t, os.Mkdir(inB("d"), 0o755))
	seenWithin(t, "mkdir", time.Now(), exists(inA("d")))
	check("rmdir", func() { must(t, os.Remove(inB("d"))) }, gone(inA("d")))

	// The worst case: the leader of the partition that holds f2's inode,
	// which B's chmod must reach, dies while A holds f2.
	st, err := os.Stat(inA("f2"))
	must(t, err)
	ino := st.Sys().(*syscall.Stat_t).Ino
	vv := openVolume(t, dir, "default")
	victim := metaLeaderPid(t, dir, vv, inodeHome(t, vv, ino))
	behind := func() float64 {
		v, _ := scrapeSum(t, aMetrics, `cairn_fuse_feed_losses_total{why="behind"}`, false)
		return v
	}
	lost := behind()
	must(t, syscall.Kill(victim, syscall.SIGKILL))
	killed := time.Now()
	must(t, os.Chmod(inB("f2"), 0o640)) // waits for the partition's next leader
	t.Logf("chmod through mount B returned %s after the kill", time.Since(killed).Round(time.Millisecond))
	seenWithin(t, "chmod after the kill", time.Now(), func() bool {
		st, err := os.Stat(inA("f2"))
		return err == nil && st.Mode().Perm() == 0o640
	})
	// A's feed of that partition fell behind if the election took longer
	// than half the bound; either way the change was seen in time.
	t.Logf("mount A's feed fell behind %v time(s) meanwhile", behind()-lost)
}

// TestNameDroppedUnderStalledCreate: mount A holds a name for long; A's
// own create in the same directory stalls, so the kernel holds the
// directory's lock, under which alone it drops one cached name. (The
// directory is the mount's root, which has no entry of its own whose
// invalidation would take the names below with it.) Mount B
// renames the name away meanwhile. Past the bound of B's rename, while
// A's create still waits, a stat through A must not find the old name:
// it may wait for the directory, and must then answer ENOENT.
//
// The volume keeps one replica, so that pausing (SIGSTOP) the meta node
// of the new name's partition stalls the create until the node resumes,
// with no election, while B's rename runs on partitions of other nodes.
func TestNameDroppedUnderStalledCreate(t *testing.T) {
	dir := t.TempDir()
	startMounted(t, dir)
	mustCairn(t, "volume", "create", "r1", "--replicas", "1", "--data-dir", dir)
	vv := openVolume(t, dir, "r1")
	routingSettled(t, vv)
	mountR1 := func(name string, args ...string) string {
		mp := filepath.Join(t.TempDir(), name)
		must(t, os.Mkdir(mp, 0o755))
		startMount(t, mp, append(append([]string{"--data-dir", dir}, args...), "r1", mp)...)
		return mp
	}
	a := mountR1("a", "--metrics", freeAddr(t))
	aMetrics := mountMetricsAddr(t, a)
	b := mountR1("b")
	inA := func(n string) string { return filepath.Join(a, n) }
	inB := func(n string) string { return filepath.Join(b, n) }
	must(t, os.WriteFile(inA("n"), []byte("x"), 0o644))
	holdsLong(t, aMetrics, inA("n"))

	ino := func(p string) uint64 {
		st, err := os.Stat(p)
		must(t, err)
		return st.Sys().(*syscall.Stat_t).Ino
	}
	parent := ino(a)
	nameNode := func(name string) string {
		mp, _ := vv.table.Route(parent, name)
		return metaLeaderAddr(t, vv, vv.m.Partitions[mp])
	}
	// B's rename of n to m reaches the partitions of both names, n's
	// inode and the directory's: none may be on the paused node.
	busy := map[string]bool{
		nameNode("n"): true,
		metaLeaderAddr(t, vv, inodeHome(t, vv, ino(inA("n")))): true,
		metaLeaderAddr(t, vv, inodeHome(t, vv, parent)):        true,
	}
	var x, paused string
	for i := 0; x == "" && i < 200; i++ {
		if node := nameNode(fmt.Sprint("x", i)); !busy[node] {
			x, paused = fmt.Sprint("x", i), node
		}
	}
	var m string
	for i := 0; m == "" && i < 200; i++ {
		if nameNode(fmt.Sprint("m", i)) != paused {
			m = fmt.Sprint("m", i)
		}
	}
	if x == "" || m == "" {
		t.Fatalf("no names for the test: the partitions of r1 are all on %v", busy)
	}
	var pid int
	for _, n := range getStatus(t, dir).Nodes {
		if n.Role == "meta" && n.Address == paused {
			pid = n.Pid
		}
	}
	if pid == 0 {
		t.Fatalf("no meta node at %s", paused)
	}

	must(t, syscall.Kill(pid, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			must(t, syscall.Kill(pid, syscall.SIGCONT))
		}
	}
	defer resume()
	created := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(inA(x), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			err = f.Close()
		}
		created <- err
	}()
	stalled := func(what string) {
		t.Helper()
		select {
		case err := <-created:
			t.Fatalf("%s: A's create of %s returned (%v) while the node of its partition was paused", what, x, err)
		default:
		}
	}
	time.Sleep(200 * time.Millisecond) // the create reaches the mount and holds the directory
	stalled("before the rename")
	start := time.Now()
	must(t, os.Rename(inB("n"), inB(m)))
	renamed := time.Now()
	t.Logf("B's rename took %s", renamed.Sub(start).Round(time.Millisecond))
	time.Sleep(coherenceBound)
	stalled("past the bound of the rename")
	statted := make(chan error, 1)
	go func() {
		_, err := os.Lstat(inA("n"))
		statted <- err
	}()
	select {
	case err := <-statted:
		if err == nil {
			t.Fatalf("mount A found n %s after mount B renamed it away, while A's create in the directory stalled", time.Since(renamed).Round(time.Millisecond))
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat of the renamed name through mount A: %v, want ENOENT", err)
		}
		t.Logf("stat through A answered ENOENT %s after the rename, before the resume", time.Since(renamed).Round(time.Millisecond))
	case <-time.After(2 * time.Second):
		// Waiting for the directory, which the create holds: the stat
		// must answer once it is free.
		resume()
		select {
		case err := <-statted:
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("stat of the renamed name through mount A after the resume: %v, want ENOENT", err)
			}
			t.Logf("stat through A waited for the directory and answered ENOENT after the resume")
		case <-time.After(time.Minute):
			t.Fatal("stat through mount A did not return within a minute of the resume")
		}
	}
	resume()
	select {
	case err := <-created:
		must(t, err)
	case <-time.After(time.Minute):
		t.Fatal("A's create did not return within a minute of the resume")
	}
	for _, k := range []string{x, m} {
		if _, err := os.Stat(inA(k)); err != nil {
			t.Errorf("mount A after the resume: %v", err)
		}
	}
	epochs, _ := scrapeSum(t, aMetrics, "cairn_fuse_name_epochs_total", false)
	t.Logf("mount A made its kernel check every cached name %v time(s)", epochs)
}

// TestMountsCoherentUnderChurn: mount B makes 300 random changes to ten
// names (create, write, chmod, rename over, unlink, mkdir, rmdir) while
// four threads of mount A stat and list those names without pause, so
// that A's grants race B's notices. After each change returns through B, A must
// show the name as B left it within the bound.
func TestMountsCoherentUnderChurn(t *testing.T) {
	_, a, b := twoMounts(t)
	must(t, os.Mkdir(filepath.Join(b, "churn"), 0o755))
	inA := func(n string) string { return filepath.Join(a, "churn", n) }
	inB := func(n string) string { return filepath.Join(b, "churn", n) }
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprint("n", i)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ctx.Err() == nil; i++ {
				if g == 0 && i%10 == 0 {
					// Listings too: READDIRPLUS entries are granted.
					_, _ = os.ReadDir(filepath.Join(a, "churn"))
					continue
				}
				_, _ = os.Lstat(inA(names[i%len(names)]))
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	// state is what a name shows: "" when absent.
	state := func(p string) string {
		st, err := os.Lstat(p)
		if err != nil {
			return ""
		}
		if st.IsDir() {
			return fmt.Sprintf("dir %o", st.Mode().Perm())
		}
		return fmt.Sprintf("file %o %d", st.Mode().Perm(), st.Size())
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var worst time.Duration
	for step := range 300 {
		n, m := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
		var what string
		switch cur := state(inB(n)); {
		case cur == "":
			if rng.IntN(3) == 0 {
				what = "mkdir " + n
				must(t, os.Mkdir(inB(n), 0o755))
			} else {
				what = "create " + n
				must(t, os.WriteFile(inB(n), bytes.Repeat([]byte("x"), rng.IntN(3)), 0o644))
			}
		case strings.HasPrefix(cur, "dir"):
			what = "rmdir " + n
			must(t, os.Remove(inB(n)))
		default:
			switch rng.IntN(4) {
			case 0:
				what = "write " + n
				f, err := os.OpenFile(inB(n), os.O_WRONLY|os.O_APPEND, 0)
				must(t, err)
				_, err = f.Write([]byte("yy"))
				must(t, err)
				must(t, f.Close())
			case 1:
				what = "chmod " + n
				must(t, os.Chmod(inB(n), os.FileMode(0o600+rng.IntN(0o100))))
			case 2:
				if strings.HasPrefix(state(inB(m)), "dir") || m == n {
					what = "unlink " + n
					must(t, os.Remove(inB(n)))
				} else {
					what = "rename " + n + " over " + m
					must(t, os.Rename(inB(n), inB(m)))
				}
			default:
				what = "unlink " + n
				must(t, os.Remove(inB(n)))
			}
		}
		done := time.Now()
		for _, k := range []string{n, m} {
			want := state(inB(k))
			d := seenWithin(t, fmt.Sprintf("step %d (%s): %s as %q", step, what, k, want), done, func() bool { return state(inA(k)) == want })
			worst = max(worst, d)
		}
	}
	t.Logf("300 changes through mount B, each seen by mount A within %s", worst.Round(time.Microsecond))
}

// TestListedDirectories: a directory mount A made is one whose every name
// A knows, so A answers the kernel's lookup of a missing name there
// itself (a create costs one request). Mount B's changes there must still
// reach A within the bound, and A's own changes at once. Each of five
// rounds, A makes a fresh directory, and 40 random changes follow, by A
// four times in five and by B otherwise; after each, the changing mount
// must show the names as it left them at once, the other within the
// bound.
func TestListedDirectories(t *testing.T) {
	_, a, b := twoMounts(t)
	aMetrics := mountMetricsAddr(t, a)
	local := func() float64 {
		v, _ := scrapeSum(t, aMetrics, "cairn_fuse_local_negative_lookups_total", false)
		return v
	}

	// Creates in a directory A made ask nothing before they create. (A
	// listing starts only while A's change feed is healthy, which a new
	// mount's is once every partition's feed answered, and a routing
	// change of the new volume, early on, takes every listing back once;
	// so a fresh directory is tried until one answers, for up to 20 s.)
	answered := 0.0
	var last string
	for try, deadline := 0, time.Now().Add(20*time.Second); answered < 20 && time.Now().Before(deadline); try++ {
		d := filepath.Join(a, fmt.Sprint("first", try))
		last = d
		must(t, os.Mkdir(d, 0o755))
		before := local()
		for i := range 20 {
			must(t, os.WriteFile(filepath.Join(d, fmt.Sprint("f", i)), []byte{byte(i)}, 0o644))
		}
		if _, err := os.Stat(filepath.Join(d, "missing")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat of a missing name: %v", err)
		}
		answered = local() - before
	}
	if answered < 20 {
		t.Fatalf("mount A answered %v lookups in a directory it made itself, want at least 20", answered)
	}
	t.Logf("the listing of %s answered %v lookups", filepath.Base(last), answered)

	// A directory mount B made: A does not read its listing (listing
	// reads are off, fusefs.Options.ListingReads), so A never answers a
	// missing name there itself, and a name B creates is found by A's
	// next lookup after B's close (close-to-open for names).
	fromB := filepath.Join(b, "fromB")
	must(t, os.Mkdir(fromB, 0o755))
	seenWithin(t, "mkdir fromB", time.Now(), exists(filepath.Join(a, "fromB")))
	before := local()
	for i := range 10 {
		if _, err := os.Stat(filepath.Join(a, "fromB", fmt.Sprint("missing", i))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat of a missing name: %v", err)
		}
		must(t, os.WriteFile(filepath.Join(fromB, fmt.Sprint("f", i)), []byte{byte(i)}, 0o644))
		if got, err := os.ReadFile(filepath.Join(a, "fromB", fmt.Sprint("f", i))); err != nil || len(got) != 1 || got[0] != byte(i) {
			t.Fatalf("f%d, which B just wrote and closed, reads %v on A (%v)", i, got, err)
		}
	}
	if v := local() - before; v != 0 {
		t.Errorf("mount A answered %v lookups itself in a directory B made", v)
	}
	// The kernel may drop the names it holds at any time (here all of
	// them, but the directory, held open); A must still find its own.
	held, err := os.Open(last)
	must(t, err)
	defer held.Close()
	must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
	for i := range 20 {
		if got, err := os.ReadFile(filepath.Join(last, fmt.Sprint("f", i))); err != nil || len(got) != 1 || got[0] != byte(i) {
			t.Fatalf("after the kernel dropped its names, f%d reads %v (%v)", i, got, err)
		}
	}

	state := func(p string) string {
		st, err := os.Lstat(p)
		if err != nil {
			return ""
		}
		if st.IsDir() {
			return "dir"
		}
		return fmt.Sprintf("file %o %d", st.Mode().Perm(), st.Size())
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	names := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	var worst time.Duration
	byA := 0
	for round := range 5 {
		top := fmt.Sprint("round", round)
		must(t, os.Mkdir(filepath.Join(a, top), 0o755))
		seenWithin(t, "mkdir "+top, time.Now(), exists(filepath.Join(b, top)))
		model := map[string]string{} // what each name holds: "" when absent
		for step := range 40 {
			actor, other, who := a, b, "A"
			if rng.IntN(5) == 0 {
				actor, other, who = b, a, "B"
			} else {
				byA++
			}
			in := func(root, n string) string { return filepath.Join(root, top, n) }
			n, m := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
			var what string
			switch cur := model[n]; {
			case cur == "":
				if rng.IntN(3) == 0 {
					what = "mkdir " + n
					must(t, os.Mkdir(in(actor, n), 0o755))
					model[n] = "dir"
				} else {
					what = "create " + n
					size := rng.IntN(3)
					must(t, os.WriteFile(in(actor, n), bytes.Repeat([]byte("x"), size), 0o600))
					model[n] = fmt.Sprintf("file 600 %d", size)
				}
			case cur == "dir":
				what = "rmdir " + n
				must(t, os.Remove(in(actor, n)))
				model[n] = ""
			case m != n && model[m] != "dir" && rng.IntN(2) == 0:
				what = "rename " + n + " to " + m
				must(t, os.Rename(in(actor, n), in(actor, m)))
				model[m], model[n] = model[n], ""
			default:
				what = "unlink " + n
				must(t, os.Remove(in(actor, n)))
				model[n] = ""
			}
			done := time.Now()
			for _, k := range []string{n, m} {
				want := model[k]
				if got := state(in(actor, k)); got != want {
					t.Fatalf("round %d step %d (%s by %s): %s shows %q to the mount that changed it, want %q", round, step, what, who, k, got, want)
				}
				d := seenWithin(t, fmt.Sprintf("round %d step %d (%s by %s): %s as %q", round, step, what, who, k, want), done,
					func() bool { return state(in(other, k)) == want })
				worst = max(worst, d)
			}
		}
	}
	t.Logf("%d changes by mount A and %d by mount B, each seen by the other mount within %s; %v lookups answered by mount A",
		byA, 200-byA, worst.Round(time.Microsecond), local())
}

// TestRenameRaceTwoMounts: two hosts rename one file to one new name at the
// same moment, each through its own mount, after both looked both names up
// (so both kernels hold the old name): exactly one rename succeeds and the
// other fails with ENOENT, round after round, as on one host. Linux answers
// a rename itself when its cached old name and a fresh lookup of the new
// one hold one inode; the mount gives a file found under a new name while
// the kernel holds another a new generation (stalenames.go), so that the
// kernel asks. In every fifth round mount B has the file open: its handle
// must keep working wherever A moved the file (the kernel may then answer
// the rename itself, which the test allows in those rounds only).
func TestRenameRaceTwoMounts(t *testing.T) {
	_, a, b := twoMounts(t)
	must(t, os.Mkdir(filepath.Join(a, "race"), 0o755))
	const rounds = 150
	var doubles, openDoubles int
	for i := range rounds {
		src, dst := fmt.Sprintf("s%d", i), fmt.Sprintf("t%d", i)
		must(t, os.WriteFile(filepath.Join(a, "race", src), []byte(src), 0o644))
		withOpen := i%5 == 0
		var held *os.File
		for _, m := range []string{a, b} {
			seenWithin(t, "the new file on "+m, time.Now(), exists(filepath.Join(m, "race", src)))
			_, _ = os.Lstat(filepath.Join(m, "race", dst))
		}
		if withOpen {
			f, err := os.Open(filepath.Join(b, "race", src))
			must(t, err)
			held = f
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for j, m := range []string{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[j] = os.Rename(filepath.Join(m, "race", src), filepath.Join(m, "race", dst))
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for j, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, syscall.ENOENT):
				t.Fatalf("round %d: rename on mount %d: %v, want success or ENOENT", i, j, err)
			}
		}
		switch {
		case ok == 0:
			t.Fatalf("round %d: neither rename succeeded: %v", i, errs)
		case ok == 2 && withOpen:
			openDoubles++
		case ok == 2:
			doubles++
			t.Errorf("round %d: both renames of %s to %s succeeded", i, src, dst)
		}
		if held != nil {
			buf := make([]byte, 16)
			n, err := held.ReadAt(buf, 0)
			if (err != nil && !errors.Is(err, io.EOF)) || string(buf[:n]) != src {
				t.Errorf("round %d: the handle B held: %q, %v", i, buf[:n], err)
			}
			held.Close()
		}
		for _, m := range []string{a, b} {
			seenWithin(t, "the renamed file on "+m, time.Now(), exists(filepath.Join(m, "race", dst)))
			seenWithin(t, "the old name gone on "+m, time.Now(), gone(filepath.Join(m, "race", src)))
		}
	}
	t.Logf("%d rounds: %d with both renames acknowledged, %d of them while B had the file open", rounds, doubles+openDoubles, openDoubles)
}
