package metanode

import (
	"context"
	"fmt"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Range cuts (CFS Algorithm 1): when the master grows a volume it gives the
// open-ended meta partition an inode_end in the cluster map. The partition
// must then stop allocating above it, which only a replicated SetRange can
// make every replica agree on; the leader proposes it. The map is the
// desired state and the partition's range the actual one, so a cut is
// retried (on a timer, on every new assignment and on every gain of
// leadership) until the partition's end is at or below the map's.
const rangeRetry = 2 * time.Second

// needsCut reports whether a partition whose range ends at end (0: open)
// must be cut to want (0: the map sets no end). SetRange only cuts, so an
// end already at or below want is done.
func needsCut(end, want uint64) bool {
	return want != 0 && (end == 0 || end > want)
}

// noteRange records the map's inode_end of a hosted partition and wakes the
// cutter if the partition must be cut. The caller holds h.mu.
func (h *Host) noteRange(part *partition, p *pb.Partition) {
	if p.InodeEnd == 0 || part.wantEnd.Load() == p.InodeEnd {
		return
	}
	part.wantEnd.Store(p.InodeEnd)
	h.kickRanges()
}

func (h *Host) kickRanges() {
	select {
	case h.rangeKick <- struct{}{}:
	default:
	}
}

// runRanges cuts the ranges of the partitions this node leads, see above.
func (h *Host) runRanges() {
	defer h.wg.Done()
	t := time.NewTicker(rangeRetry)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		case <-h.rangeKick:
		}
		for _, lp := range h.ledPartitions() {
			if err := h.cutRange(lp.part); err != nil {
				h.log.Warn("cut inode range", "partition", lp.part.id, "err", err)
			}
		}
	}
}

// cutRange proposes SetRange{wantEnd} if the partition's range is not cut
// yet. It is idempotent: a cut already applied is not proposed again, and
// one applied concurrently fails harmlessly (EINVAL, seen as done on the
// next round).
func (h *Host) cutRange(p *partition) error {
	want := p.wantEnd.Load()
	var end, maxIno uint64
	p.sm.read(func(mp *metapartition.Partition) {
		_, end = mp.Range()
		maxIno = mp.MaxIno()
	})
	if !needsCut(end, want) {
		return nil
	}
	if maxIno > want {
		return fmt.Errorf("the map ends the range at %d, but inode %d is allocated already", want, maxIno)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proposeTimeout)
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := p.merger.submit(ctx, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_SetRange{SetRange: &metapb.SetRange{End: want}}}}})
	if err != nil {
		return fmt.Errorf("set range end %d: %w", want, err)
	}
	if res.Errno != 0 {
		return fmt.Errorf("set range end %d: %v: %s", want, metapb.Errno(res.Errno), res.Message)
	}
	h.log.Info("inode range cut", "partition", p.id, "end", want)
	return nil
}
