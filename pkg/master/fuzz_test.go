package master

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

var (
	fuzzOnce sync.Once
	fuzzSvc  *service
)

// fuzzMaster starts one real master (its Raft group, its store in a temp
// dir, its leader duties) in plain text, once per process, and waits
// until it leads.
func fuzzMaster(f *testing.F) *service {
	fuzzOnce.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		s, err := Start(Config{ID: 1, Peers: map[uint64]string{1: addr}, DataDir: f.TempDir(),
			TickInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(s.Stop)
		fuzzSvc = &service{s: s}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := fuzzSvc.Status(context.Background(), &pb.StatusRequest{}); err == nil {
				break
			}
			if time.Now().After(deadline) {
				f.Fatal("the master did not lead within 30s")
			}
		}
	})
	return fuzzSvc
}

// FuzzMaster decodes arbitrary bytes as a request of one of the master's
// methods (the first byte picks which) and hands it to a real master's
// service, as a caller allowed to call every method would (an admin or a
// node: the handlers run after the certificate checks). Then the master
// must still lead and answer: no request, however hostile, may crash a
// master, wedge its state machine or make it stop serving the map. The
// addresses a request registers are replaced by a closed loopback port,
// so that the leader's duties (which dial registered nodes) never reach
// beyond this machine.
func FuzzMaster(f *testing.F) {
	svc := fuzzMaster(f)
	add := func(method byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{method}, b...))
	}
	add(0, &pb.RegisterRequest{Uuid: "u1", Role: pb.Role_ROLE_META, Addr: "x"})
	add(0, &pb.RegisterRequest{Uuid: "u2", Role: pb.Role_ROLE_DATA, NodeId: 1 << 63, ClusterId: "other"})
	add(1, &pb.HeartbeatRequest{NodeId: 1 << 62, Usage: &pb.Usage{CapacityBytes: 1, UsedBytes: 1 << 63}, Partitions: []*pb.PartitionReport{{Id: 1, InSyncEpoch: 1 << 63, Leader: true}}})
	add(2, &pb.GetMapRequest{})
	add(3, &pb.CreateVolumeRequest{Name: "v", Replicas: 1 << 30, MetaPartitions: 1 << 30, DataPartitions: 1 << 30})
	add(3, &pb.CreateVolumeRequest{Name: "v1", Chunking: &pb.ChunkLayout{}, DefaultLayout: 1 << 20})
	add(3, &pb.CreateVolumeRequest{Name: "../..", Replicas: -1})
	add(4, &pb.VolumeRequest{Name: "v"})
	add(5, &pb.ListVolumesRequest{})
	add(6, &pb.VolumeRequest{Name: ""})
	add(7, &pb.StatusRequest{})
	add(8, &pb.ReportFailureRequest{NodeId: 1})
	add(9, &pb.DecommissionNodeRequest{NodeId: 1 << 62})
	add(10, &pb.CreateClientRequest{Client: &pb.Client{Name: "c", Serial: "s", NotAfterUnixMs: -1}})
	add(11, &pb.ListClientsRequest{})
	add(12, &pb.RevokeRequest{Serial: "zz"})
	add(13, &pb.SetQuotaRequest{Set: &pb.SetQuota{Volume: "v", Quota: &pb.Quota{Path: "/../a", MaxBytes: 1 << 63}}})
	add(14, &pb.RemoveQuotaRequest{Remove: &pb.RemoveQuota{Volume: "v", Ino: 1}})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		m := masterMethods[int(data[0])%len(masterMethods)]
		_ = m(ctx, svc, data[1:]) // any answer, error or not, is fine

		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		if _, err := svc.Status(ctx2, &pb.StatusRequest{}); err != nil {
			t.Fatalf("the master stopped serving after method %d %x: %v", int(data[0])%len(masterMethods), data[1:], err)
		}
		if _, err := svc.GetMap(ctx2, &pb.GetMapRequest{}); err != nil {
			t.Fatalf("the master stopped serving the map after method %d %x: %v", int(data[0])%len(masterMethods), data[1:], err)
		}
	})
}

// closedAddr is a loopback address with a port below 10, where nothing
// listens on this machine, picked by addr so that distinct addresses stay
// distinct often enough to register several nodes.
func closedAddr(addr string) string {
	return fmt.Sprintf("127.0.0.1:%d", 1+crc32.ChecksumIEEE([]byte(addr))%9)
}

// masterMethods decode a request of one of the master's methods and hand
// it to the service; FuzzMaster's first byte picks one (its seeds use
// these indexes).
var masterMethods = []func(ctx context.Context, v *service, b []byte) error{
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.RegisterRequest{}, func(ctx context.Context, r *pb.RegisterRequest) (*pb.RegisterResponse, error) {
			r.Addr, r.DataAddr = closedAddr(r.Addr), closedAddr(r.DataAddr)
			return v.Register(ctx, r)
		})
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.HeartbeatRequest{}, func(ctx context.Context, r *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
			r.MetricsAddr = closedAddr(r.MetricsAddr)
			return v.Heartbeat(ctx, r)
		})
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.GetMapRequest{}, v.GetMap)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.CreateVolumeRequest{}, v.CreateVolume)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.VolumeRequest{}, v.GetVolume)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.ListVolumesRequest{}, v.ListVolumes)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.VolumeRequest{}, v.DeleteVolume)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.StatusRequest{}, v.Status)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.ReportFailureRequest{}, v.ReportFailure)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.DecommissionNodeRequest{}, v.DecommissionNode)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.CreateClientRequest{}, v.CreateClient)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.ListClientsRequest{}, v.ListClients)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.RevokeRequest{}, v.Revoke)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.SetQuotaRequest{}, v.SetQuota)
	},
	func(ctx context.Context, v *service, b []byte) error {
		return handle(ctx, b, &pb.RemoveQuotaRequest{}, v.RemoveQuota)
	},
}

// handle decodes body into req and hands it to a service method.
func handle[Req proto.Message, Resp any](ctx context.Context, body []byte, req Req, method func(context.Context, Req) (Resp, error)) error {
	if err := proto.Unmarshal(body, req); err != nil {
		return err
	}
	_, err := method(ctx, req)
	return err
}
