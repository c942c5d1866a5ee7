package grant

import (
	"slices"
	"sync"
)

// ExtentID names an extent of a data partition.
type ExtentID struct{ Partition, Extent uint64 }

// Spans are the byte ranges one holder (a client certificate) may use on
// one data node: those of the grants it presented, and those it wrote
// itself (a new extent, a small file). Safe for concurrent use.
//
// Overlapping or touching ranges of one mode merge into one span that
// expires with the earliest of them: a read across two files' tokens is
// allowed, and a merged span never outlives a token it came from.
type Spans struct {
	mu    sync.Mutex
	ext   map[ExtentID]*modeSpans
	count int
	limit int
}

type modeSpans struct{ read, write []span }

type span struct {
	lo, hi  uint64
	expires int64 // unix seconds
}

// NewSpans returns an empty set that holds at most limit spans: beyond it,
// the set starts over empty (the holder presents its tokens again when
// refused, so the bound costs a round trip, never an error).
func NewSpans(limit int) *Spans {
	return &Spans{ext: map[ExtentID]*modeSpans{}, limit: max(limit, 1)}
}

// Add records what g grants.
func (s *Spans) Add(g *Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range g.Ranges {
		s.addLocked(r, g.Mode, g.Expires)
	}
}

// Own records that the holder wrote [lo, hi) of an extent itself, which it
// may then read, append to and free until expires (unix seconds).
func (s *Spans) Own(p, e, lo, hi uint64, expires int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(Range{Partition: p, Extent: e, Lo: lo, Hi: hi}, Write, expires)
}

func (s *Spans) addLocked(r Range, m Mode, expires int64) {
	if r.Hi <= r.Lo {
		return
	}
	if s.count >= s.limit {
		clear(s.ext)
		s.count = 0
	}
	id := ExtentID{r.Partition, r.Extent}
	ms := s.ext[id]
	if ms == nil {
		ms = &modeSpans{}
		s.ext[id] = ms
	}
	sp := span{lo: r.Lo, hi: r.Hi, expires: expires}
	var d int
	ms.read, d = insert(ms.read, sp)
	s.count += d
	if m == Write {
		ms.write, d = insert(ms.write, sp)
		s.count += d
	}
}

// insert adds sp to the sorted, disjoint spans ss, merging what it
// overlaps or touches, and returns the spans and the change of their count.
func insert(ss []span, sp span) ([]span, int) {
	// First span that could touch sp: the first whose hi >= sp.lo.
	i, _ := slices.BinarySearchFunc(ss, sp.lo, func(x span, lo uint64) int {
		switch {
		case x.hi < lo:
			return -1
		default:
			return 1
		}
	})
	j := i
	for j < len(ss) && ss[j].lo <= sp.hi {
		sp.lo, sp.hi = min(sp.lo, ss[j].lo), max(sp.hi, ss[j].hi)
		sp.expires = min(sp.expires, ss[j].expires)
		j++
	}
	before := len(ss)
	ss = slices.Replace(ss, i, j, sp)
	return ss, len(ss) - before
}

// Allows reports whether the holder may access [lo, lo+n) of extent (p, e)
// with mode m at now (unix seconds). An expired span is dropped.
func (s *Spans) Allows(p, e, lo, n uint64, m Mode, now int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.ext[ExtentID{p, e}]
	if ms == nil {
		return false
	}
	ss := &ms.read
	if m == Write {
		ss = &ms.write
	}
	hi := lo + n
	if hi < lo {
		return false
	}
	// The last span starting at or before lo.
	i, found := slices.BinarySearchFunc(*ss, lo, func(x span, lo uint64) int {
		if x.lo <= lo {
			return -1
		}
		return 1
	})
	_ = found
	if i == 0 {
		return false
	}
	sp := (*ss)[i-1]
	if sp.expires <= now {
		*ss = slices.Delete(*ss, i-1, i)
		s.count--
		return false
	}
	return hi <= sp.hi
}

// Len is the number of spans held.
func (s *Spans) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}
