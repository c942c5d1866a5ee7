package datanode

import (
	"crypto/x509"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/dataproto"
	"github.com/cairnfs/cairn/pkg/pki"
)

// A data-path connection's certificate decides what it may do: a node's
// anything (forwarded writes along a chain included), an admin's any read
// and write of the partitions, a client's what its capabilities
// (pkg/capability) and its grants (grants.go) allow.

func (h *Host) newSession(peer *x509.Certificate) dataproto.Session {
	s := h.session(peer)
	if s == nil {
		return nil // an untyped nil: the server closes the connection
	}
	return s
}

// session is newSession's session, or nil when the connection's client
// has MaxClientConns connections here already.
func (h *Host) session(peer *x509.Certificate) *session {
	s := &session{h: h, down: map[string]*downConn{}, forwarder: peer == nil || pki.KindOf(peer) == pki.KindNode}
	if peer != nil {
		s.serial = pki.Serial(peer)
		s.caps, s.denied = capability.FromCert(peer)
		if s.denied == nil && pki.KindOf(peer) == pki.KindClient {
			if h.countConn(s.serial, 1) > MaxClientConns {
				h.countConn(s.serial, -1)
				h.log.Warn("data path: connection refused: the client has too many", "client", peer.Subject.CommonName, "bound", MaxClientConns)
				return nil
			}
			s.counted = true
		}
		if s.denied == nil && pki.KindOf(peer) == pki.KindClient {
			s.spans = h.grants.spans(s.serial)
		}
	}
	return s
}

// countConn adds delta to the connections of client serial and returns
// the new count.
func (h *Host) countConn(serial string, delta int) int {
	h.connMu.Lock()
	defer h.connMu.Unlock()
	n := h.clientConns[serial] + delta
	if n <= 0 {
		delete(h.clientConns, serial)
	} else {
		h.clientConns[serial] = n
	}
	return n
}

// permit checks a request against the connection's certificate: not
// revoked, its volume, and writes from a read-only client. It answers a
// refused request itself and reports whether the request may go on.
func (s *session) permit(in *dataproto.Inbound) bool {
	refuse := func(code dataproto.Code, format string, args ...any) bool {
		in.Release()
		s.begin(in).fail(code, format, args...)
		return false
	}
	h := in.Header
	switch {
	case s.serial == "":
		return true // plain text: the cluster runs with --insecure
	case s.denied != nil:
		return refuse(dataproto.CodePermissionDenied, "%v", s.denied)
	case s.h.env.Revoked != nil && s.h.env.Revoked(s.serial):
		return refuse(dataproto.CodePermissionDenied, "the connection's certificate (serial %s) is revoked", s.serial)
	}
	if code, msg, ok := s.granted(&h); !ok {
		return refuse(code, "%s", msg)
	}
	if !s.caps.Restricted() || h.Op == dataproto.OpPing {
		return true
	}
	if p := s.h.partition(h.Partition); p != nil && !s.caps.AllowsVolume(p.volume) {
		return refuse(dataproto.CodePermissionDenied, "data partition %d is not in volume %q, the only one this client may use", h.Partition, s.caps.Volume)
	}
	if s.caps.ReadOnly {
		switch h.Op {
		case dataproto.OpRead, dataproto.OpGrant, dataproto.OpListExtents, dataproto.OpChecksums:
		default:
			return refuse(dataproto.CodeReadOnlyClient, "%v: this client is read-only", h.Op)
		}
	}
	return true
}
