package datanode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/pkg/multiraft"
)

// readBarrierWait bounds a read barrier, an election included. A replica
// that cannot confirm a read in that time refuses it, and the reader asks
// the next replica.
const readBarrierWait = time.Second

// readBarrier returns once p's replica here has applied every overwrite its
// Raft group acknowledged before the call, waiting out an election for at
// most readBarrierWait; else it says why not.
//
// A leader confirms with its read lease (multiraft.LeaderReadIndex: no
// message while a quorum acknowledged a heartbeat within the lease), so a
// leader deposed by a partition it has not noticed yet does not serve
// bytes its successor has overwritten. A follower runs Raft's ReadIndex
// through the leader: its applied state trails the leader's commits by a
// round, and after a partition heals by much more.
//
// There is no fallback. A replica whose group has no leader (a lost
// quorum) cannot know whether the replicas it cannot reach committed an
// overwrite without it, so it serves nothing: the nemesis runs found
// stale and torn reads of acknowledged overwrites when such a replica
// served what it had applied.
func (s *session) readBarrier(ctx context.Context, p *partition) error {
	group := multiraft.GroupID(p.id)
	ctx, cancel := context.WithTimeout(ctx, readBarrierWait)
	defer cancel()
	if p.leading.Load() {
		err := s.h.env.Raft.LeaderReadIndex(ctx, group)
		var nl *multiraft.NotLeaderError
		if !errors.As(err, &nl) {
			if err != nil {
				return fmt.Errorf("leader read index: %w", err)
			}
			return nil
		}
		// Deposed since the last note: confirm as a follower.
	}
	for {
		err := s.h.env.Raft.ReadIndex(ctx, group)
		if err == nil || errors.Is(err, multiraft.ErrGroupNotFound) || errors.Is(err, multiraft.ErrGroupRemoved) {
			return err
		}
		// No leader yet, or leadership moved while the barrier waited
		// (an election, a transfer to the primary): try again.
		select {
		case <-ctx.Done():
			return fmt.Errorf("no read barrier within %v: %w", readBarrierWait, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
