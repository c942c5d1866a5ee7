package chunker

import (
	"errors"
	"fmt"
	"io"
)

// Span is a chunk's place in a file.
type Span struct {
	Offset int64
	Length int64
}

// Edit replaces Deleted bytes at Offset with Inserted. A write of n bytes is
// Deleted = n (clipped to the file size) plus Inserted; an insert has
// Deleted = 0; a truncation has no Inserted bytes.
type Edit struct {
	Offset   int64
	Deleted  int64
	Inserted []byte
}

// Rechunked is the chunk list of an edited file, expressed against the old
// list: old[:Prefix] at their old offsets, then New, then old[Suffix:]
// shifted by Shift bytes.
type Rechunked struct {
	// Prefix is the number of leading old chunks kept unchanged.
	Prefix int
	// New are the chunks cut from the changed region, in file order, with
	// offsets in the new file and their own copy of the data.
	New []Chunk
	// Suffix is the index of the first trailing old chunk kept; all old
	// chunks from it on are kept. Suffix >= Prefix.
	Suffix int
	// Shift is len(Inserted) - Deleted: how far the kept suffix moved.
	Shift int64
	// ReadBytes is how many old bytes were read from the source.
	ReadBytes int64
}

// Spans returns the whole new chunk list given the old one.
func (r Rechunked) Spans(old []Span) []Span {
	out := make([]Span, 0, r.Prefix+len(r.New)+len(old)-r.Suffix)
	out = append(out, old[:r.Prefix]...)
	for _, c := range r.New {
		out = append(out, Span{Offset: c.Offset, Length: int64(c.Length)})
	}
	for _, s := range old[r.Suffix:] {
		out = append(out, Span{Offset: s.Offset + r.Shift, Length: s.Length})
	}
	return out
}

// Rechunk computes the chunk list of a file after edit e without re-cutting
// the whole file (VarFS §II.C: only boundary chunks and new data are cut
// again). old must be the list c cut for the old file, whose bytes src
// serves; the result is then exactly the list c would cut for the edited
// file.
//
// Why that holds: a cut depends only on the bytes from the chunk's start to
// the cut. Old chunks ending at or before the edit keep their bytes and their
// cut, except the file's last chunk, which may have been cut by the end of the
// file and is cut again when the edit appends. Cutting restarts at the start
// of the first affected chunk and stops as soon as a new cut past the
// inserted bytes lands on an old boundary past the deleted bytes: from there
// on the bytes, and so the cuts, are the old ones.
//
// src is read only inside the region that is cut again, in increasing
// offsets, holding at most MaxSize bytes of it at a time besides the returned
// chunks. Malformed input (a list that is not contiguous from 0, chunks
// longer than MaxSize, an edit outside the file) is an error.
func (c *Cutter) Rechunk(old []Span, e Edit, src io.ReaderAt) (Rechunked, error) {
	size, err := c.checkSpans(old)
	if err != nil {
		return Rechunked{}, err
	}
	if e.Offset < 0 || e.Deleted < 0 || e.Offset > size || e.Deleted > size-e.Offset {
		return Rechunked{}, fmt.Errorf("rechunk: edit [%d, +%d) outside file of %d bytes", e.Offset, e.Deleted, size)
	}
	ins := int64(len(e.Inserted))
	r := Rechunked{Shift: ins - e.Deleted}
	if e.Deleted == 0 && ins == 0 {
		r.Prefix, r.Suffix = len(old), len(old)
		return r, nil
	}
	// Keep every chunk ending at or before the edit but the file's last.
	for r.Prefix < len(old) && end(old[r.Prefix]) <= e.Offset && end(old[r.Prefix]) < size {
		r.Prefix++
	}
	v := virtualFile{old: src, oldSize: size, e: e}
	cur := int64(0)
	if r.Prefix < len(old) {
		cur = old[r.Prefix].Offset
	}
	newSize := size + r.Shift
	editEnd := e.Offset + ins // end of the inserted bytes in the new file
	next := r.Prefix          // old chunk whose start is the next candidate boundary
	var win []byte            // new-file bytes [winOff, winOff+len(win))
	winOff := cur
	for {
		if cur >= editEnd {
			oldPos := cur - r.Shift
			for next < len(old) && old[next].Offset < oldPos {
				next++
			}
			// The old end of file counts as a boundary: reaching it means
			// the new file ended too.
			if (next == len(old) && oldPos == size) || (next < len(old) && old[next].Offset == oldPos) {
				r.Suffix = next
				return r, nil
			}
		}
		want := min(cur+int64(c.cfg.MaxSize), newSize)
		if have := winOff + int64(len(win)); have < want {
			win = append(win[:0], win[cur-winOff:]...)
			winOff = cur
			grow := int(want - have)
			win = append(win, make([]byte, grow)...)
			nOld, err := v.readAt(win[len(win)-grow:], have)
			r.ReadBytes += nOld
			if err != nil {
				return Rechunked{}, err
			}
		}
		buf := win[cur-winOff : want-winOff]
		n := c.Next(buf)
		data := append([]byte(nil), buf[:n]...)
		r.New = append(r.New, Chunk{Offset: cur, Length: n, Fingerprint: Sum(c.cfg.Algorithm, data), Data: data})
		cur += int64(n)
	}
}

func end(s Span) int64 { return s.Offset + s.Length }

// checkSpans returns the file size covered by old after checking that the
// spans tile [0, size) and none is longer than MaxSize.
func (c *Cutter) checkSpans(old []Span) (int64, error) {
	var off int64
	for i, s := range old {
		if s.Offset != off || s.Length <= 0 || s.Length > int64(c.cfg.MaxSize) {
			return 0, fmt.Errorf("rechunk: old chunk %d is [%d, +%d), want offset %d and length in [1, %d]",
				i, s.Offset, s.Length, off, c.cfg.MaxSize)
		}
		off += s.Length
	}
	return off, nil
}

// virtualFile serves the bytes of the edited file from the old file and the
// inserted bytes, without materializing it.
type virtualFile struct {
	old     io.ReaderAt
	oldSize int64
	e       Edit
}

// readAt fills p with the new file's bytes at off, which the caller keeps
// inside the new file, and returns how many old bytes it read.
func (v virtualFile) readAt(p []byte, off int64) (int64, error) {
	var fromOld int64
	ins := int64(len(v.e.Inserted))
	for len(p) > 0 {
		var n int
		switch {
		case off < v.e.Offset: // before the edit: old bytes at the same offset
			n = int(min(int64(len(p)), v.e.Offset-off))
			if err := v.readOld(p[:n], off); err != nil {
				return fromOld, err
			}
			fromOld += int64(n)
		case off < v.e.Offset+ins: // the inserted bytes
			n = copy(p, v.e.Inserted[off-v.e.Offset:])
		default: // after the edit: old bytes shifted
			n = len(p)
			if err := v.readOld(p, off-ins+v.e.Deleted); err != nil {
				return fromOld, err
			}
			fromOld += int64(n)
		}
		p = p[n:]
		off += int64(n)
	}
	return fromOld, nil
}

func (v virtualFile) readOld(p []byte, off int64) error {
	if off+int64(len(p)) > v.oldSize {
		return fmt.Errorf("rechunk: read old [%d, +%d) past its size %d", off, len(p), v.oldSize)
	}
	n, err := v.old.ReadAt(p, off)
	if n == len(p) {
		// io.ReaderAt may report io.EOF with a full read at the end.
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("rechunk: read old [%d, +%d): got %d bytes: %w", off, len(p), n, err)
}
