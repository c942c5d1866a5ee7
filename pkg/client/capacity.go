package client

import (
	"context"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// Space accounting. The master knows what the volume's data partitions store
// from their heartbeats (VolumeResponse.used_bytes); the SDK reads it at most
// every usageMaxAge and adds what it wrote itself since, so that a writer
// approaching the volume's capacity gets ENOSPC without a master round trip
// per write. The limit is soft, as in CubeFS and JuiceFS quotas: writes of
// other clients reach this one with the heartbeat delay, so a volume can
// overshoot its capacity by what all clients write within about one
// usageMaxAge + heartbeat interval. To err on the full side, this client's
// writes of the last usageWindow stay counted after a refresh (they may not
// be in the reports yet).
const (
	usageMaxAge = 2 * time.Second
	usageWindow = 4 * time.Second
	usageRPC    = 3 * time.Second
)

// usage is the SDK's view of the volume's space. Safe for concurrent use.
type usage struct {
	mu        sync.Mutex
	resp      *pb.VolumeResponse // latest answer; nil before the first
	at        time.Time          // when resp was asked for
	polling   bool
	recent    [8]uint64 // bytes written per usageWindow/4 bucket, a ring
	recentAt  [8]int64  // the bucket's index (unix time / bucket width)
	sinceResp uint64    // bytes written since resp was asked for
}

const usageBucket = usageWindow / 4

// wrote records n new bytes written at now.
func (u *usage) wrote(now time.Time, n uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	b := now.UnixNano() / int64(usageBucket)
	i := b % int64(len(u.recent))
	if u.recentAt[i] != b {
		u.recentAt[i], u.recent[i] = b, 0
	}
	u.recent[i] += n
	u.sinceResp += n
}

// recentBytes sums the buckets within usageWindow of now. Caller holds mu.
func (u *usage) recentBytes(now time.Time) uint64 {
	b := now.UnixNano() / int64(usageBucket)
	var sum uint64
	for i := range u.recent {
		if b-u.recentAt[i] <= int64(usageWindow/usageBucket) {
			sum += u.recent[i]
		}
	}
	return sum
}

// set stores a fresh answer asked for at asked.
func (u *usage) set(resp *pb.VolumeResponse, asked, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.resp, u.at = resp, asked
	u.sinceResp = u.recentBytes(now)
}

// fetchUsage asks the master for the volume's usage.
func (v *Volume) fetchUsage(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, usageRPC)
	defer cancel()
	asked := time.Now()
	var resp *pb.VolumeResponse
	err := v.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetVolume(ctx, &pb.VolumeRequest{Name: v.name}, o...)
		return err
	})
	if err != nil {
		return err
	}
	v.space.set(resp, asked, time.Now())
	return nil
}

// refreshUsageAsync starts a usage read when the last one is older than
// usageMaxAge and none is running; writes never wait for it.
func (v *Volume) refreshUsageAsync() {
	u := &v.space
	u.mu.Lock()
	if u.polling || time.Since(u.at) < usageMaxAge {
		u.mu.Unlock()
		return
	}
	u.polling = true
	u.mu.Unlock()
	go func() {
		// Not tracked by Close: it ends within usageRPC on its own.
		_ = v.fetchUsage(context.Background())
		u.mu.Lock()
		u.polling = false
		if u.resp == nil {
			// No answer (the master is away): do not ask again at once.
			u.at = time.Now()
		}
		u.mu.Unlock()
	}()
}

// reserve fails with ENOSPC when n more bytes would take the volume past its
// capacity by the latest known usage, and otherwise counts them. Volumes
// without a capacity are limited only by the data nodes' disks (ENOSPC from
// the data path).
func (v *Volume) reserve(op string, n uint64) error {
	capacity := v.current().vol.GetCapacityBytes()
	if capacity == 0 || n == 0 {
		return nil
	}
	v.refreshUsageAsync()
	u := &v.space
	u.mu.Lock()
	if u.resp != nil && u.resp.GetUsedKnown() && u.resp.GetUsedBytes()+u.sinceResp+n > capacity {
		used := u.resp.GetUsedBytes() + u.sinceResp
		u.mu.Unlock()
		return errnoErr(op, syscall.ENOSPC, "volume %s holds %d of its %d bytes", v.name, used, capacity)
	}
	u.mu.Unlock()
	v.space.wrote(time.Now(), n)
	return nil
}

// spaceFigures returns total and free bytes for statfs: the volume's
// capacity and what is left of it (no more than the data nodes have free),
// or for an unlimited volume the data nodes' space divided by the replica
// count.
func (v *Volume) spaceFigures(ctx context.Context) (total, free uint64, err error) {
	u := &v.space
	u.mu.Lock()
	stale := u.resp == nil || time.Since(u.at) > time.Second
	u.mu.Unlock()
	if stale {
		if err := v.fetchUsage(ctx); err != nil {
			return 0, 0, transportErr("statfs", err)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.resp
	replicas := uint64(max(r.GetVolume().GetReplicas(), 1))
	rawTotal, rawFree := r.GetDataCapacityBytes()/replicas, r.GetDataFreeBytes()/replicas
	used := r.GetUsedBytes() + u.sinceResp
	if capacity := r.GetVolume().GetCapacityBytes(); capacity > 0 {
		left := capacity - min(used, capacity)
		return capacity, min(left, rawFree), nil
	}
	return rawTotal, rawFree, nil
}
