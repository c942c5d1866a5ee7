package metapartition

import (
	"bytes"
	"fmt"
	"math"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// Apply implements multiraft.StateMachine: data is a marshalled
// metapb.Batch, and the result is a []*metapb.TxnResult with one result per
// Txn, in order. A payload that does not decode returns an error and changes
// nothing; the index is used only in that error. Apply never panics and is
// deterministic: the state and results depend only on the state before and
// on data (time comes from Batch.now_ns, never from the local clock).
func (p *Partition) Apply(index uint64, data []byte) (any, error) {
	b := new(metapb.Batch)
	if err := proto.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("metapartition: entry %d: decode batch of %d bytes: %w", index, len(data), err)
	}
	return p.ApplyBatch(b), nil
}

// ApplyBatch applies an already decoded batch; Apply is ApplyBatch after
// decoding. The Txns are applied in order, each atomically and independently:
// a Txn sees the effects of the Txns before it in the batch, and a failing
// Txn changes nothing and does not affect the others.
func (p *Partition) ApplyBatch(b *metapb.Batch) []*metapb.TxnResult {
	txns := b.GetTxns()
	out := make([]*metapb.TxnResult, len(txns))
	for i, m := range txns {
		out[i] = p.applyTxn(b.GetNowNs(), m)
	}
	return out
}

// opError is an op's failure: the errno for the caller and a message with
// the context a human needs to tell which input was wrong.
type opError struct {
	errno Errno
	msg   string
}

func fail(e Errno, format string, args ...any) *opError {
	return &opError{errno: e, msg: fmt.Sprintf(format, args...)}
}

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
	}
	if p != nil {
		t.maxIno, t.end = p.maxIno, p.end
	}
}

func (p *Partition) applyTxn(now int64, m *metapb.Txn) *metapb.TxnResult {
	ops := m.GetOps()
	if len(ops) > MaxOpsPerTxn {
		return &metapb.TxnResult{
			Errno:    int32(E2BIG),
			FailedOp: MaxOpsPerTxn,
			Message:  fmt.Sprintf("txn has %d ops, more than %d", len(ops), MaxOpsPerTxn),
		}
	}
	id := m.GetRequestId()
	if id != 0 {
		if res, ok := p.requests.get(id); ok {
			return res // a retry: answered, not applied again
		}
	}
	if e := m.GetNsEpoch(); m.GetNsGuard() && e != p.nsEpoch {
		return &metapb.TxnResult{
			Errno:   int32(ENSCHANGED),
			Message: fmt.Sprintf("resolved under namespace epoch %d, now %d", e, p.nsEpoch),
		}
	}
	t := &p.scratch
	t.reset(p, now)
	defer t.reset(nil, 0) // drop references to the batch and to old records
	results := make([]*metapb.OpResult, 0, len(ops))
	for i, op := range ops {
		r, err := t.apply(op)
		if err != nil {
			return &metapb.TxnResult{
				Errno:    int32(err.errno),
				FailedOp: int32(i),
				Message:  fmt.Sprintf("op %d (%s): %s", i, opName(op), err.msg),
			}
		}
		results = append(results, r)
	}
	t.commit()
	res := &metapb.TxnResult{Results: results}
	if id != 0 {
		p.requests.push(id, res)
	}
	return res
}

func opName(op *metapb.Op) string {
	switch op.GetOp().(type) {
	case *metapb.Op_CreateInode:
		return "create_inode"
	case *metapb.Op_CreateDentry:
		return "create_dentry"
	case *metapb.Op_DeleteDentry:
		return "delete_dentry"
	case *metapb.Op_ReplaceDentry:
		return "replace_dentry"
	case *metapb.Op_Setattr:
		return "setattr"
	case *metapb.Op_Link:
		return "link"
	case *metapb.Op_TouchDir:
		return "touch_dir"
	case *metapb.Op_Evict:
		return "evict"
	case *metapb.Op_SetXattr:
		return "set_xattr"
	case *metapb.Op_RemoveXattr:
		return "remove_xattr"
	case *metapb.Op_AppendExtents:
		return "append_extents"
	case *metapb.Op_Fence:
		return "fence"
	case *metapb.Op_Unfence:
		return "unfence"
	case *metapb.Op_SetRange:
		return "set_range"
	case *metapb.Op_AckFreed:
		return "ack_freed"
	case *metapb.Op_SetRouting:
		return "set_routing"
	case *metapb.Op_ImportDentries:
		return "import_dentries"
	case *metapb.Op_PurgeDentries:
		return "purge_dentries"
	case *metapb.Op_SpliceChunks:
		return "splice_chunks"
	case *metapb.Op_ChunkRefs:
		return "chunk_refs"
	case *metapb.Op_ChunkCollect:
		return "chunk_collect"
	case *metapb.Op_ChunkForget:
		return "chunk_forget"
	case *metapb.Op_ChunkFix:
		return "chunk_fix"
	}
	return "empty"
}

func (t *txn) apply(op *metapb.Op) (*metapb.OpResult, *opError) {
	switch o := op.GetOp().(type) {
	case *metapb.Op_CreateInode:
		return t.createInode(o.CreateInode)
	case *metapb.Op_CreateDentry:
		return t.createDentry(o.CreateDentry)
	case *metapb.Op_DeleteDentry:
		return t.deleteDentry(o.DeleteDentry)
	case *metapb.Op_ReplaceDentry:
		return t.replaceDentry(o.ReplaceDentry)
	case *metapb.Op_Setattr:
		return t.setattr(o.Setattr)
	case *metapb.Op_Link:
		return t.link(o.Link)
	case *metapb.Op_TouchDir:
		return t.touchDir(o.TouchDir)
	case *metapb.Op_Evict:
		return t.evict(o.Evict)
	case *metapb.Op_SetXattr:
		return t.setXattr(o.SetXattr)
	case *metapb.Op_RemoveXattr:
		return t.removeXattr(o.RemoveXattr)
	case *metapb.Op_AppendExtents:
		return t.appendExtents(o.AppendExtents)
	case *metapb.Op_Fence:
		return t.fence(o.Fence)
	case *metapb.Op_Unfence:
		return t.unfence(o.Unfence)
	case *metapb.Op_SetRange:
		return t.setRange(o.SetRange)
	case *metapb.Op_AckFreed:
		return t.ackFreed(o.AckFreed)
	case *metapb.Op_SetRouting:
		return t.setRouting(o.SetRouting)
	case *metapb.Op_ImportDentries:
		return t.importDentries(o.ImportDentries)
	case *metapb.Op_PurgeDentries:
		return t.purgeDentries(o.PurgeDentries)
	case *metapb.Op_SpliceChunks:
		return t.spliceChunks(o.SpliceChunks)
	case *metapb.Op_ChunkRefs:
		return t.chunkRefs(o.ChunkRefs)
	case *metapb.Op_ChunkCollect:
		return t.chunkCollect(o.ChunkCollect)
	case *metapb.Op_ChunkForget:
		return t.chunkForget(o.ChunkForget)
	case *metapb.Op_ChunkFix:
		return t.chunkFix(o.ChunkFix)
	}
	// An unset oneof, or an op added to the proto after this code.
	return nil, fail(EINVAL, "op has no known operation set")
}

// ---- Overlay access. ----

// ref resolves an inode-number field: 0 means the inode created by the
// Txn's first CreateInode.
func (t *txn) ref(field string, ino uint64) (uint64, *opError) {
	if ino != 0 {
		return ino, nil
	}
	if t.created == 0 {
		return 0, fail(EINVAL, "%s is 0 but no earlier op of the txn created an inode", field)
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
		return 0, nil, fail(ENOENT, "inode %d is not on this partition", ino)
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
	return t.p.touched.has(k)
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

// checkParent: if the parent's home is this partition, it must be a live
// directory. This closes, for the dentries that share the parent's
// partition, the window after an rmdir has unfenced and evicted the parent
// in which a late create could still add a name under it; for the other
// partitions the service checks the parent.
func (t *txn) checkParent(parent uint64) *opError {
	if !t.isLocal(parent) {
		return nil
	}
	in := t.inode(parent)
	switch {
	case in == nil || in.nlink == 0:
		return fail(ENOENT, "parent %d does not exist", parent)
	case in.typ() != metapb.FileType_FILE_TYPE_DIRECTORY:
		return fail(ENOTDIR, "parent %d is a %v", parent, in.typ())
	}
	return nil
}

// checkTarget verifies what this partition can know about the inode a new
// or replaced dentry points to. If the inode's home is here it must exist,
// have links (a name for an unlinked inode is how link(2) to a deleted file
// fails: ENOENT) and be of the dentry's type. A remote inode is the
// service's to check.
func (t *txn) checkTarget(ino uint64, typ metapb.FileType) *opError {
	in := t.inode(ino)
	if in == nil {
		if t.isLocal(ino) {
			return fail(ENOENT, "inode %d does not exist", ino)
		}
		return nil
	}
	if in.typ() != typ {
		return fail(EINVAL, "dentry type %v differs from inode %d's type %v", typ, ino, in.typ())
	}
	if in.nlink == 0 {
		return fail(ENOENT, "inode %d has no links", ino)
	}
	return nil
}

// commit writes the overlay into the partition and maintains the derived
// indexes. It cannot fail.
func (t *txn) commit() {
	p := t.p
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
		if c.present {
			if _, replaced := p.dentries.Set(c.d); !replaced {
				p.nameInc(c.d.name)
				p.mem += dentryBytes(c.d)
			}
		} else if _, deleted := p.dentries.Delete(c.d); deleted {
			p.nameDec(c.d.name)
			p.mem -= dentryBytes(c.d)
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
		p.touched.push(k)
	}
	p.maxIno, p.end = t.maxIno, t.end
}

// ---- Operations. Each validates everything before writing the overlay,
// so an op that fails has written nothing (the Txn is dropped anyway). ----

func (t *txn) createInode(m *metapb.CreateInode) (*metapb.OpResult, *opError) {
	typ := m.GetType()
	if !validType(typ) {
		return nil, fail(EINVAL, "invalid file type %d", typ)
	}
	target := m.GetTarget()
	if typ == metapb.FileType_FILE_TYPE_SYMLINK {
		switch {
		case len(target) == 0:
			return nil, fail(ENOENT, "empty symlink target") // as symlink(2)
		case len(target) > MaxSymlinkLen:
			return nil, fail(ENAMETOOLONG, "symlink target of %d bytes exceeds %d", len(target), MaxSymlinkLen)
		case bytes.IndexByte(target, 0) >= 0:
			return nil, fail(EINVAL, "symlink target contains NUL")
		}
	} else if len(target) != 0 {
		return nil, fail(EINVAL, "target given for a %v", typ)
	}
	parent := m.GetParent()
	if parent != 0 && typ != metapb.FileType_FILE_TYPE_DIRECTORY {
		return nil, fail(EINVAL, "parent pointer given for a %v", typ)
	}
	rdev := m.GetRdev()
	if rdev != 0 && typ != metapb.FileType_FILE_TYPE_CHAR_DEVICE && typ != metapb.FileType_FILE_TYPE_BLOCK_DEVICE {
		return nil, fail(EINVAL, "rdev given for a %v", typ)
	}
	switch layout := m.GetLayout(); layout {
	case metapb.FileLayout_FILE_LAYOUT_EXTENT:
	case metapb.FileLayout_FILE_LAYOUT_CDC:
		if typ != metapb.FileType_FILE_TYPE_REGULAR {
			return nil, fail(EINVAL, "chunked layout given for a %v", typ)
		}
	default:
		return nil, fail(EINVAL, "unknown file layout %d", layout)
	}
	if t.maxIno == math.MaxUint64 || (t.end != 0 && t.maxIno >= t.end) {
		return nil, fail(ENOSPC, "inode range [%d, %d] is exhausted", t.p.start, t.end)
	}
	ino := t.maxIno + 1
	if want := m.GetWantIno(); want != 0 && want != ino {
		// The wanted number is taken (or not next): the caller's inode, such as
		// a volume's root, already exists.
		return nil, fail(EEXIST, "inode %d wanted, but the next free number is %d", want, ino)
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
	if rdev != 0 || len(target) != 0 || parent != 0 {
		in.x = &inodeExtra{rdev: rdev, target: string(target), parent: parent}
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

// dentryArgs checks what CreateDentry and ReplaceDentry share: the parent and
// inode references (ino 0: the Txn's created inode), the name and the type.
func (t *txn) dentryArgs(rawParent uint64, rawName []byte, typ metapb.FileType, rawIno uint64) (parent uint64, name string, ino uint64, _ *opError) {
	parent, err := t.ref("parent", rawParent)
	if err != nil {
		return 0, "", 0, err
	}
	name = string(rawName)
	if e, msg := checkName(name); e != OK {
		return 0, "", 0, fail(e, "%s", msg)
	}
	if !validType(typ) {
		return 0, "", 0, fail(EINVAL, "invalid file type %d", typ)
	}
	if ino, err = t.ref("ino", rawIno); err != nil {
		return 0, "", 0, err
	}
	if ino == parent {
		return 0, "", 0, fail(EINVAL, "dentry %d/%s would point at its own parent", parent, quote(name))
	}
	return parent, name, ino, nil
}

func (t *txn) createDentry(m *metapb.CreateDentry) (*metapb.OpResult, *opError) {
	typ := m.GetType()
	parent, name, ino, err := t.dentryArgs(m.GetParent(), m.GetName(), typ, m.GetIno())
	if err != nil {
		return nil, err
	}
	if err := t.checkRoute(parent, name); err != nil {
		return nil, err
	}
	if f := t.fenceOf(parent); f != 0 && f&lockBit == 0 {
		return nil, fail(ENOENT, "parent %d is fenced (being removed)", parent)
	}
	if err := t.checkParent(parent); err != nil {
		return nil, err
	}
	if _, ok := t.dentry(parent, name); ok {
		return nil, fail(EEXIST, "%d/%s exists", parent, quote(name))
	}
	if err := t.checkTarget(ino, typ); err != nil {
		return nil, err
	}
	d := dentry{parent: parent, name: name, ino: ino, typ: typ}
	t.putDentry(d, true)
	return &metapb.OpResult{Dentry: d.toProto()}, nil
}

func (t *txn) deleteDentry(m *metapb.DeleteDentry) (*metapb.OpResult, *opError) {
	parent, err := t.ref("parent", m.GetParent())
	if err != nil {
		return nil, err
	}
	name := string(m.GetName())
	if e, msg := checkName(name); e != OK {
		return nil, fail(e, "%s", msg)
	}
	if err := t.checkRoute(parent, name); err != nil {
		return nil, err
	}
	d, ok := t.dentry(parent, name)
	if !ok {
		return nil, fail(ENOENT, "%d/%s does not exist", parent, quote(name))
	}
	if exp := m.GetExpectIno(); exp != 0 && d.ino != exp {
		return nil, fail(ESTALE, "%d/%s is inode %d, not %d", parent, quote(name), d.ino, exp)
	}
	if err := checkExpectType(m.GetExpectType(), d); err != nil {
		return nil, err
	}
	t.putDentry(d, false)
	return &metapb.OpResult{Dentry: d.toProto()}, nil
}

// checkExpectType: DIRECTORY asks for a directory (rmdir: ENOTDIR if not);
// any other type asks for a non-directory (unlink: EISDIR if it is one).
// Non-directory types are not told apart, because unlink(2) removes all of
// them alike and its caller does not know which one it is removing.
func checkExpectType(et metapb.FileType, d dentry) *opError {
	if et == metapb.FileType_FILE_TYPE_UNKNOWN {
		return nil
	}
	if !validType(et) {
		return fail(EINVAL, "invalid expect_type %d", et)
	}
	isDir := d.typ == metapb.FileType_FILE_TYPE_DIRECTORY
	if et == metapb.FileType_FILE_TYPE_DIRECTORY && !isDir {
		return fail(ENOTDIR, "%d/%s is a %v, not a directory", d.parent, quote(d.name), d.typ)
	}
	if et != metapb.FileType_FILE_TYPE_DIRECTORY && isDir {
		return fail(EISDIR, "%d/%s is a directory", d.parent, quote(d.name))
	}
	return nil
}

func (t *txn) replaceDentry(m *metapb.ReplaceDentry) (*metapb.OpResult, *opError) {
	typ := m.GetType()
	parent, name, ino, err := t.dentryArgs(m.GetParent(), m.GetName(), typ, m.GetIno())
	if err != nil {
		return nil, err
	}
	if err := t.checkRoute(parent, name); err != nil {
		return nil, err
	}
	old, ok := t.dentry(parent, name)
	if !ok {
		return nil, fail(ENOENT, "%d/%s does not exist", parent, quote(name))
	}
	if exp := m.GetExpectIno(); exp != 0 && old.ino != exp {
		return nil, fail(ESTALE, "%d/%s is inode %d, not %d", parent, quote(name), old.ino, exp)
	}
	// rename(2): a directory replaces only a directory, a non-directory only
	// a non-directory.
	newDir, oldDir := typ == metapb.FileType_FILE_TYPE_DIRECTORY, old.typ == metapb.FileType_FILE_TYPE_DIRECTORY
	if newDir && !oldDir {
		return nil, fail(ENOTDIR, "directory cannot replace %v %d/%s", old.typ, parent, quote(name))
	}
	if !newDir && oldDir {
		return nil, fail(EISDIR, "%v cannot replace directory %d/%s", typ, parent, quote(name))
	}
	if err := t.checkTarget(ino, typ); err != nil {
		return nil, err
	}
	t.putDentry(dentry{parent: parent, name: name, ino: ino, typ: typ}, true)
	return &metapb.OpResult{Dentry: old.toProto()}, nil
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
		return nil, fail(EINVAL, "unknown setattr bits %#x", valid&^setattrAll)
	}
	if valid == 0 {
		return &metapb.OpResult{Inode: in.toProto(false)}, nil
	}
	if m.GetRefuseDir() && in.typ() == metapb.FileType_FILE_TYPE_DIRECTORY {
		return nil, fail(EISDIR, "directory %d: mode and owner change under a namespace lock", ino)
	}
	if has(valid, metapb.SetattrValid_SETATTR_PARENT) {
		switch {
		case in.typ() != metapb.FileType_FILE_TYPE_DIRECTORY:
			return nil, fail(ENOTDIR, "parent pointer of %v %d", in.typ(), ino)
		case m.GetParent() == 0 || m.GetParent() == ino:
			return nil, fail(EINVAL, "parent pointer %d for directory %d", m.GetParent(), ino)
		}
	}
	n := in.clone()
	if has(valid, metapb.SetattrValid_SETATTR_PARENT) {
		x := n.extra()
		x.parent = m.GetParent()
		n.setExtra(x)
	}
	if has(valid, metapb.SetattrValid_SETATTR_SIZE) {
		switch in.typ() {
		case metapb.FileType_FILE_TYPE_REGULAR:
		case metapb.FileType_FILE_TYPE_DIRECTORY:
			return nil, fail(EISDIR, "cannot truncate directory %d", ino)
		default:
			return nil, fail(EINVAL, "cannot truncate %v %d", in.typ(), ino)
		}
		size := m.GetSize()
		if size > MaxFileSize {
			return nil, fail(EFBIG, "size %d exceeds %d", size, uint64(MaxFileSize))
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
	n.ctime = t.now // every attribute change is a status change
	if has(valid, metapb.SetattrValid_SETATTR_CTIME) {
		n.ctime = m.GetCtimeNs()
	}
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false)}, nil
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
		return nil, fail(EINVAL, "nlink %d%+d is out of range", in.nlink, m.GetDelta())
	}
	n := in.clone()
	n.nlink = nl
	n.ctime = t.now
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
		return nil, fail(ENOTDIR, "inode %d is a %v", ino, in.typ())
	}
	k := opKey{ino: ino, op: m.GetOpId()}
	if k.op != 0 && t.seen(k) {
		return &metapb.OpResult{Inode: in.toProto(false)}, nil // a retry: done already
	}
	nl, ok := addLinks(in.nlink, m.GetNlinkDelta())
	if !ok {
		return nil, fail(EINVAL, "nlink %d%+d is out of range", in.nlink, m.GetNlinkDelta())
	}
	n := in.clone()
	n.nlink = nl
	n.mtime, n.ctime = t.now, t.now
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
		return nil, fail(EBUSY, "inode %d still has %d links", ino, in.nlink)
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
	if e, msg := checkXattrName(name); e != OK {
		return nil, fail(e, "%s", msg)
	}
	if len(value) > MaxXattrValueLen {
		return nil, fail(E2BIG, "xattr value of %d bytes exceeds %d", len(value), MaxXattrValueLen)
	}
	if flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace {
		return nil, fail(EINVAL, "invalid xattr flags %#x", flags)
	}
	xs := in.xattrs()
	i, exists := xattrIndex(xs, name)
	if exists && flags&XattrCreate != 0 {
		return nil, fail(EEXIST, "xattr %s exists on inode %d", quote(name), ino)
	}
	if !exists && flags&XattrReplace != 0 {
		return nil, fail(ENODATA, "no xattr %s on inode %d", quote(name), ino)
	}
	total := xattrBytes(xs) + len(name) + len(value)
	if exists {
		total -= len(name) + len(xs[i].value)
	}
	if total > MaxXattrBytesPerInode {
		return nil, fail(ENOSPC, "xattrs of inode %d would take %d bytes, more than %d", ino, total, MaxXattrBytesPerInode)
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
	n.ctime = t.now
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false)}, nil
}

func (t *txn) removeXattr(m *metapb.RemoveXattr) (*metapb.OpResult, *opError) {
	ino, in, err := t.localInode("ino", m.GetIno())
	if err != nil {
		return nil, err
	}
	name := m.GetName()
	if e, msg := checkXattrName(name); e != OK {
		return nil, fail(e, "%s", msg)
	}
	xs := in.xattrs()
	i, exists := xattrIndex(xs, name)
	if !exists {
		return nil, fail(ENODATA, "no xattr %s on inode %d", quote(name), ino)
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
	n.ctime = t.now
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
		return nil, fail(EISDIR, "inode %d is a directory", ino)
	default:
		return nil, fail(EINVAL, "inode %d is a %v, which has no data", ino, in.typ())
	}
	if in.cdc() != nil {
		return nil, fail(EINVAL, "inode %d has the chunked layout; its data changes by splice_chunks", ino)
	}
	keys := m.GetExtents()
	if len(keys) > MaxExtentsPerOp {
		return nil, fail(E2BIG, "%d extent keys in one op, more than %d", len(keys), MaxExtentsPerOp)
	}
	size := m.GetSize()
	if size > MaxFileSize {
		return nil, fail(EFBIG, "size %d exceeds %d", size, uint64(MaxFileSize))
	}
	added := make([]extent, len(keys))
	for i, k := range keys {
		e := extent{fileOff: k.GetFileOffset(), pid: k.GetPartitionId(), eid: k.GetExtentId(), extOff: k.GetExtentOffset(), size: k.GetSize()}
		switch {
		case e.size == 0:
			return nil, fail(EINVAL, "extent key %d is empty", i)
		case e.fileOff > MaxFileSize-e.size:
			return nil, fail(EFBIG, "extent key %d ends beyond %d", i, uint64(MaxFileSize))
		case e.extOff > math.MaxUint64-e.size:
			return nil, fail(EINVAL, "extent key %d overflows its extent", i)
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
		return nil, fail(EFBIG, "inode %d would have %d extents, more than %d", ino, len(list), MaxExtentsPerInode)
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
	n.mtime, n.ctime = t.now, t.now
	t.putInode(ino, n)
	return &metapb.OpResult{Inode: n.toProto(false)}, nil
}

func (t *txn) fence(m *metapb.Fence) (*metapb.OpResult, *opError) {
	parent, err := t.ref("parent", m.GetParent())
	if err != nil {
		return nil, err
	}
	token := m.GetToken() &^ lockBit
	if token == 0 {
		return nil, fail(EINVAL, "fence token must be non-zero")
	}
	if m.GetLock() {
		token |= lockBit
	}
	res := &metapb.OpResult{}
	if !m.GetLock() {
		has := t.hasChildren(parent)
		res.HasChildren = &has
	}
	switch cur := t.fenceOf(parent); {
	case cur == token:
		return res, nil // a retry
	case cur != 0:
		return nil, fail(EBUSY, "parent %d is fenced with another token", parent)
	}
	if t.fenceCount() >= MaxFences {
		return nil, fail(EAGAIN, "%d fences are in place", MaxFences)
	}
	t.putFence(parent, token)
	return res, nil
}

// hasChildren reports whether the partition, with this Txn's changes,
// lists a name under parent (as Partition.HasChildren does).
func (t *txn) hasChildren(parent uint64) bool {
	for _, c := range t.dentries {
		if c.present && c.d.parent == parent && t.p.routing.listed(parent, c.d.name) {
			return true
		}
	}
	has := false
	t.p.dentries.Ascend(dentry{parent: parent}, func(d dentry) bool {
		if d.parent != parent {
			return false
		}
		if i := t.dentryChange(parent, d.name); i >= 0 && !t.dentries[i].present {
			return true // removed by this Txn
		}
		has = t.p.routing.listed(d.parent, d.name)
		return !has
	})
	return has
}

func (t *txn) unfence(m *metapb.Unfence) (*metapb.OpResult, *opError) {
	parent, err := t.ref("parent", m.GetParent())
	if err != nil {
		return nil, err
	}
	token := m.GetToken() &^ lockBit
	if token == 0 {
		return nil, fail(EINVAL, "fence token must be non-zero")
	}
	switch cur := t.fenceOf(parent); {
	case cur == 0:
		return &metapb.OpResult{}, nil // a retry, or never fenced here
	case cur&^lockBit != token:
		return nil, fail(EINVAL, "parent %d is fenced with another token", parent)
	}
	t.putFence(parent, 0)
	return &metapb.OpResult{}, nil
}

func (t *txn) setRange(m *metapb.SetRange) (*metapb.OpResult, *opError) {
	end := m.GetEnd()
	switch {
	case end == 0:
		return nil, fail(EINVAL, "set_range cannot reopen the inode range")
	case end < t.p.start:
		return nil, fail(EINVAL, "end %d is below the range start %d", end, t.p.start)
	case end < t.maxIno:
		return nil, fail(EINVAL, "end %d is below the highest allocated inode %d", end, t.maxIno)
	case t.end != 0 && end > t.end:
		return nil, fail(EINVAL, "end %d would extend the range ending at %d; set_range only cuts", end, t.end)
	}
	t.end = end
	return &metapb.OpResult{}, nil
}

func (t *txn) ackFreed(m *metapb.AckFreed) (*metapb.OpResult, *opError) {
	upto := m.GetUptoSeq()
	if next := t.nextSeq(); upto >= next {
		return nil, fail(EINVAL, "ack_freed up to %d, but the last free-list entry given out is %d", upto, int64(next)-1)
	}
	t.acked = true
	t.ackUpto = max(t.ackUpto, upto)
	return &metapb.OpResult{}, nil
}
