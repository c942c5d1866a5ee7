package grant

import (
	"slices"
	"sync"
	"time"
)

// Book is the tokens a client holds, found by the range they grant. Meta
// responses fill it (Add); the data client looks up the token to present
// before a read or an overwrite (Find). Safe for concurrent use.
type Book struct {
	mu    sync.Mutex
	ext   map[ExtentID][]entry // sorted by lo; among equal lo, newest last
	order []*Token             // tokens in the order added, oldest first
	count int                  // entries in ext
	limit int
}

type entry struct {
	lo, hi uint64
	tok    *Token
}

// Token is a token as a client holds it: its bytes and what it says.
type Token struct {
	Bytes []byte
	Grant *Grant
}

// margin is how long before its expiry a token stops being presented: a
// data node's clock may run ahead of the client's.
const margin = 30 * time.Second

// keepOlder is how much longer a new token of a range must live than the
// one held for it to replace it (Add).
const keepOlder = 5 * time.Minute

// NewBook returns an empty book of at most limit ranges: beyond it, it
// drops the tokens added first (a grant dropped is fetched again, with
// the inode, when a data node asks for it).
func NewBook(limit int) *Book {
	return &Book{ext: map[ExtentID][]entry{}, limit: max(limit, 1)}
}

// Add records a token. A token that does not parse is ignored: the data
// node would refuse it too.
func (b *Book) Add(tok []byte) {
	g, err := Decode(tok)
	if err != nil {
		return
	}
	t := &Token{Bytes: tok, Grant: g}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.order = append(b.order, t)
	for _, r := range g.Ranges {
		id := ExtentID{r.Partition, r.Extent}
		es := b.ext[id]
		i, _ := slices.BinarySearchFunc(es, r.Lo, func(e entry, lo uint64) int {
			if e.lo <= lo {
				return -1
			}
			return 1
		})
		// A newer token of the same inode for the same range replaces the
		// older one, unless the older grants as much and expires less than
		// keepOlder before: data nodes have the older one already, and a
		// file opened again and again is not presented again each time.
		if i > 0 && es[i-1].lo == r.Lo && es[i-1].hi == r.Hi && es[i-1].tok.Grant.Ino == g.Ino {
			if old := es[i-1].tok.Grant; old.Mode < g.Mode || old.Expires+int64(keepOlder/time.Second) < g.Expires {
				es[i-1].tok = t
			}
			continue
		}
		b.ext[id] = slices.Insert(es, i, entry{lo: r.Lo, hi: r.Hi, tok: t})
		b.count++
	}
	for b.count > b.limit && len(b.order) > 1 {
		b.dropLocked(b.order[0])
		b.order[0] = nil
		b.order = b.order[1:]
	}
	if len(b.order) > 2*b.limit {
		// Replaced tokens linger in the queue; compact it now and then.
		b.order = slices.DeleteFunc(b.order, func(t *Token) bool { return !b.holdsLocked(t) })
	}
}

// dropLocked removes t's ranges (those a newer token has not replaced).
func (b *Book) dropLocked(t *Token) {
	for _, r := range t.Grant.Ranges {
		id := ExtentID{r.Partition, r.Extent}
		es := b.ext[id]
		n := len(es)
		es = slices.DeleteFunc(es, func(e entry) bool { return e.tok == t })
		b.count -= n - len(es)
		if len(es) == 0 {
			delete(b.ext, id)
		} else {
			b.ext[id] = es
		}
	}
}

// holdsLocked reports whether one of t's ranges still refers to t.
func (b *Book) holdsLocked(t *Token) bool {
	for _, r := range t.Grant.Ranges {
		for _, e := range b.ext[ExtentID{r.Partition, r.Extent}] {
			if e.tok == t {
				return true
			}
		}
	}
	return false
}

// findScan bounds how many ranges starting before an offset Find looks at:
// ranges of one extent overlap only for tokens of one file issued at
// different times.
const findScan = 16

// Find returns a token, valid for a while yet at now, that grants mode m
// on [lo, lo+n) of extent (p, e), or nil.
func (b *Book) Find(p, e, lo, n uint64, m Mode, now time.Time) *Token {
	cut := now.Add(margin).Unix()
	b.mu.Lock()
	defer b.mu.Unlock()
	es := b.ext[ExtentID{p, e}]
	i, _ := slices.BinarySearchFunc(es, lo, func(x entry, lo uint64) int {
		if x.lo <= lo {
			return -1
		}
		return 1
	})
	for k := i - 1; k >= 0 && k >= i-findScan; k-- {
		x := es[k]
		if lo+n <= x.hi && x.tok.Grant.Mode.Allows(m) && x.tok.Grant.Expires > cut {
			return x.tok
		}
	}
	return nil
}

// Forget drops the tokens that grant exactly [lo, hi) of extent (p, e) and
// nothing else: a small file's receipt once its key is recorded.
func (b *Book) Forget(p, e, lo, hi uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range b.ext[ExtentID{p, e}] {
		if x.lo == lo && x.hi == hi && len(x.tok.Grant.Ranges) == 1 {
			b.dropLocked(x.tok)
			return
		}
	}
}

// Len is the number of ranges held.
func (b *Book) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count
}
