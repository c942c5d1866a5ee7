package fsck

import (
	"context"
	"fmt"
	"time"
)

// Sweeper reclaims orphan inodes (Orphan and Unlinked findings) of one
// volume periodically: the leftovers of unlink, rmdir and link steps that
// a crash interrupted. Every round collects the volume, checks it and
// repairs only findings that were also seen, unchanged, in the previous
// round and whose records are older than Grace. The second sighting
// protects operations whose steps are still under way but did not touch
// the inode's ctime (an unlink between deleting the name and dropping the
// link): by the next round they have finished or given up.
type Sweeper struct {
	// Layout returns the volume's current partitions and routing (the
	// master passes its own map; a tool reads it from the master).
	Layout func(ctx context.Context) (*Layout, error)
	// Scanner and Applier reach the partitions.
	Scanner Scanner
	Applier Applier
	// Interval between rounds (0: 10 minutes); Grace as in PlanOptions
	// (0: DefaultGrace).
	Interval, Grace time.Duration
	// Logf, if set, receives one line per reclaimed inode and per failed
	// round.
	Logf func(format string, args ...any)
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	seen map[string]bool
}

// SweepResult is what one round did.
type SweepResult struct {
	Found     int // orphan findings
	Reclaimed int // repaired
	Waiting   int // first seen, or within the grace period: next round
	Failed    int
}

func (s *Sweeper) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// Run sweeps until ctx ends, one round at once and then every Interval. A
// failed round is logged and retried at the next interval; Run returns
// ctx's error.
func (s *Sweeper) Run(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.logf("fsck sweeper: %v", err)
		}
		if err := ctx.Err(); err != nil {
			// Before the select: with a tick also ready, it might pick
			// the tick and sweep once more after the caller stopped it.
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Sweep runs one round.
func (s *Sweeper) Sweep(ctx context.Context) (SweepResult, error) {
	var r SweepResult
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	grace := s.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	l, err := s.Layout(ctx)
	if err != nil {
		return r, fmt.Errorf("read layout: %w", err)
	}
	snap, err := Collect(ctx, s.Scanner, l, nil)
	if err != nil {
		return r, fmt.Errorf("volume %s: %w", l.Volume, err)
	}
	var orphans []Finding
	seen := map[string]bool{}
	for _, f := range Check(snap) {
		if f.Kind != Orphan && f.Kind != Unlinked {
			continue
		}
		r.Found++
		k := f.Key()
		seen[k] = true
		if s.seen[k] {
			orphans = append(orphans, f)
		} else {
			r.Waiting++
		}
	}
	plan := PlanRepair(orphans, PlanOptions{Now: now(), Grace: grace})
	r.Waiting += len(plan.Skipped)
	for i, oc := range Apply(ctx, s.Applier, plan, ApplyOptions{}) {
		a := plan.Actions[i]
		if oc.Applied {
			r.Reclaimed++
			delete(seen, orphans[a.Finding].Key()) // gone now
			s.logf("fsck sweeper: volume %s: reclaimed: %s", l.Volume, a.Description)
		} else {
			r.Failed++
			s.logf("fsck sweeper: volume %s: not reclaimed: %s: %s", l.Volume, a.Description, oc.Reason)
		}
	}
	s.seen = seen
	return r, nil
}
