package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
)

// volumeInMap reads volume "default" from the master's map.
func volumeInMap(t *testing.T, dir string) *pb.Volume {
	t.Helper()
	l, err := localcluster.LoadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := masterclient.New(l.MasterAddrs(), adminTLS(t, dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var m *pb.ClusterMap
	err = mc.Do(ctx, func(ctx context.Context, c pb.MasterClient, o ...grpc.CallOption) error {
		resp, err := c.GetMap(ctx, &pb.GetMapRequest{}, o...)
		m = resp.GetMap()
		return err
	})
	if err != nil {
		t.Fatalf("read the map: %v", err)
	}
	for _, v := range m.GetVolumes() {
		if v.GetName() == "default" {
			return v
		}
	}
	t.Fatal("volume default is not in the map")
	return nil
}

func migrating(v *pb.Volume) bool {
	return v.GetMigration().GetPhase() != pb.MigrationPhase_MIGRATION_PHASE_UNSPECIFIED
}

// waitVolume polls the map until done holds for the volume, at most limit.
func waitVolume(t *testing.T, dir, what string, limit time.Duration, done func(v *pb.Volume) bool) *pb.Volume {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		v := volumeInMap(t, dir)
		if done(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s still not %s: meta partitions %v, routing version %d, %d exceptions, migration %v",
				limit, what, v.GetMetaPartitions(), v.GetRoutingVersion(), len(v.GetExceptions()), v.GetMigration())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(n, workers int, fn func(i int) error) error {
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// listAll reads a whole directory through ReadDir pages of 128 names.
func listAll(ctx context.Context, v *client.Volume, dir uint64) ([]string, error) {
	var names []string
	cursor := ""
	for {
		ents, more, err := v.ReadDir(ctx, dir, cursor, 128)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			names = append(names, e.Name)
		}
		if !more || len(ents) == 0 {
			return names, nil
		}
		cursor = ents[len(ents)-1].Name
	}
}

// checkTree checks that every name of want (directory inode -> names) is
// found by Lookup, that its inode answers GetAttr, and that ReadDir lists
// exactly the names of want, each once.
func checkTree(t *testing.T, v *client.Volume, want map[uint64][]string) {
	t.Helper()
	ctx := context.Background()
	dirs := make([]uint64, 0, len(want))
	for d := range want {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	err := parallel(len(dirs), 4, func(i int) error {
		d := dirs[i]
		for _, n := range want[d] {
			a, err := v.Lookup(ctx, d, n)
			if err != nil {
				return fmt.Errorf("lookup %d/%s: %w", d, n, err)
			}
			if _, err := v.GetAttr(ctx, a.Ino); err != nil {
				return fmt.Errorf("stat %d/%s (inode %d): %w", d, n, a.Ino, err)
			}
		}
		got, err := listAll(ctx, v, d)
		if err != nil {
			return fmt.Errorf("readdir %d: %w", d, err)
		}
		w := slices.Sorted(slices.Values(want[d]))
		if !slices.Equal(got, w) {
			return fmt.Errorf("readdir %d: %d names, want %d (first got %v, want %v)", d, len(got), len(w), head(got), head(w))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// checkHealthy fails unless every node is alive and every partition healthy.
func checkHealthy(t *testing.T, dir string) {
	t.Helper()
	st := getStatus(t, dir)
	for _, n := range st.Nodes {
		if n.Role != "master" && n.State != "alive" {
			t.Errorf("node %d (%s) is %s", n.ID, n.Role, n.State)
		}
	}
	for _, p := range st.Partitions {
		if p.Health != "healthy" {
			t.Errorf("partition %d (%s) is %s", p.ID, p.Kind, p.Health)
		}
	}
}

// TestRoutingGrowth lets a volume grow meta partitions while 4 writers
// create 8000 files in 40 directories, then checks that no name was lost or
// doubled by the dentry moves, and that the names can be removed.
func TestRoutingGrowth(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "grow")
	startUp(t, dir, "--mount", "", "--mp-max-inodes", "2000", "--balance-interval", "1s")
	start := volumeInMap(t, dir)
	v := openClient(t, dir)
	ctx := context.Background()

	const nDirs, perDir = 40, 200
	dirs := make([]uint64, nDirs)
	for i := range dirs {
		a, err := v.Mkdir(ctx, client.RootIno, fmt.Sprintf("d%02d", i), 0o755, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = a.Ino
	}
	want := map[uint64][]string{}
	for _, d := range dirs {
		for j := range perDir {
			want[d] = append(want[d], fmt.Sprintf("f%04d", j))
		}
	}
	began := time.Now()
	// File j of every directory before file j+1: the volume grows while
	// every directory is being written.
	if err := parallel(nDirs*perDir, 4, func(i int) error {
		d, n := dirs[i%nDirs], want[dirs[i%nDirs]][i/nDirs]
		if _, err := v.Create(ctx, d, n, 0o644, 0, 0); err != nil {
			return fmt.Errorf("create %d/%s: %w", d, n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d files in %s; meta partitions now %v", nDirs*perDir, time.Since(began), volumeInMap(t, dir).GetMetaPartitions())

	grown := waitVolume(t, dir, "grown and settled", 60*time.Second, func(vol *pb.Volume) bool {
		return !migrating(vol) && len(vol.GetMetaPartitions()) > len(start.GetMetaPartitions())
	})
	t.Logf("meta partitions %v -> %v, routing version %d -> %d",
		start.GetMetaPartitions(), grown.GetMetaPartitions(), start.GetRoutingVersion(), grown.GetRoutingVersion())

	checkTree(t, v, want)
	// A client opened now routes by the grown map from the start.
	checkTree(t, openClient(t, dir), want)

	// Unlink every other name, then everything left must still list.
	if err := parallel(nDirs*perDir/2, 4, func(i int) error {
		d, n := dirs[i%nDirs], want[dirs[i%nDirs]][2*(i/nDirs)]
		if err := v.Unlink(ctx, d, n); err != nil {
			return fmt.Errorf("unlink %d/%s: %w", d, n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		var kept []string
		for j, n := range want[d] {
			if j%2 == 1 {
				kept = append(kept, n)
			}
		}
		want[d] = kept
	}
	checkTree(t, v, want)
	checkHealthy(t, dir)
}

// TestRoutingBalance makes one name ("Makefile" in 1500 directories) pile
// up on one meta partition, waits for the load balancer to give it an
// exception-table entry, and checks that every name survived the move.
func TestRoutingBalance(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bal")
	startUp(t, dir, "--mount", "", "--balance-interval", "1s", "--balance-min-dentries", "1000")
	v := openClient(t, dir)
	ctx := context.Background()

	const nDirs = 1500
	dirs := make([]uint64, nDirs)
	if err := parallel(nDirs, 4, func(i int) error {
		a, err := v.Mkdir(ctx, client.RootIno, fmt.Sprintf("p%04d", i), 0o755, 0, 0)
		if err != nil {
			return fmt.Errorf("mkdir p%04d: %w", i, err)
		}
		dirs[i] = a.Ino
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64][]string{}
	if err := parallel(nDirs, 4, func(i int) error {
		for _, n := range []string{"Makefile", fmt.Sprintf("src%04d.c", i)} {
			if _, err := v.Create(ctx, dirs[i], n, 0o644, 0, 0); err != nil {
				return fmt.Errorf("create %d/%s: %w", dirs[i], n, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, d := range dirs {
		want[d] = []string{"Makefile", fmt.Sprintf("src%04d.c", i)}
	}
	want[client.RootIno] = nil
	for i := range dirs {
		want[client.RootIno] = append(want[client.RootIno], fmt.Sprintf("p%04d", i))
	}

	bal := waitVolume(t, dir, "balanced and settled", 60*time.Second, func(vol *pb.Volume) bool {
		return !migrating(vol) && len(vol.GetExceptions()) > 0
	})
	hot := false
	for _, e := range bal.GetExceptions() {
		t.Logf("exception %q kind %d mp %d", e.GetName(), e.GetKind(), e.GetMp())
		hot = hot || string(e.GetName()) == "Makefile"
	}
	if !hot {
		t.Errorf("the hot name got no exception-table entry: %v", bal.GetExceptions())
	}

	checkTree(t, v, want)
	fresh := openClient(t, dir)
	spread := map[uint64]int{}
	for _, d := range dirs {
		spread[fresh.RouteName(d, "Makefile")]++
	}
	t.Logf("Makefile of %d directories routes to %v", nDirs, spread)
	checkTree(t, fresh, want)

	// The stateless path API on redirected names (FalconFS §6.7 corner
	// cases): a path-walk name goes to any partition, which forwards it to
	// the owner (and reads the inode from its home when the balancer moved
	// the name away from it: inodes never move); a stale client (v may not
	// have read the new exceptions yet) is forwarded the same way. One
	// client request, never a wrong answer.
	for ci, c := range []*client.Volume{fresh, v} {
		var hashed, walked, maxWalked int64
		const n = 200
		for i := range n {
			for _, name := range []string{"Makefile", fmt.Sprintf("src%04d.c", i)} {
				before := c.Stats().MetaRequests
				a, err := c.StatPath(ctx, fmt.Sprintf("/p%04d/%s", i, name), client.Cred{})
				if err != nil {
					t.Fatalf("stat /p%04d/%s: %v", i, name, err)
				}
				used := c.Stats().MetaRequests - before
				if name == "Makefile" {
					walked += used
					maxWalked = max(maxWalked, used)
				} else {
					hashed += used
				}
				if b, err := c.Lookup(ctx, dirs[i], name); err != nil || b.Ino != a.Ino {
					t.Fatalf("stat /p%04d/%s: inode %d, lookup by inode says %v %v", i, name, a.Ino, b, err)
				}
			}
		}
		_, err := c.StatPath(ctx, "/p0000/nothing/Makefile", client.Cred{})
		wantErrno(t, "stat through a missing directory", err, syscall.ENOENT)
		t.Logf("client %d: path stats take %.2f requests for hashed names, %.2f (at most %d) for the path-walk name",
			ci, float64(hashed)/n, float64(walked)/n, maxWalked)
		if maxWalked > 2 || float64(walked)/n > 1.05 || float64(hashed)/n > 1.05 {
			t.Errorf("more than one client request per path stat")
		}
	}
	checkHealthy(t, dir)
}
