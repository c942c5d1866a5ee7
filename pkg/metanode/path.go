package metanode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
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
func pathErr(e metapb.Errno, path []byte, format string, args ...any) *metapb.PathResponse {
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

// Path serves the path operations; see metapb.PathRequest. Besides
// resolving, it saves the client the hops FalconFS saves it: a name this
// partition does not own is forwarded to its owner (FalconFS §4.2.1), a
// LOOKUP whose inode is homed elsewhere is completed with the inode from
// its home, so an open is one client request whatever the routing, and a
// CREATE or UNLINK runs its steps homed elsewhere itself (followup.go).
// Requests by inode (PathRequest.parent_ino) skip the resolution: the
// SDK's inode API and a FUSE mount send their lookups, creates and
// unlinks that way.
func (s *service) Path(ctx context.Context, req *metapb.PathRequest) (*metapb.PathResponse, error) {
	ctx = withOrigin(ctx, req.Origin)
	if !req.Forwarded {
		rpc := "path"
		if req.ParentIno != 0 {
			rpc = "name" // by inode: the inode API's and a FUSE mount's names
		}
		s.h.metrics.requests.WithLabelValues(rpc).Inc()
	}
	caps := capability.FromContext(ctx)
	if caps.Subtree() && req.ParentIno == 0 {
		// The client's "/" is its subtree's directory: resolve under it.
		// planPath refuses a resolution that leaves it (through "..").
		if string(req.Path) == "/" {
			req.Path = []byte(caps.Path)
		} else {
			req.Path = append([]byte(caps.Path), req.Path...)
		}
		if len(req.Path) > len(caps.Path) && req.Path[len(caps.Path)] != '/' {
			return pathErr(metapb.EINVAL, req.Path, "not an absolute path"), nil
		}
	}
	p, resp, err := s.pathHere(ctx, req)
	if err != nil {
		return resp, err
	}
	switch {
	case resp.Errno != 0:
		if metapb.Errno(resp.Errno) == metapb.EWRONGMP && resp.Owner != 0 && !req.Forwarded {
			resp = s.forwardPath(ctx, req, resp)
		}
	case req.Op == metapb.PathOp_PATH_OP_LOOKUP && resp.Inode == nil && resp.Dentry.GetIno() != 0:
		s.completeInode(ctx, p, req, resp)
	}
	return confineAnswer(caps, req, resp), nil
}

// confineAnswer fits an answer to a path-restricted client (nothing
// changes for others): a symlink's place is counted in the client's own
// path, which the subtree's path prefixes here, and an inode of another
// directory than the name's (a hard link) is left out, for the client to
// ask for by number (and be refused unless it lies in its subtree).
func confineAnswer(caps capability.Caps, req *metapb.PathRequest, resp *metapb.PathResponse) *metapb.PathResponse {
	if !caps.Subtree() {
		return resp
	}
	if resp.Symlink && req.ParentIno == 0 {
		prefix := uint32(strings.Count(caps.Path, "/"))
		if resp.SymlinkAt < prefix {
			return pathErr(metapb.EACCES, req.Path, "a symlink above the client's subtree")
		}
		resp.SymlinkAt -= prefix
	}
	if resp.Parent != 0 && resp.Inode != nil && resp.Inode.GetParent() != resp.Parent {
		resp.Inode = nil
	}
	return resp
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
		*resp = metapb.PathResponse{Errno: int32(metapb.EACCES), Message: fmt.Sprintf("%q: permission denied", req.Path)}
		return
	}
	resp.Inode = in
}

// pathHere resolves and runs req on this partition.
func (s *service) pathHere(ctx context.Context, req *metapb.PathRequest) (*partition, *metapb.PathResponse, error) {
	var (
		comps    []string
		trailing bool
	)
	if req.ParentIno != 0 {
		if e := nameErrno(string(req.Path)); e != metapb.OK {
			return nil, pathErr(e, req.Path, "not a valid name in directory %d", req.ParentIno), nil
		}
	} else {
		var e syscall.Errno
		if comps, trailing, e = nsreplica.Split(string(req.Path)); e != 0 {
			return nil, pathErr(metapb.Errno(e), req.Path, "not a valid path"), nil
		}
	}
	switch req.Op {
	case metapb.PathOp_PATH_OP_LOOKUP:
	case metapb.PathOp_PATH_OP_CREATE, metapb.PathOp_PATH_OP_UNLINK, metapb.PathOp_PATH_OP_RMDIR, metapb.PathOp_PATH_OP_RENAME, metapb.PathOp_PATH_OP_RENAME_NOREPLACE:
		if req.ParentIno == 0 && (len(comps) == 0 || comps[len(comps)-1] == "..") {
			return nil, pathErr(metapb.EINVAL, req.Path, "%v needs a name as the last component", req.Op), nil
		}
		if req.Op == metapb.PathOp_PATH_OP_CREATE && req.Create == nil {
			return nil, pathErr(metapb.EINVAL, req.Path, "create without the inode to create"), nil
		}
		if isRename(req.Op) && len(req.NewName) == 0 {
			return nil, pathErr(metapb.EINVAL, req.Path, "rename without a new name"), nil
		}
	default:
		return nil, pathErr(metapb.EINVAL, req.Path, "unknown path operation %v", req.Op), nil
	}
	p, err := s.readable(ctx, req.PartitionId)
	if err != nil {
		return nil, nil, err
	}
	r := access(ctx, p, req.Op != metapb.PathOp_PATH_OP_LOOKUP)
	if r == nil && req.ParentIno != 0 {
		r = s.inSubtree(ctx, p, req.ParentIno)
	}
	var parent *dirInfo // a by-inode parent, checked for an id-mapping client
	if r == nil {
		parent, r = s.mapPath(ctx, p, req)
	}
	if r != nil {
		return nil, pathErr(r.errno, req.Path, "%s", r.msg), nil
	}
	var confine uint64 // a path-restricted client's resolution must pass through it
	var subtree []string
	if c := capability.FromContext(ctx); c.Subtree() && req.ParentIno == 0 {
		confine = c.RootIno
		subtree, _, _ = nsreplica.Split(c.Path)
	}
	cred := credOf(req.Cred)
	if (req.Op == metapb.PathOp_PATH_OP_RMDIR || isRename(req.Op)) && req.RequestId != 0 {
		// Attempts of one request here run one at a time: they share a
		// fence token (rmdir.go).
		done, err := s.h.attempts.begin(ctx, req.RequestId)
		if err != nil {
			return nil, nil, status.Errorf(codes.DeadlineExceeded, "%v %q: an earlier attempt is still running: %v", req.Op, req.Path, err)
		}
		defer done()
	}
	// fenced are the fences an rmdir placed on the other partitions: kept
	// while its plan is made again (the name changed, or the epoch), lifted
	// if the rmdir does not happen, owed to the batch if it does.
	var fenced *rmdirFence
	// locked are a directory rename's namespace locks: lifted at the end
	// unless the rename happened, which owes them to the batch.
	var locked *renameLock
	defer func() {
		if fenced != nil {
			s.liftNow(fenced.dir, fenced.token, append(fenced.others, p.id))
		}
		if locked != nil {
			s.liftNow(locked.dir, locked.token, locked.parts)
		}
	}()
	for round := 0; round < maxPathRounds; round++ {
		var plan pathPlan
		p.sm.read(func(mp *metapartition.Partition) {
			plan = s.planPath(p, mp, req, comps, trailing, cred, confine, subtree, parent)
		})
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
		case plan.layoutMiss != 0:
			if err := s.fetchLayout(ctx, p, plan.layoutMiss); err != nil {
				return nil, nil, err
			}
		case plan.txn != nil:
			if f := plan.rmdir; f != nil {
				same := fenced != nil && fenced.dir == f.dir
				if same {
					// Planned again: the fences stand, under their token.
					f.token, f.takeover, f.others = fenced.token, fenced.takeover, fenced.others
				} else {
					// The leader's term, read outside the partition's
					// lock: Raft's apply takes that lock under its own.
					f.token, f.takeover = s.attemptToken(p, req)
				}
				fence := plan.txn.Ops[0].GetFence()
				fence.Token, fence.Takeover = f.token, f.takeover
				if !same {
					if fenced != nil {
						s.liftNow(fenced.dir, fenced.token, append(fenced.others, p.id))
						fenced = nil
					}
					if resp := s.fenceOthers(ctx, p, req, f); resp != nil {
						return p, resp, nil
					}
					fenced = f
				}
			}
			if l := plan.dirLock; l != nil && (locked == nil || locked.dir != l.dir) {
				if locked != nil {
					s.liftNow(locked.dir, locked.token, locked.parts)
					locked = nil
				}
				if resp := s.lockDir(ctx, p, req, l); resp != nil {
					return p, resp, nil
				}
				locked = l
			}
			if r := plan.rename; r != nil {
				resp, err := s.placeNew(ctx, p, req, r)
				if err != nil {
					// The new name may be placed: the locks and fences
					// stay, as after a Txn whose outcome is unknown
					// (below), for the client's retry to take over.
					fenced, locked = nil, nil
					s.h.log.Warn("rename's placement outcome unknown; the client's retry settles it", "request", req.RequestId,
						"partition", p.id, "path", string(req.Path), "err", err)
					return nil, nil, err
				}
				if resp != nil {
					return p, resp, nil
				}
				if d := r.dst; d != nil {
					plan.follow.unlinkIno, plan.follow.keep, plan.follow.remoteLink = d.GetIno(), r.keep, true
				}
				plan.settle = &settleStep{part: r.part, parent: r.dir.Ino, name: r.name, ino: r.src.GetIno(), id: r.pend.GetId()}
			}
			resp, again, err := s.runPlan(ctx, p, req, &plan)
			if r := plan.rename; r != nil && err == nil && !again && resp.GetErrno() != 0 {
				resp, again = s.renameRefused(ctx, p, req, r, resp)
			}
			if l := locked; l != nil && err == nil && !again && resp.GetErrno() == 0 {
				// Renamed: the locks only keep replicas from a directory's
				// old entry that is gone; lifted in a batch.
				s.h.lifts.Owe(l.parts, l.dir, l.token)
				locked = nil
			}
			if f := plan.rmdir; f != nil && err == nil && !again && resp.GetErrno() == 0 {
				// Removed: the fences only refuse names under a directory
				// nobody reaches; they are lifted in a batch. Otherwise the
				// deferred lift runs (harmless after an rmdir that did
				// apply).
				s.h.lifts.Owe(append(f.others, p.id), f.dir, f.token)
				fenced = nil
			}
			if err != nil {
				// Whether the Txn applied is not known (a leader that lost
				// its place may still see it committed): the fences and
				// locks stay, for the client's retry under the next leader
				// to take over and lift, or to lapse. Lifted now, a late
				// commit could remove a directory a name was just made in,
				// or move one a replica just learnt.
				fenced, locked = nil, nil
				if plan.rename != nil || plan.rmdir != nil {
					// A retry sorts it out (its request id); the line
					// lets a nemesis run's history be read against it.
					s.h.log.Warn("name operation's outcome unknown; the client's retry settles it", "op", req.Op.String(), "request", req.RequestId,
						"partition", p.id, "path", string(req.Path), "err", err)
				}
				return nil, nil, err
			}
			if again {
				continue // a fence landed since the resolution, or the name changed: resolve again
			}
			return p, resp, nil
		case plan.takeBack != nil:
			resp, again, err := s.takeBackOwn(ctx, p, req, plan.takeBack, plan.resp)
			if err != nil {
				return nil, nil, err
			}
			if again {
				continue // an attempt committed meanwhile: answered from it
			}
			return p, resp, nil
		default:
			return p, plan.resp, nil
		}
	}
	return nil, nil, status.Errorf(codes.Unavailable, "path %q: still changing after %d resolutions", req.Path, maxPathRounds)
}

// planPath resolves the path's directories in the replica and plans the
// operation on the last component. It runs under the partition's read
// lock, so the resolution and a read answer see one state. With confine,
// the resolved directory must have been reached through directory confine (a
// path-restricted client's subtree: EACCES otherwise). parent, if known,
// is a by-inode request's directory (mapPath checked it), whose mode an
// unlink's sticky check needs.
func (s *service) planPath(p *partition, mp *metapartition.Partition, req *metapb.PathRequest, comps []string, trailing bool, cred perm.Cred, confine uint64, subtree []string, parent *dirInfo) pathPlan {
	if req.ParentIno != 0 {
		// By inode: the caller names the directory; nothing to resolve
		// or check (the kernel checked the permissions, or mapPath did).
		base := &metapb.PathResponse{Parent: req.ParentIno}
		base.RoutingVersion, _ = mp.RoutingState()
		dir := nsreplica.Entry{Ino: req.ParentIno}
		if parent != nil {
			dir = nsreplica.Entry{Ino: parent.ino, Mode: parent.attr.Mode, Uid: parent.attr.Uid, Gid: parent.attr.Gid}
		}
		return s.planName(p, mp, req, base, dir, string(req.Path), false, cred)
	}
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
		return pathPlan{resp: pathErr(metapb.Errno(e), req.Path, "search permission denied")}
	}
	if next < len(dirs) {
		return pathPlan{miss: &nsMiss{parent: stack[len(stack)-1].Ino, name: dirs[next], at: next, gen: gen}}
	}
	if confine != 0 && !slices.ContainsFunc(stack, func(e nsreplica.Entry) bool { return e.Ino == confine }) {
		// Only a lookup of the subtree's directory itself, the client's
		// "/" (which it may stat and list, not change), gets further.
		outside := pathPlan{resp: pathErr(metapb.EACCES, req.Path, "outside the only subtree this client may use")}
		if req.Op != metapb.PathOp_PATH_OP_LOOKUP || name == "" || !slices.Equal(comps, subtree) {
			return outside
		}
		in := stack[len(stack)-1].Ino
		e, ok := p.ns.Get(in, name)
		switch {
		case !ok:
			return pathPlan{miss: &nsMiss{parent: in, name: name, at: len(dirs), gen: gen}}
		case e.Ino != confine:
			return outside // the subtree's path names another directory now
		}
		stack, name = append(stack, e), "" // answered as "/" is
	}
	dir := stack[len(stack)-1]
	base := &metapb.PathResponse{Parent: dir.Ino, ParentInode: &metapb.Inode{Ino: dir.Ino, Type: metapb.FileType_FILE_TYPE_DIRECTORY, Mode: dir.Mode & 0o7777, Uid: dir.Uid, Gid: dir.Gid}}
	base.RoutingVersion, _ = mp.RoutingState()
	if name == "" {
		// The directory itself: its dentry is not needed, its inode only
		// when homed here (else the client asks its home).
		base.Parent = 0
		base.Dentry = &metapb.Dentry{Ino: dir.Ino, Type: metapb.FileType_FILE_TYPE_DIRECTORY}
		if in, ie := mp.GetInode(dir.Ino); ie == metapb.OK {
			if req.Access != 0 && !perm.Allowed(cred, in.GetMode()|syscall.S_IFDIR, in.GetUid(), in.GetGid(), req.Access) {
				return pathPlan{resp: pathErr(metapb.EACCES, req.Path, "permission denied")}
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
		return pathPlan{resp: pathErr(metapb.EACCES, req.Path, "permission denied on the parent directory")}
	}
	return s.planName(p, mp, req, base, dir, name, trailing, cred)
}

// planName plans the operation on the last name, in directory dir (resolved
// from a path, or named by the caller).
func (s *service) planName(p *partition, mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, name string, trailing bool, cred perm.Cred) pathPlan {
	if re := mp.CheckRoute(dir.Ino, name, req.Op != metapb.PathOp_PATH_OP_LOOKUP); re != metapb.OK {
		r := pathErr(re, req.Path, "the last name is not served here")
		r.Owner, _ = mp.Route(dir.Ino, name)
		r.Parent, r.RoutingVersion = dir.Ino, base.RoutingVersion
		return pathPlan{resp: r}
	}
	switch req.Op {
	case metapb.PathOp_PATH_OP_CREATE:
		return s.planCreate(p, mp, req, base, dir, name)
	case metapb.PathOp_PATH_OP_UNLINK:
		return s.planUnlink(mp, req, base, dir, name, cred)
	case metapb.PathOp_PATH_OP_RMDIR:
		return s.planRmdir(mp, req, base, dir, name, cred)
	case metapb.PathOp_PATH_OP_RENAME, metapb.PathOp_PATH_OP_RENAME_NOREPLACE:
		return s.planRename(p, mp, req, base, dir, name, cred)
	}
	d, in, le := mp.Lookup(dir.Ino, name)
	if le != metapb.OK {
		// The parent exists: say which it is (rename and link name a
		// new path through it).
		r := pathErr(le, req.Path, "lookup")
		r.Parent, r.ParentInode, r.RoutingVersion = base.Parent, base.ParentInode, base.RoutingVersion
		return pathPlan{resp: r}
	}
	if trailing && d.GetType() != metapb.FileType_FILE_TYPE_DIRECTORY && d.GetType() != metapb.FileType_FILE_TYPE_SYMLINK {
		return pathPlan{resp: pathErr(metapb.ENOTDIR, req.Path, "not a directory")}
	}
	if in != nil && req.Access != 0 && !perm.Allowed(cred, modeOf(in), in.GetUid(), in.GetGid(), req.Access) {
		return pathPlan{resp: pathErr(metapb.EACCES, req.Path, "permission denied")}
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

// planCreate is the create step with the parent resolved here:
// [CreateInode, CreateDentry, TouchDir parent when homed here]. A parent
// homed elsewhere gets its TouchDir from this partition (followup.go):
// alongside the Txn for a file, after it for a directory; if the parent
// turns out removed, the create is taken back.
func (s *service) planCreate(p *partition, mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, name string) pathPlan {
	c := req.Create
	ci := &metapb.CreateInode{Type: c.GetType(), Mode: c.GetMode(), Uid: c.GetUid(), Gid: c.GetGid(), Rdev: c.GetRdev(), Target: c.GetTarget(), Layout: c.GetLayout()}
	isDir := c.GetType() == metapb.FileType_FILE_TYPE_DIRECTORY
	useDefault := false
	if req.InheritLayout {
		attr, known := s.parentLayout(p, mp, dir.Ino)
		if !known {
			return pathPlan{layoutMiss: dir.Ino}
		}
		base.LayoutAttr = attr
		if c.GetType() == metapb.FileType_FILE_TYPE_REGULAR {
			ci.Layout, useDefault = layoutOf(attr)
		}
	}
	delta := int32(0)
	ci.Parent = dir.Ino
	if isDir {
		delta = 1
	}
	ops := []*metapb.Op{
		{Op: &metapb.Op_CreateInode{CreateInode: ci}},
		{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: dir.Ino, Name: []byte(name), Type: c.GetType()}}},
	}
	touch := &metapb.TouchDir{Ino: dir.Ino, NlinkDelta: delta, OpId: req.OpId}
	var follow *followUp
	if mp.Holds(dir.Ino) {
		ops = append(ops, &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: touch}})
	} else {
		var refuse *metapb.PathResponse
		follow, refuse = createFollowUp(mp, req, dir.Ino, name, touch)
		if refuse != nil {
			return pathPlan{resp: refuse}
		}
	}
	plan := guardedPlan(mp, req, "create", dir.Ino, ops, func(res *metapb.TxnResult) *metapb.PathResponse {
		base.Inode = res.Results[0].GetInode()
		base.Dentry = res.Results[1].GetDentry()
		base.ParentTouched = len(res.Results) > 2 // else the follow-up says
		if base.ParentTouched {
			base.ParentAttrs = res.Results[2].GetInode()
		}
		return base
	})
	plan.follow = follow
	plan.defaultLayout = useDefault
	return plan
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
		e      metapb.Errno
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
			busy = e == metapb.OK && mp.Fenced(d.GetIno(), time.Now().UnixNano())
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
	case metapb.OK:
	case metapb.EBUSY, metapb.EWRONGMP, metapb.EMOVING:
		// Locked, or the owner's routing and ours disagree for a moment
		// (a routing change): wait and ask again.
		return nil, true, nil
	case metapb.ENOENT:
		return &metapb.PathResponse{Errno: int32(metapb.ENOENT), Message: fmt.Sprintf("component %q does not exist", m.name)}, false, nil
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
				if e != metapb.OK {
					return nil, e == metapb.EBUSY, nil
				}
			}
			return &metapb.PathResponse{
				Errno: int32(metapb.ELOOP), Message: fmt.Sprintf("component %q is a symlink", m.name),
				Symlink: true, SymlinkAt: uint32(m.at), SymlinkTarget: in.GetTarget(),
			}, false, nil
		default:
			return &metapb.PathResponse{Errno: int32(metapb.ENOTDIR), Message: fmt.Sprintf("component %q is not a directory", m.name)}, false, nil
		}
		if in == nil {
			// A renamed directory's name sits on another partition
			// than its inode: its attributes come from its home.
			if in, e, err = s.fetchInode(ctx, p, d.GetIno()); err != nil {
				return nil, false, err
			}
			switch e {
			case metapb.OK:
			case metapb.ENOENT:
				return &metapb.PathResponse{Errno: int32(e), Message: fmt.Sprintf("component %q was removed", m.name)}, false, nil
			default:
				return nil, true, nil
			}
		}
	}
	if !local {
		// A directory fenced here is not cached here, whatever its owner
		// answered: an rmdir fences the owner last, in the Txn that
		// removes the name, so until then the owner still answers.
		p.sm.read(func(mp *metapartition.Partition) {
			busy = mp.Fenced(in.GetIno(), time.Now().UnixNano())
		})
		if busy {
			return nil, true, nil
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
func (s *service) fetchDentry(ctx context.Context, p *partition, owner, parent uint64, name string) (*metapb.Dentry, *metapb.Inode, metapb.Errno, error) {
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
	return resp.GetDentry(), resp.GetInode(), metapb.Errno(resp.GetErrno()), nil
}

// fetchInode reads ino from its home, locally when this partition is it,
// as a namespace fetch (EBUSY while fenced there).
func (s *service) fetchInode(ctx context.Context, p *partition, ino uint64) (*metapb.Inode, metapb.Errno, error) {
	var (
		in    *metapb.Inode
		e     metapb.Errno
		local bool
	)
	p.sm.read(func(mp *metapartition.Partition) {
		if local = mp.Holds(ino); local {
			in, e = mp.GetInode(ino)
			if e == metapb.OK && mp.Fenced(ino, time.Now().UnixNano()) {
				e = metapb.EBUSY
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
	return resp.GetInode(), metapb.Errno(resp.GetErrno()), nil
}
