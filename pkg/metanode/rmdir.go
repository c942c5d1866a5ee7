package metanode

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
	"github.com/cairnfs/cairn/pkg/nsreplica"
	"github.com/cairnfs/cairn/pkg/perm"
)

// rmdir in one request (PATH_OP_RMDIR; FalconFS: the client sends one
// request and the servers do the rest). For a directory homed on the
// partition its name routes to (mkdir keeps them together), that
// partition runs the protocol the client otherwise runs itself
// (client.rmdirOwnerLast): it fences the directory on every other
// partition of the volume, side by side, each answering whether it lists
// a name under it; then one Txn here fences it with require_empty, deletes
// the name and drops the inode, so this partition's check and the delete
// are one step. A fence refuses new names under the directory, so no name
// appears on a fenced partition between its answer and the delete. After
// the Txn the fences only refuse names under a directory nobody can reach
// (inode numbers are not reused): they are lifted in batches with other
// rmdirs' (metaclient.UnfenceBatch), one Txn per partition. The parent's
// TouchDir (nlink -1) follows the Txn (followup.go).
//
// A directory homed elsewhere, a partition that does not say whether it
// lists names (an earlier version), a set of partitions that changed
// meanwhile, or a fence another operation holds are answered EXDEV or
// EBUSY, with every fence placed lifted: the client then runs its own
// protocol, which waits for held fences.
//
// Attempts of one request take each other's fences over. The fence token
// names the request (bits of its id) and the attempt's order, the Raft
// term of the leader running it (metapartition.TakeoverToken): a retry
// under a later leader replaces the fences an attempt that died left
// behind instead of waiting two minutes for them to lapse, and a deposed
// leader still running an attempt can neither place a fence over the
// later attempt's (EBUSY) nor lift one of them (its token no longer
// matches). Attempts on one leader share a term, so they run one at a
// time (Host.attempts). A request without an id gets a random token, which
// nothing takes over.

// liftTimeout bounds a lift of fences; a fence not lifted lapses.
const liftTimeout = 5 * time.Second

// rmdirFence is the part of an rmdir plan that runs before its Txn: the
// fences on the volume's other partitions.
type rmdirFence struct {
	dir, token uint64
	takeover   bool     // the token may replace an earlier attempt's
	others     []uint64 // the volume's other partitions, sorted
}

// attemptToken is the fence token of an attempt of req run by the leader
// of partition p now: the request and the leader's term (takeover), or a
// random token for a request without an id (takeover false).
func (s *service) attemptToken(p *partition, req *metapb.PathRequest) (token uint64, takeover bool) {
	st, err := s.h.env.Raft.Status(multiraft.GroupID(p.id))
	if req.RequestId == 0 || err != nil || st.Term == 0 {
		return newFenceToken(), false
	}
	return metapartition.TakeoverToken(metapb.FollowUpID(req.RequestId, metapb.FollowUpFenceToken), st.Term), true
}

// attempts serializes the attempts of one request on this host.
type attempts struct {
	mu      sync.Mutex
	running map[uint64]chan struct{} // request id -> closed when its attempt ends
}

// begin waits until no other attempt of request id runs here and marks
// this one running; done ends it. It fails when ctx ends first.
func (a *attempts) begin(ctx context.Context, id uint64) (done func(), err error) {
	for {
		a.mu.Lock()
		ch, busy := a.running[id]
		if !busy {
			if a.running == nil {
				a.running = map[uint64]chan struct{}{}
			}
			mine := make(chan struct{})
			a.running[id] = mine
			a.mu.Unlock()
			return func() {
				a.mu.Lock()
				delete(a.running, id)
				a.mu.Unlock()
				close(mine)
			}, nil
		}
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// newFenceToken returns a random non-zero fence token.
func newFenceToken() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if t := binary.LittleEndian.Uint64(b[:]) >> 1; t != 0 { // the top bit marks locks
			return t
		}
	}
}

// planRmdir is the rmdir step with the parent resolved here. A retry of
// an rmdir whose Txn applied is answered from the remembered result (its
// TouchDir is sent again; its op id makes that a no-op).
func (s *service) planRmdir(mp *metapartition.Partition, req *metapb.PathRequest, base *metapb.PathResponse, dir nsreplica.Entry, name string, cred perm.Cred) pathPlan {
	var d *metapb.Dentry
	retry := false
	if res, ok := mp.Answered(req.RequestId); ok && len(res.GetResults()) > 1 {
		d, retry = res.GetResults()[1].GetDentry(), true
	} else {
		var in *metapb.Inode
		var e metapb.Errno
		d, in, e = mp.Lookup(dir.Ino, name)
		switch {
		case e != metapb.OK:
			return pathPlan{resp: pathErr(e, req.Path, "rmdir")}
		case d.GetType() != metapb.FileType_FILE_TYPE_DIRECTORY:
			return pathPlan{resp: pathErr(metapb.ENOTDIR, req.Path, "rmdir of a non-directory")}
		case in == nil || !mp.Holds(d.GetIno()):
			r := pathErr(metapb.EXDEV, req.Path, "rmdir: directory %d is homed on another partition", d.GetIno())
			r.Parent, r.Dentry = dir.Ino, d
			return pathPlan{resp: r}
		case dir.Mode&syscall.S_ISVTX != 0 && !perm.MayDelete(cred, dir.Mode, dir.Uid, in.GetUid()):
			return pathPlan{resp: pathErr(metapb.EPERM, req.Path, "sticky directory")}
		}
	}
	// The token is pathHere's to set: the leader's term is read outside
	// the partition's lock (Raft's apply takes that lock under its own).
	f := &rmdirFence{dir: d.GetIno()}
	ops := []*metapb.Op{
		{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: f.dir, RequireEmpty: true}}},
		{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: dir.Ino, Name: []byte(name), ExpectIno: f.dir, ExpectType: metapb.FileType_FILE_TYPE_DIRECTORY}}},
		{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: f.dir, Delta: -2}}},
		{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: f.dir}}},
	}
	follow := &followUp{name: name, parent: dir.Ino}
	if mp.Holds(dir.Ino) {
		ops = append(ops, &metapb.Op{Op: &metapb.Op_TouchDir{TouchDir: &metapb.TouchDir{Ino: dir.Ino, NlinkDelta: -1, OpId: req.OpId}}})
	} else {
		follow.touch = &metapb.TouchDir{Ino: dir.Ino, NlinkDelta: -1, OpId: req.OpId}
	}
	// No namespace epoch guard: the DeleteDentry expects the directory and
	// the fence checks emptiness, and the path was resolved against the
	// replica's state when the request started (a rename or rmdir of an
	// ancestor finished before it is seen), as the client's resolution and
	// rmdir by inode did. Guarded, every fence any other rmdir placed here
	// meanwhile would refuse the Txn, a Raft write each time.
	plan := txnPlan(req, "rmdir", dir.Ino, ops, func(res *metapb.TxnResult) *metapb.PathResponse {
		base.Dentry = d
		for _, r := range res.GetResults() {
			if in := r.GetInode(); in.GetIno() == dir.Ino {
				base.ParentTouched, base.ParentAttrs = true, in
			}
		}
		return base
	})
	plan.again = func(res *metapb.TxnResult) bool {
		// The name changed since the lookup: look again.
		switch metapb.Errno(res.Errno) {
		case metapb.ESTALE, metapb.ENOTDIR, metapb.EISDIR:
			return res.FailedOp == 1
		}
		return false
	}
	plan.follow = follow
	if !retry {
		plan.rmdir = f
	}
	return plan
}

// volumeParts lists the meta partitions of volume in the cluster map.
func (s *service) volumeParts(ctx context.Context, volume uint64) ([]uint64, error) {
	m, err := s.h.peers.clusterMap(ctx)
	if err != nil {
		return nil, err
	}
	ids := slices.Clone(m.GetVolumes()[volume].GetMetaPartitions())
	slices.Sort(ids)
	return ids, nil
}

// fenceOthers places an rmdir's fences on the volume's other partitions.
// A non-nil answer ends the rmdir (every fence placed is lifted): ENOTEMPTY
// when a partition lists a name under the directory, EXDEV or EBUSY for
// the client to run its own protocol.
func (s *service) fenceOthers(ctx context.Context, p *partition, req *metapb.PathRequest, f *rmdirFence) *metapb.PathResponse {
	all, err := s.volumeParts(ctx, p.volume)
	if err != nil || !slices.Contains(all, p.id) {
		return pathErr(metapb.EXDEV, req.Path, "rmdir: the volume's partitions are not known here")
	}
	f.others = slices.DeleteFunc(slices.Clone(all), func(id uint64) bool { return id == p.id })
	txn := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Fence{Fence: &metapb.Fence{Parent: f.dir, Token: f.token, Takeover: f.takeover}}}}}
	answers := s.sendEach(ctx, "rmdir_fence", f.others, txn)
	some, unknown, busy := false, false, false
	for _, a := range answers {
		switch {
		case a.err != nil:
			unknown = true
		case metapb.Errno(a.res.GetErrno()) == metapb.EBUSY:
			busy = true
		case a.res.GetErrno() != 0 || len(a.res.GetResults()) == 0 || a.res.GetResults()[0].HasChildren == nil:
			unknown = true
		case a.res.GetResults()[0].GetHasChildren():
			some = true
		}
	}
	if !some && !unknown && !busy {
		if now, err := s.volumeParts(ctx, p.volume); err != nil || !slices.Equal(now, all) {
			unknown = true // the partitions changed under the fences
		}
	}
	var resp *metapb.PathResponse
	switch {
	case some:
		resp = pathErr(metapb.ENOTEMPTY, req.Path, "rmdir: directory %d has names", f.dir)
	case busy:
		resp = pathErr(metapb.EBUSY, req.Path, "rmdir: directory %d is fenced by another operation", f.dir)
	case unknown:
		resp = pathErr(metapb.EXDEV, req.Path, "rmdir: not every partition answered for directory %d", f.dir)
	default:
		return nil
	}
	s.liftNow(f.dir, f.token, f.others)
	return resp
}

// followUpOn runs txn on meta partition id, as followUpTxn does on an
// inode's home.
func (s *service) followUpOn(ctx context.Context, step string, id uint64, txn *metapb.Txn) (*metapb.TxnResult, error) {
	return s.followUpAt(ctx, step, txn, func(ctx context.Context) (*pb.Partition, error) {
		return s.h.peers.partition(ctx, id)
	})
}

// liftNow lifts the fences (dir, token) on partitions ids at once: the
// rmdir did not happen, so the directory must take names again.
func (s *service) liftNow(dir, token uint64, ids []uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), liftTimeout)
	defer cancel()
	txn := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: dir, Token: token}}}}}
	s.sendEach(ctx, "rmdir_unfence", ids, txn)
}

// sentTxn is one partition's answer to sendEach.
type sentTxn struct {
	res *metapb.TxnResult
	err error
}

// sendEach runs txn on each of partitions ids as a follow-up, side by
// side, and returns their answers in the order of ids.
func (s *service) sendEach(ctx context.Context, step string, ids []uint64, txn *metapb.Txn) []sentTxn {
	answers := make([]sentTxn, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i].res, answers[i].err = s.followUpOn(ctx, step, id, txn)
		}()
	}
	wg.Wait()
	return answers
}

// newLiftBatch is the host's batch of fence lifts its done rmdirs owe
// (metaclient.UnfenceBatch), sent as follow-ups.
func newLiftBatch(h *Host) *metaclient.UnfenceBatch {
	s := &service{h: h}
	return &metaclient.UnfenceBatch{
		Send: func(ctx context.Context, part uint64, ops []*metapb.Op) error {
			res, err := s.followUpOn(ctx, "rmdir_unfence", part, &metapb.Txn{Ops: ops})
			if err == nil && res.GetErrno() != 0 {
				err = fmt.Errorf("unfence on meta partition %d: errno %d: %s", part, res.GetErrno(), res.GetMessage())
			}
			return err
		},
		// Not tracked by h.wg: an rmdir may end while the host stops,
		// and the flush is cut short by Stop (what is left lapses).
		Go:      func(fn func()) { go fn() },
		Stop:    h.stop,
		Timeout: liftTimeout,
	}
}
