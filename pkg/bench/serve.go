package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ServeOptions configure the worker side: a worker process or daemon.
type ServeOptions struct {
	// WorkerCommand starts a worker process speaking the protocol on stdin
	// and stdout ("cairn bench worker --stdio"), used when a setup asks this
	// node for more than one process.
	WorkerCommand []string
	WorkerEnv     []string
	// Allow lists the directories posix targets must lie below; empty
	// allows any target.
	Allow []string
	// Log receives one line per session event; nil discards them.
	Log io.Writer
}

func (o *ServeOptions) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", a...)
	}
}

// Bounds of the waits of a worker session on its master.
const (
	setupWaitBound   = time.Minute      // from connection to setup message
	startGrace       = time.Minute      // after its own setup, for the others' to finish
	cleanupWaitBound = 10 * time.Minute // for each cleanup or close message
	maxCleanups      = 4
)

// ServeStdio serves one session on this process's standard input and output,
// as a worker process started by a master or a worker daemon.
func ServeStdio(ctx context.Context, opts ServeOptions) error {
	// A non-blocking descriptor is handled by Go's poller, so closing it
	// interrupts a pending read and the reader goroutine can be waited for.
	if err := unix.SetNonblock(0, true); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	in := os.NewFile(0, "stdin")
	c := newConn(in, os.Stdout, in)
	defer c.Close()
	return serveSession(ctx, c, &opts)
}

// serveSession runs one master's session: setup → ready, start → result,
// then cleanups until close. Whatever happens, the worker's own files are
// removed before it returns unless the master asked to keep them.
func serveSession(ctx context.Context, c *conn, opts *ServeOptions) error {
	m, err := c.expect(ctx, setupWaitBound, msgSetup)
	if err != nil {
		return fmt.Errorf("waiting for setup: %w", err)
	}
	s := m.Setup
	if err := s.check(); err != nil {
		c.send(&message{Type: msgError, Error: "setup: " + err.Error()})
		return fmt.Errorf("setup: %w", err)
	}
	opts.logf("session %s: %s on %s, %d process(es) x %d threads", s.RunID, s.Spec.Name(), s.Target, s.Processes, s.Spec.Threads())
	var w worker
	if s.Processes > 1 {
		members, err := newLocalProcesses(opts.WorkerCommand, opts.WorkerEnv, s.Name, s.Name, s.Processes)
		if err != nil {
			c.send(&message{Type: msgError, Error: err.Error()})
			return err
		}
		w = &group{name: s.Name, node: s.Name, members: members, failed: map[string]string{}}
	} else {
		w = newInProcess(s.Name, s.Name, s.FirstWorker, opts.Allow)
	}
	defer w.close()
	ready, err := w.setup(ctx, s)
	if err != nil {
		c.send(&message{Type: msgError, Error: err.Error()})
		w.cleanup(ctx, cleanupWaitBound, false)
		return fmt.Errorf("setup: %w", err)
	}
	if err := c.send(&message{Type: msgReady, Ready: ready}); err != nil {
		w.cleanup(ctx, cleanupWaitBound, false)
		return err
	}
	if _, err := c.expect(ctx, time.Duration(s.SetupNs)+startGrace, msgStart); err != nil {
		w.cleanup(ctx, cleanupWaitBound, false)
		return fmt.Errorf("waiting for start: %w", err)
	}

	// Run, cancelling if the master goes away (it sends nothing during the
	// run, so anything arriving means it is gone).
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := c.recv(runCtx, 0); runCtx.Err() == nil {
			opts.logf("session %s: master gone during the run (%v); stopping", s.RunID, err)
			cancel()
		}
	}()
	results, err := w.run(runCtx, time.Duration(s.RunNs))
	cancel()
	wg.Wait()
	if err != nil {
		c.send(&message{Type: msgError, Error: err.Error()})
		w.cleanup(ctx, cleanupWaitBound, false)
		return fmt.Errorf("run: %w", err)
	}
	if err := c.send(&message{Type: msgResult, Results: results}); err != nil {
		w.cleanup(ctx, cleanupWaitBound, false)
		return err
	}
	cleaned := false
	for i := 0; i < maxCleanups; i++ {
		m, err := c.recv(ctx, cleanupWaitBound)
		if err != nil || m.Type == msgClose {
			break
		}
		if m.Type != msgCleanup {
			c.send(&message{Type: msgError, Error: "protocol: unexpected " + m.Type})
			break
		}
		if err := w.cleanup(ctx, cleanupWaitBound, m.All); err != nil {
			c.send(&message{Type: msgError, Error: err.Error()})
			continue
		}
		cleaned = true
		c.send(&message{Type: msgCleaned})
	}
	if !cleaned {
		w.cleanup(ctx, cleanupWaitBound, false)
	}
	opts.logf("session %s: done", s.RunID)
	return nil
}

// Daemon is a worker on a host of its own, reached by masters over TCP. It
// serves one session at a time and refuses others while busy.
type Daemon struct {
	ln   net.Listener
	opts ServeOptions
}

// Listen opens the daemon's listening socket.
func Listen(addr string, opts ServeOptions) (*Daemon, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return &Daemon{ln: ln, opts: opts}, nil
}

// Addr is the address the daemon listens on.
func (d *Daemon) Addr() net.Addr { return d.ln.Addr() }

// Serve accepts sessions until ctx ends (or, with once, after one session)
// and waits for the running session before returning.
func (d *Daemon) Serve(ctx context.Context, once bool) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	// Closing the listener is how Accept learns that ctx ended.
	serving := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			d.ln.Close()
		case <-serving:
		}
	}()
	defer close(serving)
	defer d.ln.Close()
	busy := make(chan struct{}, 1)
	sessions := 0
	for {
		nc, err := d.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		select {
		case busy <- struct{}{}:
		default:
			c := newConn(nc, nc, nc)
			c.send(&message{Type: msgError, Error: "worker " + d.Addr().String() + " is busy with another master's run"})
			c.Close()
			continue
		}
		sessions++
		n := sessions
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-busy }()
			c := newConn(nc, nc, nc)
			defer c.Close()
			if err := serveSession(ctx, c, &d.opts); err != nil {
				d.opts.logf("session %d from %s: %v", n, nc.RemoteAddr(), err)
			}
			if once {
				d.ln.Close()
			}
		}()
		if once {
			wg.Wait()
			return nil
		}
	}
}

// String names the daemon for logs.
func (d *Daemon) String() string {
	return "worker daemon on " + d.Addr().String() + " (pid " + strconv.Itoa(os.Getpid()) + ")"
}
