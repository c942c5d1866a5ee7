package lightrpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/network"
)

// GRPCDialOptions returns the gRPC dial options that make a gRPC client
// connection dial on n: none for the host's TCP stack (gRPC's own dialer,
// proxy settings included), a context dialer for any other network.
func GRPCDialOptions(n network.Network) []grpc.DialOption {
	if network.IsOS(n) {
		return nil
	}
	return []grpc.DialOption{grpc.WithContextDialer(network.DialFunc(n))}
}

// ClientOptions configure a Conn.
type ClientOptions struct {
	// MaxFrameBytes bounds one inbound frame (default DefaultMaxFrameBytes).
	MaxFrameBytes int
	// DialTimeout bounds connecting and the preface exchange when the call's
	// context allows longer (default 5 s).
	DialTimeout time.Duration
	// GRPC opens the gRPC connection used for streaming calls and for a
	// server that does not speak this protocol; it is called at most once,
	// at the first such call.
	GRPC func() (*grpc.ClientConn, error)
	// TLS, when set, runs the connection over TLS with this configuration
	// (the handshake within DialTimeout, before the preface).
	TLS *tls.Config
	// Network is where the connection is dialed (nil: the host's TCP
	// stack, with this package's socket options).
	Network network.Network
}

// Conn is a client connection to one address. It implements
// grpc.ClientConnInterface, so the generated gRPC clients run on it
// unchanged: unary calls go over one multiplexed TCP connection in this
// protocol, streaming calls over gRPC. It connects on the first call and
// again after a failure. A server that answers the preface with anything
// else is called through gRPC for the next minute. Safe for concurrent use.
type Conn struct {
	addr string
	opts ClientOptions

	live atomic.Pointer[session] // the session in use; lock-free fast path

	mu        sync.Mutex
	sess      *session
	dialing   chan struct{} // closed when the connection attempt in progress ends
	dialErr   error         // how the last attempt ended
	grpcUntil time.Time     // a server that did not speak this protocol
	closed    bool

	grpcOnce sync.Once
	grpcConn *grpc.ClientConn
	grpcErr  error
}

// grpcOnlyFor is how long an address that answered the preface with
// something else is called through gRPC before the protocol is tried again
// (a server upgraded meanwhile).
const grpcOnlyFor = time.Minute

// Dial returns a connection to addr; it connects at the first call.
func Dial(addr string, opts ClientOptions) *Conn {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	return &Conn{addr: addr, opts: opts}
}

// Addr returns the address the connection goes to.
func (c *Conn) Addr() string { return c.addr }

// Invoke makes a unary call, as grpc.ClientConn.Invoke does: errors are
// gRPC statuses (UNAVAILABLE when the server cannot be reached or the
// connection broke, DEADLINE_EXCEEDED or CANCELED when ctx ended), and a
// grpc.Trailer option receives the server's trailer.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	in, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return status.Errorf(codes.Internal, "%s: %T or %T is no protocol buffer", method, args, reply)
	}
	s, gc, err := c.session(ctx)
	if err != nil {
		return err
	}
	if gc != nil {
		return gc.Invoke(ctx, method, args, reply, opts...)
	}
	return s.invoke(ctx, method, in, out, opts)
}

// Notify sends a one-way call of method with args: the server runs it, in
// the order of this connection's one-way calls, and answers nothing. A nil
// error means the call was handed to the connection, not that it arrived
// or ran; it is lost if the connection breaks first. Notify never
// connects: it fails with UNAVAILABLE when the connection has no live
// session, so that a caller that learned through a unary call that the
// server takes one-way calls (and which methods) learns it again, with a
// unary call, after every reconnect; a server that does not take them
// closes the connection, which the next Notify reports. (A Conn whose
// unary calls other goroutines make too may reconnect in between: such a
// caller cannot tell which session its unary call went over.) ctx bounds
// the call's run on the server, if it has a deadline.
func (c *Conn) Notify(ctx context.Context, method string, args proto.Message) error {
	s := c.live.Load()
	if s == nil || s.dead.Load() {
		return status.Errorf(codes.Unavailable, "%s: no live connection to %s for a one-way call", method, c.addr)
	}
	return s.notify(ctx, method, args)
}

// NewStream opens a streaming call over gRPC.
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	gc, err := c.grpcClient()
	if err != nil {
		return nil, err
	}
	return gc.NewStream(ctx, desc, method, opts...)
}

// Close closes the connection; calls in flight fail with UNAVAILABLE.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.closed = true
	s := c.sess
	c.sess = nil
	c.live.Store(nil)
	c.mu.Unlock()
	if s != nil {
		s.fail(errors.New("connection closed by the client"))
	}
	c.grpcOnce.Do(func() { c.grpcErr = status.Error(codes.Canceled, "connection closed by the client") })
	if c.grpcConn != nil {
		return c.grpcConn.Close()
	}
	return nil
}

func (c *Conn) grpcClient() (*grpc.ClientConn, error) {
	c.grpcOnce.Do(func() {
		if c.opts.GRPC == nil {
			c.grpcErr = status.Errorf(codes.Unimplemented, "no gRPC connection to %s for this call", c.addr)
			return
		}
		c.grpcConn, c.grpcErr = c.opts.GRPC()
	})
	return c.grpcConn, c.grpcErr
}

// session returns the live session, connecting if there is none, or the
// gRPC connection to use instead. One connection attempt runs at a time;
// calls that arrive meanwhile wait for it (or their context) and share its
// outcome, so a dead address costs one attempt, not one per caller.
func (c *Conn) session(ctx context.Context) (*session, *grpc.ClientConn, error) {
	if s := c.live.Load(); s != nil && !s.dead.Load() {
		return s, nil, nil
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, nil, status.Error(codes.Canceled, "connection closed by the client")
		}
		if s := c.sess; s != nil && s.alive() {
			c.mu.Unlock()
			return s, nil, nil
		}
		if time.Now().Before(c.grpcUntil) {
			c.mu.Unlock()
			gc, err := c.grpcClient()
			return nil, gc, err
		}
		if wait := c.dialing; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, nil, status.FromContextError(ctx.Err()).Err()
			}
			c.mu.Lock()
			err := c.dialErr
			c.mu.Unlock()
			if err != nil {
				return nil, nil, status.Errorf(codes.Unavailable, "connection error: %v", err)
			}
			continue
		}
		done := make(chan struct{})
		c.dialing = done
		c.mu.Unlock()

		s, err := c.connect(ctx)
		c.mu.Lock()
		c.dialing, c.dialErr = nil, err
		notLight := errors.Is(err, errNotLightRPC)
		if notLight {
			c.grpcUntil = time.Now().Add(grpcOnlyFor)
			c.dialErr = nil // waiters look again and take gRPC
		}
		if err == nil {
			c.sess = s
			c.live.Store(s)
		}
		close(done)
		c.mu.Unlock()
		switch {
		case notLight:
			continue
		case err != nil && ctx.Err() != nil:
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		case err != nil:
			return nil, nil, status.Errorf(codes.Unavailable, "connection error: %v", err)
		}
		return s, nil, nil
	}
}

var errNotLightRPC = errors.New("server does not speak the protocol")

func (c *Conn) connect(ctx context.Context) (*session, error) {
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	var nc net.Conn
	var err error
	if network.IsOS(c.opts.Network) {
		d := net.Dialer{Control: dialControl}
		nc, err = d.DialContext(dctx, "tcp", c.addr)
	} else {
		nc, err = c.opts.Network.DialContext(dctx, c.addr)
	}
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	deadline, _ := dctx.Deadline()
	_ = nc.SetDeadline(deadline)
	if c.opts.TLS != nil {
		tc := tls.Client(nc, c.opts.TLS)
		if err := tc.HandshakeContext(dctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", c.addr, err)
		}
		nc = tc
	}
	var head [len(Preface)]byte
	if _, err = nc.Write(Preface[:]); err == nil {
		_, err = io.ReadFull(nc, head[:])
	}
	if err == nil && !bytes.Equal(head[:], Preface[:]) {
		err = errNotLightRPC
	}
	if err != nil && !errors.Is(err, errNotLightRPC) && dctx.Err() == nil {
		// Closed on us without an answer: a gRPC-only server drops a
		// connection whose preface it does not know.
		var ne net.Error
		var alert tls.AlertError // the server refused this client's certificate
		if !errors.As(err, &alert) && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || (errors.As(err, &ne) && !ne.Timeout())) {
			err = fmt.Errorf("%w: %v", errNotLightRPC, err)
		}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	s := &session{c: nc, w: newWriter(nc), pending: map[uint64]chan response{}, maxFrame: c.opts.MaxFrameBytes}
	go s.read()
	return s, nil
}

// session is one TCP connection in this protocol.
type session struct {
	c        net.Conn
	w        *writer
	maxFrame int

	dead atomic.Bool // set once err is
	// heard is when the last frame arrived (unix nanoseconds).
	heard atomic.Int64

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan response
	err     error // why the session ended; nil while it is alive
}

func (s *session) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil
}

// callTimeout is the time ctx leaves a call (0: no deadline), or the
// error of a call whose deadline has passed.
func callTimeout(ctx context.Context) (time.Duration, error) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, nil
	}
	if timeout := time.Until(d); timeout > 0 {
		return timeout, nil
	}
	return 0, status.FromContextError(context.DeadlineExceeded).Err()
}

func (s *session) invoke(ctx context.Context, method string, in, out proto.Message, opts []grpc.CallOption) error {
	timeout, err := callTimeout(ctx)
	if err != nil {
		return err
	}
	ch := make(chan response, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return status.Errorf(codes.Unavailable, "connection error: %v", err)
	}
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.mu.Unlock()

	buf := getBuffer()
	b, err := appendRequest(*buf, id, timeout, method, func(b []byte) ([]byte, error) {
		return proto.MarshalOptions{}.MarshalAppend(b, in)
	})
	if err != nil {
		putBuffer(buf)
		s.forget(id)
		return status.Errorf(codes.Internal, "%s: encode request: %v", method, err)
	}
	err = s.w.send(b)
	*buf = b[:0]
	putBuffer(buf)
	if err != nil {
		s.fail(err)
		s.forget(id)
		return status.Errorf(codes.Unavailable, "connection error: %v", err)
	}

	sent := time.Now()
	var r response
	select {
	case r = <-ch:
	case <-ctx.Done():
		if s.forget(id) {
			cb := getBuffer()
			*cb = appendCancel(*cb, id)
			_ = s.w.send(*cb) // best effort: the server's deadline ends it too
			putBuffer(cb)
			s.checkSilence(sent, ctx.Err())
			return status.FromContextError(ctx.Err()).Err()
		}
		r = <-ch // answered meanwhile
	}
	if r.code == codeBroken {
		return status.Errorf(codes.Unavailable, "connection error: %s", r.message)
	}
	for _, o := range opts {
		if t, ok := o.(grpc.TrailerCallOption); ok && len(r.trailer) > 0 {
			*t.TrailerAddr = metadata.Pairs(r.trailer...)
		}
	}
	if r.code != 0 {
		return status.Error(codes.Code(r.code), r.message)
	}
	if err := proto.Unmarshal(r.payload, out); err != nil {
		return status.Errorf(codes.Internal, "%s: decode response: %v", method, err)
	}
	return nil
}

func (s *session) notify(ctx context.Context, method string, in proto.Message) error {
	timeout, err := callTimeout(ctx)
	if err != nil {
		return err
	}
	buf := getBuffer()
	defer putBuffer(buf)
	// Id 0: no unary call uses it (they count from 1), and nothing
	// answers a one-way call.
	b, err := appendCall(*buf, kindNotify, 0, timeout, method, func(b []byte) ([]byte, error) {
		return proto.MarshalOptions{}.MarshalAppend(b, in)
	})
	if err != nil {
		return status.Errorf(codes.Internal, "%s: encode request: %v", method, err)
	}
	*buf = b[:0]
	if err := s.w.send(b); err != nil {
		s.fail(err)
		return status.Errorf(codes.Unavailable, "connection error: %v", err)
	}
	return nil
}

// codeBroken marks a response made up by the client for a call whose
// connection ended; no server sends it (gRPC codes end at 16).
const codeBroken = 1 << 31

// forget drops call id; false when its answer was already delivered.
func (s *session) forget(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[id]
	delete(s.pending, id)
	return ok
}

// read delivers answers until the connection ends.
func (s *session) read() {
	r := bufio.NewReaderSize(s.c, 64<<10)
	for {
		f, err := readFrame(r, s.maxFrame)
		if err == nil && f.kind != kindResponse {
			err = fmt.Errorf("%w: kind %d from a server", errMalformed, f.kind)
		}
		var resp response
		if err == nil {
			s.heard.Store(time.Now().UnixNano())
			resp, err = decodeResponse(f.body)
		}
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		ch := s.pending[f.id]
		delete(s.pending, f.id)
		s.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// Silence: a call must have waited silentFor, and then nothing at all be
// heard on its connection for silenceGrace more, for the connection to be
// given up. The grace lets a live server's own answer at the deadline it
// was given (it ends the call then) arrive, so that a slow server keeps its
// connection.
const (
	silentFor    = 2 * time.Second
	silenceGrace = time.Second
)

// checkSilence ends the session when a call that ran out of time (end)
// after waiting at least silentFor since sent hears nothing at all on the
// connection for silenceGrace more: the peer is cut off, paused or gone
// without a reset. TCP would keep such a connection and, once the path is
// back, resend only at its next retransmission, which backs off to
// minutes; a new connection works at once.
func (s *session) checkSilence(sent time.Time, end error) {
	if !errors.Is(end, context.DeadlineExceeded) || time.Since(sent) < silentFor {
		return
	}
	time.AfterFunc(silenceGrace, func() {
		if s.heard.Load() < sent.UnixNano() {
			s.fail(fmt.Errorf("no answer from the server for %v", time.Since(sent).Round(time.Millisecond)))
		}
	})
}

// fail ends the session: every call in flight fails with UNAVAILABLE and
// the next call connects again.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("connection closed by the server")
		}
		s.err = err
		s.dead.Store(true)
	}
	pending := s.pending
	s.pending = map[uint64]chan response{}
	msg := s.err.Error()
	s.mu.Unlock()
	s.c.Close()
	for _, ch := range pending {
		ch <- response{code: codeBroken, message: msg}
	}
}
