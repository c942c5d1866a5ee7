package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func status(leader uint64, nodes map[uint64]*pb.Node, vols map[uint64]*pb.Volume, parts map[uint64]*pb.Partition) *pb.StatusResponse {
	return &pb.StatusResponse{LeaderId: leader, Map: &pb.ClusterMap{Nodes: nodes, Volumes: vols, Partitions: parts}}
}

func node(id uint64, role pb.Role, state pb.NodeState) *pb.Node {
	return &pb.Node{Id: id, Role: role, State: state, Addr: "h:1"}
}

const (
	alive = pb.NodeState_NODE_STATE_ALIVE
	down  = pb.NodeState_NODE_STATE_DOWN
	data  = pb.Role_ROLE_DATA
)

func TestDiff(t *testing.T) {
	before := status(1,
		map[uint64]*pb.Node{4: node(4, data, alive), 5: node(5, data, alive)},
		map[uint64]*pb.Volume{1: {Id: 1, Name: "old"}},
		map[uint64]*pb.Partition{7: {Id: 7, Replicas: []uint64{4, 5}, Stale: []uint64{5}}, 8: {Id: 8, Replicas: []uint64{4, 5}}, 9: {Id: 9, Replicas: []uint64{4, 5}, Joining: 6, Leaving: 5}})
	after := status(2,
		map[uint64]*pb.Node{4: node(4, data, down), 5: node(5, data, alive), 6: node(6, data, alive)},
		map[uint64]*pb.Volume{2: {Id: 2, Name: "new"}},
		map[uint64]*pb.Partition{7: {Id: 7, Replicas: []uint64{4, 5}}, 8: {Id: 8, Replicas: []uint64{4, 5}, Joining: 6, Leaving: 4}, 9: {Id: 9, Replicas: []uint64{4, 6}}})
	var got []string
	for _, e := range diff(before, after, 42) {
		if e.UnixMs != 42 {
			t.Errorf("event time %d", e.UnixMs)
		}
		got = append(got, e.Kind+": "+e.Text)
	}
	want := []string{
		"leader: master 2 leads (was master 1)",
		"node: data node 4 is down (was alive)",
		"node: data node 6 registered at h:1",
		"volume: volume new created",
		"volume: volume old deleted",
		"partition: partition 7: every replica in sync",
		"partition: partition 8: replica moves from node 4 to node 6",
		"partition: partition 9: node 6 replaced node 5",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(diff(nil, after, 1)) != 0 || len(diff(after, after, 1)) != 0 {
		t.Error("events without a change")
	}
}

func TestHealth(t *testing.T) {
	m := &pb.ClusterMap{Partitions: map[uint64]*pb.Partition{
		1: {}, 2: {Down: []uint64{3}}, 3: {Stale: []uint64{2}}, 4: {Joining: 5}, 5: {Down: []uint64{1}, Stale: []uint64{2}},
	}}
	if h := healthOf(m); h != (Health{Healthy: 1, Degraded: 2, Recovering: 2}) {
		t.Errorf("health %+v", h)
	}
}

func TestRates(t *testing.T) {
	var a, b Totals
	must(t, a.addExposition(strings.NewReader("# TYPE cairn_data_requests_total counter\ncairn_data_requests_total{op=\"read\",code=\"ok\"} 10\ncairn_data_requests_total{op=\"append\",code=\"ok\"} 5\n# TYPE cairn_meta_client_requests_total counter\ncairn_meta_client_requests_total{rpc=\"txn\"} 100\n# TYPE cairn_data_bytes_out_total counter\ncairn_data_bytes_out_total 1000\n")))
	must(t, b.addExposition(strings.NewReader("# TYPE cairn_data_requests_total counter\ncairn_data_requests_total{op=\"read\",code=\"ok\"} 40\ncairn_data_requests_total{op=\"append\",code=\"ok\"} 5\n# TYPE cairn_meta_client_requests_total counter\ncairn_meta_client_requests_total{rpc=\"txn\"} 50\n# TYPE cairn_data_bytes_out_total counter\ncairn_data_bytes_out_total 6000\n# TYPE other_total counter\nother_total 9\n")))
	s := rate(a, b, 5, 7)
	if s.DataOpsPerSec != 6 || s.BytesOutPerSec != 1000 || s.MetaOpsPerSec != 0 || s.UnixMs != 7 {
		t.Errorf("sample %+v (a counter that went down counts 0)", s)
	}
	if err := a.addExposition(strings.NewReader("not an exposition {")); err == nil {
		t.Error("garbage parsed")
	}
}

// fakeSource leads when status is set; else it names leader as the
// leader's console.
type fakeSource struct {
	st     *pb.StatusResponse
	leader string
}

func (f fakeSource) IsLeader() bool { return f.st != nil }

func (f fakeSource) Status(context.Context) (*pb.StatusResponse, error) {
	if f.st == nil {
		return nil, errors.New("not the leader")
	}
	return f.st, nil
}

func (f fakeSource) LeaderHTTP(context.Context) string { return f.leader }

// TestHandler: the leader serves the page, its assets and the overview
// (without client identities); another master proxies to the leader, once.
func TestHandler(t *testing.T) {
	st := status(1, map[uint64]*pb.Node{4: node(4, data, alive)}, nil, nil)
	st.Map.Clients = map[string]*pb.Client{"secret-client": {Name: "secret-client"}}
	lead := New(fakeSource{st: st}, slog.Default())
	ls := httptest.NewServer(lead.Handler())
	defer ls.Close()
	follower := httptest.NewServer(New(fakeSource{leader: strings.TrimPrefix(ls.URL, "http://")}, slog.Default()).Handler())
	defer follower.Close()
	lost := httptest.NewServer(New(fakeSource{}, slog.Default()).Handler())
	defer lost.Close()

	get := func(url string) (int, string) {
		t.Helper()
		r, err := http.Get(url)
		must(t, err)
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	for _, base := range []string{ls.URL, follower.URL} {
		if code, body := get(base + "/"); code != 200 || !strings.Contains(body, "<title>Cairn console</title>") {
			t.Errorf("%s/: %d %.80q", base, code, body)
		}
		if code, _ := get(base + "/assets/uPlot.iife.min.js"); code != 200 {
			t.Errorf("%s: uPlot %d", base, code)
		}
		code, body := get(base + "/api/overview")
		var ov Overview
		if code != 200 || json.Unmarshal([]byte(body), &ov) != nil || !strings.Contains(string(ov.Status), "ROLE_DATA") {
			t.Errorf("%s/api/overview: %d %.200q", base, code, body)
		}
		if strings.Contains(body, "secret-client") {
			t.Errorf("%s/api/overview shows client identities", base)
		}
	}
	if code, _ := get(ls.URL + "/nothing"); code != 404 {
		t.Errorf("unknown path: %d", code)
	}
	if code, body := get(lost.URL + "/"); code != 503 || !strings.Contains(body, "no master leads") {
		t.Errorf("without a leader: %d %q", code, body)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
