package replicaset

import (
	"fmt"
	"slices"
	"testing"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

func part(replicas, down, stale []uint64, epoch uint64) *pb.Partition {
	return &pb.Partition{Replicas: replicas, Down: down, Stale: stale, Epoch: epoch}
}

func TestQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 1, 3: 2, 4: 2, 5: 3} {
		if got := Quorum(n); got != want {
			t.Errorf("Quorum(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestChainHeadWritable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        *pb.Partition
		chain    []uint64
		head     uint64
		writable bool
	}{
		{"all up", part([]uint64{1, 2, 3}, nil, nil, 0), []uint64{1, 2, 3}, 1, true},
		{"one down", part([]uint64{2, 3, 1}, []uint64{1}, []uint64{1}, 0), []uint64{2, 3}, 2, true},
		{"two down", part([]uint64{3, 1, 2}, []uint64{1, 2}, []uint64{1, 2}, 0), []uint64{3}, 3, false},
		{"stale follower", part([]uint64{2, 3, 1}, nil, []uint64{1}, 0), []uint64{2, 3, 1}, 2, true},
		{"only stale alive", part([]uint64{1, 2, 3}, []uint64{2, 3}, []uint64{1}, 0), []uint64{1}, 0, false},
		{"stale head, fresh down", part([]uint64{1, 3, 2}, []uint64{2}, []uint64{1, 3}, 0), []uint64{1, 3}, 0, false},
		{"single replica", part([]uint64{7}, nil, nil, 0), []uint64{7}, 7, true},
		{"single replica down", part([]uint64{7}, []uint64{7}, nil, 0), []uint64{}, 0, false},
		{"two replicas one down", part([]uint64{1, 2}, []uint64{2}, []uint64{2}, 0), []uint64{1}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Chain(tc.p); !slices.Equal(got, tc.chain) {
				t.Errorf("Chain = %v, want %v", got, tc.chain)
			}
			if got := Head(tc.p); got != tc.head {
				t.Errorf("Head = %d, want %d", got, tc.head)
			}
			if got := Writable(tc.p); got != tc.writable {
				t.Errorf("Writable = %v, want %v", got, tc.writable)
			}
		})
	}
}

// step is one event applied to a partition, and the state expected after.
type step struct {
	op      string // down, up, sync
	node    uint64
	epoch   uint64 // sync: the epoch the replica reports
	changed bool
	want    string // replicas/down/stale after
}

func show(p *pb.Partition) string {
	return fmt.Sprintf("%v down%v stale%v", p.Replicas, p.Down, p.Stale)
}

func TestTransitions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"head dies and returns as a stale follower, then catches up", []step{
			{"down", 1, 0, true, "[2 3 1] down[1] stale[1]"},
			{"up", 1, 0, true, "[2 3 1] down[] stale[1]"},
			{"sync", 1, 10, false, "[2 3 1] down[] stale[1]"}, // an old epoch
			{"sync", 1, 0, true, "[2 3 1] down[] stale[]"},    // 0 = the current epoch, see run
		}},
		{"repeated events change nothing", []step{
			{"down", 3, 0, true, "[1 2 3] down[3] stale[3]"},
			{"down", 3, 0, false, "[1 2 3] down[3] stale[3]"},
			{"up", 2, 0, false, "[1 2 3] down[3] stale[3]"},
			{"down", 9, 0, false, "[1 2 3] down[3] stale[3]"},
			{"sync", 2, 0, false, "[1 2 3] down[3] stale[3]"},
		}},
		{"a stale replica that is down cannot catch up", []step{
			{"down", 2, 0, true, "[1 3 2] down[2] stale[2]"},
			{"sync", 2, 0, false, "[1 3 2] down[2] stale[2]"},
		}},
		{"two down: writes stop, so the second to go misses none", []step{
			{"down", 1, 0, true, "[2 3 1] down[1] stale[1]"},
			{"down", 2, 0, true, "[3 2 1] down[2 1] stale[1]"},
			// Writes resume with 3 and 1: now 2 misses them.
			{"up", 1, 0, true, "[3 1 2] down[2] stale[1 2]"},
			{"up", 2, 0, true, "[3 1 2] down[] stale[1 2]"},
		}},
		{"the last fresh replica dies while the others are stale: read-only until it returns", []step{
			{"down", 1, 0, true, "[2 3 1] down[1] stale[1]"},
			{"down", 2, 0, true, "[3 2 1] down[2 1] stale[1]"},
			{"up", 1, 0, true, "[3 1 2] down[2] stale[1 2]"},
			{"down", 3, 0, true, "[1 3 2] down[3 2] stale[1 2]"},
			// Writes stopped when 3 went: it missed none and returns fresh, as head.
			{"up", 3, 0, true, "[3 1 2] down[2] stale[1 2]"},
		}},
		{"all down, then back: the one that missed nothing heads", []step{
			{"down", 1, 0, true, "[2 3 1] down[1] stale[1]"},
			{"down", 2, 0, true, "[3 2 1] down[2 1] stale[1]"},
			{"down", 3, 0, true, "[3 2 1] down[3 2 1] stale[1]"},
			{"up", 1, 0, true, "[1 3 2] down[3 2] stale[1]"},
			{"up", 2, 0, true, "[2 1 3] down[3] stale[1 3]"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := part([]uint64{1, 2, 3}, nil, nil, 5)
			for i, s := range tc.steps {
				var changed bool
				switch s.op {
				case "down":
					changed = NodeDown(p, s.node)
				case "up":
					changed = NodeUp(p, s.node)
				case "sync":
					e := s.epoch
					if e == 0 {
						e = p.Epoch
					}
					changed = InSync(p, s.node, e)
				}
				if changed {
					p.Epoch++ // as the map stamps a changed partition
				}
				if changed != s.changed || show(p) != s.want {
					t.Fatalf("step %d (%s %d): changed %v, %s; want changed %v, %s", i, s.op, s.node, changed, show(p), s.changed, s.want)
				}
				checkInvariants(t, p)
			}
		})
	}
}

// TestRandomHistories drives random down/up/sync sequences and checks the
// safety property: whenever the partition is writable, its head holds every
// write acknowledged so far (it was in the chain for all of them).
func TestRandomHistories(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := newRand(seed)
		p := part([]uint64{1, 2, 3}, nil, nil, 1)
		writes := 0
		has := map[uint64]int{1: 0, 2: 0, 3: 0} // node -> acknowledged writes it holds
		for i := 0; i < 60; i++ {
			n := uint64(rng.next()%3 + 1)
			var changed bool
			switch rng.next() % 4 {
			case 0:
				changed = NodeDown(p, n)
			case 1:
				changed = NodeUp(p, n)
			case 2:
				// A replica in the chain aligns from the head: it then holds
				// what the head holds.
				if h := Head(p); h != 0 && slices.Contains(Chain(p), n) {
					has[n] = has[h]
					changed = InSync(p, n, p.Epoch)
				}
			case 3:
				if Writable(p) {
					writes++
					for _, r := range Chain(p) {
						has[r] = writes
					}
				}
			}
			if changed {
				p.Epoch++
			}
			checkInvariants(t, p)
			if h := Head(p); h != 0 && has[h] != writes {
				t.Fatalf("seed %d step %d: head %d holds %d of %d acknowledged writes (%s)", seed, i, h, has[h], writes, show(p))
			}
			for _, r := range p.Replicas {
				if !slices.Contains(p.Stale, r) && has[r] != writes {
					t.Fatalf("seed %d step %d: replica %d is not stale but holds %d of %d writes (%s)", seed, i, r, has[r], writes, show(p))
				}
			}
		}
	}
}

func checkInvariants(t *testing.T, p *pb.Partition) {
	t.Helper()
	for i := 1; i < len(p.Replicas); i++ {
		if rank(p, p.Replicas[i-1]) > rank(p, p.Replicas[i]) {
			t.Fatalf("replicas out of order: %s", show(p))
		}
	}
	if Writable(p) {
		for _, d := range p.Down {
			if !slices.Contains(p.Stale, d) {
				t.Fatalf("writable partition with a down replica not marked stale: %s", show(p))
			}
		}
	}
}

// rand is a small deterministic generator (splitmix64).
type rand struct{ s uint64 }

func newRand(seed uint64) *rand { return &rand{seed} }

func (r *rand) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
