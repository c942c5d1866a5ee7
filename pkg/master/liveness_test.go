package master

import (
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func TestLivenessChanges(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	alive, down, out := pb.NodeState_NODE_STATE_ALIVE, pb.NodeState_NODE_STATE_DOWN, pb.NodeState_NODE_STATE_OUT
	tests := []struct {
		name       string
		state      pb.NodeState
		changedAgo time.Duration // when the map recorded the state, before now
		lastHB     time.Duration // 0: never heard by this leader
		leaderAgo  time.Duration
		want       pb.NodeState // 0: no change
	}{
		{"fresh heartbeat", alive, time.Hour, time.Second, time.Hour, 0},
		{"silent past down-after", alive, time.Hour, 11 * time.Second, time.Hour, down},
		{"new leader never heard it: grace", alive, time.Hour, 0, 5 * time.Second, 0},
		{"new leader never heard it: grace over", alive, time.Hour, 0, 11 * time.Second, down},
		{"down, not yet out", down, 5 * time.Minute, 0, time.Hour, 0},
		{"down long enough", down, 11 * time.Minute, 0, time.Hour, out},
		{"down long ago but new leader", down, time.Hour, 0, time.Minute, 0},
		{"down but heartbeating again", down, time.Hour, time.Second, time.Hour, 0},
		{"out stays out", out, time.Hour, 0, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			s := &Server{cfg: Config{DownAfter: 10 * time.Second, OutAfter: 10 * time.Minute}, fsm: newFSM(), soft: map[uint64]*nodeSoft{}}
			s.fsm.state.Map().Nodes[7] = &pb.Node{Id: 7, State: tt.state, StateChangedUnixMs: now.Add(-tt.changedAgo).UnixMilli()}
			s.leaderSince = now.Add(-tt.leaderAgo)
			if tt.lastHB != 0 {
				s.soft[7] = &nodeSoft{last: now.Add(-tt.lastHB)}
			}
			got := s.livenessChanges(now)
			switch {
			case tt.want == 0 && len(got) != 0:
				t.Fatalf("unexpected change %v", got)
			case tt.want != 0 && (len(got) != 1 || got[0].State != tt.want || got[0].NodeId != 7):
				t.Fatalf("changes %v, want node 7 -> %v", got, tt.want)
			}
		})
	}
}

func TestParsePeers(t *testing.T) {
	good, err := ParsePeers([]string{"1=127.0.0.1:7000,2=h:7001", "3=[::1]:7002"})
	if err != nil || len(good) != 3 || good[3] != "[::1]:7002" {
		t.Fatalf("ParsePeers = %v, %v", good, err)
	}
	for _, bad := range []string{"x", "0=h:1", "a=h:1", "1=h", "1=h:0", "1=h:99999", "1=h:http", "1=h:1,1=h:2", "1="} {
		if _, err := ParsePeers([]string{bad}); err == nil {
			t.Errorf("ParsePeers(%q) accepted", bad)
		}
	}
}
