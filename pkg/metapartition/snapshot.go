package metapartition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/tidwall/btree"
	"google.golang.org/protobuf/proto"
)

// Snapshot format, version 5 (version 1, without parent pointers, request
// ids and routing, version 2, without routing, and version 3, without
// chunks, and version 4, without the namespace epoch, are still read). All integers are unsigned varints except times
// (zigzag varints), fingerprints (chunker.FingerprintSize raw bytes) and the
// trailer; records are in key order, so equal states encode to equal bytes.
//
//	magic "CAIRNMP\n", version
//	start, end, maxIno, freeSeq
//	#inodes,   inode*    ino type perm uid gid nlink size atime mtime ctime btime
//	                     rdev parent(v2) len(target) target #extents (fileOff pid eid extOff size)*
//	                     #xattrs (len(name) name len(value) value)*
//	                     layout(v4: 0 extent, 1 cdc) [gen #chunks chunk*] (v4), where chunk is
//	                     fp size pid eid extOff
//	#dentries, dentry*   parent len(name) name ino type
//	#fences,   fence*    parent token at(v5, zigzag)
//	#free,     freed*    seq ino pid eid extOff size drop(v4: 0 or 1) [fp] (v4)
//	#touched,  opKey*    ino opID, oldest first
//	#requests, request*  id len(result) result (a TxnResult in deterministic
//	                     protobuf, as remembered), oldest first (v2)
//	hasRouting (0 or 1), and if 1: self sealed(0/1) table hasPrevious(0/1)
//	                     [table] (v3), where table is
//	                     version #slots slot* #exceptions (len(name) name kind mp)*
//	                     with exceptions sorted by name
//	#chunkEntries, entry* fp size pid eid extOff refs dead(0/1) mtime, by fp (v4)
//	#watermarks, mark*   source seq, by source (v4)
//	nsEpoch              fences applied so far (v5)
//	crc32c of everything above, 4 bytes little-endian
const (
	snapMagic   = "CAIRNMP\n"
	snapVersion = 5
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by Restore's errors for data that is not a valid
// snapshot (bad checksum, truncated, or breaking an invariant).
var ErrCorrupt = errors.New("metapartition: corrupt snapshot")

// Frozen is an immutable copy of a partition's replicated state, taken by
// Clone in O(1): the B-trees are shared copy-on-write with the live
// partition, which never writes to a shared node or to a stored record.
// Its methods may run in any goroutine while the partition keeps applying.
type Frozen struct {
	start, end, maxIno, freeSeq uint64

	inodes   *btree.BTreeG[*inode]
	dentries *btree.BTreeG[dentry]
	fences   *btree.Map[uint64, fenceRec]
	free     *btree.BTreeG[FreedExtent]
	touched  []opKey
	requests []reqEntry
	routing  *routing // immutable, shared with the partition
	chunks   *btree.BTreeG[chunkEntry]
	marks    *btree.Map[uint64, uint64]
	nsEpoch  uint64
}

// Clone returns a Frozen copy of the replicated state. It costs O(1) for the
// trees plus a copy of the TouchDir and request histories (at most
// TouchHistory and RequestHistory entries; results are shared, immutable).
// It changes the live trees' copy-on-write markers, so it must be called
// where Apply is (not concurrently with anything on p).
func (p *Partition) Clone() *Frozen {
	return &Frozen{
		start: p.start, end: p.end, maxIno: p.maxIno, freeSeq: p.freeSeq,
		inodes:   p.inodes.Copy(),
		dentries: p.dentries.Copy(),
		fences:   p.fences.Copy(),
		free:     p.free.Copy(),
		touched:  p.touched.ordered(),
		requests: p.requests.ordered(),
		routing:  p.routing,
		chunks:   p.chunks.Copy(),
		marks:    p.marks.Copy(),
		nsEpoch:  p.nsEpoch,
	}
}

// Snapshot implements multiraft.StateMachine: Clone followed by WriteTo
// into memory.
func (p *Partition) Snapshot() ([]byte, error) {
	var buf bytes.Buffer
	if _, err := p.Clone().WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

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
		s.u(in.parent())
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

// Restore implements multiraft.StateMachine: it replaces p's state with the
// one encoded in data. The data is checked in full (checksum, framing and
// every invariant Apply maintains) before anything changes; on any error p
// is left as it was, and the error wraps ErrCorrupt. Derived indexes
// (orphans, name counts) are rebuilt.
func (p *Partition) Restore(data []byte) error {
	q, err := decodeSnapshot(data)
	if err != nil {
		return err
	}
	q.onFence = p.onFence
	*p = *q
	return nil
}

// snapReader decodes the snapshot body; the first error sticks and every
// later read returns zero.
type snapReader struct {
	b       []byte
	off     int
	err     error
	version uint64
}

func (r *snapReader) failf(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *snapReader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.failf("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *snapReader) i() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.failf("bad varint")
		return 0
	}
	r.off += n
	return v
}

// u32 reads a varint that must fit in 32 bits.
func (r *snapReader) u32(what string) uint32 {
	v := r.u()
	if v > math.MaxUint32 {
		r.failf("%s %d out of range", what, v)
		return 0
	}
	return uint32(v)
}

func (r *snapReader) raw(what string, max int) []byte {
	n := r.u()
	if r.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(r.b)-r.off) {
		r.failf("%s of %d bytes (limit %d, %d left)", what, n, max, len(r.b)-r.off)
		return nil
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b
}

// count reads a record count and bounds it by what the remaining bytes can
// hold (each record takes at least minBytes), so that a corrupt count cannot
// make the decoder loop or allocate beyond the input's size.
func (r *snapReader) count(what string, minBytes int) int {
	n := r.u()
	if r.err != nil {
		return 0
	}
	if n > uint64((len(r.b)-r.off)/minBytes) {
		r.failf("%d %s cannot fit in %d bytes", n, what, len(r.b)-r.off)
		return 0
	}
	return int(n)
}

func (r *snapReader) fileType(what string) metapb.FileType {
	v := r.u()
	t := metapb.FileType(v)
	if v > math.MaxInt32 || !validType(t) {
		r.failf("invalid %s type %d", what, v)
		return 0
	}
	return t
}

func decodeSnapshot(data []byte) (*Partition, error) {
	if len(data) < len(snapMagic)+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrCorrupt, len(data))
	}
	body := data[:len(data)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(data[len(data)-4:]); got != want {
		return nil, fmt.Errorf("%w: checksum %08x, trailer says %08x", ErrCorrupt, got, want)
	}
	if string(body[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	r := &snapReader{b: body, off: len(snapMagic)}
	version := r.u()
	if r.err == nil && (version < 1 || version > snapVersion) {
		return nil, fmt.Errorf("%w: unsupported version %d (want 1 to %d)", ErrCorrupt, version, snapVersion)
	}
	r.version = version
	p := newEmpty()
	p.start, p.end, p.maxIno, p.freeSeq = r.u(), r.u(), r.u(), r.u()
	if r.err == nil {
		switch {
		case p.start == 0:
			r.failf("range start 0")
		case p.end != 0 && p.end < p.start:
			r.failf("empty range [%d, %d]", p.start, p.end)
		case p.maxIno < p.start-1 || (p.end != 0 && p.maxIno > p.end):
			r.failf("max inode %d outside range [%d, %d]", p.maxIno, p.start, p.end)
		}
	}

	n := r.count("inodes", 17)
	var prev uint64
	for i := 0; i < n && r.err == nil; i++ {
		in := r.inode()
		if r.err != nil {
			break
		}
		if in.ino < p.start || in.ino > p.maxIno || (i > 0 && in.ino <= prev) {
			r.failf("inode %d out of order or outside [%d, %d]", in.ino, p.start, p.maxIno)
			break
		}
		prev = in.ino
		p.inodes.Load(in)
		p.mem += inodeBytes(in)
		if in.nlink == 0 {
			p.orphans.Insert(in.ino)
		}
	}

	n = r.count("dentries", 5)
	var last dentry
	for i := 0; i < n && r.err == nil; i++ {
		d := dentry{parent: r.u()}
		d.name = string(r.raw("name", MaxNameLen))
		d.ino = r.u()
		d.typ = r.fileType("dentry")
		if r.err != nil {
			break
		}
		if e, msg := checkName(d.name); e != OK {
			r.failf("dentry under %d: %s", d.parent, msg)
			break
		}
		if d.parent == 0 || d.ino == 0 || d.ino == d.parent || (i > 0 && !dentryLess(last, d)) {
			r.failf("dentry %d/%s -> %d invalid or out of order", d.parent, quote(d.name), d.ino)
			break
		}
		last = d
		p.dentries.Load(d)
		p.nameInc(d.name)
		p.mem += dentryBytes(d)
	}

	n = r.count("fences", 2)
	if n > MaxFences {
		r.failf("%d fences, more than %d", n, MaxFences)
	}
	for i := 0; i < n && r.err == nil; i++ {
		parent, token := r.u(), r.u()
		var at int64
		if r.version >= 5 {
			at = r.i()
		}
		if r.err != nil {
			break
		}
		if parent == 0 || token == 0 || (i > 0 && parent <= prev) {
			r.failf("fence %d/%d invalid or out of order", parent, token)
			break
		}
		prev = parent
		p.fences.Load(parent, fenceRec{token: token, at: at})
	}

	n = r.count("free extents", 6)
	for i := 0; i < n && r.err == nil; i++ {
		f := FreedExtent{Seq: r.u(), Ino: r.u(), PartitionID: r.u(), ExtentID: r.u(), ExtentOffset: r.u(), Size: r.u()}
		if r.version >= 4 && r.flag("chunk drop") {
			f.Fingerprint = r.fingerprint("chunk drop")
			if r.err == nil && (f.Seq == 0 || f.Size > math.MaxUint32 || f.PartitionID == 0) {
				r.failf("chunk drop %d: seq 0, or size %d or partition %d invalid", f.Seq, f.Size, f.PartitionID)
			}
		}
		if r.err != nil {
			break
		}
		if f.Seq >= p.freeSeq || (i > 0 && f.Seq <= prev) || f.Size == 0 {
			r.failf("free extent %d invalid or out of order", f.Seq)
			break
		}
		prev = f.Seq
		p.free.Load(f)
		if f.IsChunkDrop() {
			p.cidx.drops++
		}
	}

	n = r.count("touched ops", 2)
	if n > TouchHistory {
		r.failf("%d touched ops, more than %d", n, TouchHistory)
	}
	for i := 0; i < n && r.err == nil; i++ {
		k := opKey{ino: r.u(), op: r.u()}
		if r.err != nil {
			break
		}
		if k.op == 0 || p.touched.has(k) {
			r.failf("touched op %d/%d invalid or repeated", k.ino, k.op)
			break
		}
		p.touched.push(k)
	}

	if r.version >= 2 {
		n = r.count("requests", 2)
		if n > RequestHistory {
			r.failf("%d requests, more than %d", n, RequestHistory)
		}
		for i := 0; i < n && r.err == nil; i++ {
			id := r.u()
			b := r.raw("request result", len(r.b))
			if r.err != nil {
				break
			}
			res := new(metapb.TxnResult)
			if err := proto.Unmarshal(b, res); err != nil {
				r.failf("request %d: result: %v", id, err)
				break
			}
			if id == 0 || p.requests.has(id) || res.Errno != 0 {
				r.failf("request %d invalid or repeated", id)
				break
			}
			p.requests.pushBytes(id, append([]byte(nil), b...))
		}
	}
	if r.version >= 3 {
		p.routing = r.routing()
	}
	if r.version >= 4 {
		r.chunkIndex(p)
	}
	if r.version >= 5 {
		p.nsEpoch = r.u()
	}
	if r.err == nil && r.off != len(r.b) {
		r.failf("%d bytes after the last record", len(r.b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
}

// fingerprint reads a raw fingerprint, which must have a non-zero
// algorithm byte (as parseFingerprint requires).
func (r *snapReader) fingerprint(what string) chunker.Fingerprint {
	var fp chunker.Fingerprint
	if r.err != nil {
		return fp
	}
	if len(r.b)-r.off < len(fp) {
		r.failf("%s: fingerprint cut short", what)
		return fp
	}
	copy(fp[:], r.b[r.off:])
	r.off += len(fp)
	if fp[0] == byte(chunker.AlgorithmInvalid) {
		r.failf("%s: fingerprint with algorithm 0", what)
	}
	return fp
}

// chunk reads a chunk with its location and checks it as checkChunk does.
func (r *snapReader) chunk(what string) chunkRef {
	c := chunkRef{fp: r.fingerprint(what), size: r.u32(what + " size"), pid: r.u(), eid: r.u(), extOff: r.u()}
	if r.err == nil && (c.size == 0 || c.pid == 0 || c.extOff > math.MaxUint64-uint64(c.size)) {
		r.failf("%s %v: invalid size %d or location %d/%d@%d", what, c.fp, c.size, c.pid, c.eid, c.extOff)
	}
	return c
}

// chunkIndex reads the chunk index and the drop watermarks into p (v4).
func (r *snapReader) chunkIndex(p *Partition) {
	n := r.count("chunk entries", chunker.FingerprintSize+7)
	var last chunkEntry
	for i := 0; i < n && r.err == nil; i++ {
		e := chunkEntry{c: r.chunk("chunk entry"), refs: r.u(), dead: r.flag("dead"), mtime: r.i()}
		if r.err != nil {
			break
		}
		if e.refs > MaxChunkRefs || (e.dead && e.refs != 0) || (i > 0 && !chunkEntryLess(last, e)) {
			r.failf("chunk entry %v: %d references, dead %v, or out of order", e.c.fp, e.refs, e.dead)
			break
		}
		last = e
		p.chunks.Load(e)
		p.cidx.add(e)
	}
	n = r.count("watermarks", 2)
	if n > MaxChunkSources {
		r.failf("%d watermarks, more than %d", n, MaxChunkSources)
	}
	var prev uint64
	for i := 0; i < n && r.err == nil; i++ {
		source, seq := r.u(), r.u()
		if r.err != nil {
			break
		}
		if source == 0 || seq == 0 || (i > 0 && source <= prev) {
			r.failf("watermark %d/%d invalid or out of order", source, seq)
			break
		}
		prev = source
		p.marks.Load(source, seq)
	}
}

// routing reads the routing state and validates it as SetRouting does.
func (r *snapReader) routing() *routing {
	switch has := r.u(); {
	case r.err != nil:
		return nil
	case has == 0:
		return nil
	case has != 1:
		r.failf("routing flag %d", has)
		return nil
	}
	m := &metapb.SetRouting{Self: r.u(), Sealed: r.flag("sealed"), Current: r.routeTable()}
	if r.flag("previous") {
		m.Previous = r.routeTable()
	}
	if r.err != nil {
		return nil
	}
	rt, err := newRouting(m)
	if err != nil {
		r.failf("routing: %v", err)
		return nil
	}
	// Canonical form: a different order would encode the same state twice.
	for _, t := range []struct {
		got  *metapb.Routing
		want *routeTable
	}{{m.Current, rt.current}, {m.Previous, rt.previous}} {
		if t.want == nil {
			continue
		}
		for i, e := range t.got.Exceptions {
			if string(e.Name) != t.want.exc[i].name {
				r.failf("routing v%d: exceptions out of order", t.want.version)
				return nil
			}
		}
	}
	return rt
}

func (r *snapReader) flag(what string) bool {
	switch v := r.u(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		r.failf("%s flag %d", what, v)
		return false
	}
}

func (r *snapReader) routeTable() *metapb.Routing {
	m := &metapb.Routing{Version: r.u()}
	n := r.count("slots", 1)
	if n > hybridindex.MaxSlots {
		r.failf("%d slots, more than %d", n, hybridindex.MaxSlots)
	}
	for i := 0; i < n && r.err == nil; i++ {
		m.SlotOwners = append(m.SlotOwners, r.u())
	}
	n = r.count("exceptions", 3)
	if n > hybridindex.MaxEntries {
		r.failf("%d exceptions, more than %d", n, hybridindex.MaxEntries)
	}
	for i := 0; i < n && r.err == nil; i++ {
		name := r.raw("exception name", MaxNameLen)
		kind := r.u32("exception kind")
		m.Exceptions = append(m.Exceptions, &metapb.RouteException{Name: append([]byte(nil), name...), Kind: kind, Mp: r.u()})
	}
	return m
}

func (r *snapReader) inode() *inode {
	in := &inode{ino: r.u()}
	typ := r.fileType("inode")
	perm := r.u32("mode")
	if perm&^permMask != 0 {
		r.failf("inode %d: mode %o has more than permission bits", in.ino, perm)
	}
	in.mode = packMode(typ, perm)
	in.uid, in.gid, in.nlink = r.u32("uid"), r.u32("gid"), r.u32("nlink")
	in.size = r.u()
	in.atime, in.mtime, in.ctime, in.btime = r.i(), r.i(), r.i(), r.i()
	rdev := r.u()
	var parent uint64
	if r.version >= 2 {
		parent = r.u()
	}
	target := string(r.raw("symlink target", MaxSymlinkLen))
	nExt := r.count("extents", 5)
	if nExt > MaxExtentsPerInode {
		r.failf("inode %d: %d extents, more than %d", in.ino, nExt, MaxExtentsPerInode)
	}
	var exts []extent
	for i := 0; i < nExt && r.err == nil; i++ {
		e := extent{fileOff: r.u(), pid: r.u(), eid: r.u(), extOff: r.u(), size: r.u()}
		switch {
		case r.err != nil:
		case e.size == 0 || e.fileOff > MaxFileSize-e.size || e.extOff > math.MaxUint64-e.size:
			r.failf("inode %d: invalid extent %d", in.ino, i)
		case i > 0 && exts[i-1].end() > e.fileOff:
			r.failf("inode %d: extent %d overlaps or is out of order", in.ino, i)
		case e.end() > in.size:
			r.failf("inode %d: extent %d ends beyond size %d", in.ino, i, in.size)
		}
		exts = append(exts, e)
	}
	nX := r.count("xattrs", 2)
	var xs []xattr
	total := 0
	for i := 0; i < nX && r.err == nil; i++ {
		name := string(r.raw("xattr name", MaxXattrNameLen))
		value := r.raw("xattr value", MaxXattrValueLen)
		if r.err != nil {
			break
		}
		if e, msg := checkXattrName(name); e != OK {
			r.failf("inode %d: %s", in.ino, msg)
		} else if i > 0 && xs[i-1].name >= name {
			r.failf("inode %d: xattr %s out of order", in.ino, quote(name))
		}
		total += len(name) + len(value)
		xs = append(xs, xattr{name: name, value: append([]byte{}, value...)})
	}
	if total > MaxXattrBytesPerInode {
		r.failf("inode %d: %d bytes of xattrs, more than %d", in.ino, total, MaxXattrBytesPerInode)
	}
	var cdc *cdcLayout
	if r.version >= 4 {
		cdc = r.cdcLayout(in)
	}
	if r.err != nil {
		return nil
	}
	isSymlink := typ == metapb.FileType_FILE_TYPE_SYMLINK
	isDevice := typ == metapb.FileType_FILE_TYPE_CHAR_DEVICE || typ == metapb.FileType_FILE_TYPE_BLOCK_DEVICE
	switch {
	case isSymlink != (target != ""):
		r.failf("inode %d: a %v with a %d-byte target", in.ino, typ, len(target))
	case rdev != 0 && !isDevice:
		r.failf("inode %d: a %v with rdev", in.ino, typ)
	case parent != 0 && typ != metapb.FileType_FILE_TYPE_DIRECTORY:
		r.failf("inode %d: a %v with a parent pointer", in.ino, typ)
	case len(exts) > 0 && typ != metapb.FileType_FILE_TYPE_REGULAR:
		r.failf("inode %d: a %v with extents", in.ino, typ)
	case in.size > MaxFileSize:
		r.failf("inode %d: size %d", in.ino, in.size)
	case cdc != nil && typ != metapb.FileType_FILE_TYPE_REGULAR:
		r.failf("inode %d: a %v with the chunked layout", in.ino, typ)
	case cdc != nil && len(exts) > 0:
		r.failf("inode %d: extents and the chunked layout", in.ino)
	}
	if r.err != nil {
		return nil
	}
	if len(exts) > 0 {
		in.ext0 = exts[0]
	}
	x := &inodeExtra{rdev: rdev, parent: parent, target: target, xattrs: xs, cdc: cdc}
	if len(exts) > 1 {
		x.exts = exts[1:]
	}
	in.setExtra(x)
	return in
}

// cdcLayout reads an inode's layout field (v4) and, for a chunked file, its
// chunk list, which must have no chunk starting at or past the size (what
// SpliceChunks and truncates maintain).
func (r *snapReader) cdcLayout(in *inode) *cdcLayout {
	switch layout := r.u(); {
	case r.err != nil:
		return nil
	case layout == uint64(metapb.FileLayout_FILE_LAYOUT_EXTENT):
		return nil
	case layout != uint64(metapb.FileLayout_FILE_LAYOUT_CDC):
		r.failf("inode %d: unknown layout %d", in.ino, layout)
		return nil
	}
	l := &cdcLayout{gen: r.u()}
	n := r.count("chunks", chunker.FingerprintSize+4)
	if n > MaxChunksPerInode {
		r.failf("inode %d: %d chunks, more than %d", in.ino, n, MaxChunksPerInode)
	}
	var off uint64
	for i := 0; i < n && r.err == nil; i++ {
		c := r.chunk("chunk")
		if r.err == nil && off >= in.size {
			r.failf("inode %d: chunk %d starts at %d, not below size %d", in.ino, i, off, in.size)
		}
		off += uint64(c.size)
		l.chunks = append(l.chunks, c)
	}
	return l
}
