// Package bench is the DFS-Perf architecture of cairn bench (§4): a master
// hands one workload configuration to its workers, waits until every worker
// has set up, starts them together and collects their statistics at the end —
// two round trips per worker and no message in between, so the framework adds
// nothing to the file system's load while it is measured. Workers are threads
// of the master itself, `cairn bench worker` child processes, or worker
// daemons on other hosts reached over TCP (nodes x processes x threads).
//
// The master also runs the same workload on several targets in turn,
// interleaved over repetitions, and assembles the report.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/bench/report"
	"github.com/cairnfs/cairn/pkg/bench/workload"
)

// ProtocolVersion is checked on setup: master and worker must speak the same.
const ProtocolVersion = 2

// maxMessage bounds one protocol message (a result with every histogram of a
// large workload is well under a megabyte).
const maxMessage = 64 << 20

// Message types. A session is: setup → ready (or error); start → result (or
// error); then any number of cleanup → cleaned; then close.
const (
	msgSetup   = "setup"
	msgReady   = "ready"
	msgStart   = "start"
	msgResult  = "result"
	msgCleanup = "cleanup"
	msgCleaned = "cleaned"
	msgClose   = "close"
	msgError   = "error"
)

// message is one line of the protocol: JSON, newline-terminated.
type message struct {
	Type    string          `json:"type"`
	Setup   *Setup          `json:"setup,omitempty"`
	Ready   *Ready          `json:"ready,omitempty"`
	Results []ProcessResult `json:"results,omitempty"`
	All     bool            `json:"all,omitempty"` // cleanup: also the shared workspace
	Error   string          `json:"error,omitempty"`
}

// Setup is the configuration a worker receives.
type Setup struct {
	Version     int            `json:"version"`
	RunID       string         `json:"run_id"`
	Name        string         `json:"name"` // the worker's name in reports
	Target      string         `json:"target"`
	Spec        *workload.Spec `json:"spec"`
	Dir         string         `json:"dir"`          // the repetition's workspace below the target
	FirstWorker int            `json:"first_worker"` // run-wide index of this node's first process
	Workers     int            `json:"workers"`      // worker processes in the run
	Processes   int            `json:"processes"`    // processes this node runs
	SetupNs     int64          `json:"setup_timeout_ns"`
	RunNs       int64          `json:"run_timeout_ns"`
	// MetaMetrics, "MASTER[,MASTER...]/VOLUME", makes a target that cannot
	// read the servers' metrics itself (a posix: target on a Cairn mount)
	// read those of that volume's meta nodes around every phase.
	MetaMetrics string `json:"meta_metrics,omitempty"`
}

func (s *Setup) check() error {
	switch {
	case s == nil:
		return errors.New("setup message without a setup")
	case s.Version != ProtocolVersion:
		return fmt.Errorf("protocol version %d, this worker speaks %d: use the same cairn build on master and workers", s.Version, ProtocolVersion)
	case s.Processes < 1 || s.Workers < 1 || s.FirstWorker < 0 || s.FirstWorker+s.Processes > s.Workers:
		return fmt.Errorf("bad placement: processes %d from %d of %d", s.Processes, s.FirstWorker, s.Workers)
	case s.SetupNs <= 0 || s.RunNs <= 0:
		return errors.New("setup without time bounds")
	}
	return s.Spec.Check()
}

// Ready is a worker's answer to setup.
type Ready struct {
	Facts   report.HostFacts `json:"facts"`
	SetupNs int64            `json:"setup_ns"`
}

// ProcessResult is one worker process's outcome.
type ProcessResult struct {
	Name    string           `json:"name"`
	Host    string           `json:"host"`
	Threads int              `json:"threads"`
	Result  *workload.Result `json:"result,omitempty"`
	Error   string           `json:"error,omitempty"`
}

// conn carries messages over a byte stream (a child's stdin/stdout, a TCP
// connection). It owns one reader goroutine, stopped and waited for by Close.
type conn struct {
	wmu    sync.Mutex
	w      io.Writer
	closer io.Closer
	in     chan incoming
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

type incoming struct {
	m   *message
	err error
}

func newConn(r io.Reader, w io.Writer, closer io.Closer) *conn {
	c := &conn{w: w, closer: closer, in: make(chan incoming), stop: make(chan struct{}), done: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *conn) read(r io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxMessage)
	for {
		var in incoming
		if sc.Scan() {
			var m message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				in.err = fmt.Errorf("bad message: %w", err)
			} else {
				in.m = &m
			}
		} else {
			in.err = sc.Err()
			if in.err == nil {
				in.err = io.EOF
			}
		}
		select {
		case c.in <- in:
		case <-c.stop:
			return
		}
		if in.err != nil {
			return
		}
	}
}

func (c *conn) send(m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("send %s: %w", m.Type, err)
	}
	return nil
}

// recv waits up to timeout (0: no timeout, only ctx) for the next message.
// An error message from the peer becomes an error.
func (c *conn) recv(ctx context.Context, timeout time.Duration) (*message, error) {
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case in := <-c.in:
		if in.err != nil {
			if errors.Is(in.err, io.EOF) {
				return nil, errors.New("connection closed")
			}
			return nil, in.err
		}
		if in.m.Type == msgError {
			return nil, errors.New(in.m.Error)
		}
		return in.m, nil
	case <-tc:
		return nil, fmt.Errorf("no answer within %s", timeout)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-c.done:
		return nil, errors.New("connection closed")
	}
}

// expect receives a message of the wanted type.
func (c *conn) expect(ctx context.Context, timeout time.Duration, typ string) (*message, error) {
	m, err := c.recv(ctx, timeout)
	if err != nil {
		return nil, err
	}
	if m.Type != typ {
		return nil, fmt.Errorf("protocol: got %q, want %q", m.Type, typ)
	}
	return m, nil
}

// Close closes the stream and waits for the reader goroutine.
func (c *conn) Close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		err = c.closer.Close()
		<-c.done
	})
	return err
}
