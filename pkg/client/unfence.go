package client

import (
	"context"

	"github.com/cairnfs/cairn/pkg/metaclient"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// newUnfenceBatch is the Volume's batch of fence lifts its done rmdirs owe
// (metaclient.UnfenceBatch), sent as its own Txns.
func (v *Volume) newUnfenceBatch() *metaclient.UnfenceBatch {
	return &metaclient.UnfenceBatch{
		Send: func(ctx context.Context, part uint64, ops []*metapb.Op) error {
			_, err := v.txn(ctx, "unfence", byID(part), ops...)
			return err
		},
		Go:      v.background,
		Stop:    v.stop,
		Timeout: v.opts.AttemptTimeout,
	}
}

// oweUnfences queues the lifting of dir's fence with token on partitions
// parts.
func (v *Volume) oweUnfences(parts []uint64, dir, token uint64) {
	v.unfences.Owe(parts, dir, token)
}
