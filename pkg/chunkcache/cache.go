// Package chunkcache keeps recently used contents in client memory,
// bounded in bytes and keyed by what names one version of them: a
// content-defined chunk by its fingerprint, a small file by its inode and
// version (pkg/client).
//
// The bytes under a key are meant never to change, so an entry needs no
// invalidation: a file that changes gets new keys, and the old ones
// simply age out (Delete drops one early). Concurrent misses of one key
// share a single fetch, so a reader and its read-ahead never fetch the
// same contents twice.
package chunkcache

import (
	"container/list"
	"context"
	"sync"
)

// Fetch loads the bytes a key names (from the data nodes). For a chunk
// they must hash to its fingerprint; the cache does not check them again.
type Fetch func(ctx context.Context) ([]byte, error)

// Cache is a byte-bounded LRU of contents under keys of type K. The zero
// value is not usable; call New. A Cache is safe for concurrent use.
type Cache[K comparable] struct {
	limit int64

	mu      sync.Mutex
	bytes   int64
	lru     *list.List // of *entry[K], most recent first
	entries map[K]*list.Element
	loading map[K]*call

	hits, misses int64
}

type entry[K comparable] struct {
	key  K
	data []byte
}

// call is a fetch in flight that later callers wait for.
type call struct {
	done    chan struct{}
	data    []byte
	err     error
	dropped bool // Delete came while it ran: its result is not kept
}

// New returns a cache that holds at most limit bytes of contents; a limit
// of 0 or less caches nothing (fetches are still shared).
func New[K comparable](limit int64) *Cache[K] {
	return &Cache[K]{
		limit: limit, lru: list.New(),
		entries: map[K]*list.Element{},
		loading: map[K]*call{},
	}
}

// Get returns the bytes under key from memory, or calls fetch once for all
// concurrent callers of key and keeps the result. The returned slice is
// shared: callers must not modify it. A failed fetch is not remembered.
func (c *Cache[K]) Get(ctx context.Context, key K, fetch Fetch) ([]byte, error) {
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		c.hits++
		data := el.Value.(*entry[K]).data
		c.mu.Unlock()
		return data, nil
	}
	c.misses++
	if cl, ok := c.loading[key]; ok {
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.data, cl.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cl := &call{done: make(chan struct{})}
	c.loading[key] = cl
	c.mu.Unlock()

	cl.data, cl.err = fetch(ctx)

	c.mu.Lock()
	delete(c.loading, key)
	if cl.err == nil && !cl.dropped {
		c.putLocked(key, cl.data)
	}
	c.mu.Unlock()
	close(cl.done)
	return cl.data, cl.err
}

// Lookup returns the bytes under key if they are kept, without fetching
// (a hit is counted; a miss is left to the Get that follows it).
func (c *Cache[K]) Lookup(key K) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(el)
	c.hits++
	return el.Value.(*entry[K]).data, true
}

// Put stores data under key (a chunk this client just wrote), so that
// reading it back costs no fetch. data must not be modified afterwards.
func (c *Cache[K]) Put(key K, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(key, data)
}

// Delete drops what is kept under key, and keeps nothing from a fetch of
// it under way: the caller learned that the bytes it names may have
// changed. The fetch's callers still get its result.
func (c *Cache[K]) Delete(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.lru.Remove(el)
		delete(c.entries, key)
		c.bytes -= int64(len(el.Value.(*entry[K]).data))
	}
	if cl, ok := c.loading[key]; ok {
		cl.dropped = true
	}
}

// DeleteIf is Delete of every key drop returns true for (kept or being
// fetched); it looks at every key, so it suits caches of thousands of
// entries, not millions.
func (c *Cache[K]) DeleteIf(drop func(K) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, el := range c.entries {
		if drop(key) {
			c.lru.Remove(el)
			delete(c.entries, key)
			c.bytes -= int64(len(el.Value.(*entry[K]).data))
		}
	}
	for key, cl := range c.loading {
		if drop(key) {
			cl.dropped = true
		}
	}
}

func (c *Cache[K]) putLocked(key K, data []byte) {
	if int64(len(data)) > c.limit {
		return
	}
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		return
	}
	c.entries[key] = c.lru.PushFront(&entry[K]{key: key, data: data})
	c.bytes += int64(len(data))
	for c.bytes > c.limit {
		el := c.lru.Back()
		e := el.Value.(*entry[K])
		c.lru.Remove(el)
		delete(c.entries, e.key)
		c.bytes -= int64(len(e.data))
	}
}

// Limit returns the most bytes the cache holds (fixed by New).
func (c *Cache[K]) Limit() int64 { return c.limit }

// Stats are a cache's counters.
type Stats struct {
	Bytes, Limit int64
	Entries      int
	Hits, Misses int64
}

// Stats returns the current counters.
func (c *Cache[K]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Bytes: c.bytes, Limit: c.limit, Entries: len(c.entries), Hits: c.hits, Misses: c.misses}
}
