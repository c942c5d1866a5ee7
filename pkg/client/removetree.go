package client

import (
	"context"
	"errors"
	"syscall"
)

// RemoveTree removes directory (parent, name), whose inode is ino, and
// everything below it, depth first ('rm -r'). Names that vanish meanwhile
// are not an error; a name created below while it runs makes the final
// rmdir fail with ENOTEMPTY.
func (v *Volume) RemoveTree(ctx context.Context, parent uint64, name string, ino uint64) error {
	for {
		entries, more, err := v.ReadDir(ctx, ino, "", 1024)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Type == syscall.S_IFDIR {
				err = v.RemoveTree(ctx, ino, e.Name, e.Ino)
			} else {
				err = v.Unlink(ctx, ino, e.Name)
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				return err
			}
		}
		if !more {
			break
		}
	}
	return v.Rmdir(ctx, parent, name)
}
