package client

import (
	"slices"
	"sort"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// dirtyRange is a run of buffered overwrite bytes at file offset off.
type dirtyRange struct {
	off  uint64
	data []byte
}

func (r dirtyRange) end() uint64 { return r.off + uint64(len(r.data)) }

// dirtyBuf is a File's write-back buffer of in-place overwrites: sorted,
// non-overlapping, non-adjacent ranges of file bytes not yet sent to the
// data nodes. It is pure state (no I/O) so that its rules can be tested
// byte by byte.
type dirtyBuf struct {
	rs    []dirtyRange
	bytes int // sum of len(data)
}

// len returns the number of buffered bytes.
func (b *dirtyBuf) len() int { return b.bytes }

// insert buffers a copy of p at off. Bytes it covers replace older dirty
// bytes (a later write wins); ranges it overlaps or touches merge into one.
func (b *dirtyBuf) insert(off uint64, p []byte) {
	if len(p) == 0 {
		return
	}
	s, e := off, off+uint64(len(p))
	// i: first range ending at or after s (touching counts);
	// j: one past the last range starting at or before e.
	i := sort.Search(len(b.rs), func(k int) bool { return b.rs[k].end() >= s })
	j := sort.Search(len(b.rs), func(k int) bool { return b.rs[k].off > e })
	if i == j {
		b.rs = slices.Insert(b.rs, i, dirtyRange{off: s, data: slices.Clone(p)})
		b.bytes += len(p)
		return
	}
	ns, ne := min(s, b.rs[i].off), max(e, b.rs[j-1].end())
	var buf []byte
	if b.rs[i].off == ns {
		// Grow the first range's buffer in place: a run of sequential
		// overwrites then costs amortized O(1) per byte, not a copy of the
		// whole range each time.
		buf = b.rs[i].data
		buf = slices.Grow(buf, int(ne-ns)-len(buf))[:ne-ns]
	} else {
		buf = make([]byte, ne-ns)
		copy(buf[b.rs[i].off-ns:], b.rs[i].data)
	}
	for _, r := range b.rs[i+1 : j] {
		copy(buf[r.off-ns:], r.data)
	}
	copy(buf[s-ns:], p)
	for _, r := range b.rs[i:j] {
		b.bytes -= len(r.data)
	}
	b.bytes += len(buf)
	b.rs[i] = dirtyRange{off: ns, data: buf}
	b.rs = slices.Delete(b.rs, i+1, j)
}

// remove drops the dirty bytes in [s, e): a newer write through another
// path (a new extent) has replaced them, so sending them later would undo it.
func (b *dirtyBuf) remove(s, e uint64) {
	if e <= s || len(b.rs) == 0 {
		return
	}
	out := b.rs[:0:0]
	for _, r := range b.rs {
		rs, re := r.off, r.end()
		if re <= s || rs >= e {
			out = append(out, r)
			continue
		}
		b.bytes -= len(r.data)
		if rs < s {
			h := dirtyRange{off: rs, data: r.data[: s-rs : s-rs]}
			out = append(out, h)
			b.bytes += len(h.data)
		}
		if re > e {
			t := dirtyRange{off: e, data: r.data[e-rs:]}
			out = append(out, t)
			b.bytes += len(t.data)
		}
	}
	b.rs = out
}

// cut drops the dirty bytes at or beyond size (a truncation).
func (b *dirtyBuf) cut(size uint64) { b.remove(size, ^uint64(0)) }

// reset empties the buffer.
func (b *dirtyBuf) reset() { b.rs, b.bytes = nil, 0 }

// overlay copies the dirty bytes that fall in [off, off+len(p)) into p, so
// that a read through the handle sees its own unsent writes.
func (b *dirtyBuf) overlay(p []byte, off uint64) {
	e := off + uint64(len(p))
	i := sort.Search(len(b.rs), func(k int) bool { return b.rs[k].end() > off })
	for ; i < len(b.rs) && b.rs[i].off < e; i++ {
		r := b.rs[i]
		s := max(r.off, off)
		copy(p[s-off:min(r.end(), e)-off], r.data[s-r.off:])
	}
}

// overwriteOp is one Overwrite call: data at extOff of extent ext of data
// partition pid.
type overwriteOp struct {
	pid, ext uint64
	extOff   uint64
	data     []byte
}

// splitDirty cuts the dirty ranges along the extent keys (sorted,
// non-overlapping) into Overwrite calls of at most maxOp bytes each. Bytes
// no key covers are returned as uncovered: they cannot happen while the
// File keeps its rules (dirty bytes lie over keys; whatever replaces or
// cuts keys drops them from the buffer first), and the caller treats them
// as an internal error rather than losing them silently.
func splitDirty(rs []dirtyRange, keys []*metapb.ExtentKey, maxOp int) (ops []overwriteOp, uncovered uint64) {
	k := 0
	for _, r := range rs {
		pos, end := r.off, r.end()
		for k < len(keys) && keys[k].FileOffset+keys[k].Size <= pos {
			k++
		}
		for pos < end {
			if k >= len(keys) || keys[k].FileOffset >= end {
				uncovered += end - pos
				break
			}
			key := keys[k]
			ks, ke := key.FileOffset, key.FileOffset+key.Size
			if ks > pos {
				uncovered += ks - pos
				pos = ks
			}
			e := min(ke, end)
			for pos < e {
				n := min(e-pos, uint64(maxOp))
				ops = append(ops, overwriteOp{pid: key.PartitionId, ext: key.ExtentId, extOff: key.ExtentOffset + pos - ks, data: r.data[pos-r.off : pos-r.off+n]})
				pos += n
			}
			if ke <= end {
				k++
			}
		}
	}
	return ops, uncovered
}
