package metanode

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// The retries of a cross-partition rename (rename.go) that find an
// earlier attempt's work: its placement of the new name left behind, or
// its new name taken over and the rename completed by the resolver
// (resolve.go).

// takeBack is the new name of a rename whose attempt finds its old name
// gone, to look at on partition part (0: where the map routes it) for a
// placement an earlier attempt of the same request left: pending under
// mark id.
type takeBack struct {
	part, dir uint64
	name      string
	id        uint64
}

// takeBackOwn takes back an earlier attempt's placement of tb's new name
// before a rename answers that its old name is gone (refused). An attempt
// cut off after placing the new name (its partition slow to answer) leaves
// the client to retry; if another operation took the old name meanwhile,
// the retry answers ENOENT, and a placement left behind would be settled
// by the resolver, which cannot tell that rename from one that committed:
// the new name would then name the file another name already does, and
// the file it replaced would lose its name (the simulation found it:
// test/sim, seed 162). As renameRefused does, the request id is claimed
// here first, so that no attempt commits afterwards; if the claim finds
// the rename committed (again), it is answered from that instead. The
// mark says what the placement replaced, which is put back.
func (s *service) takeBackOwn(ctx context.Context, p *partition, req *metapb.PathRequest, tb *takeBack, refused *metapb.PathResponse) (resp *metapb.PathResponse, again bool, err error) {
	unknown := func(what string, err error) (*metapb.PathResponse, bool, error) {
		return nil, false, status.Errorf(codes.Unavailable, "rename: %s an earlier attempt's new name %q: %v", what, tb.name, err)
	}
	if tb.part == 0 {
		if tb.part, err = s.routeByMap(ctx, p.volume, tb.dir, tb.name); err != nil {
			return unknown("routing", err)
		}
	}
	part, err := s.h.peers.partition(ctx, tb.part)
	if err != nil {
		return unknown("looking for", err)
	}
	look, err := s.h.peers.meta.FetchPending(ctx, part, tb.dir, tb.name)
	if err != nil {
		return unknown("looking for", err)
	}
	d := look.GetDentry()
	pend := d.GetPending()
	if look.GetErrno() != 0 || pend.GetId() != tb.id {
		return refused, false, nil // no placement of this request's
	}
	// The clean-up outlives the request, as renameRefused's does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renameCleanupTimeout)
	defer cancel()
	res, err := p.merger.submit(ctx, &metapb.Txn{RequestId: req.RequestId})
	switch {
	case err != nil:
		return unknown("claiming the request before taking back", err)
	case len(res.GetResults()) > 0:
		return nil, true, nil
	}
	undo := &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
		Parent: tb.dir, Name: []byte(tb.name), ExpectIno: d.GetIno(), Undo: tb.id}}}
	if ino := pend.GetReplacedIno(); ino != 0 {
		undo = &metapb.Op{Op: &metapb.Op_ReplaceDentry{ReplaceDentry: &metapb.ReplaceDentry{
			Parent: tb.dir, Name: []byte(tb.name), Ino: ino, Type: pend.GetReplacedType(), ExpectIno: d.GetIno(), Undo: tb.id}}}
	}
	ures, err := s.followUpOn(ctx, "rename_undo", tb.part, &metapb.Txn{Ops: []*metapb.Op{undo}, RequestId: newFenceToken()})
	switch {
	case err != nil:
		return unknown("taking back", err)
	case ures.GetErrno() != 0:
		// Taken over by the resolver meanwhile (ESTALE), which settles it.
		s.h.log.Warn("an earlier attempt's new name not taken back", "partition", p.id, "request", req.RequestId, "parent", tb.dir,
			"name", tb.name, "on", tb.part, "errno", metapb.Errno(ures.GetErrno()), "err", ures.GetMessage())
	default:
		s.h.log.Info("an earlier attempt's new name taken back: the old name is gone", "partition", p.id, "request", req.RequestId,
			"parent", tb.dir, "name", tb.name, "on", tb.part, "restored", pend.GetReplacedIno())
	}
	return refused, false, nil
}

// awaitRolledForward waits, at most rolledForwardWait, for partition p to
// apply a resolver's roll-forward of the rename whose new name was placed
// under mark id, and reports whether it did. A rename whose undo finds its
// mark taken over by the resolver learns so: the resolver, finding the old
// name still naming the file, commits the rename itself (which refused the
// rename's own Txn), and answering EXDEV instead handed the client's
// protocol a rename that had happened, which it then answered ENOENT (the
// simulation, seed 2859).
func (s *service) awaitRolledForward(ctx context.Context, p *partition, id uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, rolledForwardWait)
	defer cancel()
	for {
		var done bool
		p.sm.read(func(mp *metapartition.Partition) {
			res, ok := mp.Answered(rolledForwardID(id))
			done = ok && res.GetErrno() == 0
		})
		if done {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rolledForwardWait bounds awaitRolledForward: the resolver commits right
// after it takes a name over, unless its partitions are slow to answer.
const rolledForwardWait = 5 * time.Second
