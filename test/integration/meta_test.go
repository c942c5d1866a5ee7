package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/hybridindex"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/masterclient"
	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// volumeView is what a client needs to route metadata requests.
type volumeView struct {
	m     *pb.ClusterMap
	vol   *pb.Volume
	table *hybridindex.Table
	meta  *metaclient.Client
}

func openVolume(t *testing.T, dir, name string) *volumeView {
	t.Helper()
	l, err := localcluster.LoadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := masterclient.New(l.MasterAddrs(), adminTLS(t, dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp *pb.GetMapResponse
	err = mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetMap(ctx, &pb.GetMapRequest{}, o...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	v := &volumeView{m: resp.Map}
	for _, vol := range resp.Map.Volumes {
		if vol.Name == name {
			v.vol = vol
		}
	}
	if v.vol == nil {
		t.Fatalf("no volume %q", name)
	}
	v.table = &hybridindex.Table{Slots: v.vol.SlotOwners}
	pool := redirect.NewPool(adminTLS(t, dir), nil)
	t.Cleanup(pool.Close)
	v.meta = metaclient.New(pool, func(id uint64) (string, bool) {
		n, ok := v.m.Nodes[id]
		if !ok {
			return "", false
		}
		return n.Addr, true
	})
	return v
}

func (v *volumeView) partitionOf(parent uint64, name string) *pb.Partition {
	mp, _ := v.table.Route(parent, name)
	return v.m.Partitions[mp]
}

// create makes a regular file (parent, name) on the partition that owns it.
func (v *volumeView) create(ctx context.Context, parent uint64, name string) (*metapb.TxnResult, error) {
	return v.meta.Txn(ctx, v.partitionOf(parent, name), &metapb.Txn{Ops: []*metapb.Op{
		{Op: &metapb.Op_CreateInode{CreateInode: &metapb.CreateInode{Type: metapb.FileType_FILE_TYPE_REGULAR, Mode: 0o644}}},
		{Op: &metapb.Op_CreateDentry{CreateDentry: &metapb.CreateDentry{Parent: parent, Name: []byte(name), Type: metapb.FileType_FILE_TYPE_REGULAR}}},
	}})
}

// TestMetaCreateStormSurvivesLeaderKill creates files from several writers,
// kills -9 the node leading the busiest meta partition mid-storm, and checks
// that every create acknowledged as successful exists afterwards and that
// creates on that partition resume within 5 s.
func TestMetaCreateStormSurvivesLeaderKill(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cm")
	up := startUp(t, dir)
	v := openVolume(t, dir, "default")
	const parent = 1
	target := v.partitionOf(parent, "probe")

	// Warm up: find the target partition's leader.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if res, err := v.create(ctx, parent, "probe"); err != nil || res.Errno != 0 {
		t.Fatalf("first create: %v %v", err, res)
	}
	cancel()
	leaderAddr := v.meta.Leader(target.Id)
	st := getStatus(t, dir)
	victim := 0
	for _, n := range st.Nodes {
		if n.Role == "meta" && n.Address == leaderAddr {
			victim = n.Pid
		}
	}
	if victim == 0 {
		t.Fatalf("no meta node at leader address %q", leaderAddr)
	}

	type ack struct {
		name string
		ino  uint64
	}
	var (
		mu        sync.Mutex
		acked     []ack
		failures  int
		killedAt  time.Time
		targetOKs []time.Time // successes on the target partition
		wg        sync.WaitGroup
		stormEnd  = time.Now().Add(8 * time.Second)
		firstErrs = map[string]int{}
	)
	const writers = 6
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000 && time.Now().Before(stormEnd); i++ {
				name := fmt.Sprintf("w%d-f%05d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				res, err := v.create(ctx, parent, name)
				cancel()
				mu.Lock()
				if err == nil && res.Errno == 0 {
					acked = append(acked, ack{name, res.Results[0].Inode.Ino})
					if v.partitionOf(parent, name).Id == target.Id {
						targetOKs = append(targetOKs, time.Now())
					}
				} else {
					failures++
					key := "rpc error"
					if err == nil {
						key = fmt.Sprintf("errno %d", res.Errno)
					}
					if firstErrs[key] == 0 {
						t.Logf("first %s: %v %v", key, err, res)
					}
					firstErrs[key]++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	killedAt = time.Now()
	before := len(acked)
	mu.Unlock()
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// The outage is the longest pause between successful creates on the
	// target partition around the kill.
	var gap time.Duration
	slices.SortFunc(targetOKs, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(targetOKs); i++ {
		if targetOKs[i].After(killedAt) && targetOKs[i].Sub(targetOKs[i-1]) > gap {
			gap = targetOKs[i].Sub(targetOKs[i-1])
		}
	}
	t.Logf("%d creates acknowledged (%d before the kill), %d failed or ambiguous; longest pause on partition %d: %s",
		len(acked), before, failures, target.Id, gap)
	for e, n := range firstErrs {
		t.Logf("%6d× %s", n, e)
	}
	if len(targetOKs) == 0 || !targetOKs[len(targetOKs)-1].After(killedAt.Add(time.Second)) {
		t.Fatalf("creates on partition %d did not resume after its leader was killed", target.Id)
	}
	if gap > 5*time.Second {
		t.Errorf("creates on partition %d paused %s around the kill, want under 5s", target.Id, gap)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range acked {
		resp, err := v.meta.Lookup(ctx, v.partitionOf(parent, a.name), parent, a.name)
		if err != nil {
			t.Fatalf("lookup %s: %v", a.name, err)
		}
		if resp.Errno != 0 || resp.Dentry.Ino != a.ino {
			t.Fatalf("acknowledged create %s (ino %d) lost: errno %d dentry %v", a.name, a.ino, resp.Errno, resp.Dentry)
		}
	}
	up.stop()
}
