// The translation of each traced system call into trace records and
// descriptor-table updates (apply).

package trace

import (
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/optrace"
)

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
	base := optrace.Event{Start: ts, Dur: c.dur, TID: pid, Result: min(c.ret, 0)}
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
		e.Op, e.Path, e.Flags = optrace.OpOpen, rel, flags
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
		e.Op, e.Handle, e.Path, e.Offset, e.Size = optrace.OpWrite, of.handle, of.path, off, size
		if isRead {
			e.Op = optrace.OpRead
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
			op        optrace.Op
		}{{inArg, inOff, optrace.OpRead}, {outArg, outOff, optrace.OpWrite}} {
			flags := int64(unix.O_RDONLY)
			if side.op == optrace.OpWrite {
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
				flags = optrace.StatNoFollow
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
				flags = optrace.StatNoFollow
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
		e.Op, e.Path, e.Size, e.Flags = optrace.OpStat, rel, -1, flags
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
			e.Op, e.Mode = optrace.OpMkdir, modeArg(arg(1))&0o7777
		case "mkdirat":
			rel, in = pathAt(0, 1)
			e.Op, e.Mode = optrace.OpMkdir, modeArg(arg(2))&0o7777
		case "rmdir":
			rel, in = pathAt(-1, 0)
			e.Op = optrace.OpRmdir
		case "unlink":
			rel, in = pathAt(-1, 0)
			e.Op = optrace.OpUnlink
		case "unlinkat":
			rel, in = pathAt(0, 1)
			e.Op = optrace.OpUnlink
			if strings.Contains(arg(2), "AT_REMOVEDIR") {
				e.Op = optrace.OpRmdir
			}
		case "chmod":
			rel, in = pathAt(-1, 0)
			e.Op, e.Mode = optrace.OpChmod, modeArg(arg(1))&0o7777
		case "fchmodat":
			rel, in = pathAt(0, 1)
			e.Op, e.Mode = optrace.OpChmod, modeArg(arg(2))&0o7777
		case "truncate":
			rel, in = pathAt(-1, 0)
			e.Op, e.Size = optrace.OpTruncate, intArg(arg(1))
		case "readlink":
			rel, in = pathAt(-1, 0)
			e.Op = optrace.OpReadlink
		case "readlinkat":
			rel, in = pathAt(0, 1)
			e.Op = optrace.OpReadlink
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
			e.Op, e.Path, e.Path2 = optrace.OpRename, src, dst
			if isLink {
				e.Op = optrace.OpLink
			}
			im.emit(e)
		case sin && !isLink:
			// Moved out of the traced tree: for the tree it is a removal.
			e.Op, e.Path = optrace.OpUnlink, src
			im.emit(e)
		case din:
			// Moved or linked in from outside: for the tree it is a new file
			// whose content the trace does not know.
			h := im.newHandle()
			e.Op, e.Path, e.Handle, e.Flags, e.Mode = optrace.OpOpen, dst, h, unix.O_CREAT|unix.O_WRONLY, 0o644
			im.emit(e)
			if ok {
				im.emit(optrace.Event{Start: ts + c.dur, TID: pid, Op: optrace.OpClose, Handle: h, Path: dst})
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
		e.Op, e.Path, e.Path2 = optrace.OpSymlink, rel, target
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
			e.Op, e.Mode, e.Handle = optrace.OpChmod, modeArg(arg(1))&0o7777, 0
		case "ftruncate":
			e.Op, e.Size = optrace.OpTruncate, intArg(arg(1))
		case "fsync", "fdatasync":
			e.Op = optrace.OpFsync
		case "getdents64":
			if of.listed {
				return // one readdir record per listing, not per buffer
			}
			of.listed = true
			e.Op = optrace.OpReaddir
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
