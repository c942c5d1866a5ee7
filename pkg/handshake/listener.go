package handshake

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Func runs the server's side of a connection's handshake and returns the
// connection to serve (nc itself, or a wrapper such as a *tls.Conn). It
// must give up when ctx ends; nc's deadline is already ctx's, so reads and
// writes on nc give up with it too. On error the caller closes nc.
type Func func(ctx context.Context, nc net.Conn) (net.Conn, error)

// TLS is the Func of a TLS server with cfg: it returns the *tls.Conn once
// its handshake is complete (with mutual TLS, once the peer's certificate
// has been verified).
func TLS(cfg *tls.Config) Func {
	return func(ctx context.Context, nc net.Conn) (net.Conn, error) {
		tc := tls.Server(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		return tc, nil
	}
}

// Options configure a Listener.
type Options struct {
	Limits
	// Name says whose port it is in log messages ("rpc", "data path").
	Name string
	// Logger receives the refusals (at most one warning per logEvery) and
	// failed handshakes (at debug level); default slog.Default().
	Logger *slog.Logger
}

// logEvery is the least time between two warnings of a listener about
// connections it refused or evicted: a flood of them logs one line per
// period with the counts, not one per connection.
const logEvery = 10 * time.Second

// Listener is a net.Listener whose Accept returns only connections whose
// handshake finished. It accepts from the listener it wraps on a goroutine
// of its own, admits each connection through a Gate (Limits) and runs its
// handshake on a goroutine of the connection's own, within Timeout; the
// accept loop never waits for a handshake. A finished connection is handed
// to Accept within what is left of its Timeout, or closed. Accept errors
// that a flood causes (out of descriptors, a connection reset before it
// was accepted) are retried with a backoff, not returned.
type Listener struct {
	inner  net.Listener
	hs     Func
	opts   Options
	gate   *Gate
	ready  chan net.Conn
	done   chan struct{} // closed by Close
	failed chan struct{} // closed when err is set
	err    error

	start, stop sync.Once
	wg          sync.WaitGroup // the accept loop and the handshakes

	logMu   sync.Mutex
	logLast time.Time
	logged  Stats // the counters at the last warning
}

// NewListener returns a Listener that serves the connections of inner
// after hs. It owns inner: Close closes it. Nothing runs until the first
// Accept.
func NewListener(inner net.Listener, hs Func, opts Options) *Listener {
	opts.Limits = opts.Limits.WithDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Name == "" {
		opts.Name = "listener"
	}
	return &Listener{
		inner: inner, hs: hs, opts: opts, gate: NewGate(opts.Limits),
		ready: make(chan net.Conn), done: make(chan struct{}), failed: make(chan struct{}),
	}
}

// Accept returns the next connection whose handshake finished (what hs
// returned), net.ErrClosed once the listener is closed, or the error that
// stopped the listener it wraps.
func (l *Listener) Accept() (net.Conn, error) {
	l.start.Do(func() {
		l.wg.Add(1)
		go l.acceptLoop()
	})
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.failed:
		return nil, l.err
	}
}

// Close stops accepting, closes the listener it wraps and every connection
// still in its handshake, and returns once the goroutines of the listener
// have ended. Connections already returned by Accept are the caller's.
func (l *Listener) Close() error {
	var err error
	l.stop.Do(func() {
		l.start.Do(func() {}) // no accept loop after Close
		close(l.done)
		err = l.inner.Close()
		l.gate.Close()
		l.wg.Wait()
	})
	return err
}

// Addr is the address of the listener it wraps.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Stats returns the counters of the listener's handshakes.
func (l *Listener) Stats() Stats { return l.gate.Stats() }

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		nc, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if transient(err) {
				l.warn("accept failed; retrying", "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
				case <-l.done:
					return
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			l.err = err
			close(l.failed)
			return
		}
		backoff = 5 * time.Millisecond
		t, v := l.gate.Admit(Source(nc.RemoteAddr()), func() { nc.Close() })
		switch v {
		case RefusedSource, RefusedClosed:
			nc.Close()
			if v == RefusedSource {
				l.warn("too many connections of one source in their handshake; closing its new ones", "remote", nc.RemoteAddr())
			}
			continue
		case AdmittedEvicting:
			l.warn("too many connections in their handshake; closing the oldest", "remote", nc.RemoteAddr())
		}
		l.wg.Add(1)
		go l.handshake(nc, t)
	}
}

// handshake runs hs on nc within the timeout and hands the result to
// Accept.
func (l *Listener) handshake(nc net.Conn, t *Ticket) {
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.Timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	c, err := l.hs(ctx, nc)
	outcome := Completed
	switch {
	case err == nil:
		_ = nc.SetDeadline(time.Time{})
	case ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded):
		outcome = TimedOut
	default:
		outcome = Failed
	}
	if !l.gate.Finish(t, outcome) { // evicted, or the listener closed
		nc.Close()
		return
	}
	if err != nil {
		l.opts.Logger.Debug(l.opts.Name+": handshake failed", "remote", nc.RemoteAddr(), "err", err)
		if outcome == Failed {
			refuse(nc)
		} else {
			nc.Close()
		}
		return
	}
	select {
	case l.ready <- c:
	case <-ctx.Done():
		c.Close()
		l.warn("an authenticated connection was not taken by the server within the handshake timeout; closed", "remote", nc.RemoteAddr())
	case <-l.done:
		c.Close()
	}
}

// lingerFor bounds how long refuse reads what a refused peer sends.
const lingerFor = 500 * time.Millisecond

// refuse closes nc, whose handshake failed, so that the peer reads why.
// The server's side has sent its alert (a refused certificate: revoked,
// expired, of another CA), but a TLS 1.3 client's side is done before
// the server has checked its certificate, and it sends its first request
// at once. Closing a socket with those bytes unread sends a reset, and a
// reset makes the client's kernel drop the alert unread: the client would
// see "broken pipe" or "connection reset" instead of the refusal. So refuse
// shuts down its sending side (the alert, then end of stream), reads and
// discards what the peer sends for up to lingerFor, and closes.
func refuse(nc net.Conn) {
	defer nc.Close()
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(lingerFor))
	_, _ = io.Copy(io.Discard, nc)
}

// warn logs msg with the listener's counters, at most once per logEvery;
// the counts say how many refusals the skipped lines stood for.
func (l *Listener) warn(msg string, args ...any) {
	now := time.Now()
	l.logMu.Lock()
	st := l.gate.Stats()
	if !l.logLast.IsZero() && now.Sub(l.logLast) < logEvery {
		l.logMu.Unlock()
		return
	}
	prev, prevAt := l.logged, l.logLast
	l.logLast, l.logged = now, st
	l.logMu.Unlock()
	args = append(args, "pending", st.Pending,
		"refused_per_source", st.RefusedSource-prev.RefusedSource,
		"evicted", st.Evicted-prev.Evicted,
		"timed_out", st.TimedOut-prev.TimedOut,
		"failed", st.Failed-prev.Failed)
	if !prevAt.IsZero() {
		args = append(args, "counted_over", now.Sub(prevAt).Round(time.Second))
	}
	args = append(args, "per_source_bound", l.opts.MaxPerSource, "pending_bound", l.opts.MaxPending, "timeout", l.opts.Timeout)
	l.opts.Logger.Warn(l.opts.Name+": "+msg, args...)
}

// transient reports whether an accept error is one a flood or a busy
// kernel causes and that goes away: out of descriptors or buffers, a
// connection reset or aborted before it was accepted, a timeout.
func transient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
