package metanode

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

// refusal is why a caller may not make a request: an errno for the
// request's answer and a message naming the cause.
type refusal struct {
	errno metapb.Errno
	msg   string
}

func refuse(e metapb.Errno, format string, args ...any) *refusal {
	return &refusal{e, fmt.Sprintf(format, args...)}
}

// access checks a request to partition p against the caller's
// capabilities (capability.FromContext): a client bound to a volume
// reaches no other volume's partitions (EACCES), and a read-only client
// changes nothing (EROFS). change says whether the request would change
// anything. Nodes, admins and unrestricted clients pass.
func access(ctx context.Context, p *partition, change bool) *refusal {
	c := capability.FromContext(ctx)
	if !c.Restricted() {
		return nil
	}
	if !c.AllowsVolume(p.volume) {
		return refuse(metapb.EACCES, "meta partition %d is not in volume %q, the only one this client may use", p.id, c.Volume)
	}
	if change && c.ReadOnly {
		return refuse(metapb.EROFS, "this client is read-only")
	}
	return nil
}

// mayRead checks a read of inode ino (a directory to look in or list, an
// inode to read) on partition p against the caller's capabilities.
func (s *service) mayRead(ctx context.Context, p *partition, ino uint64) *refusal {
	if r := access(ctx, p, false); r != nil {
		return r
	}
	return s.inSubtree(ctx, p, ino)
}

// mayChange checks a Txn against the caller's capabilities: access and
// the internal operations (accessTxn), then, for a restricted client
// only, its subtree (movesRoot, inSubtree) and its mapped ids (checkTxn,
// which also maps the ids the Txn sets).
func (s *service) mayChange(ctx context.Context, p *partition, req *metapb.TxnRequest) *refusal {
	if r := accessTxn(ctx, p, req.Txn); r != nil {
		return r
	}
	c := capability.FromContext(ctx)
	if !c.Restricted() {
		return nil
	}
	if c.Subtree() {
		if r := movesRoot(ctx, req.Txn); r != nil {
			return r
		}
		if r := s.inSubtree(ctx, p, txnInodes(req.Txn)...); r != nil {
			return r
		}
	}
	return s.checkTxn(ctx, p, req)
}

// accessTxn is access for a Txn, which also refuses to clients the
// operations only cluster processes and admin tools send: routing
// changes, inode ranges and the collectors' bookkeeping. Those could
// corrupt the volume for everyone.
func accessTxn(ctx context.Context, p *partition, txn *metapb.Txn) *refusal {
	if r := access(ctx, p, true); r != nil {
		return r
	}
	if daemon.PeerKind(ctx) != pki.KindClient {
		return nil
	}
	for _, op := range txn.GetOps() {
		switch o := op.GetOp().(type) {
		case *metapb.Op_SetRouting, *metapb.Op_ImportDentries, *metapb.Op_PurgeDentries, *metapb.Op_SetRange,
			*metapb.Op_AckFreed, *metapb.Op_ChunkCollect, *metapb.Op_ChunkForget, *metapb.Op_ChunkFix:
			return refuse(metapb.EPERM, "%T is sent by cluster nodes and admin tools only", op.GetOp())
		case *metapb.Op_SettleDentry:
			// Taking a pending name over is a partition resolver's
			// (resolve.go): from a client it would disarm another
			// rename's undo.
			if o.SettleDentry.GetTakeOver() != 0 {
				return refuse(metapb.EPERM, "taking a pending name over is the partitions' resolvers' only")
			}
		case *metapb.Op_ChunkRefs:
			// Drops are the collector's: a client's drop_seq would move
			// the watermark of the partition it names as the source, and
			// that partition's own drops at or below it would be skipped
			// (references never given back, chunks never reclaimed).
			if o.ChunkRefs.GetSourcePartition() != 0 || slices.ContainsFunc(o.ChunkRefs.GetItems(), func(it *metapb.ChunkRef) bool { return it.GetDropSeq() != 0 }) {
				return refuse(metapb.EPERM, "chunk drops (source_partition, drop_seq) are sent by the deletion collector only")
			}
		}
	}
	return nil
}
