package fusefs

import (
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
)

// staleNames keeps Linux from answering a rename itself over a name this
// mount gave the kernel that another client has renamed since.
//
// The kernel looks up both names of rename(2) before it sends RENAME: the
// old name from its cache while the entry lasts, the new one afresh. When
// both hold one inode it returns success at once, as rename(2) of two hard
// links of one file must, and the file system never hears of it. After
// another client renamed a file from a to b, a host whose kernel still
// holds a (the change feed has not yet told it otherwise) and runs the
// same rename gets success for a rename that did not happen: two hosts
// both "renamed" one file, which a queue claimed by renaming its entries
// would take as two claims (a nemesis run found it).
//
// A file with one link has one name. So when a LOOKUP finds a
// non-directory with one link under a name, and this mount gave the kernel
// another name for it within the time the kernel may keep an entry, that
// other name is stale. The answer then carries a new generation for the
// inode: the kernel treats its cached inode as a different file whose node
// id was reused (it marks it bad), the two names no longer hold one inode,
// and the kernel sends RENAME, which the cluster answers ENOENT. Only when
// no handle of the file is open on this mount: the kernel's old inode
// fails every further operation once marked, and an open file must keep
// working wherever another client moved it (then the kernel's shortcut
// stays possible, until the feed drops the stale name).
type staleNames struct {
	ttl time.Duration

	mu     sync.Mutex
	byIno  map[uint64]givenName
	byName map[nameKey]uint64
	gens   map[uint64]uint64 // generation added to the inode's own, once bumped
	pruned time.Time
}

// givenName is the last name this mount gave the kernel for an inode.
type givenName struct {
	key nameKey
	at  time.Time
}

// maxGivenNames bounds the names kept (past it, expired ones are pruned,
// then new ones not kept: a miss only leaves the kernel's shortcut
// possible); maxGens bounds the inodes with a bumped generation.
const (
	maxGivenNames = 1 << 16
	maxGens       = 1 << 16
)

func newStaleNames(ttl time.Duration) *staleNames {
	return &staleNames{ttl: ttl + nameHintSlack, byIno: map[uint64]givenName{}, byName: map[nameKey]uint64{}, gens: map[uint64]uint64{}}
}

// oneName reports whether a is a file that has one name: not a directory
// (whose ".." and parent entry do not count as names here), one link.
func oneName(a *client.Attr) bool {
	return a != nil && a.Mode&syscall.S_IFMT != syscall.S_IFDIR && a.Nlink == 1
}

// gave notes that the kernel got name in parent for a.
func (s *staleNames) gave(parent uint64, name string, a *client.Attr) {
	if !oneName(a) {
		return
	}
	now := time.Now()
	k := nameKey{parent, name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byIno) >= maxGivenNames {
		if now.Sub(s.pruned) >= s.ttl/4 {
			s.prune(now)
		}
		if len(s.byIno) >= maxGivenNames {
			return
		}
	}
	s.dropLocked(k)
	if old, ok := s.byIno[a.Ino]; ok {
		delete(s.byName, old.key)
	}
	s.byIno[a.Ino] = givenName{key: k, at: now}
	s.byName[k] = a.Ino
}

// found is told that a LOOKUP found a under name in parent, before the
// answer goes out. It reports whether another name this mount gave the
// kernel for a is stale, in which case a's generation was bumped (unless
// open, asked only then, says a handle of the file is open here), and
// returns that name.
func (s *staleNames) found(parent uint64, name string, a *client.Attr, open func() bool) (stale nameKey, bumped bool) {
	if !oneName(a) {
		return nameKey{}, false
	}
	s.mu.Lock()
	g, ok := s.byIno[a.Ino]
	s.mu.Unlock()
	if !ok || g.key == (nameKey{parent, name}) || time.Since(g.at) >= s.ttl {
		return nameKey{}, false
	}
	if open() {
		return g.key, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.byIno[a.Ino]; !ok || cur != g || (len(s.gens) >= maxGens && s.gens[a.Ino] == 0) {
		return g.key, false // changed meanwhile, or no room
	}
	s.gens[a.Ino]++
	delete(s.byName, g.key)
	delete(s.byIno, a.Ino)
	return g.key, true
}

// generation is what a's inode number's generation gets added in the
// mount's answers.
func (s *staleNames) generation(ino uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gens[ino]
}

// moved follows this mount's own rename of (parent, name) to (newParent,
// newName): the kernel moved its entry.
func (s *staleNames) moved(parent uint64, name string, newParent uint64, newName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ino, ok := s.byName[nameKey{parent, name}]
	if !ok {
		return
	}
	s.dropLocked(nameKey{newParent, newName})
	delete(s.byName, nameKey{parent, name})
	k := nameKey{newParent, newName}
	s.byIno[ino] = givenName{key: k, at: s.byIno[ino].at}
	s.byName[k] = ino
}

// forget drops (parent, name): this mount removed it.
func (s *staleNames) forget(parent uint64, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(nameKey{parent, name})
}

func (s *staleNames) dropLocked(k nameKey) {
	if ino, ok := s.byName[k]; ok {
		delete(s.byName, k)
		if s.byIno[ino].key == k {
			delete(s.byIno, ino)
		}
	}
}

// prune drops the names the kernel cannot hold any more. The caller holds
// s.mu.
func (s *staleNames) prune(now time.Time) {
	s.pruned = now
	for ino, g := range s.byIno {
		if now.Sub(g.at) >= s.ttl {
			delete(s.byIno, ino)
			delete(s.byName, g.key)
		}
	}
}
