package fsys

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/bench/servermetrics"
	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// fakeMaster answers GetMap and Status from a map and the nodes' reported
// metrics addresses, as a master leader would.
type fakeMaster struct {
	pb.UnimplementedMasterServer
	mu      sync.Mutex
	m       *pb.ClusterMap
	metrics map[uint64]string // node id -> reported metrics address ("": no heartbeat yet)
}

func (f *fakeMaster) GetMap(context.Context, *pb.GetMapRequest) (*pb.GetMapResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &pb.GetMapResponse{Map: f.m}, nil
}

func (f *fakeMaster) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &pb.StatusResponse{Map: f.m, LeaderId: 1}
	for id, n := range f.m.GetNodes() {
		resp.Nodes = append(resp.Nodes, &pb.NodeStatus{Node: n, MetricsAddr: f.metrics[id]})
	}
	return resp, nil
}

func (f *fakeMaster) setMetrics(id uint64, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metrics[id] = addr
}

// startFakeMaster serves a volume "v" of meta partitions 10 (replicas on
// nodes 1, 2, 3) and 11 (nodes 3, 4), and a data partition on node 5.
func startFakeMaster(t *testing.T) (*fakeMaster, string) {
	t.Helper()
	nodes := map[uint64]*pb.Node{}
	for id := uint64(1); id <= 5; id++ {
		role := pb.Role_ROLE_META
		if id == 5 {
			role = pb.Role_ROLE_DATA
		}
		nodes[id] = &pb.Node{Id: id, Role: role, Addr: fmt.Sprintf("127.0.0.1:%d", 7000+id), State: pb.NodeState_NODE_STATE_ALIVE}
	}
	f := &fakeMaster{m: &pb.ClusterMap{Epoch: 3, Nodes: nodes,
		Volumes: map[uint64]*pb.Volume{1: {Id: 1, Name: "v", MetaPartitions: []uint64{10, 11}, DataPartitions: []uint64{20},
			SlotOwners: []uint64{10, 11}, Replicas: 3}},
		Partitions: map[uint64]*pb.Partition{
			10: {Id: 10, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{1, 2, 3}, InodeStart: 1, InodeEnd: 1 << 30},
			11: {Id: 11, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_META, Replicas: []uint64{3, 4}, InodeStart: 1<<30 + 1},
			20: {Id: 20, VolumeId: 1, Kind: pb.PartitionKind_PARTITION_KIND_DATA, Replicas: []uint64{5}},
		}},
		metrics: map[uint64]string{1: "127.0.0.1:9101", 2: ":9102", 3: "[::]:9103", 5: "127.0.0.1:9105"},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMasterServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return f, ln.Addr().String()
}

// The meta nodes of a volume are the nodes holding its meta partitions'
// replicas, with the metrics endpoint they reported (an unspecified host
// completed from their gRPC address); one not reported yet is named.
func TestMetaMetricsAddrs(t *testing.T) {
	f, master := startFakeMaster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := client.Open(ctx, []string{master}, "v", &client.Options{RefreshInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	addrs, err := v.MetaMetricsAddrs(ctx)
	want := "127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103"
	if strings.Join(addrs, ",") != want {
		t.Errorf("addresses %v, want %s", addrs, want)
	}
	if err == nil || !strings.Contains(err.Error(), "node 4 (127.0.0.1:7004)") {
		t.Errorf("node 4 has no metrics address: %v", err)
	}
	f.setMetrics(4, "127.0.0.1:9101") // the same endpoint twice is read once
	addrs, err = v.MetaMetricsAddrs(ctx)
	if err != nil || strings.Join(addrs, ",") != want {
		t.Errorf("%v %v", addrs, err)
	}
	f.mu.Lock()
	f.m = &pb.ClusterMap{Epoch: 4, Nodes: f.m.Nodes}
	f.mu.Unlock()
	if _, err := v.MetaMetricsAddrs(ctx); client.ErrnoOf(err) != syscall.ENOENT {
		t.Errorf("a deleted volume: %v", err)
	}
}

// OpenMetaMetrics reads and sums every meta node's /metrics, and names a
// node it could not read.
func TestOpenMetaMetrics(t *testing.T) {
	f, master := startFakeMaster(t)
	serve := func(requests int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "# TYPE %s counter\n%s{rpc=\"Path\"} %d\n", servermetrics.ClientRequests, servermetrics.ClientRequests, requests)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	for id, n := range map[uint64]int{1: 10, 2: 20, 3: 30, 4: 40, 5: 1000} {
		f.setMetrics(id, serve(n))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := OpenMetaMetrics(ctx, master+"/nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("a missing volume: %v", err)
	}
	mm, err := OpenMetaMetrics(ctx, master+"/v")
	if err != nil {
		t.Fatal(err)
	}
	defer mm.Close()
	s := mm.SampleServers(ctx)
	var sum float64
	for _, n := range s.Nodes {
		if n.Err != nil {
			t.Errorf("%s: %v", n.Addr, n.Err)
		}
		sum += n.Values[servermetrics.ClientRequests]
	}
	if s.Err != nil || len(s.Nodes) != 4 || sum != 100 {
		t.Errorf("sample of the meta nodes (not the data node): %d nodes, %v requests, %v", len(s.Nodes), sum, s.Err)
	}
	f.setMetrics(2, "127.0.0.1:1")
	s = mm.SampleServers(ctx)
	failed := 0
	for _, n := range s.Nodes {
		if n.Err != nil {
			failed++
			if n.Addr != "127.0.0.1:1" {
				t.Errorf("%s failed: %v", n.Addr, n.Err)
			}
		}
	}
	if failed != 1 {
		t.Errorf("%d nodes failed, want 1", failed)
	}
	if err := CheckMetaMetrics("h:1,g:2/v"); err != nil {
		t.Error(err)
	}
	if err := CheckMetaMetrics("v"); err == nil {
		t.Error("a spec without masters was accepted")
	}
}
