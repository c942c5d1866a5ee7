// Package history records the operations of a test's client workers, one
// JSON object per line, so that a checker can afterwards decide whether the
// file system behaved as a linearizable one would.
//
// A history is the evidence of a test: every operation a worker issued is
// recorded with when it started, when it ended and what came of it. Nothing
// here judges a history; this package only guarantees that what is recorded
// is well formed (Op.Validate), that a file written by a Recorder reads back
// as the same operations (ReadOps), and that the values the workload writes
// into files can be told apart from torn, zeroed or garbage bytes
// (EncodeBlock, EncodeRecord).
package history

import (
	"errors"
	"fmt"
)

// Kind of an operation.
type Kind string

// The kinds of operations a workload issues. Registers and append files are
// files; name operations act on entries of a directory.
const (
	// Write overwrites a register file, of fixed size, in place and whole
	// (pwrite at 0, fsync, close); Value is the value written.
	Write Kind = "write"
	// Read reads a register file (open, read whole, close): Value is the
	// value read, 0 when the file was empty (never written) or absent;
	// Corrupt when the bytes did not decode as one value.
	Read Kind = "read"
	// Append appends record Value to the end of Key (a file only one
	// process appends to), with fsync.
	Append Kind = "append"
	// ReadAppends reads Key whole: Values are the records read, in file
	// order; Corrupt when the bytes did not decode.
	ReadAppends Kind = "read-appends"
	// Create is open(Key/Name, O_CREAT|O_EXCL): ok, or fail with EEXIST.
	Create Kind = "create"
	// Unlink removes Key/Name: ok, or fail with ENOENT.
	Unlink Kind = "unlink"
	// Rename renames Key/Name to Key/To, replacing To: ok, or fail with
	// ENOENT (Name absent).
	Rename Kind = "rename"
	// Stat looks Key/Name up: ok with Value 1 if Name exists, 0 if not
	// (ENOENT is an ok outcome with Value 0).
	Stat Kind = "stat"
	// List reads directory Key: Names are the entries (sorted).
	List Kind = "list"
)

// Known reports whether k is one of the kinds above; ReadOps and Validate
// refuse any other, because a checker cannot judge an operation it does not
// know the meaning of.
func (k Kind) Known() bool {
	switch k {
	case Write, Read, Append, ReadAppends, Create, Unlink, Rename, Stat, List:
		return true
	}
	return false
}

// IsName reports whether k is a name operation (its Key is a directory).
func (k Kind) IsName() bool {
	switch k {
	case Create, Unlink, Rename, Stat, List:
		return true
	}
	return false
}

// Outcome of an operation.
type Outcome string

// The outcomes, as Jepsen's ok, fail and info.
const (
	// OK: it happened, with the result recorded.
	OK Outcome = "ok"
	// Fail: it definitely did not happen (an errno that says so: EEXIST,
	// ENOENT, as recorded in Errno).
	Fail Outcome = "fail"
	// Unknown: it may or may not have happened (timeout, EIO, the process
	// gave up); Jepsen's "info".
	Unknown Outcome = "unknown"
)

// Known reports whether o is OK, Fail or Unknown.
func (o Outcome) Known() bool {
	return o == OK || o == Fail || o == Unknown
}

// Op is one operation: its invocation and its completion.
type Op struct {
	Process int      `json:"process"`           // the worker, unique in a run
	Host    string   `json:"host"`              // the client host it ran on
	Kind    Kind     `json:"kind"`              // what it did
	Key     string   `json:"key"`               // file (registers, appends) or directory (name ops), relative to the volume root
	Name    string   `json:"name,omitempty"`    // entry of name ops
	To      string   `json:"to,omitempty"`      // rename target
	Value   uint64   `json:"value,omitempty"`   // write/append: the value; read: the value read; stat: 1 exists, 0 not
	Values  []uint64 `json:"values,omitempty"`  // read-appends
	Names   []string `json:"names,omitempty"`   // list
	Corrupt bool     `json:"corrupt,omitempty"` // read bytes that decode as no value
	Start   int64    `json:"start"`             // ns since the run began
	End     int64    `json:"end"`               // ns since the run began; for Unknown, when the worker stopped waiting
	Outcome Outcome  `json:"outcome"`           // ok, fail or unknown
	Errno   string   `json:"errno,omitempty"`   // e.g. "ENOENT", "ETIMEDOUT", "EIO"
	Final   bool     `json:"final,omitempty"`   // a read done after the faults healed and the cluster settled
}

// String describes op in one line, for reports and error messages.
func (op Op) String() string {
	s := fmt.Sprintf("p%d@%s %s %s", op.Process, op.Host, op.Kind, op.Key)
	switch op.Kind {
	case Create, Unlink, Stat:
		s += "/" + op.Name
	case Rename:
		s += "/" + op.Name + "->" + op.To
	}
	switch {
	case op.Corrupt:
		s += " = corrupt"
	case op.Kind == ReadAppends && op.Outcome == OK:
		s += fmt.Sprintf(" = %v", op.Values)
	case op.Kind == List && op.Outcome == OK:
		s += fmt.Sprintf(" = %q", op.Names)
	case op.Kind == Write || op.Kind == Append:
		s += fmt.Sprintf(" %d", op.Value)
	case (op.Kind == Read || op.Kind == Stat) && op.Outcome == OK:
		s += fmt.Sprintf(" = %d", op.Value)
	}
	s += fmt.Sprintf(" [%d,%d] %s", op.Start, op.End, op.Outcome)
	if op.Errno != "" {
		s += " " + op.Errno
	}
	if op.Final {
		s += " final"
	}
	return s
}

// Clone returns a copy of op that shares no slice with it, so that a copy
// handed out cannot be changed through the original and the other way round.
func (op Op) Clone() Op {
	if op.Values != nil {
		op.Values = append([]uint64(nil), op.Values...)
	}
	if op.Names != nil {
		op.Names = append([]string(nil), op.Names...)
	}
	return op
}

// Validate reports the first way in which op is not a well-formed record:
// an unknown kind or outcome, a missing key or entry name, a field that
// means nothing for its kind, an end before the start of a completed
// operation. A checker cannot draw conclusions from such a record, so
// Recorder.Record refuses it and ReadOps rejects a file holding one. Validate
// looks at op alone; what only a whole history shows (two processes
// appending to one file, a value written twice) is the checker's to report.
func (op Op) Validate() error {
	if !op.Kind.Known() {
		return fmt.Errorf("unknown kind %q", op.Kind)
	}
	if !op.Outcome.Known() {
		return fmt.Errorf("%s: unknown outcome %q", op.Kind, op.Outcome)
	}
	if op.Key == "" {
		return fmt.Errorf("%s: no key", op.Kind)
	}
	if op.Process < 0 {
		return fmt.Errorf("%s %s: negative process %d", op.Kind, op.Key, op.Process)
	}
	if op.Start < 0 {
		return fmt.Errorf("%s %s: negative start %d", op.Kind, op.Key, op.Start)
	}
	// An Unknown operation's End is only when the worker stopped waiting,
	// which the checker does not rely on; a completed one's must follow
	// its start, or real-time order means nothing.
	if op.Outcome != Unknown && op.End < op.Start {
		return fmt.Errorf("%s %s: end %d before start %d", op.Kind, op.Key, op.End, op.Start)
	}
	if err := op.validateFields(); err != nil {
		return fmt.Errorf("%s %s: %w", op.Kind, op.Key, err)
	}
	return nil
}

// validateFields checks that op carries the fields its kind needs and none
// that mean nothing for it: a stray field is the sign of a workload that
// records something other than what it did.
func (op Op) validateFields() error {
	switch op.Kind {
	case Create, Unlink, Rename, Stat:
		if op.Name == "" {
			return errors.New("no entry name")
		}
	default:
		if op.Name != "" {
			return fmt.Errorf("entry name %q on an operation that has none", op.Name)
		}
	}
	if op.Kind == Rename {
		if op.To == "" {
			return errors.New("rename with no target")
		}
	} else if op.To != "" {
		return fmt.Errorf("rename target %q on a %s", op.To, op.Kind)
	}
	if op.Values != nil && op.Kind != ReadAppends {
		return errors.New("values on an operation other than read-appends")
	}
	if op.Names != nil && op.Kind != List {
		return errors.New("names on an operation other than list")
	}
	if op.Corrupt && op.Kind != Read && op.Kind != ReadAppends {
		return errors.New("corrupt on an operation that reads no file content")
	}
	if op.Final {
		switch op.Kind {
		case Read, ReadAppends, Stat, List:
		default:
			return errors.New("final on an operation that is not a read")
		}
	}
	if op.Kind == Stat && op.Outcome == OK && op.Value > 1 {
		return fmt.Errorf("stat value %d, want 0 or 1", op.Value)
	}
	if (op.Kind == Create || op.Kind == Unlink || op.Kind == Rename || op.Kind == List) && op.Value != 0 {
		return fmt.Errorf("value %d on an operation that has none", op.Value)
	}
	return nil
}
