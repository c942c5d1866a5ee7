package diskfs

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resident reports how many of the pages of the file at path are in the
// page cache, and how many pages the file has (mincore(2) of a read-only
// mapping; mapping faults no page in). For checks and diagnostics of what a
// store leaves cached.
func Resident(path string) (resident, pages int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	if fi.Size() == 0 {
		return 0, 0, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident, len(vec), nil
}

// CachesPages reports whether files under dir live in a page cache that can
// be dropped (not tmpfs, whose page cache is its storage).
func CachesPages(dir string) bool {
	var sfs unix.Statfs_t
	return unix.Statfs(dir, &sfs) == nil && sfs.Type != unix.TMPFS_MAGIC
}
