package simnet

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairnfs/cairn/pkg/network"
)

const (
	a = "10.0.0.1"
	b = "10.0.0.2"
)

// pair returns a connection from a to b and its accepted end.
func pair(t *testing.T, n *Net) (client, server net.Conn) {
	t.Helper()
	ln, err := n.MustHost(b).Listen(":7000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err = n.MustHost(a).DialContext(context.Background(), b+":7000")
	if err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	return client, server
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return string(buf)
}

func TestStreamsCarryBytesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		c, s := pair(t, n)
		for _, w := range []string{"one ", "two ", "three"} {
			if _, err := c.Write([]byte(w)); err != nil {
				t.Fatal(err)
			}
		}
		if got := readN(t, s, 13); got != "one two three" {
			t.Fatalf("read %q", got)
		}
		if _, err := s.Write([]byte("back")); err != nil {
			t.Fatal(err)
		}
		if got := readN(t, c, 4); got != "back" {
			t.Fatalf("read %q", got)
		}
		if got, want := s.RemoteAddr().String(), c.LocalAddr().String(); got != want {
			t.Fatalf("server sees %s, client is %s", got, want)
		}
	})
}

func TestCutHoldsBytesUntilHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		c, s := pair(t, n)
		n.Cut(a, b)
		if _, err := c.Write([]byte("held")); err != nil {
			t.Fatal(err)
		}
		// The other direction still flows: a one-way cut.
		if _, err := s.Write([]byte("ok")); err != nil {
			t.Fatal(err)
		}
		if got := readN(t, c, 2); got != "ok" {
			t.Fatalf("read %q", got)
		}
		got := make(chan string)
		go func() { got <- readN(t, s, 4) }()
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case g := <-got:
			t.Fatalf("read %q across a cut", g)
		default:
		}
		n.Heal(a, b)
		if g := <-got; g != "held" {
			t.Fatalf("read %q after heal", g)
		}
	})
}

func TestDialAcrossCutWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		ln, err := n.MustHost(b).Listen(b + ":7000")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		n.Cut(b, a) // the answer to the SYN is lost
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := n.MustHost(a).DialContext(ctx, b+":7000"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dial across a cut: %v", err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("dial gave up after %v", waited)
		}
		done := make(chan error)
		go func() {
			_, err := n.MustHost(a).DialContext(context.Background(), b+":7000")
			done <- err
		}()
		time.Sleep(time.Minute)
		n.Heal(b, a)
		if err := <-done; err != nil {
			t.Fatalf("dial after heal: %v", err)
		}
	})
}

func TestDelayKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		c, s := pair(t, n)
		n.SetDelay(a, b, 50*time.Millisecond)
		start := time.Now()
		c.Write([]byte("slow"))
		n.SetDelay(a, b, 0)
		c.Write([]byte("fast")) // may not overtake
		if got := readN(t, s, 8); got != "slowfast" {
			t.Fatalf("read %q", got)
		}
		if took := time.Since(start); took != 50*time.Millisecond {
			t.Fatalf("arrived after %v", took)
		}
	})
}

func TestKillEndsConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		c, s := pair(t, n)
		s.Write([]byte("last"))
		n.Kill(b)
		if got := readN(t, c, 4); got != "last" {
			t.Fatalf("read %q", got)
		}
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read after the peer died: %v", err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("write to a dead peer: %v", err)
		}
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("the dead side reads: %v", err)
		}
		if _, err := n.MustHost(a).DialContext(context.Background(), b+":7000"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial to a dead host: %v", err)
		}
	})
}

func TestDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		c, _ := pair(t, n)
		c.SetReadDeadline(time.Now().Add(time.Second))
		start := time.Now()
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past its deadline: %v", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("timed out after %v", took)
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(make([]byte, 2*streamBuffer)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("write into a full stream past its deadline: %v", err)
		}
	})
}

func TestListen(t *testing.T) {
	n := New()
	h := n.MustHost(a)
	l1, err := h.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	if _, err := h.Listen(l1.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listen on %s: %v", l1.Addr(), err)
	}
	if _, err := h.Listen(b + ":1"); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("listen on another host's address: %v", err)
	}
	if _, err := n.Host("node-1"); err == nil {
		t.Fatal("a host named by a name, not an address, was accepted")
	}
}

// TestGRPC runs a gRPC call over the network inside a bubble, through a
// cut that outlasts the first attempt: the clock moves while gRPC waits.
func TestGRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		ln, err := n.MustHost(b).Listen(b + ":7000")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(ln)
		defer srv.Stop()
		cc, err := grpc.NewClient(b+":7000", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(network.DialFunc(n.MustHost(a))))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		n.Cut(a, b)
		time.AfterFunc(20*time.Second, func() { n.Heal(a, b) })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("status %v", resp.Status)
		}
		if took := time.Since(start); took < 20*time.Second {
			t.Fatalf("answered across the cut after %v", took)
		}
	})
}

func TestCrashedHostStaysDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		c, _ := pair(t, n)
		n.Crash(b)
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read from a crashed peer: %v", err)
		}
		if _, err := n.MustHost(b).Listen(":7001"); err == nil {
			t.Fatal("a crashed host listened")
		}
		if _, err := n.MustHost(b).DialContext(context.Background(), a+":1"); err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("a crashed host dialed: %v", err)
		}
		n.Restart(b)
		ln, err := n.MustHost(b).Listen(":7000")
		if err != nil {
			t.Fatalf("listen after restart: %v", err)
		}
		ln.Close()
	})
}
