package metanode

import (
	"slices"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// TestChangeFeed: a leader's change feed tells a session what other
// sessions changed on its partition, also through the follow-ups one
// partition sends another for a request (the parent's TouchDir), and
// nothing of its own; a held request is answered as soon as another
// session changes something; a deposed or never-leading replica does not
// answer at all.
func TestChangeFeed(t *testing.T) {
	tp := newTwoParts(t)
	pool := redirect.NewPool(nil, nil)
	t.Cleanup(pool.Close)
	resolve := func(id uint64) (string, bool) { a, ok := tp.c.addrs[id]; return a, ok }
	mine, other := metaclient.New(pool, resolve), metaclient.New(pool, resolve)
	mine.SetOrigin(100)
	other.SetOrigin(200)

	type watcher struct {
		mc     *metaclient.Client
		cursor map[uint64]uint64
	}
	start := func(mc *metaclient.Client) *watcher {
		w := &watcher{mc: mc, cursor: map[uint64]uint64{}}
		for _, p := range tp.p {
			r, err := mc.Changes(tp.ctx, p, 0, 0)
			if err != nil || !r.ForgetAll {
				t.Fatalf("first feed answer of partition %d: %v %v, want forget_all", p.Id, r, err)
			}
			w.cursor[p.Id] = r.Cursor
		}
		return w
	}
	// poll returns what w is told of p's changes since its last poll.
	poll := func(w *watcher, p *pb.Partition, wait time.Duration) (names []string, inodes []uint64) {
		t.Helper()
		r, err := w.mc.Changes(tp.ctx, p, w.cursor[p.Id], wait)
		if err != nil || r.ForgetAll {
			t.Fatalf("feed of partition %d: %v %v", p.Id, r, err)
		}
		w.cursor[p.Id] = r.Cursor
		for _, n := range r.Names {
			names = append(names, string(n.Name))
		}
		slices.Sort(r.Inodes)
		return names, r.Inodes
	}
	wMine, wOther := start(mine), start(other)

	// A file made by "mine" on partition 2, under the root homed on 1.
	name := nameIn("feed", 1)
	c, err := mine.Path(tp.ctx, tp.p[1], createReq(RootIno, name, metapb.FileType_FILE_TYPE_REGULAR))
	if err != nil || c.Errno != 0 {
		t.Fatalf("create: %v %v", c, err)
	}
	ino := c.Inode.GetIno()
	if n, i := poll(wOther, tp.p[1], 0); !slices.Equal(n, []string{name}) || len(i) != 0 {
		t.Errorf("the other session is told %v %v on partition 2, want the name %s", n, i, name)
	}
	if n, i := poll(wOther, tp.p[0], 0); len(n) != 0 || !slices.Equal(i, []uint64{RootIno}) {
		t.Errorf("the other session is told %v %v on partition 1, want the root's inode (its TouchDir)", n, i)
	}
	for _, p := range tp.p {
		if n, i := poll(wMine, p, 0); len(n)+len(i) != 0 {
			t.Errorf("the creating session is told %v %v of its own create on partition %d", n, i, p.Id)
		}
	}

	// A held request that nothing wakes covers its whole wait: its read
	// barrier runs when the wait ends.
	sent := time.Now()
	r, err := mine.Changes(tp.ctx, tp.p[0], wMine.cursor[1], 150*time.Millisecond)
	if err != nil || r.ForgetAll || len(r.Names)+len(r.Inodes) != 0 {
		t.Fatalf("held request: %v %v", r, err)
	}
	if covered := time.Duration(r.CoveredAfterUs) * time.Microsecond; covered < 150*time.Millisecond || covered > time.Since(sent) {
		t.Errorf("a held request answered after %s says it covers %s after it arrived, want 150ms to its answer", time.Since(sent), covered)
	}
	wMine.cursor[1] = r.Cursor

	// A held request wakes when another session changes something.
	got := make(chan []uint64, 1)
	go func() {
		r, err := mine.Changes(tp.ctx, tp.p[1], wMine.cursor[2], time.Second)
		if err != nil {
			got <- nil
			return
		}
		got <- r.Inodes
	}()
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	chmod := &metapb.Op{Op: &metapb.Op_Setattr{Setattr: &metapb.Setattr{Ino: ino, Valid: uint32(metapb.SetattrValid_SETATTR_MODE), Mode: 0o600}}}
	if res, err := other.Txn(tp.ctx, tp.p[1], &metapb.Txn{Ops: []*metapb.Op{chmod}}); err != nil || res.Errno != 0 {
		t.Fatalf("chmod: %v %v", res, err)
	}
	select {
	case i := <-got:
		if !slices.Equal(i, []uint64{ino}) {
			t.Errorf("the held request was told %v, want inode %d", i, ino)
		}
		if d := time.Since(began); d > 500*time.Millisecond {
			t.Errorf("the held request was answered %s after the change", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the held request was not answered")
	}

	// Only the leader answers: a follower sends the caller on.
	leader := tp.c.leaderOf(t, 2)
	for id, h := range tp.c.hosts {
		if h == leader {
			continue
		}
		_, err := (&service{h: h}).Changes(tp.ctx, &metapb.ChangesRequest{PartitionId: 2, Cursor: wMine.cursor[2], Origin: 100})
		if err == nil {
			t.Errorf("node %d, not the leader of partition 2, answered a feed request", id)
		}
	}
}
