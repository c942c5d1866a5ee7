package fsworkload

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Dir is Files on a local directory through the OS: a mount point in the
// lab, any directory in a test.
type Dir string

func (d Dir) path(p string) string { return filepath.Join(string(d), filepath.FromSlash(p)) }

// MkdirAll implements Files.
func (d Dir) MkdirAll(p string) error { return os.MkdirAll(d.path(p), 0o755) }

// Mkdir implements Files.
func (d Dir) Mkdir(p string) error { return os.Mkdir(d.path(p), 0o755) }

// CreateExcl implements Files.
func (d Dir) CreateExcl(p string) error {
	f, err := os.OpenFile(d.path(p), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// OverwriteSynced implements Files.
func (d Dir) OverwriteSynced(p string, b []byte) error {
	return writeSynced(d.path(p), os.O_WRONLY, func(f *os.File) error {
		_, err := f.WriteAt(b, 0)
		return err
	})
}

// AppendSynced implements Files.
func (d Dir) AppendSynced(p string, b []byte) error {
	return writeSynced(d.path(p), os.O_CREATE|os.O_WRONLY|os.O_APPEND, func(f *os.File) error {
		_, err := f.Write(b)
		return err
	})
}

// writeSynced opens p with flag, writes with write, fsyncs and closes; the
// first error wins.
func writeSynced(p string, flag int, write func(f *os.File) error) error {
	f, err := os.OpenFile(p, flag, 0o644)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadFile implements Files.
func (d Dir) ReadFile(p string) ([]byte, error) { return os.ReadFile(d.path(p)) }

// Unlink implements Files with unlink(2) alone: os.Remove tries rmdir(2)
// when unlink fails and returns rmdir's errno, so an unlink that timed out
// (its outcome unknown) after it had removed the name read as ENOENT, a
// definite failure, and the checker found no order for it (a nemesis run).
func (d Dir) Unlink(p string) error {
	if err := unix.Unlink(d.path(p)); err != nil {
		return &os.PathError{Op: "unlink", Path: d.path(p), Err: err}
	}
	return nil
}

// Rename implements Files.
func (d Dir) Rename(from, to string) error { return os.Rename(d.path(from), d.path(to)) }

// Exists implements Files.
func (d Dir) Exists(p string) (bool, error) {
	_, err := os.Lstat(d.path(p))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// List implements Files.
func (d Dir) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(d.path(dir))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}
