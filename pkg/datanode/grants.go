package datanode

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/grant"
)

// A data node cannot tell which file an extent belongs to; the meta nodes
// can. So a connection authenticated with a client certificate is served
// only what the grants it presented name (pkg/grant, OpGrant), and what
// its certificate wrote itself: a new extent it created (to append to),
// a small file or a chunk it stored (to read back or free). Listings and
// checksums, which reveal every extent, are for nodes and admins only.
// Node and admin certificates, and a cluster without TLS, need no grant.

// Bounds of what a data node remembers per client certificate.
const (
	// maxSpans bounds the ranges one certificate may use here; past it the
	// certificate starts over with none, and its client presents its
	// tokens again when refused (CodeNoGrant).
	maxSpans = 1 << 16
	// maxHolders bounds the certificates remembered; past it the one
	// picked first in the map's order is forgotten (its client presents
	// its tokens again).
	maxHolders = 4096
	// ownFor is how long a certificate may append to, read and free what
	// it wrote itself without a grant, and how long its receipt is valid:
	// a writer appends to its extent for as long as the file stays open,
	// and the meta node grants the bytes once they are in the file. At
	// most the time a grant key verifies after it stopped signing
	// (clustermap.MaxGrantKeys-1 key periods, 12 hours), so that a receipt
	// never outlives its key.
	ownFor = 12 * time.Hour
)

// grantStore is the ranges each client certificate may use on this node,
// by serial. Spans are per certificate, not per connection, so a token is
// presented once per data node whichever connection of a client's pool
// carries the next request.
type grantStore struct {
	mu      sync.Mutex
	holders map[string]*grant.Spans
}

func (g *grantStore) spans(serial string) *grant.Spans {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holders == nil {
		g.holders = map[string]*grant.Spans{}
	}
	sp := g.holders[serial]
	if sp == nil {
		if len(g.holders) >= maxHolders {
			for k := range g.holders {
				delete(g.holders, k)
				break
			}
		}
		sp = grant.NewSpans(maxSpans)
		g.holders[serial] = sp
	}
	return sp
}

// presentGrant handles OpGrant: it verifies the token for the connection's
// certificate and records its ranges. It runs on the reader goroutine, so
// the request after it sees the ranges.
func (s *session) presentGrant(in *dataproto.Inbound) {
	r := s.begin(in)
	defer in.Release()
	if code, msg := s.addGrant(in.Payload); code != dataproto.CodeOK {
		r.fail(code, "%s", msg)
		return
	}
	r.ok(dataproto.Header{}, nil)
}

// takeGrant takes the grant a read carries (FlagGrant) before the read is
// checked. On refusal it answers the read and returns false.
func (s *session) takeGrant(in *dataproto.Inbound) bool {
	code, msg := s.addGrant(in.Payload)
	in.Release()
	if code != dataproto.CodeOK {
		s.begin(in).fail(code, "%s", msg)
		return false
	}
	return true
}

// addGrant verifies tok for the connection's certificate and records its
// ranges; it returns the code and reason of a refusal (CodeNoGrant for one
// that may pass later: expired, or a key this node has not heard of yet).
func (s *session) addGrant(tok []byte) (dataproto.Code, string) {
	if s.spans == nil {
		return dataproto.CodeOK, "" // no grant needed on this connection
	}
	if s.h.env.Grants == nil {
		return dataproto.CodeNoGrant, "this data node has no grant keys"
	}
	g, err := s.h.env.Grants.Verify(tok, s.serial, time.Now())
	switch {
	case err == nil:
	case isRetryableGrantErr(err):
		s.h.m.grantsRefused.Inc()
		return dataproto.CodeNoGrant, err.Error()
	default:
		s.h.m.grantsRefused.Inc()
		return dataproto.CodePermissionDenied, err.Error()
	}
	if !s.caps.AllowsVolume(g.Volume) {
		s.h.m.grantsRefused.Inc()
		return dataproto.CodePermissionDenied, fmt.Sprintf("the grant is for volume %d, not this client's", g.Volume)
	}
	s.spans.Add(g)
	s.h.m.grantsAccepted.Inc()
	return dataproto.CodeOK, ""
}

// isRetryableGrantErr reports whether a token refused with err may pass
// once the client has a fresh one (expired) or this node has heard of its
// key.
func isRetryableGrantErr(err error) bool {
	return errors.Is(err, grant.ErrExpired) || errors.Is(err, grant.ErrUnknownKey)
}

// granted checks a client's request against what its certificate may use
// here; ok for requests that need no grant. On refusal it returns the code
// and the reason.
func (s *session) granted(h *dataproto.Header) (dataproto.Code, string, bool) {
	if s.spans == nil || h.Flags&dataproto.FlagForwarded != 0 {
		return 0, "", true
	}
	now := time.Now().Unix()
	allows := func(off, n uint64, m grant.Mode) bool {
		return s.spans.Allows(h.Partition, h.Extent, off, n, m, now)
	}
	switch h.Op {
	case dataproto.OpListExtents, dataproto.OpChecksums:
		return dataproto.CodePermissionDenied, h.Op.String() + ": for cluster nodes and admins only", false
	case dataproto.OpRead:
		if !allows(uint64(h.Offset), h.Arg, grant.Read) {
			return dataproto.CodeNoGrant, "read: no grant of this client names the range", false
		}
	case dataproto.OpOverwrite, dataproto.OpAppend:
		if !allows(uint64(h.Offset), uint64(h.Length), grant.Write) {
			return dataproto.CodeNoGrant, h.Op.String() + ": no grant of this client names the range for writing", false
		}
		if h.Op == dataproto.OpAppend && s.volumeFull(h.Partition) {
			return dataproto.CodeVolumeFull, "the volume's data reached its capacity", false
		}
	case dataproto.OpFree:
		n := h.Arg
		if h.Flags&dataproto.FlagWhole != 0 || n == 0 {
			n = 1 // a whole large extent: the client must hold its start for writing
		}
		if !allows(uint64(h.Offset), n, grant.Write) {
			return dataproto.CodeNoGrant, "free: no grant of this client names the range for writing", false
		}
	case dataproto.OpCreateExtent, dataproto.OpWriteSmall, dataproto.OpWriteChunk:
		if s.volumeFull(h.Partition) {
			return dataproto.CodeVolumeFull, "the volume's data reached its capacity", false
		}
	}
	return 0, "", true
}

// volumeFull reports whether the volume of partition pid reached its
// capacity, as of this node's last heartbeat: new data of clients (new
// extents, small files, chunks, appends) is refused then.
func (s *session) volumeFull(pid uint64) bool {
	p := s.h.partition(pid)
	return p != nil && s.h.env.VolumeFull != nil && s.h.env.VolumeFull(p.volume)
}

// own records that the connection's certificate wrote [lo, hi) of extent
// ext of partition pid itself, and returns its receipt: a token of the
// range for writing, signed like a meta node's grant, which the client
// keeps (nil when none is needed or no key is known yet). The client
// presents it to other replicas of the extent, and to the meta node with
// the extent keys it records (TxnRequest.receipts), which takes no key of
// a range its writer cannot show a token for. Called before the write is
// acknowledged, so that the client's next request finds the range.
func (s *session) own(pid, ext, lo, hi uint64) []byte {
	if s.spans == nil {
		return nil
	}
	now := time.Now()
	s.spans.Own(pid, ext, lo, hi, now.Add(ownFor).Unix())
	p := s.h.partition(pid)
	if p == nil || s.h.env.Grants == nil {
		return nil
	}
	toks, err := s.h.env.Grants.Sign(grant.Grant{Holder: s.serial, Volume: p.volume, Mode: grant.Write,
		Ranges: []grant.Range{{Partition: pid, Extent: ext, Lo: lo, Hi: hi}}}, ownFor, now)
	if err != nil || len(toks) == 0 {
		return nil
	}
	return toks[0]
}

// ownWhole is own for a new large extent: all of it.
func (s *session) ownWhole(pid, ext uint64) []byte { return s.own(pid, ext, 0, math.MaxInt64) }
