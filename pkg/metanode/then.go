package metanode

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// A Txn's then steps (TxnRequest.then): what finishes a client's request
// on other partitions than the one its Txn changes, which that partition
// sends after the Txn applied, so that the client sends one request (a
// rename within one directory, an rmdir). They are the follow-ups of
// followup.go in a general form: each group of consecutive steps on one
// inode is one Txn on its home, with a request id derived from the client's
// (FollowUpID(request_id, FollowUpThen + first step)), so a retried
// request, or the client running a group the partition could not deliver,
// never applies a step twice.

// thenReserve is what the then steps leave of the client's deadline, for
// the answer to reach it: the client then sends a group not done itself.
const thenReserve = 50 * time.Millisecond

// checkThen refuses then steps a partition does not run for a client:
// more than one Txn holds, or an operation other than the follow-ups of a
// name change. Checked before the Txn, so a refused request changes
// nothing.
func checkThen(req *metapb.TxnRequest) error {
	then := req.GetThen()
	if len(then) == 0 {
		return nil
	}
	if req.FollowUp {
		return status.Error(codes.InvalidArgument, "a follow-up carries no then steps")
	}
	if len(then) > maxOpsPerTxn {
		return status.Errorf(codes.InvalidArgument, "%d then steps, at most %d", len(then), maxOpsPerTxn)
	}
	for i, h := range then {
		switch op := h.GetOp().GetOp().(type) {
		case *metapb.Op_TouchDir, *metapb.Op_Link, *metapb.Op_Evict:
		case *metapb.Op_Setattr:
			// Only a moved inode's parent pointer.
			if op.Setattr.GetValid() != uint32(metapb.SetattrValid_SETATTR_PARENT) {
				return status.Errorf(codes.InvalidArgument, "then step %d: a setattr of more than the parent", i)
			}
		default:
			return status.Errorf(codes.InvalidArgument, "then step %d: %T is not a follow-up step", i, h.GetOp().GetOp())
		}
		if h.GetIno() == 0 {
			return status.Errorf(codes.InvalidArgument, "then step %d names no inode", i)
		}
	}
	return nil
}

// groupThen cuts then into groups of consecutive steps on one inode, one
// Txn each. Grouped by inode rather than by home, a retry of the request
// forms the same groups under the same request ids even if an inode's
// home moved meanwhile, so no step applies twice.
func groupThen(then []*metapb.HomedOp) [][]uint32 {
	var out [][]uint32
	for i, h := range then {
		if n := len(out); n > 0 && then[out[n-1][0]].GetIno() == h.GetIno() {
			out[n-1] = append(out[n-1], uint32(i))
			continue
		}
		out = append(out, []uint32{uint32(i)})
	}
	return out
}

// runThen sends the then steps of a request whose Txn (request id id)
// applied, the groups side by side, and reports each group. A client
// whose capabilities restrict it gets every group back undone: it sends
// them itself, through the checks its own requests get.
func (s *service) runThen(ctx context.Context, p *partition, id uint64, then []*metapb.HomedOp) []*metapb.ThenGroup {
	groups := groupThen(then)
	out := make([]*metapb.ThenGroup, len(groups))
	for i, g := range groups {
		out[i] = &metapb.ThenGroup{Steps: g, RequestId: metapb.FollowUpID(id, metapb.FollowUpThen+uint64(g[0]))}
	}
	if capability.FromContext(ctx).Restricted() {
		return out
	}
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-min(thenReserve, time.Until(dl)/4)))
		defer cancel()
	}
	var wg sync.WaitGroup
	for i, g := range groups {
		ops := make([]*metapb.Op, len(g))
		for k, st := range g {
			ops[k] = then[st].GetOp()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			txn := &metapb.Txn{Ops: ops, RequestId: out[i].RequestId}
			if res, err := s.followUpTxn(ctx, p, "then", then[g[0]].GetIno(), txn); err == nil {
				out[i].Done, out[i].Result = true, res
			} else {
				s.h.log.Debug("then steps not sent", "partition", p.id, "steps", g, "err", err)
			}
		}()
	}
	wg.Wait()
	return out
}
