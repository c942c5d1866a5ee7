package metapartition

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// world builds the partition most errno cases start from:
//
//	1 /        directory, nlink 2
//	2 /f       regular file, xattr user.a=1, extent [0,100)
//	3 /d       directory
//	4 /s       symlink -> /f
func world(t testing.TB) *Partition {
	t.Helper()
	p := newRoot(t)
	mustRun(t, p, 2, createInode(reg, 0o644), createDentry(1, "f", 0, reg),
		setXattr(0, "user.a", "1", 0), appendExtents(0, 100, ek(0, 1, 0, 100)))
	mustRun(t, p, 3, createInode(dir, 0o755), createDentry(1, "d", 0, dir))
	mustRun(t, p, 4, createSymlink("/f"), createDentry(1, "s", 0, lnk))
	return p
}

// TestErrno applies one failing Txn per row to world (after the row's setup
// Txns) and checks the errno, the index of the failing op, and that the
// partition is byte-for-byte what it was before, derived indexes included.
// Each row runs twice: alone, and behind two ops that succeed (so atomicity
// is tested for every error path, not only for the first op of a Txn).
func TestErrno(t *testing.T) {
	big := strings.Repeat("x", 256)
	value64k := strings.Repeat("v", MaxXattrValueLen)
	fullXattrs := make([]*metapb.Op, 0, 16)
	for i := range 15 {
		fullXattrs = append(fullXattrs, setXattr(2, "user.k"+string(rune('a'+i)), value64k, 0))
	}
	manyExtents := func() [][]*metapb.Op {
		var setup [][]*metapb.Op
		for b := range MaxExtentsPerInode / MaxExtentsPerOp {
			keys := make([]*metapb.ExtentKey, MaxExtentsPerOp)
			if b == 0 {
				keys = keys[1:] // world's file has one extent already
			}
			for i := range keys {
				n := uint64(b*MaxExtentsPerOp + i + 1)
				keys[i] = ek(1000+2*n, 1000+n, 0, 1) // gaps: nothing coalesces
			}
			setup = append(setup, []*metapb.Op{appendExtents(2, 0, keys...)})
		}
		return setup
	}()
	manyFences := func() [][]*metapb.Op {
		var setup [][]*metapb.Op
		for b := range MaxFences / MaxOpsPerTxn {
			ops := make([]*metapb.Op, MaxOpsPerTxn)
			for i := range ops {
				ops[i] = fence(uint64(100_000+b*MaxOpsPerTxn+i), 1)
			}
			setup = append(setup, ops)
		}
		return setup
	}()
	tooManyOps := make([]*metapb.Op, MaxOpsPerTxn+1)
	for i := range tooManyOps {
		tooManyOps[i] = touchDir(1, 0, 0)
	}
	manyKeys := make([]*metapb.ExtentKey, MaxExtentsPerOp+1)
	for i := range manyKeys {
		manyKeys[i] = ek(uint64(i), 1, uint64(i), 1)
	}
	unlinked := [][]*metapb.Op{{deleteDentry(1, "f", 2, reg), link(2, -1)}}
	// Chunked file 5 (/c) with one chunk c1 (refs 1), at generation 1.
	c1 := chunkAt(1, 10, 0)
	cdc := [][]*metapb.Op{{createCDC(0o644), createDentry(1, "c", 0, reg), chunkRefs(0, ref(c1, 1, 0)), splice(0, 0, 0, 0, 0, c1)}}
	chunksN := func(n int, first byte) []*metapb.Chunk {
		out := make([]*metapb.Chunk, n)
		for i := range out {
			c := chunkAt(first, 1, uint64(i))
			c.Fingerprint = slices.Clone(c.Fingerprint)
			c.Fingerprint[2], c.Fingerprint[3] = byte(i>>8), byte(i)
			out[i] = c
		}
		return out
	}
	fullLayout := slices.Clone(cdc)
	for i := range MaxChunksPerInode / MaxChunksPerOp {
		n := MaxChunksPerOp
		if i == MaxChunksPerInode/MaxChunksPerOp-1 {
			n-- // the file has c1 already
		}
		fullLayout = append(fullLayout, []*metapb.Op{splice(5, uint64(1+i), 0, 0, 0, chunksN(n, 2)...)})
	}
	tooManyChunks := chunksN(MaxChunksPerOp+1, 3)
	tooManyRefs := make([]*metapb.ChunkRef, MaxChunksPerOp+1)
	tooManyFix := make([]*metapb.ChunkRecord, MaxChunksPerOp+1)
	for i, c := range tooManyChunks {
		tooManyRefs[i] = ref(c, 1, 0)
		tooManyFix[i] = &metapb.ChunkRecord{Chunk: c}
	}
	shortFP := &metapb.Chunk{Fingerprint: []byte{1, 2, 3}, Size: 10, PartitionId: 7}
	alg0 := chunkAt(1, 10, 0)
	alg0.Fingerprint = slices.Clone(alg0.Fingerprint)
	alg0.Fingerprint[0] = 0
	noSize, noLoc, overflow := chunkAt(2, 0, 0), chunkAt(2, 10, 0), chunkAt(2, 10, math.MaxUint64-5)
	noLoc.PartitionId = 0
	createLayout := func(typ metapb.FileType, layout metapb.FileLayout) *metapb.Op {
		return &metapb.Op{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: typ, Mode: 0o755, Layout: layout, Target: map[bool][]byte{true: []byte("t")}[typ == lnk]}}}
	}
	maxLinks := [][]*metapb.Op{{link(2, math.MaxInt32), link(2, math.MaxInt32)}}

	cases := []struct {
		name     string
		setup    [][]*metapb.Op // Txns that must succeed first
		ops      []*metapb.Op
		want     metapb.Errno
		failedOp int32
		noPrefix bool // the row's own ops must come first
	}{
		// Txn framing.
		{name: "empty op", ops: []*metapb.Op{{}}, want: metapb.EINVAL},
		{name: "too many ops", ops: tooManyOps, want: metapb.E2BIG, failedOp: MaxOpsPerTxn, noPrefix: true},
		{name: "ino 0 without create_inode", ops: []*metapb.Op{link(0, 1)}, want: metapb.EINVAL},

		// create_inode
		{name: "create_inode unknown type", ops: []*metapb.Op{createInode(0, 0o644)}, want: metapb.EINVAL},
		{name: "create_inode type out of range", ops: []*metapb.Op{createInode(99, 0o644)}, want: metapb.EINVAL},
		{name: "symlink empty target", ops: []*metapb.Op{createSymlink("")}, want: metapb.ENOENT},
		{name: "symlink target too long", ops: []*metapb.Op{createSymlink(strings.Repeat("t", MaxSymlinkLen+1))}, want: metapb.ENAMETOOLONG},
		{name: "symlink target with NUL", ops: []*metapb.Op{createSymlink("a\x00b")}, want: metapb.EINVAL},
		{name: "target on regular file", ops: []*metapb.Op{{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: reg, Target: []byte("x")}}}}, want: metapb.EINVAL},
		{name: "rdev on fifo", ops: []*metapb.Op{{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: fifo, Rdev: 5}}}}, want: metapb.EINVAL},
		{name: "range exhausted", setup: [][]*metapb.Op{{setRange(4)}}, ops: []*metapb.Op{createInode(reg, 0o644)}, want: metapb.ENOSPC},

		// create_dentry
		{name: "create_dentry empty name", ops: []*metapb.Op{createDentry(1, "", 2, reg)}, want: metapb.EINVAL},
		{name: "create_dentry dot", ops: []*metapb.Op{createDentry(1, ".", 2, reg)}, want: metapb.EINVAL},
		{name: "create_dentry dotdot", ops: []*metapb.Op{createDentry(1, "..", 2, reg)}, want: metapb.EINVAL},
		{name: "create_dentry slash", ops: []*metapb.Op{createDentry(1, "a/b", 2, reg)}, want: metapb.EINVAL},
		{name: "create_dentry NUL", ops: []*metapb.Op{createDentry(1, "a\x00b", 2, reg)}, want: metapb.EINVAL},
		{name: "create_dentry 256 bytes", ops: []*metapb.Op{createDentry(1, big, 2, reg)}, want: metapb.ENAMETOOLONG},
		{name: "create_dentry exists", ops: []*metapb.Op{link(2, 1), createDentry(1, "f", 2, reg)}, want: metapb.EEXIST, failedOp: 1},
		{name: "create_dentry fenced parent", setup: [][]*metapb.Op{{fence(1, 9)}}, ops: []*metapb.Op{createDentry(1, "new", 2, reg)}, want: metapb.ENOENT},
		{name: "create_dentry missing local inode", ops: []*metapb.Op{createDentry(1, "new", 99, reg)}, want: metapb.ENOENT},
		{name: "create_dentry type differs from inode", ops: []*metapb.Op{createDentry(1, "new", 2, dir)}, want: metapb.EINVAL},
		{name: "create_dentry unlinked inode", setup: unlinked, ops: []*metapb.Op{createDentry(1, "new", 2, reg)}, want: metapb.ENOENT},
		{name: "create_dentry invalid type", ops: []*metapb.Op{createDentry(1, "new", 2, 0)}, want: metapb.EINVAL},
		{name: "create_dentry to its parent", ops: []*metapb.Op{createDentry(3, "self", 3, dir)}, want: metapb.EINVAL},
		{name: "create_dentry under a file", ops: []*metapb.Op{createDentry(2, "new", 4, lnk)}, want: metapb.ENOTDIR},
		{name: "create_dentry under a missing local parent", ops: []*metapb.Op{createDentry(99, "new", 2, reg)}, want: metapb.ENOENT},
		{name: "create_dentry under a removed directory", setup: [][]*metapb.Op{{deleteDentry(1, "d", 3, dir), link(3, -2)}},
			ops: []*metapb.Op{createDentry(3, "new", 2, reg)}, want: metapb.ENOENT},
		{name: "create_dentry ino 0 without create", ops: []*metapb.Op{createDentry(1, "new", 0, reg)}, want: metapb.EINVAL},

		// delete_dentry
		{name: "delete_dentry missing", ops: []*metapb.Op{deleteDentry(1, "nope", 0, 0)}, want: metapb.ENOENT},
		{name: "delete_dentry wrong ino", ops: []*metapb.Op{deleteDentry(1, "f", 3, 0)}, want: metapb.ESTALE},
		{name: "rmdir of a file", ops: []*metapb.Op{deleteDentry(1, "f", 0, dir)}, want: metapb.ENOTDIR},
		{name: "rmdir of a symlink", ops: []*metapb.Op{deleteDentry(1, "s", 0, dir)}, want: metapb.ENOTDIR},
		{name: "unlink of a directory", ops: []*metapb.Op{deleteDentry(1, "d", 0, reg)}, want: metapb.EISDIR},
		{name: "delete_dentry bad expect_type", ops: []*metapb.Op{deleteDentry(1, "f", 0, 42)}, want: metapb.EINVAL},
		{name: "delete_dentry dotdot", ops: []*metapb.Op{deleteDentry(1, "..", 0, 0)}, want: metapb.EINVAL},
		{name: "delete_dentry 256 bytes", ops: []*metapb.Op{deleteDentry(1, big, 0, 0)}, want: metapb.ENAMETOOLONG},

		// replace_dentry
		{name: "replace_dentry missing", ops: []*metapb.Op{replaceDentry(1, "nope", 2, reg, 0)}, want: metapb.ENOENT},
		{name: "replace_dentry wrong ino", ops: []*metapb.Op{replaceDentry(1, "f", 4, lnk, 3)}, want: metapb.ESTALE},
		{name: "directory over file", ops: []*metapb.Op{replaceDentry(1, "f", 3, dir, 0)}, want: metapb.ENOTDIR},
		{name: "file over directory", ops: []*metapb.Op{replaceDentry(1, "d", 2, reg, 0)}, want: metapb.EISDIR},
		{name: "replace_dentry missing target", ops: []*metapb.Op{replaceDentry(1, "f", 99, reg, 0)}, want: metapb.ENOENT},
		{name: "replace_dentry type mismatch", ops: []*metapb.Op{replaceDentry(1, "f", 4, reg, 0)}, want: metapb.EINVAL},
		{name: "replace_dentry bad name", ops: []*metapb.Op{replaceDentry(1, "a/b", 2, reg, 0)}, want: metapb.EINVAL},

		// setattr
		{name: "setattr missing", ops: []*metapb.Op{truncate(99, 0)}, want: metapb.ENOENT},
		{name: "setattr unknown bits", ops: []*metapb.Op{setattr(&metapb.Setattr{Ino: 2, Valid: 1 << 12})}, want: metapb.EINVAL},
		{name: "truncate directory", ops: []*metapb.Op{truncate(3, 0)}, want: metapb.EISDIR},
		{name: "truncate symlink", ops: []*metapb.Op{truncate(4, 0)}, want: metapb.EINVAL},
		{name: "truncate beyond max", ops: []*metapb.Op{truncate(2, math.MaxInt64+1)}, want: metapb.EFBIG},

		// link
		{name: "link missing", ops: []*metapb.Op{link(99, 1)}, want: metapb.ENOENT},
		{name: "link below zero", ops: []*metapb.Op{link(2, -2)}, want: metapb.EINVAL},
		{name: "link overflow", setup: maxLinks, ops: []*metapb.Op{link(2, 1)}, want: metapb.EINVAL},

		// touch_dir
		{name: "touch_dir missing", ops: []*metapb.Op{touchDir(99, 1, 1)}, want: metapb.ENOENT},
		{name: "touch_dir on file", ops: []*metapb.Op{touchDir(2, 1, 1)}, want: metapb.ENOTDIR},
		{name: "touch_dir below zero", ops: []*metapb.Op{touchDir(3, -3, 1)}, want: metapb.EINVAL},

		// evict
		{name: "evict missing", ops: []*metapb.Op{evict(99)}, want: metapb.ENOENT},
		{name: "evict linked", ops: []*metapb.Op{evict(2)}, want: metapb.EBUSY},

		// set_xattr / remove_xattr
		{name: "set_xattr missing inode", ops: []*metapb.Op{setXattr(99, "user.a", "1", 0)}, want: metapb.ENOENT},
		{name: "set_xattr empty name", ops: []*metapb.Op{setXattr(2, "", "1", 0)}, want: metapb.ERANGE},
		{name: "set_xattr long name", ops: []*metapb.Op{setXattr(2, big, "1", 0)}, want: metapb.ERANGE},
		{name: "set_xattr NUL in name", ops: []*metapb.Op{setXattr(2, "user.\x00", "1", 0)}, want: metapb.EINVAL},
		{name: "set_xattr value too big", ops: []*metapb.Op{setXattr(2, "user.b", value64k+"v", 0)}, want: metapb.E2BIG},
		{name: "set_xattr both flags", ops: []*metapb.Op{setXattr(2, "user.b", "1", XattrCreate|XattrReplace)}, want: metapb.EINVAL},
		{name: "set_xattr unknown flag", ops: []*metapb.Op{setXattr(2, "user.b", "1", 4)}, want: metapb.EINVAL},
		{name: "set_xattr create existing", ops: []*metapb.Op{setXattr(2, "user.a", "2", XattrCreate)}, want: metapb.EEXIST},
		{name: "set_xattr replace absent", ops: []*metapb.Op{setXattr(2, "user.b", "2", XattrReplace)}, want: metapb.ENODATA},
		{name: "set_xattr inode full", setup: [][]*metapb.Op{fullXattrs}, ops: []*metapb.Op{setXattr(2, "user.zz", value64k, 0)}, want: metapb.ENOSPC},
		{name: "remove_xattr absent", ops: []*metapb.Op{removeXattr(2, "user.b")}, want: metapb.ENODATA},
		{name: "remove_xattr missing inode", ops: []*metapb.Op{removeXattr(99, "user.a")}, want: metapb.ENOENT},
		{name: "remove_xattr empty name", ops: []*metapb.Op{removeXattr(2, "")}, want: metapb.ERANGE},

		// append_extents
		{name: "append_extents missing", ops: []*metapb.Op{appendExtents(99, 1, ek(0, 1, 0, 1))}, want: metapb.ENOENT},
		{name: "append_extents directory", ops: []*metapb.Op{appendExtents(3, 1, ek(0, 1, 0, 1))}, want: metapb.EISDIR},
		{name: "append_extents symlink", ops: []*metapb.Op{appendExtents(4, 1, ek(0, 1, 0, 1))}, want: metapb.EINVAL},
		{name: "append_extents empty key", ops: []*metapb.Op{appendExtents(2, 1, ek(0, 1, 0, 0))}, want: metapb.EINVAL},
		{name: "append_extents nil key", ops: []*metapb.Op{appendExtents(2, 1, &metapb.ExtentKey{})}, want: metapb.EINVAL},
		{name: "append_extents beyond max size", ops: []*metapb.Op{appendExtents(2, 0, ek(math.MaxInt64, 1, 0, 1))}, want: metapb.EFBIG},
		{name: "append_extents size beyond max", ops: []*metapb.Op{appendExtents(2, math.MaxInt64+1)}, want: metapb.EFBIG},
		{name: "append_extents extent overflow", ops: []*metapb.Op{appendExtents(2, 0, ek(0, 1, math.MaxUint64, 2))}, want: metapb.EINVAL},
		{name: "append_extents too many keys", ops: []*metapb.Op{appendExtents(2, 0, manyKeys...)}, want: metapb.E2BIG},
		{name: "append_extents too many extents", setup: manyExtents, ops: []*metapb.Op{appendExtents(2, 0, ek(1<<40, 1, 0, 1))}, want: metapb.EFBIG},

		// fence / unfence
		{name: "fence token 0", ops: []*metapb.Op{fence(3, 0)}, want: metapb.EINVAL},
		{name: "fence held by another", setup: [][]*metapb.Op{{fence(3, 1)}}, ops: []*metapb.Op{fence(3, 2)}, want: metapb.EBUSY},
		{name: "too many fences", setup: manyFences, ops: []*metapb.Op{fence(3, 1)}, want: metapb.EAGAIN},
		{name: "unfence wrong token", setup: [][]*metapb.Op{{fence(3, 1)}}, ops: []*metapb.Op{unfence(3, 2)}, want: metapb.EINVAL},
		{name: "unfence token 0", ops: []*metapb.Op{unfence(3, 0)}, want: metapb.EINVAL},
		{name: "fence ino 0 without create", ops: []*metapb.Op{fence(0, 1)}, want: metapb.EINVAL},

		// chunked layout: create_inode, splice_chunks, append_extents, truncate
		{name: "create_inode chunked directory", ops: []*metapb.Op{createLayout(dir, metapb.FileLayout_FILE_LAYOUT_CDC)}, want: metapb.EINVAL},
		{name: "create_inode chunked symlink", ops: []*metapb.Op{createLayout(lnk, metapb.FileLayout_FILE_LAYOUT_CDC)}, want: metapb.EINVAL},
		{name: "create_inode unknown layout", ops: []*metapb.Op{createLayout(reg, 7)}, want: metapb.EINVAL},
		{name: "splice_chunks missing inode", ops: []*metapb.Op{splice(99, 0, 0, 0, 0, c1)}, want: metapb.ENOENT},
		{name: "splice_chunks extent file", ops: []*metapb.Op{splice(2, 0, 0, 0, 0, c1)}, want: metapb.EINVAL},
		{name: "splice_chunks directory", ops: []*metapb.Op{splice(3, 0, 0, 0, 0, c1)}, want: metapb.EINVAL},
		{name: "splice_chunks stale generation", setup: cdc, ops: []*metapb.Op{splice(5, 0, 0, 0, 0, c1)}, want: metapb.ESTALE},
		{name: "splice_chunks future generation", setup: cdc, ops: []*metapb.Op{splice(5, 2, 0, 0, 0, c1)}, want: metapb.ESTALE},
		{name: "splice_chunks start after end", setup: cdc, ops: []*metapb.Op{splice(5, 1, 1, 0, 0, c1)}, want: metapb.EINVAL},
		{name: "splice_chunks end beyond the list", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 2, 0, c1)}, want: metapb.EINVAL},
		{name: "splice_chunks short fingerprint", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 0, 0, shortFP)}, want: metapb.EINVAL},
		{name: "splice_chunks fingerprint algorithm 0", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 0, 0, alg0)}, want: metapb.EINVAL},
		{name: "splice_chunks size 0", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 0, 0, c1, noSize)}, want: metapb.EINVAL},
		{name: "splice_chunks partition 0", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 0, 0, noLoc)}, want: metapb.EINVAL},
		{name: "splice_chunks nil chunk", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 0, 0, nil)}, want: metapb.EINVAL},
		{name: "splice_chunks extent overflow", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 0, 0, overflow)}, want: metapb.EINVAL},
		{name: "splice_chunks too many in one op", setup: cdc, ops: []*metapb.Op{splice(5, 1, 0, 0, 0, tooManyChunks...)}, want: metapb.E2BIG},
		{name: "splice_chunks too many in the file", setup: fullLayout, ops: []*metapb.Op{splice(5, 17, 0, 0, 0, c1)}, want: metapb.EFBIG},
		{name: "append_extents chunked file", setup: cdc, ops: []*metapb.Op{appendExtents(5, 1, ek(0, 1, 0, 1))}, want: metapb.EINVAL},
		{name: "truncate chunked beyond max", setup: cdc, ops: []*metapb.Op{truncate(5, math.MaxInt64+1)}, want: metapb.EFBIG},

		// chunk_refs
		{name: "chunk_refs delta 0", ops: []*metapb.Op{chunkRefs(0, ref(c1, 0, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs short fingerprint", ops: []*metapb.Op{chunkRefs(0, ref(c1, 1, 0), ref(shortFP, 1, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs fingerprint algorithm 0", ops: []*metapb.Op{chunkRefs(0, ref(bare(alg0), 1, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs nil chunk", ops: []*metapb.Op{chunkRefs(0, ref(nil, -1, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs drop without source", ops: []*metapb.Op{chunkRefs(0, ref(c1, -1, 4))}, want: metapb.EINVAL},
		{name: "chunk_refs drop raising the count", ops: []*metapb.Op{chunkRefs(3, ref(c1, 1, 4))}, want: metapb.EINVAL},
		{name: "chunk_refs registration of size 0", ops: []*metapb.Op{chunkRefs(0, ref(noSize, 1, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs registration overflowing its extent", ops: []*metapb.Op{chunkRefs(0, ref(overflow, 1, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs size differs from the entry", setup: cdc, ops: []*metapb.Op{chunkRefs(0, ref(bare(chunkAt(1, 11, 0)), 1, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs too many references", setup: cdc, ops: []*metapb.Op{chunkRefs(0, ref(bare(c1), math.MaxInt64, 0))}, want: metapb.EINVAL},
		{name: "chunk_refs too many items", ops: []*metapb.Op{chunkRefs(0, tooManyRefs...)}, want: metapb.E2BIG},

		// chunk_collect, chunk_forget, chunk_fix
		{name: "chunk_collect short fingerprint", ops: []*metapb.Op{chunkCollect(10, c1, shortFP)}, want: metapb.EINVAL},
		{name: "chunk_collect too many", ops: []*metapb.Op{chunkCollect(10, tooManyChunks...)}, want: metapb.E2BIG},
		{name: "chunk_forget short fingerprint", ops: []*metapb.Op{chunkForget(shortFP)}, want: metapb.EINVAL},
		{name: "chunk_forget fingerprint algorithm 0", ops: []*metapb.Op{chunkForget(alg0)}, want: metapb.EINVAL},
		{name: "chunk_forget too many", ops: []*metapb.Op{chunkForget(tooManyChunks...)}, want: metapb.E2BIG},
		{name: "chunk_fix short fingerprint", ops: []*metapb.Op{chunkFix(&metapb.ChunkRecord{Chunk: shortFP})}, want: metapb.EINVAL},
		{name: "chunk_fix without chunk", ops: []*metapb.Op{chunkFix(&metapb.ChunkRecord{Refs: 1})}, want: metapb.EINVAL},
		{name: "chunk_fix too many references", ops: []*metapb.Op{chunkFix(&metapb.ChunkRecord{Chunk: c1, Refs: math.MaxInt64 + 1})}, want: metapb.EINVAL},
		{name: "chunk_fix too many", ops: []*metapb.Op{chunkFix(tooManyFix...)}, want: metapb.E2BIG},

		// set_range
		{name: "set_range reopen", ops: []*metapb.Op{setRange(0)}, want: metapb.EINVAL},
		{name: "set_range below max inode", ops: []*metapb.Op{setRange(3)}, want: metapb.EINVAL},
		{name: "set_range extends", setup: [][]*metapb.Op{{setRange(10)}}, ops: []*metapb.Op{setRange(11)}, want: metapb.EINVAL},
	}
	// The prefix changes root's nlink, times, xattrs and the TouchDir
	// history: all of it must be undone when the row's op fails.
	prefix := []*metapb.Op{touchDir(1, 1, 777), setXattr(1, "user.p", "v", 0)}
	for _, tc := range cases {
		for _, withPrefix := range []bool{false, true} {
			if withPrefix && tc.noPrefix {
				continue
			}
			name := tc.name
			if withPrefix {
				name += "/after_ok_ops"
			}
			t.Run(name, func(t *testing.T) {
				p := world(t)
				for i, ops := range tc.setup {
					mustRun(t, p, int64(10+i), ops...)
				}
				before, stats, orphans, cstats := snap(t, p), p.Stats(5), p.Orphans(), p.ChunkStats()
				ops, failedOp := tc.ops, tc.failedOp
				if withPrefix {
					ops = append(slices.Clone(prefix), ops...)
					failedOp += int32(len(prefix))
				}
				r := run(t, p, 1000, ops...)
				if metapb.Errno(r.Errno) != tc.want || r.FailedOp != failedOp {
					t.Fatalf("got %v at op %d (%q), want %v at op %d", metapb.Errno(r.Errno), r.FailedOp, r.Message, tc.want, failedOp)
				}
				if r.Message == "" || len(r.Results) != 0 {
					t.Errorf("failed txn: message %q, %d results; want a message and no results", r.Message, len(r.Results))
				}
				if !sameBytes(before, snap(t, p)) {
					t.Errorf("failed txn changed the snapshot")
				}
				if s := p.Stats(5); !statsEqual(s, stats) {
					t.Errorf("failed txn changed stats: %+v, was %+v", s, stats)
				}
				if o := p.Orphans(); !slices.Equal(o, orphans) {
					t.Errorf("failed txn changed orphans: %v, was %v", o, orphans)
				}
				if c := p.ChunkStats(); c != cstats {
					t.Errorf("failed txn changed chunk stats: %+v, was %+v", c, cstats)
				}
			})
		}
	}
}

func statsEqual(a, b Stats) bool {
	return a.Inodes == b.Inodes && a.Dentries == b.Dentries && a.Orphans == b.Orphans &&
		a.Fences == b.Fences && a.FreeExtents == b.FreeExtents && slices.Equal(a.TopNames, b.TopNames)
}

// TestSetRangeBelowStart needs a partition that does not start at 1.
func TestSetRangeBelowStart(t *testing.T) {
	p, err := New(100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, p, 1, setRange(50)); metapb.Errno(r.Errno) != metapb.EINVAL {
		t.Fatalf("set_range below start: %v, want EINVAL", metapb.Errno(r.Errno))
	}
	if r := mustRun(t, p, 2, createInode(dir, 0o755)); r.Results[0].Inode.Ino != 100 {
		t.Fatalf("first inode %d, want the range start 100", r.Results[0].Inode.Ino)
	}
}

func TestNewRejectsBadRange(t *testing.T) {
	for _, r := range [][2]uint64{{0, 0}, {0, 10}, {10, 9}} {
		if _, err := New(r[0], r[1]); err == nil {
			t.Errorf("New(%d, %d) succeeded", r[0], r[1])
		}
	}
}
