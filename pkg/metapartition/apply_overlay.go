package metapartition

import (
	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// The Txn overlay: the txn type and its change records, the reads and
// writes ops make through it (inodes, dentries, fences, TouchDir history,
// free list), and commit, which writes a successful Txn into the partition
// and maintains the derived indexes.

// txn is the overlay of one Txn: ops read through it and write into it, and
// nothing reaches the partition until every op has succeeded. That is the
// whole of atomicity: a failure drops the overlay, so a failed Txn leaves no
// trace, including of the inode counter and of times.
type txn struct {
	p       *Partition
	now     int64
	created uint64 // the first inode created by this Txn; what ino 0 means
	maxIno  uint64
	end     uint64

	// Changes, each key at most once, in the order first touched. Txns are
	// a handful of ops (bounded by MaxOpsPerTxn), so linear search beats maps.
	inodes   []inodeChange
	dentries []dentryChange
	fences   []fenceChange
	freed    []FreedExtent
	touched  []opKey

	fenceDelta int // fences added minus fences removed by the overlay

	acked   bool   // an AckFreed applies at commit
	ackUpto uint64 // free-list entries with Seq <= ackUpto go

	routing    *routing // a SetRouting's new state, applied at commit
	routingSet bool

	// dentryIdx indexes dentries by key once an op (ImportDentries,
	// PurgeDentries) makes the linear search too slow; nil until then.
	dentryIdx map[dentryKey]int

	// Chunk index changes, each fingerprint at most once, in the order
	// first touched, indexed by fingerprint (ChunkRefs ops carry thousands
	// of items); and drop watermark changes.
	chunkChanges []chunkChange
	chunkIdx     map[chunker.Fingerprint]int
	marks        []markChange

	quota []quotaCharge // quota count changes (quota.go)
}

type dentryKey struct {
	parent uint64
	name   string
}

// dentryIndexAt is how many dentry changes the overlay searches linearly.
const dentryIndexAt = 16

type inodeChange struct {
	ino uint64
	in  *inode // nil: evicted
}

type dentryChange struct {
	d       dentry
	present bool
}

type fenceChange struct {
	parent uint64
	token  uint64 // 0: unfenced
}

// ctimeOf is the ctime of a change to inode ino: the Txn's time, but
// always past the ctime the inode had before this Txn, so that a file's
// ctime grows with every Txn that changes it even when a new leader's
// clock is behind the old one's (all of one Txn's changes share one).
// Clients order the Versions of a file by it (client.Version.Before).
func (t *txn) ctimeOf(ino uint64) int64 { return t.ctimeAtLeast(ino, t.now) }

// ctimeAtLeast is c, or just past the ctime inode ino had before this Txn
// if that is later.
func (t *txn) ctimeAtLeast(ino uint64, c int64) int64 {
	if before := t.p.getInode(ino); before != nil {
		return max(c, before.ctime+1)
	}
	return c
}

func (t *txn) reset(p *Partition, now int64) {
	clear(t.inodes)
	clear(t.dentries)
	clear(t.dentryIdx)
	clear(t.chunkIdx)
	*t = txn{
		p: p, now: now,
		inodes:       t.inodes[:0],
		dentries:     t.dentries[:0],
		fences:       t.fences[:0],
		freed:        t.freed[:0],
		touched:      t.touched[:0],
		dentryIdx:    t.dentryIdx,
		chunkChanges: t.chunkChanges[:0],
		chunkIdx:     t.chunkIdx,
		marks:        t.marks[:0],
		quota:        t.quota[:0],
	}
	if p != nil {
		t.maxIno, t.end = p.maxIno, p.end
	}
}

// ---- Overlay access. ----

// ref resolves an inode-number field: 0 means the inode created by the
// Txn's first CreateInode.
func (t *txn) ref(field string, ino uint64) (uint64, *opError) {
	if ino != 0 {
		return ino, nil
	}
	if t.created == 0 {
		return 0, fail(metapb.EINVAL, "%s is 0 but no earlier op of the txn created an inode", field)
	}
	return t.created, nil
}

func (t *txn) isLocal(ino uint64) bool {
	return ino >= t.p.start && (t.end == 0 || ino <= t.end)
}

func (t *txn) inode(ino uint64) *inode {
	for i := range t.inodes {
		if t.inodes[i].ino == ino {
			return t.inodes[i].in
		}
	}
	return t.p.getInode(ino)
}

func (t *txn) putInode(ino uint64, in *inode) {
	for i := range t.inodes {
		if t.inodes[i].ino == ino {
			t.inodes[i].in = in
			return
		}
	}
	t.inodes = append(t.inodes, inodeChange{ino: ino, in: in})
}

// localInode resolves field and returns the inode, ENOENT if this partition
// does not hold it.
func (t *txn) localInode(field string, raw uint64) (uint64, *inode, *opError) {
	ino, err := t.ref(field, raw)
	if err != nil {
		return 0, nil, err
	}
	in := t.inode(ino)
	if in == nil {
		return 0, nil, fail(metapb.ENOENT, "inode %d is not on this partition", ino)
	}
	return ino, in, nil
}

// dentryChange returns the overlay's change of (parent, name), or -1.
func (t *txn) dentryChange(parent uint64, name string) int {
	if t.dentryIdx != nil && len(t.dentries) > dentryIndexAt {
		if i, ok := t.dentryIdx[dentryKey{parent, name}]; ok {
			return i
		}
		return -1
	}
	for i := range t.dentries {
		c := &t.dentries[i]
		if c.d.parent == parent && c.d.name == name {
			return i
		}
	}
	return -1
}

func (t *txn) dentry(parent uint64, name string) (dentry, bool) {
	if i := t.dentryChange(parent, name); i >= 0 {
		return t.dentries[i].d, t.dentries[i].present
	}
	return t.p.dentries.Get(dentry{parent: parent, name: name})
}

func (t *txn) putDentry(d dentry, present bool) {
	if i := t.dentryChange(d.parent, d.name); i >= 0 {
		t.dentries[i].d, t.dentries[i].present = d, present
		return
	}
	t.dentries = append(t.dentries, dentryChange{d: d, present: present})
	switch n := len(t.dentries); {
	case n == dentryIndexAt+1:
		if t.dentryIdx == nil {
			t.dentryIdx = make(map[dentryKey]int)
		}
		for i, c := range t.dentries {
			t.dentryIdx[dentryKey{c.d.parent, c.d.name}] = i
		}
	case n > dentryIndexAt+1:
		t.dentryIdx[dentryKey{d.parent, d.name}] = n - 1
	}
}

func (t *txn) fenceOf(parent uint64) uint64 {
	for _, c := range t.fences {
		if c.parent == parent {
			return c.token
		}
	}
	if f, ok := t.p.fences.Get(parent); ok && !f.expired(t.now) {
		return f.token
	}
	return 0
}

func (t *txn) putFence(parent, token uint64) {
	if was, is := t.fenceOf(parent) != 0, token != 0; was != is {
		if is {
			t.fenceDelta++
		} else {
			t.fenceDelta--
		}
	}
	for i := range t.fences {
		if t.fences[i].parent == parent {
			t.fences[i].token = token
			return
		}
	}
	t.fences = append(t.fences, fenceChange{parent: parent, token: token})
}

func (t *txn) fenceCount() int { return t.p.fences.Len() + t.fenceDelta }

func (t *txn) seen(k opKey) bool {
	for _, s := range t.touched {
		if s == k {
			return true
		}
	}
	return t.p.touched.Has(k)
}

// nextSeq is the Seq of the next free-list entry. Numbering starts at 1,
// never 0: a chunk drop's Seq travels as ChunkRef.drop_seq, where 0 means
// "not a drop" (no watermark, no dedup). A partition restored from a
// snapshot written before chunk drops existed may hold entries at Seq 0;
// they are extent ranges.
func (t *txn) nextSeq() uint64 { return max(t.p.freeSeq, 1) + uint64(len(t.freed)) }

// free queues extent ranges for the free list, numbered in order.
func (t *txn) free(ino uint64, pieces []extent) {
	for _, e := range pieces {
		t.freed = append(t.freed, FreedExtent{
			Seq: t.nextSeq(), Ino: ino,
			PartitionID: e.pid, ExtentID: e.eid, ExtentOffset: e.extOff, Size: e.size,
		})
	}
}

// commit writes the overlay into the partition and maintains the derived
// indexes. It cannot fail.
func (t *txn) commit() {
	p := t.p
	t.commitQuota()
	for _, c := range t.inodes {
		var old *inode
		if c.in == nil {
			p.probe.ino = c.ino
			old, _ = p.inodes.Delete(&p.probe)
		} else {
			old, _ = p.inodes.Set(c.in)
			p.mem += inodeBytes(c.in)
		}
		if old != nil {
			p.mem -= inodeBytes(old)
		}
		wasOrphan := old != nil && old.nlink == 0
		isOrphan := c.in != nil && c.in.nlink == 0
		if wasOrphan && !isOrphan {
			p.orphans.Delete(c.ino)
		} else if isOrphan && !wasOrphan {
			p.orphans.Insert(c.ino)
		}
	}
	for _, c := range t.dentries {
		key := dentryKey{c.d.parent, c.d.name}
		if c.present {
			if old, replaced := p.dentries.Set(c.d); !replaced {
				p.nameInc(c.d.name)
				p.mem += dentryBytes(c.d)
			} else {
				p.mem += dentryBytes(c.d) - dentryBytes(old)
			}
			if c.d.pend != nil {
				p.pending[key] = struct{}{}
			} else {
				delete(p.pending, key)
			}
		} else if old, deleted := p.dentries.Delete(c.d); deleted {
			p.nameDec(c.d.name)
			p.mem -= dentryBytes(old)
			delete(p.pending, key)
		}
	}
	if t.routingSet {
		p.routing = t.routing
	}
	for _, c := range t.fences {
		if c.token == 0 {
			p.fences.Delete(c.parent)
			continue
		}
		p.fences.Set(c.parent, fenceRec{token: c.token, at: t.now})
		// A new fence (or lock) changes what paths through the directory
		// may resolve to: path Txns resolved before it are refused
		// (ns_epoch), and the node's namespace replica forgets the entry.
		p.nsEpoch++
		if p.onFence != nil {
			p.onFence(c.parent)
		}
	}
	if len(t.fences) > 0 && p.fences.Len() > fencePruneAt {
		p.pruneFences(t.now)
	}
	for _, f := range t.freed {
		p.free.Set(f)
		if f.IsChunkDrop() {
			p.cidx.drops++
		}
	}
	if len(t.freed) > 0 {
		p.freeSeq = t.nextSeq()
	}
	if t.acked {
		var gone []FreedExtent
		p.free.Scan(func(f FreedExtent) bool {
			if f.Seq > t.ackUpto {
				return false
			}
			gone = append(gone, f)
			return true
		})
		for _, f := range gone {
			p.free.Delete(f)
			if f.IsChunkDrop() {
				p.cidx.drops--
			}
		}
	}
	t.commitChunks()
	for _, k := range t.touched {
		p.touched.Put(k, struct{}{})
	}
	p.maxIno, p.end = t.maxIno, t.end
}
