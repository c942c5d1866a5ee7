// Parsing one strace output line: the call's name, its top-level arguments,
// its return value and duration, and the argument forms strace prints (file
// descriptors with their paths, C strings, O_* flags, modes, stat structures).

package trace

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
