package redirect

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairnfs/cairn/pkg/lightrpc"
)

func TestOrderPutsSilentLast(t *testing.T) {
	for _, tc := range []struct {
		silent, candidates, want []string
	}{
		{nil, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{[]string{"a"}, []string{"a", "b", "c"}, []string{"b", "c", "a"}},
		{[]string{"a", "b"}, []string{"a", "b", "c"}, []string{"c", "a", "b"}},
		{[]string{"a", "b", "c"}, []string{"c", "b", "a"}, []string{"c", "b", "a"}},
		{[]string{"x"}, []string{"a", "b"}, []string{"a", "b"}},
	} {
		var p Pool
		for _, a := range tc.silent {
			p.heard(a, false)
		}
		if got := p.order(tc.candidates); !slices.Equal(got, tc.want) {
			t.Errorf("silent %v, candidates %v: order %v, want %v", tc.silent, tc.candidates, got, tc.want)
		}
	}
	var p Pool
	p.heard("a", false)
	p.heard("a", true)
	if p.Silent("a") {
		t.Error("an address that answered again is still silent")
	}
}

// mute accepts connections and never answers: a host cut off after the
// connection was made, or a paused process.
func mute(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

// health answers Check with check.
type health struct {
	healthpb.UnimplementedHealthServer
	check func(ctx context.Context) error
}

func (h health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// answering serves the health service with check, as Cairn's servers
// serve theirs (lightrpc).
func answering(t *testing.T, check func(ctx context.Context) error) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := lightrpc.NewServer(lightrpc.ServerOptions{})
	healthpb.RegisterHealthServer(srv, health{check: check})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln, nil)
	}()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String()
}

func invoke(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error {
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

func TestSilentLeaderTriedLast(t *testing.T) {
	silent := mute(t)
	leader := answering(t, func(context.Context) error { return nil })
	// A follower that still names the silent address as its leader.
	follower := answering(t, func(ctx context.Context) error { return NotLeader(ctx, "the test", silent) })
	pool := NewPool(nil, nil)
	defer pool.Close()

	// The last known leader first, with a deadline shorter than one try:
	// the call runs out of time on it.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := Call(ctx, pool, []string{silent, follower, leader}, invoke)
	cancel()
	if err == nil {
		t.Fatal("the first call answered: the silent address was not tried first")
	}
	if !pool.Silent(silent) {
		t.Fatal("the address that let the call run out of time is not marked silent")
	}

	// Now it is tried last, and a redirect to it waits for the others: a
	// deadline it would take whole is met.
	for _, order := range [][]string{{silent, follower, leader}, {follower, leader, silent}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got, err := Call(ctx, pool, order, invoke)
		cancel()
		if err != nil || got != leader {
			t.Fatalf("candidates %v: answered by %q, %v; want %s", order, got, err, leader)
		}
	}
	if pool.Silent(leader) || pool.Silent(follower) {
		t.Error("an address that answered is marked silent")
	}
}
