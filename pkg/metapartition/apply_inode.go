package metapartition

import (
	"bytes"
	"math"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Inode ops: CreateInode, Setattr (truncate included), Link, TouchDir,
// Evict, SetXattr, RemoveXattr and AppendExtents.

func (t *txn) createInode(m *metapb.CreateInode) (*metapb.OpResult, *opError) {
	typ := m.GetType()
	if !validType(typ) {
		return nil, fail(metapb.EINVAL, "invalid file type %d", typ)
	}
	target := m.GetTarget()
	if typ == metapb.FileType_FILE_TYPE_SYMLINK {
		switch {
		case len(target) == 0:
			return nil, fail(metapb.ENOENT, "empty symlink target") // as symlink(2)
		case len(target) > MaxSymlinkLen:
			return nil, fail(metapb.ENAMETOOLONG, "symlink target of %d bytes exceeds %d", len(target), MaxSymlinkLen)
		case bytes.IndexByte(target, 0) >= 0:
			return nil, fail(metapb.EINVAL, "symlink target contains NUL")
		}
	} else if len(target) != 0 {
		return nil, fail(metapb.EINVAL, "target given for a %v", typ)
	}
	rdev := m.GetRdev()
	if rdev != 0 && typ != metapb.FileType_FILE_TYPE_CHAR_DEVICE && typ != metapb.FileType_FILE_TYPE_BLOCK_DEVICE {
		return nil, fail(metapb.EINVAL, "rdev given for a %v", typ)
	}
	switch layout := m.GetLayout(); layout {
	case metapb.FileLayout_FILE_LAYOUT_EXTENT:
	case metapb.FileLayout_FILE_LAYOUT_CDC:
		if typ != metapb.FileType_FILE_TYPE_REGULAR {
			return nil, fail(metapb.EINVAL, "chunked layout given for a %v", typ)
		}
	default:
		return nil, fail(metapb.EINVAL, "unknown file layout %d", layout)
	}
	if t.maxIno == math.MaxUint64 || (t.end != 0 && t.maxIno >= t.end) {
		return nil, fail(metapb.ENOSPC, "inode range [%d, %d] is exhausted", t.p.start, t.end)
	}
	ino := t.maxIno + 1
	if want := m.GetWantIno(); want != 0 && want != ino {
		// The wanted number is taken (or not next): the caller's inode, such as
		// a volume's root, already exists.
		return nil, fail(metapb.EEXIST, "inode %d wanted, but the next free number is %d", want, ino)
	}
	in := &inode{
		ino: ino, atime: t.now, mtime: t.now, ctime: t.now, btime: t.now,
		mode: packMode(typ, m.GetMode()), uid: m.GetUid(), gid: m.GetGid(), nlink: 1,
	}
	switch typ {
	case metapb.FileType_FILE_TYPE_DIRECTORY:
		in.nlink = 2 // "." and its name in the parent
	case metapb.FileType_FILE_TYPE_SYMLINK:
		in.size = uint64(len(target)) // st_size of a symlink is its target's length
	}
	in.parent = m.GetParent()
	if rdev != 0 || len(target) != 0 {
		in.x = &inodeExtra{rdev: rdev, target: string(target)}
	}
	if m.GetLayout() == metapb.FileLayout_FILE_LAYOUT_CDC {
		if in.x == nil {
			in.x = &inodeExtra{}
		}
		in.x.cdc = &cdcLayout{}
	}
	t.maxIno = ino
	if t.created == 0 {
		t.created = ino
	}
	t.putInode(ino, in)
	return &metapb.OpResult{Inode: in.toProto(false)}, nil
}

const setattrAll = uint32(metapb.SetattrValid_SETATTR_MODE | metapb.SetattrValid_SETATTR_UID |
	metapb.SetattrValid_SETATTR_GID | metapb.SetattrValid_SETATTR_SIZE | metapb.SetattrValid_SETATTR_ATIME |
	metapb.SetattrValid_SETATTR_MTIME | metapb.SetattrValid_SETATTR_ATIME_NOW |
	metapb.SetattrValid_SETATTR_MTIME_NOW | metapb.SetattrValid_SETATTR_CTIME |
	metapb.SetattrValid_SETATTR_PARENT)

func has(valid uint32, bit metapb.SetattrValid) bool { return valid&uint32(bit) != 0 }

func (t *txn) setattr(m *metapb.Setattr) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	valid := m.GetValid()
	if valid&^setattrAll != 0 {
		return nil, fail(metapb.EINVAL, "unknown setattr bits %#x", valid&^setattrAll)
	}
	if valid == 0 {
		return &metapb.OpResult{Inode: in.toProto(false)}, nil
	}
	if m.GetRefuseDir() && in.typ() == metapb.FileType_FILE_TYPE_DIRECTORY {
		return nil, fail(metapb.EISDIR, "directory %d: mode and owner change under a namespace lock", ino)
	}
	if has(valid, metapb.SetattrValid_SETATTR_PARENT) {
		if m.GetParent() == 0 || m.GetParent() == ino {
			return nil, fail(metapb.EINVAL, "parent pointer %d for inode %d", m.GetParent(), ino)
		}
	}
	n := in.clone()
	if has(valid, metapb.SetattrValid_SETATTR_PARENT) {
		n.parent = m.GetParent()
	}
	if has(valid, metapb.SetattrValid_SETATTR_SIZE) {
		switch in.typ() {
		case metapb.FileType_FILE_TYPE_REGULAR:
		case metapb.FileType_FILE_TYPE_DIRECTORY:
			return nil, fail(metapb.EISDIR, "cannot truncate directory %d", ino)
		default:
			return nil, fail(metapb.EINVAL, "cannot truncate %v %d", in.typ(), ino)
		}
		size := m.GetSize()
		if size > MaxFileSize {
			return nil, fail(metapb.EFBIG, "size %d exceeds %d", size, uint64(MaxFileSize))
		}
		if l := in.cdc(); l != nil {
			// Chunks starting at or past size go; a straddling one stays
			// whole (its bytes past size are invisible), and a truncate up
			// reads zeros past the last chunk. A writer holding the old
			// generation must re-read the layout.
			keep, dropped := truncateChunks(l.chunks, size)
			if len(dropped) > 0 || size != in.size {
				t.dropChunks(ino, dropped)
				n.setCDC(&cdcLayout{gen: l.gen + 1, chunks: keep})
			}
		} else if lastEnd(in) > size {
			list, removed := truncateExtents(in.extents(), size)
			n.setExtents(list)
			t.free(ino, removed)
		}
		n.size = size
		n.mtime = t.now
	}
	if has(valid, metapb.SetattrValid_SETATTR_MODE) {
		// FUSE passes st_mode with the type bits; only permissions change.
		n.mode = packMode(in.typ(), m.GetMode())
	}
	if has(valid, metapb.SetattrValid_SETATTR_UID) {
		n.uid = m.GetUid()
	}
	if has(valid, metapb.SetattrValid_SETATTR_GID) {
		n.gid = m.GetGid()
	}
	// FUSE sets ATIME together with ATIME_NOW for UTIME_NOW: NOW wins.
	if has(valid, metapb.SetattrValid_SETATTR_ATIME_NOW) {
		n.atime = t.now
	} else if has(valid, metapb.SetattrValid_SETATTR_ATIME) {
		n.atime = m.GetAtimeNs()
	}
	if has(valid, metapb.SetattrValid_SETATTR_MTIME_NOW) {
		n.mtime = t.now
	} else if has(valid, metapb.SetattrValid_SETATTR_MTIME) {
		n.mtime = m.GetMtimeNs()
	}
	n.ctime = t.ctimeOf(ino) // every attribute change is a status change
	if has(valid, metapb.SetattrValid_SETATTR_CTIME) {
		n.ctime = t.ctimeAtLeast(ino, m.GetCtimeNs())
	}
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false), Pre: in.stamp()}, nil
}

// lastEnd returns the end of in's last extent, 0 if it has none.
func lastEnd(in *inode) uint64 {
	if in.x != nil && len(in.x.exts) > 0 {
		return in.x.exts[len(in.x.exts)-1].end()
	}
	if in.ext0.size != 0 {
		return in.ext0.end()
	}
	return 0
}

func addLinks(nlink uint32, delta int32) (uint32, bool) {
	n := int64(nlink) + int64(delta)
	if n < 0 || n > math.MaxUint32 {
		return 0, false
	}
	return uint32(n), true
}

func (t *txn) link(m *metapb.Link) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	nl, ok := addLinks(in.nlink, m.GetDelta())
	if !ok {
		return nil, fail(metapb.EINVAL, "nlink %d%+d is out of range", in.nlink, m.GetDelta())
	}
	n := in.clone()
	n.nlink = nl
	n.ctime = t.ctimeOf(ino)
	if nl == 0 && m.GetEvictAtZero() {
		t.evictInode(ino, n)
		return &metapb.OpResult{Inode: n.toProto(false), Evicted: true}, nil
	}
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false)}, nil
}

func (t *txn) touchDir(m *metapb.TouchDir) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	if in.typ() != metapb.FileType_FILE_TYPE_DIRECTORY {
		return nil, fail(metapb.ENOTDIR, "inode %d is a %v", ino, in.typ())
	}
	k := opKey{ino: ino, op: m.GetOpId()}
	if k.op != 0 && t.seen(k) {
		return &metapb.OpResult{Inode: in.toProto(false)}, nil // a retry: done already
	}
	nl, ok := addLinks(in.nlink, m.GetNlinkDelta())
	if !ok {
		return nil, fail(metapb.EINVAL, "nlink %d%+d is out of range", in.nlink, m.GetNlinkDelta())
	}
	n := in.clone()
	n.nlink = nl
	n.mtime, n.ctime = t.now, t.ctimeOf(ino)
	t.putInode(ino, n)
	if k.op != 0 {
		t.touched = append(t.touched, k)
	}
	return &metapb.OpResult{Inode: n.toProto(false)}, nil
}

func (t *txn) evict(m *metapb.Evict) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	if in.nlink != 0 {
		return nil, fail(metapb.EBUSY, "inode %d still has %d links", ino, in.nlink)
	}
	t.evictInode(ino, in)
	return &metapb.OpResult{Inode: in.toProto(false)}, nil
}

// evictInode deletes inode ino (in) and frees its data: its extents go to
// the free list, its chunks lose their references.
func (t *txn) evictInode(ino uint64, in *inode) {
	t.free(ino, in.extents())
	if l := in.cdc(); l != nil {
		t.dropChunks(ino, l.chunks)
	}
	t.putInode(ino, nil)
}

func (t *txn) setXattr(m *metapb.SetXattr) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	name, value, flags := m.GetName(), m.GetValue(), m.GetFlags()
	if e, msg := checkXattrName(name); e != metapb.OK {
		return nil, fail(e, "%s", msg)
	}
	if len(value) > MaxXattrValueLen {
		return nil, fail(metapb.E2BIG, "xattr value of %d bytes exceeds %d", len(value), MaxXattrValueLen)
	}
	if flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace {
		return nil, fail(metapb.EINVAL, "invalid xattr flags %#x", flags)
	}
	xs := in.xattrs()
	i, exists := xattrIndex(xs, name)
	if exists && flags&XattrCreate != 0 {
		return nil, fail(metapb.EEXIST, "xattr %s exists on inode %d", quote(name), ino)
	}
	if !exists && flags&XattrReplace != 0 {
		return nil, fail(metapb.ENODATA, "no xattr %s on inode %d", quote(name), ino)
	}
	total := xattrBytes(xs) + len(name) + len(value)
	if exists {
		total -= len(name) + len(xs[i].value)
	}
	if total > MaxXattrBytesPerInode {
		return nil, fail(metapb.ENOSPC, "xattrs of inode %d would take %d bytes, more than %d", ino, total, MaxXattrBytesPerInode)
	}
	nx := make([]xattr, 0, len(xs)+1)
	nx = append(nx, xs[:i]...)
	nx = append(nx, xattr{name: name, value: append([]byte{}, value...)})
	if exists {
		i++
	}
	nx = append(nx, xs[i:]...)
	n := in.clone()
	x := n.extra()
	x.xattrs = nx
	n.setExtra(x)
	n.ctime = t.ctimeOf(ino)
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false)}, nil
}

func (t *txn) removeXattr(m *metapb.RemoveXattr) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	name := m.GetName()
	if e, msg := checkXattrName(name); e != metapb.OK {
		return nil, fail(e, "%s", msg)
	}
	xs := in.xattrs()
	i, exists := xattrIndex(xs, name)
	if !exists {
		return nil, fail(metapb.ENODATA, "no xattr %s on inode %d", quote(name), ino)
	}
	var nx []xattr
	if len(xs) > 1 {
		nx = make([]xattr, 0, len(xs)-1)
		nx = append(nx, xs[:i]...)
		nx = append(nx, xs[i+1:]...)
	}
	n := in.clone()
	x := n.extra()
	x.xattrs = nx
	n.setExtra(x)
	n.ctime = t.ctimeOf(ino)
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false)}, nil
}

func (t *txn) appendExtents(m *metapb.AppendExtents) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	switch in.typ() {
	case metapb.FileType_FILE_TYPE_REGULAR:
	case metapb.FileType_FILE_TYPE_DIRECTORY:
		return nil, fail(metapb.EISDIR, "inode %d is a directory", ino)
	default:
		return nil, fail(metapb.EINVAL, "inode %d is a %v, which has no data", ino, in.typ())
	}
	if in.cdc() != nil {
		return nil, fail(metapb.EINVAL, "inode %d has the chunked layout; its data changes by splice_chunks", ino)
	}
	keys := m.GetExtents()
	if len(keys) > MaxExtentsPerOp {
		return nil, fail(metapb.E2BIG, "%d extent keys in one op, more than %d", len(keys), MaxExtentsPerOp)
	}
	size := m.GetSize()
	if size > MaxFileSize {
		return nil, fail(metapb.EFBIG, "size %d exceeds %d", size, uint64(MaxFileSize))
	}
	added := make([]extent, len(keys))
	for i, k := range keys {
		e := extent{fileOff: k.GetFileOffset(), pid: k.GetPartitionId(), eid: k.GetExtentId(), extOff: k.GetExtentOffset(), size: k.GetSize()}
		switch {
		case e.size == 0:
			return nil, fail(metapb.EINVAL, "extent key %d is empty", i)
		case e.fileOff > MaxFileSize-e.size:
			return nil, fail(metapb.EFBIG, "extent key %d ends beyond %d", i, uint64(MaxFileSize))
		case e.extOff > math.MaxUint64-e.size:
			return nil, fail(metapb.EINVAL, "extent key %d overflows its extent", i)
		}
		added[i] = e
		// No extent beyond size: a later truncate up must read zeros, not
		// the stale bytes of a key left past the end.
		size = max(size, e.end())
	}
	add, removed := resolve(added)
	list, cut := overlay(in.extents(), add)
	removed = append(removed, cut...)
	list = coalesce(list)
	if len(list) > MaxExtentsPerInode {
		return nil, fail(metapb.EFBIG, "inode %d would have %d extents, more than %d", ino, len(list), MaxExtentsPerInode)
	}
	if len(removed) > 0 {
		// What the write keeps referencing is not garbage; see unreferenced.
		idx := newPhysIndex(add)
		var garbage []extent
		for _, piece := range removed {
			garbage = append(garbage, idx.unreferenced(piece)...)
		}
		t.free(ino, unionPhys(garbage))
	}
	n := in.clone()
	n.setExtents(list)
	n.size = max(in.size, size)
	n.mtime, n.ctime = t.now, t.ctimeOf(ino)
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false), Pre: in.stamp()}, nil
}
