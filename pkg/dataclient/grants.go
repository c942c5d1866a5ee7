package dataclient

import (
	"context"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/grant"
)

// Data nodes serve a client certificate only the ranges of the extent
// grants it presented (pkg/grant; docs/security.md). The meta nodes put
// the grants in their answers, which fill Options.Grants; before a read or
// an overwrite the client presents the token that names the range to the
// data node, once per node (OpGrant, sent back to back with the request,
// so it costs no round trip of its own). When a node answers CodeNoGrant
// (it restarted and forgot the token, or the token expired, or none was
// ever held), the client presents it again, then fetches the file's inode
// again (Options.Regrant) for a fresh one, and retries. A read carries the
// token in its own frame (dataproto.FlagGrant), which saves a frame and an
// answer per file on the hot path of small-file reads.

// keepReceipt puts a data node's receipt for what this client just wrote
// (the answer of a creation, a small write, a chunk write) in the book:
// the client presents it to the other replicas it reads from and to the
// meta node with the keys it records (Receipts).
func (c *Client) keepReceipt(tok []byte) {
	switch {
	case len(tok) == 0:
	case c.opts.Receipts != nil:
		c.opts.Receipts.Add(tok)
	case c.opts.Grants != nil:
		c.opts.Grants.Add(tok)
	}
}

// find returns the token, a grant or a receipt, that grants mode on
// [off, off+n) of extent (pid, ext), or nil.
func (c *Client) find(pid, ext uint64, off int64, n int, mode grant.Mode) *grant.Token {
	now := time.Now()
	if t := c.opts.Grants.Find(pid, ext, uint64(off), uint64(n), mode, now); t != nil {
		return t
	}
	if c.opts.Receipts != nil {
		return c.opts.Receipts.Find(pid, ext, uint64(off), uint64(n), mode, now)
	}
	return nil
}

type inodeKey struct{}

// WithInode returns ctx for I/O of inode ino: a data node's refusal for
// want of a grant is then answered by fetching the inode again
// (Options.Regrant). Without it, such a refusal fails the call (EACCES).
func WithInode(ctx context.Context, ino uint64) context.Context {
	return context.WithValue(ctx, inodeKey{}, ino)
}

// InodeOf is the inode WithInode put in ctx, or 0.
func InodeOf(ctx context.Context) uint64 {
	ino, _ := ctx.Value(inodeKey{}).(uint64)
	return ino
}

// presented remembers which tokens each data node has been sent, by
// address. Bounded: past maxPresented tokens for a node, it starts over
// (at worst a token is sent twice).
type presented struct {
	mu   sync.Mutex
	sent map[string]map[*grant.Token]struct{}
}

const maxPresented = 1 << 16

// mark records tok as sent to addr and reports whether it was new.
func (p *presented) mark(addr string, tok *grant.Token) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sent == nil {
		p.sent = map[string]map[*grant.Token]struct{}{}
	}
	m := p.sent[addr]
	if m == nil || len(m) >= maxPresented {
		m = map[*grant.Token]struct{}{}
		p.sent[addr] = m
	}
	if _, ok := m[tok]; ok {
		return false
	}
	m[tok] = struct{}{}
	return true
}

func (p *presented) forget(addr string, tok *grant.Token) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sent[addr], tok)
}

// grantRetries bounds the attempts of a request a data node refuses for
// want of a grant: present the token again, then fetch the inode again,
// waiting a little longer each time from the third on (a data node or meta
// node that just restarted learns the grant keys with its first heartbeat,
// a second later).
const grantRetries = 6

// withGrant runs do, a request for mode on [off, off+n) of extent ext of
// partition pid on conn, after presenting the token that grants it, and
// handles a refusal for want of a grant as the package comment says. A
// read (inline) carries the token itself: do gets it, to send as the
// read's payload with dataproto.FlagGrant, and nil when the node has it.
// Other requests are preceded by an OpGrant and do gets nil.
func (c *Client) withGrant(ctx context.Context, conn *dataproto.Conn, pid, ext uint64, off int64, n int, mode grant.Mode, inline bool, do func(tok []byte) error) error {
	if c.opts.Grants == nil {
		return do(nil)
	}
	for attempt := 0; ; attempt++ {
		tok := c.find(pid, ext, off, n, mode)
		var carry []byte
		if tok != nil && c.presented.mark(conn.Addr(), tok) {
			c.grantsPresented.Add(1)
			if inline {
				carry = tok.Bytes
			} else if _, err := conn.Start(ctx, &dataproto.Request{Header: dataproto.Header{Op: dataproto.OpGrant}, Payload: tok.Bytes}); err != nil {
				// Not waited for: the node handles it before the
				// request behind it, and the request's own answer says
				// whether it took.
				c.presented.forget(conn.Addr(), tok)
				return err
			}
		}
		err := do(carry)
		if dataproto.CodeOf(err) != dataproto.CodeNoGrant || attempt+1 >= grantRetries || ctx.Err() != nil {
			return err
		}
		if tok != nil {
			c.presented.forget(conn.Addr(), tok)
			if attempt == 0 {
				continue // the node forgot it: present it again
			}
		}
		if attempt >= 2 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(min(100*time.Millisecond<<(attempt-2), time.Second)):
			}
		}
		ino := InodeOf(ctx)
		if ino == 0 || c.opts.Regrant == nil {
			if tok == nil {
				return err // nothing to present, no way to get it
			}
			continue
		}
		if rerr := c.opts.Regrant(ctx, ino, mode == grant.Write); rerr != nil {
			return err
		}
		c.regrants.Add(1)
	}
}
