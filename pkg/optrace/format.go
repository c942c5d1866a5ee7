package optrace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StatNoFollow is the flags value of a stat that did not follow a final
// symlink (lstat), as Linux's AT_SYMLINK_NOFOLLOW.
const StatNoFollow = 0x100

// Magic is the first line of every trace file.
const Magic = "# cairn-trace v1"

// Op names an operation in a trace.
type Op string

// The operations a trace records. Replay maps each to the same call on the
// target's file-system interface.
const (
	OpOpen     Op = "open"
	OpClose    Op = "close"
	OpRead     Op = "read"
	OpWrite    Op = "write"
	OpFsync    Op = "fsync"
	OpTruncate Op = "truncate"
	OpStat     Op = "stat"
	OpReaddir  Op = "readdir"
	OpMkdir    Op = "mkdir"
	OpRmdir    Op = "rmdir"
	OpUnlink   Op = "unlink"
	OpRename   Op = "rename"
	OpLink     Op = "link"
	OpSymlink  Op = "symlink"
	OpReadlink Op = "readlink"
	OpChmod    Op = "chmod"
)

// Ops lists every operation in a fixed order (the order trace-stats prints).
var Ops = []Op{OpOpen, OpClose, OpRead, OpWrite, OpFsync, OpTruncate, OpStat, OpReaddir,
	OpMkdir, OpRmdir, OpUnlink, OpRename, OpLink, OpSymlink, OpReadlink, OpChmod}

var validOp = func() map[Op]bool {
	m := map[Op]bool{}
	for _, o := range Ops {
		m[o] = true
	}
	return m
}()

// Valid reports whether o is an operation of the format.
func (o Op) Valid() bool { return validOp[o] }

// IsData reports whether o moves file data.
func (o Op) IsData() bool { return o == OpRead || o == OpWrite }

// Event is one record of a trace.
type Event struct {
	Start  time.Duration // since the trace began
	Dur    time.Duration
	TID    int64
	Op     Op
	Result int64 // ≥ 0 success (bytes for read/write), < 0 negated errno
	Handle uint64
	Offset int64
	Size   int64
	Flags  int64
	Mode   uint32
	Path   string
	Path2  string
}

// OK reports whether the recorded operation succeeded.
func (e *Event) OK() bool { return e.Result >= 0 }

// End is when the operation finished.
func (e *Event) End() time.Duration { return e.Start + e.Dur }

// Validate checks the invariants the format promises, so that replay and stats
// never see a record they cannot interpret.
func (e *Event) Validate() error {
	switch {
	case !e.Op.Valid():
		return fmt.Errorf("unknown op %q", e.Op)
	case e.Start < 0:
		return fmt.Errorf("negative start %d", e.Start)
	case e.Dur < 0:
		return fmt.Errorf("negative duration %d", e.Dur)
	case e.Offset < 0:
		return fmt.Errorf("negative offset %d", e.Offset)
	case e.Size < -1:
		return fmt.Errorf("size %d below -1", e.Size)
	case !strings.HasPrefix(e.Path, "/"):
		return fmt.Errorf("path %q is not absolute within the traced file system", e.Path)
	case (e.Op == OpRename || e.Op == OpLink || e.Op == OpSymlink) && e.Path2 == "":
		return fmt.Errorf("%s without a second path", e.Op)
	case (e.Op == OpRename || e.Op == OpLink) && !strings.HasPrefix(e.Path2, "/"):
		return fmt.Errorf("%s target %q is not absolute within the traced file system", e.Op, e.Path2)
	case e.Op == OpClose && e.Handle == 0:
		return fmt.Errorf("close without a handle")
	}
	return nil
}

// ResultOf turns an operation's outcome into a record's result field: n on
// success, the negated errno on failure (EIO when the error carries none).
func ResultOf(n int64, err error) int64 {
	if err == nil {
		if n < 0 {
			return 0
		}
		return n
	}
	return -int64(Errno(err))
}

// Errno extracts the Linux errno of err, mapping the io/fs sentinel errors and
// defaulting to EIO.
func Errno(err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case errors.As(err, &en):
		return en
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, fs.ErrInvalid):
		return syscall.EINVAL
	}
	return syscall.EIO
}

// Header is the metadata at the top of a trace.
type Header struct {
	Root    string    // the directory or mount point that was traced
	Source  string    // what produced the trace: "strace", "fsys-recorder", "cairn mount"
	Started time.Time // wall-clock time of start_ns 0
	Host    string
	Command string
	Extra   map[string]string // other keys, kept as read
}

func (h Header) lines() []string {
	var out []string
	add := func(k, v string) {
		if v != "" {
			out = append(out, "# "+k+"="+escape(v))
		}
	}
	add("root", h.Root)
	add("source", h.Source)
	if !h.Started.IsZero() {
		add("started", h.Started.UTC().Format(time.RFC3339Nano))
	}
	add("host", h.Host)
	add("command", h.Command)
	keys := make([]string, 0, len(h.Extra))
	for k := range h.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add(k, h.Extra[k])
	}
	return out
}

// escape percent-encodes the bytes that would break a record's line or field
// structure. It works on bytes, so paths that are not valid UTF-8 survive.
func escape(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func needsEscape(c byte) bool { return c == '%' || c < 0x20 || c == 0x7f }

func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape %q in %q", s[i:i+3], s)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// AppendEvent appends e's record line (with its newline) to dst.
func AppendEvent(dst []byte, e *Event) []byte {
	dst = strconv.AppendInt(dst, int64(e.Start), 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, int64(e.Dur), 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, e.TID, 10)
	dst = append(dst, '\t')
	dst = append(dst, e.Op...)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, e.Result, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendUint(dst, e.Handle, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, e.Offset, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, e.Size, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, e.Flags, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendUint(dst, uint64(e.Mode), 8)
	dst = append(dst, '\t')
	dst = append(dst, escape(e.Path)...)
	dst = append(dst, '\t')
	dst = append(dst, escape(e.Path2)...)
	return append(dst, '\n')
}

// Writer encodes a trace. It is not safe for concurrent use; Recorder is.
type Writer struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// NewWriter writes the magic line and the header to w and returns a Writer for
// the records. Call Flush at the end.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	tw := &Writer{w: bufio.NewWriterSize(w, 256<<10)}
	if _, err := tw.w.WriteString(Magic + "\n"); err != nil {
		return nil, fmt.Errorf("write trace header: %w", err)
	}
	for _, l := range h.lines() {
		if _, err := tw.w.WriteString(l + "\n"); err != nil {
			return nil, fmt.Errorf("write trace header: %w", err)
		}
	}
	return tw, nil
}

// Write encodes one record. The first error sticks: later calls return it.
func (w *Writer) Write(e *Event) error {
	if w.err != nil {
		return w.err
	}
	w.buf = AppendEvent(w.buf[:0], e)
	if _, err := w.w.Write(w.buf); err != nil {
		w.err = fmt.Errorf("write trace record: %w", err)
	}
	return w.err
}

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("flush trace: %w", err)
	}
	return w.err
}

// maxLine bounds one record line; paths are at most 4 KiB each on Linux, so a
// longer line is corruption, not a record.
const maxLine = 64 << 10

// Scanner decodes a trace record by record.
type Scanner struct {
	s      *bufio.Scanner
	line   int
	header Header
	ev     Event
	err    error
	peeked bool
}

// NewScanner reads the magic line and the header lines of r. It fails when r
// does not start with the magic line, so a wrong file is refused at once.
func NewScanner(r io.Reader) (*Scanner, error) {
	s := &Scanner{s: bufio.NewScanner(r)}
	s.s.Buffer(make([]byte, 64<<10), maxLine)
	if !s.s.Scan() {
		if err := s.s.Err(); err != nil {
			return nil, fmt.Errorf("read trace: %w", err)
		}
		return nil, fmt.Errorf("not a cairn trace: empty input")
	}
	s.line = 1
	if first := strings.TrimRight(s.s.Text(), "\r"); first != Magic {
		return nil, fmt.Errorf("not a cairn trace: first line is %q, want %q", truncateText(first, 60), Magic)
	}
	s.header.Extra = map[string]string{}
	// Header lines: "# key=value" until the first record.
	for s.s.Scan() {
		s.line++
		t := s.s.Text()
		if !strings.HasPrefix(t, "#") {
			s.peeked = true
			break
		}
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(t, "#")), "=")
		if !ok {
			continue // a comment
		}
		v, err := unescape(v)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w", s.line, err)
		}
		switch k {
		case "root":
			s.header.Root = v
		case "source":
			s.header.Source = v
		case "started":
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, fmt.Errorf("trace line %d: started: %w", s.line, err)
			}
			s.header.Started = ts
		case "host":
			s.header.Host = v
		case "command":
			s.header.Command = v
		default:
			s.header.Extra[k] = v
		}
	}
	if err := s.s.Err(); err != nil {
		return nil, fmt.Errorf("read trace line %d: %w", s.line+1, err)
	}
	return s, nil
}

// Header returns the header read by NewScanner.
func (s *Scanner) Header() Header { return s.header }

// Scan decodes the next record; it returns false at the end or on an error,
// which Err then reports with its line number.
func (s *Scanner) Scan() bool {
	for s.err == nil {
		if s.peeked {
			s.peeked = false
		} else {
			if !s.s.Scan() {
				if err := s.s.Err(); err != nil {
					s.err = fmt.Errorf("read trace line %d: %w", s.line+1, err)
				}
				return false
			}
			s.line++
		}
		t := strings.TrimRight(s.s.Text(), "\r")
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if err := parseRecord(t, &s.ev); err != nil {
			s.err = fmt.Errorf("trace line %d: %w", s.line, err)
			return false
		}
		return true
	}
	return false
}

// Event returns the record decoded by the last successful Scan.
func (s *Scanner) Event() Event { return s.ev }

// Err returns the first decoding error, nil at a clean end.
func (s *Scanner) Err() error { return s.err }

func parseRecord(line string, e *Event) error {
	f := strings.Split(line, "\t")
	if len(f) != 12 {
		return fmt.Errorf("%d fields, want 12", len(f))
	}
	ints := make([]int64, 10)
	names := []string{"start_ns", "dur_ns", "tid", "op", "result", "handle", "offset", "size", "flags", "mode"}
	for i := 0; i < 10; i++ {
		if i == 3 {
			continue
		}
		base := 10
		if i == 9 {
			base = 8
		}
		if i == 5 {
			u, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %w", names[i], err)
			}
			ints[i] = int64(u)
			continue
		}
		v, err := strconv.ParseInt(f[i], base, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", names[i], err)
		}
		ints[i] = v
	}
	if ints[9] < 0 || ints[9] > 0o7777777 {
		return fmt.Errorf("mode %o out of range", ints[9])
	}
	p, err := unescape(f[10])
	if err != nil {
		return fmt.Errorf("path: %w", err)
	}
	p2, err := unescape(f[11])
	if err != nil {
		return fmt.Errorf("path2: %w", err)
	}
	*e = Event{
		Start: time.Duration(ints[0]), Dur: time.Duration(ints[1]), TID: ints[2], Op: Op(f[3]),
		Result: ints[4], Handle: uint64(ints[5]), Offset: ints[6], Size: ints[7], Flags: ints[8],
		Mode: uint32(ints[9]), Path: p, Path2: p2,
	}
	return e.Validate()
}

// Trace is a whole trace in memory, records sorted by start time.
type Trace struct {
	Header Header
	Events []Event
}

// Read decodes a whole trace, refusing more than maxEvents records (a bound on
// memory: about 150 bytes per record), and sorts the records by start time
// (ties keep file order, so a recorder's order of equal timestamps survives).
func Read(r io.Reader, maxEvents int) (*Trace, error) {
	s, err := NewScanner(r)
	if err != nil {
		return nil, err
	}
	t := &Trace{Header: s.Header()}
	for s.Scan() {
		if len(t.Events) >= maxEvents {
			return nil, fmt.Errorf("trace has more than %d records", maxEvents)
		}
		t.Events = append(t.Events, s.Event())
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(t.Events, func(i, j int) bool { return t.Events[i].Start < t.Events[j].Start })
	return t, nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
