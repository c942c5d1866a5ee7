package diskfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// OS is the real file system. Its File values give access to the underlying
// *os.File through OSFile.
var OS FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) Stat(name string) (FileInfo, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return FileInfo{}, err
	}
	return infoOf(fi), nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return fmt.Errorf("sync dir %s: %w", dir, serr)
	}
	return cerr
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", filepath.Clean(name), err)
	}
	return f, nil // closing the descriptor releases the flock
}

type osFile struct{ f *os.File }

func (o osFile) ReadAt(p []byte, off int64) (int, error)  { return o.f.ReadAt(p, off) }
func (o osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o osFile) Close() error                             { return o.f.Close() }
func (o osFile) Truncate(size int64) error                { return o.f.Truncate(size) }
func (o osFile) Sync() error                              { return syncData(o.f) }
func (o osFile) PunchHole(off, n int64) error {
	if off < 0 || n < 0 {
		return fmt.Errorf("punch hole %s [%d,+%d): %w", o.f.Name(), off, n, os.ErrInvalid)
	}
	if n == 0 {
		return nil
	}
	if err := punchHole(o.f, off, n); err != nil {
		return &os.PathError{Op: "punch hole", Path: o.f.Name(), Err: err}
	}
	return nil
}
func (o osFile) Stat() (FileInfo, error) {
	fi, err := o.f.Stat()
	if err != nil {
		return FileInfo{}, err
	}
	return infoOf(fi), nil
}

// OSFile exposes the descriptor for zero-copy transfers (see diskfs.OSFile).
func (o osFile) OSFile() *os.File { return o.f }

// ErrUnsupported is returned by PunchHole where the OS has no hole punching.
var ErrUnsupported = errors.New("diskfs: operation not supported on this platform")
