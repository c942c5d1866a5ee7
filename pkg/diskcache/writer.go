package diskcache

import (
	"errors"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"path/filepath"
	"syscall"
	"time"
)

// The writer: one goroutine writes the queued blocks into their versions' files and does
// the removals and punched holes, so that no reader waits for the cache's disk.

// writer writes queued blocks and does the removals and punches, in the
// order they were decided, until Close.
func (c *Cache) writer() {
	defer close(c.done)
	for {
		c.doWork()
		c.mu.Lock()
		var j job
		have := len(c.queue) > 0
		if have {
			j = c.queue[0]
			c.queue[0] = job{}
			c.queue = c.queue[1:]
		}
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return
		}
		if !have {
			<-c.wake
			continue
		}
		c.write(j)
	}
}

// doWork does the removals and punches decided so far.
func (c *Cache) doWork() {
	c.mu.Lock()
	work := c.work
	c.work = nil
	c.busy = len(work) > 0
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}()
	for _, w := range work {
		if !w.punch {
			if err := c.fs.Remove(filepath.Join(c.o.Dir, w.v.key.name())); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				c.logf("remove", "disk cache: remove %s: %v", w.v.key.name(), err)
			}
			continue
		}
		c.mu.Lock()
		if w.v.gone { // its file goes whole
			c.mu.Unlock()
			continue
		}
		f := c.acquireLocked(w.v)
		c.mu.Unlock()
		var err error
		if f == nil {
			var kept bool
			if f, kept, err = c.openFile(w.v, false); err == nil && !kept {
				f.Close() // gone meanwhile: its file goes whole
				f, err = nil, nil
			}
		}
		if f != nil {
			err = f.PunchHole(w.off, w.len)
		}
		c.mu.Lock()
		c.releaseLocked(w.v)
		c.mu.Unlock()
		if err != nil {
			c.logf("punch", "disk cache: punch %d bytes at %d of %s: %v", w.len, w.off, w.v.key.name(), err)
		}
	}
}

// write makes room for j (evicting the least recently read blocks), writes
// it into its version's file and adds it to the index, unless it was
// dropped meanwhile.
func (c *Cache) write(j job) {
	size := int64(len(j.data))
	c.mu.Lock()
	c.queued -= size
	if c.pending[j.key] || !c.roomLocked(size) {
		delete(c.pending, j.key)
		c.stats.Dropped++
		j.v.writes--
		c.retireLocked(j.v)
		c.mu.Unlock()
		return
	}
	f := c.acquireLocked(j.v)
	c.mu.Unlock()
	c.doWork() // the evictions' punches before the write

	crcs := make([]uint32, (size+PieceBytes-1)/PieceBytes)
	for i := range crcs {
		crcs[i] = crc32.Checksum(j.data[int64(i)*PieceBytes:min(int64(i+1)*PieceBytes, size)], castagnoli)
	}
	var err error
	if f == nil {
		// j.v has a queued write (j), so it is not gone: f is kept.
		f, _, err = c.openFile(j.v, true)
	}
	if err == nil {
		var n int
		n, err = f.WriteAt(j.data, j.key.Off)
		if err == nil && n != len(j.data) {
			err = io.ErrShortWrite
		}
	}
	if err != nil {
		c.logf("write", "disk cache: write %d bytes at %d of %s: %v", size, j.key.Off, j.v.key.name(), err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(j.v)
	dropped := c.pending[j.key]
	delete(c.pending, j.key)
	j.v.writes--
	switch {
	case err != nil:
		c.stats.WriteErrors++
		c.stats.Dropped++
		if errors.Is(err, syscall.ENOSPC) {
			c.fullUntil = time.Now().Add(fullBackoff)
		}
		if !c.retireLocked(j.v) {
			c.work = append(c.work, fileOp{v: j.v, off: j.key.Off, len: size, punch: true})
		}
	case dropped || c.closed || j.v.gone:
		if !c.retireLocked(j.v) {
			c.work = append(c.work, fileOp{v: j.v, off: j.key.Off, len: size, punch: true})
		}
	default:
		e := &entry{key: j.key, v: j.v, size: size, crcs: crcs}
		e.el = c.lru.PushFront(e)
		c.entries[j.key] = e
		j.v.entries[j.key.Off] = e
		c.bytes += size
		c.free -= size
		c.stats.Written++
	}
}

// roomLocked evicts until size more bytes fit under the limit and above
// the free-space floor; false when they cannot (the disk is too full even
// with the cache empty, or the writer backs off after ENOSPC).
func (c *Cache) roomLocked(size int64) bool {
	now := time.Now()
	if now.Before(c.fullUntil) {
		return false
	}
	if now.Sub(c.freeAt) >= freeCheckEvery {
		free, total, err := c.o.Space(c.o.Dir)
		if err != nil {
			c.logf("statfs", "disk cache: free space of %s: %v", c.o.Dir, err)
			return false
		}
		c.free, c.total, c.freeAt = free, total, now
	}
	allowed := c.o.Limit
	if c.o.FreeRatio > 0 {
		floor := int64(float64(c.total) * c.o.FreeRatio)
		// The cache may grow into free space above the floor, and may
		// always reuse its own bytes.
		allowed = min(allowed, c.bytes+c.free-floor)
	}
	if size > allowed {
		return false
	}
	for c.bytes+size > allowed {
		e := c.lru.Back().Value.(*entry)
		c.removeLocked(e)
		c.free += e.size // punched or removed before the write
	}
	return true
}

// logf logs at most once a minute per kind.
func (c *Cache) logf(kind, format string, args ...any) {
	if c.o.Logf == nil {
		return
	}
	c.logMu.Lock()
	last, now := c.logged[kind], time.Now()
	ok := now.Sub(last) >= time.Minute
	if ok {
		c.logged[kind] = now
	}
	c.logMu.Unlock()
	if ok {
		c.o.Logf(format, args...)
	}
}

func statfs(dir string) (free, total int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
