package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
)

// ErrClosed is returned by Record after Close: an operation recorded then
// would be in memory but not in the file, and the two must not differ.
var ErrClosed = errors.New("history: recorder closed")

// Recorder collects the operations of a run. It is safe for concurrent use
// by the run's workers.
//
// Every recorded operation is kept in memory and, when the Recorder has a
// writer, written to it as one JSON line by a single Write call before
// Record returns: lines of concurrent Records never interleave, and a crash
// of the recording process loses at most the operations in flight. Once a
// write fails the Recorder writes no more (a file with a hole in it would
// make the checker see effects without causes), keeps recording in memory,
// and returns that first error from every later Record, Flush and Close.
type Recorder struct {
	mu     sync.Mutex
	w      io.Writer
	ops    []Op
	err    error // the first write error, sticky
	closed bool
	line   bytes.Buffer
}

// NewRecorder returns a Recorder writing to w; w may be nil to record in
// memory only. The Recorder never closes w: its owner does, after Close.
func NewRecorder(w io.Writer) *Recorder {
	return &Recorder{w: w}
}

// Record records op, which must be well formed (Op.Validate): a malformed
// op is refused with an error and recorded nowhere, so that a file written
// by a Recorder always reads back (ReadOps). The Recorder keeps its own copy:
// the caller may reuse op's slices.
func (r *Recorder) Record(op Op) error {
	if err := op.Validate(); err != nil {
		return fmt.Errorf("history: record: %w", err)
	}
	op = op.Clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.ops = append(r.ops, op)
	if r.err != nil {
		return r.err
	}
	if r.w == nil {
		return nil
	}
	r.line.Reset()
	// json.Encoder ends the line with '\n', so the object and its end
	// go out in the one Write below.
	if err := json.NewEncoder(&r.line).Encode(op); err != nil {
		r.err = fmt.Errorf("history: encode %s: %w", op, err)
		return r.err
	}
	if _, err := r.w.Write(r.line.Bytes()); err != nil {
		r.err = fmt.Errorf("history: write: %w", err)
		return r.err
	}
	return nil
}

// Ops returns a copy of the operations recorded so far, sorted by Start
// then Process (recording order among equals), sharing nothing with the
// Recorder.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	ops := make([]Op, len(r.ops))
	for i, op := range r.ops {
		ops[i] = op.Clone()
	}
	r.mu.Unlock()
	sort.SliceStable(ops, func(i, j int) bool {
		if ops[i].Start != ops[j].Start {
			return ops[i].Start < ops[j].Start
		}
		return ops[i].Process < ops[j].Process
	})
	return ops
}

// Flush pushes what the writer buffers (if it has a Flush method, as a
// bufio.Writer does) and returns the first write error of the Recorder, if
// any: nil means every recorded operation reached the writer.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushLocked()
}

func (r *Recorder) flushLocked() error {
	if r.err != nil {
		return r.err
	}
	if f, ok := r.w.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			r.err = fmt.Errorf("history: flush: %w", err)
			return r.err
		}
	}
	return nil
}

// Close flushes (Flush) and ends recording: a later Record returns
// ErrClosed. Ops still returns what was recorded. Closing twice is
// harmless.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.flushLocked()
}

// ReadOps parses a history of JSON lines, as a Recorder writes it, and returns
// its operations in file order. Blank lines are skipped. It fails, naming
// the line, on a line that is not one JSON object of Op's fields (an unknown
// field is an error: a misspelt field would otherwise read as zero and
// change the meaning of the operation), or whose operation is malformed
// (Op.Validate). A line has no length limit. (It is not called Read: that
// is the Kind of a register read.)
func ReadOps(r io.Reader) ([]Op, error) {
	br := bufio.NewReader(r)
	var ops []Op
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("history: line %d: %w", n, err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			op, perr := parseLine(trimmed)
			if perr != nil {
				return nil, fmt.Errorf("history: line %d: %w", n, perr)
			}
			ops = append(ops, op)
		}
		if err != nil { // io.EOF, after the last line
			return ops, nil
		}
	}
}

func parseLine(line []byte) (Op, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var op Op
	if err := dec.Decode(&op); err != nil {
		return Op{}, err
	}
	if rest := bytes.TrimSpace(line[dec.InputOffset():]); len(rest) > 0 {
		return Op{}, fmt.Errorf("trailing data after the object: %.20q", rest)
	}
	if err := op.Validate(); err != nil {
		return Op{}, err
	}
	return op, nil
}
