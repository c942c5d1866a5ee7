package lightrpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Interceptor wraps every call, as a gRPC server's unary interceptor
	// does (metrics); nil: none.
	Interceptor grpc.UnaryServerInterceptor
	// MaxFrameBytes bounds one inbound frame (default DefaultMaxFrameBytes).
	MaxFrameBytes int
	// MaxConns bounds the connections served at once (default 4096);
	// past it new ones are closed at once.
	MaxConns int
	// Log receives connection-level failures (default slog.Default()).
	Log *slog.Logger
}

// Server serves the unary methods of the gRPC services registered with it.
// Streaming methods are left to the gRPC server that shares the port (see
// Serve). Safe for concurrent use.
type Server struct {
	opts    ServerOptions
	methods map[string]method // by full name, "/pkg.Service/Method"

	work     chan func()   // hands a call to an idle worker
	done     chan struct{} // closed when the server stops: idle workers exit
	mu       sync.Mutex
	lis      map[net.Listener]struct{}
	conns    map[*serverConn]struct{}
	stopping bool
	calls    sync.WaitGroup // calls being handled
	serving  sync.WaitGroup // connection readers and accept loops
}

type method struct {
	impl    any
	handler grpc.MethodHandler
}

// NewServer returns a server with no services.
func NewServer(opts ServerOptions) *Server {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 4096
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Server{
		opts:    opts,
		methods: map[string]method{},
		work:    make(chan func()),
		done:    make(chan struct{}),
		lis:     map[net.Listener]struct{}{},
		conns:   map[*serverConn]struct{}{},
	}
}

// RegisterService registers the unary methods of sd, served by impl; it makes
// Server a grpc.ServiceRegistrar. Call it before serving.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range sd.Methods {
		s.methods["/"+sd.ServiceName+"/"+m.MethodName] = method{impl: impl, handler: m.Handler}
	}
}

// closeAll closes every connection ln accepts: no other server.
func closeAll(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		c.Close()
	}
}

// Serve accepts connections on ln until ln fails or the server stops. A
// connection that opens with Preface is served here; any other is passed,
// with the bytes read so far, to other (the gRPC server's Serve, called
// once with a listener of those connections; nil closes them). Serve owns
// ln and closes it.
func (s *Server) Serve(ln net.Listener, other func(net.Listener) error) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		ln.Close()
		return errors.New("lightrpc: server stopped")
	}
	s.lis[ln] = struct{}{}
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()

	if other == nil {
		other = closeAll
	}
	passed := newChanListener(ln.Addr())
	otherDone := make(chan struct{})
	go func() {
		defer close(otherDone)
		if err := other(passed); err != nil {
			s.opts.Log.Debug("the port's other server stopped", "addr", ln.Addr(), "err", err)
		}
	}()
	defer func() {
		passed.Close()
		<-otherDone
	}()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			var ne net.Error
			if !stopping && errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			if stopping {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
		}
		backoff = 5 * time.Millisecond
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			s.sniff(c, passed)
		}()
	}
}

// prefaceTimeout bounds how long a new connection may take to say which
// protocol it speaks.
const prefaceTimeout = 10 * time.Second

// sniff reads the first bytes of c and serves it or passes it on.
func (s *Server) sniff(c net.Conn, passed *chanListener) {
	var head [len(Preface)]byte
	_ = c.SetReadDeadline(time.Now().Add(prefaceTimeout))
	n, err := io.ReadFull(c, head[:])
	_ = c.SetReadDeadline(time.Time{})
	if err == nil && head == Preface {
		if _, err := c.Write(Preface[:]); err != nil {
			c.Close()
			return
		}
		s.serveConn(c)
		return
	}
	if n == 0 && err != nil {
		c.Close()
		return
	}
	if !passed.push(&prefixConn{Conn: c, prefix: append([]byte(nil), head[:n]...)}) {
		c.Close()
	}
}

// serverConn is one client connection.
type serverConn struct {
	c      net.Conn
	w      *writer
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	calls map[uint64]context.CancelFunc // in flight, for cancel frames
}

// maxCallsPerConn bounds the calls one connection may have in flight; a
// client past it is broken or hostile and loses the connection.
const maxCallsPerConn = 1 << 14

func (s *Server) serveConn(c net.Conn) {
	sc := &serverConn{c: c, w: newWriter(c), calls: map[uint64]context.CancelFunc{}}
	base := context.Background()
	if tc, ok := c.(*tls.Conn); ok {
		// Handlers (and interceptors) learn who called as through gRPC:
		// peer.FromContext, with the TLS state as the AuthInfo.
		base = peer.NewContext(base, &peer.Peer{Addr: c.RemoteAddr(), AuthInfo: credentials.TLSInfo{
			State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		}})
	}
	sc.ctx, sc.cancel = context.WithCancel(base)
	s.mu.Lock()
	if s.stopping || len(s.conns) >= s.opts.MaxConns {
		full := !s.stopping
		s.mu.Unlock()
		c.Close()
		if full {
			s.opts.Log.Warn("lightrpc connection refused: too many connections", "remote", c.RemoteAddr(), "bound", s.opts.MaxConns)
		}
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		sc.cancel()
		c.Close()
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		f, err := readFrame(r, s.opts.MaxFrameBytes)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.opts.Log.Debug("lightrpc connection closed", "remote", c.RemoteAddr(), "err", err)
			}
			return
		}
		switch f.kind {
		case kindRequest:
			if !s.start(sc, f) {
				return
			}
		case kindNotify:
			if !s.notify(sc, f) {
				return
			}
		case kindCancel:
			sc.mu.Lock()
			cancel := sc.calls[f.id]
			sc.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		default:
			s.opts.Log.Debug("lightrpc connection closed", "remote", c.RemoteAddr(), "err", fmt.Errorf("%w: kind %d", errMalformed, f.kind))
			return
		}
	}
}

// start hands request frame f to a worker; false closes the connection.
func (s *Server) start(sc *serverConn, f frame) bool {
	req, err := decodeRequest(f.body)
	if err != nil {
		s.opts.Log.Debug("lightrpc connection closed", "remote", sc.c.RemoteAddr(), "err", err)
		return false
	}
	ctx, cancel := sc.ctx, context.CancelFunc(nil)
	if req.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, req.timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	sc.mu.Lock()
	if len(sc.calls) >= maxCallsPerConn {
		sc.mu.Unlock()
		cancel()
		s.opts.Log.Warn("lightrpc connection closed: too many calls in flight", "remote", sc.c.RemoteAddr(), "bound", maxCallsPerConn)
		return false
	}
	if _, dup := sc.calls[f.id]; dup {
		sc.mu.Unlock()
		cancel()
		s.opts.Log.Debug("lightrpc connection closed", "remote", sc.c.RemoteAddr(), "err", fmt.Errorf("%w: call id %d reused while in flight", errMalformed, f.id))
		return false
	}
	sc.calls[f.id] = cancel
	sc.mu.Unlock()

	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.finish(sc, f.id, cancel, nil, nil, status.Error(codes.Unavailable, "server is stopping"))
		return true
	}
	s.calls.Add(1)
	s.mu.Unlock()
	s.run(func() {
		defer s.calls.Done()
		resp, trailer, err := s.call(ctx, req)
		s.finish(sc, f.id, cancel, resp, trailer, err)
	})
	return true
}

// notify runs the one-way call in frame f to its end before the
// connection's next frame is read, so that one-way calls are handled in the
// order they were sent and a client that sends faster than its handler
// runs is held back by TCP. The answer is dropped. false closes the
// connection: a malformed frame, or a method this server does not have (a
// sender that expected it must learn that its calls are lost, and does
// when its connection ends).
func (s *Server) notify(sc *serverConn, f frame) bool {
	req, err := decodeRequest(f.body)
	if err == nil {
		if _, ok := s.methods[req.method]; !ok {
			err = fmt.Errorf("one-way call to unknown method %s", req.method)
		}
	}
	if err != nil {
		s.opts.Log.Debug("lightrpc connection closed", "remote", sc.c.RemoteAddr(), "err", err)
		return false
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return false
	}
	s.calls.Add(1)
	s.mu.Unlock()
	defer s.calls.Done()
	ctx, cancel := sc.ctx, context.CancelFunc(func() {})
	if req.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, req.timeout)
	}
	defer cancel()
	if _, _, err := s.call(ctx, req); err != nil {
		s.opts.Log.Debug("lightrpc one-way call failed", "remote", sc.c.RemoteAddr(), "method", req.method, "err", err)
	}
	return true
}

// call runs one request through its method's handler.
func (s *Server) call(ctx context.Context, req request) (proto.Message, metadata.MD, error) {
	m, ok := s.methods[req.method]
	if !ok {
		return nil, nil, status.Errorf(codes.Unimplemented, "unknown method %s", req.method)
	}
	ts := &transportStream{method: req.method}
	ctx = grpc.NewContextWithServerTransportStream(ctx, ts)
	dec := func(v any) error {
		msg, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "%s: request type %T is no protocol buffer", req.method, v)
		}
		if err := proto.Unmarshal(req.payload, msg); err != nil {
			return status.Errorf(codes.Internal, "%s: decode request: %v", req.method, err)
		}
		return nil
	}
	out, err := m.handler(m.impl, ctx, dec, s.opts.Interceptor)
	ts.mu.Lock()
	trailer := ts.trailer
	ts.mu.Unlock()
	if err != nil {
		return nil, trailer, err
	}
	msg, ok := out.(proto.Message)
	if !ok {
		return nil, trailer, status.Errorf(codes.Internal, "%s: response type %T is no protocol buffer", req.method, out)
	}
	return msg, trailer, nil
}

// finish answers call id and forgets it.
func (s *Server) finish(sc *serverConn, id uint64, cancel context.CancelFunc, resp proto.Message, trailer metadata.MD, err error) {
	sc.mu.Lock()
	delete(sc.calls, id)
	sc.mu.Unlock()
	cancel()
	var pairs []string
	for k, vs := range trailer {
		for _, v := range vs {
			pairs = append(pairs, k, v)
		}
	}
	var (
		b    []byte
		werr error
	)
	buf := getBuffer()
	defer putBuffer(buf)
	if err != nil {
		st := status.Convert(err)
		b, werr = appendResponse(*buf, id, uint32(st.Code()), st.Message(), pairs, nil)
	} else {
		b, werr = appendResponse(*buf, id, 0, "", pairs, func(b []byte) ([]byte, error) {
			return proto.MarshalOptions{}.MarshalAppend(b, resp)
		})
		if werr != nil {
			b, werr = appendResponse((*buf)[:0], id, uint32(codes.Internal), "encode response: "+werr.Error(), nil, nil)
		}
	}
	*buf = b[:0]
	if werr == nil {
		werr = sc.w.send(b)
	}
	if werr != nil {
		sc.c.Close() // the reader sees it and cleans up
	}
}

// run hands task to an idle worker or starts one. Workers live on for a
// while after their task: a goroutine whose stack already grew to what a
// call needs does not pay for growing it again.
func (s *Server) run(task func()) {
	select {
	case s.work <- task:
	default:
		go s.worker(task)
	}
}

const workerIdle = 10 * time.Second

func (s *Server) worker(task func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		task()
		t.Reset(workerIdle)
		select {
		case task = <-s.work:
		case <-t.C:
			return
		case <-s.done:
			return
		}
	}
}

// GracefulStop stops accepting, lets the calls in flight finish and be
// answered, then closes every connection.
func (s *Server) GracefulStop() {
	s.stop()
	s.calls.Wait()
	s.closeConns()
	s.serving.Wait()
}

// Stop stops accepting and closes every connection; calls in flight see
// their context cancelled and their answers are dropped.
func (s *Server) Stop() {
	s.stop()
	s.closeConns()
	s.serving.Wait()
}

func (s *Server) stop() {
	s.mu.Lock()
	if !s.stopping {
		close(s.done)
	}
	s.stopping = true
	for ln := range s.lis {
		ln.Close()
	}
	s.mu.Unlock()
}

func (s *Server) closeConns() {
	s.mu.Lock()
	for sc := range s.conns {
		sc.c.Close()
		sc.cancel()
	}
	s.mu.Unlock()
}

// Served reports whether ctx is the context of a call that a lightrpc
// Server runs, as opposed to a gRPC server: only a caller on lightrpc can
// go on with one-way calls (Conn.Notify) on the same connection.
func Served(ctx context.Context) bool {
	_, ok := grpc.ServerTransportStreamFromContext(ctx).(*transportStream)
	return ok
}

// transportStream gives handlers grpc.SetTrailer and grpc.SetHeader.
// Headers are accepted and dropped: no Cairn service sends any.
type transportStream struct {
	method  string
	mu      sync.Mutex
	trailer metadata.MD
}

func (t *transportStream) Method() string               { return t.method }
func (t *transportStream) SetHeader(metadata.MD) error  { return nil }
func (t *transportStream) SendHeader(metadata.MD) error { return nil }
func (t *transportStream) SetTrailer(md metadata.MD) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trailer = metadata.Join(t.trailer, md)
	return nil
}

// bufferPool recycles frame buffers of ordinary size.
var bufferPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func getBuffer() *[]byte { return bufferPool.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= 256<<10 {
		*b = (*b)[:0]
		bufferPool.Put(b)
	}
}
