package metanode

import (
	"context"
	"time"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/daemon"
	"github.com/cairnfs/cairn/pkg/grant"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

// GrantTTL is how long an extent grant is valid. A client fetches the
// inode again when a data node refuses an expired one, so the lifetime
// bounds only how long a grant outlives what the client may still do: a
// permission taken away, a certificate's capabilities (a revocation ends
// its connections at once).
const GrantTTL = 10 * time.Minute

// granting is the meta node's service with extent grants (pkg/grant) added
// to every answer that carries inodes, for callers with a client
// certificate: the data nodes serve such a client only the ranges a grant
// names. The answers of a node, an admin or a cluster without TLS carry
// none (data nodes do not ask those for grants).
//
// Every inode an answer carries passed the service's checks for the caller
// (volume, subtree), so what it grants is what the caller may see anyway.
// The mode is read for a read-only client; for a client whose ids are
// mapped (root squash, id maps), whose permissions the meta node checks
// itself, write only on an open checked for writing (GetInode with access
// 2); write for the others, whose own checks (or their kernel's) count for
// everything else too.
type granting struct {
	*service
}

// grants returns the tokens for the inodes of an answer of partition pid,
// for the caller of ctx; mayWrite says whether the answer came from a
// check for writing.
func (g granting) grants(ctx context.Context, pid uint64, mayWrite bool, inodes ...*metapb.Inode) [][]byte {
	cert := daemon.PeerCert(ctx)
	if cert == nil || pki.KindOf(cert) != pki.KindClient || g.h.env.Grants == nil {
		return nil
	}
	p := g.h.partition(pid)
	if p == nil {
		return nil
	}
	caps := capability.FromContext(ctx)
	mode := grant.Write
	if caps.ReadOnly || (caps.MapsIDs() && !mayWrite) {
		mode = grant.Read
	}
	holder := pki.Serial(cert)
	now := time.Now()
	var out [][]byte
	for _, in := range inodes {
		rs := ranges(in)
		if len(rs) == 0 {
			continue
		}
		toks, err := g.h.env.Grants.Sign(grant.Grant{Holder: holder, Volume: p.volume, Ino: in.Ino, Mode: mode, Ranges: rs}, GrantTTL, now)
		if err != nil {
			// No key yet (a restart, before the first heartbeat): ask
			// the masters now rather than at the next interval.
			g.h.metrics.grantsUnsigned.Inc()
			if g.h.env.Refresh != nil {
				g.h.env.Refresh()
			}
			continue
		}
		g.h.metrics.grants.Add(float64(len(toks)))
		out = append(out, toks...)
	}
	return out
}

// ranges are the extent ranges of a file's bytes: its extent keys, or the
// chunks of a content-defined file.
func ranges(in *metapb.Inode) []grant.Range {
	if in == nil || (len(in.Extents) == 0 && len(in.Chunks) == 0) {
		return nil
	}
	rs := make([]grant.Range, 0, len(in.Extents)+len(in.Chunks))
	for _, k := range in.Extents {
		if k.Size == 0 || k.ExtentOffset+k.Size < k.ExtentOffset {
			continue
		}
		rs = append(rs, grant.Range{Partition: k.PartitionId, Extent: k.ExtentId, Lo: k.ExtentOffset, Hi: k.ExtentOffset + k.Size})
	}
	for _, c := range in.Chunks {
		if c.Size == 0 || c.ExtentOffset+uint64(c.Size) < c.ExtentOffset {
			continue
		}
		rs = append(rs, grant.Range{Partition: c.PartitionId, Extent: c.ExtentId, Lo: c.ExtentOffset, Hi: c.ExtentOffset + uint64(c.Size)})
	}
	return rs
}

// Lookup is service.Lookup with the inode's grant.
func (g granting) Lookup(ctx context.Context, req *metapb.LookupRequest) (*metapb.LookupResponse, error) {
	resp, err := g.service.Lookup(ctx, req)
	if err == nil && resp.Inode != nil {
		resp.Grants = g.grants(ctx, req.PartitionId, false, resp.Inode)
	}
	return resp, err
}

// GetInode is service.GetInode with the inode's grant, for writing when
// the caller's open was checked for it.
func (g granting) GetInode(ctx context.Context, req *metapb.GetInodeRequest) (*metapb.GetInodeResponse, error) {
	resp, err := g.service.GetInode(ctx, req)
	if err == nil && resp.Inode != nil {
		resp.Grants = g.grants(ctx, req.PartitionId, req.Access&2 != 0, resp.Inode)
	}
	return resp, err
}

// ReadDir is service.ReadDir with the grants of the inodes it returns.
func (g granting) ReadDir(ctx context.Context, req *metapb.ReadDirRequest) (*metapb.ReadDirResponse, error) {
	resp, err := g.service.ReadDir(ctx, req)
	if err == nil && len(resp.Inodes) > 0 {
		resp.Grants = g.grants(ctx, req.PartitionId, false, resp.Inodes...)
	}
	return resp, err
}

// Path is service.Path with the grant of the inode it returns.
func (g granting) Path(ctx context.Context, req *metapb.PathRequest) (*metapb.PathResponse, error) {
	resp, err := g.service.Path(ctx, req)
	if err == nil && resp.Inode != nil {
		resp.Grants = g.grants(ctx, req.PartitionId, false, resp.Inode)
	}
	return resp, err
}

// Txn is service.Txn with the grants of the inodes its results carry (the
// file a client appended to, say).
func (g granting) Txn(ctx context.Context, req *metapb.TxnRequest) (*metapb.TxnResponse, error) {
	resp, err := g.service.Txn(ctx, req)
	if err != nil || resp.GetResult().GetErrno() != 0 {
		return resp, err
	}
	var inodes []*metapb.Inode
	for _, r := range resp.Result.Results {
		if r.Inode != nil {
			inodes = append(inodes, r.Inode)
		}
	}
	if len(inodes) > 0 {
		resp.Grants = g.grants(ctx, req.PartitionId, false, inodes...)
	}
	return resp, err
}
