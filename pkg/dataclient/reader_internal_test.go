package dataclient

import (
	"slices"
	"testing"
	"time"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// TestSequentialRuns: a run starts at 0 or where the last read ended, and
// reads of a run that arrive out of order (the kernel's read-ahead sends
// several at once) stay in it while they are near its furthest end; a
// random reader is never taken for a run.
func TestSequentialRuns(t *testing.T) {
	const mib = 1 << 20
	type read struct {
		off, n int64
		seq    bool
	}
	for _, tc := range []struct {
		name  string
		reads []read
	}{
		{"in order", []read{{0, mib, true}, {mib, mib, true}, {2 * mib, mib, true}}},
		{"out of order within the window", []read{{0, mib, true}, {2 * mib, mib, true}, {mib, mib, true}, {4 * mib, mib, true}, {3 * mib, mib, true}, {5 * mib, mib, true}}},
		{"a jump far ahead ends the run", []read{{0, mib, true}, {mib, mib, true}, {100 * mib, mib, false}, {50 * mib, mib, false}}},
		// One that happens to follow the last is taken for a run (and
		// fetched with read-ahead), but the next near one is not.
		{"random 4 KiB reads", []read{{37 * 4096, 4096, false}, {9 * 4096, 4096, false}, {10 * 4096, 4096, true}, {12 * 4096, 4096, false}, {901 * 4096, 4096, false}, {902 * 4096, 4096, true}, {880 * 4096, 4096, false}}},
		{"random reads near each other are not a run", []read{{5 * mib, 4096, false}, {5*mib + 8192, 4096, false}, {5*mib - 65536, 4096, false}}},
		{"random 1 MiB reads near each other are not a run", []read{{5 * mib, mib, false}, {7 * mib, mib, false}, {3 * mib, mib, false}}},
		{"back to the start", []read{{0, mib, true}, {mib, mib, true}, {0, mib, true}, {mib, mib, true}}},
	} {
		r := &Reader{chunk: mib, ahead: 8, lastEnd: -1}
		for i, rd := range tc.reads {
			if got := r.sequentialLocked(rd.off, rd.off+rd.n); got != rd.seq {
				t.Errorf("%s: read %d at %d: sequential %v, want %v", tc.name, i, rd.off, got, rd.seq)
			}
		}
	}
}

// TestReadOrderSpread: large reads start at the alive replica their
// offset picks, so that a sequential reader's chunks come from every
// replica; a leader this client overwrote through, stale, down and silent
// replicas keep their places.
func TestReadOrderSpread(t *testing.T) {
	nodes := map[uint64]Node{1: {Alive: true, Addr: "10.0.0.1:17200"}, 2: {Alive: true, Addr: "10.0.0.2:17200"}, 3: {Alive: true, Addr: "10.0.0.3:17200"}, 4: {Alive: false, Addr: "10.0.0.4:17200"},
		5: {Alive: true, Addr: "127.0.0.1:1"}, 6: {Alive: true, Addr: "127.0.0.1:2"}, 7: {Alive: true, Addr: "127.0.0.1:3"}}
	for _, tc := range []struct {
		name   string
		p      *pb.Partition
		leader uint64
		spread int
		want   []uint64
	}{
		{"no spread", &pb.Partition{Id: 1, Replicas: []uint64{1, 2, 3}}, 0, -1, []uint64{1, 2, 3}},
		{"spread 0", &pb.Partition{Id: 1, Replicas: []uint64{1, 2, 3}}, 0, 0, []uint64{1, 2, 3}},
		{"spread 1", &pb.Partition{Id: 1, Replicas: []uint64{1, 2, 3}}, 0, 1, []uint64{2, 3, 1}},
		{"spread 5", &pb.Partition{Id: 1, Replicas: []uint64{1, 2, 3}}, 0, 5, []uint64{3, 1, 2}},
		{"a stale replica is not spread to", &pb.Partition{Id: 1, Replicas: []uint64{1, 2, 3}, Stale: []uint64{2}}, 0, 1, []uint64{3, 1, 2}},
		{"a dead one neither", &pb.Partition{Id: 1, Replicas: []uint64{4, 2, 3}}, 0, 1, []uint64{3, 2, 4}},
		{"replicas on one host are not spread over", &pb.Partition{Id: 1, Replicas: []uint64{5, 6, 7}}, 0, 1, []uint64{5, 6, 7}},
		{"the leader this client overwrote through stays first", &pb.Partition{Id: 1, Replicas: []uint64{1, 2, 3}}, 2, 1, []uint64{2, 1, 3}},
	} {
		c := &Client{opts: Options{}.withDefaults(), topo: &Topology{Nodes: nodes}, topoAt: time.Now(), leaders: map[uint64]uint64{}}
		if tc.leader != 0 {
			c.leaders[tc.p.Id] = tc.leader
		}
		if got := c.readOrder(tc.p, tc.spread); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
