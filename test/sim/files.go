package sim

import (
	"context"
	"errors"
	"io"
	"os"
	"path"
	"syscall"

	"github.com/cairnfs/cairn/pkg/client"
)

// sdkFiles is fsworkload.Files through the SDK's path API, as one client
// host's program would use it: every call gets its own context, bounded by
// the volume's operation timeout.
type sdkFiles struct {
	v    *client.Volume
	cred client.Cred
}

func (f sdkFiles) abs(p string) string { return path.Join("/", p) }

func (f sdkFiles) MkdirAll(p string) error {
	dir := "/"
	for _, c := range splitPath(p) {
		dir = path.Join(dir, c)
		if _, err := f.v.MkdirPath(context.Background(), dir, 0o755, f.cred); err != nil && !errors.Is(err, syscall.EEXIST) {
			return err
		}
	}
	return nil
}

func splitPath(p string) []string {
	var out []string
	for rest := path.Clean("/" + p); rest != "/"; rest = path.Dir(rest) {
		out = append([]string{path.Base(rest)}, out...)
	}
	return out
}

func (f sdkFiles) Mkdir(p string) error {
	_, err := f.v.MkdirPath(context.Background(), f.abs(p), 0o755, f.cred)
	return err
}

func (f sdkFiles) CreateExcl(p string) error {
	_, err := f.v.CreatePath(context.Background(), f.abs(p), 0o644, f.cred)
	return err
}

// writeSynced opens p with flags, writes b at off, syncs and closes: the
// first error wins, and the file is closed either way.
func (f sdkFiles) writeSynced(p string, flags int, b []byte, off int64) error {
	ctx := context.Background()
	h, err := f.v.OpenPath(ctx, f.abs(p), flags, 0o644, f.cred)
	if err != nil {
		return err
	}
	if _, err = h.WriteAt(b, off); err == nil {
		err = h.Fsync(ctx)
	}
	if cerr := h.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

func (f sdkFiles) OverwriteSynced(p string, b []byte) error {
	return f.writeSynced(p, os.O_WRONLY, b, 0)
}

func (f sdkFiles) AppendSynced(p string, b []byte) error {
	return f.writeSynced(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, b, 0)
}

func (f sdkFiles) ReadFile(p string) ([]byte, error) {
	ctx := context.Background()
	h, err := f.v.OpenPath(ctx, f.abs(p), os.O_RDONLY, 0, f.cred)
	if err != nil {
		return nil, err
	}
	defer h.Close(ctx)
	var out []byte
	buf := make([]byte, 64<<10)
	for off := int64(0); ; {
		n, err := h.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF || (err == nil && n == 0) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (f sdkFiles) Unlink(p string) error {
	return f.v.UnlinkPath(context.Background(), f.abs(p), f.cred)
}

func (f sdkFiles) Rename(from, to string) error {
	return f.v.RenamePath(context.Background(), f.abs(from), f.abs(to), f.cred)
}

func (f sdkFiles) Exists(p string) (bool, error) {
	_, err := f.v.LstatPath(context.Background(), f.abs(p), f.cred)
	if errors.Is(err, syscall.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

func (f sdkFiles) List(dir string) ([]string, error) {
	ents, err := f.v.ReadDirPath(context.Background(), f.abs(dir), f.cred)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Name != "." && e.Name != ".." {
			names = append(names, e.Name)
		}
	}
	return names, nil
}
