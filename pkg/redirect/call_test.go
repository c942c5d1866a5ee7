package redirect

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
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

// answering serves every method with answer.
func answering(t *testing.T, answer func(stream grpc.ServerStream) error) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		return answer(stream)
	}))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func invoke(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error {
	return cc.Invoke(ctx, "/cairn.test.Any/Call", &emptypb.Empty{}, &emptypb.Empty{}, opts...)
}

func TestSilentLeaderTriedLast(t *testing.T) {
	silent := mute(t)
	leader := answering(t, func(s grpc.ServerStream) error { return s.SendMsg(&emptypb.Empty{}) })
	// A follower that still names the silent address as its leader.
	follower := answering(t, func(s grpc.ServerStream) error {
		s.SetTrailer(metadata.Pairs(Trailer, silent))
		return status.Error(codes.FailedPrecondition, "not the leader")
	})
	pool := NewPool(nil)
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
