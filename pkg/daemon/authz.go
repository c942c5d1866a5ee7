package daemon

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

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
		"/cairn.cluster.Master/":                  anyone,
		// Meta nodes: the file system's requests come from clients and, as
		// follow-ups, from other meta nodes; whole-partition scans and
		// statistics serve fsck, gc and the master.
		metapb.MetaNode_Scan_FullMethodName:           internal,
		metapb.MetaNode_PartitionStats_FullMethodName: internal,
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

// peerKind is the kind of the certificate the caller of ctx presented, or
// "" when there is none.
func peerKind(ctx context.Context) pki.Kind {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	return pki.KindOf(info.State.PeerCertificates[0])
}

// authorizeUnary checks every unary call against the policy.
func authorizeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := Authorize(info.FullMethod, peerKind(ctx)); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// authorizeStream checks every streaming call against the policy.
func authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := Authorize(info.FullMethod, peerKind(ss.Context())); err != nil {
		return err
	}
	return handler(srv, ss)
}

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
