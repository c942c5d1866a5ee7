// Package masterclient talks to a set of masters and always reaches the leader: a
// follower answers with the leader's address, an unreachable master is skipped,
// and while no leader is elected the call is retried with bounded backoff until
// the caller's deadline.
package masterclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Client is safe for concurrent use.
type Client struct {
	mu     sync.Mutex
	addrs  []string
	conns  map[string]*grpc.ClientConn
	leader string
}

// New returns a client for the masters at addrs (host:port). It connects lazily.
func New(addrs []string) (*Client, error) {
	var clean []string
	for _, a := range addrs {
		for _, s := range strings.Split(a, ",") {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(clean, s) {
				clean = append(clean, s)
			}
		}
	}
	if len(clean) == 0 {
		return nil, errors.New("no master address given")
	}
	return &Client{addrs: clean, conns: map[string]*grpc.ClientConn{}}, nil
}

// Close closes all connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.conns {
		cc.Close()
		delete(c.conns, a)
	}
	return nil
}

// Addrs returns the master addresses the client knows.
func (c *Client) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.addrs)
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("master %s: %w", addr, err)
	}
	c.conns[addr] = cc
	if !slices.Contains(c.addrs, addr) {
		c.addrs = append(c.addrs, addr)
	}
	return cc, nil
}

// order lists the addresses to try: the last known leader first.
func (c *Client) order() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.addrs))
	if c.leader != "" {
		out = append(out, c.leader)
	}
	for _, a := range c.addrs {
		if a != c.leader {
			out = append(out, a)
		}
	}
	return out
}

const (
	perTryTimeout = 3 * time.Second
	backoffMin    = 50 * time.Millisecond
	backoffMax    = time.Second
)

// Do runs call against the leader. Errors that mean "ask someone else" (not
// leader, unreachable, no leader yet) are retried until ctx ends; any other error
// is returned at once, as the server said it.
func (c *Client) Do(ctx context.Context, call func(ctx context.Context, m pb.MasterClient, opts ...grpc.CallOption) error) error {
	backoff := backoffMin
	var lastErr error
	for {
		for _, addr := range c.order() {
			cc, err := c.conn(addr)
			if err != nil {
				return err
			}
			var trailer metadata.MD
			tctx, cancel := context.WithTimeout(ctx, perTryTimeout)
			err = call(tctx, pb.NewMasterClient(cc), grpc.Trailer(&trailer))
			cancel()
			if err == nil {
				c.mu.Lock()
				c.leader = addr
				c.mu.Unlock()
				return nil
			}
			lastErr = fmt.Errorf("master %s: %s", addr, describe(err))
			if leader, ok := redirect.Leader(err, trailer); ok {
				if _, err := c.conn(leader); err == nil {
					c.mu.Lock()
					c.leader = leader
					c.mu.Unlock()
				}
				continue
			}
			switch status.Code(err) {
			case codes.Unavailable, codes.DeadlineExceeded:
				if ctx.Err() != nil {
					return fmt.Errorf("no master leader reachable at %s (%v); is the cluster running?", strings.Join(c.Addrs(), ","), lastErr)
				}
				continue
			default:
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no master leader reachable at %s (%v); is the cluster running?", strings.Join(c.Addrs(), ","), lastErr)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, backoffMax)
	}
}

// Ping asks one specific master who it is, without following the leader.
func (c *Client) Ping(ctx context.Context, addr string) (*pb.PingResponse, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewMasterClient(cc).Ping(ctx, &pb.PingRequest{})
}

// Status returns the leader's view of the cluster.
func (c *Client) Status(ctx context.Context) (*pb.StatusResponse, error) {
	var resp *pb.StatusResponse
	err := c.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Status(ctx, &pb.StatusRequest{}, o...)
		return err
	})
	return resp, err
}

// describe shortens a gRPC transport error to what a user can act on.
func describe(err error) string {
	msg := status.Convert(err).Message()
	for _, known := range []string{"connection refused", "no route to host", "i/o timeout", "context deadline exceeded"} {
		if strings.Contains(msg, known) {
			return known
		}
	}
	return msg
}
