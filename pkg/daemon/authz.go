package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/capability"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

// Which kinds of certificate (pkg/pki) may call which RPC methods, on a
// server that runs with TLS. Methods are matched by full name, then by
// service ("/pkg.Service/"); a method in neither is open to nodes and
// admins only, so that a new internal method is closed to clients until it
// is listed.
var (
	anyone    = []pki.Kind{pki.KindNode, pki.KindClient, pki.KindAdmin}
	nodes     = []pki.Kind{pki.KindNode}
	admins    = []pki.Kind{pki.KindAdmin}
	internal  = []pki.Kind{pki.KindNode, pki.KindAdmin}
	rpcPolicy = map[string][]pki.Kind{
		// Masters: nodes register and beat; admins change the cluster;
		// everyone reads the map and reports dead peers.
		pb.Master_Register_FullMethodName:         nodes,
		pb.Master_Heartbeat_FullMethodName:        nodes,
		pb.Master_CreateVolume_FullMethodName:     admins,
		pb.Master_DeleteVolume_FullMethodName:     admins,
		pb.Master_DecommissionNode_FullMethodName: admins,
		pb.Master_CreateClient_FullMethodName:     admins,
		pb.Master_ListClients_FullMethodName:      admins,
		pb.Master_Revoke_FullMethodName:           admins,
		pb.Master_SetQuota_FullMethodName:         admins,
		pb.Master_RemoveQuota_FullMethodName:      admins,
		"/cairn.cluster.Master/":                  anyone,
		// Meta nodes: the file system's requests come from clients and, as
		// follow-ups, from other meta nodes; whole-partition scans serve
		// fsck, gc and the master. Statistics serve them too, and a
		// client's statfs (df): the meta node answers a client counts of
		// its own volume only, never names.
		metapb.MetaNode_Scan_FullMethodName:           internal,
		metapb.MetaNode_PartitionStats_FullMethodName: anyone,
		"/cairn.meta.MetaNode/":                       anyone,
		// Raft between cluster processes.
		"/cairn.multiraft.Transport/": nodes,
		"/grpc.health.v1.Health/":     anyone,
	}
)

// Authorize reports whether a peer holding a certificate of kind may call
// method (a gRPC full method name): nil, or a PermissionDenied status that
// names both.
func Authorize(method string, kind pki.Kind) error {
	allowed, ok := rpcPolicy[method]
	if !ok {
		if i := strings.LastIndexByte(method, '/'); i > 0 {
			allowed, ok = rpcPolicy[method[:i+1]]
		}
	}
	if !ok {
		allowed = internal
	}
	if slices.Contains(allowed, kind) {
		return nil
	}
	if kind == "" {
		kind = "no kind"
	}
	return status.Errorf(codes.PermissionDenied, "%s: a certificate of kind %q may not call it", method, kind)
}

// PeerCert is the certificate the caller of ctx presented, or nil.
func PeerCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil
	}
	return info.State.PeerCertificates[0]
}

// PeerKind is the kind of the certificate the caller of ctx presented, or
// "" when there is none (a server in plain text).
func PeerKind(ctx context.Context) pki.Kind {
	if c := PeerCert(ctx); c != nil {
		return pki.KindOf(c)
	}
	return ""
}

// authorizer checks every call of a TLS server: the caller's kind against
// the policy, its certificate against the revocation list (on every call,
// not only at the handshake, so that a revocation also ends the
// connections already open), and puts the caller's capabilities in the
// call's context (capability.FromContext).
type authorizer struct {
	id *pki.Identity
	// maxClientCalls bounds the calls in flight from one client identity
	// (by certificate serial), whatever number of connections it opens:
	// past it a call is refused with RESOURCE_EXHAUSTED, which clients
	// retry after a pause. Nodes and admins are not bounded here.
	maxClientCalls int

	mu       sync.Mutex
	caps     map[string]capability.Caps // by serial; certificates do not change
	inflight map[string]int             // client calls in flight, by serial
}

// MaxClientCalls is the default bound of one client identity's calls in
// flight on one server: well above what a mount keeps in flight (its
// fan-out is 64 per operation), far below what would exhaust a node.
const MaxClientCalls = 1024

func newAuthorizer(id *pki.Identity, maxClientCalls int) *authorizer {
	return &authorizer{id: id, maxClientCalls: maxClientCalls, caps: map[string]capability.Caps{}, inflight: map[string]int{}}
}

// maxCachedCaps bounds the cache of parsed capabilities; it is cleared
// when full.
const maxCachedCaps = 4096

// admit counts a call in flight of a client's certificate (by serial;
// name for the message); release uncounts it. Other kinds are not counted.
func (a *authorizer) admit(kind pki.Kind, serial, name string) (release func(), err error) {
	if kind != pki.KindClient || a.maxClientCalls <= 0 {
		return noRelease, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight[serial] >= a.maxClientCalls {
		return nil, status.Errorf(codes.ResourceExhausted, "client %q has %d calls in flight here, the most one client may", name, a.maxClientCalls)
	}
	a.inflight[serial]++
	return func() {
		a.mu.Lock()
		if a.inflight[serial]--; a.inflight[serial] == 0 {
			delete(a.inflight, serial)
		}
		a.mu.Unlock()
	}, nil
}

// noRelease is the release of a call not counted.
func noRelease() {}

// check authorizes a call to method and admits it; the caller runs
// release when the call ends.
func (a *authorizer) check(ctx context.Context, method string) (_ context.Context, release func(), err error) {
	cert := PeerCert(ctx)
	if cert == nil {
		return ctx, noRelease, Authorize(method, "")
	}
	kind := pki.KindOf(cert)
	if err := Authorize(method, kind); err != nil {
		return ctx, nil, err
	}
	serial := pki.Serial(cert) // once per call: it formats a big number
	if a.id.RevokedSerial(serial) {
		return ctx, nil, status.Errorf(codes.Unauthenticated, "the certificate %q (serial %s) is revoked", cert.Subject.CommonName, serial)
	}
	c, err := a.capsOf(serial, cert)
	if err != nil {
		return ctx, nil, status.Error(codes.PermissionDenied, err.Error())
	}
	if release, err = a.admit(kind, serial, cert.Subject.CommonName); err != nil {
		return ctx, nil, err
	}
	if c.Restricted() {
		ctx = capability.NewContext(ctx, c)
	}
	return ctx, release, nil
}

func (a *authorizer) capsOf(serial string, cert *x509.Certificate) (capability.Caps, error) {
	a.mu.Lock()
	c, ok := a.caps[serial]
	a.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := capability.FromCert(cert)
	if err != nil {
		return c, err
	}
	a.mu.Lock()
	if len(a.caps) >= maxCachedCaps {
		clear(a.caps)
	}
	a.caps[serial] = c
	a.mu.Unlock()
	return c, nil
}

func (a *authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, release, err := a.check(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	defer release()
	return handler(ctx, req)
}

func (a *authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, release, err := a.check(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	defer release()
	return handler(srv, &ctxStream{ss, ctx})
}

// ctxStream is a server stream with the context the authorizer made.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// handshakenCreds are the gRPC server credentials of a port whose listener
// already ran the TLS handshake (ListenRPC): they add nothing to the
// connection, and report its TLS state as the peer's AuthInfo.
type handshakenCreds struct {
	credentials.TransportCredentials
}

func newHandshakenCreds() credentials.TransportCredentials {
	return handshakenCreds{insecure.NewCredentials()}
}

func (c handshakenCreds) ServerHandshake(nc net.Conn) (net.Conn, credentials.AuthInfo, error) {
	for inner := nc; inner != nil; {
		if tc, ok := inner.(*tls.Conn); ok {
			return nc, credentials.TLSInfo{State: tc.ConnectionState(),
				CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
		}
		u, ok := inner.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		inner = u.Unwrap()
	}
	return c.TransportCredentials.ServerHandshake(nc)
}

func (c handshakenCreds) Clone() credentials.TransportCredentials {
	return handshakenCreds{c.TransportCredentials.Clone()}
}
