package multiraft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cairnfs/cairn/pkg/lightrpc"
	"github.com/cairnfs/cairn/pkg/multiraft/transportpb"
)

// Servers a node may run, as processes of different versions do.
const (
	serveBoth       = "lightrpc+grpc" // a Cairn process: Deliver in lightrpc, gRPC on the same port
	serveGRPC       = "grpc"          // gRPC only, Deliver and Stream
	serveStreamOnly = "stream-only"   // an earlier version: gRPC, Stream only
	serveUnaryOnly  = "unary-only"    // an earlier version: lightrpc, Deliver answered without one_way
)

// unaryOnly is the Deliver of a version that does not take one-way calls:
// its Ack leaves one_way unset.
type unaryOnly struct{ *grpcService }

func (u unaryOnly) Deliver(ctx context.Context, in *transportpb.Batches) (*transportpb.Ack, error) {
	if _, err := u.grpcService.Deliver(ctx, in); err != nil {
		return nil, err
	}
	return &transportpb.Ack{}, nil
}

// grpcNode is one host with its own RPC server on loopback.
type grpcNode struct {
	id    NodeID
	db    *pebble.DB
	host  *Host
	tr    *GRPCTransport
	mode  string
	stop  func()
	srvWG sync.WaitGroup
	sm    *kvSM
}

// serve starts a fresh server of n's mode on a new loopback port and
// returns its address.
func (n *grpcNode) serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	serve := gs.Serve
	n.stop = gs.Stop
	switch n.mode {
	case serveBoth:
		ls := lightrpc.NewServer(lightrpc.ServerOptions{})
		n.tr.Register(gs)
		n.tr.Register(ls)
		serve = func(ln net.Listener) error { return ls.Serve(ln, gs.Serve) }
		n.stop = func() { ls.Stop(); gs.Stop() }
	case serveUnaryOnly:
		ls := lightrpc.NewServer(lightrpc.ServerOptions{})
		transportpb.RegisterTransportServer(ls, unaryOnly{&grpcService{t: n.tr}})
		transportpb.RegisterTransportServer(gs, unaryOnly{&grpcService{t: n.tr}})
		serve = func(ln net.Listener) error { return ls.Serve(ln, gs.Serve) }
		n.stop = func() { ls.Stop(); gs.Stop() }
	case serveGRPC:
		n.tr.Register(gs)
	case serveStreamOnly:
		sd := transportpb.Transport_ServiceDesc
		sd.Methods = nil
		gs.RegisterService(&sd, &grpcService{t: n.tr})
	}
	n.srvWG.Add(1)
	go func() {
		defer n.srvWG.Done()
		_ = serve(ln)
	}()
	return ln.Addr().String()
}

func (n *grpcNode) stopServer() {
	n.stop()
	n.srvWG.Wait()
}

// Three hosts over real loopback connections: election, proposals, a read
// barrier, and a host that moves to a new address (peers re-resolve and
// reconnect); with servers in lightrpc and gRPC, and one host of an earlier
// version that only has the gRPC stream.
func TestGRPCTransport(t *testing.T) {
	for _, modes := range [][3]string{
		{serveBoth, serveBoth, serveBoth},
		{serveGRPC, serveGRPC, serveGRPC},
		{serveBoth, serveBoth, serveStreamOnly},
		{serveUnaryOnly, serveUnaryOnly, serveUnaryOnly},
	} {
		t.Run(fmt.Sprint(modes), func(t *testing.T) { testTransport(t, modes) })
	}
}

func testTransport(t *testing.T, modes [3]string) {
	var amu sync.Mutex
	addrs := map[NodeID]string{}
	resolve := func(id NodeID) (string, bool) {
		amu.Lock()
		defer amu.Unlock()
		a, ok := addrs[id]
		return a, ok
	}
	ids := []NodeID{1, 2, 3}
	nodes := map[NodeID]*grpcNode{}
	for _, id := range ids {
		db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
		if err != nil {
			t.Fatal(err)
		}
		n := &grpcNode{id: id, db: db, sm: newKV(), mode: modes[id-1]}
		n.tr = NewGRPCTransport(id, resolve, quietLogger(), WithBackoff(5*time.Millisecond, 50*time.Millisecond), WithQueueBatches(64), WithMaxMessageBytes(300))
		n.host, err = NewHost(Config{NodeID: id, DB: db, Transport: n.tr, TickInterval: 5 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		n.tr.SetHost(n.host)
		if err := n.host.AddGroup(1, ids, n.sm, GroupOptions{}); err != nil {
			t.Fatal(err)
		}
		addr := n.serve(t)
		amu.Lock()
		addrs[id] = addr
		amu.Unlock()
		nodes[id] = n
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			// The order a process uses: transport, host, server, DB.
			n.tr.Close()
			n.tr.Close()
			n.host.Stop()
			n.stopServer()
			_ = n.db.Close()
		}
	})
	for _, n := range nodes {
		n.host.Start()
	}
	hosts := map[NodeID]*Host{}
	for id, n := range nodes {
		hosts[id] = n.host
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	propose := func(cmd string) {
		t.Helper()
		for {
			var lead NodeID
			waitFor(t, "leader", 10*time.Second, func() bool { lead = liveLeader(hosts, 1); return lead != 0 })
			_, err := hosts[lead].Propose(ctx, 1, []byte(cmd))
			if err == nil {
				return
			}
			if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrLeadershipLost) {
				t.Fatalf("propose %s: %v", cmd, err)
			}
		}
	}
	for i := range 20 {
		propose(fmt.Sprintf("k%d=%d", i, i))
	}

	// Node 3 moves: its server stops and comes back on another port.
	var lead NodeID
	waitFor(t, "leader", 10*time.Second, func() bool { lead = liveLeader(hosts, 1); return lead != 0 })
	mover := NodeID(3)
	if lead == mover {
		mover = 2
	}
	nodes[mover].stopServer()
	propose("while-moving")
	addr := nodes[mover].serve(t)
	amu.Lock()
	addrs[mover] = addr
	amu.Unlock()
	propose("after-move")

	waitFor(t, "all replicas applied everything", 10*time.Second, func() bool {
		var want uint64
		for _, n := range nodes {
			st, err := n.host.Status(1)
			if err != nil || st.Applied != st.Commit || (want != 0 && st.Applied != want) {
				return false
			}
			want = st.Applied
		}
		return true
	})
	ref := nodes[1].sm.history()
	for _, n := range nodes {
		if got := n.sm.history(); fmt.Sprint(got) != fmt.Sprint(ref) {
			t.Fatalf("node %d history %v, node 1 %v", n.id, got, ref)
		}
	}
	if len(ref) != 22 {
		t.Fatalf("history has %d entries, want 22", len(ref))
	}
	if err := hosts[mover].ReadIndex(ctx, 1); err != nil {
		t.Fatalf("read index on moved node: %v", err)
	}
	st := nodes[lead].tr.Stats()
	if st.BatchesSent == 0 || st.BatchesReceived == 0 {
		t.Fatalf("transport stats: %+v", st)
	}
	if nodes[lead].tr.Stats().SendErrors == 0 {
		t.Fatal("the move did not break any stream; the test did not exercise reconnection")
	}
	// The counters reach Prometheus (what a node's metrics endpoint serves).
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewTransportCollector(nodes[lead].tr))
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != len(transportCounters) {
		t.Fatalf("gathered %d transport metrics, want %d (err %v)", len(mfs), len(transportCounters), err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "cairn_raft_transport_batches_sent_total" && mf.GetMetric()[0].GetCounter().GetValue() == 0 {
			t.Errorf("%s is 0 on the leader", mf.GetName())
		}
	}
	// One-way calls go to the peers that said they take them (lightrpc
	// servers of this version), and only to them. The leader sends to
	// every follower; a follower may send to the leader only.
	for _, n := range nodes {
		oneWay := n.tr.Stats().OneWayCalls
		others := otherModes(modes, n.id)
		takes := slices.Contains(others, serveBoth)
		switch {
		case n.id == lead && takes && oneWay == 0:
			t.Errorf("leader %d sent no one-way call to its followers (%v)", n.id, others)
		case !takes && oneWay != 0:
			t.Errorf("node %d sent %d one-way calls to peers %v, which do not take them", n.id, oneWay, others)
		}
	}
}

// otherModes returns the server modes of the nodes other than id.
func otherModes(modes [3]string, id NodeID) []string {
	var out []string
	for i, m := range modes {
		if NodeID(i+1) != id {
			out = append(out, m)
		}
	}
	return out
}

// Large batches are split under the wire limit, never splitting a message,
// and the parts together carry everything once.
func TestSplitWire(t *testing.T) {
	b := &Batch{From: 1, To: 2, Incarnation: 5, Heartbeats: []Heartbeat{{Group: 1, Term: 2}, {Group: 2, Term: 2}}}
	for g := range 10 {
		b.Messages = append(b.Messages, GroupMessage{Group: GroupID(g), Message: &raftpb.Message{
			Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2),
			Entries: []*raftpb.Entry{{Data: make([]byte, 1000)}},
		}})
	}
	pb, err := encodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if parts := splitWire(pb, 1<<20); len(parts) != 1 {
		t.Fatalf("small batch split in %d", len(parts))
	}
	parts := splitWire(pb, 3000)
	if len(parts) < 4 {
		t.Fatalf("split in %d parts, want at least 4", len(parts))
	}
	msgs, hbs := 0, 0
	for i, p := range parts {
		if p.GetFrom() != 1 || p.GetTo() != 2 || p.GetIncarnation() != 5 {
			t.Fatalf("part %d lost its header", i)
		}
		if proto.Size(p) > 3000 {
			t.Fatalf("part %d has %d bytes", i, proto.Size(p))
		}
		msgs += len(p.GetMessages())
		hbs += len(p.GetHeartbeats())
	}
	if msgs != 10 || hbs != 2 {
		t.Fatalf("parts carry %d messages and %d heartbeats", msgs, hbs)
	}
	// One message above the limit still goes, alone.
	if parts := splitWire(pb, 100); len(parts) != 11 {
		t.Fatalf("oversized messages: %d parts, want 11", len(parts))
	}
}
