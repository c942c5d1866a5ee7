package datanode

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPacerSpacesWork checks the lower bound a pacer guarantees: n bytes
// after the first call take at least n/rate, and a cancelled wait returns.
func TestPacerSpacesWork(t *testing.T) {
	p := &pacer{rate: 10 << 20} // 10 MiB/s: 1 MiB every 100 ms
	start := time.Now()
	for range 4 {
		if err := p.wait(context.Background(), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if got := time.Since(start); got < 300*time.Millisecond {
		t.Fatalf("4 MiB at 10 MiB/s passed in %s; want at least 300ms", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = p.wait(ctx, 100<<20) // reserves 10 s
	if err := p.wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a cancelled context: %v", err)
	}
	var unlimited *pacer
	if err := unlimited.wait(context.Background(), 1<<30); err != nil {
		t.Fatal(err)
	}
}
