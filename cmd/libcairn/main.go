// Command libcairn is Cairn's client SDK as a C shared library, for
// languages that load one (the Python package cairnfs loads it with
// ctypes):
//
//	go build -buildmode=c-shared -o libcairn.so ./cmd/libcairn
//
// It is a thin layer over pkg/client's stateless path API: a client is an
// open volume with the identity (uid, gid, groups) its calls act for, and
// an open file is a *client.File; both live in tables here and cross the
// boundary as int64 handles. cairn.h declares the types; the functions are
// the //export ones.
//
// Rules every export keeps:
//   - It never lets a Go panic cross into C: guard recovers and turns it
//     into -EIO with the panic's text.
//   - It fails with a negative errno (client.ErrnoOf of the SDK's error)
//     and a message the caller frees (cairn_free), never with a crash.
//   - It copies what C hands it before returning and keeps no C pointer:
//     a caller's buffer is read or written only during the call.
//   - It blocks only the calling thread: Go runs the call on that thread,
//     and the SDK's own goroutines run beside it, so C threads calling at
//     once (a Python data loader's workers) run in parallel.
package main

/*
#include <stdlib.h>
#include "cairn.h"
*/
import "C"

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cairnfs/cairn/pkg/client"
)

func main() {} // a c-shared library's main is never run

// table holds the objects of one kind behind int64 handles (1, 2, ...;
// never reused, so a stale handle fails with EBADF).
type table[T any] struct {
	mu   sync.RWMutex
	next atomic.Int64
	m    map[int64]T
}

func (t *table[T]) add(v T) int64 {
	h := t.next.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[int64]T{}
	}
	t.m[h] = v
	return h
}

func (t *table[T]) get(h int64) (T, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.m[h]
	if !ok {
		return v, noHandle(h)
	}
	return v, nil
}

// noHandle is the error for a handle the table does not hold (EBADF).
func noHandle(h int64) error {
	return &client.Error{Op: "handle", Errno: syscall.EBADF, Msg: fmt.Sprintf("no open handle %d", h)}
}

// remove takes h out of the table and returns what it held.
func (t *table[T]) remove(h int64) (T, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[h]
	if !ok {
		return v, noHandle(h)
	}
	delete(t.m, h)
	return v, nil
}

// guard runs f for an export: its result, or a negative errno with *errOut
// set to the message. A panic in f is recovered and reported as EIO.
func guard(errOut **C.char, f func() (int64, error)) (ret C.int64_t) {
	defer func() {
		if r := recover(); r != nil {
			ret = fail(errOut, syscall.EIO, fmt.Sprintf("libcairn: internal error (please report): %v\n%s", r, debug.Stack()))
		}
	}()
	n, err := f()
	if err != nil {
		e := client.ErrnoOf(err)
		if e == 0 {
			e = syscall.EIO
		}
		return fail(errOut, e, err.Error())
	}
	return C.int64_t(n)
}

func fail(errOut **C.char, e syscall.Errno, msg string) C.int64_t {
	if errOut != nil {
		*errOut = C.CString(msg)
	}
	return -C.int64_t(e)
}

// errnoErr is an error carrying errno e.
func errnoErr(op string, e syscall.Errno, format string, args ...any) error {
	return &client.Error{Op: op, Errno: e, Msg: fmt.Sprintf(format, args...)}
}

// goBytes views n bytes of C memory at p as a slice, valid during the call.
func goBytes(p unsafe.Pointer, n C.int64_t) []byte {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

// cBytes copies b into memory from C's malloc, for the caller to free.
func cBytes(b []byte, out **C.char) {
	if out == nil {
		return
	}
	*out = (*C.char)(C.CBytes(b))
}

// cairn_free releases a message or buffer the library returned.
//
//export cairn_free
func cairn_free(p unsafe.Pointer) { C.free(p) }

// cairn_version returns the library's interface version (bumped when a
// function's signature changes).
//
//export cairn_version
func cairn_version() C.int64_t { return 1 }
