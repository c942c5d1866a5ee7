package client

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// moved is a routing change of the fake volume: the name hot under every
// parent moves from partition from to partition to (an Override entry),
// routing version 1 -> 2, as the load balancer would make it.
type moved struct {
	f        *fakeCluster
	hot      string
	from, to uint64
	t1, t2   *hybridindex.Table
	m2       *pb.ClusterMap // the map after the switch
}

// newMove picks a name that routes to partition 10 under dir and prepares
// its move to partition 11. The map and the partitions start at version 1.
func newMove(t *testing.T, f *fakeCluster, dir uint64) *moved {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	vol := f.m.Volumes[4]
	vol.RoutingVersion = 1
	w1, err := newView(f.m, "v")
	if err != nil {
		t.Fatal(err)
	}
	mv := &moved{f: f, from: 10, to: 11, t1: w1.table}
	for i := 0; mv.hot == ""; i++ {
		if n := fmt.Sprint("hot", i); w1.table.Slots[hybridindex.SlotOf(n, len(w1.table.Slots))] == 10 {
			mv.hot = n
		}
	}
	mv.m2 = proto.Clone(f.m).(*pb.ClusterMap)
	mv.m2.Epoch++
	v2 := mv.m2.Volumes[4]
	v2.RoutingVersion = 2
	v2.Exceptions = []*pb.ExceptionEntry{{Name: []byte(mv.hot), Kind: uint32(hybridindex.Override), Mp: mv.to}}
	w2, err := newView(mv.m2, "v")
	if err != nil {
		t.Fatal(err)
	}
	mv.t2 = w2.table
	if id, _ := mv.t2.Route(dir, mv.hot); id != mv.to {
		t.Fatalf("%q routes to %d under the new table", mv.hot, id)
	}
	for id := range f.parts {
		f.routing[id] = &fakeRouting{version: 1, cur: mv.t1}
	}
	return mv
}

// freeze puts every partition in the change (previous = version 1).
func (mv *moved) freeze() {
	for id := range mv.f.parts {
		mv.f.routing[id] = &fakeRouting{version: 2, cur: mv.t2, prev: mv.t1}
	}
}

// copyName imports the dentry (dir, hot), if any, to the destination.
func (mv *moved) copyName(t *testing.T, dir uint64) {
	t.Helper()
	d, _, e := mv.f.parts[mv.from].Lookup(dir, mv.hot)
	if e != 0 {
		return
	}
	txn := &metapb.Txn{Ops: []*metapb.Op{opCreateDentry(dir, mv.hot, d.GetIno(), d.GetType())}}
	mv.f.now++
	if r := mv.f.parts[mv.to].ApplyBatch(&metapb.Batch{NowNs: mv.f.now, Txns: []*metapb.Txn{txn}})[0]; r.Errno != 0 {
		t.Errorf("import %q: %s", mv.hot, r.Message)
	}
}

// finish switches the map and the partitions to version 2 and purges the
// source's copy.
func (mv *moved) finish(dir uint64) {
	mv.f.m = mv.m2
	for id := range mv.f.parts {
		mv.f.routing[id] = &fakeRouting{version: 2, cur: mv.t2}
	}
	if d, _, e := mv.f.parts[mv.from].Lookup(dir, mv.hot); e == 0 {
		txn := &metapb.Txn{Ops: []*metapb.Op{opDeleteDentry(dir, mv.hot, d.GetIno(), 0)}}
		mv.f.now++
		mv.f.parts[mv.from].ApplyBatch(&metapb.Batch{NowNs: mv.f.now, Txns: []*metapb.Txn{txn}})
	}
}

// holds reports whether partition part holds the dentry (dir, name).
func (f *fakeCluster) holds(part, dir uint64, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _, e := f.parts[part].Lookup(dir, name)
	return e == 0
}

// routingOps are the operations every routing test runs: each gets a
// directory d holding a file "src" and, if pre is set, the moving name
// (a file, or for rmdir a directory) made before the change.
var routingOps = []struct {
	name string
	pre  bool
	run  func(ctx context.Context, v *Volume, d uint64, hot string) error
	// after checks the outcome (the moving name's existence).
	exists bool
}{
	{"create", false, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		_, err := v.Create(ctx, d, hot, 0o644, 0, 0)
		return err
	}, true},
	{"mkdir", false, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		_, err := v.Mkdir(ctx, d, hot, 0o755, 0, 0)
		return err
	}, true},
	{"lookup", true, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		_, err := v.Lookup(ctx, d, hot)
		return err
	}, true},
	{"unlink", true, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		return v.Unlink(ctx, d, hot)
	}, false},
	{"rmdir", true, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		return v.Rmdir(ctx, d, hot)
	}, false},
	{"link", false, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		a, err := v.Lookup(ctx, d, "src")
		if err != nil {
			return err
		}
		_, err = v.Link(ctx, a.Ino, d, hot)
		return err
	}, true},
	{"rename-to", false, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		return v.Rename(ctx, d, "src", d, hot, 0)
	}, true},
	{"rename-from", true, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		return v.Rename(ctx, d, hot, d, "dst", 0)
	}, false},
	{"readdir", true, func(ctx context.Context, v *Volume, d uint64, hot string) error {
		ents, _, err := v.ReadDir(ctx, d, "", 0)
		if err == nil && !slices.ContainsFunc(ents, func(e DirEntry) bool { return e.Name == hot }) {
			err = fmt.Errorf("readdir misses %q: %v", hot, ents)
		}
		return err
	}, true},
}

// byInode are the routingOps the client sends as one by-inode path
// request (PathRequest.parent_ino): a partition that does not own the name
// answers EWRONGMP with the owner (a meta node forwards it there itself).
var byInode = map[string]bool{"create": true, "mkdir": true, "lookup": true, "unlink": true}

// setupRouting makes directory d with file "src" and, if pre, the moving
// name (a directory for rmdir), then prepares the move.
func setupRouting(t *testing.T, op string, pre bool) (*fakeCluster, *Volume, uint64, *moved) {
	t.Helper()
	f, v := startFake(t)
	ctx := context.Background()
	a, err := v.Mkdir(ctx, RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Create(ctx, a.Ino, "src", 0o644, 0, 0); err != nil {
		t.Fatal(err)
	}
	mv := newMove(t, f, a.Ino)
	if pre {
		if op == "rmdir" {
			_, err = v.Mkdir(ctx, a.Ino, mv.hot, 0o755, 0, 0)
		} else {
			_, err = v.Create(ctx, a.Ino, mv.hot, 0o644, 0, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return f, v, a.Ino, mv
}

// TestWrongMPRetried: the move is over but the client still routes by the
// old map. Every operation is refused with EWRONGMP by the old owner,
// re-reads the map and succeeds on the new owner; the code never reaches
// the caller.
func TestWrongMPRetried(t *testing.T) {
	for _, c := range routingOps {
		t.Run(c.name, func(t *testing.T) {
			f, v, d, mv := setupRouting(t, c.name, c.pre)
			f.mu.Lock()
			mv.freeze()
			mv.copyName(t, d)
			mv.finish(d)
			f.mu.Unlock()
			// Past the refresh rate limit: a by-inode request (create,
			// mkdir, lookup, unlink) goes to the owner the partition
			// names and re-reads the map once, not again and again.
			time.Sleep(refreshMinGap)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.run(ctx, v, d, mv.hot); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := f.holds(mv.to, d, mv.hot); got != c.exists {
				t.Errorf("new owner holds %q: %v, want %v", mv.hot, got, c.exists)
			}
			if f.holds(mv.from, d, mv.hot) {
				t.Errorf("old owner still holds %q", mv.hot)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if c.name != "readdir" && f.refused[metapb.EWRONGMP] == 0 {
				t.Errorf("no EWRONGMP was answered: the case does not test the retry")
			}
			if v.current().routing != 2 {
				t.Errorf("view at routing version %d after the retry", v.current().routing)
			}
		})
	}
}

// TestMovingRetried: the name is being moved (every partition frozen, map
// still at the old routing). Mutations are refused with EMOVING and retried
// with backoff; after the third refusal the move completes and the retry
// ends on the new owner.
func TestMovingRetried(t *testing.T) {
	for _, c := range routingOps {
		if c.name == "lookup" || c.name == "readdir" {
			continue // reads are served from the frozen source
		}
		t.Run(c.name, func(t *testing.T) {
			f, v, d, mv := setupRouting(t, c.name, c.pre)
			f.mu.Lock()
			mv.freeze()
			mv.copyName(t, d)
			f.onRefuse = func() {
				if f.refused[metapb.EMOVING] == 3 {
					mv.finish(d)
				}
			}
			f.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.run(ctx, v, d, mv.hot); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := f.holds(mv.to, d, mv.hot); got != c.exists {
				t.Errorf("new owner holds %q: %v, want %v", mv.hot, got, c.exists)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.refused[metapb.EMOVING] < 3 {
				t.Errorf("EMOVING answered %d times, want at least 3", f.refused[metapb.EMOVING])
			}
		})
	}
}

// TestReadDirPagesDisagree: partitions at different points of a move would
// list the moving name twice or not at all; the client redoes the page
// until the pages agree, and lists it once.
func TestReadDirPagesDisagree(t *testing.T) {
	cases := []struct {
		name  string
		state func(mv *moved, id uint64) *fakeRouting
	}{
		// The source still at version 1 lists its copy; the destination,
		// switched, lists the imported one.
		{"twice", func(mv *moved, id uint64) *fakeRouting {
			if id == mv.to {
				return &fakeRouting{version: 2, cur: mv.t2}
			}
			return &fakeRouting{version: 1, cur: mv.t1}
		}},
		// The source, switched, hides its unpurged copy; the destination,
		// still moving, hides the imported one.
		{"missing", func(mv *moved, id uint64) *fakeRouting {
			if id == mv.from {
				return &fakeRouting{version: 2, cur: mv.t2}
			}
			return &fakeRouting{version: 2, cur: mv.t2, prev: mv.t1}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, v, d, mv := setupRouting(t, "readdir", true)
			f.mu.Lock()
			mv.copyName(t, d)
			for id := range f.parts {
				f.routing[id] = c.state(mv, id)
			}
			f.m = mv.m2
			// The client's re-read of the map finds the move over.
			f.onGetMap = func() { mv.finish(d) }
			f.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ents, _, err := v.ReadDir(ctx, d, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name)
			}
			if want := []string{mv.hot, "src"}; !slices.Equal(names, want) {
				t.Fatalf("listing %v, want %v", names, want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.readDirs < 2*len(f.parts) {
				t.Errorf("%d ReadDir calls: the page was not fetched again", f.readDirs)
			}
		})
	}
}

// TestRoutingDeadline: a routing that never settles (EWRONGMP with a map
// that never changes, EMOVING forever, pages that never agree) ends every
// operation at its deadline with ETIMEDOUT, never with a routing code.
func TestRoutingDeadline(t *testing.T) {
	states := []struct {
		name  string
		apply func(mv *moved)
	}{
		{"wrongmp", func(mv *moved) {
			for id := range mv.f.parts {
				mv.f.routing[id] = &fakeRouting{version: 2, cur: mv.t2}
			}
		}},
		{"moving", func(mv *moved) { mv.freeze() }},
		{"disagree", func(mv *moved) {
			mv.freeze()
			mv.f.routing[12] = &fakeRouting{version: 1, cur: mv.t1}
		}},
	}
	for _, s := range states {
		for _, c := range routingOps {
			if s.name == "moving" && (c.name == "lookup" || c.name == "readdir") {
				continue // served from the frozen source
			}
			if s.name == "disagree" && c.name != "readdir" && c.name != "rmdir" {
				continue // only listings compare partitions
			}
			if s.name == "wrongmp" && byInode[c.name] {
				// Sent by inode, these go to the owner the partitions'
				// routing names (PathResponse.owner), whatever the map.
				continue
			}
			t.Run(s.name+"/"+c.name, func(t *testing.T) {
				f, v, d, mv := setupRouting(t, c.name, c.pre)
				f.mu.Lock()
				s.apply(mv)
				f.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				start := time.Now()
				err := c.run(ctx, v, d, mv.hot)
				if n := ErrnoOf(err); n != syscall.ETIMEDOUT {
					t.Fatalf("%s: %v (errno %d), want ETIMEDOUT", c.name, err, n)
				}
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("took %s", took)
				}
			})
		}
	}
}

// TestGrowthRoutesInodes: after growth the former open-ended partition has
// a cut inode range and a new one holds the open range above it. Inodes
// route by range; a create whose name routes to the full partition gets
// its inode from the open-ended one, and the file works like any other.
func TestGrowthRoutesInodes(t *testing.T) {
	m := testMap()
	m.Partitions[12].InodeEnd = 2004
	m.Partitions[13] = &pb.Partition{Id: 13, InodeStart: 2005}
	vol := m.Volumes[4]
	vol.MetaPartitions = append(vol.MetaPartitions, 13)
	vol.SlotOwners = []uint64{10, 10, 11, 12, 12, 13}
	w, err := newView(m, "v")
	if err != nil {
		t.Fatal(err)
	}
	for ino, want := range map[uint64]uint64{1000: 10, 2001: 12, 2004: 12, 2005: 13, 1 << 40: 13} {
		if p, err := w.home(ino); err != nil || p.GetId() != want {
			t.Errorf("home(%d) = %v %v, want %d", ino, p, err, want)
		}
	}

	_, v := startFakeMap(t, m)
	ctx := context.Background()
	d, err := v.Mkdir(ctx, RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var onFull []string
	for i := range 40 {
		n := fmt.Sprint("f", i)
		a, err := v.Create(ctx, d.Ino, n, 0o644, 0, 0)
		if err != nil {
			t.Fatalf("create %s: %v", n, err)
		}
		if v.RouteName(d.Ino, n) == 12 {
			onFull = append(onFull, n)
			if len(onFull) > 4 && v.HomeOf(a.Ino) != 13 {
				t.Errorf("%s: inode %d on %d, want 13 (12 is full)", n, a.Ino, v.HomeOf(a.Ino))
			}
		}
	}
	if len(onFull) <= 4 {
		t.Fatalf("only %d names routed to the full partition", len(onFull))
	}
	for _, n := range onFull {
		a := mustLookup(t, v, d.Ino, n)
		if a.Nlink != 1 {
			t.Errorf("%s: nlink %d", n, a.Nlink)
		}
		if err := v.Unlink(ctx, d.Ino, n); err != nil {
			t.Fatalf("unlink %s: %v", n, err)
		}
		if _, err := v.GetAttr(ctx, a.Ino); ErrnoOf(err) != syscall.ENOENT {
			t.Errorf("%s: inode %d after unlink: %v", n, a.Ino, err)
		}
	}
}
