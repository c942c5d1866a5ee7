package fusefs

import (
	"slices"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/changefeed"
)

func TestLongCacheGrants(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := changefeed.Name{Parent: 1, Name: "f"}
	g := changefeed.Name{Parent: 1, Name: "g"}
	cases := []struct {
		name string
		// between runs after begin, before the grant of f (inode 7).
		healthy bool
		between func(c *longCache)
		max     int
		want    bool
	}{
		{name: "healthy, nothing in between", healthy: true, want: true},
		{name: "no feed", healthy: false, want: false},
		{name: "feed lost in between", healthy: true, between: func(c *longCache) { c.setHealthy(false) }},
		{name: "feed lost and back in between", healthy: true, between: func(c *longCache) {
			c.setHealthy(false)
			c.forgetAll(t0)
			c.setHealthy(true)
		}},
		{name: "a notice for the name in between", healthy: true, between: func(c *longCache) { c.notice(t0, []changefeed.Name{f}, nil) }},
		{name: "a notice for the inode in between", healthy: true, between: func(c *longCache) { c.notice(t0, nil, []uint64{7}) }},
		{name: "notices for other keys in between", healthy: true, want: true, between: func(c *longCache) {
			c.notice(t0, []changefeed.Name{g, {Parent: 2, Name: "f"}}, []uint64{8})
		}},
		{name: "more notices in between than are remembered", healthy: true, between: func(c *longCache) {
			for i := range recentNotices {
				c.notice(t0, nil, []uint64{uint64(100 + i)})
			}
		}},
		{name: "full", healthy: true, max: 3, between: func(c *longCache) {
			c.grant(c.begin(), t0, &g, 8)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newLongCache(tc.max)
			c.setHealthy(tc.healthy)
			tok := c.begin()
			if tc.between != nil {
				tc.between(c)
			}
			if got := c.grant(tok, t0, &f, 7); got != tc.want {
				t.Fatalf("grant = %v, want %v", got, tc.want)
			}
			_, inKeys := c.names[f]
			if _, ok := c.inodes[7]; ok != tc.want || inKeys != tc.want {
				t.Fatalf("kept name %v inode %v after grant %v", inKeys, ok, tc.want)
			}
		})
	}
	var nilCache *longCache
	if nilCache.grant(nilCache.begin(), t0, &f, 7) {
		t.Fatal("a mount without a feed granted")
	}
}

func TestLongCacheNotices(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := changefeed.Name{Parent: 1, Name: "f"}
	g := changefeed.Name{Parent: 1, Name: "g"}
	c := newLongCache(0)
	c.setHealthy(true)
	c.grant(c.begin(), t0, &f, 7)
	c.grant(c.begin(), t0.Add(time.Second), &g, 8)
	c.grant(c.begin(), t0.Add(time.Second), nil, 9)

	// A notice names what the kernel holds for long: f and inode 7
	// granted long ago, g and inode 9 just now (told again later).
	now := t0.Add(time.Second + renotifyAfter/2)
	n, i, againN, againI := c.notice(now, []changefeed.Name{f, g, {Parent: 5, Name: "x"}}, []uint64{7, 9, 10})
	if !slices.Equal(n, []changefeed.Name{f, g}) || !slices.Equal(i, []uint64{7, 9}) {
		t.Fatalf("notice told %v %v, want f, g and inodes 7, 9", n, i)
	}
	if !slices.Equal(againN, []changefeed.Name{g}) || !slices.Equal(againI, []uint64{9}) {
		t.Fatalf("notice tells again %v %v, want g and inode 9", againN, againI)
	}
	// Told once: forgotten.
	if n, i, _, _ := c.notice(now, []changefeed.Name{f}, []uint64{7}); len(n)+len(i) != 0 {
		t.Fatalf("a second notice told %v %v again", n, i)
	}
	// forgetAll names everything still granted, and nothing twice.
	c.grant(c.begin(), now, &f, 7)
	n, i, againN, againI, _ = c.forgetAll(now.Add(time.Second))
	slices.Sort(i)
	if !slices.Equal(n, []changefeed.Name{f}) || !slices.Equal(i, []uint64{7, 8}) || len(againN)+len(againI) != 0 {
		t.Fatalf("forgetAll told %v %v (again %v %v), want f and inodes 7, 8", n, i, againN, againI)
	}
	if n, i, _, _, _ := c.forgetAll(now); len(n)+len(i) != 0 {
		t.Fatalf("a second forgetAll told %v %v", n, i)
	}
	// prune forgets what the kernel dropped by itself.
	c.grant(c.begin(), t0, &f, 7)
	c.grant(c.begin(), t0.Add(time.Minute), &g, 8)
	c.prune(t0.Add(time.Minute+time.Second), time.Minute)
	if _, ok := c.names[f]; ok || c.inodes[7] != (time.Time{}) {
		t.Fatal("prune kept a grant older than the timeout")
	}
	if _, ok := c.names[g]; !ok {
		t.Fatal("prune dropped a grant within the timeout")
	}
}

// TestLongCacheKernelForgot: an inode's grant is freed once FORGETs gave
// back every entry of it the mount handed out, not before: the kernel may
// still hold it (a partial FORGET), or a reply counted before the FORGET
// of an older kernel inode made a new one.
func TestLongCacheKernelForgot(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newLongCache(0)
	c.setHealthy(true)
	reply := func(ino uint64) {
		c.referenced(ino)
		c.grant(c.begin(), t0, nil, ino)
	}
	reply(7)
	reply(7)
	reply(8)
	reply(9)             // the kernel's first inode of 9 ...
	reply(9)             // ... evicted, its FORGET still on the way when a new one is made
	c.kernelForgot(7, 1) // one of two entries back
	c.kernelForgot(8, 1)
	c.kernelForgot(9, 1) // the first inode's FORGET
	for ino, want := range map[uint64]bool{7: true, 8: false, 9: true} {
		if _, ok := c.inodes[ino]; ok != want {
			t.Errorf("inode %d granted %v, want %v", ino, ok, want)
		}
	}
	if _, nowI, _, _ := c.notice(t0.Add(time.Second), nil, []uint64{7, 8, 9}); !slices.Equal(nowI, []uint64{7, 9}) {
		t.Errorf("notices for 7, 8 and 9 told the kernel of %v, want [7 9]", nowI)
	}
	c.kernelForgot(7, 1)
	c.kernelForgot(9, 1)
	if len(c.lookups) != 0 {
		t.Errorf("lookup counts kept for %d inodes after every entry came back", len(c.lookups))
	}
}
