package metanode

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/changefeed"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Change feeds (pkg/changefeed): every replica records what its applied
// Txns changed; the leader answers a mount's ChangesRequest with what
// other sessions changed after the mount's cursor. The answer is read
// after a read barrier (readable), taken after the request arrived, so
// it covers every change committed before the mount sent it: a deposed
// leader cannot pass the barrier, and a new leader has applied every
// committed entry before it answers.

const (
	// maxChangesWait bounds how long a leader holds a ChangesRequest.
	maxChangesWait = time.Second
	// maxChangesItems bounds one answer; more is answered forget_all.
	maxChangesItems = 8192
)

// Changes answers a mount's change feed (metapb.ChangesRequest).
func (s *service) Changes(ctx context.Context, req *metapb.ChangesRequest) (*metapb.ChangesResponse, error) {
	p, err := s.hosted(req.PartitionId)
	if err != nil {
		return nil, err
	}
	if r := access(ctx, p, false); r != nil {
		return nil, status.Error(codes.PermissionDenied, r.msg)
	}
	if capability.FromContext(ctx).Subtree() {
		// The feed names what changes anywhere in the volume.
		return nil, status.Error(codes.PermissionDenied, "a client restricted to a subtree has no change feed")
	}
	arrived := time.Now()
	wait := min(time.Duration(req.WaitMs)*time.Millisecond, maxChangesWait)
	deadline := arrived.Add(wait)
	for {
		// Registered before the barrier: a change applied after it wakes
		// this request.
		woken, stop := p.feed.Wait(req.Origin)
		barrier := time.Now()
		if _, err := s.readable(ctx, req.PartitionId); err != nil {
			stop()
			return nil, err
		}
		b := p.feed.Since(req.Cursor, req.Origin, maxChangesItems)
		left := time.Until(deadline)
		if b.Reset || len(b.Names) > 0 || len(b.Inodes) > 0 || left <= 0 {
			stop()
			r := changesResponse(b)
			r.CoveredAfterUs = uint64(barrier.Sub(arrived).Microseconds())
			return r, nil
		}
		t := time.NewTimer(left)
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		stop()
		if ctx.Err() != nil {
			return nil, raftStatus(req.PartitionId, ctx.Err())
		}
	}
}

func changesResponse(b changefeed.Batch) *metapb.ChangesResponse {
	r := &metapb.ChangesResponse{Cursor: b.Cursor, ForgetAll: b.Reset, Inodes: b.Inodes}
	for _, n := range b.Names {
		r.Names = append(r.Names, &metapb.ChangedName{Parent: n.Parent, Name: []byte(n.Name)})
	}
	return r
}

// recordChanges is a partition's Apply hook: it keeps the partition's
// change feed.
func recordChanges(feed *changefeed.Log) func(index uint64, txn *metapb.Txn, res *metapb.TxnResult) {
	return func(index uint64, txn *metapb.Txn, res *metapb.TxnResult) {
		if res.GetErrno() != 0 {
			feed.Advance(index) // a refused Txn changed nothing
			return
		}
		names, inodes, reset := changefeed.Of(txn)
		feed.Add(index, txn.GetOrigin(), names, inodes, reset)
	}
}

type originKey struct{}

// withOrigin returns ctx whose Txns carry origin, the session of the
// client whose request they carry out (Txn.origin).
func withOrigin(ctx context.Context, origin uint64) context.Context {
	if origin == 0 {
		return ctx
	}
	return context.WithValue(ctx, originKey{}, origin)
}

// stampOrigin sets txn's origin from ctx when it has none.
func stampOrigin(ctx context.Context, txn *metapb.Txn) {
	if o, _ := ctx.Value(originKey{}).(uint64); o != 0 && txn.GetOrigin() == 0 {
		txn.Origin = o
	}
}
