package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// cluster creates a CA in a temporary directory and returns it.
func cluster(t *testing.T, name string) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), name)
	if err := CreateCA(ca, name); err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca, name string, kind Kind) *Identity {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := Issue(ca, dir, Request{Name: name, Kind: kind, Hosts: []string{"127.0.0.1", "localhost"}}); err != nil {
		t.Fatal(err)
	}
	id, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// result is what one handshake did: the client's and the server's errors,
// and the name and kind the server saw.
type result struct {
	cerr, serr error
	name       string
	kind       Kind
}

// handshake runs one TLS connection on loopback.
func handshake(t *testing.T, server *tls.Config, client *tls.Config) result {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type served struct {
		err  error
		name string
		kind Kind
	}
	done := make(chan served, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- served{err: err}
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			done <- served{err: err}
			return
		}
		n, k := PeerName(tc.ConnectionState())
		_, err = tc.Write([]byte("ok"))
		done <- served{err: err, name: n, kind: k}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, client)
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	cerr := tc.Handshake()
	if cerr == nil {
		// TLS 1.3 reports a refused client certificate at the first read.
		_, cerr = io.ReadAll(io.LimitReader(tc, 2))
	}
	r := <-done
	return result{cerr: cerr, serr: r.err, name: r.name, kind: r.kind}
}

func TestMutualTLS(t *testing.T) {
	ca := cluster(t, "cluster-a")
	node := issue(t, ca, "node-1", KindNode)
	admin := issue(t, ca, "admin", KindAdmin)
	other := issue(t, cluster(t, "cluster-b"), "intruder", KindAdmin)
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}

	tests := []struct {
		name     string
		server   *tls.Config
		client   *tls.Config
		ok       bool
		wantName string
		wantKind Kind
	}{
		{"same cluster", node.ServerConfig(), admin.ClientConfig(), true, "admin", KindAdmin},
		{"node to node", node.ServerConfig(), node.ClientConfig(), true, "node-1", KindNode},
		{"client of another CA", node.ServerConfig(), other.ClientConfig(), false, "", ""},
		{"server of another CA", other.ServerConfig(), node.ClientConfig(), false, "", ""},
		{"no client certificate", node.ServerConfig(), noCert, false, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := handshake(t, tc.server, tc.client)
			if tc.ok {
				if r.cerr != nil || r.serr != nil {
					t.Fatalf("client: %v, server: %v", r.cerr, r.serr)
				}
				if r.name != tc.wantName || r.kind != tc.wantKind {
					t.Fatalf("server saw %q (%s), want %q (%s)", r.name, r.kind, tc.wantName, tc.wantKind)
				}
				return
			}
			if r.cerr == nil && r.serr == nil {
				t.Fatal("the handshake succeeded")
			}
		})
	}
}

// A certificate reissued in place is used for the next handshake, without
// reloading the process; the CA bundle may hold the old and the new CA.
func TestRotation(t *testing.T) {
	ca := cluster(t, "c")
	node := issue(t, ca, "node-1", KindNode)
	before := node.current().leaf.SerialNumber
	time.Sleep(10 * time.Millisecond) // a later modification time
	if err := Issue(ca, node.Dir(), Request{Name: "node-1b", Kind: KindNode}); err != nil {
		t.Fatal(err)
	}
	node.mu.Lock()
	node.checked = time.Time{} // as if a second had passed
	node.mu.Unlock()
	if after := node.current().leaf.SerialNumber; after.Cmp(before) == 0 {
		t.Fatal("the reissued certificate was not picked up")
	}
	if node.Name() != "node-1b" {
		t.Fatalf("name %q after rotation", node.Name())
	}

	// CA rotation: trust both CAs, then move a peer to the new one.
	ca2 := cluster(t, "c2")
	peer := issue(t, ca2, "peer", KindNode)
	if r := handshake(t, node.ServerConfig(), peer.ClientConfig()); r.cerr == nil && r.serr == nil {
		t.Fatal("a certificate of a CA not yet trusted was accepted")
	}
	a, _ := os.ReadFile(filepath.Join(ca, CAFile))
	b, _ := os.ReadFile(filepath.Join(ca2, CAFile))
	for _, id := range []*Identity{node, peer} {
		time.Sleep(10 * time.Millisecond)
		if err := writeFileAtomic(filepath.Join(id.Dir(), CAFile), append(append([]byte{}, a...), b...), 0o644); err != nil {
			t.Fatal(err)
		}
		id.mu.Lock()
		id.checked = time.Time{}
		id.mu.Unlock()
	}
	if r := handshake(t, node.ServerConfig(), peer.ClientConfig()); r.cerr != nil || r.serr != nil || r.name != "peer" {
		t.Fatalf("with both CAs trusted: client %v, server %v, name %q", r.cerr, r.serr, r.name)
	}
}

func TestBadInput(t *testing.T) {
	ca := cluster(t, "c")
	if err := CreateCA(ca, "again"); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("a second CA over the first: %v", err)
	}
	if err := Issue(ca, t.TempDir(), Request{Name: "x", Kind: "root"}); err == nil {
		t.Fatal("issued a certificate of an unknown kind")
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), CAFile) {
		t.Fatalf("load of an empty directory: %v", err)
	}
	// A certificate of one CA with the bundle of another.
	id := issue(t, ca, "n", KindNode)
	other := cluster(t, "o")
	b, _ := os.ReadFile(filepath.Join(other, CAFile))
	if err := os.WriteFile(filepath.Join(id.Dir(), CAFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(id.Dir()); err == nil || !strings.Contains(err.Error(), "not valid for its CA bundle") {
		t.Fatalf("load with a foreign bundle: %v", err)
	}
	if got := Hosts("127.0.0.1:9000", "example.org", "127.0.0.1:9001", ""); strings.Join(got, ",") != "127.0.0.1,example.org" {
		t.Fatalf("Hosts = %v", got)
	}
}

// A revoked certificate fails the handshake on either side, from the
// moment the revocation list names it; the same identity's others pass.
func TestRevocation(t *testing.T) {
	ca := cluster(t, "cluster-r")
	server := issue(t, ca, "node", KindNode)
	peer := issue(t, ca, "peer", KindClient)
	other := issue(t, ca, "other", KindClient)
	revoked := map[string]bool{}
	var mu sync.Mutex
	server.SetRevoked(func(s string) bool { mu.Lock(); defer mu.Unlock(); return revoked[s] })
	if r := handshake(t, server.ServerConfig(), peer.ClientConfig()); r.cerr != nil || r.serr != nil {
		t.Fatalf("before the revocation: client %v, server %v", r.cerr, r.serr)
	}
	mu.Lock()
	revoked[Serial(peer.Certificate())] = true
	mu.Unlock()
	r := handshake(t, server.ServerConfig(), peer.ClientConfig())
	if r.serr == nil || !strings.Contains(r.serr.Error(), "revoked") {
		t.Fatalf("a revoked client: server %v, want a refusal naming the revocation", r.serr)
	}
	if r := handshake(t, server.ServerConfig(), other.ClientConfig()); r.cerr != nil || r.serr != nil {
		t.Fatalf("another client: client %v, server %v", r.cerr, r.serr)
	}
	// A client refuses a revoked server too.
	mu.Lock()
	clear(revoked)
	mu.Unlock()
	peer.SetRevoked(func(s string) bool { return s == Serial(server.Certificate()) })
	if r := handshake(t, server.ServerConfig(), peer.ClientConfig()); r.cerr == nil {
		t.Fatal("a client accepted a revoked server")
	}
}

// signLegacy issues, into a new directory, a certificate of kind as Sign did
// before certificates had a purpose: for server and client use whatever
// the kind.
func signLegacy(t *testing.T, ca, name string, kind Kind) *Identity {
	t.Helper()
	caCert, caKey, err := loadCA(ca)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := newSerial()
	if err != nil {
		t.Fatal(err)
	}
	var ou []string
	if kind != "" {
		ou = []string{string(kind)}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: ou, Organization: []string{"Cairn"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := os.ReadFile(filepath.Join(ca, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := (&Issued{Name: name, Cert: cert, key: key, bundle: bundle}).Write(dir); err != nil {
		t.Fatal(err)
	}
	id, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Sign gives each kind its purpose: nodes serve and connect, clients and
// admins only connect.
func TestUsages(t *testing.T) {
	ca := cluster(t, "cluster-u")
	for _, tc := range []struct {
		kind           Kind
		server, client bool
	}{
		{KindNode, true, true},
		{KindClient, false, true},
		{KindAdmin, false, true},
	} {
		c := issue(t, ca, "x-"+string(tc.kind), tc.kind).Certificate()
		if got := slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth); got != tc.server {
			t.Errorf("%s certificate: serverAuth %v, want %v", tc.kind, got, tc.server)
		}
		if got := slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth); got != tc.client {
			t.Errorf("%s certificate: clientAuth %v, want %v", tc.kind, got, tc.client)
		}
		if KindOf(c) != tc.kind {
			t.Errorf("KindOf = %q, want %q", KindOf(c), tc.kind)
		}
	}
	if Usages("root") != nil {
		t.Error("usages for an unknown kind")
	}
}

// fakeServer is what a server presenting cert saw of one connection: whether
// the client sent its certificate, and the application bytes it sent.
type fakeServer struct {
	handshakeErr error
	clientCert   bool
	bytes        int
}

// serveOnce accepts one connection on loopback with conf, reads what the
// client sends for a while, and reports it; the client side is dialled with
// client and writes a request once its handshake returns.
func serveOnce(t *testing.T, conf, client *tls.Config) (fakeServer, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan fakeServer, 1)
	go func() {
		var fs fakeServer
		defer func() { done <- fs }()
		c, err := ln.Accept()
		if err != nil {
			fs.handshakeErr = err
			return
		}
		defer c.Close()
		tc := tls.Server(c, conf)
		_ = tc.SetDeadline(time.Now().Add(2 * time.Second))
		if fs.handshakeErr = tc.Handshake(); fs.handshakeErr != nil {
			return
		}
		fs.clientCert = len(tc.ConnectionState().PeerCertificates) > 0
		n, _ := io.Copy(io.Discard, tc)
		fs.bytes = int(n)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, client)
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	cerr := tc.Handshake()
	if cerr == nil {
		_, cerr = tc.Write([]byte("GetMap"))
	}
	c.Close()
	return <-done, cerr
}

// A client side refuses, during the handshake and before sending anything,
// a server of this cluster's CA whose certificate is not a node's: issued
// for clients only, or (issued before certificates had a purpose) with
// serverAuth but of kind client, admin or none.
func TestClientRefusesNonNode(t *testing.T) {
	ca := cluster(t, "cluster-p")
	admin := issue(t, ca, "admin", KindAdmin)
	node := issue(t, ca, "meta-3", KindNode)
	// What a fake server presents: any certificate, and it asks for the
	// client's without checking it.
	fake := func(id *Identity) *tls.Config {
		return &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{*id.current().cert},
			ClientAuth:   tls.RequestClientCert,
		}
	}
	for _, tc := range []struct {
		name string
		id   *Identity
		want string
	}{
		{"a client certificate", issue(t, ca, "tenant", KindClient), "presented a client certificate (\"tenant\"), not a cluster node's"},
		{"an admin certificate", issue(t, ca, "ops", KindAdmin), "presented an admin certificate (\"ops\"), not a cluster node's"},
		{"an old client certificate with serverAuth", signLegacy(t, ca, "old-tenant", KindClient), "presented a client certificate (\"old-tenant\"), not a cluster node's"},
		{"an old admin certificate with serverAuth", signLegacy(t, ca, "old-ops", KindAdmin), "presented an admin certificate (\"old-ops\"), not a cluster node's"},
		{"a certificate of no kind with serverAuth", signLegacy(t, ca, "nobody", ""), "presented a certificate of no kind (\"nobody\"), not a cluster node's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, client := range []*tls.Config{admin.ClientConfig(), node.ClientConfig(), node.ClientConfigFor("meta-3")} {
				fs, cerr := serveOnce(t, fake(tc.id), client)
				var wrong *WrongPeerError
				if !errors.As(cerr, &wrong) || !strings.Contains(cerr.Error(), tc.want) {
					t.Fatalf("client: %v, want a *WrongPeerError saying %q", cerr, tc.want)
				}
				if fs.handshakeErr == nil || fs.clientCert || fs.bytes > 0 {
					t.Fatalf("the fake server completed its handshake (%v), got the client's certificate (%v) or %d bytes", fs.handshakeErr, fs.clientCert, fs.bytes)
				}
			}
		})
	}
	// The same servers' identities still connect as clients.
	if r := handshake(t, node.ServerConfig(), signLegacy(t, ca, "old-tenant-2", KindClient).ClientConfig()); r.cerr != nil || r.serr != nil {
		t.Fatalf("an old client certificate as a client: client %v, server %v", r.cerr, r.serr)
	}
	// A node certificate without serverAuth (not one Sign issues) does not
	// serve either.
	caCert, caKey, err := loadCA(ca)
	if err != nil {
		t.Fatal(err)
	}
	noServe := signLegacy(t, ca, "meta-4", KindNode)
	tmpl := *noServe.Certificate()
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, caCert, noServe.current().leaf.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert := *noServe.current().cert
	cert.Certificate = [][]byte{der}
	fs, cerr := serveOnce(t, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}, admin.ClientConfig())
	if cerr == nil || !strings.Contains(cerr.Error(), "not issued for server use") || fs.bytes > 0 {
		t.Fatalf("a node certificate without serverAuth: client %v, %d bytes sent", cerr, fs.bytes)
	}
}

// ClientConfigFor and NodeClientConfig also refuse a node of another name
// than the one the dialer expects; without a name they check the kind only.
func TestNodeName(t *testing.T) {
	ca := cluster(t, "cluster-n")
	meta3 := issue(t, ca, "meta-3", KindNode)
	data5 := issue(t, ca, "data-5", KindNode)
	if r := handshake(t, meta3.ServerConfig(), data5.ClientConfigFor("meta-3")); r.cerr != nil || r.serr != nil {
		t.Fatalf("the right node: client %v, server %v", r.cerr, r.serr)
	}
	if r := handshake(t, meta3.ServerConfig(), data5.ClientConfigFor("")); r.cerr != nil || r.serr != nil {
		t.Fatalf("no name: client %v, server %v", r.cerr, r.serr)
	}
	fs, cerr := serveOnce(t, meta3.ServerConfig(), data5.ClientConfigFor("meta-2"))
	var wrong *WrongPeerError
	if !errors.As(cerr, &wrong) || wrong.Name != "meta-3" || !strings.Contains(cerr.Error(), `node "meta-3", but the cluster map records "meta-2"`) {
		t.Fatalf("another node: %v", cerr)
	}
	if fs.bytes > 0 || fs.clientCert {
		t.Fatalf("another node got the client's certificate (%v) or %d bytes", fs.clientCert, fs.bytes)
	}

	// NodeClientConfig asks at every handshake.
	var mu sync.Mutex
	names := []string{"meta-2"}
	conf := data5.NodeClientConfig(func() []string { mu.Lock(); defer mu.Unlock(); return names })
	if r := handshake(t, meta3.ServerConfig(), conf); r.cerr == nil {
		t.Fatal("accepted meta-3 for meta-2")
	}
	for _, n := range [][]string{{"meta-3"}, {"meta-2", "meta-3"}, nil} {
		mu.Lock()
		names = n
		mu.Unlock()
		if r := handshake(t, meta3.ServerConfig(), conf); r.cerr != nil || r.serr != nil {
			t.Fatalf("names %v: client %v, server %v", n, r.cerr, r.serr)
		}
	}
}
