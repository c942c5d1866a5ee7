package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Error is the error of every Volume operation. It carries the Linux errno
// the operation fails with, so that errors.Is(err, syscall.ENOENT) holds for
// an *Error with Errno ENOENT, and the cause (a server message or a
// transport error) for humans.
type Error struct {
	Op    string        // the operation, e.g. "mkdir"
	Errno syscall.Errno // what a POSIX caller sees
	Msg   string        // context: names, inode numbers, the server's message
	Err   error         // the underlying error, if any (transport failures)
}

// Error formats the operation, the errno's text and the context.
func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s", e.Op, e.Errno.Error())
	if e.Msg != "" {
		s += " (" + e.Msg + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the errno and the cause, so that errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Errno}
	}
	return []error{e.Errno, e.Err}
}

// ErrnoOf returns the errno a POSIX caller (e.g. a FUSE server) should see
// for err: 0 for nil, the errno of an *Error or a syscall.Errno anywhere in
// the chain, ETIMEDOUT for an ended deadline, EINTR for a cancelled
// context, and EIO for anything else.
func ErrnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Errno
	}
	var n syscall.Errno
	if errors.As(err, &n) {
		return n
	}
	switch dataproto.CodeOf(err) {
	case dataproto.CodeReadOnlyClient:
		return syscall.EROFS
	case dataproto.CodePermissionDenied, dataproto.CodeNoGrant:
		return syscall.EACCES
	case dataproto.CodeVolumeFull:
		return syscall.ENOSPC
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return syscall.EACCES
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redirect.ErrNoLeader):
		return syscall.ETIMEDOUT
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	return syscall.EIO
}

func errnoErr(op string, n syscall.Errno, format string, args ...any) *Error {
	return &Error{Op: op, Errno: n, Msg: fmt.Sprintf(format, args...)}
}

// transportErr wraps a failure to reach a partition (after retries).
func transportErr(op string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Op: op, Errno: ErrnoOf(err), Err: err}
}

// checkName validates a name before any request: EINVAL or ENAMETOOLONG.
func checkName(op, name string) error {
	err := hybridindex.ValidateName(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hybridindex.ErrNameTooLong):
		return &Error{Op: op, Errno: syscall.ENAMETOOLONG, Err: err}
	}
	return &Error{Op: op, Errno: syscall.EINVAL, Err: err}
}

// isErrno reports whether err carries errno n.
func isErrno(err error, n syscall.Errno) bool { return err != nil && ErrnoOf(err) == n }
