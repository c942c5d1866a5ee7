package metanode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// Follow-ups: the steps of a create or an unlink that belong to other
// partitions than the name's, sent by the partition that changes the name
// (server to server), so that the client sends one request and gets the
// final answer (FalconFS: one request per operation). The orders are the
// design's (docs/design.md "Client metadata"):
//
//   - create / mkdir / mknod / symlink with the parent homed elsewhere: the
//     parent's TouchDir goes to its home. For a file (nlink delta 0) it is
//     sent alongside the Txn, for a directory (+1) after it, so that a
//     failed create never leaves a parent's link count too high. If the
//     TouchDir answers ENOENT/ENOTDIR (the parent was removed meanwhile),
//     the name and inode are taken back here and the create fails with
//     that errno.
//   - unlink: the parent's TouchDir alongside the Txn; the Link -1 of an
//     inode homed elsewhere after it (the name goes first: a crash leaves
//     a link count too high, never a name without an inode), then its
//     Evict at 0 links unless the client has the file open.
//
// Why a file's TouchDir may run alongside its create: the Txn carries the
// namespace epoch read when the TouchDir was sent, and the plan refused
// the create while a fence covered the parent here. An rmdir that could
// miss the new name must fence the parent on this partition, and lift the
// fence, between the plan and the Txn's apply; the fence bumps the epoch,
// so the Txn is refused (ENSCHANGED) and planned again. An rmdir whose
// fence here came before the plan was lifted before it too, so the parent
// was evicted before the TouchDir was sent, and the TouchDir fails.
//
// Exactly-once: the TouchDir keeps the client's op_id; Link, Evict and the
// undo carry request ids derived from the client's request id
// (metapb.FollowUpID), so a retried request repeats none of them.
// A follow-up that cannot reach its partition within the request's time is
// reported undone (parent_touched or link_dropped false) and the client
// sends it itself, with the same ids.

const (
	// followUpTimeout bounds the follow-ups of one request when the
	// caller's context has no deadline.
	followUpTimeout = 10 * time.Second
	followUpBackoff = 10 * time.Millisecond
	followUpMaxWait = 200 * time.Millisecond
	// maxKeepOpen is the most open inodes an unlink lists; beyond, the
	// partition evicts nothing (keep_all).
	maxKeepOpen = 4096
)

// followUp is what a name change owes other partitions.
type followUp struct {
	name   string // the name changed
	parent uint64 // its directory
	// touch is the parent's TouchDir, when the parent is homed elsewhere;
	// parallel sends it alongside the Txn instead of after.
	touch    *metapb.TouchDir
	parallel bool
	// create: a TouchDir that finds the parent removed takes the create
	// back.
	create bool
	// unlinkIno is an unlink's inode; remoteLink says it is homed
	// elsewhere (its Link -1 is a follow-up); keep: the client has it
	// open, so it is not evicted here.
	unlinkIno  uint64
	remoteLink bool
	keep       bool
	// ctimeIno is a renamed inode homed elsewhere, whose ctime its home
	// sets after the Txn.
	ctimeIno uint64
}

// stepResult is a follow-up's outcome: the Txn's result, or why it did
// not reach its partition.
type stepResult struct {
	res *metapb.TxnResult
	err error
}

// nameErrno checks a name sent by inode (PathRequest.parent_ino).
func nameErrno(name string) metapb.Errno {
	switch err := hybridindex.ValidateName(name); {
	case err == nil:
		return metapb.OK
	case errors.Is(err, hybridindex.ErrNameTooLong):
		return metapb.ENAMETOOLONG
	default:
		return metapb.EINVAL
	}
}

// keptOpen reports whether the client of req has inode ino open (an
// unlink then leaves its eviction to the client's last close).
func keptOpen(req *metapb.PathRequest, ino uint64) bool {
	return req.KeepAll || len(req.KeepOpen) > maxKeepOpen || slices.Contains(req.KeepOpen, ino)
}

// createFollowUp plans the parent's TouchDir of a create whose parent is
// homed elsewhere, or refuses the create at once (an answer): ENOENT while
// a fence covers the parent here (an rmdir is checking that it is empty;
// CreateDentry would refuse too), EEXIST when the name exists (so that a
// failed create does not touch the parent). A retry of a create whose Txn
// applied is not refused: it finishes the follow-up, after the Txn.
func createFollowUp(mp *metapartition.Partition, req *metapb.PathRequest, parent uint64, name string, touch *metapb.TouchDir) (*followUp, *metapb.PathResponse) {
	f := &followUp{name: name, parent: parent, touch: touch, create: true}
	if _, retry := mp.Answered(req.RequestId); retry {
		return f, nil
	}
	refuse := func(e metapb.Errno, format string, args ...any) *metapb.PathResponse {
		r := pathErr(e, req.Path, format, args...)
		r.Parent = parent
		return r
	}
	if mp.RefusesNames(parent, time.Now().UnixNano()) {
		return nil, refuse(metapb.ENOENT, "create: parent %d is fenced (being removed)", parent)
	}
	if _, _, e := mp.Lookup(parent, name); e == metapb.OK {
		return nil, refuse(metapb.EEXIST, "create: the name exists")
	}
	f.parallel = touch.GetNlinkDelta() == 0
	return f, nil
}

// runPlan proposes plan's Txn and runs its follow-ups. again reports a Txn
// refused because the namespace or the name changed since the plan: the
// caller plans again (a TouchDir already sent is not repeated, its op id
// makes the next one a no-op).
func (s *service) runPlan(ctx context.Context, p *partition, req *metapb.PathRequest, plan *pathPlan) (resp *metapb.PathResponse, again bool, err error) {
	if plan.defaultLayout {
		l, err := s.defaultLayout(ctx, p)
		if err != nil {
			return nil, false, err
		}
		plan.txn.Ops[0].GetCreateInode().Layout = l
	}
	f := plan.follow
	var touched <-chan stepResult
	if f != nil && f.touch != nil && f.parallel {
		touched = s.goFollowUp(ctx, p, "touch_dir", f.touch.Ino, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_TouchDir{TouchDir: f.touch}}}})
	}
	res, err := p.merger.submit(ctx, plan.txn)
	if err != nil {
		if errors.Is(err, multiraft.ErrNotLeader) {
			return nil, false, s.redirectAfter(ctx, req.PartitionId, err)
		}
		return nil, false, raftStatus(req.PartitionId, err)
	}
	if metapb.Errno(res.Errno) == metapb.ENSCHANGED || (plan.again != nil && res.Errno != 0 && plan.again(res)) {
		return nil, true, nil
	}
	resp = plan.build(res)
	if st := plan.settle; st != nil && res.Errno == 0 {
		// The rename committed: its pending new name is settled beside
		// the other follow-ups, before the answer.
		settled := make(chan struct{})
		go func() {
			defer close(settled)
			s.settle(ctx, st)
		}()
		defer func() { <-settled }()
	}
	if res.Errno != 0 || f == nil {
		return resp, false, nil
	}
	if f.touch != nil && touched == nil {
		touched = s.goFollowUp(ctx, p, "touch_dir", f.touch.Ino, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_TouchDir{TouchDir: f.touch}}}})
	}
	var ctimed <-chan stepResult
	if ino := f.ctimeIno; ino != 0 {
		ctimed = s.goFollowUp(ctx, p, "ctime", ino, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino}}}},
			RequestId: metapb.FollowUpID(req.RequestId, metapb.FollowUpCtime)})
	}
	if f.unlinkIno != 0 {
		s.finishUnlink(ctx, p, req, f, resp)
	}
	if ctimed != nil {
		if t := <-ctimed; t.err != nil {
			// The home did not answer within the request's time: the
			// rename stands, its inode keeps its old ctime.
			s.h.log.Debug("renamed inode's ctime not set", "partition", p.id, "ino", f.ctimeIno, "err", t.err)
		}
	}
	if touched == nil {
		return resp, false, nil
	}
	t := <-touched
	switch e := metapb.Errno(t.res.GetErrno()); {
	case t.err != nil:
		// Not reached: the client sends the TouchDir (same op id).
		resp.ParentTouched = false
		s.h.log.Debug("parent touch not sent", "partition", p.id, "parent", f.parent, "err", t.err)
	case f.create && (e == metapb.ENOENT || e == metapb.ENOTDIR):
		return s.undoCreate(ctx, p, req, f, resp, e), false, nil
	default:
		// Done, or refused for good (a parent gone under an unlink, a
		// link count out of range): nothing the client could add.
		resp.ParentTouched = true
		if e == metapb.OK && len(t.res.GetResults()) > 0 {
			resp.ParentAttrs = t.res.GetResults()[0].GetInode()
		}
	}
	return resp, false, nil
}

// finishUnlink drops the link of an unlinked name's inode on its home when
// that is another partition, and evicts the inode at 0 links unless the
// client has it open; resp says what was done.
func (s *service) finishUnlink(ctx context.Context, p *partition, req *metapb.PathRequest, f *followUp, resp *metapb.PathResponse) {
	if !f.remoteLink {
		// Homed here: the Txn dropped the link, or the inode was gone.
		resp.LinkDropped = true
		return
	}
	ino := f.unlinkIno
	// One Txn on the home: the link, and the eviction at 0 links unless
	// the client has the file open.
	link := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: -1, EvictAtZero: !f.keep}}}},
		RequestId: metapb.FollowUpID(req.RequestId, metapb.FollowUpLink)}
	t := <-s.goFollowUp(ctx, p, "link", ino, link)
	switch {
	case t.err != nil:
		s.h.log.Debug("unlinked inode's link not dropped", "partition", p.id, "ino", ino, "err", t.err)
		return // the client drops it (same request id)
	case t.res.GetErrno() != 0:
		// The inode is gone (ENOENT) or refuses (a count at 0): nothing
		// left to take, as the client's own step would find.
		resp.LinkDropped = true
		return
	}
	in := t.res.GetResults()[0].GetInode()
	resp.LinkDropped, resp.Inode, resp.Nlink = true, in, in.GetNlink()
	if t.res.GetResults()[0].GetEvicted() {
		resp.Evicted = true
		return
	}
	if in.GetNlink() != 0 || f.keep {
		return
	}
	// At 0 links and not evicted: a home of an earlier version, which does
	// not evict with the link.
	evict := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: ino}}}},
		RequestId: metapb.FollowUpID(req.RequestId, metapb.FollowUpEvict)}
	t = <-s.goFollowUp(ctx, p, "evict", ino, evict)
	switch e := metapb.Errno(t.res.GetErrno()); {
	case t.err != nil:
		s.h.log.Debug("unlinked inode not evicted", "partition", p.id, "ino", ino, "err", t.err)
	case e == metapb.OK, e == metapb.ENOENT:
		resp.Evicted = true
	}
}

// undoCreate takes back a create whose parent turned out removed (its
// TouchDir answered e): the name and the inode, both made here, in one
// Txn, and answers e. A failure of the undo (the name changed meanwhile)
// leaves a name under a removed directory, which fsck reports.
func (s *service) undoCreate(ctx context.Context, p *partition, req *metapb.PathRequest, f *followUp, resp *metapb.PathResponse, e metapb.Errno) *metapb.PathResponse {
	in := resp.GetInode()
	ino := in.GetIno()
	undo := &metapb.Txn{Ops: []*metapb.Op{
		{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{Parent: f.parent, Name: []byte(f.name), ExpectIno: ino}}},
		{Op: &metapb.Op_Link{Link: &metapb.Link{Ino: ino, Delta: -int32(in.GetNlink())}}},
		{Op: &metapb.Op_Evict{Evict: &metapb.Evict{Ino: ino}}},
	}, RequestId: metapb.FollowUpID(req.RequestId, metapb.FollowUpUndo)}
	res, err := p.merger.submit(ctx, undo)
	outcome := "ok"
	switch {
	case err != nil:
		outcome = "unreached"
		s.h.log.Warn("create under a removed directory not taken back", "partition", p.id, "parent", f.parent, "ino", ino, "err", err)
	case res.Errno != 0:
		outcome = "refused"
		s.h.log.Warn("create under a removed directory not taken back", "partition", p.id, "parent", f.parent, "ino", ino, "errno", res.Errno, "msg", res.Message)
	}
	s.h.metrics.followUps.WithLabelValues("undo_create", outcome).Inc()
	r := pathErr(e, req.Path, "create: parent %d was removed", f.parent)
	r.Parent = f.parent
	return r
}

// goFollowUp runs txn on the home of inode ino (another partition of p's
// volume) in the background, retrying while no leader answers, until ctx
// ends (followUpTimeout at most without a deadline).
func (s *service) goFollowUp(ctx context.Context, p *partition, step string, ino uint64, txn *metapb.Txn) <-chan stepResult {
	out := make(chan stepResult, 1)
	go func() {
		res, err := s.followUpTxn(ctx, p, step, ino, txn)
		out <- stepResult{res, err}
	}()
	return out
}

func (s *service) followUpTxn(ctx context.Context, p *partition, step string, ino uint64, txn *metapb.Txn) (*metapb.TxnResult, error) {
	return s.followUpAt(ctx, step, txn, func(ctx context.Context) (*pb.Partition, error) {
		return s.h.peers.home(ctx, p.volume, ino)
	})
}

// followUpAt runs txn on the partition locate finds (again after every
// failure: the map may have moved it), retrying while no leader answers,
// until ctx ends (followUpTimeout at most without a deadline).
func (s *service) followUpAt(ctx context.Context, step string, txn *metapb.Txn, locate func(context.Context) (*pb.Partition, error)) (*metapb.TxnResult, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, followUpTimeout)
		defer cancel()
	}
	stampOrigin(ctx, txn)
	backoff := followUpBackoff
	for {
		part, err := locate(ctx)
		if err == nil {
			var res *metapb.TxnResult
			if res, err = s.h.peers.meta.FollowUpTxn(ctx, part, txn); err == nil {
				outcome := "ok"
				if res.GetErrno() != 0 {
					outcome = "refused"
				}
				s.h.metrics.followUps.WithLabelValues(step, outcome).Inc()
				return res, nil
			}
			s.h.peers.forgetMap()
			if c := status.Code(err); c == codes.InvalidArgument || c == codes.Unimplemented {
				s.h.metrics.followUps.WithLabelValues(step, "unreached").Inc()
				return nil, fmt.Errorf("%s on meta partition %d: %w", step, part.GetId(), err)
			}
		}
		select {
		case <-ctx.Done():
			s.h.metrics.followUps.WithLabelValues(step, "unreached").Inc()
			return nil, fmt.Errorf("%s: %w (last attempt: %v)", step, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, followUpMaxWait)
	}
}
