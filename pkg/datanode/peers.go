package datanode

import (
	"context"
	"errors"
	"sync"

	"github.com/cairnfs/cairn/pkg/dataproto"
)

// peerPool holds one shared connection per peer data node for maintenance
// traffic (alignment, repair), which needs no ordering between requests.
// Replication chains use per-session connections instead (see session).
type peerPool struct {
	opts   dataproto.ConnOptions
	mu     sync.Mutex
	conns  map[string]*dataproto.Conn
	closed bool
}

func newPeerPool(opts dataproto.ConnOptions) *peerPool {
	return &peerPool{opts: opts, conns: map[string]*dataproto.Conn{}}
}

var errPoolClosed = errors.New("data node: peer pool closed")

// get returns a working connection to addr, dialing one if needed.
func (pp *peerPool) get(ctx context.Context, addr string) (*dataproto.Conn, error) {
	pp.mu.Lock()
	if pp.closed {
		pp.mu.Unlock()
		return nil, errPoolClosed
	}
	if c := pp.conns[addr]; c != nil && c.Err() == nil {
		pp.mu.Unlock()
		return c, nil
	}
	pp.mu.Unlock()
	c, err := dataproto.Dial(ctx, addr, pp.opts)
	if err != nil {
		return nil, err
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		c.Close()
		return nil, errPoolClosed
	}
	if old := pp.conns[addr]; old != nil {
		if old.Err() == nil {
			c.Close()
			return old, nil
		}
		old.Close()
	}
	pp.conns[addr] = c
	return c, nil
}

func (pp *peerPool) close() {
	pp.mu.Lock()
	pp.closed = true
	conns := pp.conns
	pp.conns = nil
	pp.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
