package fusefs

// listings keeps the names of directories this mount made, as long as it
// knows every name they hold: a directory is empty when its mkdir returns,
// and from then on this mount knows each name it adds or removes there
// itself, and the change feed tells it of every name another client
// changes (longCache.notice drops the directory's listing at the first
// one). While a directory has a listing, a lookup of a name it does not
// hold is answered ENOENT by the mount, without a request: the kernel
// looks up every new name before it creates it, so a create, mkdir or
// rename to a new name in such a directory costs one request instead of
// two.
//
// A listing answers only while the feed is healthy and no operation of
// this mount in the directory is under way; an operation whose outcome is
// not known for sure (any error) drops it, as does the kernel forgetting
// the directory. Pure logic; the caller (longCache) holds the lock.
type listings struct {
	max   int // the most directories and names kept together
	count int // directories and names kept
	dirs  map[uint64]*listing
}

// listing is what this mount knows of one directory.
type listing struct {
	names map[string]struct{} // nil while empty
	busy  int                 // operations of this mount in it under way
}

// maxListed bounds the directories and names kept: a few tens of bytes
// each, a few MiB in all.
const maxListed = 1 << 17

func newListings(max int) *listings {
	if max <= 0 {
		max = maxListed
	}
	return &listings{max: max, dirs: map[uint64]*listing{}}
}

// made starts the listing of directory dir, empty. It returns false when
// the listings are full.
func (l *listings) made(dir uint64) bool {
	if _, ok := l.dirs[dir]; ok {
		// Inode numbers are not reused: a second mkdir reply for one
		// inode is not something this mount can explain.
		l.drop(dir)
		return false
	}
	if l.count >= l.max {
		return false
	}
	l.dirs[dir] = &listing{}
	l.count++
	return true
}

// absent reports whether name is known to be missing from dir.
func (l *listings) absent(dir uint64, name string) bool {
	d := l.dirs[dir]
	if d == nil || d.busy > 0 {
		return false
	}
	_, has := d.names[name]
	return !has
}

// enter marks an operation of this mount in dir under way and returns the
// listing it entered (nil: none), for leave.
func (l *listings) enter(dir uint64) *listing {
	d := l.dirs[dir]
	if d != nil {
		d.busy++
	}
	return d
}

// leave ends an operation in dir begun by enter, which returned entered.
// A listing the operation did not enter (made while it ran) is dropped:
// what the operation did there is not known.
func (l *listings) leave(dir uint64, entered *listing) {
	d := l.dirs[dir]
	switch {
	case d == nil:
	case d != entered:
		l.drop(dir)
	default:
		d.busy--
	}
}

// set records that name is present in dir, or absent, after an operation
// of this mount succeeded. A listing that would grow past the bound is
// dropped.
func (l *listings) set(dir uint64, name string, present bool) {
	d := l.dirs[dir]
	if d == nil {
		return
	}
	_, has := d.names[name]
	switch {
	case present && !has:
		if l.count >= l.max {
			l.drop(dir)
			return
		}
		if d.names == nil {
			d.names = map[string]struct{}{}
		}
		d.names[name] = struct{}{}
		l.count++
	case !present && has:
		delete(d.names, name)
		l.count--
	}
}

// drop forgets dir's listing.
func (l *listings) drop(dir uint64) {
	d := l.dirs[dir]
	if d == nil {
		return
	}
	l.count -= 1 + len(d.names)
	delete(l.dirs, dir)
}

// clear forgets every listing.
func (l *listings) clear() {
	clear(l.dirs)
	l.count = 0
}
