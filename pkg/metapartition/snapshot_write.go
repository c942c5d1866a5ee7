package metapartition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Snapshot encoding: snapWriter (buffered, checksummed output) and
// Frozen.WriteTo with the per-record writers.

// snapWriter buffers output, checksums it and counts bytes; the first write
// error sticks.
type snapWriter struct {
	w   io.Writer
	buf []byte
	crc uint32
	n   int64
	err error
}

const snapFlushAt = 64 << 10

func (s *snapWriter) flush() {
	if s.err != nil || len(s.buf) == 0 {
		s.buf = s.buf[:0]
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, s.buf)
	m, err := s.w.Write(s.buf)
	s.n += int64(m)
	if err == nil && m < len(s.buf) {
		err = io.ErrShortWrite
	}
	s.err = err
	s.buf = s.buf[:0]
}

func (s *snapWriter) u(v uint64) { s.buf = binary.AppendUvarint(s.buf, v) }
func (s *snapWriter) i(v int64)  { s.buf = binary.AppendVarint(s.buf, v) }
func (s *snapWriter) bytes(b string) {
	s.u(uint64(len(b)))
	s.buf = append(s.buf, b...)
}

// record ends a record: flushes when the buffer is big enough.
func (s *snapWriter) record() bool {
	if len(s.buf) >= snapFlushAt {
		s.flush()
	}
	return s.err == nil
}

// WriteTo writes the snapshot encoding of f to w and returns the bytes
// written. The encoding is deterministic: equal states give equal bytes.
func (f *Frozen) WriteTo(w io.Writer) (int64, error) {
	s := &snapWriter{w: w, buf: make([]byte, 0, snapFlushAt+8<<10)}
	s.buf = append(s.buf, snapMagic...)
	s.u(snapVersion)
	s.u(f.start)
	s.u(f.end)
	s.u(f.maxIno)
	s.u(f.freeSeq)

	s.u(uint64(f.inodes.Len()))
	f.inodes.Scan(func(in *inode) bool {
		s.u(in.ino)
		s.u(uint64(in.typ()))
		s.u(uint64(in.perm()))
		s.u(uint64(in.uid))
		s.u(uint64(in.gid))
		s.u(uint64(in.nlink))
		s.u(in.size)
		s.i(in.atime)
		s.i(in.mtime)
		s.i(in.ctime)
		s.i(in.btime)
		s.u(in.rdev())
		s.u(in.parent)
		s.bytes(in.target())
		s.u(uint64(in.extentCount()))
		if in.ext0.size != 0 {
			s.extent(in.ext0)
			if in.x != nil {
				for _, e := range in.x.exts {
					s.extent(e)
				}
			}
		}
		xs := in.xattrs()
		s.u(uint64(len(xs)))
		for _, x := range xs {
			s.bytes(x.name)
			s.u(uint64(len(x.value)))
			s.buf = append(s.buf, x.value...)
		}
		if l := in.cdc(); l == nil {
			s.u(uint64(metapb.FileLayout_FILE_LAYOUT_EXTENT))
		} else {
			s.u(uint64(metapb.FileLayout_FILE_LAYOUT_CDC))
			s.u(l.gen)
			s.u(uint64(len(l.chunks)))
			for _, c := range l.chunks {
				s.chunk(c)
				s.record()
			}
		}
		return s.record()
	})

	s.u(uint64(f.dentries.Len()))
	f.dentries.Scan(func(d dentry) bool {
		s.u(d.parent)
		s.bytes(d.name)
		s.u(d.ino)
		s.u(uint64(d.typ))
		return s.record()
	})

	s.u(uint64(f.fences.Len()))
	f.fences.Scan(func(parent uint64, fr fenceRec) bool {
		s.u(parent)
		s.u(fr.token)
		s.i(fr.at)
		return s.record()
	})

	s.u(uint64(f.free.Len()))
	f.free.Scan(func(e FreedExtent) bool {
		s.u(e.Seq)
		s.u(e.Ino)
		s.u(e.PartitionID)
		s.u(e.ExtentID)
		s.u(e.ExtentOffset)
		s.u(e.Size)
		s.bool(e.IsChunkDrop())
		if e.IsChunkDrop() {
			s.buf = append(s.buf, e.Fingerprint[:]...)
		}
		return s.record()
	})

	s.u(uint64(len(f.touched)))
	for _, k := range f.touched {
		s.u(k.ino)
		s.u(k.op)
		s.record()
	}

	s.u(uint64(len(f.requests)))
	for _, e := range f.requests {
		s.u(e.id)
		s.u(uint64(len(e.res)))
		s.buf = append(s.buf, e.res...)
		s.record()
	}

	if r := f.routing; r == nil {
		s.u(0)
	} else {
		s.u(1)
		s.u(r.self)
		s.bool(r.sealed)
		s.routeTable(r.current)
		s.bool(r.previous != nil)
		if r.previous != nil {
			s.routeTable(r.previous)
		}
	}

	s.u(uint64(f.chunks.Len()))
	f.chunks.Scan(func(e chunkEntry) bool {
		s.chunk(e.c)
		s.u(e.refs)
		s.bool(e.dead)
		s.i(e.mtime)
		return s.record()
	})
	s.u(uint64(f.marks.Len()))
	f.marks.Scan(func(source, seq uint64) bool {
		s.u(source)
		s.u(seq)
		return s.record()
	})
	s.u(f.nsEpoch)
	s.u(uint64(f.quota.Len()))
	f.quota.Scan(func(id uint64, u QuotaUse) bool {
		s.u(id)
		s.i(u.Bytes)
		s.i(u.Inodes)
		return s.record()
	})
	pending := 0
	f.dentries.Scan(func(d dentry) bool {
		if d.pend != nil {
			pending++
		}
		return true
	})
	s.u(uint64(pending))
	f.dentries.Scan(func(d dentry) bool {
		if d.pend == nil {
			return true
		}
		s.u(d.parent)
		s.bytes(d.name)
		s.u(d.pend.GetId())
		s.u(d.pend.GetFromParent())
		s.bytes(string(d.pend.GetFromName()))
		s.i(d.pend.GetSince())
		s.u(d.pend.GetReplacedIno())
		s.u(uint64(d.pend.GetReplacedType()))
		return s.record()
	})
	s.flush()
	if s.err != nil {
		return s.n, fmt.Errorf("metapartition: write snapshot: %w", s.err)
	}
	var trailer [4]byte
	binary.LittleEndian.PutUint32(trailer[:], s.crc)
	m, err := w.Write(trailer[:])
	s.n += int64(m)
	if err != nil {
		return s.n, fmt.Errorf("metapartition: write snapshot trailer: %w", err)
	}
	return s.n, nil
}

func (s *snapWriter) bool(b bool) {
	if b {
		s.u(1)
	} else {
		s.u(0)
	}
}

func (s *snapWriter) routeTable(rt *routeTable) {
	s.u(rt.version)
	s.u(uint64(len(rt.slots)))
	for _, mp := range rt.slots {
		s.u(mp)
		s.record()
	}
	s.u(uint64(len(rt.exc)))
	for _, e := range rt.exc {
		s.bytes(e.name)
		s.u(uint64(e.kind))
		s.u(e.mp)
		s.record()
	}
}

func (s *snapWriter) chunk(c chunkRef) {
	s.buf = append(s.buf, c.fp[:]...)
	s.u(uint64(c.size))
	s.u(c.pid)
	s.u(c.eid)
	s.u(c.extOff)
}

func (s *snapWriter) extent(e extent) {
	s.u(e.fileOff)
	s.u(e.pid)
	s.u(e.eid)
	s.u(e.extOff)
	s.u(e.size)
}
