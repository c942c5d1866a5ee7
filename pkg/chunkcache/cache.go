// Package chunkcache keeps recently used content-defined chunks in client
// memory, bounded in bytes and keyed by fingerprint.
//
// A chunk's bytes never change under its fingerprint, so an entry never
// needs invalidation: a file that changes gets new fingerprints, and the
// old ones simply age out. Concurrent misses of one fingerprint share a
// single fetch, so a reader and its read-ahead never fetch a chunk twice.
package chunkcache

import (
	"container/list"
	"context"
	"sync"

	"github.com/cairnfs/cairn/pkg/chunker"
)

// Fetch loads the bytes of one chunk (from the data nodes). It must return
// bytes that hash to the fingerprint; the cache does not check them again.
type Fetch func(ctx context.Context) ([]byte, error)

// Cache is a byte-bounded LRU of chunk contents. The zero value is not
// usable; call New. A Cache is safe for concurrent use.
type Cache struct {
	limit int64

	mu      sync.Mutex
	bytes   int64
	lru     *list.List // of *entry, most recent first
	entries map[chunker.Fingerprint]*list.Element
	loading map[chunker.Fingerprint]*call

	hits, misses int64
}

type entry struct {
	fp   chunker.Fingerprint
	data []byte
}

// call is a fetch in flight that later callers wait for.
type call struct {
	done chan struct{}
	data []byte
	err  error
}

// New returns a cache that holds at most limit bytes of chunk data; a
// limit of 0 or less caches nothing (fetches are still shared).
func New(limit int64) *Cache {
	return &Cache{
		limit: limit, lru: list.New(),
		entries: map[chunker.Fingerprint]*list.Element{},
		loading: map[chunker.Fingerprint]*call{},
	}
}

// Get returns the chunk's bytes from memory, or calls fetch once for all
// concurrent callers of fp and keeps the result. The returned slice is
// shared: callers must not modify it. A failed fetch is not remembered.
func (c *Cache) Get(ctx context.Context, fp chunker.Fingerprint, fetch Fetch) ([]byte, error) {
	c.mu.Lock()
	if el, ok := c.entries[fp]; ok {
		c.lru.MoveToFront(el)
		c.hits++
		data := el.Value.(*entry).data
		c.mu.Unlock()
		return data, nil
	}
	c.misses++
	if cl, ok := c.loading[fp]; ok {
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.data, cl.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cl := &call{done: make(chan struct{})}
	c.loading[fp] = cl
	c.mu.Unlock()

	cl.data, cl.err = fetch(ctx)

	c.mu.Lock()
	delete(c.loading, fp)
	if cl.err == nil {
		c.putLocked(fp, cl.data)
	}
	c.mu.Unlock()
	close(cl.done)
	return cl.data, cl.err
}

// Put stores data under fp (a chunk this client just wrote), so that reading
// it back costs no fetch. data must not be modified afterwards.
func (c *Cache) Put(fp chunker.Fingerprint, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(fp, data)
}

func (c *Cache) putLocked(fp chunker.Fingerprint, data []byte) {
	if int64(len(data)) > c.limit {
		return
	}
	if el, ok := c.entries[fp]; ok {
		c.lru.MoveToFront(el)
		return
	}
	c.entries[fp] = c.lru.PushFront(&entry{fp: fp, data: data})
	c.bytes += int64(len(data))
	for c.bytes > c.limit {
		el := c.lru.Back()
		e := el.Value.(*entry)
		c.lru.Remove(el)
		delete(c.entries, e.fp)
		c.bytes -= int64(len(e.data))
	}
}

// Stats are a cache's counters.
type Stats struct {
	Bytes, Limit int64
	Entries      int
	Hits, Misses int64
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Bytes: c.bytes, Limit: c.limit, Entries: len(c.entries), Hits: c.hits, Misses: c.misses}
}
