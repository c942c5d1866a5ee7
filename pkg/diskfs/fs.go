// Package diskfs is the small file system interface through which storage
// code (the extent store today, other local persistence later) reaches the
// local disk, in the style of Pebble's vfs.FS: production code uses OS, tests
// swap in MemFS, which remembers what was synced and can simulate a crash, and
// Inject, which fails chosen operations with chosen errors (EIO, ENOSPC, short
// writes). Every error path of a store can therefore be exercised without a
// broken disk.
//
// # Durability model
//
// The interface promises only what POSIX (and Linux ext4/xfs in practice)
// promise, and MemFS implements exactly that, no more:
//
//   - File.Sync makes the file's contents and size durable, nothing else: a
//     newly created, removed or renamed name is durable only after SyncDir of
//     the directory holding it.
//   - Writes not yet synced may, after a crash, be lost entirely, kept in
//     part (a prefix, torn at any byte), or kept out of order.
//   - Rename within a directory is atomic: after a crash the target holds the
//     old or the new file, never a mix.
//
// Paths are slash-separated and used as given (no working directory).
package diskfs

import (
	"errors"
	"io"
	"os"
)

// FS is the file system. Implementations are safe for concurrent use.
type FS interface {
	// Create creates the named file for reading and writing, truncating it
	// if it exists. The new name is durable only after SyncDir of its
	// directory.
	Create(name string) (File, error)
	// Open opens an existing file for reading and writing.
	Open(name string) (File, error)
	// Remove removes a file (or an empty directory). Durable after SyncDir.
	Remove(name string) error
	// Rename atomically replaces newname with oldname. Durable after
	// SyncDir of the directory (both directories if they differ).
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(dir string) error
	// ReadDir returns the names in dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat describes the named file.
	Stat(name string) (FileInfo, error)
	// SyncDir makes the creations, removals and renames of names in dir
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock on the named file (created if
	// missing) so that two processes never open the same store; Close
	// releases it. It fails at once if the lock is held.
	Lock(name string) (io.Closer, error)
}

// File is an open file. ReadAt and WriteAt follow io.ReaderAt and
// io.WriterAt (ReadAt returns io.EOF at the end of the file). Methods are
// safe for concurrent use as far as the OS makes them (concurrent WriteAt to
// overlapping ranges has no defined result).
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Truncate sets the file's size, cutting or extending it with zeros.
	Truncate(size int64) error
	// Sync makes the file's contents and size durable (fdatasync on Linux).
	// It does not make the file's name durable: see FS.SyncDir.
	Sync() error
	// PunchHole deallocates [off, off+n) and makes it read as zeros, keeping
	// the file's size (fallocate PUNCH_HOLE|KEEP_SIZE), so the space shows
	// as freed in du. Durable after Sync.
	PunchHole(off, n int64) error
	// Stat describes the open file.
	Stat() (FileInfo, error)
}

// FileInfo is what Stat reports.
type FileInfo struct {
	Name string
	// Size is the logical size in bytes.
	Size int64
	// AllocatedBytes is the disk space the file occupies (st_blocks*512 on
	// Linux): what du reports. It drops when holes are punched.
	AllocatedBytes int64
	IsDir          bool
}

// OSFile returns the *os.File under f when f is backed by a real OS file
// (and not wrapped by a fault injector), so that a network layer can hand it
// to sendfile or splice. ok is false for in-memory files.
func OSFile(f File) (file *os.File, ok bool) {
	if o, isOS := f.(interface{ OSFile() *os.File }); isOS {
		return o.OSFile(), true
	}
	return nil, false
}

// ErrLocked is returned by Lock when another holder has the lock.
var ErrLocked = errors.New("diskfs: lock held by another process")

// RemoveAll removes dir and everything under it; a missing dir is no
// error. Like Remove, the removals are durable only after SyncDir of the
// directory that held dir.
func RemoveAll(fs FS, dir string) error {
	if fs == OS {
		return os.RemoveAll(dir)
	}
	fi, err := fs.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir {
		names, err := fs.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := RemoveAll(fs, dir+"/"+n); err != nil {
				return err
			}
		}
	}
	return fs.Remove(dir)
}
