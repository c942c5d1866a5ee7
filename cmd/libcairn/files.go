package main

/*
#include <stdlib.h>
#include "cairn.h"
*/
import "C"

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cairnfs/cairn/pkg/client"
)

// Open files and whole-file calls. A whole-file call (cairn_read_file,
// cairn_write_file, cairn_copy) opens, moves the bytes and closes inside
// one call, so a small file costs one crossing of the boundary.

// openFile is an open file and the session it belongs to.
type openFile struct {
	s *session
	f *client.File
}

var files table[*openFile]

// maxReadBytes bounds one whole-file read's buffer (1 GiB).
const maxReadBytes = 1 << 30

// copyBufBytes is the piece cairn_copy moves at a time.
const copyBufBytes = 4 << 20

// withFile runs f with fh's open file.
func withFile(fh C.int64_t, errOut **C.char, f func(o *openFile) (int64, error)) C.int64_t {
	return guard(errOut, func() (int64, error) {
		o, err := files.get(int64(fh))
		if err != nil {
			return 0, err
		}
		return f(o)
	})
}

// cairn_file_open opens the regular file path with open(2) flags
// (O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_APPEND) and
// permission bits mode for a created file; the result is the file's
// handle.
//
//export cairn_file_open
func cairn_file_open(h C.int64_t, path *C.char, flags C.int, mode C.uint32_t, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		f, err := s.v.OpenPath(ctx, p, int(flags), uint32(mode), s.cred)
		if err != nil {
			return 0, err
		}
		return files.add(&openFile{s: s, f: f}), nil
	})
}

// cairn_file_pread reads up to n bytes at off into buf; the result is the
// count read, 0 at the end of the file.
//
//export cairn_file_pread
func cairn_file_pread(fh C.int64_t, buf unsafe.Pointer, n C.int64_t, off C.int64_t, errOut **C.char) C.int64_t {
	return withFile(fh, errOut, func(o *openFile) (int64, error) {
		got, err := o.f.ReadAt(goBytes(buf, n), int64(off))
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return int64(got), err
	})
}

// cairn_file_pwrite writes the n bytes of buf at off (at the end for a
// file opened with O_APPEND); the result is the count written.
//
//export cairn_file_pwrite
func cairn_file_pwrite(fh C.int64_t, buf unsafe.Pointer, n C.int64_t, off C.int64_t, errOut **C.char) C.int64_t {
	return withFile(fh, errOut, func(o *openFile) (int64, error) {
		got, err := o.f.WriteAt(goBytes(buf, n), int64(off))
		return int64(got), err
	})
}

// cairn_file_size returns the file's size as this handle sees it (its own
// writes included).
//
//export cairn_file_size
func cairn_file_size(fh C.int64_t, errOut **C.char) C.int64_t {
	return withFile(fh, errOut, func(o *openFile) (int64, error) { return int64(o.f.Size()), nil })
}

// cairn_file_flush makes the handle's writes visible to every client and
// durable.
//
//export cairn_file_flush
func cairn_file_flush(fh C.int64_t, errOut **C.char) C.int64_t {
	return withFile(fh, errOut, func(o *openFile) (int64, error) {
		ctx, cancel := o.s.ctx()
		defer cancel()
		return 0, o.f.Flush(ctx)
	})
}

// cairn_file_truncate sets the file's size.
//
//export cairn_file_truncate
func cairn_file_truncate(fh C.int64_t, size C.int64_t, errOut **C.char) C.int64_t {
	return withFile(fh, errOut, func(o *openFile) (int64, error) {
		if size < 0 {
			return 0, errnoErr("truncate", syscall.EINVAL, "negative size %d", size)
		}
		ctx, cancel := o.s.ctx()
		defer cancel()
		return 0, o.f.Truncate(ctx, uint64(size))
	})
}

// cairn_file_close flushes and closes the file; the handle is gone even
// when the flush fails (its error is the result).
//
//export cairn_file_close
func cairn_file_close(fh C.int64_t, errOut **C.char) C.int64_t {
	return guard(errOut, func() (int64, error) {
		o, err := files.remove(int64(fh))
		if err != nil {
			return 0, err
		}
		ctx, cancel := o.s.ctx()
		defer cancel()
		return 0, o.f.Close(ctx)
	})
}

// cairn_read_file reads bytes [start, end) of the file path (end < 0: to
// its end; both clipped to the file) into a buffer *out; the result is its
// length.
//
//export cairn_read_file
func cairn_read_file(h C.int64_t, path *C.char, start, end C.int64_t, out **C.char, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		f, err := s.v.OpenPath(ctx, p, syscall.O_RDONLY, 0, s.cred)
		if err != nil {
			return 0, err
		}
		defer f.Close(ctx)
		size := int64(f.Size())
		lo, hi := int64(start), int64(end)
		if hi < 0 || hi > size {
			hi = size
		}
		if lo < 0 {
			return 0, errnoErr("read", syscall.EINVAL, "negative start %d", lo)
		}
		if lo >= hi {
			cBytes(nil, out)
			return 0, nil
		}
		if hi-lo > maxReadBytes {
			return 0, errnoErr("read", syscall.EFBIG, "%q: %d bytes in one read (at most %d; open the file and read it in pieces)", p, hi-lo, maxReadBytes)
		}
		buf := C.malloc(C.size_t(hi - lo))
		if buf == nil {
			return 0, errnoErr("read", syscall.ENOMEM, "%d bytes", hi-lo)
		}
		n, err := f.ReadAt(unsafe.Slice((*byte)(buf), int(hi-lo)), lo)
		if err != nil && !errors.Is(err, io.EOF) {
			C.free(buf)
			return 0, err
		}
		*out = (*C.char)(buf)
		return int64(n), nil
	})
}

// maxBatchFiles bounds the files of one cairn_read_files call.
const maxBatchFiles = 1 << 16

// batchParallel is how many files of one cairn_read_files call are read
// at once unless the caller says: enough to keep a meta and a data node
// request of each in flight on every node of a small cluster.
const batchParallel = 16

// cairn_read_files reads the whole of each of n files, whose paths lie in
// the pathsLen bytes at paths, each ended by a NUL, with up to parallel
// reads at once (0: batchParallel): a data loader's batch in one call, so
// that its files cost one crossing of the boundary and no thread of the
// caller per file. sizes (n slots) gets each file's length, or its
// negative errno when it could not be read (the others are read all the
// same); *out gets the files read, one after another in order. The result
// is the length of *out; a malformed call (n out of range, paths not n
// NUL-ended strings) fails as a whole. Each file's read has the session's
// timeout.
//
//export cairn_read_files
func cairn_read_files(h C.int64_t, paths unsafe.Pointer, pathsLen C.int64_t, n C.int64_t, parallel C.int64_t, sizes *C.int64_t, out **C.char, errOut **C.char) C.int64_t {
	return withSession(h, errOut, func(_ context.Context, s *session) (int64, error) {
		if n < 0 || n > maxBatchFiles || pathsLen < 0 || pathsLen > 1<<30 || (n > 0 && (paths == nil || sizes == nil)) {
			return 0, errnoErr("read", syscall.EINVAL, "%d files in %d bytes of paths (at most %d files)", n, pathsLen, maxBatchFiles)
		}
		names := strings.Split(string(goBytes(paths, pathsLen)), "\x00")
		if len(names) != int(n)+1 || names[n] != "" {
			return 0, errnoErr("read", syscall.EINVAL, "paths: want %d NUL-ended paths in %d bytes", n, pathsLen)
		}
		names = names[:n]
		workers := int(parallel)
		if workers <= 0 {
			workers = batchParallel
		}
		data := make([][]byte, n)
		errs := make([]error, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(workers, int(n)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					data[i], errs[i] = s.readWhole(names[i])
				}
			}()
		}
		wg.Wait()
		total := 0
		sz := unsafe.Slice((*int64)(unsafe.Pointer(sizes)), int(n))
		for i := range data {
			if errs[i] != nil {
				e := client.ErrnoOf(errs[i])
				if e == 0 {
					e = syscall.EIO
				}
				sz[i] = -int64(e)
				continue
			}
			sz[i] = int64(len(data[i]))
			total += len(data[i])
		}
		if total == 0 {
			*out = nil
			return 0, nil
		}
		buf := C.malloc(C.size_t(total))
		if buf == nil {
			return 0, errnoErr("read", syscall.ENOMEM, "%d bytes", total)
		}
		dst := unsafe.Slice((*byte)(buf), total)
		at := 0
		for i := range data {
			at += copy(dst[at:], data[i])
		}
		*out = (*C.char)(buf)
		return int64(total), nil
	})
}

// readWhole reads the whole file p, with the session's timeout.
func (s *session) readWhole(p string) ([]byte, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	f, err := s.v.OpenPath(ctx, p, syscall.O_RDONLY, 0, s.cred)
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	size := f.Size()
	if size > maxReadBytes {
		return nil, errnoErr("read", syscall.EFBIG, "%q: %d bytes in one read (at most %d)", p, size, maxReadBytes)
	}
	buf := make([]byte, size)
	got, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:got], nil
}

// cairn_write_file replaces the contents of the file path (created with
// permission bits mode if missing) by the n bytes of buf, or appends them
// when append is not 0.
//
//export cairn_write_file
func cairn_write_file(h C.int64_t, path *C.char, buf unsafe.Pointer, n C.int64_t, mode C.uint32_t, appendTo C.int, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		flags := syscall.O_WRONLY | syscall.O_CREAT | syscall.O_TRUNC
		if appendTo != 0 {
			flags = syscall.O_WRONLY | syscall.O_CREAT | syscall.O_APPEND
		}
		f, err := s.v.OpenPath(ctx, p, flags, uint32(mode), s.cred)
		if err != nil {
			return 0, err
		}
		got, err := f.WriteAt(goBytes(buf, n), 0)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		return int64(got), err
	})
}

// cairn_copy copies the file src to dst (replaced if it exists, created
// with src's permission bits if not); the result is the bytes copied.
//
//export cairn_copy
func cairn_copy(h C.int64_t, src, dst *C.char, errOut **C.char) C.int64_t {
	sp, dp := C.GoString(src), C.GoString(dst)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		a, err := s.v.StatPath(ctx, sp, s.cred)
		if err != nil {
			return 0, err
		}
		if a.IsDir() {
			return 0, errnoErr("copy", syscall.EISDIR, "%q", sp)
		}
		in, err := s.v.OpenPath(ctx, sp, syscall.O_RDONLY, 0, s.cred)
		if err != nil {
			return 0, err
		}
		defer in.Close(ctx)
		out, err := s.v.OpenPath(ctx, dp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, a.Mode&0o7777, s.cred)
		if err != nil {
			return 0, err
		}
		n, err := copyFile(in, out)
		if cerr := out.Close(ctx); err == nil {
			err = cerr
		}
		return n, err
	})
}

func copyFile(in, out *client.File) (int64, error) {
	buf := make([]byte, copyBufBytes)
	var off int64
	for size := int64(in.Size()); off < size; {
		n, err := in.ReadAt(buf, off)
		if n > 0 {
			if _, werr := out.WriteAt(buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return off, err
		}
	}
	return off, nil
}
