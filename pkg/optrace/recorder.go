package optrace

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Recorder writes trace records for a file-system layer that calls it from many
// goroutines at once (the FUSE client's request handlers, the recording fsys
// wrapper). The FUSE layer's call for one request looks like
//
//	start := time.Now()
//	n, err := doRead(...)
//	rec.Record(start, optrace.Event{Op: optrace.OpRead, TID: int64(req.Pid), Handle: fh,
//		Path: p, Offset: off, Size: int64(len(buf)), Result: optrace.ResultOf(int64(n), err)})
//
// Record never blocks on anything but the underlying writer (bounded by its
// 256 KiB buffer: when it is full, the caller writes it out) and never fails: the
// first write error sticks and Close returns it, so the file system keeps
// serving while a full disk stops the trace. Handle ids come from NewHandle.
type Recorder struct {
	epoch   time.Time
	mu      sync.Mutex
	w       *Writer
	closer  io.Closer
	closed  bool
	err     error
	count   int64
	handles atomic.Uint64
}

// NewRecorder writes the header to w and returns a Recorder whose start_ns 0 is
// now. h.Started is set to now when zero. If w is an io.Closer, Close closes it.
func NewRecorder(w io.Writer, h Header) (*Recorder, error) {
	now := time.Now()
	if h.Started.IsZero() {
		h.Started = now
	}
	tw, err := NewWriter(w, h)
	if err != nil {
		return nil, err
	}
	r := &Recorder{epoch: now, w: tw}
	if c, ok := w.(io.Closer); ok {
		r.closer = c
	}
	return r, nil
}

// NewHandle returns a handle id that no other open of this trace uses.
func (r *Recorder) NewHandle() uint64 { return r.handles.Add(1) }

// Record appends one operation that started at start. e.Start is replaced by
// start's offset from the recorder's epoch, and e.Dur, when zero, by the time
// elapsed since start. Records after Close are dropped.
func (r *Recorder) Record(start time.Time, e Event) {
	e.Start = start.Sub(r.epoch)
	if e.Start < 0 {
		e.Start = 0
	}
	if e.Dur == 0 {
		e.Dur = time.Since(start)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.err != nil {
		return
	}
	if err := r.w.Write(&e); err != nil {
		r.err = err
		return
	}
	r.count++
}

// Count is the number of records written so far.
func (r *Recorder) Count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Err returns the first write error, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close flushes the records, closes the underlying writer when it is a Closer,
// and returns the first error of the whole recording. Later calls return nil.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.err
	if err == nil {
		err = r.w.Flush()
	}
	if r.closer != nil {
		if cerr := r.closer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close trace: %w", cerr)
		}
	}
	return err
}
