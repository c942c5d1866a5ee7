// Package gate is a mutual-exclusion lock whose waiters give up when their
// context ends: for sections that call another process (read the cluster
// map from the masters, connect to the data nodes), where a sync.Mutex
// would hold every other caller for as long as that call takes, whatever
// their own deadlines.
//
// Waiting on a gate is a channel operation, which a testing/synctest
// bubble counts as durably blocked: a simulated cluster's clock moves on
// while callers queue behind a call in progress (with a sync.Mutex it
// would not, and the call's own timeout would never fire).
package gate

import "context"

// Gate is a lock; the zero value is not usable (New).
type Gate chan struct{}

// New returns an open gate.
func New() Gate { return make(Gate, 1) }

// Lock takes the gate, or returns ctx's error if ctx ends first.
func (g Gate) Lock(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	default:
	}
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases the gate; it must be held.
func (g Gate) Unlock() {
	select {
	case <-g:
	default:
		panic("gate: Unlock of an open gate")
	}
}
