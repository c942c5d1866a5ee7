//go:build linux

package diskfs

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

func syncData(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}

func punchHole(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

func lockFile(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == unix.EWOULDBLOCK {
		return ErrLocked
	}
	return err
}

func infoOf(fi os.FileInfo) FileInfo {
	info := FileInfo{Name: fi.Name(), Size: fi.Size(), IsDir: fi.IsDir()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.AllocatedBytes = st.Blocks * 512
	} else {
		info.AllocatedBytes = fi.Size()
	}
	return info
}
