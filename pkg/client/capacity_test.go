package client

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// Figures the fake master reports for every volume.
const (
	fakeUsed    = 1 << 30
	fakeDataCap = 30 << 30
	fakeDataFre = 12 << 30
)

// GetVolume answers with the fake map's first volume and fixed usage.
func (f *fakeCluster) GetVolume(_ context.Context, req *pb.VolumeRequest) (*pb.VolumeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, vol := range f.m.Volumes {
		if vol.Name == req.Name {
			return &pb.VolumeResponse{
				Volume: proto.Clone(vol).(*pb.Volume), Epoch: f.m.Epoch,
				UsedBytes: fakeUsed, UsedKnown: true, DataCapacityBytes: fakeDataCap, DataFreeBytes: fakeDataFre,
			}, nil
		}
	}
	return nil, errors.New("no such volume")
}

func TestUsageWindow(t *testing.T) {
	var u usage
	t0 := time.Unix(1000, 0)
	u.wrote(t0, 100)
	u.wrote(t0.Add(usageBucket), 10)
	if got := u.recentBytes(t0.Add(usageBucket)); got != 110 {
		t.Fatalf("recent %d, want 110", got)
	}
	// A refresh keeps this client's recent writes counted: the heartbeats
	// the master summed may not include them yet.
	u.set(&pb.VolumeResponse{UsedBytes: 5000, UsedKnown: true}, t0, t0.Add(usageBucket))
	if u.sinceResp != 110 {
		t.Fatalf("since the refresh: %d, want 110", u.sinceResp)
	}
	// Writes older than the window no longer count at the next refresh.
	late := t0.Add(usageWindow + 2*usageBucket)
	u.wrote(late, 7)
	u.set(&pb.VolumeResponse{UsedBytes: 5200, UsedKnown: true}, late, late)
	if u.sinceResp != 7 {
		t.Fatalf("after the window: %d, want 7", u.sinceResp)
	}
}

func TestReserveAndStatFS(t *testing.T) {
	f, v := startFake(t)
	ctx := context.Background()

	// Unlimited volume: the data nodes' space divided by the replica count.
	st, err := v.StatFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replicas := uint64(max(v.current().vol.GetReplicas(), 1))
	if st.Blocks != fakeDataCap/replicas/statfsBlock || st.BlocksFree != fakeDataFre/replicas/statfsBlock {
		t.Fatalf("unlimited volume: %d blocks, %d free; want %d and %d", st.Blocks, st.BlocksFree, fakeDataCap/replicas/statfsBlock, fakeDataFre/replicas/statfsBlock)
	}
	if err := v.reserve("write", 1<<40); err != nil {
		t.Fatalf("unlimited volume refused a write: %v", err)
	}

	// A 2 GiB volume with 1 GiB used: statfs shows 1 GiB free, and a write
	// past what is left fails with ENOSPC while smaller ones pass.
	f.mu.Lock()
	for _, vol := range f.m.Volumes {
		vol.CapacityBytes = 2 << 30
	}
	f.m.Epoch++
	f.mu.Unlock()
	v.readMap(ctx, true)
	if c := v.current().vol.GetCapacityBytes(); c != 2<<30 {
		t.Fatalf("the view did not pick up the capacity: %d", c)
	}
	v.space.mu.Lock()
	v.space.resp = nil
	v.space.mu.Unlock()
	if st, err = v.StatFS(ctx); err != nil {
		t.Fatal(err)
	}
	if st.Blocks != (2<<30)/statfsBlock || st.BlocksFree != (1<<30)/statfsBlock {
		t.Fatalf("2 GiB volume: %d blocks, %d free", st.Blocks, st.BlocksFree)
	}
	if err := v.reserve("write", 512<<20); err != nil {
		t.Fatalf("a write that fits: %v", err)
	}
	err = v.reserve("write", 600<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write past the capacity: %v, want ENOSPC", err)
	}
	if err := v.reserve("write", 100<<20); err != nil {
		t.Fatalf("a write that still fits: %v", err)
	}
}
