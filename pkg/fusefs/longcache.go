package fusefs

import (
	"hash/fnv"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/changefeed"
)

// longCache decides which replies may let the kernel cache a name or an
// inode's attributes for long (Options.CacheTimeout), and remembers them,
// so that they can be taken back when another client changes them
// (coherence.go). Pure logic; the caller supplies the time.
//
// The kernel applies a reply some time after the mount decided its
// timeouts, and a change notice may come in between. Two rules close that
// window:
//
//   - A reply decides at its end (grant) with the token it took at its
//     start (begin): a notice for one of its keys in between, or a loss of
//     the feed, makes it a short-timeout reply.
//   - A notice for a key granted shortly before (renotifyAfter) is sent
//     to the kernel again after that delay, when the kernel has applied
//     the reply the grant was for.
//
// Attributes also carry the kernel's own protection (a reply to a request
// sent before an invalidation does not overwrite it); names do not.
type longCache struct {
	max int // the most keys kept; past it, replies get short timeouts

	mu      sync.Mutex
	healthy bool   // the feed covers every partition: grants allowed
	seq     uint64 // notices so far
	recent  [recentNotices]uint64
	names   map[changefeed.Name]time.Time // granted names -> when
	inodes  map[uint64]time.Time          // granted inodes -> when
	dirs    *listings                     // directories whose every name is known
	lookups map[uint64]uint64             // entries of each inode the kernel holds
	// named: a name was granted since the last forgetAll. Its notice may
	// be waiting for a directory's lock (coherence.forgetAll).
	named bool
}

const (
	// recentNotices is how many notices a reply in flight is checked
	// against; a reply that saw more is not granted.
	recentNotices = 4096
	// renotifyAfter: a key granted less than this before its notice is
	// notified again this much later.
	renotifyAfter = 200 * time.Millisecond
	// maxLongKeys bounds the keys granted at a time (names and inodes):
	// taking them all back must fit well within the staleness bound
	// (a notification costs a few microseconds).
	maxLongKeys = 1 << 16
	// allKeys in recent marks a notice that took back everything.
	allKeys = 0
)

func newLongCache(max int) *longCache {
	if max <= 0 {
		max = maxLongKeys
	}
	return &longCache{max: max, names: map[changefeed.Name]time.Time{}, inodes: map[uint64]time.Time{},
		dirs: newListings(0), lookups: map[uint64]uint64{}}
}

// grantToken is where the notices stood when a reply's request began.
type grantToken struct {
	seq uint64
	ok  bool
}

// begin returns the token of a request that may end in a grant. A nil
// cache (no feed) never grants.
func (c *longCache) begin() grantToken {
	if c == nil {
		return grantToken{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return grantToken{seq: c.seq, ok: c.healthy}
}

func nameFingerprint(n changefeed.Name) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(n.Parent >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(n.Name))
	return h.Sum64() | 1 // never allKeys
}

func inodeFingerprint(ino uint64) uint64 {
	z := ino*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9
	return (z ^ (z >> 29)) | 2 // never allKeys; apart from most name keys
}

// dirFingerprint is the key of "a name in directory dir changed".
func dirFingerprint(dir uint64) uint64 {
	z := dir*0xd1b54a32d192ed03 + 0x8bb84b93962eacc9
	z = (z ^ (z >> 32)) * 0x94d049bb133111eb
	return (z ^ (z >> 29)) | 4 // never allKeys
}

// noticedSince reports whether a notice after seq may concern key. Called
// with mu held.
func (c *longCache) noticedSince(seq uint64, key uint64) bool {
	if c.seq-seq >= recentNotices {
		return true
	}
	for s := seq + 1; s <= c.seq; s++ {
		if k := c.recent[s%recentNotices]; k == key || k == allKeys {
			return true
		}
	}
	return false
}

// grant decides whether a reply begun at tok may let the kernel cache
// name (nil: none) and ino's attributes (0: none) for long, and if so
// records them.
func (c *longCache) grant(tok grantToken, now time.Time, name *changefeed.Name, ino uint64) bool {
	if c == nil || !tok.ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.healthy || len(c.names)+len(c.inodes)+2 > c.max {
		return false
	}
	if name != nil && c.noticedSince(tok.seq, nameFingerprint(*name)) || ino != 0 && c.noticedSince(tok.seq, inodeFingerprint(ino)) {
		return false
	}
	if name != nil {
		c.names[*name] = now
		c.named = true
	}
	if ino != 0 {
		c.inodes[ino] = now
	}
	return true
}

// notice records that other clients changed names and inodes. It returns
// those of them the kernel may hold for long, to be invalidated now, and
// among them those granted within renotifyAfter, to be invalidated again
// after it. They are forgotten: the kernel holds them no more once told.
func (c *longCache) notice(now time.Time, names []changefeed.Name, inodes []uint64) (nowN []changefeed.Name, nowI []uint64, againN []changefeed.Name, againI []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		c.seq++
		c.recent[c.seq%recentNotices] = nameFingerprint(n)
		c.seq++
		c.recent[c.seq%recentNotices] = dirFingerprint(n.Parent)
		c.dirs.drop(n.Parent)
		takeBack(c.names, n, now, &nowN, &againN)
	}
	for _, ino := range inodes {
		c.seq++
		c.recent[c.seq%recentNotices] = inodeFingerprint(ino)
		takeBack(c.inodes, ino, now, &nowI, &againI)
	}
	return nowN, nowI, againN, againI
}

// forgetAll takes back every grant (the feed was lost, or cannot say what
// changed), as notice does for each; replies in flight are not granted.
// named reports whether a name was granted since the last forgetAll.
func (c *longCache) forgetAll(now time.Time) (nowN []changefeed.Name, nowI []uint64, againN []changefeed.Name, againI []uint64, named bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	named, c.named = c.named, false
	c.seq++
	c.recent[c.seq%recentNotices] = allKeys
	c.dirs.clear()
	for n := range c.names {
		takeBack(c.names, n, now, &nowN, &againN)
	}
	for ino := range c.inodes {
		takeBack(c.inodes, ino, now, &nowI, &againI)
	}
	return nowN, nowI, againN, againI, named
}

// takeBack forgets the grant of key k, if any, listing k in told and,
// when it was granted within renotifyAfter of now, in again.
func takeBack[K comparable](granted map[K]time.Time, k K, now time.Time, told, again *[]K) {
	at, ok := granted[k]
	if !ok {
		return
	}
	delete(granted, k)
	*told = append(*told, k)
	if now.Sub(at) < renotifyAfter {
		*again = append(*again, k)
	}
}

// setHealthy allows grants (the feed covers every partition) or stops
// them.
func (c *longCache) setHealthy(ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.healthy = ok
}

func (c *longCache) isHealthy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.healthy
}

// prune forgets grants older than ttl, which the kernel has dropped by
// itself.
func (c *longCache) prune(now time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n, at := range c.names {
		if now.Sub(at) > ttl {
			delete(c.names, n)
		}
	}
	for ino, at := range c.inodes {
		if now.Sub(at) > ttl {
			delete(c.inodes, ino)
		}
	}
}

// madeDir starts the listing of directory dir (listings.go), which a mkdir
// of this mount begun at tok made: empty, unless the feed told of a name
// in it since (another client found it already) or is lost.
func (c *longCache) madeDir(tok grantToken, dir uint64) {
	if c == nil || !tok.ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.healthy && !c.noticedSince(tok.seq, dirFingerprint(dir)) {
		c.dirs.made(dir)
	}
}

// absent reports whether name is known to be missing from directory dir:
// the feed is healthy, this mount knows every name of dir, and no
// operation of this mount there is under way.
func (c *longCache) absent(dir uint64, name string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.healthy && c.dirs.absent(dir, name)
}

// missed counts a missing name of directory dir that the meta nodes
// answered and returns the listing read of dir this mount should run now
// (listings.missed; nil: none), only while the feed is healthy. The
// caller ends it with listed or listingFailed.
func (c *longCache) missed(dir uint64) *listingRead {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.healthy {
		return nil
	}
	return c.dirs.missed(dir)
}

// listed hands over what listing read r of dir found, names, and reports
// whether the read still stands (listings.read): not when another client
// changed a name there meanwhile, an operation of this mount there failed,
// or the feed is not healthy (a loss meanwhile spoiled it too).
func (c *longCache) listed(dir uint64, r *listingRead, names []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.healthy {
		c.dirs.readFailed(dir, r, false)
		return false
	}
	return c.dirs.read(dir, r, names)
}

// listingFailed ends listing read r of dir without a listing (tooLarge:
// dir held more names than a listing read keeps).
func (c *longCache) listingFailed(dir uint64, r *listingRead, tooLarge bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirs.readFailed(dir, r, tooLarge)
}

// dirOp is an operation of this mount that changes names in directories
// a and b (the same for all but a rename across two).
type dirOp struct {
	a, b   uint64
	la, lb *listing // the listings entered
}

// nameChange is a name an operation made present in dir, or absent.
type nameChange struct {
	dir     uint64
	name    string
	present bool
}

// enterDirs starts an operation in directories a and b: their listings do
// not answer until leaveDirs.
func (c *longCache) enterDirs(a, b uint64) dirOp {
	op := dirOp{a: a, b: b}
	if c == nil {
		return op
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	op.la = c.dirs.enter(a)
	if b != a {
		op.lb = c.dirs.enter(b)
	}
	return op
}

// leaveDirs ends op. When it succeeded, the listings learn its changes;
// when it failed, what it did is not known for sure, and they are
// dropped.
func (c *longCache) leaveDirs(op dirOp, ok bool, changes ...nameChange) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		c.dirs.drop(op.a)
		c.dirs.drop(op.b)
	} else {
		for _, ch := range changes {
			c.dirs.set(ch.dir, ch.name, ch.present)
		}
	}
	c.dirs.leave(op.a, op.la)
	if op.b != op.a {
		c.dirs.leave(op.b, op.lb)
	}
}

// referenced counts a reply that hands the kernel an entry of inode ino:
// the kernel counts them too (its lookup count) and forgets the inode
// once FORGETs have given them all back.
func (c *longCache) referenced(ino uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups[ino]++
}

// kernelForgot takes n of ino's entries back (a FORGET). The directory's
// listing is dropped at any FORGET; once every entry is back, no kernel
// inode holds ino's attributes, and their grant is freed. A reply counted
// before a FORGET of an older kernel inode arrives keeps the count above
// zero, so the grant of the inode that reply makes stays.
func (c *longCache) kernelForgot(ino, n uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirs.drop(ino)
	if left := c.lookups[ino]; left > n {
		c.lookups[ino] = left - n
		return
	}
	delete(c.lookups, ino)
	delete(c.inodes, ino)
}
