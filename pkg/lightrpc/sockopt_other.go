//go:build !linux

package lightrpc

import "syscall"

// dialControl sets nothing where TCP_USER_TIMEOUT is not known.
func dialControl(_, _ string, _ syscall.RawConn) error { return nil }
