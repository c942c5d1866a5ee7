package fsck

import (
	"context"
	"crypto/tls"
	"fmt"
	"syscall"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/network"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Remote is the Scanner and Applier of a live cluster: it calls partition
// leaders through metaclient (following redirects) with the node addresses
// and replicas of one cluster map. Safe for concurrent use.
type Remote struct {
	pool    *redirect.Pool
	meta    *metaclient.Client
	parts   map[uint64]*pb.Partition
	attempt time.Duration
}

// NewRemote returns a Remote for the partitions and nodes of m, connecting
// on n (nil: the host's TCP stack), over TLS with tlsConf unless it is nil. Each call is bounded by attempt
// (0: 10 s) within the caller's context. Close releases its connections.
func NewRemote(m *pb.ClusterMap, attempt time.Duration, tlsConf *tls.Config, n network.Network) *Remote {
	if attempt <= 0 {
		attempt = 10 * time.Second
	}
	nodes := map[uint64]string{}
	for id, n := range m.GetNodes() {
		nodes[id] = n.GetAddr()
	}
	r := &Remote{pool: redirect.NewPool(tlsConf, n), parts: m.GetPartitions(), attempt: attempt}
	r.meta = metaclient.New(r.pool, func(node uint64) (string, bool) {
		a, ok := nodes[node]
		return a, ok && a != ""
	})
	return r
}

// Close closes the connections.
func (r *Remote) Close() { r.pool.Close() }

func (r *Remote) partition(id uint64) (*pb.Partition, error) {
	p, ok := r.parts[id]
	if !ok {
		return nil, fmt.Errorf("partition %d is not in the cluster map", id)
	}
	return p, nil
}

func (r *Remote) scan(ctx context.Context, req *metapb.ScanRequest) (*metapb.ScanResponse, error) {
	p, err := r.partition(req.PartitionId)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.attempt)
	defer cancel()
	return r.meta.Scan(ctx, p, req)
}

// ScanInodes implements Scanner with the Scan RPC.
func (r *Remote) ScanInodes(ctx context.Context, part, afterIno uint64, limit uint32) ([]*metapb.Inode, bool, error) {
	resp, err := r.scan(ctx, &metapb.ScanRequest{PartitionId: part, Kind: metapb.ScanKind_SCAN_KIND_INODES, AfterIno: afterIno, Limit: limit})
	if err != nil {
		return nil, false, err
	}
	return resp.GetInodes(), resp.GetMore(), nil
}

// ScanDentries implements Scanner with the Scan RPC.
func (r *Remote) ScanDentries(ctx context.Context, part, afterParent uint64, afterName []byte, limit uint32) ([]*metapb.Dentry, bool, error) {
	resp, err := r.scan(ctx, &metapb.ScanRequest{PartitionId: part, Kind: metapb.ScanKind_SCAN_KIND_DENTRIES,
		AfterParent: afterParent, AfterName: afterName, Limit: limit})
	if err != nil {
		return nil, false, err
	}
	return resp.GetDentries(), resp.GetMore(), nil
}

// Txn implements Applier.
func (r *Remote) Txn(ctx context.Context, part uint64, txn *metapb.Txn) (*metapb.TxnResult, error) {
	p, err := r.partition(part)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.attempt)
	defer cancel()
	return r.meta.Txn(ctx, p, txn)
}

// GetInode implements Applier.
func (r *Remote) GetInode(ctx context.Context, part, ino uint64) (*metapb.Inode, error) {
	p, err := r.partition(part)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.attempt)
	defer cancel()
	resp, err := r.meta.GetInode(ctx, p, ino)
	if err != nil {
		return nil, err
	}
	switch e := syscall.Errno(resp.GetErrno()); e {
	case 0:
		return resp.GetInode(), nil
	case syscall.ENOENT:
		return nil, fmt.Errorf("partition %d: inode %d: %w", part, ino, ErrNoInode)
	default:
		return nil, fmt.Errorf("partition %d: inode %d: %w", part, ino, e)
	}
}

// ScanChunks reads one page of a shard's chunk index entries, after the
// fingerprint after (nil: from the start).
func (r *Remote) ScanChunks(ctx context.Context, part uint64, after []byte, limit uint32) ([]*metapb.ChunkRecord, bool, error) {
	resp, err := r.scan(ctx, &metapb.ScanRequest{PartitionId: part, Kind: metapb.ScanKind_SCAN_KIND_CHUNKS, AfterFingerprint: after, Limit: limit})
	if err != nil {
		return nil, false, err
	}
	return resp.GetChunks(), resp.GetMore(), nil
}

// ScanLayouts is ScanInodes with each inode's extents and chunk layout.
func (r *Remote) ScanLayouts(ctx context.Context, part, afterIno uint64, limit uint32) ([]*metapb.Inode, bool, error) {
	resp, err := r.scan(ctx, &metapb.ScanRequest{PartitionId: part, Kind: metapb.ScanKind_SCAN_KIND_INODES, AfterIno: afterIno, Limit: limit, WithExtents: true})
	if err != nil {
		return nil, false, err
	}
	return resp.GetInodes(), resp.GetMore(), nil
}

// PartitionStats reads a partition's statistics from its leader.
func (r *Remote) PartitionStats(ctx context.Context, part uint64) (*metapb.PartitionStatsResponse, error) {
	p, err := r.partition(part)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.attempt)
	defer cancel()
	return r.meta.Stats(ctx, p, 0)
}

// PendingChunkDrops is how many chunk drops wait on part's free list.
func (r *Remote) PendingChunkDrops(ctx context.Context, part uint64) (uint64, error) {
	st, err := r.PartitionStats(ctx, part)
	if err != nil {
		return 0, err
	}
	return st.GetPendingChunkDrops(), nil
}
