// The strace importer's entry point: the strace command line whose output it
// reads (StraceArgs), ImportStrace with its options and report, and the
// importer's line loop, which glues cut-off calls (<unfinished ...>, <...
// resumed>) back together before a call is parsed (strace_parse.go) and
// applied (strace_syscalls.go) to the processes' descriptor tables
// (strace_procs.go).

package trace

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/pkg/optrace"
)

// StraceArgs are the strace options whose output ImportStrace reads: follow
// children (-f), absolute microsecond timestamps (-ttt), durations (-T), paths of
// file descriptors (-y), no buffer contents (-s 0), no signal lines, and the
// system calls that touch files, descriptors, working directories and
// processes. Put them before "-o LOG -- COMMAND ARGS...".
// A "?" before each name makes strace skip calls this architecture lacks;
// --seccomp-bpf stops the program only at the traced calls, which keeps a
// traced build within a small factor of its normal speed.
var StraceArgs = []string{"-f", "--seccomp-bpf", "-q", "-ttt", "-T", "-y", "-s", "0", "-e", "signal=none", "-e", "trace=?" + strings.Join(straceCalls, ",?")}

var straceCalls = []string{
	"open", "openat", "openat2", "creat", "close", "close_range",
	"read", "pread64", "readv", "preadv", "preadv2", "write", "pwrite64", "writev", "pwritev", "pwritev2",
	"lseek", "sendfile", "copy_file_range",
	"stat", "lstat", "fstat", "newfstatat", "statx", "access", "faccessat", "faccessat2",
	"mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
	"link", "linkat", "symlink", "symlinkat", "readlink", "readlinkat",
	"chmod", "fchmod", "fchmodat", "truncate", "ftruncate", "fsync", "fdatasync", "getdents64",
	"chdir", "fchdir", "dup", "dup2", "dup3", "fcntl", "clone", "clone3", "fork", "vfork", "execve",
}

// StraceOptions configure ImportStrace.
type StraceOptions struct {
	// Root is the absolute directory whose operations are kept (symlinks
	// resolved, since strace -y prints resolved paths); the trace's paths are
	// relative to it. Everything outside (libraries, /etc, the home directory)
	// is dropped.
	Root string
	// Cwd is the working directory of the first traced process; children
	// inherit theirs. It resolves relative paths of the non-*at system calls.
	Cwd string
	// MaxEvents bounds the records produced (0 means 10 million).
	MaxEvents int
}

// StraceReport counts what ImportStrace did with its input.
type StraceReport struct {
	Lines       int64    // lines read
	Calls       int64    // system calls parsed
	Kept        int64    // records produced
	Outside     int64    // calls on paths outside Root
	Unparsed    int64    // lines that were not understood
	UnparsedEx  []string // up to 5 examples of those
	Unsupported int64    // calls on Root that the format has no operation for
}

const maxUnparsedExamples = 5

// ImportStrace converts the output of `strace StraceArgs -o LOG -- CMD` into
// trace records, sorted by start time, with handles that pair opens, reads,
// writes and closes across dup, fork and exec the way the kernel's descriptor
// tables do. Only operations on paths under opt.Root are kept. Lines it cannot
// parse are counted and skipped, not fatal: strace output of a real build has
// rare forms (signals, detaches) that carry no file operation.
func ImportStrace(r io.Reader, opt StraceOptions) ([]optrace.Event, StraceReport, error) {
	if !path.IsAbs(opt.Root) {
		return nil, StraceReport{}, fmt.Errorf("strace import: root %q is not absolute", opt.Root)
	}
	if opt.MaxEvents <= 0 {
		opt.MaxEvents = 10_000_000
	}
	im := &importer{
		opt:     opt,
		root:    path.Clean(opt.Root),
		procs:   map[int64]*proc{},
		pending: map[int64]pendingCall{},
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 256<<10), 16<<20)
	for sc.Scan() {
		im.rep.Lines++
		im.line(sc.Text())
		if len(im.out) > opt.MaxEvents {
			return nil, im.rep, fmt.Errorf("strace import: more than %d records", opt.MaxEvents)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, im.rep, fmt.Errorf("strace import: read line %d: %w", im.rep.Lines+1, err)
	}
	im.closeAll(im.last)
	out := im.out
	sortEvents(out)
	im.rep.Kept = int64(len(out))
	return out, im.rep, nil
}

func sortEvents(ev []optrace.Event) {
	// Stable by start: records of one call (copy_file_range gives a read and
	// a write) keep their order.
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].Start < ev[j].Start })
}

type pendingCall struct {
	ts      time.Duration
	text    string // "name(args..." up to where the line was cut
	applied bool   // already applied when it started (close)
}

type importer struct {
	opt     StraceOptions
	root    string
	procs   map[int64]*proc
	pending map[int64]pendingCall
	out     []optrace.Event
	rep     StraceReport
	epoch   time.Duration // first timestamp, since the Unix epoch
	started bool
	last    time.Duration
	handles uint64
}

var lineRE = regexp.MustCompile(`^(?:\[pid\s+)?(\d+)\]?\s+(\d+\.\d+)\s+(.*)$`)

func (im *importer) unparsed(l string) {
	im.rep.Unparsed++
	if len(im.rep.UnparsedEx) < maxUnparsedExamples {
		im.rep.UnparsedEx = append(im.rep.UnparsedEx, truncateText(l, 200))
	}
}

func (im *importer) line(l string) {
	m := lineRE.FindStringSubmatch(l)
	if m == nil {
		if strings.TrimSpace(l) != "" {
			im.unparsed(l)
		}
		return
	}
	pid, _ := strconv.ParseInt(m[1], 10, 64)
	abs, err := parseTimestamp(m[2])
	if err != nil {
		im.unparsed(l)
		return
	}
	if !im.started {
		im.started, im.epoch = true, abs
	}
	ts := abs - im.epoch
	if ts < 0 {
		ts = 0
	}
	if ts > im.last {
		im.last = ts
	}
	body := m[3]
	switch {
	case strings.HasPrefix(body, "+++"):
		if strings.Contains(body, "exited with") || strings.Contains(body, "killed by") {
			im.exit(pid, ts)
		}
		return
	case strings.HasPrefix(body, "---"):
		return
	case strings.HasPrefix(body, "<..."):
		// "<... read resumed>rest": glue to the cut-off start of the call.
		end := strings.Index(body, " resumed>")
		p, ok := im.pending[pid]
		if end < 0 || !ok {
			im.unparsed(l)
			return
		}
		delete(im.pending, pid)
		if p.applied {
			im.rep.Calls++
			return
		}
		im.call(pid, p.ts, p.text+body[end+len(" resumed>"):], l)
		return
	case strings.HasSuffix(body, "<unfinished ...>"):
		text := strings.TrimRight(strings.TrimSuffix(body, "<unfinished ...>"), " ")
		pc := pendingCall{ts: ts, text: text}
		// The kernel frees a descriptor as soon as close starts, so another
		// thread's open may get the same number before this line resumes:
		// apply the close now, against the table as it was.
		if rest, ok := strings.CutPrefix(text, "close("); ok {
			fd, _, _ := strings.Cut(strings.TrimSuffix(rest, ","), ",")
			im.apply(pid, ts, parsedCall{name: "close", args: []string{strings.TrimSpace(fd)}})
			pc.applied = true
		}
		im.pending[pid] = pc
		return
	}
	im.call(pid, ts, body, l)
}

func (im *importer) call(pid int64, ts time.Duration, text, orig string) {
	c, ok := parseCall(text)
	if !ok {
		im.unparsed(orig)
		return
	}
	im.rep.Calls++
	im.apply(pid, ts, c)
}

func (im *importer) emit(e optrace.Event) {
	if e.Path == "" {
		return
	}
	if err := e.Validate(); err != nil {
		im.rep.Unsupported++
		return
	}
	im.out = append(im.out, e)
}

func (im *importer) newHandle() uint64 {
	im.handles++
	return im.handles
}

// truncateText shortens s to n bytes for an example in a report.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
