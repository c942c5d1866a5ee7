package dataproto

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/network"
)

// ConnOptions bound a client connection. Zero fields take the defaults.
type ConnOptions struct {
	// DialTimeout bounds connecting (TCP); default 1.5s. A live node on
	// the cluster's network accepts within a round trip, and the kernel
	// sends a lost SYN again after a second: a node that has not answered
	// the second one is taken for down, and the caller moves on to
	// another replica or partition (a read of a file with a replica in a
	// lost zone waited 3s for it before).
	DialTimeout time.Duration
	// HandshakeTimeout bounds the TLS handshake after connecting; default
	// 3s (a loaded node may take a while to sign).
	HandshakeTimeout time.Duration
	// WriteTimeout bounds writing one request; default 10s.
	WriteTimeout time.Duration
	// ReadTimeout is how long the connection waits for the next response
	// while calls are outstanding before it declares the peer dead and
	// fails them all; default 10s.
	ReadTimeout time.Duration
	// IdleTimeout closes a connection with nothing outstanding for this
	// long; default 2m.
	IdleTimeout time.Duration
	// MaxInflight bounds the calls outstanding; Start waits beyond it.
	// Default 64.
	MaxInflight int
	// TLS, when set, authenticates the connection with a mutual TLS
	// handshake with this client configuration, within HandshakeTimeout; the
	// server chooses whether the frames then travel inside TLS (auth.go).
	TLS *tls.Config
	// TLSFor, when set and not nil for the address dialled, is used in
	// place of TLS for a connection to that address: a data node gives one
	// that also checks that the peer is the node the cluster map puts there
	// (node.Env.PeerTLS).
	TLSFor func(addr string) *tls.Config
	// Network is where Dial connects (nil: the host's TCP stack).
	Network network.Network
}

func (o ConnOptions) withDefaults() ConnOptions {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 1500 * time.Millisecond
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 3 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 10 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 64
	}
	return o
}

// ErrConnClosed is the error of calls on a connection closed by Close.
var ErrConnClosed = errors.New("dataproto: connection closed")

// ErrIdle is the error of a connection closed for idleness.
var ErrIdle = errors.New("dataproto: connection idle")

// Conn is the client end of a pipelined connection. Its methods are safe
// for concurrent use; requests go on the wire in the order Start returns.
// A Conn that failed stays failed (Err): open a new one.
type Conn struct {
	nc    net.Conn
	addr  string
	opts  ConnOptions
	slots chan struct{}

	wmu  sync.Mutex // serializes writes (and so orders requests)
	hbuf [HeaderLen]byte

	mu     sync.Mutex
	calls  map[uint64]*Call
	nextID uint64
	err    error

	done chan struct{} // closed when the reader exits
}

// Dial connects to addr.
func Dial(ctx context.Context, addr string, opts ConnOptions) (*Conn, error) {
	opts = opts.withDefaults()
	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	nc, err := network.Or(opts.Network).DialContext(dctx, addr)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("data path: dial %s: %w", addr, err)
	}
	conf := opts.TLS
	if opts.TLSFor != nil {
		if c := opts.TLSFor(addr); c != nil {
			conf = c
		}
	}
	if conf != nil {
		hctx, cancel := context.WithTimeout(ctx, opts.HandshakeTimeout)
		c, err := authClient(hctx, nc, conf)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("data path: %s: %w", addr, err)
		}
		nc = c
	}
	return NewConn(nc, opts), nil
}

// NewConn runs the client end of the protocol on nc, which it owns from now
// on.
func NewConn(nc net.Conn, opts ConnOptions) *Conn {
	opts = opts.withDefaults()
	c := &Conn{
		nc: nc, addr: nc.RemoteAddr().String(), opts: opts,
		slots: make(chan struct{}, opts.MaxInflight),
		calls: map[uint64]*Call{}, done: make(chan struct{}),
	}
	_ = nc.SetReadDeadline(time.Now().Add(opts.IdleTimeout))
	go c.readLoop()
	return c
}

// Addr is the peer's address.
func (c *Conn) Addr() string { return c.addr }

// Err returns why the connection failed, or nil while it works.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection; outstanding calls fail with ErrConnClosed.
// It waits for the connection's goroutine to end.
func (c *Conn) Close() error {
	c.fail(ErrConnClosed)
	<-c.done
	return nil
}

// fail records the first error, closes the socket and fails every call.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	calls := c.calls
	c.calls = map[uint64]*Call{}
	c.mu.Unlock()
	c.nc.Close()
	for _, call := range calls {
		call.finish(Header{}, nil, fmt.Errorf("data path %s: %w", c.addr, err))
	}
}

// Request is one request to send.
type Request struct {
	Header Header
	// Payload is sent after the header; Start has written it to the socket
	// when it returns, so the caller may reuse it.
	Payload []byte
	// Prefix, if set, is sent before Payload as the start of the same
	// payload (an OpWriteChunk's fingerprint), so the caller need not copy
	// a chunk to put its fingerprint in front.
	Prefix []byte
	// KeepCRC sends Header.PayloadCRC as given (a forwarded packet keeps
	// the client's CRC end to end) instead of computing it.
	KeepCRC bool
	// Dst, if large enough, receives the response payload (a read's bytes)
	// without a copy. The caller must not touch it until Wait returns.
	Dst []byte
}

// Call is a request in flight.
type Call struct {
	c    *Conn
	id   uint64
	dst  []byte
	op   Op
	done chan struct{}

	// guarded by c.mu until done is closed
	receiving bool // the reader is filling dst
	abandoned bool
	slot      bool // holds a slot of c.slots

	resp    Header
	payload []byte
	err     error
}

// Start sends req and returns its Call. It waits (until ctx ends) while
// MaxInflight calls are outstanding. Requests are written in the order Start
// calls acquire the write lock, so one goroutine's requests keep their order.
// Start fails if the connection is broken or the write fails (the connection
// then fails as a whole).
func (c *Conn) Start(ctx context.Context, req *Request) (*Call, error) {
	if n, limit := len(req.Prefix)+len(req.Payload), PayloadLimit(req.Header.Op, 0); n > limit {
		return nil, fmt.Errorf("%w: %v request of %d bytes (limit %d)", ErrTooLarge, req.Header.Op, n, limit)
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.brokenErr()
	}
	h := req.Header
	h.Flags &^= FlagResponse
	h.Length = uint32(len(req.Prefix) + len(req.Payload))
	if !req.KeepCRC {
		h.PayloadCRC = crc32.Update(Checksum(req.Prefix), castagnoli, req.Payload)
	}
	call := &Call{c: c, dst: req.Dst, op: h.Op, done: make(chan struct{}), slot: true}

	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		<-c.slots
		return nil, fmt.Errorf("data path %s: %w", c.addr, err)
	}
	c.nextID++
	call.id = c.nextID
	h.ReqID = call.id
	first := len(c.calls) == 0
	c.calls[call.id] = call
	if first {
		// A response is due now: the reader may be waiting under the idle
		// deadline. Deadlines apply to a pending Read too.
		_ = c.nc.SetReadDeadline(time.Now().Add(c.opts.ReadTimeout))
	}
	c.mu.Unlock()

	EncodeHeader(c.hbuf[:], &h)
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	var err error
	switch {
	case h.Length == 0:
		_, err = c.nc.Write(c.hbuf[:])
	case len(req.Prefix) == 0:
		bufs := net.Buffers{c.hbuf[:], req.Payload}
		_, err = bufs.WriteTo(c.nc)
	default:
		bufs := net.Buffers{c.hbuf[:], req.Prefix, req.Payload}
		_, err = bufs.WriteTo(c.nc)
	}
	if err != nil {
		c.fail(fmt.Errorf("write %v request: %w", h.Op, err))
		return nil, fmt.Errorf("data path %s: write %v request: %w", c.addr, h.Op, err)
	}
	return call, nil
}

func (c *Conn) brokenErr() error {
	if err := c.Err(); err != nil {
		return fmt.Errorf("data path %s: %w", c.addr, err)
	}
	return fmt.Errorf("data path %s: %w", c.addr, ErrConnClosed)
}

// Do sends req and waits for its response: the response header and payload
// on success, an *Error for a response with another code than CodeOK, or
// the transport's error.
func (c *Conn) Do(ctx context.Context, req *Request) (Header, []byte, error) {
	call, err := c.Start(ctx, req)
	if err != nil {
		return Header{}, nil, err
	}
	return call.Wait(ctx)
}

// Done is closed when the call has its outcome.
func (call *Call) Done() <-chan struct{} { return call.done }

// Wait waits for the response (see Do). If ctx ends first the call is
// abandoned (its response will be discarded); if the response was already
// being received into Dst, Wait waits for that to finish (bounded by the
// connection's read timeout), so Dst is free when Wait returns.
func (call *Call) Wait(ctx context.Context) (Header, []byte, error) {
	select {
	case <-call.done:
		return call.resp, call.payload, call.err
	case <-ctx.Done():
	}
	c := call.c
	c.mu.Lock()
	if call.receiving {
		c.mu.Unlock()
		<-call.done
		return call.resp, call.payload, call.err
	}
	select {
	case <-call.done:
		c.mu.Unlock()
		return call.resp, call.payload, call.err
	default:
	}
	call.abandoned = true
	if c.calls[call.id] == call {
		delete(c.calls, call.id)
		if len(c.calls) == 0 && c.err == nil {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.opts.IdleTimeout))
		}
	}
	slot := call.slot
	call.slot = false
	c.mu.Unlock()
	if slot {
		<-c.slots
	}
	return Header{}, nil, ctx.Err()
}

// finish records the outcome and releases the call's slot. Called once,
// after the call left c.calls.
func (call *Call) finish(h Header, payload []byte, err error) {
	c := call.c
	c.mu.Lock()
	slot := call.slot
	call.slot = false
	call.resp, call.payload, call.err = h, payload, err
	c.mu.Unlock()
	if slot {
		<-c.slots
	}
	close(call.done)
}

func (c *Conn) readLoop() {
	defer close(c.done)
	var hdr [HeaderLen]byte
	var discard []byte
	for {
		if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
			c.readFailed(err)
			return
		}
		h, err := DecodeHeader(hdr[:])
		if err == nil && h.Flags&FlagResponse == 0 {
			err = fmt.Errorf("%w: a request where a response was expected", ErrBadHeader)
		}
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		call := c.calls[h.ReqID]
		if call != nil {
			delete(c.calls, h.ReqID)
			call.receiving = true
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(c.opts.ReadTimeout))
		c.mu.Unlock()

		var buf []byte
		if call != nil && h.Code == CodeOK {
			buf = call.dst
		} else if call == nil {
			if cap(discard) < int(h.Length) {
				discard = make([]byte, h.Length)
			}
			buf = discard
		}
		p, err := ReadPayload(c.nc, &h, buf)
		if err != nil && !errors.Is(err, ErrPayloadCRC) {
			if call != nil {
				call.finish(Header{}, nil, fmt.Errorf("data path %s: read %v response: %w", c.addr, h.Op, err))
			}
			c.fail(fmt.Errorf("read %v response: %w", h.Op, err))
			return
		}
		c.mu.Lock()
		if len(c.calls) == 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.opts.IdleTimeout))
		}
		c.mu.Unlock()
		if call == nil {
			continue // abandoned by its caller
		}
		switch {
		case err != nil:
			call.finish(h, nil, fmt.Errorf("data path %s: %w", c.addr, err))
		case h.Code != CodeOK:
			call.finish(h, nil, responseError(&h, p))
		default:
			call.finish(h, p, nil)
		}
	}
}

// readFailed classifies the reader's error: a timeout with nothing
// outstanding is idleness, anything else breaks the calls.
func (c *Conn) readFailed(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.mu.Lock()
		idle := len(c.calls) == 0
		c.mu.Unlock()
		if idle {
			c.fail(ErrIdle)
			return
		}
		c.fail(fmt.Errorf("no response within %s: %w", c.opts.ReadTimeout, err))
		return
	}
	c.fail(fmt.Errorf("read: %w", err))
}
