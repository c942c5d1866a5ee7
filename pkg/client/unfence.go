package client

import (
	"context"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Fences of removed directories are lifted late and in batches. Once an
// rmdir has deleted the name, its fences only refuse names under a
// directory nobody can reach (inode numbers are never reused), so nothing
// waits for them: they are collected for unfenceDelay and lifted with one
// Txn per partition, instead of one Raft write per partition and rmdir. A
// client that dies meanwhile leaves them to lapse (metapartition.FenceTTL).
const (
	unfenceDelay = 20 * time.Millisecond
	// maxUnfencesPerTxn stays within a meta node's bound on the
	// operations of one Txn (64).
	maxUnfencesPerTxn = 64
)

// owedUnfences is what a Volume still has to lift.
type owedUnfences struct {
	mu        sync.Mutex
	owed      map[uint64][]*metapb.Op // partition id -> Unfence ops
	scheduled bool
}

// oweUnfences queues the lifting of dir's fence with token on partitions
// parts and makes sure a flush is on its way.
func (v *Volume) oweUnfences(parts []uint64, dir, token uint64) {
	u := &v.unfences
	u.mu.Lock()
	if u.owed == nil {
		u.owed = map[uint64][]*metapb.Op{}
	}
	for _, id := range parts {
		u.owed[id] = append(u.owed[id], &metapb.Op{Op: &metapb.Op_Unfence{Unfence: &metapb.Unfence{Parent: dir, Token: token}}})
	}
	start := !u.scheduled
	u.scheduled = true
	u.mu.Unlock()
	if start {
		v.background(v.flushUnfences)
	}
}

// flushUnfences waits unfenceDelay (less when the volume closes) and lifts
// every owed fence, partitions side by side. A batch that fails (a fence
// lapsed and was taken by another token) is retried one fence at a time;
// what still fails is left to lapse.
func (v *Volume) flushUnfences() {
	select {
	case <-v.stop:
	case <-time.After(unfenceDelay):
	}
	u := &v.unfences
	u.mu.Lock()
	owed := u.owed
	u.owed = nil
	u.scheduled = false
	u.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), v.opts.AttemptTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for id, ops := range owed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(ops) > 0 {
				n := min(len(ops), maxUnfencesPerTxn)
				if _, err := v.txn(ctx, "unfence", byID(id), ops[:n]...); err != nil && n > 1 {
					for _, o := range ops[:n] {
						_, _ = v.txn(ctx, "unfence", byID(id), o)
					}
				}
				ops = ops[n:]
			}
		}()
	}
	wg.Wait()
}
