package gate

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New()
		if err := g.Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		// A waiter with a deadline gives up at it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := g.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held gate: %v", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("gave up after %v", waited)
		}
		// A waiter without one gets the gate when it is released.
		got := make(chan error)
		go func() { got <- g.Lock(context.Background()) }()
		time.Sleep(time.Minute)
		g.Unlock()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		g.Unlock()
	})
}

func TestUnlockOfOpenGatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of an open gate did not panic")
		}
	}()
	New().Unlock()
}
