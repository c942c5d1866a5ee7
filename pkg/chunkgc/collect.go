package chunkgc

import (
	"context"
	"fmt"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Source reads what a recount needs from a live volume; fsck.Remote
// implements it with the Scan, PartitionStats and Txn RPCs.
type Source interface {
	// ScanChunks pages through a shard's index entries in fingerprint order.
	ScanChunks(ctx context.Context, part uint64, after []byte, limit uint32) (recs []*metapb.ChunkRecord, more bool, err error)
	// ScanLayouts pages through a partition's inodes with their layouts.
	ScanLayouts(ctx context.Context, part, afterIno uint64, limit uint32) (inodes []*metapb.Inode, more bool, err error)
	// PendingChunkDrops is how many chunk drops wait on a partition's free list.
	PendingChunkDrops(ctx context.Context, part uint64) (uint64, error)
	// Txn runs a transaction on a partition's leader.
	Txn(ctx context.Context, part uint64, txn *metapb.Txn) (*metapb.TxnResult, error)
}

// DefaultQuiet is how long an entry must have been unchanged before a
// recount lowers it: far longer than a writer holds references before its
// layout commits (an operation's timeout is 30 s).
const DefaultQuiet = 10 * time.Minute

// PageSize is the number of records asked for per page.
const PageSize = 1000

// Progress is told how many records of each kind were read so far.
type Progress func(kind string, records int)

// Collect reads a volume's chunk index, then every layout, then the
// pending drops, in the order Recount's safety argument needs.
func Collect(ctx context.Context, src Source, vol *pb.Volume, quiet time.Duration, progress Progress) (Input, error) {
	if progress == nil {
		progress = func(string, int) {}
	}
	in := Input{LayoutRefs: map[string]uint64{}, LayoutSizes: map[string]uint32{}, QuietNs: int64(quiet)}
	in.ReadAtNs = time.Now().UnixNano()
	for _, part := range vol.GetChunkIndexPartitions() {
		var after []byte
		for {
			recs, more, err := src.ScanChunks(ctx, part, after, PageSize)
			if err != nil {
				return Input{}, fmt.Errorf("scan chunk index of partition %d: %w", part, err)
			}
			for _, r := range recs {
				in.Entries = append(in.Entries, Entry{Partition: part, Record: r})
			}
			progress("index entries", len(in.Entries))
			if !more || len(recs) == 0 {
				break
			}
			after = recs[len(recs)-1].GetChunk().GetFingerprint()
		}
	}
	inodes := 0
	for _, part := range vol.GetMetaPartitions() {
		var after uint64
		for {
			page, more, err := src.ScanLayouts(ctx, part, after, PageSize)
			if err != nil {
				return Input{}, fmt.Errorf("scan layouts of partition %d: %w", part, err)
			}
			for _, ino := range page {
				for _, c := range ino.GetChunks() {
					fp := string(c.GetFingerprint())
					in.LayoutRefs[fp]++
					in.LayoutSizes[fp] = c.GetSize()
				}
			}
			inodes += len(page)
			progress("inodes", inodes)
			if !more || len(page) == 0 {
				break
			}
			after = page[len(page)-1].GetIno()
		}
	}
	for _, part := range vol.GetMetaPartitions() {
		n, err := src.PendingChunkDrops(ctx, part)
		if err != nil {
			return Input{}, fmt.Errorf("stats of partition %d: %w", part, err)
		}
		if n > 0 {
			in.DropsPending = true
		}
	}
	return in, nil
}

// Apply sends the report's fixes (ChunkFix per shard) and returns how many
// entries were changed; an entry that changed since the scan is left alone
// by the shard and not counted.
func Apply(ctx context.Context, src Source, r *Report, requestID func() uint64) (int, error) {
	changed := 0
	for part, recs := range r.Fixes() {
		for len(recs) > 0 {
			n := min(len(recs), 4096)
			txn := &metapb.Txn{RequestId: requestID(), Ops: []*metapb.Op{{Op: &metapb.Op_ChunkFix{ChunkFix: &metapb.ChunkFix{Entries: recs[:n]}}}}}
			res, err := src.Txn(ctx, part, txn)
			if err != nil {
				return changed, fmt.Errorf("fix references on partition %d: %w", part, err)
			}
			if res.GetErrno() != 0 {
				return changed, fmt.Errorf("fix references on partition %d: errno %d: %s", part, res.GetErrno(), res.GetMessage())
			}
			for _, op := range res.GetResults() {
				changed += len(op.GetChunks())
			}
			recs = recs[n:]
		}
	}
	return changed, nil
}
