package metanode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// The deletion collector (CFS §2.7.3): deleting a file only moves its extents
// to its meta partition's free list (replicated, so nothing is forgotten in a
// crash); the partition's leader later frees them on the data nodes and then
// takes them off the list with AckFreed. Freeing is idempotent on the data
// nodes, so a leader change or crash between the two steps only repeats work.
const (
	defaultCollectInterval = 5 * time.Second
	// collectBatch bounds the extents freed per partition per round, so one
	// huge deletion cannot hold the collector for long.
	collectBatch = 1024
	collectRound = 30 * time.Second
)

// collector frees the extents on the free lists of the partitions this node
// leads.
type collector struct {
	h *Host

	mu   sync.Mutex
	data map[uint64]*dataclient.Client // by volume id
}

func (h *Host) runCollector() {
	defer h.wg.Done()
	c := &collector{h: h, data: map[uint64]*dataclient.Client{}}
	defer c.close()
	interval := h.opts.CollectInterval
	if interval <= 0 {
		interval = defaultCollectInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), collectRound)
		go func() {
			select {
			case <-h.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for _, p := range h.ledPartitions() {
			if err := c.collect(ctx, p); err != nil {
				h.log.Warn("deletion collector", "partition", p.part.id, "err", err)
			}
		}
		cancel()
	}
}

type ledPartition struct {
	part   *partition
	volume uint64
}

// ledPartitions lists the partitions this replica leads.
func (h *Host) ledPartitions() []ledPartition {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []ledPartition
	for id, p := range h.parts {
		if st, err := h.env.Raft.Status(multiraft.GroupID(id)); err == nil && st.IsLeader {
			out = append(out, ledPartition{part: p, volume: h.volumes[id]})
		}
	}
	return out
}

// collect frees one batch of p's free list and acknowledges what was freed.
func (c *collector) collect(ctx context.Context, lp ledPartition) error {
	var (
		freed []metapartition.FreedExtent
		// referenced marks entries whose file still has a key on the same
		// extent: the bytes they free were replaced, but the extent lives
		// on (a large extent holds one file, and deleting it would lose the
		// rest). Their data is left alone; the file's last key frees it.
		referenced []bool
	)
	lp.part.sm.read(func(mp *metapartition.Partition) {
		freed = mp.FreeList()
		if len(freed) > collectBatch {
			freed = freed[:collectBatch]
		}
		referenced = make([]bool, len(freed))
		for i, f := range freed {
			in, errno := mp.GetInode(f.Ino)
			if errno != 0 {
				continue
			}
			for _, k := range in.GetExtents() {
				if k.PartitionId == f.PartitionID && k.ExtentId == f.ExtentID {
					referenced[i] = true
					break
				}
			}
		}
	})
	if len(freed) == 0 {
		return nil
	}
	dc, err := c.dataClient(ctx, lp.volume)
	if err != nil {
		return err
	}
	// Acknowledge only the prefix that was freed, so a failure is retried
	// next round and nothing after it is dropped from the list early.
	var upto uint64
	for i, f := range freed {
		if referenced[i] {
			upto = f.Seq
			continue
		}
		failed, err := dc.FreeUnreferenced(ctx, []*metapb.ExtentKey{{
			PartitionId: f.PartitionID, ExtentId: f.ExtentID, ExtentOffset: f.ExtentOffset, Size: f.Size,
		}})
		if err != nil || len(failed) > 0 {
			if upto == 0 {
				return fmt.Errorf("free extent %d of data partition %d: %w", f.ExtentID, f.PartitionID, err)
			}
			break
		}
		upto = f.Seq
	}
	res, err := lp.part.merger.submit(ctx, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_AckFreed{AckFreed: &metapb.AckFreed{UptoSeq: upto}}}}})
	if err != nil {
		return fmt.Errorf("acknowledge freed extents up to %d: %w", upto, err)
	}
	if res.Errno != 0 {
		return fmt.Errorf("acknowledge freed extents up to %d: errno %d: %s", upto, res.Errno, res.Message)
	}
	c.h.metrics.freed.Add(float64(len(freed)))
	return nil
}

// dataClient returns the data client of a volume, built from the masters'
// map on first use.
func (c *collector) dataClient(ctx context.Context, volume uint64) (*dataclient.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dc := c.data[volume]; dc != nil {
		return dc, nil
	}
	if c.h.env.Masters == nil {
		return nil, errors.New("no master client to find the data partitions")
	}
	src := func(ctx context.Context) (*dataclient.Topology, error) {
		var resp *pb.GetMapResponse
		err := c.h.env.Masters.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
			resp, err = m.GetMap(ctx, &pb.GetMapRequest{}, o...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("get cluster map: %w", err)
		}
		v := resp.Map.Volumes[volume]
		if v == nil {
			return nil, fmt.Errorf("volume %d is not in the cluster map", volume)
		}
		return dataclient.FromMap(resp.Map, v.Name)
	}
	dc, err := dataclient.New(ctx, src, dataclient.Options{})
	if err != nil {
		return nil, err
	}
	c.data[volume] = dc
	return dc, nil
}

func (c *collector) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, dc := range c.data {
		dc.Close()
	}
}
