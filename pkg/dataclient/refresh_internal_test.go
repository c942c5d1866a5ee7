package dataclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/gate"
)

// TestRefreshBounded: a master that never answers costs a refresh
// RefreshTimeout, even under a context without a deadline (a writer's,
// which lives as long as its file is open), and the client keeps its view.
func TestRefreshBounded(t *testing.T) {
	view := &Topology{Epoch: 7, Nodes: map[uint64]Node{}}
	c := &Client{opts: Options{RefreshTimeout: 50 * time.Millisecond}.withDefaults(), topo: view, refreshGate: gate.New(),
		src: func(ctx context.Context) (*Topology, error) {
			<-ctx.Done() // a master leader nobody can reach
			return nil, ctx.Err()
		}}
	start := time.Now()
	err := c.Refresh(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh = %v, want the deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Refresh took %v with a 50ms bound", took)
	}
	if c.topo != view {
		t.Fatalf("the view changed after a failed refresh")
	}
}
