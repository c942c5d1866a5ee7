package metanode

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/nsreplica"
	"github.com/cairnfs/cairn/pkg/perm"
)

// Path operations (the stateless client API, FalconFS §4.3). The partition a
// client routes the last name to resolves every directory of the path in
// its namespace replica, fetching a missing entry from the partition that
// owns it, and runs the operation. The replica is a cache of directory
// entries that fences invalidate (metapartition.Partition.OnFence); see
// docs/design.md "Stateless clients" for why the answers stay correct
// while directories are removed, renamed or made unsearchable.

const (
	// maxPathRounds bounds the fetch/resolve rounds of one operation: a
	// path of d uncached directories takes d+1, and every invalidation
	// that lands meanwhile one more.
	maxPathRounds = 256
	// nsFetchTimeout bounds one fetch from another partition.
	nsFetchTimeout = 5 * time.Second
	// A fetch of a locked directory (a coordinator's fence) waits for the
	// lock, polling with this backoff.
	nsBusyMin = 2 * time.Millisecond
	nsBusyMax = 100 * time.Millisecond
)

// pathErr answers a path request with an errno and a message naming the
// path.
func pathErr(e metapartition.Errno, path []byte, format string, args ...any) *metapb.PathResponse {
	return &metapb.PathResponse{Errno: int32(e), Message: fmt.Sprintf("%q: %s", path, fmt.Sprintf(format, args...))}
}

func credOf(c *metapb.Cred) perm.Cred {
	return perm.Cred{Uid: c.GetUid(), Gid: c.GetGid(), Groups: c.GetGroups()}
}

// entryOf is the replica's record of directory inode in.
func entryOf(in *metapb.Inode) nsreplica.Entry {
	return nsreplica.Entry{Ino: in.GetIno(), Mode: syscall.S_IFDIR | in.GetMode()&0o7777, Uid: in.GetUid(), Gid: in.GetGid()}
}

// nsMiss is a directory entry the replica lacks: the root's own entry
// (root), or (parent, name). gen is the replica's generation read before
// the walk that missed it: a fetch answered after an invalidation is not
// kept.
type nsMiss struct {
	root   bool
	parent uint64
	name   string
	at     int // index of name in the path's components
	gen    uint64
}

// pathPlan is what one resolution under the partition's read lock decided:
// an answer, an entry to fetch first, or a Txn to propose (guarded by the
// namespace epoch the path was resolved under).
type pathPlan struct {
	resp  *metapb.PathResponse
	miss  *nsMiss
	txn   *metapb.Txn
	build func(res *metapb.TxnResult) *metapb.PathResponse
}

// Path serves the path operations; see metapb.PathRequest. Besides
// resolving, it saves the client the hops FalconFS saves it: a name this
// partition does not own is forwarded to its owner (FalconFS §4.2.1), and
// a LOOKUP whose inode is homed elsewhere is completed with the inode
// from its home, so an open is one client request whatever the routing.
func (s *service) Path(ctx context.Context, req *metapb.PathRequest) (*metapb.PathResponse, error) {
	if !req.Forwarded {
		s.h.metrics.requests.WithLabelValues("path").Inc()
	}
	p, resp, err := s.pathHere(ctx, req)
	if err != nil || resp.Errno != 0 {
		if err == nil && metapartition.Errno(resp.Errno) == metapartition.EWRONGMP && resp.Owner != 0 && !req.Forwarded {
			return s.forwardPath(ctx, req, resp), nil
		}
		return resp, err
	}
	if req.Op == metapb.PathOp_PATH_OP_LOOKUP && resp.Inode == nil && resp.Dentry.GetIno() != 0 {
		s.completeInode(ctx, p, req, resp)
	}
	return resp, nil
}

// forwardPath passes req to the partition that owns its last name and
// returns that answer; if the owner cannot be reached, the client gets
// the redirect (resp) and goes itself.
func (s *service) forwardPath(ctx context.Context, req *metapb.PathRequest, resp *metapb.PathResponse) *metapb.PathResponse {
	part, err := s.h.peers.partition(ctx, resp.Owner)
	if err != nil {
		return resp
	}
	fwd := proto.Clone(req).(*metapb.PathRequest)
	fwd.Forwarded = true
	s.h.metrics.pathHops.Inc()
	out, err := s.h.peers.meta.Path(ctx, part, fwd)
	if err != nil {
		s.h.peers.forgetMap()
		return resp
	}
	return out
}

// completeInode adds the looked-up name's inode, homed on another
// partition (a renamed or hard-linked name, or one a routing change
// moved), and checks the access asked for on it. If the home cannot
// answer now, the client asks it itself.
func (s *service) completeInode(ctx context.Context, p *partition, req *metapb.PathRequest, resp *metapb.PathResponse) {
	part, err := s.h.peers.home(ctx, p.volume, resp.Dentry.Ino)
	if err != nil {
		return
	}
	s.h.metrics.pathHops.Inc()
	fctx, cancel := context.WithTimeout(ctx, nsFetchTimeout)
	defer cancel()
	r, err := s.h.peers.meta.FetchInode(fctx, part, resp.Dentry.Ino)
	if err != nil || r.Errno != 0 {
		return
	}
	in := r.Inode
	if req.Access != 0 && !perm.Allowed(credOf(req.Cred), modeOf(in), in.GetUid(), in.GetGid(), req.Access) {
		*resp = metapb.PathResponse{Errno: int32(metapartition.EACCES), Message: fmt.Sprintf("%q: permission denied", req.Path)}
		return
	}
	resp.Inode = in
}

// pathHere resolves and runs req on this partition.
func (s *service) pathHere(ctx context.Context, req *metapb.PathRequest) (*partition, *metapb.PathResponse, error) {
	comps, trailing, e := nsreplica.Split(string(req.Path))
	if e != 0 {
		return nil, pathErr(metapartition.Errno(e), req.Path, "not a valid path"), nil
	}
	switch req.Op {
	case metapb.PathOp_PATH_OP_LOOKUP:
	case metapb.PathOp_PATH_OP_CREATE, metapb.PathOp_PATH_OP_UNLINK:
		if len(comps) == 0 || comps[len(comps)-1] == ".." {
			return nil, pathErr(metapartition.EINVAL, req.Path, "%v needs a name as the last component", req.Op), nil
		}
		if req.Op == metapb.PathOp_PATH_OP_CREATE && req.Create == nil {
			return nil, pathErr(metapartition.EINVAL, req.Path, "create without the inode to create"), nil
		}
	default:
		return nil, pathErr(metapartition.EINVAL, req.Path, "unknown path operation %v", req.Op), nil
	}
	p, err := s.readable(ctx, req.PartitionId)
	if err != nil {
		return nil, nil, err
	}
	cred := credOf(req.Cred)
	for round := 0; round < maxPathRounds; round++ {
		var plan pathPlan
		p.sm.read(func(mp *metapartition.Partition) { plan = s.planPath(p, mp, req, comps, trailing, cred) })
		switch {
		case plan.miss != nil:
			resp, err := s.fetch(ctx, p, plan.miss, comps)
			if err != nil {
				return nil, nil, err
			}
			if resp != nil {
				resp.Message = fmt.Sprintf("%q: %s", req.Path, resp.Message)
				return p, resp, nil
			}
		case plan.txn != nil:
			res, err := p.merger.submit(ctx, plan.txn)
			if err != nil {
				if errors.Is(err, multiraft.ErrNotLeader) {
					return nil, nil, s.redirectAfter(ctx, req.PartitionId, err)
				}
				return nil, nil, raftStatus(req.PartitionId, err)
			}
			if metapartition.Errno(res.Errno) == metapartition.ENSCHANGED {
				continue // a fence landed since the resolution: resolve again
			}
			return p, plan.build(res), nil
		default:
			return p, plan.resp, nil
		}
	}
	return nil, nil, status.Errorf(codes.Unavailable, "path %q: still changing after %d resolutions", req.Path, maxPathRounds)
}

// planPath resolves the path's directories in the replica and plans the
// operation on the last component. It runs under the partition's read
// lock, so the resolution and a read answer see one state.
func (s *service) planPath(p *partition, mp *metapartition.Partition, req *metapb.PathRequest, comps []string, trailing bool, cred perm.Cred) pathPlan {
	gen := p.ns.Gen()
	root, ok := p.ns.Get(0, "")
	if !ok {
		return pathPlan{miss: &nsMiss{root: true, gen: gen}}
	}
	// A path naming a directory itself ("/", ".../..") is resolved whole;
	// otherwise the last component is the operation's name.
	dirs, name := comps, ""
	if n := len(comps); n > 0 && comps[n-1] != ".." {
		dirs, name = comps[:n-1], comps[n-1]
	}
	stack, next, e := p.ns.Walk(root, dirs, cred)
	if e != 0 {
		return pathPlan{resp: pathErr(metapartition.Errno(e), req.Path, "search permission denied")}
	}
	if next < len(dirs) {
		return pathPlan{miss: &nsMiss{parent: stack[len(stack)-1].Ino, name: dirs[next], at: next, gen: gen}}
	}
	dir := stack[len(stack)-1]
	base := &metapb.PathResponse{Parent: dir.Ino, ParentInode: &metapb.Inode{Ino: dir.Ino, Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: dir.Mode & 0o7777, Uid: dir.Uid, Gid: dir.Gid}}
	base.RoutingVersion, _ = mp.RoutingState()
	if name == "" {
		// The directory itself: its dentry is not needed, its inode only
		// when homed here (else the client asks its home).
		base.Parent = 0
		base.Dentry = &metapb.Dentry{Ino: dir.Ino, Type: metapb.FileType_FILE_TYPE_DIRECTORY}
		if in, ie := mp.GetInode(dir.Ino); ie == metapartition.OK {
			if req.Access != 0 && !perm.Allowed(cred, in.GetMode()|syscall.S_IFDIR, in.GetUid(), in.GetGid(), req.Access) {
				return pathPlan{resp: pathErr(metapartition.EACCES, req.Path, "permission denied")}
			}
			base.Inode = in
		}
		return pathPlan{resp: base}
	}
	want := uint32(perm.Exec)
	if req.Op != metapb.PathOp_PATH_OP_LOOKUP {
		want |= perm.Write
	}
	if !perm.Allowed(cred, dir.Mode, dir.Uid, dir.Gid, want) {
		return pathPlan{resp: pathErr(metapartition.EACCES, req.Path, "permission denied on the parent directory")}
	}
	if re := mp.CheckRoute(dir.Ino, name, req.Op != metapb.PathOp_PATH_OP_LOOKUP); re != metapartition.OK {
		r := pathErr(re, req.Path, "the last name is not served here")
		r.Owner, _ = mp.Route(dir.Ino, name)
		r.Parent, r.RoutingVersion = dir.Ino, base.RoutingVersion
		return pathPlan{resp: r}
	}
	switch req.Op {
	case metapb.PathOp_PATH_OP_CREATE:
		return s.planCreate(mp, req, base, dir, name)
	case metapb.PathOp_PATH_OP_UNLINK:
		return s.planUnlink(mp, req, base, dir, name, cred)
	}
	d, in, le := mp.Lookup(dir.Ino, name)
	if le != metapartition.OK {
		// The parent exists: say which it is (rename and link name a
		// new path through it).
		r := pathErr(le, req.Path, "lookup")
		r.Parent, r.ParentInode, r.RoutingVersion = base.Parent, base.ParentInode, base.RoutingVersion
		return pathPlan{resp: r}
	}
	if trailing && d.GetType() != metapb.FileType_FILE_TYPE_DIRECTORY && d.GetType() != metapb.FileType_FILE_TYPE_SYMLINK {
		return pathPlan{resp: pathErr(metapartition.ENOTDIR, req.Path, "not a directory")}
	}
	if in != nil && req.Access != 0 && !perm.Allowed(cred, modeOf(in), in.GetUid(), in.GetGid(), req.Access) {
		return pathPlan{resp: pathErr(metapartition.EACCES, req.Path, "permission denied")}
	}
	base.Dentry, base.Inode = d, in
	return pathPlan{resp: base}
}

// modeOf is an inode's mode with its type bits, as perm.Allowed wants it.
func modeOf(in *metapb.Inode) uint32 {
	m := in.GetMode() & 0o7777
	switch in.GetType() {
	case metapb.FileType_FILE_TYPE_DIRECTORY:
		m |= syscall.S_IFDIR
	case metapb.FileType_FILE_TYPE_SYMLINK:
		m |= syscall.S_IFLNK
	default:
		m |= syscall.S_IFREG
	}
	return m
}

// planCreate is the client's create step with the parent resolved here:
// [CreateInode, CreateDentry, TouchDir parent when homed here].
func (s *service) planCreate(mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, name string) pathPlan {
	c := req.Create
	ci := &metapb.CreateInode{Type: c.GetType(), Mode: c.GetMode(), Uid: c.GetUid(), Gid: c.GetGid(), Rdev: c.GetRdev(), Target: c.GetTarget(), Layout: c.GetLayout()}
	isDir := c.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY
	if isDir {
		ci.Parent = dir.Ino
	}
	ops := []*metapb.Op{
		{Op: &metapb.Op_CreateInode{CreateInode: ci}},
		{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: dir.Ino, Name: []byte(name), Type: c.GetType()}}},
	}
	touched := mp.Holds(dir.Ino)
	if touched {
		delta := int32(0)
		if isDir {
			delta = 1
		}
		ops = append(ops, &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: dir.Ino, NlinkDelta: delta, OpId: req.OpId}}})
	}
	return guardedPlan(mp, req, "create", dir.Ino, ops, func(res *metapb.TxnResult) *metapb.PathResponse {
		base.Inode = res.Results[0].GetInode()
		base.Dentry = res.Results[1].GetDentry()
		base.ParentTouched = touched
		return base
	})
}

// guardedPlan proposes ops as the request's Txn, held to the namespace
// epoch the path was just resolved under (ENSCHANGED makes Path resolve
// again); done builds the answer of a success, a refusal names the path
// and the resolved parent.
func guardedPlan(mp *metapartition.Partition, req *metapb.PathRequest, what string, parent uint64, ops []*metapb.Op, done func(*metapb.TxnResult) *metapb.PathResponse) pathPlan {
	txn := &metapb.Txn{Ops: ops, RequestId: req.RequestId, NsEpoch: mp.NsEpoch(), NsGuard: true}
	return pathPlan{txn: txn, build: func(res *metapb.TxnResult) *metapb.PathResponse {
		if res.Errno != 0 {
			r := pathErr(metapartition.Errno(res.Errno), req.Path, "%s: %s", what, res.Message)
			r.Parent = parent
			return r
		}
		return done(res)
	}}
}

// planUnlink is the client's unlink step with the parent resolved here:
// [DeleteDentry (expecting the inode looked up, not a directory), Link -1
// when the inode is homed here, TouchDir parent when homed here]. The
// client evicts at nlink 0 and runs the steps homed elsewhere.
func (s *service) planUnlink(mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, name string, cred perm.Cred) pathPlan {
	d, in, e := mp.Lookup(dir.Ino, name)
	switch {
	case e != metapartition.OK:
		return pathPlan{resp: pathErr(e, req.Path, "unlink")}
	case d.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY:
		return pathPlan{resp: pathErr(metapartition.EISDIR, req.Path, "unlink of a directory")}
	}
	if dir.Mode&syscall.S_ISVTX != 0 {
		if in == nil {
			// The sticky check needs the file's owner, homed elsewhere:
			// the client takes the inode path (errno EXDEV, never shown).
			r := pathErr(metapartition.EXDEV, req.Path, "sticky directory, inode homed elsewhere")
			r.Parent, r.Dentry = dir.Ino, d
			return pathPlan{resp: r}
		}
		if !perm.MayDelete(cred, dir.Mode, dir.Uid, in.GetUid()) {
			return pathPlan{resp: pathErr(metapartition.EPERM, req.Path, "sticky directory")}
		}
	}
	ops := []*metapb.Op{{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
		Parent: dir.Ino, Name: []byte(name), ExpectIno: d.GetIno(), ExpectType: d.GetType()}}}}
	dropped := in != nil
	if dropped {
		ops = append(ops, &metapb.Op{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: d.GetIno(), Delta: -1}}})
	}
	touched := mp.Holds(dir.Ino)
	if touched {
		ops = append(ops, &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: dir.Ino, OpId: req.OpId}}})
	}
	return guardedPlan(mp, req, "unlink", dir.Ino, ops, func(res *metapb.TxnResult) *metapb.PathResponse {
		base.Dentry = d
		base.ParentTouched, base.LinkDropped = touched, dropped
		if dropped {
			base.Inode = res.Results[1].GetInode()
			base.Nlink = base.Inode.GetNlink()
		}
		return base
	})
}

// fetch fills the replica entry m names, from this partition's own state
// or from the partition that owns it. A non-nil response ends the
// operation: the component does not exist (ENOENT), is not a directory
// (ENOTDIR), or is a symlink (ELOOP with the symlink fields set: the client
// substitutes the target and asks again).
func (s *service) fetch(ctx context.Context, p *partition, m *nsMiss, comps []string) (*metapb.PathResponse, error) {
	backoff := nsBusyMin
	for {
		resp, busy, err := s.fetchOnce(ctx, p, m, comps)
		if err != nil || !busy {
			return resp, err
		}
		// A coordinator holds the directory (rmdir, rename, chmod): wait
		// for it, as FalconFS's shared lock on the inode would.
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "path component %q is locked: %v", m.name, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, nsBusyMax)
	}
}

func (s *service) fetchOnce(ctx context.Context, p *partition, m *nsMiss, comps []string) (resp *metapb.PathResponse, busy bool, err error) {
	var (
		owner  uint64
		routed bool
		local  bool
		d      *metapb.Dentry
		in     *metapb.Inode
		e      metapartition.Errno
	)
	p.sm.read(func(mp *metapartition.Partition) {
		if m.root {
			local = mp.Holds(RootIno)
			if local {
				in, e = mp.GetInode(RootIno)
				busy = mp.Fenced(RootIno, time.Now().UnixNano())
			}
			return
		}
		owner, routed = mp.Route(m.parent, m.name)
		local = routed && owner == p.id
		if local {
			d, in, e = mp.Lookup(m.parent, m.name)
			busy = e == metapartition.OK && mp.Fenced(d.GetIno(), time.Now().UnixNano())
		}
	})
	if busy {
		return nil, true, nil
	}
	if !local {
		fctx, cancel := context.WithTimeout(ctx, nsFetchTimeout)
		defer cancel()
		if !m.root && !routed {
			// No routing pushed to this partition yet: the map's.
			if owner, err = s.h.peers.route(fctx, p.volume, m.parent, m.name); err != nil {
				return nil, false, status.Errorf(codes.Unavailable, "namespace fetch of %q: %v", m.name, err)
			}
		}
		if m.root {
			in, e, err = s.fetchInode(fctx, p, RootIno)
		} else {
			d, in, e, err = s.fetchDentry(fctx, p, owner, m.parent, m.name)
		}
		if err != nil {
			return nil, false, err
		}
	}
	switch e {
	case metapartition.OK:
	case metapartition.EBUSY, metapartition.EWRONGMP, metapartition.EMOVING:
		// Locked, or the owner's routing and ours disagree for a moment
		// (a routing change): wait and ask again.
		return nil, true, nil
	case metapartition.ENOENT:
		return &metapb.PathResponse{Errno: int32(metapartition.ENOENT), Message: fmt.Sprintf("component %q does not exist", m.name)}, false, nil
	default:
		return &metapb.PathResponse{Errno: int32(e), Message: fmt.Sprintf("component %q", m.name)}, false, nil
	}
	if !m.root {
		switch d.GetType() {
		case metapb.FileType_FILE_TYPE_DIRECTORY:
		case metapb.FileType_FILE_TYPE_SYMLINK:
			if in == nil {
				if in, e, err = s.fetchInode(ctx, p, d.GetIno()); err != nil {
					return nil, false, err
				}
				if e != metapartition.OK {
					return nil, e == metapartition.EBUSY, nil
				}
			}
			return &metapb.PathResponse{
				Errno: int32(metapartition.ELOOP), Message: fmt.Sprintf("component %q is a symlink", m.name),
				Symlink: true, SymlinkAt: uint32(m.at), SymlinkTarget: in.GetTarget(),
			}, false, nil
		default:
			return &metapb.PathResponse{Errno: int32(metapartition.ENOTDIR), Message: fmt.Sprintf("component %q is not a directory", m.name)}, false, nil
		}
		if in == nil {
			// A renamed directory's name sits on another partition
			// than its inode: its attributes come from its home.
			if in, e, err = s.fetchInode(ctx, p, d.GetIno()); err != nil {
				return nil, false, err
			}
			switch e {
			case metapartition.OK:
			case metapartition.ENOENT:
				return &metapb.PathResponse{Errno: int32(e), Message: fmt.Sprintf("component %q was removed", m.name)}, false, nil
			default:
				return nil, true, nil
			}
		}
	}
	key := ""
	if !m.root {
		key = m.name
	}
	p.ns.Put(m.parent, key, entryOf(in), m.gen)
	return nil, false, nil
}

// fetchDentry asks partition owner for (parent, name) as a namespace
// fetch: EBUSY while the entry's inode is fenced there.
func (s *service) fetchDentry(ctx context.Context, p *partition, owner, parent uint64, name string) (*metapb.Dentry, *metapb.Inode, metapartition.Errno, error) {
	part, err := s.h.peers.partition(ctx, owner)
	if err != nil {
		return nil, nil, 0, status.Errorf(codes.Unavailable, "namespace fetch of %q: %v", name, err)
	}
	s.h.metrics.nsFetches.Inc()
	resp, err := s.h.peers.meta.FetchDentry(ctx, part, parent, name)
	if err != nil {
		s.h.peers.forgetMap()
		return nil, nil, 0, status.Errorf(codes.Unavailable, "namespace fetch of %q from meta partition %d: %v", name, owner, err)
	}
	return resp.GetDentry(), resp.GetInode(), metapartition.Errno(resp.GetErrno()), nil
}

// fetchInode reads ino from its home, locally when this partition is it,
// as a namespace fetch (EBUSY while fenced there).
func (s *service) fetchInode(ctx context.Context, p *partition, ino uint64) (*metapb.Inode, metapartition.Errno, error) {
	var (
		in    *metapb.Inode
		e     metapartition.Errno
		local bool
	)
	p.sm.read(func(mp *metapartition.Partition) {
		if local = mp.Holds(ino); local {
			in, e = mp.GetInode(ino)
			if e == metapartition.OK && mp.Fenced(ino, time.Now().UnixNano()) {
				e = metapartition.EBUSY
			}
		}
	})
	if local {
		return in, e, nil
	}
	part, err := s.h.peers.home(ctx, p.volume, ino)
	if err != nil {
		return nil, 0, status.Errorf(codes.Unavailable, "namespace fetch of inode %d: %v", ino, err)
	}
	s.h.metrics.nsFetches.Inc()
	resp, err := s.h.peers.meta.FetchInode(ctx, part, ino)
	if err != nil {
		s.h.peers.forgetMap()
		return nil, 0, status.Errorf(codes.Unavailable, "namespace fetch of inode %d from meta partition %d: %v", ino, part.GetId(), err)
	}
	return resp.GetInode(), metapartition.Errno(resp.GetErrno()), nil
}
