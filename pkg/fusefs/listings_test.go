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
			for _, n := range tc.absent {
				if !c.absent(d, n) {
					t.Errorf("%q: not answered missing", n)
				}
			}
			for _, n := range tc.asked {
				if c.absent(d, n) {
					t.Errorf("%q: answered missing, want asked", n)
				}
			}
		})
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
