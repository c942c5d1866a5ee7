package fusefs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/changefeed"
)

// coherence keeps the kernel's long-cached names and attributes coherent
// with the other clients' changes (docs/design.md, "Kernel caches kept
// coherent by a change feed"). One loop per meta partition asks the
// partition's leader what other sessions changed since the last answer
// (client.Volume.Changes) and tells the kernel to drop what it holds of
// it. An answer covers every change committed before its request was
// sent; a partition whose last answer is older than half the staleness
// bound (the short timeouts) makes the mount take back every long grant
// and stop granting until every partition answers again. So no name or
// attribute the kernel holds is older than the bound, as with short
// timeouts alone, while names and attributes nobody else changes stay
// cached for CacheTimeout.
type coherence struct {
	fs    *FS
	cache *longCache
	bound time.Duration // the staleness bound: the short timeouts
	ttl   time.Duration // the long timeout
	stop  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	covered map[uint64]time.Time // partition -> when its last answer's request was sent
	running map[uint64]chan struct{}
}

// feedWait is how long a partition's leader may hold a feed request
// while nothing changed; well under the bound, so that a quiet partition
// still answers often enough.
const feedWait = 200 * time.Millisecond

// The waits of a partition's loop after a failed request, doubling.
const (
	feedBackoffMin = 20 * time.Millisecond
	feedBackoffMax = 2 * time.Second
)

// coherenceTick is how often the partitions and the feed's coverage are
// checked.
const coherenceTick = 50 * time.Millisecond

func newCoherence(fs *FS, ttl, bound time.Duration) *coherence {
	return &coherence{fs: fs, cache: newLongCache(0), bound: bound, ttl: ttl, stop: make(chan struct{}),
		covered: map[uint64]time.Time{}, running: map[uint64]chan struct{}{}}
}

// start runs the supervisor; close stops it and every partition's loop.
func (c *coherence) start() {
	c.wg.Add(1)
	go c.supervise()
}

func (c *coherence) close() {
	close(c.stop)
	c.wg.Wait()
}

// supervise starts a loop for every partition of the volume, stops those
// of partitions gone, and allows grants while every partition is covered.
func (c *coherence) supervise() {
	defer c.wg.Done()
	t := time.NewTicker(coherenceTick)
	defer t.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-c.stop:
			c.mu.Lock()
			for _, s := range c.running {
				close(s)
			}
			c.mu.Unlock()
			return
		case <-t.C:
		}
		now := time.Now()
		parts := c.fs.v.Partitions()
		healthy := len(parts) > 0
		c.mu.Lock()
		want := map[uint64]bool{}
		for _, id := range parts {
			want[id] = true
			if c.running[id] == nil {
				s := make(chan struct{})
				c.running[id] = s
				c.wg.Add(1)
				go c.watch(id, s)
			}
			if at, ok := c.covered[id]; !ok || now.Sub(at) > c.bound/2 {
				healthy = false
			}
		}
		for id, s := range c.running {
			if !want[id] {
				close(s)
				delete(c.running, id)
				delete(c.covered, id)
			}
		}
		c.mu.Unlock()
		was := c.cache.isHealthy()
		switch {
		case was && !healthy:
			c.cache.setHealthy(false)
			c.forgetAll(now)
			c.fs.opts.Metrics.feedLost("behind")
		case !was && healthy:
			c.cache.setHealthy(true)
		}
		if now.Sub(lastPrune) > 5*time.Second {
			c.cache.prune(now, c.ttl)
			lastPrune = now
		}
	}
}

// watch polls partition id's change feed until stop closes.
func (c *coherence) watch(id uint64, stop chan struct{}) {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-c.stop:
		}
		cancel()
	}()
	var cursor uint64
	backoff := feedBackoffMin
	for ctx.Err() == nil {
		sent := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, c.bound+feedWait)
		resp, err := c.fs.v.Changes(rctx, id, cursor, feedWait)
		rcancel()
		if err != nil {
			// A leader moving answers again soon; a node without feeds
			// (an earlier version) or a client without the right to one
			// never does: ask ever less often.
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, feedBackoffMax)
			continue
		}
		backoff = feedBackoffMin
		if resp.GetForgetAll() {
			if cursor != 0 {
				c.fs.opts.Metrics.feedLost("reset")
			}
			c.forgetAll(time.Now())
			// Answered at once: do not ask again in a tight loop.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		} else if len(resp.GetNames()) > 0 || len(resp.GetInodes()) > 0 {
			names := make([]changefeed.Name, len(resp.GetNames()))
			for i, n := range resp.GetNames() {
				names[i] = changefeed.Name{Parent: n.GetParent(), Name: string(n.GetName())}
			}
			c.tell(c.cache.notice(time.Now(), names, resp.GetInodes()))
		}
		cursor = resp.GetCursor()
		// The answer covers every change committed before its read
		// barrier, which began after the request was sent, by as much
		// as the partition says (a held request that timed out: its
		// whole wait), and before the answer came back.
		covered := sent.Add(time.Duration(resp.GetCoveredAfterUs()) * time.Microsecond)
		if now := time.Now(); covered.After(now) {
			covered = now
		}
		c.mu.Lock()
		if c.running[id] == stop {
			c.covered[id] = covered
		}
		c.mu.Unlock()
	}
}

// forgetAll takes back every grant. Where the kernel has a dentry epoch
// (epoch.go), one bump drops every name at once without waiting for any
// directory's lock, which a stalled operation of this mount may hold; a
// name is then told again only if it was granted just before (the
// kernel may apply that reply after the bump; renotifyAfter). Otherwise
// each name is told apart.
//
// With no name granted since the last forget-all there is nothing to
// take back, and no bump: a bump drops every entry the kernel holds,
// short-lived ones too, and Linux evicts the inode of a dropped entry
// that no open file holds (FUSE keeps no unreferenced inode), cached
// pages and all: the next read of a file just written or read would
// fetch it whole again. (A name granted since, and taken back by a notice
// that still waits for its directory's lock, needs the bump although it
// is no longer listed as granted.)
func (c *coherence) forgetAll(now time.Time) {
	names, inodes, againN, againI, named := c.cache.forgetAll(now)
	if named && c.fs.bumpEpoch() {
		names = nil
	}
	c.tell(names, inodes, againN, againI)
}

// tell invalidates what the kernel holds of names and inodes now, and of
// againN and againI once more after renotifyAfter.
func (c *coherence) tell(names []changefeed.Name, inodes []uint64, againN []changefeed.Name, againI []uint64) {
	c.fs.invalidate(names, inodes)
	if len(againN) == 0 && len(againI) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-c.stop:
		case <-time.After(renotifyAfter):
			c.fs.invalidate(againN, againI)
		}
	}()
}

// bumpEpoch makes the kernel check every name it holds of this mount on
// its next use, and reports whether it could (epoch.go).
func (fs *FS) bumpEpoch() bool {
	e := fs.epoch.Load()
	if e == nil {
		return false
	}
	if err := e.bump(); err != nil {
		slog.Warn("kernel names are dropped one by one", "err", err)
		fs.epoch.CompareAndSwap(e, nil)
		return false
	}
	fs.opts.Metrics.epochBumped()
	return true
}

// dropEntry tells the kernel to drop the entry of k, a name it holds
// that is stale. It waits for the directory's lock, which a rename that
// looked the name up holds until it is answered: it runs apart.
func (fs *FS) dropEntry(k nameKey) {
	if s := fs.server.Load(); s != nil {
		s.EntryNotify(k.parent, k.name)
	}
}

// invalidate tells the kernel to drop names and the attributes of
// inodes, and drops what this mount keeps of them.
func (fs *FS) invalidate(names []changefeed.Name, inodes []uint64) {
	s := fs.server.Load()
	for _, ino := range inodes {
		fs.hints.invalidateIno(ino)
		fs.noCaps.changed(ino)
		if s != nil {
			s.InodeNotify(fs.node(ino), -1, 0)
		}
	}
	if s == nil {
		return
	}
	for _, n := range names {
		s.EntryNotify(fs.node(n.Parent), n.Name)
	}
	fs.opts.Metrics.invalidated(len(names), len(inodes))
}
