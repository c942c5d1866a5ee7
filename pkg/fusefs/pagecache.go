// The kernel's page cache of files, kept between opens while the file has
// not changed (close-to-open).

package fusefs

import (
	"errors"

	"github.com/cairnfs/cairn/pkg/client"
)

// maxPageVersions bounds the versions remembered; past it the table starts
// again empty, and the next open of each file drops its cached pages, as
// every open did before the table existed.
const maxPageVersions = 1 << 20

// The mount is mounted with explicit data cache control: the kernel drops
// a file's cached pages only when the mount tells it to, never because it
// saw new attributes. The mount tells it at open (the reply lacks
// FOPEN_KEEP_CACHE) unless the pages are current: pages[ino] records the
// client.Version of the content the pages hold, and an open that reads the
// same Version keeps them. Close-to-open holds: a change another client
// flushed before this open gave the file another Version, so the pages go.
//
// The pages follow this mount's own writes (they pass through them), so
// after a flush the record moves to the Version the flush produced, but
// only when the servers confirm that nothing else changed the file in
// between (client.File.Version's ok) and the record still names the
// Version the handle started from; otherwise the record goes and the next
// open drops the pages.

// keepPages reports whether f, just opened through kernel node node, may
// keep the kernel's cached pages of its file, and records f's Version as
// theirs from now on.
//
// An open that read an older Version than the record (its metadata read
// came before another client's close that an open of this mount has
// already seen) keeps the pages and leaves the record: the pages are
// newer than its view, which close-to-open allows an open that ran
// concurrently with the write, and dropping them, or recording its
// Version, would let its reads put older bytes back under the newer
// Version's record (readPages).
//
// An open that does not keep the pages drops them itself, through the
// kernel's inode notification, before it answers, and until then no
// other open of the file keeps them. The reply without FOPEN_KEEP_CACHE
// would drop them too, but only in the opening process, once it runs
// again: another open whose reply kept the pages (it read the new
// Version, which this open had already recorded) could read them first,
// bytes another client had overwritten before it opened (a nemesis run
// found two reads on one host at once returning the old value and the
// new).
func (fs *FS) keepPages(f *client.File, node uint64) bool {
	v, ok := f.Version()
	return fs.keepPagesAt(f.Ino(), node, v, ok)
}

// keepPagesAt is keepPages for inode ino (kernel node node) opened at
// Version v (ok: known).
func (fs *FS) keepPagesAt(ino, node uint64, v client.Version, ok bool) bool {
	fs.mu.Lock()
	cur, known := fs.pages[ino]
	switch {
	case !ok:
		delete(fs.pages, ino)
	case known && (cur == v || v.Before(cur)):
		keep := fs.dropping[ino] == 0
		fs.mu.Unlock()
		// While another open drops the pages, this one does not keep
		// them either (its reply drops them in its process) and leaves
		// the record.
		return keep
	default:
		if len(fs.pages) >= maxPageVersions {
			clear(fs.pages)
		}
		fs.pages[ino] = v
	}
	fs.dropping[ino]++
	fs.mu.Unlock()
	fs.dropKernelPages(node)
	fs.mu.Lock()
	if fs.dropping[ino]--; fs.dropping[ino] <= 0 {
		delete(fs.dropping, ino)
	}
	fs.mu.Unlock()
	return false
}

// recordPages records f's Version for the pages of its file, a new one
// the kernel has cached nothing of.
func (fs *FS) recordPages(f *client.File) {
	v, ok := f.Version()
	if !ok {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.pages) >= maxPageVersions {
		clear(fs.pages)
	}
	fs.pages[f.Ino()] = v
}

// dropKernelPages makes the kernel drop its cached pages and attributes
// of node and returns once it has (the notification is handled while the
// mount writes it).
func (fs *FS) dropKernelPages(node uint64) {
	if fs.dropPagesHook != nil {
		fs.dropPagesHook(node)
		return
	}
	if s := fs.server.Load(); s != nil {
		s.InodeNotify(node, 0, 0)
	}
}

// pagesBehind reports whether f, a read-only handle, reads a Version
// other than the one the kernel's pages of its file are recorded at: a
// later open of this mount saw another client's change. A read through f
// then fills the kernel's pages (shared by every handle of the file) with
// bytes of f's Version, which an open after that change must not read;
// Read reads the current bytes instead (readCurrent).
func (fs *FS) pagesBehind(f *client.File) bool {
	if f.Writable() {
		return false // its own writes pass through the pages
	}
	v, ok := f.Version()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	cur, known := fs.pages[f.Ino()]
	return ok && known && cur != v
}

// flushedPages moves the record of ino's pages after a flush of f that
// succeeded; before is f's Version before that flush.
func (fs *FS) flushedPages(f *client.File, before client.Version) {
	after, ok := f.Version()
	fs.flushedPagesAt(f.Ino(), before, after, ok)
}

// flushedPagesAt is flushedPages for inode ino, whose handle's Version
// went from before to after (ok: the servers confirmed no other change
// came in between).
//
// A flush that changed nothing leaves the record alone, whatever ok says:
// ok speaks of the handle's earlier changes, whose flush already moved or
// dropped the record, and the record may since name a Version an open
// read from the servers. (The kernel sends RELEASE after close(2) has
// returned, so a writer's release, which flushes nothing, may come after
// the next open recorded the file's pages.)
func (fs *FS) flushedPagesAt(ino uint64, before, after client.Version, ok bool) {
	if after == before {
		return // nothing changed
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if cur, known := fs.pages[ino]; ok && known && cur == before {
		fs.pages[ino] = after
		return
	}
	delete(fs.pages, ino)
}

// flushFile runs flush (a Flush, Fsync or Close of f) and keeps the record
// of f's pages in step.
func (fs *FS) flushFile(f *client.File, flush func() error) error {
	before, _ := f.Version()
	if err := flush(); err != nil {
		if !errors.Is(err, client.ErrFileClosed) {
			// The handle's view fell back (client.File): the pages may
			// hold bytes that no longer exist.
			fs.forgetPages(f.Ino())
		}
		return err
	}
	fs.flushedPages(f, before)
	return nil
}

// forgetPages drops the record of ino's pages: the next open drops them.
func (fs *FS) forgetPages(ino uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.pages, ino)
}
