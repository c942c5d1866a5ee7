// Open directories: opendir, the listing a handle reads (readdir,
// readdirplus), releasedir and fsyncdir.

package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/optrace"
	"github.com/cairnfs/cairn/pkg/perm"
)

// dirHandle is an open directory: its listing, read at offset 0.
type dirHandle struct {
	mu      sync.Mutex
	ino     uint64
	entries []client.DirEntry // ".", "..", then the names
	loaded  bool
	tok     grantToken // taken before the listing was read (longcache.go)
}

// OpenDir opens a directory (ENOTDIR for other types).
func (fs *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	start := time.Now()
	a, err := fs.v.Access(fs.caller(ctxOf(cancel), &in.InHeader), fs.ino(in.NodeId), perm.Read)
	if err != nil {
		return fs.observe("opendir", start, status(err))
	}
	if !a.IsDir() {
		return fs.observe("opendir", start, fuse.ENOTDIR)
	}
	fs.mu.Lock()
	fh := fs.nextFh
	fs.nextFh++
	fs.dirs[fh] = &dirHandle{ino: fs.ino(in.NodeId)}
	fs.mu.Unlock()
	out.Fh = fh
	return fs.observe("opendir", start, fuse.OK)
}

// load reads the whole listing (at offset 0: a rewinddir re-reads it).
func (fs *FS) load(ctx context.Context, d *dirHandle, plus bool) error {
	tok := fs.begin()
	self, err := fs.v.GetAttr(ctx, d.ino)
	if err != nil {
		return err
	}
	parent := self.Parent
	if parent == 0 || d.ino == fs.root {
		parent = d.ino
	}
	entries := []client.DirEntry{
		{Name: ".", Ino: fs.node(d.ino), Type: syscall.S_IFDIR},
		{Name: "..", Ino: fs.node(parent), Type: syscall.S_IFDIR},
	}
	cursor := ""
	for {
		var page []client.DirEntry
		var more bool
		if plus {
			page, more, err = fs.v.ReadDirPlus(ctx, d.ino, cursor, 1024)
		} else {
			page, more, err = fs.v.ReadDir(ctx, d.ino, cursor, 1024)
		}
		if err != nil {
			return err
		}
		entries = append(entries, page...)
		if !more || len(page) == 0 {
			break
		}
		cursor = page[len(page)-1].Name
	}
	d.entries, d.loaded, d.tok = entries, true, tok
	return nil
}

func (fs *FS) readDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	fs.mu.Lock()
	d := fs.dirs[in.Fh]
	fs.mu.Unlock()
	if d == nil {
		return fuse.EBADF
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if in.Offset == 0 || !d.loaded {
		if err := fs.load(ctxOf(cancel), d, plus); err != nil {
			return status(err)
		}
	}
	for i := int(in.Offset); i < len(d.entries); i++ {
		e := d.entries[i]
		de := fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Type, Off: uint64(i + 1)}
		if !plus {
			if !out.AddDirEntry(de) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(de)
		if eo == nil {
			break
		}
		// "." and "..", and entries without attributes (the inode
		// vanished meanwhile), get no entry: the kernel looks them up.
		if e.Attr != nil && e.Name != "." && e.Name != ".." {
			fs.plusEntry(d.tok, d.ino, e, eo)
		}
	}
	return fuse.OK
}

// plusEntry fills the entry a READDIRPLUS gives the kernel for e, a name
// in directory dir, as a LOOKUP's answer would be: with a new generation
// for a file with one link that this mount gave the kernel under another
// name lately (stalenames.go). A listing reads its partitions one after
// the other, so it may show a file renamed meanwhile under both names;
// the kernel, holding both for one inode, would answer a rename of the
// one onto the other itself, with success (a nemesis run found it).
func (fs *FS) plusEntry(tok grantToken, dir uint64, e client.DirEntry, eo *fuse.EntryOut) {
	parent := fs.node(dir)
	if old, bumped := fs.stale.found(parent, e.Name, e.Attr, func() bool { return fs.hasOpen(e.Attr.Ino) }); bumped {
		fs.opts.Metrics.staleName()
		go fs.dropEntry(old) // once the listing lets go of the directory
	}
	fs.fillEntryFor(tok, parent, e.Name, e.Attr, eo)
	if fs.tr != nil {
		fs.tr.learn(dir, e.Name, e.Ino)
	}
}

// ReadDir lists a directory with "." and "..".
func (fs *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	start := time.Now()
	st := fs.readDir(cancel, in, out, false)
	fs.traceReadDir(start, in, st)
	return fs.observe("readdir", start, st)
}

// ReadDirPlus lists a directory with each entry's attributes.
func (fs *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	start := time.Now()
	st := fs.readDir(cancel, in, out, true)
	fs.traceReadDir(start, in, st)
	return fs.observe("readdirplus", start, st)
}

// traceReadDir records a listing once, at its first read (offset 0).
func (fs *FS) traceReadDir(start time.Time, in *fuse.ReadIn, st fuse.Status) {
	if fs.tr == nil || in.Offset != 0 {
		return
	}
	fs.tr.record(start, &in.InHeader, optrace.Event{Op: optrace.OpReaddir, Path: fs.tr.path(in.NodeId)}, st, 0)
}

// ReleaseDir closes an open directory.
func (fs *FS) ReleaseDir(in *fuse.ReleaseIn) {
	fs.mu.Lock()
	delete(fs.dirs, in.Fh)
	fs.mu.Unlock()
}

// FsyncDir is a no-op: directory changes are durable when they return.
func (fs *FS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status { return fuse.OK }

// listingReadTimeout bounds a listing read (readListing).
const listingReadTimeout = 10 * time.Second

// readListing runs listing read r of directory dir (listings.go), which
// the kernel's lookups of missing names there started: it reads dir's
// names from the meta nodes, and from then on such lookups are answered
// by this mount. It runs apart from the lookup that started it.
func (fs *FS) readListing(dir uint64, r *listingRead) {
	c := fs.longCache()
	ctx, cancel := context.WithTimeout(context.Background(), listingReadTimeout)
	defer cancel()
	page, more, err := fs.v.ReadDir(ctx, dir, "", maxListingRead)
	switch {
	case err != nil:
		c.listingFailed(dir, r, false)
		fs.opts.Metrics.listingRead("failed")
		return
	case more:
		c.listingFailed(dir, r, true)
		fs.opts.Metrics.listingRead("too_large")
		return
	}
	names := make([]string, len(page))
	for i, e := range page {
		names[i] = e.Name
	}
	if c.listed(dir, r, names) {
		fs.opts.Metrics.listingRead("kept")
	} else {
		fs.opts.Metrics.listingRead("spoiled")
	}
}
