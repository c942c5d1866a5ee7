package dataproto

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sendFile sends n bytes of f from off to nc with sendfile(2), passing the
// offset explicitly. (io.Copy from an *os.File to a *net.TCPConn also uses
// sendfile, but from the file's shared position: an extent file serves many
// readers at once, so the position must not be used.) It waits for the
// socket to drain under nc's write deadline. handled is false, with nothing
// sent, when nc or f cannot be used with sendfile; the caller then copies.
func sendFile(nc net.Conn, f *os.File, off, n int64) (sent int64, err error, handled bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, nil, false
	}
	rc, rerr := sc.SyscallConn()
	fc, ferr := f.SyscallConn()
	if rerr != nil || ferr != nil {
		return 0, nil, false
	}
	var serr error
	cerr := fc.Control(func(infd uintptr) {
		handled = true
		werr := rc.Write(func(outfd uintptr) bool {
			for sent < n {
				chunk := int(min(n-sent, 1<<30))
				m, err := unix.Sendfile(int(outfd), int(infd), &off, chunk)
				if m > 0 {
					sent += int64(m)
				}
				switch {
				case errors.Is(err, unix.EAGAIN):
					return false // wait until the socket is writable
				case errors.Is(err, unix.EINTR):
					continue
				case err != nil:
					serr = os.NewSyscallError("sendfile", err)
					return true
				case m == 0:
					serr = io.ErrUnexpectedEOF // the file is shorter than promised
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if cerr != nil && !handled {
		return 0, nil, false
	}
	if serr == nil {
		serr = cerr
	}
	return sent, serr, handled
}
