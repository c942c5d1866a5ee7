package fusefs

import (
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// dirHints keeps the attributes a meta partition answered for a directory
// this mount just changed (create, mkdir, mknod, symlink, unlink in it),
// to answer the one GETATTR of that directory the kernel sends next: it
// drops a directory's attributes after every change in it, and with
// default_permissions the next create there needs them. Without hints
// every create through the mount costs a second metadata request.
//
// A hint is as fresh as a GETATTR sent when the change returned, so
// serving it within the attribute timeout promises no less than the
// kernel's own attribute cache. It is used once. Every other change to a
// directory's attributes through this mount (setattr, rename, rmdir, link,
// xattrs) invalidates all hints when it starts and again when it ends, and
// a hint from an operation that overlapped such a change is not kept, so
// a hint never hides a change this mount made.
type dirHints struct {
	ttl time.Duration // 0: no hints

	mu    sync.Mutex
	epoch uint64 // bumped by every invalidation
	hints map[uint64]dirHint
}

type dirHint struct {
	a  *client.Attr
	at time.Time
}

// maxDirHints bounds the hints kept; past it, new ones are dropped.
const maxDirHints = 4096

func newDirHints(attrTimeout time.Duration) *dirHints {
	return &dirHints{ttl: min(attrTimeout, time.Second), hints: map[uint64]dirHint{}}
}

// begin returns the epoch a hinting operation starts in.
func (h *dirHints) begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch
}

// put keeps a for its directory unless an invalidation happened since
// epoch (the operation's begin) or a newer hint (later ctime) is kept.
func (h *dirHints) put(epoch uint64, a *client.Attr) {
	if h.ttl <= 0 || a == nil {
		return
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.epoch != epoch {
		return
	}
	if old, ok := h.hints[a.Ino]; ok && old.a.Ctime.After(a.Ctime) {
		return
	}
	if len(h.hints) >= maxDirHints {
		h.prune(now)
		if len(h.hints) >= maxDirHints {
			return
		}
	}
	h.hints[a.Ino] = dirHint{a: a, at: now}
}

// take returns and forgets ino's hint if it is younger than the ttl.
func (h *dirHints) take(ino uint64) *client.Attr {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.hints[ino]
	if !ok {
		return nil
	}
	delete(h.hints, ino)
	if time.Since(d.at) >= h.ttl {
		return nil
	}
	return d.a
}

// invalidate drops every hint; call it when a change that brings no hint
// starts and when it ends.
func (h *dirHints) invalidate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch++
	clear(h.hints)
}

// prune drops expired hints. Called with mu held.
func (h *dirHints) prune(now time.Time) {
	for ino, d := range h.hints {
		if now.Sub(d.at) >= h.ttl {
			delete(h.hints, ino)
		}
	}
}
