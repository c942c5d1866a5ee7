package extentstore

import (
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// Evict drops extent id's bytes [off, off+n) from the page cache, as far as
// they are already on disk: a replica that serves no reads of them (a
// follower of the write chain: reads go to the chain's head) need not keep
// them, and handing the same pages to its next writes costs less than
// taking new ones. Only committed bytes of a large extent whose file was
// fsynced after them are dropped; for small extents, whose recent bytes may
// be durable only in the log (the file's pages still dirty), it does
// nothing. Best effort: it never fails, and a later read simply reads the
// disk. Whole pages inside the range only.
func (s *Store) Evict(id uint64, off, n int64) {
	if off < 0 || n <= 0 {
		return
	}
	e, err := s.get(id)
	if err != nil {
		return
	}
	e.mu.RLock()
	ok := e.kind == KindLarge && !e.deleted && !e.journaled && off <= e.committed-n && e.h.acquire()
	h := e.h
	e.mu.RUnlock()
	if !ok {
		return
	}
	defer h.release()
	f, isOS := diskfs.OSFile(h.f)
	if !isOS {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.Fadvise(int(fd), off, n, unix.FADV_DONTNEED)
	})
}
