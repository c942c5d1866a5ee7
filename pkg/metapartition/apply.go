package metapartition

import (
	"fmt"

	"github.com/cairnfs/cairn/pkg/metapb"
	"google.golang.org/protobuf/proto"
)

// Applying log entries: Apply and ApplyBatch decode a Batch and run its Txns
// in order; applyTxn runs one Txn atomically on an overlay (with request-id
// dedup and the namespace-epoch guard), and apply dispatches each op to its
// implementation (apply_*.go, chunks.go, routing.go).

// Apply implements multiraft.StateMachine: data is a marshalled
// metapb.Batch, and the result is a []*metapb.TxnResult with one result per
// Txn, in order. A payload that does not decode returns an error and changes
// nothing; the index is used only in that error. Apply never panics and is
// deterministic: the state and results depend only on the state before and
// on data (time comes from Batch.now_ns, never from the local clock).
func (p *Partition) Apply(index uint64, data []byte) (any, error) {
	b := new(metapb.Batch)
	if err := proto.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("metapartition: entry %d: decode batch of %d bytes: %w", index, len(data), err)
	}
	res := p.ApplyBatch(b)
	if p.onApplied != nil {
		for i, t := range b.GetTxns() {
			p.onApplied(index, t, res[i])
		}
	}
	return res, nil
}

// ApplyBatch applies an already decoded batch; Apply is ApplyBatch after
// decoding. The Txns are applied in order, each atomically and independently:
// a Txn sees the effects of the Txns before it in the batch, and a failing
// Txn changes nothing and does not affect the others.
func (p *Partition) ApplyBatch(b *metapb.Batch) []*metapb.TxnResult {
	txns := b.GetTxns()
	out := make([]*metapb.TxnResult, len(txns))
	for i, m := range txns {
		out[i] = p.applyTxn(b.GetNowNs(), m)
	}
	return out
}

// opError is an op's failure: the errno for the caller and a message with
// the context a human needs to tell which input was wrong.
type opError struct {
	errno metapb.Errno
	msg   string
}

func fail(e metapb.Errno, format string, args ...any) *opError {
	return &opError{errno: e, msg: fmt.Sprintf(format, args...)}
}

func (p *Partition) applyTxn(now int64, m *metapb.Txn) *metapb.TxnResult {
	ops := m.GetOps()
	if len(ops) > MaxOpsPerTxn {
		return &metapb.TxnResult{
			Errno:    int32(metapb.E2BIG),
			FailedOp: MaxOpsPerTxn,
			Message:  fmt.Sprintf("txn has %d ops, more than %d", len(ops), MaxOpsPerTxn),
		}
	}
	id := m.GetRequestId()
	if id != 0 {
		if res, ok := p.requests.get(id); ok {
			return res // a retry: answered, not applied again
		}
	}
	if e := m.GetNsEpoch(); m.GetNsGuard() && e != p.nsEpoch {
		return &metapb.TxnResult{
			Errno:   int32(metapb.ENSCHANGED),
			Message: fmt.Sprintf("resolved under namespace epoch %d, now %d", e, p.nsEpoch),
		}
	}
	t := &p.scratch
	t.reset(p, now)
	defer t.reset(nil, 0) // drop references to the batch and to old records
	results := make([]*metapb.OpResult, 0, len(ops))
	for i, op := range ops {
		ino, before, charged, err := t.chargeBefore(op)
		var r *metapb.OpResult
		if err == nil {
			r, err = t.apply(op)
		}
		if err != nil {
			return &metapb.TxnResult{
				Errno:    int32(err.errno),
				FailedOp: int32(i),
				Message:  fmt.Sprintf("op %d (%s): %s", i, opName(op), err.msg),
			}
		}
		if charged {
			t.chargeAfter(op, ino, before, r)
		}
		results = append(results, r)
	}
	t.commit()
	res := &metapb.TxnResult{Results: results}
	if id != 0 {
		p.requests.push(id, res)
	}
	return res
}

func opName(op *metapb.Op) string {
	switch op.GetOp().(type) {
	case *metapb.Op_CreateInode:
		return "create_inode"
	case *metapb.Op_CreateDentry:
		return "create_dentry"
	case *metapb.Op_DeleteDentry:
		return "delete_dentry"
	case *metapb.Op_ReplaceDentry:
		return "replace_dentry"
	case *metapb.Op_Setattr:
		return "setattr"
	case *metapb.Op_Link:
		return "link"
	case *metapb.Op_TouchDir:
		return "touch_dir"
	case *metapb.Op_Evict:
		return "evict"
	case *metapb.Op_SetXattr:
		return "set_xattr"
	case *metapb.Op_RemoveXattr:
		return "remove_xattr"
	case *metapb.Op_AppendExtents:
		return "append_extents"
	case *metapb.Op_Fence:
		return "fence"
	case *metapb.Op_Unfence:
		return "unfence"
	case *metapb.Op_SetRange:
		return "set_range"
	case *metapb.Op_AckFreed:
		return "ack_freed"
	case *metapb.Op_SetRouting:
		return "set_routing"
	case *metapb.Op_ImportDentries:
		return "import_dentries"
	case *metapb.Op_PurgeDentries:
		return "purge_dentries"
	case *metapb.Op_SpliceChunks:
		return "splice_chunks"
	case *metapb.Op_ChunkRefs:
		return "chunk_refs"
	case *metapb.Op_ChunkCollect:
		return "chunk_collect"
	case *metapb.Op_ChunkForget:
		return "chunk_forget"
	case *metapb.Op_ChunkFix:
		return "chunk_fix"
	case *metapb.Op_SettleDentry:
		return "settle_dentry"
	}
	return "empty"
}

// ---- Operations. Each validates everything before writing the overlay,
// so an op that fails has written nothing (the Txn is dropped anyway). ----

func (t *txn) apply(op *metapb.Op) (*metapb.OpResult, *opError) {
	switch o := op.GetOp().(type) {
	case *metapb.Op_CreateInode:
		return t.createInode(o.CreateInode)
	case *metapb.Op_CreateDentry:
		return t.createDentry(o.CreateDentry)
	case *metapb.Op_DeleteDentry:
		return t.deleteDentry(o.DeleteDentry)
	case *metapb.Op_ReplaceDentry:
		return t.replaceDentry(o.ReplaceDentry)
	case *metapb.Op_Setattr:
		return t.setattr(o.Setattr)
	case *metapb.Op_Link:
		return t.link(o.Link)
	case *metapb.Op_TouchDir:
		return t.touchDir(o.TouchDir)
	case *metapb.Op_Evict:
		return t.evict(o.Evict)
	case *metapb.Op_SetXattr:
		return t.setXattr(o.SetXattr)
	case *metapb.Op_RemoveXattr:
		return t.removeXattr(o.RemoveXattr)
	case *metapb.Op_AppendExtents:
		return t.appendExtents(o.AppendExtents)
	case *metapb.Op_Fence:
		return t.fence(o.Fence)
	case *metapb.Op_Unfence:
		return t.unfence(o.Unfence)
	case *metapb.Op_SetRange:
		return t.setRange(o.SetRange)
	case *metapb.Op_AckFreed:
		return t.ackFreed(o.AckFreed)
	case *metapb.Op_SetRouting:
		return t.setRouting(o.SetRouting)
	case *metapb.Op_ImportDentries:
		return t.importDentries(o.ImportDentries)
	case *metapb.Op_PurgeDentries:
		return t.purgeDentries(o.PurgeDentries)
	case *metapb.Op_SpliceChunks:
		return t.spliceChunks(o.SpliceChunks)
	case *metapb.Op_ChunkRefs:
		return t.chunkRefs(o.ChunkRefs)
	case *metapb.Op_ChunkCollect:
		return t.chunkCollect(o.ChunkCollect)
	case *metapb.Op_ChunkForget:
		return t.chunkForget(o.ChunkForget)
	case *metapb.Op_ChunkFix:
		return t.chunkFix(o.ChunkFix)
	case *metapb.Op_SettleDentry:
		return t.settleDentry(o.SettleDentry)
	}
	// An unset oneof, or an op added to the proto after this code.
	return nil, fail(metapb.EINVAL, "op has no known operation set")
}
