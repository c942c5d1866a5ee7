package metapartition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// Snapshot decoding: decodeSnapshot and the record decoders (inodes with
// their chunk layouts, chunk index, routing), each checking the invariants
// Apply maintains.

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
		if e, msg := checkName(d.name); e != metapb.OK {
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
		if k.op == 0 || p.touched.Has(k) {
			r.failf("touched op %d/%d invalid or repeated", k.ino, k.op)
			break
		}
		p.touched.Put(k, struct{}{})
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
	if r.version >= 6 {
		r.quotaUse(p)
	}
	if r.version >= 7 {
		r.pending(p)
	}
	if r.err == nil && r.off != len(r.b) {
		r.failf("%d bytes after the last record", len(r.b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
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

// quotaUse reads the quota counts into p (v6).
func (r *snapReader) quotaUse(p *Partition) {
	n := r.count("quota counts", 3)
	var prev uint64
	for i := 0; i < n && r.err == nil; i++ {
		id, u := r.u(), QuotaUse{Bytes: r.i(), Inodes: r.i()}
		if r.err != nil {
			break
		}
		if id == 0 || (i > 0 && id <= prev) || u == (QuotaUse{}) {
			r.failf("quota count %d invalid, empty or out of order", id)
			break
		}
		prev = id
		p.quota.Set(id, u)
	}
}

// pending reads the pending renames' records and attaches each to its
// dentry, which must exist.
func (r *snapReader) pending(p *Partition) {
	n := r.count("pending names", 6)
	for i := 0; i < n && r.err == nil; i++ {
		parent := r.u()
		name := string(r.raw("name", MaxNameLen))
		pend := &metapb.PendingRename{Id: r.u(), FromParent: r.u()}
		pend.FromName = r.raw("old name", MaxNameLen)
		pend.Since = r.i()
		if r.version >= 8 {
			if pend.ReplacedIno = r.u(); pend.ReplacedIno != 0 {
				pend.ReplacedType = r.fileType("replaced")
			} else if r.u() != 0 {
				r.failf("pending name %d/%s: a replaced type without an inode", parent, quote(name))
			}
		}
		if r.err != nil {
			break
		}
		d, ok := p.dentries.Get(dentry{parent: parent, name: name})
		if !ok || d.pend != nil || pend.Id == 0 || pend.FromParent == 0 {
			r.failf("pending name %d/%s invalid, repeated or without its dentry", parent, quote(name))
			break
		}
		if e, msg := checkName(string(pend.FromName)); e != metapb.OK {
			r.failf("pending name %d/%s: old name: %s", parent, quote(name), msg)
			break
		}
		p.mem -= dentryBytes(d)
		d.pend = pend
		p.dentries.Set(d)
		p.mem += dentryBytes(d)
		p.pending[dentryKey{parent, name}] = struct{}{}
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
	if r.version >= 2 {
		in.parent = r.u()
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
		if e, msg := checkXattrName(name); e != metapb.OK {
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
	case in.parent == in.ino:
		r.failf("inode %d: its own parent", in.ino)
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
	x := &inodeExtra{rdev: rdev, target: target, xattrs: xs, cdc: cdc}
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
