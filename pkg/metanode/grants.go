package metanode

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	sign := func(ino uint64, m grant.Mode, rs []grant.Range) {
		if len(rs) == 0 {
			return
		}
		toks, err := g.h.env.Grants.Sign(grant.Grant{Holder: holder, Volume: p.volume, Ino: ino, Mode: m, Ranges: rs}, GrantTTL, now)
		if err != nil {
			// No key yet (a restart, before the first heartbeat): ask
			// the masters now rather than at the next interval.
			g.h.metrics.grantsUnsigned.Inc()
			if g.h.env.Refresh != nil {
				g.h.env.Refresh()
			}
			return
		}
		g.h.metrics.grants.Add(float64(len(toks)))
		out = append(out, toks...)
	}
	for _, in := range inodes {
		sign(in.GetIno(), mode, extentRanges(in))
		// Chunks are shared by every file whose content has them and
		// never change in place: read only, whatever the file's mode.
		sign(in.GetIno(), grant.Read, chunkRanges(in.GetChunks()))
	}
	return out
}

// extentRanges are the extent ranges of a file's bytes: its extent keys.
func extentRanges(in *metapb.Inode) []grant.Range {
	rs := make([]grant.Range, 0, len(in.GetExtents()))
	for _, k := range in.GetExtents() {
		if k.Size == 0 || k.ExtentOffset+k.Size < k.ExtentOffset {
			continue
		}
		rs = append(rs, grant.Range{Partition: k.PartitionId, Extent: k.ExtentId, Lo: k.ExtentOffset, Hi: k.ExtentOffset + k.Size})
	}
	return rs
}

// chunkRanges are the extent ranges of chunks: a content-defined file's,
// or a chunk index answer's.
func chunkRanges(cs []*metapb.Chunk) []grant.Range {
	rs := make([]grant.Range, 0, len(cs))
	for _, c := range cs {
		if c.GetSize() == 0 || c.GetPartitionId() == 0 || c.ExtentOffset+uint64(c.Size) < c.ExtentOffset {
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
	var chunks []*metapb.Chunk
	for _, r := range resp.Result.Results {
		if r.Inode != nil {
			inodes = append(inodes, r.Inode)
		}
		for _, c := range r.Chunks {
			if c.GetChunk().GetPartitionId() != 0 && !c.GetDead() {
				chunks = append(chunks, c.Chunk)
			}
		}
	}
	if len(inodes) > 0 {
		resp.Grants = g.grants(ctx, req.PartitionId, false, inodes...)
	}
	if len(chunks) > 0 {
		// A chunk index answer: the client may read, and splice into its
		// layouts, the chunks whose fingerprints it knew.
		resp.Grants = append(resp.Grants, g.grants(ctx, req.PartitionId, false, &metapb.Inode{Chunks: chunks})...)
	}
	return resp, err
}

// checkWritten refuses a client's Txn whose data references are not its
// own to store: every extent key of AppendExtents and every chunk location
// it registers (ChunkRefs) must lie in a range one of its write tokens in
// req.receipts names (a data node's receipt for what it wrote, or a write
// grant of a file whose keys it had), every chunk it splices into a
// layout in a range any of its tokens names (a chunk index answer's grant
// of a stored chunk). Without it a client confined to a subtree could
// record another file's extent in a file of its own and be granted that
// extent, within its volume, where checkDataRefs cannot tell whose an
// extent is. EACCES names the first reference without a token. A node
// that has no grant key yet answers UNAVAILABLE (the client retries).
// Callers other than client certificates pass.
func (s *service) checkWritten(ctx context.Context, p *partition, req *metapb.TxnRequest) (*refusal, error) {
	cert := daemon.PeerCert(ctx)
	if cert == nil || pki.KindOf(cert) != pki.KindClient {
		return nil, nil
	}
	refs := slices.Collect(metapb.DataRefs(req.GetTxn()))
	if len(refs) == 0 {
		return nil, nil
	}
	kr := s.h.env.Grants
	if kr == nil || kr.Len() == 0 {
		if s.h.env.Refresh != nil {
			s.h.env.Refresh()
		}
		return nil, status.Errorf(codes.Unavailable, "meta partition %d: no grant key yet to check the Txn's data references; retry", p.id)
	}
	if len(req.Receipts) > maxReceipts {
		return refuse(metapb.EINVAL, "%d receipts, at most %d", len(req.Receipts), maxReceipts), nil
	}
	holder, now := pki.Serial(cert), time.Now()
	held := grant.NewSpans(maxReceipts * grant.MaxRanges)
	for _, tok := range req.Receipts {
		if g, err := kr.Verify(tok, holder, now); err == nil && g.Volume == p.volume {
			held.Add(g)
		}
	}
	for _, r := range refs {
		pid, ext, off, size := r.Range()
		if m := refMode(r.Kind); !held.Allows(pid, ext, off, size, m, now.Unix()) {
			return refuse(metapb.EACCES, "%s names bytes %d..%d of extent %d of data partition %d, which no token of this client grants for %v",
				r.Where(), off, off+size, ext, pid, m), nil
		}
	}
	return nil, nil
}

// refMode is the token mode that lets a client store a reference of kind
// k (metapb.DataRefKind.Own).
func refMode(k metapb.DataRefKind) grant.Mode {
	if k.Own() {
		return grant.Write
	}
	return grant.Read
}

// maxReceipts bounds the tokens of one Txn request: a Txn has at most
// maxOpsPerTxn ops, whose keys rarely come from more than a few hundred
// writes.
const maxReceipts = 4096
