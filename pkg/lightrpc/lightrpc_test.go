package lightrpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// checker is a health service whose Check does what the request's service
// name says, so that one generated client exercises every path.
type checker struct {
	healthpb.UnimplementedHealthServer
	started  chan struct{} // "block": the call is running
	canceled chan struct{} // "block": the call's context ended

	mu   sync.Mutex
	seen []string // "echo-*" services checked, in the order handled
}

// echoed returns the "echo-*" services checked so far.
func (c *checker) echoed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

func (c *checker) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch svc := req.GetService(); {
	case svc == "" || strings.HasPrefix(svc, "echo"):
		if strings.HasPrefix(svc, "echo-") {
			c.mu.Lock()
			c.seen = append(c.seen, svc)
			c.mu.Unlock()
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case svc == "refuse":
		_ = grpc.SetTrailer(ctx, metadata.Pairs("cairn-leader", "10.0.0.7:1234"))
		return nil, status.Error(codes.FailedPrecondition, "not the leader")
	case svc == "served":
		if !Served(ctx) {
			return nil, status.Error(codes.NotFound, "not served by lightrpc")
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case svc == "plain-error":
		return nil, errors.New("something broke")
	case svc == "deadline":
		d, ok := ctx.Deadline()
		if !ok {
			return nil, status.Error(codes.OutOfRange, "no deadline")
		}
		return nil, status.Errorf(codes.OutOfRange, "%d", time.Until(d).Milliseconds())
	case svc == "block":
		c.started <- struct{}{}
		<-ctx.Done()
		c.canceled <- struct{}{}
		return nil, status.FromContextError(ctx.Err()).Err()
	case svc == "slow":
		time.Sleep(200 * time.Millisecond)
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return nil, status.Error(codes.NotFound, "unknown service")
}

func (c *checker) Watch(req *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	return s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN})
}

type testServer struct {
	addr    string
	light   *Server
	grpc    *grpc.Server
	checker *checker
	calls   atomic.Int64 // through the interceptor
	done    chan struct{}
}

// startServer serves the checker on a loopback port in both protocols.
func startServer(t *testing.T, addr string) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), checker: &checker{started: make(chan struct{}, 1), canceled: make(chan struct{}, 1)}, done: make(chan struct{})}
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod != "/grpc.health.v1.Health/Check" {
			t.Errorf("interceptor saw method %q", info.FullMethod)
		}
		ts.calls.Add(1)
		return h(ctx, req)
	}
	ts.light = NewServer(ServerOptions{Interceptor: icpt})
	ts.grpc = grpc.NewServer(grpc.UnaryInterceptor(icpt))
	healthpb.RegisterHealthServer(ts.light, ts.checker)
	healthpb.RegisterHealthServer(ts.grpc, ts.checker)
	go func() {
		defer close(ts.done)
		_ = ts.light.Serve(ln, ts.grpc.Serve)
	}()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) stop() {
	ts.light.Stop()
	ts.grpc.Stop()
	<-ts.done
}

func dial(t *testing.T, addr string) *Conn {
	t.Helper()
	c := Dial(addr, ClientOptions{GRPC: func() (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}})
	t.Cleanup(func() { c.Close() })
	return c
}

func check(ctx context.Context, c grpc.ClientConnInterface, svc string, opts ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	return healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{Service: svc}, opts...)
}

func TestUnaryCall(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	resp, err := check(context.Background(), c, "echo")
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check = %v, %v", resp, err)
	}
	if c.grpcConn != nil {
		t.Fatal("a unary call went through gRPC")
	}
	if ts.calls.Load() != 1 {
		t.Fatalf("interceptor ran %d times, want 1", ts.calls.Load())
	}
	if _, err := check(context.Background(), c, "served"); err != nil {
		t.Fatalf("a lightrpc call's handler: Served = false (%v)", err)
	}
	gc, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err := check(context.Background(), gc, "served"); status.Code(err) != codes.NotFound {
		t.Fatalf("a gRPC call's handler: Served = true (%v)", err)
	}
}

// One-way calls: never over a connection not yet made, run through the
// interceptor in the order sent, and a one-way call to a method the server
// lacks ends the connection, which the next one-way call reports (a unary
// call connects again).
func TestNotify(t *testing.T) {
	const checkMethod = "/grpc.health.v1.Health/Check"
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	ctx := context.Background()
	req := func(svc string) *healthpb.HealthCheckRequest { return &healthpb.HealthCheckRequest{Service: svc} }
	if err := c.Notify(ctx, checkMethod, req("echo-none")); status.Code(err) != codes.Unavailable {
		t.Fatalf("Notify before any call = %v, want UNAVAILABLE", err)
	}
	if _, err := check(ctx, c, "echo"); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var want []string
	for i := range n {
		svc := fmt.Sprintf("echo-%d", i)
		want = append(want, svc)
		if err := c.Notify(ctx, checkMethod, req(svc)); err != nil {
			t.Fatalf("Notify %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(ts.checker.echoed()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := ts.checker.echoed(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("one-way calls handled %d, in order %v", len(got), got)
	}
	if got := ts.calls.Load(); got != n+1 {
		t.Fatalf("interceptor ran %d times, want %d", got, n+1)
	}

	if err := c.Notify(ctx, "/grpc.health.v1.Health/Nothing", req("x")); err != nil {
		t.Fatalf("Notify to a missing method: %v (it is handed over; the server then ends the connection)", err)
	}
	for {
		err := c.Notify(ctx, checkMethod, req("echo-after"))
		if status.Code(err) == codes.Unavailable {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Notify after a one-way call to a missing method = %v; want UNAVAILABLE once the server closed the connection", err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := check(ctx, c, "echo"); err != nil {
		t.Fatalf("unary call after the connection ended: %v", err)
	}
}

func TestStatusAndTrailer(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	var md metadata.MD
	_, err := check(context.Background(), c, "refuse", grpc.Trailer(&md))
	if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "not the leader" {
		t.Fatalf("err = %v, want FailedPrecondition 'not the leader'", err)
	}
	if got := md.Get("cairn-leader"); len(got) != 1 || got[0] != "10.0.0.7:1234" {
		t.Fatalf("trailer = %v", md)
	}
	_, err = check(context.Background(), c, "plain-error")
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "something broke") {
		t.Fatalf("err = %v, want Unknown 'something broke'", err)
	}
	_, err = check(context.Background(), c, "nosuch")
	if status.Code(err) != codes.NotFound {
		t.Fatalf("err = %v, want NotFound", err)
	}
	err = c.Invoke(context.Background(), "/grpc.health.v1.Health/Nope", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: err = %v, want Unimplemented", err)
	}
}

func TestDeadlineReachesServer(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := check(ctx, c, "deadline")
	var ms int64
	if _, serr := fmt.Sscan(status.Convert(err).Message(), &ms); serr != nil || ms <= 0 || ms > 2000 {
		t.Fatalf("server saw deadline %q (%v), want 0 < ms <= 2000", status.Convert(err).Message(), err)
	}
	_, err = check(context.Background(), c, "deadline")
	if status.Convert(err).Message() != "no deadline" {
		t.Fatalf("without a deadline the server saw %v", err)
	}
}

func TestCancelReachesServer(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := check(ctx, c, "block")
		errc <- err
	}()
	<-ts.checker.started
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("err = %v, want Canceled", err)
	}
	select {
	case <-ts.checker.canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's call was not cancelled")
	}
	// The connection is still good.
	if _, err := check(context.Background(), c, "echo"); err != nil {
		t.Fatal(err)
	}
}

func TestPortServesGRPCToo(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	gc, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err := check(context.Background(), gc, "echo"); err != nil {
		t.Fatalf("gRPC client on the shared port: %v", err)
	}
	// Streams of the light client go through gRPC.
	c := dial(t, ts.addr)
	w, err := healthpb.NewHealthClient(c).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("Watch = %v, %v", r, err)
	}
}

func TestGRPCOnlyServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, &checker{})
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	c := dial(t, ln.Addr().String())
	for i := range 3 {
		if _, err := check(context.Background(), c, "echo"); err != nil {
			t.Fatalf("call %d to a gRPC-only server: %v", i, err)
		}
	}
	if c.grpcConn == nil {
		t.Fatal("no gRPC connection was used")
	}
}

func TestReconnect(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	if _, err := check(context.Background(), c, "echo"); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := check(ctx, c, "echo")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("server down: err = %v, want Unavailable", err)
	}
	if !strings.Contains(err.Error(), "connection") {
		t.Fatalf("server down: err %q does not say why", err)
	}
	ts2 := startServer(t, ts.addr)
	var last error
	for range 50 {
		if _, last = check(ctx, c, "echo"); last == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("after the restart: %v", last)
	}
	if ts2.calls.Load() == 0 {
		t.Fatal("the new server saw no call")
	}
}

func TestConcurrentCalls(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				svc := "echo"
				if (g+i)%7 == 0 {
					svc = "refuse"
				}
				_, err := check(context.Background(), c, svc)
				if (svc == "echo") != (err == nil) {
					errs <- fmt.Errorf("%s: %v", svc, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := ts.calls.Load(); n != 3200 {
		t.Fatalf("server saw %d calls, want 3200", n)
	}
}

func TestGracefulStopAnswersCallsInFlight(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	c := dial(t, ts.addr)
	errc := make(chan error, 1)
	go func() {
		r, err := check(context.Background(), c, "slow")
		if err == nil && r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			err = fmt.Errorf("status %v", r.GetStatus())
		}
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ts.light.GracefulStop()
	if err := <-errc; err != nil {
		t.Fatalf("call in flight during GracefulStop: %v", err)
	}
}

// TestHostileFrames sends broken frames on raw connections: each loses its
// connection, and the server keeps serving others.
func TestHostileFrames(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	frames := map[string][]byte{
		"length beyond the bound": append(binary.LittleEndian.AppendUint32(nil, 1<<31), make([]byte, 9)...),
		"length below a header":   append(binary.LittleEndian.AppendUint32(nil, 3), make([]byte, 9)...),
		"unknown kind":            func() []byte { b, at := appendHeader(nil, 9, 1); finishFrame(b, at); return b }(),
		"request cut short": func() []byte {
			b, at := appendHeader(nil, kindRequest, 1)
			b = append(b, 1, 2)
			finishFrame(b, at)
			return b
		}(),
		"method past its frame": func() []byte {
			b, at := appendHeader(nil, kindRequest, 1)
			b = binary.LittleEndian.AppendUint64(b, 0)
			b = binary.LittleEndian.AppendUint16(b, 500)
			finishFrame(b, at)
			return b
		}(),
	}
	for name, f := range frames {
		t.Run(name, func(t *testing.T) {
			nc, err := net.Dial("tcp", ts.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := nc.Write(append(Preface[:], f...)); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(nc)
			head := make([]byte, len(Preface))
			if _, err := r.Read(head); err != nil {
				t.Fatal(err)
			}
			if _, err := r.ReadByte(); err == nil {
				t.Fatal("the server answered a broken frame")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server kept a connection with a broken frame open")
			}
		})
	}
	c := dial(t, ts.addr)
	if _, err := check(context.Background(), c, "echo"); err != nil {
		t.Fatalf("after hostile frames: %v", err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	b, err := appendRequest(nil, 42, 1500*time.Millisecond, "/a.B/C", func(b []byte) ([]byte, error) { return append(b, "payload"...), nil })
	if err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(bufio.NewReader(strings.NewReader(string(b))), 1<<20)
	if err != nil || f.kind != kindRequest || f.id != 42 {
		t.Fatalf("frame = %+v, %v", f, err)
	}
	req, err := decodeRequest(f.body)
	if err != nil || req.method != "/a.B/C" || req.timeout != 1500*time.Millisecond || string(req.payload) != "payload" {
		t.Fatalf("request = %+v, %v", req, err)
	}
	b, err = appendResponse(nil, 7, 9, "msg", []string{"k", "v", "k2", "v2"}, func(b []byte) ([]byte, error) { return append(b, "out"...), nil })
	if err != nil {
		t.Fatal(err)
	}
	f, err = readFrame(bufio.NewReader(strings.NewReader(string(b))), 1<<20)
	if err != nil || f.kind != kindResponse || f.id != 7 {
		t.Fatalf("frame = %+v, %v", f, err)
	}
	resp, err := decodeResponse(f.body)
	if err != nil || resp.code != 9 || resp.message != "msg" || strings.Join(resp.trailer, ",") != "k,v,k2,v2" || string(resp.payload) != "out" {
		t.Fatalf("response = %+v, %v", resp, err)
	}
}

// FuzzDecode: no input makes the decoders panic or read out of bounds.
func FuzzDecode(f *testing.F) {
	req, _ := appendRequest(nil, 1, time.Second, "/a.B/C", func(b []byte) ([]byte, error) { return append(b, 1, 2, 3), nil })
	resp, _ := appendResponse(nil, 1, 5, "m", []string{"a", "b"}, nil)
	f.Add(req[headerBytes:])
	f.Add(resp[headerBytes:])
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = decodeRequest(body)
		_, _ = decodeResponse(body)
		_, _ = readFrame(bufio.NewReader(strings.NewReader(string(body))), 1<<16)
	})
}

func benchmarkUnary(b *testing.B, cc grpc.ClientConnInterface) {
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := check(ctx, cc, "echo"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkUnary compares one small call on loopback in both protocols:
// go test -run '^$' -bench Unary -cpu 1,8 ./pkg/lightrpc/
func BenchmarkUnary(b *testing.B) {
	t := &testing.T{}
	ts := startServer(t, "127.0.0.1:0")
	defer ts.stop()
	b.Run("lightrpc", func(b *testing.B) {
		c := Dial(ts.addr, ClientOptions{})
		defer c.Close()
		benchmarkUnary(b, c)
	})
	b.Run("grpc", func(b *testing.B) {
		gc, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer gc.Close()
		benchmarkUnary(b, gc)
	})
}

// Past MaxConns a new connection is closed; the ones served keep working.
func TestMaxConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerOptions{MaxConns: 1})
	healthpb.RegisterHealthServer(s, &checker{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln, func(l net.Listener) error {
			for {
				c, err := l.Accept()
				if err != nil {
					return err
				}
				c.Close()
			}
		})
	}()
	defer func() { s.Stop(); <-done }()
	first := Dial(ln.Addr().String(), ClientOptions{})
	defer first.Close()
	if _, err := check(context.Background(), first, "echo"); err != nil {
		t.Fatal(err)
	}
	second := Dial(ln.Addr().String(), ClientOptions{})
	defer second.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := check(ctx, second, "echo"); err == nil {
		t.Fatal("a connection past the bound was served")
	}
	if _, err := check(context.Background(), first, "echo"); err != nil {
		t.Fatalf("the connection within the bound: %v", err)
	}
}

// A frame larger than eagerBodyBytes reads whole; cut short it is an
// error, and its length alone allocates nothing up front.
func TestLargeFrame(t *testing.T) {
	body := strings.Repeat("x", 3<<20)
	b, err := appendResponse(nil, 5, 0, "", nil, func(b []byte) ([]byte, error) { return append(b, body...), nil })
	if err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(bufio.NewReader(strings.NewReader(string(b))), 8<<20)
	if err != nil || f.id != 5 {
		t.Fatalf("large frame: %v", err)
	}
	if r, err := decodeResponse(f.body); err != nil || string(r.payload) != body {
		t.Fatalf("large frame's payload: %d bytes, %v", len(r.payload), err)
	}
	if _, err := readFrame(bufio.NewReader(strings.NewReader(string(b[:len(b)-1]))), 8<<20); err != io.ErrUnexpectedEOF {
		t.Fatalf("large frame cut short: %v, want unexpected EOF", err)
	}
}

// A peer that stops reading fails the write after the timeout instead of
// holding the sender for ever.
func TestWriterTimeout(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := newWriter(a)
	w.timeout = 50 * time.Millisecond
	start := time.Now()
	err := w.send([]byte("nobody reads this"))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("send to a peer that does not read: %v after %v", err, time.Since(start))
	}
	if err2 := w.send([]byte("more")); err2 == nil {
		t.Fatal("a writer that failed took more")
	}
}

// blackhole forwards TCP connections to addr until cut, after which it
// keeps every connection open and drops what either side sends: a host cut
// off by a firewall, or a paused process.
type blackhole struct {
	addr string
	cut  atomic.Bool
}

func startBlackhole(t *testing.T, to string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	b := &blackhole{addr: ln.Addr().String()}
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				dst.Close()
				return
			}
			if !b.cut.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					src.Close()
					return
				}
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	return b
}

// TestSilentConnectionGivenUp: a call that hears nothing at all from its
// server ends the connection, so that once the path is back the next call
// connects again rather than waiting on a connection whose bytes were
// lost; a server that answers late keeps its connection.
func TestSilentConnectionGivenUp(t *testing.T) {
	ts := startServer(t, "127.0.0.1:0")
	bh := startBlackhole(t, ts.addr)
	c := dial(t, bh.addr)
	if _, err := check(context.Background(), c, "echo"); err != nil {
		t.Fatal(err)
	}
	first := c.live.Load()

	// Late but alive: the server ends the call at its deadline and says so.
	ctx, cancel := context.WithTimeout(context.Background(), silentFor+200*time.Millisecond)
	_, err := check(ctx, c, "block")
	cancel()
	<-ts.checker.started
	<-ts.checker.canceled
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("block: %v, want DeadlineExceeded", err)
	}
	time.Sleep(silenceGrace + 500*time.Millisecond)
	if c.live.Load() != first || first.dead.Load() {
		t.Fatal("a server that answered at its deadline lost its connection")
	}

	bh.cut.Store(true)
	ctx, cancel = context.WithTimeout(context.Background(), silentFor+200*time.Millisecond)
	_, err = check(ctx, c, "echo")
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("cut off: %v, want DeadlineExceeded", err)
	}
	bh.cut.Store(false)
	time.Sleep(silenceGrace + 500*time.Millisecond)
	if !first.dead.Load() {
		t.Fatal("the connection that heard nothing is still in use")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := check(ctx, c, "echo"); err != nil {
		t.Fatalf("after the path is back: %v", err)
	}
}
