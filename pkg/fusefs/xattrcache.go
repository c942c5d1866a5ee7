// Files known to have no file capabilities, so that a write costs no
// metadata request for the kernel's capability check.

package fusefs

import (
	"sync"
	"time"
)

// capabilityAttr holds a file's capabilities. The kernel reads it before
// every write to a file (a write must drop them), and almost no file has
// it: without this cache every write(2) through the mount cost one
// GETXATTR round trip to a meta partition.
const capabilityAttr = "security.capability"

// maxNoCaps bounds the files remembered; past it expired entries go, and
// if none has expired the table starts again empty.
const maxNoCaps = 1 << 16

// noCaps remembers, for the attribute timeout, the files a GETXATTR found
// without capabilityAttr. The window is the one the kernel already allows
// for a file's mode bits (set-user-ID is dropped on write by the same check,
// against attributes it caches for as long): a capability another client
// sets on a file shows here within the attribute timeout, and one set or
// removed through this mount at once.
type noCaps struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[uint64]time.Time // ino -> when the answer expires
	gen uint64               // counts changes: an answer older than one is not kept
}

func newNoCaps(ttl time.Duration) *noCaps { return &noCaps{ttl: ttl, m: map[uint64]time.Time{}} }

// known reports whether ino was found without capabilities within the
// timeout; if not, gen is to be passed to absent with the answer.
func (c *noCaps) known(ino uint64) (ok bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.m[ino]
	if ok && time.Now().After(exp) {
		delete(c.m, ino)
		ok = false
	}
	return ok, c.gen
}

// generation is what absent wants for an answer starting now (known
// returns it too).
func (c *noCaps) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// absent records that ino has no capabilities, as a GETXATTR started at
// gen (known) answered, unless an xattr changed through this mount since.
func (c *noCaps) absent(ino, gen uint64) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	now := time.Now()
	if len(c.m) >= maxNoCaps {
		for k, exp := range c.m {
			if now.After(exp) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxNoCaps {
			clear(c.m)
		}
	}
	c.m[ino] = now.Add(c.ttl)
}

// changed forgets what is known of ino: an xattr of it changes through
// this mount.
func (c *noCaps) changed(ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, ino)
}
