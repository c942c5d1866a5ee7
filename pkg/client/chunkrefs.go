package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cairnfs/cairn/pkg/chunker"
	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataclient"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// References in the chunk index (VarFS dedup): a commit of a chunked
// file's layout first takes one reference per chunk it adds, sharing a
// chunk the volume stores already and uploading the others, and gives
// them back if the commit does not happen.

// chunkRefs holds the chunk index references one commit took, so that a
// commit that fails gives them back (a crash instead leaves them leaked,
// which cairn gc recounts).
type chunkRefs struct {
	f  *File
	op string

	mu        sync.Mutex // acquire runs in several streamed batches at once
	taken     map[chunker.Fingerprint]*refTaken
	committed bool
	// prefer is the data partition of this commit's uploads, once one
	// succeeded (dataclient.WriteChunkPrefer).
	prefer atomic.Uint64
}

type refTaken struct {
	ch *metapb.Chunk
	n  int64
}

// acquire takes one reference per occurrence of each piece's chunk and
// fills in the location of every new piece: a chunk the index knows is
// shared (dedup), any other is uploaded, then registered. A kept chunk the
// index no longer has is EIO.
func (r *chunkRefs) acquire(ctx context.Context, ps []piece) error {
	_, err := r.take(ctx, ps, false)
	return err
}

// take is acquire. With speculate it skips the lookup: new pieces are
// uploaded at once and registered, and a registration that finds the chunk
// stored already frees the upload. That costs the bandwidth of duplicates
// but one index commit instead of two, which is what fresh data wants.
// shared counts the distinct chunks the index had already.
func (r *chunkRefs) take(ctx context.Context, ps []piece, speculate bool) (shared int, err error) {
	type want struct {
		idx  []int // indexes into ps
		data []byte
	}
	byFP := map[chunker.Fingerprint]*want{}
	var order []chunker.Fingerprint
	for k := range ps {
		p := &ps[k]
		if p.held {
			continue
		}
		if p.data == nil {
			fp, err := fingerprintOf(p.ch)
			if err != nil {
				return 0, errnoErr(r.op, syscall.EIO, "inode %d: %v", r.f.ino, err)
			}
			p.fp = fp
		}
		w := byFP[p.fp]
		if w == nil {
			w = &want{}
			byFP[p.fp] = w
			order = append(order, p.fp)
		}
		w.idx = append(w.idx, k)
		if p.data != nil {
			w.data = p.data
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	var missing []chunker.Fingerprint
	if speculate {
		for _, fp := range order {
			if byFP[fp].data == nil {
				speculate = false // a kept chunk must be looked up
				break
			}
		}
	}
	if speculate {
		missing = order
	} else {
		lookups := make([]*metapb.ChunkRef, len(order))
		for k, fp := range order {
			w := byFP[fp]
			lookups[k] = &metapb.ChunkRef{Chunk: &metapb.Chunk{Fingerprint: fp[:], Size: ps[w.idx[0]].ch.GetSize()}, Delta: int64(len(w.idx))}
		}
		recs, err := r.f.v.chunkRefs(ctx, r.op, lookups)
		if err != nil {
			return 0, err
		}
		for k, fp := range order {
			w := byFP[fp]
			if loc := recs[k].GetChunk(); loc.GetPartitionId() != 0 {
				r.took(loc, int64(len(w.idx)))
				for _, idx := range w.idx {
					ps[idx].ch = loc
				}
				if w.data != nil {
					r.f.v.dedupBytes.Add(int64(len(w.data)))
				}
				shared++
				continue
			}
			if w.data == nil {
				return shared, errnoErr(r.op, syscall.EIO, "inode %d: chunk %v of the layout is no longer in the chunk index", r.f.ino, fp)
			}
			missing = append(missing, fp)
		}
	}
	if len(missing) == 0 {
		return shared, nil
	}
	// Upload what the index lacks, then register it.
	locs := make([]dataclient.ChunkLocation, len(missing))
	errs := make([]error, len(missing))
	var wg sync.WaitGroup
	sem := make(chan struct{}, chunkUploadFanOut)
	for k, fp := range missing {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			data := byFP[fp].data
			locs[k], errs[k] = r.f.dc.WriteChunkPrefer(ctx, r.prefer.Load(), fp, data)
			if errs[k] == nil {
				r.prefer.CompareAndSwap(0, locs[k].PartitionID)
				r.f.v.bytesWritten.Add(int64(len(data)))
			}
		}()
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			return shared, dataErr(r.op, r.f.ino, fmt.Errorf("upload chunk %v: %w", missing[k], err))
		}
	}
	regs := make([]*metapb.ChunkRef, len(missing))
	for k, fp := range missing {
		l := locs[k]
		regs[k] = &metapb.ChunkRef{Delta: int64(len(byFP[fp].idx)), Chunk: &metapb.Chunk{
			Fingerprint: fp[:], Size: uint32(l.Size), PartitionId: l.PartitionID, ExtentId: l.ExtentID, ExtentOffset: l.Offset,
		}}
	}
	recs, err := r.f.v.chunkRefs(ctx, r.op, regs)
	if err != nil {
		// The uploads are stored but unregistered: leaked bytes, the
		// price of a failed index update (docs/design.md).
		return shared, err
	}
	var dup []*metapb.ExtentKey
	for k, fp := range missing {
		w := byFP[fp]
		loc := recs[k].GetChunk()
		r.took(loc, int64(len(w.idx)))
		for _, idx := range w.idx {
			ps[idx].ch = loc
		}
		if l := locs[k]; loc.GetPartitionId() != l.PartitionID || loc.GetExtentId() != l.ExtentID || loc.GetExtentOffset() != l.Offset {
			// The index had the bytes already (another writer's, or a
			// speculative upload's): ours are a second copy nobody
			// refers to.
			dup = append(dup, l.ExtentKey(0))
			shared++
		}
	}
	if len(dup) > 0 {
		_, _ = r.f.dc.Free(ctx, dup)
	}
	return shared, nil
}

func (r *chunkRefs) took(ch *metapb.Chunk, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taken == nil {
		r.taken = map[chunker.Fingerprint]*refTaken{}
	}
	fp, _ := fingerprintOf(ch)
	if t := r.taken[fp]; t != nil {
		t.n += n
		return
	}
	r.taken[fp] = &refTaken{ch: ch, n: n}
}

// refundUnless gives back the references of a commit that did not happen
// (best effort: a failure leaves them leaked, as a crash would).
func (r *chunkRefs) refundUnless(ctx context.Context) {
	r.mu.Lock()
	if r.committed || len(r.taken) == 0 {
		r.mu.Unlock()
		return
	}
	items := make([]*metapb.ChunkRef, 0, len(r.taken))
	for _, t := range r.taken {
		items = append(items, &metapb.ChunkRef{Chunk: t.ch, Delta: -t.n})
	}
	r.taken = nil
	r.mu.Unlock()
	_, _ = r.f.v.chunkRefs(ctx, r.op, items)
}

// setCommitted records that a layout now uses the references (they are no
// longer the commit's to give back).
func (r *chunkRefs) setCommitted(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.committed = v
}

// chunkRefs applies items on the partitions holding their shards of the
// chunk index (one exactly-once Txn per shard, in parallel) and returns the
// records in the order of items.
func (v *Volume) chunkRefs(ctx context.Context, op string, items []*metapb.ChunkRef) ([]*metapb.ChunkRecord, error) {
	w := v.current()
	byShard := map[uint64][]int{}
	var shards []*pb.Partition
	for k, it := range items {
		s, err := clustermap.ChunkShard(w.vol, it.GetChunk().GetFingerprint())
		if err != nil {
			return nil, errnoErr(op, syscall.EIO, "chunk index: %v", err)
		}
		if byShard[s] == nil {
			p, ok := w.parts[s]
			if !ok {
				return nil, errnoErr(op, syscall.EIO, "chunk index partition %d is not in the volume's view", s)
			}
			shards = append(shards, p)
		}
		byShard[s] = append(byShard[s], k)
	}
	out := make([]*metapb.ChunkRecord, len(items))
	err := v.each(shards, func(p *pb.Partition) error {
		idx := byShard[p.GetId()]
		var ops []*metapb.Op
		for k := 0; k < len(idx); k += maxRefItemsPerOp {
			part := idx[k:min(k+maxRefItemsPerOp, len(idx))]
			m := &metapb.ChunkRefs{Items: make([]*metapb.ChunkRef, len(part))}
			for q, x := range part {
				m.Items[q] = items[x]
			}
			ops = append(ops, &metapb.Op{Op: &metapb.Op_ChunkRefs{ChunkRefs: m}})
		}
		res, err := v.txn(ctx, op, byID(p.GetId()), ops...)
		if err != nil {
			return err
		}
		// Each shard writes only its own items' slots of out.
		for oi, r := range res.GetResults() {
			for q, rec := range r.GetChunks() {
				if x := oi*maxRefItemsPerOp + q; x < len(idx) {
					out[idx[x]] = rec
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k, rec := range out {
		if rec == nil {
			return nil, errnoErr(op, syscall.EIO, "chunk index answered no record for item %d", k)
		}
	}
	return out, nil
}
