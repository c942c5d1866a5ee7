package masterclient

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

type leaderMaster struct {
	pb.UnimplementedMasterServer
}

func (leaderMaster) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{LeaderId: 2}, nil
}

// TestSilentLeaderSkipped: a leader that stopped answering (cut off, or
// paused) is tried last once a call ran out of time on it, so a caller
// whose deadline is one try long (a node's heartbeat) reaches the new
// leader with its next call instead of spending every call on the old one.
func TestSilentLeaderSkipped(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServer(srv, leaderMaster{})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	c, err := New([]string{silent.Addr().String(), ln.Addr().String()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.leader = silent.Addr().String() // the old leader, as last heard

	status := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // as a heartbeat
		defer cancel()
		_, err := c.Status(ctx)
		return err
	}
	if err := status(); err == nil {
		t.Fatal("the first call answered; the silent leader was not tried first")
	}
	start := time.Now()
	if err := status(); err != nil {
		t.Fatalf("the second call: %v; the silent master should have been tried last", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the second call took %v: it waited on the silent master first", d)
	}
	if !c.pool.Silent(silent.Addr().String()) || c.pool.Silent(ln.Addr().String()) {
		t.Errorf("silent: %v and %v, want the silent master marked and the answering one not",
			c.pool.Silent(silent.Addr().String()), c.pool.Silent(ln.Addr().String()))
	}
}
