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
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
func ImportStrace(r io.Reader, opt StraceOptions) ([]Event, StraceReport, error) {
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

func sortEvents(ev []Event) {
	// Stable by start: records of one call (copy_file_range gives a read and
	// a write) keep their order.
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].Start < ev[j].Start })
}

type openFile struct {
	handle     uint64
	path       string // within the root, "/"-prefixed
	pos        int64
	refs       int
	listed     bool
	appendMode bool
}

type fdEnt struct {
	of      *openFile
	cloexec bool
}

type fdTable struct {
	fds  map[int]fdEnt
	refs int // processes and threads sharing it
}

type proc struct {
	fds *fdTable
	cwd string
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
	out     []Event
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

// errnoByName maps strace's errno names (ENOENT) to numbers.
var errnoByName = func() map[string]syscall.Errno {
	m := map[string]syscall.Errno{}
	for e := syscall.Errno(1); e < 200; e++ {
		if n := unix.ErrnoName(e); n != "" {
			m[n] = e
		}
	}
	return m
}()

// parseTimestamp reads "seconds.fraction" exactly (a float64 would round the
// microseconds of a present-day Unix time).
func parseTimestamp(s string) (time.Duration, error) {
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %w", s, err)
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	ns, err := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %w", s, err)
	}
	return time.Duration(sec)*time.Second + time.Duration(ns), nil
}

// parsedCall is one complete system call line.
type parsedCall struct {
	name  string
	args  []string
	ret   int64  // the return value, or -errno
	retFD string // the ret's "<path>" annotation, if any
	dur   time.Duration
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

// parseCall splits `name(a, b, ...) = ret <dur>`.
func parseCall(text string) (parsedCall, bool) {
	var c parsedCall
	open := strings.IndexByte(text, '(')
	if open <= 0 {
		return c, false
	}
	c.name = text[:open]
	args, rest, ok := splitArgs(text[open+1:])
	if !ok {
		return c, false
	}
	c.args = args
	rest = strings.TrimSpace(rest)
	if !strings.HasPrefix(rest, "=") {
		return c, false
	}
	rest = strings.TrimSpace(rest[1:])
	if i := strings.LastIndex(rest, " <"); i >= 0 && strings.HasSuffix(rest, ">") {
		if d, err := parseTimestamp(rest[i+2 : len(rest)-1]); err == nil {
			c.dur = d
			rest = rest[:i]
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return c, false
	}
	if fields[0] == "?" {
		c.ret = 0
		return c, true
	}
	if fields[0] == "-1" && len(fields) > 1 {
		en, known := errnoByName[fields[1]]
		if !known {
			en = syscall.EIO
		}
		c.ret = -int64(en)
		return c, true
	}
	num, ann := fields[0], ""
	if i := strings.IndexByte(num, '<'); i > 0 {
		// "3</a path with spaces>": the annotation runs to the last '>'.
		end := strings.LastIndexByte(rest, '>')
		if end <= i {
			return c, false
		}
		ann = rest[i+1 : end]
		num = num[:i]
	}
	v, err := strconv.ParseInt(num, 0, 64)
	if err != nil {
		return c, false
	}
	c.ret, c.retFD = v, ann
	return c, true
}

// splitArgs splits top-level arguments up to the closing parenthesis, keeping
// strings, nested structures, comments and "<path>" annotations whole.
func splitArgs(s string) (args []string, rest string, ok bool) {
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '<':
			// An fd annotation follows a digit or AT_FDCWD.
			if i > 0 && (s[i-1] >= '0' && s[i-1] <= '9' || s[i-1] == 'D') {
				j := strings.IndexByte(s[i:], '>')
				if j < 0 {
					return nil, "", false
				}
				i += j
			}
		case '/':
			if i+1 < len(s) && s[i+1] == '*' {
				j := strings.Index(s[i:], "*/")
				if j < 0 {
					return nil, "", false
				}
				i += j + 1
			}
		case '{', '[', '(':
			depth++
		case '}', ']':
			depth--
		case ')':
			if depth == 0 {
				if a := strings.TrimSpace(s[start:i]); a != "" || len(args) > 0 {
					args = append(args, a)
				}
				return args, s[i+1:], true
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return nil, "", false
}

// fdArg reads "3</path>", "AT_FDCWD</cwd>" or "3".
func fdArg(a string) (fd int, p string, ok bool) {
	num := a
	if i := strings.IndexByte(a, '<'); i >= 0 && strings.HasSuffix(a, ">") {
		num, p = a[:i], a[i+1:len(a)-1]
	}
	if num == "AT_FDCWD" {
		return unix.AT_FDCWD, p, true
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, "", false
	}
	return n, p, true
}

// strArg unquotes a C string as strace prints it.
func strArg(a string) (string, bool) {
	if len(a) < 2 || a[0] != '"' {
		return "", false
	}
	end := strings.LastIndexByte(a, '"')
	if end <= 0 {
		return "", false
	}
	s := a[1:end]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'v':
			b.WriteByte('\v')
		case 'f':
			b.WriteByte('\f')
		case 'x':
			if i+3 <= len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
					b.WriteByte(byte(v))
					i += 2
					continue
				}
			}
			b.WriteByte('x')
		default:
			if c >= '0' && c <= '7' {
				j := i
				for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
					j++
				}
				v, _ := strconv.ParseUint(s[i:j], 8, 8)
				b.WriteByte(byte(v))
				i = j - 1
				continue
			}
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

var openFlagNames = map[string]int64{
	"O_RDONLY": unix.O_RDONLY, "O_WRONLY": unix.O_WRONLY, "O_RDWR": unix.O_RDWR,
	"O_CREAT": unix.O_CREAT, "O_EXCL": unix.O_EXCL, "O_NOCTTY": unix.O_NOCTTY, "O_TRUNC": unix.O_TRUNC,
	"O_APPEND": unix.O_APPEND, "O_NONBLOCK": unix.O_NONBLOCK, "O_DSYNC": unix.O_DSYNC, "O_SYNC": unix.O_SYNC,
	"O_DIRECT": unix.O_DIRECT, "O_LARGEFILE": 0, "O_DIRECTORY": unix.O_DIRECTORY, "O_NOFOLLOW": unix.O_NOFOLLOW,
	"O_NOATIME": unix.O_NOATIME, "O_CLOEXEC": unix.O_CLOEXEC, "O_PATH": unix.O_PATH, "O_TMPFILE": unix.O_TMPFILE,
	"O_ASYNC": unix.O_ASYNC,
}

func flagsArg(a string) int64 {
	var f int64
	for _, n := range strings.Split(a, "|") {
		if v, ok := openFlagNames[strings.TrimSpace(n)]; ok {
			f |= v
		} else if v, err := strconv.ParseInt(strings.TrimSpace(n), 0, 64); err == nil {
			f |= v
		}
	}
	return f
}

var modeTypes = map[string]uint32{
	"S_IFREG": syscall.S_IFREG, "S_IFDIR": syscall.S_IFDIR, "S_IFLNK": syscall.S_IFLNK,
	"S_IFIFO": syscall.S_IFIFO, "S_IFSOCK": syscall.S_IFSOCK, "S_IFCHR": syscall.S_IFCHR, "S_IFBLK": syscall.S_IFBLK,
}

func modeArg(a string) uint32 {
	var m uint32
	for _, n := range strings.Split(a, "|") {
		n = strings.TrimSpace(n)
		if v, ok := modeTypes[n]; ok {
			m |= v
		} else if v, err := strconv.ParseUint(n, 8, 32); err == nil {
			m |= uint32(v)
		}
	}
	return m
}

var (
	stModeRE = regexp.MustCompile(`\bstx?_mode=([A-Z_|0-9]+)`)
	stSizeRE = regexp.MustCompile(`\bstx?_size=(\d+)`)
	iovLenRE = regexp.MustCompile(`iov_len=(\d+)`)
	offArgRE = regexp.MustCompile(`^\[(\d+)\]`)
	// openat2's struct open_how
	how2FlagsRE = regexp.MustCompile(`flags=([A-Z_|0-9x]+)`)
	how2ModeRE  = regexp.MustCompile(`mode=(0[0-7]*)`)
)

func statStruct(a string) (mode uint32, size int64) {
	size = -1
	if m := stModeRE.FindStringSubmatch(a); m != nil {
		mode = modeArg(m[1])
	}
	if m := stSizeRE.FindStringSubmatch(a); m != nil {
		size, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return mode, size
}

func intArg(a string) int64 {
	v, _ := strconv.ParseInt(strings.TrimSpace(a), 0, 64)
	return v
}

func (im *importer) proc(pid int64) *proc {
	p := im.procs[pid]
	if p == nil {
		p = &proc{fds: &fdTable{fds: map[int]fdEnt{}, refs: 1}, cwd: im.opt.Cwd}
		im.procs[pid] = p
	}
	return p
}

// inRoot maps an absolute path to the trace's "/"-prefixed path under the root.
func (im *importer) inRoot(abs string) (string, bool) {
	if abs == "" || !path.IsAbs(abs) {
		return "", false
	}
	abs = path.Clean(abs)
	if abs == im.root {
		return "/", true
	}
	if rest, ok := strings.CutPrefix(abs, im.root+"/"); ok {
		return "/" + rest, true
	}
	return "", false
}

// resolve turns a (dirfd, path) pair into an absolute path.
func (im *importer) resolve(pid int64, dirArg string, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	pr := im.proc(pid)
	base := pr.cwd
	if dirArg != "" {
		fd, ann, ok := fdArg(dirArg)
		switch {
		case !ok:
			return ""
		case ann != "":
			base = ann
			if fd == unix.AT_FDCWD {
				pr.cwd = ann // strace just told us the working directory
			}
		case fd != unix.AT_FDCWD:
			ent, ok := pr.fds.fds[fd]
			if !ok {
				return ""
			}
			base = path.Join(im.root, ent.of.path)
		}
	}
	if base == "" {
		return ""
	}
	return path.Join(base, p)
}

func (im *importer) emit(e Event) {
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

// fdFile returns the tracked open file behind fd, or, for an fd the import
// never saw opened (inherited from outside the trace) whose annotation names a
// path under the root, a synthesized open of that path.
func (im *importer) fdFile(pid int64, ts time.Duration, a string, flags int64) *openFile {
	fd, ann, ok := fdArg(a)
	if !ok {
		return nil
	}
	pr := im.proc(pid)
	if ent, ok := pr.fds.fds[fd]; ok {
		return ent.of
	}
	rel, ok := im.inRoot(ann)
	if !ok {
		return nil
	}
	of := &openFile{handle: im.newHandle(), path: rel, refs: 1}
	pr.fds.fds[fd] = fdEnt{of: of}
	im.emit(Event{Start: ts, TID: pid, Op: OpOpen, Handle: of.handle, Flags: flags, Path: rel})
	return of
}

func (im *importer) dropFD(pid int64, fd int, ts time.Duration) {
	t := im.proc(pid).fds
	ent, ok := t.fds[fd]
	if !ok {
		return
	}
	delete(t.fds, fd)
	im.unref(ent.of, pid, ts, 0)
}

func (im *importer) unref(of *openFile, pid int64, ts time.Duration, dur time.Duration) {
	of.refs--
	if of.refs == 0 {
		im.emit(Event{Start: ts, Dur: dur, TID: pid, Op: OpClose, Handle: of.handle, Path: of.path})
	}
}

func (im *importer) exit(pid int64, ts time.Duration) {
	p, ok := im.procs[pid]
	if !ok {
		return
	}
	delete(im.procs, pid)
	p.fds.refs--
	if p.fds.refs > 0 {
		return
	}
	for fd, ent := range p.fds.fds {
		delete(p.fds.fds, fd)
		im.unref(ent.of, pid, ts, 0)
	}
}

func (im *importer) closeAll(ts time.Duration) {
	pids := make([]int64, 0, len(im.procs))
	for pid := range im.procs {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		im.exit(pid, ts)
	}
}

// apply turns one system call into records and descriptor-table updates.
func (im *importer) apply(pid int64, ts time.Duration, c parsedCall) {
	a := c.args
	arg := func(i int) string {
		if i < len(a) {
			return a[i]
		}
		return ""
	}
	ok := c.ret >= 0
	// Failed calls keep -errno; successful ones record 0 unless they moved data.
	base := Event{Start: ts, Dur: c.dur, TID: pid, Result: min(c.ret, 0)}
	// pathAt resolves argument i (a string) against dirfd argument d (-1: none).
	pathAt := func(d, i int) (string, bool) {
		s, good := strArg(arg(i))
		if !good {
			return "", false
		}
		dir := ""
		if d >= 0 {
			dir = arg(d)
		}
		abs := im.resolve(pid, dir, s)
		rel, in := im.inRoot(abs)
		if !in {
			im.rep.Outside++
		}
		return rel, in
	}
	switch c.name {
	case "open", "openat", "creat", "openat2":
		var rel string
		var in bool
		var flags int64
		var mode uint32
		switch c.name {
		case "open":
			rel, in = pathAt(-1, 0)
			flags, mode = flagsArg(arg(1)), modeArg(arg(2))
		case "creat":
			rel, in = pathAt(-1, 0)
			flags, mode = unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, modeArg(arg(1))
		case "openat":
			rel, in = pathAt(0, 1)
			flags, mode = flagsArg(arg(2)), modeArg(arg(3))
		case "openat2":
			rel, in = pathAt(0, 1)
			if m := how2FlagsRE.FindStringSubmatch(arg(2)); m != nil {
				flags = flagsArg(m[1])
			}
			if m := how2ModeRE.FindStringSubmatch(arg(2)); m != nil {
				mode = modeArg(m[1])
			}
		}
		if ok {
			// A descriptor number reused by this open replaces whatever it was.
			im.dropFD(pid, int(c.ret), ts)
		}
		if !in {
			return
		}
		if flags&unix.O_PATH != 0 {
			flags = flags &^ (unix.O_PATH | unix.O_ACCMODE)
		}
		e := base
		e.Op, e.Path, e.Flags = OpOpen, rel, flags
		if flags&unix.O_CREAT != 0 {
			e.Mode = mode & 0o7777
		}
		if ok {
			of := &openFile{handle: im.newHandle(), path: rel, refs: 1, appendMode: flags&unix.O_APPEND != 0}
			e.Handle = of.handle
			im.proc(pid).fds.fds[int(c.ret)] = fdEnt{of: of, cloexec: flags&unix.O_CLOEXEC != 0}
		}
		im.emit(e)
	case "close":
		fd, _, good := fdArg(arg(0))
		if !good {
			return
		}
		t := im.proc(pid).fds
		if ent, tracked := t.fds[fd]; tracked {
			delete(t.fds, fd)
			im.unref(ent.of, pid, ts, c.dur)
		}
	case "close_range":
		first, last := intArg(arg(0)), intArg(arg(1))
		t := im.proc(pid).fds
		for fd, ent := range t.fds {
			if int64(fd) >= first && (int64(fd) <= last || last < 0) {
				if strings.Contains(arg(2), "CLOSE_RANGE_CLOEXEC") {
					ent.cloexec = true
					t.fds[fd] = ent
				} else {
					delete(t.fds, fd)
					im.unref(ent.of, pid, ts, c.dur)
				}
			}
		}
	case "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev", "pwritev2":
		isRead := strings.Contains(c.name, "read")
		flags := int64(unix.O_RDONLY)
		if !isRead {
			flags = unix.O_WRONLY
		}
		of := im.fdFile(pid, ts, arg(0), flags)
		if of == nil {
			return
		}
		size := intArg(arg(2))
		if strings.HasSuffix(c.name, "v") || strings.HasSuffix(c.name, "v2") {
			size = 0
			for _, m := range iovLenRE.FindAllStringSubmatch(arg(1), -1) {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				size += n
			}
		}
		off, positional := of.pos, strings.HasPrefix(c.name, "p")
		if positional {
			off = intArg(arg(3))
		}
		e := base
		e.Op, e.Handle, e.Path, e.Offset, e.Size = OpWrite, of.handle, of.path, off, size
		if isRead {
			e.Op = OpRead
		}
		if ok {
			e.Result = c.ret
			if !positional {
				of.pos += c.ret
			}
		}
		im.emit(e)
	case "lseek":
		fd, _, good := fdArg(arg(0))
		if ent, tracked := im.proc(pid).fds.fds[fd]; good && tracked && ok {
			ent.of.pos = c.ret
		}
	case "sendfile", "copy_file_range":
		// sendfile(out, in, offp, n); copy_file_range(in, offp, out, offp, n, flags)
		inArg, outArg, inOff, outOff := arg(1), arg(0), arg(2), ""
		if c.name == "copy_file_range" {
			inArg, outArg, inOff, outOff = arg(0), arg(2), arg(1), arg(3)
		}
		n := int64(0)
		if ok {
			n = c.ret
		}
		for _, side := range []struct {
			fdA, offA string
			op        Op
		}{{inArg, inOff, OpRead}, {outArg, outOff, OpWrite}} {
			flags := int64(unix.O_RDONLY)
			if side.op == OpWrite {
				flags = unix.O_WRONLY
			}
			of := im.fdFile(pid, ts, side.fdA, flags)
			if of == nil {
				continue
			}
			off := of.pos
			if m := offArgRE.FindStringSubmatch(side.offA); m != nil {
				off, _ = strconv.ParseInt(m[1], 10, 64)
			} else if ok {
				of.pos += n
			}
			e := base
			e.Op, e.Handle, e.Path, e.Offset, e.Size = side.op, of.handle, of.path, off, n
			if ok {
				e.Result = n
			}
			im.emit(e)
		}
	case "stat", "lstat", "newfstatat", "statx", "fstat", "access", "faccessat", "faccessat2":
		var rel string
		var in bool
		var st string
		var flags int64
		switch c.name {
		case "stat", "lstat":
			rel, in = pathAt(-1, 0)
			st = arg(1)
			if c.name == "lstat" {
				flags = StatNoFollow
			}
		case "access":
			rel, in = pathAt(-1, 0)
		case "faccessat", "faccessat2":
			rel, in = pathAt(0, 1)
		case "fstat":
			_, ann, _ := fdArg(arg(0))
			rel, in = im.inRoot(ann)
			st = arg(1)
		case "newfstatat", "statx":
			fl := arg(3)
			st = arg(2)
			if c.name == "statx" {
				st, fl = arg(4), arg(2)
			}
			if strings.Contains(fl, "AT_SYMLINK_NOFOLLOW") {
				flags = StatNoFollow
			}
			if s, _ := strArg(arg(1)); s == "" {
				// An empty path names the descriptor itself only with
				// AT_EMPTY_PATH; without it the call fails on nothing.
				if !strings.Contains(fl, "AT_EMPTY_PATH") {
					return
				}
				_, ann, _ := fdArg(arg(0))
				rel, in = im.inRoot(ann)
			} else {
				rel, in = pathAt(0, 1)
			}
		}
		if !in {
			return
		}
		e := base
		e.Op, e.Path, e.Size, e.Flags = OpStat, rel, -1, flags
		if ok && st != "" {
			e.Mode, e.Size = statStruct(st)
		}
		im.emit(e)
	case "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "chmod", "fchmodat", "truncate", "readlink", "readlinkat", "chdir":
		var rel string
		var in bool
		e := base
		switch c.name {
		case "mkdir":
			rel, in = pathAt(-1, 0)
			e.Op, e.Mode = OpMkdir, modeArg(arg(1))&0o7777
		case "mkdirat":
			rel, in = pathAt(0, 1)
			e.Op, e.Mode = OpMkdir, modeArg(arg(2))&0o7777
		case "rmdir":
			rel, in = pathAt(-1, 0)
			e.Op = OpRmdir
		case "unlink":
			rel, in = pathAt(-1, 0)
			e.Op = OpUnlink
		case "unlinkat":
			rel, in = pathAt(0, 1)
			e.Op = OpUnlink
			if strings.Contains(arg(2), "AT_REMOVEDIR") {
				e.Op = OpRmdir
			}
		case "chmod":
			rel, in = pathAt(-1, 0)
			e.Op, e.Mode = OpChmod, modeArg(arg(1))&0o7777
		case "fchmodat":
			rel, in = pathAt(0, 1)
			e.Op, e.Mode = OpChmod, modeArg(arg(2))&0o7777
		case "truncate":
			rel, in = pathAt(-1, 0)
			e.Op, e.Size = OpTruncate, intArg(arg(1))
		case "readlink":
			rel, in = pathAt(-1, 0)
			e.Op = OpReadlink
		case "readlinkat":
			rel, in = pathAt(0, 1)
			e.Op = OpReadlink
		case "chdir":
			s, good := strArg(arg(0))
			if good && ok {
				im.proc(pid).cwd = im.resolve(pid, "", s)
			}
			return
		}
		if !in {
			return
		}
		e.Path = rel
		im.emit(e)
	case "rename", "renameat", "renameat2", "link", "linkat":
		var src, dst string
		var sin, din bool
		if c.name == "rename" || c.name == "link" {
			src, sin = pathAt(-1, 0)
			dst, din = pathAt(-1, 1)
		} else {
			src, sin = pathAt(0, 1)
			dst, din = pathAt(2, 3)
		}
		isLink := strings.HasPrefix(c.name, "link")
		e := base
		switch {
		case sin && din:
			e.Op, e.Path, e.Path2 = OpRename, src, dst
			if isLink {
				e.Op = OpLink
			}
			im.emit(e)
		case sin && !isLink:
			// Moved out of the traced tree: for the tree it is a removal.
			e.Op, e.Path = OpUnlink, src
			im.emit(e)
		case din:
			// Moved or linked in from outside: for the tree it is a new file
			// whose content the trace does not know.
			h := im.newHandle()
			e.Op, e.Path, e.Handle, e.Flags, e.Mode = OpOpen, dst, h, unix.O_CREAT|unix.O_WRONLY, 0o644
			im.emit(e)
			if ok {
				im.emit(Event{Start: ts + c.dur, TID: pid, Op: OpClose, Handle: h, Path: dst})
			}
		}
	case "symlink", "symlinkat":
		target, good := strArg(arg(0))
		if !good {
			return
		}
		var rel string
		var in bool
		if c.name == "symlink" {
			rel, in = pathAt(-1, 1)
		} else {
			rel, in = pathAt(1, 2)
		}
		if !in {
			return
		}
		e := base
		e.Op, e.Path, e.Path2 = OpSymlink, rel, target
		im.emit(e)
	case "fchmod", "ftruncate", "fsync", "fdatasync", "getdents64":
		of := im.fdFile(pid, ts, arg(0), unix.O_RDONLY)
		if of == nil {
			return
		}
		e := base
		e.Handle, e.Path = of.handle, of.path
		switch c.name {
		case "fchmod":
			e.Op, e.Mode, e.Handle = OpChmod, modeArg(arg(1))&0o7777, 0
		case "ftruncate":
			e.Op, e.Size = OpTruncate, intArg(arg(1))
		case "fsync", "fdatasync":
			e.Op = OpFsync
		case "getdents64":
			if of.listed {
				return // one readdir record per listing, not per buffer
			}
			of.listed = true
			e.Op = OpReaddir
		}
		im.emit(e)
	case "fchdir":
		if _, ann, good := fdArg(arg(0)); good && ann != "" && ok {
			im.proc(pid).cwd = ann
		}
	case "dup", "dup2", "dup3", "fcntl":
		if !ok {
			return
		}
		if c.name == "fcntl" && !strings.HasPrefix(arg(1), "F_DUPFD") {
			if strings.HasPrefix(arg(1), "F_SETFD") {
				fd, _, _ := fdArg(arg(0))
				t := im.proc(pid).fds
				if ent, tracked := t.fds[fd]; tracked {
					ent.cloexec = strings.Contains(arg(2), "FD_CLOEXEC")
					t.fds[fd] = ent
				}
			}
			return
		}
		oldFD, _, good := fdArg(arg(0))
		if !good {
			return
		}
		newFD := int(c.ret)
		if newFD == oldFD {
			return
		}
		t := im.proc(pid).fds
		im.dropFD(pid, newFD, ts)
		if ent, tracked := t.fds[oldFD]; tracked {
			ent.of.refs++
			t.fds[newFD] = fdEnt{of: ent.of, cloexec: c.name == "dup3" && strings.Contains(arg(2), "O_CLOEXEC") ||
				strings.Contains(arg(1), "F_DUPFD_CLOEXEC")}
		}
	case "clone", "clone3", "fork", "vfork":
		if !ok || c.ret == 0 {
			return
		}
		parent := im.proc(pid)
		child := im.procs[c.ret]
		flags := strings.Join(a, ",")
		shared := strings.Contains(flags, "CLONE_FILES") || strings.Contains(flags, "CLONE_THREAD")
		if child == nil {
			child = &proc{cwd: parent.cwd}
			im.procs[c.ret] = child
		} else if child.cwd == "" {
			child.cwd = parent.cwd
		}
		if shared {
			if child.fds != nil && child.fds != parent.fds {
				// The child ran before its parent's clone returned and built
				// a table of its own; fold it into the shared one.
				for fd, ent := range child.fds.fds {
					parent.fds.fds[fd] = ent
				}
			}
			child.fds = parent.fds
			parent.fds.refs++
			return
		}
		t := &fdTable{fds: map[int]fdEnt{}, refs: 1}
		if child.fds != nil {
			t = child.fds
		}
		for fd, ent := range parent.fds.fds {
			if _, exists := t.fds[fd]; !exists {
				ent.of.refs++
				t.fds[fd] = ent
			}
		}
		child.fds = t
	case "execve":
		if !ok {
			return
		}
		t := im.proc(pid).fds
		for fd, ent := range t.fds {
			if ent.cloexec {
				delete(t.fds, fd)
				im.unref(ent.of, pid, ts, 0)
			}
		}
	}
}
