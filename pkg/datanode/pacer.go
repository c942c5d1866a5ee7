package datanode

import (
	"context"
	"sync"
	"time"
)

// pacer spaces work to a rate of bytes per second shared by all callers:
// each wait reserves its bytes' share of time after the previous ones and
// sleeps until then. Idle time is not saved up (no burst beyond one call).
type pacer struct {
	rate float64 // bytes per second; <= 0: no limit

	mu   sync.Mutex
	next time.Time // when the next reservation may start
}

// wait blocks until n more bytes fit the rate, or ctx ends.
func (p *pacer) wait(ctx context.Context, n int64) error {
	if p == nil || p.rate <= 0 {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
