package multiraft

import (
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// entryCacheBytes bounds each group's entry cache. A round's entries are
// applied (and sent to followers) within a round or two of being written,
// so a small cache serves nearly every read; a host with many groups pays
// at most this much per group.
const entryCacheBytes = 1 << 20

// entryCache holds the newest persisted entries of one group in memory, so
// that raft's reads of entries it has just written do not go to Pebble.
//
// Raft drops entries from its own unstable log as soon as they are
// persisted, and a leader commits an entry only after followers have
// persisted it too, so every entry is read back from storage at least once
// to be applied, and again to be sent to a follower that is one round
// behind. From Pebble each such read is an iterator seek through every
// level; once the log shares its tables with multi-megabyte snapshot
// values, those seeks decompress whole blocks and dominated a meta leader's
// CPU (docs/design.md, "Raft log reads").
//
// The cache holds a contiguous run of entries ending at the last persisted
// one, at most maxBytes of them (but always the newest entry written). It
// mirrors only what is durable: storage updates it when a round's batch is
// committed, never when it is staged.
type entryCache struct {
	ents     []*raftpb.Entry // contiguous indexes; ents[i].Index == first()+i
	sizes    []int           // proto.Size of each entry
	bytes    int
	maxBytes int
}

func newEntryCache(maxBytes int) *entryCache {
	return &entryCache{maxBytes: maxBytes}
}

func (c *entryCache) first() uint64 { return c.ents[0].GetIndex() }
func (c *entryCache) last() uint64  { return c.ents[len(c.ents)-1].GetIndex() }

// append records persisted entries ents (contiguous, non-empty). An append
// that overlaps the cached run replaces its tail from ents[0] on, as raft
// overwrites a conflicting suffix; one that leaves a gap replaces the run.
func (c *entryCache) append(ents []*raftpb.Entry) {
	if c.maxBytes <= 0 || len(ents) == 0 {
		return
	}
	at := ents[0].GetIndex()
	switch {
	case len(c.ents) == 0:
	case at >= c.first() && at <= c.last()+1:
		c.truncateFrom(at)
	default:
		c.clear()
	}
	for _, e := range ents {
		n := proto.Size(e)
		c.ents = append(c.ents, e)
		c.sizes = append(c.sizes, n)
		c.bytes += n
	}
	c.trim()
}

// truncateFrom drops the cached entries at index i and later.
func (c *entryCache) truncateFrom(i uint64) {
	if len(c.ents) == 0 || i > c.last() {
		return
	}
	if i <= c.first() {
		c.clear()
		return
	}
	k := int(i - c.first())
	for _, n := range c.sizes[k:] {
		c.bytes -= n
	}
	clear(c.ents[k:])
	c.ents, c.sizes = c.ents[:k], c.sizes[:k]
}

// compactTo drops the cached entries at index i and earlier (they are in a
// snapshot now).
func (c *entryCache) compactTo(i uint64) {
	if len(c.ents) == 0 || i < c.first() {
		return
	}
	if i >= c.last() {
		c.clear()
		return
	}
	c.dropFront(int(i - c.first() + 1))
}

// trim drops the oldest entries until the cache fits maxBytes, keeping the
// newest entry whatever its size: it is the one raft reads next.
func (c *entryCache) trim() {
	k := 0
	for bytes := c.bytes; bytes > c.maxBytes && k < len(c.ents)-1; k++ {
		bytes -= c.sizes[k]
	}
	c.dropFront(k)
}

// dropFront removes the k oldest entries. It re-slices rather than copying
// the rest down, so a full cache pays for the entries it drops, not for the
// ones it keeps; append moves the live entries to a new array when the
// capacity runs out, which bounds the array at about twice the cache.
func (c *entryCache) dropFront(k int) {
	for _, n := range c.sizes[:k] {
		c.bytes -= n
	}
	clear(c.ents[:k]) // let the dropped entries be collected now
	c.ents, c.sizes = c.ents[k:], c.sizes[k:]
}

func (c *entryCache) clear() {
	clear(c.ents)
	c.ents, c.sizes, c.bytes = c.ents[:0], c.sizes[:0], 0
}

// get returns the entries [lo, hi) limited to maxSize bytes (at least one
// entry), as raft.Storage.Entries does, and whether the cache holds them all.
// The entries are shared, not copied: raft treats what storage returns as
// read-only.
func (c *entryCache) get(lo, hi, maxSize uint64) ([]*raftpb.Entry, bool) {
	if len(c.ents) == 0 || lo >= hi || lo < c.first() || hi-1 > c.last() {
		return nil, false
	}
	from, to := int(lo-c.first()), int(hi-c.first())
	var size uint64
	end := from
	for end < to {
		size += uint64(c.sizes[end])
		if end > from && size > maxSize {
			break
		}
		end++
	}
	return append([]*raftpb.Entry(nil), c.ents[from:end]...), true
}

// term returns entry i's term and whether the cache holds entry i.
func (c *entryCache) term(i uint64) (uint64, bool) {
	if len(c.ents) == 0 || i < c.first() || i > c.last() {
		return 0, false
	}
	return c.ents[i-c.first()].GetTerm(), true
}
