package fusefs

import (
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// nameHints keeps what this mount last told the kernel a name holds (an
// entry from LOOKUP, CREATE, MKDIR, MKNOD, SYMLINK or LINK, or a negative
// LOOKUP), for as long as the kernel may keep that entry. The kernel looks
// up both names of a rename, and the name of an rmdir, before it sends
// RENAME or RMDIR, or holds entries this mount gave it within the entry
// timeout; handing them to the operation (client.WithRenameHints,
// client.WithRmdirHint) saves it its own lookups.
//
// Hints are advice, never an answer: every step of those operations names
// the inode it expects, so a stale hint costs a second try with lookups.
// They are dropped when this mount changes the name (unlink, rmdir,
// rename) and age out with the entry timeout; a change by another client
// is what the operations' checks catch.
type nameHints struct {
	ttl time.Duration

	mu     sync.Mutex
	hints  map[nameKey]nameHint
	pruned time.Time // when prune last ran
}

type nameKey struct {
	parent uint64 // node id of the directory
	name   string
}

type nameHint struct {
	h  client.NameHint
	at time.Time
}

// maxNameHints bounds the hints kept: past it, expired ones are pruned,
// then new ones dropped (a rename without a hint looks its names up).
const maxNameHints = 16384

// nameHintSlack is how much longer than the kernel's entry a hint lives:
// the kernel counts the entry timeout from when the reply arrived, a hint
// from just before it was sent, and with an entry timeout of 0 (the kernel
// asks on every path walk) it lets the LOOKUPs of a rename reach the
// RENAME that follows them.
const nameHintSlack = 50 * time.Millisecond

func newNameHints(entryTimeout time.Duration) *nameHints {
	return &nameHints{ttl: entryTimeout + nameHintSlack, hints: map[nameKey]nameHint{}}
}

// found notes that name in parent holds the inode of a.
func (n *nameHints) found(parent uint64, name string, a *client.Attr) {
	if a == nil {
		return
	}
	n.put(parent, name, client.NameHint{Ino: a.Ino, Mode: a.Mode})
}

// absent notes that name in parent holds nothing.
func (n *nameHints) absent(parent uint64, name string) {
	n.put(parent, name, client.NameHint{Absent: true})
}

func (n *nameHints) put(parent uint64, name string, h client.NameHint) {
	now := time.Now()
	k := nameKey{parent, name}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.hints[k]; !ok && len(n.hints) >= maxNameHints {
		// A full map of live hints (a walk of a large tree) drops new
		// ones rather than scanning it on every put: at most one scan
		// per quarter ttl.
		if now.Sub(n.pruned) >= n.ttl/4 {
			n.prune(now)
		}
		if len(n.hints) >= maxNameHints {
			return
		}
	}
	n.hints[k] = nameHint{h: h, at: now}
}

// take returns and forgets the hint for name in parent, nil if there is
// none younger than the ttl.
func (n *nameHints) take(parent uint64, name string) *client.NameHint {
	k := nameKey{parent, name}
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.hints[k]
	if !ok {
		return nil
	}
	delete(n.hints, k)
	if time.Since(e.at) >= n.ttl {
		return nil
	}
	return &e.h
}

// forget drops the hint for name in parent.
func (n *nameHints) forget(parent uint64, name string) {
	n.mu.Lock()
	delete(n.hints, nameKey{parent, name})
	n.mu.Unlock()
}

// prune drops the expired hints. The caller holds n.mu.
func (n *nameHints) prune(now time.Time) {
	n.pruned = now
	for k, e := range n.hints {
		if now.Sub(e.at) >= n.ttl {
			delete(n.hints, k)
		}
	}
}
