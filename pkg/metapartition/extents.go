package metapartition

import (
	"cmp"
	"slices"
	"sort"
)

// Extent maps are sorted slices of non-overlapping keys. The functions here
// never modify their input slices (inodes in the tree share them) and always
// return new ones.

// insertExtent writes k over list: the parts of older keys that k overlaps
// are cut away (later writes win) and returned in removed, each with the
// physical range it covered.
func insertExtent(list []extent, k extent) (out, removed []extent) {
	return overlay(list, []extent{k})
}

// overlay writes add (sorted and non-overlapping) over list in one pass,
// O(len(list) + len(add)): the parts of list's keys that add covers are cut
// away and returned in removed.
func overlay(list, add []extent) (out, removed []extent) {
	// Fast path: an append beyond the current end (a sequential writer).
	if len(list) == 0 || len(add) == 0 || add[0].fileOff >= list[len(list)-1].end() {
		out = make([]extent, 0, len(list)+len(add))
		return append(append(out, list...), add...), nil
	}
	kept := make([]extent, 0, len(list)+2)
	j := 0
	for _, e := range list {
		for j < len(add) && add[j].end() <= e.fileOff {
			j++
		}
		cur := e
		for k := j; k < len(add) && add[k].fileOff < cur.end(); k++ {
			a := add[k]
			if a.fileOff > cur.fileOff {
				left := cur
				left.size = a.fileOff - cur.fileOff
				kept = append(kept, left)
			}
			lo, hi := max(a.fileOff, cur.fileOff), min(a.end(), cur.end())
			cut := cur
			cut.fileOff = lo
			cut.extOff = cur.extOff + (lo - cur.fileOff)
			cut.size = hi - lo
			removed = append(removed, cut)
			if a.end() >= cur.end() {
				cur.size = 0
				break
			}
			curEnd := cur.end()
			cur.extOff += a.end() - cur.fileOff
			cur.fileOff = a.end()
			cur.size = curEnd - a.end()
		}
		if cur.size > 0 {
			kept = append(kept, cur)
		}
	}
	out = make([]extent, 0, len(kept)+len(add))
	i, j := 0, 0
	for i < len(kept) || j < len(add) {
		if j == len(add) || (i < len(kept) && kept[i].fileOff < add[j].fileOff) {
			out = append(out, kept[i])
			i++
		} else {
			out = append(out, add[j])
			j++
		}
	}
	return out, removed
}

// resolve turns the keys of one AppendExtents, in write order, into a
// sorted non-overlapping list in which later keys win. Writers send sorted
// disjoint keys, which pass through in O(n); anything else is resolved key
// by key.
func resolve(keys []extent) (out, removed []extent) {
	sorted := true
	for i := 1; i < len(keys) && sorted; i++ {
		sorted = keys[i-1].end() <= keys[i].fileOff
	}
	if sorted {
		return keys, nil
	}
	for _, k := range keys {
		var r []extent
		out, r = insertExtent(out, k)
		removed = append(removed, r...)
	}
	return out, removed
}

// truncateExtents cuts list at size: keys at or beyond size go, a key that
// straddles it is shortened. The cut parts are returned in removed.
func truncateExtents(list []extent, size uint64) (out, removed []extent) {
	i := sort.Search(len(list), func(i int) bool { return list[i].end() > size })
	if i == len(list) {
		return list, nil
	}
	out = append([]extent(nil), list[:i]...)
	for _, e := range list[i:] {
		if e.fileOff < size {
			keep := e
			keep.size = size - e.fileOff
			out = append(out, keep)
			cut := e
			cut.fileOff = size
			cut.extOff = e.extOff + keep.size
			cut.size = e.size - keep.size
			removed = append(removed, cut)
			continue
		}
		removed = append(removed, e)
	}
	return out, removed
}

// coalesce merges neighbours that continue each other in the same extent
// (what a sequential writer's appends produce), in place, and returns the
// shortened slice. It keeps extent maps of sequentially written files at one
// key, which is what the inline ext0 of inode is sized for.
func coalesce(list []extent) []extent {
	if len(list) < 2 {
		return list
	}
	w := 0
	for _, e := range list[1:] {
		p := &list[w]
		if p.end() == e.fileOff && p.pid == e.pid && p.eid == e.eid && p.extOff+p.size == e.extOff {
			p.size += e.size
			continue
		}
		w++
		list[w] = e
	}
	return list[:w+1]
}

// physIndex finds the keys of one write that point into a given extent.
type physIndex map[[2]uint64][]extent

func newPhysIndex(keys []extent) physIndex {
	idx := make(physIndex)
	for _, k := range keys {
		id := [2]uint64{k.pid, k.eid}
		idx[id] = append(idx[id], k)
	}
	return idx
}

// unreferenced returns the physical parts of piece that none of the
// indexed keys refers to. Extents are not shared between files or between
// ranges of one file, so a piece cut out of the map is garbage except where
// the write that cut it points at the same bytes again (a client rewriting
// a key in place, or merging a key with its continuation); indexing the
// write's resolved keys (what it leaves in the map) finds exactly those.
func (idx physIndex) unreferenced(piece extent) []extent {
	parts := []extent{piece}
	for _, k := range idx[[2]uint64{piece.pid, piece.eid}] {
		kLo, kHi := k.extOff, k.extOff+k.size
		var next []extent
		for _, p := range parts {
			pLo, pHi := p.extOff, p.extOff+p.size
			if kHi <= pLo || kLo >= pHi {
				next = append(next, p)
				continue
			}
			if pLo < kLo {
				l := p
				l.size = kLo - pLo
				next = append(next, l)
			}
			if pHi > kHi {
				r := p
				r.extOff = kHi
				r.fileOff = p.fileOff + (kHi - pLo)
				r.size = pHi - kHi
				next = append(next, r)
			}
		}
		parts = next
	}
	return parts
}

// unionPhys sorts pieces by physical position and merges those that overlap
// or touch. The pieces one write cuts can cover the same bytes twice (an
// old key's bytes re-referenced by a new key that a later key of the same
// write cuts again); the free list must name every byte once.
func unionPhys(pieces []extent) []extent {
	if len(pieces) < 2 {
		return pieces
	}
	slices.SortFunc(pieces, func(a, b extent) int {
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		if c := cmp.Compare(a.eid, b.eid); c != 0 {
			return c
		}
		return cmp.Compare(a.extOff, b.extOff)
	})
	out := pieces[:1]
	for _, e := range pieces[1:] {
		last := &out[len(out)-1]
		if e.pid == last.pid && e.eid == last.eid && e.extOff <= last.extOff+last.size {
			last.size = max(last.size, e.extOff+e.size-last.extOff)
			continue
		}
		out = append(out, e)
	}
	return out
}
