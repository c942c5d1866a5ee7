package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairnfs/cairn/pkg/handshake"
	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/pki"
)

// On ListenRPC's TLS port, 100 connections from one address that never
// begin their handshake do not wait for the server: 32 (the per-source
// bound) wait in their handshake, the other 68 are closed at once, and
// clients with a certificate are served meanwhile, over lightrpc and gRPC.
func TestListenRPCBoundsHandshakes(t *testing.T) {
	caDir, idDir := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "node")
	if err := pki.CreateCA(caDir, "test"); err != nil {
		t.Fatal(err)
	}
	if err := pki.Issue(caDir, idDir, pki.Request{Name: "n", Kind: pki.KindNode}); err != nil {
		t.Fatal(err)
	}
	id, err := pki.Load(idDir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ListenRPC(nil, "127.0.0.1:0", id)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := NewRPCServer(prometheus.NewRegistry(), id)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})

	const idle = 100
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	conns := make([]net.Conn, 0, idle)
	for range idle {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Skipf("cannot dial from 127.0.0.2: %v", err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// Which are closed within a second (well before the handshake timeout).
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if want := int64(idle - handshake.DefaultMaxPerSource); closed.Load() != want {
		t.Fatalf("%d idle connections closed at once, want %d", closed.Load(), want)
	}
	if st := ln.(*handshake.Listener).Stats(); st.Pending != handshake.DefaultMaxPerSource || st.RefusedSource != idle-handshake.DefaultMaxPerSource {
		t.Fatalf("handshakes %+v", st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lc := lightrpc.Dial(addr, lightrpc.ClientOptions{TLS: id.ClientConfig(), DialTimeout: 3 * time.Second})
	defer lc.Close()
	if _, err := healthpb.NewHealthClient(lc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("lightrpc health check during the idle connections: %v", err)
	}
	gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(id.ClientConfig())))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err := healthpb.NewHealthClient(gc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC health check during the idle connections: %v", err)
	}
}
