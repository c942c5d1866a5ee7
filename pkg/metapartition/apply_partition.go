package metapartition

import "github.com/cairnfs/cairn/pkg/metapb"

// Ops on the partition's own bookkeeping: SetRange cuts the inode range,
// AckFreed trims the free list.

func (t *txn) setRange(m *metapb.SetRange) (*metapb.OpResult, *opError) {
	end := m.GetEnd()
	switch {
	case end == 0:
		return nil, fail(metapb.EINVAL, "set_range cannot reopen the inode range")
	case end < t.p.start:
		return nil, fail(metapb.EINVAL, "end %d is below the range start %d", end, t.p.start)
	case end < t.maxIno:
		return nil, fail(metapb.EINVAL, "end %d is below the highest allocated inode %d", end, t.maxIno)
	case t.end != 0 && end > t.end:
		return nil, fail(metapb.EINVAL, "end %d would extend the range ending at %d; set_range only cuts", end, t.end)
	}
	t.end = end
	return &metapb.OpResult{}, nil
}

func (t *txn) ackFreed(m *metapb.AckFreed) (*metapb.OpResult, *opError) {
	upto := m.GetUptoSeq()
	if next := t.nextSeq(); upto >= next {
		return nil, fail(metapb.EINVAL, "ack_freed up to %d, but the last free-list entry given out is %d", upto, int64(next)-1)
	}
	t.acked = true
	t.ackUpto = max(t.ackUpto, upto)
	return &metapb.OpResult{}, nil
}
