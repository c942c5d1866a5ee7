package metapartition

import (
	"math"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Limits. Every input that can grow the state has a bound, so that no request
// can make a partition allocate without limit, and the snapshot decoder checks
// the same bounds on the way back in.
const (
	// MaxNameLen is the longest dentry name in bytes (NAME_MAX).
	MaxNameLen = 255
	// MaxSymlinkLen is the longest symlink target in bytes (PATH_MAX).
	MaxSymlinkLen = 4096
	// MaxXattrNameLen is the longest xattr name in bytes (XATTR_NAME_MAX).
	MaxXattrNameLen = 255
	// MaxXattrValueLen is the largest xattr value in bytes (XATTR_SIZE_MAX).
	MaxXattrValueLen = 64 << 10
	// MaxXattrBytesPerInode bounds the sum of name and value lengths of one
	// inode's xattrs; beyond it SetXattr fails with ENOSPC, as on ext4 when an
	// inode's xattr space is full.
	MaxXattrBytesPerInode = 1 << 20
	// MaxExtentsPerInode bounds an inode's extent map (after adjacent keys
	// are merged); beyond it AppendExtents fails with EFBIG. The map is a
	// sorted slice copied on every change, so this also bounds the cost of
	// one AppendExtents.
	MaxExtentsPerInode = 1 << 16
	// MaxExtentsPerOp bounds the keys of one AppendExtents (E2BIG beyond).
	MaxExtentsPerOp = 1 << 12
	// MaxOpsPerTxn bounds a Txn (E2BIG beyond); a Txn is one POSIX
	// operation's share on one partition and needs a handful of ops.
	MaxOpsPerTxn = 1024
	// MaxFences bounds concurrent fences (EAGAIN beyond); a fence lives for
	// the duration of one rmdir, rename or directory chmod, or FenceTTL.
	MaxFences = 1 << 16
	// TouchHistory is how many (ino, op_id) pairs of TouchDir the partition
	// remembers to make retried TouchDirs idempotent (a FIFO, part of the
	// replicated state and of snapshots).
	TouchHistory = 4096
	// RequestHistory is how many request ids of successful Txns the
	// partition remembers with their results (a FIFO, part of the replicated
	// state and of snapshots), so that a retried Txn is answered, not
	// applied again.
	RequestHistory = 16384
	// RequestHistoryBytes bounds the remembered results' marshalled bytes
	// (the oldest are forgotten first; a larger result is not remembered):
	// a ChunkRefs of thousands of items answers with a record per item,
	// and RequestHistory of those would take gigabytes.
	RequestHistoryBytes = 32 << 20
	// MaxFileSize is the largest file size and extent end: st_size is signed.
	MaxFileSize = math.MaxInt64
)

// Flags of SetXattr, as in setxattr(2).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

const permMask = 0o7777

// extent is the compact form of metapb.ExtentKey: file bytes
// [fileOff, fileOff+size) are bytes [extOff, extOff+size) of extent eid in
// data partition pid. Stored keys have size > 0, fileOff+size <= MaxFileSize
// and extOff+size without overflow.
type extent struct {
	fileOff uint64
	pid     uint64
	eid     uint64
	extOff  uint64
	size    uint64
}

func (e extent) end() uint64 { return e.fileOff + e.size }

// inode is the compact in-memory form of an inode: 112 bytes, one
// allocation for the common regular file with at most one extent and no
// xattrs (the size class is exactly 112). The rare parts live behind x.
//
// An *inode stored in the tree is immutable: a change builds a new inode
// (and, if needed, a new inodeExtra) and replaces the pointer. This is what
// makes a B-tree Copy a consistent snapshot: the copy shares the pointers,
// and nobody writes through them.
type inode struct {
	ino   uint64
	size  uint64
	atime int64
	mtime int64
	ctime int64
	btime int64
	mode  uint32 // permission bits (07777) | file type << 16
	uid   uint32
	gid   uint32
	nlink uint32
	// parent is the directory the inode was created in, or last moved to
	// by a rename (Inode.parent): a directory's is its one parent, a file's
	// that of the name it was created or last renamed under. 0 for a
	// volume's root and for inodes of servers that kept none.
	parent uint64
	ext0   extent      // first extent; ext0.size == 0 means no extents
	x      *inodeExtra // nil for most inodes
}

// inodeExtra holds what most inodes do not have. Like inode it is immutable
// once reachable from the tree, and so are its slices.
type inodeExtra struct {
	rdev   uint64
	target string   // symlink target
	exts   []extent // extents after ext0, sorted by fileOff
	xattrs []xattr  // sorted by name
	// cdc is a FILE_LAYOUT_CDC file's layout; nil for every other inode.
	// Behind a pointer so that the inodeExtra of directories and symlinks
	// (parent pointers, targets) does not grow by a slice and a counter.
	cdc *cdcLayout
}

// cdcLayout is a chunked file's layout: the chunks in file order and the
// generation SpliceChunks checks. Immutable once reachable, like inodeExtra.
type cdcLayout struct {
	gen    uint64
	chunks []chunkRef
}

type xattr struct {
	name  string
	value []byte
}

func (in *inode) typ() metapb.FileType { return metapb.FileType(in.mode >> 16) }
func (in *inode) perm() uint32         { return in.mode & permMask }

func packMode(t metapb.FileType, perm uint32) uint32 { return uint32(t)<<16 | perm&permMask }

func validType(t metapb.FileType) bool {
	return t >= metapb.FileType_FILE_TYPE_REGULAR && t <= metapb.FileType_FILE_TYPE_BLOCK_DEVICE
}

// clone returns a shallow copy, to be modified and stored in place of in.
func (in *inode) clone() *inode {
	c := *in
	return &c
}

// extra returns a copy of in.x (or a new one) for modification; the caller
// stores it with setExtra.
func (in *inode) extra() *inodeExtra {
	if in.x == nil {
		return &inodeExtra{}
	}
	c := *in.x
	return &c
}

// setExtra stores x, or nil if it holds nothing, so that inodes that lose
// their rare parts give the memory back.
func (in *inode) setExtra(x *inodeExtra) {
	if x.rdev == 0 && x.target == "" && len(x.exts) == 0 && len(x.xattrs) == 0 && x.cdc == nil {
		in.x = nil
		return
	}
	in.x = x
}

func (in *inode) rdev() uint64 {
	if in.x == nil {
		return 0
	}
	return in.x.rdev
}

func (in *inode) target() string {
	if in.x == nil {
		return ""
	}
	return in.x.target
}

// cdc returns a chunked file's layout, nil for an extent-layout inode.
func (in *inode) cdc() *cdcLayout {
	if in.x == nil {
		return nil
	}
	return in.x.cdc
}

// layout is the inode's FileLayout: CDC exactly when it has a cdcLayout.
func (in *inode) layout() metapb.FileLayout {
	if in.cdc() != nil {
		return metapb.FileLayout_FILE_LAYOUT_CDC
	}
	return metapb.FileLayout_FILE_LAYOUT_EXTENT
}

// setCDC stores l as the clone in's chunk layout.
func (in *inode) setCDC(l *cdcLayout) {
	x := in.extra()
	x.cdc = l
	in.setExtra(x)
}

func (in *inode) xattrs() []xattr {
	if in.x == nil {
		return nil
	}
	return in.x.xattrs
}

func (in *inode) extentCount() int {
	if in.ext0.size == 0 {
		return 0
	}
	if in.x == nil {
		return 1
	}
	return 1 + len(in.x.exts)
}

// extents returns a new slice with all extents, sorted by file offset.
func (in *inode) extents() []extent {
	n := in.extentCount()
	if n == 0 {
		return nil
	}
	out := make([]extent, 0, n+2)
	out = append(out, in.ext0)
	if in.x != nil {
		out = append(out, in.x.exts...)
	}
	return out
}

// setExtents stores list (sorted, non-overlapping) on the clone in: the first
// key inline, the rest in a new slice of their own.
func (in *inode) setExtents(list []extent) {
	var rest []extent
	if len(list) == 0 {
		in.ext0 = extent{}
	} else {
		in.ext0 = list[0]
		if len(list) > 1 {
			rest = append([]extent(nil), list[1:]...)
		}
	}
	if in.x == nil && rest == nil {
		return
	}
	x := in.extra()
	x.exts = rest
	in.setExtra(x)
}

func xattrIndex(xs []xattr, name string) (int, bool) {
	lo, hi := 0, len(xs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if xs[m].name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(xs) && xs[lo].name == name
}

func xattrBytes(xs []xattr) int {
	n := 0
	for _, x := range xs {
		n += len(x.name) + len(x.value)
	}
	return n
}

// stamp is the inode's content stamp (metapb.InodeStamp).
func (in *inode) stamp() *metapb.InodeStamp {
	return &metapb.InodeStamp{Size: in.size, MtimeNs: in.mtime, CtimeNs: in.ctime}
}

// toProto converts in for a reply. Results of mutating ops leave out extents,
// chunks and xattrs (full == false): they are read with GetInode and
// ListXattr, and copying a large extent map into every AppendExtents result
// (or a chunk list into every SpliceChunks result) would make writes cost
// O(extents) in allocations. Layout and layout_gen are always there: a
// writer of a chunked file needs the new generation from its splice.
func (in *inode) toProto(full bool) *metapb.Inode {
	m := &metapb.Inode{
		Ino:     in.ino,
		Type:    in.typ(),
		Mode:    in.perm(),
		Uid:     in.uid,
		Gid:     in.gid,
		Size:    in.size,
		Nlink:   in.nlink,
		AtimeNs: in.atime,
		MtimeNs: in.mtime,
		CtimeNs: in.ctime,
		BtimeNs: in.btime,
		Rdev:    in.rdev(),
		Parent:  in.parent,
		Layout:  in.layout(),
	}
	if t := in.target(); t != "" {
		m.Target = []byte(t)
	}
	l := in.cdc()
	if l != nil {
		m.LayoutGen = l.gen
	}
	if !full {
		return m
	}
	if l != nil && len(l.chunks) > 0 {
		m.Chunks = make([]*metapb.Chunk, len(l.chunks))
		for i, c := range l.chunks {
			m.Chunks[i] = c.toProto()
		}
	}
	if n := in.extentCount(); n > 0 {
		m.Extents = make([]*metapb.ExtentKey, 0, n)
		for _, e := range in.extents() {
			m.Extents = append(m.Extents, &metapb.ExtentKey{
				FileOffset: e.fileOff, PartitionId: e.pid, ExtentId: e.eid, ExtentOffset: e.extOff, Size: e.size,
			})
		}
	}
	if xs := in.xattrs(); len(xs) > 0 {
		m.Xattrs = make(map[string][]byte, len(xs))
		for _, x := range xs {
			m.Xattrs[x.name] = append([]byte{}, x.value...)
		}
	}
	return m
}

// dentry is the compact form of metapb.Dentry, stored by value in the dentry
// tree (48 bytes plus the name's bytes).
type dentry struct {
	parent uint64
	name   string
	ino    uint64
	typ    metapb.FileType
	// pend is set while the name is a rename's new name placed ahead of
	// its commit (metapb.PendingRename); immutable once stored, nil for
	// almost every name.
	pend *metapb.PendingRename
}

func dentryLess(a, b dentry) bool {
	if a.parent != b.parent {
		return a.parent < b.parent
	}
	return a.name < b.name
}

func (d dentry) toProto() *metapb.Dentry {
	pd := &metapb.Dentry{Parent: d.parent, Name: []byte(d.name), Ino: d.ino, Type: d.typ}
	if d.pend != nil {
		pd.Pending = proto.Clone(d.pend).(*metapb.PendingRename)
	}
	return pd
}

// checkName validates a dentry name the way Linux path lookup does:
// ENAMETOOLONG beyond NAME_MAX; EINVAL for "", ".", "..", and names holding
// '/' or NUL (which no path component can contain).
func checkName(name string) (metapb.Errno, string) {
	if len(name) > MaxNameLen {
		return metapb.ENAMETOOLONG, "name longer than 255 bytes"
	}
	if name == "" || name == "." || name == ".." {
		return metapb.EINVAL, "name " + quote(name) + " is not allowed"
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return metapb.EINVAL, "name " + quote(name) + " contains '/' or NUL"
		}
	}
	return metapb.OK, ""
}

// checkXattrName follows setxattr(2): an empty or over-long name is ERANGE;
// a NUL cannot be passed through the system call, so it is EINVAL here.
func checkXattrName(name string) (metapb.Errno, string) {
	if name == "" || len(name) > MaxXattrNameLen {
		return metapb.ERANGE, "xattr name must be 1 to 255 bytes"
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return metapb.EINVAL, "xattr name contains NUL"
		}
	}
	return metapb.OK, ""
}

// quote shortens and quotes a name for an error message.
func quote(s string) string {
	const maxShown = 64
	if len(s) > maxShown {
		s = s[:maxShown] + "..."
	}
	return strconv.Quote(s)
}
