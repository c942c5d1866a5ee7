// The traced processes as the importer models them: descriptor tables shared
// or copied the way the kernel's are, working directories, the resolution of
// (dirfd, path) pairs to paths under the root, and the close records due when
// a descriptor's last reference goes (close, dup over it, exit).

package trace

import (
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/pkg/optrace"
)

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
	im.emit(optrace.Event{Start: ts, TID: pid, Op: optrace.OpOpen, Handle: of.handle, Flags: flags, Path: rel})
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
		im.emit(optrace.Event{Start: ts, Dur: dur, TID: pid, Op: optrace.OpClose, Handle: of.handle, Path: of.path})
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
