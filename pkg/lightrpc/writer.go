package lightrpc

import (
	"io"
	"sync"
	"time"
)

// writer coalesces the frames of concurrent senders into few write system
// calls: a sender appends its frame and, when no write is in progress,
// becomes the one writing everything queued until the queue is empty. Under
// load one write carries many frames; alone, a frame costs one write and no
// goroutine hand-off. Safe for concurrent use.
type writer struct {
	w       io.Writer
	timeout time.Duration // bounds one write when w has write deadlines

	mu       sync.Mutex
	queued   []byte
	spare    []byte
	writing  bool
	err      error
	maxSpare int
}

func newWriter(w io.Writer) *writer { return &writer{w: w, timeout: writeTimeout, maxSpare: 1 << 20} }

// writeTimeout bounds one write: a peer that stops reading for that long
// loses the connection, and every sender waiting on it is released.
const writeTimeout = 10 * time.Second

type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// minWriteRate is the slowest a peer may take a large write (a Raft
// snapshot in one frame) before the connection is given up: the deadline
// of a write is the base timeout plus its size at this rate.
const minWriteRate = 1 << 20 // bytes per second

func writeBudget(base time.Duration, n int) time.Duration {
	return base + time.Duration(n/minWriteRate)*time.Second
}

// send queues frame (copied) and returns once it is written or handed to the
// sender that is writing. An error is the first write error of the
// connection: everything queued with or after it is lost, and the caller
// closes the connection.
func (w *writer) send(frame []byte) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.queued = append(w.queued, frame...)
	if w.writing {
		w.mu.Unlock()
		return nil
	}
	w.writing = true
	for len(w.queued) > 0 && w.err == nil {
		out := w.queued
		w.queued = w.spare[:0]
		w.mu.Unlock()
		if d, ok := w.w.(writeDeadliner); ok && w.timeout > 0 {
			_ = d.SetWriteDeadline(time.Now().Add(writeBudget(w.timeout, len(out))))
		}
		_, err := w.w.Write(out)
		w.mu.Lock()
		if err != nil {
			w.err = err
		}
		if cap(out) <= w.maxSpare {
			w.spare = out[:0]
		} else {
			w.spare = nil // a burst's buffer is not kept for ever
		}
	}
	w.writing = false
	err := w.err
	w.mu.Unlock()
	return err
}
