package metanode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/metapartition"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/multiraft"
)

// The deletion collector (CFS §2.7.3): deleting a file only moves its extents
// to its meta partition's free list (replicated, so nothing is forgotten in a
// crash); the partition's leader later frees them on the data nodes and then
// takes them off the list with AckFreed. Freeing is idempotent on the data
// nodes, so a leader change or crash between the two steps only repeats work.
//
// Chunked files put chunk drops on the same list: those are not freed here
// but given back to the chunk index shard that counts the chunk
// (ChunkRefs{delta -1, drop_seq}), whose watermark makes a repeat a no-op;
// only then are they acknowledged. The same loop reclaims, on the leader of
// every partition holding chunk index entries, the entries that have had no
// references for a grace: marked dead, freed on the data nodes, forgotten.
// See docs/design.md "The chunk index".
const (
	defaultCollectInterval = 5 * time.Second
	// collectBatch bounds the free-list entries handled per partition per
	// round, so one huge deletion cannot hold the collector for long. It is
	// below metapartition.MaxChunksPerOp, so one shard's drops of a round
	// fit one ChunkRefs.
	collectBatch = 1024
	collectRound = 30 * time.Second
	// reclaimBatch bounds the chunk index entries collected and the dead
	// ones freed per partition per round.
	reclaimBatch = 1024
	// DefaultChunkGrace is how long a chunk index entry must have had no
	// references before the collector reclaims it, unless
	// Options.ChunkGrace says otherwise.
	DefaultChunkGrace = 5 * time.Minute
	// mapMaxAge is how old the node's copy of the cluster map may be
	// when it routes chunk drops; a failed send re-reads it.
	mapMaxAge = 30 * time.Second
	// shardCallTimeout bounds one ChunkRefs call to another partition.
	shardCallTimeout = 10 * time.Second
	// warnEvery rate-limits the warning about drops a volume cannot take.
	warnEvery = time.Minute
)

// collector frees the extents on the free lists of the partitions this node
// leads, hands their chunk drops to the chunk index, and reclaims the
// unreferenced chunks of the index shards it leads.
type collector struct {
	h     *Host
	grace time.Duration
	*peers

	mu     sync.Mutex
	data   map[uint64]*dataclient.Client // by volume id
	warned map[uint64]time.Time          // partition -> last "no chunk index" warning
}

func newCollector(h *Host) *collector {
	c := &collector{h: h, grace: h.opts.ChunkGrace, peers: h.peers,
		data: map[uint64]*dataclient.Client{}, warned: map[uint64]time.Time{}}
	if c.grace <= 0 {
		c.grace = DefaultChunkGrace
	}
	return c
}

func (h *Host) runCollector() {
	defer h.wg.Done()
	c := newCollector(h)
	defer c.close()
	interval := h.opts.CollectInterval
	if interval <= 0 {
		interval = defaultCollectInterval
	}
	h.everyLedRound(interval, collectRound, func(ctx context.Context, p ledPartition) {
		if err := c.collect(ctx, p); err != nil {
			h.log.Warn("deletion collector", "partition", p.part.id, "volume", p.volume, "err", err)
		}
		if err := c.reclaim(ctx, p); err != nil {
			h.log.Warn("chunk reclaim", "partition", p.part.id, "volume", p.volume, "err", err)
		}
	})
}

// everyLedRound runs do, every interval until the host stops, on each
// partition this replica leads, under one context per round that ends
// after round or when the host stops.
func (h *Host) everyLedRound(interval, round time.Duration, do func(ctx context.Context, lp ledPartition)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), round)
		go func() {
			select {
			case <-h.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for _, lp := range h.ledPartitions() {
			do(ctx, lp)
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

// collect handles one batch of p's free list: chunk drops go to their
// shards, extent ranges are freed on the data nodes, and the longest prefix
// of the batch that is done is acknowledged.
func (c *collector) collect(ctx context.Context, lp ledPartition) error {
	start := time.Now()
	var (
		freed []metapartition.FreedExtent
		// referenced marks extent entries whose file still has a key on the
		// same extent: the bytes they free were replaced, but the extent
		// lives on (a large extent holds one file, and deleting it would
		// lose the rest). Their data is left alone; the file's last key
		// frees it.
		referenced []bool
		drops      bool
	)
	lp.part.sm.read(func(mp *metapartition.Partition) {
		freed = mp.FreeListHead(collectBatch)
		referenced = make([]bool, len(freed))
		for i, f := range freed {
			if f.IsChunkDrop() {
				drops = true
				continue
			}
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
	var errs []error
	// Drops first: dropStop is the Seq of the first drop no shard applied,
	// where the acknowledged prefix must end.
	dropStop := ^uint64(0)
	if drops {
		var err error
		if dropStop, err = c.sendDrops(ctx, lp, freed); err != nil {
			errs = append(errs, err)
		}
	}
	var dc *dataclient.Client
	// Acknowledge only the prefix that was done, so a failure is retried
	// next round and nothing after it is dropped from the list early.
	// Entries that can never be freed (unfreeable) count as done.
	var upto uint64
	var acked, extents, applied int
	var skipped []skippedExtent
	for i, f := range freed {
		if f.IsChunkDrop() {
			if f.Seq >= dropStop {
				break
			}
			upto, acked, applied = f.Seq, acked+1, applied+1
			continue
		}
		if !referenced[i] {
			key := &metapb.ExtentKey{PartitionId: f.PartitionID, ExtentId: f.ExtentID, ExtentOffset: f.ExtentOffset, Size: f.Size}
			why, err := c.unfreeable(ctx, start, lp.volume, key.PartitionId, extentKeyProblem(key))
			if err == nil && why == "" {
				if dc == nil {
					dc, err = c.dataClient(ctx, lp.volume)
				}
				if err == nil {
					why, err = freeOne(ctx, dc, key, dc.FreeUnreferenced)
				}
				if err == nil && why == "" {
					extents++
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("free extent %d of data partition %d (free-list seq %d): %w", f.ExtentID, f.PartitionID, f.Seq, err))
				break
			}
			if why != "" {
				skipped = append(skipped, skippedExtent{f, why})
			}
		}
		upto, acked = f.Seq, acked+1
	}
	if acked == 0 {
		return errors.Join(errs...)
	}
	if err := c.ack(ctx, lp, upto); err != nil {
		return errors.Join(append(errs, err)...)
	}
	c.h.metrics.freed.Add(float64(extents))
	c.h.metrics.dropsApplied.Add(float64(applied))
	for _, s := range skipped {
		f := s.f
		c.h.log.Warn("deletion collector: a deleted file's extent range cannot be freed; dropped from the free list",
			"partition", lp.part.id, "volume", lp.volume, "ino", f.Ino, "seq", f.Seq, "data_partition", f.PartitionID,
			"extent", f.ExtentID, "extent_offset", f.ExtentOffset, "size", f.Size, "reason", s.why)
		c.h.metrics.skipped.WithLabelValues("extent").Inc()
	}
	return errors.Join(errs...)
}

// A free-list entry or a dead chunk the collector cannot free is dropped,
// not retried: its key names no data partition of the volume (a partition
// of another volume, or none at all), has fields no data node can serve,
// or a data node refused it as a bad request. Such keys were written by a
// client the request checks (datakeys.go) did not stop: stored before
// them, or by a trusted caller. Retrying would stop everything after the
// entry for good, since the list is acknowledged in order, and so let one
// writer stall space reclaim for every file of the partition; freeing it
// elsewhere would destroy another volume's data. Dropping loses nothing
// the volume owns: its partitions never leave it and ids are never
// reused, so the bytes such a key names were never this volume's to free
// (kept until an unknown id became one of the volume's new partitions, it
// would free another file's bytes there; a bad request on the volume's
// own partition leaks at most that key's range, which the log line
// names). Parking the entry instead would need
// replicated state of its own and gives nothing to retry later. Each
// dropped entry is logged once, after the drop is acknowledged, with its
// inode and key, and counted in cairn_meta_collector_skipped_total.
//
// Everything else is transient and retried next round as before: a map
// that cannot be read, a data node down or busy, and a data node refusing
// the meta node's own identity (CodePermissionDenied: a revoked or
// unrecognized certificate says nothing about the key, and dropping on it
// would empty the whole list without freeing anything).

// skippedExtent is a free-list extent range dropped without freeing.
type skippedExtent struct {
	f   metapartition.FreedExtent
	why string
}

// unfreeable says why a key on data partition pid of volume cannot be
// freed by this volume's collector ("" if it can): problem (its fields,
// from extentKeyProblem or chunkProblem) if there is one, else a
// partition the map does not list as the volume's. A partition missing
// from the node's copy of the map is looked up in one read since (the
// round's start: one read per round however many entries are bad, and
// reads at least minMapRefetch apart); the error is for a map that
// cannot be read.
func (c *collector) unfreeable(ctx context.Context, since time.Time, volume, pid uint64, problem string) (string, error) {
	if problem != "" {
		return "key " + problem, nil
	}
	in, m, err := c.dataPartitionOf(ctx, volume, pid, since)
	if err != nil {
		return "", err
	}
	if in {
		return "", nil
	}
	return foreignPartition(m, volume, dataRef{pid: pid, where: "the key"}).msg, nil
}

// freeOne frees key with free (dc's Free or FreeUnreferenced). It returns
// why the key can never be freed when a data node refused it as a bad
// request, an error for any other failure. A key on a partition dc does
// not know yet (the volume grew since dc read its topology: unfreeable
// checked the partition in a fresh map) makes dc read its topology again
// for the next round.
func freeOne(ctx context.Context, dc *dataclient.Client, key *metapb.ExtentKey, free func(context.Context, []*metapb.ExtentKey) ([]*metapb.ExtentKey, error)) (string, error) {
	failed, err := free(ctx, []*metapb.ExtentKey{key})
	if err == nil && len(failed) == 0 {
		return "", nil
	}
	if err == nil {
		err = errors.New("not freed")
	}
	if why := refusedFree(err); why != "" {
		return why, nil
	}
	if !slices.ContainsFunc(dc.Topology().Partitions, func(p *pb.Partition) bool { return p.GetId() == key.PartitionId }) {
		if rerr := dc.Refresh(ctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return "", err
}

// refusedFree says why a data node's answer to a free means the key can
// never be freed ("" when it may succeed later): CodeBadRequest, the
// request's own arguments. CodePermissionDenied and the other refusals of
// the caller's identity are not: see the comment above skippedExtent.
func refusedFree(err error) string {
	var de *dataproto.Error
	if !errors.As(err, &de) || de.Code != dataproto.CodeBadRequest {
		return ""
	}
	return "a data node refused it: " + de.Code.String() + ": " + de.Msg
}

func (c *collector) ack(ctx context.Context, lp ledPartition, upto uint64) error {
	res, err := lp.part.merger.submit(ctx, &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_AckFreed{AckFreed: &metapb.AckFreed{UptoSeq: upto}}}}})
	if err != nil {
		return fmt.Errorf("acknowledge the free list up to %d: %w", upto, err)
	}
	if res.Errno != 0 {
		return fmt.Errorf("acknowledge the free list up to %d: %v: %s", upto, metapb.Errno(res.Errno), res.Message)
	}
	return nil
}

// sendDrops gives the batch's chunk drops back to their shards: per shard
// one ChunkRefs (in Seq order, with this partition as the source), in one
// Txn. It returns the Seq of the first drop that was not applied (all
// ones: every drop was), which ends the prefix that may be acknowledged:
// a shard's Txn applies all of its drops or none, and drops after a failed
// one that another shard applied are skipped by its watermark when they
// are sent again.
func (c *collector) sendDrops(ctx context.Context, lp ledPartition, freed []metapartition.FreedExtent) (uint64, error) {
	first := ^uint64(0)
	for _, f := range freed {
		if f.IsChunkDrop() {
			first = f.Seq
			break
		}
	}
	m, err := c.clusterMap(ctx)
	if err != nil {
		return first, fmt.Errorf("chunk drops from seq %d: %w", first, err)
	}
	vol := m.GetVolumes()[lp.volume]
	if vol == nil {
		return first, fmt.Errorf("chunk drops from seq %d: volume %d is not in the cluster map", first, lp.volume)
	}
	if len(vol.GetChunkIndexPartitions()) == 0 {
		// Keep them: dropping them would leak nothing but the volume has
		// no index to give them to; a volume made before chunked files
		// should not have any.
		c.warnNoIndex(lp, vol, first)
		return first, nil
	}
	type group struct {
		shard uint64
		items []*metapb.ChunkRef
		first uint64
	}
	var groups []*group
	byShard := map[uint64]*group{}
	for _, f := range freed {
		if !f.IsChunkDrop() {
			continue
		}
		s, err := clustermap.ChunkShard(vol, f.Fingerprint[:])
		if err != nil {
			return first, fmt.Errorf("chunk drop seq %d (%v): %w", f.Seq, f.Fingerprint, err)
		}
		g := byShard[s]
		if g == nil {
			g = &group{shard: s, first: f.Seq}
			byShard[s] = g
			groups = append(groups, g)
		}
		g.items = append(g.items, &metapb.ChunkRef{Chunk: f.Chunk(), Delta: -1, DropSeq: f.Seq})
	}
	stop := ^uint64(0)
	var errs []error
	for _, g := range groups {
		txn := &metapb.Txn{Ops: []*metapb.Op{{Op: &metapb.Op_ChunkRefs{ChunkRefs: &metapb.ChunkRefs{Items: g.items, SourcePartition: lp.part.id}}}}}
		if err := c.shardTxn(ctx, lp, m, g.shard, txn); err != nil {
			stop = min(stop, g.first)
			errs = append(errs, fmt.Errorf("%d chunk drops from seq %d to chunk index partition %d: %w", len(g.items), g.first, g.shard, err))
		}
	}
	if len(errs) > 0 {
		c.forgetMap() // a moved leader or partition: read the map again
	}
	return stop, errors.Join(errs...)
}

// shardTxn applies txn on chunk index partition shard: through this node's
// merger when it is lp itself, else on its leader.
func (c *collector) shardTxn(ctx context.Context, lp ledPartition, m *pb.ClusterMap, shard uint64, txn *metapb.Txn) error {
	var res *metapb.TxnResult
	var err error
	if shard == lp.part.id {
		res, err = lp.part.merger.submit(ctx, txn)
	} else {
		p := m.GetPartitions()[shard]
		if p == nil {
			return fmt.Errorf("meta partition %d is not in the cluster map", shard)
		}
		cctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
		res, err = c.meta.Txn(cctx, p, txn)
		cancel()
	}
	if err != nil {
		return err
	}
	if res.GetErrno() != 0 {
		return fmt.Errorf("%v: %s", metapb.Errno(res.Errno), res.Message)
	}
	return nil
}

func (c *collector) warnNoIndex(lp ledPartition, vol *pb.Volume, first uint64) {
	c.mu.Lock()
	last := c.warned[lp.part.id]
	now := time.Now()
	if now.Sub(last) >= warnEvery {
		c.warned[lp.part.id] = now
	}
	c.mu.Unlock()
	if now.Sub(last) >= warnEvery {
		c.h.log.Warn("chunk drops kept on the free list: the volume has no chunk index partitions",
			"partition", lp.part.id, "volume", vol.GetName(), "first_seq", first)
	}
}

// reclaim frees the chunks of p's index shard that have had no references
// for the grace: ChunkCollect marks them dead (it checks again at apply,
// so a reference taken meanwhile wins), their bytes are freed on the data
// nodes, and ChunkForget deletes the entries still dead there. Dead entries
// a crash left are found again by DeadChunks and finished.
func (c *collector) reclaim(ctx context.Context, lp ledPartition) error {
	olderThan := time.Now().Add(-c.grace).UnixNano()
	var (
		cands []*metapb.ChunkRecord
		stats metapartition.ChunkStats
	)
	lp.part.sm.read(func(mp *metapartition.Partition) {
		stats = mp.ChunkStats()
		cands = mp.CollectCandidates(olderThan, reclaimBatch)
	})
	if stats.Entries == 0 {
		return nil
	}
	if len(cands) > 0 {
		m := &metapb.ChunkCollect{OlderThanNs: olderThan, Fingerprints: make([][]byte, len(cands))}
		for i, r := range cands {
			m.Fingerprints[i] = r.GetChunk().GetFingerprint()
		}
		if _, err := c.submit(ctx, lp, &metapb.Op{Op: &metapb.Op_ChunkCollect{ChunkCollect: m}}); err != nil {
			return fmt.Errorf("collect %d unreferenced chunks: %w", len(cands), err)
		}
	}
	var dead []*metapb.ChunkRecord
	lp.part.sm.read(func(mp *metapartition.Partition) { dead = mp.DeadChunks(reclaimBatch) })
	if len(dead) == 0 {
		return nil
	}
	dc, err := c.dataClient(ctx, lp.volume)
	if err != nil {
		return fmt.Errorf("free %d dead chunks: %w", len(dead), err)
	}
	// Each chunk on its own (Free sends one request per key anyway), so
	// that one a data node refuses as invalid is told from the others.
	// Chunks that can never be freed are forgotten as if they were (see
	// the comment above skippedExtent); any other failure keeps the entry
	// dead for the next round.
	start := time.Now()
	forget := &metapb.ChunkForget{}
	var skipped []skippedChunk
	var errs []error
	failed := 0
	for _, r := range dead {
		ch := r.GetChunk()
		key := dataclient.ChunkLocation{PartitionID: ch.GetPartitionId(), ExtentID: ch.GetExtentId(), Offset: ch.GetExtentOffset(), Size: uint64(ch.GetSize())}.ExtentKey(0)
		why, err := c.unfreeable(ctx, start, lp.volume, ch.GetPartitionId(), chunkProblem(ch))
		if err == nil && why == "" {
			why, err = freeOne(ctx, dc, key, dc.Free)
		}
		if err != nil {
			failed++
			errs = append(errs, err)
			continue
		}
		if why != "" {
			skipped = append(skipped, skippedChunk{ch, why})
		}
		forget.Chunks = append(forget.Chunks, ch)
	}
	var freeErr error
	if failed > 0 {
		freeErr = fmt.Errorf("free %d of %d dead chunks on the data nodes: %w", failed, len(dead), errors.Join(errs...))
	}
	if len(forget.Chunks) == 0 {
		return freeErr
	}
	res, err := c.submit(ctx, lp, &metapb.Op{Op: &metapb.Op_ChunkForget{ChunkForget: forget}})
	if err != nil {
		return errors.Join(freeErr, fmt.Errorf("forget %d freed chunks: %w", len(forget.Chunks), err))
	}
	forgotten := map[string]bool{}
	for _, r := range res.GetResults()[0].GetChunks() {
		forgotten[string(r.GetChunk().GetFingerprint())] = true
	}
	reclaimed := len(forgotten)
	for _, s := range skipped {
		if !forgotten[string(s.ch.GetFingerprint())] {
			continue // taken again meanwhile: not dropped
		}
		reclaimed--
		c.h.log.Warn("chunk reclaim: a dead chunk cannot be freed; forgotten without freeing it",
			"partition", lp.part.id, "volume", lp.volume, "fingerprint", fmt.Sprintf("%x", s.ch.GetFingerprint()),
			"data_partition", s.ch.GetPartitionId(), "extent", s.ch.GetExtentId(), "extent_offset", s.ch.GetExtentOffset(),
			"size", s.ch.GetSize(), "reason", s.why)
		c.h.metrics.skipped.WithLabelValues("chunk").Inc()
	}
	c.h.metrics.chunksReclaimed.Add(float64(reclaimed))
	return freeErr
}

// skippedChunk is a dead chunk index entry forgotten without freeing. A
// chunk index entry belongs to no inode: the log names its fingerprint.
type skippedChunk struct {
	ch  *metapb.Chunk
	why string
}

// submit applies one op on lp and returns the result, an error for a
// failed Txn.
func (c *collector) submit(ctx context.Context, lp ledPartition, op *metapb.Op) (*metapb.TxnResult, error) {
	res, err := lp.part.merger.submit(ctx, &metapb.Txn{Ops: []*metapb.Op{op}})
	if err != nil {
		return nil, err
	}
	if res.Errno != 0 {
		return nil, fmt.Errorf("%v: %s", metapb.Errno(res.Errno), res.Message)
	}
	return res, nil
}

// dataClient returns the data client of a volume, built from the cluster
// map on first use.
func (c *collector) dataClient(ctx context.Context, volume uint64) (*dataclient.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dc := c.data[volume]; dc != nil {
		return dc, nil
	}
	src := func(ctx context.Context) (*dataclient.Topology, error) {
		m, err := c.fetchMap(ctx)
		if err != nil {
			return nil, err
		}
		v := m.GetVolumes()[volume]
		if v == nil {
			return nil, fmt.Errorf("volume %d is not in the cluster map", volume)
		}
		return dataclient.FromMap(m, v.Name)
	}
	dc, err := dataclient.New(ctx, src, dataclient.Options{Conn: dataproto.ConnOptions{TLS: c.h.env.TLS, Network: c.h.env.Network}})
	if err != nil {
		return nil, fmt.Errorf("data client of volume %d: %w", volume, err)
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
