// Package masterclient talks to a set of masters and always reaches the leader: a
// follower answers with the leader's address, an unreachable master is skipped,
// and while no leader is elected the call is retried with bounded backoff until
// the caller's deadline.
package masterclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/network"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Client is safe for concurrent use.
type Client struct {
	pool  *redirect.Pool
	mu    sync.Mutex
	addrs []string
	// leader is tried first, unless it let a call run out of time: the
	// pool then tries it last until it answers (redirect.Pool.Silent), so
	// that a leader cut off from everyone (a network partition, a paused
	// process) does not take every call of a caller whose deadline is one
	// try long (a node's heartbeat).
	leader string
}

// New returns a client for the masters at addrs (host:port), on n (nil:
// the host's TCP stack), over TLS with tlsConf (a client configuration)
// unless it is nil. It connects lazily.
func New(addrs []string, tlsConf *tls.Config, n network.Network) (*Client, error) {
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
	return &Client{addrs: clean, pool: redirect.NewPool(tlsConf, n)}, nil
}

// Close closes all connections.
func (c *Client) Close() error {
	c.pool.Close()
	return nil
}

// Addrs returns the master addresses the client knows.
func (c *Client) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.addrs)
}

// order lists the addresses to try: the last known leader first.
func (c *Client) order() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.addrs)+1)
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

// Do runs call against the leader. Errors that mean "ask someone else" (not
// leader, unreachable, no leader yet) are retried until ctx ends; any other error
// is returned at once, as the server said it.
func (c *Client) Do(ctx context.Context, call func(ctx context.Context, m pb.MasterClient, opts ...grpc.CallOption) error) error {
	order := c.order()
	leader, err := redirect.Call(ctx, c.pool, order, func(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error {
		return call(ctx, pb.NewMasterClient(cc), opts...)
	})
	var nl *redirect.NoLeaderError
	if errors.As(err, &nl) {
		return fmt.Errorf("no master leader reachable at %s (%v); is the cluster running?", strings.Join(c.Addrs(), ","), nl.Last)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.leader = leader
	c.mu.Unlock()
	return nil
}

// Ping asks one specific master who it is, without following the leader.
func (c *Client) Ping(ctx context.Context, addr string) (*pb.PingResponse, error) {
	cc, err := c.pool.Conn(addr)
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

// FailureReporter sends failure reports (Master.ReportFailure) for nodes
// that did not answer: in the background, at most one per node per
// interval, so that a storm of failed requests to a dead node costs the
// master one call a second. Safe for concurrent use.
type FailureReporter struct {
	c        *Client
	reporter string
	interval time.Duration

	mu   sync.Mutex
	last map[uint64]time.Time
}

// NewFailureReporter returns a reporter that names itself reporter ("node
// 4", "client host:pid") in its reports.
func (c *Client) NewFailureReporter(reporter string) *FailureReporter {
	return &FailureReporter{c: c, reporter: reporter, interval: time.Second, last: map[uint64]time.Time{}}
}

// Report tells the master leader that node did not answer, unless this
// reporter did so within the last interval. It does not wait.
func (r *FailureReporter) Report(node uint64, cause error) {
	if r == nil || node == 0 {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.last[node]) < r.interval {
		r.mu.Unlock()
		return
	}
	r.last[node] = now
	r.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = r.c.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
			_, err := m.ReportFailure(ctx, &pb.ReportFailureRequest{NodeId: node, Reporter: r.reporter, Reason: cause.Error()}, o...)
			return err
		})
	}()
}
