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
//
// A directory this mount did not make, or whose listing was dropped (the
// feed lost or reset, which a new volume's first routing change does), is
// read from the meta nodes once the kernel has looked up listAfterMisses
// missing names in it that the meta nodes answered: a listing read. What
// the read returns, with the names this mount's own operations there
// changed meanwhile applied in the order they ended, becomes the listing
// once no operation of this mount is under way there, unless another
// client changed a name there meanwhile, an operation of this mount there
// failed, or the feed was lost (anything that drops a listing spoils a
// read). An operation of this mount may or may not be seen by the read;
// either way its own change applied after the read gives the name as the
// operation left it (the kernel runs one name change at a time in a
// directory), so the listing is as complete as one this mount made.
type listings struct {
	max   int // the most directories and names kept together
	count int // directories and names kept
	dirs  map[uint64]*listing
	// active counts this mount's operations under way per directory,
	// listed or not.
	active map[uint64]int
	// misses counts, per directory without a listing, the missing names
	// the meta nodes answered since its last listing read (negative
	// after a read found it too large: the misses left before the next).
	misses map[uint64]int
	// reads are the listing reads under way.
	reads map[uint64]*listingRead
}

// listing is what this mount knows of one directory.
type listing struct {
	names map[string]struct{} // nil while empty
}

// listingRead is a directory's listing being read from the meta nodes.
type listingRead struct {
	// changes are this mount's name changes there that ended before the
	// read returned, in order.
	changes []nameChange
	// found is what the read returned, with the changes since applied;
	// nil until it returned.
	found *listing
}

const (
	// maxListed bounds the directories and names kept: a few tens of
	// bytes each, a few MiB in all.
	maxListed = 1 << 17
	// listAfterMisses missing names asked of the meta nodes in a directory
	// without a listing start a listing read of it.
	listAfterMisses = 2
	// maxListingRead is the most names a listing read keeps (one page of
	// the SDK's ReadDir); a larger directory is read again only after
	// listAgainAfter more misses.
	maxListingRead = 4096
	listAgainAfter = 256
	// maxListingReads bounds the reads under way, maxMissed the
	// directories whose misses are counted.
	maxListingReads = 4
	maxMissed       = 4096
)

func newListings(max int) *listings {
	if max <= 0 {
		max = maxListed
	}
	return &listings{max: max, dirs: map[uint64]*listing{}, active: map[uint64]int{},
		misses: map[uint64]int{}, reads: map[uint64]*listingRead{}}
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
	if d == nil || l.active[dir] > 0 {
		return false
	}
	_, has := d.names[name]
	return !has
}

// enter marks an operation of this mount in dir under way and returns the
// listing it entered (nil: none), for leave.
func (l *listings) enter(dir uint64) *listing {
	l.active[dir]++
	return l.dirs[dir]
}

// leave ends an operation in dir begun by enter, which returned entered.
// A listing the operation did not enter (made while it ran) is dropped:
// what the operation did there is not known. The last operation there to
// end installs a listing read that returned meanwhile.
func (l *listings) leave(dir uint64, entered *listing) {
	if l.active[dir]--; l.active[dir] <= 0 {
		delete(l.active, dir)
	}
	if d := l.dirs[dir]; d != nil && d != entered {
		l.drop(dir)
	}
	if r := l.reads[dir]; r != nil && r.found != nil && l.active[dir] == 0 {
		l.install(dir, r)
	}
}

// missed counts a missing name of dir the meta nodes answered and returns
// the listing read of dir to start now (nil: none); it is under way until
// read or readFailed ends it, or something spoils it.
func (l *listings) missed(dir uint64) *listingRead {
	if l.dirs[dir] != nil || l.reads[dir] != nil {
		return nil
	}
	if _, counted := l.misses[dir]; !counted && len(l.misses) >= maxMissed {
		clear(l.misses)
	}
	if l.misses[dir]++; l.misses[dir] < listAfterMisses || len(l.reads) >= maxListingReads {
		return nil
	}
	delete(l.misses, dir)
	r := &listingRead{}
	l.reads[dir] = r
	return r
}

// read takes what dir's listing read r returned, names, and reports
// whether the read still stands: not when something spoiled it meanwhile.
// It becomes dir's listing at once, or when the last operation of this
// mount under way there ends.
func (l *listings) read(dir uint64, r *listingRead, names []string) bool {
	if l.reads[dir] != r || r.found != nil {
		return false
	}
	f := &listing{names: make(map[string]struct{}, len(names))}
	for _, n := range names {
		f.names[n] = struct{}{}
	}
	for _, ch := range r.changes {
		f.apply(ch.name, ch.present)
	}
	r.found, r.changes = f, nil
	if l.active[dir] == 0 {
		l.install(dir, r)
	}
	return true
}

// install makes read r's names dir's listing, unless they would pass the
// bound.
func (l *listings) install(dir uint64, r *listingRead) {
	delete(l.reads, dir)
	if l.dirs[dir] != nil || l.count+1+len(r.found.names) > l.max {
		return
	}
	if len(r.found.names) == 0 {
		r.found.names = nil
	}
	l.dirs[dir] = r.found
	l.count += 1 + len(r.found.names)
}

// readFailed ends dir's listing read without a listing; tooLarge: the
// directory held more than maxListingRead names, and is read again only
// after listAgainAfter more misses.
func (l *listings) readFailed(dir uint64, r *listingRead, tooLarge bool) {
	if l.reads[dir] != r {
		return
	}
	delete(l.reads, dir)
	if tooLarge {
		l.misses[dir] = listAfterMisses - listAgainAfter
	}
}

// apply sets name present or absent in d and returns the change in the
// number of names.
func (d *listing) apply(name string, present bool) int {
	_, has := d.names[name]
	switch {
	case present && !has:
		if d.names == nil {
			d.names = map[string]struct{}{}
		}
		d.names[name] = struct{}{}
		return 1
	case !present && has:
		delete(d.names, name)
		return -1
	}
	return 0
}

// set records that name is present in dir, or absent, after an operation
// of this mount succeeded. A listing that would grow past the bound is
// dropped.
func (l *listings) set(dir uint64, name string, present bool) {
	if r := l.reads[dir]; r != nil {
		if r.found == nil {
			r.changes = append(r.changes, nameChange{dir, name, present})
		} else {
			r.found.apply(name, present)
		}
	}
	d := l.dirs[dir]
	if d == nil {
		return
	}
	if _, has := d.names[name]; present && !has && l.count >= l.max {
		l.drop(dir)
		return
	}
	l.count += d.apply(name, present)
}

// drop forgets dir's listing, and spoils its read under way (its
// goroutine's read then finds it gone).
func (l *listings) drop(dir uint64) {
	delete(l.reads, dir)
	d := l.dirs[dir]
	if d == nil {
		return
	}
	l.count -= 1 + len(d.names)
	delete(l.dirs, dir)
}

// clear forgets every listing and spoils every read under way.
func (l *listings) clear() {
	clear(l.reads)
	clear(l.dirs)
	l.count = 0
}
