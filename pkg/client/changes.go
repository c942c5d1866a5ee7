package client

import (
	"context"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/metapb"
)

// Changes asks the leader of meta partition id what other sessions
// changed after cursor, waiting up to wait while nothing did
// (metapb.ChangesRequest). The answer covers every change committed
// before the call was made.
func (v *Volume) Changes(ctx context.Context, id, cursor uint64, wait time.Duration) (*metapb.ChangesResponse, error) {
	p := v.current().parts[id]
	if p == nil {
		return nil, errnoErr("changes", syscall.ENOENT, "meta partition %d is not one of the volume's", id)
	}
	resp, err := v.meta.Changes(ctx, p, cursor, wait)
	if err != nil {
		return nil, transportErr("changes", err)
	}
	return resp, nil
}
