package metapartition

// Memory estimate. Stats.MemoryBytes is what the records take by the sizes
// below, kept up to date by every commit (and rebuilt by Restore) for
// inodes and dentries, and computed from counts for the rest (the chunk
// index's records have a fixed size). It
// leaves out allocator size classes and B-tree node slack, so the process
// uses more (BenchmarkMemoryPerFile measures the real figure per file); the
// master compares partitions with it, for which a consistent estimate is
// enough.
const (
	// inodeRecordBytes: the inode struct and its B-tree slot (a pointer).
	inodeRecordBytes = 120 + 8
	// inodeExtraBytes: an inodeExtra (rdev, target, two slices and the
	// chunk layout pointer).
	inodeExtraBytes = 80
	// cdcLayoutBytes: a chunked file's layout header (generation, slice);
	// chunkRefBytes: one chunk of its list.
	cdcLayoutBytes = 32
	chunkRefBytes  = 64
	// extentBytes: one extent beyond the inline first one.
	extentBytes = 40
	// xattrBytesBase: one xattr's name and value headers, plus their bytes.
	xattrBytesBase = 40
	// dentryRecordBytes: the dentry struct stored in the tree, plus its
	// name's bytes and a 16-byte name-count slot.
	dentryRecordBytes = 48 + 16
	// pendingRecordBytes: a pending rename's record (metapb.PendingRename
	// and its protobuf bookkeeping), plus its old name's bytes.
	pendingRecordBytes = 96
	fenceBytes         = 16
	freedBytes         = 88      // FreedExtent with the chunk drop's fingerprint
	touchedBytes       = 16 + 24 // ring slot and set entry
	requestBytesBase   = 40      // ring slot and set entry, plus the result's bytes
	slotBytes          = 8
	exceptionBytes     = 48 // entry in the table and in the canonical list, plus the name
	// chunkEntryBytes: a chunk index record stored by value in its tree;
	// chunkZeroBytes and chunkDeadBytes: its slot in the candidate or dead
	// index; watermarkBytes: one source's drop watermark.
	chunkEntryBytes = 88
	chunkZeroBytes  = 48
	chunkDeadBytes  = 33
	watermarkBytes  = 16
)

func inodeBytes(in *inode) int64 {
	n := int64(inodeRecordBytes)
	if x := in.x; x != nil {
		n += inodeExtraBytes + int64(len(x.target)) + extentBytes*int64(len(x.exts))
		if x.cdc != nil {
			n += cdcLayoutBytes + chunkRefBytes*int64(len(x.cdc.chunks))
		}
		for _, a := range x.xattrs {
			n += xattrBytesBase + int64(len(a.name)+len(a.value))
		}
	}
	return n
}

func dentryBytes(d dentry) int64 {
	n := dentryRecordBytes + int64(len(d.name))
	if d.pend != nil {
		n += pendingRecordBytes + int64(len(d.pend.GetFromName()))
	}
	return n
}

func (rt *routeTable) bytes() int64 {
	if rt == nil {
		return 0
	}
	n := slotBytes * int64(len(rt.slots))
	for _, e := range rt.exc {
		n += exceptionBytes + 2*int64(len(e.name))
	}
	return n
}

// memoryBytes is the estimate described above.
func (p *Partition) memoryBytes() uint64 {
	n := p.mem
	n += fenceBytes * int64(p.fences.Len())
	n += freedBytes * int64(p.free.Len())
	n += touchedBytes * int64(p.touched.Len())
	n += requestBytesBase*int64(len(p.requests.live())) + int64(p.requests.bytes)
	if r := p.routing; r != nil {
		n += r.current.bytes() + r.previous.bytes()
	}
	n += chunkEntryBytes * int64(p.chunks.Len())
	n += chunkZeroBytes*int64(p.cidx.zero.Len()) + chunkDeadBytes*int64(p.cidx.dead.Len())
	n += watermarkBytes * int64(p.marks.Len())
	return uint64(max(n, 0))
}
