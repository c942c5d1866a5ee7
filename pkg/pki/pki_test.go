package pki

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
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
