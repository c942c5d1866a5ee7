package client

import (
	"context"
	"slices"
	"strings"
	"syscall"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/nsreplica"
	"github.com/cairnfs/cairn/pkg/perm"
)

// The path API: stateless operations by full path (FalconFS §4). The client
// keeps no metadata: every call sends the whole path ("/a/b/c", inside the
// volume) to the meta partition the last name routes to, which resolves the
// directories in its namespace replica, checks cred's search permission on
// every one, and runs the operation there. open, stat, lstat, readlink,
// create, mkdir, symlink and unlink are one request: the partition makes
// the other hops itself (the home of a renamed or hard-linked name's
// inode, the parent's home for a create's or an unlink's follow-ups, the
// owner of a name the client routed by a stale map). The client asks
// again only for a symlink in the middle of a path (the partition returns
// it, the client substitutes the target), when a partition could not
// reach the owner of the name (it names the owner) and when a follow-up
// could not be sent (the client sends it, with the same ids).
// rmdir, rename, link and setattr resolve their paths this way, then run
// the coordinated inode operations.
//
// Credentials are the caller's assertion: the server checks permissions as
// a local file system would for that identity (POSIX mode bits, no ACLs),
// for correctness, not as a security boundary.

// Cred is the identity a path operation runs as.
type Cred = perm.Cred

// WithCred returns ctx whose requests act for cred: the metadata changes
// made under it carry it (metapb.TxnRequest.cred), and so do a file's
// writes when the file was opened under it. Servers check permissions with
// it for a client whose capabilities map ids (root squash, id maps); for
// others the client's own checks (or the kernel's) are what counts.
func WithCred(ctx context.Context, cred Cred) context.Context {
	return metaclient.WithCred(ctx, &metapb.Cred{Uid: cred.Uid, Gid: cred.Gid, Groups: cred.Groups})
}

// maxSymlinkHops bounds the symlinks one path operation follows (Linux's
// MAXSYMLINKS): ELOOP beyond.
const maxSymlinkHops = 40

// maxPathHops bounds the redirects to another partition one step follows.
const maxPathHops = 4

func credPB(c Cred) *metapb.Cred {
	return &metapb.Cred{Uid: c.Uid, Gid: c.Gid, Groups: c.Groups}
}

// pathResult is a resolved path: the last name's dentry and inode (nil
// when the name does not exist: errno ENOENT with the parent known), the
// parent directory with its attributes, and the path as finally resolved
// (symlinks substituted).
type pathResult struct {
	resp *metapb.PathResponse
	path string
	name string // the last component ("" for the root or a path ending in "..")
}

// pathStep sends one path request to the partition the last name routes
// to, following the partition's redirects. It returns the response even
// when its errno is not 0 (callers need the resolved parent of a missing
// name); transport failures are errors.
func (v *Volume) pathStep(ctx context.Context, op, path string, req *metapb.PathRequest) (*metapb.PathResponse, error) {
	comps, _, e := nsreplica.Split(path)
	if e != 0 {
		return nil, errnoErr(op, e, "path %q", path)
	}
	name := ""
	if n := len(comps); n > 0 && comps[n-1] != ".." {
		name = comps[n-1]
	}
	req.Path = []byte(path)
	return v.sendPath(ctx, op, req, func(w *view) (*pb.Partition, error) {
		if name == "" {
			return w.home(RootIno)
		}
		// A path-walk name's owner depends on the parent, which only the
		// partition knows: any partition redirects.
		return w.route(0, name)
	})
}

// nameReq sends a by-inode path request (PathRequest.parent_ino) for name
// in directory parent to the partition the name routes to, following its
// redirects as pathStep does. The answer's errno is the caller's to read.
func (v *Volume) nameReq(ctx context.Context, op string, parent uint64, name string, req *metapb.PathRequest) (*metapb.PathResponse, error) {
	req.ParentIno, req.Path = parent, []byte(name)
	return v.sendPath(ctx, op, req, byName(parent, name))
}

// sendPath sends req to the partition first picks, then to the owner a
// partition names when it answers EWRONGMP (a stale routing it could not
// forward), at most maxPathHops times. EMOVING is retried as for Txns.
func (v *Volume) sendPath(ctx context.Context, op string, req *metapb.PathRequest, first picker) (*metapb.PathResponse, error) {
	if req.Cred == nil {
		req.Cred = metaclient.CredOf(ctx) // a by-inode request acts for the caller too
	}
	var target uint64
	for hop := 0; ; hop++ {
		pick := first
		if target != 0 {
			pick = byID(target)
		}
		var resp *metapb.PathResponse
		err := v.do(ctx, op, pick, func(ctx context.Context, p *pb.Partition) (err error) {
			resp, err = v.meta.Path(ctx, p, req)
			if err == nil && syscall.Errno(resp.GetErrno()) == errnoMoving {
				err = routingCheck(resp.GetErrno(), p.GetId(), resp.GetMessage())
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if syscall.Errno(resp.GetErrno()) != errnoWrongMP {
			if resp.GetRoutingVersion() > v.current().routing {
				// A partition forwarded the request (or answered) under
				// a newer routing than the view's: the volume grew or
				// moved names, and its inode ranges may have changed
				// too. Read the map (at most 5 times a second).
				v.refresh(ctx)
			}
			return resp, nil
		}
		if hop >= maxPathHops || resp.GetOwner() == 0 {
			return nil, errnoErr(op, syscall.EIO, "%q: meta partitions keep redirecting (last: %s)", req.Path, resp.GetMessage())
		}
		if resp.GetRoutingVersion() > v.current().routing {
			v.refresh(ctx)
		}
		target = resp.GetOwner()
	}
}

// substitute replaces component k of comps with a symlink's target.
func substitute(comps []string, k int, target string, trailing bool) string {
	var b strings.Builder
	if !strings.HasPrefix(target, "/") {
		for _, c := range comps[:k] {
			b.WriteString("/")
			b.WriteString(c)
		}
		b.WriteString("/")
	}
	b.WriteString(target)
	for _, c := range comps[k+1:] {
		b.WriteString("/")
		b.WriteString(c)
	}
	if trailing {
		b.WriteString("/")
	}
	return b.String()
}

// resolve runs req on path, substituting symlinks met in the middle of the
// path and, with follow, a symlink as the last component. A non-zero errno
// of the final answer is returned as an *Error along with the result (so
// callers can use the parent of a missing name).
func (v *Volume) resolve(ctx context.Context, op, path string, follow bool, req *metapb.PathRequest) (*pathResult, error) {
	for hops := 0; ; hops++ {
		if hops > maxSymlinkHops {
			return nil, errnoErr(op, syscall.ELOOP, "%q: more than %d symlinks", path, maxSymlinkHops)
		}
		comps, trailing, e := nsreplica.Split(path)
		if e != 0 {
			return nil, errnoErr(op, e, "path %q", path)
		}
		resp, err := v.pathStep(ctx, op, path, req)
		if err != nil {
			return nil, err
		}
		if resp.GetSymlink() {
			k := int(resp.GetSymlinkAt())
			if k >= len(comps) {
				return nil, errnoErr(op, syscall.EIO, "%q: symlink at component %d of %d", path, k, len(comps))
			}
			path = substitute(comps, k, string(resp.GetSymlinkTarget()), trailing)
			continue
		}
		r := &pathResult{resp: resp, path: path}
		if n := len(comps); n > 0 && comps[n-1] != ".." {
			r.name = comps[n-1]
		}
		if e := syscall.Errno(resp.GetErrno()); e != 0 {
			return r, &Error{Op: op, Errno: e, Msg: resp.GetMessage()}
		}
		d := resp.GetDentry()
		if follow && r.name != "" && d.GetType() == metapb.FileType_FILE_TYPE_SYMLINK && req.Op == metapb.PathOp_PATH_OP_LOOKUP {
			in, err := v.inodeOf(ctx, op, resp)
			if err != nil {
				return nil, err
			}
			path = substitute(comps, len(comps)-1, string(in.GetTarget()), trailing)
			continue
		}
		return r, nil
	}
}

// inodeOf returns the looked-up name's inode: from the answer when it is
// homed on the name's partition, else from its home (a second hop).
func (v *Volume) inodeOf(ctx context.Context, op string, resp *metapb.PathResponse) (*metapb.Inode, error) {
	if in := resp.GetInode(); in != nil {
		return in, nil
	}
	return v.getInode(ctx, op, resp.GetDentry().GetIno())
}

// lookupPath resolves path and returns the last name's inode, checking
// access (perm bits) on it.
//
// An inode homed on another partition than its name is fetched in a
// second request; if it is gone by then, the name was replaced or removed
// in between (a rename over it freed the inode it named), and the path is
// resolved again, at most lookupAttempts times: a stat of a name that a
// rename replaces sees the old file or the new one, never neither, as
// rename(2) promises. (The simulation found it: a stat answered ENOENT
// while a rename replaced the name.)
func (v *Volume) lookupPath(ctx context.Context, op, path string, follow bool, access uint32, cred Cred) (*pathResult, *metapb.Inode, error) {
	var (
		r   *pathResult
		in  *metapb.Inode
		err error
	)
	for attempt := 1; ; attempt++ {
		r, err = v.resolve(ctx, op, path, follow, &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_LOOKUP, Cred: credPB(cred), Access: access})
		if err != nil {
			return r, nil, err
		}
		in, err = v.inodeOf(ctx, op, r.resp)
		if err == nil {
			break
		}
		if !vanished(r.resp, err, attempt) {
			return nil, nil, err
		}
	}
	if r.resp.GetInode() == nil && access != 0 && !perm.Allowed(cred, in.GetType().ModeBits()|in.GetMode(), in.GetUid(), in.GetGid(), access) {
		return nil, nil, errnoErr(op, syscall.EACCES, "%q", path)
	}
	return r, in, nil
}

// lookupAttempts bounds the lookups of one name whose inode vanished
// between the name's answer and the inode's (lookupPath, lookupChild).
const lookupAttempts = 4

// vanished reports whether a lookup whose answer resp lacked the inode,
// and whose second request for it failed with err, should look the name
// up again: the inode was gone (ENOENT) and this was not the last of
// lookupAttempts attempts.
func vanished(resp *metapb.PathResponse, err error, attempt int) bool {
	return resp.GetInode() == nil && ErrnoOf(err) == syscall.ENOENT && attempt < lookupAttempts
}

// StatPath returns the attributes of the file path names, following a
// final symlink.
func (v *Volume) StatPath(ctx context.Context, path string, cred Cred) (*Attr, error) {
	ctx = WithCred(ctx, cred)
	return v.statPath(ctx, "stat", path, true, cred)
}

// LstatPath is StatPath without following a final symlink.
func (v *Volume) LstatPath(ctx context.Context, path string, cred Cred) (*Attr, error) {
	ctx = WithCred(ctx, cred)
	return v.statPath(ctx, "lstat", path, false, cred)
}

func (v *Volume) statPath(ctx context.Context, op, path string, follow bool, cred Cred) (*Attr, error) {
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	_, in, err := v.lookupPath(ctx, op, path, follow, 0, cred)
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
}

// ReadlinkPath returns the target of the symlink path names (EINVAL if it
// is not one).
func (v *Volume) ReadlinkPath(ctx context.Context, path string, cred Cred) (string, error) {
	ctx = WithCred(ctx, cred)
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	_, in, err := v.lookupPath(ctx, "readlink", path, false, 0, cred)
	if err != nil {
		return "", err
	}
	if in.GetType() != metapb.FileType_FILE_TYPE_SYMLINK {
		return "", errnoErr("readlink", syscall.EINVAL, "%q is not a symlink", path)
	}
	return string(in.GetTarget()), nil
}

// accessOf is the permission an open with flags needs.
func accessOf(flags int) uint32 {
	var a uint32
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		a = perm.Read
	case syscall.O_WRONLY:
		a = perm.Write
	default:
		a = perm.Read | perm.Write
	}
	if flags&syscall.O_TRUNC != 0 {
		a |= perm.Write
	}
	return a
}

// OpenPath opens the regular file path names, following symlinks. With
// O_CREAT a missing file is created with permission bits mode, owned by
// cred (EEXIST with O_EXCL if it exists); O_TRUNC truncates; access is
// checked against cred. A read-only open of an existing file is one
// request.
func (v *Volume) OpenPath(ctx context.Context, path string, flags int, mode uint32, cred Cred) (*File, error) {
	ctx = WithCred(ctx, cred)
	const op = "open"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if flags&syscall.O_CREAT != 0 {
		in, created, _, err := v.createPath(ctx, op, path, &metapb.Inode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: mode & 0o7777}, cred, flags&syscall.O_EXCL != 0)
		if err != nil {
			return nil, err
		}
		if created {
			return v.openInode(ctx, op, in, flags&^syscall.O_TRUNC)
		}
	}
	_, in, err := v.lookupPath(ctx, op, path, true, accessOf(flags), cred)
	if err != nil {
		return nil, err
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return v.OpenFile(ctx, in.GetIno(), flags)
	}
	return v.openInode(ctx, op, in, flags)
}

// CreatePath creates the regular file path names (EEXIST if it exists).
func (v *Volume) CreatePath(ctx context.Context, path string, mode uint32, cred Cred) (*Attr, error) {
	ctx = WithCred(ctx, cred)
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	in, _, _, err := v.createPath(ctx, "create", path, &metapb.Inode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: mode & 0o7777}, cred, true)
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
}

// MkdirPath creates the directory path names; the parent's layout
// attribute is copied to it, as Mkdir does.
func (v *Volume) MkdirPath(ctx context.Context, path string, mode uint32, cred Cred) (*Attr, error) {
	ctx = WithCred(ctx, cred)
	const op = "mkdir"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	in, _, val, err := v.createPath(ctx, op, path, &metapb.Inode{Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: mode & 0o7777}, cred, true)
	if err != nil {
		return nil, err
	}
	v.inheritLayout(ctx, op, in.GetIno(), val)
	return toAttr(in), nil
}

// SymlinkPath creates the symlink path -> target.
func (v *Volume) SymlinkPath(ctx context.Context, target, path string, cred Cred) (*Attr, error) {
	ctx = WithCred(ctx, cred)
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if target == "" || len(target) >= nsreplica.MaxPath || strings.IndexByte(target, 0) >= 0 {
		return nil, errnoErr("symlink", syscall.EINVAL, "symlink target of %d bytes", len(target))
	}
	in, _, _, err := v.createPath(ctx, "symlink", path, &metapb.Inode{Type: metapb.FileType_FILE_TYPE_SYMLINK, Mode: 0o777, Target: []byte(target)}, cred, true)
	if err != nil {
		return nil, err
	}
	return toAttr(in), nil
}

// createPath makes the inode tmpl describes under the name path ends in,
// with one request: the partition reads the parent's LayoutAttr for the
// layout of a regular file and returns it (val, nil: none) for a new
// directory to copy. created is false when the name existed and excl is
// not set (the caller opens it). Symlinks in the parent's path are
// followed, not a final one.
func (v *Volume) createPath(ctx context.Context, op, path string, tmpl *metapb.Inode, cred Cred, excl bool) (in *metapb.Inode, created bool, val []byte, err error) {
	tmpl.Uid, tmpl.Gid = cred.Uid, cred.Gid
	inherit := v.hasLayouts()
	if inherit && v.layouts.changedRecently(0) {
		// This client changed a LayoutAttr moments ago and the partitions
		// may remember the old one: look the parent up and read its
		// attribute here.
		inherit = false
		trimmed := strings.TrimRight(path, "/")
		if i := strings.LastIndexByte(trimmed, '/'); i >= 0 {
			_, pin, err := v.lookupPath(ctx, op, trimmed[:i+1], true, 0, cred)
			if err != nil {
				return nil, false, nil, err
			}
			if val, err = v.dirLayoutAttr(ctx, op, pin.GetIno()); err != nil {
				return nil, false, nil, err
			}
			if tmpl.Type == metapb.FileType_FILE_TYPE_REGULAR {
				tmpl.Layout = v.layoutOf(val)
			}
		}
	}
	req := &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_CREATE, Cred: credPB(cred), Create: tmpl, RequestId: newID(), OpId: newID(), InheritLayout: inherit}
	r, err := v.resolve(ctx, op, path, false, req)
	switch {
	case err == nil:
	case isErrno(err, syscall.EEXIST) && !excl:
		return nil, false, nil, nil
	case isErrno(err, syscall.ENOSPC) && r != nil && r.resp.GetParent() != 0:
		// The name's partition has no inode number left (its range was
		// cut): the inode API makes it on another partition.
		ci := &metapb.CreateInode{Type: tmpl.Type, Mode: tmpl.Mode, Uid: tmpl.Uid, Gid: tmpl.Gid, Target: tmpl.Target, Layout: tmpl.Layout}
		in, val, err := v.create(ctx, op, r.resp.GetParent(), r.name, ci)
		return in, err == nil, val, err
	default:
		return nil, false, nil, err
	}
	resp := r.resp
	if inherit && len(resp.GetLayoutAttr()) > 0 {
		val = resp.GetLayoutAttr()
	}
	in = resp.GetInode()
	if !resp.GetParentTouched() {
		// The partition could not reach the parent's home: send the
		// TouchDir (same op id), which takes the create back if the
		// parent is gone.
		ci := &metapb.CreateInode{Type: tmpl.Type}
		touch := v.createTouch(resp.GetParent(), ci)
		touch.GetTouchDir().OpId = req.OpId
		if err := v.touchAfterCreate(ctx, op, resp.GetParent(), r.name, in, touch); err != nil {
			return nil, false, nil, err
		}
	}
	return in, true, val, nil
}

// UnlinkPath removes the non-directory path names (EISDIR for a
// directory): one request, the name's partition runs the steps homed
// elsewhere (the inode's link, the parent's TouchDir) itself.
func (v *Volume) UnlinkPath(ctx context.Context, path string, cred Cred) error {
	ctx = WithCred(ctx, cred)
	const op = "unlink"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	req := &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_UNLINK, Cred: credPB(cred), RequestId: newID(), OpId: newID()}
	v.keepOpen(req)
	r, err := v.resolve(ctx, op, path, false, req)
	if isErrno(err, syscall.EXDEV) && r != nil {
		// A sticky parent and an inode homed elsewhere: check the owner
		// here, then take the inode path.
		in, err := v.getInode(ctx, op, r.resp.GetDentry().GetIno())
		if err != nil {
			return err
		}
		pin := r.resp.GetParentInode()
		if !perm.MayDelete(cred, pin.GetMode(), pin.GetUid(), in.GetUid()) {
			return errnoErr(op, syscall.EPERM, "%q: sticky directory", path)
		}
		return v.Unlink(ctx, r.resp.GetParent(), r.name)
	}
	if err != nil {
		return err
	}
	v.afterUnlink(ctx, op, req, r.resp, r.resp.GetDentry().GetIno())
	return nil
}

// mayChange checks that cred may remove or add a name in the directory a
// path result's parent is (write and search, and the sticky rule for a
// name owned by owner when remove).
func mayChange(op string, r *pathResult, cred Cred, remove bool, owner uint32) error {
	pin := r.resp.GetParentInode()
	if !perm.Allowed(cred, syscall.S_IFDIR|pin.GetMode(), pin.GetUid(), pin.GetGid(), perm.Write|perm.Exec) {
		return errnoErr(op, syscall.EACCES, "%q: no write permission on the parent", r.path)
	}
	if remove && !perm.MayDelete(cred, pin.GetMode(), pin.GetUid(), owner) {
		return errnoErr(op, syscall.EPERM, "%q: sticky directory", r.path)
	}
	return nil
}

// RmdirPath removes the empty directory path names.
func (v *Volume) RmdirPath(ctx context.Context, path string, cred Cred) error {
	ctx = WithCred(ctx, cred)
	const op = "rmdir"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if comps, _, e := nsreplica.Split(path); e == 0 && len(comps) > 0 && comps[len(comps)-1] != ".." {
		// One request: the name's partition checks the parent's
		// permissions and runs the rmdir (PATH_OP_RMDIR), unless it
		// leaves it to the client.
		req := &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_RMDIR, Cred: credPB(cred), RequestId: newID(), OpId: newID()}
		r, err := v.resolve(ctx, op, path, false, req)
		switch {
		case r == nil && err != nil:
			return err
		case r != nil:
			if done, err := v.rmdirAnswer(ctx, op, r.resp.GetParent(), req, r.resp); done {
				return err
			}
		}
	}
	r, in, err := v.lookupPath(ctx, op, path, false, 0, cred)
	if err != nil {
		return err
	}
	if r.name == "" {
		return errnoErr(op, syscall.EBUSY, "%q names the root or ends in \"..\"", path)
	}
	if in.GetType() != metapb.FileType_FILE_TYPE_DIRECTORY {
		return errnoErr(op, syscall.ENOTDIR, "%q", path)
	}
	if err := mayChange(op, r, cred, true, in.GetUid()); err != nil {
		return err
	}
	// The directory just resolved is the hint: Rmdir need not look it up
	// again, and its steps expect exactly that inode.
	ctx = WithRmdirHint(ctx, &NameHint{Ino: in.GetIno(), Mode: syscall.S_IFDIR})
	return v.Rmdir(ctx, r.resp.GetParent(), r.name)
}

// newName resolves the parent of a name to be created or replaced by
// rename or link: the name may exist (returned) or not.
func (v *Volume) newName(ctx context.Context, op, path string, cred Cred) (*pathResult, *metapb.Inode, error) {
	r, in, err := v.lookupPath(ctx, op, path, false, 0, cred)
	switch {
	case err == nil:
		return r, in, nil
	case isErrno(err, syscall.ENOENT) && r != nil && r.resp.GetParent() != 0:
		return r, nil, nil
	}
	return nil, nil, err
}

// RenamePath renames oldPath to newPath (rename(2) semantics, replacing a
// file or an empty directory).
func (v *Volume) RenamePath(ctx context.Context, oldPath, newPath string, cred Cred) error {
	ctx = WithCred(ctx, cred)
	const op = "rename"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	if newName, ok := sameDirRename(oldPath, newPath); ok {
		// One request: the old name's partition checks the parent's
		// permissions and runs the rename (PATH_OP_RENAME), unless it
		// leaves it to the client.
		req := &metapb.PathRequest{Op: metapb.PathOp_PATH_OP_RENAME, NewName: []byte(newName), Cred: credPB(cred), RequestId: newID(), OpId: newID()}
		v.keepOpen(req)
		r, err := v.resolve(ctx, op, oldPath, false, req)
		switch {
		case r == nil && err != nil:
			return err
		case r != nil:
			if done, err := v.renameAnswer(ctx, op, r.resp.GetParent(), req, r.resp); done {
				return err
			}
		}
	}
	ro, in, err := v.lookupPath(ctx, op, oldPath, false, 0, cred)
	if err != nil {
		return err
	}
	rn, dst, err := v.newName(ctx, op, newPath, cred)
	if err != nil {
		return err
	}
	if ro.name == "" || rn.name == "" {
		return errnoErr(op, syscall.EBUSY, "rename of %q to %q: the root or a path ending in \"..\"", oldPath, newPath)
	}
	if err := mayChange(op, ro, cred, true, in.GetUid()); err != nil {
		return err
	}
	var dstOwner uint32
	if dst != nil {
		dstOwner = dst.GetUid()
	}
	if err := mayChange(op, rn, cred, dst != nil, dstOwner); err != nil {
		return err
	}
	// Both names were just resolved: they are the hints, so that Rename
	// does not look them up again (its steps expect exactly these).
	dstHint := &NameHint{Absent: true}
	if dst != nil {
		dstHint = &NameHint{Ino: dst.GetIno(), Mode: dst.GetType().ModeBits()}
	}
	ctx = WithRenameHints(ctx, &NameHint{Ino: in.GetIno(), Mode: in.GetType().ModeBits()}, dstHint)
	return v.Rename(ctx, ro.resp.GetParent(), ro.name, rn.resp.GetParent(), rn.name, 0)
}

// sameDirRename reports whether oldPath and newPath name two names in one
// directory, by the same path (so that one resolution finds both), and
// returns the new name.
func sameDirRename(oldPath, newPath string) (string, bool) {
	oc, otrail, oe := nsreplica.Split(oldPath)
	nc, ntrail, ne := nsreplica.Split(newPath)
	n := len(oc)
	if oe != 0 || ne != 0 || otrail || ntrail || n == 0 || len(nc) != n || !slices.Equal(oc[:n-1], nc[:n-1]) {
		return "", false
	}
	switch last := nc[n-1]; {
	case oc[n-1] == "..", last == "..", last == ".", oc[n-1] == ".":
		return "", false
	default:
		return last, true
	}
}

// LinkPath gives the file oldPath names the additional name newPath.
func (v *Volume) LinkPath(ctx context.Context, oldPath, newPath string, cred Cred) (*Attr, error) {
	ctx = WithCred(ctx, cred)
	const op = "link"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	_, in, err := v.lookupPath(ctx, op, oldPath, false, 0, cred)
	if err != nil {
		return nil, err
	}
	rn, dst, err := v.newName(ctx, op, newPath, cred)
	if err != nil {
		return nil, err
	}
	if dst != nil {
		return nil, errnoErr(op, syscall.EEXIST, "%q", newPath)
	}
	if rn.name == "" {
		return nil, errnoErr(op, syscall.EEXIST, "%q", newPath)
	}
	if err := mayChange(op, rn, cred, false, 0); err != nil {
		return nil, err
	}
	return v.Link(ctx, in.GetIno(), rn.resp.GetParent(), rn.name)
}

// ReadDirPath lists the directory path names (following symlinks), all
// of it, without "." and "..".
func (v *Volume) ReadDirPath(ctx context.Context, path string, cred Cred) ([]DirEntry, error) {
	ctx = WithCred(ctx, cred)
	const op = "readdir"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	_, in, err := v.lookupPath(ctx, op, path, true, perm.Read, cred)
	if err != nil {
		return nil, err
	}
	if in.GetType() != metapb.FileType_FILE_TYPE_DIRECTORY {
		return nil, errnoErr(op, syscall.ENOTDIR, "%q", path)
	}
	var out []DirEntry
	for cursor := ""; ; {
		page, more, err := v.ReadDir(ctx, in.GetIno(), cursor, maxReadDirPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if !more || len(page) == 0 {
			return out, nil
		}
		cursor = page[len(page)-1].Name
	}
}

// maxReadDirPage is the page ReadDirPath asks for.
const maxReadDirPage = 4096

// SetattrPath changes the attributes of the file path names (following
// symlinks) as Setattr does, after the checks chmod(2), chown(2),
// truncate(2) and utimes(2) make for cred: a mode change or explicit times
// need the owner (EPERM), a new owner needs root, a new group the owner
// and a group cred is in, a size write permission (EACCES), "now" times
// the owner or write permission.
func (v *Volume) SetattrPath(ctx context.Context, path string, in SetattrIn, cred Cred) (*Attr, error) {
	ctx = WithCred(ctx, cred)
	const op = "setattr"
	ctx, cancel := v.opCtx(ctx)
	defer cancel()
	_, cur, err := v.lookupPath(ctx, op, path, true, 0, cred)
	if err != nil {
		return nil, err
	}
	if e := setattrAllowed(cred, cur, in); e != 0 {
		return nil, errnoErr(op, e, "%q", path)
	}
	return v.Setattr(ctx, cur.GetIno(), in)
}

// setattrAllowed is the permission part of chmod/chown/truncate/utimes.
func setattrAllowed(c Cred, cur *metapb.Inode, in SetattrIn) syscall.Errno {
	root, owner := c.Uid == 0, c.Uid == cur.GetUid()
	writable := perm.Allowed(c, cur.GetType().ModeBits()|cur.GetMode(), cur.GetUid(), cur.GetGid(), perm.Write)
	inGroup := func(g uint32) bool { return g == c.Gid || slices.Contains(c.Groups, g) }
	switch {
	case root:
		return 0
	case in.Valid&SetUID != 0 && in.Uid != cur.GetUid():
		return syscall.EPERM
	case in.Valid&SetGID != 0 && in.Gid != cur.GetGid() && !(owner && inGroup(in.Gid)):
		return syscall.EPERM
	case in.Valid&(SetMode|SetUID|SetGID|SetAtime|SetMtime|SetCtime) != 0 && !owner:
		return syscall.EPERM
	case in.Valid&SetSize != 0 && !writable:
		return syscall.EACCES
	case in.Valid&(SetAtimeNow|SetMtimeNow) != 0 && !owner && !writable:
		return syscall.EACCES
	}
	return 0
}
