package diskcache

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"

	"github.com/cairnfs/cairn/pkg/diskfs"
)

// empty removes everything in dir but its LOCK.
func empty(fs diskfs.FS, dir string) error {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("disk cache %s: %w", dir, err)
	}
	for _, n := range names {
		if n == "LOCK" {
			continue
		}
		if err := diskfs.RemoveAll(fs, filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("disk cache %s: empty it: %w", dir, err)
		}
	}
	return nil
}

// RemoveStale removes the caches in the subdirectories of parent that no
// process holds (left by a client that was killed: a cache removes its
// files when closed) and returns how many it removed. A subdirectory
// without a LOCK file is not a cache and is left alone.
func RemoveStale(fs diskfs.FS, parent string) (int, error) {
	if fs == nil {
		fs = diskfs.OS
	}
	names, err := fs.ReadDir(parent)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	removed := 0
	for _, n := range names {
		dir := filepath.Join(parent, n)
		if _, err := fs.Stat(filepath.Join(dir, "LOCK")); err != nil {
			continue
		}
		lock, err := fs.Lock(filepath.Join(dir, "LOCK"))
		if err != nil {
			continue // a live cache, or not ours to judge
		}
		err = empty(fs, dir)
		lock.Close()
		if err != nil {
			return removed, err
		}
		_ = fs.Remove(filepath.Join(dir, "LOCK"))
		_ = fs.Remove(dir)
		removed++
	}
	return removed, nil
}
