// Package diskcache keeps blocks of files' contents on the client's local
// disk, so that a block read again after it left the client's memory costs
// a local read instead of a request to a data node: the disk cache that
// JuiceFS users get by default (its --cache-dir), under Cairn's in-memory
// file cache.
//
// What it guarantees:
//   - A read returns the bytes that were put under the key, or reports a
//     miss; never other bytes. Every 4 KiB of a block has a CRC-32C kept in
//     memory from the time the block was written, and a read checks the
//     pieces it touches: a cache file that was changed, cut or lost on
//     disk is a miss (and is removed), not a wrong answer.
//   - It never fails its caller: a full disk, an I/O error or a corrupt
//     file makes a miss or a block not kept, counted in Stats.
//   - It holds at most Options.Limit bytes of blocks and leaves
//     Options.FreeRatio of its file system free, evicting the least
//     recently read blocks first.
//   - Its index lives in memory only: Open removes whatever an earlier run
//     left in the directory, so bytes are never served across restarts of
//     the client (a recreated volume may reuse inode numbers), and a block
//     half-written by a crash is never read. Close removes the files;
//     RemoveStale removes those of killed clients.
//
// Keys must name immutable contents: one version of one block of a file.
// The client builds them from the inode, its Version and the block number,
// so a file's new contents get new keys and old ones age out; DropIno
// removes a file's blocks at once (a deleted file's bytes leave the disk
// without waiting for eviction).
//
// Writes are asynchronous: Put queues the block (bounded by
// Options.QueueBytes; a full queue drops it) and one goroutine writes the
// queue, so a read that missed never waits for the cache's disk.
package diskcache

import (
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// PieceBytes is the unit a CRC covers: a read checks, and so reads, whole
// pieces.
const PieceBytes = 4 << 10

// Defaults of Options.
const (
	DefaultFreeRatio  = 0.1
	DefaultQueueBytes = 64 << 20
	// maxOpen bounds the cache files kept open between reads: opening
	// one was a sixth of the mount's CPU in random 4 KiB reads served
	// from the cache.
	maxOpen = 256
	// maxDropped bounds the inodes whose DropIno the cache remembers.
	maxDropped = 1 << 16
	// freeCheckEvery bounds how stale the file system's free space may be
	// when the writer decides whether a block fits.
	freeCheckEvery = time.Second
	// fullBackoff is how long the writer stops after the disk said ENOSPC.
	fullBackoff = 5 * time.Second
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Key names one immutable block: block Block of inode Ino at version Gen.
// Gen may hold only letters, digits, '.' and '-' (it is part of a file
// name); Put ignores a key that breaks this.
type Key struct {
	Ino   uint64
	Gen   string
	Block int64
}

func (k Key) valid() bool {
	if k.Gen == "" || len(k.Gen) > 128 || k.Block < 0 {
		return false
	}
	for i := 0; i < len(k.Gen); i++ {
		c := k.Gen[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// name is the key's file, relative to the cache directory: one of 256
// subdirectories by inode, so that no directory grows huge.
func (k Key) name() string {
	return filepath.Join(fmt.Sprintf("%02x", k.Ino&0xff), fmt.Sprintf("%x_%s_%d", k.Ino, k.Gen, k.Block))
}

// Options configure a Cache.
type Options struct {
	// Dir is the cache's directory, created if missing. Everything in it
	// is the cache's: Open empties it.
	Dir string
	// Limit bounds the bytes of blocks kept (> 0).
	Limit int64
	// FreeRatio is the share of Dir's file system the cache leaves free
	// (0: DefaultFreeRatio; negative: no floor).
	FreeRatio float64
	// QueueBytes bounds the blocks waiting to be written (0:
	// DefaultQueueBytes).
	QueueBytes int64
	// FS is the file system under Dir (nil: the host's).
	FS diskfs.FS
	// Space returns Dir's file system's free and total bytes (nil: statfs).
	Space func(dir string) (free, total int64, err error)
	// Logf, when set, is told of what the cache gave up on (a write error,
	// a corrupt block), at most once a minute per kind.
	Logf func(format string, args ...any)
}

// Stats are a cache's counters since Open.
type Stats struct {
	Bytes, Limit int64
	Blocks       int
	Hits, Misses int64
	// Written counts blocks written; Dropped blocks not kept (queue full,
	// no room, a write error); Corrupt blocks found changed on disk.
	Written, Dropped, Corrupt, WriteErrors int64
	QueuedBytes                            int64
}

// Cache is a disk cache of blocks. Safe for concurrent use.
type Cache struct {
	o    Options
	fs   diskfs.FS
	lock io.Closer

	mu       sync.Mutex
	entries  map[Key]*entry
	byIno    map[uint64]map[Key]struct{}
	lru      *list.List // of *entry, most recently read first
	fds      *list.List // of *entry with an open file, most recently opened first
	bytes    int64
	queue    []job
	queued   int64
	pending  map[Key]bool // queued or being written; true: dropped meanwhile
	removals []string     // files to remove, by the writer
	// seq counts DropIno calls; droppedAt is the seq of each inode's
	// last one, and a Put whose mark is below floor is refused (Put).
	seq, floor uint64
	droppedAt  map[uint64]uint64
	wake       chan struct{}
	closed     bool
	done       chan struct{}
	stats      Stats
	// free is the file system's free space at freeAt, minus what was
	// written since; fullUntil stops writes after ENOSPC.
	free, total int64
	freeAt      time.Time
	fullUntil   time.Time
	logged      map[string]time.Time
}

type entry struct {
	key  Key
	size int64
	crcs []uint32 // one per PieceBytes
	el   *list.Element
	// f is the file kept open for reads (nil: none), in Cache.fds at
	// fdEl; refs counts the reads using the entry; gone is set when it
	// left the index (f is closed when refs falls to 0).
	f    diskfs.File
	fdEl *list.Element
	refs int
	gone bool
}

type job struct {
	key  Key
	data []byte
}

// Open empties o.Dir (creating it), locks it against a second cache in the
// same directory (diskfs.ErrLocked), and starts the writer.
func Open(o Options) (*Cache, error) {
	if o.Dir == "" || o.Limit <= 0 {
		return nil, fmt.Errorf("disk cache: want a directory and a positive size, have %q and %d bytes", o.Dir, o.Limit)
	}
	if o.FreeRatio == 0 {
		o.FreeRatio = DefaultFreeRatio
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.Space == nil {
		o.Space = statfs
	}
	fs := o.FS
	if fs == nil {
		fs = diskfs.OS
	}
	if err := fs.MkdirAll(o.Dir); err != nil {
		return nil, fmt.Errorf("disk cache %s: %w", o.Dir, err)
	}
	lockName := filepath.Join(o.Dir, "LOCK")
	if _, err := fs.Stat(lockName); err != nil {
		// The file marks the directory as a cache's (RemoveStale).
		f, err := fs.Create(lockName)
		if err != nil {
			return nil, fmt.Errorf("disk cache %s: %w", o.Dir, err)
		}
		f.Close()
	}
	lock, err := fs.Lock(lockName)
	if err != nil {
		return nil, fmt.Errorf("disk cache %s: %w", o.Dir, err)
	}
	if err := empty(fs, o.Dir); err != nil {
		lock.Close()
		return nil, err
	}
	for i := 0; i < 256; i++ {
		if err := fs.MkdirAll(filepath.Join(o.Dir, fmt.Sprintf("%02x", i))); err != nil {
			lock.Close()
			return nil, fmt.Errorf("disk cache %s: %w", o.Dir, err)
		}
	}
	c := &Cache{
		o: o, fs: fs, lock: lock,
		entries: map[Key]*entry{}, byIno: map[uint64]map[Key]struct{}{},
		lru: list.New(), fds: list.New(), pending: map[Key]bool{}, droppedAt: map[uint64]uint64{},
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		logged: map[string]time.Time{},
	}
	c.stats.Limit = o.Limit
	go c.writer()
	return c, nil
}

// Close stops the writer (blocks still queued are not written), removes
// the cache's files and directory, and releases it.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.signal()
	<-c.done
	c.mu.Lock()
	for el := c.fds.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry)
		e.f.Close()
		e.f, e.fdEl = nil, nil
	}
	c.fds.Init()
	c.mu.Unlock()
	err := empty(c.fs, c.o.Dir)
	if cerr := c.lock.Close(); err == nil {
		err = cerr
	}
	// Another cache may have taken the directory since: then these fail.
	_ = c.fs.Remove(filepath.Join(c.o.Dir, "LOCK"))
	_ = c.fs.Remove(c.o.Dir)
	return err
}

// empty removes everything in dir but its LOCK.
func empty(fs diskfs.FS, dir string) error {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("disk cache %s: %w", dir, err)
	}
	for _, n := range names {
		if n == "LOCK" {
			continue
		}
		if err := diskfs.RemoveAll(fs, filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("disk cache %s: empty it: %w", dir, err)
		}
	}
	return nil
}

// RemoveStale removes the caches in the subdirectories of parent that no
// process holds (left by a client that was killed: a cache removes its
// files when closed) and returns how many it removed. A subdirectory
// without a LOCK file is not a cache and is left alone.
func RemoveStale(fs diskfs.FS, parent string) (int, error) {
	if fs == nil {
		fs = diskfs.OS
	}
	names, err := fs.ReadDir(parent)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	removed := 0
	for _, n := range names {
		dir := filepath.Join(parent, n)
		if _, err := fs.Stat(filepath.Join(dir, "LOCK")); err != nil {
			continue
		}
		lock, err := fs.Lock(filepath.Join(dir, "LOCK"))
		if err != nil {
			continue // a live cache, or not ours to judge
		}
		err = empty(fs, dir)
		lock.Close()
		if err != nil {
			return removed, err
		}
		_ = fs.Remove(filepath.Join(dir, "LOCK"))
		_ = fs.Remove(dir)
		removed++
	}
	return removed, nil
}

// Read copies bytes [off, off+len(p)) of the block under k into p and
// reports true, or reports false: the block is not kept, the range is
// outside it, or its file failed its check (then it is removed); p may
// then hold anything.
func (c *Cache) Read(k Key, p []byte, off int64) bool {
	c.mu.Lock()
	e, ok := c.entries[k]
	if !ok || off < 0 || off+int64(len(p)) > e.size {
		c.stats.Misses++
		c.mu.Unlock()
		return false
	}
	c.lru.MoveToFront(e.el)
	e.refs++
	f := e.f
	c.mu.Unlock()

	var err error
	if f == nil {
		f, err = c.openFile(e)
	}
	if err == nil && len(p) > 0 {
		err = c.readChecked(f, e, p, off)
	}

	c.mu.Lock()
	e.refs--
	c.closeIfDoneLocked(e)
	if err == nil {
		c.stats.Hits++
		c.mu.Unlock()
		return true
	}
	if c.entries[k] == e {
		c.removeLocked(e)
		c.stats.Corrupt++
	}
	c.stats.Misses++
	c.mu.Unlock()
	c.logf("corrupt", "disk cache: block %s left out: %v", k.name(), err)
	return false
}

// readChecked reads [off, off+len(p)) of e's file through f into p,
// checking the CRC of every piece it touches.
func (c *Cache) readChecked(f diskfs.File, e *entry, p []byte, off int64) error {
	first := off / PieceBytes
	last := (off + int64(len(p)) - 1) / PieceBytes
	start, end := first*PieceBytes, min((last+1)*PieceBytes, e.size)
	buf, inPlace := p, start == off && end == off+int64(len(p))
	if !inPlace {
		buf = make([]byte, end-start)
	}
	n, err := f.ReadAt(buf, start)
	switch {
	case n == len(buf):
	case err == nil || err == io.EOF:
		return io.ErrUnexpectedEOF
	default:
		return err
	}
	for i := first; i <= last; i++ {
		piece := buf[(i-first)*PieceBytes : min((i-first+1)*PieceBytes, int64(len(buf)))]
		if crc32.Checksum(piece, castagnoli) != e.crcs[i] {
			return fmt.Errorf("piece %d of %d bytes fails its CRC", i, len(piece))
		}
	}
	if !inPlace {
		copy(p, buf[off-start:])
	}
	return nil
}

// openFile opens e's file and keeps the descriptor with e for later reads,
// closing the least recently opened idle ones beyond maxOpen. The caller
// holds a reference to e (refs).
func (c *Cache) openFile(e *entry) (diskfs.File, error) {
	f, err := c.fs.Open(filepath.Join(c.o.Dir, e.key.name()))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.f != nil { // another reader opened it meanwhile
		f.Close()
		return e.f, nil
	}
	if e.gone {
		return f, nil // closeIfDoneLocked closes it with the last reference
	}
	e.f = f
	e.fdEl = c.fds.PushFront(e)
	for el := c.fds.Back(); el != nil && c.fds.Len() > maxOpen; {
		prev := el.Prev()
		if o := el.Value.(*entry); o.refs == 0 {
			c.fds.Remove(el)
			o.fdEl = nil
			o.f.Close()
			o.f = nil
		}
		el = prev
	}
	return f, nil
}

// closeIfDoneLocked closes the descriptor of an entry that left the index
// once no reader holds it.
func (c *Cache) closeIfDoneLocked(e *entry) {
	if !e.gone || e.refs > 0 || e.f == nil {
		return
	}
	if e.fdEl != nil {
		c.fds.Remove(e.fdEl)
		e.fdEl = nil
	}
	e.f.Close()
	e.f = nil
}

// Mark returns the cache's position among DropIno calls; take it before
// fetching the bytes to Put.
func (c *Cache) Mark() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// Put queues data, the whole block under k, to be written; data must not
// be modified afterwards. mark is Mark's value from before the bytes were
// fetched: if DropIno(k.Ino) came since, the bytes may be older than the
// change that called it and are left out. So is a block already kept or
// queued, larger than the cache, or beyond the queue's bound.
func (c *Cache) Put(k Key, data []byte, mark uint64) {
	if !k.valid() || len(data) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || mark < c.floor || c.droppedAt[k.Ino] > mark {
		return
	}
	if _, ok := c.entries[k]; ok {
		return
	}
	if _, ok := c.pending[k]; ok {
		return
	}
	if int64(len(data)) > c.o.Limit || c.queued+int64(len(data)) > c.o.QueueBytes {
		c.stats.Dropped++
		return
	}
	c.queue = append(c.queue, job{key: k, data: data})
	c.queued += int64(len(data))
	c.pending[k] = false
	c.signalLocked()
}

// Limit returns the most bytes of blocks the cache holds.
func (c *Cache) Limit() int64 { return c.o.Limit }

// Has reports whether the block under k is kept.
func (c *Cache) Has(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[k]
	return ok
}

// DropIno forgets every block of inode ino, kept or queued, and removes
// their files (soon, by the writer): the file was deleted or changed.
func (c *Cache) DropIno(ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if len(c.droppedAt) >= maxDropped {
		// Forget the inodes, and refuse every Put of bytes fetched
		// before now instead: a miss later is the only cost.
		c.floor, c.droppedAt = c.seq, map[uint64]uint64{}
	}
	c.droppedAt[ino] = c.seq
	for k := range c.byIno[ino] {
		c.removeLocked(c.entries[k])
	}
	for k := range c.pending {
		if k.Ino == ino {
			c.pending[k] = true
		}
	}
	c.signalLocked()
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Bytes, s.Blocks, s.QueuedBytes = c.bytes, len(c.entries), c.queued
	return s
}

// removeLocked takes e out of the index and queues its file's removal.
func (c *Cache) removeLocked(e *entry) {
	e.gone = true
	c.closeIfDoneLocked(e)
	c.lru.Remove(e.el)
	delete(c.entries, e.key)
	if m := c.byIno[e.key.Ino]; m != nil {
		delete(m, e.key)
		if len(m) == 0 {
			delete(c.byIno, e.key.Ino)
		}
	}
	c.bytes -= e.size
	c.removals = append(c.removals, e.key.name())
}

func (c *Cache) signal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.signalLocked()
}

func (c *Cache) signalLocked() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writer writes queued blocks and removes dropped files until Close.
func (c *Cache) writer() {
	defer close(c.done)
	for {
		c.mu.Lock()
		removals := c.removals
		c.removals = nil
		var j job
		have := len(c.queue) > 0
		if have {
			j = c.queue[0]
			c.queue[0] = job{}
			c.queue = c.queue[1:]
		}
		closed := c.closed
		c.mu.Unlock()
		for _, n := range removals {
			c.remove(n)
		}
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

func (c *Cache) remove(name string) {
	if err := c.fs.Remove(filepath.Join(c.o.Dir, name)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		c.logf("remove", "disk cache: remove %s: %v", name, err)
	}
}

// write makes room for j (evicting the least recently read blocks), writes
// its file and adds it to the index, unless it was dropped meanwhile.
func (c *Cache) write(j job) {
	size := int64(len(j.data))
	c.mu.Lock()
	c.queued -= size
	if c.pending[j.key] || !c.roomLocked(size) {
		delete(c.pending, j.key)
		c.stats.Dropped++
		c.mu.Unlock()
		return
	}
	removals := c.removals
	c.removals = nil
	c.mu.Unlock()
	for _, n := range removals {
		c.remove(n)
	}

	crcs := make([]uint32, (size+PieceBytes-1)/PieceBytes)
	for i := range crcs {
		crcs[i] = crc32.Checksum(j.data[int64(i)*PieceBytes:min(int64(i+1)*PieceBytes, size)], castagnoli)
	}
	name := j.key.name()
	err := c.writeFile(name, j.data)

	if err != nil {
		c.logf("write", "disk cache: write %s: %v", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	dropped := c.pending[j.key]
	delete(c.pending, j.key)
	switch {
	case err != nil:
		c.stats.WriteErrors++
		c.stats.Dropped++
		if errors.Is(err, syscall.ENOSPC) {
			c.fullUntil = time.Now().Add(fullBackoff)
		}
		c.removals = append(c.removals, name)
	case dropped || c.closed:
		c.removals = append(c.removals, name)
	default:
		e := &entry{key: j.key, size: size, crcs: crcs}
		e.el = c.lru.PushFront(e)
		c.entries[j.key] = e
		m := c.byIno[j.key.Ino]
		if m == nil {
			m = map[Key]struct{}{}
			c.byIno[j.key.Ino] = m
		}
		m[j.key] = struct{}{}
		c.bytes += size
		c.free -= size
		c.stats.Written++
	}
}

func (c *Cache) writeFile(name string, data []byte) error {
	f, err := c.fs.Create(filepath.Join(c.o.Dir, name))
	if err != nil {
		return err
	}
	n, err := f.WriteAt(data, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	return err
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
		c.free += e.size // the writer removes its file before writing
	}
	return true
}

// logf logs at most once a minute per kind.
func (c *Cache) logf(kind, format string, args ...any) {
	if c.o.Logf == nil {
		return
	}
	c.mu.Lock()
	last, now := c.logged[kind], time.Now()
	ok := now.Sub(last) >= time.Minute
	if ok {
		c.logged[kind] = now
	}
	c.mu.Unlock()
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
