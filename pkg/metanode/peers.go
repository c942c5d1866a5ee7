package metanode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// peers is how a meta node reaches other meta partitions: a copy of the
// cluster map (read from the masters, at most mapMaxAge old) for their
// replicas and inode ranges, and a client that finds their leaders. The
// collector sends chunk drops with it, the namespace replica fetches
// missing entries with it.
type peers struct {
	h    *Host
	pool *redirect.Pool
	meta *metaclient.Client

	mu    sync.Mutex
	cmap  *pb.ClusterMap // last map read
	mapAt time.Time
	// latest is the newest map read, which forgetMap keeps, and
	// latestAt when its read began: data partitions are checked against
	// it (datakeys.go). reading is closed when the read of mapSince under
	// way ends (nil: none); readAt is when its last read began.
	latest   *pb.ClusterMap
	latestAt time.Time
	reading  chan struct{}
	readAt   time.Time
	// sets are the data partitions of each volume in the map setsOf.
	setsOf *pb.ClusterMap
	sets   map[uint64]map[uint64]bool
}

func newPeers(h *Host) *peers {
	p := &peers{h: h, pool: redirect.NewPool(h.env.TLS, h.env.Network)}
	p.meta = metaclient.New(p.pool, p.resolve)
	return p
}

func (p *peers) close() { p.pool.Close() }

// fetchMap reads the cluster map from Options.ClusterMap or the masters.
func (p *peers) fetchMap(ctx context.Context) (*pb.ClusterMap, error) {
	if f := p.h.opts.ClusterMap; f != nil {
		return f(ctx)
	}
	if p.h.env.Masters == nil {
		return nil, errors.New("no master client to read the cluster map")
	}
	var resp *pb.GetMapResponse
	err := p.h.env.Masters.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetMap(ctx, &pb.GetMapRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get cluster map: %w", err)
	}
	return resp.GetMap(), nil
}

// clusterMap returns the map read at most mapMaxAge ago, reading it if
// needed.
func (p *peers) clusterMap(ctx context.Context) (*pb.ClusterMap, error) {
	p.mu.Lock()
	m, at := p.cmap, p.mapAt
	p.mu.Unlock()
	if m != nil && time.Since(at) < mapMaxAge {
		return m, nil
	}
	at = time.Now()
	m, err := p.fetchMap(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.cmap, p.mapAt = m, time.Now()
	p.noteLatest(m, at)
	p.mu.Unlock()
	return m, nil
}

// noteLatest records m, whose read began at at, as the latest map unless
// a read that began later is recorded. Called with p.mu held.
func (p *peers) noteLatest(m *pb.ClusterMap, at time.Time) {
	if p.latest == nil || at.After(p.latestAt) {
		p.latest, p.latestAt = m, at
	}
}

// forgetMap makes the next clusterMap read the map again (a moved leader,
// a partition the copy does not know).
func (p *peers) forgetMap() {
	p.mu.Lock()
	p.cmap = nil
	p.mu.Unlock()
}

// resolve finds a meta node's address: the node's own view first (the
// peers of its partitions), then the cluster map (any node), for the
// leaders of other volumes' and partitions' shards.
func (p *peers) resolve(id uint64) (string, bool) {
	if r := p.h.env.Resolve; r != nil {
		if a, ok := r(id); ok {
			return a, true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.cmap.GetNodes()[id]; n != nil && n.GetAddr() != "" {
		return n.GetAddr(), true
	}
	return "", false
}

// partition returns meta partition id from the map, reading the map again
// once if the copy does not have it.
func (p *peers) partition(ctx context.Context, id uint64) (*pb.Partition, error) {
	for fresh := false; ; fresh = true {
		m, err := p.clusterMap(ctx)
		if err != nil {
			return nil, err
		}
		if part := m.GetPartitions()[id]; part != nil {
			return part, nil
		}
		if fresh {
			return nil, fmt.Errorf("meta partition %d is not in the cluster map (epoch %d)", id, m.GetEpoch())
		}
		p.forgetMap()
	}
}

// home returns the meta partition of volume whose inode range holds ino,
// reading the map again once if the copy has none.
func (p *peers) home(ctx context.Context, volume, ino uint64) (*pb.Partition, error) {
	for fresh := false; ; fresh = true {
		m, err := p.clusterMap(ctx)
		if err != nil {
			return nil, err
		}
		if part := homeIn(m, volume, ino); part != nil {
			return part, nil
		}
		if fresh {
			return nil, fmt.Errorf("no meta partition of volume %d holds inode %d (map epoch %d)", volume, ino, m.GetEpoch())
		}
		p.forgetMap()
	}
}

// homeIn finds the partition of volume whose range holds ino in m: the
// one starting last at or below ino, as the client's view decides. A
// volume has a handful of partitions, so a scan beats sorting per call.
func homeIn(m *pb.ClusterMap, volume, ino uint64) *pb.Partition {
	var best *pb.Partition
	for _, id := range m.GetVolumes()[volume].GetMetaPartitions() {
		part := m.GetPartitions()[id]
		if part != nil && part.GetInodeStart() <= ino && (best == nil || part.GetInodeStart() > best.GetInodeStart()) {
			best = part
		}
	}
	if ino == 0 || best == nil {
		return nil
	}
	if end := best.GetInodeEnd(); end != 0 && ino > end {
		return nil
	}
	return best
}

// route returns the partition the map's live routing sends (parent, name)
// of volume to, for a partition that has not yet received its own copy of
// the routing (SetRouting).
func (p *peers) route(ctx context.Context, volume, parent uint64, name string) (uint64, error) {
	m, err := p.clusterMap(ctx)
	if err != nil {
		return 0, err
	}
	v := m.GetVolumes()[volume]
	if v == nil {
		return 0, fmt.Errorf("volume %d is not in the cluster map (epoch %d)", volume, m.GetEpoch())
	}
	t, err := clustermap.RoutingTable(v.GetSlotOwners(), v.GetExceptions())
	if err != nil {
		return 0, fmt.Errorf("volume %d routing: %w", volume, err)
	}
	owner, _ := t.Route(parent, name)
	return owner, nil
}
