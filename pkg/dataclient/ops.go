package dataclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/metapb"
)

// Overwrite replaces len(data) existing bytes of extent ext of partition
// pid at extOff (a random write inside a file, CFS §2.7.2: the extent keys
// do not change). It goes through the partition's Raft group: the call
// follows the leader's redirects and retries transient failures until ctx
// ends, every attempt of a piece under one id, which a replica that
// applied the piece does not apply again (a retry applied after another
// client's overwrite of the same bytes would undo it). The range must lie
// within bytes every replica acknowledged.
func (c *Client) Overwrite(ctx context.Context, pid, ext uint64, extOff int64, data []byte) error {
	p, err := c.partition(pid)
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), dataproto.MaxPayload)
		if err := c.overwritePiece(ctx, p.Id, p.Replicas, ext, extOff, data[:n]); err != nil {
			return err
		}
		data, extOff = data[n:], extOff+int64(n)
	}
	return nil
}

func (c *Client) overwritePiece(ctx context.Context, pid uint64, replicas []uint64, ext uint64, off int64, data []byte) error {
	c.mu.Lock()
	target := c.leaders[pid]
	c.mu.Unlock()
	if target == 0 {
		target = replicas[0]
	}
	id := rand.Uint64() | 1 // never 0, which is "no id"
	backoff := 20 * time.Millisecond
	next := 0
	redirected := false
	var last error
	const maxAttempts = 50
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			return fmt.Errorf("dataclient: overwrite partition %d extent %d at %d: gave up after %d attempts: %w", pid, ext, off, attempt, last)
		}
		if attempt > 0 && !redirected {
			select {
			case <-ctx.Done():
				return fmt.Errorf("dataclient: overwrite partition %d extent %d at %d: %w (last: %v)", pid, ext, off, ctx.Err(), last)
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
		addr, ok := c.addr(target)
		var err error
		if !ok {
			err = fmt.Errorf("no data address for node %d", target)
		} else {
			var conn *dataproto.Conn
			if conn, err = c.pool.get(ctx, addr); err == nil {
				err = c.withGrant(ctx, conn, pid, ext, off, len(data), grant.Write, false, func([]byte) error {
					_, _, err := conn.Do(ctx, &dataproto.Request{
						Header:  dataproto.Header{Op: dataproto.OpOverwrite, Partition: pid, Extent: ext, Offset: off, Arg: id, Epoch: c.epoch()},
						Payload: data,
					})
					return err
				})
			}
		}
		if err == nil {
			c.mu.Lock()
			c.leaders[pid] = target
			c.mu.Unlock()
			return nil
		}
		last = err
		redirected = false
		var pe *dataproto.Error
		switch {
		case errors.As(err, &pe) && pe.Code == dataproto.CodeNotLeader && pe.Header.Arg != 0 && pe.Header.Arg != target:
			target = pe.Header.Arg
			redirected = true
		case dataproto.CodeOf(err) == dataproto.CodeStaleEpoch:
			_ = c.Refresh(ctx)
		case errors.As(err, &pe) && pe.Code != dataproto.CodeBusy && pe.Code != dataproto.CodeNotLeader && !retryable(err):
			return fmt.Errorf("dataclient: overwrite partition %d extent %d at %d: %w", pid, ext, off, err)
		case ctx.Err() != nil:
			return fmt.Errorf("dataclient: overwrite partition %d extent %d at %d: %w", pid, ext, off, err)
		default:
			// Unreachable or no leader yet: try the next replica.
			next++
			target = replicas[next%len(replicas)]
		}
	}
}

// Free releases the data of a deleted file (the deletion collector, CFS
// §2.7.3), one key at a time: a small file's range is punched out of its
// shared extent, and a large extent is deleted whole by its key at extent
// offset 0 (keys of a truncated tail free nothing on their own). Each goes
// to the partition's primary, which passes it along the chain. Freeing what
// is already free succeeds, so the collector may retry. It returns the keys
// it could not free.
func (c *Client) Free(ctx context.Context, keys []*metapb.ExtentKey) ([]*metapb.ExtentKey, error) {
	return c.freeKeys(ctx, keys, 0)
}

// FreeUnreferenced is Free for keys whose file no longer refers to their
// extents at all (the caller checked its live keys): a large extent goes
// whole whatever the key's offset, so a file whose head was replaced first
// does not leak the rest of the extent.
func (c *Client) FreeUnreferenced(ctx context.Context, keys []*metapb.ExtentKey) ([]*metapb.ExtentKey, error) {
	return c.freeKeys(ctx, keys, dataproto.FlagWhole)
}

func (c *Client) freeKeys(ctx context.Context, keys []*metapb.ExtentKey, flags dataproto.Flags) ([]*metapb.ExtentKey, error) {
	var failed []*metapb.ExtentKey
	var errs []error
	for _, k := range keys {
		if err := c.free(ctx, k.PartitionId, k.ExtentId, k.ExtentOffset, k.Size, flags); err != nil {
			failed = append(failed, k)
			errs = append(errs, err)
		}
	}
	return failed, errors.Join(errs...)
}

func (c *Client) free(ctx context.Context, pid, ext, off, n uint64, flags dataproto.Flags) error {
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		p, err := c.partition(pid) // again after a refresh
		if err != nil {
			return err
		}
		conn, err := c.primaryConn(ctx, p)
		if err == nil {
			err = c.withGrant(ctx, conn, pid, ext, int64(off), int(max(n, 1)), grant.Write, false, func([]byte) error {
				_, _, err := conn.Do(ctx, &dataproto.Request{Header: dataproto.Header{
					Op: dataproto.OpFree, Flags: flags, Partition: pid, Extent: ext, Offset: int64(off), Arg: n, Epoch: c.epoch(),
				}})
				return err
			})
		}
		if err == nil {
			return nil
		}
		last = err
		if dataproto.CodeOf(err) == dataproto.CodeStaleEpoch {
			_ = c.Refresh(ctx)
			continue
		}
		if !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("dataclient: free partition %d extent %d [%d,+%d): %w", pid, ext, off, n, last)
}
