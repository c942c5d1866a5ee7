package dataproto

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/pkg/handshake"
)

// ServerOptions bound a server's connections. Zero fields take the
// defaults.
type ServerOptions struct {
	// IdleTimeout closes a connection that sends no request for this long;
	// default 5m.
	IdleTimeout time.Duration
	// ReadTimeout bounds reading a request's payload once its header has
	// arrived; default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response (a read's bytes included);
	// default 30s.
	WriteTimeout time.Duration
	// MaxInflight bounds the requests of one connection being handled at
	// once; the server stops reading the connection beyond it. Default 64.
	MaxInflight int
	// MaxConns bounds the open connections that are served: with TLS,
	// those whose handshake finished (connections still in it are bounded
	// by Handshake instead, so they cannot take these places); more are
	// closed at once. Default 4096.
	MaxConns int
	// DisableSendfile sends sections through a user-space buffer even when
	// they are files. Sendfile saves a copy and CPU on a real NIC; on
	// loopback the copy measured faster (docs/measurements.md).
	DisableSendfile bool
	// Logger receives connection errors; default slog.Default().
	Logger *slog.Logger
	// TLS, when set, authenticates every connection with a mutual TLS
	// handshake with this server configuration before any frame (see
	// auth.go); Encrypt then keeps the frames inside TLS, else they travel
	// outside it, protected by their CRCs.
	TLS     *tls.Config
	Encrypt bool
	// Handshake bounds the connections in their TLS handshake, with TLS:
	// how long each may take, how many one source address and how many
	// all sources may have at once (package handshake; zero fields take
	// its defaults: 3 s, 32, 1024).
	Handshake handshake.Limits
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 64
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 4096
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Session handles the requests of one connection.
type Session interface {
	// Handle is called on the connection's reader goroutine for each
	// request, in arrival order. It must answer the request exactly once
	// (Respond, Fail or RespondSection), now or later from another
	// goroutine, and should return quickly: the next request is read only
	// after it returns. Requests with a bad payload CRC or an unknown op
	// are answered by the server and never reach Handle.
	Handle(in *Inbound)
	// Close is called once when the connection ends, after the last Handle
	// returned. Responses sent after it are dropped.
	Close()
}

// Section is a byte range of a file to send as a response payload, with
// sendfile when File says ok. extentstore.Section implements it.
type Section interface {
	Len() int64
	ReadAt(p []byte, off int64) (int, error)
	File() (f *os.File, off, n int64, ok bool)
	Close() error
}

// Server serves the protocol: one reader and one writer goroutine per
// connection, requests handed to a Session per connection.
type Server struct {
	opts       ServerOptions
	newSession func(peer *x509.Certificate) Session

	mu     sync.Mutex
	ln     net.Listener
	hs     *handshake.Listener // ln with TLS: the connections in their handshake
	conns  map[*serverConn]struct{}
	closed bool
	wg     sync.WaitGroup

	sendfileBytes, copiedBytes atomic.Int64
}

// NewServer returns a server that makes a Session per connection with
// newSession, which may return nil to refuse the connection (it is closed
// at once: the peer has too many, say).
func NewServer(newSession func(peer *x509.Certificate) Session, opts ServerOptions) *Server {
	opts = opts.withDefaults()
	if opts.TLS != nil {
		opts.TLS = opts.TLS.Clone()
		opts.TLS.SessionTicketsDisabled = true // nothing is resumed, and nothing may follow the mode byte
	}
	return &Server{opts: opts, newSession: newSession, conns: map[*serverConn]struct{}{}}
}

// ServerStats are a server's counters.
type ServerStats struct {
	// SendfileBytes counts response payload bytes sent with sendfile(2);
	// CopiedBytes those sent through a user-space buffer.
	SendfileBytes, CopiedBytes int64
	// Conns is the number of open connections served (handshakes
	// finished).
	Conns int
	// Handshakes are the counters of the connections' TLS handshakes
	// (zero without TLS).
	Handshakes handshake.Stats
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	n, hs := len(s.conns), s.hs
	s.mu.Unlock()
	st := ServerStats{SendfileBytes: s.sendfileBytes.Load(), CopiedBytes: s.copiedBytes.Load(), Conns: n}
	if hs != nil {
		st.Handshakes = hs.Stats()
	}
	return st
}

// Serve accepts connections on ln until Close (then it returns nil) or an
// accept error. The server owns ln. With TLS, each connection's handshake
// runs off the accept loop, bounded in time and in number per source and
// overall (ServerOptions.Handshake), and only a connection whose handshake
// finished counts toward MaxConns.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	if s.opts.TLS != nil {
		s.hs = handshake.NewListener(ln, s.authenticate, handshake.Options{Limits: s.opts.Handshake, Name: "data path", Logger: s.opts.Logger})
		ln = s.hs
	}
	s.ln = ln
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			return fmt.Errorf("data path: accept: %w", err)
		}
		backoff = 5 * time.Millisecond
		var peer *x509.Certificate
		if ac, ok := nc.(*authedConn); ok {
			nc, peer = ac.Conn, ac.peer
		}
		s.start(nc, peer)
	}
}

// authedConn is a connection whose handshake finished, as the handshake
// listener hands it to Serve: the connection the frames travel on and the
// certificate its client presented.
type authedConn struct {
	net.Conn
	peer *x509.Certificate
}

// authenticate is the data path's handshake.Func: the TLS handshake of nc
// and the mode byte (auth.go), within ctx.
func (s *Server) authenticate(ctx context.Context, nc net.Conn) (net.Conn, error) {
	c, peer, err := authServer(ctx, nc, s.opts.TLS, s.opts.Encrypt)
	if err != nil {
		return nil, err
	}
	return &authedConn{Conn: c, peer: peer}, nil
}

// start serves nc, whose peer presented certificate peer (nil without
// TLS), unless the server is closed or at MaxConns.
func (s *Server) start(nc net.Conn, peer *x509.Certificate) {
	s.mu.Lock()
	if s.closed || len(s.conns) >= s.opts.MaxConns {
		n := len(s.conns)
		s.mu.Unlock()
		nc.Close()
		if n >= s.opts.MaxConns {
			s.opts.Logger.Warn("data path: too many connections; refusing", "limit", s.opts.MaxConns, "remote", nc.RemoteAddr())
		}
		return
	}
	sc := newServerConn(s, nc)
	sc.peer = peer
	s.conns[sc] = struct{}{}
	s.wg.Add(2)
	s.mu.Unlock()
	go sc.readLoop()
	go sc.writeLoop()
}

// Close stops accepting, closes every connection and waits for their
// goroutines and sessions to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	for _, sc := range conns {
		sc.close()
	}
	s.wg.Wait()
	return nil
}

type outFrame struct {
	h       Header
	payload []byte
	sec     Section
	release func()
}

type serverConn struct {
	s      *Server
	nc     net.Conn
	peer   *x509.Certificate // what the client presented; nil without TLS
	sess   Session
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}

	mu     sync.Mutex
	closed bool
	out    chan outFrame
}

func newServerConn(s *Server, nc net.Conn) *serverConn {
	ctx, cancel := context.WithCancel(context.Background())
	return &serverConn{
		s: s, nc: nc, ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, s.opts.MaxInflight),
		out:   make(chan outFrame, s.opts.MaxInflight),
	}
}

// close ends the connection: later responses are dropped and queued ones
// released.
func (sc *serverConn) close() {
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		return
	}
	sc.closed = true
	sc.mu.Unlock()
	sc.cancel()
	sc.nc.Close()
}

func (sc *serverConn) readLoop() {
	defer sc.s.wg.Done()
	sc.sess = sc.s.newSession(sc.peer)
	defer func() {
		sc.close()
		if sc.sess != nil {
			sc.sess.Close()
		}
		sc.s.mu.Lock()
		delete(sc.s.conns, sc)
		sc.s.mu.Unlock()
	}()
	if sc.sess == nil {
		sc.s.opts.Logger.Debug("data path: connection refused by the server's role", "remote", sc.nc.RemoteAddr())
		return
	}
	var hdr [HeaderLen]byte
	opts := sc.s.opts
	for {
		select {
		case sc.slots <- struct{}{}:
		case <-sc.ctx.Done():
			return
		}
		_ = sc.nc.SetReadDeadline(time.Now().Add(opts.IdleTimeout))
		if _, err := io.ReadFull(sc.nc, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) && sc.ctx.Err() == nil {
				opts.Logger.Debug("data path: connection ended", "remote", sc.nc.RemoteAddr(), "err", err)
			}
			return
		}
		h, err := DecodeHeader(hdr[:])
		if err == nil && h.Flags&FlagResponse != 0 {
			err = fmt.Errorf("%w: a response where a request was expected", ErrBadHeader)
		}
		if err != nil {
			opts.Logger.Warn("data path: dropping connection", "remote", sc.nc.RemoteAddr(), "err", err)
			return
		}
		_ = sc.nc.SetReadDeadline(time.Now().Add(opts.ReadTimeout))
		buf := getBuf(int(h.Length))
		p, err := ReadPayload(sc.nc, &h, buf)
		in := &Inbound{Header: h, Payload: p, sc: sc, buf: buf}
		switch {
		case errors.Is(err, ErrPayloadCRC):
			in.Release()
			in.Fail(CodeBadCRC, "%v", err)
			continue
		case err != nil:
			putBuf(buf)
			opts.Logger.Warn("data path: dropping connection", "remote", sc.nc.RemoteAddr(), "err", err)
			return
		case !h.Op.Valid():
			in.Release()
			in.Fail(CodeBadRequest, "unknown op %d", uint8(h.Op))
			continue
		}
		if !sc.handle(in) {
			return
		}
	}
}

// handle hands in to the session. A panic in the session's handler drops
// the connection (its peer retries, elsewhere if need be) and is logged;
// the server and its other connections go on.
func (sc *serverConn) handle(in *Inbound) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			sc.s.opts.Logger.Error("data path: handler panicked; dropping the connection", "remote", sc.nc.RemoteAddr(),
				"op", in.Header.Op, "panic", r, "stack", string(debug.Stack()))
			ok = false
		}
	}()
	sc.sess.Handle(in)
	return true
}

func (sc *serverConn) writeLoop() {
	defer sc.s.wg.Done()
	var hbuf [HeaderLen]byte
	defer func() {
		sc.close()
		for {
			select {
			case f := <-sc.out:
				f.free()
			default:
				return
			}
		}
	}()
	for {
		select {
		case f := <-sc.out:
			err := sc.write(&f, hbuf[:])
			f.free()
			<-sc.slots
			if err != nil {
				if sc.ctx.Err() == nil {
					sc.s.opts.Logger.Warn("data path: write failed; dropping connection", "remote", sc.nc.RemoteAddr(), "err", err)
				}
				return
			}
		case <-sc.ctx.Done():
			return
		}
	}
}

func (f *outFrame) free() {
	if f.sec != nil {
		f.sec.Close()
	}
	if f.release != nil {
		f.release()
	}
}

func (sc *serverConn) write(f *outFrame, hbuf []byte) error {
	_ = sc.nc.SetWriteDeadline(time.Now().Add(sc.s.opts.WriteTimeout))
	EncodeHeader(hbuf, &f.h)
	if f.sec == nil {
		if len(f.payload) == 0 {
			_, err := sc.nc.Write(hbuf)
			return err
		}
		bufs := net.Buffers{hbuf, f.payload}
		_, err := bufs.WriteTo(sc.nc)
		return err
	}
	if _, err := sc.nc.Write(hbuf); err != nil {
		return err
	}
	if file, off, n, ok := f.sec.File(); ok && !sc.s.opts.DisableSendfile {
		sent, err, handled := sendFile(sc.nc, file, off, n)
		sc.s.sendfileBytes.Add(sent)
		if handled || err != nil {
			if err == nil && sent != n {
				err = fmt.Errorf("sendfile: sent %d of %d bytes", sent, n)
			}
			return err
		}
	}
	n, err := copySection(sc.nc, f.sec)
	sc.s.copiedBytes.Add(n)
	return err
}

// copySection writes a section through a buffer (when sendfile cannot).
func copySection(w io.Writer, sec Section) (int64, error) {
	buf := getBuf(min(int(sec.Len()), MaxPayload))
	defer putBuf(buf)
	var done int64
	for done < sec.Len() {
		k := min(int64(cap(buf)), sec.Len()-done)
		m, err := sec.ReadAt(buf[:k], done)
		if int64(m) < k {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return done, fmt.Errorf("read section: %w", err)
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return done, err
		}
		done += k
	}
	return done, nil
}

// Inbound is a request received by a server, answered once with Respond,
// Fail or RespondSection.
type Inbound struct {
	Header  Header
	Payload []byte
	sc      *serverConn
	buf     []byte
	sent    atomic.Bool
	freed   atomic.Bool
}

// Context is canceled when the connection ends.
func (in *Inbound) Context() context.Context { return in.sc.ctx }

// Remote is the client's address.
func (in *Inbound) Remote() net.Addr { return in.sc.nc.RemoteAddr() }

// Release returns the payload's buffer for reuse; the handler calls it once
// it no longer needs Payload (optional: without it the buffer is garbage
// collected).
func (in *Inbound) Release() {
	if in.freed.CompareAndSwap(false, true) && in.buf != nil {
		putBuf(in.buf)
	}
	in.Payload, in.buf = nil, nil
}

// responseHeader completes h as the response to in.
func (in *Inbound) responseHeader(h Header) Header {
	h.Op = in.Header.Op
	h.ReqID = in.Header.ReqID
	h.Flags |= FlagResponse
	if h.Partition == 0 {
		h.Partition = in.Header.Partition
	}
	return h
}

// Respond answers with h (Op, ReqID and FlagResponse are set for the
// caller; a zero Partition becomes the request's) and payload, which the
// server sends after Respond returns: the caller must not change it, and
// release, if not nil, is called once it is sent or dropped. A second
// answer to the same request is ignored.
func (in *Inbound) Respond(h Header, payload []byte, release func()) {
	h = in.responseHeader(h)
	h.Length = uint32(len(payload))
	h.Flags &^= FlagNoCRC
	h.PayloadCRC = Checksum(payload)
	in.enqueue(outFrame{h: h, payload: payload, release: release})
}

// CheckedSection is a Section that knows the CRC32C of its bytes without
// reading them (an extent store range, from its block CRCs).
type CheckedSection interface {
	Section
	CRC() uint32
}

// RespondSection answers with h and the section's bytes as payload, sent
// with sendfile when the section is a file, and closed once sent or
// dropped. A CheckedSection's CRC goes in the header as the payload CRC,
// which the receiver checks; any other section is sent with FlagNoCRC (see
// the package documentation).
func (in *Inbound) RespondSection(h Header, sec Section) {
	h = in.responseHeader(h)
	h.Length = uint32(sec.Len())
	if cs, ok := sec.(CheckedSection); ok {
		h.Flags &^= FlagNoCRC
		h.PayloadCRC = cs.CRC()
	} else {
		h.Flags |= FlagNoCRC
		h.PayloadCRC = 0
	}
	in.enqueue(outFrame{h: h, sec: sec})
}

// Fail answers with code and a message (cut to MaxMessage bytes).
func (in *Inbound) Fail(code Code, format string, args ...any) {
	in.FailHeader(Header{}, code, fmt.Sprintf(format, args...))
}

// FailHeader answers with code, msg and the fields of h (Size, Arg, Epoch
// carrying the code's details).
func (in *Inbound) FailHeader(h Header, code Code, msg string) {
	if code == CodeOK {
		code = CodeInternal
	}
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage]
	}
	h.Code = code
	in.Respond(h, []byte(msg), nil)
}

func (in *Inbound) enqueue(f outFrame) {
	if !in.sent.CompareAndSwap(false, true) {
		f.free()
		in.sc.s.opts.Logger.Error("data path: second response to one request dropped", "op", in.Header.Op, "request", in.Header.ReqID)
		return
	}
	sc := in.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.closed {
		f.free()
		return
	}
	// Never blocks: every request holds one of MaxInflight slots until its
	// response is written, and out has room for MaxInflight frames.
	sc.out <- f
}

// Payload buffers come from pools by power-of-two size class, 4 KiB to
// MaxPayload, so a connection's packets reuse memory. The top class holds
// MaxChunkPayload bytes, so a full chunk with its fingerprint reuses memory
// too.
var bufPools [numClasses]sync.Pool

const numClasses = 9 // 4 KiB << 0..8; the last is MaxChunkPayload

// classCap is the capacity of the buffers of class c.
func classCap(c int) int {
	if c == numClasses-1 {
		return MaxChunkPayload
	}
	return (4 << 10) << c
}

// sizeClass returns the smallest class holding n bytes, or numClasses if
// none does.
func sizeClass(n int) int {
	c := 0
	for c < numClasses && classCap(c) < n {
		c++
	}
	return c
}

func getBuf(n int) []byte {
	if n <= 0 {
		return nil
	}
	c := sizeClass(n)
	if c == numClasses {
		return make([]byte, 0, n)
	}
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, classCap(c))
}

func putBuf(b []byte) {
	if cap(b) < 4<<10 {
		return
	}
	c := sizeClass(cap(b))
	if c == numClasses || cap(b) != classCap(c) {
		return
	}
	b = b[:0]
	bufPools[c].Put(&b)
}
