package metapartition

import (
	"bytes"
	"errors"
	"hash/crc32"

	"github.com/tidwall/btree"
)

// Snapshots: the encoding format, Frozen (the O(1) copy-on-write copy
// Clone takes) and the multiraft.StateMachine entry points Snapshot and
// Restore. Encoding is in snapshot_write.go, decoding in snapshot_read.go
// and snapshot_reader.go.

// Snapshot format, version 8. Earlier versions are still read: 1 without
// parent pointers, request ids and routing, 2 without routing, 3 without
// chunks, 4 without the namespace epoch, 5 without quotas, 6 without
// pending renames, 7 without what a pending rename replaced. All integers are unsigned varints except times
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
//	#quotas, quota*      id bytes(varint) inodes(varint), by id (v6)
//	#pending, pend*      parent len(name) name id fromParent len(fromName)
//	                     fromName since(zigzag) [replacedIno replacedType] (v8):
//	                     the pending renames' marks on their dentries, in
//	                     dentry order (v7)
//	crc32c of everything above, 4 bytes little-endian
const (
	snapMagic   = "CAIRNMP\n"
	snapVersion = 8
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
	quota    *btree.Map[uint64, QuotaUse]
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
		touched:  p.touched.Oldest(),
		requests: p.requests.ordered(),
		routing:  p.routing,
		chunks:   p.chunks.Copy(),
		marks:    p.marks.Copy(),
		nsEpoch:  p.nsEpoch,
		quota:    p.quota.Copy(),
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
	q.onFence, q.onApplied = p.onFence, p.onApplied
	*p = *q
	return nil
}
