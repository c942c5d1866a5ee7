package metapartition

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// model is a reference implementation of the state machine's namespace,
// attribute, chunked-layout and chunk-index semantics, written
// independently with maps and an undo journal for atomicity. It leaves out
// extent maps (it tracks only size) and the free list; TestAppendExtents,
// TestTruncate and the chunk tests cover those.
type model struct {
	version  int // bumped by every committed Txn
	maxIno   uint64
	inodes   map[uint64]*mInode
	dentries map[mKey]mDentry
	fences   map[uint64]uint64
	touched  []opKey // oldest first, at most TouchHistory
	chunks   map[chunker.Fingerprint]mChunk
	marks    map[uint64]uint64 // drop watermarks by source
}

type mInode struct {
	typ                 metapb.FileType
	perm, uid, gid      uint32
	nlink               uint32
	size                uint64
	atime, mtime, ctime int64
	xattrs              map[string]string
	cdc                 bool
	gen                 uint64
	layout              []mChunkRef // a chunked file's chunks, never written in place
}

type mChunkRef struct {
	fp   chunker.Fingerprint
	size uint32
}

// mChunk is an index entry.
type mChunk struct {
	pid, eid, off uint64
	size          uint32
	refs          uint64
	dead          bool
	mtime         int64
}

type mKey struct {
	parent uint64
	name   string
}

type mDentry struct {
	ino uint64
	typ metapb.FileType
}

func newModel() *model {
	return &model{inodes: map[uint64]*mInode{}, dentries: map[mKey]mDentry{}, fences: map[uint64]uint64{},
		chunks: map[chunker.Fingerprint]mChunk{}, marks: map[uint64]uint64{}}
}

func mName(name string) metapb.Errno {
	switch {
	case len(name) > 255:
		return metapb.ENAMETOOLONG
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return metapb.EINVAL
	}
	return metapb.OK
}

// apply runs one Txn, journaling the old value of everything it changes,
// and rolls the journal back if an op fails.
func (m *model) apply(now int64, ops []*metapb.Op) (metapb.Errno, int) {
	c := m
	var undo []func()
	saveIno := func(ino uint64) {
		old, ok := m.inodes[ino]
		var cp mInode
		if ok {
			cp = *old
			cp.xattrs = maps.Clone(old.xattrs)
		}
		undo = append(undo, func() {
			if ok {
				m.inodes[ino] = &cp
			} else {
				delete(m.inodes, ino)
			}
		})
	}
	saveDentry := func(k mKey) {
		old, ok := m.dentries[k]
		undo = append(undo, func() {
			if ok {
				m.dentries[k] = old
			} else {
				delete(m.dentries, k)
			}
		})
	}
	saveFence := func(parent uint64) {
		old, ok := m.fences[parent]
		undo = append(undo, func() {
			if ok {
				m.fences[parent] = old
			} else {
				delete(m.fences, parent)
			}
		})
	}
	saveChunk := func(fp chunker.Fingerprint) {
		old, ok := m.chunks[fp]
		undo = append(undo, func() {
			if ok {
				m.chunks[fp] = old
			} else {
				delete(m.chunks, fp)
			}
		})
	}
	saveMark := func(src uint64) {
		old, ok := m.marks[src]
		undo = append(undo, func() {
			if ok {
				m.marks[src] = old
			} else {
				delete(m.marks, src)
			}
		})
	}
	// fingerprint: 33 bytes, algorithm byte not 0.
	fingerprint := func(b []byte) (chunker.Fingerprint, bool) {
		var fp chunker.Fingerprint
		if len(b) != 33 || b[0] == 0 {
			return fp, false
		}
		copy(fp[:], b)
		return fp, true
	}
	oldMax, oldTouched := m.maxIno, m.touched
	undo = append(undo, func() { m.maxIno, m.touched = oldMax, oldTouched })
	var created uint64
	ref := func(ino uint64) (uint64, metapb.Errno) {
		if ino != 0 {
			return ino, metapb.OK
		}
		if created == 0 {
			return 0, metapb.EINVAL
		}
		return created, metapb.OK
	}
	// floor is, per inode this Txn changes, the least ctime it may give
	// it: just past the ctime before the Txn (now for one it created).
	floor := map[*mInode]int64{}
	ct := func(in *mInode) int64 { return max(now, floor[in]) }
	// local resolves an inode field and finds the inode: ENOENT if absent.
	local := func(raw uint64) (uint64, *mInode, metapb.Errno) {
		ino, e := ref(raw)
		if e != metapb.OK {
			return 0, nil, e
		}
		in := c.inodes[ino]
		if in == nil {
			return 0, nil, metapb.ENOENT
		}
		saveIno(ino)
		if _, ok := floor[in]; !ok {
			floor[in] = in.ctime + 1
		}
		return ino, in, metapb.OK
	}
	target := func(ino uint64, typ metapb.FileType) metapb.Errno {
		in := c.inodes[ino]
		switch {
		case in == nil:
			return metapb.ENOENT // the model's range is open: every inode is local
		case in.typ != typ:
			return metapb.EINVAL
		case in.nlink == 0:
			return metapb.ENOENT
		}
		return metapb.OK
	}
	for i, op := range ops {
		e := func() metapb.Errno {
			switch o := op.Op.(type) {
			case *metapb.Op_CreateInode:
				x := o.CreateInode
				if x.Layout > metapb.FileLayout_FILE_LAYOUT_CDC || (x.Layout == metapb.FileLayout_FILE_LAYOUT_CDC && x.Type != reg) {
					return metapb.EINVAL
				}
				c.maxIno++
				in := &mInode{typ: x.Type, perm: x.Mode & 0o7777, uid: x.Uid, gid: x.Gid, nlink: 1, atime: now, mtime: now, ctime: now}
				floor[in] = now
				if x.Type == dir {
					in.nlink = 2
				}
				if x.Type == lnk {
					in.size = uint64(len(x.Target))
				}
				in.cdc = x.Layout == metapb.FileLayout_FILE_LAYOUT_CDC
				saveIno(c.maxIno)
				c.inodes[c.maxIno] = in
				if created == 0 {
					created = c.maxIno
				}
			case *metapb.Op_CreateDentry:
				x := o.CreateDentry
				parent, e := ref(x.Parent)
				if e != metapb.OK {
					return e
				}
				if e := mName(string(x.Name)); e != metapb.OK {
					return e
				}
				ino, e := ref(x.Ino)
				if e != metapb.OK {
					return e
				}
				if ino == parent {
					return metapb.EINVAL
				}
				if c.fences[parent] != 0 {
					return metapb.ENOENT
				}
				if pin := c.inodes[parent]; pin == nil || pin.nlink == 0 {
					return metapb.ENOENT
				} else if pin.typ != dir {
					return metapb.ENOTDIR
				}
				if _, ok := c.dentries[mKey{parent, string(x.Name)}]; ok {
					return metapb.EEXIST
				}
				if e := target(ino, x.Type); e != metapb.OK {
					return e
				}
				saveDentry(mKey{parent, string(x.Name)})
				c.dentries[mKey{parent, string(x.Name)}] = mDentry{ino, x.Type}
			case *metapb.Op_DeleteDentry:
				x := o.DeleteDentry
				parent, e := ref(x.Parent)
				if e != metapb.OK {
					return e
				}
				if e := mName(string(x.Name)); e != metapb.OK {
					return e
				}
				d, ok := c.dentries[mKey{parent, string(x.Name)}]
				switch {
				case !ok:
					return metapb.ENOENT
				case x.ExpectIno != 0 && d.ino != x.ExpectIno:
					return metapb.ESTALE
				case x.ExpectType == dir && d.typ != dir:
					return metapb.ENOTDIR
				case x.ExpectType != 0 && x.ExpectType != dir && d.typ == dir:
					return metapb.EISDIR
				}
				saveDentry(mKey{parent, string(x.Name)})
				delete(c.dentries, mKey{parent, string(x.Name)})
			case *metapb.Op_ReplaceDentry:
				x := o.ReplaceDentry
				parent, e := ref(x.Parent)
				if e != metapb.OK {
					return e
				}
				if e := mName(string(x.Name)); e != metapb.OK {
					return e
				}
				ino, e := ref(x.Ino)
				if e != metapb.OK {
					return e
				}
				if ino == parent {
					return metapb.EINVAL
				}
				d, ok := c.dentries[mKey{parent, string(x.Name)}]
				switch {
				case !ok:
					return metapb.ENOENT
				case x.Type == dir && d.typ != dir:
					return metapb.ENOTDIR
				case x.Type != dir && d.typ == dir:
					return metapb.EISDIR
				}
				if e := target(ino, x.Type); e != metapb.OK {
					return e
				}
				saveDentry(mKey{parent, string(x.Name)})
				c.dentries[mKey{parent, string(x.Name)}] = mDentry{ino, x.Type}
			case *metapb.Op_Setattr:
				x := o.Setattr
				_, in, e := local(x.Ino)
				if e != metapb.OK {
					return e
				}
				if x.Valid&uint32(metapb.SetattrValid_SETATTR_SIZE) != 0 {
					if in.typ == dir {
						return metapb.EISDIR
					}
					if in.typ != reg {
						return metapb.EINVAL
					}
					if in.cdc {
						var off uint64
						keep := 0
						for keep < len(in.layout) && off < x.Size {
							off += uint64(in.layout[keep].size)
							keep++
						}
						if keep < len(in.layout) || x.Size != in.size {
							in.layout = slices.Clone(in.layout[:keep])
							in.gen++
						}
					}
					in.size, in.mtime = x.Size, now
				}
				if x.Valid&uint32(metapb.SetattrValid_SETATTR_MODE) != 0 {
					in.perm = x.Mode & 0o7777
				}
				if x.Valid&uint32(metapb.SetattrValid_SETATTR_UID) != 0 {
					in.uid = x.Uid
				}
				if x.Valid&uint32(metapb.SetattrValid_SETATTR_MTIME) != 0 {
					in.mtime = x.MtimeNs
				}
				if x.Valid != 0 {
					in.ctime = ct(in)
				}
			case *metapb.Op_Link:
				x := o.Link
				_, in, e := local(x.Ino)
				if e != metapb.OK {
					return e
				}
				n := int64(in.nlink) + int64(x.Delta)
				if n < 0 {
					return metapb.EINVAL
				}
				in.nlink, in.ctime = uint32(n), ct(in)
			case *metapb.Op_TouchDir:
				x := o.TouchDir
				ino, in, e := local(x.Ino)
				if e != metapb.OK {
					return e
				}
				if in.typ != dir {
					return metapb.ENOTDIR
				}
				k := opKey{ino, x.OpId}
				if x.OpId != 0 && slices.Contains(c.touched, k) {
					return metapb.OK
				}
				n := int64(in.nlink) + int64(x.NlinkDelta)
				if n < 0 {
					return metapb.EINVAL
				}
				in.nlink, in.mtime, in.ctime = uint32(n), now, ct(in)
				if x.OpId != 0 {
					c.touched = append(slices.Clip(c.touched), k) // never write a shared array
					if len(c.touched) > TouchHistory {
						c.touched = c.touched[1:]
					}
				}
			case *metapb.Op_Evict:
				ino, in, e := local(o.Evict.Ino)
				if e != metapb.OK {
					return e
				}
				if in.nlink != 0 {
					return metapb.EBUSY
				}
				delete(c.inodes, ino)
			case *metapb.Op_SetXattr:
				x := o.SetXattr
				_, in, e := local(x.Ino)
				if e != metapb.OK {
					return e
				}
				_, exists := in.xattrs[x.Name]
				if exists && x.Flags == XattrCreate {
					return metapb.EEXIST
				}
				if !exists && x.Flags == XattrReplace {
					return metapb.ENODATA
				}
				if in.xattrs == nil {
					in.xattrs = map[string]string{}
				}
				in.xattrs[x.Name], in.ctime = string(x.Value), ct(in)
			case *metapb.Op_RemoveXattr:
				x := o.RemoveXattr
				_, in, e := local(x.Ino)
				if e != metapb.OK {
					return e
				}
				if _, ok := in.xattrs[x.Name]; !ok {
					return metapb.ENODATA
				}
				delete(in.xattrs, x.Name)
				in.ctime = ct(in)
			case *metapb.Op_AppendExtents:
				x := o.AppendExtents
				_, in, e := local(x.Ino)
				if e != metapb.OK {
					return e
				}
				if in.typ == dir {
					return metapb.EISDIR
				}
				if in.typ != reg || in.cdc {
					return metapb.EINVAL
				}
				in.size = max(in.size, x.Size)
				for _, k := range x.Extents {
					in.size = max(in.size, k.FileOffset+k.Size)
				}
				in.mtime, in.ctime = now, ct(in)
			case *metapb.Op_Fence:
				x := o.Fence
				parent, e := ref(x.Parent)
				if e != metapb.OK {
					return e
				}
				switch cur := c.fences[parent]; {
				case cur == x.Token:
				case cur != 0 && x.Takeover && TakesOver(x.Token, cur):
					saveFence(parent)
					c.fences[parent] = x.Token
				case cur != 0:
					return metapb.EBUSY
				default:
					saveFence(parent)
					c.fences[parent] = x.Token
				}
			case *metapb.Op_Unfence:
				x := o.Unfence
				parent, e := ref(x.Parent)
				if e != metapb.OK {
					return e
				}
				switch cur := c.fences[parent]; {
				case cur == 0:
				case cur != x.Token:
					return metapb.EINVAL
				default:
					saveFence(parent)
					delete(c.fences, parent)
				}
			case *metapb.Op_SpliceChunks:
				x := o.SpliceChunks
				_, in, e := local(x.Ino)
				if e != metapb.OK {
					return e
				}
				switch {
				case !in.cdc:
					return metapb.EINVAL
				case x.BaseGen != in.gen:
					return metapb.ESTALE
				case x.Start > x.End || int(x.End) > len(in.layout):
					return metapb.EINVAL
				}
				var add []mChunkRef
				for _, ch := range x.Chunks {
					fp, ok := fingerprint(ch.Fingerprint)
					if !ok || ch.Size == 0 || ch.PartitionId == 0 {
						return metapb.EINVAL
					}
					add = append(add, mChunkRef{fp, ch.Size})
				}
				layout := slices.Concat(in.layout[:x.Start], add, in.layout[x.End:])
				in.size = 0
				for _, r := range layout {
					in.size += uint64(r.size)
				}
				in.layout, in.gen, in.mtime, in.ctime = layout, in.gen+1, now, ct(in)
				if x.MtimeNs != 0 {
					in.mtime = x.MtimeNs
				}
			case *metapb.Op_ChunkRefs:
				x := o.ChunkRefs
				type item struct {
					fp  chunker.Fingerprint
					ch  *metapb.Chunk
					ref *metapb.ChunkRef
				}
				var items []item
				for _, r := range x.Items {
					fp, ok := fingerprint(r.Chunk.GetFingerprint())
					switch {
					case !ok, r.Delta == 0:
						return metapb.EINVAL
					case r.DropSeq != 0 && (r.Delta > 0 || x.SourcePartition == 0):
						return metapb.EINVAL
					case r.Delta > 0 && r.Chunk.PartitionId != 0 && r.Chunk.Size == 0:
						return metapb.EINVAL
					}
					items = append(items, item{fp, r.Chunk, r})
				}
				for _, it := range items {
					ent, ok := c.chunks[it.fp]
					live := ok && !ent.dead
					d := it.ref.Delta
					if live && d > 0 && it.ch.Size != 0 && it.ch.Size != ent.size {
						return metapb.EINVAL
					}
					if it.ref.DropSeq != 0 {
						if it.ref.DropSeq <= c.marks[x.SourcePartition] {
							continue
						}
						saveMark(x.SourcePartition)
						c.marks[x.SourcePartition] = it.ref.DropSeq
					}
					switch {
					case d < 0:
						if live && ent.refs > 0 {
							saveChunk(it.fp)
							ent.refs -= min(ent.refs, uint64(-d))
							ent.mtime = now
							c.chunks[it.fp] = ent
						}
					case live:
						saveChunk(it.fp)
						ent.refs += uint64(d)
						ent.mtime = now
						c.chunks[it.fp] = ent
					case it.ch.PartitionId != 0:
						saveChunk(it.fp)
						c.chunks[it.fp] = mChunk{pid: it.ch.PartitionId, eid: it.ch.ExtentId, off: it.ch.ExtentOffset, size: it.ch.Size, refs: uint64(d), mtime: now}
					}
				}
			case *metapb.Op_ChunkCollect:
				x := o.ChunkCollect
				for _, b := range x.Fingerprints {
					if _, ok := fingerprint(b); !ok {
						return metapb.EINVAL
					}
				}
				for _, b := range x.Fingerprints {
					fp, _ := fingerprint(b)
					if ent, ok := c.chunks[fp]; ok && !ent.dead && ent.refs == 0 && ent.mtime <= x.OlderThanNs {
						saveChunk(fp)
						ent.dead, ent.mtime = true, now
						c.chunks[fp] = ent
					}
				}
			case *metapb.Op_ChunkForget:
				x := o.ChunkForget
				for _, ch := range x.Chunks {
					if _, ok := fingerprint(ch.Fingerprint); !ok {
						return metapb.EINVAL
					}
				}
				for _, ch := range x.Chunks {
					fp, _ := fingerprint(ch.Fingerprint)
					ent, ok := c.chunks[fp]
					if ok && ent.dead && ent.pid == ch.PartitionId && ent.eid == ch.ExtentId && ent.off == ch.ExtentOffset && ent.size == ch.Size {
						saveChunk(fp)
						delete(c.chunks, fp)
					}
				}
			case *metapb.Op_ChunkFix:
				x := o.ChunkFix
				for _, r := range x.Entries {
					if _, ok := fingerprint(r.Chunk.GetFingerprint()); !ok || r.Refs > math.MaxInt64 {
						return metapb.EINVAL
					}
				}
				for _, r := range x.Entries {
					fp, _ := fingerprint(r.Chunk.Fingerprint)
					if ent, ok := c.chunks[fp]; ok && !ent.dead && ent.mtime == r.MtimeNs && ent.refs != r.Refs {
						saveChunk(fp)
						ent.refs, ent.mtime = r.Refs, now
						c.chunks[fp] = ent
					}
				}
			default:
				panic(fmt.Sprintf("model: op %T not modelled", op.Op))
			}
			return metapb.OK
		}()
		if e != metapb.OK {
			for j := len(undo) - 1; j >= 0; j-- {
				undo[j]()
			}
			return e, i
		}
	}
	m.version++
	return metapb.OK, 0
}

// gen makes random Txns that look like the service's: mostly meaningful
// operations on existing names, with a share of wrong ones.
type gen struct {
	rng   *rand.Rand
	m     *model
	opID  uint64
	names []string
	now   int64             // the time of the batch being generated
	seqs  map[uint64]uint64 // next drop seq per source

	// Sorted views of the model, rebuilt when its version changes.
	version  int
	inodes   []uint64
	dirs     []uint64
	dentries []mKey
}

func (g *gen) refresh() {
	if g.inodes != nil && g.version == g.m.version {
		return
	}
	g.version = g.m.version
	g.inodes = slices.Sorted(maps.Keys(g.m.inodes))
	g.dirs = g.dirs[:0]
	for _, ino := range g.inodes {
		if g.m.inodes[ino].typ == dir {
			g.dirs = append(g.dirs, ino)
		}
	}
	g.dentries = slices.SortedFunc(maps.Keys(g.m.dentries), func(a, b mKey) int {
		if a.parent != b.parent {
			return cmp.Compare(a.parent, b.parent)
		}
		return strings.Compare(a.name, b.name)
	})
}

func newGen(seed uint64, m *model) *gen {
	return &gen{rng: rand.New(rand.NewPCG(seed, 0x5eed)), m: m, seqs: map[uint64]uint64{},
		names: []string{"a", "b", "c", "Makefile", "x.txt", "dir", "long-" + strings.Repeat("n", 40)}}
}

func (g *gen) name() string {
	if g.rng.IntN(40) == 0 {
		return []string{"", ".", "..", "a/b", "nul\x00", strings.Repeat("L", 256)}[g.rng.IntN(6)]
	}
	return g.names[g.rng.IntN(len(g.names))]
}

// pick returns a random element of keys, or a random small number when
// keys is empty or by chance (to exercise missing inodes).
func (g *gen) pick(keys []uint64) uint64 {
	if len(keys) == 0 || g.rng.IntN(20) == 0 {
		return uint64(g.rng.IntN(int(g.m.maxIno) + 3))
	}
	return keys[g.rng.IntN(len(keys))]
}

// ino picks an inode other than the root: a second name for the root, or
// its eviction, would end the run's namespace early.
func (g *gen) ino() uint64 {
	g.refresh()
	inodes := g.inodes
	if len(inodes) > 0 && inodes[0] == 1 {
		inodes = inodes[1:]
	}
	if ino := g.pick(inodes); ino != 1 {
		return ino
	}
	return 2
}
func (g *gen) dir() uint64 { g.refresh(); return g.pick(g.dirs) }

// dentry returns an existing (parent, name) or a random one.
func (g *gen) dentry() (mKey, mDentry) {
	g.refresh()
	if len(g.dentries) == 0 || g.rng.IntN(10) == 0 {
		return mKey{g.dir(), g.name()}, mDentry{}
	}
	k := g.dentries[g.rng.IntN(len(g.dentries))]
	return k, g.m.dentries[k]
}

func (g *gen) types() metapb.FileType {
	return []metapb.FileType{reg, reg, reg, dir, lnk, fifo}[g.rng.IntN(6)]
}

func (g *gen) txn() []*metapb.Op {
	g.opID++
	switch g.rng.IntN(20) {
	case 0, 1, 2: // create
		typ := g.types()
		create := createInode(typ, uint32(g.rng.IntN(0o10000)))
		if typ == lnk {
			create = createSymlink(strings.Repeat("t", 1+g.rng.IntN(20)))
		}
		parent := g.dir()
		ops := []*metapb.Op{create, createDentry(parent, g.name(), 0, typ)}
		if typ == dir {
			ops = append(ops, touchDir(parent, 1, g.opID))
		}
		return ops
	case 3: // unlink
		k, d := g.dentry()
		return []*metapb.Op{deleteDentry(k.parent, k.name, 0, reg), link(d.ino, -1)}
	case 4: // rmdir
		k, d := g.dentry()
		return []*metapb.Op{deleteDentry(k.parent, k.name, d.ino, dir), link(d.ino, -2), evict(d.ino), touchDir(k.parent, -1, g.opID)}
	case 5: // hard link
		ino := g.ino()
		typ := reg
		if in := g.m.inodes[ino]; in != nil && g.rng.IntN(4) != 0 {
			typ = in.typ
		}
		return []*metapb.Op{link(ino, 1), createDentry(g.dir(), g.name(), ino, typ)}
	case 6: // rename over
		k, d := g.dentry()
		ino := g.ino()
		typ := d.typ
		if in := g.m.inodes[ino]; in != nil {
			typ = in.typ
		}
		if typ == 0 {
			typ = reg
		}
		return []*metapb.Op{replaceDentry(k.parent, k.name, ino, typ, 0)}
	case 7: // setattr
		valid := uint32(g.rng.IntN(64)) & uint32(metapb.SetattrValid_SETATTR_MODE|metapb.SetattrValid_SETATTR_UID|
			metapb.SetattrValid_SETATTR_SIZE|metapb.SetattrValid_SETATTR_MTIME)
		return []*metapb.Op{setattr(&metapb.Setattr{Ino: g.ino(), Valid: valid,
			Mode: uint32(g.rng.IntN(0o10000)), Uid: uint32(g.rng.IntN(3)), Size: uint64(g.rng.IntN(1000)), MtimeNs: int64(g.rng.IntN(1000))})}
	case 8: // xattrs
		ino := g.ino()
		name := []string{"user.a", "user.b", "trusted.c"}[g.rng.IntN(3)]
		if g.rng.IntN(3) == 0 {
			return []*metapb.Op{removeXattr(ino, name)}
		}
		return []*metapb.Op{setXattr(ino, name, fmt.Sprint(g.rng.IntN(100)), uint32(g.rng.IntN(3)))}
	case 9: // write
		off := uint64(g.rng.IntN(1000))
		return []*metapb.Op{appendExtents(g.ino(), uint64(g.rng.IntN(2000)), ek(off, uint64(g.rng.IntN(5)), uint64(g.rng.IntN(100)), uint64(1+g.rng.IntN(300))))}
	case 10: // evict (sweeper)
		return []*metapb.Op{evict(g.ino())}
	case 11: // fence / unfence
		parent, token := g.dir(), uint64(1+g.rng.IntN(2))
		if g.rng.IntN(2) == 0 {
			return []*metapb.Op{fence(parent, token)}
		}
		return []*metapb.Op{unfence(parent, token)}
	case 12: // touch a directory (retries reuse op ids)
		id := g.opID
		if g.rng.IntN(3) == 0 && id > 10 {
			id -= uint64(g.rng.IntN(10))
		}
		return []*metapb.Op{touchDir(g.dir(), int32(g.rng.IntN(3))-1, id)}
	case 14: // create a chunked file (sometimes of a type that cannot be)
		typ := reg
		if g.rng.IntN(10) == 0 {
			typ = dir
		}
		return []*metapb.Op{{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: typ, Mode: 0o644, Layout: metapb.FileLayout_FILE_LAYOUT_CDC}}},
			createDentry(g.dir(), g.name(), 0, typ)}
	case 15: // splice, mostly of a chunked file
		ino := g.ino()
		if cdcs := g.cdcInodes(); len(cdcs) > 0 && g.rng.IntN(10) != 0 {
			ino = cdcs[g.rng.IntN(len(cdcs))]
		}
		var gen uint64
		n := 0
		if in := g.m.inodes[ino]; in != nil {
			gen, n = in.gen, len(in.layout)
			if g.rng.IntN(8) == 0 {
				gen++
			}
		}
		start := g.rng.IntN(n + 1)
		end := start + g.rng.IntN(n-start+1)
		if g.rng.IntN(15) == 0 {
			end = n + 1
		}
		var add []*metapb.Chunk
		for range g.rng.IntN(4) {
			add = append(add, g.chunk(true))
		}
		return []*metapb.Op{splice(ino, gen, uint32(start), uint32(end), int64(g.rng.IntN(2)*5), add...)}
	case 16, 17: // chunk refs: lookups, registrations, decrements, drops
		var items []*metapb.ChunkRef
		src := uint64(1 + g.rng.IntN(2))
		for range 1 + g.rng.IntN(4) {
			switch g.rng.IntN(5) {
			case 0:
				items = append(items, ref(bare(g.chunk(false)), int64(1+g.rng.IntN(3)), 0))
			case 1:
				items = append(items, ref(g.chunk(true), int64(1+g.rng.IntN(2)), 0))
			case 2:
				items = append(items, ref(g.chunk(false), -int64(1+g.rng.IntN(3)), 0))
			default:
				seq := g.seqs[src] + 1
				if g.rng.IntN(4) == 0 && seq > 3 {
					seq -= uint64(1 + g.rng.IntN(3)) // a retry
				} else {
					g.seqs[src] = seq
				}
				items = append(items, ref(g.chunk(false), -1, seq))
			}
		}
		if g.rng.IntN(30) == 0 {
			items = append(items, ref(g.chunk(false), 0, 0))
		}
		return []*metapb.Op{chunkRefs(src, items...)}
	case 18: // collect, forget
		if g.rng.IntN(2) == 0 {
			var chunks []*metapb.Chunk
			for range 1 + g.rng.IntN(3) {
				chunks = append(chunks, g.chunk(false))
			}
			return []*metapb.Op{chunkCollect(g.now-int64(g.rng.IntN(30)), chunks...)}
		}
		var chunks []*metapb.Chunk
		for _, fp := range g.entries() {
			if e := g.m.chunks[fp]; e.dead && g.rng.IntN(2) == 0 {
				off := e.off
				if g.rng.IntN(4) == 0 {
					off++
				}
				chunks = append(chunks, &metapb.Chunk{Fingerprint: fp[:], Size: e.size, PartitionId: e.pid, ExtentId: e.eid, ExtentOffset: off})
			}
		}
		return []*metapb.Op{chunkForget(chunks...)}
	case 19: // fix
		var recs []*metapb.ChunkRecord
		for _, fp := range g.entries() {
			if g.rng.IntN(3) == 0 {
				e := g.m.chunks[fp]
				mt := e.mtime
				if g.rng.IntN(4) == 0 {
					mt--
				}
				recs = append(recs, &metapb.ChunkRecord{Chunk: &metapb.Chunk{Fingerprint: fp[:]}, Refs: uint64(g.rng.IntN(3)), MtimeNs: mt})
			}
		}
		return []*metapb.Op{chunkFix(recs...)}
	default: // create a file and write it in one txn
		return []*metapb.Op{createInode(reg, 0o644), createDentry(g.dir(), g.name(), 0, reg),
			appendExtents(0, 0, ek(0, uint64(g.rng.IntN(5)), 0, uint64(1+g.rng.IntN(100))))}
	}
}

// chunk returns one of 8 chunks, each always of the same size, at a random
// location (withLoc) or without one; rarely a size-0 one.
func (g *gen) chunk(withLoc bool) *metapb.Chunk {
	n := byte(1 + g.rng.IntN(8))
	size := uint32(n) * 3
	if g.rng.IntN(40) == 0 {
		size = 0
	}
	c := chunkAt(n, size, uint64(g.rng.IntN(4))*100)
	if !withLoc {
		c.PartitionId, c.ExtentId, c.ExtentOffset = 0, 0, 0
	}
	return c
}

// cdcInodes lists the model's chunked files, sorted.
func (g *gen) cdcInodes() []uint64 {
	g.refresh()
	var out []uint64
	for _, ino := range g.inodes {
		if g.m.inodes[ino].cdc {
			out = append(out, ino)
		}
	}
	return out
}

// entries lists the model's index fingerprints, sorted.
func (g *gen) entries() []chunker.Fingerprint {
	return slices.SortedFunc(maps.Keys(g.m.chunks), func(a, b chunker.Fingerprint) int { return strings.Compare(string(a[:]), string(b[:])) })
}

// checkModel compares every attribute the model tracks with p's answers.
func checkModel(t *testing.T, step int, m *model, p *Partition) {
	t.Helper()
	if p.MaxIno() != m.maxIno {
		t.Fatalf("step %d: MaxIno %d, model %d", step, p.MaxIno(), m.maxIno)
	}
	if s := p.Stats(0); s.Inodes != len(m.inodes) || s.Dentries != len(m.dentries) || s.Fences != len(m.fences) {
		t.Fatalf("step %d: stats %+v, model %d inodes %d dentries %d fences", step, s, len(m.inodes), len(m.dentries), len(m.fences))
	}
	var orphans []uint64
	for ino, mi := range m.inodes {
		in, e := p.GetInode(ino)
		if e != metapb.OK {
			t.Fatalf("step %d: GetInode(%d): %v", step, ino, e)
		}
		got := mInode{typ: in.Type, perm: in.Mode, uid: in.Uid, gid: in.Gid, nlink: in.Nlink, size: in.Size,
			atime: in.AtimeNs, mtime: in.MtimeNs, ctime: in.CtimeNs}
		want := *mi
		want.xattrs = nil
		got.cdc, got.gen = in.Layout == metapb.FileLayout_FILE_LAYOUT_CDC, in.LayoutGen
		for _, ch := range in.Chunks {
			fp, _ := parseFingerprint(ch.Fingerprint)
			got.layout = append(got.layout, mChunkRef{fp, ch.Size})
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: inode %d\n got %+v\nwant %+v", step, ino, got, want)
		}
		gx := map[string]string{}
		for k, v := range in.Xattrs {
			gx[k] = string(v)
		}
		if !maps.Equal(gx, mi.xattrs) && !(len(gx) == 0 && len(mi.xattrs) == 0) {
			t.Fatalf("step %d: inode %d xattrs %v, model %v", step, ino, gx, mi.xattrs)
		}
		if mi.nlink == 0 {
			orphans = append(orphans, ino)
		}
		if mi.typ == dir {
			var want []string
			for k := range m.dentries {
				if k.parent == ino {
					want = append(want, k.name)
				}
			}
			slices.Sort(want)
			var got []string
			for _, d := range p.ReadDir(ino, "", 1000) {
				got = append(got, string(d.Name))
				if md := m.dentries[mKey{ino, string(d.Name)}]; md.ino != d.Ino || md.typ != d.Type {
					t.Fatalf("step %d: dentry %d/%s -> %d %v, model %+v", step, ino, d.Name, d.Ino, d.Type, md)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: readdir %d = %q, model %q", step, ino, got, want)
			}
		}
	}
	for k, md := range m.dentries {
		d, in, e := p.Lookup(k.parent, k.name)
		if e != metapb.OK || d.Ino != md.ino || (in == nil) != (m.inodes[md.ino] == nil) {
			t.Fatalf("step %d: Lookup(%d, %q) = %v %v %v, model %+v", step, k.parent, k.name, d, in, e, md)
		}
	}
	slices.Sort(orphans)
	if got := p.Orphans(); !slices.Equal(got, orphans) {
		t.Fatalf("step %d: orphans %v, model %v", step, got, orphans)
	}
	recs, _ := p.ScanChunks(chunker.Fingerprint{}, 1<<20)
	if len(recs) != len(m.chunks) {
		t.Fatalf("step %d: %d chunk entries, model %d", step, len(recs), len(m.chunks))
	}
	for _, r := range recs {
		fp, _ := parseFingerprint(r.Chunk.Fingerprint)
		got := mChunk{pid: r.Chunk.PartitionId, eid: r.Chunk.ExtentId, off: r.Chunk.ExtentOffset, size: r.Chunk.Size, refs: r.Refs, dead: r.Dead, mtime: r.MtimeNs}
		if want, ok := m.chunks[fp]; !ok || got != want {
			t.Fatalf("step %d: chunk %v: %+v, model %+v", step, fp, got, want)
		}
	}
	for src, seq := range m.marks {
		if got := p.ChunkWatermark(src); got != seq {
			t.Fatalf("step %d: watermark of %d: %d, model %d", step, src, got, seq)
		}
	}
	checkDerived(t, p)
}

// TestModel drives random operation sequences through the partition and
// through the reference model and compares every result and, periodically,
// the whole observable state. Halfway, a second partition is restored from
// a snapshot of the first; from then on both get the same batches and must
// answer identically and snapshot to identical bytes.
func TestModel(t *testing.T) {
	steps, seeds := 5000, 8
	if testing.Short() {
		steps, seeds = 500, 2
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			m := newModel()
			p := newRoot(t)
			m.apply(1, []*metapb.Op{createInode(dir, 0o755)})
			g := newGen(seed, m)
			var q *Partition
			errnos := map[metapb.Errno]int{}
			for step := range steps {
				now := int64(10 + step)
				b := &metapb.Batch{NowNs: now}
				g.now = now
				var ops [][]*metapb.Op
				for range 1 + g.rng.IntN(4) {
					o := g.txn()
					ops = append(ops, o)
					b.Txns = append(b.Txns, tx(o...))
				}
				rs := applyBatch(t, p, uint64(step), b)
				if q != nil {
					rq := applyBatch(t, q, uint64(step), b)
					for i := range rs {
						if prototextOrNil(rs[i]) != prototextOrNil(rq[i]) {
							t.Fatalf("step %d txn %d: original %v, restored %v", step, i, rs[i], rq[i])
						}
					}
				}
				for i, o := range ops {
					e, at := m.apply(now, o)
					errnos[e]++
					if metapb.Errno(rs[i].Errno) != e || (e != metapb.OK && int(rs[i].FailedOp) != at) {
						t.Fatalf("step %d txn %d %v: got %v at op %d (%s), model %v at op %d",
							step, i, o, metapb.Errno(rs[i].Errno), rs[i].FailedOp, rs[i].Message, e, at)
					}
				}
				if step == steps/2 {
					q = restored(t, p)
				}
				if step%500 == 499 || step == steps-1 {
					checkModel(t, step, m, p)
				}
			}
			if queries(p) != queries(q) {
				t.Fatal("original and restored partitions answer differently")
			}
			if !sameBytes(snap(t, p), snap(t, q)) {
				t.Fatal("original and restored partitions snapshot differently")
			}
			s := p.Stats(3)
			t.Logf("%d inodes, %d dentries, %d orphans, %d free extents, top %v, chunks %+v; results %v", s.Inodes, s.Dentries, s.Orphans, s.FreeExtents, s.TopNames, p.ChunkStats(), errnos)
		})
	}
}
