package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/fsys"
)

// shadowFS keeps a copy of every byte written through it and checks every
// byte read through it against that copy; it also notes which files were
// opened with O_DIRECT.
type shadowFS struct {
	fsys.FS
	mu       sync.Mutex
	data     map[string][]byte
	direct   map[string]bool
	mismatch []string
}

func newShadowFS(f fsys.FS) *shadowFS {
	return &shadowFS{FS: f, data: map[string][]byte{}, direct: map[string]bool{}}
}

func (s *shadowFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if flag&syscall.O_TRUNC != 0 || s.data[name] == nil {
		s.data[name] = []byte{}
	}
	if flag&syscall.O_DIRECT != 0 {
		s.direct[name] = true
	}
	return &shadowFile{File: f, fs: s, name: name}, nil
}

func (s *shadowFS) wrote(name string, b []byte, off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.data[name]
	if end := off + int64(len(b)); end > int64(len(d)) {
		d = append(d, make([]byte, end-int64(len(d)))...)
	}
	copy(d[off:], b)
	s.data[name] = d
}

func (s *shadowFS) read(name string, b []byte, off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.data[name]
	if off+int64(len(b)) > int64(len(d)) || !bytes.Equal(b, d[off:off+int64(len(b))]) {
		s.mismatch = append(s.mismatch, fmt.Sprintf("%s: %d bytes at %d differ from what was written", name, len(b), off))
	}
}

// shadowFile tracks the stream offset of Write (the workloads write
// sequentially from 0 after O_TRUNC and never seek).
type shadowFile struct {
	fsys.File
	fs   *shadowFS
	name string
	pos  int64
}

func (f *shadowFile) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	f.fs.wrote(f.name, b[:n], f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *shadowFile) WriteAt(b []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(b, off)
	f.fs.wrote(f.name, b[:n], off)
	return n, err
}

func (f *shadowFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(b, off)
	f.fs.read(f.name, b[:n], off)
	return n, err
}

// skipWithoutDirect skips the test when the file system of dir refuses
// O_DIRECT (tmpfs does).
func skipWithoutDirect(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "probe")
	fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0o644)
	if errors.Is(err, syscall.EINVAL) {
		t.Skipf("%s refuses O_DIRECT (tmpfs?): %v", dir, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// TestDirectIO runs random-read and random-write with direct=true on a
// local directory: the measured opens use O_DIRECT, every block read is the
// block written, and after random-write the files on disk hold exactly
// what was written.
func TestDirectIO(t *testing.T) {
	const threads, files, ops = 2, 2, 50
	for _, kind := range []string{"random-read", "random-write"} {
		t.Run(kind, func(t *testing.T) {
			base, dir := openTemp(t, false)
			skipWithoutDirect(t, dir)
			f := newShadowFS(base)
			raw := map[string]string{"threads": fmt.Sprint(threads), "files": fmt.Sprint(files),
				"file_size": "64KiB", "block_size": "4KiB", "ops": fmt.Sprint(ops), "direct": "true", "duration": "30s"}
			if kind == "random-write" {
				raw["fsync"] = "true"
			}
			spec, err := Resolve(kind, raw)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := NewRunner(f, spec, Placement{Workers: 1, Dir: "rep"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Setup(ctx); err != nil {
				t.Fatal(err)
			}
			res := r.Run(ctx)
			if res.Error != "" {
				t.Fatalf("run: %s", res.Error)
			}
			name := strings.TrimPrefix(kind, "random-")
			o := op(res.Phases[0], name)
			if o.Count != threads*ops || o.Bytes != threads*ops*4096 || o.Errors != 0 {
				t.Errorf("%s: count %d bytes %d errors %d (%s)", name, o.Count, o.Bytes, o.Errors, o.FirstError)
			}
			f.mu.Lock()
			if len(f.direct) != threads*files {
				t.Errorf("%d files opened with O_DIRECT, want %d: %v", len(f.direct), threads*files, f.direct)
			}
			for _, m := range f.mismatch {
				t.Error(m)
			}
			// What is on disk is what was written, through the page cache or not.
			for n, want := range f.data {
				got, err := os.ReadFile(filepath.Join(dir, n))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: %d bytes on disk differ from the %d written", n, len(got), len(want))
				}
			}
			f.mu.Unlock()
			if err := r.Cleanup(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// refuseDirectFS fails O_DIRECT opens with EINVAL, as tmpfs does.
type refuseDirectFS struct{ fsys.FS }

func (r refuseDirectFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	if flag&syscall.O_DIRECT != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EINVAL}
	}
	return r.FS.OpenFile(name, flag, perm)
}

// TestDirectRefused checks that a target refusing O_DIRECT fails the phase
// with an error that says so, and that an unaligned block_size is refused
// before anything runs.
func TestDirectRefused(t *testing.T) {
	base, _ := openTemp(t, false)
	spec, err := Resolve("random-read", map[string]string{"files": "1", "file_size": "16KiB", "block_size": "4KiB", "ops": "5", "direct": "true"})
	if err != nil {
		t.Fatal(err)
	}
	res := runWorkers(t, refuseDirectFS{base}, spec, 1)
	if !strings.Contains(res[0].Error, "refuses O_DIRECT") || !strings.Contains(res[0].Error, "invalid argument") {
		t.Fatalf("error %q, want one naming O_DIRECT", res[0].Error)
	}
	_, err = Resolve("random-write", map[string]string{"file_size": "16KiB", "block_size": "1000", "direct": "true"})
	if err == nil || !strings.Contains(err.Error(), "multiple of 4096") {
		t.Fatalf("unaligned block_size: %v", err)
	}
}
