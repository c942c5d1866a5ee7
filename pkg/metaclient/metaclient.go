// Package metaclient calls the leaders of meta partitions. It remembers each
// partition's leader, starts there, follows redirects, and moves on to the other
// replicas when a node is unreachable, until the caller's deadline.
//
// A Txn retried after an ambiguous failure (the leader died after the proposal)
// may find its own effect: a create then answers EEXIST. Callers that need
// exactly-once semantics make their Txns idempotent.
package metaclient

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/redirect"
)

// Client is safe for concurrent use.
type Client struct {
	pool    *redirect.Pool
	resolve func(node uint64) (string, bool)

	// origin is the session the Txns and path requests of this client
	// carry (metapb.Txn.origin); 0 for a meta node's own client, whose
	// follow-ups carry their request's origin.
	origin uint64

	// grants, if set, receives the extent grants of every answer
	// (SetGrants); receipts, if set, proves the data references of a
	// client's Txn (SetReceipts).
	grants   func(token []byte)
	receipts func(txn *metapb.Txn) [][]byte

	mu      sync.Mutex
	leaders map[uint64]string // partition -> address of its last known leader
}

// SetGrants makes every answer's extent grants (the grants field of the
// meta node's responses, pkg/grant) go to add. Call it before the client
// is used.
func (c *Client) SetGrants(add func(token []byte)) { c.grants = add }

// SetReceipts makes every Txn this client sends (follow-ups aside) carry
// the tokens receipts returns for it (TxnRequest.receipts): the proof that
// the client wrote, or may write, the ranges its extent keys and chunks
// name. Call it before the client is used.
func (c *Client) SetReceipts(receipts func(txn *metapb.Txn) [][]byte) { c.receipts = receipts }

func (c *Client) receiptsFor(txn *metapb.Txn) [][]byte {
	if c.receipts == nil {
		return nil
	}
	return c.receipts(txn)
}

// granted is what answers with extent grants have in common.
type granted interface{ GetGrants() [][]byte }

// grantTaker passes the grants of every answer to take: the meta node adds
// them to whatever call carries inodes, so no caller needs to know.
type grantTaker struct {
	grpc.ClientConnInterface
	take func(token []byte)
}

func (g grantTaker) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	err := g.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	if r, ok := reply.(granted); ok && err == nil {
		for _, t := range r.GetGrants() {
			g.take(t)
		}
	}
	return err
}

// SetOrigin makes every Txn and path request this client sends carry
// session origin (metapb.Txn.origin) unless it carries one already. Call
// it before the client is used.
func (c *Client) SetOrigin(origin uint64) { c.origin = origin }

func (c *Client) stamp(txn *metapb.Txn) {
	if c.origin != 0 && txn != nil && txn.Origin == 0 {
		txn.Origin = c.origin
	}
}

// New returns a client that reaches nodes through pool and finds node addresses
// with resolve.
func New(pool *redirect.Pool, resolve func(node uint64) (string, bool)) *Client {
	return &Client{pool: pool, resolve: resolve, leaders: map[uint64]string{}}
}

// candidates lists where to call for p: its last known leader, then its
// replicas in the map's order.
func (c *Client) candidates(p *pb.Partition) []string {
	c.mu.Lock()
	leader := c.leaders[p.Id]
	c.mu.Unlock()
	out := make([]string, 0, len(p.Replicas)+1)
	if leader != "" {
		out = append(out, leader)
	}
	for _, r := range p.Replicas {
		if a, ok := c.resolve(r); ok && a != leader {
			out = append(out, a)
		}
	}
	return out
}

// Call runs fn against p's leader.
func (c *Client) Call(ctx context.Context, p *pb.Partition, fn func(ctx context.Context, m metapb.MetaNodeClient, opts ...grpc.CallOption) error) error {
	addr, err := redirect.CallReplicas(ctx, c.pool, c.candidates(p), func(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error {
		if c.grants != nil {
			cc = grantTaker{cc, c.grants}
		}
		return fn(ctx, metapb.NewMetaNodeClient(cc), opts...)
	})
	if err != nil {
		return fmt.Errorf("meta partition %d: %w", p.Id, err)
	}
	c.mu.Lock()
	c.leaders[p.Id] = addr
	c.mu.Unlock()
	return nil
}

// Leader returns the address that last answered for partition id.
func (c *Client) Leader(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaders[id]
}

// Txn applies txn on p and returns its result (whose errno may be non-zero).
func (c *Client) Txn(ctx context.Context, p *pb.Partition, txn *metapb.Txn) (*metapb.TxnResult, error) {
	var resp *metapb.TxnResponse
	c.stamp(txn)
	cred, receipts := CredOf(ctx), c.receiptsFor(txn)
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Txn(ctx, &metapb.TxnRequest{PartitionId: p.Id, Txn: txn, Cred: cred, Receipts: receipts}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Result, nil
}

// TxnThen is Txn with then, the request's steps on other partitions,
// which p's partition sends after the Txn applied (TxnRequest.then). It
// returns the Txn's result and the partition's report of each group of
// steps; no groups means the partition ran none.
func (c *Client) TxnThen(ctx context.Context, p *pb.Partition, txn *metapb.Txn, then []*metapb.HomedOp) (*metapb.TxnResult, []*metapb.ThenGroup, error) {
	var resp *metapb.TxnResponse
	c.stamp(txn)
	cred, receipts := CredOf(ctx), c.receiptsFor(txn)
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Txn(ctx, &metapb.TxnRequest{PartitionId: p.Id, Txn: txn, Cred: cred, Then: then, Receipts: receipts}, o...)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return resp.Result, resp.Then, nil
}

type credKey struct{}

// WithCred returns ctx whose Txns carry cred, the identity of the caller
// the client acts for (TxnRequest.cred).
func WithCred(ctx context.Context, cred *metapb.Cred) context.Context {
	return context.WithValue(ctx, credKey{}, cred)
}

// CredOf is the cred WithCred put in ctx, or nil.
func CredOf(ctx context.Context) *metapb.Cred {
	c, _ := ctx.Value(credKey{}).(*metapb.Cred)
	return c
}

// FollowUpTxn is Txn for a meta node finishing a client's request on
// another partition (TxnRequest.follow_up): the partition does not count
// it as a client request.
func (c *Client) FollowUpTxn(ctx context.Context, p *pb.Partition, txn *metapb.Txn) (*metapb.TxnResult, error) {
	var resp *metapb.TxnResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Txn(ctx, &metapb.TxnRequest{PartitionId: p.Id, Txn: txn, FollowUp: true}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Result, nil
}

// Lookup finds (parent, name) on p.
func (c *Client) Lookup(ctx context.Context, p *pb.Partition, parent uint64, name string) (*metapb.LookupResponse, error) {
	var resp *metapb.LookupResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Lookup(ctx, &metapb.LookupRequest{PartitionId: p.Id, Parent: parent, Name: []byte(name)}, o...)
		return err
	})
	return resp, err
}

// GetInode reads inode ino from its home partition p.
func (c *Client) GetInode(ctx context.Context, p *pb.Partition, ino uint64) (*metapb.GetInodeResponse, error) {
	return c.GetInodeFor(ctx, p, ino, 0)
}

// GetInodeFor is GetInode for a caller about to access the inode (4 read,
// 2 write, 1 exec: GetInodeRequest.access), with the cred of ctx
// (WithCred).
func (c *Client) GetInodeFor(ctx context.Context, p *pb.Partition, ino uint64, access uint32) (*metapb.GetInodeResponse, error) {
	var resp *metapb.GetInodeResponse
	req := &metapb.GetInodeRequest{PartitionId: p.Id, Ino: ino, Access: access}
	if access != 0 {
		req.Cred = CredOf(ctx)
	}
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetInode(ctx, req, o...)
		return err
	})
	return resp, err
}

// FetchDentry is Lookup as a namespace replica's fetch
// (LookupRequest.ns_fetch): EBUSY while the named inode is fenced on p.
func (c *Client) FetchDentry(ctx context.Context, p *pb.Partition, parent uint64, name string) (*metapb.LookupResponse, error) {
	var resp *metapb.LookupResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Lookup(ctx, &metapb.LookupRequest{PartitionId: p.Id, Parent: parent, Name: []byte(name), NsFetch: true}, o...)
		return err
	})
	return resp, err
}

// FetchPending is FetchDentry that answers a rename's pending new name as
// it is, with its mark, instead of EMOVING (LookupRequest.pending).
func (c *Client) FetchPending(ctx context.Context, p *pb.Partition, parent uint64, name string) (*metapb.LookupResponse, error) {
	var resp *metapb.LookupResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Lookup(ctx, &metapb.LookupRequest{PartitionId: p.Id, Parent: parent, Name: []byte(name), NsFetch: true, Pending: true}, o...)
		return err
	})
	return resp, err
}

// FetchInode is GetInode as a namespace replica's fetch: EBUSY while ino
// is fenced on p.
func (c *Client) FetchInode(ctx context.Context, p *pb.Partition, ino uint64) (*metapb.GetInodeResponse, error) {
	var resp *metapb.GetInodeResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.GetInode(ctx, &metapb.GetInodeRequest{PartitionId: p.Id, Ino: ino, NsFetch: true}, o...)
		return err
	})
	return resp, err
}

// Path runs a path operation on p (the partition the last name routes to).
func (c *Client) Path(ctx context.Context, p *pb.Partition, req *metapb.PathRequest) (*metapb.PathResponse, error) {
	var resp *metapb.PathResponse
	req.PartitionId = p.Id
	if req.Origin == 0 {
		req.Origin = c.origin
	}
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Path(ctx, req, o...)
		return err
	})
	return resp, err
}

// ReadDir lists p's share of directory parent after the name after.
func (c *Client) ReadDir(ctx context.Context, p *pb.Partition, parent uint64, after string, limit uint32, plus bool) (*metapb.ReadDirResponse, error) {
	var resp *metapb.ReadDirResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.ReadDir(ctx, &metapb.ReadDirRequest{PartitionId: p.Id, Parent: parent, After: []byte(after), Limit: limit, Plus: plus}, o...)
		return err
	})
	return resp, err
}

// Stats returns p's statistics with its k most frequent names (not counting
// countNames) and the exact counts of countNames, in their order.
func (c *Client) Stats(ctx context.Context, p *pb.Partition, k uint32, countNames ...[]byte) (*metapb.PartitionStatsResponse, error) {
	var resp *metapb.PartitionStatsResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.PartitionStats(ctx, &metapb.PartitionStatsRequest{PartitionId: p.Id, TopNames: k, CountNames: countNames}, o...)
		return err
	})
	return resp, err
}

// Scan reads one page of p's records (req.PartitionId is set to p's id). A
// non-zero errno in the reply is returned as a syscall.Errno.
func (c *Client) Scan(ctx context.Context, p *pb.Partition, req *metapb.ScanRequest) (*metapb.ScanResponse, error) {
	req.PartitionId = p.Id
	var resp *metapb.ScanResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Scan(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if e := resp.GetErrno(); e != 0 {
		return nil, fmt.Errorf("partition %d: scan: %w", p.Id, syscall.Errno(e))
	}
	return resp, nil
}

// Changes asks p's leader what sessions other than this client's changed
// after cursor (metapb.ChangesRequest), waiting up to wait for a change.
func (c *Client) Changes(ctx context.Context, p *pb.Partition, cursor uint64, wait time.Duration) (*metapb.ChangesResponse, error) {
	var resp *metapb.ChangesResponse
	err := c.Call(ctx, p, func(ctx context.Context, m metapb.MetaNodeClient, o ...grpc.CallOption) (err error) {
		resp, err = m.Changes(ctx, &metapb.ChangesRequest{PartitionId: p.Id, Cursor: cursor, Origin: c.origin, WaitMs: uint32(wait / time.Millisecond)}, o...)
		return err
	})
	return resp, err
}
