package metaclient

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// TestUnfenceBatch: lifts owed by several rmdirs go in one Txn per
// partition, at most 64 a Txn; a Txn that fails is retried one lift at a
// time.
func TestUnfenceBatch(t *testing.T) {
	type sent struct {
		part uint64
		n    int
	}
	var (
		mu      sync.Mutex
		sends   []sent
		flushes []func()
	)
	stop := make(chan struct{})
	close(stop) // a flush runs at once
	b := &UnfenceBatch{
		Send: func(_ context.Context, part uint64, ops []*metapb.Op) error {
			mu.Lock()
			defer mu.Unlock()
			sends = append(sends, sent{part, len(ops)})
			if part == 3 && len(ops) > 1 {
				return errors.New("a fence was taken by another token")
			}
			return nil
		},
		// The test runs each flush itself, once the lifts are owed.
		Go:      func(fn func()) { flushes = append(flushes, fn) },
		Stop:    stop,
		Timeout: time.Second,
	}
	for dir := uint64(1); dir <= 70; dir++ {
		b.Owe([]uint64{1, 2}, dir, 100+dir)
	}
	b.Owe([]uint64{3}, 200, 1)
	b.Owe([]uint64{3}, 201, 2)
	if len(flushes) != 1 {
		t.Fatalf("%d flushes scheduled for lifts owed at once, want 1", len(flushes))
	}
	flushes[0]()
	b.Owe([]uint64{1}, 300, 3)
	if len(flushes) != 2 {
		t.Fatalf("a lift owed after a flush scheduled %d flushes in all, want 2", len(flushes))
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[uint64][]int{}
	for _, s := range sends {
		count[s.part] = append(count[s.part], s.n)
	}
	// Partitions 1 and 2: 70 lifts each, in Txns of 64 and 6.
	for _, part := range []uint64{1, 2} {
		if got := count[part]; len(got) != 2 || got[0]+got[1] != 70 || max(got[0], got[1]) != 64 {
			t.Errorf("partition %d: Txns of %v lifts, want 64 and 6", part, got)
		}
	}
	if got := count[3]; len(got) != 3 || got[0] != 2 || got[1] != 1 || got[2] != 1 {
		t.Errorf("partition 3: Txns of %v lifts, want [2 1 1] (the batch, then one at a time)", got)
	}
}
