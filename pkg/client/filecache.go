package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"sync"

	"github.com/cairnfs/cairn/pkg/chunkcache"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/diskcache"
	"github.com/cairnfs/cairn/pkg/recent"
)

// The file cache keeps the whole contents of small files read through
// read-only handles in the client's memory (Options.FileCacheBytes), so
// that reading one again after the kernel dropped its pages costs no data
// request. A deep-learning loader reads every file of its data set once
// per epoch: the page cache rarely holds a data set from one epoch to the
// next, and this cache holds the small files that dominate such sets.
//
// Larger files that fit in the cache whole are kept in blocks of
// readBlockBytes, filled by the random reads of read-only handles
// (blocksFor): four readers of one file share its blocks, and a block read
// once serves every later read inside it from memory. Sequential reads do
// not fill the cache (their read-ahead streams past it).
//
// An entry is keyed by the inode and the Version (size, mtime, ctime) its
// handle read at open, and only a handle that opened at that Version uses
// it. Every change of a file's content moves its ctime, so an open after
// another client's close reads the new Version and misses (close-to-open
// holds as without the cache), and entries of old Versions age out. A
// flush of a writable handle of this client drops the entry of the
// Version it knew before, so handles of this client that opened together see each
// other's flushed writes as they do without the cache. So a read served
// from an entry returns the content of the Version its handle opened at,
// which is what close-to-open promises; bytes another client wrote in
// place and has not closed yet may show or not, as without the cache.

const (
	// DefaultFileCacheBytes bounds the file cache unless
	// Options.FileCacheBytes says otherwise. The Go collector lets the
	// heap grow to twice what is live, so a full cache costs the process
	// about twice its bound: 64 MiB raised a mount's peak RSS by 170 MiB
	// in `make bench-data` (bound 512 MiB).
	DefaultFileCacheBytes = 32 << 20
	// fileCacheMaxSize is the largest file kept whole.
	fileCacheMaxSize = 1 << 20
)

// fileKey names one Version of a file's contents: the whole of it (block
// 0), or block block-1 of readBlockBytes.
type fileKey struct {
	ino   uint64
	ver   Version
	block int64
}

// readBlockBytes is the unit of the file cache's blocks: the data nodes'
// CRC block (extentstore's default block size), so that a miss makes a
// data node read and check exactly one block, as a read of 4 KiB inside
// it does anyway.
const readBlockBytes = 128 << 10

// diskKey is k's key in the disk cache: the bytes at the block's offset
// (0 for a whole small file; a Version is kept either whole or in blocks,
// by its size).
func (k fileKey) diskKey() diskcache.Key {
	off := int64(0)
	if k.block > 0 {
		off = (k.block - 1) * readBlockBytes
	}
	return diskcache.Key{Ino: k.ino, Gen: fmt.Sprintf("%d.%d.%d", k.ver.Size, k.ver.Mtime, k.ver.Ctime), Off: off}
}

// fileBlocks are the blocks of one Version of a file in the volume's file
// cache (dataclient.Blocks): in memory, else on the disk cache (if any),
// else fetched and kept in both.
type fileBlocks struct {
	c    *chunkcache.Cache[fileKey]
	disk *diskcache.Cache
	ino  uint64
	ver  Version
}

func (b fileBlocks) Read(ctx context.Context, block int64, p []byte, off int64, fetch func(context.Context) ([]byte, error)) (bool, error) {
	k := fileKey{ino: b.ino, ver: b.ver, block: block + 1}
	// A block found on disk is not brought into memory: a random read
	// of a few KiB would pay for the whole block, and the kernel's page
	// cache keeps the cache file's pages anyway.
	data, ok := b.c.Lookup(k)
	if !ok && b.disk != nil && b.disk.Read(k.diskKey(), p, off) {
		return false, nil
	}
	fetched := false
	if !ok {
		var err error
		data, err = b.c.Get(ctx, k, func(ctx context.Context) ([]byte, error) {
			fetched = true
			if b.disk == nil {
				return fetch(ctx)
			}
			mark := b.disk.Mark()
			data, err := fetch(ctx)
			if err == nil {
				b.disk.Put(k.diskKey(), data, mark)
			}
			return data, err
		})
		if err != nil {
			return fetched, err
		}
	}
	if off+int64(len(p)) > int64(len(data)) {
		return fetched, fmt.Errorf("block %d of inode %d holds %d bytes, want %d at %d", block, b.ino, len(data), len(p), off)
	}
	copy(p, data[off:])
	return fetched, nil
}

// blocksFor returns the file cache's blocks of the handle's file for its
// reader's random reads, or nil when the handle may not use the cache (as
// cachedFile) or the file would not fit in it whole (in memory, or on the
// disk cache when there is one): a miss fetches a whole block for a read
// of a few KiB, which pays only while blocks stay to be read again.
// Called with f.mu held.
func (l *extentLayout) blocksFor() dataclient.Blocks {
	f := l.f
	c := f.v.files
	if c == nil || f.writable || !f.verOK || f.size <= fileCacheMaxSize || f.size != l.recorded {
		return nil
	}
	limit := c.Limit()
	if d := f.v.disk; d != nil {
		limit = max(limit, d.Limit())
	}
	if int64(f.size) > limit {
		return nil
	}
	return fileBlocks{c: c, disk: f.v.disk, ino: f.ino, ver: f.ver}
}

// newFileCache returns the cache Options.FileCacheBytes asks for, or nil.
func newFileCache(bytes int64) *chunkcache.Cache[fileKey] {
	switch {
	case bytes < 0:
		return nil
	case bytes == 0:
		bytes = DefaultFileCacheBytes
	}
	return chunkcache.New[fileKey](bytes)
}

// cachedFile returns the whole contents of the handle's file from the
// volume's file cache, reading them from the data nodes on a miss; false
// when the handle may not use the cache (it writes, does not know its
// Version, or the file is empty or larger than fileCacheMaxSize): the
// caller reads as without the cache. A failed read is returned, not read
// again by the caller, unless it is another handle's fetch given up when
// that handle closed. Called with f.mu held.
func (l *extentLayout) cachedFile() ([]byte, bool, error) {
	f := l.f
	c := f.v.files
	if c == nil || f.writable || !f.verOK || f.size == 0 || f.size > fileCacheMaxSize || f.size != l.recorded {
		return nil, false, nil
	}
	keys, size := l.keys, int64(f.size)
	key, disk := fileKey{ino: f.ino, ver: f.ver}, f.v.disk
	data, err := c.Get(f.ctx, key, func(ctx context.Context) ([]byte, error) {
		buf := make([]byte, size)
		var mark uint64
		if disk != nil {
			if disk.Read(key.diskKey(), buf, 0) {
				return buf, nil
			}
			mark = disk.Mark()
		}
		r := f.dc.NewReader(dataclient.WithInode(ctx, f.ino), keys, size)
		defer r.Close()
		n, err := r.ReadAt(buf, 0)
		f.v.bytesRead.Add(int64(n))
		if err != nil && err != io.EOF {
			return nil, err
		}
		if n != len(buf) {
			return nil, fmt.Errorf("read %d of the %d bytes of inode %d", n, len(buf), f.ino)
		}
		if disk != nil && f.v.fetchedBefore.again(key) {
			disk.Put(key.diskKey(), buf, mark)
		}
		return buf, nil
	})
	switch {
	case err != nil && errors.Is(err, context.Canceled) && f.ctx.Err() == nil:
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case uint64(len(data)) != f.size:
		return nil, false, nil // the handle was told of a truncate
	}
	return data, true, nil
}

// dropCached forgets the cached contents of Version ver of file ino: a
// handle of this client changed, or is about to change, its bytes.
func (v *Volume) dropCached(ino uint64, ver Version) {
	v.dropDisk(ino)
	switch {
	case v.files == nil:
	case ver.Size <= fileCacheMaxSize:
		v.files.Delete(fileKey{ino: ino, ver: ver})
	default:
		// Blocks (blocksFor): DeleteIf looks at every entry, which only
		// a file larger than fileCacheMaxSize can make worth it.
		v.files.DeleteIf(func(k fileKey) bool { return k.ino == ino && k.ver == ver })
	}
}

// dropDisk removes every block of file ino from the disk cache: this
// client changed or deleted the file, and its old bytes should leave the
// disk now rather than when they are evicted.
func (v *Volume) dropDisk(ino uint64) {
	if v.disk != nil {
		v.disk.DropIno(ino)
	}
}

// fetchedSet remembers the small files fetched from the data nodes (by a
// hash of their fileKey; the last fetchedSetSize of them), so that the
// disk cache takes a small file only when it is fetched a second time:
// after it left memory and was wanted again. Each small file is a file
// of its own in the disk cache, and creating one cost the mount about 30%
// of its CPU in a cold read of 4 KiB files that were never read again;
// the blocks of large files go to the disk at their first fetch (one
// file per file version).
type fetchedSet struct {
	mu   sync.Mutex
	seed maphash.Seed
	keys recent.Map[uint64, struct{}] // hashes; Limit fetchedSetSize
}

const fetchedSetSize = 1 << 16

// again reports whether k was fetched before, and remembers it.
func (s *fetchedSet) again(k fileKey) bool {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], k.ino)
	binary.LittleEndian.PutUint64(b[8:], k.ver.Size)
	binary.LittleEndian.PutUint64(b[16:], uint64(k.ver.Mtime))
	binary.LittleEndian.PutUint64(b[24:], uint64(k.ver.Ctime))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys.Limit == 0 {
		s.seed, s.keys.Limit = maphash.MakeSeed(), fetchedSetSize
	}
	h := maphash.Bytes(s.seed, b[:])
	if s.keys.Has(h) {
		return true
	}
	s.keys.Put(h, struct{}{})
	return false
}
