package fusefs

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Why the mount needs the kernel's dentry epoch (docs/design.md, "Kernel
// caches kept coherent by a change feed"): Linux drops one cached name
// (FUSE_NOTIFY_INVAL_ENTRY) only under its directory's lock, and holds
// that lock for the whole of a create, rename, unlink or mkdir it sent
// to this mount. While such an operation waits on a meta partition it
// cannot reach, the name's invalidation waits too, and path walks keep
// finding the old name in the dcache. FUSE 7.44 (Linux 6.16) added
// FUSE_NOTIFY_INC_EPOCH: it takes no lock, and makes the kernel check
// every name it cached before it with this mount on its next use. A
// name whose directory is locked is then looked up again under that
// lock, so the walk waits for the stalled operation instead of answering
// from a stale entry.

// notifyIncEpoch is FUSE_NOTIFY_INC_EPOCH's code (include/uapi/linux/fuse.h);
// go-fuse does not send it.
const notifyIncEpoch = 8

// epochMinor is the first FUSE protocol minor version with it.
const epochMinor = 44

// kernelEpoch writes FUSE_NOTIFY_INC_EPOCH to the mount's FUSE connection,
// through a descriptor of its own that refers to the connection's open
// /dev/fuse: go-fuse keeps its descriptor to itself, and a copy cannot
// end up naming another file once go-fuse closes the original.
type kernelEpoch struct {
	mu sync.Mutex
	f  *os.File // nil once closed
}

// bump makes the kernel check every name it cached before now on its next
// use. It never waits for a lock.
func (e *kernelEpoch) bump() error {
	var hdr [16]byte // struct fuse_out_header: len, error (the code), unique 0
	binary.NativeEndian.PutUint32(hdr[0:], uint32(len(hdr)))
	binary.NativeEndian.PutUint32(hdr[4:], notifyIncEpoch)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return os.ErrClosed
	}
	if _, err := e.f.Write(hdr[:]); err != nil {
		return fmt.Errorf("FUSE_NOTIFY_INC_EPOCH: %w", err)
	}
	return nil
}

func (e *kernelEpoch) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f != nil {
		_ = e.f.Close()
		e.f = nil
	}
}

// newServerMu keeps two mounts of this process from making their
// connections at once, so that the /dev/fuse descriptor that appears
// during fuse.NewServer is the new mount's.
var newServerMu sync.Mutex

// NewServer mounts fsys on mountpoint, as fuse.NewServer does, and keeps
// a descriptor of the new connection for notifications go-fuse does not
// send (FUSE_NOTIFY_INC_EPOCH). Without one (a kernel before FUSE 7.44,
// or no descriptor found) the mount works as before, with the limit
// docs/design.md names.
func NewServer(fsys *FS, mountpoint string, opts *fuse.MountOptions) (*fuse.Server, error) {
	newServerMu.Lock()
	defer newServerMu.Unlock()
	before := fuseDescriptors()
	srv, err := fuse.NewServer(fsys, mountpoint, opts)
	if err != nil {
		return nil, err
	}
	if srv.KernelSettings().Minor < epochMinor {
		return srv, nil
	}
	var fresh []int
	for fd := range fuseDescriptors() {
		if !before[fd] {
			fresh = append(fresh, fd)
		}
	}
	if len(fresh) != 1 {
		return srv, nil
	}
	dup, err := unix.FcntlInt(uintptr(fresh[0]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return srv, nil
	}
	fsys.epoch.Store(&kernelEpoch{f: os.NewFile(uintptr(dup), "/dev/fuse")})
	return srv, nil
}

// fuseDescriptors lists this process's descriptors open on /dev/fuse.
func fuseDescriptors() map[int]bool {
	fds := map[int]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fds
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				fds[fd] = true
			}
		}
	}
	return fds
}
