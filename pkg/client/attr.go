package client

import (
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Attr is an inode's attributes as stat(2) reports them.
type Attr struct {
	Ino   uint64
	Mode  uint32 // file type bits (syscall.S_IFREG, ...) | permission bits (07777)
	Nlink uint32
	Uid   uint32
	Gid   uint32
	Size  uint64 // bytes; a symlink's target length
	Rdev  uint64 // devices only
	Atime time.Time
	Mtime time.Time
	Ctime time.Time
	Btime time.Time
	// Parent is a directory's parent directory (0 for the root and for
	// other types); it is what the subtree check of Rename walks.
	Parent     uint64
	Generation uint64
}

// IsDir reports whether the inode is a directory.
func (a *Attr) IsDir() bool { return a.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// Type returns the file type bits of Mode (syscall.S_IFMT part).
func (a *Attr) Type() uint32 { return a.Mode & syscall.S_IFMT }

// fileType maps st_mode type bits to a file type; 0 (no type) is regular,
// as mknod(2) takes it.
func fileType(mode uint32) (metapb.FileType, bool) {
	switch mode & syscall.S_IFMT {
	case 0, syscall.S_IFREG:
		return metapb.FileType_FILE_TYPE_REGULAR, true
	case syscall.S_IFDIR:
		return metapb.FileType_FILE_TYPE_DIRECTORY, true
	case syscall.S_IFLNK:
		return metapb.FileType_FILE_TYPE_SYMLINK, true
	case syscall.S_IFIFO:
		return metapb.FileType_FILE_TYPE_FIFO, true
	case syscall.S_IFSOCK:
		return metapb.FileType_FILE_TYPE_SOCKET, true
	case syscall.S_IFCHR:
		return metapb.FileType_FILE_TYPE_CHAR_DEVICE, true
	case syscall.S_IFBLK:
		return metapb.FileType_FILE_TYPE_BLOCK_DEVICE, true
	}
	return 0, false
}

func isDirType(t metapb.FileType) bool { return t == metapb.FileType_FILE_TYPE_DIRECTORY }

func toTime(ns int64) time.Time { return time.Unix(0, ns) }

func toAttr(in *metapb.Inode) *Attr {
	return &Attr{
		Ino:        in.GetIno(),
		Mode:       in.GetType().ModeBits() | in.GetMode()&0o7777,
		Nlink:      in.GetNlink(),
		Uid:        in.GetUid(),
		Gid:        in.GetGid(),
		Size:       in.GetSize(),
		Rdev:       in.GetRdev(),
		Atime:      toTime(in.GetAtimeNs()),
		Mtime:      toTime(in.GetMtimeNs()),
		Ctime:      toTime(in.GetCtimeNs()),
		Btime:      toTime(in.GetBtimeNs()),
		Parent:     in.GetParent(),
		Generation: in.GetGeneration(),
	}
}

// SetattrValid says which fields of SetattrIn apply (a bit mask).
type SetattrValid uint32

// SetattrValid bits; the values are the protocol's.
const (
	SetMode     = SetattrValid(metapb.SetattrValid_SETATTR_MODE)
	SetUID      = SetattrValid(metapb.SetattrValid_SETATTR_UID)
	SetGID      = SetattrValid(metapb.SetattrValid_SETATTR_GID)
	SetSize     = SetattrValid(metapb.SetattrValid_SETATTR_SIZE)
	SetAtime    = SetattrValid(metapb.SetattrValid_SETATTR_ATIME)
	SetMtime    = SetattrValid(metapb.SetattrValid_SETATTR_MTIME)
	SetAtimeNow = SetattrValid(metapb.SetattrValid_SETATTR_ATIME_NOW) // wins over SetAtime
	SetMtimeNow = SetattrValid(metapb.SetattrValid_SETATTR_MTIME_NOW) // wins over SetMtime
	SetCtime    = SetattrValid(metapb.SetattrValid_SETATTR_CTIME)
)

const setattrAll = SetMode | SetUID | SetGID | SetSize | SetAtime | SetMtime | SetAtimeNow | SetMtimeNow | SetCtime

// SetattrIn is the input of Setattr: Valid selects the fields that apply.
type SetattrIn struct {
	Valid SetattrValid
	Mode  uint32 // permission bits; type bits are ignored
	Uid   uint32
	Gid   uint32
	Size  uint64 // truncate (regular files)
	Atime time.Time
	Mtime time.Time
	Ctime time.Time
}

// DirEntry is one name of a directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	Type uint32 // st_mode type bits (syscall.S_IFDIR, ...)
	// Attr is set by ReadDirPlus (nil from ReadDir).
	Attr *Attr
}

// StatFS is the file system statistics of a volume (statfs(2)).
type StatFS struct {
	BlockSize   uint32
	Blocks      uint64 // capacity in BlockSize units
	BlocksFree  uint64
	BlocksAvail uint64
	Files       uint64 // inodes in use
	FilesFree   uint64
	NameLen     uint32
}

// Rename flags, as renameat2(2).
const (
	RenameNoreplace = 1 << 0
	RenameExchange  = 1 << 1
)

// Xattr flags, as setxattr(2).
const (
	XattrCreate  = 1
	XattrReplace = 2
)
