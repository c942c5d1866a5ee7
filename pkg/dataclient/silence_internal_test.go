package dataclient

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/dataproto"
)

// TestChooseAvoidsSilentNodes: a node that did not answer is never the
// head of a write's chain, and is in its chain only when no partition
// without it takes writes; once its silence lapses it is chosen again.
func TestChooseAvoidsSilentNodes(t *testing.T) {
	tests := []struct {
		name   string
		chains [][]uint64 // replicas of partitions 1, 2, ...
		silent []uint64
		want   []uint64 // the partitions choose may return; none: it waits
	}{
		{"none silent: any", [][]uint64{{1, 2, 3}, {2, 3, 1}}, nil, []uint64{1, 2}},
		{"silent head avoided", [][]uint64{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}, []uint64{1}, []uint64{2, 3}},
		{"a chain without it first", [][]uint64{{2, 1, 3}, {2, 3, 4}}, []uint64{1}, []uint64{2}},
		{"else one where it follows", [][]uint64{{1, 2, 3}, {2, 1, 3}, {3, 2, 1}}, []uint64{1}, []uint64{2, 3}},
		{"every head silent: wait", [][]uint64{{1, 2, 3}, {2, 3, 1}}, []uint64{1, 2}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Client{topo: &Topology{Nodes: map[uint64]Node{}}, excluded: map[uint64]time.Time{}}
			for i, chain := range tt.chains {
				c.topo.Partitions = append(c.topo.Partitions, &pb.Partition{Id: uint64(i + 1), Replicas: chain})
				for _, n := range chain {
					c.topo.Nodes[n] = Node{Addr: "node", Alive: true}
				}
			}
			for _, n := range tt.silent {
				c.silent.mark(n, time.Now().Add(time.Hour))
			}
			seen := map[uint64]bool{}
			for range 200 {
				p, wait := c.choose()
				if p == nil {
					if len(tt.want) > 0 {
						t.Fatalf("choose waits %v; want one of %v", wait, tt.want)
					}
					if wait <= 0 {
						t.Fatalf("choose returns nothing and no wait")
					}
					return
				}
				seen[p.Id] = true
			}
			if len(tt.want) == 0 {
				t.Fatalf("chose %v; want a wait", seen)
			}
			for id := range seen {
				if !slices.Contains(tt.want, id) {
					t.Errorf("chose partition %d; want one of %v", id, tt.want)
				}
			}
			if len(seen) != len(tt.want) {
				t.Errorf("chose %v in 200 tries; want each of %v", seen, tt.want)
			}
		})
	}
	t.Run("silence lapses", func(t *testing.T) {
		c := &Client{topo: &Topology{Nodes: map[uint64]Node{1: {Addr: "a", Alive: true}, 2: {Addr: "b", Alive: true}, 3: {Addr: "c", Alive: true}}},
			excluded: map[uint64]time.Time{}}
		c.topo.Partitions = []*pb.Partition{{Id: 1, Replicas: []uint64{1, 2, 3}}}
		c.silent.mark(1, time.Now().Add(-time.Millisecond))
		if p, _ := c.choose(); p == nil || p.Id != 1 {
			t.Fatalf("chose %v; want partition 1 once its head's silence is over", p)
		}
	})
}

// TestSilenceFailedReplica: the replica a primary names as not answering
// is avoided by the next writes as a node that did not answer this client;
// a name outside the partition, none, or another code silences no one.
func TestSilenceFailedReplica(t *testing.T) {
	newClient := func() *Client {
		c := &Client{topo: &Topology{Nodes: map[uint64]Node{}}, excluded: map[uint64]time.Time{}, opts: Options{ExcludeFor: time.Hour}}
		for i, chain := range [][]uint64{{1, 2, 3}, {2, 1, 3}, {4, 5, 6}} {
			c.topo.Partitions = append(c.topo.Partitions, &pb.Partition{Id: uint64(i + 1), Replicas: chain})
			for _, n := range chain {
				c.topo.Nodes[n] = Node{Addr: "node", Alive: true}
			}
		}
		return c
	}
	failed := func(code dataproto.Code, node uint64) error {
		return &dataproto.Error{Code: code, Header: dataproto.Header{Arg: node}}
	}
	for _, tc := range []struct {
		name   string
		err    error
		silent bool
	}{
		{"named replica", failed(dataproto.CodeReplicaFailed, 3), true},
		{"no node named", failed(dataproto.CodeReplicaFailed, 0), false},
		{"a node not in the partition", failed(dataproto.CodeReplicaFailed, 9), false},
		{"another code", failed(dataproto.CodeNotLeader, 3), false},
		{"no answer at all", os.ErrDeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient()
			c.silenceFailedReplica(c.topo.Partitions[0], tc.err)
			if got := c.silent.is(3, time.Now()); got != tc.silent {
				t.Fatalf("node 3 silent: %v, want %v", got, tc.silent)
			}
			if !tc.silent {
				return
			}
			for range 50 {
				if p, _ := c.choose(); p == nil || p.Id != 3 {
					t.Fatalf("chose %v; want partition 3, the only one without node 3", p)
				}
			}
		})
	}
}

// TestNoAnswer: only the absence of any answer makes a node silent.
func TestNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&dataproto.Error{Code: dataproto.CodeReplicaFailed}, false},
		{fmt.Errorf("data path: read: %w", os.ErrDeadlineExceeded), true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{context.Canceled, false},
		{ErrClosed, false},
	} {
		if got := noAnswer(tc.err); got != tc.want {
			t.Errorf("noAnswer(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
