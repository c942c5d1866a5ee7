package fusefs

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// attrHints keeps attributes the servers answered in the course of an
// operation of this mount, to answer the one GETATTR of that inode the
// kernel sends next without a request:
//
//   - a directory just changed (create, mkdir, mknod, symlink, unlink in
//     it): the kernel drops a directory's attributes after every change in
//     it, and with default_permissions the next create there needs them;
//   - a file just opened: the open drops the kernel's cached attributes
//     (close-to-open), and the read or fstat after it needs them.
//
// Without hints each of these costs a second metadata request.
//
// A hint is as fresh as a GETATTR sent when its operation returned, so
// serving it within the attribute timeout promises no less than the
// kernel's own attribute cache; fillAttr still adds what this mount's open
// handles wrote. It is used once. Every other change through this mount
// invalidates the hints it could make stale when it starts and again when
// it ends: those of its inode (setattr, xattrs, and the writes, flushes
// and closes of a file), those of the inodes it changes (link: the file
// and the directory; rename and rmdir: the parents and the inodes the SDK
// names as it goes, then keeping the parents' attributes they answered).
// A hint from an operation that overlapped such a change is not kept, so
// a hint never hides a change this mount made.
type attrHints struct {
	ttl time.Duration // 0: no hints

	buckets [hintBuckets]atomic.Uint64 // bumped by invalidations of one inode (by ino % hintBuckets)
	n       atomic.Int64               // hints kept: invalidations skip the lock at 0

	mu    sync.Mutex
	hints map[uint64]attrHint
}

type attrHint struct {
	a  *client.Attr
	at time.Time
}

// maxAttrHints bounds the hints kept; past it, new ones are dropped.
const maxAttrHints = 4096

// hintBuckets is how many per-inode invalidation counters there are;
// inodes that share one only lose a hint now and then.
const hintBuckets = 1024

// stamp is where the invalidations of an inode stood when an operation
// began.
type stamp struct{ ino uint64 }

func newAttrHints(attrTimeout time.Duration) *attrHints {
	return &attrHints{ttl: min(attrTimeout, time.Second), hints: map[uint64]attrHint{}}
}

// begin returns where the invalidations of ino stand as an operation that
// may bring a hint for it starts.
func (h *attrHints) begin(ino uint64) stamp {
	return stamp{ino: h.buckets[ino%hintBuckets].Load()}
}

// valid reports whether no invalidation of ino happened since st.
func (h *attrHints) valid(ino uint64, st stamp) bool {
	return h.buckets[ino%hintBuckets].Load() == st.ino
}

// put keeps a for its inode unless an invalidation of it happened since st
// (the operation's begin) or a newer hint (later ctime) is kept.
func (h *attrHints) put(st stamp, a *client.Attr) {
	if h.ttl <= 0 || a == nil {
		return
	}
	now := time.Now()
	h.mu.Lock()
	if !h.valid(a.Ino, st) {
		h.mu.Unlock()
		return
	}
	if old, ok := h.hints[a.Ino]; ok && old.a.Ctime.After(a.Ctime) {
		h.mu.Unlock()
		return
	}
	if len(h.hints) >= maxAttrHints {
		h.prune(now)
		if len(h.hints) >= maxAttrHints {
			h.mu.Unlock()
			return
		}
	}
	h.hints[a.Ino] = attrHint{a: a, at: now}
	h.n.Store(int64(len(h.hints)))
	h.mu.Unlock()
	// An invalidation that bumped a counter after the check above may
	// have seen no hint and skipped clearing: look again.
	if !h.valid(a.Ino, st) {
		h.invalidateIno(a.Ino)
	}
}

// take returns and forgets ino's hint if it is younger than the ttl.
func (h *attrHints) take(ino uint64) *client.Attr {
	if h.n.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.hints[ino]
	if !ok {
		return nil
	}
	delete(h.hints, ino)
	h.n.Store(int64(len(h.hints)))
	if time.Since(d.at) >= h.ttl {
		return nil
	}
	return d.a
}

// invalidateInoKeeping is invalidateIno at the end of an operation that
// began at st and learnt ino's attributes: the stamp it returns lets that
// operation still put them when no other invalidation of ino happened
// since st (its own does not count), and stays stale otherwise. Another
// inode sharing ino's counter, invalidated meanwhile, costs the hint.
func (h *attrHints) invalidateInoKeeping(ino uint64, st stamp) stamp {
	if b := &h.buckets[ino%hintBuckets]; b.CompareAndSwap(st.ino, st.ino+1) {
		st.ino++
	} else {
		b.Add(1)
	}
	h.forget(ino)
	return st
}

// invalidateIno drops ino's hint; call it when a change of ino that brings
// no hint starts and when it ends. Cheap when no hint is kept.
func (h *attrHints) invalidateIno(ino uint64) {
	h.buckets[ino%hintBuckets].Add(1)
	h.forget(ino)
}

// forget drops ino's hint, once its counter was bumped.
func (h *attrHints) forget(ino uint64) {
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	delete(h.hints, ino)
	h.n.Store(int64(len(h.hints)))
	h.mu.Unlock()
}

// prune drops expired hints. Called with mu held.
func (h *attrHints) prune(now time.Time) {
	for ino, d := range h.hints {
		if now.Sub(d.at) >= h.ttl {
			delete(h.hints, ino)
		}
	}
}
