// Package simnet is a simulated TCP network for running a whole Cairn
// cluster in one process: every simulated host gets a network.Network whose
// listeners and connections live in memory, and the test cuts, slows and
// heals the links between hosts and kills a host's connections as a crash
// of its process would.
//
// It models what TCP gives the code above it, not packets:
//
//   - A connection is two ordered byte streams. Bytes are never lost,
//     duplicated or reordered within a stream; a cut link holds them (as
//     TCP retransmits dropped segments) and delivers them when it heals.
//   - A link is directed. A one-way cut from A to B holds A's bytes to B
//     while B's bytes reach A. A dial needs both directions (the SYN and
//     its answer): across a cut it waits until the cut heals or the
//     dial's context ends, as a dial whose packets are dropped does.
//   - A link may delay its bytes: each write arrives the delay after it
//     was made, and never before an earlier write on the same stream.
//   - Kill ends a host's connections as the death of its process does:
//     the peers read the bytes already sent and then EOF, and their
//     writes fail with ECONNRESET; dials to an address nobody listens on
//     are refused at once.
//
// Every wait (a read, an accept, a dial across a cut, a write into a full
// stream) is a sync.Cond wait or a timer, so inside a testing/synctest
// bubble the simulated cluster's goroutines are durably blocked whenever
// they wait for the network, and the bubble's clock moves on.
//
// Messages are not dropped, duplicated or reordered one by one: the code
// above runs over TCP and never sees that. Reordering between connections
// comes from links with different delays.
package simnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/network"
)

// streamBuffer bounds the bytes written and not yet read on one stream: a
// writer past it waits, as a full socket buffer makes it.
const streamBuffer = 4 << 20

// Net is one simulated network. Its zero value is not usable; use New.
type Net struct {
	// mu guards everything below and every stream's state: the network is
	// for tests, and one lock keeps its rules easy to check.
	mu        sync.Mutex
	listeners map[netip.AddrPort]*listener
	cut       map[link]bool
	delay     map[link]time.Duration
	streams   map[*stream]struct{} // open streams, for Kill and heals
	down      map[netip.Addr]bool  // hosts whose process is dead (Crash)
	nextPort  map[netip.Addr]uint16
	changed   *sync.Cond // broadcast when links heal (dials across a cut wait on it)
}

type link struct{ from, to netip.Addr }

// New returns an empty network without cuts or delays.
func New() *Net {
	n := &Net{
		listeners: map[netip.AddrPort]*listener{},
		cut:       map[link]bool{},
		delay:     map[link]time.Duration{},
		streams:   map[*stream]struct{}{},
		nextPort:  map[netip.Addr]uint16{},
		down:      map[netip.Addr]bool{},
	}
	n.changed = sync.NewCond(&n.mu)
	return n
}

// Host returns the network as the host with address ip sees it. ip must be
// an IP address literal (gRPC resolves literals without a DNS lookup).
func (n *Net) Host(ip string) (network.Network, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, fmt.Errorf("simulated host %q: %w", ip, err)
	}
	return &host{n: n, addr: a}, nil
}

// MustHost is Host for addresses a test writes down.
func (n *Net) MustHost(ip string) network.Network {
	h, err := n.Host(ip)
	if err != nil {
		panic(err)
	}
	return h
}

// Cut holds every byte from host from to host to until Heal, and makes
// dials between them wait. Hosts are IP addresses as given to Host.
func (n *Net) Cut(from, to string) { n.setCut(from, to, true) }

// Heal undoes a Cut of the link from host from to host to: held bytes
// arrive (after the link's delay) and waiting dials go on.
func (n *Net) Heal(from, to string) { n.setCut(from, to, false) }

func (n *Net) setCut(from, to string, cut bool) {
	l := link{netip.MustParseAddr(from), netip.MustParseAddr(to)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if cut {
		n.cut[l] = true
		return
	}
	delete(n.cut, l)
	n.wakeAll()
}

// HealAll heals every cut and removes every delay.
func (n *Net) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.delay)
	n.wakeAll()
}

// Cuts returns the links cut now, as from -> to pairs.
func (n *Net) Cuts() [][2]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out [][2]string
	for l := range n.cut {
		out = append(out, [2]string{l.from.String(), l.to.String()})
	}
	slices.SortFunc(out, func(a, b [2]string) int {
		if c := compareStrings(a[0], b[0]); c != 0 {
			return c
		}
		return compareStrings(a[1], b[1])
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// SetDelay makes bytes from host from to host to arrive d after they are
// written (0 removes the delay). Bytes written before keep their time.
func (n *Net) SetDelay(from, to string, d time.Duration) {
	l := link{netip.MustParseAddr(from), netip.MustParseAddr(to)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if d <= 0 {
		delete(n.delay, l)
	} else {
		n.delay[l] = d
	}
}

// Kill ends every connection and listener of host ip, as the death of the
// process that owned them: peers read what was sent and then EOF, their
// writes fail, and dials to the host are refused until something listens
// there again. The host's own goroutines get net.ErrClosed.
func (n *Net) Kill(ip string) {
	a := netip.MustParseAddr(ip)
	n.mu.Lock()
	defer n.mu.Unlock()
	for ap, l := range n.listeners {
		if ap.Addr() == a {
			l.closeLocked()
		}
	}
	for s := range n.streams {
		switch {
		case s.from == a: // the dead process wrote this: the peer reads the rest, then EOF
			s.finish()
		case s.to == a: // the dead process read this: the peer's writes fail
			s.readerGone = true
			s.localClosed = true
			s.forget()
		}
		s.cond.Broadcast()
	}
}

// Crash is Kill, and keeps the host dead until Restart: what is left of
// the dead process (goroutines a test stops after the fact) can neither
// listen nor dial, and dials to it are refused.
func (n *Net) Crash(ip string) {
	n.mu.Lock()
	n.down[netip.MustParseAddr(ip)] = true
	n.mu.Unlock()
	n.Kill(ip)
}

// Restart lets a crashed host listen and dial again.
func (n *Net) Restart(ip string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.down, netip.MustParseAddr(ip))
}

// wakeAll wakes every waiter, after a heal. Callers hold n.mu.
func (n *Net) wakeAll() {
	n.changed.Broadcast()
	for s := range n.streams {
		s.cond.Broadcast()
	}
}

// open reports whether bytes flow from one host to another now. Callers
// hold n.mu.
func (n *Net) open(from, to netip.Addr) bool { return !n.cut[link{from, to}] }

// host is one simulated host's view of the network.
type host struct {
	n    *Net
	addr netip.Addr
}

func (h *host) Listen(addr string) (net.Listener, error) {
	ap, err := h.parse("listen", addr)
	if err != nil {
		return nil, err
	}
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down[h.addr] {
		return nil, &net.OpError{Op: "listen", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: errCrashed}
	}
	if ap.Port() == 0 {
		p := n.nextPort[ap.Addr()]
		if p < 40000 {
			p = 40000
		}
		for n.listeners[netip.AddrPortFrom(ap.Addr(), p)] != nil {
			p++
		}
		n.nextPort[ap.Addr()] = p + 1
		ap = netip.AddrPortFrom(ap.Addr(), p)
	}
	if n.listeners[ap] != nil {
		return nil, &net.OpError{Op: "listen", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: syscall.EADDRINUSE}
	}
	l := &listener{n: n, addr: ap}
	l.cond = sync.NewCond(&n.mu)
	n.listeners[ap] = l
	return l, nil
}

// parse reads addr, which must be on this host (or unspecified, meaning
// this host).
func (h *host) parse(op, addr string) (netip.AddrPort, error) {
	hs, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, &net.OpError{Op: op, Net: "tcp", Err: err}
	}
	var port uint16
	if ps != "" {
		var p int
		if _, err := fmt.Sscanf(ps, "%d", &p); err != nil || p < 0 || p > 65535 {
			return netip.AddrPort{}, &net.OpError{Op: op, Net: "tcp", Err: fmt.Errorf("bad port %q", ps)}
		}
		port = uint16(p)
	}
	a := h.addr
	if hs != "" {
		if a, err = netip.ParseAddr(hs); err != nil {
			return netip.AddrPort{}, &net.OpError{Op: op, Net: "tcp", Err: fmt.Errorf("simulated hosts have IP addresses, not %q", hs)}
		}
		if op == "listen" && a.IsUnspecified() {
			a = h.addr
		}
	}
	if op == "listen" && a != h.addr {
		return netip.AddrPort{}, &net.OpError{Op: op, Net: "tcp", Source: net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.addr, 0)), Addr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, port)), Err: syscall.EADDRNOTAVAIL}
	}
	return netip.AddrPortFrom(a, port), nil
}

func (h *host) DialContext(ctx context.Context, addr string) (net.Conn, error) {
	to, err := h.parse("dial", addr)
	if err != nil {
		return nil, err
	}
	n := h.n
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(to), Err: err}
	}
	// A dial across a cut waits for the heal or the context: the SYN or
	// its answer is lost and retransmitted.
	stop := context.AfterFunc(ctx, func() {
		n.mu.Lock()
		n.changed.Broadcast()
		n.mu.Unlock()
	})
	defer stop()
	n.mu.Lock()
	for !(n.open(h.addr, to.Addr()) && n.open(to.Addr(), h.addr)) {
		if err := ctx.Err(); err != nil {
			n.mu.Unlock()
			return nil, opErr(err)
		}
		n.changed.Wait()
	}
	rtt := n.delay[link{h.addr, to.Addr()}] + n.delay[link{to.Addr(), h.addr}]
	n.mu.Unlock()
	if rtt > 0 {
		t := time.NewTimer(rtt)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, opErr(ctx.Err())
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down[h.addr] {
		return nil, opErr(errCrashed)
	}
	l := n.listeners[to]
	if l == nil || l.closed {
		return nil, opErr(syscall.ECONNREFUSED)
	}
	p := n.nextPort[h.addr]
	if p < 40000 {
		p = 40000
	}
	n.nextPort[h.addr] = p + 1
	local := netip.AddrPortFrom(h.addr, p)
	out := n.newStream(h.addr, to.Addr())
	in := n.newStream(to.Addr(), h.addr)
	client := &conn{n: n, local: local, remote: to, in: in, out: out}
	server := &conn{n: n, local: to, remote: local, in: out, out: in}
	l.backlog = append(l.backlog, server)
	l.cond.Broadcast()
	return client, nil
}

// errCrashed is what a crashed host's leftovers get when they try the
// network.
var errCrashed = errors.New("simulated host crashed")

// ErrClosed is returned by operations on a closed connection or listener.
var ErrClosed = net.ErrClosed

type listener struct {
	n       *Net
	addr    netip.AddrPort
	cond    *sync.Cond
	backlog []*conn
	closed  bool
}

func (l *listener) Accept() (net.Conn, error) {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	for len(l.backlog) == 0 && !l.closed {
		l.cond.Wait()
	}
	if l.closed {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: ErrClosed}
	}
	c := l.backlog[0]
	l.backlog = l.backlog[1:]
	return c, nil
}

func (l *listener) Close() error {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if l.closed {
		return &net.OpError{Op: "close", Net: "tcp", Addr: l.Addr(), Err: ErrClosed}
	}
	l.closeLocked()
	return nil
}

// closeLocked stops listening; connections not yet accepted are reset.
func (l *listener) closeLocked() {
	l.closed = true
	if l.n.listeners[l.addr] == l {
		delete(l.n.listeners, l.addr)
	}
	for _, c := range l.backlog {
		c.closeLocked()
	}
	l.backlog = nil
	l.cond.Broadcast()
}

func (l *listener) Addr() net.Addr { return net.TCPAddrFromAddrPort(l.addr) }

// stream is one direction of a connection.
type stream struct {
	n        *Net
	from, to netip.Addr
	cond     *sync.Cond
	chunks   []chunk
	buffered int
	// eofAt is when the writer's FIN arrives (zero: not sent).
	eofAt time.Time
	eof   bool
	// readerGone: nobody reads any more (the reading side closed or its
	// process died); writes fail with ECONNRESET.
	readerGone bool
	// localClosed: the reading side closed its end; its reads fail.
	localClosed bool
	lastAt      time.Time
	readDL      time.Time
	writeDL     time.Time
}

type chunk struct {
	b  []byte
	at time.Time // when it arrives
}

// newStream registers a stream from one host to another. Callers hold n.mu.
func (n *Net) newStream(from, to netip.Addr) *stream {
	s := &stream{n: n, from: from, to: to}
	s.cond = sync.NewCond(&n.mu)
	n.streams[s] = struct{}{}
	return s
}

// arrival is when bytes written now arrive: after the link's delay, and not
// before bytes written earlier. Callers hold n.mu.
func (s *stream) arrival() time.Time {
	at := time.Now()
	if d := s.n.delay[link{s.from, s.to}]; d > 0 {
		at = at.Add(d)
		time.AfterFunc(d, s.wake)
	}
	if at.Before(s.lastAt) {
		at = s.lastAt
	}
	s.lastAt = at
	return at
}

func (s *stream) wake() {
	s.n.mu.Lock()
	s.cond.Broadcast()
	s.n.mu.Unlock()
}

// finish sends the writer's FIN. Callers hold n.mu.
func (s *stream) finish() {
	if !s.eof {
		s.eof = true
		s.eofAt = s.arrival()
	}
	s.forget()
}

// forget drops the stream from the network's set once neither side can
// use it any more. Callers hold n.mu.
func (s *stream) forget() {
	if s.eof && s.localClosed {
		delete(s.n.streams, s)
	}
}

// waitUntil arranges a wake-up at t (a deadline). Callers hold n.mu.
func (s *stream) waitUntil(t time.Time) {
	if !t.IsZero() {
		time.AfterFunc(time.Until(t), s.wake)
	}
}

// conn is one end of a connection.
type conn struct {
	n             *Net
	local, remote netip.AddrPort
	in, out       *stream
	closed        bool
}

var errTimeout = os.ErrDeadlineExceeded

func (c *conn) Read(p []byte) (int, error) {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	s := c.in
	armed := time.Time{}
	for {
		if c.closed || s.localClosed {
			return 0, c.opErr("read", ErrClosed)
		}
		now := time.Now()
		deliverable := n.open(s.from, s.to)
		if deliverable && len(s.chunks) > 0 && !s.chunks[0].at.After(now) {
			k := 0
			for k < len(p) && len(s.chunks) > 0 && !s.chunks[0].at.After(now) {
				m := copy(p[k:], s.chunks[0].b)
				k += m
				s.buffered -= m
				if m == len(s.chunks[0].b) {
					s.chunks = s.chunks[1:]
				} else {
					s.chunks[0].b = s.chunks[0].b[m:]
				}
			}
			s.cond.Broadcast() // writers waiting for room
			return k, nil
		}
		if deliverable && len(s.chunks) == 0 && s.eof && !s.eofAt.After(now) {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		if !s.readDL.IsZero() && !now.Before(s.readDL) {
			return 0, c.opErr("read", errTimeout)
		}
		if !s.readDL.Equal(armed) {
			armed = s.readDL
			s.waitUntil(armed)
		}
		s.cond.Wait()
	}
}

func (c *conn) Write(p []byte) (int, error) {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	s := c.out
	armed := time.Time{}
	written := 0
	for written < len(p) {
		if c.closed {
			return written, c.opErr("write", ErrClosed)
		}
		if s.readerGone {
			return written, c.opErr("write", syscall.ECONNRESET)
		}
		if s.eof {
			return written, c.opErr("write", syscall.EPIPE)
		}
		now := time.Now()
		if !s.writeDL.IsZero() && !now.Before(s.writeDL) {
			return written, c.opErr("write", errTimeout)
		}
		room := streamBuffer - s.buffered
		if room <= 0 {
			if !s.writeDL.Equal(armed) {
				armed = s.writeDL
				s.waitUntil(armed)
			}
			s.cond.Wait()
			continue
		}
		m := min(room, len(p)-written)
		b := make([]byte, m)
		copy(b, p[written:written+m])
		s.chunks = append(s.chunks, chunk{b: b, at: s.arrival()})
		s.buffered += m
		written += m
		s.cond.Broadcast()
	}
	return written, nil
}

func (c *conn) Close() error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	if c.closed {
		return c.opErr("close", ErrClosed)
	}
	c.closeLocked()
	return nil
}

// closeLocked closes this end: the peer reads what was written, then EOF;
// what the peer writes from now on is refused. Callers hold n.mu.
func (c *conn) closeLocked() {
	c.closed = true
	c.out.finish()
	c.in.readerGone = true
	c.in.localClosed = true
	c.in.forget()
	c.in.cond.Broadcast()
	c.out.cond.Broadcast()
}

func (c *conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

func (c *conn) LocalAddr() net.Addr  { return net.TCPAddrFromAddrPort(c.local) }
func (c *conn) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(c.remote) }

func (c *conn) SetDeadline(t time.Time) error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.in.readDL, c.out.writeDL = t, t
	c.in.cond.Broadcast()
	c.out.cond.Broadcast()
	return nil
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.in.readDL = t
	c.in.cond.Broadcast()
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.out.writeDL = t
	c.out.cond.Broadcast()
	return nil
}
