package dataproto

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// funcSession adapts a function to Session.
type funcSession struct {
	handle func(in *Inbound)
	closed func()
}

func (s funcSession) Handle(in *Inbound) { s.handle(in) }
func (s funcSession) Close() {
	if s.closed != nil {
		s.closed()
	}
}

func serve(t *testing.T, opts ServerOptions, handle func(in *Inbound)) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s := NewServer(func(*x509.Certificate) Session { return funcSession{handle: handle} }, opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Serve(ln); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		s.Close()
		<-done
	})
	return s, ln.Addr().String()
}

func dial(t *testing.T, addr string, opts ConnOptions) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo answers every request with its payload after Arg microseconds, so
// responses come back out of order.
func echo(in *Inbound) {
	go func() {
		time.Sleep(time.Duration(in.Header.Arg) * time.Microsecond)
		p := append([]byte(nil), in.Payload...)
		in.Release()
		in.Respond(Header{Arg: in.Header.Arg, Offset: in.Header.Offset}, p, nil)
	}()
}

func TestPipelinedOutOfOrder(t *testing.T) {
	_, addr := serve(t, ServerOptions{}, echo)
	c := dial(t, addr, ConnOptions{MaxInflight: 32})
	ctx := context.Background()
	const n = 200
	calls := make([]*Call, n)
	for i := range n {
		var err error
		calls[i], err = c.Start(ctx, &Request{
			Header:  Header{Op: OpAppend, Offset: int64(i), Arg: uint64((n - i) % 17 * 100)},
			Payload: []byte(fmt.Sprintf("packet %d", i)),
		})
		if err != nil {
			t.Fatal(err)
		}
		if i >= 32 { // keep the window full, but let the earliest finish
			calls[i-32].Wait(ctx)
		}
	}
	for i, call := range calls {
		h, p, err := call.Wait(ctx)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if h.Offset != int64(i) || string(p) != fmt.Sprintf("packet %d", i) {
			t.Fatalf("call %d got response %d %q", i, h.Offset, p)
		}
	}
}

// Requests reach the handler in the order Start sent them.
func TestRequestsArriveInOrder(t *testing.T) {
	var mu sync.Mutex
	var got []int64
	_, addr := serve(t, ServerOptions{}, func(in *Inbound) {
		mu.Lock()
		got = append(got, in.Header.Offset)
		mu.Unlock()
		in.Respond(Header{}, nil, nil)
	})
	c := dial(t, addr, ConnOptions{})
	var calls []*Call
	for i := range 500 {
		call, err := c.Start(context.Background(), &Request{Header: Header{Op: OpAppend, Offset: int64(i)}, Payload: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, call)
	}
	for _, call := range calls {
		if _, _, err := call.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i, off := range got {
		if off != int64(i) {
			t.Fatalf("request %d arrived at position %d", off, i)
		}
	}
}

// A client never has more than MaxInflight calls out.
func TestClientInflightBound(t *testing.T) {
	release := make(chan struct{})
	var held sync.WaitGroup
	_, addr := serve(t, ServerOptions{}, func(in *Inbound) {
		held.Add(1)
		go func() {
			defer held.Done()
			<-release
			in.Respond(Header{}, nil, nil)
		}()
	})
	c := dial(t, addr, ConnOptions{MaxInflight: 4})
	var calls []*Call
	for range 4 {
		call, err := c.Start(context.Background(), &Request{Header: Header{Op: OpPing}})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, call)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Start(ctx, &Request{Header: Header{Op: OpPing}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fifth call: %v, want to wait for a slot", err)
	}
	close(release)
	for _, call := range calls {
		if _, _, err := call.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpPing}}); err != nil {
		t.Fatal(err)
	}
	held.Wait()
}

// A server stops reading a connection while MaxInflight requests are being
// handled.
func TestServerInflightBound(t *testing.T) {
	var handling atomic.Int32
	var mu sync.Mutex
	var pending []*Inbound
	_, addr := serve(t, ServerOptions{MaxInflight: 3}, func(in *Inbound) {
		handling.Add(1)
		mu.Lock()
		pending = append(pending, in)
		mu.Unlock()
	})
	c := dial(t, addr, ConnOptions{MaxInflight: 10})
	var calls []*Call
	for range 10 {
		call, err := c.Start(context.Background(), &Request{Header: Header{Op: OpPing}})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, call)
	}
	deadline := time.Now().Add(5 * time.Second)
	for handling.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for a fourth, if the bound leaked
	if n := handling.Load(); n != 3 {
		t.Fatalf("%d requests handed to the handler, want 3", n)
	}
	for answered := 0; answered < 10; {
		mu.Lock()
		batch := pending
		pending = nil
		mu.Unlock()
		for _, in := range batch {
			in.Respond(Header{}, nil, nil)
			answered++
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, call := range calls {
		if _, _, err := call.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// A server that never answers breaks the connection after ReadTimeout; the
// calls fail, not hang.
func TestReadTimeoutFailsCalls(t *testing.T) {
	_, addr := serve(t, ServerOptions{}, func(in *Inbound) {})
	c := dial(t, addr, ConnOptions{ReadTimeout: 150 * time.Millisecond})
	start := time.Now()
	_, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpPing}})
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
	if c.Err() == nil {
		t.Fatal("connection not marked failed")
	}
	if _, err := c.Start(context.Background(), &Request{Header: Header{Op: OpPing}}); err == nil {
		t.Fatal("start on a failed connection")
	}
}

func TestIdleTimeouts(t *testing.T) {
	_, addr := serve(t, ServerOptions{IdleTimeout: 100 * time.Millisecond}, echo)
	c := dial(t, addr, ConnOptions{})
	if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpPing}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(3 * time.Second):
		t.Fatal("server did not close an idle connection")
	}
	_, addr2 := serve(t, ServerOptions{}, echo)
	c2 := dial(t, addr2, ConnOptions{IdleTimeout: 100 * time.Millisecond})
	select {
	case <-c2.done:
		if !errors.Is(c2.Err(), ErrIdle) {
			t.Fatalf("client idle close: %v", c2.Err())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("client did not close its idle connection")
	}
}

// A payload with a wrong CRC is answered with CodeBadCRC and the
// connection goes on.
func TestBadCRCAnswered(t *testing.T) {
	var handled atomic.Int32
	_, addr := serve(t, ServerOptions{}, func(in *Inbound) {
		handled.Add(1)
		in.Respond(Header{}, nil, nil)
	})
	c := dial(t, addr, ConnOptions{})
	h := Header{Op: OpAppend, PayloadCRC: Checksum([]byte("other bytes"))}
	_, _, err := c.Do(context.Background(), &Request{Header: h, Payload: []byte("these bytes"), KeepCRC: true})
	if CodeOf(err) != CodeBadCRC {
		t.Fatalf("got %v, want bad crc", err)
	}
	if handled.Load() != 0 {
		t.Fatal("handler saw a corrupt packet")
	}
	if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpAppend}, Payload: []byte("fine")}); err != nil {
		t.Fatal(err)
	}
}

func TestGarbageDropsConnection(t *testing.T) {
	_, addr := serve(t, ServerOptions{}, echo)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 10))
	nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := nc.Read(make([]byte, 10)); err == nil {
		t.Fatalf("server answered garbage with %d bytes", n)
	}
}

func TestUnknownOpAnswered(t *testing.T) {
	_, addr := serve(t, ServerOptions{}, echo)
	c := dial(t, addr, ConnOptions{})
	if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: 200}}); CodeOf(err) != CodeBadRequest {
		t.Fatalf("got %v", err)
	}
}

// fileSection is a Section over an *os.File, as the extent store gives.
type fileSection struct {
	f      *os.File
	off, n int64
	noFile bool
}

func (s *fileSection) Len() int64 { return s.n }
func (s *fileSection) ReadAt(p []byte, off int64) (int, error) {
	return s.f.ReadAt(p[:min(int64(len(p)), s.n-off)], s.off+off)
}
func (s *fileSection) File() (*os.File, int64, int64, bool) { return s.f, s.off, s.n, !s.noFile }
func (s *fileSection) Close() error                         { return nil }

// Sections go out with sendfile when they are files, and are copied when
// not; both deliver the same bytes into the caller's Dst.
// openFile writes data to a temporary file and opens it for reading; the
// test's cleanup closes it.
func openFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ext")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSectionResponses(t *testing.T) {
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f := openFile(t, data)
	srv, addr := serve(t, ServerOptions{}, func(in *Inbound) {
		in.RespondSection(Header{}, &fileSection{f: f, off: in.Header.Offset, n: int64(in.Header.Arg), noFile: in.Header.Kind == 1})
	})
	c := dial(t, addr, ConnOptions{})
	for _, copyPath := range []bool{false, true} {
		var kind uint8
		if copyPath {
			kind = 1
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				off, n := int64(i)*300000+11, 1<<20
				dst := make([]byte, n)
				h, p, err := c.Do(context.Background(), &Request{Header: Header{Op: OpRead, Offset: off, Arg: uint64(n), Kind: kind}, Dst: dst})
				if err != nil {
					t.Error(err)
					return
				}
				if &p[0] != &dst[0] {
					t.Error("payload not received into Dst")
				}
				if h.Flags&FlagNoCRC == 0 || !bytes.Equal(p, data[off:off+int64(n)]) {
					t.Errorf("read at %d: wrong bytes (flags %b)", off, h.Flags)
				}
			}()
		}
		wg.Wait()
	}
	// The server counts after the bytes are out, maybe after the client
	// has them.
	deadline := time.Now().Add(5 * time.Second)
	for st := srv.Stats(); st.SendfileBytes != 8<<20 || st.CopiedBytes != 8<<20; st = srv.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("sendfile %d bytes, copied %d; want 8 MiB each", st.SendfileBytes, st.CopiedBytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An abandoned call's response is discarded and its Dst left alone.
func TestAbandonedCall(t *testing.T) {
	release := make(chan struct{})
	_, addr := serve(t, ServerOptions{}, func(in *Inbound) {
		go func() {
			if in.Header.Arg == 1 {
				<-release
			}
			in.Respond(Header{}, bytes.Repeat([]byte{0xAA}, 1000), nil)
		}()
	})
	c := dial(t, addr, ConnOptions{})
	dst := make([]byte, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	call, err := c.Start(ctx, &Request{Header: Header{Op: OpRead, Arg: 1}, Dst: dst})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, _, err := call.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait: %v", err)
	}
	close(release)
	if _, p, err := c.Do(context.Background(), &Request{Header: Header{Op: OpRead}}); err != nil || len(p) != 1000 {
		t.Fatalf("next call: %v", err)
	}
	if dst[0] != 0 {
		t.Fatal("abandoned call's Dst was written")
	}
}

// Closing the server fails outstanding calls and ends its sessions.
func TestServerCloseFailsCalls(t *testing.T) {
	var closed atomic.Int32
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	s := NewServer(func(*x509.Certificate) Session {
		return funcSession{handle: func(in *Inbound) {}, closed: func() { closed.Add(1) }}
	}, ServerOptions{Logger: quiet})
	go s.Serve(ln)
	c := dial(t, ln.Addr().String(), ConnOptions{})
	call, err := c.Start(context.Background(), &Request{Header: Header{Op: OpPing}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	s.Close()
	if _, _, err := call.Wait(context.Background()); err == nil {
		t.Fatal("call survived the server")
	}
	if closed.Load() != 1 {
		t.Fatalf("%d sessions closed", closed.Load())
	}
}

func BenchmarkPingPipelined(b *testing.B) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	s := NewServer(func(*x509.Certificate) Session {
		return funcSession{handle: func(in *Inbound) { in.Respond(Header{}, nil, nil) }}
	}, ServerOptions{Logger: quiet})
	go s.Serve(ln)
	defer s.Close()
	c, err := Dial(context.Background(), ln.Addr().String(), ConnOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpPing}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReadResponse compares read responses sent with sendfile(2)
// against the copy through a user-space buffer (what the server does when
// the section is not an OS file), 1 MiB per request from a file in the page
// cache, 8 requests in flight.
//
//	go test ./pkg/dataproto -run '^$' -bench ReadResponse
func BenchmarkReadResponse(b *testing.B) {
	const fileBytes, n = 64 << 20, 1 << 20
	path := filepath.Join(b.TempDir(), "ext")
	if err := os.WriteFile(path, bytes.Repeat([]byte("0123456789abcdef"), fileBytes/16), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for _, mode := range []string{"sendfile", "copy"} {
		b.Run(mode, func(b *testing.B) {
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			s := NewServer(func(*x509.Certificate) Session {
				return funcSession{handle: func(in *Inbound) {
					in.RespondSection(Header{}, &fileSection{f: f, off: in.Header.Offset, n: n, noFile: mode == "copy"})
				}}
			}, ServerOptions{Logger: quiet})
			go s.Serve(ln)
			defer s.Close()
			c, err := Dial(context.Background(), ln.Addr().String(), ConnOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(n)
			b.ResetTimer()
			b.SetParallelism(4)
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]byte, n)
				for pb.Next() {
					off := (next.Add(1) % (fileBytes / n)) * n
					if _, _, err := c.Do(context.Background(), &Request{Header: Header{Op: OpRead, Offset: off}, Dst: dst}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
