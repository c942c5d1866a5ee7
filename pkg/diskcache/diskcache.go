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
// The client builds them from the inode, its Version and the block's
// offset, so a file's new contents get new keys and old ones age out;
// DropIno removes a file's blocks at once (a deleted file's bytes leave
// the disk without waiting for eviction). The blocks of one version live
// in one sparse file, at their offsets: a reader of many blocks of one
// file keeps one descriptor open, and an evicted block is a punched hole.
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

// Key names one immutable block: the bytes at offset Off of version Gen
// of inode Ino. The blocks of one version must not overlap (the client
// cuts a file into blocks of one size). Gen may hold only letters, digits,
// '.' and '-' (it is part of a file name); Put ignores a key that breaks
// this.
type Key struct {
	Ino uint64
	Gen string
	Off int64
}

func (k Key) valid() bool {
	if k.Gen == "" || len(k.Gen) > 128 || k.Off < 0 {
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

// verKey names one version of a file: the blocks of a version live in one
// sparse file at their offsets, so that a reader of many blocks of one
// file needs one open descriptor, and an evicted block is a punched hole.
type verKey struct {
	ino uint64
	gen string
}

// name is the version's file, relative to the cache directory: in one of
// 256 subdirectories by inode, so that no directory grows huge.
func (k verKey) name() string {
	return filepath.Join(fmt.Sprintf("%02x", k.ino&0xff), fmt.Sprintf("%x_%s", k.ino, k.gen))
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
	versions map[uint64]map[string]*version // ino -> gen -> version with blocks or writes
	lru      *list.List                     // of *entry, most recently read first
	fds      *list.List                     // of *version with an open file, most recently used first
	bytes    int64
	queue    []job
	queued   int64
	pending  map[Key]bool // queued or being written; true: dropped meanwhile
	work     []fileOp     // removals and punches, done by the writer
	busy     bool         // the writer is doing work taken off the list
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
	logMu       sync.Mutex // not mu: logf is called with mu held
	logged      map[string]time.Time
}

// version is one version's sparse file.
type version struct {
	key verKey
	// f is the file kept open (nil: none), in Cache.fds at fdEl; refs
	// counts the reads and writes using it. entries and writes are the
	// version's blocks in the index and in the queue; when both are none the
	// version is gone: out of Cache.versions, its file removed, f closed
	// with the last reference.
	f       diskfs.File
	fdEl    *list.Element
	refs    int
	entries map[int64]*entry // by offset
	writes  int
	gone    bool
}

type entry struct {
	key  Key
	v    *version
	size int64
	crcs []uint32 // one per PieceBytes
	el   *list.Element
}

type job struct {
	key  Key
	v    *version
	data []byte
}

// fileOp is a removal of a version's file (punch nil) or a punched hole in
// it, for the writer to do.
type fileOp struct {
	v        *version
	off, len int64
	punch    bool
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
		entries: map[Key]*entry{}, versions: map[uint64]map[string]*version{},
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
		v := el.Value.(*version)
		v.f.Close()
		v.f, v.fdEl = nil, nil
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
	v := e.v
	f := c.acquireLocked(v)
	c.mu.Unlock()

	var err error
	if f == nil {
		var kept bool
		if f, kept, err = c.openFile(v, false); err == nil && !kept {
			defer f.Close()
		}
	}
	if err == nil && len(p) > 0 {
		err = readChecked(f, e, p, off)
	}

	c.mu.Lock()
	c.releaseLocked(v)
	if err == nil {
		c.stats.Hits++
		c.mu.Unlock()
		return true
	}
	if c.entries[k] == e { // not evicted (punched) while it was read
		c.removeLocked(e)
		c.stats.Corrupt++
	}
	c.stats.Misses++
	c.mu.Unlock()
	c.logf("corrupt", "disk cache: block at %d of %s left out: %v", k.Off, v.key.name(), err)
	return false
}

// readChecked reads [off, off+len(p)) of e through f into p, checking the
// CRC of every piece it touches.
func readChecked(f diskfs.File, e *entry, p []byte, off int64) error {
	first := off / PieceBytes
	last := (off + int64(len(p)) - 1) / PieceBytes
	start, end := first*PieceBytes, min((last+1)*PieceBytes, e.size)
	buf, inPlace := p, start == off && end == off+int64(len(p))
	if !inPlace {
		buf = make([]byte, end-start)
	}
	n, err := f.ReadAt(buf, e.key.Off+start)
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

// acquireLocked takes a reference to v's file and returns it if it is
// open (nil: the caller opens it with openFile).
func (c *Cache) acquireLocked(v *version) diskfs.File {
	v.refs++
	if v.f != nil {
		c.fds.MoveToFront(v.fdEl)
	}
	return v.f
}

// releaseLocked drops a reference; a gone version's file closes with the
// last one.
func (c *Cache) releaseLocked(v *version) {
	v.refs--
	if v.gone && v.refs == 0 && v.f != nil {
		c.fds.Remove(v.fdEl)
		v.f.Close()
		v.f, v.fdEl = nil, nil
	}
}

// openFile opens v's file (creating it when create is set) and keeps the
// descriptor for later reads and writes, closing the least recently used
// idle ones beyond maxOpen; the caller closes a file not kept (v is gone).
// The caller holds a reference (acquireLocked).
func (c *Cache) openFile(v *version, create bool) (f diskfs.File, kept bool, err error) {
	path := filepath.Join(c.o.Dir, v.key.name())
	f, err = c.fs.Open(path)
	if err != nil && create && errors.Is(err, iofs.ErrNotExist) {
		f, err = c.fs.Create(path)
	}
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case v.f != nil: // another user opened it meanwhile
		f.Close()
		return v.f, true, nil
	case v.gone:
		return f, false, nil
	}
	v.f = f
	v.fdEl = c.fds.PushFront(v)
	for el := c.fds.Back(); el != nil && c.fds.Len() > maxOpen; {
		prev := el.Prev()
		if o := el.Value.(*version); o.refs == 0 {
			c.fds.Remove(el)
			o.f.Close()
			o.f, o.fdEl = nil, nil
		}
		el = prev
	}
	return f, true, nil
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
	v := c.versionLocked(verKey{k.Ino, k.Gen})
	v.writes++
	c.queue = append(c.queue, job{key: k, v: v, data: data})
	c.queued += int64(len(data))
	c.pending[k] = false
	c.signalLocked()
}

// versionLocked returns the live version vk, made if missing.
func (c *Cache) versionLocked(vk verKey) *version {
	gens := c.versions[vk.ino]
	if gens == nil {
		gens = map[string]*version{}
		c.versions[vk.ino] = gens
	}
	v := gens[vk.gen]
	if v == nil {
		v = &version{key: vk, entries: map[int64]*entry{}}
		gens[vk.gen] = v
	}
	return v
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
	for k := range c.pending {
		if k.Ino == ino {
			c.pending[k] = true
		}
	}
	for _, v := range c.versions[ino] {
		for _, e := range v.entries {
			c.removeLocked(e)
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

// removeLocked takes e out of the index and has its bytes leave the disk:
// a punched hole, or the version's file when it was its last block.
func (c *Cache) removeLocked(e *entry) {
	c.lru.Remove(e.el)
	delete(c.entries, e.key)
	c.bytes -= e.size
	v := e.v
	delete(v.entries, e.key.Off)
	if !c.retireLocked(v) {
		c.work = append(c.work, fileOp{v: v, off: e.key.Off, len: e.size, punch: true})
	}
}

// retireLocked makes v gone when it has no blocks and no queued writes:
// out of the index, its file removed by the writer. It reports whether it
// did.
func (c *Cache) retireLocked(v *version) bool {
	if len(v.entries) > 0 || v.writes > 0 || v.gone {
		return v.gone
	}
	v.gone = true
	if gens := c.versions[v.key.ino]; gens != nil && gens[v.key.gen] == v {
		delete(gens, v.key.gen)
		if len(gens) == 0 {
			delete(c.versions, v.key.ino)
		}
	}
	if v.refs == 0 && v.f != nil {
		c.fds.Remove(v.fdEl)
		v.f.Close()
		v.f, v.fdEl = nil, nil
	}
	c.work = append(c.work, fileOp{v: v})
	return true
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
