package dataproto

import (
	"bytes"
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/pki"
)

// identity issues a node identity from a new CA named ca.
func identity(t *testing.T, ca string) *pki.Identity {
	t.Helper()
	caDir := filepath.Join(t.TempDir(), ca)
	if err := pki.CreateCA(caDir, ca); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "id")
	if err := pki.Issue(caDir, dir, pki.Request{Name: "n", Kind: pki.KindNode}); err != nil {
		t.Fatal(err)
	}
	id, err := pki.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Both modes serve a client of the cluster's CA (echoes and a section,
// which CRC mode still sends with sendfile and secure mode copies through
// TLS), and refuse a plain client and one of another CA.
func TestAuthenticatedConnections(t *testing.T) {
	id, other := identity(t, "cluster"), identity(t, "other")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	f := openFile(t, data)
	for _, encrypt := range []bool{false, true} {
		name := map[bool]string{false: "crc", true: "secure"}[encrypt]
		t.Run(name, func(t *testing.T) {
			srv, addr := serve(t, ServerOptions{TLS: id.ServerConfig(), Encrypt: encrypt}, func(in *Inbound) {
				if in.Header.Op == OpRead {
					in.RespondSection(Header{}, &fileSection{f: f, off: in.Header.Offset, n: int64(in.Header.Arg)})
					return
				}
				echo(in)
			})
			c := dial(t, addr, ConnOptions{TLS: id.ClientConfig()})
			ctx := context.Background()
			_, p, err := c.Do(ctx, &Request{Header: Header{Op: OpAppend}, Payload: data[:64<<10]})
			if err != nil || !bytes.Equal(p, data[:64<<10]) {
				t.Fatalf("echo: %v", err)
			}
			_, p, err = c.Do(ctx, &Request{Header: Header{Op: OpRead, Offset: 5, Arg: 1<<20 - 5}})
			if err != nil || !bytes.Equal(p, data[5:]) {
				t.Fatalf("section read: %v", err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for st := srv.Stats(); (encrypt && st.CopiedBytes == 0) || (!encrypt && st.SendfileBytes == 0); st = srv.Stats() {
				if time.Now().After(deadline) {
					t.Fatalf("stats %+v: want the section %s", st, map[bool]string{false: "sent with sendfile", true: "copied"}[encrypt])
				}
				time.Sleep(10 * time.Millisecond)
			}

			for _, bad := range []struct {
				name string
				conf *tls.Config
				want string
			}{
				{"another CA", other.ClientConfig(), "TLS handshake"},
				{"no certificate", &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}, "TLS handshake"},
			} {
				_, err := Dial(ctx, addr, ConnOptions{TLS: bad.conf, DialTimeout: 3 * time.Second})
				if err == nil || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("client with %s: %v, want an error with %q", bad.name, err, bad.want)
				}
			}
			// A plain client's frames never reach the handler.
			plain, err := Dial(ctx, addr, ConnOptions{DialTimeout: 3 * time.Second, ReadTimeout: 2 * time.Second})
			if err == nil {
				_, _, err = plain.Do(ctx, &Request{Header: Header{Op: OpPing}})
				plain.Close()
			}
			if err == nil {
				t.Error("a plain client was answered")
			}
		})
	}
}
