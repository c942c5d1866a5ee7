package datanode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/pkg/multiraft"
)

// followerReadWait bounds a follower's read barrier, an election
// included; barrierSkip is how long a follower that found no leader
// serves reads without a barrier before it tries again.
const (
	followerReadWait = time.Second
	barrierSkip      = 3 * time.Second
)

// errNoLeader: the group has no leader to run a read barrier with.
var errNoLeader = errors.New("the partition's Raft group has no leader")

// barrier runs a follower's read barrier (readBarrier) unless one failed
// within barrierSkip; a failure starts such a period.
func (p *partition) barrier(ctx context.Context, s *session) {
	if time.Now().UnixNano() < p.noBarrierUntil.Load() {
		return
	}
	err := s.readBarrier(ctx, p)
	if err != nil && !errors.Is(err, errNoLeader) && ctx.Err() == nil {
		p.noBarrierUntil.Store(time.Now().Add(barrierSkip).UnixNano())
		p.log.Warn("no read barrier: serving reads from what this replica applied", "err", err, "for", barrierSkip)
	}
}

// readBarrier returns once p's replica here has applied every entry its
// Raft group committed before the call (multiraft.ReadIndex), waiting out
// an election, for at most followerReadWait.
func (s *session) readBarrier(ctx context.Context, p *partition) error {
	if lead, _, err := s.h.env.Raft.Leader(multiraft.GroupID(p.id)); err == nil && lead == 0 {
		// No leader: none can have acknowledged what this replica lacks
		// since it last heard one, unless it is being elected right now.
		// A group that lost its quorum stays so: its reads must not wait.
		return errNoLeader
	}
	ctx, cancel := context.WithTimeout(ctx, followerReadWait)
	defer cancel()
	for {
		err := s.h.env.Raft.ReadIndex(ctx, multiraft.GroupID(p.id))
		if err == nil || errors.Is(err, multiraft.ErrGroupNotFound) || errors.Is(err, multiraft.ErrGroupRemoved) {
			return err
		}
		// No leader yet, or leadership moved while the barrier waited
		// (an election, a transfer to the primary): try again.
		select {
		case <-ctx.Done():
			return fmt.Errorf("no read barrier within %v: %w", followerReadWait, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
