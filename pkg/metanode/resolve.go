package metanode

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// The resolver of pending names. A rename whose new name routes to another
// partition than its old one places the new name first, pending
// (metapb.PendingRename), then deletes the old name (its commit), then
// settles the new name; until then every other change of the new name
// waits. A rename that dies between the steps (its client or its
// coordinator gone for good) would leave the name pending for ever, so the
// leader of the partition holding it resolves names pending longer than
// pendingStale:
//
//   - First the resolver takes the mark over (under an id of its own), so
//     that the rename, if it is only slow, can no longer take the name
//     back: its undo is refused from then on, and it waits for the name
//     and answers success once the name is settled naming its file.
//   - The old name still names the file: the rename has not committed.
//     The resolver commits it (deletes the old name, expecting the file)
//     and settles the new name: rolled forward, the file keeps one name,
//     and a late commit of the rename itself finds the old name gone and
//     is refused.
//   - The old name is gone or names another file: the commit applied, or
//     another operation took the old name first and the rename was about
//     to take the new one back. The resolver settles the name: right in
//     the first case; in the second the file has one name too many, as
//     after a client that dies between the steps of a rename without the
//     mark (fsck reports the link count).
//
// Rolling forward does not drop the link of an inode the placement
// replaced (the mark does not name it): that inode keeps a link without a
// name, which fsck reports, as after a crash at that point of the rename.
const (
	pendingStale    = 10 * time.Second
	resolveInterval = 2 * time.Second
	resolveBatch    = 64
	resolveRound    = 30 * time.Second
)

// runResolver resolves, every resolveInterval, the stale pending names of
// the partitions this node leads.
func (h *Host) runResolver() {
	defer h.wg.Done()
	s := &service{h: h}
	h.everyLedRound(resolveInterval, resolveRound, s.resolvePending)
}

// resolvePending resolves lp's names pending longer than pendingStale.
func (s *service) resolvePending(ctx context.Context, lp ledPartition) {
	var names []*metapb.Dentry
	lp.part.sm.read(func(mp *metapartition.Partition) {
		names = mp.PendingNames(time.Now().Add(-pendingStale).UnixNano(), resolveBatch)
	})
	for _, d := range names {
		if ctx.Err() != nil {
			return
		}
		if err := s.resolveName(ctx, lp, d); err != nil {
			s.h.log.Warn("pending name not resolved; next round", "partition", lp.part.id, "parent", d.GetParent(), "name", string(d.GetName()), "err", err)
		}
	}
}

// resolveName rolls d's rename forward or settles d (see the top of the
// file). It takes the mark over first (under resolverID), so that the
// rename that placed d, if it wakes up, can no longer take d back: it
// finds its old name gone or its commit done, its undo refused, and d
// settled. An error leaves d pending (under the resolver's id), for the
// next round.
func (s *service) resolveName(ctx context.Context, lp ledPartition, d *metapb.Dentry) error {
	pend := d.GetPending()
	rid := resolverID(pend.GetId())
	if pend.GetId() != rid { // not taken over by an earlier round yet
		if err := s.settleHere(ctx, lp, d, pend.GetId(), rid); err != nil {
			return fmt.Errorf("taking the name over: %w", err)
		}
	}
	from := string(pend.GetFromName())
	owner, err := s.routeByMap(ctx, lp.volume, pend.GetFromParent(), from)
	if err != nil {
		return err
	}
	part, err := s.h.peers.partition(ctx, owner)
	if err != nil {
		return err
	}
	look, err := s.h.peers.meta.FetchDentry(ctx, part, pend.GetFromParent(), from)
	if err != nil {
		return err
	}
	switch e := metapb.Errno(look.GetErrno()); {
	case e == metapb.OK && look.GetDentry().GetIno() == d.GetIno():
		commit := &metapb.Op{Op: &metapb.Op_DeleteDentry{DeleteDentry: &metapb.DeleteDentry{
			Parent: pend.GetFromParent(), Name: pend.GetFromName(), ExpectIno: d.GetIno()}}}
		// Under the id the rename's own retry looks for (planRename): its
		// client, cut off until now, is answered that it happened.
		res, err := s.followUpOn(ctx, "rename_resolve", owner, &metapb.Txn{Ops: []*metapb.Op{commit}, RequestId: rolledForwardID(pend.GetId())})
		if err != nil {
			return err
		}
		switch metapb.Errno(res.GetErrno()) {
		case metapb.OK:
			s.h.log.Info("stale rename rolled forward", "partition", lp.part.id, "parent", d.GetParent(), "name", string(d.GetName()), "from", from)
		case metapb.ENOENT, metapb.ESTALE:
			// The rename's own commit came first, or the old name
			// changed since the look: settled as below.
		default:
			return errnoError("rolling the rename forward", res)
		}
	case e == metapb.OK, e == metapb.ENOENT:
	default:
		return errnoError("looking up the old name", &metapb.TxnResult{Errno: look.GetErrno()})
	}
	return s.settleHere(ctx, lp, d, rid, 0)
}

// settleHere settles d, pending under rename id, on its own partition, or
// hands its mark to rename to.
func (s *service) settleHere(ctx context.Context, lp ledPartition, d *metapb.Dentry, id, to uint64) error {
	op := &metapb.Op{Op: &metapb.Op_SettleDentry{SettleDentry: &metapb.SettleDentry{
		Parent: d.GetParent(), Name: d.GetName(), Ino: d.GetIno(), Id: id, TakeOver: to}}}
	res, err := lp.part.merger.submit(ctx, &metapb.Txn{Ops: []*metapb.Op{op}})
	if err != nil {
		return err
	}
	if res.GetErrno() != 0 {
		return errnoError("settling", res)
	}
	return nil
}

// resolverID is the id a resolver takes a pending name over under: the
// rename's with the top bit set, which no rename's id has
// (metapb.PendingRename), so that the resolvers of later rounds and
// leaders see the name taken over and go on with it.
func resolverID(id uint64) uint64 { return id | 1<<63 }

// errnoError is a refusal by a partition, for the resolver's log.
func errnoError(what string, res *metapb.TxnResult) error {
	return fmt.Errorf("%s: %v: %s", what, metapb.Errno(res.GetErrno()), res.GetMessage())
}
