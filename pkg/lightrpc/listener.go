package lightrpc

import (
	"net"
	"sync"
)

// chanListener is a net.Listener whose connections are pushed to it: the
// connections of a shared port that are not Cairn's protocol, for the gRPC
// server.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn

	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to Accept; false when the listener is closed.
func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// prefixConn replays the bytes read to tell the protocol before the rest of
// the connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

// Unwrap returns the connection the bytes come from (a *tls.Conn on a TLS
// listener), for credentials that read its state.
func (c *prefixConn) Unwrap() net.Conn { return c.Conn }

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
