package metanode

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

// Data references: the extent keys of AppendExtents, the chunks of
// SpliceChunks and the locations of ChunkRefs registrations are the only
// operations a client sends that store a data partition id (ChunkRefs'
// source_partition, a meta partition id, is refused to clients in
// accessTxn; SetRouting and ImportDentries, which store meta partition
// ids, are too). What they store is later read by everyone: the collector
// frees it on the data nodes when the file goes, grants name it, other
// writers share a chunk index entry's location. So a client's keys must
// name a data partition of the partition's own volume, with fields a data
// node can serve.
//
// The check is made here, in the request path before the Raft proposal,
// and never in the partition's apply: it depends on this node's copy of
// the cluster map, and replicas (or a replica replaying its log later)
// holding different maps would apply the same entry differently and
// diverge. The apply keeps its own map-free checks (size 0, overflow),
// which every replica makes alike.
//
// Only callers with a client certificate are checked, as accessTxn does:
// nodes and admins are trusted, and a cluster without TLS cannot tell a
// client from them. The collector does not rely on this check: keys
// stored before it, or by trusted callers, that it cannot free are
// dropped and reported there (collector.go).

// minMapRefetch spaces the map reads that unknown partition ids cause,
// so that a client sending made-up ids costs the masters at most one map
// read per meta node per interval (and waits for it itself).
const minMapRefetch = time.Second

// extentKeyProblem says what makes k impossible whatever the map says
// ("" for nothing): no partition, no bytes, or a range past what a file
// (MaxFileSize, st_size is signed) or the data path (int64 extent
// offsets) can address.
func extentKeyProblem(k *metapb.ExtentKey) string {
	size := k.GetSize()
	switch {
	case k.GetPartitionId() == 0:
		return "names no data partition (0)"
	case size == 0:
		return "is empty"
	case size > math.MaxInt64 || k.GetFileOffset() > math.MaxInt64-size:
		return fmt.Sprintf("file range %d+%d ends past %d", k.GetFileOffset(), size, int64(math.MaxInt64))
	case k.GetExtentOffset() > math.MaxInt64-size:
		return fmt.Sprintf("extent range %d+%d ends past %d", k.GetExtentOffset(), size, int64(math.MaxInt64))
	}
	return ""
}

// chunkProblem is extentKeyProblem for a chunk stored with its location:
// a chunk is 1 to dataproto.MaxChunk bytes (what one frame carries).
func chunkProblem(c *metapb.Chunk) string {
	size := uint64(c.GetSize())
	switch {
	case c.GetPartitionId() == 0:
		return "names no data partition (0)"
	case size == 0:
		return "is empty"
	case size > dataproto.MaxChunk:
		return fmt.Sprintf("has %d bytes, more than a chunk's %d", size, dataproto.MaxChunk)
	case c.GetExtentOffset() > math.MaxInt64-size:
		return fmt.Sprintf("extent range %d+%d ends past %d", c.GetExtentOffset(), size, int64(math.MaxInt64))
	}
	return ""
}

// dataRef is one data partition a Txn would store, and where.
type dataRef struct {
	pid   uint64
	where string // "op 2 extent key 5"
}

// txnDataRefs returns the data partitions txn's ops would store, the
// first place each is named, or the refusal (EINVAL) of the first
// impossible key or chunk. ChunkRefs items store a location only when
// they register one (delta > 0, partition_id set); a lookup or a
// release names none.
func txnDataRefs(txn *metapb.Txn) ([]dataRef, *refusal) {
	var refs []dataRef
	seen := map[uint64]bool{}
	for ref := range metapb.DataRefs(txn) {
		why := ""
		if ref.Key != nil {
			why = extentKeyProblem(ref.Key)
		} else {
			why = chunkProblem(ref.Chunk)
		}
		if why != "" {
			return nil, refuse(metapb.EINVAL, "%s %s", ref.Where(), why)
		}
		if pid, _, _, _ := ref.Range(); !seen[pid] {
			seen[pid] = true
			refs = append(refs, dataRef{pid: pid, where: ref.Where()})
		}
	}
	return refs, nil
}

// checkDataRefs refuses a client's Txn on p that would store an
// impossible extent key or chunk (EINVAL), or one naming a data partition
// that is not one of p's volume's: EACCES for a data partition of another
// volume (as access refuses another volume's meta partition), EINVAL for
// an id that names no data partition at all. A partition the node's copy
// of the map does not have is looked up again in a map read after the
// request arrived (minMapRefetch apart), so a partition the master just
// added, which the client may already write to, is never refused. The
// error is for a map that cannot be read (UNAVAILABLE: the client
// retries). Callers other than client certificates pass.
func (s *service) checkDataRefs(ctx context.Context, p *partition, txn *metapb.Txn) (*refusal, error) {
	if daemon.PeerKind(ctx) != pki.KindClient {
		return nil, nil
	}
	arrived := time.Now()
	refs, r := txnDataRefs(txn)
	if r != nil || len(refs) == 0 {
		return r, nil
	}
	for _, ref := range refs {
		in, m, err := s.h.peers.dataPartitionOf(ctx, p.volume, ref.pid, arrived)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "meta partition %d: check data partition %d of %s: %v", p.id, ref.pid, ref.where, err)
		}
		if !in {
			return foreignPartition(m, p.volume, ref), nil
		}
	}
	return nil, nil
}

// foreignPartition is the refusal of ref, which m does not list among
// volume's data partitions.
func foreignPartition(m *pb.ClusterMap, volume uint64, ref dataRef) *refusal {
	switch dp := m.GetPartitions()[ref.pid]; {
	case dp == nil:
		return refuse(metapb.EINVAL, "%s names data partition %d, which the cluster map (epoch %d) does not have", ref.where, ref.pid, m.GetEpoch())
	case dp.GetKind() != pb.PartitionKind_PARTITION_KIND_DATA:
		return refuse(metapb.EINVAL, "%s names partition %d, which is not a data partition", ref.where, ref.pid)
	default:
		return refuse(metapb.EACCES, "%s names data partition %d of volume %d, not of volume %d of this meta partition", ref.where, ref.pid, dp.GetVolumeId(), volume)
	}
}

// dataPartitionOf reports whether pid is one of volume's data partitions,
// and returns the map it decided by: the node's copy if it has partition
// pid at all (a partition enters the map with its volume and kind, which
// never change, and ids are never reused), else a map read at or after
// since.
func (p *peers) dataPartitionOf(ctx context.Context, volume, pid uint64, since time.Time) (bool, *pb.ClusterMap, error) {
	p.mu.Lock()
	m := p.latest
	known := m != nil && m.GetPartitions()[pid] != nil
	in := known && p.inVolume(m, volume, pid)
	p.mu.Unlock()
	if known {
		return in, m, nil
	}
	m, err := p.mapSince(ctx, since)
	if err != nil {
		return false, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inVolume(m, volume, pid), m, nil
}

// inVolume reports whether m lists pid among volume's data partitions,
// from a set per volume built once per map. Called with p.mu held.
func (p *peers) inVolume(m *pb.ClusterMap, volume, pid uint64) bool {
	if p.setsOf != m {
		p.setsOf, p.sets = m, map[uint64]map[uint64]bool{}
	}
	set, ok := p.sets[volume]
	if !ok {
		ids := m.GetVolumes()[volume].GetDataPartitions()
		set = make(map[uint64]bool, len(ids))
		for _, id := range ids {
			set[id] = true
		}
		p.sets[volume] = set
	}
	return set[pid]
}

// mapSince returns a copy of the map whose read began at or after since:
// the latest copy if it is that recent, else one read now. One read runs
// at a time, and reads begin at least minMapRefetch apart; a caller that
// finds a read under way waits for it and checks again (it may have
// begun before since).
func (p *peers) mapSince(ctx context.Context, since time.Time) (*pb.ClusterMap, error) {
	for {
		p.mu.Lock()
		if p.latest != nil && !p.latestAt.Before(since) {
			m := p.latest
			p.mu.Unlock()
			return m, nil
		}
		if wait := p.reading; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		p.reading = done
		last := p.readAt
		p.mu.Unlock()
		m, at, err := p.readSpaced(ctx, last)
		p.mu.Lock()
		p.reading = nil
		if !at.IsZero() {
			p.readAt = at
		}
		if err == nil {
			p.noteLatest(m, at)
		}
		p.mu.Unlock()
		close(done)
		return m, err
	}
}

// readSpaced reads the map at least minMapRefetch after last, and
// returns it with the time its read began.
func (p *peers) readSpaced(ctx context.Context, last time.Time) (*pb.ClusterMap, time.Time, error) {
	if wait := minMapRefetch - time.Since(last); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, time.Time{}, ctx.Err()
		}
	}
	at := time.Now()
	m, err := p.fetchMap(ctx)
	return m, at, err
}
