package redirect

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/network"
)

// ErrNoLeader is matched (errors.Is) by Call's error when ctx ended before any
// candidate answered as leader; the error is a *NoLeaderError.
var ErrNoLeader = errors.New("no leader reachable")

// NoLeaderError says which candidates were tried and the last failure seen.
type NoLeaderError struct {
	Candidates []string
	Last       error
}

func (e *NoLeaderError) Error() string {
	return fmt.Sprintf("no leader reachable at %s (%v)", strings.Join(e.Candidates, ","), e.Last)
}

// Is makes errors.Is(err, ErrNoLeader) hold.
func (e *NoLeaderError) Is(target error) bool { return target == ErrNoLeader }

// RefusedError says a server refused the TLS handshake: it did not accept
// this process's certificate (revoked, expired, or from another CA), or
// this process did not accept the server's. Trying again cannot help.
type RefusedError struct {
	Addr string
	Err  error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s refused the TLS handshake: the certificate is revoked, expired or not from the cluster's CA (%v)", e.Addr, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refused reports whether err is a TLS handshake that failed on a
// certificate: an alert from the server about this end's certificate, or
// this end's own check of the server's (pki). The error reaches here as
// text inside a gRPC status, so the text is what is matched.
func refused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "remote error: tls: ") || strings.Contains(msg, "the peer's certificate")
}

// Pool keeps one client connection per address: lightrpc for unary calls,
// gRPC for streams and for a server that does not speak lightrpc. Safe for
// concurrent use.
type Pool struct {
	tls   *tls.Config
	net   network.Network
	mu    sync.Mutex // serializes creation; lookups read conns without it
	conns sync.Map   // address -> *lightrpc.Conn

	// silent holds the addresses whose last call ran out of time without
	// an answer (a host cut off, a paused process): Call tries them last
	// until they answer again. Without this every caller whose view names
	// such an address first (the last known leader of each partition, a
	// server's own follow-ups) would spend a whole try on it, and a caller
	// whose deadline is about one try long (a heartbeat, a request a
	// server forwards on its client's deadline) would never reach the
	// live replicas at all.
	silentMu sync.Mutex
	silent   map[string]bool
}

// Silent reports whether addr's last call ran out of time unanswered and
// nothing has been heard from it since.
func (p *Pool) Silent(addr string) bool {
	p.silentMu.Lock()
	defer p.silentMu.Unlock()
	return p.silent[addr]
}

// heard records whether addr answered (true) or let a call run out of time.
func (p *Pool) heard(addr string, answered bool) {
	p.silentMu.Lock()
	defer p.silentMu.Unlock()
	if answered {
		delete(p.silent, addr)
		return
	}
	if p.silent == nil {
		p.silent = map[string]bool{}
	}
	p.silent[addr] = true
}

// order returns candidates with the silent addresses moved to the end,
// the order otherwise kept.
func (p *Pool) order(candidates []string) []string {
	p.silentMu.Lock()
	defer p.silentMu.Unlock()
	out := make([]string, 0, len(candidates))
	for _, a := range candidates {
		if !p.silent[a] {
			out = append(out, a)
		}
	}
	for _, a := range candidates {
		if p.silent[a] {
			out = append(out, a)
		}
	}
	return out
}

// NewPool returns an empty pool; connections are made lazily on n (nil:
// the host's TCP stack), over TLS with tlsConf (a client configuration)
// when it is not nil.
func NewPool(tlsConf *tls.Config, n network.Network) *Pool { return &Pool{tls: tlsConf, net: n} }

// Conn returns the connection to addr, creating it on first use; it
// connects at its first call.
func (p *Pool) Conn(addr string) (grpc.ClientConnInterface, error) {
	if cc, ok := p.conns.Load(addr); ok {
		return cc.(*lightrpc.Conn), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns.Load(addr); ok {
		return cc.(*lightrpc.Conn), nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	creds := insecure.NewCredentials()
	if p.tls != nil {
		creds = credentials.NewTLS(p.tls)
	}
	cc := lightrpc.Dial(addr, lightrpc.ClientOptions{TLS: p.tls, Network: p.net, GRPC: func() (*grpc.ClientConn, error) {
		gc, err := grpc.NewClient(addr, append(lightrpc.GRPCDialOptions(p.net), grpc.WithTransportCredentials(creds))...)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "connect %s: %v", addr, err)
		}
		return gc, nil
	}})
	p.conns.Store(addr, cc)
	return cc, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns.Range(func(a, cc any) bool {
		cc.(*lightrpc.Conn).Close()
		p.conns.Delete(a)
		return true
	})
}

// Retry bounds of Call.
const (
	perTryTimeout = 3 * time.Second
	backoffMin    = 20 * time.Millisecond
	backoffMax    = time.Second
	// minJudged is the least time a try must have had for an address
	// that did not answer in it to count as silent.
	minJudged = 100 * time.Millisecond
)

// Call runs call against the leader among candidates (tried in order, so put
// the last known leader first, but silent ones last: Pool.Silent) and
// returns the address that answered. A
// redirect is followed at once; an unreachable candidate, "no leader yet" or a
// per-try timeout moves on to the next, with bounded backoff between rounds,
// until ctx ends. Any other error is the server's answer and is returned as is.
func Call(ctx context.Context, pool *Pool, candidates []string, call func(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error) (string, error) {
	return callLeader(ctx, pool, candidates, false, call)
}

// CallReplicas is Call for the replicas of a partition: NOT_FOUND from a
// candidate means it does not host the partition (any more), and the next
// is tried, rather than an answer about what the request names.
func CallReplicas(ctx context.Context, pool *Pool, candidates []string, call func(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error) (string, error) {
	return callLeader(ctx, pool, candidates, true, call)
}

func callLeader(ctx context.Context, pool *Pool, candidates []string, notFoundMoves bool, call func(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error) (string, error) {
	if len(candidates) == 0 {
		return "", &NoLeaderError{Last: errors.New("no address to call")}
	}
	backoff := backoffMin
	var lastErr error
	for {
		queue := pool.order(candidates)
		for hops := 0; len(queue) > 0 && hops < 2*len(candidates)+4; hops++ {
			addr := queue[0]
			queue = queue[1:]
			cc, err := pool.Conn(addr)
			if err != nil {
				return "", err
			}
			var trailer metadata.MD
			budget := perTryTimeout
			if d, ok := ctx.Deadline(); ok {
				budget = min(budget, time.Until(d))
			}
			tctx, cancel := context.WithTimeout(ctx, perTryTimeout)
			err = call(tctx, cc, grpc.Trailer(&trailer))
			// Silent only if it had time to answer: not a try begun as
			// the caller's deadline ran out.
			unanswered := budget >= minJudged && (errors.Is(tctx.Err(), context.DeadlineExceeded) || dialTimedOut(err))
			cancel()
			if err == nil {
				pool.heard(addr, true)
				return addr, nil
			}
			if refused(err) {
				return "", &RefusedError{Addr: addr, Err: err}
			}
			lastErr = fmt.Errorf("%s: %s", addr, Describe(err))
			code := status.Code(err)
			if unanswered {
				pool.heard(addr, false)
			} else if code != codes.Unavailable && code != codes.Canceled {
				pool.heard(addr, true)
			}
			if leader, ok := Leader(err, trailer); ok {
				if pool.Silent(leader) {
					// Named by a replica that may not have noticed yet
					// that it is gone: the others first.
					queue = append(queue, leader)
				} else {
					queue = append([]string{leader}, queue...)
				}
				continue
			}
			if code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.NotFound && notFoundMoves {
				if ctx.Err() != nil {
					return "", &NoLeaderError{Candidates: candidates, Last: lastErr}
				}
				continue
			}
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", &NoLeaderError{Candidates: candidates, Last: lastErr}
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// dialTimedOut reports whether err is a connection attempt that got no
// answer (as opposed to one refused at once).
func dialTimedOut(err error) bool {
	return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "i/o timeout")
}

// Describe shortens a gRPC error to what a user can act on.
func Describe(err error) string {
	msg := status.Convert(err).Message()
	for _, known := range []string{"connection refused", "no route to host", "i/o timeout", "context deadline exceeded"} {
		if strings.Contains(msg, known) {
			return known
		}
	}
	return msg
}
