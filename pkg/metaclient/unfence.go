package metaclient

import (
	"context"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Fences of removed directories are lifted late and in batches. Once an
// rmdir has deleted the name, its fences only refuse names under a
// directory nobody can reach (inode numbers are never reused), so nothing
// waits for them: they are collected for UnfenceDelay and lifted with one
// Txn per partition, instead of one Raft write per partition and rmdir.
// Whoever owes them (a client, or the meta node that ran the rmdir) and
// dies meanwhile leaves them to lapse (metapartition.FenceTTL).
const (
	// UnfenceDelay is how long owed lifts wait for others to join them.
	UnfenceDelay = 20 * time.Millisecond
	// maxUnfencesPerTxn stays within a meta node's bound on the
	// operations of one Txn (64).
	maxUnfencesPerTxn = 64
)

// UnfenceBatch collects owed fence lifts per partition and sends them
// UnfenceDelay after the first, partitions side by side. The zero value
// is not usable: Send, Go and Stop must be set before the first Owe.
type UnfenceBatch struct {
	// Send runs one Txn of Unfence ops on partition part; an error (or a
	// refusal) makes a batch of several be retried one lift at a time.
	Send func(ctx context.Context, part uint64, ops []*metapb.Op) error
	// Go runs the flush in the background, as its owner tracks its
	// goroutines.
	Go func(func())
	// Stop, once closed, cuts the wait short: the owner is closing.
	Stop <-chan struct{}
	// Timeout bounds one flush; what is not lifted by then lapses.
	Timeout time.Duration

	mu        sync.Mutex
	owed      map[uint64][]*metapb.Op // partition id -> Unfence ops
	scheduled bool
}

// Owe queues the lifting of dir's fence with token on partitions parts and
// makes sure a flush is on its way.
func (b *UnfenceBatch) Owe(parts []uint64, dir, token uint64) {
	b.mu.Lock()
	if b.owed == nil {
		b.owed = map[uint64][]*metapb.Op{}
	}
	for _, id := range parts {
		b.owed[id] = append(b.owed[id], &metapb.Op{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: dir, Token: token}}})
	}
	start := !b.scheduled
	b.scheduled = true
	b.mu.Unlock()
	if start {
		b.Go(b.flush)
	}
}

// flush waits UnfenceDelay (less when Stop closes) and lifts every owed
// fence. A batch that fails (a fence lapsed and was taken by another
// token) is retried one fence at a time; what still fails is left to
// lapse.
func (b *UnfenceBatch) flush() {
	select {
	case <-b.Stop:
	case <-time.After(UnfenceDelay):
	}
	b.mu.Lock()
	owed := b.owed
	b.owed, b.scheduled = nil, false
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	for id, ops := range owed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(ops) > 0 {
				n := min(len(ops), maxUnfencesPerTxn)
				if err := b.Send(ctx, id, ops[:n]); err != nil && n > 1 {
					for _, o := range ops[:n] {
						_ = b.Send(ctx, id, []*metapb.Op{o})
					}
				}
				ops = ops[n:]
			}
		}()
	}
	wg.Wait()
}
