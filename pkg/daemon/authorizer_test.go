package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/metapb"
	"github.com/cairnfs/cairn/pkg/pki"
)

// peerCtx is the context of a call whose caller presented cert.
func peerCtx(cert *x509.Certificate) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}})
}

// TestAuthorizer: every call is checked against the revocation list and
// carries the caller's capabilities; a certificate whose capabilities
// cannot be read is refused rather than taken as unrestricted.
func TestAuthorizer(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca")
	must(t, pki.CreateCA(ca, "test"))
	sign := func(name string, kind pki.Kind, ext ...pkix.Extension) *x509.Certificate {
		is, err := pki.Sign(ca, pki.Request{Name: name, Kind: kind, Extensions: ext})
		must(t, err)
		return is.Cert
	}
	roExt, err := capability.Caps{Volume: "v", VolumeID: 4, ReadOnly: true}.Extension()
	must(t, err)
	bad := pkix.Extension{Id: capability.OID, Value: []byte("{")}
	ro := sign("reader", pki.KindClient, roExt)
	plain := sign("app", pki.KindClient)
	garbled := sign("garbled", pki.KindClient, bad)
	gone := sign("gone", pki.KindClient)
	node := sign("node", pki.KindNode)

	self, err := pki.Load(issueInto(t, ca))
	must(t, err)
	self.SetRevoked(func(s string) bool { return s == pki.Serial(gone) })
	a := newAuthorizer(self, 2)
	txn := metapb.MetaNode_Txn_FullMethodName
	for _, tc := range []struct {
		name     string
		cert     *x509.Certificate
		method   string
		code     codes.Code
		readOnly bool
	}{
		{"read-only client", ro, txn, codes.OK, true},
		{"unrestricted client", plain, txn, codes.OK, false},
		{"unreadable capabilities", garbled, txn, codes.PermissionDenied, false},
		{"revoked", gone, txn, codes.Unauthenticated, false},
		{"client on a node-only method", plain, "/cairn.multiraft.Transport/Deliver", codes.PermissionDenied, false},
		{"node", node, "/cairn.multiraft.Transport/Deliver", codes.OK, false},
		{"no certificate", nil, txn, codes.PermissionDenied, false},
	} {
		ctx := context.Background()
		if tc.cert != nil {
			ctx = peerCtx(tc.cert)
		}
		got, release, err := a.check(ctx, tc.method)
		if err == nil {
			release()
		}
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
			continue
		}
		if err == nil && capability.FromContext(got).ReadOnly != tc.readOnly {
			t.Errorf("%s: capabilities in the context %+v", tc.name, capability.FromContext(got))
		}
	}
}

func issueInto(t *testing.T, ca string) string {
	dir := filepath.Join(t.TempDir(), "self")
	must(t, pki.Issue(ca, dir, pki.Request{Name: "self", Kind: pki.KindNode}))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestClientCallBound: one client identity has at most maxClientCalls
// calls in flight, over all its connections; a node is not bounded; a call
// that ends gives its place back.
func TestClientCallBound(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca")
	must(t, pki.CreateCA(ca, "test"))
	sign := func(name string, kind pki.Kind) *x509.Certificate {
		is, err := pki.Sign(ca, pki.Request{Name: name, Kind: kind})
		must(t, err)
		return is.Cert
	}
	app, other, node := sign("app", pki.KindClient), sign("other", pki.KindClient), sign("node", pki.KindNode)
	a := newAuthorizer(nil, 2)
	admit := func(c *x509.Certificate) (func(), error) {
		return a.admit(pki.KindOf(c), pki.Serial(c), c.Subject.CommonName)
	}
	r1, err := admit(app)
	must(t, err)
	_, err = admit(app)
	must(t, err)
	if _, err := admit(app); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third call of one client: %v, want ResourceExhausted", err)
	}
	if _, err := admit(other); err != nil {
		t.Fatalf("another client is bounded by the first's calls: %v", err)
	}
	for i := 0; i < 10; i++ {
		if _, err := admit(node); err != nil {
			t.Fatalf("a node's call %d: %v", i, err)
		}
	}
	r1()
	if _, err := admit(app); err != nil {
		t.Fatalf("after one call ended: %v", err)
	}
}

// TestRecover: a handler's panic becomes an INTERNAL answer naming the
// method; the caller's goroutine (the server's) goes on.
func TestRecover(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/cairn.meta.MetaNode/Txn"}
	_, err := recoverUnary(context.Background(), nil, info, func(context.Context, any) (any, error) {
		var in *struct{ n int }
		return in.n, nil // a nil dereference: the kind of bug a hostile request finds
	})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "Txn") {
		t.Fatalf("panicking handler: %v", err)
	}
	resp, err := recoverUnary(context.Background(), nil, info, func(context.Context, any) (any, error) { return "ok", nil })
	if err != nil || resp != "ok" {
		t.Fatalf("a handler that does not panic: %v, %v", resp, err)
	}
}
