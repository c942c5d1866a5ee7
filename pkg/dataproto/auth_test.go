package dataproto

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/pkg/handshake"
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

// Connections that never start their handshake do not count toward
// MaxConns: with 2 places and 20 idle connections from other addresses
// (two sources, each past its bound of 8), an authenticated client is
// still served at once; the idle ones past a source's bound are closed
// at once, and the others after the handshake timeout.
func TestIdleConnectionsDoNotTakeAuthenticatedPlaces(t *testing.T) {
	id := identity(t, "cluster")
	srv, addr := serve(t, ServerOptions{TLS: id.ServerConfig(), MaxConns: 2,
		Handshake: handshake.Limits{Timeout: 2 * time.Second, MaxPerSource: 8}}, echo)
	var idle []net.Conn
	for i := range 20 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%2))}}
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Skipf("cannot dial from a second loopback address: %v", err)
		}
		defer nc.Close()
		idle = append(idle, nc)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st := srv.Stats().Handshakes; st.Pending+int(st.RefusedSource) < 20; st = srv.Stats().Handshakes {
		if time.Now().After(deadline) {
			t.Fatalf("idle connections not all accepted: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := srv.Stats().Handshakes; st.Pending != 16 || st.RefusedSource != 4 {
		t.Fatalf("handshakes %+v, want 16 pending and 4 refused", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 2 {
		c, err := Dial(ctx, addr, ConnOptions{TLS: id.ClientConfig(), DialTimeout: time.Second})
		if err != nil {
			t.Fatalf("authenticated client %d during the idle connections: %v", i, err)
		}
		defer c.Close()
		if _, p, err := c.Do(ctx, &Request{Header: Header{Op: OpAppend}, Payload: []byte("x")}); err != nil || string(p) != "x" {
			t.Fatalf("authenticated client %d: %q, %v", i, p, err)
		}
	}
	if st := srv.Stats(); st.Conns != 2 || st.Handshakes.Completed != 2 {
		t.Fatalf("stats %+v, want 2 connections served", st)
	}
	// The idle connections end: refused ones at once, the others at the
	// handshake timeout.
	for i, nc := range idle {
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("idle connection %d: %v, want it closed by the server", i, err)
		}
	}
	if st := srv.Stats().Handshakes; st.TimedOut != 16 || st.Pending != 0 {
		t.Fatalf("handshakes %+v, want 16 timed out", st)
	}
}
