package dataproto

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/pki"
)

// ConnOptions.TLSFor picks the client configuration by the address dialled:
// a data node checks that a peer is the node the map names there, and
// refuses one of another name before a frame is sent.
func TestTLSForAddress(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca")
	if err := pki.CreateCA(ca, "c"); err != nil {
		t.Fatal(err)
	}
	load := func(name string) *pki.Identity {
		dir := filepath.Join(t.TempDir(), name)
		if err := pki.Issue(ca, dir, pki.Request{Name: name, Kind: pki.KindNode}); err != nil {
			t.Fatal(err)
		}
		id, err := pki.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	server, dialer := load("data-5"), load("data-4")
	var handled atomic.Int32
	_, addr := serve(t, ServerOptions{TLS: server.ServerConfig()}, func(in *Inbound) { handled.Add(1); echo(in) })
	names := map[string]string{addr: "data-5"}
	opts := ConnOptions{TLS: dialer.ClientConfig(), DialTimeout: 3 * time.Second,
		TLSFor: func(a string) *tls.Config { return dialer.ClientConfigFor(names[a]) }}
	ctx := context.Background()
	c := dial(t, addr, opts)
	if _, _, err := c.Do(ctx, &Request{Header: Header{Op: OpPing}}); err != nil {
		t.Fatalf("the node the map names: %v", err)
	}
	names[addr] = "data-6"
	_, err := Dial(ctx, addr, opts)
	var wrong *pki.WrongPeerError
	if !errors.As(err, &wrong) || wrong.Name != "data-5" {
		t.Fatalf("another node at the address: %v, want a *pki.WrongPeerError naming data-5", err)
	}
	if n := handled.Load(); n != 1 {
		t.Fatalf("the server handled %d requests, want only the first connection's", n)
	}
}
