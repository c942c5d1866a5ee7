package master

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/replicaset"
)

// Recovery progress: what the data replicas that are catching up still
// lack, and how fast they copy. Both come from the heartbeat reports (each
// replica's stored bytes), so they cost no extra request.

// recoveryOf lists the data replicas of m that are catching up (stale in
// the write chain, or joining by a move) whose node reported its live
// bytes (used, by node and partition: PartitionReport.logical_bytes), with
// the bytes the chain's head holds beyond them. The head holds every acknowledged byte, so that is
// what alignment still has to copy (overwritten blocks aside: they change
// no size).
func recoveryOf(m *pb.ClusterMap, used map[[2]uint64]uint64) []*pb.ReplicaRecovery {
	var out []*pb.ReplicaRecovery
	for _, p := range m.Partitions {
		if p.Kind != pb.PartitionKind_PARTITION_KIND_DATA {
			continue
		}
		catching := slices.Clone(p.Stale)
		if p.Joining != 0 && !slices.Contains(catching, p.Joining) {
			catching = append(catching, p.Joining)
		}
		head := replicaset.Head(p)
		headUsed, ok := used[[2]uint64{head, p.Id}]
		if head == 0 || !ok {
			continue
		}
		for _, r := range catching {
			if r == head || slices.Contains(p.Down, r) {
				continue
			}
			have, ok := used[[2]uint64{r, p.Id}]
			if !ok {
				have = 0 // a joining replica not created yet lacks everything
			}
			out = append(out, &pb.ReplicaRecovery{PartitionId: p.Id, NodeId: r, BytesLeft: headUsed - min(have, headUsed)})
		}
	}
	slices.SortFunc(out, func(a, b *pb.ReplicaRecovery) int {
		return cmp.Or(cmp.Compare(a.PartitionId, b.PartitionId), cmp.Compare(a.NodeId, b.NodeId))
	})
	return out
}

// rateWindow is how far back recoveryRate looks.
const rateWindow = 10 * time.Second

// recoveryRate estimates how fast recovering replicas gain bytes: the sum
// over the replicas catching up of what each gained since the oldest
// sample of the last rateWindow that has it, per second.
// The leader samples every second with its other duties; a replica that
// finished drops out of the sum. It also keeps the latest sample's
// result for status and metrics.
type recoveryRate struct {
	mu      sync.Mutex
	samples []rateSample
	last    []*pb.ReplicaRecovery
	perSec  float64
}

type rateSample struct {
	at   time.Time
	have map[[2]uint64]uint64 // (node, partition) -> stored bytes
}

// observe records the stored bytes of the replicas catching up at now and
// returns the bytes per second they gained over the window (0 while
// unknown).
func (r *recoveryRate) observe(now time.Time, rec []*pb.ReplicaRecovery, used map[[2]uint64]uint64) float64 {
	cur := rateSample{at: now, have: map[[2]uint64]uint64{}}
	for _, x := range rec {
		k := [2]uint64{x.NodeId, x.PartitionId}
		cur.have[k] = used[k]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = rec
	r.samples = append(r.samples, cur)
	i := 0
	for i < len(r.samples)-1 && now.Sub(r.samples[i+1].at) >= rateWindow {
		i++
	}
	r.samples = r.samples[i:]
	// Each replica counts from the oldest sample that has it: one whose
	// catching up began inside the window counts from its start.
	r.perSec = 0
	for k, have := range cur.have {
		for _, old := range r.samples[:len(r.samples)-1] {
			was, ok := old.have[k]
			if !ok {
				continue
			}
			if dt := now.Sub(old.at).Seconds(); dt >= 1 && have > was {
				r.perSec += float64(have-was) / dt
			}
			break
		}
	}
	return r.perSec
}

// latest returns the last sample's replicas catching up and rate.
func (r *recoveryRate) latest() ([]*pb.ReplicaRecovery, float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.perSec
}

// reset forgets every sample (this master stopped leading).
func (r *recoveryRate) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples, r.last, r.perSec = nil, nil, 0
}

// sampleProgress records the replicas catching up and the rate they copy
// at (leader duty, every second).
func (s *Server) sampleProgress() {
	used := map[[2]uint64]uint64{}
	for k, r := range s.freshReports() {
		used[k] = r.LogicalBytes
	}
	var rec []*pb.ReplicaRecovery
	s.fsm.read(func(st *clustermap.State) { rec = recoveryOf(st.Map(), used) })
	s.rate.observe(time.Now(), rec, used)
}
