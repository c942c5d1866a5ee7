package lightrpc

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// unackedTimeout is how long bytes this end sent may stay unacknowledged by
// the peer's kernel before the connection fails (TCP_USER_TIMEOUT). A peer
// cut off by the network acknowledges nothing; without this, TCP keeps
// retransmitting with a backoff that reaches minutes, so a one-way sender
// (the Raft transport) would not notice the cut, and after it heals would
// wait for the next retransmission. A paused or busy peer's kernel still
// acknowledges, so this never ends a connection to a live host.
const unackedTimeout = 10 * time.Second

// dialControl sets the options of every connection this package dials.
func dialControl(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(unackedTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}
