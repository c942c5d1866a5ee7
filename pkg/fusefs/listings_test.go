package fusefs

import (
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/changefeed"
)

// TestListings runs sequences of events on a healthy cache whose mount
// made directory 10, and checks which names of it are then answered
// missing without a request.
func TestListings(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const d = 10
	in := func(n string) nameChange { return nameChange{d, n, true} }
	out := func(n string) nameChange { return nameChange{d, n, false} }
	cases := []struct {
		name string
		// run happens after mkdir of d succeeded (made with a token
		// taken before it, after between ran).
		between func(c *longCache)
		run     func(c *longCache)
		max     int
		absent  []string // answered missing
		asked   []string // not known: asked of the meta nodes
	}{
		{name: "a new directory is empty", absent: []string{"a", "b"}},
		{name: "names this mount made are present", run: func(c *longCache) {
			op := c.enterDirs(d, d)
			c.leaveDirs(op, true, in("a"))
		}, absent: []string{"b"}, asked: []string{"a"}},
		{name: "a name this mount removed is missing again", run: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), true, in("a"))
			c.leaveDirs(c.enterDirs(d, d), true, out("a"))
		}, absent: []string{"a", "b"}},
		{name: "a rename within the directory", run: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), true, in("a"))
			c.leaveDirs(c.enterDirs(d, d), true, out("a"), in("b"))
		}, absent: []string{"a"}, asked: []string{"b"}},
		{name: "a rename into another directory", run: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), true, in("a"))
			c.leaveDirs(c.enterDirs(d, 11), true, out("a"), nameChange{11, "a", true})
		}, absent: []string{"a"}},
		{name: "an operation under way", run: func(c *longCache) {
			c.enterDirs(d, d)
		}, asked: []string{"a"}},
		{name: "an operation under way in a rename's other directory", run: func(c *longCache) {
			c.enterDirs(11, d)
		}, asked: []string{"a"}},
		{name: "a failed operation", run: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), false, in("a"))
		}, asked: []string{"a", "b"}},
		{name: "a failed rename from another directory", run: func(c *longCache) {
			c.leaveDirs(c.enterDirs(11, d), false)
		}, asked: []string{"b"}},
		{name: "another client's name in it", run: func(c *longCache) {
			c.notice(t0, []changefeed.Name{{Parent: d, Name: "x"}}, nil)
		}, asked: []string{"x", "y"}},
		{name: "another client's name elsewhere", run: func(c *longCache) {
			c.notice(t0, []changefeed.Name{{Parent: 11, Name: "x"}}, []uint64{d})
		}, absent: []string{"x"}},
		{name: "another client's name in it before the mkdir returned", between: func(c *longCache) {
			c.notice(t0, []changefeed.Name{{Parent: d, Name: "x"}}, nil)
		}, asked: []string{"x", "y"}},
		{name: "the feed lost", run: func(c *longCache) {
			c.setHealthy(false)
			c.forgetAll(t0)
			c.setHealthy(true)
		}, asked: []string{"a"}},
		{name: "the feed unhealthy", run: func(c *longCache) { c.setHealthy(false) }, asked: []string{"a"}},
		{name: "the kernel forgot the directory", run: func(c *longCache) { c.kernelForgot(d, 1) }, asked: []string{"a"}},
		{name: "full: the listing that grows past it is dropped", max: 3, run: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), true, in("a"), in("b"))
			c.leaveDirs(c.enterDirs(d, d), true, in("c"))
		}, asked: []string{"a", "d"}},
		{name: "full: a new directory is not listed", max: 1, run: func(c *longCache) {
			c.madeDir(c.begin(), 12)
			if c.absent(12, "a") {
				panic("directory 12 listed past the bound")
			}
		}, absent: []string{"a"}},
		{name: "removals free room", max: 2, run: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), true, in("a"))
			c.leaveDirs(c.enterDirs(d, d), true, out("a"))
			c.leaveDirs(c.enterDirs(d, d), true, in("b"))
		}, absent: []string{"a"}, asked: []string{"b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newLongCache(0)
			c.dirs = newListings(tc.max)
			c.setHealthy(true)
			tok := c.begin()
			if tc.between != nil {
				tc.between(c)
			}
			c.madeDir(tok, d)
			if tc.run != nil {
				tc.run(c)
			}
			checkAnswers(t, c, d, tc.absent, tc.asked)
		})
	}
}

// checkAnswers checks that c answers the names absent of directory d
// missing without a request, and asks the meta nodes for the names asked.
func checkAnswers(t *testing.T, c *longCache, d uint64, absent, asked []string) {
	t.Helper()
	for _, n := range absent {
		if !c.absent(d, n) {
			t.Errorf("%q: not answered missing", n)
		}
	}
	for _, n := range asked {
		if c.absent(d, n) {
			t.Errorf("%q: answered missing, want asked", n)
		}
	}
}

// TestListingsCount checks that the count of kept entries follows every
// path that adds or drops them.
func TestListingsCount(t *testing.T) {
	l := newListings(100)
	l.made(1)
	l.made(2)
	l.set(1, "a", true)
	l.set(1, "a", true)
	l.set(1, "b", true)
	l.set(2, "c", true)
	l.set(3, "x", true) // not listed: ignored
	if l.count != 5 {
		t.Fatalf("count %d, want 5", l.count)
	}
	l.set(1, "a", false)
	l.set(1, "zz", false)
	if l.count != 4 {
		t.Fatalf("count %d, want 4", l.count)
	}
	l.drop(1)
	if l.count != 2 {
		t.Fatalf("count %d after drop, want 2", l.count)
	}
	if l.made(2) || l.dirs[2] != nil || l.count != 0 {
		t.Fatalf("a second mkdir of one inode kept a listing (count %d)", l.count)
	}
	l.made(4)
	l.clear()
	if l.count != 0 || len(l.dirs) != 0 {
		t.Fatalf("clear left %d entries", l.count)
	}
}

// TestListingReads runs sequences of events around a listing read of
// directory 10, which this mount did not make, on a healthy cache, and
// checks whether the read stood and which names are then answered missing
// without a request.
func TestListingReads(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const d = 10
	in := func(n string) nameChange { return nameChange{d, n, true} }
	out := func(n string) nameChange { return nameChange{d, n, false} }
	cases := []struct {
		name string
		// during runs between the read's start and its return, which
		// found names; after runs after it.
		during, after func(c *longCache)
		names         []string
		max           int
		stood         bool
		absent        []string // answered missing
		asked         []string // not known: asked of the meta nodes
	}{
		{name: "a read becomes the listing", names: []string{"a", "b"}, stood: true,
			absent: []string{"c"}, asked: []string{"a", "b"}},
		{name: "an empty directory", stood: true, absent: []string{"a"}},
		{name: "another client's name in it meanwhile", names: []string{"a"}, during: func(c *longCache) {
			c.notice(t0, []changefeed.Name{{Parent: d, Name: "x"}}, nil)
		}, asked: []string{"x", "y"}},
		{name: "another client's name elsewhere meanwhile", names: []string{"a"}, during: func(c *longCache) {
			c.notice(t0, []changefeed.Name{{Parent: 11, Name: "x"}}, nil)
		}, stood: true, absent: []string{"x"}},
		{name: "this mount's names meanwhile, seen by the read or not", names: []string{"a", "b"}, during: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), true, in("x"))
			c.leaveDirs(c.enterDirs(d, d), true, out("b"))
			c.leaveDirs(c.enterDirs(d, d), true, in("b"))
			c.leaveDirs(c.enterDirs(d, d), true, out("a"))
		}, stood: true, absent: []string{"a", "y"}, asked: []string{"x", "b"}},
		{name: "a rename into it meanwhile", during: func(c *longCache) {
			c.leaveDirs(c.enterDirs(11, d), true, nameChange{11, "x", false}, in("x"))
		}, stood: true, absent: []string{"y"}, asked: []string{"x"}},
		{name: "an operation there under way at the return", during: func(c *longCache) {
			c.enterDirs(d, d)
		}, stood: true, asked: []string{"x"}},
		{name: "an operation there ends after the return", names: []string{"a"}, during: func(c *longCache) {
			c.enterDirs(d, d)
		}, after: func(c *longCache) {
			// The operation that was under way (entered above) ends:
			// its change applies and the listing answers from then on.
			c.leaveDirs(dirOp{a: d, b: d}, true, in("x"))
		}, stood: true, absent: []string{"y"}, asked: []string{"a", "x"}},
		{name: "this mount's name after the return, before the listing", during: func(c *longCache) {
			c.enterDirs(d, d)
		}, after: func(c *longCache) {
			c.leaveDirs(dirOp{a: d, b: d}, true, out("a"))
			c.leaveDirs(c.enterDirs(d, d), true, in("z"))
		}, names: []string{"a"}, stood: true, absent: []string{"a"}, asked: []string{"z"}},
		{name: "a failed operation meanwhile", names: []string{"a"}, during: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), false, in("x"))
		}, asked: []string{"x", "y"}},
		{name: "after a failed operation, the next read", during: func(c *longCache) {
			c.leaveDirs(c.enterDirs(d, d), false, in("x"))
		}, after: func(c *longCache) {
			var r *listingRead
			for r == nil {
				r = c.missed(d)
			}
			if !c.listed(d, r, []string{"a"}) {
				t.Errorf("the next read did not stand")
			}
		}, asked: []string{"a"}, absent: []string{"y"}},
		{name: "the feed lost meanwhile", names: []string{"a"}, during: func(c *longCache) {
			c.setHealthy(false)
			c.forgetAll(t0)
			c.setHealthy(true)
		}, asked: []string{"x"}},
		{name: "the feed unhealthy at the return", during: func(c *longCache) { c.setHealthy(false) }, asked: []string{"x"}},
		{name: "the kernel forgot the directory meanwhile", during: func(c *longCache) { c.kernelForgot(d, 1) }, asked: []string{"x"}},
		{name: "a read spoiled and a second begun before the first returned", names: []string{"a"}, during: func(c *longCache) {
			c.notice(t0, []changefeed.Name{{Parent: d, Name: "x"}}, nil)
			for c.missed(d) == nil {
			}
		}, asked: []string{"x", "y"}},
		{name: "past the bound", names: []string{"a", "b", "c"}, max: 3, stood: true, asked: []string{"x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newLongCache(0)
			c.dirs = newListings(tc.max)
			c.setHealthy(true)
			for i := 1; i < listAfterMisses; i++ {
				if c.missed(d) != nil {
					t.Fatalf("a read started after %d misses, want %d", i, listAfterMisses)
				}
			}
			r := c.missed(d)
			if r == nil {
				t.Fatalf("no read after %d misses", listAfterMisses)
			}
			if c.missed(d) != nil {
				t.Fatalf("a second read of the directory while one is under way")
			}
			if tc.during != nil {
				tc.during(c)
			}
			if got := c.listed(d, r, tc.names); got != tc.stood {
				t.Fatalf("listed: %v, want %v", got, tc.stood)
			}
			if tc.after != nil {
				tc.after(c)
			}
			checkAnswers(t, c, d, tc.absent, tc.asked)
		})
	}
}

// TestListingReadLimits: no read while the feed is unhealthy, at most
// maxListingReads at once, and a directory too large for one is read again
// only after listAgainAfter more misses.
func TestListingReadLimits(t *testing.T) {
	c := newLongCache(0)
	c.setHealthy(true)
	reads := map[uint64]*listingRead{}
	miss := func(dir uint64, n int) (started int) {
		for range n {
			if r := c.missed(dir); r != nil {
				reads[dir] = r
				started++
			}
		}
		return started
	}
	c.setHealthy(false)
	if n := miss(2, 10); n != 0 {
		t.Errorf("%d reads started with the feed unhealthy", n)
	}
	c.setHealthy(true)
	for dir := uint64(10); dir < 10+maxListingReads; dir++ {
		if n := miss(dir, listAfterMisses); n != 1 {
			t.Fatalf("directory %d: %d reads started", dir, n)
		}
	}
	if n := miss(20, 3*listAfterMisses); n != 0 {
		t.Errorf("%d reads started past the bound of %d at once", n, maxListingReads)
	}
	c.listingFailed(10, reads[10], true) // too large
	if n := miss(20, 1); n != 1 {
		t.Errorf("a read ended, the next directory's miss started %d reads", n)
	}
	if n := miss(10, listAgainAfter-1); n != 0 {
		t.Errorf("a directory too large was read again %d times within %d misses", n, listAgainAfter-1)
	}
	if n := miss(10, 1); n != 0 {
		// Reads are still full (11..13 and 20): the miss is counted, the
		// read waits for room.
		t.Errorf("read started past the bound")
	}
	c.listingFailed(11, reads[11], false)
	if n := miss(10, 1); n != 1 {
		t.Errorf("after %d misses and room, directory 10 started %d reads", listAgainAfter+1, n)
	}
}
