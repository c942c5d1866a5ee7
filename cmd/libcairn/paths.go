package main

/*
#include <stdlib.h>
#include "cairn.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"

	"github.com/cairnfs/cairn/pkg/client"
)

// The path calls: one SDK path operation each, on a path inside the
// volume, for the client's identity. The SDK checks the path (EINVAL for
// one not starting with "/" or holding a NUL byte); the servers confine a
// client bound to a subtree (EACCES for ".." out of it).

// withSession runs f with h's session and a context bounded by its
// timeout.
func withSession(h C.int64_t, errOut **C.char, f func(ctx context.Context, s *session) (int64, error)) C.int64_t {
	return guard(errOut, func() (int64, error) {
		s, err := sessions.get(int64(h))
		if err != nil {
			return 0, err
		}
		ctx, cancel := s.ctx()
		defer cancel()
		return f(ctx, s)
	})
}

// A client confined to a subtree names the subtree's directory "/", and
// the path API resolves its paths below that directory, the directory
// itself included (the servers let it look its own root up, not change it).

// stat is StatPath, or LstatPath without follow.
func (s *session) stat(ctx context.Context, p string, follow bool) (*client.Attr, error) {
	if follow {
		return s.v.StatPath(ctx, p, s.cred)
	}
	return s.v.LstatPath(ctx, p, s.cred)
}

// readDir is ReadDirPath.
func (s *session) readDir(ctx context.Context, p string) ([]client.DirEntry, error) {
	return s.v.ReadDirPath(ctx, p, s.cred)
}

func fillAttr(out *C.cairn_attr, a *client.Attr) {
	if out == nil {
		return
	}
	*out = C.cairn_attr{
		ino: C.uint64_t(a.Ino), size: C.uint64_t(a.Size), mode: C.uint32_t(a.Mode), nlink: C.uint32_t(a.Nlink),
		uid: C.uint32_t(a.Uid), gid: C.uint32_t(a.Gid),
		atime_ns: C.int64_t(a.Atime.UnixNano()), mtime_ns: C.int64_t(a.Mtime.UnixNano()),
		ctime_ns: C.int64_t(a.Ctime.UnixNano()), btime_ns: C.int64_t(a.Btime.UnixNano()),
	}
}

// cairn_stat fills *out with the attributes of path, following a final
// symlink when follow is not 0.
//
//export cairn_stat
func cairn_stat(h C.int64_t, path *C.char, follow C.int, out *C.cairn_attr, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		a, err := s.stat(ctx, p, follow != 0)
		if err != nil {
			return 0, err
		}
		fillAttr(out, a)
		return 0, nil
	})
}

// cairn_mkdir creates the directory path with permission bits mode.
//
//export cairn_mkdir
func cairn_mkdir(h C.int64_t, path *C.char, mode C.uint32_t, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		_, err := s.v.MkdirPath(ctx, p, uint32(mode), s.cred)
		return 0, err
	})
}

// maxDepth bounds the components cairn_makedirs creates.
const maxDepth = 1024

// cairn_makedirs creates path and its missing parents ('mkdir -p'); an
// existing directory is not an error unless existOK is 0 and path itself
// exists.
//
//export cairn_makedirs
func cairn_makedirs(h C.int64_t, path *C.char, mode C.uint32_t, existOK C.int, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		return 0, makedirs(ctx, s, p, uint32(mode), existOK != 0)
	})
}

func makedirs(ctx context.Context, s *session, p string, mode uint32, existOK bool) error {
	if !strings.HasPrefix(p, "/") {
		return errnoErr("mkdir", syscall.EINVAL, "%q is not an absolute path", p)
	}
	var comps []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			comps = append(comps, c)
		}
	}
	if len(comps) > maxDepth {
		return errnoErr("mkdir", syscall.ENAMETOOLONG, "%d components", len(comps))
	}
	if len(comps) == 0 {
		if existOK {
			return nil
		}
		return errnoErr("mkdir", syscall.EEXIST, "%q", p)
	}
	// Most calls create one directory under an existing one: try the
	// whole path first, then walk down only when a parent is missing.
	_, err := s.v.MkdirPath(ctx, p, mode, s.cred)
	switch {
	case err == nil:
		return nil
	case client.ErrnoOf(err) == syscall.EEXIST:
		return existsAsDir(ctx, s, p, existOK, err)
	case client.ErrnoOf(err) != syscall.ENOENT:
		return err
	}
	for i := range comps {
		sub := "/" + strings.Join(comps[:i+1], "/")
		_, err := s.v.MkdirPath(ctx, sub, mode, s.cred)
		if client.ErrnoOf(err) == syscall.EEXIST && i < len(comps)-1 {
			err = existsAsDir(ctx, s, sub, true, err)
		} else if client.ErrnoOf(err) == syscall.EEXIST {
			err = existsAsDir(ctx, s, sub, existOK, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// existsAsDir is nil if p (which exists, mkdir said with err) is a
// directory and existOK, err if not OK, ENOTDIR if it is not a directory.
func existsAsDir(ctx context.Context, s *session, p string, existOK bool, err error) error {
	if !existOK {
		return err
	}
	a, serr := s.stat(ctx, p, true)
	if serr != nil {
		return serr
	}
	if !a.IsDir() {
		return errnoErr("mkdir", syscall.ENOTDIR, "%q exists and is not a directory", p)
	}
	return nil
}

// cairn_rmdir removes the empty directory path.
//
//export cairn_rmdir
func cairn_rmdir(h C.int64_t, path *C.char, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		return 0, s.v.RmdirPath(ctx, p, s.cred)
	})
}

// cairn_unlink removes the file (not directory) path.
//
//export cairn_unlink
func cairn_unlink(h C.int64_t, path *C.char, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		return 0, s.v.UnlinkPath(ctx, p, s.cred)
	})
}

// cairn_rename renames oldPath to newPath (rename(2)).
//
//export cairn_rename
func cairn_rename(h C.int64_t, oldPath, newPath *C.char, errOut **C.char) C.int64_t {
	o, n := C.GoString(oldPath), C.GoString(newPath)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		return 0, s.v.RenamePath(ctx, o, n, s.cred)
	})
}

// cairn_symlink creates the symlink path -> target.
//
//export cairn_symlink
func cairn_symlink(h C.int64_t, target, path *C.char, errOut **C.char) C.int64_t {
	t, p := C.GoString(target), C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		_, err := s.v.SymlinkPath(ctx, t, p, s.cred)
		return 0, err
	})
}

// cairn_readlink returns the target of the symlink path in *out (its
// length is the result).
//
//export cairn_readlink
func cairn_readlink(h C.int64_t, path *C.char, out **C.char, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		t, err := s.v.ReadlinkPath(ctx, p, s.cred)
		if err != nil {
			return 0, err
		}
		cBytes([]byte(t), out)
		return int64(len(t)), nil
	})
}

// cairn_truncate sets the size of the file path.
//
//export cairn_truncate
func cairn_truncate(h C.int64_t, path *C.char, size C.int64_t, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		if size < 0 {
			return 0, errnoErr("truncate", syscall.EINVAL, "negative size %d", size)
		}
		_, err := s.v.SetattrPath(ctx, p, client.SetattrIn{Valid: client.SetSize, Size: uint64(size)}, s.cred)
		return 0, err
	})
}

// cairn_chmod sets the permission bits of path.
//
//export cairn_chmod
func cairn_chmod(h C.int64_t, path *C.char, mode C.uint32_t, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		_, err := s.v.SetattrPath(ctx, p, client.SetattrIn{Valid: client.SetMode, Mode: uint32(mode) & 0o7777}, s.cred)
		return 0, err
	})
}

// entry is one name of a cairn_listdir answer; the attributes are there
// when detail was asked for (a symlink's are its target's, when it has
// one).
type entry struct {
	Name    string `json:"name"`
	Type    uint32 `json:"type"` // st_mode type bits of the name itself
	Ino     uint64 `json:"ino"`
	Size    uint64 `json:"size"`
	Mode    uint32 `json:"mode"`
	Uid     uint32 `json:"uid"`
	Gid     uint32 `json:"gid"`
	Nlink   uint32 `json:"nlink"`
	MtimeNs int64  `json:"mtime_ns"`
	Link    string `json:"link,omitempty"` // a symlink's target
	Detail  bool   `json:"detail"`
}

// listFanOut bounds the stats one cairn_listdir with detail runs at once.
const listFanOut = 16

// cairn_listdir lists the directory path: a JSON array of entries in *out
// (its length is the result). With detail not 0 every entry carries its
// attributes (one stat each, listFanOut at a time).
//
//export cairn_listdir
func cairn_listdir(h C.int64_t, path *C.char, detail C.int, out **C.char, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		ents, err := s.readDir(ctx, p)
		if err != nil {
			return 0, err
		}
		list := make([]entry, len(ents))
		for i, e := range ents {
			list[i] = entry{Name: e.Name, Type: e.Type, Ino: e.Ino}
		}
		if detail != 0 {
			dir := strings.TrimRight(p, "/") + "/"
			statAll(ctx, s, dir, list)
		}
		b, err := json.Marshal(list)
		if err != nil {
			return 0, err
		}
		cBytes(b, out)
		return int64(len(b)), nil
	})
}

// statAll fills the attributes of the entries of dir; a name removed
// meanwhile keeps only its type.
func statAll(ctx context.Context, s *session, dir string, list []entry) {
	sem := make(chan struct{}, listFanOut)
	var wg sync.WaitGroup
	for i := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func(e *entry) {
			defer func() { <-sem; wg.Done() }()
			p := dir + e.Name
			a, err := s.v.LstatPath(ctx, p, s.cred)
			if err != nil {
				return
			}
			if a.Type() == syscall.S_IFLNK {
				e.Link, _ = s.v.ReadlinkPath(ctx, p, s.cred)
				if t, err := s.v.StatPath(ctx, p, s.cred); err == nil {
					a = t
				}
			}
			e.Ino, e.Size, e.Mode, e.Uid, e.Gid, e.Nlink = a.Ino, a.Size, a.Mode, a.Uid, a.Gid, a.Nlink
			e.MtimeNs, e.Detail = a.Mtime.UnixNano(), true
		}(&list[i])
	}
	wg.Wait()
}

// cairn_rmtree removes path and, if it is a directory, everything below
// it ('rm -r'). Names removed by others meanwhile are not an error.
//
//export cairn_rmtree
func cairn_rmtree(h C.int64_t, path *C.char, errOut **C.char) C.int64_t {
	p := C.GoString(path)
	return withSession(h, errOut, func(ctx context.Context, s *session) (int64, error) {
		a, err := s.stat(ctx, p, false)
		if err != nil {
			return 0, err
		}
		if !a.IsDir() {
			return 0, s.v.UnlinkPath(ctx, p, s.cred)
		}
		return 0, rmtree(ctx, s, strings.TrimRight(p, "/"), 0)
	})
}

func rmtree(ctx context.Context, s *session, dir string, depth int) error {
	if depth > maxDepth {
		return errnoErr("rmtree", syscall.ELOOP, "%q: deeper than %d", dir, maxDepth)
	}
	ents, err := s.readDir(ctx, dir+"/")
	if err != nil {
		return gone(err)
	}
	for _, e := range ents {
		p := dir + "/" + e.Name
		if e.Type == syscall.S_IFDIR {
			err = rmtree(ctx, s, p, depth+1)
		} else {
			err = gone(s.v.UnlinkPath(ctx, p, s.cred))
		}
		if err != nil {
			return err
		}
	}
	if dir == "" {
		return nil // the root itself stays
	}
	return gone(s.v.RmdirPath(ctx, dir, s.cred))
}

// gone is err unless it says the name is already gone.
func gone(err error) error {
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}
