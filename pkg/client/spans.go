package client

import "sort"

// spans is a set of byte ranges of a file: sorted, non-overlapping, with
// touching ranges merged. Pure state, tested on its own.
type spans struct {
	rs []span
}

// span is the range [s, e).
type span struct{ s, e uint64 }

// add puts [s, e) in the set.
func (x *spans) add(s, e uint64) {
	if e <= s {
		return
	}
	// i: first range ending at or after s; j: one past the last range
	// starting at or before e (touching ranges merge).
	i := sort.Search(len(x.rs), func(k int) bool { return x.rs[k].e >= s })
	j := sort.Search(len(x.rs), func(k int) bool { return x.rs[k].s > e })
	if i < j {
		s, e = min(s, x.rs[i].s), max(e, x.rs[j-1].e)
	}
	x.rs = append(x.rs[:i], append([]span{{s, e}}, x.rs[j:]...)...)
}

// overlaps reports whether any range of the set shares a byte with [s, e).
func (x *spans) overlaps(s, e uint64) bool {
	i := sort.Search(len(x.rs), func(k int) bool { return x.rs[k].e > s })
	return i < len(x.rs) && x.rs[i].s < e && s < e
}

// reset empties the set.
func (x *spans) reset() { x.rs = x.rs[:0] }
