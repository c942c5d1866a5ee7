package metapb

import "syscall"

// ModeBits are the st_mode type bits (S_IFMT part) of a file type; 0 for
// an unknown one.
func (t FileType) ModeBits() uint32 {
	switch t {
	case FileType_FILE_TYPE_REGULAR:
		return syscall.S_IFREG
	case FileType_FILE_TYPE_DIRECTORY:
		return syscall.S_IFDIR
	case FileType_FILE_TYPE_SYMLINK:
		return syscall.S_IFLNK
	case FileType_FILE_TYPE_FIFO:
		return syscall.S_IFIFO
	case FileType_FILE_TYPE_SOCKET:
		return syscall.S_IFSOCK
	case FileType_FILE_TYPE_CHAR_DEVICE:
		return syscall.S_IFCHR
	case FileType_FILE_TYPE_BLOCK_DEVICE:
		return syscall.S_IFBLK
	}
	return 0
}
