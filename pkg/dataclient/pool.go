package dataclient

import (
	"context"
	"sync"

	"github.com/cairnfs/cairn/pkg/dataproto"
)

// connPool keeps up to n pipelined connections per data node, handed out
// round robin; broken ones are replaced on demand.
type connPool struct {
	opts   dataproto.ConnOptions
	n      int
	mu     sync.Mutex
	conns  map[string][]*dataproto.Conn
	next   map[string]int
	closed bool
}

func newConnPool(opts dataproto.ConnOptions, n int) *connPool {
	return &connPool{opts: opts, n: n, conns: map[string][]*dataproto.Conn{}, next: map[string]int{}}
}

// get returns a working connection to addr.
func (cp *connPool) get(ctx context.Context, addr string) (*dataproto.Conn, error) {
	cp.mu.Lock()
	if cp.closed {
		cp.mu.Unlock()
		return nil, ErrClosed
	}
	var live, dead []*dataproto.Conn
	for _, c := range cp.conns[addr] {
		if c.Err() == nil {
			live = append(live, c)
		} else {
			dead = append(dead, c)
		}
	}
	cp.conns[addr] = live
	var pick *dataproto.Conn
	if len(live) >= cp.n {
		i := cp.next[addr] % len(live)
		cp.next[addr] = i + 1
		pick = live[i]
	}
	cp.mu.Unlock()
	for _, c := range dead {
		c.Close() // already failed: this only waits for its reader to end
	}
	if pick != nil {
		return pick, nil
	}
	c, err := dataproto.Dial(ctx, addr, cp.opts)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.closed {
		c.Close()
		return nil, ErrClosed
	}
	cp.conns[addr] = append(cp.conns[addr], c)
	return c, nil
}

func (cp *connPool) close() {
	cp.mu.Lock()
	cp.closed = true
	all := cp.conns
	cp.conns = map[string][]*dataproto.Conn{}
	cp.mu.Unlock()
	for _, cs := range all {
		for _, c := range cs {
			c.Close()
		}
	}
}
